"""Sweeps: a grid of training points, each measured and written as soon as it finishes.

A point is plain values (H, B, p, parallel, backend, mode, gemm, launch, dtype, N, epochs, comm): launch
`graph` replays each step as a CUDA graph where the trainer can, `eager` launches its kernels one by
one (the seeds' way; the row's `graphs` says what ran); comm is the gradient exchange (host MPI in the
staged modes and on the CPU, NCCL or p2p for resident GPU data parallel). Each is
measured twice on p ranks: an unprofiled run for the epoch time (`epoch_seconds`: median of
`epochs` epochs after one warm-up epoch, more where those would last under MIN_TIMED_SECONDS
(`timed_epochs` says how many ran); nothing synchronizes inside an epoch; `epoch_spread`:
their (slowest - fastest) / median, how far the measurement itself moved) and a profiled
epoch for the per-phase medians the roofline needs (`t_<phase>`: device synchronized at every
phase edge). Rows go to
`<run folder>/<name>.csv` (+ machine metadata .json) one point at a time, so a crash
loses at most the point in flight; a rerun skips the points already there. A point whose
training diverges is written as `status = failed` with the reason, never as a measurement.
Two sweeps writing one file at once claim each point under a file lock (`<name>.claims`), so
each measures what the other has not.

Two ways to run the same grid:
  mpiexec -n 4 perflab sweep ...      every rank runs `run_grid_mpi` (batch jobs, clusters)
  ipyparallel MPI engines              the notebook calls `run_grid_engines(view, ...)`
Points with p smaller than the world run on a sub-communicator of the first p ranks.
"""
from __future__ import annotations

import contextlib
import fcntl
import itertools
import json
import math
import os
import platform
import statistics
import time
from pathlib import Path

from perflab.config import GPU_EXCHANGES, exchange_fields  # noqa: F401 (a point's comm as the trainer's fields)
from perflab.train.spec import RunSpec, default_comm
from perflab.train.watchdog import TIMEOUT_S

MIN_TIMED_SECONDS = 0.25  # a point's timed epochs last at least this long (timed_epochs)
MAX_EXTRA_EPOCHS = 200
KEY = ("H", "B", "p", "parallel", "backend", "mode", "gemm", "launch", "dtype", "N", "epochs", "comm")
LAUNCHES = ("graph", "eager")
EXCHANGES_HELP = ("resident GPU data parallel's gradient exchange: nccl (NCCL's all-reduce, then the update), p2p (the "
                  "peers' gradients read over NVLink and applied in one kernel; GPUs of one node), overlap (NCCL in dW1 "
                  "row chunks, each all-reduced under the next chunk's GEMM: perflab train --overlap)")


def grid(hidden=(512,), batch=(3200,), ranks=(1,), per_rank_batch=None, parallel=("data",), backend=("numpy",),
         mode=("resident",), gemm=("cublas",), dtype=("float32",), N=38400, epochs=1, learning_rate=0.1,
         launch=("graph",), comm=None) -> list[dict]:
    """All combinations; with per_rank_batch, B = p * B/p (the seeds' weak-scaling sweep). hidden: nets,
    each one width (512) or a deeper net's widths (1024-1024 or (1024, 1024); a row's H names it as
    perfmodel.net_label does). comm (one of GPU_EXCHANGES) sets resident GPU data parallel's exchange;
    None: default_comm. Each point parses into its RunSpec, validated: a point the trainer would refuse (a half
    precision the GPU step cannot make, a GEMM for another dtype) is refused here with RunSpec's message, before
    any point runs."""
    from perflab.analysis import perfmodel
    bad = [x for x in launch if x not in LAUNCHES]
    if bad:
        raise ValueError(f"launch must be among {LAUNCHES}, got {bad[0]!r}")
    if comm is not None and (comm not in GPU_EXCHANGES or set(backend) != {"cupy"} or set(mode) != {"resident"}
                             or set(parallel) != {"data"}):
        raise ValueError(f"--comm {comm}: a sweep chooses the exchange ({', '.join(GPU_EXCHANGES)}) of resident GPU data "
                         f"parallel only; got backend {list(backend)}, mode {list(mode)}, parallel {list(parallel)}")
    points = []
    batches = per_rank_batch if per_rank_batch else batch
    for H, b, p, par, be, mo, ge, la, dt in itertools.product(hidden, batches, ranks, parallel, backend, mode, gemm,
                                                              launch, dtype):
        B = b * p if per_rank_batch else b
        if B > N:
            raise ValueError(f"a point's batch B={B}" + (f" (B/p={b} on p={p})" if per_rank_batch else "")
                             + f" is larger than the training set N={N}; allowed: B <= N (raise --train-size)")
        if be == "numpy" and (mo != "resident" or ge != "cublas" or la != launch[0]):
            continue  # mode, GEMM variant and CUDA graphs exist only on the GPU
        point = {"H": perfmodel.net_label(H), "B": B, "p": p, "parallel": par, "backend": be, "mode": mo, "gemm": ge,
                 "launch": "eager" if be == "numpy" else la, "dtype": dt, "N": N, "epochs": epochs,
                 "learning_rate": learning_rate, "comm": comm or default_comm(be, mo)}
        RunSpec.from_point(point).validate()
        points.append(point)
    return points


