"""What `perflab train` and `perflab check` do on each rank: load, agree, train, compare."""
from __future__ import annotations

import contextlib
import hashlib
import statistics
import time

import numpy as np

from perflab import data
from perflab.backend import blas_threads, to_numpy
from perflab.config import GPU_EXCHANGES, HALF_DTYPES, OVERLAP_CHUNKS, PIPELINED_CHUNKS, Config, ConfigError
from perflab.train import loop, model, profile, watchdog
from perflab.train.parallel import make_trainer
from perflab.train.spec import RunSpec

TOLERANCE = {"float64": 1e-12, "float32": 1e-5, "tf32": 5e-3,  # tf32: one TF32 product a GEMM (tf32, wgmma)
             "bfloat16": 3e-2, "float16": 5e-3}  # half: each rank's products rounded apart from the whole batch's
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


def bound(spec: RunSpec | None, parallel: str, dtype: str) -> RunSpec:
    """The spec of a run of `parallel` in `dtype` (the call's and its Config's, which name them for the trainer):
    None is NumPy's (RunSpec())."""
    spec = spec or RunSpec()
    return spec if (spec.parallel, spec.dtype) == (parallel, dtype) else spec.replace(parallel=parallel, dtype=dtype)


def make_gpu_trainer(cfg: Config, parallel: str, comm, spec: RunSpec, train_set):
    """The GPU trainer of a spec (--backend cupy), validated (nothing checked twice: RunSpec.validate)."""
    spec = bound(spec, parallel, cfg.dtype).validate()
    if spec.exchange == "auto":
        return fastest_exchange(cfg, parallel, comm, spec, train_set)
    from perflab.train import gpu
    from perflab.train.comm import for_gpu
    gpu.select_device(comm)
    gpu.check_memory(cfg, spec.mode == "resident")
    comm = for_gpu(comm, spec.comm, spec.wait_s, half=cfg.dtype if cfg.dtype in HALF_DTYPES else None)
    if spec.mode == "pipelined":  # data parallel: RunSpec.validate refuses it model parallel
        from perflab.train.pipelined import Pipelined
        return Pipelined(cfg, train_set.X, train_set.y, comm, spec.gemm, spec.graphs, spec.chunks or PIPELINED_CHUNKS)
    if parallel == "model" and spec.mode == "resident":
        from perflab.train.model_parallel_gpu import FusedModelParallel
        return FusedModelParallel(cfg, train_set.X, train_set.y, comm, spec.gemm, spec.graphs)
    if parallel in ("sequential", "data"):
        return gpu.FusedGPU(cfg, train_set.X, train_set.y, comm, spec.mode, spec.gemm, spec.graphs, spec.pinned,
                            overlap=spec.overlap, overlap_chunks=spec.chunks or OVERLAP_CHUNKS)
    import cupy as cp  # model parallel, staged or deeper: the shared math on CuPy arrays
    params = model.init_params(cfg.layer_sizes, cfg.dtype, cfg.seed, xp=cp)
    return make_trainer(parallel, cfg, params, cp.asarray(train_set.X), cp.asarray(train_set.y), comm)


def exchanges(cfg: Config, parallel: str, ranks: int, spec: RunSpec) -> list[RunSpec]:
    """What --comm auto chooses among: for the fused data-parallel trainer on several GPUs (resident),
    GPU_EXCHANGES (NCCL's all-reduce after the step, NCCL with --overlap, p2p) and in half precision NCCL
    on the gradients rounded to it; anywhere else the one exchange the run takes (NCCL resident, host MPI in
    the staged modes). Each is the spec with that exchange (validated where its trainer is made)."""
    if ranks == 1 or spec.mode != "resident" or parallel not in ("sequential", "data"):
        return [spec.replace(exchange="nccl" if spec.mode == "resident" else "mpi")]
    names = GPU_EXCHANGES + (("nccl-half",) if cfg.dtype in HALF_DTYPES else ())
    return [spec.replace(exchange=name) for name in names]


