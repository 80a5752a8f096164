"""cuBLAS through ctypes, the yardstick: capturable in CUDA graphs, where CuPy's wrappers refuse."""
from __future__ import annotations

import contextlib
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


DEFAULT_MATH, TF32_TENSOR_OP_MATH = 0, 3  # cublasMath_t


def cublas_gemm(M, N, K, alpha, a, ta, lda, b, tb, ldb, beta, out):
    """Row-major out = alpha op(a) op(b) + beta out, as the column-major cuBLAS call
    out^T = op(b)^T op(a)^T, on the current CuPy stream, in FP32."""
    with handle_on_stream() as (lib, handle):
        call_gemm(lib, handle, M, N, K, alpha, a, ta, lda, b, tb, ldb, beta, out)


SIDE = {"on": False}  # inside side_handle(): cuBLAS calls use a handle of their own


@contextlib.contextmanager
def side_handle():
    """cuBLAS calls in here use a handle of their own, with its own workspace: a GEMM on a side stream
    runs at once with one on the main stream, which must not share the main handle's workspace."""
    SIDE["on"] = True
    try:
        yield
    finally:
        SIDE["on"] = False


@functools.lru_cache(maxsize=None)
def own_handle(device: int) -> int:
    """A second cuBLAS handle on this device: its default workspace is its own, allocated by cublasCreate
    (so never inside a graph capture; cublasSetStream resets a handle to it)."""
    handle = ctypes.c_void_p()
    status = cublas_library().cublasCreate_v2(ctypes.byref(handle))
    if status != 0:
        raise KernelError(f"cublasCreate failed with status {status}")
    return handle.value


@contextlib.contextmanager
def handle_on_stream(tf32: bool = False, workspace: bool = True):
    """(libcublas, CuPy's cuBLAS handle, or in side_handle() one of perflab's) set to the current stream,
    FP32 or (`tf32`) TF32 tensor cores; set back to FP32 after, as CuPy's own calls share the handle.
    cublasSetStream gives the handle cuBLAS's default workspace; `workspace` False takes it away for this
    call (a half product: cublas_gemm_half)."""
    cp = cupy()
    lib = cublas_library()
    handle = own_handle(cp.cuda.Device().id) if SIDE["on"] else cp.cuda.device.get_cublas_handle()
    lib.cublasSetStream_v2(ctypes.c_void_p(handle), ctypes.c_void_p(cp.cuda.get_current_stream().ptr))
    lib.cublasSetMathMode(ctypes.c_void_p(handle), ctypes.c_int(TF32_TENSOR_OP_MATH if tf32 else DEFAULT_MATH))
    if not workspace:
        status = lib.cublasSetWorkspace_v2(ctypes.c_void_p(handle), ctypes.c_void_p(0), ctypes.c_size_t(0))
        if status != 0:
            raise KernelError(f"cublasSetWorkspace (none) failed with status {status}")
    try:
        yield lib, handle
    finally:
        if tf32:
            lib.cublasSetMathMode(ctypes.c_void_p(handle), ctypes.c_int(DEFAULT_MATH))


def call_gemm(lib, handle, M, N, K, alpha, a, ta, lda, b, tb, ldb, beta, out):
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


CUDA_TYPES = {"float32": 0, "float16": 2, "uint16": 14}  # cudaDataType: R_32F, R_16F, R_16BF (bfloat16 held in uint16)
COMPUTE_32F, GEMM_DEFAULT = 68, -1  # cublasComputeType_t, cublasGemmAlgo_t


