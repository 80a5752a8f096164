"""How steady the host was while the CPU main job ran, and which misses its noise explains (issue 66, item 8).

A two-core VM ran the same main job twice an hour apart: the busy run missed its predictions many times
more than the quiet one (docs/DECISIONS.md, D13), and nothing in the report told them apart. So the main job probes its host at
its start (before the ceilings), briefly beside each point of its sweep, and at its end (after the sweep): a GEMM the CPU sweep runs, timed on the
BLAS threads a p = 1 rank trains with and on one thread, while /proc/stat says what other programs and
the hypervisor took. The GEMM's drift over the probes says whether the ceilings and the sweep saw
the same machine; with the spread inside each probe, the others' share of the cores, the time stolen and
the sweep's own epoch spread it gives the noise fraction: how far a time measured here moves by itself.
judge() widens each prediction's band by it, so a report can tell a predictor's miss from a busy host's.
"""
from __future__ import annotations

import datetime
import os
import statistics
import time
from pathlib import Path

import numpy as np

from perflab import results

FILE = "steadiness.csv"  # beside the sweep and the ceilings in the run folder
STAGES = ("start", "point", "end")  # before the ceilings, beside each sweep point (its `point` named), after the sweep
POINT_SECONDS = 0.2  # a probe beside a point: short, so a sweep of a dozen points pays seconds
GEMM_SHAPE = (512, 784, 1600)  # forward GEMM 1 of the CPU sweep's H = 512, B = 1600 point: (H x 784)(784 x B)
CHUNKS = 5  # the probe's GEMMs in this many runs of consecutive calls, like epochs: their spread is the probe's
MIN_PAIRS = 10  # a probe times at least this many GEMMs on each thread count, however short `seconds`
NOISY = 0.10  # a noise fraction above this calls the run noisy (above a quiet run's misses: docs/DECISIONS.md, D13)
THREADS_HURT = 1.0  # all-core BLAS slower than one thread (thread_gain below this): other programs hold a core


def sweep_threads() -> int:
    """The BLAS threads a p = 1 rank of the sweep and of the ceilings' step kernels trains with
    (perflab.backend.cpu_threads on one rank): the count the probe's GEMM runs at."""
    from perflab.backend import cpu_threads
    from perflab.train.comm import Serial
    return cpu_threads(Serial())


def proc_stat() -> list[int] | None:
    """The host's CPU jiffies since boot (/proc/stat's `cpu` line: user nice system idle iowait irq
    softirq steal ...), None where there is no /proc (not Linux)."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
    except OSError:
        return None
    return [int(x) for x in fields[1:]] if fields and fields[0] == "cpu" else None


def usable_cores() -> int | None:
    """The cores this process may run on (its affinity), None where the OS does not say."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None


