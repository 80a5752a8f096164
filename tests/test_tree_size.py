"""The committed tree travels whole to the GPU machines, which take at most 64 MiB of it: derived files
(figure PDFs, a report's own figures) are ignored, and the record (data, PNGs, reports) must stay under that."""
import json
import subprocess

from perflab.data import PROJECT_ROOT

DEVICE_TREE_LIMIT = 64 * 2 ** 20  # bytes: the device tool's limit on the working tree it sends
NOTEBOOK_WHEELS = 11 * 2 ** 20  # bytes: jupyter, papermill, ipyparallel and reportlab as wheels (10.2 MiB in session 44)


def tracked() -> list:
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=PROJECT_ROOT, capture_output=True, text=True, check=True)
    return [PROJECT_ROOT / name for name in listed.stdout.split("\0") if name]


def test_the_tracked_tree_and_the_notebook_wheels_fit_what_the_gpu_machines_take():
    files = tracked()
    total = sum(f.stat().st_size for f in files if f.is_file())
    biggest = sorted(files, key=lambda f: f.stat().st_size if f.is_file() else 0)[-5:]
    assert total + NOTEBOOK_WHEELS < DEVICE_TREE_LIMIT, (
        f"tracked files take {total / 2 ** 20:.1f} MiB, with the notebooks' wheels over the 64 MiB the GPU machines take; "
        f"the largest: {[str(f.relative_to(PROJECT_ROOT)) for f in biggest]}")


def test_committed_notebooks_carry_their_figures_as_files_not_embedded_images():
    """An executed notebook embeds each figure (about 2 MB a main job); under results/ it is committed slimmed by
    scripts/slim_notebooks.py, its figures saved beside it."""
    notebooks = [f for f in tracked() if f.suffix == ".ipynb" and f.relative_to(PROJECT_ROOT).parts[0] == "results"]
    embedded = [str(f.relative_to(PROJECT_ROOT)) for f in notebooks
                if any(k.startswith("image/") for cell in json.loads(f.read_text())["cells"]
                       for out in cell.get("outputs", []) for k in out.get("data", {}))]
    assert len(notebooks) >= 5
    assert not embedded, f"run `python scripts/slim_notebooks.py {' '.join(embedded)}` before committing them"
