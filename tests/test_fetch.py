"""`perflab data fetch` against a local HTTP server on 127.0.0.1 only (never an outside host)."""
import functools
import gzip
import http.server
import socket
import threading
import time

import pytest

from perflab import data
from perflab.cli import main

MNIST = data.DATA_ROOT / "mnist"


@pytest.fixture
def mirror(tmp_path):
    """Serve a folder over HTTP on 127.0.0.1; yields (base_url, folder)."""
    root = tmp_path / "served"
    root.mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *a: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/", root
    server.shutdown()


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_fetch_from_local_mirror(tmp_path, mirror, capsys):
    url, served = mirror
    for f in MNIST.glob("*.gz"):
        # re-gzip with another header: the manifest checks decompressed bytes, so it still verifies
        (served / f.name).write_bytes(gzip.compress(gzip.decompress(f.read_bytes()), compresslevel=1, mtime=12345))
    dest = tmp_path / "data"
    assert main(["data", "fetch", "mnist", "--mirror", url, "--dest", str(dest)]) == 0
    fetched = sorted(p.name for p in (dest / "mnist").iterdir())
    assert fetched == sorted(p.name for p in MNIST.glob("*.gz"))
    test = data.load_idx_dataset("mnist", "test", 10, float, root=dest)
    assert list(test.y) == [7, 2, 1, 0, 4, 1, 4, 9, 5, 9]


def test_fetch_refuses_wrong_file_and_leaves_nothing(tmp_path, mirror):
    url, served = mirror
    for f in MNIST.glob("*.gz"):
        raw = bytearray(gzip.decompress(f.read_bytes()))
        raw[-1] ^= 0xFF
        (served / f.name).write_bytes(gzip.compress(bytes(raw), compresslevel=1))  # level 9 took most of the test
    dest = tmp_path / "data"
    with pytest.raises(data.DataError, match="sha256 of the decompressed file"):
        data.fetch("mnist", dest=dest, mirrors=[url], log=lambda m: None)
    assert not (dest / "mnist").exists() or not any((dest / "mnist").iterdir())


def test_fetch_without_network_fails_fast(tmp_path, capsys):
    start = time.monotonic()
    with pytest.raises(SystemExit) as exit_info:
        main(["data", "fetch", "mnist", "--mirror", f"http://127.0.0.1:{closed_port()}/",
              "--dest", str(tmp_path), "--timeout", "2"])
    assert exit_info.value.code == 2
    assert time.monotonic() - start < 5
    err = capsys.readouterr().err
    assert "could not download train-images-idx3-ubyte.gz; is there a network?" in err
    assert "refused" in err.lower()


def test_fetch_unknown_dataset():
    with pytest.raises(data.DataError, match="unknown dataset 'cifar'"):
        data.fetch("cifar", mirrors=["http://127.0.0.1:9/"])
