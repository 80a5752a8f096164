"""The seeds' machine as a what-if: a ceilings file built from the three effective rates the seeds
report for their RTX 6000 (P_flops, P_pci, P_mpi), and the predictor's phases against the seeds'
own measured medians (final assignment, Figure 11), so a reader sees how far three rates go.

Its folder (FOLDER, under the results root): figure11_medians.csv (+ .json: the workload and rates, copied from the
seeds), ceilings_p2.csv (built here), whatif_check.csv (predicted against the seeds' medians)."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from perflab import results
from perflab.analysis import perfmodel, predictor
from perflab.train.step import backward_gemm, forward_gemm

FOLDER = results.RESULTS_ROOT / "seeds-rtx6000"


def seeds() -> tuple[dict, pd.DataFrame]:
    return (json.loads((FOLDER / "figure11_medians.json").read_text()),
            pd.read_csv(FOLDER / "figure11_medians.csv").set_index("phase").median_us)


def check(folder: Path = FOLDER) -> pd.DataFrame:
    """Write ceilings_p2.csv from the seeds' rates, predict their workload's phases and batch, and
    set them beside the seeds' medians (whatif_check.csv)."""
    meta, measured = seeds()
    w, r = meta["workload"], meta["rates"]
    H, Bl, C, D = w["H"], w["B"] // w["p"], w["C"], w["D"]
    table = predictor.ceilings_from_rates(r["P_flops"], r["P_pci"], r["P_mpi"], w["p"], hidden=(H // 2, H * 2),
                                          batches=(Bl // 2, Bl * 2))
    results.write_rows(folder / f"ceilings_p{w['p']}.csv", table.to_dict("records"),
                       {"machine": meta["machine"], "built_from": "the seeds' rates in figure11_medians.json",
                        "git_commit": results.git_commit()}, append=False)
    c = predictor.Ceilings(table, source=str(folder / f"ceilings_p{w['p']}.csv"))
    point = {"H": H, "B": w["B"], "p": w["p"], "N": w["N"], "backend": "cupy", "mode": "staged"}
    batch = predictor.predict_batch(point, w["B"], c)
    S = perfmodel.gradient_buffer_bytes(H) - 4  # the seeds' 2(HD + H + CH + C)b counts no loss slot
    predicted = {forward_gemm(1): 2 * H * D * Bl / r["P_flops"], forward_gemm(2): 2 * C * H * Bl / r["P_flops"],
                 backward_gemm(1): 2 * C * H * Bl / r["P_flops"], backward_gemm(3): 2 * H * D * Bl / r["P_flops"],
                 "copying images host -> device": batch["t_images"],
                 "cudaMemcpyDeviceToHost + cudaMemcpyHostToDevice": 2 * S / r["P_pci"],
                 "MPI_Allreduce": 2 * S / r["P_mpi"], "batch iteration": batch["batch_s"]}
    measured = {**measured.to_dict(), "cudaMemcpyDeviceToHost + cudaMemcpyHostToDevice":
                measured["cudaMemcpyDeviceToHost"] + measured["cudaMemcpyHostToDevice"]}
    rows = [{"phase": k, "predicted_us": 1e6 * v, "seeds_median_us": measured[k], "error": 1e6 * v / measured[k] - 1}
            for k, v in predicted.items()]
    out = pd.DataFrame(rows)
    results.write_rows(folder / "whatif_check.csv", rows, {"machine": meta["machine"], "ceilings": f"ceilings_p{w['p']}.csv",
                                                          "git_commit": results.git_commit()}, append=False)
    return out
