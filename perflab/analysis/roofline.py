"""What the notebooks compute from result tables, so they stay thin (and this is tested)."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from perflab.analysis import perfmodel
from perflab.config import HALF_DTYPES, HALF_IMPLS, HOST_STAGED
from perflab.results import RESULTS_ROOT, read_table
from perflab.train import step as trainstep

SWEEP_COLUMNS = ("H", "B", "p", "backend", "mode", "epoch_seconds")
SWEEP_FILE = "a sweep file is the table `perflab sweep` or the main job writes (roofline.csv, a row per point)"


def load(path) -> pd.DataFrame:
    """A sweep's table; one that is empty, no CSV or no sweep is named with what it lacks (ResultFileError)."""
    return read_table(path, SWEEP_COLUMNS, SWEEP_FILE)


def measured(table: pd.DataFrame) -> pd.DataFrame:
    """The rows that are measurements: a sweep writes failed points (diverged) as status 'failed'."""
    return table[table["status"].fillna("measured") == "measured"] if "status" in table else table


def machines(root: Path | None = None) -> dict[str, dict]:
    """Result folders and their metadata (GPU machines first)."""
    out = {}
    for meta_file in sorted(Path(root or RESULTS_ROOT).glob("*/*.json")):
        try:
            out.setdefault(meta_file.parent.name, json.loads(meta_file.read_text()))
        except (OSError, ValueError):
            continue
    return dict(sorted(out.items(), key=lambda kv: "gpu" not in kv[1]))


def workload(row) -> perfmodel.Workload:
    return perfmodel.Workload(layers=perfmodel.layer_sizes(row["H"]), B=int(row["B"]), p=int(row["p"]),
                              parallel=row["parallel"], dtype=row["dtype"],
                              staged=row["backend"] == "numpy" or row["mode"] in HOST_STAGED,
                              host_allreduce=row["backend"] == "numpy" or row["mode"] in HOST_STAGED,
                              N=int(row["N"]))


def flops_bytes_table(table: pd.DataFrame) -> pd.DataFrame:
    """Per point: the seeds' FLOPs per batch (forward, backward), bytes over PCIe and MPI, AI."""
    rows = []
    for _, r in table.iterrows():
        w = workload(r)
        f, by = perfmodel.seeds_flops(w), perfmodel.phase_bytes(w)
        rows.append({"H": r["H"], "B": r["B"], "p": r["p"], "B'": w.local_batch, "forward GFLOP": f["forward"] / 1e9,
                     "backward GFLOP": f["backward"] / 1e9, "PCIe MB": by["pcie_gradients"] / 1e6,
                     "MPI MB (2b model)": by["mpi_seeds"] / 1e6, "MPI MB (ring)": by["mpi_ring"] / 1e6,
                     "AI (FLOP/B)": perfmodel.arithmetic_intensity(w)})
    return pd.DataFrame(rows)


def reference_rates(table: pd.DataFrame, H: int = 512) -> dict:
    """P_flops, P_pci, P_mpi from the medians of the reference point: H (default 512) at the
    largest p that exchanged gradients (the seeds used H=512, B=3000, p=2)."""
    at_h = perfmodel.is_net(table["H"], H)
    pick = table[at_h] if at_h.any() else table
    pick = pick.sort_values(["p", "B"]).iloc[-1]
    rates = {k: float(pick[k]) for k in ("P_flops", "P_pci", "P_mpi") if k in pick and np.isfinite(pick[k])}
    rates["reference"] = f"H={pick['H']} B={pick['B']} p={pick['p']}"
    return rates


def measured_batch_seconds(row) -> float:
    """Median batch iteration of the profiled run (what the seeds plot)."""
    t = row.get("t_batch iteration", float("nan"))
    return t if np.isfinite(t) else row["epoch_seconds"] / row["batches"]


def prediction_table(table: pd.DataFrame, rates: dict, P_mem: float = math.inf) -> pd.DataFrame:
    """Predicted (serial model with the reference rates) against measured time per batch."""
    c = perfmodel.Ceilings(P_flops=rates["P_flops"], P_pci=rates.get("P_pci", math.inf),
                           P_mpi=rates.get("P_mpi", math.inf), P_mem=P_mem)
    rows = []
    for _, r in table.iterrows():
        w = workload(r)
        predicted = perfmodel.predict(w, c)["batch"]
        measured = measured_batch_seconds(r)
        rows.append({"H": r["H"], "B": r["B"], "p": r["p"], "predicted_ms": 1e3 * predicted,
                     "measured_ms": 1e3 * measured, "error": predicted / measured - 1})
    return pd.DataFrame(rows)


