"""A run folder keeps the main job's answer (issue 66, item 11): scratch sweeps beside the main job's, a failed
notebook run and `report --folder` one level too high leave its report inputs, validation and executed notebook
as they were; the main job says how long each of its parts will take (item 9) and stops its engines quietly."""
import json
import logging
import shutil
import sys

import pandas as pd
import pytest

from perflab import results
from perflab.analysis import validation
from perflab.cli import main
from perflab.measure import steadiness
from perflab.results import RESULTS_ROOT
from perflab.workbook import cluster, plan, sweep

MAINJOB = RESULTS_ROOT / "cpu-amd-epyc" / "mainjob"  # a committed CPU main job: 9 points and their ceilings


def main_job_folder(tmp_path):
    """A copy of the committed CPU main job whose sweep carries the main job's mark."""
    run = tmp_path / "run"
    shutil.copytree(MAINJOB, run, ignore=shutil.ignore_patterns("report.pdf", "notebooks", "figures", "validation*"))
    sweep.mark_main_job(run / "roofline.csv")
    return run


def scratch_sweep(run, name="mysweep"):
    """A `perflab sweep --name mysweep` beside it: the same points three times slower (a median error far from the
    main job's), with the metadata a scratch sweep gets."""
    rows = pd.read_csv(run / "roofline.csv").assign(epoch_seconds=lambda t: 3 * t.epoch_seconds)
    meta = {**json.loads((run / "roofline.json").read_text()), "sweep": name, "main_job": False}
    results.write_rows(run / f"{name}.csv", rows.to_dict("records"), meta, append=False)


def test_a_scratch_sweep_beside_the_main_jobs_leaves_its_report_inputs_and_validation_unchanged(tmp_path, capsys):
    from perflab.report import pdf
    run = main_job_folder(tmp_path)
    main(["validate", "--folder", str(run), "--json"])
    before = (run / "validation.csv").read_bytes(), (run / "validation.json").read_bytes()
    scratch_sweep(run)
    assert validation.main_sweeps(run) == [run / "roofline.csv"] == pdf.report_sweeps(run)
    assert validation.main_sweeps(run, ("mysweep",)) == [run / "mysweep.csv", run / "roofline.csv"]
    main(["validate", "--folder", str(run), "--json"])
    assert ((run / "validation.csv").read_bytes(), (run / "validation.json").read_bytes()) == before
    main(["validate", "--folder", str(run), "--sweeps", "mysweep", "--json"])  # asked for: its own file
    taken = pd.read_csv(run / "validation_mysweep.csv")
    assert set(taken.source) == {"roofline.csv", "mysweep.csv"}
    assert (run / "validation.csv").read_bytes() == before[0]
    capsys.readouterr()
    for command in (["validate"], ["report", "--out", str(tmp_path / "r.pdf")]):
        with pytest.raises(SystemExit) as info:
            main([*command, "--folder", str(run), "--sweeps", "nosuch"])
        err = capsys.readouterr().err
        assert info.value.code == 2 and "--sweeps nosuch:" in err and "holds no sweep of that name; its sweeps: " \
                                                                     "mysweep, roofline" in err, err
    assert (run / "validation.csv").read_bytes() == before[0] and not (tmp_path / "r.pdf").exists()


def test_a_folder_the_main_job_never_marked_reads_every_sweep_as_before(tmp_path):
    folder = RESULTS_ROOT / "cpu-amd-epyc"  # committed: no mark anywhere
    assert validation.main_sweeps(folder) == validation.sweep_files(folder)
    assert validation.validation_path(folder) == folder / "validation.csv"
    assert validation.validation_path(folder, ("a", "mainjob/roofline")) == folder / "validation_a_mainjob-roofline.csv"


def test_the_main_jobs_sweep_is_marked_and_a_scratch_sweep_is_not(tmp_path):
    points = sweep.grid(hidden=(8, 12), batch=(100,), N=2000)

    class View:
        def apply_sync(self, fn, point, dataset, timeout, where):
            return [{**point, "status": "measured", "epoch_seconds": 0.1}, None]

    def run(name, **kw):
        sweep.run_grid_engines(View(), points, name, out=tmp_path, progress=False, log=lambda _: None, **kw)
        return json.loads((tmp_path / f"{name}.json").read_text())
    assert run("roofline", main_job=True)["main_job"] is True
    assert run("mysweep")["main_job"] is False
    made = run("mysweep")  # every point done: a main job resuming it marks it, its date as measured
    assert run("mysweep", main_job=True) == {**made, "main_job": True}
    assert validation.main_sweeps(tmp_path) == [tmp_path / "mysweep.csv", tmp_path / "roofline.csv"]


