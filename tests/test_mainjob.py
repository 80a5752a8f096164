"""The main job as a newcomer runs it: it measures this machine (never another's results), uses
what the machine has, stops on a diverged run, lets two sweeps share a file, and leaves the
clone clean."""
import json
import os
import shutil
import subprocess
import sys

import pandas as pd
import pytest

from perflab import results
from perflab.data import PROJECT_ROOT
from perflab.workbook import plan, sweep

META = {"cpu": "AMD EPYC 7763", "cpu_count": 2, "fingerprint": "abc123"}


def test_machine_key_tells_machines_apart():
    gpu = {**META, "cpu_count": 16, "gpu": "NVIDIA H100 80GB HBM3", "gpu_count": 1}
    assert results.machine_key(META) == "cpu-amd-epyc-7763-2c-abc123"
    assert results.machine_key(gpu) == "nvidia-h100-80gb-hbm3-x1-16c-abc123"
    variants = [{**META, "cpu_count": 4}, {**META, "fingerprint": "def456"}, {**gpu, "gpu_count": 2}, gpu, META]
    assert len({results.machine_key(m) for m in variants}) == len(variants)
    assert results.machine_key(dict(META)) == results.machine_key(META)  # the same machine resumes its own runs


def test_a_run_writes_to_its_own_folder_never_the_committed_results(monkeypatch, tmp_path):
    monkeypatch.delenv("PERFLAB_RUN_DIR", raising=False)
    here = results.run_dir()
    assert here.parent == results.RUNS_ROOT and here.name == results.machine_key()
    assert results.RESULTS_ROOT not in here.parents
    assert sweep.output_path("roofline") == here / "roofline.csv"
    committed = {p.name for p in results.RESULTS_ROOT.iterdir() if p.is_dir()}
    assert here.name not in committed  # so committed points are never taken for this machine's
    monkeypatch.setenv("PERFLAB_RUN_DIR", str(tmp_path))
    assert results.run_dir() == tmp_path


def test_runs_folder_is_ignored_by_git():
    out = subprocess.run(["git", "check-ignore", "runs/some-machine/roofline.csv"], cwd=PROJECT_ROOT,
                         capture_output=True, text=True)
    assert out.returncode == 0, "runs/ must be git-ignored"


def test_plan_picks_backend_and_engines_from_the_machine(monkeypatch):
    monkeypatch.setattr(plan, "gpu_count", lambda: 0)
    monkeypatch.setattr(plan.os, "cpu_count", lambda: 2)
    cpu = plan.roofline_plan()
    assert (cpu.backend, cpu.engines, cpu.ranks, cpu.modes) == ("numpy", 2, [1, 2], ["resident"])
    assert cpu.estimate_s > 0 and "no GPU" in cpu.describe() and "min" in cpu.describe()
    assert len({sweep.key(p) for p in cpu.points}) == len(cpu.points) == 11
    assert {p["p"] for p in cpu.points if p["B"] == 3200 and p["H"] == 512} == {1, 2}  # HW6 Q2.1: B = 3200 split
    assert {p["B"] for p in cpu.points if p["p"] == 2 and p["H"] == 512} == {800, 3200, 12000}  # B varies at p > 1
    monkeypatch.setattr(plan, "gpu_count", lambda: 2)
    monkeypatch.setattr(plan.os, "cpu_count", lambda: 32)
    gpu = plan.roofline_plan(estimate=False)
    assert (gpu.backend, gpu.engines, gpu.ranks, gpu.N) == ("cupy", 2, [1, 2], 60000)
    assert {p["mode"] for p in gpu.points} == {"resident", "staged", "pipelined"} and all(p["backend"] == "cupy" for p in gpu.points)
    assert plan.roofline_plan(backend="numpy", engines=1, estimate=False).ranks == [1]
    deep = plan.roofline_plan(backend="numpy", engines=1, hidden=[512, "1024-1024", (256, 256, 256)], estimate=False)
    assert {p["H"] for p in deep.points} == {512, "1024-1024", "256-256-256"}  # depth a sweep axis
    assert plan.kernel_grid(deep)[0] == [256, 512, 1024]  # every width of every net timed
    monkeypatch.setattr(plan.os, "cpu_count", lambda: 64)
    monkeypatch.setattr(plan, "gpu_count", lambda: 0)
    assert plan.roofline_plan(estimate=False).engines == plan.MAX_CPU_ENGINES
    one = plan.roofline_plan(backend="numpy", engines=1, hidden=512, batch_sweep=800, ranks=1, estimate=False)
    assert {(p["H"], p["B"]) for p in one.points} == {(512, 1600), (512, 800)}  # single values as one-item lists
    small = plan.roofline_plan(backend="numpy", engines=1, N=1000, per_rank_batch=100, estimate=False)
    assert sorted({p["B"] for p in small.points}) == [100, 800]  # the B sweep's 3200 and 12000 exceed N: left out


