"""perflab's own CUDA kernels, compiled at first use with CuPy's RawModule (NVRTC).

One .cu file per GEMM variant (naive -> tiled -> regblock -> best, as SGEMM_CUDA shows the
progression) plus the fused elementwise steps; `cublas` is CuPy's matmul, the yardstick.

    gemm(a, b, out=None, alpha=1, beta=0, c=None, bias=None, variant="best")
computes out = alpha * a @ b + beta * c, then sigmoid(out + bias[:, None]) when bias is given
(the forward layer's epilogue). a and b may be C- or F-ordered 2D views (a transposed view
is read in place, never copied); out is C-contiguous.
"""
from __future__ import annotations

import functools
import math
from pathlib import Path

import numpy as np

i32, u64 = np.int32, np.uint64  # kernel arguments must carry their C types (int, size_t)

KERNEL_DIR = Path(__file__).resolve().parent
GEMM_VARIANTS = ("naive", "tiled", "regblock", "best", "cublas")
BEST_CONFIGS = {  # (BM, BN, BK, TM, TN), 256 threads each
    "128x128": (128, 128, 8, 8, 8),
    "128x64": (128, 64, 8, 8, 4),
    "64x128": (64, 128, 8, 4, 8),
    "64x64": (64, 64, 8, 4, 4),
}


class KernelError(RuntimeError):
    """A kernel was called with operands it cannot take; the message says which and why."""


def cupy():
    import cupy as cp
    return cp


def ctype(dtype) -> str:
    name = cupy().dtype(dtype).name
    if name not in ("float32", "float64"):
        raise KernelError(f"perflab kernels take float32 or float64 arrays, got {name}")
    return {"float32": "float", "float64": "double"}[name]


def template_args(variant: str, config: str | None) -> str:
    return "" if variant != "best" else "," + ",".join(map(str, BEST_CONFIGS[config]))


@functools.lru_cache(maxsize=None)
def module(source: str, names: tuple):
    """Compile one .cu file for the given template instantiations (cached per process)."""
    cp = cupy()
    code = (KERNEL_DIR / source).read_text()
    return cp.RawModule(code=code, options=("-std=c++17", f"-I{KERNEL_DIR}"), name_expressions=names)


def gemm_names(variant: str, T: str, config: str | None = None) -> tuple:
    """Every instantiation one compile of gemm_<variant>.cu provides (transposes x epilogue)."""
    names = tuple(f"gemm_{variant}<{T},{str(x).lower()},{str(y).lower()},{e}{template_args(variant, config)}>"
                  for x in (False, True) for y in (False, True) for e in (0, 1))
    if variant == "best":
        names += tuple(f"gemm_splitk_reduce<{T},{e}>" for e in (0, 1))
    return names


def gemm_function(variant: str, T: str, ta: bool, tb: bool, epi: int, config: str | None = None):
    mod = module(f"gemm_{variant}.cu", gemm_names(variant, T, config))
    name = f"gemm_{variant}<{T},{str(ta).lower()},{str(tb).lower()},{epi}{template_args(variant, config)}>"
    return mod.get_function(name), (mod.get_function(f"gemm_splitk_reduce<{T},{epi}>") if variant == "best" else None)


def instantiations() -> dict[str, tuple]:
    """Every kernel name each .cu file is compiled for, by file (CI compiles them with nvcc)."""
    out = {}
    for T in ("float", "double"):
        for variant in GEMM_VARIANTS[:-1]:
            for config in (BEST_CONFIGS if variant == "best" else [None]):
                out.setdefault(f"gemm_{variant}.cu", ())
                out[f"gemm_{variant}.cu"] += gemm_names(variant, T, config)
        out["elementwise.cu"] = out.get("elementwise.cu", ()) + tuple(f"{k}<{T}>" for k in ELEMENTWISE)
    return {k: tuple(dict.fromkeys(v)) for k, v in out.items()}


