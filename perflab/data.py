"""Datasets: the IDX format, MNIST and Fashion-MNIST (verified, offline first), synthetic.

Images are returned column-major as the seeds think of them: X is D x N (one image per
column, F-contiguous so a mini-batch X[:, i:j] is one contiguous block), y holds N integer
labels.
"""
from __future__ import annotations

import gzip
import hashlib
import os
import tempfile
import time
import urllib.error
import urllib.request
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

PROJECT_ROOT = Path(__file__).resolve().parent.parent
DATA_ROOT = Path(os.environ.get("PERFLAB_DATA", PROJECT_ROOT / "data"))

# IDX type codes (third byte of the magic number) -> big-endian NumPy dtype.
IDX_DTYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}
IDX_CODES = {np.dtype(v).newbyteorder("="): k for k, v in IDX_DTYPES.items()}

SPLITS = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}

# Canonical mirrors; `perflab data fetch --mirror URL` replaces them (tests use 127.0.0.1).
MIRRORS = {
    "mnist": [
        "https://ossci-datasets.s3.amazonaws.com/mnist/",
        "https://storage.googleapis.com/cvdf-datasets/mnist/",
    ],
    "fashion-mnist": [
        "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",
    ],
}

# What a good file hashes to, per dataset: (algorithm, over which bytes, digests).
# MNIST: SHA-256 of the *decompressed* files (data/mnist/SHA256SUMS), so the one manifest
# checks any mirror's gzip. Fashion-MNIST publishes MD5 of its gzip files (one mirror).
CHECKSUMS = {
    "mnist": ("sha256", "decompressed", {
        "train-images-idx3-ubyte": "ba891046e6505d7aadcbbe25680a0738ad16aec93bde7f9b65e87a2fc25776db",
        "train-labels-idx1-ubyte": "65a50cbbf4e906d70832878ad85ccda5333a97f0f4c3dd2ef09a8a9eef7101c5",
        "t10k-images-idx3-ubyte": "0fa7898d509279e482958e8ce81c8e77db3f2f8254e26661ceb7762c4d494ce7",
        "t10k-labels-idx1-ubyte": "ff7bcfd416de33731a308c3f266cc351222c34898ecbeaf847f06e48f7ec33f2",
    }),
    "fashion-mnist": ("md5", "gzip", {
        "train-images-idx3-ubyte": "8d4fb7e6c68d591d4c3dfef9ec88bf0d",
        "train-labels-idx1-ubyte": "25c81989df183df01b3e8a0aad5dffbe",
        "t10k-images-idx3-ubyte": "bef4ecab320f06d8554ea6380940ec79",
        "t10k-labels-idx1-ubyte": "bb300cfdad3c16e7a12a480ee83cd310",
    }),
}
DATASETS = ("mnist", "fashion-mnist", "synthetic")


class DataError(ValueError):
    """A data file is missing, corrupt or inconsistent; the message names the file."""


