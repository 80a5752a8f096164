"""Result files: tidy CSV rows appended as they come, a JSON of machine metadata beside them.

Two places, never mixed:
- a run's own folder, `runs/<machine key>/` (git-ignored; `PERFLAB_RUN_DIR` overrides): what
  this machine measures and draws (`<experiment>.csv` + `.json`, `figures/`, `notebooks/`,
  `report.pdf`). The key tells machines apart, so another machine's runs are never resumed as
  this one's; a rerun on the same machine resumes point by point.
- the results root, RESULTS_ROOT (`PERFLAB_RESULTS` overrides): the committed campaign, read by the report and the
  README, written only by developers who copy a run folder there.
Rows are appended and flushed one batch at a time, so a crash loses at most the point in
flight and a rerun can skip what is done.
"""
from __future__ import annotations

import csv
import datetime
import functools
import json
import os
import platform
import re
import subprocess
import sys
from pathlib import Path

from perflab.data import PROJECT_ROOT, atomic_write

RESULTS_ROOT = Path(os.environ.get("PERFLAB_RESULTS", PROJECT_ROOT / "results"))
RUNS_ROOT = PROJECT_ROOT / "runs"


class ResultFileError(ValueError):
    """A result file that is empty, not a CSV table, or not the table it should be; the message names the
    file, what it lacks and what writes the right one."""


def read_table(path, needs: tuple, what: str):
    """The CSV table at path, which must hold the columns `needs`; `what` says what writes such a file."""
    import pandas as pd
    path = Path(path)
    try:
        table = pd.read_csv(path)
    except pd.errors.EmptyDataError:
        raise ResultFileError(f"{relative(path)}: the file is empty; {what}") from None
    except (pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise ResultFileError(f"{relative(path)}: not a CSV table ({str(exc).strip()}); {what}") from None
    missing = [c for c in needs if c not in table]
    if missing:
        raise ResultFileError(f"{relative(path)}: no {', '.join(repr(c) for c in missing)} column{'s' * (len(missing) > 1)} (it has "
                              f"{', '.join(map(str, table.columns[:6]))}); {what}")
    return table


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def gpu_info() -> dict:
    """Name, driver and count of the visible NVIDIA GPUs (empty when there are none)."""
    from perflab.backend import cupy_or_none
    cp = cupy_or_none()
    if cp is None:
        return {}
    props = cp.cuda.runtime.getDeviceProperties(0)
    return {"gpu": props["name"].decode(), "gpu_count": cp.cuda.runtime.getDeviceCount(),
            "driver": cp.cuda.runtime.driverGetVersion(), "cuda_runtime": cp.cuda.runtime.runtimeGetVersion(),
            "cupy": cp.__version__}


def git_commit() -> str:
    """HEAD of the checkout, "-dirty" after it where the code (perflab/, scripts/) differs from
    HEAD, so a number is never credited to a commit that did not make it (a copied tree can
    carry a stale .git); or PERFLAB_GIT_COMMIT where the tree travelled without .git (the GPU
    machines get a copy of the working tree)."""
    if os.environ.get("PERFLAB_GIT_COMMIT"):
        return os.environ["PERFLAB_GIT_COMMIT"]
    try:
        def git(*args):
            return subprocess.run(["git", *args], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=5).stdout
        head = git("rev-parse", "HEAD").strip()
        changed = git("status", "--porcelain", "--untracked-files=no", "--", "perflab", "scripts").strip()
        return (head + "-dirty" * bool(changed)) if head else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def machine_metadata() -> dict:
    import numpy
    meta = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "host": platform.node(), "cpu": cpu_model(), "cpu_count": os.cpu_count(),
            "python": sys.version.split()[0], "numpy": numpy.__version__, "git_commit": git_commit(),
            "fingerprint": host_fingerprint(), "boot": boot_id()}
    try:
        from mpi4py import MPI
        meta["mpi"] = MPI.Get_library_version().splitlines()[0].strip().strip("\x00")
    except Exception:  # mpi4py missing or MPI not loadable: metadata only
        pass
    meta.update(gpu_info())
    return meta


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:60]


