"""Every way perflab says how a run goes parses into one RunSpec (perflab.train.spec): the notebooks' parameters,
a sweep's points and perflab.measure.peers_multi's flags. A combination RunSpec refuses is refused with its
message (the value and what is allowed) before any work starts; a spec is checked once however many trainings
it makes; and a sweep point reaches its first GEMM through few files (issue 67)."""
import subprocess
import sys
import traceback
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from perflab.backend import cupy_or_none
from perflab.data import PROJECT_ROOT
from perflab.train import spec as spec_module
from perflab.train.spec import RunSpec, SpecError
from perflab.workbook import sweep


def notebook_cells(name: str) -> list[str]:
    """The code cells of notebooks/<name>.py (jupytext's percent format), the parameters cell first."""
    text = (PROJECT_ROOT / "notebooks" / f"{name}.py").read_text()
    cells = [c for c in text.split("# %%") if c.strip()]
    return [c.split("\n", 1)[1] for c in cells if not c.startswith(" [markdown]")]


def run_notebook_until_refused(name: str, monkeypatch, **parameters):
    """The notebook's cells in order with `parameters` set over its defaults (as papermill's -p does), the engines
    and every write refused: the exception its first refusing cell raised."""
    from perflab.workbook import cluster
    monkeypatch.setattr(cluster, "engines", lambda *a, **k: pytest.fail("the notebook started its engines"))
    namespace = {}
    cells = notebook_cells(name)
    exec(cells[0], namespace)
    namespace.update(parameters)
    for cell in cells[1:]:
        try:
            exec(cell, namespace)
        except Exception as exc:  # the refusal, in the notebook's own cell
            return exc
    pytest.fail(f"notebook {name} ran every cell with {parameters}")


def test_a_roofline_parameter_runspec_refuses_is_refused_with_its_message_before_the_engines(monkeypatch, tmp_path):
    from perflab.workbook import plan
    monkeypatch.setenv("PERFLAB_RUN_DIR", str(tmp_path / "run"))
    monkeypatch.setattr(plan, "gpu_count", lambda: 0)
    exc = run_notebook_until_refused("roofline", monkeypatch, backend="numpy", modes=["resident", "pipelined"])
    assert isinstance(exc, plan.PlanError)
    assert str(exc) == ("modes ['resident', 'pipelined'] on backend 'numpy': --mode pipelined overlaps host <-> GPU "
                        "copies with GPU compute: it needs --backend cupy; on NumPy only 'resident' runs")
    assert not (tmp_path / "run").exists() or not any((tmp_path / "run").rglob("*"))  # nothing written


def test_a_sweep_point_runspec_refuses_is_refused_before_any_point_runs():
    """sweep.grid parses each point into its RunSpec (the CLI's sweep, the roofline notebook's plan)."""
    with pytest.raises(SpecError, match=r"--dtype bfloat16 trains data parallel \(or on one GPU\) with the data "
                                        r"resident .* got --parallel data, --mode staged"):
        sweep.grid(backend=("cupy",), mode=("resident", "staged"), dtype=("bfloat16",))
    with pytest.raises(SpecError, match=r"--gemm tf32 runs on TF32 tensor cores from float32 operands: it needs "
                                        r"--dtype float32, got --dtype float64"):
        sweep.grid(backend=("cupy",), gemm=("cublas", "tf32"), dtype=("float64",))
    with pytest.raises(SpecError, match=r"--dtype float16 trains data parallel \(or on one rank\); got --parallel "
                                        "model"):
        sweep.grid(backend=("numpy",), parallel=("data", "model"), dtype=("float16",), N=6400)
    assert len(sweep.grid(backend=("cupy",), mode=("resident", "staged", "pipelined"))) == 3


def test_the_precision_notebooks_runs_are_validated_before_the_reference_trains(monkeypatch):
    from perflab.config import ACCURACY, Config
    from perflab.workbook import precision
    monkeypatch.setattr(precision, "reference_params", lambda cfg: pytest.fail("the reference trained"))
    cfg = Config(**{**ACCURACY, "hidden_sizes": (8,), "dataset": "synthetic", "train_size": 100, "batch_size": 10})
    said = []
    with pytest.raises(SpecError, match="--gemm wgmma runs perflab's CUDA kernels: it needs --backend cupy"):
        precision.weights_against_float64(cfg, {"FP32": ("float32", "cublas"), "TF32": ("float32", "wgmma")},
                                          backend="numpy", log=said.append)
    assert said == []
    assert set(precision.run_specs(precision.CPU_PRECISIONS, "numpy")) == set(precision.CPU_PRECISIONS)
    assert precision.run_specs(precision.PRECISIONS, "cupy")["BF16"].exchange == "nccl"


