"""CI executes every notebook end to end with small parameters, on local MPI engines (the roofline
notebook, the main job, runs in a fresh clone in test_mainjob)."""
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.mpi


SMALL = {
    "correctness": ["-p", "N", "300", "-p", "hidden", "12", "-p", "B", "31"],
    "convergence": ["-p", "N", "1000", "-p", "test_size", "200", "-p", "epochs", "2", "-p", "rates", "[0.1, 1.0]",
                    "-p", "hidden_sizes", "[16, 32]"],
    "scaling": [],
    # Q1.1's MPI check and Q1.2's drift run in the main job's Problem 1 (test_mainjob); here their answers say how
    "problem1": ["-p", "budget_minutes", "0.1", "-p", "hidden", "[16, 64]", "-p", "parts", "['rates', 'hidden']"],
    "kernels": [],
    "usc": ["-p", "cores", "[1, 2]", "-p", "batch", "200", "-p", "N", "1000", "-p", "epochs", "2", "-p", "gpu", "False"],
    "precision": ["-p", "hidden", "[12]", "-p", "N", "300", "-p", "B", "31", "-p", "dataset", "synthetic"],
}


@pytest.mark.slow  # make test-all: each notebook end to end on MPI engines
@pytest.mark.parametrize("name", sorted(SMALL))
def test_other_notebooks_run_and_write_figures(tmp_path, name):
    """Each notebook end to end with small parameters; the result-reading ones get the committed
    GPU result files, as a user's clone has them."""
    import shutil

    from perflab.results import RESULTS_ROOT
    for folder in RESULTS_ROOT.glob("nvidia-*"):
        shutil.copytree(folder, tmp_path / folder.name)
    env = {**os.environ, "PERFLAB_RESULTS": str(tmp_path), "PERFLAB_RUN_DIR": str(tmp_path / "run")}
    proc = subprocess.run([sys.executable, "-m", "perflab", "notebook", name, *SMALL[name], "--json"],
                          capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "run" / "notebooks" / f"{name}.ipynb").exists()
    pngs = list((tmp_path / "run" / "figures").glob("*.png"))
    assert pngs and all(p.stat().st_size > 10_000 for p in pngs)
    assert all(p.with_suffix(".pdf").exists() and p.with_suffix(".txt").read_text().strip() for p in pngs)


@pytest.mark.slow  # make test-all: runs the notebook to its failing cell
def test_a_notebook_that_stops_says_where_and_why_in_one_line_and_keeps_what_it_ran(tmp_path):
    env = {**os.environ, "PERFLAB_RUN_DIR": str(tmp_path / "run")}
    proc = subprocess.run([sys.executable, "-m", "perflab", "notebook", "correctness", "-p", "N", "-5", "--json"],
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith(
        "perflab: error: notebook correctness stopped in cell 3: ConfigError: train_size must be a positive integer, "
        "got -5 (the failed run's notebook, with the whole traceback: ")
    assert (tmp_path / "run" / "notebooks" / "correctness.failed.ipynb").exists()  # kept, with its traceback
    assert not (tmp_path / "run" / "notebooks" / "correctness.ipynb").exists()  # no good run yet: none in its place


def test_a_running_cluster_is_used_only_where_its_engines_run_this_code(monkeypatch):
    """A cluster another checkout left running (or a fresh clone's beside this one) would run its own code:
    the notebooks start their own then. Where the engines import perflab from here, it is used."""
    from perflab.workbook import cluster

    class View:
        def __init__(self, dirs):
            self.dirs = dirs

        def apply_sync(self, f):
            return self.dirs

    class Client:
        def __init__(self, dirs):
            self.view = View(dirs)

        def __getitem__(self, key):
            return self.view
    here = cluster.package_dir()
    assert cluster.runs_this_code(Client([here, here]))
    assert not cluster.runs_this_code(Client([here, "/elsewhere/perflab"]))
    assert not cluster.stop_named("perflab-no-such-cluster")  # nothing named so: nothing stopped


def test_without_its_connection_file_no_cluster_is_waited_for(monkeypatch, tmp_path):
    """A notebook asks for a running cluster first: where the profile holds no connection file none runs, and
    connect() says so at once (ipyparallel's client would wait its whole timeout for the file to appear)."""
    import ipyparallel as ipp

    from perflab.workbook import cluster
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path))
    (tmp_path / "profile_default" / "security").mkdir(parents=True)
    monkeypatch.setattr(ipp, "Client", lambda **kw: pytest.fail("a client was made without a connection file"))
    assert cluster.connection_file() == tmp_path / "profile_default" / "security" / "ipcontroller-client.json"
    assert cluster.connect() is None


@pytest.mark.slow  # make test-all: starts and stops MPI engines
def test_a_notebook_that_stops_after_starting_engines_leaves_none_running(tmp_path):
    """The correctness notebook with a width model parallel cannot split over two ranks fails on the engines
    it started: the command stops them (they outlived the notebook before, holding memory and polling cores)."""
    import glob

    env = {**os.environ, "PERFLAB_RUN_DIR": str(tmp_path / "run"), "IPYTHONDIR": str(tmp_path / "ipython")}
    proc = subprocess.run([sys.executable, "-m", "perflab", "notebook", "correctness", "-p", "hidden", "1", "-p", "N",
                           "300", "-p", "B", "31", "--json"], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 2 and "stopped in cell" in proc.stderr, proc.stderr[-2000:]
    assert "stopped the MPI engines notebook correctness had started" in proc.stderr
    assert glob.glob(str(tmp_path / "ipython" / "profile_default" / "security" / "cluster-perflab-*.json")) == []


def test_only_perflab_notebook_names_the_cluster_it_starts(monkeypatch):
    """Under `perflab notebook` the cluster takes the command's id (so it can stop it); elsewhere ipyparallel's own
    unique one: an empty id would make it the profile's default cluster, which every client finds."""
    import ipyparallel as ipp

    from perflab.workbook import cluster
    seen = {}

    class Stop(Exception):
        pass

    def made(**kwargs):
        seen.clear()
        seen.update(kwargs)
        raise Stop
    monkeypatch.setattr(ipp, "Cluster", made)
    monkeypatch.delenv(cluster.CLUSTER_ID_ENV, raising=False)
    with pytest.raises(Stop):
        cluster.start(1)
    assert "cluster_id" not in seen and seen["n"] == 1
    monkeypatch.setenv(cluster.CLUSTER_ID_ENV, "perflab-x-1")
    with pytest.raises(Stop):
        cluster.start(1)
    assert seen["cluster_id"] == "perflab-x-1"