def storage(x, name: str):
    """(transposed?, leading dimension) of a 2D operand with one unit stride."""
    if x.ndim != 2:
        raise KernelError(f"{name} must be 2D, got shape {x.shape}")
    item = x.itemsize
    if x.strides[1] == item or x.shape[1] == 1:
        return False, max(x.strides[0] // item, x.shape[1], 1)
    if x.strides[0] == item or x.shape[0] == 1:
        return True, max(x.strides[1] // item, x.shape[0], 1)
    raise KernelError(f"{name} needs one unit stride (a C- or F-ordered matrix or a view of one), "
                      f"got strides {x.strides}")


def multiprocessors() -> int:
    cp = cupy()
    return sm_count(cp.cuda.Device().id)


@functools.lru_cache(maxsize=None)
def sm_count(device: int) -> int:
    """Cached: cudaGetDeviceProperties costs about a millisecond, far more than a launch."""
    return cupy().cuda.runtime.getDeviceProperties(device)["multiProcessorCount"]


def choose_best(M: int, N: int, K: int, sms: int) -> tuple[str, int]:
    """Tile shape and split-K for `best`: the largest tile whose grid fills the chip; when
    even 64 x 64 tiles leave SMs idle, split K (keeping at least 256 of it per split)."""
    for name in ("128x128", "128x64", "64x128", "64x64"):
        bm, bn = BEST_CONFIGS[name][:2]
        if math.ceil(M / bm) * math.ceil(N / bn) >= sms:
            return name, 1
    blocks = math.ceil(M / 64) * math.ceil(N / 64)
    splits = max(1, min(math.ceil(2 * sms / blocks), K // 256))
    return "64x64", splits


def gemm(a, b, out=None, alpha=1.0, beta=0.0, c=None, bias=None, variant: str = "best",
         config: str | None = None, splits: int | None = None, work=None):
    cp = cupy()
    if variant not in GEMM_VARIANTS:
        raise KernelError(f"GEMM variant must be one of {GEMM_VARIANTS}, got {variant!r}")
    (M, K), (K2, N) = a.shape, b.shape
    if K != K2:
        raise KernelError(f"inner dimensions differ: a is {a.shape}, b is {b.shape}")
    if a.dtype != b.dtype:
        raise KernelError(f"a is {a.dtype} but b is {b.dtype}")
    T = ctype(a.dtype)
    if out is None:
        out = cp.empty((M, N), dtype=a.dtype)
    if out.shape != (M, N) or not out.flags.c_contiguous or out.dtype != a.dtype:
        raise KernelError(f"out must be a C-contiguous {a.dtype} array of shape {(M, N)}, got "
                          f"{out.dtype} {out.shape} (C-contiguous: {out.flags.c_contiguous})")
    if beta != 0 and c is None:
        c = out
    if c is not None and c.shape != (M, N):
        raise KernelError(f"c must have shape {(M, N)}, got {c.shape}")
    if bias is not None and bias.shape != (M,):
        raise KernelError(f"bias must have shape {(M,)}, got {bias.shape}")
    if M == 0 or N == 0:
        return out
    ta, lda = storage(a, "a")
    tb, ldb = storage(b, "b")
    if variant == "cublas":
        if c is not None and c is not out:
            out[...] = c
        cublas_gemm(M, N, K, alpha, a, ta, lda, b, tb, ldb, beta, out)
        if bias is not None:
            bias_sigmoid(out, bias)
        return out
    if c is not None:
        c = cp.ascontiguousarray(c)
    epi = 0 if bias is None else 1
    scalar = a.dtype.type
    cptr = c if c is not None else out
    bptr = bias if bias is not None else out
    if variant == "best":
        if config is None:
            config, auto_splits = choose_best(M, N, K, multiprocessors())
            splits = splits or auto_splits
        splits = splits or 1
        bm, bn = BEST_CONFIGS[config][:2]
        kernel, reduce = gemm_function(variant, T, ta, tb, epi, config)
        if splits > 1 and (work is None or work.size < splits * M * N):
            work = cp.empty(splits * M * N, dtype=a.dtype)
        grid = (math.ceil(N / bn), math.ceil(M / bm), splits)
        kernel(grid, (256,), (i32(M), i32(N), i32(K), scalar(alpha), a, i32(lda), b, i32(ldb), scalar(beta),
                              cptr, i32(N), out, i32(N), bptr, work if splits > 1 else out))
        if splits > 1:
            reduce((math.ceil(M * N / 256),), (256,),
                   (i32(M), i32(N), i32(splits), scalar(alpha), work, scalar(beta), cptr, i32(N), out, i32(N), bptr))
        return out
    kernel, _ = gemm_function(variant, T, ta, tb, epi)
    if variant == "naive":
        grid, block = (math.ceil(N / 32), math.ceil(M / 8)), (32, 8)
    elif variant == "tiled":
        grid, block = (math.ceil(N / 32), math.ceil(M / 32)), (32, 32)
    else:  # regblock: 16 x 4 threads, a 64 x 16 tile of D
        grid, block = (math.ceil(N / 16), math.ceil(M / 64)), (16, 4)
    kernel(grid, block, (i32(M), i32(N), i32(K), scalar(alpha), a, i32(lda), b, i32(ldb), scalar(beta),
                         cptr, i32(N), out, i32(N), bptr))
    return out


# ------------------------------------------------------------------ cuBLAS, capturable
@functools.lru_cache(maxsize=None)
def cublas_library():
    """libcublas through ctypes: CuPy's own wrappers refuse to run while a stream is being
    captured, but cuBLAS itself supports CUDA graph capture, so the cublas variant can sit in
    the same graphs as perflab's kernels."""
    import ctypes
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
    import ctypes
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


# ------------------------------------------------------------------ fused elementwise steps
ELEMENTWISE = ("bias_sigmoid", "add_bias", "softmax_xent_grad", "sigmoid_backward", "row_sum", "sgd_update",
               "output_layer", "hidden_backward")
MAX_FUSED_CLASSES = 16  # output_layer and hidden_backward keep C values per thread in registers


def elementwise(name: str, dtype):
    T = ctype(dtype)
    mod = module("elementwise.cu", tuple(f"{k}<{T}>" for k in ELEMENTWISE))
    return mod.get_function(f"{name}<{T}>")


def blocks(n: int, per: int = 256) -> tuple:
    return (max(1, math.ceil(n / per)),)


def bias_sigmoid(z, b):
    """z <- sigmoid(z + b[:, None]) in place."""
    rows, cols = z.shape
    elementwise("bias_sigmoid", z.dtype)(blocks(z.size), (256,), (z, b, i32(rows), i32(cols)))
    return z


def add_bias(z, b):
    rows, cols = z.shape
    elementwise("add_bias", z.dtype)(blocks(z.size), (256,), (z, b, i32(rows), i32(cols)))
    return z


def softmax_xent_grad(z, b2, y, delta, norm, ce=None):
    """delta <- (softmax(z + b2) - onehot(y)) / norm; ce[j] <- -log yhat[y_j, j] if ce is given."""
    C, B = z.shape
    elementwise("softmax_xent_grad", z.dtype)(
        blocks(B, 128), (128,), (z, b2, y, delta, delta if ce is None else ce, i32(ce is not None),
                                 i32(C), i32(B), z.dtype.type(1 / norm)))
    return delta


def sigmoid_backward(da, a):
    """da <- da * a * (1 - a) in place."""
    elementwise("sigmoid_backward", da.dtype)(blocks(da.size), (256,), (da, a, u64(da.size)))
    return da


def row_sum(x, out):
    rows, cols = x.shape
    elementwise("row_sum", x.dtype)((rows,), (256,), (x, out, i32(rows), i32(cols)))
    return out


def output_layer(W2, b2, a1, y, delta, norm, ce=None):
    """delta <- (softmax(W2 a1 + b2) - onehot(y)) / norm in one pass over a1 (C <= 16)."""
    C, H = W2.shape
    n = a1.shape[1]
    if C > MAX_FUSED_CLASSES:
        raise KernelError(f"output_layer takes at most {MAX_FUSED_CLASSES} classes, got C={C}")
    elementwise("output_layer", a1.dtype)(
        (max(1, math.ceil(n / 16)),), (16, 16),
        (W2, b2, a1, y, delta, delta if ce is None else ce, i32(ce is not None), i32(C), i32(H), i32(n),
         a1.dtype.type(1 / norm)))
    return delta


def hidden_backward(W2, delta, a1, dz1, db1):
    """dz1 <- (W2^T delta) o a1 o (1 - a1) and db1 <- row sums of dz1, in one pass (C <= 16)."""
    C, H = W2.shape
    n = a1.shape[1]
    if C > MAX_FUSED_CLASSES:
        raise KernelError(f"hidden_backward takes at most {MAX_FUSED_CLASSES} classes, got C={C}")
    elementwise("hidden_backward", a1.dtype)((max(1, math.ceil(H / 4)),), (256,),
                                             (W2, delta, a1, dz1, db1, i32(C), i32(H), i32(n)))
    return dz1


def sgd_update(params, grads, learning_rate, ends, regs):
    """params <- params - lr * (grads + regs[segment] * params), one launch for every parameter."""
    elementwise("sgd_update", params.dtype)(blocks(params.size), (256,),
                                            (params, grads, u64(params.size), params.dtype.type(learning_rate),
                                             ends, regs, i32(ends.size)))
    return params