def load_average() -> float | None:
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def probe(seconds: float = 1.0, threads: int | None = None, shape: tuple = GEMM_SHAPE) -> dict:
    """One look at the host as the CPU main job sees it, for about `seconds` (at least MIN_PAIRS GEMMs
    on each thread count): the GEMM's median (ms) on `threads` BLAS threads (default sweep_threads())
    and on one, its spread (chunk_spread), the 1-minute load, the cores other programs used meanwhile (others_cores) and the
    share of CPU time the hypervisor stole (steal; both None without /proc/stat), the process's CPU
    seconds per wall second and the BLAS threads in effect here before the probe set them."""
    from threadpoolctl import ThreadpoolController
    if not seconds > 0:
        raise ValueError(f"probe seconds must be > 0, got {seconds!r}")
    threads = sweep_threads() if threads is None else int(threads)
    if threads < 1:
        raise ValueError(f"probe threads must be >= 1, got {threads!r}")
    M, K, N = shape
    rng = np.random.default_rng(0)
    a = rng.random((M, K), dtype=np.float32)
    b = np.asfortranarray(rng.random((K, N), dtype=np.float32))  # the data set's layout
    out = np.empty((M, N), np.float32)
    control = ThreadpoolController()
    default = max((p["num_threads"] for p in control.info() if p["user_api"] == "blas"), default=None)

    def timed(n: int) -> float:
        with control.limit(limits=n, user_api="blas"):
            start = time.perf_counter()
            np.matmul(a, b, out=out)
            return time.perf_counter() - start

    timed(threads), timed(1)  # warm-up: the threads start, the pages are touched
    many, one = [], []
    stat0, cpu0, wall0 = proc_stat(), time.process_time(), time.perf_counter()
    while len(many) < MIN_PAIRS or time.perf_counter() - wall0 < seconds:
        many.append(timed(threads))  # alternated, so a change in the host falls on both counts alike
        one.append(timed(1))
    wall, cpu, stat1 = time.perf_counter() - wall0, time.process_time() - cpu0, proc_stat()
    cores = os.cpu_count() or 1
    others = steal = None
    if stat0 is not None and stat1 is not None:
        d = [y - x for x, y in zip(stat0, stat1)]
        hz = os.sysconf("SC_CLK_TCK")
        busy = sum(d[i] for i in (0, 1, 2, 5, 6))  # user nice system irq softirq (guest is inside user)
        others = max(0.0, (busy / hz - cpu) / wall)
        steal = d[7] / max(1, sum(d[:8])) if len(d) > 7 else None
    load = load_average()
    return {"time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "gemm": f"{M}x{K}x{N} float32", "threads": threads, "blas_default_threads": default, "cores": cores,
            "usable_cores": usable_cores(), "gemm_ms": 1e3 * statistics.median(many),
            "gemm_spread": chunk_spread(many), "gemm_repeats": len(many),
            "gemm_1thread_ms": 1e3 * statistics.median(one), "gemm_1thread_spread": chunk_spread(one), "thread_gain": statistics.median(one) / statistics.median(many),
            "load1": load, "load_per_core": None if load is None else load / cores, "others_cores": others,
            "steal": steal, "cpu_per_wall": cpu / wall, "seconds": wall}


def chunk_spread(times, chunks: int = CHUNKS) -> float:
    """(slowest - fastest) / median of the medians of `chunks` runs of consecutive calls: a lasting change of the
    host, as a sweep's epoch_spread sees one, and not one call held up (on many BLAS threads a small GEMM now and
    then waits for a thread the system ran elsewhere, which a sweep's long epochs average away)."""
    runs = [float(np.median(c)) for c in np.array_split(np.asarray(times, dtype=float), chunks)]
    return (max(runs) - min(runs)) / statistics.median(runs)


def record(folder, stage: str, seconds: float = 1.0, shape: tuple = GEMM_SHAPE, point: str = "") -> dict:
    """Probe the host and append the row, marked `stage` ("start": before the ceilings; "point": beside the sweep's
    point named `point`; "end": after the sweep), to <folder>/steadiness.csv with the machine's metadata; returns
    the row."""
    if stage not in STAGES:
        raise ValueError(f"stage must be one of {STAGES}, got {stage!r}")
    row = {"stage": stage, **probe(seconds, shape=shape), "point": point}
    results.write_rows(Path(folder) / FILE, [row], results.machine_metadata())
    return row


def beside(folder):
    """What a sweep runs before each point (perflab.workbook.sweep.run_grid_engines' `between`): a short probe of
    the host into the folder's steadiness.csv, named for the point."""
    def probe_beside(point: dict) -> dict:
        return record(folder, "point", POINT_SECONDS, point=point_label(point))
    return probe_beside


def probes(rows: list[dict]) -> tuple[dict | None, dict | None]:
    """The start probe of a run's probes (run_probes) and its last end probe (None where there is none: a run
    still going, or stopped before its end)."""
    start = rows[0] if rows and rows[0]["stage"] == "start" else None
    ends = [r for r in rows if r["stage"] == "end"]
    return start, (ends[-1] if ends else None)


