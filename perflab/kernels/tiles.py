"""The tile GEMMs' configs and schedules (gemm_best.cu): which tile shapes exist, how many blocks
share them (a tile a block, split-K, stream-K), what workspace and shared memory that takes."""
from __future__ import annotations

import functools
import math

from perflab.kernels.build import KernelError, ctype, cupy, multiprocessors

TILED_VARIANTS = ("best", "tf32")  # the cp.async tile kernels of gemm_best.cu, with configs and split-K


# Tile configs, candidates for tune(): best (BM, BN, BK, WM, WN, TM, TN, STAGES, KV, MINB);
# tf32 (BM, BN, BK, WM, WN, STAGES). Threads: (BM / WM) * (BN / WN) warps. KV = 0 ("xt"): the
# k-contiguous operands are stored transposed through registers. Each config below was picked
# on an H100 (scripts/gemm_sweep.py, 2026-11-23, after the blocks took one schedule for whole
# tiles, split-K and stream-K; chosen greedily for the geometric mean over the training shapes):
# 128x64 blocks of 8x8 thread tiles held to 3 blocks an SM (the backward GEMMs' long K, by
# stream-K), 64x128 for the large forward GEMMs a tile a block, and 64x64 blocks, mostly
# by stream-K, for the small batches. 128x128 of 256 threads, one block an SM, came last
# (2026-11-23, docs/DECISIONS.md, D41): by stream-K over one wave it is the fastest at the forward GEMMs of B = 3200. The first config is the
# untuned choice for shapes that fill the chip. (A 64x64 config at BK = 32 was dropped on
# 2026-11-23: after the edge-tile and epilogue changes it was the fastest at none of the training
# shapes: docs/DECISIONS.md, D8.)
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
