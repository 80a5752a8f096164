"""TF32 (`wgmma`) and 3xTF32 (`x3tf32`) GEMMs on Hopper's warpgroup MMA (gemm_wgmma.cu).

The kernel reads two K-major operands through TMA tensor maps: A (M x K) and Bt = b^T (N x K), each
row-major with 16-byte aligned rows. An operand stored so is read in place; any other (b as the
trainer's forward GEMM 1 holds it is; a transposed view or an odd K is not) is first copied into
a K-major buffer of this module's. x3tf32 writes an operand's TF32 big and small parts into such
buffers in one pass (copy_k_major: tiled, so that a transposed view is read coalesced), or, for an
operand read in place, only its small parts (small_part): the operand is its own big part, since
the tensor cores read an FP32 number's TF32 truncation. An array declared constant() (the
trainer's resident images) is prepared once instead: its K-major copies and splits, in both
orientations, are kept, and any slice of it is read from them. The buffers, the tensor maps and
the split-K workspace are made on first use and kept per shape: a GEMM must run once outside CUDA
graph capture before it is captured (the trainers and benchmarks warm up first).
"""
from __future__ import annotations

import ctypes
import functools
import math

import numpy as np

from perflab.kernels.build import (
    CLUSTER_DIMENSION,
    KernelError,
    cupy,
    i32,
    max_active_clusters,
    module,
    multiprocessors,
    prepared_launch_ex,
)

WGMMA_VARIANTS = ("wgmma", "x3tf32")
BK = 32  # k of a shared-memory stage: one 128-byte swizzle row of TF32
# (consumer warpgroups, BN, stages, CTAs a cluster) per kernel, X3 or not; tune() tries them all, the
# first is the default (the fastest at the H100's training shapes, experiments/wgmma/logs/run6). A
# CTA's shared memory stays within 227 KiB; an X3 stage holds both parts. Clusters of 2 share B's
# tile through TMA multicast (gemm_wgmma.cu).
CONFIGS = {False: ((2, 256, 4, 1), (2, 256, 4, 2), (2, 192, 5, 1), (2, 128, 6, 1), (2, 128, 6, 2), (2, 128, 4, 1),
                   (2, 64, 8, 1)),
           True: ((2, 128, 3, 1), (2, 128, 3, 2), (1, 128, 4, 1), (2, 64, 4, 1))}
SPLITS = (1, 2, 4)
MIN_SPLIT_K = 256  # of K a split keeps, at least


def config_name(config: tuple) -> str:
    return "wg{}-n{}-s{}".format(*config) + (f"-c{config[3]}" if config[3] > 1 else "")


def parse_config(name: str, x3: bool) -> tuple:
    for config in CONFIGS[x3]:
        if config_name(config) == name:
            return config
    raise KernelError(f"{'x3tf32' if x3 else 'wgmma'} has no tile config {name!r}: "
                      f"the configs are {[config_name(c) for c in CONFIGS[x3]]}")


def smem_bytes(config: tuple, x3: bool) -> int:
    """Shared memory of a CTA: the stages, their two mbarriers each, 1024 to align the base."""
    wgs, bn, stages, _ = config
    return stages * (64 * wgs + bn) * BK * 4 * (2 if x3 else 1) + 16 * stages + 1024


def kernel_name(x3: bool, config: tuple) -> str:
    return "gemm_wgmma<{},{},{},{},{}>".format(*config[:3], str(x3).lower(), config[3])


def wgmma_names() -> tuple:
    return (tuple(kernel_name(x3, c) for x3 in (False, True) for c in CONFIGS[x3])
            + ("wgmma_splitk_sum", "k_major_copy<false>", "k_major_copy<true>", "small_part"))