def run_probes(folder) -> list[dict]:
    """The probes of the folder's last run, in order: its start, those beside its points, its end (a folder
    without a start: its last end alone)."""
    path = Path(folder) / FILE
    table = results.read_table(path, ("stage", "gemm_ms", "gemm_spread"), "perflab.measure.steadiness.record writes it")
    bad = sorted(set(table.stage.astype(str)) - set(STAGES))
    if bad:
        raise results.ResultFileError(f"{results.relative(path)}: stage {bad[0]!r} is none of {STAGES}")
    rows = table.astype(object).where(table.notna(), None).to_dict("records")
    starts = [i for i, r in enumerate(rows) if r["stage"] == "start"]
    if not starts:
        return [r for r in rows if r["stage"] == "end"][-1:]
    return rows[starts[-1]:]


def sweep_table(folder, sweep: str):
    """The run's sweep as written so far, or None (no file yet, or an empty one)."""
    path = Path(folder) / sweep
    if not path.exists() or not path.stat().st_size:
        return None
    import pandas as pd
    return pd.read_csv(path)


def sweep_epochs(table) -> dict:
    """The sweep's (sweep_table's) measured points' own epoch spread (sweep.spread): the median over the points
    timed over two epochs or more (`epochs`; None where none), and how many points were timed over one
    (`single`; None where the file does not record timed_epochs) of `points`."""
    if table is None:
        return {"points": 0, "epochs": None, "single": None}
    if "status" in table:
        table = table[table.status == "measured"]
    if "epoch_spread" not in table:
        return {"points": len(table), "epochs": None, "single": None}
    if "timed_epochs" in table:
        several = table[table.timed_epochs >= 2]
        single = int((table.timed_epochs < 2).sum())
    else:  # one epoch's spread is 0: only a positive one was timed over several
        several, single = table[table.epoch_spread > 0], None
    spread = several.epoch_spread.dropna()
    return {"points": len(table), "epochs": float(spread.median()) if len(spread) else None, "single": single}


def verdict(folder, sweep: str = "roofline.csv") -> dict:
    """Whether the run in `folder` met a noisy host, from its start and end probes and its sweep's
    epochs: `noisy` (None without probes), `noise` (the relative uncertainty the host allows on a time
    measured here: the largest of the GEMM's drift from start to end, its spread within the start and end probes, the
    share of the cores other programs took, the time stolen, the sweep's median epoch spread), those
    `parts`, `sentences` for a report's first lines (what to do when noisy), and `notes` on the BLAS
    threads and the sweep's single-epoch points; `beside`: the probes beside its points."""
    folder = Path(folder)
    if not (folder / FILE).exists():
        return {"noisy": None, "noise": None, "parts": {}, "start": None, "end": None, "notes": [], "beside": [], "rows": [],
                "sentences": [f"This run did not probe its host's steadiness (no {results.relative(folder / FILE)}), so "
                              "nothing tells a busy machine's misses from the predictor's."]}
    rows = run_probes(folder)
    start, end = probes(rows)
    table = sweep_table(folder, sweep)
    keys = gemm_keys(table)
    seen = [r for r in (start, end) if r is not None]
    if not seen:
        raise results.ResultFileError(f"{results.relative(folder / FILE)}: no probe rows; perflab.measure.steadiness.record "
                                      "writes them")
    epochs = sweep_epochs(table)
    cores = seen[0]["cores"] or 1
    others = [r["others_cores"] for r in seen if r.get("others_cores") is not None]
    load = max(others) / cores if others else (start or {}).get("load_per_core")  # the end's load1 holds the sweep's own
    steal = [r["steal"] for r in seen if r.get("steal") is not None]
    beside = [r for r in rows if r["stage"] == "point"]
    # the spread within a probe: the start's and the end's; a short probe beside a point can catch the host still
    # ending the point before it (docs/DECISIONS.md, D61), and counts in the drift by its median
    parts = {"drift": drift(start, end, beside, keys), "spread": max(spread(r, keys) for r in seen), "load": load,
             "steal": max(steal) if steal else None, "epochs": epochs["epochs"]}
    noise = max(v for v in parts.values() if v is not None)
    hurt = [r for r in seen if r.get("thread_gain") is not None and r["thread_gain"] < THREADS_HURT and r["threads"] > 1]
    noisy = noise > NOISY or bool(hurt)
    notes = thread_notes(seen[0], hurt) + epoch_notes(epochs, sweep)
    return {"noisy": noisy, "noise": noise, "parts": parts, "start": start, "end": end, "notes": notes, "beside": beside,
            "rows": rows, "sentences": sentences(noisy, noise, parts, seen[0], start, end, sweep, bool(hurt), beside)}