def machine_name(meta: dict | None = None) -> str:
    """The committed campaign's folder name: the GPU model where there is one, else the CPU's."""
    meta = meta or machine_metadata()
    return slug(meta.get("gpu") or f"cpu-{meta['cpu']}")


def boot_id() -> str:
    """Eight hex digits of this boot of the kernel: two boots of one device image (the same host name
    and machine-id, so the same fingerprint) differ, and their host-side speeds do."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip().replace("-", "")[:8]
    except OSError:
        return ""


def host_fingerprint() -> str:
    """Six hex digits from the host name and /etc/machine-id: two machines of one model differ."""
    import hashlib
    try:
        machine_id = Path("/etc/machine-id").read_text().strip()
    except OSError:
        machine_id = ""
    return hashlib.sha256(f"{platform.node()}|{machine_id}".encode()).hexdigest()[:6]


def machine_key(meta: dict | None = None) -> str:
    """This machine's run-folder name: GPU model and count (or CPU model), cores, host fingerprint,
    e.g. `nvidia-h100-80gb-hbm3-x1-16c-3f9a1c` or `cpu-amd-epyc-2c-5be02d`."""
    if meta is None:
        return this_machine_key()
    gpus = f"-x{meta.get('gpu_count', 1)}" if meta.get("gpu") else ""
    return f"{machine_name(meta)}{gpus}-{meta['cpu_count']}c-{meta.get('fingerprint') or host_fingerprint()}"


@functools.lru_cache(maxsize=1)
def this_machine_key() -> str:
    """machine_key of this process's machine, worked out once (the metadata asks git, MPI and the
    GPU; every figure saved asks for the run folder)."""
    return machine_key(machine_metadata())


def run_dir(meta: dict | None = None) -> Path:
    """Where this machine's run writes: PERFLAB_RUN_DIR, else runs/<machine key>/."""
    if os.environ.get("PERFLAB_RUN_DIR"):
        return Path(os.environ["PERFLAB_RUN_DIR"])
    return RUNS_ROOT / machine_key(meta)


def relative(path) -> str:
    """A path as result files and the terminal name it: from the repository's root where it lies inside
    it (results travel between machines; the writer's checkout means nothing elsewhere), else as given."""
    path = Path(path)
    try:
        return str(path.resolve().relative_to(PROJECT_ROOT.resolve()))
    except ValueError:
        return str(path)


def relative_text(text: str) -> str:
    """text with the repository's root left out of every path that names it (an executed notebook's
    printed lines and metadata)."""
    root = str(PROJECT_ROOT.resolve())
    return text.replace(root + "/", "").replace(root, ".")


def made_on(path) -> dict:
    """The machine and commit a result file came from, from the metadata JSON beside it (nulls where
    there is none): what a prediction or a validation names for each file it used."""
    meta_path = Path(path).with_suffix(".json")
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
    return {k: meta.get(k) for k in ("gpu", "gpu_count", "cpu", "cpu_count", "git_commit", "date")}


def write_rows(path, rows: list[dict], meta: dict | None = None, append: bool = True) -> Path:
    """Append (or replace) tidy rows in a CSV, flushed at once; write the metadata JSON.
    A row with a column the file lacks rewrites the file (atomically) with the union."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fields = list(dict.fromkeys(k for row in rows for k in row))
    old = []
    if append and path.exists() and path.stat().st_size > 0:
        with path.open(newline="") as f:
            reader = csv.DictReader(f)
            header = list(reader.fieldnames or [])
            if set(fields) <= set(header):
                fields, old = header, None
            else:
                old = list(reader)
                fields = list(dict.fromkeys(header + fields))
    if old is None:  # plain append under the existing header
        with path.open("a", newline="") as f:
            csv.DictWriter(f, fieldnames=fields).writerows(rows)
            f.flush()
            os.fsync(f.fileno())
    else:
        import io
        text = io.StringIO()
        writer = csv.DictWriter(text, fieldnames=fields)
        writer.writeheader()
        writer.writerows(old + rows)
        atomic_write(path, text.getvalue().encode())
    if meta is not None:
        atomic_write(path.with_suffix(".json"), (json.dumps(meta, indent=1, default=str) + "\n").encode())
    return path
