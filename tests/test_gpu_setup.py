"""`make roofline` on a machine with NVIDIA GPUs installs the CuPy its driver takes (python -m perflab.backend),
and where it cannot, the terminal and the main job's first cell say why and what fixes it. Tried without a
GPU: a fake nvidia-smi on PATH."""
import os
import subprocess
import sys

import pytest

from perflab import backend
from perflab.data import PROJECT_ROOT
from perflab.workbook import plan

HEADER = ("+-----------------------------------------------------------------------------------------+\n"
          "| NVIDIA-SMI 570.86.15    Driver Version: 570.86.15    CUDA Version: {cuda}     |\n")


def fake_nvidia_smi(folder, cuda="12.8", gpus=("NVIDIA H100 80GB HBM3",) * 2, fails=None):
    """An nvidia-smi that answers as a driver for `cuda` with `gpus`, or fails with the message `fails`."""
    script = folder / "nvidia-smi"
    if fails:
        body = f'echo "{fails}"; exit 9'
    else:
        names = "\\n".join(gpus)
        body = f'case "$1" in --query-gpu=*) printf "{names}\\n";; *) printf "{HEADER.format(cuda=cuda)}";; esac'
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(0o755)
    return folder


def dry_run(path_first, tmp_path):
    env = {**os.environ, "PATH": f"{path_first}{os.pathsep}{os.environ['PATH']}"}
    env.pop("PYTHONPATH", None)
    out = subprocess.run([sys.executable, "-m", "perflab.backend", "--dry-run"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr  # never fails the make: the main job then runs NumPy
    return out.stdout


@pytest.mark.parametrize("cuda, wheel", [("12.8", "cupy-cuda12x[ctk]"), ("12.0", "cupy-cuda12x[ctk]"),
                                         ("13.0", "cupy-cuda13x[ctk]"), ("14.1", "cupy-cuda13x[ctk]")])
def test_the_install_line_follows_the_drivers_cuda_version(tmp_path, cuda, wheel):
    said = dry_run(fake_nvidia_smi(tmp_path, cuda=cuda), tmp_path)
    assert f"driver for CUDA {cuda}" in said and "2 NVIDIA GPU(s) (NVIDIA H100 80GB HBM3)" in said
    assert f"{sys.executable} -m pip install -q {wheel}" in said


@pytest.mark.parametrize("kwargs, why", [
    ({"cuda": "11.4"}, "supports CUDA 11.4; perflab's GPU code needs CUDA 12 or newer"),
    ({"fails": "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver"},
     "failed (exit 9): NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver; fix the NVIDIA driver"),
    ({"gpus": ()}, "nvidia-smi lists no GPU"),
])
def test_gpus_that_cannot_be_used_are_named_with_why(tmp_path, kwargs, why):
    said = dry_run(fake_nvidia_smi(tmp_path, **kwargs), tmp_path)
    assert why in said and "The main job runs NumPy on the CPU cores" in said and "pip install" not in said


def test_no_nvidia_smi_means_no_gpu_and_nothing_to_install(tmp_path):
    empty = tmp_path / "bin"
    empty.mkdir()
    env = {"PATH": str(empty), "HOME": str(tmp_path)}
    out = subprocess.run([sys.executable, "-m", "perflab.backend"], cwd=PROJECT_ROOT, env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0 and "no nvidia-smi on PATH" in out.stdout and "pip" not in out.stdout


def test_the_main_jobs_first_cell_says_why_the_gpus_go_unused(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", f"{fake_nvidia_smi(tmp_path, cuda='13.0')}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(backend, "cupy_or_none", lambda: None)  # GPUs, but no CuPy that sees them
    monkeypatch.setattr(plan, "gpu_count", lambda: 0)
    monkeypatch.setattr(plan.os, "cpu_count", lambda: 2)
    said = plan.roofline_plan(estimate=False).describe()
    assert said.startswith("note: this machine has 2 NVIDIA GPU(s) (NVIDIA H100 80GB HBM3, driver for CUDA 13.0)")
    assert f"`{sys.executable} -m pip install 'cupy-cuda13x[ctk]'`" in said and "running NumPy" in said
    with pytest.raises(plan.PlanError, match=r"needs CuPy and a visible NVIDIA GPU; this machine has 2 NVIDIA GPU"):
        plan.roofline_plan(backend="cupy", estimate=False)
    monkeypatch.setattr(backend, "cupy_or_none", lambda: object())  # CuPy sees them: nothing to say
    assert backend.gpu_setup_advice() is None


def test_make_roofline_installs_the_cupy_before_the_main_job():
    recipe = (PROJECT_ROOT / "Makefile").read_text().split("\nroofline:")[1].split("\n\n")[0]
    steps = [line.strip() for line in recipe.splitlines()[1:]]
    assert steps[0].startswith("$(PY) -m perflab.backend") and "notebook roofline" in steps[1]
