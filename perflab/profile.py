"""Phase timers named as the seeds' NVTX ranges, for `--profile` runs.

    with phase("forward GEMM 1"): ...
does nothing unless a Profiler is active (the default: then only whole epochs are timed and
nothing synchronizes, so profiling never slows the numbers compared with peers). An active
Profiler pushes an NVTX range (on the GPU) and times the phase: CUDA events on the GPU, with
the device synchronized at phase edges (as the seeds' barriers do, for clean attribution),
a monotonic clock on the CPU. Records form a tidy table: one row per phase, batch, rank.
"""
from __future__ import annotations

import contextlib
import time

PHASES = ("train setup", "batch iteration", "copying images host -> device", "forward", "forward GEMM 1",
          "forward GEMM 2", "backward", "backward GEMM 1", "backward GEMM 2", "backward GEMM 3",
          "cudaMemcpyDeviceToHost", "MPI_Allreduce", "cudaMemcpyHostToDevice", "step")

ACTIVE = None
NOTHING = contextlib.nullcontext()


class Profiler:
    def __init__(self, rank: int = 0, cuda=None):
        self.rank, self.cuda, self.batch = rank, cuda, -1
        self.rows, self.pending = [], []

    @contextlib.contextmanager
    def phase(self, name: str):
        cp = self.cuda
        if cp is not None:
            cp.cuda.nvtx.RangePush(name)
            cp.cuda.get_current_stream().synchronize()
            start = cp.cuda.Event()
            start.record()
        t0 = time.perf_counter()
        try:
            yield
        finally:
            if cp is not None:
                stop = cp.cuda.Event()
                stop.record()
                stop.synchronize()
                self.pending.append((name, self.batch, start, stop))
                cp.cuda.nvtx.RangePop()
            else:
                self.rows.append({"phase": name, "batch": self.batch, "rank": self.rank,
                                  "seconds": time.perf_counter() - t0})

    def table(self):
        import pandas as pd
        for name, batch, start, stop in self.pending:
            self.rows.append({"phase": name, "batch": batch, "rank": self.rank,
                              "seconds": self.cuda.cuda.get_elapsed_time(start, stop) * 1e-3})
        self.pending = []
        return pd.DataFrame(self.rows, columns=["phase", "batch", "rank", "seconds"])


def phase(name: str):
    return ACTIVE.phase(name) if ACTIVE is not None else NOTHING


@contextlib.contextmanager
def profiling(rank: int = 0, cuda=None):
    """Activate a Profiler for the block; yields it."""
    global ACTIVE
    previous, ACTIVE = ACTIVE, Profiler(rank, cuda)
    try:
        yield ACTIVE
    finally:
        ACTIVE = previous


def summary(table):
    """Like Nsight's NVTX range summary: total, instances, median, min, max per phase, and
    each phase's share of the batch iterations' total time (ranks pooled)."""
    g = table.groupby("phase", sort=False)["seconds"]
    out = g.agg(total="sum", instances="count", median="median", min="min", max="max")
    whole = out.loc["batch iteration", "total"] if "batch iteration" in out.index else out["total"].sum()
    out["share"] = out["total"] / whole
    order = [p for p in PHASES if p in out.index] + [p for p in out.index if p not in PHASES]
    return out.loc[order]
