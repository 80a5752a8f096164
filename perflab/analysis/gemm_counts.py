"""The GEMM steps of the 2019 seed (§4.1-4.2: Algorithm 1 `naive`, Algorithm 2 `tiled`, the 64 x 16
register-blocked kernel `regblock`), then `best` and cuBLAS, explained by counts: what each kernel's tiling
makes it load a FLOP, how many blocks and warps it puts on the H100's 132 SMs, how much of its work lies
outside D at the edges, and where the GPU machine measured them (scripts/gpu_gemm_counts.sh: Nsight Compute
and CuPy's kernel attributes), what it achieved.

- counts(shapes, bench, measured) -> one row per (variant, shape): the analytic counts, and the measured
  ones where `measured` (the device's gemm_counts.csv, read_measured()) has them;
- explain(bench, counts) -> the counts beside the bench's TFLOP/s, with the rates they imply;
- story(table) -> the sentences: why each step wins, and why regblock loses to tiled at the backward shapes;
- answer(bench_path, counts_path) -> the report's answer to 2019 §4.1-4.2.

Every tile size is read from the code: the launch dispatch.gemm() makes (recorded, no GPU needed), the
.cu files' #defines and shared arrays, best's configs (perflab.kernels.tiles). On the device,
`python3 -m perflab.analysis.gemm_counts prepare|target|collect` are scripts/gpu_gemm_counts.sh's steps."""
from __future__ import annotations

import ast
import functools
import math
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING
from unittest import mock

import numpy as np
import pandas as pd

from perflab.kernels import dispatch, tiles
from perflab.kernels.build import KERNEL_DIR
from perflab.measure.gemm_inputs import gemm_shapes

if TYPE_CHECKING:
    from perflab.report.answer import Answer

VARIANTS = ("naive", "tiled", "regblock", "best", "cublas")  # the steps, in order
OWN = VARIANTS[:4]  # perflab's kernels (one launch each); cuBLAS is counted by Nsight Compute only
T = "float"  # the counts are for FP32, as the bench the question reads
ITEM = 4  # bytes an element
SECTOR = 32  # bytes: the unit L1 and L2 move
STEP_SHAPES = ("fwd1 H=512 B=3200", "bwd3 H=512 B=3200", "bwd1 H=512 B=3200", "bwd2 H=512 B=3200",
               "fwd1 H=512 B=800", "bwd3 H=512 B=800")  # the device script's default; fwd1/bwd3 B=800: same M, N, K
SIMULATED_STEPS = 16  # K steps of a block simulated for the L1 model (its pattern repeats within 8)


@dataclass(frozen=True)
class Limits:
    """An SM's limits for occupancy (CUDA C++ Programming Guide, compute capability 9.0) and the SM count."""
    name: str = "H100 SXM (sm_90)"
    sms: int = 132
    warps_sm: int = 64
    blocks_sm: int = 32
    regs_sm: int = 65536
    reg_unit: int = 256  # registers are given to a warp in units of 256
    smem_sm: int = 233472  # 228 KiB of shared memory an SM at the largest carveout
    smem_reserved: int = 1024  # the runtime's share of every block (sm_80 and later)
    smem_unit: int = 128


H100 = Limits()


# ------------------------------------------------------------------ the tilings, read from the code
@dataclass(frozen=True)
class Tiling:
    variant: str
    tile_m: int  # rows of D a block computes
    tile_n: int  # columns of D a block computes
    tile_k: int  # K a step of the block's loop takes (one load of its operands, between barriers)
    threads: int  # a block
    thread_m: int  # each thread computes thread_m x thread_n outputs
    thread_n: int
    a_via: str  # "shared": staged by the block in shared memory; "global": each thread loads its own into registers
    b_via: str
    smem: int  # static shared bytes a block (best: dynamic, from tiles.tile_launch)
    config: str = ""


def source(name: str) -> str:
    return (KERNEL_DIR / name).read_text()


def defines(text: str) -> dict[str, str]:
    return {m[1]: m[2] for m in re.finditer(r"^#define\s+(\w+)\s+(\S+)\s*$", text, re.M)}


def arithmetic(expr: str, names: dict[str, str]) -> int:
    """An integer C expression of literals, #defined names, + - * / and parentheses."""
    def value(node):
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.Name) and node.id in names:
            return arithmetic(names[node.id], names)
        if isinstance(node, ast.BinOp) and type(node.op) in OPS:
            return OPS[type(node.op)](value(node.left), value(node.right))
        raise ValueError(f"not an integer constant expression: {expr!r}")
    return value(ast.parse(expr.replace("/", "//"), mode="eval").body)


OPS = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
       ast.FloorDiv: lambda a, b: a // b}


def shared_arrays(text: str) -> dict[str, list[int]]:
    """name -> dimensions of each `__shared__ T name[..][..]` of a kernel source."""
    names = defines(text)
    return {m[1]: [arithmetic(d, names) for d in re.findall(r"\[([^\]]+)\]", m[2])]
            for m in re.finditer(r"__shared__\s+T\s+(\w+)((?:\[[^\]]+\])+)", text)}


class _Stand:
    """What dispatch.gemm() reads of a CuPy array (shape, strides, dtype, flags, data.ptr, size): a
    matrix of this shape, a transposed view where `transposed`, so that a launch is recorded without a GPU."""

    def __init__(self, rows: int, cols: int, transposed: bool = False, size: int | None = None):
        self.dtype = np.dtype("float32")
        self.itemsize = self.dtype.itemsize
        self.shape, self.ndim = (rows, cols), 2
        self.strides = (self.itemsize, rows * self.itemsize) if transposed else (cols * self.itemsize, self.itemsize)
        self.flags = SimpleNamespace(c_contiguous=not transposed)
        self.data = SimpleNamespace(ptr=0)
        self.size = rows * cols if size is None else size


@dataclass(frozen=True)
class Launch:
    grid: tuple
    block: tuple
    dynamic_smem: int
    config: str = ""

    @property
    def blocks(self) -> int:
        return math.prod(self.grid)

    @property
    def threads(self) -> int:
        return math.prod(self.block)


@functools.lru_cache(maxsize=None)
def launch(variant: str, M: int, K: int, N: int, ta: bool = False, tb: bool = False, config: str | None = None,
           blocks: int | None = None) -> Launch:
    """The grid and block dispatch.gemm() launches for a GEMM of this shape and storage, recorded
    by standing in for CuPy, the kernel and the launcher (nothing runs). best takes the config and
    blocks given (the bench's), else the untuned choice for 132 SMs."""
    if variant not in OWN:
        raise ValueError(f"only perflab's own kernels {OWN} have a launch to record, not {variant!r}")
    if variant in tiles.TILED_VARIANTS and config is None:
        config, blocks = tiles.heuristic_tiles(variant, T, M, N, K, H100.sms)
    seen = []
    kernel = lambda grid, block, args, shared_mem=0: seen.append((tuple(grid), tuple(block), shared_mem))
    with mock.patch.object(dispatch, "cupy", lambda: SimpleNamespace()), \
            mock.patch.object(dispatch, "gemm_function", lambda *a, **k: kernel), \
            mock.patch.object(dispatch, "launch_tile", lambda k, grid, block, args, smem: kernel(grid, block, args, smem)):
        dispatch.gemm(_Stand(M, K, ta), _Stand(K, N, tb), out=_Stand(M, N), variant=variant, config=config,
                      blocks=blocks, work=_Stand(1, 1, size=1 << 62))
    if len(seen) != 1:
        raise RuntimeError(f"dispatch.gemm({variant}) made {len(seen)} launches where one was expected")
    grid, block, smem = seen[0]
    return Launch(grid, block, smem, config or "")


