"""gemm(): one call for every variant (naive, tiled, regblock, best, tf32, wgmma, x3tf32, cublas,
cublas-x3tf32), each kernel instantiated per operand storage and epilogue; tune() times the tile
choices once per shape (for wgmma and x3tf32: a tile config and a split-K count, `blocks`)."""
from __future__ import annotations

import functools
import math

from perflab.kernels.build import KernelError, ctype, cupy, i32, launch_tile, module, multiprocessors
from perflab.kernels.cublas import cublas_gemm, cublas_gemm_half, cublas_x3tf32
from perflab.kernels.elementwise import HALF_CTYPES, bias_sigmoid
from perflab.kernels.tiles import (
    TILED_VARIANTS,
    check_blocks,
    heuristic_tiles,
    tile_choices,
    tile_configs,
    tile_grid,
    tile_launch,
    workspace_elements,
)
from perflab.kernels.wgmma import WGMMA_VARIANTS, half_wgmma_gemm, wgmma_gemm
from perflab.kernels.wgmma import choices as wgmma_choices

GEMM_VARIANTS = ("naive", "tiled", "regblock", "best", "tf32", "wgmma", "x3tf32", "cublas", "cublas-x3tf32")
CUBLAS_VARIANTS = ("cublas", "cublas-x3tf32")  # cuBLAS itself (FP32), and the 3xTF32 reference on its TF32 GEMM
TF32_VARIANTS = ("tf32", "wgmma", "x3tf32", "cublas-x3tf32")  # on TF32 tensor cores: float32 operands only
TUNABLE_VARIANTS = TILED_VARIANTS + WGMMA_VARIANTS  # a choice per shape, which tune() times


def template_args(variant: str, T: str, config: str | None) -> str:
    return "" if variant not in TILED_VARIANTS else "," + ",".join(map(str, tile_configs(variant, T)[config]))


def source_file(variant: str) -> str:
    return "gemm_best.cu" if variant in TILED_VARIANTS else f"gemm_{variant}.cu"


def kernel_name(variant: str, T: str, ta: bool, tb: bool, epi: int, config: str | None, shared: bool = False) -> str:
    """The C++ name of one instantiation (`shared`: the tile kernels' version whose blocks may
    share tiles, for split-K and stream-K)."""
    flags = [str(ta).lower(), str(tb).lower(), str(epi)]
    if variant in TILED_VARIANTS:
        flags.append(str(shared).lower())
    dtype = "" if variant == "tf32" else f"{T},"
    return f"gemm_{variant}<{dtype}{','.join(flags)}{template_args(variant, T, config)}>"


def gemm_names(variant: str, T: str, config: str | None = None) -> tuple:
    """Every instantiation one compile provides (transposes x epilogue, x shared tiles or not)."""
    return tuple(kernel_name(variant, T, x, y, e, config, sh) for x in (False, True) for y in (False, True)
                 for e in (0, 1) for sh in ((False, True) if variant in TILED_VARIANTS else (False,)))


@functools.lru_cache(maxsize=None)
def gemm_function(variant: str, T: str, ta: bool, tb: bool, epi: int, config: str | None = None, shared: bool = False):
    """The kernel, cached, so each is one lasting object per process. A tile kernel is allowed
    its dynamic shared memory here, once: over 48 KiB needs asking."""
    mod = module(source_file(variant), gemm_names(variant, T, config))
    kernel = mod.get_function(kernel_name(variant, T, ta, tb, epi, config, shared))
    if variant in TILED_VARIANTS:
        kernel.max_dynamic_shared_size_bytes = tile_launch(variant, T, config, ta, tb)[1]
    return kernel


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


TUNED: dict[tuple, tuple[str, int]] = {}  # (variant, T, M, N, K, ta, tb, out's T) -> (config, blocks), from tune()


def element(dtype) -> str:
    """The kernels' element type of a dtype: float, double, or a half precision's tag."""
    return HALF_CTYPES.get(dtype.name) or ctype(dtype)


def tune_key(variant: str, a, b, out, ta: bool, tb: bool) -> tuple:
    """TUNED's key of a GEMM of a by b into out (ta, tb: stored transposed): a half product into a half out and into
    FP32 (a weight gradient, where --comm p2p's BF16 copy does not take it) have epilogues of their own."""
    return variant, element(a.dtype), a.shape[0], b.shape[1], a.shape[1], ta, tb, element(out.dtype)


