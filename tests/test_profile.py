import dataclasses
import json
import subprocess
import sys

import pytest

from perflab.config import Config
from perflab.measure import ceilings
from perflab.train import profile
from perflab.train.comm import Serial
from perflab.train.runner import train_on_ranks

SMALL = Config(dataset="synthetic", input_size=40, hidden_sizes=(16,), num_classes=5, train_size=300,
               batch_size=64, test_size=0, learning_rate=0.5, num_epochs=2)


def test_profiled_run_records_the_seeds_phases():
    history, _ = train_on_ranks(SMALL, "sequential", Serial(), profiled=True, log=None)
    table = history.phases
    counts = table.groupby("phase").size()
    assert counts["batch iteration"] == SMALL.num_batches * SMALL.num_epochs == counts["forward GEMM 1"]
    assert {"train setup", "forward", "backward", "step", "backward GEMM 3"} <= set(counts.index)
    per_batch = table[table.batch >= 0].pivot_table(index="batch", columns="phase", values="seconds", aggfunc="sum")
    inner = per_batch[["forward", "backward", "step"]].sum(axis=1)
    assert (inner <= per_batch["batch iteration"] + 1e-9).all()
    summary = profile.summary(table[table.phase != "train setup"])
    assert summary.loc["batch iteration", "share"] == 1.0 and (summary["share"] <= 1.0 + 1e-12).all()
    assert list(summary.index[:2]) == ["batch iteration", "forward"]


def test_the_test_sets_precision_between_epochs_is_not_profiled_as_training():
    cfg = dataclasses.replace(SMALL, test_size=200)
    history, _ = train_on_ranks(cfg, "sequential", Serial(), profiled=True, log=None)
    counts = history.phases.groupby("phase").size()
    assert counts["forward GEMM 1"] == counts["batch iteration"] == cfg.num_batches * cfg.num_epochs
    assert history.epochs[-1]["test_precision"] is not None and profile.ACTIVE is None
    assert (profile.summary(history.phases[history.phases.phase != "train setup"])["share"] <= 1.0 + 1e-12).all()


def test_unprofiled_run_records_nothing():
    history, _ = train_on_ranks(SMALL, "sequential", Serial(), log=None)
    assert history.phases is None and profile.ACTIVE is None


def test_cpu_gemm_ceiling_positive():
    rows = ceilings.cpu_gemm(shapes=[(33, 17, 65)], repeats=2)
    assert rows[0]["value"] > 1e6 and rows[0]["unit"] == "FLOP/s"


def test_ceilings_time_the_grid_joined_with_the_shapes_asked_or_those_alone():
    """step_grid (no timing): `perflab ceilings --hidden ... --per-rank-batch ...` joins every width of the nets
    and the batches to the default grid; --grid asked times those alone; asked alone without them is refused."""
    from perflab.measure import ceilings
    for gpu in (False, True):
        hidden, batches = ceilings.default_grid(gpu)
        assert ceilings.step_grid(gpu, [(100,), (100, 37)], [300]) == (sorted({*hidden, 37, 100}), sorted({*batches, 300}))
        assert ceilings.step_grid(gpu, [(100,), (100, 37)], [300], asked_only=True) == ([37, 100], [300])
    proc = subprocess.run([sys.executable, "-m", "perflab", "ceilings", "--grid", "asked", "--hidden", "100"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "--grid asked" in proc.stderr and "--per-rank-batch" in proc.stderr, proc.stderr


@pytest.mark.slow  # make test-all: ceilings, then a sweep over three depths, on two ranks
@pytest.mark.mpi
def test_ceilings_under_mpi_writes_table(tmp_path):
    from test_mpi import last_json, mpirun
    proc = mpirun(2, "ceilings", "--max-log2-size", "14", "--out", str(tmp_path), "--json", "--backend", "numpy",
                  "--hidden", "100", "100-100", "--per-rank-batch", "300", "--grid", "asked")
    summary = last_json(proc)
    import pandas as pd

    from perflab.analysis.perfmodel import gradient_buffer_bytes
    table = pd.read_csv(summary["saved"])
    allreduce = table[table.ceiling == "mpi_allreduce"]  # the grid's sizes and each net's gradient, with its repeats' spread
    assert list(allreduce.size_bytes) == [4096, 16384, gradient_buffer_bytes(100), gradient_buffer_bytes("100-100")]
    assert (allreduce.value > 0).all() and (allreduce.min_seconds <= allreduce.seconds).all()
    assert (allreduce.seconds <= allreduce.max_seconds).all()
    assert json.loads((tmp_path / "ceilings_p2.json").read_text())["cpu"]
    kernels = table[table.ceiling == "step_kernel"]  # the shapes asked for alone (--grid asked; step_grid's test)
    assert set(kernels.H) == {100} and set(kernels.B) == {300}
    # forward, backward, step of 784-100-10 and 784-100-100-10
    assert sorted(kernels.impl) == sorted(k + s for k in ("forward", "backward", "step") for s in ("", ", two hidden layers"))
    # depth as a sweep axis: nets of one, two and three hidden layers, predicted from these ceilings
    proc = mpirun(2, "sweep", "--backend", "numpy", "--hidden", "100", "100-100", "100-100-100", "--ranks", "1", "2",
                  "--per-rank-batch", "300", "--train-size", "1200", "--out", str(tmp_path), "--name", "prediction_check_depth")
    assert proc.returncode == 0, proc.stderr[-2000:]
    from perflab.analysis import validation
    table, _ = validation.validate_folder(tmp_path, write=False)
    assert sorted(map(str, table.H)) == sorted(["100", "100-100", "100-100-100"] * 2)
    assert "skipped" not in table or table.skipped.isna().all(), table.get("skipped")
    kernels_ms = table.set_index(["H", "p"]).t_kernels
    assert kernels_ms["100", 1] < kernels_ms["100-100", 1] < kernels_ms["100-100-100", 1]


@pytest.mark.mpi
def test_profile_cli_reports_effective_mpi_rate():
    from test_mpi import SMALL as ARGS
    from test_mpi import last_json, mpirun
    summary = last_json(mpirun(2, "train", "--parallel", "data", "--profile", "--json", *ARGS))
    assert summary["profiled"] and summary["P_mpi"] > 0 and summary["P_flops"] > 0
    assert "MPI_Allreduce" in summary["phase_medians"]
