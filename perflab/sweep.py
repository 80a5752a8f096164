"""Sweeps: a grid of training points, each measured and written as soon as it finishes.

A point is plain values (H, B, p, parallel, backend, mode, gemm, dtype, N, epochs). Each is
measured twice on p ranks: an unprofiled run for the epoch time (`epoch_seconds`: median of
`epochs` epochs after one warm-up epoch; nothing synchronizes inside an epoch) and a profiled
epoch for the per-phase medians the roofline needs (`t_<phase>`: device synchronized at every
phase edge). Rows go to
`results/<machine>/<name>.csv` (+ machine metadata .json) one point at a time, so a crash
loses at most the point in flight; a rerun skips the points already there.

Two ways to run the same grid:
  mpiexec -n 4 perflab sweep ...      every rank runs `run_grid_mpi` (batch jobs, clusters)
  ipyparallel MPI engines              the notebook calls `run_grid_engines(view, ...)`
Points with p smaller than the world run on a sub-communicator of the first p ranks.
"""
from __future__ import annotations

import itertools
from pathlib import Path

KEY = ("H", "B", "p", "parallel", "backend", "mode", "gemm", "dtype", "N", "epochs")


def grid(hidden=(512,), batch=(3200,), ranks=(1,), per_rank_batch=None, parallel=("data",), backend=("numpy",),
         mode=("resident",), gemm=("cublas",), dtype=("float32",), N=38400, epochs=1) -> list[dict]:
    """All combinations; with per_rank_batch, B = p * B/p (the seeds' weak-scaling sweep)."""
    points = []
    batches = per_rank_batch if per_rank_batch else batch
    for H, b, p, par, be, mo, ge, dt in itertools.product(hidden, batches, ranks, parallel, backend, mode, gemm, dtype):
        B = b * p if per_rank_batch else b
        if be == "numpy" and (mo != "resident" or ge != "cublas"):
            continue  # mode and GEMM variant exist only on the GPU
        points.append({"H": H, "B": B, "p": p, "parallel": par, "backend": be, "mode": mo, "gemm": ge,
                       "dtype": dt, "N": N, "epochs": epochs})
    return points


def key(point: dict) -> tuple:
    return tuple(str(point[k]) for k in KEY)


def done_keys(path: Path) -> set:
    if not Path(path).exists():
        return set()
    import pandas as pd
    table = pd.read_csv(path)
    return {tuple(str(v) for v in row) for row in table[list(KEY)].itertuples(index=False)} if len(table) else set()


def measure_point(point: dict, comm, dataset: str = "synthetic") -> dict | None:
    """Run one point on `comm` (exactly p ranks); rank 0 returns its row."""
    import numpy as np

    from . import perfmodel
    from .config import Config
    from .runner import Device, train_on_ranks
    cfg = Config(dataset=dataset, hidden_sizes=(point["H"],), batch_size=point["B"], train_size=point["N"],
                 num_epochs=point["epochs"], dtype=point["dtype"], test_size=0, learning_rate=0.1)
    device = Device(backend=point["backend"], mode=point["mode"], gemm=point["gemm"],
                    comm="mpi" if point["mode"] == "staged" else "nccl")
    # one extra epoch first, dropped: it pays for kernel compilation, library handles and graph capture
    history, _ = train_on_ranks(cfg.replace(num_epochs=cfg.num_epochs + 1), point["parallel"], comm, device, log=None)
    history.epochs = history.epochs[1:]
    profiled, _ = train_on_ranks(cfg.replace(num_epochs=1), point["parallel"], comm, device, log=None, profiled=True)
    phases = [t for t in comm.allgather(profiled.phases)]
    if comm.rank != 0:
        return None
    import pandas as pd
    table = pd.concat(phases, ignore_index=True)
    medians = table[table.phase != "train setup"].groupby("phase")["seconds"].median()
    w = perfmodel.Workload(layers=cfg.layer_sizes, B=cfg.batch_size, p=comm.size, parallel=point["parallel"],
                           dtype=cfg.dtype, staged=point["backend"] == "numpy" or point["mode"] == "staged",
                           host_allreduce=point["backend"] == "numpy" or device.comm == "mpi", N=cfg.train_size)
    by = perfmodel.phase_bytes(w)
    row = {**point, "epoch_seconds": float(np.median([e["seconds"] for e in history.epochs])),
           "flops_per_batch": perfmodel.seeds_flops(w)["batch"], "exact_flops_per_batch": sum(perfmodel.phase_flops(w).values()),
           "bytes_pcie": by["pcie_gradients"], "bytes_images": by["pcie_images"], "bytes_mpi": by["mpi_seeds"],
           "ai": perfmodel.arithmetic_intensity(w), "batches": cfg.num_batches, "final_loss": history.final_loss}
    row.update({f"t_{name}": float(v) for name, v in medians.items()})
    row.update(perfmodel.effective_rates(w, medians.to_dict()))
    return row


