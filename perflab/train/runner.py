"""What `perflab train` and `perflab check` do on each rank: load, agree, train, compare."""
from __future__ import annotations

import contextlib
import hashlib
from dataclasses import dataclass

import numpy as np

from perflab import data
from perflab.backend import blas_threads, to_numpy
from perflab.config import Config, ConfigError
from perflab.train import loop, model, profile
from perflab.train.parallel import make_trainer

TOLERANCE = {"float64": 1e-12, "float32": 1e-5, "tf32": 5e-3}  # tf32: one TF32 product a GEMM (tf32, wgmma)
ONE_TF32_PRODUCT = ("tf32", "wgmma")  # the 3xTF32 GEMMs keep float32's tolerance


class DisagreementError(ConfigError):
    """Ranks were started with different hyperparameters or data."""


def data_fingerprint(split: data.Split) -> str:
    """Labels whole, images sampled: enough to tell two datasets, sizes or seeds apart."""
    h = hashlib.sha256(split.y.tobytes())
    h.update(np.ascontiguousarray(split.X[:, ::97]).tobytes())
    return h.hexdigest()[:16]


def check_agreement(comm, cfg: Config, split: data.Split) -> None:
    """Every rank must hold the same hyperparameters and data; else say which ranks differ."""
    mine = (cfg.fingerprint(), data_fingerprint(split))
    everyone = comm.allgather(mine)
    for what, i in (("hyperparameters", 0), ("training data", 1)):
        odd = [r for r, f in enumerate(everyone) if f[i] != everyone[0][i]]
        if odd:
            raise DisagreementError(f"ranks {odd} have other {what} than rank 0 "
                                    "(same command line and data folder on every rank?)")


@dataclass
class Device:
    """Where and how a run executes: numpy, or cupy with a data mode, GEMM and all-reduce."""
    backend: str = "numpy"
    mode: str = "resident"   # resident | staged | pipelined (GPU only)
    gemm: str = "cublas"     # cublas (fastest measured) or a perflab GEMM variant (GPU only)
    comm: str = "nccl"       # nccl | mpi | hierarchical (gradient exchange; the CPU path takes mpi or hierarchical)
    graphs: bool = True      # capture each batch's step as a CUDA graph (resident mode)
    pinned: bool = False     # staged mode: page-locked host copy of the data
    overlap: bool = False    # NCCL, several GPUs: exchange gradient chunks while backward GEMM 3 runs
    chunks: int | None = None  # dW1 row chunks exchanged one by one (None: 2 with overlap, 4 pipelined)


def make_gpu_trainer(cfg: Config, parallel: str, comm, device: Device, train_set):
    from perflab.train import gpu
    from perflab.train.comm import for_gpu
    gpu.select_device(comm)
    gpu.check_memory(cfg, device.mode == "resident")
    if device.comm == "p2p" and not (parallel in ("sequential", "data") and device.mode == "resident"
                                     and len(cfg.hidden_sizes) == 1):
        raise gpu.GPUError("--comm p2p exchanges the fused data-parallel trainer's gradient buffer (resident, one "
                           f"hidden layer); got --parallel {parallel}, --mode {device.mode}, hidden sizes "
                           f"{list(cfg.hidden_sizes)}: use --comm nccl")
    comm = for_gpu(comm, device.comm)
    if device.mode == "pipelined":
        if parallel == "model" or len(cfg.hidden_sizes) != 1:
            raise gpu.GPUError("--mode pipelined runs data parallel with one hidden layer; got --parallel "
                               f"{parallel}, hidden sizes {list(cfg.hidden_sizes)}")
        from perflab.train.pipelined import Pipelined
        return Pipelined(cfg, train_set.X, train_set.y, comm, device.gemm, device.graphs, device.chunks or 4)
    if parallel == "model" and len(cfg.hidden_sizes) == 1 and device.mode == "resident":
        return gpu.FusedModelParallel(cfg, train_set.X, train_set.y, comm, device.gemm, device.graphs)
    if parallel in ("sequential", "data") and len(cfg.hidden_sizes) == 1:
        return gpu.FusedGPU(cfg, train_set.X, train_set.y, comm, device.mode, device.gemm, device.graphs, device.pinned,
                            overlap=device.overlap, overlap_chunks=device.chunks or 2)
    import cupy as cp  # model parallel and deeper nets: the shared math on CuPy arrays
    params = model.init_params(cfg.layer_sizes, cfg.dtype, cfg.seed, xp=cp)
    return make_trainer(parallel, cfg, params, cp.asarray(train_set.X), cp.asarray(train_set.y), comm)