# ---------------------------------------------------------------------------- IDX format
def parse_idx(raw: bytes, name: str = "<bytes>") -> np.ndarray:
    """Parse an IDX buffer: magic (0, 0, type code, ndim), ndim big-endian int32 sizes, data."""
    if len(raw) < 4:
        raise DataError(f"{name}: truncated IDX file ({len(raw)} bytes, the header needs 4)")
    zero0, zero1, code, ndim = raw[:4]
    if zero0 or zero1 or code not in IDX_DTYPES or ndim == 0:
        magic = int.from_bytes(raw[:4], "big")
        raise DataError(f"{name}: unknown IDX magic number {magic} (0x{magic:08x}); expected "
                        "0x000008NN (ubyte) .. 0x00000eNN, e.g. 2051 for images, 2049 for labels")
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise DataError(f"{name}: truncated IDX header ({len(raw)} bytes, needs {header})")
    shape = tuple(int.from_bytes(raw[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim))
    dtype = np.dtype(IDX_DTYPES[code])
    expected = header + int(np.prod(shape)) * dtype.itemsize
    if len(raw) != expected:
        what = "truncated" if len(raw) < expected else "has trailing bytes"
        raise DataError(f"{name}: IDX file {what}: dimensions {shape} need {expected} bytes, "
                        f"found {len(raw)}")
    return np.frombuffer(raw, dtype=dtype, offset=header).reshape(shape).astype(dtype.newbyteorder("="))


def read_bytes(path: Path) -> bytes:
    """Whole file, gunzipped when it is gzip (sniffed, not guessed from the name)."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise DataError(f"{path}: no such file") from None
    if raw[:2] == b"\x1f\x8b":
        try:
            return gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as exc:
            raise DataError(f"{path}: corrupt gzip data ({exc})") from None
    return raw


def read_idx(path) -> np.ndarray:
    return parse_idx(read_bytes(path), str(path))


def write_idx(path, array: np.ndarray) -> None:
    """Write an IDX file (gzip when the name ends in .gz), atomically."""
    array = np.asarray(array)
    code = IDX_CODES.get(array.dtype.newbyteorder("="))
    if code is None:
        raise DataError(f"{path}: dtype {array.dtype} has no IDX code "
                        f"(allowed: {sorted(str(np.dtype(v)) for v in IDX_DTYPES.values())})")
    header = bytes([0, 0, code, array.ndim]) + b"".join(int(n).to_bytes(4, "big") for n in array.shape)
    raw = header + array.astype(np.dtype(IDX_DTYPES[code])).tobytes()
    atomic_write(Path(path), gzip.compress(raw, mtime=0) if str(path).endswith(".gz") else raw)


def atomic_write(path: Path, payload: bytes) -> None:
    """Write via a temporary file and rename, so a crash never leaves half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


# ---------------------------------------------------------------------------- datasets
@dataclass
class Split:
    """X: D x N float array (F-contiguous), y: N int labels."""
    X: np.ndarray
    y: np.ndarray

    @property
    def n(self) -> int:
        return self.X.shape[1]


def one_hot(y, num_classes: int, dtype, xp=np):
    """C x N one-hot matrix of the labels (the seeds' Y)."""
    out = xp.zeros((num_classes, y.shape[0]), dtype=dtype)
    out[y, xp.arange(y.shape[0])] = 1
    return out


def load_idx_pair(folder: Path, split: str) -> tuple[np.ndarray, np.ndarray]:
    arrays = []
    for stem in SPLITS[split]:
        path = folder / f"{stem}.gz"
        if not path.exists() and (folder / stem).exists():
            path = folder / stem
        if not path.exists():
            raise DataError(f"{folder / stem}[.gz]: missing; run `perflab data fetch {folder.name}` "
                            f"or set PERFLAB_DATA to a folder that holds it")
        stored = path.read_bytes()
        raw = read_bytes(path)
        problem = checksum_problem(folder.name, stem, stored, raw)
        if problem:
            raise DataError(f"{path}: {problem}; the file is corrupt, delete it and fetch again")
        arrays.append(parse_idx(raw, str(path)))
    images, labels = arrays
    if images.ndim != 3 or labels.ndim != 1:
        raise DataError(f"{folder}: {split} images must be N x rows x cols and labels N, "
                        f"got {images.shape} and {labels.shape}")
    if images.shape[0] != labels.shape[0]:
        raise DataError(f"{folder}: {split} has {images.shape[0]} images but {labels.shape[0]} labels")
    return images, labels


def load_idx_dataset(name: str, split: str, n: int | None, dtype, root: Path | None = None) -> Split:
    """First n samples of an IDX dataset folder, pixels scaled to [0, 1] in dtype."""
    folder = Path(root or DATA_ROOT) / name
    images, labels = load_idx_pair(folder, split)
    if n is not None and n > images.shape[0]:
        raise DataError(f"{folder}: asked for {n} {split} samples, the set has {images.shape[0]}")
    images, labels = images[:n], labels[:n]
    X = (images.reshape(images.shape[0], -1).astype(dtype) / dtype(255)).T  # D x N, F-order
    return Split(np.asfortranarray(X), labels.astype(np.int64))


def synthetic(n: int, d: int, c: int, dtype, seed: int) -> Split:
    """Learnable data of any size: each class is a fixed random prototype in [0, 1]^D plus
    noise, so a network can learn it (not pure noise); deterministic from the seed."""
    rng = np.random.default_rng(seed)
    prototypes = rng.random((d, c))
    y = rng.integers(0, c, size=n)
    X = np.clip(prototypes[:, y] + 0.35 * rng.standard_normal((d, n)), 0.0, 1.0)
    return Split(np.asfortranarray(X.astype(dtype)), y.astype(np.int64))


def columns(split: Split, start: int, stop: int) -> Split:
    return Split(np.asfortranarray(split.X[:, start:stop]), split.y[start:stop])


def load(cfg) -> tuple[Split, Split | None, Split | None]:
    """(train, test, validation) for a validated Config: the first N training samples train, the
    next validation_size are held out for validation; the test set is separate."""
    dtype = np.dtype(cfg.storage_dtype).type
    n, v = cfg.train_size, cfg.validation_size
    if cfg.dataset == "synthetic":
        whole = synthetic(n + v + cfg.test_size, cfg.input_size, cfg.num_classes, dtype, cfg.seed)
        test = columns(whole, n + v, n + v + cfg.test_size) if cfg.test_size else None
    else:
        whole = load_idx_dataset(cfg.dataset, "train", n + v, dtype)
        test = load_idx_dataset(cfg.dataset, "test", cfg.test_size, dtype) if cfg.test_size else None
    train = columns(whole, 0, n) if v or cfg.dataset == "synthetic" else whole
    return train, test, (columns(whole, n, n + v) if v else None)


# ---------------------------------------------------------------------------- download
def fetch(name: str, dest: Path | None = None, mirrors: list[str] | None = None,
          timeout: float = 10.0, retries: int = 2, log=print) -> Path:
    """Download the four files of `name` into dest/name, verified, atomically written.

    Each file is tried on each mirror, `retries` times with a short back-off; a refused or
    unreachable address fails within `timeout` seconds, not after a long hang."""
    if name not in MIRRORS:
        raise DataError(f"unknown dataset {name!r} to fetch; allowed: {sorted(MIRRORS)}")
    folder = Path(dest or DATA_ROOT) / name
    for stem in SPLITS["train"] + SPLITS["test"]:
        target = folder / f"{stem}.gz"
        if target.exists():
            log(f"{target}: present")
            continue
        atomic_write(target, download_verified(name, stem, mirrors or MIRRORS[name], timeout, retries))
        log(f"{target}: fetched and verified")
    return folder


def download_verified(name: str, stem: str, mirrors: list[str], timeout: float, retries: int) -> bytes:
    errors = []
    for mirror in mirrors:
        url = mirror.rstrip("/") + f"/{stem}.gz"
        for attempt in range(retries):
            try:
                with urllib.request.urlopen(url, timeout=timeout) as response:
                    payload = response.read()
            except (urllib.error.URLError, OSError) as exc:
                errors.append(f"{url}: {getattr(exc, 'reason', exc)}")
                if attempt + 1 < retries:
                    time.sleep(0.2 * (attempt + 1))
                continue
            try:
                raw = gzip.decompress(payload)
            except (OSError, EOFError, zlib.error):
                problem = "not a gzip file"
            else:
                problem = checksum_problem(name, stem, payload, raw)
            if problem is None:
                parse_idx(raw, url)  # a file no manifest covers must still be valid IDX
                return payload
            errors.append(f"{url}: {problem}")
            break  # a wrong file will not get better by asking the same mirror again
    raise DataError(f"could not download {stem}.gz; is there a network? Tried:\n  " + "\n  ".join(errors)
                    + f"\nCopy the files into {DATA_ROOT / name} by hand, or pass --mirror URL.")


def checksum_problem(name: str, stem: str, stored: bytes, raw: bytes) -> str | None:
    """None when the file matches CHECKSUMS (or the dataset has none), else what is wrong."""
    if name not in CHECKSUMS:
        return None
    algorithm, over, digests = CHECKSUMS[name]
    digest = hashlib.new(algorithm, raw if over == "decompressed" else stored).hexdigest()
    if digest != digests[stem]:
        return f"{algorithm} of the {over} file is {digest}, the manifest says {digests[stem]}"
    return None