def ceiling_rates(ceilings: pd.DataFrame, nbytes: float, p: int) -> dict:
    """The machine's measured ceilings in the seeds' terms, for a gradient of nbytes on p ranks:
    P_flops the fastest cuBLAS GEMM at the training shapes; P_pci = 2 / (1/h2d + 1/d2h) and
    P_mpi = 2 x (nbytes / t_allreduce), as the seeds' formulas count them, at the measured size
    nearest nbytes (pageable copies and host MPI: the staged path)."""
    def nearest(rows):
        return rows.iloc[(rows.size_bytes - nbytes).abs().argsort()[:1]].value.iloc[0] if len(rows) else math.nan
    gpu_gemm = ceilings[(ceilings.ceiling == "gemm_flops") & (ceilings.device == "gpu") & (ceilings.impl == "cublas")]
    copies = ceilings[ceilings.impl == "pageable"]
    h2d, d2h = nearest(copies[copies.ceiling == "h2d"]), nearest(copies[copies.ceiling == "d2h"])
    mpi = ceilings[ceilings.ceiling == "mpi_allreduce"]
    mpi = mpi[mpi.ranks == p] if (mpi.ranks == p).any() else mpi
    return {"P_flops": gpu_gemm.value.max() if len(gpu_gemm) else math.nan, "P_pci": 2 / (1 / h2d + 1 / d2h),
            "P_mpi": 2 * nearest(mpi)}


def roofline_placement(points: pd.DataFrame, rates: dict) -> pd.DataFrame:
    """Where each point falls on the modified (serial, PCIe) roofline and, where it exchanged
    gradients, the combined (PCIe + MPI) one, both drawn from the reference rates: its AI, the
    FLOP/s it achieved, each roofline's bound at that AI, the fraction of the bound achieved, and
    the share of the serial bound's time that is bytes moved (above 0.5: left of the ridge)."""
    P, pci, mpi = rates["P_flops"], rates["P_pci"], rates.get("P_mpi")
    rows = []
    for _, r in points.iterrows():
        ai, achieved = r["ai"], r["flops_per_batch"] / measured_batch_seconds(r)
        serial = perfmodel.roofline_serial(ai, P, pci)
        row = {"H": r["H"], "B": r["B"], "p": r["p"], "AI": ai, "achieved TFLOP/s": achieved / 1e12,
               "serial bound": serial / 1e12, "of serial": achieved / serial,
               "bytes share": (1 / pci) / (ai / P + 1 / pci)}
        if r["p"] > 1 and mpi:
            combined = perfmodel.roofline_combined(ai, P, pci, mpi)
            row.update({"combined bound": combined / 1e12, "of combined": achieved / combined})
        rows.append(row)
    return pd.DataFrame(rows)


def median_abs_error(pred: pd.DataFrame) -> float:
    return float(pred["error"].abs().median())


def scaling_rows(root: Path | None = None) -> pd.DataFrame:
    """Every committed scaling.jsonl, with its machine folder."""
    rows = []
    for path in sorted(Path(root or RESULTS_ROOT).glob("*/scaling.jsonl")):
        for line in path.read_text().splitlines():
            if line.startswith("{"):
                rows.append({**json.loads(line), "machine": path.parent.name})
    t = pd.DataFrame(rows)
    if len(t):  # T1 / (p Tp) at the same (H, b): each peer against its own one-GPU epoch
        keys = ["machine", "peer", "H", "b"]
        base = t[t.p == 1].set_index(keys)["epoch_ms"]
        t["efficiency"] = [base.get((m, peer, H, b), base.get((m, one_gpu_twin(peer), H, b), np.nan)) / (p * ms)
                           for m, peer, H, b, p, ms in zip(t.machine, t.peer, t.H, t.b, t.p, t.epoch_ms)]
    return t


EXCHANGE_ONLY = ("p2p", "overlap")  # perflab harness flags that change the exchange alone: nothing on one GPU


def one_gpu_twin(peer: str) -> str:
    """The peer whose one-GPU run a perflab variant shares: `perflab resident, p2p` and `perflab
    resident, overlap` run perflab resident's step on one GPU (no exchange to change), so their
    efficiency is against its epoch where they were not run alone; any other peer, itself."""
    mode, *flags = peer.split(", ")
    return mode if mode == "perflab resident" and flags and set(flags) <= set(EXCHANGE_ONLY) else peer


def folder_roofs(folder: Path, device: str) -> dict:
    """machine_roofs over every ceilings file of a machine folder, its subfolders' too (earlier boots
    kept beside their runs, blind checks' own): the fastest rates the machine was measured at."""
    from perflab.analysis.predictor import CEILINGS_COLUMNS, CEILINGS_FILE
    files = sorted(Path(folder).rglob("ceilings_p*.csv"))
    return machine_roofs(pd.concat([read_table(f, CEILINGS_COLUMNS, CEILINGS_FILE) for f in files], ignore_index=True),
                         device)


