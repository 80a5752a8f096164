"""The USC seed's experiment: Network1 (784-1024-10) against Network2 (784-1024-1024-10), time per epoch,
GFLOP/s and speedup over the serial run, for each way of running in parallel the slides compare:

  serial     one rank, one BLAS thread
  examples   p ranks of one thread each, the batch split over them (MPI data parallel; the slides' Pthreads)
  matrices   one rank, k BLAS threads inside each matrix product (the slides' BLAS)
  gpu        one rank on one GPU (CuPy, perflab's fused trainer)

Each configuration is one `perflab train` in its own process (under mpiexec for p ranks), so the BLAS
threads it is given are the only ones it has; rows go to <run folder>/usc.csv as they finish, and a rerun
skips the ones there.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

NETS = {"Network1": (1024,), "Network2": (1024, 1024)}
WAYS = ("serial", "examples", "matrices", "gpu")
KEY = ("net", "way", "cores")


class USCError(RuntimeError):
    """A configuration could not run; the message names it and what its process printed."""


def configs(cores: list[int], nets: dict = NETS, gpu: bool = False) -> list[dict]:
    """Every (net, way, cores): serial once, examples and matrices at each core count above 1, the GPU once."""
    if not cores or any(int(c) < 1 for c in cores):
        raise ValueError(f"cores must be whole numbers of 1 or more, got {cores!r}")
    out = []
    for net in nets:
        out.append({"net": net, "way": "serial", "cores": 1})
        for c in sorted({int(c) for c in cores} - {1}):
            out += [{"net": net, "way": "examples", "cores": c}, {"net": net, "way": "matrices", "cores": c}]
        if gpu:
            out.append({"net": net, "way": "gpu", "cores": 1})
    return out


def command(config: dict, nets: dict, batch: int, N: int, epochs: int) -> list[str]:
    """The process that measures one configuration."""
    ranks = config["cores"] if config["way"] == "examples" else 1
    train = [sys.executable, "-m", "perflab", "train", "--dataset", "synthetic", "--dtype", "float32",
             "--hidden-size", *map(str, nets[config["net"]]), "--batch-size", str(batch), "--train-size", str(N),
             "--num-epochs", str(epochs), "--test-size", "0", "--learning-rate", "0.1", "--print-every", "0", "--json"]
    if config["way"] == "gpu":
        return train + ["--backend", "cupy"]
    train += ["--backend", "numpy", "--threads", "1" if config["way"] != "matrices" else str(config["cores"])]
    if ranks == 1:
        return train
    mpiexec = shutil.which("mpiexec", path=str(Path(sys.executable).parent)) or shutil.which("mpiexec")
    if mpiexec is None:
        raise USCError("no mpiexec: pip install mpich (perflab's dev extras do), or load your MPI module")
    return [mpiexec, "-n", str(ranks), *train, "--parallel", "data"]


def measure(config: dict, nets: dict, batch: int, N: int, epochs: int, timeout: float = 1800) -> dict:
    """One configuration's row: time per epoch (the median of its epochs, which outvotes the first's warm-up), GFLOP/s of the
    seeds' FLOP count."""
    from perflab.analysis import perfmodel
    proc = subprocess.run(command(config, nets, batch, N, epochs), capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"})
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode or not lines:
        raise USCError(f"{config['net']} {config['way']} on {config['cores']} core(s) failed (exit {proc.returncode}): "
                       + (proc.stderr.strip().splitlines() or ["no output"])[-1])
    summary = json.loads(lines[-1])
    w = perfmodel.Workload(layers=perfmodel.layer_sizes(nets[config["net"]]), B=batch, p=1, N=N)
    flops = perfmodel.seeds_flops(w)["batch"] * -(-N // batch)
    return {**config, "hidden": perfmodel.net_label(nets[config["net"]]), "B": batch, "N": N, "epochs": epochs,
            "epoch_seconds": summary["epoch_seconds"], "gflops": flops / summary["epoch_seconds"] / 1e9}


def with_speedup(table):
    """Each row's speedup over its net's serial run."""
    serial = table[table.way == "serial"].set_index("net").epoch_seconds
    return table.assign(speedup=[serial.get(n, float("nan")) / t for n, t in zip(table.net, table.epoch_seconds)])


def run(cores: list[int] | None = None, nets: dict = NETS, batch: int = 1000, N: int = 12000, epochs: int = 3,
        gpu: bool | None = None, name: str = "usc", out: Path | None = None, progress: bool = True):
    """Measure every configuration not yet in <run folder>/<name>.csv (or `out`), writing each as it finishes;
    returns the whole table with speedups. cores None: 1, 2, 4, ... up to this machine's; gpu None: where
    CuPy sees one."""
    import pandas as pd
    from tqdm.auto import tqdm

    from perflab import results
    from perflab.backend import cupy_or_none
    most = os.cpu_count() or 1
    cores = cores or sorted({min(2 ** k, most) for k in range(most.bit_length() + 1)})
    gpu = cupy_or_none() is not None if gpu is None else gpu
    path = Path(out or results.run_dir()) / f"{name}.csv"
    done = pd.read_csv(path) if path.exists() and path.stat().st_size else pd.DataFrame(columns=KEY)
    have = {tuple(str(v) for v in r) for r in done[list(KEY)].itertuples(index=False)}
    todo = [c for c in configs(cores, nets, gpu) if tuple(str(c[k]) for k in KEY) not in have]
    meta = results.machine_metadata()
    for config in tqdm(todo, disable=not progress, desc=name, unit="run"):
        results.write_rows(path, [measure(config, nets, batch, N, epochs)], meta)
    return with_speedup(pd.read_csv(path))