def train_on_ranks(cfg: Config, parallel: str, comm, device: Device | None = None, log=print, progress=False,
                   profiled: bool = False, timeline: bool = False):
    """Load, check agreement, train; returns (history, trainer). Output from rank 0 only.
    With `profiled`, every phase is timed (device synchronized at phase edges) and
    history.phases holds the tidy table; with `timeline` (GPU), each phase's start and end on its
    stream and on the host, nothing synchronized (profile.Timeline), in history.phases."""
    device = device or Device()
    cuda = None
    if (profiled or timeline) and device.backend == "cupy":
        import cupy as cuda
    if timeline and cuda is None:
        raise ConfigError("a timeline records CUDA streams: it needs --backend cupy")
    threads = blas_threads(comm) if device.backend == "numpy" else contextlib.nullcontext()
    recorder = profile.profiling(comm.rank, cuda) if profiled else profile.timeline(comm.rank, cuda) if timeline else None
    with threads, recorder or contextlib.nullcontext() as prof:
        with profile.phase("train setup"):
            trainer, test_set, validation, sync = setup(cfg, parallel, comm, device)
        history = loop.fit(cfg, trainer, test_set, progress=progress and comm.rank == 0,
                            log=log if comm.rank == 0 else None, sync=sync, validation=validation)
    history.phases = prof.table() if prof is not None else None
    return history, trainer


def setup(cfg: Config, parallel: str, comm, device: Device):
    train_set, test_set, validation = data.load(cfg)
    check_agreement(comm, cfg, train_set)
    if device.backend == "numpy":
        from perflab.train.comm import with_strategy
        comm = with_strategy(comm, device.comm)
        params = model.init_params(cfg.layer_sizes, cfg.dtype, cfg.seed)
        trainer = make_trainer(parallel, cfg, params, train_set.X, train_set.y, comm)
        sync = lambda: None
    else:
        import cupy as cp
        trainer = make_gpu_trainer(cfg, parallel, comm, device, train_set)
        test_set, validation = (None if s is None else data.Split(cp.asarray(s.X), cp.asarray(s.y))
                                for s in (test_set, validation))
        sync = cp.cuda.get_current_stream().synchronize if not hasattr(trainer, "sync") else trainer.sync
    return trainer, test_set, validation, sync


def relative_error(a, b) -> float:
    """||a - b||_F / ||b||_F (absolute when b is zero)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    scale = np.linalg.norm(b)
    return float(np.linalg.norm(a - b) / (scale if scale > 0 else 1.0))


def check(cfg: Config, parallel: str, comm, device: Device | None = None) -> dict:
    """The seeds' correctness test: train the parallel run and the sequential NumPy reference
    from the same initial parameters on the same data; report per-parameter relative errors
    (Frobenius) and how far replicas drifted apart across ranks."""
    history, trainer = train_on_ranks(cfg, parallel, comm, device, log=None)
    mine = [to_numpy(p) for p in history.params]
    replicas = comm.allgather(mine) if parallel == "data" else [mine]
    replica_drift = max(float(np.abs(r - m).max()) for other in replicas for r, m in zip(other, replicas[0]))
    result = None
    if comm.rank == 0:
        train_set = data.load(cfg)[0]
        params = model.init_params(cfg.layer_sizes, cfg.dtype, cfg.seed)
        reference = loop.fit(cfg, loop.Sequential(cfg, params, train_set.X, train_set.y), progress=False).params
        names = model.param_names(len(cfg.hidden_sizes) + 1)
        errors = {n: relative_error(p, r) for n, p, r in zip(names, mine, reference)}
        tolerance = TOLERANCE["tf32" if device is not None and device.gemm in ONE_TF32_PRODUCT else cfg.dtype]
        worst = max(errors.values())
        result = {"parallel": parallel, "ranks": comm.size, "dtype": cfg.dtype, "max_rel_error": worst,
                  "errors": errors, "tolerance": tolerance, "replica_max_abs_diff": replica_drift,
                  "passed": bool(worst <= tolerance and replica_drift == 0.0), **cfg.to_dict()}
    return comm.bcast(result)