def cublas_gemm_half(M, N, K, a, ta, lda, b, tb, ldb, out, workspace: bool):
    """Row-major out = op(a) op(b) on the tensor cores: a and b half precision (float16, or bfloat16
    held in uint16), FP32 accumulation, out half or float32 (cublasGemmEx, as cublas_gemm lays it out).
    workspace: cuBLAS's own, which the weight gradients keep and the half step's products do without: cuBLAS
    then takes kernels that need no memset before them, and faster ones there, where the weight gradients are
    slower without one (docs/DECISIONS.md, D76). The next cublasSetStream gives the handle its default back."""
    with handle_on_stream(workspace=workspace) as (lib, handle):
        status = lib.cublasGemmEx(
            ctypes.c_void_p(handle), ctypes.c_int(1 if tb else 0), ctypes.c_int(1 if ta else 0),
            ctypes.c_int(N), ctypes.c_int(M), ctypes.c_int(K), ctypes.byref(ctypes.c_float(1.0)),
            ctypes.c_void_p(b.data.ptr), ctypes.c_int(CUDA_TYPES[b.dtype.name]), ctypes.c_int(ldb),
            ctypes.c_void_p(a.data.ptr), ctypes.c_int(CUDA_TYPES[a.dtype.name]), ctypes.c_int(lda),
            ctypes.byref(ctypes.c_float(0.0)), ctypes.c_void_p(out.data.ptr), ctypes.c_int(CUDA_TYPES[out.dtype.name]),
            ctypes.c_int(N), ctypes.c_int(COMPUTE_32F), ctypes.c_int(GEMM_DEFAULT))
    if status != 0:
        raise KernelError(f"cuBLAS half-precision gemm failed with status {status} (M={M}, N={N}, K={K}, ta={ta}, "
                          f"tb={tb}, {a.dtype} x {b.dtype} -> {out.dtype})")


@functools.lru_cache(maxsize=None)
def tf32_split_kernel():
    """x -> (big, small): big is x rounded to TF32 (10 mantissa bits), small is x - big rounded to
    TF32 too (left to the tensor cores, its low bits are cut, not rounded: a bias that grows with K,
    6.8e-6 at K = 3200 against SGEMM's 2.8e-7 on an H100), so that big*big + big*small + small*big
    carries x*y to about FP32's accuracy on TF32 tensor cores."""
    return cupy().ElementwiseKernel(
        "float32 x", "float32 big, float32 small",
        "big = __uint_as_float((__float_as_uint(x) + 0x1000u) & 0xffffe000u);"
        "float rest = x - big; small = __uint_as_float((__float_as_uint(rest) + 0x1000u) & 0xffffe000u)",
        "perflab_tf32_split")


def split_buffers(x, cache: dict):
    """(big, small) buffers in x's storage order (C- or F-contiguous), reused per shape and order:
    allocated on first use, which is outside any CUDA graph capture (the trainers warm up first)."""
    if not (x.flags.c_contiguous or x.flags.f_contiguous):
        raise KernelError(f"cublas-x3tf32 splits C- or F-contiguous operands, got strides {x.strides} for {x.shape}")
    key = (x.shape, x.flags.c_contiguous, x.dtype.str)
    if key not in cache:
        cache[key] = (cupy().empty_like(x), cupy().empty_like(x))
    return cache[key]


SPLITS_A: dict = {}  # a's and b's apart: a square a and b have the same shape and order
SPLITS_B: dict = {}


def cublas_x3tf32(M, N, K, alpha, a, ta, lda, b, tb, ldb, beta, out):
    """The 3xTF32 reference: a and b split into TF32 big and small parts, out = alpha (a_small b_big +
    a_big b_small + a_big b_big) + beta out by three cuBLAS TF32 calls (the small products first)."""
    if a.dtype != np.float32:
        raise KernelError(f"cublas-x3tf32 takes float32 operands, got {a.dtype}")
    split = tf32_split_kernel()
    (a_big, a_small), (b_big, b_small) = split_buffers(a, SPLITS_A), split_buffers(b, SPLITS_B)
    split(a, a_big, a_small)
    split(b, b_big, b_small)
    with handle_on_stream(tf32=True) as (lib, handle):  # the split copies keep a's and b's layout: same ld
        call_gemm(lib, handle, M, N, K, alpha, a_small, ta, lda, b_big, tb, ldb, beta, out)
        call_gemm(lib, handle, M, N, K, alpha, a_big, ta, lda, b_small, tb, ldb, 1.0, out)
        call_gemm(lib, handle, M, N, K, alpha, a_big, ta, lda, b_big, tb, ldb, 1.0, out)
