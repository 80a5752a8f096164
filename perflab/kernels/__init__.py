"""perflab's own CUDA kernels, compiled at first use with CuPy's RawModule (NVRTC).

One .cu file per GEMM variant (naive -> tiled -> regblock -> best, as SGEMM_CUDA shows the
progression; `tf32`, the tensor-core option, shares best's file) plus the fused elementwise
steps; `cublas` is cuBLAS itself, the yardstick. best and tf32 pick a tile config and a number
of blocks per shape (one a tile, split-K or stream-K; see gemm_best.cu): measured by tune()
where it has run, from the grid size otherwise.

    gemm(a, b, out=None, alpha=1, beta=0, c=None, bias=None, variant="best")
computes out = alpha * a @ b + beta * c, then sigmoid(out + bias[:, None]) when bias is given
(the forward layer's epilogue). a and b may be C- or F-ordered 2D views (a transposed view
is read in place, never copied); out is C-contiguous.
"""
from __future__ import annotations

import ctypes
import functools
import math
from pathlib import Path

import numpy as np

i32, u64 = np.int32, np.uint64  # kernel arguments must carry their C types (int, size_t)

KERNEL_DIR = Path(__file__).resolve().parent
GEMM_VARIANTS = ("naive", "tiled", "regblock", "best", "tf32", "cublas")
TILED_VARIANTS = ("best", "tf32")  # the cp.async tile kernels of gemm_best.cu, with configs and split-K
# Tile configs, candidates for tune(): best (BM, BN, BK, WM, WN, TM, TN, STAGES, KV, MINB);
# tf32 (BM, BN, BK, WM, WN, STAGES). Threads: (BM / WM) * (BN / WN) warps. KV = 0 ("xt"): the
# k-contiguous operands are stored transposed through registers. Each config below was picked
# on an H100 (scripts/gemm_sweep.py, 2026-11-23, after the blocks took one schedule for whole
# tiles, split-K and stream-K; chosen greedily for the geometric mean over the training shapes):
# 128x64 blocks of 8x8 thread tiles held to 3 blocks an SM (the backward GEMMs' long K, by
# stream-K), 64x128 for the large forward GEMMs a tile a block, and 64x64 blocks, mostly
# by stream-K, for the small batches. 128x128 of 256 threads, one block an SM, came last
# (2026-11-23, gemm_experiments/ab_two_ahead_128x128.csv and ab_barrier.csv): by stream-K
# over one wave it is the fastest at the forward GEMMs of B = 3200. The first config is the
# untuned choice for shapes that fill the chip. (A 64x64 config at BK = 32 was dropped on
# 2026-11-23: after the edge-tile and epilogue changes it was the fastest at none of the 18
# shapes, nor within a point of it: results/nvidia-h100-80gb-hbm3/gemm_experiments/
# ab_edge_zero_fill.csv.)
TILE_CONFIGS = {
    ("best", "float"): [(128, 64, 16, 64, 32, 8, 8, 3, 0, 3), (64, 128, 16, 32, 64, 8, 8, 3, 0, 2),
                        (64, 64, 16, 32, 64, 8, 8, 3, 0, 4), (64, 64, 16, 32, 32, 8, 4, 3, 0, 4),
                        (128, 128, 16, 64, 32, 8, 8, 3, 0, 1)],
    ("best", "double"): [(64, 64, 8, 32, 32, 4, 8, 3, 2, 1), (128, 64, 8, 32, 32, 4, 8, 3, 2, 1)],
    ("tf32", "float"): [(128, 128, 16, 64, 32, 3), (128, 64, 16, 64, 32, 3), (64, 64, 16, 32, 32, 4)],
}
# The numbers of blocks tune() tries: the tiles times each split-K factor (5 fits the backward
# GEMM dz1 X^T: its 784 columns make 13 64-wide tiles, and 13 x (H / 64) x 5 blocks fill whole
# waves of 132 SMs x 4 blocks), and stream-K's persistent grids of 1 to 4 blocks an SM, which
# deal the tiles' K steps out evenly whatever the tile count.
SPLITS = (1, 2, 3, 4, 5, 6, 8)
STREAM_K_BLOCKS_PER_SM = (1, 2, 3, 4)
FLAG_SLOTS = 1 << 16  # as in gemm_best.cu: the workspace's counters, one a block at most
MAX_ITERS = 2**31  # gemm_best.cu's schedule counts the tiles x K steps in an int


