"""TF32 (`wgmma`), 3xTF32 (`x3tf32`), BF16 and FP16 (`half_wgmma_gemm`) GEMMs on Hopper's warpgroup MMA
(gemm_wgmma.cu).

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

The half-precision GEMMs read 16-bit operands K-major or MN-major, as wgmma allows them: every layout
a training step holds is read in place (a copy only where rows are not 16-byte aligned), and the
forward layer's bias and sigmoid are the GEMM's epilogue.
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
    pointer,
    prepared_launch_ex,
)

WGMMA_VARIANTS = ("wgmma", "x3tf32")
KINDS = ("wgmma", "x3tf32", "half")  # the kernel's families: TF32, 3xTF32, BF16/FP16 (each its configs)
ROW = 128  # bytes of K a shared-memory stage holds of each operand row: one 128-byte swizzle row
BK = ROW // 4  # k of a TF32 stage (a 16-bit stage holds 64)
# (consumer warpgroups, BN, stages, CTAs a cluster, blocks of 64 rows a warpgroup, ways) per kind; tune() tries
# them all, the first is the
# default (TF32: the fastest at the H100's training shapes, docs/DECISIONS.md, D9). A CTA's
# shared memory stays within 227 KiB; an X3 stage holds both parts. Clusters of 2 (and for the half
# kind's 64 x 128 tile 4, as cuBLAS's kernels at the first layer's weight gradient have) share B's
# tile through TMA multicast (gemm_wgmma.cu). Each half config is compiled for both half precisions and
# the layouts it reads: B MN-major only where the B part a CTA loads is whole boxes of 64 rows (BN =
# 112, 784 / 7, the first layer's weight gradient's N, is read K-major: its operands are so). Two
# blocks of rows a warpgroup (a 256 x 192 tile: 110 FLOP a byte loaded where 128 x 256 does 85) take
# registers the producer gives up (setmaxnreg). Two ways: pairs of warpgroups share a 64-row tile and take its
# k-stages in turn (gemm_wgmma.cu's KW), for the weight gradients' small C and long K.
CONFIGS = {"wgmma": ((2, 256, 4, 1, 1, 1), (2, 256, 4, 2, 1, 1), (2, 192, 5, 1, 1, 1), (2, 128, 6, 1, 1, 1), (2, 128, 6, 2, 1, 1),
                     (2, 128, 4, 1, 1, 1), (2, 64, 8, 1, 1, 1)),
           "x3tf32": ((2, 128, 3, 1, 1, 1), (2, 128, 3, 2, 1, 1), (1, 128, 4, 1, 1, 1), (2, 64, 4, 1, 1, 1)),
           "half": ((2, 256, 4, 1, 1, 1), (2, 256, 4, 2, 1, 1), (2, 128, 6, 1, 1, 1), (2, 128, 6, 2, 1, 1), (1, 128, 8, 1, 1, 1),
                    (2, 192, 4, 1, 2, 1), (1, 112, 9, 2, 1, 1), (2, 112, 6, 2, 1, 1), (1, 128, 8, 4, 1, 1),
                    (2, 112, 8, 1, 1, 2), (2, 112, 8, 2, 1, 2), (2, 128, 8, 1, 1, 2), (2, 128, 8, 4, 1, 2),
                    (2, 64, 12, 1, 1, 2))}
HALF_TAGS = ("bf16", "fp16")  # the kernels' names for bfloat16 and float16 (elementwise.HALF_CTYPES' values)
TENSOR_MAP_TYPES = {"float32": 7, "uint16": 9, "float16": 6}  # CUtensorMapDataType: FLOAT32, BFLOAT16, FLOAT16
SPLITS = (1, 2, 4)
M_FASTEST = True  # tiles walk M first where M has fewer of them than N (gemm_wgmma.cu's m_fastest)
MIN_SPLIT_K = 256  # of K a split keeps, at least


def config_name(config: tuple) -> str:
    return ("wg{}-n{}-s{}".format(*config) + (f"-c{config[3]}" if config[3] > 1 else "")
            + (f"-r{config[4]}" if config[4] > 1 else "") + (f"-k{config[5]}" if config[5] > 1 else ""))


def kind_of(x3: bool) -> str:
    return "x3tf32" if x3 else "wgmma"


def parse_config(name: str, kind: str) -> tuple:
    for config in CONFIGS[kind]:
        if config_name(config) == name:
            return config
    raise KernelError(f"{kind} has no tile config {name!r}: the configs are {[config_name(c) for c in CONFIGS[kind]]}")


STAGING_ROW = 144  # bytes of a row of a half C's staging area: 64 16-bit elements and 16 of padding
STAGING_ROWS = 16  # rows of it a consumer warp (gemm_wgmma.cu's store_staged)


def smem_bytes(config: tuple, kind: str) -> int:
    """Shared memory of a CTA: the stages, their two mbarriers each, 1024 to align the base, and one area
    after them: for a half kind with one block of rows a warpgroup, where its 16-bit C is stored
    through; with two ways, where they hand each other half the tile's columns (FP32), first."""
    wgs, bn, stages, rows, ways = config[0], config[1], config[2], config[4], config[5]
    staging = 4 * wgs * STAGING_ROWS * STAGING_ROW if kind == "half" and rows == 1 else 0
    swap = 4 * 64 * bn if ways > 1 else 0   # two ways: one pair of warpgroups, 64 rows of FP32
    return stages * (tile_rows(config) + bn) * ROW * (2 if kind == "x3tf32" else 1) + 16 * stages + 1024 + max(staging, swap)