def tune(a, b, out, variant: str = "best", work=None, repeats: int = 5, a_small=None) -> tuple[str, int]:
    """Time every tile config and number of blocks `variant` can take here (device time of
    CUDA-graph replays, median of `repeats`: timing launches one by one would add the host's
    launch overhead and bias small shapes against it) and remember the fastest for this shape,
    so later gemm() calls, also inside CUDA graph capture, use it. Outside capture only: it
    synchronizes. A shape tuned before returns its choice at once. `out` is overwritten; `work`
    (from workspace()) allows the choices that share tiles. The timings are bursts at the boost
    clock: where a GEMM runs long enough to meet the power cap, a choice that moves less data can
    win instead (docs/DECISIONS.md, D6; `perflab bench hold` measures the held rate). a_small as
    gemm() takes it: x3tf32's a given split, as the trainer's backward GEMM 3 runs it."""
    from perflab.timing import time_graph_ms
    cp = cupy()
    half = a.dtype.name in HALF_CTYPES  # the half-precision wgmma GEMM (half_gemm's variant="wgmma")
    key = tune_key(variant, a, b, out, storage(a, "a")[0], storage(b, "b")[0])
    _, T, M, N, K, _, _, _ = key
    if key in TUNED:
        return TUNED[key]
    timings = {}
    options = (wgmma_choices(M, N, K, "half" if half else variant) if variant in WGMMA_VARIANTS
               else tile_choices(variant, T, M, N, K, work, multiprocessors()))
    for config, blocks in options:
        if half:
            run = functools.partial(half_gemm, a, b, out, variant=variant, config=config, splits=blocks)
        else:
            run = functools.partial(gemm, a, b, out=out, variant=variant, config=config, blocks=blocks, work=work,
                                    a_small=a_small)
        timings[(config, blocks)] = time_graph_ms(cp, run, calls=5, repeats=repeats)
    TUNED[key] = min(timings, key=timings.get)
    return TUNED[key]


LIBRARY_VARIANTS = CUBLAS_VARIANTS + WGMMA_VARIANTS  # beta scales out in place; the epilogue is a pass of its own


def gemm(a, b, out=None, alpha=1.0, beta=0.0, c=None, bias=None, variant: str = "best",
         config: str | None = None, blocks: int | None = None, work=None, a_small=None):
    """out = alpha a @ b + beta c (c: out where not given), then sigmoid(out + bias[:, None]) with bias.
    Checked here, then one launcher a family of variants: every step's GEMM calls this, so a call
    stays one Python function below it."""
    cp = cupy()
    if variant not in GEMM_VARIANTS:
        raise KernelError(f"GEMM variant must be one of {GEMM_VARIANTS}, got {variant!r}")
    if a_small is not None and variant != "x3tf32":
        raise KernelError(f"a_small (a given as TF32 big parts, a_small the small ones) is for x3tf32, not {variant}")
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
    if variant in LIBRARY_VARIANTS:
        return library_gemm(a, b, out, alpha, beta, c, bias, variant, config, blocks, a_small, M, N, K, ta, lda, tb, ldb)
    if c is not None:
        c = cp.ascontiguousarray(c)
    if variant in TILED_VARIANTS:
        return tile_gemm(cp, a, b, out, alpha, beta, c, bias, variant, config, blocks, work, T, M, N, K, ta, lda, tb, ldb)
    return simple_gemm(a, b, out, alpha, beta, c, bias, variant, T, M, N, K, ta, lda, tb, ldb)


def library_gemm(a, b, out, alpha, beta, c, bias, variant, config, blocks, a_small, M, N, K, ta, lda, tb, ldb):
    """cuBLAS (FP32, or its 3xTF32) or Hopper's wgmma GEMMs (the choice tune() made unless config is
    given): beta scales out in place, so c is copied into out first; bias and sigmoid a pass after."""
    if c is not None and c is not out:
        out[...] = c
    if variant in WGMMA_VARIANTS:
        if config is None:
            config, blocks = TUNED.get(tune_key(variant, a, b, out, ta, tb), (None, blocks))
        wgmma_gemm(a, b, out, alpha, beta, variant == "x3tf32", config, blocks, a_small)
    else:
        (cublas_gemm if variant == "cublas" else cublas_x3tf32)(M, N, K, alpha, a, ta, lda, b, tb, ldb, beta, out)
    if bias is not None:
        bias_sigmoid(out, bias)
    return out


