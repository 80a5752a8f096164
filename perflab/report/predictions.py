"""The predictor's evidence for readers: every committed point against its prediction (the
validation tables per machine folder), every prediction committed before its run beside that run
(the blind checks), the points missed by most and the host's terms per boot, as tables and figures
for CAMPAIGNS.md (REPORT.md's appendix) and README.md under the results root."""
from __future__ import annotations

from pathlib import Path

from perflab.analysis.perfmodel import net_name
from perflab.config import MODES
from perflab.report.tables import fmt, source
from perflab.results import RESULTS_ROOT


def prediction_check_section() -> list[str]:
    """The eight-GPU prediction (predictions/p8.json under the results root) at the p it shares with a measured
    GPU parallel.csv (N = 60000, same H and b per GPU)."""
    import json

    import pandas as pd
    prediction = RESULTS_ROOT / "predictions" / "p8.json"
    if not prediction.exists():
        return []
    pred = pd.DataFrame(json.loads(prediction.read_text())["rows"])
    out = []
    for path in sorted(RESULTS_ROOT.glob("*/parallel.csv")):
        if "gpu" not in json.loads(path.with_suffix(".json").read_text()):
            continue
        t = pd.read_csv(path)
        t["b"], t["measured_ms"] = t.B // t.p, 1e3 * t.epoch_seconds
        both = pred.merge(t[["parallel", "H", "b", "p", "measured_ms"]], on=["parallel", "H", "b", "p"]).dropna()
        both = both[both.p > 1].rename(columns={"epoch_ms": "predicted_ms"})
        if not len(both):
            continue
        both["error"] = both.predicted_ms / both.measured_ms - 1
        table = both[["parallel", "H", "b", "p", "predicted_ms", "measured_ms", "error"]].round(3)
        by = both.groupby("parallel").error.apply(lambda e: 100 * e.abs().median())
        data = both[both.parallel == "data"]
        longest = data[(data.H == data.H.max()) & (data.b == data.b.max())]
        model_p1 = t[(t.parallel == "model") & (t.p == 1)].set_index(["H", "b"]).measured_ms
        data_p1 = t[(t.parallel == "data") & (t.p == 1)].set_index(["H", "b"]).measured_ms
        out += ["", f"## The eight-GPU prediction checked where it overlaps a measurement, {path.parent.name}", "",
                f"Sources: `{prediction.relative_to(RESULTS_ROOT.parent)}` (written before these runs); {source(path)}.",
                "", fmt(table), "",
                "Median |error| " + ", ".join(f"{k} parallel {v:.0f}%" for k, v in by.items()) + ". The data-parallel "
                f"prediction holds for the longest steps (H={data.H.max()}, b={data.b.max()}: within "
                f"{100 * longest.error.abs().max():.0f}%) and under-predicts the shorter, launch-bound ones, whose "
                "per-step launch cost was calibrated on the longest (the p=2 point H=2048 b=3000, so that point is "
                "no independent test). The model-parallel prediction assumed the fused trainer's step, "
                "but model parallel runs the generic unfused path, already "
                f"{(model_p1 / data_p1).min():.1f} to {(model_p1 / data_p1).max():.1f} times slower at p=1."]
    return out


def phase_error(path: Path) -> str:
    """Median |error| over the profiled phases the ceilings time, and how many (point, phase) pairs."""
    import pandas as pd
    if not path.exists():
        return "-"
    t = pd.read_csv(path)
    return f"{t.error.abs().median():.0%} ({len(t)})"


