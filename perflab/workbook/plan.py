"""What the main job runs on this machine: backend, engines and sweep sizes picked from what the
machine has, and how long that should take, said before anything starts.

The roofline notebook's parameters default to "auto" and None; `roofline_plan` turns them into
concrete values, so a user on a GPU machine gets CuPy with one engine per GPU without knowing
to ask, and a user on a laptop gets a NumPy sweep sized to finish in minutes.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

from perflab.config import MODES

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
    """Seeds' FLOPs per second of this machine: on NumPy the reference's forward and backward at
    H x batch (its elementwise work included), on CuPy one (H x 784)(784 x batch) float32 GEMM,
    timed for ~`seconds`: the estimate's only compute measurement."""
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
        flops = 4 * 2 * H * (784 + 10) * batch
    step()
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        step()
        count += 1
    return flops * count / (time.perf_counter() - start)


def data_seconds(N: int) -> float:
    """Seconds to make one synthetic training set of N samples (each point makes it twice)."""
    import numpy as np

    from perflab import data
    small = min(N, 4000)
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
    estimate_s: float = float("nan")
    gpu_advice: str | None = None  # why NVIDIA GPUs here go unused, and the fix (perflab.backend.gpu_setup_advice)

    def describe(self) -> str:
        found = f"{self.cores} CPU cores, " + (f"{self.gpus} GPU(s)" if self.gpus else "no GPU that CuPy sees")
        minutes = self.estimate_s / 60
        return ((f"note: {self.gpu_advice}\n" if self.gpu_advice else "")
                + f"found: {found}\n"
                f"will run: {len(self.points)} points on {self.backend}, {self.engines} MPI engine(s); "
                f"H {self.hidden}, p {self.ranks} with B/p = {self.per_rank_batch}, a B sweep {self.batch_sweep} "
                f"at p = 1, N = {self.N}, modes {self.modes}, median of {self.epochs} epoch(s) a point\n"
                f"should take about {minutes:.1f} min (from a {self.backend} step and data set timed just now"
                + (", plus kernel compilation on a first GPU run)" if self.backend == "cupy" else ")"))


def estimate_seconds(points: list[dict], rate: float, per_point_s: float, shared: bool) -> float:
    """Each point runs epochs + 2 epochs (warm-up, timed, profiled) of N/B batches, a rank's share
    at the GEMM rate (split over the ranks where they `shared` one CPU), plus a fixed cost per
    point (engine set-up, imports; graph capture on a GPU)."""
    from perflab.analysis import perfmodel
    total = 0.0
    for pt in points:
        w = perfmodel.Workload(layers=perfmodel.layer_sizes(pt["H"]), B=pt["B"], p=pt["p"], N=pt["N"])
        batches = -(-pt["N"] // pt["B"])
        rank_rate = rate / pt["p"] if shared else rate
        total += (pt["epochs"] + 2) * batches * perfmodel.seeds_flops(w)["batch"] / rank_rate + per_point_s
    return total


def roofline_plan(backend="auto", engines="auto", hidden=None, ranks=None, per_rank_batch=None, batch_sweep=None,
                  N=None, modes=None, epochs=None, estimate=True) -> Plan:
    """The roofline notebook's sweep for this machine; None means the backend's size."""
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
    if backend == "numpy" and modes is not None and "resident" not in modes:
        raise PlanError(f"modes {modes} are GPU data paths: on NumPy only 'resident' runs (the data in memory)")
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
    except ValueError as exc:
        raise PlanError(f"per_rank_batch {plan.per_rank_batch} on ranks {plan.ranks}: {exc}") from None
    fits = [b for b in plan.batch_sweep if b <= plan.N]  # the B sweep's batches past N are left out
    plan.points += [pt for pt in (sweep.grid(hidden=plan.hidden[:1], batch=fits, ranks=[1], backend=[backend],
                                             mode=plan.modes, N=plan.N, epochs=plan.epochs) if fits else [])
                    if sweep.key(pt) not in {sweep.key(q) for q in plan.points}]
    if estimate:
        fixed = 2 * data_seconds(plan.N) + (3.0 if backend == "cupy" else 2.0)  # data twice, engines, graphs
        plan.estimate_s = estimate_seconds(plan.points, step_rate(backend, batch=plan.per_rank_batch), per_point_s=fixed,
                                           shared=backend == "numpy")
    return plan


ALLREDUCE_SIZES = [2 ** k for k in range(12, 25, 2)]  # 4 KiB .. 16 MiB: around every gradient the sweep sends


def kernel_grid(plan: Plan) -> tuple[list, list]:
    """The (H, per-rank batch) shapes of the sweep: the step's kernels are timed at these (every width
    of every net: a deeper net's hidden layers are timed at their width too)."""
    from perflab.analysis.perfmodel import widths
    return (sorted({h for pt in plan.points for h in widths(pt["H"])}),
            sorted({pt["B"] // pt["p"] for pt in plan.points}))


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
