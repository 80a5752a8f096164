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


def array_module(backend: str):
    """numpy or cupy for --backend; 'auto' takes CuPy when a GPU is there."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if backend == "numpy":
        return np
    cp = cupy_or_none()
    if cp is None and backend == "cupy":
        raise RuntimeError("--backend cupy needs CuPy and a visible NVIDIA GPU; none was found "
                           "(pip install 'perflab[gpu]', check nvidia-smi), or use --backend numpy")
    return cp or np


def cpu_threads(comm) -> int:
    """BLAS threads for one rank: this node's cores shared out among its ranks. Each rank's BLAS
    otherwise starts a thread per core, and two ranks on 2 cores ran their steps 4-7x slower than
    one rank per core would."""
    import os
    local = 1
    if comm.size > 1:
        node = comm.comm.Split_type(comm.MPI.COMM_TYPE_SHARED)
        local = node.Get_size()
        node.Free()
    return max(1, (os.cpu_count() or 1) // local)


def blas_threads(comm):
    """A context in which NumPy's BLAS uses cpu_threads(comm) threads."""
    from threadpoolctl import threadpool_limits
    return threadpool_limits(cpu_threads(comm), user_api="blas")


def xp_of(array):
    """The module an array belongs to, so one function serves both backends."""
    return np if isinstance(array, np.ndarray) else __import__("cupy").get_array_module(array)


def to_numpy(array) -> np.ndarray:
    return array if isinstance(array, np.ndarray) else array.get()
