"""`perflab data fetch`: the IDX files for users who lack them."""
from __future__ import annotations

from perflab.commands.options import (
    outputs,
    positive_float,
)
from perflab.data import MIRRORS


def cmd_data_fetch(args, comm) -> dict:
    from perflab import data
    folder = data.fetch(args.name, dest=args.dest, mirrors=args.mirror, timeout=args.timeout,
                        log=(lambda m: None) if args.json else print)
    return {"dataset": args.name, "folder": str(folder)}


def register(sub) -> None:
    p = sub.add_parser("data", help="datasets: fetch the IDX files for users who lack them")
    dsub = p.add_subparsers(dest="data_command", required=True, metavar="ACTION")
    f = dsub.add_parser("fetch", help="download a dataset from its canonical mirrors, verified, written atomically",
                        description="Download the four IDX files of a dataset, check them against the manifest, "
                                    "and write them under data/NAME/. Files already present are kept.")
    f.add_argument("name", choices=sorted(MIRRORS))
    f.add_argument("--mirror", action="append", metavar="URL",
                   help="base URL to download from instead of the canonical mirrors (repeatable, tried in order)")
    f.add_argument("--dest", metavar="DIR", help="data folder (default: the project's data/ or $PERFLAB_DATA)")
    f.add_argument("--timeout", type=positive_float, default=10.0, help="seconds before a silent mirror is given up (default %(default)s)")
    outputs(f, folder=False)
    f.set_defaults(run=cmd_data_fetch)
