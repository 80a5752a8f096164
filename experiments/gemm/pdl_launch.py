"""Programmatic dependent launch for the A/B: the tile kernels launched by cuLaunchKernelEx with
CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION, so a launch may start while the one
before it on the stream finishes (its blocks wait in griddepcontrol.wait)."""
import ctypes

import cupy as cp
import numpy as np

cuda = ctypes.CDLL("libcuda.so.1")

class Attr(ctypes.Structure):
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_int), ("value", ctypes.c_int * 16)]

class Config(ctypes.Structure):
    _fields_ = [("gx", ctypes.c_uint), ("gy", ctypes.c_uint), ("gz", ctypes.c_uint),
                ("bx", ctypes.c_uint), ("by", ctypes.c_uint), ("bz", ctypes.c_uint),
                ("smem", ctypes.c_uint), ("stream", ctypes.c_void_p),
                ("attrs", ctypes.POINTER(Attr)), ("nattrs", ctypes.c_uint)]

cuda.cuLaunchKernelEx.argtypes = [ctypes.POINTER(Config), ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p]

def cvalue(x):
    if isinstance(x, cp.ndarray):
        return ctypes.c_void_p(x.data.ptr)
    return {np.int32: ctypes.c_int32, np.float32: ctypes.c_float, np.float64: ctypes.c_double}[type(x)](x)

class PDL:
    def __init__(self, fn):
        self.fn = fn
    def __getattr__(self, name):
        return getattr(self.fn, name)
    def __call__(self, grid, block, args, shared_mem=0):
        grid = tuple(grid) + (1,) * (3 - len(grid))
        block = tuple(block) + (1,) * (3 - len(block))
        attr = Attr(id=6)  # CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
        attr.value[0] = 1
        cfg = Config(*grid, *block, shared_mem, cp.cuda.get_current_stream().ptr, ctypes.pointer(attr), 1)
        vals = [cvalue(a) for a in args]
        params = (ctypes.c_void_p * len(vals))(*[ctypes.cast(ctypes.pointer(v), ctypes.c_void_p) for v in vals])
        err = cuda.cuLaunchKernelEx(ctypes.byref(cfg), ctypes.c_void_p(self.fn.kernel.ptr), params, None)
        if err:
            raise RuntimeError(f"cuLaunchKernelEx: CUresult {err}")

def install(kernels, on: bool):
    """Wrap (or unwrap) kernels.gemm_function's tile kernels in PDL launches."""
    if not hasattr(kernels, "_plain_gemm_function"):
        kernels._plain_gemm_function = kernels.dispatch.gemm_function
    plain = kernels._plain_gemm_function
    if on:
        kernels.dispatch.gemm_function = lambda variant, *a, **k: (PDL(plain(variant, *a, **k)) if variant in kernels.TILED_VARIANTS
                                                          else plain(variant, *a, **k))
    else:
        kernels.dispatch.gemm_function = plain