def test_the_correctness_tables_runs_are_validated_before_an_engine_runs():
    from perflab.workbook import correctness
    cfg = dict(dataset="synthetic", input_size=784, hidden_sizes=[12], num_classes=10, train_size=300, batch_size=31,
               num_epochs=1, learning_rate=0.5, test_size=0)

    class NoEngines:
        def apply_sync(self, *args):
            pytest.fail("an engine ran")
    with pytest.raises(SpecError, match="--parallel must be one of sequential, data, model, got 'pipeline'"):
        correctness.correctness_table(NoEngines(), cfg, ranks=[1], parallels=("data", "pipeline"))
    with pytest.raises(SpecError, match="--dtype bfloat16 trains data parallel"):
        correctness.checked(cfg, parallels=("model",), dtypes=("bfloat16",))
    correctness.checked(cfg)  # the notebook's own: every check goes


def test_peers_multi_flags_parse_into_the_runspec_and_a_refused_one_stops_before_mpi():
    from perflab.measure import peers_multi
    assert peers_multi.perflab_spec(()) == RunSpec(backend="cupy", parallel="data", exchange="nccl")
    assert peers_multi.perflab_spec(("overlap",)).exchange == "overlap"
    assert peers_multi.perflab_spec(("bf16", "nccl-half")) == RunSpec(backend="cupy", parallel="data",
                                                                    exchange="nccl-half", dtype="bfloat16")
    with pytest.raises(SystemExit, match="nccl-half and p2p are several exchanges"):
        peers_multi.perflab_spec(("p2p", "nccl-half"))
    with pytest.raises(SystemExit, match="do not go together: .*bfloat16"):
        peers_multi.perflab_spec(("bf16", "staged"))
    assert peers_multi.perflab_spec(("staged", "no-graphs")) == RunSpec(backend="cupy", parallel="data", mode="staged",
                                                                        exchange="mpi", launch="eager")
    assert peers_multi.perflab_spec(("model", "step-graphs")).parallel == "model"
    with pytest.raises(SystemExit, match=r"perflab flags \['model', 'pipelined'\] do not go together: --mode pipelined "
                                         r"exchanges gradients: it runs --parallel data"):
        peers_multi.perflab_spec(("model", "pipelined"))
    code = ("import sys\nfrom perflab.measure import peers_multi\ntry:\n    peers_multi.perflab_on_gpus(8, 4, 16, 'p2p', "
            "'staged')\nexcept SystemExit as exc:\n    print(exc)\nprint('mpi4py.MPI' in sys.modules)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.stdout.splitlines() == ["perflab flags ['p2p', 'staged'] do not go together: --mode staged exchanges "
                                        "gradients through the host: use --comm mpi or hierarchical", "False"], proc.stderr
    proc = subprocess.run([sys.executable, "-m", "perflab.measure.peers_multi", "perflab", "8", "4", "16", "model",
                           "overlap"], capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and proc.stdout == ""
    assert "--overlap overlaps an NCCL all-reduce with the backward pass" in proc.stderr


def counting_rules(monkeypatch) -> list:
    """Each time RunSpec's rules run, the spec they ran on (from a clean slate: nothing validated yet)."""
    runs = []
    check = spec_module.check
    monkeypatch.setattr(spec_module, "VALIDATED", set())
    monkeypatch.setattr(spec_module, "check", lambda spec: (runs.append(spec), check(spec))[1])
    return runs


def numpy_point(**changes) -> dict:
    (point,) = sweep.grid(hidden=[8], batch=[20], N=40, backend=("numpy",), **changes)
    return point


def test_a_sweep_points_spec_is_checked_once_for_its_three_trainings(monkeypatch):
    """The grid's parse validates the point; measure_point's trainings (timed, topped up, profiled) reuse it."""
    from perflab.train import runner
    from perflab.train.comm import Serial
    runs = counting_rules(monkeypatch)
    trainings = []
    train = runner.train_on_ranks
    monkeypatch.setattr(runner, "train_on_ranks", lambda *a, **k: (trainings.append(a[3]), train(*a, **k))[1])
    point = numpy_point()
    row = sweep.measure_point(point, Serial())
    assert row["status"] == "measured" and len(trainings) >= 2
    assert len(runs) == 1 and runs[0].exchange == "mpi"


def test_a_gpu_trainers_spec_and_half_check_run_once(monkeypatch):
    """make_gpu_trainer (setup's, a notebook's, a test's) validates its spec, which check_half is part of, once: a
    spec already validated is not checked again (the GPU pieces stubbed: no GPU needed)."""
    from perflab.config import Config
    from perflab.train import comm, gpu, runner
    from perflab.train.comm import Serial
    runs = counting_rules(monkeypatch)
    halves = []
    check_half = gpu.check_half
    monkeypatch.setattr(gpu, "check_half", lambda *a: (halves.append(a), check_half(*a))[1])
    monkeypatch.setattr(gpu, "select_device", lambda comm: 0)
    monkeypatch.setattr(gpu, "check_memory", lambda cfg, resident: None)
    monkeypatch.setattr(comm, "for_gpu", lambda world, name, timeout, half=None: world)
    monkeypatch.setattr(gpu, "FusedGPU", lambda *args, **kwargs: ("FusedGPU", args[4:7], kwargs))
    cfg = Config(dataset="synthetic", hidden_sizes=(8,), batch_size=10, train_size=20, dtype="bfloat16")
    spec = RunSpec(backend="cupy", parallel="data", exchange="nccl", dtype="bfloat16").validate()
    for _ in range(2):
        made = runner.make_gpu_trainer(cfg, "data", Serial(), spec, SimpleNamespace(X=None, y=None))
        assert made[:2] == ("FusedGPU", ("resident", "cublas", True))
    assert len(runs) == len(halves) == 1


def files_to_the_first_gemm(point: dict, gemm_owner, name: str, monkeypatch) -> list[str]:
    """The files (relative to perflab/) a sweep point's call stack passes through from sweep.measure_point to the
    call of its first GEMM, found by making that GEMM raise."""
    from perflab.train.comm import Serial

    class FirstGEMM(Exception):
        pass

    def gemm(*args, **kwargs):
        raise FirstGEMM
    monkeypatch.setattr(gemm_owner, name, gemm)
    with pytest.raises(FirstGEMM) as info:
        sweep.measure_point(point, Serial())
    frames = [Path(f.filename).resolve() for f in traceback.extract_tb(info.tb)]
    root = (PROJECT_ROOT / "perflab").resolve()
    start = next(i for i, f in enumerate(frames) if f == Path(sweep.__file__).resolve())
    return list(dict.fromkeys(str(f.relative_to(root)) for f in frames[start:] if f.is_relative_to(root)))


def test_a_numpy_sweep_point_reaches_its_first_gemm_through_five_files(monkeypatch):
    """sweep.measure_point -> measure_trained_point -> timed_epochs (sweep.py) -> train_on_ranks (runner.py) -> fit,
    run_epochs (loop.py) -> DataParallel.batch, gradients (parallel.py) -> forward, product (model.py) -> NumPy's
    matmul: the issue's target is at most 6."""
    from perflab.train import model

    class RaisingNumpy:  # NumPy, its matmul made to raise
        matmul = np.matmul

        def __getattr__(self, name):
            return getattr(np, name)
    monkeypatch.setattr(model, "xp_of", lambda a: RaisingNumpy())
    files = files_to_the_first_gemm(numpy_point(), RaisingNumpy, "matmul", monkeypatch)
    assert files == ["workbook/sweep.py", "train/runner.py", "train/loop.py", "train/parallel.py", "train/model.py"]


@pytest.mark.gpu
@pytest.mark.skipif(cupy_or_none() is None, reason="no CUDA GPU with CuPy here: run `make gpu-test` on a GPU machine")
def test_a_cupy_resident_sweep_point_reaches_its_first_gemm_through_six_files(monkeypatch):
    """sweep.py -> runner.py (train_on_ranks) -> loop.py (fit: the epoch one CUDA graph) -> graphs.py (epoch, replay's
    warm-up pass, steps) -> gpu.py (FusedGPU.step) -> fused_step.py (gradients, forward) -> gpu.py (FusedGPU.gemm)
    -> perflab.kernels.gemm: six files before the GEMM library."""
    from perflab import kernels
    point = {**numpy_point(), "backend": "cupy", "launch": "graph", "comm": "nccl"}
    files = files_to_the_first_gemm(point, kernels, "gemm", monkeypatch)
    assert files == ["workbook/sweep.py", "train/runner.py", "train/loop.py", "train/graphs.py", "train/gpu.py",
                     "train/fused_step.py"]