def fastest_exchange(cfg: Config, parallel: str, comm, spec: RunSpec, train_set):
    """--comm auto: a trainer with each of `exchanges`, an epoch of each timed (epoch_seconds, the
    slowest rank's), the fastest kept with its initial parameters put back; `chosen` is its RunSpec
    and `exchange_trial` the seconds (or why one was refused: a candidate its spec's rules refuse, as
    p2p in float16, or one the trainer cannot set up). Measured on the run's own shapes and GPUs because
    the order moves with them (docs/DECISIONS.md, D39)."""
    candidates = exchanges(cfg, parallel, comm.size, spec)
    if len(candidates) == 1:
        trainer = make_gpu_trainer(cfg, parallel, comm, candidates[0], train_set)
        trainer.chosen, trainer.exchange_trial = candidates[0], {}
        return trainer
    train_set = on_this_gpu(comm, train_set)  # once, shared by the trainers tried: no second copy of the images
    best, trial = None, {}
    for candidate in candidates:
        try:
            trainer = make_gpu_trainer(cfg, parallel, comm, candidate, train_set)
        except ConfigError as exc:  # refused on every rank alike (p2p: ranks on several nodes, no peer access)
            trial[candidate.exchange] = str(exc)
            continue
        initial = [x.copy() for x in trainer.state]
        with profile.paused():
            seconds = trial[candidate.exchange] = max(comm.allgather(epoch_seconds(cfg, trainer)))
        if best is not None and seconds >= trial[best[1].exchange]:
            trainer.close()
            continue
        if best is not None:
            best[0].close()
        best = trainer, candidate, initial
    trainer, chosen, initial = best
    with trainer.stream:
        for x, was in zip(trainer.state, initial):
            x[...] = was
    trainer.sync()
    trainer.chosen, trainer.exchange_trial, trainer.epochs_graphed = chosen, trial, 0
    return trainer


def on_this_gpu(comm, split: data.Split) -> data.Split:
    """The split copied to this rank's GPU (which it selects), as a resident trainer copies it."""
    import cupy as cp

    from perflab.train import gpu
    gpu.select_device(comm)
    return data.Split(cp.asarray(split.X), cp.asarray(split.y))


def exchange_summary(trainer) -> dict:
    """The exchange --comm auto chose and what each took (empty where nothing was chosen)."""
    chosen = trainer.chosen
    if chosen is None:
        return {}
    return {"comm": chosen.comm, "overlap": chosen.overlap, "exchange_trial_s": trainer.exchange_trial}


def trial_text(summary: dict) -> str:
    """One line for the user: the exchange kept and each one's timed epoch (or why it was refused)."""
    times = [f"{name} {1e3 * t:.2f} ms" if isinstance(t, float) else f"{name} refused ({t})"
             for name, t in summary["exchange_trial_s"].items()]
    kept = "overlap" if summary["overlap"] else summary["comm"]
    return f"--comm auto kept {kept}, the fastest on this run's first epoch: {', '.join(times)}"


def epoch_seconds(cfg: Config, trainer, repeats: int = 3, most_batches: int = 64) -> float:
    """An epoch's first batches (all of them where fit runs the epoch as one CUDA graph, else up to
    `most_batches`, batch by batch without the loss): the median of `repeats` runs after one that
    captures their graphs and loads the kernels."""
    batches = loop.batch_indices(cfg, 0)
    whole = (cfg.print_every or cfg.num_batches) >= len(batches) and trainer.graphs_an_epoch(batches)
    trainer.want_loss = False

    def run():
        start = time.perf_counter()
        if whole:
            trainer.epoch(batches, want_loss=False)
        else:
            for index in batches[:most_batches]:
                trainer.batch(index)
        trainer.sync()
        return time.perf_counter() - start
    return statistics.median([run() for _ in range(repeats + 1)][1:])


def train_on_ranks(cfg: Config, parallel: str, comm, spec: RunSpec | None = None, log=print, progress=False,
                   profiled: bool = False, timeline: bool = False):
    """Load, check agreement, train the run `spec` says (None: NumPy's; its parallel and dtype are `parallel`
    and cfg.dtype); returns (history, trainer). Output from rank 0 only.
    With `profiled`, every phase is timed (device synchronized at phase edges) and
    history.phases holds the tidy table; with `timeline` (GPU), each phase's start and end on its
    stream and on the host, nothing synchronized (profile.Timeline), in history.phases."""
    spec = bound(spec, parallel, cfg.dtype)
    cuda = None
    if (profiled or timeline) and spec.gpu:
        import cupy as cuda
    if timeline and cuda is None:
        raise ConfigError("a timeline records CUDA streams: it needs --backend cupy")
    threads = blas_threads(comm, spec.threads) if not spec.gpu else contextlib.nullcontext()
    recorder = profile.profiling(comm.rank, cuda) if profiled else profile.timeline(comm.rank, cuda) if timeline else None
    with threads, recorder or contextlib.nullcontext() as prof:
        with profile.phase("train setup"):
            trainer, test_set, validation, sync, exchange = setup(cfg, parallel, comm, spec)
        with watchdog.for_run(exchange, spec.wait_s) as dog:
            history = loop.fit(cfg, trainer, test_set, progress=progress and comm.rank == 0,
                                log=log if comm.rank == 0 else None, sync=sync, validation=validation, dog=dog)
    history.phases = prof.table() if prof is not None else None
    return history, trainer


def mixed_precision(cfg: Config, comm, train_set):
    """--dtype bfloat16 | float16 on NumPy: the emulated mixed-precision trainer (perflab.train.half; on
    the GPU, FusedGPU runs the same step on the tensor cores)."""
    from perflab.train import half
    params = model.init_params(cfg.layer_sizes, cfg.storage_dtype, cfg.seed)
    return half.MixedPrecision(cfg, params, train_set.X, train_set.y, comm)


