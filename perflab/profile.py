"""Phase timers named as the seeds' NVTX ranges, for `--profile` runs.

    with phase("forward GEMM 1"): ...
does nothing unless a Profiler is active (the default: then only whole epochs are timed and
nothing synchronizes, so profiling never slows the numbers compared with peers). An active
Profiler pushes an NVTX range (on the GPU) and times the phase: CUDA events on the GPU, with
the device synchronized at phase edges (as the seeds' barriers do, for clean attribution),
a monotonic clock on the CPU. Records form a tidy table: one row per phase, batch, rank.

A Timeline (`timeline()`) is the other way to look: nothing synchronizes, the fast path runs as
it does unobserved, and each phase keeps where it started and ended on the stream that ran it
(CUDA events) and on the host clock, so overlapping streams show as overlapping ranges.
"""
from __future__ import annotations

import contextlib
import time

PHASES = ("train setup", "batch iteration", "copying images host -> device", "forward", "forward GEMM 1",
          "forward GEMM 2", "backward", "backward GEMM 1", "backward GEMM 2", "backward GEMM 3",
          "cudaMemcpyDeviceToHost", "MPI_Allreduce", "cudaMemcpyHostToDevice", "step")

ACTIVE = None    # the Profiler of a --profile run
TIMELINE = None  # the Timeline being recorded
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


class Timeline:
    """Where each phase ran, without changing how the step runs (no synchronization): device
    start and end from CUDA events on the phase's stream, host start and end from the clock, both
    in seconds from one origin (an event the host waited for)."""

    def __init__(self, rank: int = 0, cuda=None):
        self.rank, self.cuda, self.batch = rank, cuda, -1
        self.pending = []
        cuda.cuda.Device().synchronize()
        self.origin = cuda.cuda.Event()
        self.origin.record()
        self.origin.synchronize()
        self.host_origin = time.perf_counter()

    @contextlib.contextmanager
    def phase(self, name: str):
        Event, stream = self.cuda.cuda.Event, self.cuda.cuda.get_current_stream()
        start = Event()
        start.record(stream)
        host_start = time.perf_counter()
        try:
            yield
        finally:
            stop = Event()
            stop.record(stream)
            self.pending.append((name, self.batch, stream.ptr, start, stop, host_start, time.perf_counter()))

    def table(self):
        import pandas as pd
        self.cuda.cuda.Device().synchronize()
        since = lambda event: self.cuda.cuda.get_elapsed_time(self.origin, event) * 1e-3
        rows = [{"phase": name, "batch": batch, "rank": self.rank, "stream": stream, "device_start": since(start),
                 "device_end": since(stop), "host_start": h0 - self.host_origin, "host_end": h1 - self.host_origin}
                for name, batch, stream, start, stop, h0, h1 in self.pending]
        return pd.DataFrame(rows, columns=["phase", "batch", "rank", "stream", "device_start", "device_end",
                                           "host_start", "host_end"])


def phase(name: str):
    if ACTIVE is not None:
        return ACTIVE.phase(name)
    return TIMELINE.phase(name) if TIMELINE is not None else NOTHING


def recording() -> bool:
    """Whether phases are being recorded (then no CUDA graph: its kernels could not be told apart)."""
    return ACTIVE is not None or TIMELINE is not None


def current():
    """The active Profiler or Timeline, or None."""
    return ACTIVE if ACTIVE is not None else TIMELINE


@contextlib.contextmanager
def timeline(rank: int = 0, cuda=None):
    """Record a Timeline for the block; yields it."""
    global TIMELINE
    previous, TIMELINE = TIMELINE, Timeline(rank, cuda)
    try:
        yield TIMELINE
    finally:
        TIMELINE = previous


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
