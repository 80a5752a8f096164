"""`perflab validate`: the predictor (perflab.analysis.predictor) against every measured sweep point of a
machine folder, per point, with the ceilings file each prediction used; tidy CSV beside them."""
from __future__ import annotations

import functools
import json
from pathlib import Path

import pandas as pd

from perflab import results
from perflab.analysis import predictor, roofline

SWEEPS = ("roofline*.csv", "parallel.csv", "mainjob*/roofline.csv", "prediction_check*.csv", "staged_spread*.csv")


def committed_folders() -> list[Path]:
    """The machine folders under the results root that hold sweep points."""
    return sorted(d for d in results.RESULTS_ROOT.iterdir() if d.is_dir() and sweep_files(d))


def sweep_files(folder: Path) -> list[Path]:
    """The folder's sweeps: the files of the names above, and any other whose metadata says it is a sweep (a
    workbook or `perflab sweep --name` run called something else: perflab.workbook.sweep.sweep_meta)."""
    named = {f for pattern in SWEEPS for f in Path(folder).glob(pattern) if f.name != "validation.csv"}
    return sorted(named | marked_sweeps(folder))


def marked_sweeps(folder: Path) -> set[Path]:
    """The folder's CSVs whose metadata says they are sweeps (perflab.workbook.sweep.sweep_meta)."""
    return {f for f in Path(folder).glob("*.csv") if "sweep" in read_meta(f)}


class SweepNameError(ValueError):
    """A sweep asked for by name that the folder does not hold; the message lists those it does."""


def main_sweeps(folder: Path, also: tuple[str, ...] = ()) -> list[Path]:
    """The sweeps a run folder's report and validation.csv answer for: those the main job wrote (their
    metadata's `main_job`, set by the roofline notebook: perflab.workbook.sweep.sweep_meta), and those
    named in `also` (`perflab sweep --name NAME` wrote NAME.csv). So a few scratch sweeps in the same
    machine folder never displace the main job's answer. A folder with no sweep of the main job's
    (a committed one, or a run of `perflab sweep` alone) gives every sweep, as before."""
    every = sweep_files(folder)
    main = [f for f in every if f.parent == Path(folder) and read_meta(f).get("main_job") is True]  # a committed
    # machine folder keeps its main job in mainjob*/ beside its other sweeps: there every sweep counts
    return sorted(set(main or every) | set(named_sweeps(folder, also)))


def named_sweeps(folder: Path, names) -> list[Path]:
    """The folder's sweeps of these names (NAME or NAME.csv, as `perflab sweep --name` wrote them), or
    SweepNameError naming the one missing and the sweeps there are."""
    folder = Path(folder)
    by_name = {str(f.relative_to(folder).with_suffix("")): f for f in sweep_files(folder)}
    for name in names:
        if str(name).removesuffix(".csv") not in by_name:
            raise SweepNameError(f"--sweeps {name}: {results.relative(folder)} holds no sweep of that name; its sweeps: "
                                 f"{', '.join(sorted(by_name)) or 'none'}")
    return [by_name[str(name).removesuffix(".csv")] for name in names]


def validation_path(folder: Path, also: tuple[str, ...] = ()) -> Path:
    """Where validate writes: validation.csv for the main job's sweeps alone, validation_<names>.csv when
    others are taken in (the main job's file is never overwritten by scratch sweeps)."""
    if not also:
        return Path(folder) / "validation.csv"
    names = "_".join(str(n).removesuffix(".csv").replace("/", "-") for n in also)
    return Path(folder) / f"validation_{names}.csv"


HARNESS = "scaling.jsonl"  # the multi-GPU scaling harness's rows (perflab.measure.peers_multi), perflab's predicted too


