"""Predicted scaling to p GPUs, written down before it is measured (issue: eight-GPU run).

Per step (b samples per GPU, N an epoch, steps = ceil(N / (b p))):
  data parallel   t = t_compute(H, b) + [p > 1] (t_eager + t_allreduce(S, p))
  model parallel  t = t_compute(H, b) + [p > 1] (t_eager + t_allreduce(C b p bytes, p))
    (each GPU holds H/p hidden units of the whole batch b p: the same GEMM work as b samples
    of the whole net; it exchanges the C x B logits instead of the gradients)
  hierarchical    on one node all GPUs share NVLink, so it is the flat ring (it differs across
    nodes only: reduce in the node, ring across nodes, broadcast in the node)
  t_allreduce(S, p) = alpha + 2 (p - 1) / p * S / BW_bus, the ring; alpha and BW_bus fitted to
    the NCCL all-reduce measured at p = 2 (sizes >= 1 MiB) and carried to p = 4, 8 unchanged.
  t_compute(H, b): the measured one-GPU step at the measured batch, scaled linearly in b above a
    fixed per-step cost t_fixed (the launch chain of a graph-replayed step).
  t_eager: what a multi-GPU step pays for launching its kernels one by one (CUDA graphs are off
    with NCCL), calibrated on the measured p = 2 point, which is therefore not an independent test.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

D, C = 784, 10
T_FIXED = 40e-6


def fit_allreduce(ceilings: pd.DataFrame, min_bytes: int = 1 << 20) -> tuple[float, float]:
    """(alpha seconds, bus bandwidth B/s) of t = alpha + S_bus / BW from NCCL rows at p = 2."""
    rows = ceilings[(ceilings.ceiling == "nccl_allreduce") & (ceilings.size_bytes >= min_bytes)]
    p = rows.ranks.iloc[0]
    bus = rows.size_bytes * 2 * (p - 1) / p
    slope, alpha = np.polyfit(bus, rows.seconds, 1)
    return float(alpha), float(1 / slope)


def allreduce_seconds(nbytes: float, p: int, alpha: float, bw: float) -> float:
    return 0.0 if p == 1 else alpha + 2 * (p - 1) / p * nbytes / bw


def step_seconds(measured_step: float, measured_b: int, b: int) -> float:
    return T_FIXED + (measured_step - T_FIXED) * b / measured_b


def project(H: int, b: int, p: int, N: int, measured_step: float, measured_b: int, alpha: float, bw: float,
            t_eager: float, parallel: str = "data") -> dict:
    steps = math.ceil(N / (b * p))
    compute = step_seconds(measured_step, measured_b, b)
    payload = (H * D + H + C * H + C) * 4 if parallel == "data" else C * b * p * 4
    exchange = allreduce_seconds(payload, p, alpha, bw) + (t_eager if p > 1 else 0.0)
    return {"H": H, "b": b, "p": p, "N": N, "parallel": parallel, "steps": steps, "step_ms": 1e3 * (compute + exchange),
            "allreduce_ms": 1e3 * allreduce_seconds(payload, p, alpha, bw), "epoch_ms": 1e3 * steps * (compute + exchange)}


def predictions(results: Path, hidden=(512, 2048), per_gpu=(800, 3000), ranks=(1, 2, 4, 8), N=60000) -> dict:
    """The prediction from the committed H200 files (ceilings_p2.csv, roofline.csv, scaling.jsonl)."""
    folder = Path(results) / "nvidia-h200"
    alpha, bw = fit_allreduce(pd.read_csv(folder / "ceilings_p2.csv"))
    sweep = pd.read_csv(folder / "roofline.csv")
    one = sweep[(sweep["mode"] == "resident") & (sweep.p == 1)]
    measured = {int(r.H): (r.epoch_seconds / r.batches, int(r.B)) for r in one.itertuples()}
    scaling = [json.loads(line) for line in (folder / "scaling.jsonl").read_text().splitlines() if line.startswith("{")]
    p1 = next(s for s in scaling if s["peer"] == "perflab resident" and s["p"] == 1)
    p2 = next(s for s in scaling if s["peer"] == "perflab resident" and s["p"] == 2)
    measured[p1["H"]] = (p1["epoch_ms"] * 1e-3 / math.ceil(N / p1["b"]), p1["b"])  # the run the 8-GPU one repeats
    step1, b1 = measured[p2["H"]]
    S = (p2["H"] * D + p2["H"] + C * p2["H"] + C) * 4
    t_eager = p2["epoch_ms"] * 1e-3 / math.ceil(N / (p2["b"] * 2)) - step_seconds(step1, b1, p2["b"]) \
        - allreduce_seconds(S, 2, alpha, bw)
    rows = []
    for H in hidden:
        step, mb = measured[H]
        for b in per_gpu:
            for parallel in ("data", "model"):
                base = None
                for p in ranks:
                    row = project(H, b, p, N, step, mb, alpha, bw, max(t_eager, 0.0), parallel)
                    base = base or row["epoch_ms"]
                    row["efficiency"] = base / (p * row["epoch_ms"])
                    rows.append(row)
    return {"method": __doc__.strip(), "alpha_us": 1e6 * alpha, "bus_bandwidth_GBps": bw / 1e9,
            "t_eager_us": 1e6 * t_eager, "t_fixed_us": 1e6 * T_FIXED,
            "inputs": ["results/nvidia-h200/ceilings_p2.csv", "results/nvidia-h200/roofline.csv",
                       "results/nvidia-h200/scaling.jsonl"],
            "hierarchical": "same as data parallel (flat ring) on one node of eight", "rows": rows}