def missed_points(folder: Path, worse_than: float = 0.2):
    """The points of a machine folder the predictor misses by more than `worse_than`, each with what
    its profiled run says: how well the predicted phases (each GEMM, the update, the image copy)
    matched there, the phase that missed by the most milliseconds, and the same configuration's
    unprofiled time in the folder's other runs (the spread between runs)."""
    import pandas as pd

    from perflab.analysis import predictor, validation
    v = pd.read_csv(folder / "validation.csv")
    if "error" not in v:
        return v.iloc[:0]
    banded = validation.inside_band(v)
    phases = pd.read_csv(folder / "validation_phases.csv") if (folder / "validation_phases.csv").exists() else None
    v["launch"] = [predictor.launch_name(r) for r in v.to_dict("records")]
    v["gemm"] = v["gemm"] if "gemm" in v else "cublas"
    keys = ["source", "H", "B", "p", "mode", "parallel", "gemm", "launch"]
    rows = []
    for _, r in v[v.error.abs() > worse_than].iterrows():
        row = {"source": r.source, "H": r.H, "B": r.B, "p": r.p, "mode": r["mode"], "parallel": r.parallel,
               "GEMM": r.gemm, "launch": r.launch,
               "predicted ms": r.predicted_ms, "measured ms": r.measured_ms, "error": f"{r.error:+.0%}"}
        if phases is not None:
            named = [k for k in keys if k in phases]  # older files name neither GEMM nor launch
            ph = phases[(phases[named] == r[named]).all(axis=1)]
            if len(ph):
                gap = (ph.measured_ms - ph.predicted_ms).abs()
                worst = ph.loc[gap.idxmax()]
                row["phases: median abs error"] = f"{ph.error.abs().median():.0%} ({len(ph)})"
                row["phase missed most"] = f"{worst.phase} ({worst.measured_ms - worst.predicted_ms:+.3f} ms)"
        if r.name in banded.index:  # the staged copy's spread over the ceiling's walks, the eager host floor's
            row["band from the copy's and the host's spread (ms)"] = (
                f"{r.predicted_low_ms:.3g}-{r.predicted_high_ms:.3g}: " + ("inside" if banded[r.name] else "outside"))
        if "error_probed" in v and pd.notna(r.error_probed):  # the copy probed beside this very run
            row["at the probed copy (ms)"] = f"{r.predicted_probed_ms:.3g} ({r.error_probed:+.0%})"
        same = v[(v[keys[1:]] == r[keys[1:]]).all(axis=1) & (v.source != r.source)]
        row["same point, other runs (ms)"] = ", ".join(f"{m:.3g}" for m in same.measured_ms) or "-"
        rows.append(row)
    return pd.DataFrame(rows)


HOST_TERMS = {"staged copy, B = 3200 (ms)": ("staged_images", None), "eager launch of a step (ms)": ("step_floor", "eager launch"),
              "trainer staged, kernel by kernel (ms)": ("step_floor", "trainer staged"),
              "trainer staged, graph (ms)": ("step_floor", "trainer staged graph"),
              "trainer resident, graph (ms)": ("step_floor", "trainer resident")}


def staged_graphed(done) -> str:
    """Median (worst) |error| and count of the staged points whose step replayed a graph (since bd32702)."""
    if "graphs" not in done:
        return "-"
    g = done[(done["mode"] == "staged") & (done.graphs.astype(str) == "True")]
    return median_worst(g.error) if len(g) else "-"


def boot_table(folder: Path):
    """The host-side ceilings of every ceilings file of a machine folder (its own, its main job's, those
    measured beside a sweep), one row each with the kernel boot it ran on: how much the terms a
    staged prediction rests on move between boots of one device image, and within one."""
    import json

    import pandas as pd
    rows = []
    for path in sorted(folder.glob("**/ceilings_p1.csv")):
        meta = json.loads(path.with_suffix(".json").read_text()) if path.with_suffix(".json").exists() else {}
        t = pd.read_csv(path)
        row = {"ceilings": str(path.relative_to(folder)), "boot": meta.get("boot") or "-",
               "date": str(meta.get("date", "?"))[:19], "git": str(meta.get("git_commit", "?"))[:8]}
        for name, (ceiling, impl) in HOST_TERMS.items():
            hit = t[(t.ceiling == ceiling) & ((t.impl == impl) if impl else (t.B == 3200))]
            row[name] = round(1e3 * float(hit.seconds.iloc[0]), 3) if len(hit) else "-"
        rows.append(row)
    return pd.DataFrame(rows)