def gemm_keys(table) -> tuple[str, ...]:
    """The probe timings the run's points (sweep_table's) depend on: the GEMM on the sweep's BLAS threads, and on one
    thread where a point trains on the CPU over several ranks (each on one thread: D57). A GPU point, or a CPU one on
    one rank, trains on neither one thread's speed (D61); a sweep not there yet counts both."""
    both = ("gemm_ms", "gemm_1thread_ms")
    if table is None or not {"backend", "p"} <= set(table):
        return both
    return both if ((table.backend == "numpy") & (table.p > 1)).any() else both[:1]


def drift(start, end, beside=(), keys=("gemm_ms", "gemm_1thread_ms")) -> float | None:
    """How far the probe GEMM moved during the run, on the sweep's BLAS threads or on one thread, whichever moved
    more (a p = 2 rank trains on one, and a host can slow one thread and not two: docs/DECISIONS.md, D57): from the
    start to the end, or, where probes ran beside the sweep's points, the slowest of all over the fastest (a host
    that switches speed every few seconds shows between two probes only by chance)."""
    if not (start and end):
        return None
    moved = []
    for k in keys:
        times = [r[k] for r in (start, *beside, end) if r.get(k)]
        if len(times) > 2:
            moved.append(max(times) / min(times) - 1)
        elif start.get(k) and end.get(k):
            moved.append(abs(end[k] / start[k] - 1))
    return max(moved)


def spread(row: dict, keys=("gemm_ms", "gemm_1thread_ms")) -> float:
    """The probe's spread within itself on the thread counts of `keys` (gemm_keys; a probe from before the one-thread
    spread: its own)."""
    one = row.get("gemm_1thread_spread") if "gemm_1thread_ms" in keys else None
    return max(row["gemm_spread"], one if one is not None and one == one else 0.0)


def sentences(noisy: bool, noise: float, parts: dict, row: dict, start, end, sweep: str, hurt: bool,
              beside=()) -> list[str]:
    """verdict's one or two sentences."""
    cores = row["cores"]
    said = []
    if parts["drift"] is not None and beside:
        ranged = lambda k: f"{min(r[k] for r in (start, *beside, end)):.1f}-{max(r[k] for r in (start, *beside, end)):.1f} ms"  # noqa: E731
        said.append(f"over {len(beside) + 2} probes (at the start, beside each of {len(beside)} points, at the end) its "
                    f"probe GEMM took {ranged('gemm_ms')} on {row['threads']} BLAS thread(s)"
                    + (f", {ranged('gemm_1thread_ms')} on one" if row["threads"] > 1 else ""))
    elif parts["drift"] is not None:
        said.append(f"its probe GEMM took {end['gemm_ms'] / start['gemm_ms'] - 1:+.0%} at the end of the run against "
                    f"the start on {row['threads']} BLAS thread(s)"
                    + (f", {end['gemm_1thread_ms'] / start['gemm_1thread_ms'] - 1:+.0%} on one" if row["threads"] > 1 else ""))
    said.append(f"it moved by {parts['spread']:.0%} within the start and end probes")
    if parts["load"] is not None:
        said.append(f"other programs took {parts['load']:.0%} of its {cores} cores")
    if parts["steal"]:
        said.append(f"the hypervisor stole {parts['steal']:.0%} of the CPU time")
    if parts["epochs"] is not None:
        said.append(f"the sweep's points moved by {parts['epochs']:.0%} (median) between their own epochs")
    if hurt:
        said.append(f"{row['threads']} BLAS threads ran the GEMM slower than one")
    missing = "" if end is not None else " (the run has no end probe: whether the host changed during it is unknown)"
    if not noisy:
        return [f"The host was steady during this run: {', '.join(said)}, so its times are good to about ±{noise:.0%}"
                f"{missing}."]
    return [f"This run's host was noisy: {', '.join(said)}; a time measured here can move by ±{noise:.0%} by itself, "
            f"so a prediction missed by less than that is within the machine's noise, not the predictor's error{missing}.",
            f"Close other programs and rerun the main job (`make roofline`): the sweep resumes from the points in "
            f"{sweep}; delete it and the ceilings_p*.csv beside it first to time every point again on a quiet machine."]