def check_host_memory(cfg: Config) -> None:
    """Fail before allocating, naming the sizes, when a NumPy run cannot fit in this host's memory."""
    from perflab.backend import host_memory_available
    need, free = cfg.memory_bytes(resident=True), host_memory_available()
    if free is not None and need > free:
        raise ConfigError(f"needs about {need / 2**30:.2f} GiB of host memory (N={cfg.train_size}, B={cfg.batch_size}, "
                          f"layers {list(cfg.layer_sizes)}, {cfg.dtype}) but {free / 2**30:.2f} GiB are available: "
                          "use a smaller --hidden, --batch-size or --train-size")


def setup(cfg: Config, parallel: str, comm, spec: RunSpec | None):
    """The one factory: the trainer a run's spec (perflab.train.spec.RunSpec) asks for, with its test and validation
    sets where it keeps them, the wait for its device and the exchange it runs (perflab.train.protocols.Exchange).
    The spec is validated here whoever called (the CLI, a sweep's point, a notebook), unless its parse did already:
    RunSpec.validate checks a spec once."""
    spec = bound(spec, parallel, cfg.dtype).validate()
    if not spec.gpu:
        check_host_memory(cfg)
    train_set, test_set, validation = data.load(cfg)
    check_agreement(comm, cfg, train_set)
    if not spec.gpu:
        from perflab.train.comm import with_strategy
        comm = with_strategy(comm, spec.comm)
        if cfg.dtype in HALF_DTYPES:
            trainer = mixed_precision(cfg, comm, train_set)
        else:
            params = model.init_params(cfg.layer_sizes, cfg.dtype, cfg.seed)
            trainer = make_trainer(parallel, cfg, params, train_set.X, train_set.y, comm)
        sync = lambda: None
    else:
        import cupy as cp
        trainer = make_gpu_trainer(cfg, parallel, comm, spec, train_set)
        comm, sync = trainer.comm, trainer.sync
        test_set, validation = (None if s is None else data.Split(cp.asarray(s.X), cp.asarray(s.y))
                                for s in (test_set, validation))
    return trainer, test_set, validation, sync, comm


def relative_error(a, b) -> float:
    """||a - b||_F / ||b||_F (absolute when b is zero)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    scale = np.linalg.norm(b)
    return float(np.linalg.norm(a - b) / (scale if scale > 0 else 1.0))


def check(cfg: Config, parallel: str, comm, spec: RunSpec | None = None) -> dict:
    """The seeds' correctness test: train the parallel run `spec` says (None: NumPy's) and the sequential NumPy
    reference from the same initial parameters on the same data; report per-parameter relative errors
    (Frobenius) and how far replicas drifted apart across ranks."""
    spec = bound(spec, parallel, cfg.dtype)
    history, trainer = train_on_ranks(cfg, parallel, comm, spec, log=None)
    mine = [to_numpy(p) for p in history.params]
    replicas = comm.allgather(mine) if parallel == "data" else [mine]
    replica_drift = max(float(np.abs(r - m).max()) for other in replicas for r, m in zip(other, replicas[0]))
    result = None
    if comm.rank == 0:  # the same precision on one rank: a half-precision run's reference is its own step
        train_set = data.load(cfg)[0]
        params = model.init_params(cfg.layer_sizes, cfg.storage_dtype, cfg.seed)
        if cfg.dtype in HALF_DTYPES:
            from perflab.train.comm import Serial
            from perflab.train.half import MixedPrecision
            sequential = MixedPrecision(cfg, params, train_set.X, train_set.y, Serial())
        else:
            sequential = loop.Sequential(cfg, params, train_set.X, train_set.y)
        reference = loop.fit(cfg, sequential, progress=False).params
        names = model.param_names(len(cfg.hidden_sizes) + 1)
        errors = {n: relative_error(p, r) for n, p, r in zip(names, mine, reference)}
        one_tf32 = spec.gemm in ONE_TF32_PRODUCT and cfg.dtype not in HALF_DTYPES
        tolerance = TOLERANCE["tf32" if one_tf32 else cfg.dtype]  # (a half run's wgmma GEMMs are half-precision ones)
        worst = max(errors.values())
        result = {"parallel": parallel, "ranks": comm.size, "dtype": cfg.dtype, "max_rel_error": worst,
                  "errors": errors, "tolerance": tolerance, "replica_max_abs_diff": replica_drift,
                  "passed": bool(worst <= tolerance and replica_drift == 0.0), **cfg.to_dict(),
                  **exchange_summary(trainer)}
    comm.idle_barrier()  # the other ranks wait for the reference without taking cores from it
    return comm.bcast(result)