def sub_world(world, p: int):
    """The first p ranks of the MPI world as a communicator (None on the others)."""
    from .comm import MPIComm
    if world.size == 1:
        return world if p == 1 else None
    if p > world.size:
        raise ValueError(f"point needs p={p} ranks but only {world.size} are running; start more "
                         f"(mpiexec -n {p} or ipcluster start -n {p} --engines=mpi)")
    color = 0 if world.rank < p else world.MPI.UNDEFINED
    sub = world.comm.Split(color, world.rank)
    if sub == world.MPI.COMM_NULL:
        return None
    return MPIComm(sub)


def run_point_on_world(point: dict, dataset: str = "synthetic"):
    """Entry point on every rank (mpiexec or an ipyparallel engine): run one point on the first
    p ranks; rank 0 returns the row (JSON-serializable), the others None."""
    from .comm import world
    w = world()
    comm = sub_world(w, point["p"])
    row = measure_point(point, comm, dataset) if comm is not None else None
    if hasattr(comm, "comm") and comm.comm is not w.comm:
        comm.comm.Free()
    w.barrier()
    return row


def output_path(name: str, root: Path | None = None) -> Path:
    from . import results
    return Path(root or results.RESULTS_ROOT / results.machine_name()) / f"{name}.csv"


def run_grid_mpi(points, name, out: Path | None = None, dataset="synthetic", progress=True, log=print):
    """Every rank of `mpiexec -n P perflab sweep` calls this; rank 0 writes."""
    from tqdm.auto import tqdm

    from . import results
    from .comm import world
    w = world()
    path = output_path(name, out) if w.rank == 0 else None
    done = w.bcast(done_keys(path) if w.rank == 0 else None)
    todo = [pt for pt in points if key(pt) not in done]
    if w.rank == 0 and len(todo) < len(points):
        log(f"{len(points) - len(todo)} of {len(points)} points already in {path}; running the other {len(todo)}")
    meta = results.machine_metadata() if w.rank == 0 else None
    for point in tqdm(todo, disable=not progress or w.rank != 0, desc=name, unit="point"):
        row = run_point_on_world(point, dataset)
        if w.rank == 0:
            results.write_rows(path, [row], meta)
    return path


def run_grid_engines(view, points, name, out: Path | None = None, dataset="synthetic", progress=True, log=print):
    """The same through ipyparallel MPI engines: every engine runs the point, rank 0's row is
    written here (rows travel back as plain dicts and land in CSV, never as pickles on disk)."""
    from tqdm.auto import tqdm

    from . import results
    path = output_path(name, out)
    done = done_keys(path)
    todo = [pt for pt in points if key(pt) not in done]
    if len(todo) < len(points):
        log(f"{len(points) - len(todo)} of {len(points)} points already in {path}; running the other {len(todo)}")
    meta = results.machine_metadata()
    for point in tqdm(todo, disable=not progress, desc=name, unit="point"):
        rows = [r for r in view.apply_sync(run_point_on_world, point, dataset) if r is not None]
        results.write_rows(path, rows, meta)
    return path
