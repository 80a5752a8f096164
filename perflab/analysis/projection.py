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
  t_eager: what a multi-GPU step pays beyond its compute and all-reduce (launching its kernels one
    by one while CUDA graphs were off with NCCL; since, the all-reduce and update launched after a
    graph of the rest), calibrated on the measured p = 2 point, which is therefore not an independent
    test. The scaling file it is calibrated from is named in "inputs" (p8.json: the eager steps).
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

D, C = 784, 10
T_FIXED = 40e-6
# each committed prediction (predictions/NAME.json under the results root) and the scaling runs it was calibrated on,
# kept apart from scaling.jsonl, which newer runs replace (p8.json names the file as it was called then)
CALIBRATIONS = {"p8": "scaling_calibration.jsonl", "p8_graphs": "scaling_calibration_graphs.jsonl"}
DEFAULT_CALIBRATION = CALIBRATIONS["p8"]
MULTINODE_CALIBRATION = CALIBRATIONS["p8_graphs"]  # the calibration the 64-GPU projection was drawn from


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


def calibration(results: Path, N: int = 60000, scaling: str = DEFAULT_CALIBRATION) -> dict:
    """What the projections take from the committed H200 files: the NCCL fit, each H's measured
    one-GPU step, and t_eager (from the p = 2 run of H = 2048, 3000 per GPU). The scaling runs
    are those the eight-GPU prediction was computed from (scaling_calibration.jsonl, the first
    session's scaling.jsonl), so the committed prediction stays reproducible as scaling.jsonl
    gains newer runs; `scaling` names another scaling file of that folder)."""
    folder = Path(results) / "nvidia-h200"
    inputs = folder / "projection_inputs"  # the ceilings and sweep of the time, kept as they were when newer runs came
    alpha, bw = fit_allreduce(pd.read_csv(inputs / "ceilings_p2.csv"))
    sweep = pd.read_csv(inputs / "roofline.csv")
    one = sweep[(sweep["mode"] == "resident") & (sweep.p == 1)]
    measured = {int(r.H): (r.epoch_seconds / r.batches, int(r.B)) for r in one.itertuples()}
    runs = [json.loads(line) for line in (folder / scaling).read_text().splitlines() if line.startswith("{")]
    p1 = next(s for s in runs if s["peer"] == "perflab resident" and s["p"] == 1)
    p2 = next(s for s in runs if s["peer"] == "perflab resident" and s["p"] == 2)
    measured[p1["H"]] = (p1["epoch_ms"] * 1e-3 / math.ceil(N / p1["b"]), p1["b"])  # the run the 8-GPU one repeats
    step1, b1 = measured[p2["H"]]
    S = (p2["H"] * D + p2["H"] + C * p2["H"] + C) * 4
    t_eager = p2["epoch_ms"] * 1e-3 / math.ceil(N / (p2["b"] * 2)) - step_seconds(step1, b1, p2["b"]) \
        - allreduce_seconds(S, 2, alpha, bw)
    return {"alpha": alpha, "bw": bw, "measured": measured, "t_eager": max(t_eager, 0.0),
            "inputs": [f"results/nvidia-h200/{n}" for n in ("projection_inputs/ceilings_p2.csv",
                                                              "projection_inputs/roofline.csv", scaling)]}


def predictions(results: Path, hidden=(512, 2048), per_gpu=(800, 3000), ranks=(1, 2, 4, 8), N=60000,
                scaling: str = DEFAULT_CALIBRATION) -> dict:
    """The prediction from the committed H200 files (ceilings_p2.csv, roofline.csv and a scaling file)."""
    cal = calibration(results, N, scaling)
    rows = []
    for H in hidden:
        step, mb = cal["measured"][H]
        for b in per_gpu:
            for parallel in ("data", "model"):
                base = None
                for p in ranks:
                    row = project(H, b, p, N, step, mb, cal["alpha"], cal["bw"], cal["t_eager"], parallel)
                    base = base or row["epoch_ms"]
                    row["efficiency"] = base / (p * row["epoch_ms"])
                    rows.append(row)
    return {"method": __doc__.strip(), "alpha_us": 1e6 * cal["alpha"], "bus_bandwidth_GBps": cal["bw"] / 1e9,
            "t_eager_us": 1e6 * cal["t_eager"], "t_fixed_us": 1e6 * T_FIXED,
            "inputs": cal["inputs"],
            "hierarchical": "same as data parallel (flat ring) on one node of eight", "rows": rows}


def multinode(results: Path, H=2048, b=3000, N=60000, per_node=8, inter=(5e-6, 25e9), ranks=(1, 2, 4, 8, 16, 32, 64),
              scaling: str = DEFAULT_CALIBRATION):
    """Projection to 64 GPUs on nodes of per_node H200s joined by a network of the given
    (latency per ring step, bandwidth per node); NVLink inside a node as measured."""
    cal = calibration(results, N, scaling)
    step, mb = cal["measured"][H]
    return projection_table(H, b, N, step, mb, cal["t_eager"], (cal["alpha"], cal["bw"]), inter, per_node, ranks)


def allreduce_nodes(nbytes: float, p: int, per_node: int, intra: tuple, inter: tuple, strategy: str) -> float:
    """All-reduce time over p GPUs on nodes of per_node GPUs. intra: (alpha s, bandwidth B/s) of
    the NVLink all-reduce inside a node (fitted); inter: (latency per ring step s, bandwidth B/s)
    of a node's network link.
    flat: one ring over all p ranks, bounded by its inter-node links once it spans nodes:
        2(p-1) steps of latency + 2(p-1)/p S at the network rate.
    hierarchical: all-reduce inside the node at the NVLink rate, a ring across the n node
        leaders (2(n-1) steps + 2(n-1)/n S at the network rate); the broadcast back rides in the
        node's all-reduce. Fewer network steps is where it wins (the lecture's hybrid all-reduce)."""
    if p == 1:
        return 0.0
    nodes = math.ceil(p / per_node)
    if nodes == 1:
        return allreduce_seconds(nbytes, p, *intra)
    k = p if strategy == "flat" else nodes
    across = 2 * (k - 1) * inter[0] + 2 * (k - 1) / k * nbytes / inter[1]
    inside = allreduce_seconds(nbytes, min(p, per_node), *intra) if strategy != "flat" else 0.0
    return inside + across


def projection_table(H: int, b: int, N: int, measured_step: float, measured_b: int, t_eager: float, intra: tuple,
                     inter: tuple, per_node: int = 8, ranks=(1, 2, 4, 8, 16, 32, 64)) -> pd.DataFrame:
    """Epoch time and efficiency to 64 GPUs: data parallel (flat ring, hierarchical) and model
    parallel (the C x B logits, flat), same compute model as `project`."""
    rows = []
    S = (H * D + H + C * H + C) * 4
    for strategy, parallel in (("flat", "data"), ("hierarchical", "data"), ("flat", "model")):
        base = None
        for p in ranks:
            steps = math.ceil(N / (b * p))
            payload = S if parallel == "data" else C * b * p * 4
            exchange = allreduce_nodes(payload, p, per_node, intra, inter, strategy) + (t_eager if p > 1 else 0.0)
            epoch = steps * (step_seconds(measured_step, measured_b, b) + exchange)
            base = base or epoch
            rows.append({"strategy": f"{parallel} parallel, {strategy}", "p": p, "epoch_ms": 1e3 * epoch,
                         "efficiency": base / (p * epoch), "exchange_ms": 1e3 * exchange})
    return pd.DataFrame(rows)