def test_a_sweep_point_whose_batch_exceeds_the_training_set_is_refused_naming_both():
    with pytest.raises(ValueError, match=r"a point's batch B=6000 is larger than the training set N=5000"):
        sweep.grid(batch=(3000, 6000), N=5000)
    with pytest.raises(ValueError, match=r"B=8000 \(B/p=2000 on p=4\) is larger than the training set N=6000"):
        sweep.grid(per_rank_batch=(2000,), ranks=(1, 4), N=6000)


@pytest.mark.parametrize("kwargs, message", [
    ({"backend": "tpu"}, "backend must be"),
    ({"backend": "cupy"}, "needs CuPy and a visible NVIDIA GPU"),
    ({"engines": 0}, "engines must be 'auto' or a whole number"),
    ({"engines": "four"}, "engines must be"),
    ({"engines": 1, "ranks": [1, 2]}, "need 2 engines"),
    ({"hidden": []}, r"hidden must name at least one net .* got \[\]"),
    ({"hidden": [512, "1024-0"]}, "hidden: hidden widths '1024-0': expected one width like 512, or a deeper net's"),
    ({"hidden": ["big"]}, "hidden widths 'big'"),
    ({"N": -5}, r"N must be a whole number >= 1 \(or None: the backend's size\), got -5"),
    ({"N": "many"}, "N must be a whole number >= 1"),
    ({"per_rank_batch": 0}, "per_rank_batch must be a whole number >= 1"),
    ({"epochs": 0}, "epochs must be a whole number >= 1"),
    ({"batch_sweep": [800, 0]}, r"batch_sweep must be a non-empty list of whole numbers >= 1 .* got \[800, 0\]"),
    ({"ranks": []}, "ranks must be a non-empty list of whole numbers >= 1"),
    ({"modes": ["fast"]}, r"modes must be a non-empty list among \['resident', 'staged', 'pipelined'\]"),
    ({"backend": "numpy", "modes": ["staged"]}, "on NumPy only 'resident' runs"),
    ({"N": 500, "per_rank_batch": 400, "engines": 2}, r"per_rank_batch 400 on ranks \[1, 2\]: a point's batch B=800 "
                                                       r"\(B/p=400 on p=2\) is larger than the training set N=500"),
])
def test_plan_rejects_bad_values_naming_them(monkeypatch, kwargs, message):
    monkeypatch.setattr(plan, "gpu_count", lambda: 0)
    with pytest.raises(plan.PlanError, match=message):
        plan.roofline_plan(estimate=False, **kwargs)


