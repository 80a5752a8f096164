"""ipyparallel clusters of MPI engines for the notebooks.

Users type `ipcluster start -n 4 --engines=mpi`; from Python, `start(4)` does the same and
returns (cluster, client). A notebook first tries a running cluster (`connect()`), then
starts its own. The controller listens on localhost unless `ip` says otherwise (on a cluster,
engines on other nodes need a reachable interface: `ip="*"` or the node's address).
"""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path


class ClusterError(RuntimeError):
    pass


def mpi_path() -> None:
    """Put this interpreter's bin/ (where the mpich wheel's mpiexec lives) first on PATH, so
    ipcluster's MPI launcher finds the same MPI as mpi4py."""
    bindir = str(Path(sys.executable).parent)
    if not os.environ.get("PATH", "").startswith(bindir):
        os.environ["PATH"] = bindir + os.pathsep + os.environ.get("PATH", "")


def connect(profile: str = "default", timeout: float = 5.0):
    """A client of a running cluster, or None when none answers."""
    import ipyparallel as ipp
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
    controller_args = [f"--ip={ip}"] if ip else []
    cluster = ipp.Cluster(engines="mpi", n=n, controller_args=controller_args)
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
    if client is not None and len(client.ids) >= n:
        return None, client, client[:]
    if client is not None:
        client.close()
    cluster, client = start(n, ip)
    return cluster, client, client[:]


def stop(cluster) -> None:
    if cluster is not None:
        cluster.stop_cluster_sync()
