import os
import shutil
import subprocess
import sys
import time
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest


def compile_package(root) -> None:
    """Write the bytecode of the package under `root` once, as `make test` does before pytest: where
    PYTHONDONTWRITEBYTECODE is set Python writes none itself, and every process a test starts (MPI ranks, engines,
    notebook kernels, `perflab` commands) would compile the package from its sources again."""
    import compileall
    compileall.compile_dir(str(root / "perflab"), quiet=1)


def pytest_sessionstart(session):
    from perflab.data import PROJECT_ROOT
    compile_package(PROJECT_ROOT)


@pytest.fixture(autouse=True)
def figures_closed():
    """Each test's matplotlib figures closed after it: a worker that ran twenty figure tests warned of open ones."""
    yield
    import sys
    if "matplotlib.pyplot" in sys.modules:
        sys.modules["matplotlib.pyplot"].close("all")


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


# the main job's small sizes: two widths, one of them a deeper net, two batches, two engines, Problem 1's smallest version
MAIN_JOB = ["-p", "hidden", "['32-32', 64]", "-p", "per_rank_batch", "100", "-p", "batch_sweep", "[100, 400]",
            "-p", "N", "800", "-p", "engines", "2", "-p", "problem1_minutes", "0.1"]


def host_probed_after_the_sweep(run) -> bool:
    """Whether the main job has probed the host after its sweep (perflab.measure.steadiness.record's `end` row)."""
    try:
        return "end" in set(pd.read_csv(run / "steadiness.csv").stage.astype(str))
    except (OSError, ValueError, AttributeError, pd.errors.EmptyDataError):
        return False


@pytest.fixture(scope="session")
def loaded_main_job(tmp_path_factory):
    """The README's `make roofline` (perflab notebook roofline, then perflab report) with small sizes, in a copy of
    this tree committed as a fresh clone, while another program holds a core (a student's laptop): from before the
    job starts until it has probed the host after its sweep, so its first probe, its ceilings, its sweep and its
    last probe all run loaded (what the report judges its noise by); the rest of the job (Problem 1, the report)
    runs without it. Once a session: test_mainjob checks the clone and the outputs, test_noisy_mainjob what the
    report says of the noise. SimpleNamespace(clone, run, procs: the two commands' CompletedProcess)."""
    from perflab import results
    from perflab.data import PROJECT_ROOT
    clone = tmp_path_factory.mktemp("main_job") / "clone"
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=PROJECT_ROOT,
                            capture_output=True, text=True, check=True).stdout.split("\0")
    for name in filter(None, listed):
        source = PROJECT_ROOT / name
        if source.is_file():
            (clone / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, clone / name)
    git = lambda *a: subprocess.run(["git", *a], cwd=clone, capture_output=True, text=True, check=True).stdout
    git("init", "-q")
    git("add", "-A")
    git("-c", "user.name=t", "-c", "user.email=t@localhost", "commit", "-q", "-m", "clone")
    compile_package(clone)  # as a first import writes it where PYTHONDONTWRITEBYTECODE is not set (git ignores it)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PERFLAB_")}
    env["PYTHONPATH"] = str(clone)  # the clone's package, as its own `pip install -e .` would give (kernel, engines)
    run = clone / "runs" / results.machine_key()
    procs = []
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])  # another program on one core
    try:
        for command, timeout in ((["notebook", "roofline", *MAIN_JOB, "--json"], 1200), (["report", "--json"], 600)):
            out, err = (clone.parent / f"{command[0]}.{stream}" for stream in ("out", "err"))
            with open(out, "w") as stdout, open(err, "w") as stderr:
                proc = subprocess.Popen([sys.executable, "-m", "perflab", *command], cwd=clone, stdout=stdout,
                                        stderr=stderr, text=True, env=env)
                start = time.monotonic()
                while busy.poll() is None and proc.poll() is None and time.monotonic() - start < timeout:
                    if host_probed_after_the_sweep(run):
                        busy.kill()
                    time.sleep(0.5)
                try:
                    proc.wait(timeout=max(1.0, timeout - (time.monotonic() - start)))
                except subprocess.TimeoutExpired:
                    proc.kill()
                    raise
            procs.append(subprocess.CompletedProcess(proc.args, proc.returncode, out.read_text(), err.read_text()))
            if proc.returncode != 0:
                break
    finally:
        busy.kill()
        busy.wait()
    return SimpleNamespace(clone=clone, run=run, procs=procs, git=git)


@pytest.fixture(scope="session")
def report_run_answers(tmp_path_factory):
    """Where the answers to every question of REPORT.md's run (the committed two-GPU main job) go, drawn once a
    session: REPORT.md's test, the outline's and the PDF's each answer them all from the same files into the same
    figures folder (seconds of drawing each time). SimpleNamespace(figures, pdf: a report.pdf whose figures folder
    that is, answered: {(run folder, sweeps): answer_all's answers})."""
    folder = tmp_path_factory.mktemp("report_run")
    return SimpleNamespace(figures=folder / "report_figures", pdf=folder / "report.pdf", answered={})


@pytest.fixture
def answered_once(report_run_answers, monkeypatch):
    """questions.answer_all answering a run whose figures go to report_run_answers.figures once a session, the
    same answers to each later call on the same folder and sweeps; any other run as before."""
    from perflab.report import questions
    answer_all = questions.answer_all

    def once(run):
        if run.figures.resolve() != report_run_answers.figures.resolve():
            return answer_all(run)
        key = (run.folder.resolve(), tuple(str(s) for s in run.sweeps))
        if key not in report_run_answers.answered:
            report_run_answers.answered[key] = answer_all(run)
        return report_run_answers.answered[key]
    monkeypatch.setattr(questions, "answer_all", once)
    return report_run_answers