def tile_gemm(cp, a, b, out, alpha, beta, c, bias, variant, config, blocks, work, T, M, N, K, ta, lda, tb, ldb):
    """best and tf32, the cp.async tile kernels: the config and blocks tune() chose (else the grid's
    heuristic), a block a tile or fewer blocks sharing tiles through `work` (split-K, stream-K)."""
    if config is None:
        config, auto_blocks = (TUNED.get(tune_key(variant, a, b, out, ta, tb))
                               or heuristic_tiles(variant, T, M, N, K, multiprocessors()))
        blocks = auto_blocks if blocks is None else blocks
    tiles = tile_grid(variant, T, config, M, N, K)[0]
    blocks = tiles if blocks is None else blocks
    if blocks != tiles:  # a tile a block is always runnable: no second look at the grid
        check_blocks(variant, T, config, M, N, K, blocks)
    if blocks != tiles and (work is None or work.size < workspace_elements(variant, T, config, blocks)):
        work = cp.zeros(workspace_elements(variant, T, config, blocks), dtype=a.dtype)
    threads, smem = tile_launch(variant, T, config, ta, tb)
    v = 16 // a.itemsize  # elements in a 16-byte chunk: vector copies need aligned rows
    vec = all(x.data.ptr % 16 == 0 and ld % v == 0 for x, ld in ((a, lda), (b, ldb)))
    shared = blocks != tiles
    bm, bn = tile_configs(variant, T)[config][:2]
    grid = (blocks,) if shared else (math.ceil(N / bn), math.ceil(M / bm))
    scalar = a.dtype.type
    launch_tile(gemm_function(variant, T, ta, tb, 0 if bias is None else 1, config, shared), grid, (threads,),
                (i32(M), i32(N), i32(K), scalar(alpha), a, i32(lda), b, i32(ldb), scalar(beta),
                 c if c is not None else out, i32(N), out, i32(N), bias if bias is not None else out,
                 work if shared else out, i32(vec)), smem)
    return out


def simple_gemm(a, b, out, alpha, beta, c, bias, variant, T, M, N, K, ta, lda, tb, ldb):
    """naive, tiled and regblock, the first steps of the progression: a fixed block and tile each."""
    kernel = gemm_function(variant, T, ta, tb, 0 if bias is None else 1)
    if variant == "naive":
        grid, block = (math.ceil(N / 32), math.ceil(M / 8)), (32, 8)
    elif variant == "tiled":
        grid, block = (math.ceil(N / 32), math.ceil(M / 32)), (32, 32)
    else:  # regblock: 16 x 4 threads, a 64 x 16 tile of D
        grid, block = (math.ceil(N / 16), math.ceil(M / 64)), (16, 4)
    scalar = a.dtype.type
    kernel(grid, block, (i32(M), i32(N), i32(K), scalar(alpha), a, i32(lda), b, i32(ldb), scalar(beta),
                         c if c is not None else out, i32(N), out, i32(N), bias if bias is not None else out))
    return out


HALF_GEMMS = ("cublas", "wgmma")  # half_gemm's variants


def half_gemm(a, b, out, bias=None, variant: str = "cublas", config: str | None = None, splits: int | None = None,
              weight_gradient: bool = False):
    """out = a @ b on the tensor cores: a and b in one half precision (float16, or bfloat16 held in
    uint16), FP32 accumulation, out in that half precision or float32 (a weight gradient); with bias,
    out <- sigmoid(out + bias[:, None]). cuBLAS (bias and sigmoid a pass of their own), or perflab's
    wgmma GEMM (Hopper; bias and sigmoid its epilogue), with the choice tune() made for the shape
    unless config and splits are given. weight_gradient: out is one, which cuBLAS makes with its workspace
    in a half out too (--comm p2p's BF16 copy: docs/DECISIONS.md, D76, D81)."""
    if variant not in HALF_GEMMS:
        raise KernelError(f"the half-precision GEMMs are {HALF_GEMMS}, got {variant!r}")
    (M, K), (K2, N) = a.shape, b.shape
    if K != K2:
        raise KernelError(f"inner dimensions differ: a is {a.shape}, b is {b.shape}")
    if a.dtype != b.dtype or a.dtype.name not in HALF_CTYPES:
        raise KernelError(f"half_gemm takes a and b in one half precision (float16, or uint16 holding bfloat16), "
                          f"got {a.dtype} and {b.dtype}")
    if out.shape != (M, N) or not out.flags.c_contiguous or out.dtype not in (a.dtype, "float32"):
        raise KernelError(f"out must be a C-contiguous {a.dtype} or float32 array of shape {(M, N)}, got "
                          f"{out.dtype} {out.shape} (C-contiguous: {out.flags.c_contiguous})")
    if M == 0 or N == 0:
        return out
    if variant == "wgmma":
        if config is None:
            config, tuned = TUNED.get(tune_key(variant, a, b, out, storage(a, "a")[0], storage(b, "b")[0]), (None, None))
            splits = tuned if splits is None else splits
        return half_wgmma_gemm(a, b, out, bias, config, splits)
    ta, lda = storage(a, "a")
    tb, ldb = storage(b, "b")
    cublas_gemm_half(M, N, K, a, ta, lda, b, tb, ldb, out, workspace=out.dtype == "float32" or weight_gradient)
    if bias is not None:
        bias_sigmoid(out, bias)
    return out