def boot_section() -> list[str]:
    import pandas as pd
    out = []
    for folder in sorted(d for d in RESULTS_ROOT.iterdir() if d.is_dir()):
        t = boot_table(folder)
        if len(t) > 1:
            spread = {name: pd.to_numeric(t[name], errors="coerce").dropna() for name in HOST_TERMS}
            said = "; ".join(f"{name.removesuffix(' (ms)')} {v.max() / v.min():.2f}x" for name, v in spread.items() if len(v) > 1)
            if said:  # a GPU folder (a CPU's ceilings have no such terms)
                out.append(f"{folder.name} (slowest over fastest: {said}):\n\n" + fmt(t))
    if not out:
        return []
    return ["\n### The host's terms between boots of one machine\n\n"
            "Every ceilings file of a machine folder, with the kernel boot it ran on (metadata `boot`; boots of one "
            "device image share host name and machine-id). The host's terms a staged prediction rests on, the "
            "staged copy (the host's one-core memcpy) and a step launched kernel by kernel, move between boots and "
            "within one (the main job's ceilings run beside the notebook's engines), far more than a graph "
            "replay's floor. Hence the staged step replays a graph, a staged point "
            "carries its copy probed beside it, and a sweep is predicted from the ceilings measured on its own boot "
            "where they exist.\n\n" + "\n\n".join(out)]


def missed_section() -> list[str]:
    import pandas as pd
    parts = []
    for path in sorted(RESULTS_ROOT.glob("*/validation.csv")):
        t = missed_points(path.parent)
        if len(t):
            parts.append(t.assign(machine=path.parent.name))
    if not parts:
        return []
    t = pd.concat(parts, ignore_index=True)
    t = t[["machine"] + [c for c in t.columns if c != "machine"]]
    return ["\n### The points missed by more than 20%, and what their profiled runs say\n\n"
            "For each: the profiled run's phases that the predictor composes (`validation_phases.csv`), how well "
            "they matched, the one that missed by the most, and the same configuration measured in the folder's other "
            "runs. Where the phases match and the point does not, what is wrong lies outside the kernels and copies "
            "the ceilings time (the host between them, the staged path's pageable copies waiting on the stream); where "
            "the same point measured in another run lands near the prediction, the miss is the spread between runs "
            "(another instance of the machine, another day), which no ceilings file measured on a third can "
            "predict. The staged points' band: the batch with the ceiling's fastest and slowest walk of the data set's "
            "copies (`perflab ceilings` walks it 7 times): the pageable copy is the host's one-core memcpy into the "
            "driver's staging buffers, which drifts by 10-30% over seconds on the device machines "
            "(`experiments/staged_copy/`), so a staged point measured over one or a few epochs lands anywhere in it, "
            "and beyond it where its run met a slower moment than the ceiling's. A step launched kernel by kernel "
            "widens the band by the host floor's fastest and slowest of its three repeats (where the ceilings file "
            "timed it so; the earlier ones timed it once) and by its kernels' grid miss. Since session 38 every "
            "host-paced term (the copy, the host floor, the staged exchange) also spans the 5th to 95th percentile "
            "of the machine's other ceilings files, each a boot of its own (`results/nvidia-h100-80gb-hbm3/DEEP.md`): "
            "these bands are recomputed by today's predictor, the committed checks' own are in their tables."
            "\n\n" + fmt(t.round(3).fillna("-"))]


VALIDATION_FIGURE = "predictor_validation"


def validation_figure() -> Path | None:
    """figures/predictor_validation.png under the results root: every committed folder's validation.csv drawn
    predicted against measured (plots.validation_scatter); None where no folder has a prediction."""
    import pandas as pd

    from perflab.report import plots
    tables = {p.parent.name: pd.read_csv(p) for p in sorted(RESULTS_ROOT.glob("*/validation.csv"))}
    if not any("predicted_ms" in t and t.predicted_ms.notna().any() for t in tables.values()):
        return None  # validation_scatter draws the folders with a prediction
    return plots.save(plots.validation_scatter(tables), VALIDATION_FIGURE,
                      "The bottom-up predictor (perflab.analysis.predictor, each machine's ceilings alone) against every "
                      "committed point, ms per batch; bars: a point's band (the copy ceiling's fastest and slowest walk; the "
                      "host floor's fastest and slowest repeat, kernel by kernel). Sources: results/<folder>/validation.csv (perflab validate --committed).",
                      folder=RESULTS_ROOT / "figures")