@functools.lru_cache(maxsize=None)
def tiling(variant: str, config: str | None = None) -> Tiling:
    """A kernel's tiling, from its launch (D's tile a block: the grid dispatch.gemm() makes at a
    shape that divides evenly), its source (the K step, the shared arrays) and best's config."""
    if variant in tiles.TILED_VARIANTS:
        bm, bn, bk, wm, wn, tm, tn = tiles.tile_configs(variant, T)[config][:7]
        threads, smem = tiles.tile_launch(variant, T, config, False, False)
        return Tiling(variant, bm, bn, bk, threads, tm, tn, "shared", "shared", smem, config)
    probe = 1 << 12
    run = launch(variant, probe, probe, probe)
    tile_n, tile_m = probe // run.grid[0], probe // run.grid[1]
    outputs = tile_m * tile_n // run.threads  # a thread's share of the block's tile
    text = source(dispatch.source_file(variant))
    arrays = shared_arrays(text)
    smem = ITEM * sum(math.prod(d) for d in arrays.values())
    if variant == "naive":  # Algorithm 1: a thread an output, k one at a time, operands straight from memory
        return Tiling(variant, tile_m, tile_n, 1, run.threads, 1, 1, "global", "global", smem)
    if variant == "tiled":  # Algorithm 2: TILE x TILE tiles of both operands in shared memory, a thread an output
        step = arithmetic("TILE", defines(text))
        return Tiling(variant, tile_m, tile_n, step, run.threads, 1, outputs, "shared", "shared", smem)
    # regblock (§4.2): a K-step of B in shared memory (Bs[K step][tile_n]); each thread its row of A into
    # registers, and a 1 x (outputs) row of D in acc[]
    step, width = arrays["Bs"]
    acc = int(re.search(r"T\s+acc\[(\d+)\]", text)[1])
    if width != tile_n or acc != outputs:
        raise RuntimeError(f"gemm_regblock.cu's Bs[{step}][{width}] and acc[{acc}] do not match the launch's "
                           f"{tile_m} x {tile_n} tile of {run.threads} threads")
    return Tiling(variant, tile_m, tile_n, step, run.threads, 1, outputs, "global", "shared", smem)