def config_name(variant: str, cfg: tuple) -> str:
    bm, bn, bk, wm, wn = cfg[:5]
    if variant == "tf32":
        return f"{bm}x{bn}x{bk}_w{wm}x{wn}_s{cfg[5]}"
    tm, tn, stages, kv, minb = cfg[5:]
    reads = "xt" if kv == 0 else f"k{kv}"  # KV = 0: k-contiguous tiles stored transposed
    return f"{bm}x{bn}x{bk}_w{wm}x{wn}_t{tm}x{tn}_s{stages}_{reads}_b{minb}"


@functools.lru_cache(maxsize=None)
def tile_configs(variant: str, T: str) -> dict[str, tuple]:
    """name -> config tuple (cached: every gemm() call of a tile variant looks here; do not modify)."""
    if (variant, T) not in TILE_CONFIGS:
        raise KernelError(f"the {variant} GEMM has no {T} version (tf32 takes float32 only)")
    return {config_name(variant, c): c for c in TILE_CONFIGS[(variant, T)]}


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


def template_args(variant: str, T: str, config: str | None) -> str:
    return "" if variant not in TILED_VARIANTS else "," + ",".join(map(str, tile_configs(variant, T)[config]))


@functools.lru_cache(maxsize=None)
def module(source: str, names: tuple):
    """Compile one .cu file for the given template instantiations (cached per process)."""
    cp = cupy()
    code = (KERNEL_DIR / source).read_text()
    return cp.RawModule(code=code, options=("-std=c++17", f"-I{KERNEL_DIR}"), name_expressions=names)


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


def modules() -> list[tuple[str, tuple]]:
    """(source, kernel names) of every module gemm_function() and elementwise() compile."""
    out = []
    for T in ("float", "double"):
        for variant in GEMM_VARIANTS[:-1]:
            if variant not in TILED_VARIANTS:
                out.append((source_file(variant), gemm_names(variant, T)))
            elif (variant, T) in TILE_CONFIGS:
                out += [(source_file(variant), gemm_names(variant, T, config)) for config in tile_configs(variant, T)]
        out.append(("elementwise.cu", elementwise_names(T)))
    return out


def instantiations() -> dict[str, tuple]:
    """Every kernel name each .cu file is compiled for, by file (CI compiles them with nvcc)."""
    out = {}
    for source, names in modules():
        out[source] = out.get(source, ()) + names
    return {k: tuple(dict.fromkeys(v)) for k, v in out.items()}


def compile_one(job: tuple[str, tuple]) -> str:
    source, names = job
    module(source, names).get_function(names[0])  # compiles (NVRTC) into CuPy's disk cache
    return source


def compile_all(processes: int | None = None, progress: bool = True) -> int:
    """Compile every module into CuPy's kernel cache in parallel processes: NVRTC compiles one
    module at a time, and a first run would otherwise wait minutes for them one by one.
    Returns how many modules there are."""
    import multiprocessing
    import os
    from concurrent.futures import ProcessPoolExecutor

    from tqdm.auto import tqdm
    jobs = modules()
    workers = processes or max(1, min(len(jobs), os.cpu_count() or 1))
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        for _ in tqdm(pool.map(compile_one, jobs), total=len(jobs), disable=not progress, desc="compiling kernels"):
            pass
    return len(jobs)


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