def check_table(pred, measured) -> tuple:
    """A committed prediction's rows beside its run's, matched on every setting both name (a point
    predicted graphed and eager pairs with its own launch only): (table, error per row, columns)."""
    import pandas as pd
    keys = ["H", "B", "p", "mode"] + [k for k in ("parallel", "gemm", "launch", "comm", "dtype") if k in pred and k in measured]
    # H as text on both sides: a deeper net's is '1024-1024', and a file of several nets reads 512 as '512'
    pred, measured = pred.assign(H=pred.H.map(net_name)), measured.assign(H=measured.H.map(net_name))
    both = pred.merge(measured.assign(measured_ms=1e3 * measured.epoch_seconds / measured.batches), on=keys)
    err = both.batch_ms / both.measured_ms - 1
    both["error"] = err.map(lambda e: f"{e:+.0%}")
    columns = ["H", "b", "p", *(k for k in ("parallel", "gemm", "dtype") if k in keys), "mode",
               *(["launch"] if "launch" in keys else []), "batch_ms", "measured_ms", "error"]
    if "low_ms" in both:  # the band from the copy ceiling's spread (staged) and the eager host floor's
        both["band ms/batch"] = [f"{lo:.3g}-{hi:.3g}" if pd.notna(lo) else "-" for lo, hi in zip(both.low_ms, both.high_ms)]
        columns.append("band ms/batch")
    return both, err, columns


def committed_checks(folder: Path | None = None) -> list[tuple[Path, dict, Path | None]]:
    """Every committed prediction (`folder`, by default predictions/ under the results root: *_h*_b*.json) with
    the sweep beside it that tested it (`*/prediction_check_<its name>.csv`), or None where its run is not made yet."""
    import json
    folder = folder or RESULTS_ROOT / "predictions"
    out = []
    for made_path in sorted(folder.glob("*_h*_b*.json")):
        checks = sorted(folder.parent.glob(f"*/prediction_check_{made_path.stem}.csv"))  # each names its prediction
        out.append((made_path, json.loads(made_path.read_text()), checks[0] if checks else None))
    return out


def median_worst(err) -> str:
    """Median (worst) |error|, and how many: the checks' and folders' tables' one form."""
    return f"{err.abs().median():.0%} ({err.abs().max():.0%}), {len(err)}" if len(err) else "-"


def check_points(checks):
    """Every point of every measured prediction, one row each: the check, its machine folder, when it
    was measured, the prediction's git, mode, launch (None where the check did not name it), error,
    whether it fell inside the band it was predicted with (None where it had none) and the kind of step
    it tests (check_kind)."""
    import json

    import pandas as pd
    parts = []
    for made_path, made, check in checks:
        if check is None:
            continue
        both, err, _ = check_table(pd.DataFrame(made["rows"]), pd.read_csv(check))
        inside = None
        if "low_ms" in both:
            inside = [None if pd.isna(lo) or pd.isna(m) else bool(lo <= m <= hi)  # a failed point: neither
                      for lo, m, hi in zip(both.low_ms, both.measured_ms, both.high_ms)]
        meta = json.loads(check.with_suffix(".json").read_text()) if check.with_suffix(".json").exists() else {}
        parts.append(pd.DataFrame({"check": made_path.stem, "machine": check.parent.name,
                                   "measured": str(meta.get("date", "?"))[:16], "predicted at": made["predicted_by"][:8],
                                   "mode": both["mode"], "launch": both["launch"] if "launch" in both else None,
                                   "error": err, "inside_band": inside}))
    if not parts:
        return pd.DataFrame()
    points = pd.concat(parts, ignore_index=True)
    return points.assign(kind=points.apply(check_kind, axis=1))


CHECK_KINDS = ("resident, graphed", "staged", "kernel by kernel", "other")  # what check_kind names, the kernels' first


def check_kind(row) -> str:
    """What a blind check's point tests most: the kernels (a graphed resident step), the host's copy
    (staged), the host's launches (kernel by kernel) or the rest (pipelined, several GPUs, older
    checks that did not name their launch)."""
    if row["launch"] == "eager":
        return "kernel by kernel"
    if row["mode"] == "staged":
        return "staged"
    return "resident, graphed" if row["mode"] == "resident" and row["launch"] == "graph" else "other"


