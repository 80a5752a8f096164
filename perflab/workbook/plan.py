"""What the main job runs on this machine: backend, engines and sweep sizes picked from what the
machine has, and how long that should take, said before anything starts.

The roofline notebook's parameters default to "auto" and None; `roofline_plan` turns them into
concrete values, so a user on a GPU machine gets CuPy with one engine per GPU without knowing
to ask, and a user on a laptop gets a NumPy sweep sized to finish in minutes. The runs they make parse into
RunSpecs (perflab.train.spec): each data path on the backend, and each sweep point (sweep.grid), so a
combination the trainer refuses is refused here with RunSpec's message, before an engine starts.
"""
from __future__ import annotations

import contextlib
import math
import os
import statistics
import time
from dataclasses import dataclass, field

from perflab.config import MODES
from perflab.train.spec import RunSpec, SpecError

MAX_CPU_ENGINES = 4  # NumPy ranks beyond this mostly fight over memory bandwidth on a laptop

# sweep sizes per backend: the seeds' points on a CPU (minutes on 2 cores), their GPU sizes on a GPU
SIZES = {
    "numpy": {"hidden": [512, 1024, 2048], "per_rank_batch": 1600, "batch_sweep": [800, 3200, 12000], "N": 38400,
              "modes": ["resident"], "epochs": 1},
    "cupy": {"hidden": [512, 1024, 2048], "per_rank_batch": 3000, "batch_sweep": [800, 3200, 12000], "N": 60000,
             "modes": ["resident", "staged", "pipelined"], "epochs": 5},
}


class PlanError(ValueError):
    pass


def gpu_count() -> int:
    from perflab.backend import cupy_or_none
    cp = cupy_or_none()
    return cp.cuda.runtime.getDeviceCount() if cp is not None else 0


def resolve_backend(backend: str, gpus: int) -> str:
    if backend not in ("auto", "numpy", "cupy"):
        raise PlanError(f"backend must be 'auto', 'numpy' or 'cupy', got {backend!r}")
    if backend == "cupy" and gpus == 0:
        from perflab.backend import gpu_setup_advice
        raise PlanError("backend 'cupy' needs CuPy and a visible NVIDIA GPU; "
                        + (gpu_setup_advice() or "none was found (nvidia-smi lists none)")
                        + "; or pass backend 'auto' or 'numpy'")
    return backend if backend != "auto" else ("cupy" if gpus else "numpy")


def resolve_engines(engines, backend: str, gpus: int, cores: int) -> int:
    """'auto': one engine per GPU on CuPy, else one per core up to MAX_CPU_ENGINES (at least 1)."""
    if engines == "auto":
        return gpus if backend == "cupy" else max(1, min(cores, MAX_CPU_ENGINES))
    if not isinstance(engines, int) or isinstance(engines, bool) or engines < 1:
        raise PlanError(f"engines must be 'auto' or a whole number >= 1, got {engines!r}")
    if backend == "cupy" and engines > gpus:
        raise PlanError(f"engines={engines} on CuPy needs one GPU per engine, but {gpus} GPU(s) are visible")
    return engines


