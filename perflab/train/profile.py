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

from perflab.train.step import backward_gemm, forward_gemm

PHASES = ("train setup", "batch iteration", "copying images host -> device", "forward", forward_gemm(1), forward_gemm(2),
          "backward", backward_gemm(1), backward_gemm(2), backward_gemm(3), "cudaMemcpyDeviceToHost", "MPI_Allreduce",
          "cudaMemcpyHostToDevice", "step")

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
    start and end from CUDA events on the phase's stream, host start and end from the clock, all
    in seconds from the first phase's host time. Each GPU gets its own origin event (the host waits
    for it once), as a rank picks its GPU after the first phase began; a phase that began on one
    GPU and ended on another (the setup) keeps its host times only."""

    def __init__(self, rank: int = 0, cuda=None):
        self.rank, self.cuda, self.batch = rank, cuda, -1
        self.pending, self.origins = [], {}
        self.host_origin = time.perf_counter()

    def device(self) -> int:
        """The current GPU, with its origin event recorded on first use."""
        cuda = self.cuda.cuda
        device = cuda.Device().id
        if device not in self.origins:
            cuda.Device().synchronize()
            origin = cuda.Event()
            origin.record()
            origin.synchronize()
            self.origins[device] = (origin, time.perf_counter() - self.host_origin)
        return device

    @contextlib.contextmanager
    def phase(self, name: str):
        Event, stream = self.cuda.cuda.Event, self.cuda.cuda.get_current_stream()
        first = self.device()
        start = Event()
        start.record(stream)
        host_start = time.perf_counter()
        try:
            yield
        finally:
            stream = self.cuda.cuda.get_current_stream()
            last = self.device()
            stop = Event()
            stop.record(stream)
            self.pending.append((name, self.batch, stream.ptr, start, stop, host_start, time.perf_counter(),
                                 first if first == last else None))

    def table(self):
        import pandas as pd
        cuda = self.cuda.cuda

        def since(device, event):
            if device is None:
                return float("nan")
            origin, at = self.origins[device]
            with cuda.Device(device):
                return at + cuda.get_elapsed_time(origin, event) * 1e-3
        for device in self.origins:
            cuda.Device(device).synchronize()
        rows = [{"phase": name, "batch": batch, "rank": self.rank, "stream": stream, "device_start": since(device, start),
                 "device_end": since(device, stop), "host_start": h0 - self.host_origin, "host_end": h1 - self.host_origin}
                for name, batch, stream, start, stop, h0, h1, device in self.pending]
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
def paused():
    """Nothing recorded in the block: the test set's precision between epochs ran its forward GEMMs
    under the training phases' names, so a profile counted them as training (shares above 1)."""
    global ACTIVE, TIMELINE
    saved, (ACTIVE, TIMELINE) = (ACTIVE, TIMELINE), (None, None)
    try:
        yield
    finally:
        ACTIVE, TIMELINE = saved


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
