import dataclasses

import pytest

from perflab.train.spec import RunSpec, SpecError


def test_a_spec_is_frozen_and_resolves_its_defaults_per_backend():
    cpu, gpu = RunSpec(), RunSpec(backend="cupy")
    assert (cpu.exchange, cpu.launch) == ("mpi", "eager") and (gpu.exchange, gpu.launch) == ("auto", "graph")
    assert RunSpec(backend="cupy", mode="staged").exchange == "mpi"  # the one exchange the host path takes
    assert RunSpec(exchange="auto").exchange == "mpi"
    with pytest.raises(dataclasses.FrozenInstanceError):
        cpu.backend = "cupy"


@pytest.mark.parametrize("changes, message", [
    (dict(mode="staged"), "--mode staged copies each batch host -> GPU and the gradients through the host: it needs "
                          "--backend cupy"),
    (dict(gemm="wgmma"), "--gemm wgmma runs perflab's CUDA kernels: it needs --backend cupy"),
    (dict(exchange="overlap"), "--overlap overlaps an NCCL all-reduce with the backward pass: it needs --comm nccl"),
    (dict(exchange="p2p"), "--comm p2p needs --backend cupy; on the CPU use mpi or hierarchical"),
    (dict(launch="graph"), "--launch graph is a GPU setting: it needs --backend cupy"),
    (dict(pinned=True), "--pinned is a GPU setting"),
    (dict(dtype="bfloat16", parallel="model"), "--dtype bfloat16 trains data parallel (or on one rank)"),
    (dict(backend="cupy", threads=2), "--threads 2 sets NumPy's BLAS threads a rank: it needs --backend numpy"),
    (dict(backend="cupy", exchange="p2p", parallel="model"), "--comm p2p exchanges the data-parallel gradient buffer"),
    (dict(backend="cupy", mode="staged", exchange="nccl"), "--mode staged exchanges gradients through the host"),
    (dict(backend="cupy", mode="staged", exchange="overlap"), "--overlap overlaps an NCCL all-reduce with the "
                                                              "backward pass: it needs --comm nccl"),
    (dict(backend="cupy", mode="pipelined", parallel="model"), "--mode pipelined exchanges gradients: it runs "
                                                               "--parallel data"),
    (dict(backend="cupy", exchange="nccl-half"), "--comm nccl-half exchanges the gradients in the run's half "
                                                 "precision: it needs --dtype bfloat16 or float16, got --dtype float32"),
    (dict(backend="cupy", gemm="tf32", dtype="float64"), "--gemm tf32 runs on TF32 tensor cores from float32 operands"),
    (dict(backend="cupy", dtype="bfloat16", mode="staged"), "--dtype bfloat16 trains data parallel (or on one GPU) "
                                                            "with the data resident"),
    (dict(parallel="auto"), "--parallel must be one of sequential, data, model, got 'auto'"),
    (dict(exchange="ring"), "--comm must be one of"),
])
def test_validate_holds_every_combination_rule_and_names_the_options(changes, message):
    with pytest.raises(SpecError) as info:
        RunSpec(**changes).validate()
    assert message in str(info.value)


def test_the_runs_that_go_together_pass():
    for spec in (RunSpec(), RunSpec(dtype="bfloat16", parallel="data"), RunSpec(exchange="hierarchical"),
                 RunSpec(backend="cupy", exchange="overlap", parallel="data"),
                 RunSpec(backend="cupy", mode="pipelined", parallel="data", chunks=4),
                 RunSpec(backend="cupy", gemm="wgmma", dtype="bfloat16"), RunSpec(launch="eager")):
        assert spec.validate() is spec


def test_exchange_is_one_value_the_spec_splits_for_the_trainer():
    spec = RunSpec(backend="cupy", exchange="overlap", timeout=5.0)
    assert (spec.comm, spec.overlap, spec.graphs, spec.wait_s) == ("nccl", True, True, 5.0)
    cpu = RunSpec()
    assert (cpu.comm, cpu.overlap, cpu.graphs) == ("mpi", False, False)
    from perflab.train.watchdog import TIMEOUT_S
    assert cpu.wait_s == TIMEOUT_S  # no timeout named: the watchdog's


def test_a_runs_summary_row_names_what_the_old_device_did():
    """`perflab train --json` and `check`'s row: where and how the run executed, from its RunSpec, with the keys and
    values the trainer's older Device gave (scripts and committed rows read them)."""
    from perflab.commands.options import device_summary
    gpu = device_summary(RunSpec(backend="cupy", exchange="overlap", timeout=5.0))
    assert gpu == {"backend": "cupy", "mode": "resident", "gemm": "cublas", "comm": "nccl", "graphs": True,
                   "pinned": False, "overlap": True, "chunks": None, "timeout": 5.0, "threads": None}
    assert device_summary(RunSpec(threads=2)) == {"backend": "numpy", "comm": "mpi", "threads": 2}
    assert device_summary(RunSpec(backend="cupy", launch="eager"))["timeout"] == RunSpec().wait_s