def key(point: dict) -> tuple:
    return tuple(str(point[k]) for k in KEY)


def done_keys(path: Path) -> set:
    """Keys of the points in the file, measured or failed (a failed point is not retried)."""
    if not Path(path).exists() or Path(path).stat().st_size == 0:
        return set()
    import pandas as pd
    table = pd.read_csv(path)
    if "launch" not in table:  # a file from before sweeps chose it: every point launched the default way
        table["launch"] = ["eager" if b == "numpy" else "graph" for b in table.backend]
    if "comm" not in table:  # a file from before sweeps chose it: every point exchanged the default way
        table["comm"] = [default_comm(b, m) for b, m in zip(table.backend, table["mode"])]
    return {tuple(str(v) for v in row) for row in table[list(KEY)].itertuples(index=False)} if len(table) else set()


class Claims:
    """The points sweeps are measuring now, in `<name>.claims` beside the result file, read and
    written under an exclusive lock on `<name>.lock`: a sweep measures a point only after claiming
    it, so two sweeps on one file split the grid instead of measuring every point twice. A claim
    whose process is gone (same host) no longer counts."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.claims = self.path.with_suffix(".claims")
        self.lock = self.path.with_suffix(".lock")

    @contextlib.contextmanager
    def locked(self):
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.lock, "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def _live(self) -> list[dict]:
        if not self.claims.exists():
            return []
        entries = [json.loads(line) for line in self.claims.read_text().splitlines() if line.strip()]
        return [e for e in entries if e["host"] != platform.node() or pid_alive(e["pid"])]

    def _write(self, entries: list[dict]) -> None:
        if entries:
            self.claims.write_text("".join(json.dumps(e) + "\n" for e in entries))
        else:
            self.claims.unlink(missing_ok=True)

    def claim(self, point: dict) -> bool:
        """True when this process may measure the point: not in the file, not claimed by a live sweep."""
        k = list(key(point))
        with self.locked():
            live = self._live()
            if tuple(k) in done_keys(self.path) or any(e["key"] == k for e in live):
                return False
            self._write(live + [{"key": k, "pid": os.getpid(), "host": platform.node()}])
            return True

    def finish(self, point: dict, row: dict | None, meta: dict) -> None:
        """Write the point's row (if any) and drop its claim, in one locked step."""
        from perflab import results
        k = list(key(point))
        with self.locked():
            try:
                if row is not None:
                    results.write_rows(self.path, [row], meta)
            finally:  # a row the disk could not take leaves no claim behind: the rerun measures it
                self._write([e for e in self._live() if not (e["key"] == k and e["pid"] == os.getpid())])


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def measure_point(point: dict, comm, dataset: str = "synthetic", timeout: float = TIMEOUT_S) -> dict | None:
    """Run one point on `comm` (exactly p ranks); rank 0 returns its row. A point whose training
    diverges (the same on every rank: the loss is all-reduced) gives a row marked failed."""
    from perflab.train.loop import Diverged
    try:
        return measure_trained_point(point, comm, dataset, timeout)
    except Diverged as exc:
        return {**point, "status": "failed", "error": str(exc)} if comm.rank == 0 else None