def is_whole(value) -> bool:
    """A whole number >= 1 (not a bool, which Python counts as an int)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def whole(name: str, value):
    """A parameter that must be a whole number >= 1 (None: the backend's size), or PlanError naming it."""
    if value is not None and not is_whole(value):
        raise PlanError(f"{name} must be a whole number >= 1 (or None: the backend's size), got {value!r}")
    return value


def wholes(name: str, values):
    """A list parameter of whole numbers >= 1 (None: the backend's sizes), or PlanError naming it."""
    if values is None:
        return None
    values = [values] if isinstance(values, int) and not isinstance(values, bool) else values  # -p ranks 2: [2]
    if isinstance(values, str) or not list(values) or not all(map(is_whole, values)):
        raise PlanError(f"{name} must be a non-empty list of whole numbers >= 1 (or None: the backend's sizes), "
                        f"got {values!r}")
    return list(values)


def powers_of_two_upto(n: int) -> list[int]:
    return [p for p in (1, 2, 4, 8, 16, 32, 64) if p <= n]


def step_rate(backend: str, H: int = 512, batch: int = 1600, seconds: float = 0.3) -> float:
    """Seeds' FLOPs per second of this machine (perfmodel.seeds_flops: a batch is 4 B H (D + C)): on NumPy
    the reference's forward and backward at H x batch on all cores (its elementwise work included), on
    CuPy one (H x 784)(784 x batch) float32 GEMM, timed for ~`seconds`: the estimate's only compute
    measurement."""
    import numpy as np
    if backend == "cupy":
        import cupy as cp
        a, b = cp.ones((H, 784), cp.float32), cp.ones((784, batch), cp.float32)
        step = lambda: (a @ b, cp.cuda.Device().synchronize())  # noqa: E731
        flops = 2 * H * 784 * batch
    else:
        from perflab.train import model
        params = model.init_params((784, H, 10), "float32", 0)
        X, y = np.random.default_rng(0).random((784, batch), np.float32), np.zeros(batch, np.int64)
        step = lambda: model.backward(params, model.forward(params, X), y, batch)  # noqa: E731
        flops = 4 * H * (784 + 10) * batch  # the seeds' count of a batch (forward 2BH(D+C), backward as much)
    rates = []
    for _ in range(4):  # four windows; the first warms the BLAS threads up and is dropped
        step()
        count, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds / 4:
            step()
            count += 1
        rates.append(flops * count / (time.perf_counter() - start))
    return statistics.median(rates[1:])  # a fresh process's first steps run slower than the rest (docs/DECISIONS.md, D18)


def data_seconds(N: int) -> float:
    """Seconds to make one synthetic training set of N samples (each training of a point makes one),
    scaled from 4000 samples, made after a first, smaller one (which pays for the allocator's pages)."""
    import numpy as np

    from perflab import data
    small = min(N, 4000)
    data.synthetic(small // 4, 784, 10, np.float32, 0)
    start = time.perf_counter()
    data.synthetic(small, 784, 10, np.float32, 0)
    return (time.perf_counter() - start) * N / small


@dataclass
class Plan:
    backend: str
    engines: int
    gpus: int
    cores: int
    hidden: list
    ranks: list
    per_rank_batch: int
    batch_sweep: list
    N: int
    modes: list
    epochs: int = 1
    points: list = field(default_factory=list)
    estimate_parts: dict = field(default_factory=dict)  # seconds of each part of the notebook: estimate_parts()
    gpu_advice: str | None = None  # why NVIDIA GPUs here go unused, and the fix (perflab.backend.gpu_setup_advice)

    @property
    def estimate_s(self) -> float:
        """The whole notebook's seconds: the sum of its parts (nan before they are estimated)."""
        return sum(self.estimate_parts.values()) if self.estimate_parts else float("nan")

    def describe(self) -> str:
        found = f"{self.cores} CPU cores, " + (f"{self.gpus} GPU(s)" if self.gpus else "no GPU that CuPy sees")
        parts = ", ".join(f"{name} ~{seconds:.0f} s" for name, seconds in self.estimate_parts.items())
        return ((f"note: {self.gpu_advice}\n" if self.gpu_advice else "")
                + f"found: {found}\n"
                f"will run: {len(self.points)} points on {self.backend}, {self.engines} MPI engine(s); "
                f"H {self.hidden}, p {self.ranks} with B/p = {self.per_rank_batch}, a B sweep {self.batch_sweep} "
                f"split over p = {', '.join(map(str, self.ranks))}, N = {self.N}, modes {self.modes}, median of {self.epochs} epoch(s) a point\n"
                f"should take about {self.estimate_s / 60:.1f} min"
                + (f": {parts} (from a {self.backend} step and a data set timed just now; what this run folder holds "
                   "already is skipped)" if parts else " (not estimated)"))


# What the main job costs beside its training, from the committed main jobs' executed notebooks and its pieces
# timed on a shared two-core VM (issue 66; each constant's evidence: docs/DECISIONS.md, D20):
ENGINES_S = (4.0, 1.5)  # ipcluster's controller, then each MPI engine registering
REST_S = 25.0  # the kernel's start and imports, validation, figures, the committed campaigns' figures, the host's
#               steadiness probes, stopping the engines
POINT_S = 0.7  # a point beyond its epochs and data sets: trainer and sub-communicator set-up, the trip to the engines
GEMM_SPEEDUP = 2.0  # the ceilings' lone GEMMs against the reference's whole step (its elementwise work)
SHARED_GAIN = 1.25  # p ranks each on its share of the cores against one rank on all of them (one BLAS over
#                    both cores scales less than two single-threaded ones)
GPU_CEILINGS_S = (90.0, 72.0)  # perflab ceilings at p = 1 on a GPU, and each p > 1 (D60)
GPU_POINT_S = 6.0  # a GPU point beyond its epochs: its data sets, trainer, graphs, the engines' trip, the probe (D60)
COMPILE_S = 60.0  # CuPy compiling the kernels the main job launches where its kernel cache is empty (a first GPU run):
#                  not timed (the committed GPU runs compiled first, `perflab compile`); NVRTC's time a module
HOST_ALLREDUCE_BPS = 1e9  # a host all-reduce's bytes per second on a laptop-class CPU: the CPU ceilings' exchange part


def epochs_run(epoch_s: float, epochs: int) -> tuple[int, int]:
    """(epochs, trainings) a sweep point runs (perflab.workbook.sweep.measure_trained_point): one warm-up
    and `epochs` timed, again with enough epochs to fill MIN_TIMED_SECONDS where they fell short, then
    one profiled; each training makes its data set."""
    from perflab.workbook import sweep
    more = sweep.epochs_to_fill(epoch_s, epochs * epoch_s)
    return epochs + 2 + (more + 1 if more else 0), 3 if more else 2


def point_seconds(pt: dict, rate: float, data_s: float, shared: bool) -> float:
    """One sweep point: its epochs, N/B batches of the seeds' FLOPs at `rate` (a rank's B/p on its
    share of the cores where the ranks `shared` one CPU, so the epoch of B lasts as on one rank), its
    data sets, POINT_S and the host probe beside it (perflab.measure.steadiness.beside); on a GPU its epochs and
    GPU_POINT_S, all the rest together."""
    from perflab.analysis import perfmodel
    from perflab.measure.steadiness import POINT_SECONDS
    w = perfmodel.Workload(layers=perfmodel.layer_sizes(pt["H"]), B=pt["B"], p=pt["p"], N=pt["N"])
    epoch = -(-pt["N"] // pt["B"]) * perfmodel.seeds_flops(w)["batch"] / (rate / pt["p"] if shared else rate)
    epochs, trainings = epochs_run(epoch, pt["epochs"])
    if pt["backend"] == "cupy":
        return epochs * epoch + GPU_POINT_S
    return epochs * epoch + trainings * data_s + POINT_S + POINT_SECONDS


def estimate_seconds(points: list[dict], rate: float, data_s: float, shared: bool) -> float:
    """The sweep: every point's point_seconds."""
    return sum(point_seconds(pt, rate, data_s, shared) for pt in points)


def cpu_step_shapes(hidden, batches) -> list[tuple[tuple, int]]:
    """The (hidden widths, B) at which the CPU ceilings time the reference's step, as
    perflab.measure.ceilings.cpu_step_kernel_rows chooses them: every width at every B, and 784-H-H-10
    up to CPU_DEEP_MAX (at least the two smallest of each)."""
    from perflab.measure.ceilings import CPU_DEEP_MAX
    small = sorted(hidden)[:2] + [H for H in hidden if H <= CPU_DEEP_MAX[0]]
    small_b = sorted(batches)[:2] + [B for B in batches if B <= CPU_DEEP_MAX[1]]
    return [((H,), B) for H in hidden for B in batches] + [((H, H), B) for H in sorted(set(small))
                                                           for B in sorted(set(small_b))]


def ceilings_seconds(plan: Plan, p: int, rate: float) -> float:
    """perflab ceilings on p ranks (measure_ceilings -> perflab.measure.ceilings.measure_on_world). On the
    CPU: the GEMMs (7 calls of each TRAINING_SHAPE on rank 0, GEMM_SPEEDUP faster than the step `rate`),
    the reference's forward and backward 5 times at each cpu_step_shapes on every rank at once (p ranks
    on their share of the cores: p / SHARED_GAIN times one rank's time), and at p > 1 the MPI and
    shared-memory all-reduces (12 calls of each size). On a GPU a constant from the committed runs
    (GPU_CEILINGS_S): microbenchmarks of fixed length, not compute. The full two-core grid timed on two
    engines came out a little under this estimate (docs/DECISIONS.md, D20)."""
    if plan.backend == "cupy":
        return GPU_CEILINGS_S[0] + GPU_CEILINGS_S[1] * (p > 1)
    from perflab.analysis import perfmodel
    from perflab.measure import ceilings
    step = sum(perfmodel.seeds_flops(perfmodel.Workload(layers=(784, *widths, 10), B=B, p=1))["batch"]
               for widths, B in cpu_step_shapes(*kernel_grid(plan)))
    gemms = sum(2 * M * K * N for M, K, N in ceilings.TRAINING_SHAPES)
    sizes, _ = ceilings.exchange_sizes(ALLREDUCE_SIZES, plan_nets(plan))
    exchange = 2 * 12 * 2 * sum(sizes) / HOST_ALLREDUCE_BPS if p > 1 else 0.0
    ranks = p / SHARED_GAIN if p > 1 else 1
    return 7 * gemms / (GEMM_SPEEDUP * rate) + ranks * 5 * step / rate + exchange


def kernel_cache_empty() -> bool:
    """Whether CuPy has compiled nothing on this machine yet (its kernel cache, CUPY_CACHE_DIR or
    ~/.cupy/kernel_cache, missing or empty): a first GPU run compiles perflab's kernels as it goes."""
    from pathlib import Path
    cache = Path(os.environ.get("CUPY_CACHE_DIR") or Path.home() / ".cupy" / "kernel_cache")
    return not cache.is_dir() or not any(cache.iterdir())


def estimate_parts(plan: Plan, folder, name: str) -> dict:
    """The notebook's parts in seconds, each said in its first cell: engines, ceilings (each p whose
    ceilings file the run folder lacks), kernel compilation (a GPU with an empty kernel cache), the
    sweep (the points not yet in <folder>/<name>.csv) and the rest."""
    from pathlib import Path

    from perflab.workbook import sweep
    folder = Path(folder)
    rate, data_s = step_rate(plan.backend, batch=plan.per_rank_batch), data_seconds(plan.N)
    done = sweep.done_keys(folder / f"{name}.csv")
    todo = [pt for pt in plan.points if sweep.key(pt) not in done]
    parts = {"engines": ENGINES_S[0] + ENGINES_S[1] * plan.engines,
             "ceilings": sum(ceilings_seconds(plan, p, rate) for p in plan.ranks
                             if not (folder / f"ceilings_p{p}.csv").exists())}
    if plan.backend == "cupy" and kernel_cache_empty():
        parts["kernel compilation (`perflab compile` does it beforehand, in parallel)"] = COMPILE_S
    parts["sweep"] = estimate_seconds(todo, rate, data_s, shared=plan.backend == "numpy")
    parts["the rest"] = REST_S
    return parts


def roofline_plan(backend="auto", engines="auto", hidden=None, ranks=None, per_rank_batch=None, batch_sweep=None,
                  N=None, modes=None, epochs=None, estimate=True, folder=None, name: str = "roofline") -> Plan:
    """The roofline notebook's sweep for this machine; None means the backend's size. With `estimate`,
    how long the notebook takes, part by part (estimate_parts), given what the run folder (`folder`,
    default this machine's) holds of ceilings and of the sweep `name`."""
    from perflab.analysis.perfmodel import NetError, widths
    from perflab.backend import gpu_setup_advice
    from perflab.workbook import sweep
    if hidden is not None:
        hidden = [hidden] if isinstance(hidden, (int, str)) else hidden  # -p hidden 512: one net
        if not list(hidden):
            raise PlanError("hidden must name at least one net (512, or '1024-1024' for 784-1024-1024-10), got [] "
                            "(None: the backend's sizes)")
        try:
            [widths(h) for h in hidden]
        except NetError as exc:
            raise PlanError(f"hidden: {exc}") from None
    N, per_rank_batch, epochs = whole("N", N), whole("per_rank_batch", per_rank_batch), whole("epochs", epochs)
    ranks, batch_sweep = wholes("ranks", ranks), wholes("batch_sweep", batch_sweep)
    if modes is not None and (isinstance(modes, str) or not list(modes) or set(modes) - set(MODES)):
        raise PlanError(f"modes must be a non-empty list among {list(MODES)} (or None: the backend's), got {modes!r}")
    gpus, cores = gpu_count(), os.cpu_count() or 1
    backend = resolve_backend(backend, gpus)
    data_paths(backend, modes)
    engines = resolve_engines(engines, backend, gpus, cores)
    size = SIZES[backend]
    plan = Plan(backend=backend, engines=engines, gpus=gpus, cores=cores,
                hidden=list(hidden or size["hidden"]), ranks=list(ranks or powers_of_two_upto(engines)),
                per_rank_batch=per_rank_batch or size["per_rank_batch"], batch_sweep=list(batch_sweep or size["batch_sweep"]),
                N=N or size["N"], modes=list(modes or size["modes"]), epochs=epochs or size["epochs"],
                gpu_advice=gpu_setup_advice() if gpus == 0 else None)
    if max(plan.ranks) > engines:
        raise PlanError(f"ranks {plan.ranks} need {max(plan.ranks)} engines but engines={engines}")
    try:
        plan.points = sweep.grid(hidden=plan.hidden, per_rank_batch=[plan.per_rank_batch], ranks=plan.ranks,
                                 backend=[backend], mode=plan.modes, N=plan.N, epochs=plan.epochs)
    except SpecError as exc:  # a point the trainer would refuse, in RunSpec's words
        raise PlanError(f"a sweep point of backend {backend!r}, modes {plan.modes}: {exc}") from None
    except ValueError as exc:
        raise PlanError(f"per_rank_batch {plan.per_rank_batch} on ranks {plan.ranks}: {exc}") from None
    fits = [b for b in plan.batch_sweep if b <= plan.N]  # the B sweep's batches past N are left out
    # the B sweep splits each B over every p (HW6 Q2.1: B = 3200 on 1, 2, 4 ranks), so the roofline's exchanged
    # points vary in B (and AI) as well as in H (FA Q2.6)
    plan.points += [pt for pt in (sweep.grid(hidden=plan.hidden[:1], batch=fits, ranks=plan.ranks, backend=[backend],
                                             mode=plan.modes, N=plan.N, epochs=plan.epochs) if fits else [])
                    if sweep.key(pt) not in {sweep.key(q) for q in plan.points}]
    if estimate:
        from perflab import results
        plan.estimate_parts = estimate_parts(plan, folder or results.run_dir(), name)
    return plan


def data_paths(backend: str, modes) -> None:
    """The `modes` parameter on the resolved backend, each as a RunSpec: one it refuses (a GPU data path on NumPy)
    is a PlanError carrying RunSpec's message."""
    for mode in modes or ():
        try:
            RunSpec(backend=backend, mode=mode).validate()
        except SpecError as exc:
            raise PlanError(f"modes {modes!r} on backend {backend!r}: {exc}"
                            + ("; on NumPy only 'resident' runs" if backend == "numpy" else "")) from None


ALLREDUCE_SIZES = [2 ** k for k in range(12, 25, 2)]  # 4 KiB .. 16 MiB: around every gradient the sweep sends


def kernel_grid(plan: Plan) -> tuple[list, list]:
    """The (H, per-rank batch) shapes of the sweep: the step's kernels are timed at these (every width
    of every net: a deeper net's hidden layers are timed at their width too), as `perflab ceilings --grid asked`."""
    from perflab.measure.ceilings import step_grid
    return step_grid(False, plan_nets(plan), {pt["B"] // pt["p"] for pt in plan.points}, asked_only=True)


def plan_nets(plan: Plan) -> list[tuple]:
    """The hidden widths of each net the plan sweeps (the all-reduces are timed at their gradients too)."""
    from perflab.analysis.perfmodel import widths
    return sorted({widths(pt["H"]) for pt in plan.points})


def measure_ceilings(view, plan: Plan, folder, log=print) -> list:
    """This machine's ceilings at every p of the plan, on the MPI engines, into
    <folder>/ceilings_p<P>.csv (kept when there: a rerun resumes)."""
    from pathlib import Path

    from perflab import results
    from perflab.measure import ceilings
    paths = []
    for p in plan.ranks:
        path = Path(folder) / f"ceilings_p{p}.csv"
        if not path.exists():
            log(f"measuring this machine's ceilings on {p} rank(s) ...")
            rows = next(r for r in view.apply_sync(ceilings.measure_on_world, p, kernel_grid(plan), ALLREDUCE_SIZES,
                                                    plan_nets(plan)) if r)
            results.write_rows(path, rows, results.machine_metadata(), append=False)
        paths.append(path)
    return paths


def predict(plan: Plan, folder):
    """Every point's time per batch from the ceilings alone, written to <folder>/predictions.csv
    before the sweep measures them (the file's metadata names the ceilings files)."""
    from pathlib import Path

    import pandas as pd

    from perflab import results
    from perflab.analysis import predictor
    rows = []
    for pt in plan.points:
        path = predictor.ceilings_for(Path(folder), pt["p"])
        pred = predictor.predict_point(pt, predictor.Ceilings.load(path))
        rows.append({**{k: pt[k] for k in ("H", "B", "p", "backend", "mode")}, "predicted_ms": 1e3 * pred["batch_s"],
                     "composition": pred["composition"], "ceilings": path.name, **predictor.band_ms(pred),
                     **{k: 1e3 * v for k, v in pred.items() if k.startswith("t_")}})
    table = pd.DataFrame(rows)
    meta = {**results.machine_metadata(), "ceilings": sorted(set(table.ceilings))}
    results.write_rows(Path(folder) / "predictions.csv", rows, meta, append=False)
    return table


PARTS_FILE = "mainjob_parts.csv"  # each part of a main job run: its estimate and the time it took


def record_part(folder, part: str, estimated_s: float, measured_s: float) -> None:
    """Append one part of the main job, its estimate beside the seconds it took, to <folder>/mainjob_parts.csv: the
    run keeps how right its first cell's estimate was (issue 66, item 9)."""
    from pathlib import Path

    from perflab import results
    results.write_rows(Path(folder) / PARTS_FILE, [{"part": part, "estimated_s": estimated_s, "measured_s": measured_s}],
                       results.machine_metadata())


@contextlib.contextmanager
def timed_part(folder, part: str, estimated_s: float):
    """record_part for the code in the with block, once it is done (a part that failed is not written)."""
    started = time.perf_counter()
    yield
    record_part(folder, part, estimated_s, time.perf_counter() - started)


JOB_STARTED, WHOLE_JOB = "job started", "whole job"  # a run's first row (its estimate) and last (the notebook's time)


def last_run_parts(folder):
    """The rows of mainjob_parts.csv after the last run's JOB_STARTED row (all of them where none: a Problem 1 run
    alone), or None (no file). A call resumed after one that was cut is a run of its own."""
    from pathlib import Path

    from perflab import results
    path = Path(folder) / PARTS_FILE
    if not path.exists():
        return None
    if not path.stat().st_size:
        raise results.ResultFileError(f"{results.relative(path)} is empty: the run was stopped while it wrote it; "
                                      "delete it, and the next run writes it again")
    table = results.read_table(path, ("part", "estimated_s", "measured_s"), "perflab.workbook.plan.record_part writes it")
    starts = [i for i, part in enumerate(table.part) if part == JOB_STARTED]
    return table.iloc[starts[-1] + 1 if starts else 0:]


def estimate_lines(folder) -> list[str]:
    """The last run's estimate against what it took: the whole job (where it finished) and each part it ran (a part
    a resumed run found done, estimated at nothing, is left out)."""
    from perflab import results
    try:
        table = last_run_parts(folder)
    except results.ResultFileError as exc:
        return [str(exc)]
    if table is None or not len(table):
        return []
    table = table[~((table.estimated_s == 0) & (table.measured_s < 1))]

    def said(row) -> str:
        est, took = row.estimated_s, row.measured_s
        if math.isnan(est):
            return f"{row.part} {took:.0f} s"
        return f"{row.part} {took:.0f} s (estimated {est:.0f} s" + (f", {took / est - 1:+.0%})" if est > 0 else ")")
    whole = table[table.part == WHOLE_JOB]
    parts = "; ".join(said(r) for r in table[table.part != WHOLE_JOB].itertuples())
    lines = []
    if len(whole):
        w = whole.iloc[-1]
        known = not math.isnan(w.estimated_s) and w.estimated_s > 0
        lines.append(f"The main job took {w.measured_s / 60:.1f} min" + (
            f"; its first cell estimated {w.estimated_s / 60:.1f} min ({w.measured_s / w.estimated_s - 1:+.0%})." if known else "."))
    return lines + ([f"Part by part: {parts}."] if parts else [])
