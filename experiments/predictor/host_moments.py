"""Is a host-paced point's miss the model's or the moment's? (#28: every point beyond 25% is a step
the host paces: launched kernel by kernel, or staged through the pageable copy.)

On one boot, in fresh processes one after another ("moments"), each process times, in a shuffled
order:
  terms   the host's terms as `perflab ceilings` times them: the staged copy walk at each point's B
          (ceilings.staged_images, 3 walks) and the trainer's floor at H = 16 for every way a point
          below launches (ceilings.trainer_floor)
  points  sweep points as `perflab sweep` measures them (perflab.workbook.sweep.measure_point: one
          warm-up epoch, 3 timed), host-paced ones and two graphed resident ones the GPU paces
One JSON line per measurement.

Then, here or anywhere, `summary` predicts every measured point with perflab's predictor from a
ceilings file of the same boot, three ways: the file as it is; the file with the host's terms of the
point's own moment put in (the model, given the host as it was); and with those of each other moment
(what a prediction made from ceilings at another moment meets). If the own-moment error is small and
the cross-moment one large, the miss is the host's drift, not a term the model lacks.

  python3 -m perflab ceilings --hidden 1472 2560 --per-rank-batch 1350 2750 --out C
  for i in 1 2 3 4 5 6 7 8; do python3 experiments/predictor/host_moments.py moment $i >> moments.jsonl; done
  (moment LABEL 0: the points' 3 epochs alone, as sweeps timed before 98c230d; else at least
  perflab.workbook.sweep.MIN_TIMED_SECONDS of epochs)
  python3 experiments/predictor/host_moments.py summary moments.jsonl[.gz] [C/ceilings_p1.csv]
"""
import gzip
import json
import random
import statistics
import sys
import time

SHAPES = {"images": (1350, 2750)}
# (mode, launch, gemm, H, B): the folders' worst host-paced kinds of step, and two the GPU paces
POINTS = [("staged", "eager", "cublas", 1472, 2750), ("staged", "eager", "wgmma", 1472, 2750),
          ("staged", "eager", "x3tf32", 2560, 1350), ("staged", "graph", "cublas", 2560, 2750),
          ("staged", "graph", "x3tf32", 1472, 1350), ("resident", "eager", "wgmma", 2560, 2750),
          ("resident", "eager", "cublas", 1472, 1350), ("resident", "graph", "cublas", 2560, 2750),
          ("resident", "graph", "wgmma", 1472, 1350)]


def floors_needed() -> list[tuple]:
    """(mode, graphs, gemm) of the trainer floor each point's prediction reads."""
    return sorted({(mode, launch == "graph", gemm if launch == "eager" else "cublas")
                   for mode, launch, gemm, _, _ in POINTS})


def moment(label: str, min_timed: float | None = None) -> None:
    from perflab.measure import ceilings
    from perflab.train.comm import Serial
    from perflab.workbook import sweep
    if min_timed is not None:  # 0: the asked 3 epochs alone, as sweeps timed before 98c230d
        sweep.MIN_TIMED_SECONDS = min_timed

    def emit(kind: str, row: dict) -> None:
        print(json.dumps({"moment": label, "kind": kind, "time": time.time(), **row}, default=float), flush=True)

    from perflab.results import boot_id, machine_metadata
    emit("meta", {**machine_metadata(), "boot": boot_id()})
    jobs = [("images", None)] + [("floor", f) for f in floors_needed()] + [("point", p) for p in POINTS]
    random.Random(label).shuffle(jobs)
    for kind, what in jobs:
        if kind == "images":
            for row in ceilings.staged_images(batches=SHAPES["images"], walks=3):
                emit("term", row)
        elif kind == "floor":
            mode, graphs, gemm = what
            for row in ceilings.trainer_floor(Serial(), mode, graphs=graphs, gemm=gemm):
                emit("term", row)
        else:
            mode, launch, gemm, H, B = what
            (point,) = sweep.grid(hidden=(H,), batch=(B,), backend=("cupy",), mode=(mode,), gemm=(gemm,),
                                  launch=(launch,), epochs=3)
            emit("point", sweep.measure_point(point, Serial()))