def thread_notes(row: dict, hurt: list[dict]) -> list[str]:
    """What the probe says about the BLAS threads: the ceilings' GEMM rate (cpu_gemm runs at the library's
    default) against a p = 1 rank's count, fewer usable cores than threads, threads slower than one."""
    notes, t = [], row["threads"]
    default = row.get("blas_default_threads")
    if default is not None and int(default) != int(t):
        notes.append(f"The ceilings' GEMM rate (P_flops: perflab.measure.ceilings.cpu_gemm, no thread limit) ran on the "
                     f"BLAS library's default of {int(default)} threads, the sweep's p = 1 points on {t} "
                     "(perflab.backend.cpu_threads): the roof and the points saw different thread counts.")
    usable = row.get("usable_cores")
    if usable is not None and int(usable) < t:
        notes.append(f"This process may run on {int(usable)} of the {row['cores']} cores, but a p = 1 rank starts {t} BLAS "
                     "threads (perflab.backend.cpu_threads counts os.cpu_count()): its threads share cores.")
    if hurt:
        r = max(hurt, key=lambda r: r["gemm_ms"] / r["gemm_1thread_ms"])
        notes.append(f"At the {r['stage']} probe the GEMM took {r['gemm_ms']:.1f} ms on {t} BLAS threads against "
                     f"{r['gemm_1thread_ms']:.1f} ms on one: with another program on a core, each GEMM waits for its "
                     "slowest thread. Close the other programs, or train with `--threads 1`.")
    return notes


def epoch_notes(epochs: dict, sweep: str) -> list[str]:
    if epochs["single"]:
        return [f"{epochs['single']} of {epochs['points']} points of {sweep} were timed over a single epoch, so their "
                "own spread is unknown: a host hiccup during it is taken for the point's time."]
    if epochs["points"] and epochs["single"] is None:
        return [f"{sweep} does not record how many epochs each point timed (timed_epochs)."]
    return []