def harness_points(folder: Path) -> tuple[pd.DataFrame, list[dict]]:
    """The scaling harness's perflab rows of a machine folder as sweep points (an epoch of N samples,
    B = p b, its step launched as the harness recorded, its exchange named by its flags: p2p,
    overlap, else NCCL), and the rows from before the harness recorded how its step launched, each
    with why it cannot be predicted."""
    path = folder / HARNESS
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.startswith("{")] if path.exists() else []
    points, skipped = [], []
    for r in rows:
        if not r["peer"].startswith("perflab "):
            continue
        mode, *flags = r["peer"].removeprefix("perflab ").split(", ")
        B, N = r["b"] * r["p"], r.get("N")
        point = {"H": r["H"], "B": B, "p": r["p"], "backend": "cupy", "mode": mode, "gemm": "cublas", "dtype": "float32",
                 "parallel": "model" if "model parallel" in flags else "data", "peer": r["peer"],
                 "comm": next((f for f in ("p2p", "overlap") if f in flags), "nccl"),
                 "git_commit": r.get("git_commit"), "boot": r.get("boot")}
        if N is None or "epoch_graph" not in r:
            skipped.append({**point, "skipped": "the harness did not yet record N and how its step launched"})
        else:
            points.append({**point, "N": N, "batches": -(-N // B), "epoch_seconds": r["epoch_ms"] / 1e3,
                           "graphs": r["graphs"], "epoch_graph": r["epoch_graph"],
                           "step_graph": point["parallel"] == "model" and r["graphs"], "trainer": "FusedModelParallel"
                           if point["parallel"] == "model" else "FusedGPU"})
    return pd.DataFrame(points), skipped


def validate_harness(folder: Path, load=None) -> pd.DataFrame | None:
    """The scaling harness's perflab rows predicted (harness_points) as validate_folder's table rows,
    the skipped ones with why; None where the folder has none. `load`: predictor.loader(), shared."""
    points, skipped = harness_points(folder)
    if not len(points) and not skipped:
        return None
    rows = points.to_dict("records") + skipped  # in the table's order: the predicted, then the skipped
    boots = {r["boot"] for r in rows if r.get("boot")}
    table = predictor.validate(points, folder, boot_ceilings(boots), load) if len(points) else pd.DataFrame()
    table = pd.concat([table, pd.DataFrame(skipped)], ignore_index=True)
    if "ceilings" in table:
        table["same_boot"] = [same_boot(r, folder / n) if isinstance(n, str) else None for r, n in zip(rows, table.ceilings)]
    table["peer"] = [r["peer"] for r in rows]
    table.insert(0, "source", HARNESS)
    table.insert(1, "peer", table.pop("peer"))
    table["measured_git"] = [str(r.get("git_commit") or "?")[:12] for r in rows]
    return table.drop(columns=["git_commit", "boot"], errors="ignore")


def boot_ceilings(boots: set):
    """choose(folder, p) for predictor.validate: the folder's ceilings files that cover p ranks, those
    measured on the boot the rows ran on first (their metadata's boot among `boots`; a blind check's
    `_ceilings/` beside it counts), then ceilings_for's, then the rest: a row the first cannot
    predict (a term its boot never timed) takes the next that can."""
    def choose(folder: Path, p: int) -> list[Path]:
        ranks = {path: int(path.stem.split("_p")[1]) for path in sorted(Path(folder).rglob("ceilings_p*.csv"))}
        covering = sorted((f for f, n in ranks.items() if n >= p), key=ranks.get)
        own = [f for f in covering if read_meta(f).get("boot") in boots]
        first = [f for f in [*own, predictor.ceilings_for(folder, p)] if f is not None]
        return list(dict.fromkeys(first + covering))
    return choose


def own_ceilings(sweep: Path, folder: Path, p: int = 1) -> Path:
    """The folder of the ceilings that predict a sweep: those measured beside it, on the same boot of
    the machine (`<sweep>_ceilings/`: host-side terms differ between boots of one device image:
    docs/DECISIONS.md, D2), else its run's own (mainjob/), else those of the machine folder (or a folder inside it)
    that cover p ranks and were measured on the sweep's boot, else nearest in time to it: the code
    and the boot it ran on, as near as the files tell."""
    beside = sweep.with_name(sweep.stem + "_ceilings")
    for candidate in (beside, sweep.parent):
        if list(candidate.glob("ceilings_p*.csv")) and candidate != folder:
            return candidate
    meta = read_meta(sweep)
    when = utc_date(meta.get("date"))
    best, best_key = folder, None
    for candidate in sorted({f.parent for f in folder.rglob("ceilings_p*.csv")}):
        path = predictor.ceilings_for(candidate, p)
        if path is None:
            continue
        made = read_meta(path)
        other_boot = not (meta.get("boot") and made.get("boot") == meta["boot"])
        gap = (utc_date(made.get("date")) - when).total_seconds()
        key = (other_boot, abs(gap) if pd.notna(gap) else float("inf"), candidate != folder)
        if best_key is None or key < best_key:
            best, best_key = candidate, key
    return best


@functools.cache
def utc_date(date: str | None) -> pd.Timestamp:
    """A metadata date as a UTC time (NaT where unreadable or missing), each text parsed once: parsing guesses its
    format, and own_ceilings compares every sweep with every ceilings file of the folder."""
    return pd.to_datetime(date, utc=True, errors="coerce")


def read_meta(path: Path) -> dict:
    """A result file's metadata (its .json beside it), {} where it has none."""
    meta = Path(path).with_suffix(".json")
    return json.loads(meta.read_text()) if meta.exists() else {}


def validate_folder(folder: Path, out: str | None = None, write: bool = True,
                    also: tuple[str, ...] = ()) -> tuple[pd.DataFrame, Path | None]:
    """Every point of the folder's main sweeps (main_sweeps: the main job's, plus those named in `also`),
    and the scaling harness's perflab rows (from the ceilings of their own boot where the folder has
    them), predicted from its ceilings; written to validation.csv, or validation_<names>.csv with
    `also` (+ .json naming the ceilings files and their machines) unless `write` is False, and every
    profiled phase the ceilings time to validation_phases.csv."""
    folder = Path(folder)
    tables, phase_tables = [], []
    load = predictor.loader()  # each ceilings file read, and its look-ups made, once for all the folder's sweeps
    for path in main_sweeps(folder, also):
        points = roofline.measured(roofline.load(path))  # an empty or foreign file is named, not skipped
        if not len(points):
            continue
        meta = read_meta(path)
        own = own_ceilings(path, folder, int(points.p.max()))
        table = predictor.validate(points, own, load=load)
        if "ceilings" in table:  # named from the machine folder: mainjob/ceilings_p1.csv
            table["ceilings"] = [str((own / n).relative_to(folder)) if isinstance(n, str) else n for n in table.ceilings]
        table.insert(0, "source", str(path.relative_to(folder)))
        table["measured_git"] = str(meta.get("git_commit", "?"))[:12]
        table["same_boot"] = [same_boot(meta, folder / n) if isinstance(n, str) else None
                              for n in table.get("ceilings", [None] * len(table))]
        tables.append(table)
        phases = predictor.validate_phases(points, own, load)
        if len(phases):
            phases.insert(0, "source", str(path.relative_to(folder)))
            phase_tables.append(phases)
    harness = validate_harness(folder, load)
    if harness is not None:
        tables.append(harness)
    table = pd.concat(tables, ignore_index=True) if tables else pd.DataFrame()
    if not write:
        return table, None
    used = sorted(set(table.get("ceilings", pd.Series(dtype=str)).dropna()))
    meta = {"folder": results.relative(folder), "ceilings": {}, "summary": summary(table)}
    for name in used:
        if (folder / name).with_suffix(".json").exists():
            meta["ceilings"][name] = results.made_on(folder / name)
    path = Path(out) if out else validation_path(folder, also)
    results.write_rows(path, table.to_dict("records"), meta, append=False)
    if phase_tables:
        phases = pd.concat(phase_tables, ignore_index=True)
        results.write_rows(path.with_name(path.stem + "_phases.csv"), phases.to_dict("records"), meta, append=False)
    return table, path


def same_boot(sweep_meta: dict, ceilings: Path) -> bool | None:
    """Whether a sweep and the ceilings predicting it ran on one boot of the machine (the same kernel
    boot, metadata `boot`): only then are the host's terms the ones the sweep met. None: a file
    from before the boot was recorded."""
    boot = read_meta(ceilings).get("boot")
    return (boot == sweep_meta["boot"]) if boot and sweep_meta.get("boot") else None


def inside_band(table: pd.DataFrame) -> pd.Series:
    """The inside_band flags as booleans, indexed as the table (a validation.csv read back holds
    them as text among the other points' blanks); empty where there are none. Staged points have a
    band from the copy's spread (and the host floor's, launched kernel by kernel), resident points
    launched kernel by kernel from the host floor's."""
    if "inside_band" not in table:
        return pd.Series(dtype=bool)
    flags = table.inside_band.dropna()
    return flags.astype(str) == "True"


def summary(table: pd.DataFrame) -> dict:
    done = table[table["error"].notna()] if "error" in table else table.iloc[:0]
    if not len(done):
        return {"points": 0, "skipped": int(len(table))}
    out = {"points": int(len(done)), "skipped": int(len(table) - len(done)),
           "median_abs_error": float(done.error.abs().median()), "worst_abs_error": float(done.error.abs().max())}
    banded = inside_band(done)
    staged = banded[done.loc[banded.index, "mode"] == "staged"] if len(banded) else banded
    if len(staged):  # the staged points and their copy band
        out |= {"banded": int(len(staged)), "inside_band": int(staged.sum())}
    resident = banded.drop(staged.index)
    if len(resident):  # the resident points launched kernel by kernel and their host band
        out |= {"host_banded": int(len(resident)), "inside_host_band": int(resident.sum())}
    boot = done[done.same_boot.astype(str) == "True"] if "same_boot" in done else done.iloc[:0]
    if len(boot):  # predicted from ceilings measured on the sweep's own boot: the main job's case
        out |= {"same_boot": int(len(boot)), "median_abs_error_same_boot": float(boot.error.abs().median()),
                "worst_abs_error_same_boot": float(boot.error.abs().max())}
        graphed = boot[[predictor.launch_name(r) == "graph" for r in boot.to_dict("records")]]
        if len(graphed):  # ... each step a graph replay (the default): the host's speed out of the step
            out |= {"same_boot_graphed": int(len(graphed)),
                    "median_abs_error_same_boot_graphed": float(graphed.error.abs().median()),
                    "worst_abs_error_same_boot_graphed": float(graphed.error.abs().max())}
    spread = done[done.epoch_spread.notna()] if "epoch_spread" in done else done.iloc[:0]
    if len(spread):  # points whose sweep recorded how far their own timed epochs moved
        out |= {"spread": int(len(spread)), "median_epoch_spread": float(spread.epoch_spread.median()),
                "off_past_spread": int((spread.error.abs() > spread.epoch_spread).sum())}
    probed = done[done.error_probed.notna()] if "error_probed" in done else done.iloc[:0]
    if len(probed):  # staged points measured with their copy probed beside them: blind, then at the probe
        out |= {"probed": int(len(probed)), "median_abs_error_blind_probed": float(probed.error.abs().median()),
                "worst_abs_error_blind_probed": float(probed.error.abs().max()),
                "median_abs_error_probed": float(probed.error_probed.abs().median()),
                "worst_abs_error_probed": float(probed.error_probed.abs().max())}
    return out


def probed_summary(s: dict) -> str:
    """The staged points with their copy probed, in words: their error from the ceilings file, then
    with the copy at the probe's level."""
    if "probed" not in s:
        return ""
    return (f"{s['probed']} staged points with the copy probed beside them: median |error| "
            f"{s['median_abs_error_blind_probed']:.0%} (worst {s['worst_abs_error_blind_probed']:.0%}) from the ceilings, "
            f"{s['median_abs_error_probed']:.0%} (worst {s['worst_abs_error_probed']:.0%}) at the probed copy")


def describe(table: pd.DataFrame) -> str:
    s = summary(table)
    if not len(table):
        return "no measured sweep point"
    if not s["points"]:
        reasons = sorted(set(table.get("skipped", pd.Series(dtype=str)).dropna()))[:2]
        return f"no point predicted ({s['skipped']} skipped: {'; '.join(reasons)})"
    return (f"{s['points']} points, median |error| {s['median_abs_error']:.0%}, worst {s['worst_abs_error']:.0%}"
            + (f", {s['skipped']} skipped" if s["skipped"] else "")
            + (f"; {s['inside_band']} of {s['banded']} staged points inside their copy band" if "banded" in s else "")
            + (f"; {s['inside_host_band']} of {s['host_banded']} resident points launched kernel by kernel inside their "
               "host band" if "host_banded" in s else "")
            + (f"; {probed_summary(s)}" if "probed" in s else "")
            + (f"; {s['same_boot']} predicted from ceilings of their own boot: median |error| "
               f"{s['median_abs_error_same_boot']:.0%}, worst {s['worst_abs_error_same_boot']:.0%}" if "same_boot" in s else "")
            + (f" ({s['same_boot_graphed']} of them graphed: {s['median_abs_error_same_boot_graphed']:.0%}, worst "
               f"{s['worst_abs_error_same_boot_graphed']:.0%})" if "same_boot_graphed" in s else "")
            + (f"; {s['spread']} with their epochs' own spread recorded (median {s['median_epoch_spread']:.0%}): "
               f"{s['off_past_spread']} off by more than it" if "spread" in s else ""))