def with_terms(c, terms: list[dict]):
    """The ceilings `c` with the host's terms of one moment in place of its own."""
    import pandas as pd

    from perflab.analysis.predictor import Ceilings
    t = c.table.copy()
    images = [r for r in terms if r["ceiling"] == "staged_images"]
    t = pd.concat([t[t.ceiling != "staged_images"], pd.DataFrame(images)], ignore_index=True)
    for r in terms:
        if r["ceiling"] == "step_floor":
            rows = (t.ceiling == "step_floor") & (t.impl == r["impl"]) & (t.ranks == 1)
            t.loc[rows, ["seconds", "value"]] = r["seconds"]
            t.loc[rows, ["min_seconds", "max_seconds"]] = float("nan")  # one repeat: no band
    return Ceilings(t, source=f"{c.source} with one moment's host terms")


def variant(label: str) -> str:
    """A moment's label less its number: moments of one variant (a, b, p, ...) are summarised together."""
    return label.rstrip("0123456789")


def summary(log: str, ceilings_path: str | None = None) -> None:
    """Per variant: each step's time over the moments and, given the boot's ceilings, the predictor's
    error from the file, from the point's own moment's host terms and from each other moment's; then
    the same errors by what paces the step (the host: staged or kernel by kernel; else the GPU)."""
    import pandas as pd

    from perflab.analysis.predictor import Ceilings, as_measured, measured_batch_seconds, predict_point
    with (gzip.open(log, "rt") if log.endswith(".gz") else open(log)) as f:  # the committed logs are gzipped
        lines = [json.loads(x) for x in f if x.strip()]
    c = Ceilings.load(ceilings_path) if ceilings_path else None
    for name in sorted({variant(x["moment"]) for x in lines}):
        mine = [x for x in lines if variant(x["moment"]) == name]
        moments = sorted({x["moment"] for x in mine}, key=str)
        at = {m: with_terms(c, [x for x in mine if x["moment"] == m and x["kind"] == "term"]) for m in moments} if c else {}
        out = []
        for x in (x for x in mine if x["kind"] == "point"):
            measured = measured_batch_seconds(x)
            row = {"step": f"{x['mode']} {x['launch']} {x['gemm']} H {x['H']} b {x['B']}", "measured_ms": 1e3 * measured,
                   "host paced": x["mode"] == "staged" or x["launch"] == "eager"}
            if c:
                point = as_measured(pd.Series(x))
                errors = {m: predict_point(point, at[m])["batch_s"] / measured - 1 for m in moments}
                row |= {"file": predict_point(point, c)["batch_s"] / measured - 1, "own": errors[x["moment"]],
                        "others": [abs(e) for m, e in errors.items() if m != x["moment"]]}
            out.append(row)
        out = pd.DataFrame(out)
        table = []
        for step, rows in out.groupby("step", sort=False):
            ms = rows.measured_ms
            row = {"step": step, "moments": len(rows), "ms min": ms.min(), "ms median": ms.median(), "ms max": ms.max(),
                   "max/min": ms.max() / ms.min()}
            if c:
                others = [e for o in rows.others for e in o]
                row |= {"file |err| median": rows.file.abs().median(), "file worst": rows.file.abs().max(),
                        "own median": rows.own.median(), "own worst": rows.own.abs().max(),
                        "others |err| median": statistics.median(others), "others worst": max(others),
                        "others > 25%": sum(e > 0.25 for e in others) / len(others)}
            table.append(row)
        with pd.option_context("display.width", 250, "display.max_columns", 20):
            print(f"== moments {name}* ({len(moments)})\n" + pd.DataFrame(table).round(3).to_string(index=False))
            if c:
                paced = out.assign(file=out.file.abs()).groupby("host paced").file
                print(pd.DataFrame({"points": paced.size(), "file |err| median": paced.median(),
                                    "worst": paced.max(), "beyond 25%": paced.apply(lambda e: int((e > 0.25).sum()))})
                      .round(3).to_string())
        terms = pd.DataFrame([x for x in mine if x["kind"] == "term"])
        terms["what"] = terms.impl.where(terms.ceiling == "step_floor", "staged copy B " + terms.B.astype(str))
        terms = terms[~terms.what.str.endswith("epoch")]  # a difference of two epochs' medians: noise at H = 16
        spread = terms.groupby("what").seconds.agg(["min", "median", "max"]) * 1e3
        spread["max/min"] = spread["max"] / spread["min"]
        print("the host's terms over the moments, ms:\n" + spread.round(3).to_string() + "\n")


if __name__ == "__main__":
    if sys.argv[1] == "moment":
        moment(sys.argv[2], float(sys.argv[3]) if len(sys.argv) > 3 else None)
    else:
        summary(sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else None)
