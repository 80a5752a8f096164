"""The committed tree travels whole to the GPU machines, which take at most 64 MiB of it: derived files
(figure PDFs, a report's own figures) are ignored, and the record (data, PNGs, reports) must stay under that."""
import subprocess

from perflab.data import PROJECT_ROOT

DEVICE_TREE_LIMIT = 64 * 2 ** 20  # bytes: the device tool's limit on the working tree it sends


def test_the_tracked_tree_fits_what_the_gpu_machines_take():
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=PROJECT_ROOT, capture_output=True, text=True, check=True)
    files = [PROJECT_ROOT / name for name in listed.stdout.split("\0") if name]
    total = sum(f.stat().st_size for f in files if f.is_file())
    biggest = sorted(files, key=lambda f: f.stat().st_size if f.is_file() else 0)[-5:]
    assert total < DEVICE_TREE_LIMIT, (f"tracked files take {total / 2 ** 20:.1f} MiB, over the 64 MiB the GPU machines "
                                       f"take; the largest: {[str(f.relative_to(PROJECT_ROOT)) for f in biggest]}")