def judge(validation_table, folder, sweep: str = "roofline.csv", host: dict | None = None):
    """The validation table (perflab.analysis.validation: measured_ms, predicted_ms, and where the
    predictor gave one, predicted_low_ms and predicted_high_ms) with each point's `noise` (the host's,
    or the point's own epoch_spread where larger), its band widened by it (`noise_low_ms`,
    `noise_high_ms`: the band's low end / (1 + noise), its high end * (1 + noise)) and `inside_noise`:
    whether the measured time lies inside (None for a point not predicted). `host`: verdict(folder, sweep), where
    the caller has it."""
    import pandas as pd
    missing = [c for c in ("measured_ms", "predicted_ms") if c not in validation_table]
    if missing:
        raise ValueError(f"the validation table has no {', '.join(missing)} column (it has "
                         f"{', '.join(map(str, validation_table.columns[:8]))}); perflab validate writes one")
    table = validation_table.copy()
    v = host or verdict(folder, sweep)
    own = pd.to_numeric(table["epoch_spread"], errors="coerce") if "epoch_spread" in table else pd.Series(0.0, table.index)
    noise = own.fillna(0.0).clip(lower=v["noise"] or 0.0)
    predicted = pd.to_numeric(table.predicted_ms, errors="coerce")
    low = pd.to_numeric(table.get("predicted_low_ms", predicted), errors="coerce").fillna(predicted)
    high = pd.to_numeric(table.get("predicted_high_ms", predicted), errors="coerce").fillna(predicted)
    measured = pd.to_numeric(table.measured_ms, errors="coerce")
    table["noise"] = noise
    table["noise_low_ms"] = low / (1 + noise)
    table["noise_high_ms"] = high * (1 + noise)
    inside = (measured >= table.noise_low_ms) & (measured <= table.noise_high_ms)
    table["inside_noise"] = [bool(x) if pd.notna(p) else None for x, p in zip(inside, predicted)]
    table["host_ratio"] = host_ratios(table, v["rows"])
    table["error_at_host_speed"] = predicted * table.host_ratio / measured - 1
    return table


def point_label(point) -> str:
    """How a probe beside a point names it (beside), from a sweep point or a validation row."""
    return f"H={point['H']} B={point['B']} p={point['p']} {point['backend']} {point['mode']}"


def host_ratios(table, rows: list[dict]) -> list[float | None]:
    """Each point's host speed against the ceilings': its probe beside it (of `rows`, run_probes') over the start
    probe, on the BLAS threads a rank of the point trains with (the sweep's at p = 1, one thread at p > 1); None where
    no probe names it."""
    start, _ = probes(rows)
    beside = {r.get("point"): r for r in rows if r["stage"] == "point"}
    if not (start and beside) or not {"H", "B", "p", "backend", "mode"} <= set(table.columns):
        return [None] * len(table)
    ratios = []
    for _, point in table.iterrows():
        probe, key = beside.get(point_label(point)), "gemm_ms" if int(point["p"]) == 1 else "gemm_1thread_ms"
        ratios.append(probe[key] / start[key] if probe and probe.get(key) and start.get(key) else None)
    return ratios


def first_lines(folder, sweep: str = "roofline.csv", validation: str = "validation.csv") -> list[str]:
    """What a report prints first about its host: verdict's sentences, how many of the sweep's points
    (validation rows whose source is `sweep`) miss by no more than the host's noise allows, then the
    notes on threads and epochs."""
    folder = Path(folder)
    v = verdict(folder, sweep)
    lines = list(v["sentences"])
    path = folder / validation
    if v["noise"] is not None and path.exists():
        table = results.read_table(path, ("measured_ms", "predicted_ms"), "perflab validate writes it")
        if "source" in table:  # this run's sweep only, not a scratch sweep's points beside it
            table = table[table.source == sweep]
        judged = judge(table, folder, sweep, v)
        done = judged[judged.predicted_ms.notna()]
        if len(done):
            inside = sum(x is True for x in done.inside_noise)
            miss = (done.predicted_ms / done.measured_ms - 1).abs()
            lines.append(f"{inside} of {len(done)} points lie inside their prediction's band widened by the host's noise "
                         f"(±{v['noise']:.0%}, more where a point's own epochs spread further); the median miss is "
                         f"{miss.median():.0%}, the worst {miss.max():.0%}.")
            scaled = done.error_at_host_speed.dropna().abs()
            beside = [spread(r) for r in v["beside"]]
            if len(scaled) and beside:
                lines.append(f"Scaled by the host's speed beside each point (its probe against the one before the "
                             f"ceilings), the predictions of {len(scaled)} points miss by a median of {scaled.median():.0%}, "
                             f"the worst {scaled.max():.0%}; a probe beside a point is itself good to about "
                             f"±{statistics.median(beside):.0%} (median), so where that is large this says little.")
    return lines + v["notes"]