def trust(points, machine: str):
    """How far the blind checks of one machine folder landed (check_points), per kind of step
    (check_kind): checks, points, median and worst |error|. What a new prediction for that machine
    can expect of each kind; not used by the prediction itself."""
    import pandas as pd
    mine = points[points.machine == machine] if len(points) else points
    if not len(mine):
        return pd.DataFrame()
    mine = mine.assign(abs_error=mine.error.abs())
    table = mine.groupby("kind").agg(checks=("check", "nunique"), points=("error", "size"),
                                     median=("abs_error", "median"), worst=("abs_error", "max"))
    return table.reindex([k for k in CHECK_KINDS if k in table.index])


def checks_summary(points) -> str:
    """One row per measured prediction (check_points), newest run first: how far each blind test
    landed, overall, per mode, and for the graphed resident steps (the kernels' part of the model)."""
    import pandas as pd
    if not len(points):
        return ""
    rows = []
    for (check, machine, measured, git), g in points.groupby(["check", "machine", "measured", "predicted at"], sort=False):
        err = g.error
        row = {"check": check, "machine": machine, "measured": measured, "predicted at": git, "points": len(err),
               "median abs error": f"{err.abs().median():.0%}", "worst": f"{err.abs().max():.0%}"}
        for mode in MODES:
            row[mode] = median_worst(err[g["mode"] == mode])
        row["resident, graphed"] = median_worst(err[(g["mode"] == "resident") & (g.launch == "graph")])
        row["kernel by kernel"] = median_worst(err[g.launch == "eager"]) if g.launch.notna().any() else "-"
        rows.append(row)
    # stable: checks measured in the same minute keep their files' order, not quicksort's, which a new row reshuffles
    return fmt(pd.DataFrame(rows).sort_values("measured", ascending=False, kind="stable"))


CHECKS_FIGURE = "blind_checks"


def checks_figure() -> Path | None:
    """figures/blind_checks.png under the results root: every blind check's points, |error| per check in the order
    they ran (plots.blind_checks); None where no prediction was measured yet."""
    from perflab.report import plots
    points = check_points(committed_checks())
    if not len(points):
        return None
    return plots.save(plots.blind_checks(points), CHECKS_FIGURE,
                      "Every prediction committed before its run, then measured (results/predictions/*.json against "
                      "results/<folder>/prediction_check_*.csv): |predicted / measured - 1| per point, the checks in "
                      "the order they ran, a colour per kind of step; lines: the median per kind and check.",
                      folder=RESULTS_ROOT / "figures")


def path_breakdown():
    """Per machine folder and path (mode, graph or kernel by kernel) of its validated points: how many,
    median and worst |error|, how many beyond the outer band; None where no folder has a predicted point."""
    import pandas as pd

    from perflab.analysis import predictor
    rows = []
    for path in sorted(RESULTS_ROOT.glob("*/validation.csv")):
        v = pd.read_csv(path)
        if "error" not in v:
            continue
        done = v[v.error.notna()]
        launch = [{"graph": "graph", "eager": "kernel by kernel"}[predictor.launch_name(r)]
                  for r in done.to_dict("records")]
        for (mode, how), g in done.groupby([done["mode"], pd.Series(launch, index=done.index)]):
            e = g.error.abs()
            rows.append({"machine folder": path.parent.name, "mode": mode, "launch": how, "points": len(g),
                         "median abs error": f"{e.median():.0%}", "worst": f"{e.max():.0%}",
                         "beyond 25%": int((e > 0.25).sum()), "beyond": list(e)})
    return pd.DataFrame(rows) if rows else None


def paced_text(paths, cpu_folders=()) -> str:
    """What path_breakdown says on the GPUs (the folders but `cpu_folders`): the steps the GPU paces (resident and
    pipelined, graphed) against those the host paces (kernel by kernel, or the staged path's pageable copy)."""
    import numpy as np
    gpu = paths[~paths["machine folder"].isin(cpu_folders)]
    device = gpu["mode"].isin(["resident", "pipelined"]) & (gpu.launch == "graph")
    parts = []
    for name, rows in (("the GPU", gpu[device]), ("the host", gpu[~device])):
        e = np.abs(np.concatenate(list(rows.beyond))) if len(rows) else np.array([])
        if len(e):
            parts.append(f"where {name} sets the pace, median |error| {np.median(e):.0%} and {int((e > 0.25).sum())} of "
                         f"{len(e)} points beyond 25%")
    return ("On the GPU folders, " + "; ".join(parts) + ". The host paces a step launched kernel by kernel and the staged "
            "path's pageable copy, and its speed moves between and within boots of a machine by more than 25% "
            "(`experiments/staged_copy/`; the host's terms per boot and the missed points in `results/CAMPAIGNS.md`): "
            "one host-paced configuration, measured in fresh processes minutes apart on one boot, moves by more "
            "than any prediction made before the run can follow, and the host's terms timed in the same process "
            "do not follow it (`experiments/predictor/README.md`, host_moments). The GPU paces graphed resident "
            "and pipelined steps.")


