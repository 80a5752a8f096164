"""Timelines of a few training steps: where each phase ran, on which stream, overlapping what.

`record` trains a short run per mode under a profile.Timeline (nothing synchronized, the fast
path as it runs unobserved) and keeps the second epoch's steps; `lanes` sorts the ranges into
the lanes a reader compares between the serial and the pipelined staged path: compute, the
images' copy, the gradients down, the host all-reduce, the gradients up.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pandas is imported where it is used: every perflab command's start reads this module
    import pandas as pd

LANES = {"forward": "compute", "backward": "compute", "step": "compute",
         "copying images host -> device": "images host -> device",
         "cudaMemcpyDeviceToHost": "gradients device -> host",
         "MPI_Allreduce": "MPI all-reduce (host)",
         "cudaMemcpyHostToDevice": "gradients host -> device"}
HOST_PHASES = ("MPI_Allreduce",)  # run by the host on the staged paths: its clock, not a stream's events, says when
DEVICE_EXCHANGE = "NCCL all-reduce (side stream)"  # the all-reduce where NCCL runs it: resident data, --overlap
LANE_ORDER = list(dict.fromkeys(LANES.values())) + [DEVICE_EXCHANGE]
TIMELINE_MODES = ("resident", "staged", "pipelined", "overlap")  # overlap: resident with --overlap (WFBP past one layer)


def record(cfg, comm, modes=("staged", "pipelined"), gemm: str = "cublas", chunks: int = 4, log=None) -> pd.DataFrame:
    """Every rank's phase ranges of the second of two epochs (the first pays for compilation and
    warm-up), one run per mode; on every rank (the caller keeps rank 0's or all)."""
    import pandas as pd

    from perflab.train.runner import train_on_ranks
    from perflab.train.spec import RunSpec
    tables = []
    for mode in modes:
        spec = RunSpec(backend="cupy", parallel="data", mode="resident" if mode == "overlap" else mode, gemm=gemm,
                       exchange={"resident": "nccl", "overlap": "overlap"}.get(mode, "mpi"), chunks=chunks, dtype=cfg.dtype)
        history, _ = train_on_ranks(cfg.replace(num_epochs=2), "data", comm, spec, log=None, timeline=True)
        t = history.phases
        t = t[t.batch >= cfg.num_batches].assign(mode=mode, batch=lambda d: d.batch - cfg.num_batches)
        tables.append(t.assign(epoch_seconds=history.epochs[-1]["seconds"], dtype=cfg.dtype))
        if log:
            log(f"{mode}: {len(t)} ranges, epoch {1e3 * history.epochs[-1]['seconds']:.2f} ms")
    return pd.concat(tables, ignore_index=True)


def lanes(table: pd.DataFrame) -> pd.DataFrame:
    """The ranges that belong to a lane, in milliseconds from each (mode, rank)'s first start:
    columns mode, rank, batch, lane, phase, start_ms, end_ms."""
    t = table[table.phase.isin(LANES)].copy()
    on_device = t["mode"].isin(["resident", "overlap"])  # NCCL's all-reduce: events on its stream say when
    host = t.phase.isin(HOST_PHASES) & ~on_device
    t["start_ms"] = 1e3 * t.device_start.where(~host, t.host_start)
    t["end_ms"] = 1e3 * t.device_end.where(~host, t.host_end)
    t["lane"] = t.phase.map(LANES).where(~(t.phase.isin(HOST_PHASES) & on_device), DEVICE_EXCHANGE)
    t = t[t.end_ms >= t.start_ms]
    origin = t.groupby(["mode", "rank"]).start_ms.transform("min")
    t["start_ms"] -= origin
    t["end_ms"] -= origin
    return t[["mode", "rank", "batch", "lane", "phase", "start_ms", "end_ms"]].reset_index(drop=True)


def first_rank_busy(table: pd.DataFrame) -> pd.DataFrame:
    """busy() of a recorded timeline's lanes on rank 0, the rank the report shows."""
    spans = busy(lanes(table))
    return spans[spans["rank"] == 0]


def busy(lanes_table: pd.DataFrame) -> pd.DataFrame:
    """Per mode and lane: milliseconds busy (ranges merged, so nested ones count once) and the span of
    all lanes, from which overlap reads off: in series the lanes' sum is the span, overlapped it is more."""
    import pandas as pd
    rows = []
    for (mode, rank, lane), g in lanes_table.groupby(["mode", "rank", "lane"]):
        total, end = 0.0, -float("inf")
        for s, e in sorted(zip(g.start_ms, g.end_ms)):
            s = max(s, end)
            if e > s:
                total += e - s
            end = max(end, e)
        rows.append({"mode": mode, "rank": rank, "lane": lane, "busy_ms": total})
    out = pd.DataFrame(rows)
    span = lanes_table.groupby(["mode", "rank"]).end_ms.max().rename("span_ms")
    return out.merge(span.reset_index(), on=["mode", "rank"])
