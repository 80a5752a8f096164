"""Stop one rank of an MPI job mid-run (SIGSTOP, as a hung node would) and report how the job ends: the
watchdog's test (perflab.train.watchdog), on the CPU in CI and on the GPUs with the device.

  python scripts/freeze_rank.py [--rank 1] [--after 4] [--limit 180] [--json OUT] -- mpiexec -n 2 perflab train ...

The rank's process is found by an environment token this script sets and the launcher's rank variable
(PMI_RANK under MPICH, OMPI_COMM_WORLD_RANK under Open MPI). Prints one JSON object: the exit status, the
seconds from the freeze to the job's end, and the lines the job wrote to stderr."""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import uuid

RANK_VARS = (b"PMI_RANK", b"OMPI_COMM_WORLD_RANK")


def rank_pids(token: str) -> dict[int, int]:
    """{rank: pid} of the processes that carry `token` and a launcher's rank variable."""
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = dict(x.split(b"=", 1) for x in f.read().split(b"\0") if b"=" in x)
        except OSError:
            continue
        rank = next((env[v] for v in RANK_VARS if v in env), None)
        if env.get(b"PERFLAB_FREEZE_TOKEN") == token.encode() and rank is not None:
            found.setdefault(int(rank), int(pid))  # the first: a rank's own children carry it too
    return found


def freeze(command: list[str], rank: int = 1, after: float = 4.0, limit: float = 180.0, when: str = "epoch ",
           when_file: str | None = None) -> dict:
    """Run `command`; `after` seconds past the first stdout line holding `when` (training has begun), or past
    the moment `when_file` holds a row under its header (a sweep's first point written), stop `rank`; wait up
    to `limit` seconds for the job to end."""
    import threading
    token = uuid.uuid4().hex
    proc = subprocess.Popen(command, env={**os.environ, "PERFLAB_FREEZE_TOKEN": token},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    said, began = [], threading.Event()

    def read():
        for line in proc.stdout:
            said.append(line)
            if when in line:
                began.set()
    threading.Thread(target=read, daemon=True).start()
    errors = []
    threading.Thread(target=lambda: errors.extend(proc.stderr), daemon=True).start()
    started = time.monotonic()
    while not began.wait(0.1) and proc.poll() is None and time.monotonic() - started < limit:
        if when_file and os.path.exists(when_file):
            with open(when_file) as f:
                if len(f.read().splitlines()) >= 2:
                    began.set()
    pid = rank_pids(token).get(rank) if began.is_set() else None
    if pid is None:
        proc.kill()
        proc.wait()
        return {"frozen": False, "exit_status": proc.returncode, "stderr": [e.rstrip() for e in errors][-20:],
                "why": f"no stdout line with {when!r}, or rank {rank} not found, within {limit} s"}
    time.sleep(after)
    alive = proc.poll() is None
    if alive:
        os.kill(pid, signal.SIGSTOP)
    frozen_at = time.monotonic()
    try:
        proc.wait(timeout=limit)
        ended = True
    except subprocess.TimeoutExpired:
        ended = False
        proc.kill()
        proc.wait()
    time.sleep(0.5)  # the readers' last lines
    for p in rank_pids(token).values():  # whatever the launcher left behind
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass
    return {"frozen": alive, "rank": rank, "after_s": after, "ended": ended, "exit_status": proc.returncode,
            "seconds_after_freeze": round(time.monotonic() - frozen_at, 2), "limit_s": limit,
            "command": command, "stdout_lines": len(said), "stderr": [e.rstrip() for e in errors if e.strip()][-40:]}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rank", type=int, default=1, help="the rank to stop (default %(default)s)")
    parser.add_argument("--after", type=float, default=4.0,
                        help="seconds after the first stdout line holding --when (default %(default)s)")
    parser.add_argument("--when", default="epoch ", help="the text that says training has begun (default %(default)r)")
    parser.add_argument("--when-file", default=None, help="instead: the file (a sweep's CSV) whose first row says so")
    parser.add_argument("--limit", type=float, default=180.0, help="seconds to wait for the job's end before killing "
                                                                   "it (default %(default)s)")
    parser.add_argument("--json", default=None, help="also write the report here")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- the MPI job")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    from perflab.results import machine_metadata
    report = {**freeze(command, args.rank, args.after, args.limit, args.when, args.when_file), "machine": machine_metadata()}
    text = json.dumps(report)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