def predictor_sections(full: bool = True, part: dict | None = None) -> list[str]:
    """The bottom-up predictor against every committed point (validation.csv per machine folder),
    and the predictions committed before their runs (predictions/*.json under the results root, with their checks).
    full: CAMPAIGNS.md's, with every check's points, the missed points and the host's terms per boot;
    the README's leaves those to it. part: the page's entry for these sections (campaigns.json's `predictor`:
    the CPU folders, the seeds' machine's file and what it says)."""
    import pandas as pd
    part = part or {}
    rows = [validation_row(path, full) for path in sorted(RESULTS_ROOT.glob("*/validation.csv"))]
    if not rows:
        return []
    out = [VALIDATION_TEXT + fmt(pd.DataFrame(rows))]
    paths = path_breakdown()
    if paths is not None:
        out.append("By the path a step takes (`launch`: the step a CUDA graph, or launched kernel by kernel). "
                   + paced_text(paths, part.get("cpu_folders", ())) + "\n\n" + fmt(paths.drop(columns=["beyond"])) + "\n")
    checks = committed_checks()
    summary = checks_summary(check_points(checks))
    if summary:
        out.append("### The predictions committed before their runs\n\n"
                   "Each made by `perflab whatif` from a ceilings file alone and committed, then measured by a sweep "
                   "run at that commit (`test_the_committed_predictions_came_before_their_measurements` checks the "
                   "order): median (worst) |error| and points, newest run first. The graphed resident steps are the "
                   "kernels' part of the model; staged and kernel-by-kernel points follow the host's copy and launch "
                   "speed, which move between and within boots of a machine"
                   + (" (below: every point, and the host's terms per boot)" if full else
                      " (every point of every check, and the host's terms per boot: `results/CAMPAIGNS.md`)")
                   + f".\n\n![every blind check's points](figures/{CHECKS_FIGURE}.png)\n\n"  # both pages lie in the results root
                   + summary)
    if full:
        out += missed_section()
        out += boot_section()
    return out + check_sections(checks, full) + seeds_machine_section(part)


def validation_row(path: Path, full: bool) -> dict:
    """One machine folder's validation.csv summed up: points, errors by mode and path, bands, probed copies,
    same-boot ceilings, profiled phases (and, in full, the sweeps the points came from)."""
    import pandas as pd

    from perflab.analysis import validation
    v = pd.read_csv(path)
    s = validation.summary(v)
    done = v[v["error"].notna()] if "error" in v else v.iloc[:0]
    by_mode = {m: f"{g.error.abs().median():.0%}" for m, g in done.groupby("mode")} if len(done) else {}
    return {"machine folder": path.parent.name, "points": s["points"], "skipped": s["skipped"],
            "median abs error": f"{s['median_abs_error']:.0%}" if s["points"] else "-",
            "worst": f"{s['worst_abs_error']:.0%}" if s["points"] else "-",
            **{mode: by_mode.get(mode, "-") for mode in MODES},
            "staged, graphed": staged_graphed(done),
            "staged in band": f"{s['inside_band']} of {s['banded']}" if "banded" in s else "-",
            "resident, kernel by kernel, in band": (f"{s['inside_host_band']} of {s['host_banded']}"
                                                    if "host_banded" in s else "-"),
            "staged, copy probed: blind / at the probe": (
                f"{s['probed']}: {s['median_abs_error_blind_probed']:.0%} ({s['worst_abs_error_blind_probed']:.0%}) / "
                f"{s['median_abs_error_probed']:.0%} ({s['worst_abs_error_probed']:.0%})") if "probed" in s else "-",
            "ceilings of the point's own boot": (
                f"{s['same_boot']}: {s['median_abs_error_same_boot']:.0%} ({s['worst_abs_error_same_boot']:.0%})"
                + (f"; graphed {s['same_boot_graphed']}: {s['median_abs_error_same_boot_graphed']:.0%} "
                   f"({s['worst_abs_error_same_boot_graphed']:.0%})" if "same_boot_graphed" in s else "")
                if "same_boot" in s else "-"),
            "profiled phases": phase_error(path.with_name("validation_phases.csv")),
            **({"sources": ", ".join(sorted(set(done.source))) if len(done) else
                "no ceilings with the step's kernels"} if full else {})}


