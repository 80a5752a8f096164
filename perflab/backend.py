"""Array backends: NumPy (the float64 reference) or CuPy, behind one name, `xp`."""
from __future__ import annotations

import numpy as np

BACKENDS = ("numpy", "cupy", "auto")


def cupy_or_none():
    """CuPy when it imports and sees a GPU, else None (never raises)."""
    try:
        import cupy
        if cupy.cuda.runtime.getDeviceCount() > 0:
            return cupy
    except Exception:  # no CuPy, no driver, no device: all mean "no GPU here"
        pass
    return None


# every command that needs a GPU and finds no CuPy ends with this one message (`perflab.backend` installs the CuPy
# this machine's driver takes; the `gpu` extra is CUDA 12's)
INSTALL_CUPY = ("install the CuPy this machine's NVIDIA driver takes with `.venv/bin/python -m perflab.backend` (or, "
                "from the clone, `.venv/bin/pip install -e '.[gpu]'` for CUDA 12, '.[gpu-cuda13]' for CUDA 13), and "
                "check that nvidia-smi lists the GPUs")


def array_module(backend: str):
    """numpy or cupy for --backend; 'auto' takes CuPy when a GPU is there."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if backend == "numpy":
        return np
    cp = cupy_or_none()
    if cp is None and backend == "cupy":
        raise RuntimeError(f"--backend cupy needs CuPy and a visible NVIDIA GPU; none was found: {INSTALL_CUPY}; "
                           "or use --backend numpy")
    return cp or np


def host_memory_available() -> int | None:
    """Bytes this host can give a new allocation now (Linux's MemAvailable; elsewhere all of its memory),
    or None where neither can be read."""
    import os
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def cpu_threads(comm) -> int:
    """BLAS threads for one rank: this node's cores shared out among its ranks. Each rank's BLAS
    otherwise starts a thread per core, and oversubscribed ranks run their steps several times slower
    (docs/DECISIONS.md, D3)."""
    import os
    local = 1
    if comm.size > 1:
        node = comm.comm.Split_type(comm.MPI.COMM_TYPE_SHARED)
        local = node.Get_size()
        node.Free()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)  # taskset, binding
    return max(1, cores // local)


def blas_threads(comm, threads: int | None = None):
    """A context in which NumPy's BLAS uses `threads` threads (None: cpu_threads(comm))."""
    from threadpoolctl import threadpool_limits
    return threadpool_limits(threads or cpu_threads(comm), user_api="blas")


def xp_of(array):
    """The module an array belongs to, so one function serves both backends."""
    return np if isinstance(array, np.ndarray) else __import__("cupy").get_array_module(array)


def to_numpy(array) -> np.ndarray:
    return array if isinstance(array, np.ndarray) else array.get()


# --- Which CuPy this machine's NVIDIA driver takes (`make roofline` installs it: python -m perflab.backend) ---

CUPY_WHEELS = {12: "cupy-cuda12x", 13: "cupy-cuda13x"}  # the driver's CUDA major version -> CuPy's wheel


class GPUSetupError(RuntimeError):
    """This machine has NVIDIA GPUs that perflab cannot use as it is; the message says why and what fixes it."""


def nvidia_driver() -> dict | None:
    """What nvidia-smi reports: the GPUs' names and the CUDA version the driver supports, or the error it
    printed. None where there is no nvidia-smi on PATH (no NVIDIA GPU here)."""
    import re
    import shutil
    import subprocess
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        names = subprocess.run([exe, "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True,
                               timeout=60)
        header = subprocess.run([exe], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:
        return {"gpus": [], "cuda": None, "error": f"{exe} could not run: {exc}"}
    if names.returncode or header.returncode:
        said = (names.stdout + names.stderr).strip().splitlines()
        return {"gpus": [], "cuda": None, "error": f"{exe} failed (exit {names.returncode or header.returncode})"
                + (f": {said[0]}" if said else "")}
    cuda = re.search(r"CUDA Version:\s*(\d+)\.(\d+)", header.stdout)
    return {"gpus": [n.strip() for n in names.stdout.splitlines() if n.strip()],
            "cuda": f"{cuda[1]}.{cuda[2]}" if cuda else None, "error": None}


def cupy_wheel(driver: dict) -> str:
    """The pip requirement of the CuPy that runs on this driver, with the CUDA libraries it needs from
    PyPI ([ctk]: NVRTC compiles perflab's kernels, cuBLAS runs the peers' GEMMs)."""
    if driver["error"]:
        raise GPUSetupError(f"{driver['error']}; fix the NVIDIA driver (nvidia-smi must list the GPUs), then run "
                            "`make roofline` again")
    if not driver["gpus"]:
        raise GPUSetupError("nvidia-smi lists no GPU")
    if driver["cuda"] is None:
        raise GPUSetupError("nvidia-smi does not say which CUDA version its driver supports (no 'CUDA Version: "
                            "X.Y' in its header); install CuPy yourself: pip install 'cupy-cuda12x[ctk]' for a "
                            "CUDA 12 driver, 'cupy-cuda13x[ctk]' for CUDA 13")
    major = int(driver["cuda"].split(".")[0])
    if major < min(CUPY_WHEELS):
        raise GPUSetupError(f"the NVIDIA driver supports CUDA {driver['cuda']}; perflab's GPU code needs CUDA "
                            f"{min(CUPY_WHEELS)} or newer (its tensor-core kernels are built for sm_90a): update "
                            "the driver")
    return f"{CUPY_WHEELS[min(major, max(CUPY_WHEELS))]}[ctk]"


def gpu_setup_advice() -> str | None:
    """Why this machine's NVIDIA GPUs go unused (CuPy missing or broken, the driver too old), with what
    fixes it; None where there is no NVIDIA GPU or CuPy sees them."""
    if cupy_or_none() is not None:
        return None
    driver = nvidia_driver()
    if driver is None:
        return None
    try:
        wheel = cupy_wheel(driver)
    except GPUSetupError as exc:
        return f"{unusable(exc)}; running NumPy on the CPU cores"
    import sys
    return (f"this machine has {len(driver['gpus'])} NVIDIA GPU(s) ({driver['gpus'][0]}, driver for CUDA "
            f"{driver['cuda']}) but no CuPy that sees them; `{sys.executable} -m pip install '{wheel}'` (or "
            "`make roofline`, which runs it) puts them to work; running NumPy on the CPU cores until then")


def unusable(exc: Exception) -> str:
    return f"this machine has NVIDIA GPUs that perflab cannot use: {exc}"


def install_cupy(dry_run: bool = False) -> int:
    """`make roofline`'s first step: on a machine with NVIDIA GPUs, install the CuPy its driver takes, so
    that the main job's backend 'auto' measures the GPUs. Says what it did or why not; never fails the
    make (the main job then runs NumPy, and its first cell says why)."""
    import subprocess
    import sys
    driver = nvidia_driver()
    if driver is None:
        print("perflab: no nvidia-smi on PATH, so no NVIDIA GPU here: the main job runs NumPy on the CPU cores")
        return 0
    if not dry_run and cupy_or_none() is not None:
        print(f"perflab: CuPy sees this machine's {len(driver['gpus'])} GPU(s): the main job runs on them")
        return 0
    try:
        wheel = cupy_wheel(driver)
    except GPUSetupError as exc:
        print(f"perflab: {unusable(exc)}. The main job runs NumPy on the CPU cores.")
        return 0
    command = [sys.executable, "-m", "pip", "install", "-q", wheel]
    print(f"perflab: {len(driver['gpus'])} NVIDIA GPU(s) ({driver['gpus'][0]}), driver for CUDA {driver['cuda']}: "
          f"installing CuPy: {' '.join(command)}", flush=True)
    if dry_run:
        return 0
    done = subprocess.run(command)
    sees = subprocess.run([sys.executable, "-c", "from perflab.backend import cupy_or_none; "
                           "import sys; sys.exit(cupy_or_none() is None)"]).returncode == 0
    if done.returncode or not sees:
        print(f"perflab: {'the install failed' if done.returncode else 'CuPy installed but sees no GPU'}; the main "
              f"job runs NumPy on the CPU cores. Fix it, then run `make roofline` again: {' '.join(command)}")
    return 0


if __name__ == "__main__":
    import argparse
    parser = argparse.ArgumentParser(
        prog="python -m perflab.backend",
        description="Install the CuPy that this machine's NVIDIA driver takes (cupy-cuda12x or cupy-cuda13x, from "
                    "the CUDA version nvidia-smi reports), so that `make roofline` measures the GPUs. Does nothing "
                    "where there is no nvidia-smi.")
    parser.add_argument("--dry-run", action="store_true", help="print the install command, do not run it")
    raise SystemExit(install_cupy(parser.parse_args().dry_run))
