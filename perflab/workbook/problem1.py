"""The final assignment's Problem 1 ("Convergence of your model", Questions 1.1-1.4) as one experiment:

  check    Q1.1  the seeds' test (`perflab check`) on p ranks or the GPU, float32 and float64: relative errors
  drift    Q1.2  the weights of this machine's device run (the GPU; on a CPU, the batch's gradient summed over
                 virtual ranks) against the sequential NumPy reference, step by step, for several learning
                 rates and hidden sizes, with both runs' test precision and one batch's gradient drift
  rates    Q1.3  a learning-rate sweep from too small to diverging: the training loss epoch by epoch
  hidden   Q1.4  each hidden size trained to its plateau (validation loss no better for `patience` epochs, at
                 most `max_epochs`) on a validation set carved from the training set; the long run is one of them

Rows go to <folder>/problem1_<part>.csv (machine metadata in the .json beside) one run at a time, so a rerun
skips what is done. On a CPU `run` sizes the version to a time budget from epochs timed just now and says
what it left out; `full=True` (a GPU: scripts/gpu_problem1.sh) runs the solution's scale.

    python -m perflab.workbook.problem1 --budget-minutes 3        (this machine's run folder)
    python -m perflab.workbook.problem1 --full --folder DIR       (on a GPU)
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import json
import math
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from perflab.train.protocols import TrainerDefaults

PARTS = ("check", "drift", "rates", "hidden")
QUESTIONS = {"check": "FA Q1.1", "drift": "FA Q1.2", "rates": "FA Q1.3", "hidden": "FA Q1.4"}
KEYS = {"check": ("dtype",), "drift": ("dtype", "learning_rate", "H"), "rates": ("learning_rate",), "hidden": ("H",)}
VIRTUAL_RANKS = 4  # the seeds' mpirun -n 4
MIN_DELTA = 1e-3  # a validation loss lower than the best by less than this fraction is no improvement
NEAR_BEST = 0.0025  # the recommended H: the smallest within 0.25 percentage points of the best validation precision
ROSE = 0.02  # overfitting: the validation loss ends this fraction or more above its minimum
CHANCE = math.log(10)  # the loss of a uniform guess over the 10 classes (a fresh net's is about that)
DIVERGED = 2 * CHANCE  # a rate whose last epoch's loss is above twice that has diverged, finite or not


class Problem1Error(ValueError):
    """A parameter of the experiment is out of range; the message names it, its value and what is allowed."""


class CheckFailed(RuntimeError):
    """A `perflab check` process ended without its result line; the message says what it printed."""


@dataclass(frozen=True)
class Settings:
    """The sizes of one version: FULL is the solution's scale (minutes on a GPU), TIERS smaller ones."""
    dataset: str = "mnist"
    N: int = 60000                 # training samples (Q1.4: N - validation train, the rest validate)
    test_size: int = 10000
    batch: int = 3200              # the seeds' B
    reg: float = 1e-4
    check_N: int = 38400           # Q1.1 at the seeds' workload (H = 512, lr = 1e-4, one epoch)
    check_hidden: int = 512
    drift_rates: tuple = (0.1, 1.0, 10.0)
    drift_hidden: tuple = (64, 512)  # float32 at each; float64 at the smallest
    drift_epochs: int = 10
    rates: tuple = (1e-3, 1e-2, 0.1, 0.3, 1.0, 3.0, 10.0, 30.0, 100.0)
    rates_hidden: int = 512
    rates_epochs: int = 100
    hidden: tuple = (16, 32, 64, 128, 256, 512, 1024, 2048)
    long_hidden: int = 64          # the seeds' Q1.4 net: its run (or the nearest size's) is the long run drawn
    long_rate: float = 1.0
    max_epochs: int = 1000
    patience: int = 50
    validation: int = 10000

    def __post_init__(self):
        for name in ("drift_rates", "rates"):
            values = positive_list(name, getattr(self, name), float, "learning rates > 0, e.g. [0.01, 0.1, 1.0]")
            object.__setattr__(self, name, values)
        for name in ("drift_hidden", "hidden"):
            object.__setattr__(self, name, positive_list(name, getattr(self, name), int, "hidden sizes >= 1, e.g. [16, 64, 256]"))
        for name in ("N", "test_size", "batch", "check_N", "check_hidden", "drift_epochs", "rates_hidden", "rates_epochs",
                     "long_hidden", "max_epochs", "patience", "validation"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < (0 if name == "test_size" else 1):
                raise Problem1Error(f"{name} must be a whole number >= {0 if name == 'test_size' else 1}, got {value!r}")
        for name in ("reg", "long_rate"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) \
                    or value < 0 or (name == "long_rate" and value == 0):
                raise Problem1Error(f"{name} must be a finite number {'> 0' if name == 'long_rate' else '>= 0'}, got {value!r}")
        if self.validation >= self.N:
            raise Problem1Error(f"validation ({self.validation}) must be smaller than N ({self.N}): Q1.4 trains on "
                                "N - validation samples and validates on the rest")
        if self.batch > min(self.check_N, self.N - self.validation):
            raise Problem1Error(f"batch {self.batch} must be at most check_N ({self.check_N}) and N - validation "
                                f"({self.N - self.validation})")
        from perflab.config import ConfigError
        try:  # the data set's own limits (MNIST: N at most 60000, test_size at most 10000)
            config(self)
            config(self, train_size=self.N - self.validation, validation_size=self.validation)
        except ConfigError as exc:
            raise Problem1Error(f"settings: {exc}") from None


def positive_list(name: str, values, kind, allowed: str) -> tuple:
    """values as a tuple of `kind`, or Problem1Error naming the value that is not allowed."""
    if isinstance(values, (int, float)) and not isinstance(values, bool):
        values = [values]
    if isinstance(values, str) or not hasattr(values, "__iter__") or not list(values):
        raise Problem1Error(f"{name} must be a non-empty list of {allowed}; got {values!r}")
    out = []
    for v in values:
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0
        if kind is int:
            ok = ok and float(v).is_integer()
        if not ok:
            raise Problem1Error(f"{name} must be a list of {allowed}; {v!r} in {list(values)!r} is not")
        out.append(kind(v))
    return tuple(out)


def setting(part: str, s: Settings) -> str:
    """What a part's rows were measured at: rows of another setting are neither resumed nor read together."""
    return {"check": f"{s.dataset} N={s.check_N} H={s.check_hidden} B={s.batch}",
            "drift": f"{s.dataset} N={s.N} B={s.batch} epochs={s.drift_epochs} reg={s.reg}",
            "rates": f"{s.dataset} N={s.N} H={s.rates_hidden} B={s.batch} epochs={s.rates_epochs} reg={s.reg}",
            "hidden": f"{s.dataset} N={s.N - s.validation} V={s.validation} B={s.batch} lr={s.long_rate} "
                      f"max={s.max_epochs} patience={s.patience} reg={s.reg}"}[part]


def config(s: Settings, **kw):
    """A perflab Config of these settings (float32, no shuffling: the seeds' batches in order)."""
    from perflab.config import Config
    return Config(**{**dict(dataset=s.dataset, train_size=s.N, test_size=s.test_size, batch_size=s.batch, reg=s.reg,
                            dtype="float32", num_epochs=1), **kw})


FULL = Settings()
SMALL_RATES = (1e-3, 1e-2, 0.1, 1.0, 3.0, 10.0, 100.0)
TIERS = [  # largest first; the budgeted run takes the first whose estimate fits
    ("full", FULL),
    ("large", dataclasses.replace(FULL, N=20000, test_size=5000, validation=5000, check_N=19200, drift_hidden=(64, 256),
                                  drift_epochs=20, rates_hidden=128, rates_epochs=50, hidden=(16, 32, 64, 128, 256, 512),
                                  max_epochs=300, patience=30)),
    ("medium", dataclasses.replace(FULL, N=12000, test_size=2000, validation=3000, check_N=12800, drift_hidden=(16, 64),
                                   drift_epochs=25, rates=SMALL_RATES, rates_hidden=64, rates_epochs=30,
                                   hidden=(16, 32, 64, 128, 256), max_epochs=100, patience=15)),
    ("small", dataclasses.replace(FULL, N=6400, test_size=1000, validation=1600, check_N=6400, drift_hidden=(16, 64),
                                  drift_epochs=20, rates=SMALL_RATES, rates_hidden=32, rates_epochs=15,
                                  hidden=(16, 64, 256), max_epochs=40, patience=8)),
]



# ------------------------------------------------------------------ input
def check_parts(parts) -> tuple:
    parts = PARTS if parts in (None, "all") else (parts,) if isinstance(parts, str) else tuple(parts)
    unknown = [p for p in parts if p not in PARTS]
    if unknown or not parts:
        raise Problem1Error(f"unknown part {unknown[0] if unknown else parts!r}; the parts are "
                            f"{', '.join(PARTS)} (or 'all')")
    return parts


def check_budget(budget_s) -> float:
    if isinstance(budget_s, bool) or not isinstance(budget_s, (int, float)):
        raise Problem1Error(f"the budget must be a number of seconds (more than 0 minutes), got {budget_s!r}; "
                            "or run the full version (full=True, --full)")
    if not math.isfinite(budget_s) or budget_s <= 0:
        raise Problem1Error(f"the budget must be more than 0 minutes, got {budget_s / 60:g} min ({budget_s!r} s); "
                            "or run the full version (full=True, --full)")
    return float(budget_s)


def budget_seconds(minutes) -> float:
    """A budget given in minutes (the notebook's and the command line's), in seconds, or Problem1Error."""
    if isinstance(minutes, bool) or not isinstance(minutes, (int, float)):
        raise Problem1Error(f"budget_minutes must be a number of minutes > 0, got {minutes!r}")
    return check_budget(minutes * 60)


def with_changes(s: Settings, changes: dict) -> Settings:
    fields = [f.name for f in dataclasses.fields(Settings)]
    unknown = [k for k in changes if k not in fields]
    if unknown:
        raise Problem1Error(f"unknown setting {unknown[0]!r}; the settings are {', '.join(fields)}")
    return dataclasses.replace(s, **changes)


# ------------------------------------------------------------------ data and trainers
@functools.lru_cache(maxsize=1)
def datasets(dataset: str, N: int, V: int, test: int, dtype: str):
    """(train, test, validation) splits, held once for the runs that share them."""
    from perflab import data
    from perflab.config import Config
    return data.load(Config(dataset=dataset, train_size=N, validation_size=V, test_size=test, dtype=dtype, batch_size=1))


def sets_of(cfg):
    return datasets(cfg.dataset, cfg.train_size, cfg.validation_size, cfg.test_size, cfg.dtype)


class VirtualRanks(TrainerDefaults):
    """k data-parallel ranks in one process: each rank's share of the batch gives a gradient divided by the whole
    batch, added up as an all-reduce adds them. The reference's math summed in another order, so what separates
    this run from the reference is rounding alone (the CPU's stand-in for the GPU of Q1.2)."""

    name = "virtual ranks"
    want_loss = False

    def __init__(self, cfg, params, X, y, k: int = VIRTUAL_RANKS):
        self.cfg, self.params, self.X, self.y, self.k = cfg, params, X, y, k

    def data_gradient(self, index) -> list:
        from perflab.train import model
        from perflab.train.parallel import local_part
        total = None
        for rank in range(self.k):
            part = local_part(index, rank, self.k)
            grads = model.backward(self.params, model.forward(self.params, self.X[:, part]), self.y[part],
                                   index.stop - index.start)
            if total is None:
                total = grads
            else:
                for t, g in zip(total, grads):
                    t += g
        return total

    def batch(self, index):
        from perflab.train import model
        grads = self.data_gradient(index)
        model.add_regularization(grads, self.params, self.cfg.reg)
        model.sgd_step(self.params, grads, self.cfg.learning_rate)

    def predict(self, X):
        from perflab.train import model
        return model.predict(self.params, X)

    def full_params(self) -> list:
        return self.params


def device_trainer(cfg, backend: str, train, graphs: bool = True):
    """This machine's trainer: the fused GPU one (CuPy), else the NumPy sequential one; and its sync."""
    from perflab.train import loop, model
    if backend == "cupy":
        from perflab.train.comm import Serial
        from perflab.train.runner import make_gpu_trainer
        from perflab.train.spec import RunSpec
        spec = RunSpec(backend="cupy", exchange="nccl", launch="graph" if graphs else "eager")
        trainer = make_gpu_trainer(cfg, "sequential", Serial(), spec, train)
        return trainer, trainer.sync
    params = model.init_params(cfg.layer_sizes, cfg.dtype, cfg.seed)
    return loop.Sequential(cfg, params, train.X, train.y), lambda: None


def drift_trainer(cfg, backend: str, train):
    """Q1.2's device run: the GPU's step, batch by batch (no graphs); on NumPy, VirtualRanks."""
    if backend == "cupy":
        return device_trainer(cfg, backend, train, graphs=False)[0]
    from perflab.train import model
    return VirtualRanks(cfg, model.init_params(cfg.layer_sizes, cfg.dtype, cfg.seed), train.X, train.y)


def device_gradient(trainer, index) -> list:
    """One batch's data-term gradient as the device run computes it (not applied)."""
    if isinstance(trainer, VirtualRanks):
        return trainer.data_gradient(index)
    with trainer.stream:  # the fused GPU trainer: forward and backward into its gradient buffer
        Xb, yb, first = trainer.batch_images(index)
        trainer.gradients(Xb, yb, index.stop - index.start, want_loss=False, first=first)
    trainer.sync()
    return [g.get() for g in trainer.grads]


def evaluate(params, X, y, reg: float) -> tuple[float, float]:
    """(loss J with its L2 term, precision) of params on a set, on the params' device."""
    from perflab.backend import xp_of
    from perflab.train import model
    yhat = model.forward(params, X)[-1]
    loss = model.cross_entropy_sum(yhat, y) / y.shape[0] + model.l2_penalty(params, reg)
    return loss, float((xp_of(yhat).argmax(yhat, axis=0) == y).mean())


def on(backend: str, split):
    if split is None or backend != "cupy":
        return split
    import cupy as cp

    from perflab import data
    out = data.Split(cp.asarray(split.X), cp.asarray(split.y))
    cp.cuda.Device().synchronize()  # a pageable copy may still be landing when the trainer's own stream reads it
    return out


def close(trainer) -> None:
    trainer.close()


# ------------------------------------------------------------------ the parts
def jobs(part: str, s: Settings) -> list[dict]:
    """The runs of a part, each a dict of its key's values."""
    if part == "check":
        return [{"dtype": d} for d in ("float32", "float64")]
    if part == "drift":
        return ([{"dtype": "float32", "learning_rate": lr, "H": h} for h in s.drift_hidden for lr in s.drift_rates]
                + [{"dtype": "float64", "learning_rate": lr, "H": min(s.drift_hidden)} for lr in s.drift_rates])
    if part == "rates":
        return [{"learning_rate": lr} for lr in s.rates]
    order = sorted(s.hidden, key=lambda h: h != long_size(s))  # the long run first
    return [{"H": h} for h in order]


def long_size(s: Settings) -> int:
    return min(s.hidden, key=lambda h: (abs(math.log(h / s.long_hidden)), h))


def check_ranks(backend: str) -> int:
    if backend == "cupy":
        from perflab.workbook.plan import gpu_count
        return max(1, gpu_count())
    return min(4, max(2, os.cpu_count() or 1))


def mpiexec() -> str | None:
    return shutil.which("mpiexec", path=str(Path(sys.executable).parent)) or shutil.which("mpiexec")


def check_command(s: Settings, backend: str, dtype: str) -> tuple[list[str], int]:
    """The seeds' test as a `perflab check` process on p ranks (mpiexec; one rank where there is none)."""
    ranks = check_ranks(backend)
    cmd = [sys.executable, "-m", "perflab", "check", "--backend", backend, "--parallel", "data", "--dtype", dtype,
           "--dataset", s.dataset, "--train-size", str(s.check_N), "--hidden-size", str(s.check_hidden),
           "--batch-size", str(s.batch), "--reg", str(s.reg), "--test-size", "0", "--json"]
    if ranks > 1 and mpiexec() is None:
        ranks = 1
    return ([mpiexec(), "-n", str(ranks), *cmd] if ranks > 1 else cmd), ranks


def run_check(s: Settings, backend: str, job: dict) -> list[dict]:
    cmd, ranks = check_command(s, backend, job["dtype"])
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=3600, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if not lines:
        said = (proc.stderr.strip().splitlines() or proc.stdout.strip().splitlines() or ["no output"])[-1]
        raise CheckFailed(f"`{' '.join(cmd[-24:])}` ended with exit {proc.returncode} and no result: {said}")
    r = json.loads(lines[-1])
    way = (f"data parallel on {ranks} GPU(s) (CuPy)" if backend == "cupy" else
           f"data parallel on {ranks} MPI rank(s) (NumPy)")
    return [{"dtype": r["dtype"], "way": way, "ranks": ranks, "N": s.check_N, "H": s.check_hidden, "B": s.batch,
             "learning_rate": r["learning_rate"], "epochs": r["num_epochs"], **r["errors"],
             "max_rel_error": r["max_rel_error"], "tolerance": r["tolerance"],
             "replica_max_abs_diff": r["replica_max_abs_diff"], "passed": r["passed"]}]


def worst(a: list, b: list) -> dict:
    """Each parameter's relative (Frobenius) difference, the worst of the weights, of the biases and of all."""
    from perflab.backend import to_numpy
    from perflab.train import model
    from perflab.train.runner import relative_error
    names = model.param_names(len(a) // 2)
    errors = {n: relative_error(to_numpy(x), to_numpy(y)) for n, x, y in zip(names, a, b)}
    return {**errors, "drift_W": max(errors[n] for n in names[0::2]), "drift_b": max(errors[n] for n in names[1::2]),
            "drift": max(errors.values())}


def run_drift(s: Settings, backend: str, job: dict) -> list[dict]:
    """The device run and the reference from the same weights on the same batches, compared at steps 1, 2, 4, ...
    and at each epoch's end; one batch's gradient compared first (the reordered sum alone)."""
    from perflab.train import loop, model
    cfg = config(s, dtype=job["dtype"], learning_rate=job["learning_rate"], hidden_sizes=(job["H"],),
                 num_epochs=s.drift_epochs)
    train, test, _ = sets_of(cfg)
    start = model.init_params(cfg.layer_sizes, cfg.dtype, cfg.seed)
    reference = loop.Sequential(cfg, [p.copy() for p in start], train.X, train.y)
    reference.want_loss = False
    device = drift_trainer(cfg, backend, train)
    device.want_loss = False
    batches = [i for e in range(cfg.num_epochs) for i in loop.batch_indices(cfg, e)]
    first = batches[0]
    exact = model.backward(start, model.forward(start, train.X[:, first]), train.y[first], first.stop - first.start)
    gradient = worst(device_gradient(device, first), exact)["drift"]
    ends = {cfg.num_batches * (e + 1) for e in range(cfg.num_epochs)}
    rows = []
    for step, index in enumerate(batches, 1):
        reference.batch(index)
        device.batch(index)
        if step & (step - 1) == 0 or step in ends:
            rows.append({"step": step, "epoch": step / cfg.num_batches,
                         **worst(device.full_params(), reference.params)})
    way = "one GPU (CuPy)" if backend == "cupy" else f"{VIRTUAL_RANKS} virtual ranks (NumPy)"
    fixed = {**job, "way": way, "N": s.N, "B": s.batch, "epochs": s.drift_epochs, "gradient_drift": gradient}
    rows = [{**fixed, **r} for r in rows]
    if test is not None:
        rows[-1].update(precision_reference=loop.precision(reference, test),
                        precision_device=loop.precision(device, on(backend, test)))
    close(device)
    return rows


def run_rates(s: Settings, backend: str, job: dict) -> list[dict]:
    """One rate's training, epoch by epoch: the mean of its batches' losses (every batch's loss is computed);
    a loss that leaves the finite numbers ends the run, marked diverged."""
    from perflab.train import loop
    cfg = config(s, learning_rate=job["learning_rate"], hidden_sizes=(s.rates_hidden,), print_every=1)
    train, test, _ = sets_of(cfg)
    trainer, sync = device_trainer(cfg, backend, train)
    rows = []
    for epoch in range(1, s.rates_epochs + 1):
        try:
            with np.errstate(all="ignore"):  # a diverging rate's overflows: said by the row, not by warnings
                history = loop.fit(cfg, trainer, progress=False, sync=sync)
        except loop.Diverged:
            rows.append({"epoch": epoch, "loss": math.inf, "diverged": True})
            break
        rows.append({"epoch": epoch, "loss": float(np.mean([r["loss"] for r in history.losses])), "diverged": False,
                     "seconds": history.epochs[-1]["seconds"]})
    if test is not None and not rows[-1]["diverged"]:
        rows[-1]["test_precision"] = loop.precision(trainer, on(backend, test))
    close(trainer)
    return [{**job, "H": s.rates_hidden, "N": s.N, "B": s.batch, **r} for r in rows]


def run_hidden(s: Settings, backend: str, job: dict, progress: bool = False) -> list[dict]:
    """One hidden size trained until its validation loss has not improved (by MIN_DELTA) for `patience` epochs, or
    `max_epochs`; each epoch's loss on the validation set and on as many training samples, and its precision."""
    from tqdm import tqdm

    from perflab.train import loop
    cfg = config(s, train_size=s.N - s.validation, validation_size=s.validation, learning_rate=s.long_rate,
                 hidden_sizes=(job["H"],))
    train, test, validation = sets_of(cfg)
    trainer, sync = device_trainer(cfg, backend, train)
    seen = on(backend, validation)
    n = min(s.validation, cfg.train_size)
    best, best_epoch, stopped, rows = math.inf, 0, "cap", []
    bar = tqdm(total=s.max_epochs, desc=f"H={job['H']}", unit="epoch", leave=False, disable=not progress)
    for epoch in range(1, s.max_epochs + 1):
        try:
            with np.errstate(all="ignore"):
                history = loop.fit(cfg, trainer, progress=False, sync=sync)
        except loop.Diverged:
            stopped = "diverged"
            break
        train_loss, train_precision = evaluate(trainer.params, trainer.X[:, :n], trainer.y[:n], s.reg)
        loss, precision = evaluate(trainer.params, seen.X, seen.y, s.reg)
        rows.append({"epoch": epoch, "train_loss": train_loss, "train_precision": train_precision,
                     "validation_loss": loss, "validation_precision": precision,
                     "seconds": history.epochs[-1]["seconds"]})
        bar.update()
        if loss < best * (1 - MIN_DELTA):
            best, best_epoch = loss, epoch
        elif epoch - best_epoch >= s.patience:
            stopped = "plateau"
            break
    bar.close()
    if stopped == "diverged":
        rows.append({"epoch": epoch, "train_loss": math.inf, "validation_loss": math.inf, "validation_precision": math.nan})
    rows[-1].update(stopped=stopped, best_epoch=best_epoch, best_validation_loss=best,
                    test_precision=loop.precision(trainer, on(backend, test)) if test is not None and stopped != "diverged"
                    else math.nan)
    close(trainer)
    return [{**job, "long_hidden": s.long_hidden, "learning_rate": s.long_rate, "N": cfg.train_size, "V": s.validation,
             "B": s.batch, **r} for r in rows]


RUNNERS = {"check": run_check, "drift": run_drift, "rates": run_rates, "hidden": run_hidden}


def path_of(folder: Path, part: str) -> Path:
    return Path(folder) / f"problem1_{part}.csv"


def done_keys(path: Path, part: str) -> set:
    """The (setting, backend, key ...) of the runs already in a part's file."""
    import pandas as pd
    if not path.exists() or path.stat().st_size == 0:
        return set()
    table = pd.read_csv(path, dtype=str)
    cols = ["setting", "backend", *KEYS[part]]
    return {tuple(r) for r in table[cols].itertuples(index=False)} if set(cols) <= set(table) else set()


def run_part(part: str, s: Settings, backend: str, folder: Path, meta: dict, progress: bool, log) -> Path:
    from tqdm import tqdm

    from perflab import results
    path = path_of(folder, part)
    where = {"setting": setting(part, s), "backend": backend}
    have = done_keys(path, part)
    todo = [job for job in jobs(part, s) if (where["setting"], backend, *map(str, job.values())) not in have]
    if len(todo) < len(jobs(part, s)):
        log(f"{path.name}: {len(jobs(part, s)) - len(todo)} run(s) done before, {len(todo)} to go")
    for job in tqdm(todo, desc=f"Problem 1 {part}", unit="run", disable=not progress):
        started = time.perf_counter()
        epochs_bar = progress and sys.stderr.isatty()  # a bar under a bar: a terminal's, not a notebook's
        rows = run_hidden(s, backend, job, epochs_bar) if part == "hidden" else RUNNERS[part](s, backend, job)
        results.write_rows(path, [{**where, **r} for r in rows], meta)
        log(f"{part} {' '.join(f'{k}={v}' for k, v in job.items())}: {time.perf_counter() - started:.1f} s")
    return path


# ------------------------------------------------------------------ the budget
H_LO, H_HI = 16, 512  # the hidden sizes an epoch is timed at; other sizes interpolate linearly


@dataclass
class Costs:
    """Seconds a training sample takes in an epoch on this machine, timed just now: NumPy float32 at H_LO and H_HI,
    NumPy float64 over float32, the backend's (CuPy's) at H_LO and H_HI; and a `perflab check` process's start."""
    numpy: tuple
    float64: float
    device: tuple
    device_float64: float = 2.0  # the backend's float64 over float32
    per_epoch: float = 0.0  # the loop's own cost an epoch (a GPU's: evaluation launches, the loss read)
    startup: float = 3.0
    load: float = 1.0  # loading MNIST once

    def sample(self, H: int, device: bool = True, dtype: str = "float32") -> float:
        lo, hi = self.device if device else self.numpy
        seconds = max(lo, lo + (hi - lo) * (H - H_LO) / (H_HI - H_LO))
        return seconds * ((self.device_float64 if device else self.float64) if dtype == "float64" else 1.0)


def timed_sample(backend: str, H: int, dtype: str = "float32", B: int = 3200, dataset: str = "mnist") -> float:
    """Seconds a sample takes in a training epoch at H (the fastest of three after a warm one), on the experiment's
    data: on synthetic data, whose sigmoids saturate, the NumPy step runs slower than on MNIST (docs/DECISIONS.md, D19)."""
    from perflab.config import Config
    from perflab.train import loop
    cfg = Config(dataset=dataset, hidden_sizes=(H,), train_size=2 * B, batch_size=B, test_size=0, dtype=dtype,
                 num_epochs=4, learning_rate=0.1)
    trainer, sync = device_trainer(cfg, backend, sets_of(cfg)[0])
    history = loop.fit(cfg, trainer, progress=False, sync=sync)
    close(trainer)
    return min(e["seconds"] for e in history.epochs[1:]) / cfg.train_size


def measure_costs(backend: str, dataset: str = "mnist") -> Costs:
    numpy = (timed_sample("numpy", H_LO, dataset=dataset), timed_sample("numpy", H_HI, dataset=dataset))
    float64 = timed_sample("numpy", H_HI, "float64", dataset=dataset) / numpy[1]
    if backend == "cupy":
        device = (timed_sample("cupy", H_LO, dataset=dataset), timed_sample("cupy", H_HI, dataset=dataset))
        return Costs(numpy, float64, device, per_epoch=3e-3)
    return Costs(numpy, float64, numpy, device_float64=float64)


def estimate(s: Settings, costs: Costs, backend: str, parts=PARTS) -> dict:
    """Seconds each part should take at these settings (Q1.4's at its cap of epochs: an upper bound)."""
    gpu = backend == "cupy"
    out = {}
    if "check" in parts:
        out["check"] = sum(costs.startup + costs.load + s.check_N * costs.sample(s.check_hidden, False, d) * (1 if gpu else 2)
                           for d in ("float32", "float64"))
    if "drift" in parts:  # the reference, and the device's step batch by batch (a GPU's without graphs)
        out["drift"] = 2 * costs.load + sum(
            s.drift_epochs * s.N * (costs.sample(j["H"], False, j["dtype"])
                                    + (5 if gpu else 1.2) * costs.sample(j["H"], gpu, j["dtype"]))
            for j in jobs("drift", s))
    if "rates" in parts:
        out["rates"] = costs.load + len(s.rates) * s.rates_epochs * (1.1 * s.N * costs.sample(s.rates_hidden) + costs.per_epoch)
    if "hidden" in parts:
        samples = s.N - s.validation + 2 * s.validation / 3  # an epoch's training, and two evaluations' forward passes
        out["hidden"] = costs.load + sum(s.max_epochs * (samples * costs.sample(h) + costs.per_epoch) for h in s.hidden)
    return out


def left_out(s: Settings, full: Settings = FULL) -> str:
    """What a version leaves out of the full one, field by field."""
    said = [f"{f.name} {getattr(full, f.name)} -> {getattr(s, f.name)}" for f in dataclasses.fields(Settings)
            if getattr(s, f.name) != getattr(full, f.name)]
    return "; ".join(said) or "nothing"


def minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"


def choose(budget_s: float | None, costs: Costs, backend: str, parts, changes: dict, full: bool) -> tuple:
    """(name, settings, its estimate part by part) of the largest version whose estimate fits the budget (the full
    one when asked, the smallest where none fits), and the lines that say so."""
    tiers = [(name, with_changes(s, changes)) for name, s in TIERS]
    estimates = [estimate(s, costs, backend, parts) for _, s in tiers]
    sums = [sum(e.values()) for e in estimates]
    pick = 0 if full else next((i for i, t in enumerate(sums) if t <= budget_s), len(tiers) - 1)
    name, s = tiers[pick]
    lines = [f"Problem 1 on {backend}: the {name} version, about {minutes(sums[pick])} (parts: {', '.join(parts)})"
             + ("" if full else f", of a budget of {minutes(budget_s)}")]
    if not full and sums[pick] > budget_s:
        lines.append("even the smallest version should take longer than the budget; it runs anyway")
    if name != "full":
        lines.append(f"left out against the full version: {left_out(s, tiers[0][1])}")
        lines.append(f"the full version would take about {minutes(sums[0])} here; on a GPU: "
                     "OUT=gpu-out bash scripts/gpu_problem1.sh")
    return name, s, estimates[pick], lines


def plan(budget_s: float | None, full: bool = False, backend: str = "auto", parts=PARTS,
         settings: Settings | None = None, **changes) -> dict:
    """What `run` would do, checked and timed, before anything runs or is written: {version, settings, backend,
    parts, estimate_s, lines} (lines: what it says of the version, what it leaves out, the full one's time).
    A main job that states its duration first takes estimate_s from here."""
    from perflab.workbook.plan import PlanError, gpu_count, resolve_backend
    parts = check_parts(parts)
    if not full and settings is None:
        check_budget(budget_s)
    with_changes(settings or FULL, changes)  # a bad value is named here, before anything runs
    try:
        backend = resolve_backend(backend, gpu_count())
    except PlanError as exc:
        raise Problem1Error(str(exc)) from None
    if settings is not None:
        name, chosen, estimates, lines = "given", with_changes(settings, changes), {}, []
    else:
        costs = measure_costs(backend, with_changes(FULL, changes).dataset)
        name, chosen, estimates, lines = choose(budget_s, costs, backend, parts, changes, full)
    return {"version": name, "settings": chosen, "backend": backend, "parts": parts,
            "estimate_s": sum(estimates.values()) if estimates else math.nan, "estimates": estimates, "lines": lines}


def estimate_left(planned: dict, folder) -> float:
    """plan's estimate of the parts not yet begun in `folder` (a resumed main job's Problem 1)."""
    return sum(v for part, v in planned["estimates"].items() if not done_keys(path_of(Path(folder), part), part))


def run(folder, budget_s: float | None, full: bool = False, backend: str = "auto", progress: bool = True, log=print,
        parts=PARTS, settings: Settings | None = None, planned: dict | None = None, record_parts: bool = False,
        **changes) -> dict:
    """Run the parts not yet in `folder`: the largest version that fits `budget_s` seconds (full: the solution's
    scale; settings: exactly these), `changes` (Settings fields, e.g. rates=[...]) applied to it. Everything is
    checked before anything is written (`plan`; or `planned`, what plan returned, so as not to time it twice).
    `record_parts`: each part run whole goes, timed beside its estimate, into the main job's parts file
    (perflab.workbook.plan.record_part). Returns plan's dict with the files written."""
    from perflab import results
    from perflab.workbook.plan import timed_part
    planned = planned or plan(budget_s, full, backend, parts, settings, **changes)
    for line in planned["lines"]:
        log(line)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    chosen, backend = planned["settings"], planned["backend"]
    meta = {**results.machine_metadata(), "backend": backend, "version": planned["version"],
            "settings": dataclasses.asdict(chosen)}
    started = time.perf_counter()
    files = []
    for part in planned["parts"]:
        fresh = record_parts and not done_keys(path_of(folder, part), part)  # one resumed took less than its estimate
        with timed_part(folder, f"Problem 1 {part}", planned["estimates"].get(part, math.nan)) if fresh \
                else contextlib.nullcontext():
            files.append(run_part(part, chosen, backend, folder, meta, progress, log))
    seconds = planned["estimate_s"]
    log(f"Problem 1 took {minutes(time.perf_counter() - started)}"
        + (f" (estimated {minutes(seconds)})" if seconds == seconds else ""))
    return {**planned, "files": files}


# ------------------------------------------------------------------ figures
def drift_figure(table):
    """Q1.2 (the solution's Figure 2): the device run's weights against the reference's, step by step."""
    from perflab.report import plots
    from perflab.train.runner import TOLERANCE
    dtypes = [d for d in ("float32", "float64") if d in set(table["dtype"])]
    fig, _ = plots.new_figure(4.2 * len(dtypes) + 1, 4.4)
    fig.clf()
    axes = np.atleast_1d(fig.subplots(1, len(dtypes), sharex=True))
    rates = sorted(set(table.learning_rate))
    sizes = sorted(set(table.H))
    for ax, dtype in zip(axes, dtypes):
        for (lr, H), g in table[table["dtype"] == dtype].groupby(["learning_rate", "H"]):
            ax.loglog(g.step, g.drift.clip(lower=1e-18), marker=".", color=f"C{rates.index(lr)}",
                      ls=("-", "--", ":", "-.")[sizes.index(H) % 4], label=f"lr={lr:g}, H={H}")
        ax.axhline(TOLERANCE[dtype], color="k", ls=":", lw=1)
        gradient = table[table["dtype"] == dtype].gradient_drift.median()
        ax.axhline(gradient, color="0.5", ls="--", lw=1, label="one batch's gradient, reordered")
        ax.set_title(f"{dtype} (dotted: the check's tolerance {TOLERANCE[dtype]:.0e})", fontsize=9)
        ax.set_xlabel("SGD steps")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    axes[0].set_ylabel("relative difference of the weights")
    return fig


def rates_figure(table, best: float):
    """Q1.3: the mean training loss of each epoch, one line a learning rate; x where a run diverged."""
    from perflab.report import plots
    fig, ax = plots.new_figure(7, 4.6)
    for i, (lr, g) in enumerate(table.groupby("learning_rate")):
        finite = g[np.isfinite(g.loss)]
        gone = g.diverged.any() or (len(finite) and finite.loss.iloc[-1] > DIVERGED)
        ax.semilogy(finite.epoch, finite.loss, color=f"C{i % 10}", lw=2.5 if lr == best else 1.2,
                    label=f"lr={lr:g}" + (" (lowest loss)" if lr == best else "") + (" diverged" if gone else ""))
        if g.diverged.any():
            y = finite.loss.iloc[-1] if len(finite) else table.loss[np.isfinite(table.loss)].max()
            ax.plot(g.epoch.iloc[-1], y, "x", color=f"C{i % 10}", ms=9)
    ax.set_xlabel("epoch")
    ax.set_ylabel("training loss (mean over the epoch's batches)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    return fig


def plateau_figure(run):
    """Q1.4 (the solution's Figure 5): the long run's losses, epoch by epoch, and where the validation loss was lowest."""
    from perflab.report import plots
    fig, ax = plots.new_figure(7, 4.4)
    ax.semilogy(run.epoch, run.train_loss, label="training loss")
    ax.semilogy(run.epoch, run.validation_loss, label="validation loss")
    best = int(run.best_epoch.dropna().iloc[-1])
    ax.axvline(best, color="k", ls=":", lw=1, label=f"lowest validation loss (epoch {best})")
    ax.set_xlabel("epoch")
    ax.set_ylabel("loss J (cross-entropy + L2)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def hidden_figure(summary, recommended: int):
    """Q1.4: precision against the hidden size, and the gap between validation and training loss."""
    from perflab.report import plots
    fig, ax = plots.new_figure(7, 4.4)
    ax.semilogx(summary.H, 100 * summary.validation_precision, "o-", label="validation precision")
    if summary.test_precision.notna().any():
        ax.semilogx(summary.H, 100 * summary.test_precision, "s--", label="test precision")
    ax.axvline(recommended, color="k", ls=":", lw=1, label=f"recommended H = {recommended}")
    ax.set_xlabel("hidden size H")
    ax.set_xticks(list(summary.H), [str(h) for h in summary.H])
    ax.minorticks_off()
    ax.set_ylabel("precision (%)")
    twin = ax.twinx()
    twin.semilogx(summary.H, summary.gap, "^:", color="C3", label="validation - training loss")
    twin.set_ylabel("loss gap", color="C3")
    lines = ax.get_legend_handles_labels()
    more = twin.get_legend_handles_labels()
    ax.legend(lines[0] + more[0], lines[1] + more[1], fontsize=8, loc="lower right")
    ax.grid(True, which="both", alpha=0.3)
    return fig


# ------------------------------------------------------------------ answers
def rel(x: float) -> str:
    """A relative error as the report writes it: scientific, then in %."""
    return f"{x:.1e} ({100 * x:.1e} %)"


def latest(path: Path):
    """A part's rows of the setting and backend it was last run at."""
    import pandas as pd
    table = pd.read_csv(path)
    last = table.iloc[-1]
    return table[(table.setting == last.setting) & (table.backend == last.backend)].reset_index(drop=True)


def answers(folder, figures=None) -> dict:
    """{"FA Q1.1": Answer | Missing, ... "FA Q1.4": ...} from the part files in `folder`; figures into `figures`
    (default its figures/; a report on a committed folder draws them beside its own output instead)."""
    from perflab.report.answer import Missing
    from perflab.results import relative
    folder = Path(folder)
    out = {}
    for part, key in QUESTIONS.items():
        path = path_of(folder, part)
        if not path.exists() or path.stat().st_size == 0:
            out[key] = Missing(f"no {path.name} in {relative(folder)}",
                               f"python -m perflab.workbook.problem1 --parts {part} --folder {relative(folder)}")
            continue
        out[key] = ANSWERS[part](latest(path), Path(figures or folder / "figures"), path.name)
    return out


def answer_check(t, figures: Path, source: str):
    from perflab.report.answer import Answer
    parts = []
    for r in t.itertuples():
        parts.append(f"in {r.dtype} the largest relative error of the weights and biases is {rel(r.max_rel_error)} "
                     f"(tolerance {r.tolerance:.0e}: {'passed' if r.passed else 'FAILED'})")
    r = t.iloc[0]
    text = (f"The seeds' test ({r.way} against the sequential NumPy reference in the same precision, from the same "
            f"initial weights: H = {r.H}, N = {r.N}, B = {r.B}, lr = {r.learning_rate:g}, {r.epochs} epoch): "
            + "; ".join(parts) + ". " + ("Both precisions pass" if t.passed.all() and len(t) == 2 else
                                          "Not every precision passes" if not t.passed.all() else "One precision ran")
            + ". The seeds' solution saw about 1e-7 in single and 1e-16 in double precision.")
    cols = [c for c in ("dtype", "way", "W1", "b1", "W2", "b2", "max_rel_error", "tolerance", "passed") if c in t]
    return Answer(text, [(t[cols], "Relative (Frobenius) error of each parameter against the sequential reference "
                                   "after training, in each precision.")], sources=[source])


def drift_summary(t):
    """A row a run: one batch's gradient drift, the weights' after one step and at the end, the growth, precisions."""
    import pandas as pd
    rows = []
    for (dtype, lr, H), g in t.groupby(["dtype", "learning_rate", "H"]):
        g = g.sort_values("step")
        last = g.iloc[-1]
        one = g[g.step == 1].drift.iloc[0] if (g.step == 1).any() else math.nan
        rows.append({"dtype": dtype, "learning_rate": lr, "H": H, "gradient_drift": last.gradient_drift,
                     "after_1_step": one, "steps": int(last.step), "at_end": last.drift,
                     "growth": last.drift / one if one > 0 else math.nan,
                     "precision_reference": last.get("precision_reference", math.nan),
                     "precision_device": last.get("precision_device", math.nan)})
    return pd.DataFrame(rows)


def answer_drift(t, figures: Path, source: str):
    from perflab.report import plots
    from perflab.report.answer import Answer
    from perflab.train.runner import TOLERANCE
    s = drift_summary(t)
    r0 = t.iloc[0]
    f32 = s[s["dtype"] == "float32"] if (s["dtype"] == "float32").any() else s
    hi = f32.sort_values(["learning_rate", "H"]).iloc[-1]
    lo = f32[f32.H == hi.H].sort_values("learning_rate").iloc[0]
    tol = TOLERANCE[hi["dtype"]]
    g = t[(t["dtype"] == hi["dtype"]) & (t.learning_rate == hi.learning_rate) & (t.H == hi.H)].sort_values("step")
    over = g[g.drift > tol]
    text = (f"The device run here is {r0.way}, compared with the sequential NumPy reference in the same precision from "
            f"the same weights on the same batches (N = {r0.N}, B = {r0.B}, {r0.epochs} epochs = {int(g.step.max())} "
            f"steps). Reordering the sum alone changes one batch's gradient by {rel(hi.gradient_drift)} ({hi['dtype']}). "
            f"At lr = {hi.learning_rate:g}, H = {hi.H}, the weights differ by {rel(hi.after_1_step)} after one step and "
            f"by {rel(hi.at_end)} after {hi.steps} steps, {hi.growth:.1e} times more")
    text += (f"; they are past the check's tolerance of {tol:.0e} by step {int(over.step.iloc[0])}, so the test "
             f"reports errors, as the seeds' did" if len(over) else f", still inside the check's tolerance of {tol:.0e}")
    text += (f". At lr = {lo.learning_rate:g} the difference ends at {rel(lo.at_end)} ({lo.growth:.1e} times the "
             "first step's). A small perturbation that grows with the iterations, the faster the larger the "
             "learning rate, is the mark of a chaotic process; the perturbation itself is rounding (here the "
             "order of the sum" + (", and on the GPU its GEMMs' blocking and fused multiply-adds" if "GPU" in r0.way
                                     else "") + ").")
    f64 = s[s["dtype"] == "float64"]
    if len(f64):
        top = f64.sort_values("learning_rate").iloc[-1]
        text += (f" In float64, whose rounding is about 2e-9 times float32's, it goes from {rel(top.after_1_step)} to "
                 f"{rel(top.at_end)} ({top.growth:.1e} times) at lr = {top.learning_rate:g}, H = {top.H}.")
    both = s.dropna(subset=["precision_reference", "precision_device"])
    if len(both):
        gap = (both.precision_device - both.precision_reference).abs()
        far = both.loc[gap.idxmax()]
        verdict = ("It does not matter for the precision" if gap.max() <= 0.005 else
                   "It matters little for the precision" if gap.max() <= 0.02 else "It does move the precision")
        text += (f" {verdict}: on the test set the reference and the device run reach "
                 f"{100 * far.precision_reference:.2f}% and {100 * far.precision_device:.2f}% at lr = "
                 f"{far.learning_rate:g}, H = {far.H} ({dtype_words(far['dtype'])}), the largest gap of all runs "
                 f"({100 * gap.max():.2f} percentage points).")
    png = plots.save(drift_figure(t), "problem1_drift",
                     f"Relative (Frobenius) difference of the weights of the device run ({r0.way}) from the sequential "
                     f"NumPy reference's, worst parameter, against SGD steps; N = {r0.N}, B = {r0.B}. One line a "
                     "learning rate (colour) and hidden size (line style).", figures, draw_caption=False)
    table = s.assign(precision_reference=100 * s.precision_reference, precision_device=100 * s.precision_device).rename(
        columns={"learning_rate": "lr", "gradient_drift": "one batch's gradient", "after_1_step": "weights after 1 step",
                 "at_end": "weights at the end", "precision_reference": "reference precision (%)",
                 "precision_device": "device precision (%)"})
    return Answer(text, [(table, "Each run's relative difference from the reference: one batch's gradient, the weights "
                                 "after one step and at the end (and the growth between), and both runs' test "
                                 "precision.")], [png], [source])


def dtype_words(dtype: str) -> str:
    return {"float32": "single precision", "float64": "double precision"}.get(dtype, dtype)


def rates_summary(t):
    import pandas as pd
    rows = []
    for lr, g in t.groupby("learning_rate"):
        g = g.sort_values("epoch")
        finite = g[np.isfinite(g.loss)]
        rises = int((finite.loss.diff() > 0).sum())
        rows.append({"learning_rate": lr, "epochs": int(g.epoch.max()),
                     "diverged": bool(g.diverged.any() or g.loss.iloc[-1] > DIVERGED),
                     "first_loss": finite.loss.iloc[0] if len(finite) else math.nan,
                     "final_loss": g.loss.iloc[-1], "epochs_loss_rose": rises,
                     "test_precision": g.test_precision.dropna().iloc[-1] if "test_precision" in g
                     and g.test_precision.notna().any() else math.nan})
    return pd.DataFrame(rows)


def best_rate(summary) -> float:
    """The fastest-converging rate: the lowest mean training loss over the last epoch of the budget, among the
    runs that did not diverge."""
    ok = summary[~summary.diverged & np.isfinite(summary.final_loss)]
    return float(ok.loc[ok.final_loss.idxmin()].learning_rate) if len(ok) else math.nan


def answer_rates(t, figures: Path, source: str):
    from perflab.report import plots
    from perflab.report.answer import Answer
    s = rates_summary(t)
    r0 = t.iloc[0]
    best = best_rate(s)
    if best != best:
        return Answer(f"Every learning rate tried ({', '.join(f'{lr:g}' for lr in s.learning_rate)}) diverged: the loss "
                      "left the finite numbers. Try smaller ones.", [(s, "Each learning rate's run.")], [], [source])
    b = s[s.learning_rate == best].iloc[0]
    below, above = s[s.learning_rate < best], s[s.learning_rate > best]
    epochs = int(s.epochs.max())
    text = (f"After {epochs} epochs of {r0.N} samples (H = {r0.H}, B = {r0.B}, float32) at each learning rate, the "
            f"lowest mean training loss in the last epoch (the criterion) is {b.final_loss:.3f} at lr = {best:g}"
            + (f", test precision {100 * b.test_precision:.2f}%" if b.test_precision == b.test_precision else "")
            + ": the fastest-converging rate here (the seeds' solution found about 0.1). ")
    if len(below):
        text += ("Below it the loss falls more slowly, the slower the smaller the rate: it ends at "
                 + ", ".join(f"{r.final_loss:.3f} (lr = {r.learning_rate:g})" for r in below[::-1].itertuples()) + ". ")
    if len(above):
        parts = []
        for r in above.itertuples():
            if not math.isfinite(r.final_loss):
                parts.append(f"lr = {r.learning_rate:g} diverged in epoch {r.epochs} (the loss left the finite numbers)")
            elif r.diverged:
                parts.append(f"lr = {r.learning_rate:g} diverged: its loss ends at {r.final_loss:.3g}, more than twice a "
                             f"uniform guess's (ln 10 = {CHANCE:.2f})")
            else:
                parts.append(f"lr = {r.learning_rate:g} ends at {r.final_loss:.3f}, its loss rising in "
                             f"{r.epochs_loss_rose} of {r.epochs} epochs")
        text += "Above it the steps overshoot: " + "; ".join(parts) + "."
    png = plots.save(rates_figure(t, best), "problem1_rates",
                     f"Mean training loss of each epoch for each learning rate, 784-{r0.H}-10, N = {r0.N}, B = {r0.B}, "
                     f"float32; thick: the lowest loss at the end (lr = {best:g}); x: a run that diverged.",
                     figures, draw_caption=False)
    table = s.assign(test_precision=100 * s.test_precision).rename(
        columns={"learning_rate": "lr", "first_loss": "first epoch's loss", "final_loss": "last epoch's loss",
                 "epochs_loss_rose": "epochs the loss rose", "test_precision": "test precision (%)"})
    return Answer(text, [(table, "Each learning rate's first and last epoch's mean training loss, the epochs in which "
                                 "it rose, and the test precision (%) at the end.")], [png], [source])


def hidden_summary(t):
    import pandas as pd
    rows = []
    for H, g in t.groupby("H"):
        g = g.sort_values("epoch")
        last = g.iloc[-1]
        lowest = g.validation_loss.min()
        rows.append({"H": int(H), "epochs": int(last.epoch), "stopped": last.stopped, "best_epoch": last.best_epoch,
                     "train_loss": last.train_loss, "validation_loss": last.validation_loss,
                     "gap": last.validation_loss - last.train_loss, "rise": last.validation_loss / lowest - 1,
                     "validation_precision": last.validation_precision, "test_precision": last.get("test_precision", math.nan)})
    return pd.DataFrame(rows)


def recommended(summary) -> int:
    """The smallest hidden size within NEAR_BEST of the best validation precision."""
    ok = summary.dropna(subset=["validation_precision"])
    near = ok[ok.validation_precision >= ok.validation_precision.max() - NEAR_BEST]
    return int(near.H.min())


def answer_hidden(t, figures: Path, source: str):
    """FA Q1.4: the long run to its plateau, then every hidden size and the one to recommend."""
    from perflab.report.answer import Answer
    s = hidden_summary(t)
    wanted = float(t.long_hidden.iloc[0]) if "long_hidden" in t else 64.0
    long_H = int(min(s.H, key=lambda h: (abs(math.log(h / wanted)), h)))  # the long run: as long_size chose it
    rec = recommended(s)
    text = long_run_text(t.iloc[0], s[s.H == long_H].iloc[0], long_H) + hidden_sizes_text(s, rec) + overfitting_text(s)
    figures = hidden_figures(t, s, long_H, rec, figures)
    return Answer(text, [(hidden_table(s), "Each hidden size's epochs, why it stopped, its losses at the end and the "
                                          "gap between them, and its precision (%).")], figures, [source])


def long_run_text(r0, L, long_H: int) -> str:
    """How the long run ended (plateau, cap or divergence) and the losses and precision it reached."""
    how = {"plateau": f"stopped at epoch {L.epochs}: its validation loss had not improved by {100 * MIN_DELTA:g}% "
                      f"for {L.epochs - int(L.best_epoch)} epochs, so it has converged",
           "cap": f"ran its cap of {L.epochs} epochs with the validation loss still improving, so it has not quite "
                  "converged",
           "diverged": f"diverged in epoch {L.epochs}"}[L.stopped]
    return (f"The long run (784-{long_H}-10, lr = {r0.learning_rate:g}, B = {r0.B}, float32, {r0.N} training samples "
            f"and {r0.V} validation samples carved from the training set) {how}. It reached a training loss of "
            f"{L.train_loss:.4f} (on {r0.V} training samples) and a validation loss of {L.validation_loss:.4f} (lowest "
            f"at epoch {int(L.best_epoch)}), validation precision {100 * L.validation_precision:.2f}%"
            + (f" and test precision {100 * L.test_precision:.2f}%" if L.test_precision == L.test_precision else "")
            + " (the seeds: loss about 1e-2 after about 1000 epochs at lr 0.2, precision about 97%). ")


def hidden_sizes_text(s, rec: int) -> str:
    """The precision over the hidden sizes, the one recommended, and what smaller and larger nets get."""
    ends = s.sort_values("H")
    text = (f"Each hidden size trained the same way: the validation precision goes from "
            f"{100 * ends.validation_precision.iloc[0]:.2f}% at H = {ends.H.iloc[0]} to "
            f"{100 * ends.validation_precision.iloc[-1]:.2f}% at H = {ends.H.iloc[-1]}, best "
            f"{100 * s.validation_precision.max():.2f}% at H = {int(s.loc[s.validation_precision.idxmax()].H)}. "
            f"Recommended: H = {rec}, the smallest within {100 * NEAR_BEST:g} percentage points of the best. ")
    smaller, larger = s[s.H < rec], s[s.H > rec]
    at = s[s.H == rec].iloc[0]
    said = []
    if len(smaller):
        said.append(f"smaller nets classify worse ({100 * smaller.validation_precision.iloc[0]:.2f}% at H = "
                    f"{smaller.H.iloc[0]})")
    if len(larger):
        gain = larger.validation_precision.max() - at.validation_precision
        said.append((f"larger ones gain at most {100 * gain:.2f} percentage points" if gain > 0 else
                     f"larger ones classify no better (at best {100 * -gain:.2f} percentage points worse)")
                    + f" for an epoch that costs up to {larger.H.max() / rec:.0f} times more")
    if said:
        joined = " and ".join(said)
        text += joined[0].upper() + joined[1:] + ". "
    return text


def overfitting_text(s) -> str:
    """Whether any run's validation loss rose off its minimum, and how the loss gap moves with H."""
    ends = s.sort_values("H")
    rose = s[s.rise >= ROSE]
    if len(rose):
        return ("Overfitting: the validation loss ended above its minimum by "
                + ", ".join(f"{100 * r.rise:.1f}% at H = {r.H}" for r in rose.itertuples())
                + f"; the gap between validation and training loss is {ends.gap.iloc[0]:.3f} at H = {ends.H.iloc[0]} "
                  f"and {ends.gap.iloc[-1]:.3f} at H = {ends.H.iloc[-1]}.")
    return (f"No run's validation loss rose {100 * ROSE:g}% above its minimum; the gap between validation and "
            f"training loss goes from {ends.gap.iloc[0]:.3f} (H = {ends.H.iloc[0]}) to {ends.gap.iloc[-1]:.3f} "
            f"(H = {ends.H.iloc[-1]})" + (": the larger nets fit the training set more closely than they generalize."
                                           if ends.gap.iloc[-1] > 1.5 * max(ends.gap.iloc[0], 0) + 0.01 else
                                           ": no sign of overfitting within these runs."))


def hidden_figures(t, s, long_H: int, rec: int, figures: Path) -> list[Path]:
    """The long run's losses by epoch, and each hidden size's precision and loss gap."""
    from perflab.report import plots
    r0 = t.iloc[0]
    run_ = t[t.H == long_H].sort_values("epoch")
    return [plots.save(plateau_figure(run_), "problem1_plateau",
                       f"The long run: loss on {r0.V} training samples and on the {r0.V} validation samples after "
                       f"each epoch, 784-{long_H}-10, lr = {r0.learning_rate:g}, B = {r0.B}, float32.", figures, draw_caption=False),
            plots.save(hidden_figure(s, rec), "problem1_hidden",
                       "Validation and test precision of each hidden size trained to its plateau (or its cap of "
                       "epochs), and the gap between its validation and training loss (right axis).", figures, draw_caption=False)]


def hidden_table(s):
    """The summary a hidden size a row, precisions in %, its columns named for a reader."""
    return s.assign(validation_precision=100 * s.validation_precision, test_precision=100 * s.test_precision,
                    best_epoch=s.best_epoch.astype("Int64"), rise=100 * s.rise).rename(
        columns={"best_epoch": "lowest validation loss at epoch", "gap": "validation - training loss",
                 "rise": "rise above the lowest (%)", "validation_precision": "validation precision (%)",
                 "test_precision": "test precision (%)"})


ANSWERS = {"check": answer_check, "drift": answer_drift, "rates": answer_rates, "hidden": answer_hidden}


# ------------------------------------------------------------------ command line
def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m perflab.workbook.problem1", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    how = parser.add_mutually_exclusive_group()
    how.add_argument("--budget-minutes", type=float, default=3.0, metavar="MIN",
                     help="fit the largest version whose estimate (from epochs timed now) takes at most this long; "
                          "says what it left out and how long the full one would take (default %(default)s)")
    how.add_argument("--full", action="store_true", help="the solution's scale: 60000 samples, lr 1e-3 to 100, H 16 "
                                                         "to 2048, up to 1000 epochs (minutes on a GPU, hours on a CPU)")
    parser.add_argument("--folder", type=Path, default=None, metavar="DIR", help="where problem1_<part>.csv and figures/ go "
                                                                  "(default: this machine's run folder, runs/<key>/)")
    parser.add_argument("--parts", nargs="+", default=list(PARTS), metavar="PART",
                        help=f"which of {', '.join(PARTS)} (Q1.1 to Q1.4) to run (default: all)")
    parser.add_argument("--backend", default="auto", help="auto (CuPy where a GPU is seen), numpy or cupy")
    parser.add_argument("--rates", type=float, nargs="+", metavar="LR", help="Q1.3's learning rates (default: the version's)")
    parser.add_argument("--hidden", type=float, nargs="+", metavar="H", help="Q1.4's hidden sizes (default: the version's)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars (logs, batch jobs)")
    args = parser.parse_args(argv)
    from perflab import results
    folder = args.folder or results.run_dir()
    changes = {k: v for k, v in (("rates", args.rates), ("hidden", args.hidden)) if v is not None}
    try:
        run(folder, None if args.full else budget_seconds(args.budget_minutes), full=args.full, backend=args.backend,
            progress=not args.no_progress, parts=args.parts, **changes)
    except Problem1Error as exc:
        parser.error(str(exc))
    for key, answer in answers(folder).items():
        print(f"\n{key}: " + (answer.text if hasattr(answer, "text") else f"not run ({answer.why}): {answer.command}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