def run_cli(*args, env=None, timeout=300):
    return subprocess.run([sys.executable, "-m", "perflab", *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def test_diverged_training_stops_with_a_message_naming_epoch_batch_and_rate():
    proc = run_cli("train", "--learning-rate", "1e6", "--test-size", "0", "--train-size", "6400")
    assert proc.returncode == 2
    assert "training diverged" in proc.stderr and "epoch 0, batch 2/2" in proc.stderr
    assert "learning rate 1e+06" in proc.stderr and "final loss" not in proc.stdout


def test_sweep_marks_a_diverged_point_failed_not_measured(tmp_path):
    proc = run_cli("sweep", "--hidden", "8", "16", "--batch", "100", "--train-size", "400", "--learning-rate", "1e6",
                   "--out", str(tmp_path), "--name", "wild")
    assert proc.returncode == 0, proc.stderr[-2000:]
    table = pd.read_csv(tmp_path / "wild.csv")
    assert list(table.status) == ["failed", "failed"] and table.error.str.contains("training diverged").all()
    assert "epoch_seconds" not in table or table.epoch_seconds.isna().all()
    from perflab.analysis import roofline
    assert len(roofline.measured(table)) == 0
    assert "failed: training diverged" in proc.stdout
    again = run_cli("sweep", "--hidden", "8", "16", "--batch", "100", "--train-size", "400", "--learning-rate", "1e6",
                    "--out", str(tmp_path), "--name", "wild")
    assert "2 of 2 points already in" in again.stdout and len(pd.read_csv(tmp_path / "wild.csv")) == 2


def test_claims_skip_points_a_live_sweep_holds_and_free_dead_ones(tmp_path):
    path = tmp_path / "grid.csv"
    point = sweep.grid(hidden=(8,), batch=(50,), N=100)[0]
    claims = sweep.Claims(path)
    assert claims.claim(point)
    assert not claims.claim(point)  # claimed by a live process (this one)
    claims.finish(point, {**point, "status": "measured"}, {"cpu": "x"})
    assert not claims.claim(point)  # now in the file
    other = sweep.grid(hidden=(9,), batch=(50,), N=100)[0]
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    entry = {"key": list(sweep.key(other)), "pid": int(dead.stdout), "host": __import__("platform").node()}
    claims.claims.write_text(json.dumps(entry) + "\n")
    assert claims.claim(other)  # the claim of a process that is gone does not count


def test_a_grid_launches_each_gpu_point_both_ways_asked_and_the_cpu_once():
    points = sweep.grid(hidden=(8,), batch=(50,), backend=("numpy", "cupy"), launch=("graph", "eager"))
    assert [(pt["backend"], pt["launch"]) for pt in points] == [("numpy", "eager"), ("cupy", "graph"), ("cupy", "eager")]
    assert len({sweep.key(pt) for pt in points}) == 3
    with pytest.raises(ValueError, match="launch must be among \\('graph', 'eager'\\), got 'lazy'"):
        sweep.grid(launch=("lazy",))


def test_a_sweep_chooses_the_exchange_of_resident_gpu_data_parallel_only():
    """--comm p2p or nccl sets resident GPU data parallel's exchange; elsewhere it is refused, naming what
    was asked; unset, each point gets its default (host MPI staged and on the CPU, else NCCL)."""
    p2p = sweep.grid(hidden=(8,), batch=(50,), backend=("cupy",), comm="p2p")
    assert [pt["comm"] for pt in p2p] == ["p2p"]
    plain = sweep.grid(hidden=(8,), batch=(50,), backend=("numpy", "cupy"), mode=("resident", "staged"))
    assert [(pt["backend"], pt["mode"], pt["comm"]) for pt in plain] == [
        ("numpy", "resident", "mpi"), ("cupy", "resident", "nccl"), ("cupy", "staged", "mpi")]
    assert sweep.key(p2p[0]) != sweep.key(plain[1])  # the same point with another exchange is another point
    for comm in ("p2p", "overlap"):
        for bad in ({"mode": ("staged",)}, {"parallel": ("model",)}, {"backend": ("numpy",)}):
            with pytest.raises(ValueError, match=f"--comm {comm}: a sweep chooses the exchange"):
                sweep.grid(**{"backend": ("cupy",), **bad}, comm=comm)
    overlap = sweep.grid(hidden=(8,), batch=(50,), backend=("cupy",), comm="overlap")[0]
    assert overlap["comm"] == "overlap" and sweep.key(overlap) != sweep.key(p2p[0])
    assert sweep.exchange_fields("overlap") == {"comm": "nccl", "overlap": True}  # the trainer's --overlap
    assert sweep.exchange_fields("p2p") == {"comm": "p2p", "overlap": False}


def test_a_file_from_before_the_launch_column_is_resumed_as_launched_by_default(tmp_path):
    old = sweep.grid(hidden=(8,), batch=(50,), backend=("numpy", "cupy"))
    rows = [{k: v for k, v in pt.items() if k not in ("launch", "comm")} | {"status": "measured"} for pt in old]
    pd.DataFrame(rows).to_csv(tmp_path / "old.csv", index=False)
    assert sweep.done_keys(tmp_path / "old.csv") == {sweep.key(pt) for pt in old}
    eager = sweep.grid(hidden=(8,), batch=(50,), backend=("cupy",), launch=("eager",))[0]
    assert sweep.key(eager) not in sweep.done_keys(tmp_path / "old.csv")


def test_a_point_times_epochs_enough_to_fill_the_minimum():
    m = sweep.MIN_TIMED_SECONDS
    assert sweep.epochs_to_fill(epoch=m, timed=m) == 0  # long enough already
    assert sweep.epochs_to_fill(epoch=m / 10, timed=m / 10) == 9
    assert sweep.epochs_to_fill(epoch=m / 4, timed=0.9 * m) == 1  # a part of an epoch still takes a whole one
    assert sweep.epochs_to_fill(epoch=1e-6, timed=1e-6) == sweep.MAX_EXTRA_EPOCHS
    assert sweep.epochs_to_fill(epoch=0.0, timed=0.0) == sweep.MAX_EXTRA_EPOCHS


def test_short_epochs_are_topped_up_by_a_second_run_and_its_first_epoch_is_dropped(monkeypatch):
    """sweep.timed_epochs with a stand-in trainer whose epochs take known seconds: the second run's
    length comes from the slowest rank's median and the shortest rank's total, and each run's first
    epoch (compilation, capture) is never timed. Timing-free: CI's loaded host cannot move it."""
    from types import SimpleNamespace

    from perflab.config import Config
    from perflab.train import runner
    m = sweep.MIN_TIMED_SECONDS
    runs, closed = [], []

    def fake_train(cfg, parallel, comm, device, log=None):
        runs.append(cfg.num_epochs)
        first = 100.0  # the dropped epoch: long, so counting it would end the top-up
        epochs = [{"seconds": first}] + [{"seconds": m / 10} for _ in range(cfg.num_epochs - 1)]
        return SimpleNamespace(epochs=epochs), SimpleNamespace(close=lambda: closed.append(True))

    class TwoRanks:  # the other rank is twice as slow: its median sets the epoch, this rank's total the time
        def allgather(self, value):
            return [value, (2 * value[0], 2 * value[1])]

    monkeypatch.setattr(runner, "train_on_ranks", fake_train)
    seconds, history, _ = sweep.timed_epochs(Config(num_epochs=2), "data", TwoRanks(), device=None)
    more = sweep.epochs_to_fill(epoch=2 * m / 10, timed=2 * m / 10)
    assert runs == [3, more + 1]
    assert closed == [True]  # the first run's trainer is closed before the second starts
    assert seconds == [m / 10] * (2 + more)
    assert history.epochs == [{"seconds": m / 10}] * more

    runs.clear()
    seconds, _, _ = sweep.timed_epochs(Config(num_epochs=12), "data", TwoRanks(), device=None)
    assert runs == [13] and len(seconds) == 12  # long enough already: one run


def test_two_sweeps_on_one_file_split_the_grid(tmp_path):
    args = [sys.executable, "-m", "perflab", "sweep", "--hidden", "8", "12", "16", "20", "24", "28", "--batch", "100",
            "--train-size", "2000", "--out", str(tmp_path), "--name", "shared", "--json"]
    procs = [subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    for proc in procs:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-2000:]
    table = pd.read_csv(tmp_path / "shared.csv")
    assert sorted(table.H) == [8, 12, 16, 20, 24, 28]  # each point once: no duplicate rows
    assert (table.epoch_spread >= 0).all()
    # how many epochs a point times depends on this host's load (two sweeps on two cores): only the
    # bounds are checked here; the top-up itself is checked without timing above
    assert ((table.timed_epochs >= 1) & (table.timed_epochs <= 1 + sweep.MAX_EXTRA_EPOCHS)).all()
    assert not (tmp_path / "shared.claims").exists()


def test_engines_lost_in_a_point_stop_the_sweep_naming_it_and_keep_the_rows_written(tmp_path):
    """run_grid_engines: each point goes to the engines under the sweep's watchdog (run_point_watched, with where
    it is); engines lost in a point (apply raised) stop the sweep with EnginesLost naming the point and the file,
    where the rows written stay and no claim is left."""
    points = sweep.grid(hidden=(8, 12, 16), batch=(100,), N=2000)
    calls = []

    class View:
        def apply_sync(self, fn, point, dataset, timeout, where):
            calls.append((fn, where))
            if len(calls) == 2:
                raise RuntimeError("EngineError: engine 1 died while running task\nmore")
            return [{**point, "status": "measured", "epoch_seconds": 0.1}, None]

    with pytest.raises(sweep.EnginesLost) as lost:
        sweep.run_grid_engines(View(), points, "engines", out=tmp_path, progress=False, log=lambda _: None, timeout=7)
    text = str(lost.value)
    assert "stopped answering in the sweep at point 2 of 3 (H=12, B=100, p=1, resident)" in text
    assert "RuntimeError: EngineError: engine 1 died while running task (" in text and "more" not in text
    assert f"1 point(s) are kept in {tmp_path / 'engines.csv'}" in text
    assert [fn for fn, _ in calls] == [sweep.run_point_watched] * 2
    assert list(pd.read_csv(tmp_path / "engines.csv").H) == [8]
    assert not (tmp_path / "engines.claims").exists() or (tmp_path / "engines.claims").read_text().strip() in ("", "[]")


@pytest.mark.slow  # make test-all: the whole main job, small, in a fresh clone (conftest.loaded_main_job)
@pytest.mark.mpi
@pytest.mark.timeout(1200)  # the job, loaded for its measurements: about 2 min here, more on a slower machine
def test_main_job_in_a_fresh_clone_measures_this_machine_and_leaves_git_status_clean(loaded_main_job):
    """The README's `make roofline` (perflab notebook roofline, perflab report) with small sizes in a
    copy of this tree committed as a fresh clone: outputs land in runs/<machine key>/ and
    `git status --porcelain` stays empty. (The job runs once for this test and test_noisy_mainjob, with
    another program on a core while it measures.)"""
    clone, git = loaded_main_job.clone, loaded_main_job.git
    for proc in loaded_main_job.procs:
        assert proc.returncode == 0, proc.stderr[-3000:]
    assert len(loaded_main_job.procs) == 2  # the notebook, then the report
    runs = list((clone / "runs").iterdir())
    assert [r.name for r in runs] == [results.machine_key()]
    run = runs[0]
    executed = json.loads((run / "notebooks" / "roofline.ipynb").read_text())
    errors = [o for c in executed["cells"] for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors
    printed = "".join(t for c in executed["cells"] for o in c.get("outputs", []) for t in o.get("text", ""))
    assert "found: " in printed and "will run: 7 points on numpy, 2 MPI engine(s)" in printed and "should take about" in printed
    assert not [line for line in printed.splitlines() if "texts overlap" in line]  # plots.save says so of any figure
    table = pd.read_csv(run / "roofline.csv")
    assert len(table) == 7 and (table.status == "measured").all()
    assert set(table.H.astype(str)) == {"32-32", "64"}  # a deeper net is a point of the main job like any other
    figures = sorted(p.name for p in (run / "figures").iterdir())
    for name in ("roofline_serial", "roofline_ceilings", "predictor_vs_measured", "seeds_model_vs_measured"):
        assert f"{name}_{run.name}.png" in figures, name
    assert "blind_checks_committed.png" in figures  # the committed blind tests, drawn beside this run
    assert {"ceilings_p1.csv", "ceilings_p2.csv", "predictions.csv", "validation.csv"} <= {p.name for p in run.iterdir()}
    checked = pd.read_csv(run / "validation.csv")
    assert len(checked) == 7 and checked.error.notna().all()  # every point predicted from this run's ceilings
    for f in (run / "figures").glob("*.png"):
        assert f.stat().st_size > 10_000, f"{f.name} looks empty"
        assert f.with_suffix(".txt").read_text().strip(), f"{f.name} has no caption"
    assert (run / "report.pdf").stat().st_size > 50_000
    assert git("status", "--porcelain") == ""


@pytest.mark.parametrize("args, message", [
    (["sweep", "--learning-rate", "0"], "argument --learning-rate: expected a positive number, got '0'"),
    (["sweep", "--learning-rate", "fast"], "expected a positive number, got 'fast'"),
    (["sweep", "--timeout", "-5"], "argument --timeout: expected a positive number, got '-5'"),
    (["report", "--folder", "/no/such/run"], "--folder /no/such/run: no such folder"),
    (["validate", "--committed", "--out", "x.csv"], "--committed validates every folder"),
    pytest.param(["notebook", "roofline", "-p", "backend", "tpu"], "backend must be 'auto', 'numpy' or 'cupy', got 'tpu'",
                 marks=pytest.mark.slow),  # make test-all: runs the notebook to its failing cell
])
def test_new_options_reject_bad_values_naming_them(tmp_path, args, message):
    proc = run_cli(*args, env={"PERFLAB_RUN_DIR": str(tmp_path)})
    assert proc.returncode != 0 and message in proc.stderr + proc.stdout, (proc.stdout[-1500:], proc.stderr[-1500:])


def test_the_main_jobs_predictions_carry_the_staged_band(monkeypatch, tmp_path):
    """plan.predict on a one-GPU plan from the H100's committed ceilings: every point predicted,
    the staged ones with the copy's band around their prediction, the others without one."""
    monkeypatch.setattr(plan, "gpu_count", lambda: 1)
    monkeypatch.setattr(plan.os, "cpu_count", lambda: 16)
    gpu = plan.roofline_plan(estimate=False)
    shutil.copy(results.RESULTS_ROOT / "nvidia-h100-80gb-hbm3" / "ceilings_p1.csv", tmp_path / "ceilings_p1.csv")
    table = plan.predict(gpu, tmp_path)
    written = pd.read_csv(tmp_path / "predictions.csv")
    assert len(written) == len(gpu.points) == len(table) and written.predicted_ms.gt(0).all()
    staged = written["mode"] == "staged"
    assert staged.any() and written.loc[~staged, "low_ms"].isna().all()
    assert (written.low_ms[staged] <= written.predicted_ms[staged]).all()
    assert (written.predicted_ms[staged] <= written.high_ms[staged]).all()
