"""ipyparallel clusters of MPI engines for the notebooks.

Users type `ipcluster start -n 4 --engines=mpi`; from Python, `start(4)` does the same and
returns (cluster, client). A notebook first tries a running cluster (`connect()`), then
starts its own. The controller listens on localhost unless `ip` says otherwise (on a cluster,
engines on other nodes need a reachable interface: `ip="*"` or the node's address).
"""
from __future__ import annotations

import logging
import os
import shutil
import sys
import warnings
from pathlib import Path


class ClusterError(RuntimeError):
    pass


# ipyparallel imports tqdm.auto, which warns in a notebook without ipywidgets; the notebooks' own bars are plain text
warnings.filterwarnings("ignore", message="IProgress not found")

CLUSTER_ID_ENV = "PERFLAB_CLUSTER_ID"  # the id a notebook's own cluster takes (stop_named stops it)
# The controller counts an engine in only at the second heartbeat ping after it registered, so a start waits one to two
# ping periods. A ping ten times as often as ipyparallel's default, with ten times the misses allowed, waits a tenth
# as long and keeps how long an engine may stay silent before the controller drops it.
HEARTBEAT_ARGS = ["--HeartMonitor.period=300", "--HeartMonitor.max_heartmonitor_misses=100"]


def stop_named(cluster_id: str) -> bool:
    """Stop the cluster a notebook started under `cluster_id` if it still runs (the notebook stopped before
    its last cell, which stops it: its controller and engines lived on after the command, holding memory
    and polling cores). True where one was stopped."""
    import ipyparallel as ipp
    try:
        cluster = ipp.Cluster.from_file(cluster_id=cluster_id)
    except (FileNotFoundError, OSError):
        return False
    stop(cluster)
    return True


def mpi_path() -> None:
    """Put this interpreter's bin/ (where the mpich wheel's mpiexec lives) first on PATH, so
    ipcluster's MPI launcher finds the same MPI as mpi4py."""
    bindir = str(Path(sys.executable).parent)
    if not os.environ.get("PATH", "").startswith(bindir):
        os.environ["PATH"] = bindir + os.pathsep + os.environ.get("PATH", "")


def connection_file(profile: str = "default") -> Path:
    """Where a running cluster of the profile (`ipcluster start`'s) keeps its clients' connection file."""
    from IPython.paths import get_ipython_dir
    return Path(get_ipython_dir()) / f"profile_{profile}" / "security" / "ipcontroller-client.json"


def connect(profile: str = "default", timeout: float = 5.0):
    """A client of a running cluster, or None when none answers. Without the connection file none runs: None at
    once (ipyparallel's client would wait `timeout` for the file to appear)."""
    import ipyparallel as ipp
    if not connection_file(profile).exists():
        return None
    try:
        client = ipp.Client(profile=profile, timeout=timeout)
        client.wait_for_engines(1, timeout=timeout)
        return client
    except Exception:  # no connection file, or a stale one: nothing is running
        return None


def start(n: int = 2, ip: str | None = None, timeout: float = 120.0):
    """Start n MPI engines (oversubscribed if the machine has fewer cores); (cluster, client)."""
    import ipyparallel as ipp
    mpi_path()
    if shutil.which("mpiexec") is None:
        raise ClusterError("no mpiexec on PATH: pip install mpich (or load your MPI module), then retry")
    controller_args = ([f"--ip={ip}"] if ip else []) + HEARTBEAT_ARGS
    # under `perflab notebook` the cluster is named, so the command can stop it when the notebook stops early
    # (elsewhere ipyparallel's own unique id: an empty one would be the profile's default cluster)
    named = {"cluster_id": os.environ[CLUSTER_ID_ENV]} if os.environ.get(CLUSTER_ID_ENV) else {}
    cluster = ipp.Cluster(engines="mpi", n=n, controller_args=controller_args, **named)
    try:
        client = cluster.start_and_connect_sync(activate=True)
        client.wait_for_engines(n, timeout=timeout)
    except Exception as exc:
        output = ""
        try:
            output = cluster.engine_set.get_output() if cluster.engine_set else ""
        except Exception:
            pass
        try:
            cluster.stop_cluster_sync()
        except Exception:
            pass
        raise ClusterError(f"could not start {n} MPI engines ({type(exc).__name__}: {exc}). What mpiexec printed:\n"
                           f"{output}\nStart them by hand to see why: ipcluster start -n {n} --engines=mpi") from None
    return cluster, client


def engines(n: int = 2, ip: str | None = None):
    """(cluster or None, client, view of every engine): a running cluster with at least n
    engines, or a new one of n. The view spans all engines because each point's ranks are
    carved out of their MPI world, which every engine must enter. Stop a started cluster
    with `stop(cluster)`."""
    client = connect()
    if client is not None and len(client.ids) >= n and runs_this_code(client):
        return None, client, client[:]
    if client is not None:
        client.close()
    cluster, client = start(n, ip)
    return cluster, client, client[:]


def package_dir() -> str:
    import perflab
    return str(Path(perflab.__file__).resolve().parent)


def runs_this_code(client) -> bool:
    """Whether every engine of a running cluster imports perflab from where this process does: a cluster
    left by another checkout (or an earlier notebook of a fresh clone) would run its own code, not this."""
    try:
        return set(client[:].apply_sync(package_dir)) == {package_dir()}
    except Exception:  # an engine that cannot answer is no cluster to use
        return False


def stop(cluster) -> None:
    """Stop a cluster this process started, quietly: ipyparallel logs every stop, and the engines' whole
    output as a warning because mpiexec, interrupted, exits 1 (about 200 lines of ipengine log and
    `engine set stopped: exit_code 1` at the end of every notebook). Its log is held back while it stops and
    printed only where the stop itself fails. The engines stop first: engines whose controller is gone linger
    for seconds before they exit."""
    if cluster is None:
        return
    with HeldLog(cluster.log) as held:
        try:
            try:
                cluster.stop_engines_sync()
            finally:
                cluster.stop_cluster_sync()
        except BaseException:
            held.show()
            raise


class HeldLog(logging.Handler):
    """A context in which a logger's records are kept here instead of printed; show() prints them
    to the handlers the logger had (or stderr where it had none)."""

    def __init__(self, log: logging.Logger):
        super().__init__(logging.DEBUG)
        self.log, self.records = log, []

    def emit(self, record) -> None:
        self.records.append(record)

    def __enter__(self):
        self.saved = (self.log.handlers, self.log.propagate)
        self.log.handlers, self.log.propagate = [self], False
        return self

    def __exit__(self, *exc) -> None:
        self.log.handlers, self.log.propagate = self.saved

    def show(self) -> None:
        handlers = self.saved[0] or [logging.StreamHandler(sys.stderr)]
        for record in self.records:
            for handler in handlers:
                if record.levelno >= handler.level:
                    handler.handle(record)
        self.records = []