@functools.lru_cache(maxsize=None)
def tile_launch(variant: str, T: str, config: str, ta: bool, tb: bool) -> tuple[int, int]:
    """(threads a block, dynamic shared bytes) of a tile config, as k_loop in gemm_best.cu lays
    them out: STAGES slots of both operand tiles in storage order (or, KV = 0, both k-major),
    rows padded by 16 bytes."""
    c = tile_configs(variant, T)[config]
    bm, bn, bk, wm, wn = c[:5]
    stages = c[5 if variant == "tf32" else 7]
    xt = variant == "best" and c[8] == 0
    item = 4 if T == "float" else 8
    v = 16 // item
    a_elems = bk * (bm + v) if ta or xt else bm * (bk + v)
    b_elems = bn * (bk + v) if tb and not xt else bk * (bn + v)
    return (bm // wm) * (bn // wn) * 32, stages * item * (a_elems + b_elems)


TUNED: dict[tuple, tuple[str, int]] = {}  # (variant, T, M, N, K, ta, tb) -> (config, blocks), from tune()


def tile_grid(variant: str, T: str, config: str, M: int, N: int, K: int) -> tuple[int, int]:
    """(tiles, K steps a tile) of a config at this shape."""
    bm, bn, bk = tile_configs(variant, T)[config][:3]
    return math.ceil(M / bm) * math.ceil(N / bn), math.ceil(K / bk)


def workspace_elements(variant: str, T: str, config: str, blocks: int) -> int:
    """Workspace `blocks` blocks of a config need where they share tiles: the counters and two
    partial tiles a block (as gemm_best.cu lays it out)."""
    bm, bn = tile_configs(variant, T)[config][:2]
    return FLAG_SLOTS + 2 * blocks * bm * bn


def workspace(M: int, N: int, dtype):
    """A GEMM workspace for outputs up to M x N, big enough for every choice tile_choices offers
    there. Zeroed once here; the kernels leave its counters zero after each launch. Allocate it
    before any CUDA graph capture, and give each stream that runs GEMMs at once its own."""
    T = ctype(dtype)
    elements = max(workspace_elements(variant, T, config, blocks) for variant in TILED_VARIANTS
                   if (variant, T) in TILE_CONFIGS for config in tile_configs(variant, T)
                   for blocks in (tile_grid(variant, T, config, M, N, 1)[0] * max(SPLITS),
                                  multiprocessors() * max(STREAM_K_BLOCKS_PER_SM)))
    return cupy().zeros(elements, dtype=dtype)


def schedule_name(variant: str, T: str, config: str, M: int, N: int, K: int, blocks: int) -> str:
    """How `blocks` blocks share a config's tiles at this shape, in words for tables."""
    tiles = tile_grid(variant, T, config, M, N, K)[0]
    if blocks == tiles:
        return "a tile a block"
    if blocks % tiles == 0:
        return f"split-K {blocks // tiles}"
    return f"stream-K {blocks} blocks"


def check_blocks(variant: str, T: str, config: str, M: int, N: int, K: int, blocks: int) -> None:
    """Raise KernelError unless gemm_best.cu can run this many blocks of a config at this shape
    (a tile a block always: the counters and the int count concern shared tiles only)."""
    tiles, steps = tile_grid(variant, T, config, M, N, K)
    if blocks == tiles:
        return
    if not 1 <= blocks <= min(tiles * steps, FLAG_SLOTS):
        raise KernelError(f"blocks must be 1 to {min(tiles * steps, FLAG_SLOTS)} (the tiles x K steps of "
                          f"{config} at {M}x{K}x{N}, at most {FLAG_SLOTS}), got {blocks}")
    if tiles * steps >= MAX_ITERS:
        raise KernelError(f"blocks that share tiles need fewer than {MAX_ITERS} tile K steps in all; {config} "
                          f"at {M}x{K}x{N} has {tiles * steps}: take blocks={tiles} (a tile a block)")


def heuristic_tiles(variant: str, T: str, M: int, N: int, K: int, sms: int) -> tuple[str, int]:
    """Untuned choice, (config, blocks): the first config whose tiles fill the chip, a block a
    tile; when even the smallest leaves SMs idle, split K (keeping at least 256 of it per split)."""
    configs = tile_configs(variant, T)
    for name in configs:
        tiles = tile_grid(variant, T, name, M, N, K)[0]
        if tiles >= sms:
            return name, tiles
    name, c = min(configs.items(), key=lambda kv: kv[1][0] * kv[1][1])
    tiles = tile_grid(variant, T, name, M, N, K)[0]
    return name, tiles * max(1, min(math.ceil(2 * sms / tiles), K // 256, max(SPLITS)))


def tile_choices(variant: str, T: str, M: int, N: int, K: int, work=None, sms: int = 132):
    """The (config, blocks) pairs tune() tries: every config a block a tile; where the workspace
    holds their partial tiles, split-K keeping 64 or more of K a split, and stream-K grids of
    1 to 4 blocks an SM keeping 4 or more K steps a block."""
    for config in tile_configs(variant, T):
        tiles, steps = tile_grid(variant, T, config, M, N, K)
        yield config, tiles
        if work is None or tiles * steps >= MAX_ITERS:
            continue
        shared = [tiles * s for s in SPLITS[1:] if K // s >= 64]
        shared += [sms * b for b in STREAM_K_BLOCKS_PER_SM if tiles * steps >= 4 * sms * b]
        for blocks in dict.fromkeys(shared):
            if blocks != tiles and blocks <= FLAG_SLOTS and work.size >= workspace_elements(variant, T, config, blocks):
                yield config, blocks


def tune(a, b, out, variant: str = "best", work=None, repeats: int = 5) -> tuple[str, int]:
    """Time every tile config and number of blocks `variant` can take here (device time of
    CUDA-graph replays, median of `repeats`: timing launches one by one would add the host's
    launch overhead and bias small shapes against it) and remember the fastest for this shape,
    so later gemm() calls, also inside CUDA graph capture, use it. Outside capture only: it
    synchronizes. A shape tuned before returns its choice at once. `out` is overwritten; `work`
    (from workspace()) allows the choices that share tiles. The timings are bursts at the boost
    clock: where a GEMM runs long enough to meet the power cap, a choice that moves less data can
    win instead (bwd3 H=2048 B=12000: split-K 5 held 1% faster than the stream-K tune() picks,
    gemm_experiments/power_ab_holds.csv; `perflab bench hold` measures the held rate)."""
    from perflab.timing import time_graph_ms
    cp = cupy()
    T = ctype(a.dtype)
    (M, K), N = a.shape, b.shape[1]
    ta, tb = storage(a, "a")[0], storage(b, "b")[0]
    key = (variant, T, M, N, K, ta, tb)
    if key in TUNED:
        return TUNED[key]
    timings = {}
    for config, blocks in tile_choices(variant, T, M, N, K, work, multiprocessors()):
        run = functools.partial(gemm, a, b, out=out, variant=variant, config=config, blocks=blocks, work=work)
        timings[(config, blocks)] = time_graph_ms(cp, run, calls=5, repeats=repeats)
    TUNED[key] = min(timings, key=timings.get)
    return TUNED[key]


def gemm(a, b, out=None, alpha=1.0, beta=0.0, c=None, bias=None, variant: str = "best",
         config: str | None = None, blocks: int | None = None, work=None):
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
    if variant in TILED_VARIANTS:
        if config is None:
            config, auto_blocks = (TUNED.get((variant, T, M, N, K, ta, tb))
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
        launch_tile(gemm_function(variant, T, ta, tb, epi, config, shared), grid, (threads,),
                    (i32(M), i32(N), i32(K), scalar(alpha), a, i32(lda), b, i32(ldb), scalar(beta), cptr, i32(N),
                     out, i32(N), bptr, work if shared else out, i32(vec)), smem)
        return out
    kernel = gemm_function(variant, T, ta, tb, epi)
    if variant == "naive":
        grid, block = (math.ceil(N / 32), math.ceil(M / 8)), (32, 8)
    elif variant == "tiled":
        grid, block = (math.ceil(N / 32), math.ceil(M / 32)), (32, 32)
    else:  # regblock: 16 x 4 threads, a 64 x 16 tile of D
        grid, block = (math.ceil(N / 16), math.ceil(M / 64)), (16, 4)
    kernel(grid, block, (i32(M), i32(N), i32(K), scalar(alpha), a, i32(lda), b, i32(ldb), scalar(beta),
                         cptr, i32(N), out, i32(N), bptr))
    return out


# ------------------------------------------------- tile kernels, programmatic dependent launch
class LaunchAttribute(ctypes.Structure):  # cuda.h's CUlaunchAttribute: an id, padding to 8, a 64-byte union
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_int), ("value", ctypes.c_int * 16)]


class LaunchConfig(ctypes.Structure):  # cuda.h's CUlaunchConfig
    _fields_ = [("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3), ("shared_mem", ctypes.c_uint),
                ("stream", ctypes.c_void_p), ("attrs", ctypes.POINTER(LaunchAttribute)), ("num_attrs", ctypes.c_uint)]


@functools.lru_cache(maxsize=None)
def driver_launch():
    """(cuLaunchKernelEx, cuGetErrorName) through ctypes, or None where programmatic dependent
    launch is not to be had: a GPU before sm_90, or a driver without it."""
    if int(cupy().cuda.Device().compute_capability) < 90:
        return None
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
        launch, name = cuda.cuLaunchKernelEx, cuda.cuGetErrorName
    except (OSError, AttributeError):
        return None
    launch.argtypes = [ctypes.POINTER(LaunchConfig), ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p]
    name.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
    return launch, name


PROGRAMMATIC_STREAM_SERIALIZATION = 6  # CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
SCALAR_CTYPES = {np.int32: ctypes.c_int32, np.float32: ctypes.c_float, np.float64: ctypes.c_double}


def launch_tile(kernel, grid: tuple, block: tuple, args: tuple, shared_mem: int):
    """Launch a tile kernel so that the next one in the stream may start its blocks while this
    one finishes (each waits for the grid before it in gemm_best.cu): back-to-back GEMMs then
    lose no launch gap between them (1.2 us of 26 at fwd1 H=512 B=800 on the H100,
    results/nvidia-h100-80gb-hbm3/gemm_experiments/ab_pdl.csv). A plain launch where the GPU or
    driver lacks it."""
    found = driver_launch()
    if found is None:
        return kernel(grid, block, args, shared_mem=shared_mem)
    launch, name = found
    cp = cupy()
    attr = LaunchAttribute(id=PROGRAMMATIC_STREAM_SERIALIZATION)
    attr.value[0] = 1
    config = LaunchConfig((ctypes.c_uint * 3)(*grid, *(1,) * (3 - len(grid))),
                          (ctypes.c_uint * 3)(*block, *(1,) * (3 - len(block))), shared_mem,
                          cp.cuda.get_current_stream().ptr, ctypes.pointer(attr), 1)
    values = [ctypes.c_void_p(x.data.ptr) if isinstance(x, cp.ndarray) else SCALAR_CTYPES[type(x)](x) for x in args]
    params = (ctypes.c_void_p * len(values))(*(ctypes.cast(ctypes.pointer(v), ctypes.c_void_p) for v in values))
    status = launch(ctypes.byref(config), ctypes.c_void_p(kernel.kernel.ptr), params, None)
    if status != 0:
        text = ctypes.c_char_p()
        name(status, ctypes.byref(text))
        raise KernelError(f"cuLaunchKernelEx failed: {(text.value or b'?').decode()} (CUresult {status}; grid "
                          f"{grid}, block {block}, {shared_mem} bytes of shared memory)")


# ------------------------------------------------------------------ cuBLAS, capturable
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


# ------------------------------------------------------------------ fused elementwise steps
ELEMENTWISE = ("bias_sigmoid", "add_bias", "softmax_xent_grad", "sigmoid_backward", "row_sum", "sgd_update",
               "output_backward_reduce")
MAX_FUSED_CLASSES = 16  # output_layer and output_backward keep C values per thread in registers
CLASS_BOUNDS = (4, 10, 16)  # both are compiled for these C bounds (the smallest that fits is used)
BW_ROWS, BW_COLS = 2, 512  # output_backward: rows per warp (8 warps a block), columns a block, as in elementwise.cu
FW_ROWS = 128  # output_forward: rows a block sums over, as in elementwise.cu


def elementwise_names(T: str) -> tuple:
    return tuple(f"{k}<{T}>" for k in ELEMENTWISE) + tuple(f"{kernel}<{T},{c}>" for kernel in ("output_forward", "output_backward")
                                                           for c in CLASS_BOUNDS)


def elementwise(name: str, dtype):
    T = ctype(dtype)
    mod = module("elementwise.cu", elementwise_names(T))
    return mod.get_function(name if "<" in name else f"{name}<{T}>")


def grid_1d(n: int, per: int = 256) -> tuple:
    return (max(1, math.ceil(n / per)),)


def bias_sigmoid(z, b):
    """z <- sigmoid(z + b[:, None]) in place."""
    rows, cols = z.shape
    elementwise("bias_sigmoid", z.dtype)(grid_1d(z.size), (256,), (z, b, i32(rows), i32(cols)))
    return z


def add_bias(z, b):
    rows, cols = z.shape
    elementwise("add_bias", z.dtype)(grid_1d(z.size), (256,), (z, b, i32(rows), i32(cols)))
    return z


def softmax_xent_grad(z, b2, y, delta, norm, ce=None, groups=1):
    """delta <- (softmax(z + b2) - onehot(y)) / norm; ce[j] <- -log yhat[y_j, j] if ce is given.
    With groups > 1, z stacks that many partial sums of the logits, added (into the first) first."""
    C, B = z.shape[0] // groups, z.shape[1]
    elementwise("softmax_xent_grad", z.dtype)(
        grid_1d(B, 128), (128,), (z, b2, y, delta, delta if ce is None else ce, i32(ce is not None),
                                 i32(C), i32(B), z.dtype.type(1 / norm), i32(groups)))
    return delta


def sigmoid_backward(da, a):
    """da <- da * a * (1 - a) in place."""
    elementwise("sigmoid_backward", da.dtype)(grid_1d(da.size), (256,), (da, a, u64(da.size)))
    return da


def row_sum(x, out):
    rows, cols = x.shape
    elementwise("row_sum", x.dtype)((rows,), (256,), (x, out, i32(rows), i32(cols)))
    return out


def class_bound(C: int, kernel: str) -> int:
    if C > MAX_FUSED_CLASSES:
        raise KernelError(f"{kernel} takes at most {MAX_FUSED_CLASSES} classes, got C={C}")
    return next(c for c in CLASS_BOUNDS if c >= C)


def output_layer_partials(H: int, n: int, C: int) -> int:
    """Elements of the workspace output_layer needs: one C x n partial sum per block of FW_ROWS rows."""
    return math.ceil(H / FW_ROWS) * C * n


def output_layer(W2, b1, b2, z1, y, delta, norm, part, ce=None):
    """z1 <- a1 = sigmoid(z1 + b1) in place, and delta <- (softmax(W2 a1 + b2) - onehot(y)) / norm, with
    the C x H by H x n GEMM done in the same pass over z1 (C <= 16; part: output_layer_partials
    elements); ce[j] <- -log yhat[y_j, j] if ce is given."""
    C, H = W2.shape
    n = z1.shape[1]
    bound = class_bound(C, "output_layer")
    groups = math.ceil(H / FW_ROWS)
    if part.size < groups * C * n:
        raise KernelError(f"output_layer needs a workspace of {groups * C * n} elements, got {part.size}")
    elementwise(f"output_forward<{ctype(z1.dtype)},{bound}>", z1.dtype)(
        (max(1, math.ceil(n / 32)), groups), (256,), (W2, b1, z1, part, i32(C), i32(H), i32(n)))
    return softmax_xent_grad(part[:groups * C * n].reshape(groups * C, n), b2, y, delta, norm, ce, groups=groups)


def output_backward_partials(H: int, n: int, C: int) -> int:
    """Elements of the workspace output_backward needs for an H x n hidden layer and C classes."""
    return math.ceil(n / BW_COLS) * (C + 1) * H


def output_backward(W2, delta, a1, dz1, dW2, db1, part):
    """dz1 <- (W2^T delta) o a1 o (1 - a1), dW2 <- delta a1^T, db1 <- row sums of dz1: one pass
    over a1 and a fixed-order reduction (C <= 16; part: output_backward_partials elements)."""
    C, H = W2.shape
    n = a1.shape[1]
    bound = class_bound(C, "output_backward")
    nb = math.ceil(n / BW_COLS)
    if part.size < nb * (C + 1) * H:
        raise KernelError(f"output_backward needs a workspace of {nb * (C + 1) * H} elements, got {part.size}")
    elementwise(f"output_backward<{ctype(a1.dtype)},{bound}>", a1.dtype)(
        (nb, math.ceil(H / (8 * BW_ROWS))), (256,),
        (W2, delta, a1, dz1, part, i32(C), i32(H), i32(n)))
    elementwise("output_backward_reduce", a1.dtype)(grid_1d((C + 1) * H), (256,),
                                                    (part, dW2, db1, i32(C), i32(H), i32(nb)))
    return dz1


def sgd_update(params, grads, learning_rate, ends, regs):
    """params <- params - lr * (grads + regs[segment] * params), one launch for every parameter."""
    elementwise("sgd_update", params.dtype)(grid_1d(params.size), (256,),
                                            (params, grads, u64(params.size), params.dtype.type(learning_rate),
                                             ends, regs, i32(ends.size)))
    return params