# ------------------------------------------------------------------ occupancy
def blocks_per_sm(threads: int, regs: float, smem: float, gpu: Limits = H100) -> tuple[int, str]:
    """(blocks an SM holds at once, what limits it): warps, blocks, registers (unknown: NaN, left
    out) and shared memory, as the CUDA occupancy calculator counts them."""
    warps = math.ceil(threads / 32)
    limits = {"blocks": gpu.blocks_sm, "warps": gpu.warps_sm // warps}
    if regs == regs and regs:  # not NaN
        per_warp = math.ceil(regs * 32 / gpu.reg_unit) * gpu.reg_unit
        limits["registers"] = (gpu.regs_sm // per_warp) // warps
    if smem == smem:
        limits["shared memory"] = gpu.smem_sm // (math.ceil((smem + gpu.smem_reserved) / gpu.smem_unit) * gpu.smem_unit)
    limiter = min(limits, key=limits.get)
    return limits[limiter], limiter


# ------------------------------------------------------------------ the memory accesses, lane by lane
@functools.lru_cache(maxsize=None)
def _warp_sectors(*args) -> dict[str, float]:
    return warp_sectors(*args)


def _at(transposed: bool, r, c, ld):
    """common.cuh's at<T>(r, c, ld): where op(X)(r, c) is stored."""
    return c * ld + r if transposed else r * ld + c


def _sectors(addresses) -> int:
    return len(np.unique(np.asarray(addresses) * ITEM // SECTOR))


def warp_sectors(t: Tiling, launch_block: tuple, M: int, K: int, N: int, ta: bool, tb: bool) -> dict[str, float]:
    """Sectors (32 bytes) one request of the first warp of block (0, 0) touches, for its loads of A
    and of B and its stores of D (1 is a broadcast, 4 a coalesced 128 bytes, 32 one sector a lane),
    from the lane -> element maps of gemm_naive.cu, gemm_tiled.cu and gemm_regblock.cu."""
    lda, ldb = (M if ta else K), (K if tb else N)
    lane = np.arange(32)
    if t.variant == "naive":  # i = blockIdx.y * blockDim.y + threadIdx.y, j = ... threadIdx.x; A(i, k), B(k, j)
        tx, ty = lane % launch_block[0], lane // launch_block[0]
        a, b, d = (ty, 0 * lane), (0 * lane, tx), (ty, tx)
    elif t.variant == "tiled":  # As[ar][ak] = A(i0 + ar, k0 + ak), ar = TA ? tx : ty; Bs likewise
        tx, ty = lane % launch_block[0], lane // launch_block[0]
        a = (tx, ty) if ta else (ty, tx)
        b = (tx, ty) if tb else (ty, tx)
        d = (ty, tx)
    elif t.variant == "regblock":  # thread t owns row i0 + t: a[q] = A(i, k0 + q); Bs[bk][bc] = B(k0 + bk, j0 + bc)
        a = (lane, 0 * lane)
        b = (lane % 4, lane // 4) if tb else (lane // t.tile_n, lane % t.tile_n)
        d = (lane, 0 * lane)  # D(i, j0 + c): one column c a store instruction
    else:
        return {"a_sectors_per_request": np.nan, "b_sectors_per_request": np.nan, "d_sectors_per_request": np.nan}
    out = {}
    for name, (r, c), (rows, cols), address in (
            ("a", a, (M, K), lambda r, c: _at(ta, r, c, lda)), ("b", b, (K, N), lambda r, c: _at(tb, r, c, ldb)),
            ("d", d, (M, N), lambda r, c: r * N + c)):
        live = (r < rows) & (c < cols)
        out[f"{name}_sectors_per_request"] = float(_sectors(address(r[live], c[live]))) if live.any() else np.nan
    return out


@functools.lru_cache(maxsize=None)
def l2_steps(t: Tiling, M: int, K: int, N: int, ta: bool, tb: bool, steps: int = SIMULATED_STEPS) -> float:
    """Share of block (0, 0)'s K steps whose loads touch a sector the block has not touched before
    (so wait on L2), if L1 kept every sector the block touched: the first `steps` steps of its loop."""
    lda, ldb = (M if ta else K), (K if tb else N)
    n = min(math.ceil(K / t.tile_k), steps)
    rows, cols = np.arange(min(t.tile_m, M)), np.arange(min(t.tile_n, N))
    k = np.arange(n)[:, None] * t.tile_k + np.arange(t.tile_k)[None, :]  # steps x K-step
    k = np.where(k < K, k, -1)
    a = _at(ta, rows[None, None, :], k[:, :, None], lda).reshape(n, -1)
    b = _at(tb, k[:, :, None], cols[None, None, :], ldb).reshape(n, -1)
    valid = np.concatenate([np.repeat(k[:, :, None] >= 0, len(rows), 2).reshape(n, -1),
                            np.repeat(k[:, :, None] >= 0, len(cols), 2).reshape(n, -1)], axis=1)
    # A and B apart: offset B's sectors past any of A's
    sector = np.concatenate([a * ITEM // SECTOR, b * ITEM // SECTOR + (1 << 40)], axis=1)
    step = np.broadcast_to(np.arange(n)[:, None], sector.shape)
    first = np.unique(sector[valid], return_index=True)[1]
    return len(np.unique(step[valid][first])) / n


# ------------------------------------------------------------------ the counts at a shape
SHAPES = {name: (M, K, N, ta, tb) for name, M, K, N, ta, tb in gemm_shapes()}  # the bench's 45
SHAPE_NAME = re.compile(r"(fwd1|bwd3|fwd2|bwd1|bwd2) H=(\d+) B=(\d+)")


@functools.lru_cache(maxsize=None)
def dims(shape: str) -> tuple[int, int, int, bool, bool]:
    """(M, K, N, a transposed, b transposed) of a training GEMM named as gemm_inputs.gemm_shapes names
    them, at any H and B (a rank's B' = B / p too): ValueError for another name."""
    found = SHAPE_NAME.fullmatch(shape)
    if found is None or int(found[2]) < 1 or int(found[3]) < 1:
        raise ValueError(f"{shape!r} is not a training GEMM: name one as 'fwd1 H=512 B=3200' (fwd1, bwd3, fwd2, "
                         f"bwd1 or bwd2; H and B positive)")
    return next(x[1:] for x in gemm_shapes((int(found[2]),), (int(found[3]),)) if x[0] == shape)


def named(shape: str) -> bool:
    try:
        return bool(dims(shape))
    except ValueError:
        return False


def count(variant: str, shape: str, config: str | None = None, blocks: int | None = None,
          regs: float = np.nan, static_smem: float | None = None, gpu: Limits = H100) -> dict:
    """The analytic counts of one of perflab's kernels at one of the training shapes (gemm_inputs):
    global loads (bytes) a FLOP if nothing is reused beyond the tile (a thread's own loads: beyond
    the thread's outputs), shared-memory loads (elements a thread reads) a FLOP, blocks, waves over
    the SMs, the share of output slots outside D, the K steps a block walks, and occupancy
    (registers: given, from CuPy's attributes or Nsight Compute; NaN leaves them out)."""
    M, K, N, ta, tb = dims(shape)
    run = launch(variant, M, K, N, ta, tb, config, blocks)
    t = tiling(variant, run.config or None)
    flops = 2 * M * N * K
    # A is loaded once for each unit along n that needs it: the block's tile when staged in shared
    # memory, the thread's outputs when each thread loads its own (naive: one output, so 2K for 2K FLOPs)
    unit_n = t.tile_n if t.a_via == "shared" else t.thread_n
    unit_m = t.tile_m if t.b_via == "shared" else t.thread_m
    loads = math.ceil(N / unit_n) * M * K + math.ceil(M / unit_m) * K * N
    shared = ((t.thread_m if t.a_via == "shared" else 0) + (t.thread_n if t.b_via == "shared" else 0)) / (
        2 * t.thread_m * t.thread_n)
    tiles_mn = math.ceil(M / t.tile_m) * math.ceil(N / t.tile_n)
    k_steps = math.ceil(K / t.tile_k)
    smem_block = (t.smem if static_smem is None else static_smem) + run.dynamic_smem
    per_sm, limiter = blocks_per_sm(run.threads, regs, smem_block, gpu)
    warps = math.ceil(run.threads / 32)
    resident = min(run.blocks / gpu.sms, per_sm)  # blocks an SM while the first wave runs
    waves = run.blocks / (gpu.sms * per_sm)
    row = {"variant": variant, "shape": shape, "M": M, "K": K, "N": N, "config": t.config,
           "tile": f"{t.tile_m}x{t.tile_n}", "thread tile": f"{t.thread_m}x{t.thread_n}", "K step": t.tile_k,
           "threads": run.threads, "blocks": run.blocks, "FLOPs": flops,
           "global B/FLOP": ITEM * loads / flops, "shared loads/FLOP": shared,
           "idle %": 100 * (1 - M * N / (tiles_mn * t.tile_m * t.tile_n)),
           "K padding %": 100 * (1 - K / (k_steps * t.tile_k)),
           "K steps a block": tiles_mn * k_steps / run.blocks,
           "registers": regs, "shared bytes": smem_block, "blocks/SM": per_sm, "occupancy limit": limiter,
           "theoretical occupancy %": 100 * per_sm * warps / gpu.warps_sm,
           "warps/SM": resident * warps, "launch occupancy %": 100 * resident * warps / gpu.warps_sm,
           "SMs used": min(run.blocks, gpu.sms), "waves": waves,
           "wave use %": 100 * waves / math.ceil(waves),
           "L2-wait steps %": 100 * l2_steps(t, M, K, N, ta, tb)}
    row.update(_warp_sectors(t, run.block, M, K, N, ta, tb))
    return row


def bench_choice(bench: pd.DataFrame | None, shape: str) -> tuple[str | None, int | None]:
    """best's (config, blocks) at a shape as the bench ran it (None, None where it has no such row)."""
    if bench is None or "config" not in bench:
        return None, None
    row = bench[(bench.variant == "best") & (bench["shape"] == shape)]
    if row.empty or not isinstance(row["config"].iloc[0], str) or row["config"].iloc[0] not in tiles.tile_configs("best", T):
        return None, None
    return row["config"].iloc[0], int(row["blocks"].iloc[0])


def counts(shapes=STEP_SHAPES, bench: pd.DataFrame | None = None, measured: pd.DataFrame | None = None,
           gpu: Limits = H100) -> pd.DataFrame:
    """count() for every variant at every shape (best as the bench chose it), and the measured
    columns where `measured` (read_measured()) has the row: registers and shared bytes from CuPy's
    kernel attributes (else Nsight Compute's launch statistics) feed the occupancy; cuBLAS's rows
    take everything from Nsight Compute. Without `measured`, CuPy's attributes are read here
    where CuPy sees a GPU (attributes(): compiles the kernels), else registers are left out."""
    if measured is None:
        from perflab.backend import cupy_or_none
        if cupy_or_none() is not None:
            measured = attributes(shapes, bench)
    rows = []
    for shape in shapes:
        config, blocks = bench_choice(bench, shape)
        for variant in VARIANTS:
            m = _measured_row(measured, variant, shape)
            regs, smem = _resources(m)[:2]
            if not m and variant != "cublas":  # the same kernel measured at another shape: its registers
                same = _same_kernel(measured, kernel_name(variant, shape, config, blocks))
                regs, smem = _resources(same)[:2]
                m = {k: same[k] for k in ("registers from",) if k in same}
            if variant == "cublas":
                rows.append(_cublas_row(shape, m, gpu))
            else:
                rows.append(count(variant, shape, config if variant == "best" else None,
                                  blocks if variant == "best" else None, regs, smem, gpu))
            rows[-1]["registers from"] = m.get("registers from", "") if regs == regs else ""
            rows[-1].update({k: v for k, v in m.items() if k.startswith(("ncu_", "cupy_", "kernel"))})
    return pd.DataFrame(rows)


def kernel_name(variant: str, shape: str, config: str | None = None, blocks: int | None = None) -> str:
    """The C++ name of the instantiation dispatch.gemm() launches for a variant at a shape (best: the
    config and blocks given, else the untuned choice)."""
    M, K, N, ta, tb = dims(shape)
    run = launch(variant, M, K, N, ta, tb, config if variant == "best" else None, blocks if variant == "best" else None)
    shared = variant in tiles.TILED_VARIANTS and run.blocks != tiles.tile_grid(variant, T, run.config, M, N, K)[0]
    return dispatch.kernel_name(variant, T, ta, tb, 0, run.config or None, shared)


def _same_kernel(measured: pd.DataFrame | None, name: str) -> dict:
    """CuPy's attributes of a kernel as recorded at any shape (registers and static shared memory
    are the instantiation's, whatever the shape)."""
    if measured is None or measured.empty or "kernel" not in measured:
        return {}
    hit = measured[measured["kernel"] == name]
    if hit.empty:
        return {}
    row = {k: v for k, v in hit.iloc[0].to_dict().items() if k.startswith("cupy_")}
    if _number(row.get("cupy_num_regs")) == _number(row.get("cupy_num_regs")):
        row["registers from"] = "CuPy (this kernel at another shape)"
    return row


def _measured_row(measured: pd.DataFrame | None, variant: str, shape: str) -> dict:
    if measured is None or measured.empty:
        return {}
    hit = measured[(measured["variant"] == variant) & (measured["shape"] == shape)]
    if hit.empty:
        return {}
    row = hit.iloc[0].to_dict()
    if _number(row.get("cupy_num_regs")) == _number(row.get("cupy_num_regs")):
        row["registers from"] = "CuPy"
    elif _number(row.get("ncu_registers")) == _number(row.get("ncu_registers")):
        row["registers from"] = "Nsight Compute"
    return row


def _number(x) -> float:
    try:
        return float(x)
    except (TypeError, ValueError):
        return np.nan


def _resources(m: dict) -> tuple[float, float | None, float]:
    """(registers a thread, static shared bytes a block or None, dynamic shared bytes) from CuPy's
    attributes, else from Nsight Compute's launch statistics."""
    regs = _number(m.get("cupy_num_regs"))
    if regs != regs:
        regs = _number(m.get("ncu_registers"))
    smem = _number(m.get("cupy_shared_size_bytes"))
    if smem != smem:
        smem = _number(m.get("ncu_smem_static"))
    return regs, (None if smem != smem else smem), _number(m.get("ncu_smem_dynamic"))


def _cublas_row(shape: str, m: dict, gpu: Limits) -> dict:
    """cuBLAS: no tiling of its own to count here; blocks, threads, registers and shared memory as
    Nsight Compute saw its kernel (NaN where it did not run)."""
    M, K, N, _, _ = dims(shape)
    row = {"variant": "cublas", "shape": shape, "M": M, "K": K, "N": N, "FLOPs": 2 * M * N * K}
    threads, blocks = _number(m.get("ncu_threads")), _number(m.get("ncu_blocks"))
    regs, static, dynamic = _resources(m)
    smem = (static or 0) + (0 if dynamic != dynamic else dynamic)
    if threads == threads and blocks == blocks:
        per_sm, limiter = blocks_per_sm(int(threads), regs, smem, gpu)
        warps = math.ceil(threads / 32)
        resident = min(blocks / gpu.sms, per_sm)
        waves = blocks / (gpu.sms * per_sm)
        row.update({"threads": int(threads), "blocks": int(blocks), "registers": regs, "shared bytes": smem,
                    "blocks/SM": per_sm, "occupancy limit": limiter,
                    "theoretical occupancy %": 100 * per_sm * warps / gpu.warps_sm, "warps/SM": resident * warps,
                    "launch occupancy %": 100 * resident * warps / gpu.warps_sm, "SMs used": min(blocks, gpu.sms),
                    "waves": waves, "wave use %": 100 * waves / math.ceil(waves)})
    return row


# ------------------------------------------------------------------ the bench beside the counts
STEPPED = ("tiled", "regblock")  # K steps between barriers, nothing loaded ahead: a step's loads are waited for


def explain(bench: pd.DataFrame, counts: pd.DataFrame) -> pd.DataFrame:
    """counts() joined with the bench's TFLOP/s and ms per (variant, shape), and the rates they
    imply: operand bytes a second (the tile model's loads at the measured rate), time a K step of
    the barrier-stepped kernels (ms / (K steps a block x rounds of blocks)), and where Nsight
    Compute measured them: achieved occupancy, L1 hit rate, L2 -> SM bytes a FLOP, DRAM GB/s, SM
    throughput, sectors a request."""
    keep = [c for c in ("variant", "shape", "tflops", "ms", "config", "blocks") if c in bench]
    b = bench[keep].rename(columns={"config": "bench config", "blocks": "bench blocks"})
    t = counts.merge(b, on=["variant", "shape"], how="left")
    t["operand GB/s"] = t.get("global B/FLOP", np.nan) * t["tflops"] * 1e3
    rounds = np.ceil(t.get("waves", pd.Series(np.nan, index=t.index)).astype(float))
    step = 1e3 * t["ms"] / (t.get("K steps a block", np.nan) * rounds)
    t["us a K step"] = step.where(t["variant"].isin(STEPPED))
    if "L2-wait steps %" in t:
        t["L2-wait steps %"] = t["L2-wait steps %"].where(t["variant"].isin(STEPPED))
    col = lambda name: pd.to_numeric(t[name], errors="coerce") if name in t else pd.Series(np.nan, index=t.index)
    t["achieved occupancy %"] = col("ncu_achieved_occupancy_pct")
    t["L1 hit %"] = col("ncu_l1_ld_hit_pct")
    t["L2 B/FLOP"] = col("ncu_l2_read_sectors") * SECTOR / t["FLOPs"]
    t["DRAM GB/s"] = col("ncu_dram_read_bytes") / col("ncu_duration_ns")
    t["SM throughput %"] = col("ncu_sm_throughput_pct")
    t["ld sectors/request"] = col("ncu_global_ld_sectors") / col("ncu_global_ld_requests")
    t["st sectors/request"] = col("ncu_global_st_sectors") / col("ncu_global_st_requests")
    t["shared wavefronts/FLOP"] = col("ncu_shared_ld_wavefronts") / t["FLOPs"]
    return t


SHOWN = {"shape": "shape", "variant": "GEMM", "tflops": "TFLOP/s", "global B/FLOP": "global B/FLOP",
         "shared loads/FLOP": "shared loads/FLOP", "blocks": "blocks", "warps/SM": "warps/SM",
         "idle %": "idle %", "K steps a block": "K steps", "L2-wait steps %": "L2-wait steps %",
         "us a K step": "us a step"}
MEASURED = {"achieved occupancy %": "achieved occupancy %", "L1 hit %": "L1 hit %", "L2 B/FLOP": "L2 B/FLOP",
            "DRAM GB/s": "DRAM GB/s"}


def shown(table: pd.DataFrame, shapes=STEP_SHAPES) -> pd.DataFrame:
    """The report's table: the step's shapes, each GEMM in step order, the counts that explain it
    (and Nsight Compute's where it ran)."""
    t = table[table["shape"].isin(shapes)].copy()
    t["_s"], t["_v"] = t["shape"].map(list(shapes).index), t["variant"].map(list(VARIANTS).index)
    t = t.sort_values(["_s", "_v"])
    columns = dict(SHOWN)
    columns.update({k: v for k, v in MEASURED.items() if k in t and t[k].notna().any()})
    out = t[list(columns)].rename(columns=columns).reset_index(drop=True)
    for name, digits in (("TFLOP/s", 3), ("global B/FLOP", 3), ("shared loads/FLOP", 3), ("warps/SM", 3),
                         ("idle %", 2), ("K steps", 3), ("L2-wait steps %", 2), ("us a step", 2),
                         ("achieved occupancy %", 2), ("L1 hit %", 2), ("L2 B/FLOP", 3), ("DRAM GB/s", 3)):
        if name in out:
            out[name] = out[name].map(lambda x, d=digits: float(f"{x:.{d}g}") if x == x else x)
    return out


# ------------------------------------------------------------------ the story the numbers tell
def _get(t: pd.DataFrame, variant: str, shape: str, column: str) -> float:
    if column not in t:
        return np.nan
    hit = t[column].to_numpy()[(t["variant"].to_numpy() == variant) & (t["shape"].to_numpy() == shape)]
    return _number(hit[0]) if len(hit) else np.nan


def _g(x: float) -> str:
    return f"{x:.3g}"


def _family_shape(t: pd.DataFrame, family: str) -> str | None:
    """A family's shape to tell it at: H=512 B=3200 (the seeds' batch) where the table has it with
    both tiled and regblock timed, else the first such."""
    timed = t[t["variant"].isin(STEPPED) & t["tflops"].notna()]
    names = [s for s in dict.fromkeys(timed["shape"]) if s.split()[0] == family
             and timed[timed["shape"] == s]["variant"].nunique() == len(STEPPED)]
    preferred = f"{family} H=512 B=3200"
    return preferred if preferred in names else (names[0] if names else None)


def _steps(t: pd.DataFrame, shape: str) -> str:
    """Why each step wins at a forward shape: the counts that change from one step to the next."""
    v = {name: _get(t, name, shape, "tflops") for name in VARIANTS}
    if any(v[name] != v[name] for name in ("naive", "tiled", "regblock")):
        return ""
    M, K, N = (int(_get(t, "tiled", shape, c)) for c in ("M", "K", "N"))
    g = {name: _get(t, name, shape, "global B/FLOP") for name in OWN}
    s = {name: _get(t, name, shape, "shared loads/FLOP") for name in OWN}
    tile = t[(t["variant"] == "tiled") & (t["shape"] == shape)]["tile"].iloc[0]
    out = [f"At {shape} ({M} x {K} times {K} x {N}): naive {_g(v['naive'])}, tiled {_g(v['tiled'])}, "
           f"regblock {_g(v['regblock'])}, best {_g(v['best'])}, cuBLAS {_g(v['cublas'])} TFLOP/s."]
    coalesce = ""
    nb, tb_ = _get(t, "naive", shape, "b_sectors_per_request"), _get(t, "tiled", shape, "b_sectors_per_request")
    if nb >= 2 * tb_:
        coalesce = (f", and there each warp request of its loads of B touches {nb:.0f} sectors (every lane its "
                    f"own stored row) against {tb_:.0f} for the tiled kernel's coalesced ones")
    out.append(f"Algorithm 1 (naive) loads {_g(g['naive'])} bytes of operands a FLOP (2K elements for 2K FLOPs)"
               f"{coalesce}; Algorithm 2's {tile} tiles in shared memory cut that to {_g(g['tiled'])} bytes a FLOP "
               f"({g['naive'] / g['tiled']:.0f}x fewer, the tile's width): {v['tiled'] / v['naive']:.1f}x naive.")
    r = v["regblock"] / v["tiled"]
    out.append(f"The 64 x 16 register-blocked kernel (§4.2) halves the shared-memory loads a FLOP "
               f"({_g(s['tiled'])} to {_g(s['regblock'])}: a value of B read from shared memory feeds a thread's "
               f"1 x 16 row of outputs, and A stays in registers), though its narrower tile loads more from global "
               f"memory ({_g(g['tiled'])} to {_g(g['regblock'])} bytes a FLOP): {r:.2f}x tiled"
               + (" here." if r >= 1 else ", a loss even here."))
    if v["best"] == v["best"]:
        best_tile = t[(t["variant"] == "best") & (t["shape"] == shape)][["tile", "thread tile"]].iloc[0]
        out.append(f"best's {best_tile['tile']} tiles of {best_tile['thread tile']} thread tiles load "
                   f"{_g(g['best'])} bytes a FLOP from global memory and make {_g(s['best'])} shared loads a FLOP, "
                   f"with the next tiles' copies in flight while it multiplies: {v['best'] / v['regblock']:.1f}x "
                   f"regblock" + (f", {v['best'] / v['cublas']:.2f} of cuBLAS." if v["cublas"] == v["cublas"] else "."))
    return " ".join(out)


def _naive_coalescing(t: pd.DataFrame) -> str:
    """naive against tiled by how naive's warps read B: along its stored rows or each lane its own."""
    n = t[(t["variant"] == "naive") & t["tflops"].notna()].set_index("shape")
    tiled = t[t["variant"] == "tiled"].set_index("shape")["tflops"]
    ratio = (n["tflops"] / tiled.reindex(n.index)).dropna()
    sectors = n["b_sectors_per_request"].reindex(ratio.index)
    along, across = ratio[sectors <= 4], ratio[sectors >= 16]
    if along.empty or across.empty:
        return ""
    return (f"The naive kernel's rate follows how its warps read B: at the {len(along)} shapes where they read along B's "
            f"stored rows (at most 4 sectors a request), L1 and L2 give it much of the reuse tiling makes explicit "
            f"and it runs at a median {along.median():.2f} of tiled's rate ({int((along >= 0.9).sum())} of them "
            f"within 10% or faster); at the {len(across)} where each lane reads its own row "
            f"({sectors[across.index].median():.0f} sectors a request), at {across.median():.2f}.")


def _losses(t: pd.DataFrame) -> tuple[str, dict]:
    """Where regblock trails tiled, family by family (median ratio of their TFLOP/s)."""
    w = t.pivot_table(index="shape", columns="variant", values="tflops")
    if not set(STEPPED) <= set(w):
        return "", {}
    ratio = (w["regblock"] / w["tiled"]).dropna()
    fam = ratio.groupby(ratio.index.str.split().str[0])
    summary = {f: (float(r.median()), int((r < 1).sum()), len(r)) for f, r in fam}
    lost = [f for f, (m, n, total) in summary.items() if n > total / 2]
    won = [f for f, (m, n, total) in summary.items() if n <= total / 2]
    backward = [f for f in lost if f.startswith("bwd")]
    if not lost:
        return "regblock ran at or above tiled at most shapes of every GEMM of the step.", summary
    text = ("The register-blocked kernel (regblock) loses to tiled at " + ", ".join(f"{summary[f][1]} of {summary[f][2]} {f} shapes (median "
                                                       f"{summary[f][0]:.2f}x tiled's rate)" for f in sorted(lost))
            + (" and wins at " + ", ".join(f"{summary[f][2] - summary[f][1]} of {summary[f][2]} {f} shapes "
                                          f"({summary[f][0]:.2f}x)" for f in sorted(won)) if won else "") + ".")
    if not backward:
        text += " None of them is a backward GEMM."
    return text, summary


def _latency(t: pd.DataFrame, shape: str) -> str:
    """regblock against tiled at a large output with a long K (bwd3): warps an SM and K steps."""
    r = {c: _get(t, "regblock", shape, c) for c in ("warps/SM", "blocks", "threads", "K steps a block", "K step",
                                                   "us a K step", "launch occupancy %", "waves", "tflops", "ms")}
    s = {c: _get(t, "tiled", shape, c) for c in r}
    if not (r["warps/SM"] * 4 <= s["warps/SM"] and r["K steps a block"] >= 4 * s["K steps a block"]):
        return ""
    M, K, N = (int(_get(t, "tiled", shape, c)) for c in ("M", "K", "N"))
    return (f"At {shape} (D is {M} x {N}, K = {K}) regblock ({_g(r['tflops'])} TFLOP/s against tiled's "
            f"{_g(s['tflops'])}) launches {r['blocks']:.0f} blocks of {r['threads']:.0f} threads: {r['warps/SM']:.1f} "
            f"warps an SM ({r['launch occupancy %']:.0f}% occupancy) against tiled's {s['warps/SM']:.0f}, and each "
            f"block walks K in {r['K steps a block']:.0f} steps of {r['K step']:.0f} (tiled: "
            f"{s['K steps a block']:.0f} of {s['K step']:.0f}). A step's loads must arrive before its FMAs, and with "
            f"so few warps little else can run meanwhile: {_g(r['us a K step'])} us a step x "
            f"{r['K steps a block']:.0f} steps = {1e3 * r['ms']:.0f} us, where tiled takes "
            f"{math.ceil(s['waves'])} rounds of blocks x {s['K steps a block']:.0f} steps x {_g(s['us a K step'])} us "
            f"= {1e3 * s['ms']:.0f} us.")


def _pair(t: pd.DataFrame) -> tuple[str, str] | None:
    """A fwd1 and a bwd3 shape with the same M, N and K (each within 0.03 of the other) where regblock beats tiled at the
    first and trails it at the second, and its own access pattern waits on L2 at more of the second's
    steps; None where the table has none."""
    timed = t[t["variant"].isin(STEPPED) & t["tflops"].notna()]
    shapes = [s for s in dict.fromkeys(timed["shape"]) if timed[timed["shape"] == s]["variant"].nunique() == 2]
    dims = {s: sorted(int(_get(t, "tiled", s, c)) for c in ("M", "K", "N")) for s in shapes}
    ratio = {s: _get(t, "regblock", s, "tflops") / _get(t, "tiled", s, "tflops") for s in shapes}
    wait = {s: _get(t, "regblock", s, "L2-wait steps %") for s in shapes}
    for win in (s for s in shapes if s.startswith("fwd1") and ratio[s] > 1):
        for lose in (s for s in shapes if s.startswith("bwd3") and ratio[s] < 1):
            if all(abs(a - b) <= 0.03 * b for a, b in zip(dims[win], dims[lose])) and wait[win] < wait[lose]:
                return win, lose
    return None


def _same_dims(t: pd.DataFrame) -> str:
    """What differs where the dimensions do not: where regblock's steps find B."""
    pair = _pair(t)
    if pair is None:
        return ""
    win, lose = pair
    r = {s: {c: _get(t, "regblock", s, c) for c in ("blocks", "warps/SM", "K steps a block", "L2-wait steps %",
                                                    "us a K step", "tflops")} for s in pair}
    reg = tiling("regblock")
    row_bytes = reg.tile_k * ITEM
    tiled = [_get(t, "tiled", s, "tflops") for s in pair]
    same = abs(tiled[0] / tiled[1] - 1) < 0.05
    return (f"The same M, N and K show what else it waits for: at {win} regblock wins "
            f"({_g(r[win]['tflops'])} against {_g(tiled[0])} TFLOP/s) with {r[win]['blocks']:.0f} blocks, "
            f"{r[win]['warps/SM']:.1f} warps an SM and {r[win]['K steps a block']:.0f} steps, as at {lose} "
            f"({r[lose]['blocks']:.0f}, {r[lose]['warps/SM']:.1f}, {r[lose]['K steps a block']:.0f}), where it loses "
            f"({_g(r[lose]['tflops'])} against {_g(tiled[1])}). What differs is the layout of B (the images X, stored "
            f"B x 784): at {win} a block's {reg.tile_k} x {reg.tile_n} tile of it lies across {reg.tile_n} stored rows, "
            f"{row_bytes} bytes of each ({row_bytes / SECTOR:.2g} of a sector), so only "
            f"{r[win]['L2-wait steps %']:.0f}% of its steps touch sectors it has not read before; at {lose} the tile is "
            f"{reg.tile_k} new rows every step ({r[lose]['L2-wait steps %']:.0f}% of steps wait on L2), and a step "
            f"takes {_g(r[lose]['us a K step'])} us against {_g(r[win]['us a K step'])}. The tiled kernel's steps read "
            f"new sectors every time at both" + (", and it runs at the same rate at both." if same else
                                                 f" ({_g(tiled[0])} and {_g(tiled[1])} TFLOP/s)."))


def _small_m(t: pd.DataFrame, shape: str) -> str:
    """regblock against tiled where D has C = 10 rows (bwd1, fwd2)."""
    r = {c: _get(t, "regblock", shape, c) for c in ("idle %", "blocks", "SMs used", "warps/SM", "K steps a block",
                                                   "K step", "us a K step", "tflops", "ms", "waves")}
    s = {c: _get(t, "tiled", shape, c) for c in r}
    M = int(_get(t, "tiled", shape, "M"))
    if M >= 32 or r["idle %"] <= s["idle %"]:
        return ""
    return (f"At {shape} (M = {M}: D has C = 10 rows) regblock's 64-row tiles leave {r['idle %']:.0f}% of their "
            f"output slots outside D (tiled's 32-row ones {s['idle %']:.0f}%), its {r['blocks']:.0f} blocks busy "
            f"{r['SMs used']:.0f} of {H100.sms} SMs with {r['warps/SM'] * H100.sms / max(r['SMs used'], 1):.0f} warps "
            f"each, and each walks {r['K steps a block']:.0f} steps of {r['K step']:.0f} against tiled's "
            f"{s['K steps a block']:.0f} of {s['K step']:.0f}: {_g(r['us a K step'])} us a step x "
            f"{r['K steps a block']:.0f} = {1e3 * r['ms']:.0f} us against {math.ceil(s['waves'])} x "
            f"{s['K steps a block']:.0f} x {_g(s['us a K step'])} us = {1e3 * s['ms']:.0f} us "
            f"({_g(r['tflops'])} against {_g(s['tflops'])} TFLOP/s).")


def _stores(t: pd.DataFrame, shape: str) -> str:
    """regblock against tiled where K = 10 (bwd2): writing D is the work."""
    r = {c: _get(t, "regblock", shape, c) for c in ("d_sectors_per_request", "K steps a block", "K step",
                                                   "K padding %", "tflops", "ms")}
    s = {c: _get(t, "tiled", shape, c) for c in r}
    M, K, N = (int(_get(t, "tiled", shape, c)) for c in ("M", "K", "N"))
    if K >= 32 or r["d_sectors_per_request"] < 4 * s["d_sectors_per_request"]:
        return ""
    mb = ITEM * M * N / 1e6
    return (f"At {shape} (K = {K}) there is little to multiply and D ({mb:.3g} MB) to write: regblock's warps "
            f"store it a column at a time, {r['d_sectors_per_request']:.0f} sectors a request (each lane its own "
            f"row) against tiled's {s['d_sectors_per_request']:.0f}, and walk K in {r['K steps a block']:.0f} steps "
            f"of {r['K step']:.0f} against one of {s['K step']:.0f}: {1e3 * r['ms']:.0f} us against "
            f"{1e3 * s['ms']:.0f} us ({mb / r['ms']:.3g} against {mb / s['ms']:.3g} GB/s of D).")


def _measured(t: pd.DataFrame) -> str:
    """What Nsight Compute measured where it ran, beside what the counts say."""
    occ = "achieved occupancy %"
    if occ not in t or not t[occ].notna().any():
        return ("Nsight Compute has not measured these kernels here (scripts/gpu_gemm_counts.sh on an H100 does): "
                "the counts above are the kernels' own, the times the bench's.")
    have = lambda v, s, c: _get(t, v, s, c) == _get(t, v, s, c)
    shapes = list(dict.fromkeys(t[t[occ].notna()]["shape"]))
    out = []
    b3 = next((s for s in shapes if s.startswith("bwd3") and have("regblock", s, occ) and have("tiled", s, occ)), None)
    if b3:
        stall = {v: _get(t, v, b3, "ncu_stall_long_scoreboard") for v in STEPPED} if "ncu_stall_long_scoreboard" in t else {}
        out.append(f"at {b3} regblock's achieved occupancy was {_get(t, 'regblock', b3, occ):.0f}% against tiled's "
                   f"{_get(t, 'tiled', b3, occ):.0f}%" + (
                       f", and its warps waited on global memory (long scoreboard) {stall['regblock']:.2g} cycles an "
                       f"issued instruction against tiled's {stall['tiled']:.2g}" if stall and all(
                           x == x for x in stall.values()) else ""))
    pair = _pair(t)
    if pair and all(have("regblock", s, "L1 hit %") for s in pair):
        hit = [_get(t, "regblock", s, "L1 hit %") for s in pair]
        out.append(f"regblock's global loads hit L1 for {hit[0]:.0f}% of their sectors at {pair[0]} against "
                   f"{hit[1]:.0f}% at {pair[1]}" + (", as its access pattern says" if hit[0] - hit[1] >= 10 else
                                                    " (regblock wins the first and loses the second): L1 "
                                                    "does not tell them apart, and what does is left open here"))
    b2 = next((s for s in shapes if s.startswith("bwd2") and have("regblock", s, "st sectors/request")), None)
    if b2 and have("tiled", b2, "st sectors/request"):
        out.append(f"at {b2} its stores took {_get(t, 'regblock', b2, 'st sectors/request'):.3g} sectors a request "
                   f"against tiled's {_get(t, 'tiled', b2, 'st sectors/request'):.3g}")
    f = "fwd1 H=512 B=3200" if "fwd1 H=512 B=3200" in shapes else next((s for s in shapes if s.startswith("fwd1")), None)
    if f and all(have(v, f, "L2 B/FLOP") for v in ("naive", "tiled")):
        l2, loads = _get(t, "naive", f, "L2 B/FLOP"), _get(t, "naive", f, "global B/FLOP")
        out.append(f"at {f} naive read {_g(l2)} bytes a FLOP from L2 against tiled's "
                   f"{_g(_get(t, 'tiled', f, 'L2 B/FLOP'))} (" + (
                       f"{loads / l2:.0f}x less than its {_g(loads)} bytes of loads: L1 served the rest)" if l2 < loads
                       else f"no less than its {_g(loads)} bytes of loads: whole sectors fetched for 4-byte reads)"))
    if f and all(have(v, f, occ) for v in ("best", "cublas")):
        out.append(f"best and cuBLAS at {f}: {_get(t, 'best', f, occ):.0f}% and {_get(t, 'cublas', f, occ):.0f}% "
                   f"occupancy, SM throughput {_get(t, 'best', f, 'SM throughput %'):.0f}% and "
                   f"{_get(t, 'cublas', f, 'SM throughput %'):.0f}%, DRAM {_g(_get(t, 'best', f, 'DRAM GB/s'))} and "
                   f"{_g(_get(t, 'cublas', f, 'DRAM GB/s'))} GB/s")
    return ("Nsight Compute on the H100 (scripts/gpu_gemm_counts.sh): " + "; ".join(out) + ".") if out else ""


def l1_refutes(t: pd.DataFrame) -> bool:
    """Nsight Compute measured regblock's L1 hit rate at the same-dimensions pair and saw no gap: the L2-wait
    account of that pair (from its access pattern) does not hold, and the story leaves it out."""
    pair = _pair(t)
    if not pair or "L1 hit %" not in t or not all(_get(t, "regblock", s, "L1 hit %") == _get(t, "regblock", s, "L1 hit %")
                                                 for s in pair):
        return False
    hit = [_get(t, "regblock", s, "L1 hit %") for s in pair]
    return hit[0] - hit[1] < 10


def story(table: pd.DataFrame) -> str:
    """The answer's sentences, from explain()'s table: why each step wins at the forward shape, where
    naive's loads need no tiling, where and why regblock loses to tiled (per backward GEMM: the counts
    in which it trails and the time they account for), and what Nsight Compute measured."""
    shapes = list(dict.fromkeys(table["shape"]))
    forward = "fwd1 H=512 B=3200" if "fwd1 H=512 B=3200" in shapes else next(
        (s for s in shapes if s.startswith("fwd1")), None)
    parts = [_steps(table, forward) if forward else "", _naive_coalescing(table)]
    losses, summary = _losses(table)
    parts.append(losses)
    told = []
    for family, tell in (("bwd3", _latency), ("bwd1", _small_m), ("fwd2", _small_m), ("bwd2", _stores)):
        shape = _family_shape(table, family)
        if shape and summary.get(family, (1, 0, 1))[1] > summary.get(family, (1, 0, 1))[2] / 2:
            sentence = tell(table, shape)
            parts.append(sentence)
            told += [shape] if sentence else []
    pair = _same_dims(table) if not l1_refutes(table) else ""  # a guess Nsight Compute's L1 counts refuted is left out
    parts.append(pair)
    if told:
        why = []
        if any(x.startswith("bwd3") for x in told):
            why.append("its 64-thread blocks leave few warps on each SM" + (" and every bwd3 step waits on L2" if pair
                                                                           else ""))
        if any(x.startswith(("bwd1", "fwd2")) for x in told):
            why.append("with M = 10 most of each tile is idle")
        if any(x.startswith(("bwd3", "bwd1", "fwd2")) for x in told):
            step = {v: _get(table, v, told[0], "K step") for v in STEPPED}
            why.append(f"its K steps of {step['regblock']:.0f} are {step['tiled'] / step['regblock']:.0f} times as "
                       f"many as tiled's, each waited for")
        if any(x.startswith("bwd2") for x in told):
            why.append("with K = 10 it writes D a column at a time")
        parts.append("So regblock's gain, half the shared-memory loads a FLOP, is spent waiting on memory: "
                     + "; ".join(why) + ".")
    parts.append(_measured(table))
    return " ".join(p for p in parts if p)


# ------------------------------------------------------------------ the report's answer
def read_measured(path) -> pd.DataFrame:
    """The device's gemm_counts.csv (scripts/gpu_gemm_counts.sh): a row per (variant, shape)."""
    from perflab.results import read_table
    return read_table(path, ("variant", "shape"), "scripts/gpu_gemm_counts.sh on a GPU writes it")


def answer(bench_path: Path, counts_path: Path | None = None) -> Answer:
    """2019 §4.1-4.2 from the committed GEMM bench and, where given and present, the device's
    counts (Nsight Compute and CuPy's attributes): story() over every bench shape, the table at the
    step's shapes."""
    from perflab.report.answer import Answer
    from perflab.results import relative
    bench = pd.read_csv(bench_path)
    bench = bench[bench["variant"].isin(VARIANTS) & bench["shape"].map(named)]
    measured = read_measured(counts_path) if counts_path is not None and Path(counts_path).exists() else None
    shapes = list(dict.fromkeys(bench["shape"]))
    table = explain(bench, counts(shapes, bench, measured))
    steps = [s for s in STEP_SHAPES if s in shapes]
    caption = ("The GEMM steps at the training shapes, FP32 on one H100: TFLOP/s from the bench; global bytes and "
               "shared loads a FLOP, blocks, warps an SM, output slots outside D, K steps a block and the share of "
               "them that wait on L2, from each kernel's tiling; us a step = time / (K steps x rounds of blocks)"
               + ("; occupancy, L1 hits, L2 bytes a FLOP and DRAM GB/s measured by Nsight Compute." if measured
                  is not None else "."))
    sources = [relative(bench_path)] + ([relative(counts_path)] if measured is not None else [])
    return Answer(story(table), [(shown(table, steps), caption)], sources=sources)


# ------------------------------------------------------------------ on the GPU machine
def _operands(cp, shape: str, rng):
    from perflab.measure.gemm_inputs import gemm_operands
    M, K, N, ta, tb = dims(shape)
    return gemm_operands(cp, rng, M, K, N, ta, tb)


def kernel_of(variant: str, shape: str, bench: pd.DataFrame | None = None):
    """(the CuPy kernel dispatch.gemm() launches for a variant at a shape, its C++ name, its Launch),
    compiling it if need be (CuPy and a GPU needed)."""
    M, K, N, ta, tb = dims(shape)
    config, blocks = bench_choice(bench, shape) if variant == "best" else (None, None)
    run = launch(variant, M, K, N, ta, tb, config, blocks)
    shared = variant in tiles.TILED_VARIANTS and run.blocks != tiles.tile_grid(variant, T, run.config, M, N, K)[0]
    return (dispatch.gemm_function(variant, T, ta, tb, 0, run.config or None, shared),
            kernel_name(variant, shape, config, blocks), run)


def attributes(shapes=STEP_SHAPES, bench: pd.DataFrame | None = None) -> pd.DataFrame:
    """CuPy's attributes of each of perflab's kernels as launched at each shape (num_regs,
    shared_size_bytes, max_threads_per_block, local_size_bytes), beside the recorded launch."""
    rows = []
    for shape in shapes:
        for variant in OWN:
            kernel, name, run = kernel_of(variant, shape, bench)
            a = kernel.attributes
            rows.append({"variant": variant, "shape": shape, "kernel": name, "config": run.config,
                         "grid": "x".join(map(str, run.grid)), "block": "x".join(map(str, run.block)),
                         "launch_dynamic_smem": run.dynamic_smem,
                         **{f"cupy_{k}": a.get(k) for k in ("num_regs", "shared_size_bytes", "max_threads_per_block",
                                                            "local_size_bytes")}})
    return pd.DataFrame(rows)


def _modules(shapes, bench) -> list[tuple[str, tuple]]:
    """The (source, kernel names) modules the shapes' launches need, as catalog.modules() names them."""
    out = {(dispatch.source_file(v), dispatch.gemm_names(v, T)) for v in OWN if v not in tiles.TILED_VARIANTS}
    for shape in shapes:
        config = bench_choice(bench, shape)[0] or launch("best", *dims(shape)[:3]).config
        out.add((dispatch.source_file("best"), dispatch.gemm_names("best", T, config)))
    return sorted(out)


def _bench() -> pd.DataFrame | None:
    """The committed GEMM bench, whose best configs and blocks the device runs (None if absent)."""
    from perflab.results import RESULTS_ROOT
    path = RESULTS_ROOT / "nvidia-h100-80gb-hbm3" / "bench_gemm_float32.csv"
    return pd.read_csv(path) if path.exists() else None


def prepare(shapes, out: Path) -> Path:
    """Device step 1 (no profiler): compile the modules the shapes need, in parallel processes, into
    CuPy's cache (so the profiled process compiles nothing), then record CuPy's kernel attributes."""
    import multiprocessing
    import os
    from concurrent.futures import ProcessPoolExecutor

    from perflab.kernels import compile_one
    from perflab.results import machine_metadata, write_rows
    bench = _bench()
    jobs = _modules(shapes, bench)
    with ProcessPoolExecutor(min(len(jobs), os.cpu_count() or 1), mp_context=multiprocessing.get_context("spawn")) as pool:
        list(pool.map(compile_one, jobs))
    rows = attributes(shapes, bench).to_dict("records")
    for r in rows:
        print(f"{r['shape']:20s} {r['variant']:9s} grid {r['grid']:>9s} block {r['block']:>6s} registers "
              f"{r['cupy_num_regs']} shared {r['cupy_shared_size_bytes']} + {r['launch_dynamic_smem']}")
    return write_rows(out / "gemm_counts_attributes.csv", rows, machine_metadata(), append=False)


def target(shapes) -> None:
    """Device step 2, under Nsight Compute: every variant once at every shape (best with the bench's
    config and blocks), first outside the NVTX range (warm: cuBLAS's handle, the modules), then inside
    `counts`, in the order assign() reads back: shape by shape, VARIANTS in order."""
    import cupy as cp

    from perflab import kernels
    bench = _bench()
    rng = np.random.default_rng(0)
    runs = []
    for shape in shapes:
        M, K, N, _, _ = dims(shape)
        a, b = _operands(cp, shape, rng)
        config, blocks = bench_choice(bench, shape)
        out, work = cp.empty((M, N), "float32"), kernels.workspace(M, N, "float32")
        for variant in VARIANTS:
            best = {"config": config, "blocks": blocks, "work": work} if variant == "best" else {}
            runs.append(lambda a=a, b=b, out=out, v=variant, k=best: kernels.gemm(a, b, out=out, variant=v, **k))
    for run in runs:
        run()
    cp.cuda.Device().synchronize()
    cp.cuda.nvtx.RangePush("counts")
    for run in runs:
        run()
    cp.cuda.Device().synchronize()
    cp.cuda.nvtx.RangePop()


# Nsight Compute's metrics (raw page names) -> this file's columns. The sections SpeedOfLight, Occupancy and
# LaunchStats collect the first group; scripts/gpu_gemm_counts.sh asks for the rest by name.
NCU_COLUMNS = {
    "gpu__time_duration.sum": "ncu_duration_ns",
    "sm__cycles_elapsed.avg.per_second": "ncu_sm_hz",
    "launch__grid_size": "ncu_blocks",
    "launch__block_size": "ncu_threads",
    "launch__registers_per_thread": "ncu_registers",
    "launch__shared_mem_per_block_static": "ncu_smem_static",
    "launch__shared_mem_per_block_dynamic": "ncu_smem_dynamic",
    "launch__waves_per_multiprocessor": "ncu_waves",
    "launch__occupancy_limit_registers": "ncu_limit_registers",
    "launch__occupancy_limit_shared_mem": "ncu_limit_shared_mem",
    "launch__occupancy_limit_warps": "ncu_limit_warps",
    "launch__occupancy_limit_blocks": "ncu_limit_blocks",
    "sm__maximum_warps_per_active_cycle_pct": "ncu_theoretical_occupancy_pct",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "ncu_achieved_occupancy_pct",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": "ncu_sm_throughput_pct",
    "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed": "ncu_memory_throughput_pct",
    # by name
    "dram__bytes_read.sum": "ncu_dram_read_bytes",
    "dram__bytes_write.sum": "ncu_dram_write_bytes",
    "lts__t_sectors_srcunit_tex_op_read.sum": "ncu_l2_read_sectors",
    "lts__t_sector_hit_rate.pct": "ncu_l2_hit_pct",
    "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum": "ncu_global_ld_sectors",
    "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum": "ncu_global_ld_requests",
    "l1tex__t_sector_pipe_lsu_mem_global_op_ld_hit_rate.pct": "ncu_l1_ld_hit_pct",
    "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum": "ncu_global_st_sectors",
    "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum": "ncu_global_st_requests",
    "smsp__inst_executed_op_shared_ld.sum": "ncu_shared_ld_requests",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum": "ncu_shared_ld_wavefronts",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum": "ncu_shared_ld_bank_conflicts",
    "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum": "ncu_ffma_threads",
    "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active": "ncu_fma_pipe_pct",
    **{f"smsp__average_warps_issue_stalled_{s}_per_issue_active.ratio": f"ncu_stall_{s}"
       for s in ("long_scoreboard", "barrier", "lg_throttle", "mio_throttle", "short_scoreboard",
                 "math_pipe_throttle", "not_selected", "wait")},
}
NCU_SECTIONED = tuple(NCU_COLUMNS)[:16]  # collected by the sections
NCU_NAMED = tuple(NCU_COLUMNS)[16:]  # the script's --metrics list
# those of them this H100's Nsight Compute has printed before (docs/DECISIONS.md, D1): the script's second try if
# the first fails on a name
NCU_PROVEN = tuple(m for m in NCU_NAMED if m.startswith(("dram__bytes_read", "lts__t_sector_hit_rate", "smsp__",
                                                         "l1tex__data_", "sm__pipe_fma")))


def read_ncu_csv(text: str) -> list[dict]:
    """`ncu -i REPORT --csv --page raw --print-units base`: one dict per profiled kernel, in launch
    (ID) order, numbers as floats (thousands separators dropped), the units row left out."""
    import csv
    import io
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        return []
    rows = []
    for row in csv.DictReader(io.StringIO("\n".join(lines[start:]))):
        if not str(row.get("ID", "")).strip().isdigit():
            continue  # the units row
        rows.append({k: _ncu_value(v) for k, v in row.items() if k})
    return sorted(rows, key=lambda r: r["ID"])


def _ncu_value(v):
    s = (v or "").strip()
    plain = s.replace(",", "")
    if re.fullmatch(r"-?\d+(\.\d+)?([eE][-+]?\d+)?", plain):
        return float(plain)
    return s


OWN_KERNEL = re.compile(r"\bgemm_(naive|tiled|regblock|best)\b")


def _name(kernel: dict) -> str:
    """A profiled kernel's name, whichever name column this ncu prints."""
    return str(next((kernel[c] for c in ("Kernel Name", "Demangled Name", "Function Name") if kernel.get(c)), ""))


def assign(kernels: list[dict], shapes) -> list[dict]:
    """Nsight Compute's kernels in launch order -> one row per (variant, shape), as target() launched
    them: at each shape perflab's four kernels, one each, then every kernel up to the next shape's
    naive is cuBLAS's (their times, bytes and counts summed; occupancy and launch from the longest)."""
    out, i = [], 0
    for shape in shapes:
        for variant in OWN:
            if i >= len(kernels):
                raise ValueError(f"Nsight Compute's report ends before {variant} at {shape} ({len(kernels)} kernels)")
            found = OWN_KERNEL.search(_name(kernels[i]))
            if not found or found[1] != variant:
                raise ValueError(f"kernel {i} of Nsight Compute's report is {_name(kernels[i])!r}, "
                                 f"where gemm_{variant} at {shape} was launched")
            out.append({"variant": variant, "shape": shape, **_ncu_row([kernels[i]])})
            i += 1
        theirs = []
        while i < len(kernels) and not OWN_KERNEL.search(_name(kernels[i])):
            theirs.append(kernels[i])
            i += 1
        if theirs:
            out.append({"variant": "cublas", "shape": shape, **_ncu_row(theirs)})
    if i < len(kernels):
        raise ValueError(f"Nsight Compute's report has {len(kernels) - i} kernels more than {len(shapes)} shapes launch")
    return out


def _ncu_row(kernels: list[dict]) -> dict:
    longest = max(kernels, key=lambda k: _number(k.get("gpu__time_duration.sum")) or 0)
    row = {"ncu_kernel": " + ".join(_name(k) for k in kernels), "ncu_kernels": len(kernels)}
    for metric, column in NCU_COLUMNS.items():
        values = [_number(k.get(metric)) for k in kernels]
        if metric.endswith(".sum"):
            row[column] = float(np.nansum(values)) if any(v == v for v in values) else np.nan
        else:
            row[column] = _number(longest.get(metric))
    return row


def collect(shapes, out: Path) -> Path:
    """Device step 3: CuPy's attributes (prepare) and Nsight Compute's report (its raw page as CSV,
    if the profiler ran) joined per (variant, shape) into gemm_counts.csv + .json."""
    import json

    from perflab.results import machine_metadata, write_rows
    found = out / "gemm_counts_attributes.csv"
    attrs = pd.read_csv(found) if found.exists() else pd.DataFrame(columns=["variant", "shape"])
    raw = out / "gemm_counts_ncu.csv"
    meta = {**machine_metadata(), "shapes": list(shapes), "variants": list(VARIANTS),
            "writer": "scripts/gpu_gemm_counts.sh (perflab.analysis.gemm_counts collect)"}
    measured, note = [], "no Nsight Compute report (scripts/gpu_gemm_counts.sh: ncu missing or failed)"
    if raw.exists() and raw.stat().st_size:
        try:
            measured = assign(read_ncu_csv(raw.read_text()), shapes)
            note = f"{sum(r['ncu_kernels'] for r in measured)} kernels profiled"
        except ValueError as exc:
            note = f"Nsight Compute's report not read: {exc}"
    meta["ncu"] = note
    meta["cupy_attributes"] = "recorded" if found.exists() else "missing (the prepare step failed)"
    print(note)
    rows = []
    for shape in shapes:
        M, K, N, ta, tb = dims(shape)
        for variant in VARIANTS:
            row = {"variant": variant, "shape": shape, "M": M, "K": K, "N": N, "a_transposed": ta, "b_transposed": tb}
            a = attrs[(attrs["variant"] == variant) & (attrs["shape"] == shape)]
            if len(a):
                row.update({k: v for k, v in a.iloc[0].to_dict().items() if k not in row})
            m = next((r for r in measured if r["variant"] == variant and r["shape"] == shape), {})
            row.update({k: v for k, v in m.items() if k not in ("variant", "shape")})
            rows.append(row)
    path = write_rows(out / "gemm_counts.csv", rows, meta, append=False)
    print(json.dumps({"rows": len(rows), "file": str(path)}))
    return path


def main(argv=None) -> int:
    import argparse
    p = argparse.ArgumentParser(prog="python3 -m perflab.analysis.gemm_counts",
                                description="scripts/gpu_gemm_counts.sh's steps on the GPU machine")
    p.add_argument("step", choices=("prepare", "target", "collect", "story"))
    p.add_argument("shapes", nargs="*", help=f"training shape names (default: {', '.join(STEP_SHAPES)})")
    p.add_argument("--out", type=Path, default=Path("."), help="folder of the step's files")
    args = p.parse_args(argv)
    shapes = args.shapes or list(STEP_SHAPES)
    if unknown := [s for s in shapes if not named(s)]:
        p.error(f"unknown shape(s) {unknown}: name each as 'fwd1 H=512 B=3200' (fwd1, bwd3, fwd2, bwd1, bwd2)")
    if args.step == "prepare":
        prepare(shapes, args.out)
    elif args.step == "target":
        target(shapes)
    elif args.step == "collect":
        collect(shapes, args.out)
    else:  # what the report would say with the counts just collected
        from perflab.results import RESULTS_ROOT
        print(answer(RESULTS_ROOT / "nvidia-h100-80gb-hbm3" / "bench_gemm_float32.csv", args.out / "gemm_counts.csv").text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