def machine_roofs(ceilings: pd.DataFrame, device: str) -> dict:
    """The roofs a machine's ceilings file sets, as the seeds' formulas count them: P_flops the
    fastest GEMM it measured (BLAS on the CPU; cuBLAS, and the step's cuBLAS GEMMs over the H x B
    grid, on the GPU), P_pci the fastest pinned copy, P_mpi = max 2S / t of the all-reduce; P_half the
    fastest half-precision GEMM (cuBLAS BF16 or FP16: the roof of --dtype bfloat16 | float16; nan where none ran)."""
    gemm = ceilings[(ceilings.ceiling == "gemm_flops") & (ceilings.device == device)]
    rates = list(gemm[gemm.impl.isin(["cublas", "numpy BLAS"])].value)
    kernels = ceilings[(ceilings.ceiling == "step_kernel") & (ceilings.device == "gpu")] if device == "gpu" else gemm.iloc[:0]
    # the one-layer step's cuBLAS GEMMs (forward 1, backward 3: H x 784 over B), their FLOPs at H = B = 1 times H B
    for kernel in (k for k in trainstep.step((1,)) if k.call == "gemm"):
        k = kernels[kernels.impl == kernel.name]
        rates += list(kernel.flops * k.H * k.B / k.seconds)
    copies = ceilings[ceilings.impl == "pinned"]
    mpi = ceilings[ceilings.ceiling == "mpi_allreduce"]
    nccl = ceilings[ceilings.ceiling.isin(["nccl_allreduce", "nccl_allreduce_graph"])]  # launched or in a graph
    half = gemm[gemm.impl.isin(list(HALF_IMPLS.values()))]
    return {"P_flops": max(rates), "P_half": float(half.value.max()) if len(half) else math.nan,
            "P_pci": float(copies.value.max()) if len(copies) else math.inf,
            "P_mpi": float((2 * mpi.value).max()) if len(mpi) else math.inf,
            "P_nccl": float((2 * nccl.value).max()) if len(nccl) else math.inf}


SIXTEEN_BIT_EXCHANGES = ("p2p", "nccl-half")  # in a half step: BF16 copies read (D64), or NCCL in the half type


def ceiling_bounds(points: pd.DataFrame, roofs: dict) -> pd.DataFrame:
    """Each point's FLOP rate (the seeds' FLOPs over its measured time per batch) against the bound
    the ceilings set on its own path: the seeds' FLOPs at P_flops, plus what it moves at the
    fastest measured rate (the gradient over PCIe twice and through MPI on the staged GPU path,
    through MPI alone on the CPU, through NCCL on the resident path; half the gradient where a half
    step's exchange moves 16-bit values, SIXTEEN_BIT_EXCHANGES), in series. The seeds count no more
    FLOPs than the step's GEMMs execute and no more bytes than it moves, so no point can lie above
    it (a test checks every committed one)."""
    rows = []
    for _, r in points.iterrows():
        w = workload(r)
        flops = perfmodel.seeds_flops(w)["batch"] / (r["p"] if r["parallel"] == "model" else 1)  # a rank's share
        by = perfmodel.phase_bytes(w)
        host_path = r["backend"] == "numpy" or r["mode"] in HOST_STAGED
        crossing = by["mpi_seeds"] * (0.5 if r["dtype"] in HALF_DTYPES and r.get("comm") in SIXTEEN_BIT_EXCHANGES else 1)
        moved = crossing / roofs["P_mpi" if host_path else "P_nccl"] if r["p"] > 1 else 0.0
        if r["backend"] != "numpy":
            moved += by["pcie_gradients"] / roofs["P_pci"]
        peak = roofs["P_half"] if r["dtype"] in HALF_DTYPES else roofs["P_flops"]  # a half step's GEMMs: their roof
        bound = flops / (flops / peak + moved)
        achieved = flops / (r["epoch_seconds"] / r["batches"])
        rows.append({"H": r["H"], "B": r["B"], "p": r["p"], "mode": r["mode"], "backend": r["backend"], "ai": r["ai"],
                     "achieved": achieved, "bound": bound, "of bound": achieved / bound})
    return pd.DataFrame(rows)


def overlap_bounds(points: pd.DataFrame, roofs: dict) -> pd.DataFrame:
    """The host-staged GPU points with an exchange (p > 1) against the two rooflines of the staged
    path's links (BW = 2 / (1/P_pci + 1/P_mpi), as the seeds combine them): the seeds' serial one,
    AI / (AI/P_flops + 1/BW), where copies and compute take turns, and the standard one,
    min(P_flops, AI BW), where they overlap. `meets` names the nearer (in ratio) of the two."""
    bw = 2 / (1 / roofs["P_pci"] + 1 / roofs["P_mpi"])
    rows = []
    for _, r in points[(points.backend == "cupy") & points["mode"].isin(HOST_STAGED) & (points.p > 1)].iterrows():
        flops = perfmodel.seeds_flops(workload(r))["batch"]
        achieved = flops / (r["epoch_seconds"] / r["batches"])
        serial, standard = perfmodel.roofline_serial(r["ai"], roofs["P_flops"], bw), \
            perfmodel.roofline_standard(r["ai"], roofs["P_flops"], bw)
        nearer = "serial" if abs(math.log(achieved / serial)) <= abs(math.log(achieved / standard)) else "standard"
        rows.append({"H": r["H"], "B": r["B"], "p": r["p"], "mode": r["mode"], "ai": r["ai"], "achieved": achieved,
                     "serial_bound": serial, "standard_bound": standard, "of serial": achieved / serial,
                     "of standard": achieved / standard, "meets": nearer, "BW": bw})
    return pd.DataFrame(rows)
