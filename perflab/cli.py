"""`perflab` command line. Every command takes --json: its last stdout line is then one JSON object.
Each room's commands live in perflab.commands.<room>; this puts them in one parser and runs one."""
from __future__ import annotations

import argparse
import json
import sys

from perflab.commands import analysis, data, measure, report, train, workbook
from perflab.commands.options import CLIError, no_cupy, option_names
from perflab.config import ConfigError
from perflab.data import DataError
from perflab.train.loop import Stopped
from perflab.train.watchdog import say_line

ROOMS = (train, workbook, measure, analysis, report, data)  # a new command goes in its room's register()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="perflab",
        description="Train the seeds' MLPs (784-H-10 and deeper, 784-H1-H2-...-10; sigmoid, softmax + cross-entropy, "
                    "L2, SGD) on the CPU and on GPUs, over MPI ranks; measure them, predict them, report. "
                    "`perflab COMMAND --help` explains each command; docs/COMMANDS.md says what each is for.",
        epilog="Start with `make roofline` (the main job: this machine measured, predicted and reported) or "
               "`perflab train --help`.")
    from perflab import __version__
    parser.add_argument("--version", action="version", version=f"perflab {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for room in ROOMS:
        room.register(sub)
    return parser


def main(argv=None) -> int:
    """Parse, run on this rank, print once. A failure on one rank ends them all: a bad
    value (the same on every rank) exits 2 with one message; anything else prints the
    rank's error and aborts the MPI job, so no rank waits forever in a collective."""
    from perflab.train.comm import world

    comm = world()
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        args.argv = list(sys.argv[1:] if argv is None else argv)[1:]  # after the command name
    except SystemExit as exc:  # --help, or a bad option: argparse has printed why
        if exc.code and comm.size > 1:
            comm.abort(2)  # a rank started with other options must not leave the rest waiting
        raise
    args.exit_code = 0
    try:
        summary = args.run(args, comm)
    except (KeyboardInterrupt, Stopped) as exc:  # one line, from rank 0: what was kept and how to go on
        stopped(exc, args.command, comm)
    except ModuleNotFoundError as exc:
        if exc.name != "cupy":
            raise
        say_line(f"perflab: error: {no_cupy('perflab ' + args.command)}")
        if comm.size > 1:
            comm.abort(2)
        raise SystemExit(2) from None
    except (ConfigError, DataError, CLIError, RuntimeError) as exc:
        from perflab.train.loop import Diverged
        deterministic = isinstance(exc, (ConfigError, Diverged))
        if comm.rank == 0 or not deterministic:
            where = f"rank {comm.rank}: " if comm.size > 1 else ""
            say_line(f"perflab: error: {where}{option_names(str(exc)) if isinstance(exc, ConfigError) else exc}")
        if comm.size > 1 and not deterministic:
            comm.abort(2)
        raise SystemExit(2) from None
    except Exception as exc:
        if comm.size == 1:
            raise
        say_line(f"perflab: error: rank {comm.rank}: {type(exc).__name__}: {exc}")
        comm.abort(1)
    if args.json and comm.rank == 0:
        print(json.dumps(summary, default=str))
    return args.exit_code


def stopped(exc, command: str, comm):
    """A run that stopped early (Ctrl-C, a full disk, a folder it cannot write) ends with one line, not a traceback
    per rank: rank 0 says what was kept; every rank exits (130 for Ctrl-C), the MPI job aborted only where one rank
    stopped alone and the others would wait for it."""
    everywhere = isinstance(exc, KeyboardInterrupt) or exc.everywhere
    code = 130 if isinstance(exc, KeyboardInterrupt) else exc.code
    text = str(exc) if isinstance(exc, Stopped) else "stopped by Ctrl-C"
    if comm.rank == 0 and text:
        say_line(f"perflab {command}: {text}")
    if comm.size > 1 and not everywhere:
        comm.abort(code)
    raise SystemExit(code) from None


if __name__ == "__main__":
    sys.exit(main())
