"""cuBLAS through ctypes, the yardstick: capturable in CUDA graphs, where CuPy's wrappers refuse."""
from __future__ import annotations

import ctypes
import functools

import numpy as np

from perflab.kernels.build import KernelError, cupy


@functools.lru_cache(maxsize=None)
def cublas_library():
    """libcublas through ctypes: CuPy's own wrappers refuse to run while a stream is being
    captured, but cuBLAS itself supports CUDA graph capture, so the cublas variant can sit in
    the same graphs as perflab's kernels."""
    import glob
    import os
    cp = cupy()
    names = [f"libcublas.so.{cp.cuda.runtime.runtimeGetVersion() // 1000}", "libcublas.so"]
    roots = [os.path.dirname(cp.__file__), *(p for p in os.environ.get("LD_LIBRARY_PATH", "").split(":") if p)]
    candidates = names + [f for r in roots for f in glob.glob(os.path.join(r, "..", "nvidia", "cu*", "lib", "libcublas.so*"))]
    for name in candidates:
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    raise KernelError(f"libcublas not found (tried {candidates[:4]}...); use another --gemm variant")


def cublas_gemm(M, N, K, alpha, a, ta, lda, b, tb, ldb, beta, out):
    """Row-major out = alpha op(a) op(b) + beta out, as the column-major cuBLAS call
    out^T = op(b)^T op(a)^T, on the current CuPy stream."""
    cp = cupy()
    lib = cublas_library()
    handle = cp.cuda.device.get_cublas_handle()
    lib.cublasSetStream_v2(ctypes.c_void_p(handle), ctypes.c_void_p(cp.cuda.get_current_stream().ptr))
    double = a.dtype == np.float64
    scalar = ctypes.c_double if double else ctypes.c_float
    fn = lib.cublasDgemm_v2 if double else lib.cublasSgemm_v2
    # column-major view: b's storage is (N x K) col-major when not transposed, so opB = N etc.
    status = fn(ctypes.c_void_p(handle), ctypes.c_int(1 if tb else 0), ctypes.c_int(1 if ta else 0),
                ctypes.c_int(N), ctypes.c_int(M), ctypes.c_int(K), ctypes.byref(scalar(alpha)),
                ctypes.c_void_p(b.data.ptr), ctypes.c_int(ldb), ctypes.c_void_p(a.data.ptr), ctypes.c_int(lda),
                ctypes.byref(scalar(beta)), ctypes.c_void_p(out.data.ptr), ctypes.c_int(N))
    if status != 0:
        raise KernelError(f"cuBLAS gemm failed with status {status} (M={M}, N={N}, K={K}, ta={ta}, tb={tb})")