VALIDATION_TEXT = (
    "### The bottom-up predictor against every committed point\n\n"
    "Time per batch composed from each machine's ceilings files alone (`perflab ceilings`; `perflab.analysis.predictor`), "
    "against the measured unprofiled epoch over its batches. Sources: `results/<folder>/validation.csv` "
    "(`perflab validate --committed`), each row naming the ceilings file it used; the profiled phases (the "
    "seeds' NVTX names, each GEMM, the update, the image copy) in `validation_phases.csv`. No constant is fitted "
    "to these points, but they are not a blind test: most were measured before the ceilings that predict them "
    "were committed (the main jobs' predictions were written before their sweeps, in the same run), and the "
    "predictor's terms were chosen while comparing with them. The blind tests are the predictions below, "
    "each committed before its run. Staged points measured with their copy probed beside them (the sweep "
    "walks the staged copy just before and after the timed epochs: `copy_probe_s`) are also predicted with the "
    "ceilings' copy at the probe's level: median (worst) |error| from the ceilings, then at the probe, says how "
    "much of a staged error is the copy's drift between the ceilings run and the point's. The points "
    "predicted from ceilings measured on their own boot of the machine (the same kernel boot in both files' "
    "metadata; a user's main job is this case) are counted apart: the host's terms move between boots.\n\n")


def check_sections(checks, full: bool) -> list[str]:
    """Each committed prediction: in full, its points against the run that checked it; those whose runs are not
    made yet, listed."""
    import pandas as pd

    from perflab.analysis import predictor
    out, waiting = [], []
    for made_path, made, check in checks:
        if check is None:
            sources = " and ".join(f"`{f}`" for f in [made["ceilings"], *predictor.exchange_files(made)])
            waiting.append(f"- `{made_path.relative_to(RESULTS_ROOT.parent)}`: {len(made['rows'])} points, from {sources}, "
                           f"at git {made['predicted_by'][:8]}")
        elif full:
            both, err, columns = check_table(pd.DataFrame(made["rows"]), pd.read_csv(check))
            by_mode = "; ".join(f"{mode} median |error| {e.abs().median():.0%}, worst {e.abs().max():.0%} ({len(e)})"
                                for mode, e in err.groupby(both["mode"]))
            out.append(f"### Committed before its run: {made_path.stem}\n\nPredicted by `perflab whatif` at git "
                       f"{made['predicted_by'][:8]} from `{made['ceilings']}` alone (`{made_path.relative_to(RESULTS_ROOT.parent)}`), "
                       f"then measured: {source(check)}.\n\n"
                       + fmt(both[columns].rename(
                           columns={"batch_ms": "predicted ms/batch", "measured_ms": "measured ms/batch"}).round(3))
                       + f"\n\n{by_mode}.\n")
    if waiting:
        out.append("### Predictions committed, their runs not yet made\n\n" + "\n".join(waiting))
    return out


def seeds_machine_section(part: dict) -> list[str]:
    """The seeds' machine predicted from its three rates alone, beside the seeds' own phase medians (the file
    part names, campaigns.json's)."""
    import pandas as pd
    seeds_check = RESULTS_ROOT / part["seeds_machine"] if "seeds_machine" in part else None
    if seeds_check is None or not seeds_check.exists():
        return []
    t = pd.read_csv(seeds_check)
    t["error"] = t.error.map(lambda e: f"{e:+.0%}")
    return ["### The seeds' machine from its three rates (a what-if)\n\n" + part["claims"]["seeds_machine"]
            + f" Source: `results/{part['seeds_machine']}`.\n\n" + fmt(t.round(1))]
