import gzip

import numpy as np
import pytest

from perflab import data
from perflab.config import Config

MNIST = data.DATA_ROOT / "mnist"


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.int16, np.int32, np.float32, np.float64])
@pytest.mark.parametrize("suffix", ["", ".gz"])
def test_idx_round_trip(tmp_path, rng, dtype, suffix):
    array = (rng.standard_normal((3, 5, 7)) * 50).astype(dtype)
    path = tmp_path / f"a.idx{suffix}"
    data.write_idx(path, array)
    back = data.read_idx(path)
    assert back.dtype == np.dtype(dtype) and back.shape == (3, 5, 7)
    np.testing.assert_array_equal(back, array)


def test_idx_bad_magic(tmp_path):
    path = tmp_path / "bad.idx"
    path.write_bytes(b"\x01\x02\x08\x01" + (3).to_bytes(4, "big") + b"abc")
    with pytest.raises(data.DataError, match=r"bad\.idx: unknown IDX magic"):
        data.read_idx(path)


def test_idx_truncated(tmp_path):
    path = tmp_path / "short.idx"
    data.write_idx(path, np.arange(12, dtype=np.uint8).reshape(3, 4))
    path.write_bytes(path.read_bytes()[:-2])
    with pytest.raises(data.DataError, match=r"short\.idx: IDX file truncated: dimensions \(3, 4\)"):
        data.read_idx(path)


def test_idx_trailing_bytes_and_short_header(tmp_path):
    path = tmp_path / "long.idx"
    data.write_idx(path, np.arange(4, dtype=np.uint8))
    path.write_bytes(path.read_bytes() + b"x")
    with pytest.raises(data.DataError, match="trailing bytes"):
        data.read_idx(path)
    path.write_bytes(b"\x00\x00")
    with pytest.raises(data.DataError, match="truncated IDX file"):
        data.read_idx(path)


def test_corrupt_gzip(tmp_path):
    path = tmp_path / "x.idx.gz"
    path.write_bytes(gzip.compress(b"\x00\x00\x08\x01" + bytes(8))[:-6])
    with pytest.raises(data.DataError, match=r"x\.idx\.gz: corrupt gzip"):
        data.read_idx(path)


def test_mnist_manifest_matches_committed_sums():
    lines = [l.split() for l in (MNIST / "SHA256SUMS").read_text().splitlines() if l and not l.startswith("#")]
    assert {name: digest for digest, name in lines} == data.CHECKSUMS["mnist"][2]


def test_mnist_loads_verified():
    cfg = Config(train_size=60000, test_size=10000, dtype="float32")
    train, test, _ = data.load(cfg)
    assert train.X.shape == (784, 60000) and test.X.shape == (784, 10000)
    assert train.X.flags.f_contiguous and train.X.dtype == np.float32
    assert 0.0 <= train.X.min() and train.X.max() <= 1.0
    assert list(train.y[:10]) == [5, 0, 4, 1, 9, 2, 1, 3, 1, 4]
    assert list(test.y[:10]) == [7, 2, 1, 0, 4, 1, 4, 9, 5, 9]
    assert list(np.bincount(train.y)) == [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949]
    assert abs(train.X.mean() - 33.318 / 255) < 1e-4


def test_corrupted_mnist_is_refused(tmp_path):
    folder = tmp_path / "mnist"
    folder.mkdir()
    for f in MNIST.glob("*.gz"):
        (folder / f.name).write_bytes(f.read_bytes())
    raw = bytearray(gzip.decompress((folder / "t10k-labels-idx1-ubyte.gz").read_bytes()))
    raw[100] ^= 1  # one label changed: still valid IDX, wrong checksum
    (folder / "t10k-labels-idx1-ubyte.gz").write_bytes(gzip.compress(bytes(raw)))
    with pytest.raises(data.DataError, match="t10k-labels-idx1-ubyte.gz: sha256 of the decompressed file"):
        data.load_idx_dataset("mnist", "test", None, np.float32, root=tmp_path)


def test_missing_file_names_fetch(tmp_path):
    (tmp_path / "mnist").mkdir()
    with pytest.raises(data.DataError, match="perflab data fetch mnist"):
        data.load_idx_dataset("mnist", "train", 10, np.float32, root=tmp_path)


def test_image_label_count_mismatch(tmp_path):
    folder = tmp_path / "digits"
    data.write_idx(folder / "train-images-idx3-ubyte.gz", np.zeros((5, 2, 2), np.uint8))
    data.write_idx(folder / "train-labels-idx1-ubyte.gz", np.zeros(4, np.uint8))
    with pytest.raises(data.DataError, match="train has 5 images but 4 labels"):
        data.load_idx_dataset("digits", "train", None, np.float32, root=tmp_path)


def test_synthetic_is_deterministic_and_learnable():
    a = data.synthetic(500, 20, 4, np.float64, seed=3)
    b = data.synthetic(500, 20, 4, np.float64, seed=3)
    np.testing.assert_array_equal(a.X, b.X)
    # class means differ far more than noise within a class: nearest-mean classifies well
    means = np.stack([a.X[:, a.y == k].mean(axis=1) for k in range(4)], axis=1)
    nearest = ((a.X[:, :, None] - means[:, None, :]) ** 2).sum(axis=0).argmin(axis=1)
    assert (nearest == a.y).mean() > 0.9


def test_one_hot():
    y = np.array([2, 0, 1])
    Y = data.one_hot(y, 3, np.float64)
    np.testing.assert_array_equal(Y, np.eye(3)[:, [2, 0, 1]])


def test_validation_split_is_held_out_after_the_training_samples():
    cfg = Config(train_size=1000, batch_size=100, validation_size=300, test_size=50, dtype="float32")
    train, test, validation = data.load(cfg)
    whole = data.load_idx_dataset("mnist", "train", 1300, np.float32)
    assert train.n == 1000 and validation.n == 300 and test.n == 50
    np.testing.assert_array_equal(validation.y, whole.y[1000:1300])
    np.testing.assert_array_equal(train.X, whole.X[:, :1000])
    synth = data.load(Config(dataset="synthetic", input_size=8, hidden_sizes=(4,), num_classes=3, train_size=40,
                             batch_size=10, validation_size=10, test_size=5))
    assert [s.n for s in synth] == [40, 5, 10]