def tile_rows(config: tuple) -> int:
    """BM: the rows of A a CTA's tile holds (64 a block, R blocks a consumer warpgroup, its ways on the same rows)."""
    return 64 * config[0] // config[5] * config[4]


def kernel_name(config: tuple, kind: str, tag: str = "float", ta: bool = False, tb: bool = False,
                out: str = "float") -> str:
    """The instantiation: element type (float for TF32, a HALF_TAG), output type (float, or the half
    tag), config, X3, and (16-bit) whether A and Bt are MN-major."""
    wgs, bn, stages, cluster, rows, ways = config
    flags = (str(kind == "x3tf32").lower(), cluster, str(ta).lower(), str(tb).lower())
    return f"gemm_wgmma<{tag},{out},{wgs},{bn},{stages},{flags[0]},{flags[1]},{flags[2]},{flags[3]},{rows},{ways}>"


HELPERS = tuple(f"wgmma_splitk_sum<{t}>" for t in ("float",) + HALF_TAGS) + (
    "k_major_copy<float,false>", "k_major_copy<float,true>", "k_major_copy<unsigned short,false>", "small_part")


def reads_b_mn_major(config: tuple) -> bool:
    """Whether a half config reads B MN-major in place: the part of B's tile a CTA loads is whole boxes
    of 64 rows. Otherwise an MN-major B is copied K-major first."""
    return (config[1] // config[3]) % 64 == 0


def wgmma_names() -> tuple:
    """Every GEMM instantiation kernel() may compile (the helpers are HELPERS)."""
    tf32 = tuple(kernel_name(c, kind) for kind in WGMMA_VARIANTS for c in CONFIGS[kind])
    half = tuple(kernel_name(c, "half", tag, ta, tb, out) for tag in HALF_TAGS for c in CONFIGS["half"]
                 for ta in (False, True) for tb in (False, True) if reads_b_mn_major(c) or not tb
                 for out in ("float", tag))
    return tf32 + half


def stage_k(itemsize: int) -> int:
    """k of a shared-memory stage: 128 bytes of it."""
    return ROW // itemsize


def plan(M: int, N: int, K: int, config: tuple, splits: int, sms: int, bk: int = BK) -> tuple[int, int, int]:
    """(k a split, splits, CTAs) of a launch: k a split rounded up to whole stages of `bk`, and a
    persistent grid of at most one CTA a multiprocessor (`sms`: as many as run at once), in whole
    clusters, each of which takes `cluster` M-adjacent tiles at a time."""
    cluster = config[3]
    kps, z = split_k(K, splits, bk)
    tiles = math.ceil(N / config[1]) * math.ceil(M / (tile_rows(config) * cluster)) * z
    return kps, z, min(tiles, sms // cluster) * cluster


def split_k(K: int, splits: int, bk: int = BK) -> tuple[int, int]:
    """(k a split, splits that hold any): K in `splits` parts rounded up to whole stages of `bk`."""
    kps = math.ceil(math.ceil(K / splits) / bk) * bk
    return kps, math.ceil(K / kps)


def heuristic(M: int, N: int, K: int, kind: str, sms: int) -> tuple[tuple, int]:
    """Untuned: the first config, split-K into the fewest splits that give every multiprocessor a
    tile, keeping MIN_SPLIT_K of K a split."""
    config = CONFIGS[kind][0]
    tiles = math.ceil(N / config[1]) * math.ceil(M / tile_rows(config))
    for splits in SPLITS:
        if tiles * splits >= sms or K // (2 * splits) < MIN_SPLIT_K:
            return config, splits
    return config, SPLITS[-1]


def choices(M: int, N: int, K: int, kind: str):
    """The (config name, splits) pairs tune() times."""
    for config in CONFIGS[kind]:
        for splits in SPLITS:
            if splits == 1 or K // splits >= MIN_SPLIT_K:
                yield config_name(config), splits


@functools.lru_cache(maxsize=None)
def kernel(config: tuple, kind: str, tag: str = "float", ta: bool = False, tb: bool = False, out: str = "float"):
    """One instantiation, compiled alone on first use (all of them at once took NVRTC minutes)."""
    check_device()
    name = kernel_name(config, kind, tag, ta, tb, out)
    fn = module("gemm_wgmma.cu", (name,)).get_function(name)
    fn.max_dynamic_shared_size_bytes = smem_bytes(config, kind)
    return fn


@functools.lru_cache(maxsize=None)
def helper(name: str):
    """One of gemm_wgmma.cu's helper kernels (the split-K sums, the K-major copies, the small parts), cached."""
    return module("gemm_wgmma.cu", HELPERS).get_function(name)


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
    item = x.itemsize
    if (x.dtype.name not in TENSOR_MAP_TYPES or big.dtype != x.dtype or big.shape != x.shape or big.strides[1] != item
            or (small is not None and (small.strides != big.strides or item != 4))):
        raise KernelError(f"copy_k_major copies a float32 or 16-bit {x.shape} array into K-major parts of its shape "
                          f"and dtype (split parts: float32 only), got {x.dtype} into {big.dtype} {big.shape} with "
                          f"strides {big.strides}")
    if x.size == 0:
        return []
    fn = helper(f"k_major_copy<{'float' if item == 4 else 'unsigned short'},{str(small is not None).lower()}>")
    return [later(fn, (math.ceil(rows / 32), math.ceil(K / 32)), (256,),
                  (x, np.int64(x.strides[0] // item), np.int64(x.strides[1] // item), i32(rows), i32(K), big,
                   big if small is None else small, i32(big.strides[0] // item)))]


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
        raise KernelError(f"the wgmma GEMMs (wgmma, x3tf32 and the half-precision wgmma) need a Hopper GPU (sm_90a: "
                          f"H100, H200), this one is sm_{cc}: use --gemm tf32, cublas-x3tf32 or (half) cublas there")


def tensor_map_fields(rows: int, K: int, row_bytes: int, box_rows: int, dtype: str = "float32",
                      mn_major: bool = False) -> dict:
    """cuTensorMapEncodeTiled's arguments for an operand (rows x K) in the 128-byte swizzle wgmma
    reads, zeros past the edges. K-major (row_bytes between rows): boxes of a stage's k (128 bytes)
    x box_rows. MN-major (16-bit: stored K x rows, row_bytes between its k-rows): boxes of 64 rows x
    a stage's k. The copy engine wants 16-byte aligned rows."""
    if row_bytes % 16:
        raise KernelError(f"a TMA operand's rows must be 16-byte aligned, got {row_bytes} bytes apart")
    bk = stage_k(4 if dtype == "float32" else 2)
    dims, box = ((rows, K), (64, bk)) if mn_major else ((K, rows), (bk, box_rows))
    return {"dtype": TENSOR_MAP_TYPES[dtype], "rank": 2, "dims": dims, "strides": (row_bytes,), "box": box,
            "element_strides": (1, 1), "interleave": 0, "swizzle": 3, "l2_promotion": 2, "oob_fill": 0}


@functools.lru_cache(maxsize=None)
def encode_tiled():
    fn = ctypes.CDLL("libcuda.so.1").cuTensorMapEncodeTiled
    fn.restype = ctypes.c_int
    return fn


MAPS: dict = {}  # (address, rows, K, row bytes, box rows) -> the tensor map in device memory


def tensor_map(x, K: int, box_rows: int, mn_major: bool = False):
    """The device-memory tensor map of x (rows x >= K; K-major with 16-byte aligned rows, or
    mn_major: rows contiguous, k-rows 16-byte aligned), made once per address and shape and kept
    (until release()), since a captured graph may hold it."""
    rows, row_bytes = x.shape[0], x.strides[1 if mn_major else 0]
    key = (x.data.ptr, rows, K, row_bytes, box_rows, x.dtype.name, mn_major)
    if key not in MAPS:
        cp = cupy()
        no_capture("a tensor map")
        f = tensor_map_fields(rows, K, row_bytes, box_rows, x.dtype.name, mn_major)
        raw = (ctypes.c_uint64 * 16)()
        status = encode_tiled()(ctypes.byref(raw), f["dtype"], f["rank"], ctypes.c_void_p(x.data.ptr),
                                (ctypes.c_uint64 * 2)(*f["dims"]), (ctypes.c_uint64 * 1)(*f["strides"]),
                                (ctypes.c_uint32 * 2)(*f["box"]), (ctypes.c_uint32 * 2)(*f["element_strides"]),
                                f["interleave"], f["swizzle"], f["l2_promotion"], f["oob_fill"])
        if status != 0:
            raise KernelError(f"cuTensorMapEncodeTiled failed (CUresult {status}) for a {rows} x {K} {x.dtype} "
                              f"operand, {row_bytes} bytes between its lines, boxes of {f['box']}")
        MAPS[key] = cp.asarray(np.frombuffer(bytes(raw), np.uint8))
    return MAPS[key]


def no_capture(what: str):
    if cupy().cuda.get_current_stream().is_capturing():
        raise KernelError(f"the wgmma GEMMs make {what} on first use, which CUDA graph capture does not allow: "
                          f"run the GEMM once outside capture first")


BUFFERS: dict = {}  # (role, rows, K, parts) -> K-major buffers, ("split-k", ...) -> workspaces


def k_major_zeros(rows: int, K: int, parts: int, dtype="float32") -> list:
    """`parts` zeroed K-major arrays (rows x K, rows padded to 16 bytes for the copy engine)."""
    dtype = np.dtype(dtype)
    per = 16 // dtype.itemsize
    padded = math.ceil(K / per) * per
    return [cupy().zeros((rows, padded), dtype)[:, :K] for _ in range(parts)]


def buffers(role: str, rows: int, K: int, parts: int, dtype="float32") -> list:
    """`parts` K-major buffers (k_major_zeros), kept per role, shape and dtype."""
    key = (role, rows, K, parts, np.dtype(dtype).name)
    if key not in BUFFERS:
        no_capture("K-major operand buffers")
        BUFFERS[key] = k_major_zeros(rows, K, parts, dtype)
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
    return (x.strides[1] == x.itemsize or x.shape[1] == 1) and x.strides[0] % 16 == 0 and x.data.ptr % 16 == 0


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
    and keeps them; a later one only launches: working them out took over half an eager step's host
    time (docs/DECISIONS.md, D4)."""
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
    kind = kind_of(x3)
    if a.dtype != cp.float32 or b.dtype != cp.float32:
        raise KernelError(f"{kind} takes float32 operands (TF32 tensor cores), got {a.dtype} and {b.dtype}")
    (M, K), N = a.shape, b.shape[1]
    cfg, splits = choose(M, N, K, kind, config, splits)
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
    return launches + gemm_launch(cfg, kind, "float", (A, As, False), (Bt, Bs, False), out, alpha, beta, splits, None)


def choose(M: int, N: int, K: int, kind: str, config: str | None, splits: int | None) -> tuple[tuple, int]:
    """(config, splits): the ones asked for, else the untuned heuristic's."""
    if config is None:
        cfg, auto = heuristic(M, N, K, kind, multiprocessors())
        splits = auto if splits is None else splits
    else:
        cfg = parse_config(config, kind)
    if splits not in SPLITS:
        raise KernelError(f"{kind} splits K into one of {SPLITS} parts, got {splits}")
    return cfg, splits


def gemm_launch(cfg: tuple, kind: str, tag: str, a_parts: tuple, b_parts: tuple, out, alpha: float, beta: float,
                splits: int, bias) -> list:
    """The GEMM's launch (and the split-K sum's) for operands given as (part, small part, MN-major):
    out = alpha A Bt^T + beta out, then sigmoid(. + bias[row]) with bias."""
    cp = cupy()
    (A, As, ta), (Bt, Bs, tb) = a_parts, b_parts
    (M, K), N = A.shape, Bt.shape[0]
    wgs, bn, _, cluster, _, _ = cfg
    bm = tile_rows(cfg)
    kps, z = split_k(K, splits, stage_k(A.itemsize))  # the splits pick the kernel's output type; the grid needs it
    target = out if z == 1 else workspace(z, M, N)  # split: float32 parts, summed into out after
    out_tag = "float" if out.dtype == cp.float32 else tag
    fn, threads, smem = (kernel(cfg, kind, tag, ta, tb, "float" if z > 1 else out_tag), 128 * (wgs + 1),
                         smem_bytes(cfg, kind))
    sms = multiprocessors()
    if cluster > 1:  # a grid of clusters that all run at once
        sms = cluster * max_active_clusters(fn, threads, smem, cluster)
    grid = plan(M, N, K, cfg, splits, sms, stage_k(A.itemsize))[2]
    args = (i32(M), i32(N), i32(K), i32(kps), cp.float32(alpha), tensor_map(A, K, bm, ta),
            tensor_map(As, K, bm, ta), tensor_map(Bt, K, bn // cluster, tb), tensor_map(Bs, K, bn // cluster, tb),
            cp.float32(beta), target, i32(N), pointer(bias if z == 1 else None),
            i32(M_FASTEST and math.ceil(M / (bm * cluster)) < math.ceil(N / bn)))
    if cluster > 1:
        launches = [prepared_launch_ex(fn, (grid,), (threads,), args, smem, {CLUSTER_DIMENSION: (cluster, 1, 1)})]
    else:
        launches = [later(fn, (grid,), (threads,), args, smem)]
    if z > 1:
        launches.append(later(helper(f"wgmma_splitk_sum<{out_tag}>"), (math.ceil(M * N / 256),), (256,),
                              (i32(M), i32(N), i32(z), target, cp.float32(beta), out, i32(N),
                               pointer(bias))))
    return launches


def mn_major_in_place(x) -> bool:
    """Whether the copy engine can read 16-bit x (rows x K) MN-major as it is: rows contiguous, its
    k-rows 16-byte aligned."""
    return (x.strides[0] == x.itemsize or x.shape[0] == 1) and x.strides[1] % 16 == 0 and x.data.ptr % 16 == 0


def half_operand(x, role: str, launches: list, mn_major: bool = True) -> tuple:
    """16-bit x (rows x K) as the kernel reads it: (x, x, False) K-major or (x, x, True) MN-major
    (where the config reads it so) in place, else a K-major copy (its launch appended to `launches`)."""
    if k_major_in_place(x):
        return x, x, False
    if mn_major and mn_major_in_place(x):
        return x, x, True
    (copy,) = buffers(role, *x.shape, 1, x.dtype)
    launches += copy_k_major_launches(x, copy)
    return copy, copy, False


def half_wgmma_gemm(a, b, out, bias=None, config: str | None = None, splits: int | None = None):
    """out = a b, then sigmoid(out + bias[:, None]) with bias (float32, M), on BF16 or FP16 wgmma with
    FP32 accumulation: a and b in one half precision (float16, or bfloat16 held in uint16), out in it
    or float32 (a weight gradient). Launches are worked out once per operands and kept, as wgmma_gemm's."""
    from perflab.kernels.elementwise import HALF_CTYPES
    cp = cupy()
    (M, K), (K2, N) = a.shape, b.shape
    tag = HALF_CTYPES.get(a.dtype.name)
    if tag is None or b.dtype != a.dtype or out.dtype not in (a.dtype, cp.float32):
        raise KernelError(f"the half-precision wgmma GEMM takes a and b in one half precision (float16, or uint16 "
                          f"holding bfloat16) and out in it or float32, got {a.dtype}, {b.dtype} into {out.dtype}")
    if K != K2 or out.shape != (M, N) or not out.flags.c_contiguous:
        raise KernelError(f"a {a.shape} times b {b.shape} goes into a C-contiguous {(M, N)} out, got "
                          f"{out.shape} (C-contiguous: {out.flags.c_contiguous})")
    if bias is not None and (bias.dtype != cp.float32 or bias.shape != (M,)):
        raise KernelError(f"bias is float32 of shape {(M,)}, got {bias.dtype} {bias.shape}")
    if M == 0 or N == 0:
        return out
    key = (layout(a), layout(b), layout(out), layout(bias), config, splits, cp.cuda.get_current_stream().ptr)
    launches = LAUNCHES.get(key)
    if launches is None:
        cfg, z = choose(M, N, K, "half", config, splits)
        launches = []
        a_parts = half_operand(a, "a", launches)
        b_parts = half_operand(b.T, "b", launches, reads_b_mn_major(cfg))
        launches += gemm_launch(cfg, "half", tag, a_parts, b_parts, out, 1.0, 0.0, z, bias)
        LAUNCHES[key] = launches
    for launch in launches:
        launch()
    return out