def plan(M: int, N: int, K: int, config: tuple, splits: int, sms: int) -> tuple[int, int, int]:
    """(k a split, splits, CTAs) of a launch: k a split rounded up to whole 32-k stages, and a
    persistent grid of at most one CTA a multiprocessor (`sms`: as many as run at once), in whole
    clusters, each of which takes `cluster` M-adjacent tiles at a time."""
    cluster = config[3]
    kps = math.ceil(math.ceil(K / splits) / BK) * BK
    z = math.ceil(K / kps)
    tiles = math.ceil(N / config[1]) * math.ceil(M / (64 * config[0] * cluster)) * z
    return kps, z, min(tiles, sms // cluster) * cluster


def heuristic(M: int, N: int, K: int, x3: bool, sms: int) -> tuple[tuple, int]:
    """Untuned: the first config, split-K into the fewest splits that give every multiprocessor a
    tile, keeping MIN_SPLIT_K of K a split."""
    config = CONFIGS[x3][0]
    tiles = math.ceil(N / config[1]) * math.ceil(M / (64 * config[0]))
    for splits in SPLITS:
        if tiles * splits >= sms or K // (2 * splits) < MIN_SPLIT_K:
            return config, splits
    return config, SPLITS[-1]


def choices(M: int, N: int, K: int, x3: bool):
    """The (config name, splits) pairs tune() times."""
    for config in CONFIGS[x3]:
        for splits in SPLITS:
            if splits == 1 or K // splits >= MIN_SPLIT_K:
                yield config_name(config), splits


@functools.lru_cache(maxsize=None)
def kernel(x3: bool, config: tuple):
    check_device()
    mod = module("gemm_wgmma.cu", wgmma_names())
    fn = mod.get_function(kernel_name(x3, config))
    fn.max_dynamic_shared_size_bytes = smem_bytes(config, x3)
    return fn


@functools.lru_cache(maxsize=None)
def helper(name: str):
    """One of gemm_wgmma.cu's helper kernels (the split-K sum, the K-major copies, the small parts), cached."""
    return module("gemm_wgmma.cu", wgmma_names()).get_function(name)


def splitk_sum():
    return helper("wgmma_splitk_sum")


def later(fn, grid: tuple, block: tuple, args: tuple, shared_mem: int = 0):
    """A CuPy kernel launch to run later, on the stream current then: arrays are passed by address,
    so that kept launches (LAUNCHES) hold no caller's array alive."""
    cp = cupy()
    args = tuple(np.uint64(v.data.ptr) if isinstance(v, cp.ndarray) else v for v in args)
    return functools.partial(fn, grid, block, args, shared_mem=shared_mem)


def copy_k_major(x, big, small=None):
    """big = x (rows x K, any strides), or with small given x's TF32 big and small parts, into
    K-major big and small (rows x K, unit column stride): tiled through shared memory, so that a
    transposed x is read coalesced (gemm_wgmma.cu's k_major_copy)."""
    for launch in copy_k_major_launches(x, big, small):
        launch()


def copy_k_major_launches(x, big, small=None) -> list:
    rows, K = x.shape
    if x.dtype != cupy().float32 or big.shape != x.shape or big.strides[1] != 4 or (
            small is not None and small.strides != big.strides):
        raise KernelError(f"copy_k_major copies a float32 {x.shape} array into K-major float32 parts of its shape, "
                          f"got {x.dtype} into {big.shape} with strides {big.strides}")
    if x.size == 0:
        return []
    fn = helper(f"k_major_copy<{str(small is not None).lower()}>")
    return [later(fn, (math.ceil(rows / 32), math.ceil(K / 32)), (256,),
                  (x, np.int64(x.strides[0] // 4), np.int64(x.strides[1] // 4), i32(rows), i32(K), big,
                   big if small is None else small, i32(big.strides[0] // 4)))]


def small_part(x, small):
    """small = x's TF32 small part round(x - trunc(x)), x read in place (k_major_in_place): x itself
    is then its big part, since the tensor cores read an FP32 operand's TF32 truncation
    (gemm_wgmma.cu's small_part)."""
    for launch in small_part_launches(x, small):
        launch()


def small_part_launches(x, small) -> list:
    rows, K = x.shape
    if not k_major_in_place(x) or small.shape != x.shape or small.strides[1] != 4 or small.strides[0] % 16:
        raise KernelError(f"small_part splits a K-major {x.shape} array read in place into a K-major buffer of its "
                          f"shape, got strides {x.strides} into {small.shape} with strides {small.strides}")
    quads = rows * math.ceil(K / 4)
    if not quads:
        return []
    return [later(helper("small_part"), (min(math.ceil(quads / 256), 16 * multiprocessors()),), (256,),
                  (x, i32(rows), i32(K), np.int64(x.strides[0] // 4), small, np.int64(small.strides[0] // 4)))]


def hopper() -> bool:
    return int(cupy().cuda.Device().compute_capability) == 90


@functools.lru_cache(maxsize=None)
def check_device():
    if not hopper():
        cc = int(cupy().cuda.Device().compute_capability)
        raise KernelError(f"the wgmma and x3tf32 GEMMs need a Hopper GPU (sm_90a: H100, H200), this one is sm_{cc}: "
                          f"use --gemm tf32 or cublas-x3tf32 there")


def tensor_map_fields(rows: int, K: int, row_bytes: int, box_rows: int) -> dict:
    """cuTensorMapEncodeTiled's arguments for a K-major operand (rows x K, row_bytes apart) read
    in boxes of 32 k x box_rows: FP32, 128-byte swizzle (the layout wgmma reads), zeros past the
    edges. The copy engine wants 16-byte aligned rows."""
    if row_bytes % 16:
        raise KernelError(f"a TMA operand's rows must be 16-byte aligned, got {row_bytes} bytes apart")
    return {"dtype": 7, "rank": 2, "dims": (K, rows), "strides": (row_bytes,), "box": (BK, box_rows),
            "element_strides": (1, 1), "interleave": 0, "swizzle": 3, "l2_promotion": 2, "oob_fill": 0}


@functools.lru_cache(maxsize=None)
def encode_tiled():
    fn = ctypes.CDLL("libcuda.so.1").cuTensorMapEncodeTiled
    fn.restype = ctypes.c_int
    return fn


MAPS: dict = {}  # (address, rows, K, row bytes, box rows) -> the tensor map in device memory


def tensor_map(x, K: int, box_rows: int):
    """The device-memory tensor map of K-major x (rows x >= K, 16-byte aligned rows), made once per
    address and shape and kept (until release()), since a captured graph may hold it."""
    rows, row_bytes = x.shape[0], x.strides[0]
    key = (x.data.ptr, rows, K, row_bytes, box_rows)
    if key not in MAPS:
        cp = cupy()
        no_capture("a tensor map")
        f = tensor_map_fields(rows, K, row_bytes, box_rows)
        raw = (ctypes.c_uint64 * 16)()
        status = encode_tiled()(ctypes.byref(raw), f["dtype"], f["rank"], ctypes.c_void_p(x.data.ptr),
                                (ctypes.c_uint64 * 2)(*f["dims"]), (ctypes.c_uint64 * 1)(*f["strides"]),
                                (ctypes.c_uint32 * 2)(*f["box"]), (ctypes.c_uint32 * 2)(*f["element_strides"]),
                                f["interleave"], f["swizzle"], f["l2_promotion"], f["oob_fill"])
        if status != 0:
            raise KernelError(f"cuTensorMapEncodeTiled failed (CUresult {status}) for a {rows} x {K} operand, "
                              f"rows {row_bytes} bytes apart, boxes of {BK} x {box_rows}")
        MAPS[key] = cp.asarray(np.frombuffer(bytes(raw), np.uint8))
    return MAPS[key]


def no_capture(what: str):
    if cupy().cuda.get_current_stream().is_capturing():
        raise KernelError(f"the wgmma GEMMs make {what} on first use, which CUDA graph capture does not allow: "
                          f"run the GEMM once outside capture first")


BUFFERS: dict = {}  # (role, rows, K, parts) -> K-major buffers, ("split-k", ...) -> workspaces


def k_major_zeros(rows: int, K: int, parts: int) -> list:
    """`parts` zeroed K-major float32 arrays (rows x K, rows padded to 16 bytes for the copy engine)."""
    padded = math.ceil(K / 4) * 4
    return [cupy().zeros((rows, padded), cupy().float32)[:, :K] for _ in range(parts)]


def buffers(role: str, rows: int, K: int, parts: int) -> list:
    """`parts` K-major buffers (k_major_zeros), kept per role and shape."""
    key = (role, rows, K, parts)
    if key not in BUFFERS:
        no_capture("K-major operand buffers")
        BUFFERS[key] = k_major_zeros(rows, K, parts)
    return BUFFERS[key]


CONSTANTS: list = []  # [array, {(orientation, x3): prepared K-major arrays}, users], from constant()


def constant(x) -> None:
    """Declare x (2D, C- or F-contiguous float32) unchanging while it is used: slices of it are
    then read from copies and splits made once, not made anew each GEMM. Counted: each constant()
    is matched by one forget(), and the kept forms go with the last."""
    if x.ndim != 2 or not (x.flags.c_contiguous or x.flags.f_contiguous):
        raise KernelError(f"a constant operand is a C- or F-contiguous 2D array, got strides {x.strides} for {x.shape}")
    for entry in CONSTANTS:
        if entry[0] is x:
            entry[2] += 1
            return
    CONSTANTS.append([x, {}, 1])
    LAUNCHES.clear()  # a kept launch may copy what a slice of x now reads from its kept forms


def release() -> None:
    """Drop every kept buffer, tensor map and constant: for a measurement between its points, once
    no captured graph (and no trainer) reads them."""
    BUFFERS.clear()
    MAPS.clear()
    CONSTANTS.clear()
    LAUNCHES.clear()


def forget(x) -> None:
    """One user of a constant is done with it; its kept forms go with the last (once no captured
    graph reads them)."""
    for entry in CONSTANTS:
        if entry[0] is x:
            entry[2] -= 1
    if any(c[2] <= 0 for c in CONSTANTS):
        CONSTANTS[:] = [c for c in CONSTANTS if c[2] > 0]
        LAUNCHES.clear()  # kept launches may read the kept forms that go now


def slice_of(v, x):
    """(r0, c0, transposed) where v is x[r0:r0 + h, c0:c0 + w] (transposed: its transpose), else None."""
    item = x.itemsize
    offset = v.data.ptr - x.data.ptr
    if x.size == 0 or not 0 <= offset < x.nbytes or offset % item:
        return None
    major = max(x.strides)  # x is contiguous: the index along its larger stride, then the other
    outer, inner = divmod(offset, major)
    r0, c0 = (outer, inner // item) if x.strides[0] == major else (inner // item, outer)
    strides = tuple(v.strides[i] if v.shape[i] > 1 else x.strides[i] for i in range(2))
    flipped = tuple(v.strides[1 - i] if v.shape[1 - i] > 1 else x.strides[i] for i in range(2))
    transposed = strides != x.strides
    h, w = (v.shape[1], v.shape[0]) if transposed else v.shape
    if (flipped if transposed else strides) != x.strides or r0 + h > x.shape[0] or c0 + w > x.shape[1]:
        return None
    return r0, c0, transposed


def prepared(v, x3: bool):
    """v (rows x K) read from a constant's kept K-major forms (made on first use), or None where v
    is no slice of a constant."""
    for x, kept, _ in list(CONSTANTS):  # a copy: a trainer's __del__ may forget() its images mid-loop
        where = slice_of(v, x)
        if where is None:
            continue
        r0, c0, transposed = where
        if (transposed, x3) not in kept:
            no_capture("a constant's K-major forms")
            # K runs along x's columns (v a slice) or its rows (v a transposed slice): stored so, padded
            full = x.T if transposed else x
            parts = k_major_zeros(*full.shape, 1 + x3)
            copy_k_major(full, *parts)
            kept[(transposed, x3)] = parts
        rows, K = v.shape
        i, j = (c0, r0) if transposed else (r0, c0)
        return tuple(p[i:i + rows, j:j + K] for p in kept[(transposed, x3)])
    return None


def k_major_in_place(x) -> bool:
    """Whether the copy engine can read x (rows x K) as it is: K contiguous, rows 16-byte aligned."""
    return (x.strides[1] == 4 or x.shape[1] == 1) and x.strides[0] % 16 == 0 and x.data.ptr % 16 == 0


def k_major(x, role: str, x3: bool, launches: list) -> tuple:
    """x (rows x K, any strides) as the kernel reads it: (big, small) K-major parts for x3 (x itself
    its big part where it is K-major with 16-byte aligned rows), else (x, x) where x is so, or
    (copy, copy); the copies' launches are appended to `launches`. A slice of a constant() is read
    from its kept forms where their rows start 16-byte aligned."""
    rows, K = x.shape
    direct = k_major_in_place(x)
    kept = None if direct and not x3 else prepared(x, x3)
    if kept is not None and all(p.data.ptr % 16 == 0 for p in kept):
        return kept if x3 else (kept[0], kept[0])
    if x3 and direct:  # x is its own big part: only the small one is written
        (small,) = buffers(role + " small", rows, K, 1)
        launches += small_part_launches(x, small)
        return x, small
    if x3:
        big, small = buffers(role, rows, K, 2)
        launches += copy_k_major_launches(x, big, small)
        return big, small
    if direct:
        return x, x
    (copy,) = buffers(role, rows, K, 1)
    launches += copy_k_major_launches(x, copy)
    return copy, copy


def workspace(z: int, M: int, N: int):
    key = ("split-k", z, M, N)
    if key not in BUFFERS:
        no_capture("a split-K workspace")
        BUFFERS[key] = cupy().empty(z * M * N, cupy().float32)
    return BUFFERS[key]


LAUNCHES: dict = {}  # a call's operands (address, shape, strides, dtype), scalars and stream -> its launches


def layout(x):
    return None if x is None else (x.data.ptr, x.shape, x.strides, x.dtype.char)


def wgmma_gemm(a, b, out, alpha: float, beta: float, x3: bool, config: str | None = None, splits: int | None = None,
               a_small=None):
    """out = alpha a b + beta out (a: M x K, b: K x N, float32, any storage; out C-contiguous).
    a_small (x3): a is split already, a its TF32 big parts and a_small the small ones, both K-major.
    The first call with these operands, scalars and stream works its launches out (gemm_launches)
    and keeps them; a later one only launches: working them out took 70-110 us of the host's time
    a GEMM, over half an eager step's (experiments/predictor/logs/eager_profile_cached_h100.jsonl)."""
    key = (layout(a), layout(b), layout(out), layout(a_small), float(alpha), float(beta), x3, config, splits,
           cupy().cuda.get_current_stream().ptr)
    launches = LAUNCHES.get(key)
    if launches is None:
        launches = gemm_launches(a, b, out, alpha, beta, x3, config, splits, a_small)
        LAUNCHES[key] = launches
    for launch in launches:
        launch()
    return out


def gemm_launches(a, b, out, alpha: float, beta: float, x3: bool, config: str | None, splits: int | None,
                  a_small) -> list:
    """wgmma_gemm's launches in order: the operands' K-major copies or splits, the GEMM, the split-K sum."""
    cp = cupy()
    name = "x3tf32" if x3 else "wgmma"
    if a.dtype != cp.float32 or b.dtype != cp.float32:
        raise KernelError(f"{name} takes float32 operands (TF32 tensor cores), got {a.dtype} and {b.dtype}")
    (M, K), N = a.shape, b.shape[1]
    sms = multiprocessors()
    if config is None:
        cfg, auto = heuristic(M, N, K, x3, sms)
        splits = auto if splits is None else splits
    else:
        cfg = parse_config(config, x3)
    if splits not in SPLITS:
        raise KernelError(f"{name} splits K into one of {SPLITS} parts, got {splits}")
    launches = []
    if a_small is None:
        A, As = k_major(a, "a", x3, launches)
    elif a_small.shape != a.shape:
        raise KernelError(f"a_small holds a's small parts: it must be shaped as a {a.shape}, got {a_small.shape}")
    elif k_major_in_place(a) and k_major_in_place(a_small):
        A, As = a, a_small
    else:  # rows the copy engine cannot read in place (a batch not a multiple of 4): K-major copies
        A, As = buffers("a", M, K, 2)
        launches += copy_k_major_launches(a, A) + copy_k_major_launches(a_small, As)
    Bt, Bs = k_major(b.T, "b", x3, launches)
    wgs, bn, _, cluster = cfg
    fn, threads, smem = kernel(x3, cfg), 128 * (wgs + 1), smem_bytes(cfg, x3)
    if cluster > 1:  # a grid of clusters that all run at once
        sms = cluster * max_active_clusters(fn, threads, smem, cluster)
    kps, z, grid = plan(M, N, K, cfg, splits, sms)
    target = out if z == 1 else workspace(z, M, N)
    args = (i32(M), i32(N), i32(K), i32(kps), cp.float32(alpha), tensor_map(A, K, 64 * wgs), tensor_map(As, K, 64 * wgs),
            tensor_map(Bt, K, bn // cluster), tensor_map(Bs, K, bn // cluster), cp.float32(beta), target, i32(N))
    if cluster > 1:
        launches.append(prepared_launch_ex(fn, (grid,), (threads,), args, smem, {CLUSTER_DIMENSION: (cluster, 1, 1)}))
    else:
        launches.append(later(fn, (grid,), (threads,), args, smem))
    if z > 1:
        launches.append(later(splitk_sum(), (math.ceil(M * N / 256),), (256,),
                              (i32(M), i32(N), i32(z), target, cp.float32(beta), out, i32(N))))
    return launches