def fake_papermill(monkeypatch, fails: bool):
    """papermill.execute_notebook writing one cell's output to its output path as it goes, then failing or not."""
    import papermill

    def execute(notebook, output, **kw):
        import nbformat
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1", outputs=[
            nbformat.v4.new_output("stream", name="stdout", text="ran\n" if not fails else "half\n")])])
        nbformat.write(nb, output)
        if fails:
            raise papermill.PapermillExecutionError(1, 2, "plan", "PlanError", "hidden widths '[512'", [])
    monkeypatch.setattr(papermill, "execute_notebook", execute)


def test_a_failed_notebook_run_leaves_the_last_good_one_and_is_kept_beside_it(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PERFLAB_RUN_DIR", str(tmp_path))
    folder = tmp_path / "notebooks"
    with pytest.raises(SystemExit) as info:  # a broken literal: refused before anything runs or is written
        main(["notebook", "roofline", "-p", "hidden", "[512"])
    err = capsys.readouterr().err
    assert info.value.code == 2 and "-p hidden [512: not a Python literal ('[' was never closed)" in err, err
    assert not folder.exists()
    fake_papermill(monkeypatch, fails=False)
    main(["notebook", "roofline", "--json"])
    good = (folder / "roofline.ipynb").read_bytes()
    fake_papermill(monkeypatch, fails=True)
    with pytest.raises(SystemExit) as info:
        main(["notebook", "roofline", "-p", "hidden", "'x'", "--json"])
    err = capsys.readouterr().err
    assert info.value.code == 2 and "stopped in cell 2: PlanError: hidden widths '[512'" in err
    assert "roofline.failed.ipynb" in err and "the last good run's" in err and "roofline.ipynb is kept" in err, err
    assert (folder / "roofline.ipynb").read_bytes() == good
    assert "half" in (folder / "roofline.failed.ipynb").read_text()
    assert sorted(p.name for p in folder.iterdir()) == ["roofline.failed.ipynb", "roofline.ipynb"]  # none .running
    fake_papermill(monkeypatch, fails=False)
    main(["notebook", "roofline", "--json"])  # a good run again: the failed copy is gone
    assert sorted(p.name for p in folder.iterdir()) == ["roofline.ipynb"]


def report_error(capsys, *argv) -> str:
    with pytest.raises(SystemExit) as info:
        main(["report", *argv])
    err = capsys.readouterr().err
    assert info.value.code == 2, err
    return err


def test_report_refuses_a_folder_with_no_run_and_names_the_runs_below_it(tmp_path, capsys):
    top = tmp_path / "top"
    (top / "figures").mkdir(parents=True)
    (top / "figures" / "x.png").write_bytes(b"png")  # figures of its own, as results/ has
    (top / "machine").mkdir()
    shutil.copy(MAINJOB / "roofline.csv", top / "machine" / "roofline.csv")
    err = report_error(capsys, "--folder", str(top), "--out", str(tmp_path / "r.pdf"))
    assert f"--folder {top} holds no run itself" in err and f"its subfolders {top / 'machine'} do: pass one" in err
    (tmp_path / "empty").mkdir()
    err = report_error(capsys, "--folder", str(tmp_path / "empty"), "--out", str(tmp_path / "r.pdf"))
    assert "holds no run: no sweep CSV" in err and "and no figures/*.png" in err
    err = report_error(capsys, "--folder", str(RESULTS_ROOT), "--out", str(tmp_path / "r.pdf"))  # one level too high
    assert "holds no run itself" in err and "results/cpu-amd-epyc" in err
    assert not list(tmp_path.glob("*.pdf")) and not (top / "report.pdf").exists()


def test_report_writes_into_the_committed_tree_only_with_out(tmp_path, capsys, monkeypatch):
    from perflab.commands.report import committed
    from perflab.data import PROJECT_ROOT
    committed_pdf = (MAINJOB / "report.pdf").read_bytes()
    err = report_error(capsys, "--folder", str(MAINJOB))
    assert "is in the committed tree" in err and "pass --out PDF" in err
    assert (MAINJOB / "report.pdf").read_bytes() == committed_pdf
    copy = tmp_path / "results" / "machine"
    shutil.copytree(MAINJOB, copy, ignore=shutil.ignore_patterns("report.pdf"))
    monkeypatch.setattr(results, "RESULTS_ROOT", tmp_path / "results")  # a results/ outside the checkout
    err = report_error(capsys, "--folder", str(copy))
    assert "pass --out PDF" in err and not (copy / "report.pdf").exists()
    assert committed(PROJECT_ROOT / "docs" / "report.pdf")  # in the checkout, not ignored: git status would show it
    assert not committed(PROJECT_ROOT / "runs" / "some-machine" / "report.pdf")  # git-ignored
    assert not committed(tmp_path / "elsewhere" / "report.pdf")


def test_stopping_the_engines_is_quiet_unless_the_stop_fails(capsys):
    """ipyparallel logs every stop, and the engines' whole output as a warning (mpiexec, interrupted, exits 1): held
    back, and printed only where the stop itself fails. The engines stop before their controller."""
    class Cluster:
        log = logging.getLogger("perflab.test.cluster")
        fails = False

        def __init__(self):
            self.stopped = []

        def stop_engines_sync(self):
            self.stopped.append("engines")
            self.log.warning("Output for ipengine:\n" + "[IPEngine] line\n" * 200)
            self.log.warning("engine set stopped 1: {'exit_code': 1}")

        def stop_cluster_sync(self):
            self.stopped.append("cluster")
            self.log.info("Stopping controller")
            if self.fails:
                raise RuntimeError("controller did not stop")
    c = Cluster()
    c.log.handlers, c.log.propagate = [logging.StreamHandler(sys.stdout)], False  # as in a notebook
    c.log.setLevel(logging.INFO)
    cluster.stop(c)
    assert capsys.readouterr().out == "" and c.log.handlers[0].stream is sys.stdout  # the handler is back
    assert c.stopped == ["engines", "cluster"]
    c.fails = True
    with pytest.raises(RuntimeError, match="controller did not stop"):
        cluster.stop(c)
    out = capsys.readouterr().out
    assert "engine set stopped 1: {'exit_code': 1}" in out and out.count("[IPEngine] line") == 200
    cluster.stop(None)


def test_the_sweeps_progress_bar_is_plain_text():
    import tqdm.std
    assert sweep.progress_bar() is tqdm.std.tqdm  # tqdm.auto in a notebook without ipywidgets: `IProgress not found`


@pytest.fixture
def timed(monkeypatch):
    """A two-core machine without a GPU whose step and data set time as given (no timing of this host)."""
    monkeypatch.setattr(plan, "gpu_count", lambda: 0)
    monkeypatch.setattr(plan.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(plan, "step_rate", lambda backend, batch=1600: 1e11)
    monkeypatch.setattr(plan, "data_seconds", lambda N: 0.5)


def test_the_estimate_says_each_part_and_counts_the_ceilings_until_they_are_measured(tmp_path, timed):
    job = plan.roofline_plan(folder=tmp_path)
    parts = job.estimate_parts
    assert list(parts) == ["engines", "ceilings", "sweep", "the rest"] and all(v > 0 for v in parts.values())
    assert job.estimate_s == pytest.approx(sum(parts.values()))
    said = job.describe()
    assert f"should take about {job.estimate_s / 60:.1f} min: engines ~" in said
    assert f"ceilings ~{parts['ceilings']:.0f} s, sweep ~{parts['sweep']:.0f} s" in said
    one, two = (plan.ceilings_seconds(job, p, 1e11) for p in (1, 2))
    assert parts["ceilings"] == pytest.approx(one + two) and two > one  # two ranks time the step on a core each
    for p in (1, 2):  # measured before: skipped by the notebook, left out of the estimate
        (tmp_path / f"ceilings_p{p}.csv").write_text("x\n")
    pd.DataFrame([{**pt, "status": "measured"} for pt in job.points]).to_csv(tmp_path / "roofline.csv", index=False)
    again = plan.roofline_plan(folder=tmp_path).estimate_parts
    assert again["ceilings"] == 0 and again["sweep"] == 0 and again["engines"] == parts["engines"]


def test_a_point_is_its_epochs_its_data_sets_and_a_fixed_cost(timed):
    """H = 512, B = 1600, N = 38400 on one rank: 24 batches of 4 B H (784 + 10) FLOPs at 1e11 FLOP/s, three epochs
    (warm-up, timed, profiled), two data sets; on two ranks sharing the cores, the epoch of B lasts as long."""
    pt = sweep.grid(hidden=(512,), batch=(1600,), N=38400)[0]
    epoch = 24 * 4 * 1600 * 512 * 794 / 1e11
    assert plan.point_seconds(pt, 1e11, 0.5, shared=True) == pytest.approx(3 * epoch + 2 * 0.5 + plan.POINT_S + steadiness.POINT_SECONDS)
    assert plan.point_seconds({**pt, "p": 2}, 1e11, 0.5, shared=True) == pytest.approx(3 * epoch + 1 + plan.POINT_S + steadiness.POINT_SECONDS)
    short = {**pt, "N": 3200}  # two batches, 0.013 s an epoch: topped up to MIN_TIMED_SECONDS by a third training
    e = 2 * 4 * 1600 * 512 * 794 / 1e11
    more = sweep.epochs_to_fill(e, e)
    assert plan.point_seconds(short, 1e11, 0.5, shared=True) == pytest.approx((3 + more + 1) * e + 1.5 + plan.POINT_S + steadiness.POINT_SECONDS)


def test_a_first_gpu_run_says_it_compiles_and_the_gpu_ceilings_take_their_measured_time(tmp_path, monkeypatch):
    monkeypatch.setattr(plan, "gpu_count", lambda: 1)
    monkeypatch.setattr(plan.os, "cpu_count", lambda: 16)
    monkeypatch.setattr(plan, "step_rate", lambda backend, batch=1600: 2e13)
    monkeypatch.setattr(plan, "data_seconds", lambda N: 1.0)
    monkeypatch.setenv("CUPY_CACHE_DIR", str(tmp_path / "cache"))  # none yet: a first GPU run
    parts = plan.roofline_plan(folder=tmp_path).estimate_parts
    assert parts["ceilings"] == plan.GPU_CEILINGS_S[0] and any(k.startswith("kernel compilation") for k in parts)
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "kernel.cubin").write_bytes(b"x")
    assert not any(k.startswith("kernel compilation") for k in plan.roofline_plan(folder=tmp_path).estimate_parts)


def test_the_run_keeps_each_parts_estimate_and_time_and_says_the_last_runs(tmp_path):
    """plan.record_part / timed_part / estimate_lines: a run's rows after its start row; a part that failed is not
    written; a run not finished (no whole-job row) says its parts alone; a part a resumed run found done is left out."""
    plan.record_part(tmp_path, plan.JOB_STARTED, 100.0, 0.0)
    plan.record_part(tmp_path, "ceilings", 40.0, 90.0)
    plan.record_part(tmp_path, plan.WHOLE_JOB, 100.0, 130.0)  # an earlier run
    plan.record_part(tmp_path, plan.JOB_STARTED, 60.0, 0.0)
    plan.record_part(tmp_path, "ceilings", 0.0, 0.01)  # measured by the earlier run: nothing to say
    with plan.timed_part(tmp_path, "sweep", 50.0):
        pass
    with pytest.raises(RuntimeError), plan.timed_part(tmp_path, "Problem 1 hidden", 10.0):
        raise RuntimeError("stopped")
    table = plan.last_run_parts(tmp_path)
    assert list(table.part) == ["ceilings", "sweep"] and table.measured_s.iloc[1] < 5
    lines = plan.estimate_lines(tmp_path)
    assert lines == [f"Part by part: sweep {table.measured_s.iloc[1]:.0f} s (estimated 50 s, -100%)."]
    plan.record_part(tmp_path, plan.WHOLE_JOB, 60.0, 75.0)
    assert list(plan.last_run_parts(tmp_path).part) == ["ceilings", "sweep", plan.WHOLE_JOB]
    assert plan.estimate_lines(tmp_path)[0] == ("The main job took 1.2 min; its first cell estimated 1.0 min (+25%).")
    assert plan.estimate_lines(tmp_path / "none") == []
    (tmp_path / plan.PARTS_FILE).write_text("")  # cut while it was written: the report says so, and goes on
    assert "mainjob_parts.csv is empty: the run was stopped while it wrote it" in plan.estimate_lines(tmp_path)[0]


def test_a_sweep_row_says_how_long_its_point_took_from_set_up_to_row(tmp_path):
    import time

    class View:  # the engines, each point taking 0.2 s
        def apply_sync(self, fn, point, dataset, timeout, where):
            time.sleep(0.2)
            return [{**point, "status": "measured", "epoch_seconds": 0.01}, None]
    points = sweep.grid(hidden=(8, 12), batch=(100,), N=400)
    sweep.run_grid_engines(View(), points, "walled", out=tmp_path, progress=False, log=lambda _: None)
    assert (pd.read_csv(tmp_path / "walled.csv").point_wall_s >= 0.2).all()
    path = sweep.run_grid_mpi(points, "trained", out=tmp_path, progress=False, log=lambda _: None)  # one rank, here
    table = pd.read_csv(path)
    assert (table.status == "measured").all() and (table.point_wall_s > table.epoch_seconds).all()


def test_a_gpu_point_is_its_epochs_and_the_gpu_points_fixed_cost():
    """On a GPU the data sets are in GPU_POINT_S (D60): the time to make one does not move the estimate."""
    pt = {**sweep.grid(hidden=(512,), batch=(1600,), N=38400)[0], "backend": "cupy"}
    epoch = 24 * 4 * 1600 * 512 * 794 / 2e13  # 2.5 ms: warm-up, timed, topped up to the minimum, profiled
    seconds = plan.point_seconds(pt, 2e13, 0.5, shared=False)
    assert seconds == plan.point_seconds(pt, 2e13, 50.0, shared=False)
    assert plan.GPU_POINT_S + 3 * epoch < seconds < plan.GPU_POINT_S + 1.0
