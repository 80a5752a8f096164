"""CI executes every notebook end to end with small parameters, on local MPI engines."""
import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.mpi


def test_roofline_notebook_runs_and_writes_figures(tmp_path):
    env = {**os.environ, "PERFLAB_RESULTS": str(tmp_path)}
    small = ["-p", "hidden", "[32, 64]", "-p", "per_rank_batch", "100", "-p", "batch_sweep", "[100, 400]",
             "-p", "N", "800", "-p", "engines", "2"]
    proc = subprocess.run([sys.executable, "-m", "perflab", "notebook", "roofline", *small, "--json"],
                          capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    executed = json.loads((tmp_path / "notebooks" / "roofline.ipynb").read_text())
    errors = [o for c in executed["cells"] for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors
    figures = sorted(p.name for p in (tmp_path / "figures").iterdir())
    assert any(f.startswith("roofline_serial") and f.endswith(".pdf") for f in figures)
    assert any(f.startswith("predicted_vs_measured") and f.endswith(".png") for f in figures)
    for f in (tmp_path / "figures").glob("*.png"):
        assert f.stat().st_size > 10_000, f"{f.name} looks empty"
        assert f.with_suffix(".txt").read_text().strip(), f"{f.name} has no caption"
    report = subprocess.run([sys.executable, "-m", "perflab", "report", "--json"], capture_output=True, text=True,
                            timeout=120, env=env)
    assert report.returncode == 0, report.stderr[-2000:]
    assert (tmp_path / "report.pdf").stat().st_size > 20_000


SMALL = {
    "correctness": ["-p", "N", "300", "-p", "hidden", "12", "-p", "B", "31"],
    "convergence": ["-p", "N", "1000", "-p", "test_size", "200", "-p", "epochs", "2", "-p", "rates", "[0.1, 1.0]",
                    "-p", "hidden_sizes", "[16, 32]"],
    "scaling": [],
    "kernels": [],
}


@pytest.mark.parametrize("name", sorted(SMALL))
def test_other_notebooks_run_and_write_figures(tmp_path, name):
    """Each notebook end to end with small parameters; the result-reading ones get the committed
    GPU result files, as a user's clone has them."""
    import shutil

    from perflab.results import RESULTS_ROOT
    for folder in RESULTS_ROOT.glob("nvidia-*"):
        shutil.copytree(folder, tmp_path / folder.name)
    env = {**os.environ, "PERFLAB_RESULTS": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-m", "perflab", "notebook", name, *SMALL[name], "--json"],
                          capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    pngs = list((tmp_path / "figures").glob("*.png"))
    assert pngs and all(p.stat().st_size > 10_000 for p in pngs)
    assert all(p.with_suffix(".pdf").exists() and p.with_suffix(".txt").read_text().strip() for p in pngs)