def measure_trained_point(point: dict, comm, dataset: str, timeout: float = TIMEOUT_S) -> dict | None:
    import numpy as np

    from perflab.analysis import perfmodel
    from perflab.config import HOST_STAGED, Config
    from perflab.train.runner import train_on_ranks
    cfg = Config(dataset=dataset, hidden_sizes=perfmodel.widths(point["H"]), batch_size=point["B"], train_size=point["N"],
                 num_epochs=point["epochs"], dtype=point["dtype"], test_size=0,
                 learning_rate=point.get("learning_rate", 0.1))
    spec = RunSpec.from_point(point).replace(timeout=timeout).validate()  # once: the trainings below reuse it
    probe = point["backend"] == "cupy" and point["mode"] == "staged"
    walks = copy_probe(comm, cfg.batch_size // comm.size, cfg.train_size // comm.size) if probe else []
    seconds, history, trainer = timed_epochs(cfg, point["parallel"], comm, spec)
    walks += copy_probe(comm, cfg.batch_size // comm.size, cfg.train_size // comm.size) if probe else []
    profiled, _ = train_on_ranks(cfg.replace(num_epochs=1), point["parallel"], comm, spec, log=None, profiled=True)
    phases = [t for t in comm.allgather(profiled.phases)]
    if comm.rank != 0:
        return None
    import pandas as pd
    table = pd.concat(phases, ignore_index=True)
    medians = table[table.phase != "train setup"].groupby("phase")["seconds"].median()
    w = perfmodel.Workload(layers=cfg.layer_sizes, B=cfg.batch_size, p=comm.size, parallel=point["parallel"],
                           dtype=cfg.dtype, staged=point["backend"] == "numpy" or point["mode"] in HOST_STAGED,
                           host_allreduce=point["backend"] == "numpy" or spec.comm == "mpi", N=cfg.train_size)
    by = perfmodel.phase_bytes(w)
    step_graph = bool(trainer.graphs and trainer.whole_graph)
    row = {**point, "status": "measured", "trainer": type(trainer).__name__, "step_graph": step_graph,
           "graphs": bool(trainer.graphs),
           "epoch_graph": bool(trainer.epochs_graphed),  # fit ran its epochs as one CUDA graph each
           "epoch_seconds": float(np.median(seconds)), "epoch_spread": spread(seconds), "timed_epochs": len(seconds),
           "flops_per_batch": perfmodel.seeds_flops(w)["batch"], "exact_flops_per_batch": sum(perfmodel.phase_flops(w).values()),
           "bytes_pcie": by["pcie_gradients"], "bytes_images": by["pcie_images"], "bytes_mpi": by["mpi_seeds"],
           "ai": perfmodel.arithmetic_intensity(w), "batches": cfg.num_batches, "final_loss": history.final_loss}
    if walks:  # the copy as it ran around this point's timed epochs (perflab.analysis.predictor: probed)
        row |= {"copy_probe_s": float(np.mean([w["seconds"] for w in walks])),
                "copy_probe_min_s": min(w["min_seconds"] for w in walks),
                "copy_probe_max_s": max(w["max_seconds"] for w in walks)}
    row.update({f"t_{name}": float(v) for name, v in medians.items()})
    row.update(perfmodel.effective_rates(w, medians.to_dict()))
    return row


def timed_epochs(cfg, parallel: str, comm, device: RunSpec) -> tuple[list[float], object, object]:
    """The seconds of each timed epoch, the history and the trainer of the run `device` (the point's RunSpec)
    says: `cfg.num_epochs` epochs after one dropped (it pays for kernel compilation, library handles and graph
    capture). Where they took under MIN_TIMED_SECONDS, a second run adds enough epochs to fill it, so the
    median is not one host stall: a short host-launched epoch now and then takes far longer than usual where
    GPU-paced ones do not (docs/DECISIONS.md, D40). It does not narrow the staged copy's drift,
    which lasts longer than a point."""
    from perflab.train.runner import train_on_ranks
    history, trainer = train_on_ranks(cfg.replace(num_epochs=cfg.num_epochs + 1), parallel, comm, device, log=None)
    seconds = [e["seconds"] for e in history.epochs[1:]]
    ranks = comm.allgather((statistics.median(seconds), sum(seconds)))
    more = epochs_to_fill(max(r[0] for r in ranks), min(r[1] for r in ranks))  # the same on every rank
    if more:
        trainer.close()
        history, trainer = train_on_ranks(cfg.replace(num_epochs=more + 1), parallel, comm, device, log=None)
        seconds += [e["seconds"] for e in history.epochs[1:]]
    history.epochs = history.epochs[1:]
    return seconds, history, trainer


def epochs_to_fill(epoch: float, timed: float) -> int:
    """How many more epochs of `epoch` seconds bring `timed` seconds to MIN_TIMED_SECONDS (at most
    MAX_EXTRA_EPOCHS); 0 where it is reached."""
    if timed >= MIN_TIMED_SECONDS:
        return 0
    return min(MAX_EXTRA_EPOCHS, math.ceil((MIN_TIMED_SECONDS - timed) / max(epoch, 1e-9)))


def spread(seconds: list[float]) -> float:
    """(slowest - fastest) / median of the timed epochs: how much one point's own epochs disagree
    (a host hiccup or the staged copy's drift shows here before it shows as a prediction's error)."""
    return float((max(seconds) - min(seconds)) / statistics.median(seconds))


def copy_probe(comm, Bl: int, N: int) -> list[dict]:
    """The staged copy of a rank's batch (perflab ceilings' staged_images, 3 walks of the rank's
    share of the data set), on every rank at once as in training: the slowest rank's (a staged
    step ends in an all-reduce that waits for it), as a one-row list.
    The copy is the host's one-core memcpy, which drifts over seconds and between processes: a
    staged point is explained by the copy measured beside it, not only by the ceilings file's
    (docs/DECISIONS.md, D30)."""
    from perflab.measure import ceilings
    comm.barrier()
    (walk,) = ceilings.staged_images(batches=(Bl,), N=max(N, Bl), walks=3)
    return [max(comm.allgather(walk), key=lambda w: w["seconds"])]


def run_point_on_world(point: dict, dataset: str = "synthetic", timeout: float = TIMEOUT_S):
    """Entry point on every rank (mpiexec or an ipyparallel engine): run one point on the first
    p ranks; rank 0 returns the row (JSON-serializable), the others None."""
    from perflab.train.comm import on_first_ranks
    return on_first_ranks(point["p"], lambda comm: measure_point(point, comm, dataset, timeout))


def point_where(i: int, n: int, point: dict) -> str:
    """Where a sweep is, as the watchdog's line names it."""
    return f"in the sweep at point {i + 1} of {n} (H={point['H']}, B={point['B']}, p={point['p']}, {point['mode']})"


ENGINE_WATCHDOGS: dict = {}  # an engine's sweep watchdog for each --timeout, made at its first point, kept


def run_point_watched(point: dict, dataset: str, timeout: float, where: str):
    """An engine's share of a point (run_grid_engines): run_point_on_world under the sweep's patient watchdog,
    as run_grid_mpi's ranks run theirs, so an engine stopped while it waits out a point on fewer ranks ends
    the engines' job with a line in their logs, where before it held the sweep forever. The watchdog lives
    as long as the engine: made and closed at every point, its collective start and end were waits no
    watchdog watched (an engine stopped between points held the others there)."""
    from perflab.train import watchdog
    from perflab.train.comm import world
    dog = ENGINE_WATCHDOGS.get(timeout)
    if dog is None:
        dog = ENGINE_WATCHDOGS[timeout] = watchdog.for_run(world(), timeout, patient=True)
    dog.watch_over(where)
    try:
        return run_point_on_world(point, dataset, timeout)
    finally:
        dog.disarm()


class EnginesLost(RuntimeError):
    """The MPI engines stopped answering in a point: the sweep cannot go on with them."""


def sweep_meta(name: str, main_job: bool = False) -> dict:
    """A sweep file's metadata: the machine's, the sweep's name, by which the predictor's validation
    (perflab.analysis.validation.sweep_files) finds the sweep whatever it is called, and whether the main
    job (the roofline notebook) wrote it: its report and validation.csv read the main job's sweeps alone
    (validation.main_sweeps), so scratch sweeps in the same run folder never displace them."""
    from perflab import results
    return {**results.machine_metadata(), "sweep": name, "main_job": bool(main_job)}


def mark_main_job(path: Path) -> None:
    """Mark a sweep file the main job resumes as its own (a file every point of which was measured before
    the mark existed gets no new row, so no new metadata): its date and machine stay as measured."""
    meta_path = Path(path).with_suffix(".json")
    if meta_path.exists():
        meta = json.loads(meta_path.read_text())
        if meta.get("main_job") is not True:
            from perflab.data import atomic_write
            atomic_write(meta_path, (json.dumps({**meta, "main_job": True}, indent=1, default=str) + "\n").encode())


def progress_bar():
    """tqdm's plain-text bar, everywhere: in a terminal, and in a notebook, where tqdm.auto would take the
    widget bar, which needs ipywidgets (no dependency of perflab's; without it tqdm warns `IProgress not
    found` and falls back to text anyway) and leaves only a widget placeholder in an executed copy that
    papermill ran headless. The text bar reads the same in the executed notebook, on GitHub and in Jupyter."""
    from tqdm.std import tqdm
    return tqdm


def output_path(name: str, root: Path | None = None) -> Path:
    from perflab import results
    return Path(root or results.run_dir()) / f"{name}.csv"


def pending(points, path: Path, log) -> list[dict]:
    """The points not yet in the file; says how many are there already and which of those failed."""
    done = done_keys(path)
    todo = [pt for pt in points if key(pt) not in done]
    if len(todo) < len(points):
        log(f"{len(points) - len(todo)} of {len(points)} points already in {path}; running the other {len(todo)}")
    return todo


def report_failed(path: Path, log) -> None:
    import pandas as pd
    if Path(path).exists() and Path(path).stat().st_size:
        table = pd.read_csv(path)
        if "status" in table:
            for _, row in table[table.status == "failed"].iterrows():
                log(f"point H={row['H']} B={row['B']} p={row['p']} {row['backend']} {row['mode']} failed: {row['error']}")


def run_grid_mpi(points, name, out: Path | None = None, dataset="synthetic", progress=True, log=print,
                 timeout: float = TIMEOUT_S):
    """Every rank of `mpiexec -n P perflab sweep` calls this; rank 0 claims the points and writes each as it
    finishes (a job the watchdog ends keeps them: `timeout`, perflab.train.watchdog)."""
    from perflab.train import watchdog
    from perflab.train.comm import world
    tqdm = progress_bar()
    w = world()
    path = output_path(name, out) if w.rank == 0 else None
    todo = w.bcast(pending(points, path, log) if w.rank == 0 else None)
    claims = Claims(path) if w.rank == 0 else None
    meta = sweep_meta(name) if w.rank == 0 else None
    # between points (and while ranks wait out a point on fewer ranks), a rank stopped ends the job too
    try:
        with watchdog.for_run(w, timeout, patient=True) as dog:
            for i, point in enumerate(tqdm(todo, disable=not progress or w.rank != 0, desc=name, unit="point")):
                dog.watch_over(point_where(i, len(todo), point))
                if not w.bcast(writing(claims.claim, point) if w.rank == 0 else None):
                    continue  # measured or being measured by another sweep
                row, started = None, time.perf_counter()
                try:
                    row = run_point_on_world(point, dataset, timeout)
                finally:
                    if w.rank == 0:
                        writing(claims.finish, point, with_wall_time(row, started), meta)
    except (KeyboardInterrupt, WriteFailed) as exc:
        raise stopped(exc, path, points, w.rank) from None
    if w.rank == 0:
        report_failed(path, log)
    return path


def with_wall_time(row: dict | None, started: float) -> dict | None:
    """The point's row with `point_wall_s`, its wall time from the probe beside it (if any) to its row: what the
    main job's estimate of a point (perflab.workbook.plan.point_seconds) is checked against."""
    return None if row is None else {**row, "point_wall_s": time.perf_counter() - started}


class WriteFailed(OSError):
    """The sweep's file (or its claims beside it) could not be written: a full disk, a folder it cannot write."""


def writing(write, *args):
    """A write of the sweep's file, its OSError told apart from one a point's training raises."""
    try:
        return write(*args)
    except OSError as exc:
        raise WriteFailed(exc.errno, exc.strerror, exc.filename) from exc


def stopped(exc: BaseException, path: Path | None, points: list, rank: int):
    """The one line a sweep ends with when Ctrl-C or a write (a full disk, a folder it cannot write) stops it:
    how many points its file keeps and that the same command resumes after them (loop.Stopped; rank 0's)."""
    from perflab.train.loop import Stopped, disk_error
    ctrl_c = isinstance(exc, KeyboardInterrupt)
    if rank != 0:
        return Stopped("", code=130 if ctrl_c else 2, everywhere=ctrl_c)
    try:
        done = done_keys(path)
    except Exception:  # a file the failed write left unreadable keeps what it kept; the rerun says
        done = set()
    kept, points = sum(key(pt) in done for pt in points), len(points)
    why = "stopped by Ctrl-C" if ctrl_c else f"could not write {path}: {disk_error(exc)}"
    fix = "" if ctrl_c else "free space (or fix the folder), then "
    return Stopped(f"{why}; {kept} of {points} point(s) are kept in {path}: {fix}run the same command again to "
                   f"measure the other {points - kept}", code=130 if ctrl_c else 2, everywhere=ctrl_c)


def run_grid_engines(view, points, name, out: Path | None = None, dataset="synthetic", progress=True, log=print,
                     timeout: float = TIMEOUT_S, main_job: bool = False, between=None):
    """The same through ipyparallel MPI engines: every engine runs the point (under the sweep's watchdog:
    run_point_watched), rank 0's row is written here (rows travel back as plain dicts and land in CSV, never
    as pickles on disk). An engine lost in a point (the watchdog ended the engines, or one died) stops the
    sweep with EnginesLost, naming the point; the rows written stay, and a rerun resumes after them.
    `main_job`: the roofline notebook's sweep, marked so in its metadata (sweep_meta). `between(point)` runs here
    before each point is measured, the engines idle (the main job probes its host beside every point)."""
    tqdm = progress_bar()
    path = output_path(name, out)
    todo = pending(points, path, log)
    claims = Claims(path)
    meta = sweep_meta(name, main_job)
    if main_job:
        mark_main_job(path)
    for i, point in enumerate(tqdm(todo, disable=not progress, desc=name, unit="point")):
        if not claims.claim(point):
            continue
        started = time.perf_counter()  # the point's wall time counts the probe beside it, as its estimate does
        if between is not None:
            between(point)
        rows, where = [], point_where(i, len(todo), point)
        try:
            rows = [r for r in view.apply_sync(run_point_watched, point, dataset, timeout, where) if r is not None]
        except Exception as exc:  # a point's own failure comes back as a failed row: this is the engines
            done = len(done_keys(path))
            raise EnginesLost(f"the MPI engines stopped answering {where}: {type(exc).__name__}: "
                              f"{str(exc).splitlines()[0] if str(exc) else ''} (a silent engine's watchdog line is "
                              f"in the engines' log); {done} point(s) are kept in {path}; restart the engines "
                              f"(perflab notebook starts its own) and run the sweep again to go on from there") from exc
        finally:
            claims.finish(point, with_wall_time(rows[0] if rows else None, started), meta)
    report_failed(path, log)
    return path