def test_a_sweep_row_parses_into_the_spec_it_ran():
    from perflab.workbook import sweep
    (numpy,) = sweep.grid(hidden=["1024-1024"], N=6400, backend=("numpy",))
    spec = RunSpec.from_point(numpy).validate()
    assert (spec.backend, spec.exchange, spec.launch, spec.nets, spec.batches) == ("numpy", "mpi", "eager",
                                                                                   ("1024-1024",), (3200,))
    point = {**numpy, "backend": "cupy", "launch": "graph", "comm": "overlap"}
    assert RunSpec.from_point(point).overlap is True
    assert RunSpec.from_point({k: v for k, v in point.items() if k != "comm"}).exchange == "nccl"  # a sweep's default


def test_a_trainer_built_from_a_spec_anywhere_is_validated(monkeypatch):
    """runner.setup, the one factory, refuses what the CLI refuses, whoever asks (a notebook, a sweep's point)."""
    from perflab.config import Config
    from perflab.train import runner
    from perflab.train.comm import Serial
    cfg = Config(dataset="synthetic", input_size=8, hidden_sizes=(4,), train_size=20, batch_size=10, test_size=0)
    with pytest.raises(SpecError, match="--mode staged copies each batch host -> GPU"):
        runner.setup(cfg, "sequential", Serial(), RunSpec(mode="staged"))
    with pytest.raises(SpecError, match="--dtype bfloat16 trains data parallel"):  # the run's own parallel and dtype
        runner.setup(cfg.replace(dtype="bfloat16"), "model", Serial(), RunSpec())
    trainer, *_ = runner.setup(cfg, "sequential", Serial(), RunSpec())
    assert trainer.name == "sequential"
    trainer, *_ = runner.setup(cfg, "sequential", Serial(), None)  # None: NumPy's
    assert trainer.name == "sequential"


def test_no_module_outside_perflab_train_builds_the_trainers_old_device():
    """The trainer takes a RunSpec, the one description of a run: nothing in perflab builds or imports the older
    Device."""
    import re

    from perflab.data import PROJECT_ROOT
    files = [p for folder in ("perflab", "notebooks") for p in (PROJECT_ROOT / folder).rglob("*.py")]
    named = [str(p.relative_to(PROJECT_ROOT)) for p in files
             if re.search(r"\b_?Device\(|import[^\n]*\b_?Device\b", p.read_text().replace("cuda.Device(", ""))]
    assert len(files) > 50 and named == []


def test_the_first_line_says_a_half_precision_run_on_numpy_is_emulated():
    assert "bfloat16 emulated in FP32 on NumPy (perflab.train.half)" in RunSpec(dtype="bfloat16").summary()
    assert "float64" in RunSpec(dtype="float64").summary() and "emulated" not in RunSpec(dtype="float64").summary()


def test_the_specs_exchanges_are_the_trainers_and_overlap():
    """The spec's vocabulary of exchanges and the one comm builds from (plus overlap, NCCL under the backward pass,
    and auto) are one list, written twice: a name added to one must be added to the other."""
    from perflab.train import comm, spec
    assert set(spec.HOST_EXCHANGES + spec.GPU_ONLY_EXCHANGES) == set(comm.STRATEGIES) | {"overlap"}
    assert set(spec.EXCHANGES) - set(spec.HOST_EXCHANGES + spec.GPU_ONLY_EXCHANGES) == {"auto"}


def test_a_spec_is_checked_once_by_the_settings_its_rules_read(monkeypatch):
    """validate remembers a spec that passed by rule_key: every setting but the sizes and the timeout (which no rule
    reads) moves it; a spec refused is refused again, every time."""
    from perflab.train import spec as spec_module
    runs = []
    check = spec_module.check
    monkeypatch.setattr(spec_module, "VALIDATED", set())
    monkeypatch.setattr(spec_module, "check", lambda s: (runs.append(s), check(s))[1])
    base = RunSpec(backend="cupy", parallel="data", exchange="nccl", chunks=2)
    unread = {"nets", "batches", "timeout"}
    assert len(base.rule_key()) == len(dataclasses.fields(RunSpec)) - len(unread)
    for field in dataclasses.fields(RunSpec):
        value = getattr(base, field.name)
        other = (not value if isinstance(value, bool) else 7 if value is None or isinstance(value, int)
                 else (1, 2) if isinstance(value, tuple) else 99.0 if field.name == "timeout" else value + "x")
        assert (base.replace(**{field.name: other}).rule_key() == base.rule_key()) == (field.name in unread), field.name
    base.validate()
    base.replace(nets=("1024-1024",), timeout=5.0).validate()
    assert len(runs) == 1
    for _ in range(2):
        with pytest.raises(SpecError, match="--comm p2p exchanges the data-parallel gradient buffer"):
            base.replace(parallel="model", exchange="p2p").validate()
    assert len(runs) == 3
