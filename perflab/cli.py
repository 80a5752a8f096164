"""`perflab` command line. Every command takes --json: its last stdout line is then one JSON object."""
from __future__ import annotations

import argparse
import json
import sys

from .config import ACCURACY, DTYPES, Config, ConfigError
from .data import DATASETS, MIRRORS, DataError

DEFAULTS = Config()


class CLIError(Exception):
    """Bad input caught after parsing; printed as `perflab: error: ...`, exit status 2."""


def hyperparameter_options(parser: argparse.ArgumentParser) -> None:
    d = DEFAULTS
    g = parser.add_argument_group(
        "hyperparameters",
        "Defaults are the seeds' performance workload {D=784, H=512, C=10, reg=1e-4, lr=1e-4, "
        "N=38400, epochs=1, B=3200}: the point the roofline analysis studies; they train too little "
        "to classify well. For accuracy (test precision ~0.98 on MNIST): "
        + " ".join(f"--{k.replace('_', '-').replace('hidden-sizes', 'hidden-size')} "
                   f"{' '.join(map(str, v)) if isinstance(v, tuple) else v}"
                   for k, v in ACCURACY.items() if k != "shuffle") + " --shuffle")
    g.add_argument("--input-size", type=int, default=d.input_size, metavar="D", help="pixels per image (default %(default)s)")
    g.add_argument("--hidden-size", type=int, nargs="+", default=list(d.hidden_sizes), metavar="H",
                   help="hidden units; several values make a deeper net, e.g. 1024 1024 (default %(default)s)")
    g.add_argument("--num-classes", type=int, default=d.num_classes, metavar="C", help="classes (default %(default)s)")
    g.add_argument("--reg", type=float, default=d.reg, help="L2 weight: loss += reg/2 * sum ||W||^2 (default %(default)s)")
    g.add_argument("--learning-rate", type=float, default=d.learning_rate, metavar="LR", help="SGD step (default %(default)s)")
    g.add_argument("--train-size", type=int, default=d.train_size, metavar="N", help="training samples (default %(default)s)")
    g.add_argument("--test-size", type=int, default=d.test_size, help="test samples for precision, 0 for none (default %(default)s)")
    g.add_argument("--num-epochs", type=int, default=d.num_epochs, help="passes over the training set (default %(default)s)")
    g.add_argument("--batch-size", type=int, default=d.batch_size, metavar="B",
                   help="global mini-batch, split over MPI ranks; the last batch of an epoch keeps N %% B samples (default %(default)s)")
    g.add_argument("--dtype", choices=DTYPES, default=d.dtype, help="float64 is the reference (default %(default)s)")
    g.add_argument("--seed", type=int, default=d.seed, help="seed of the initial weights and of shuffling (default %(default)s)")
    g.add_argument("--dataset", choices=DATASETS, default=d.dataset,
                   help="mnist/fashion-mnist from data/ (verified); synthetic: learnable data of any D, C, N (default %(default)s)")
    g.add_argument("--print-every", type=int, default=d.print_every, metavar="K", help="print the loss every K batches; 0: once an epoch")
    g.add_argument("--shuffle", action="store_true", help="reshuffle the training set every epoch (same order on every rank)")


def config_from_args(args) -> Config:
    return Config(input_size=args.input_size, hidden_sizes=tuple(args.hidden_size), num_classes=args.num_classes,
                  reg=args.reg, learning_rate=args.learning_rate, train_size=args.train_size,
                  num_epochs=args.num_epochs, batch_size=args.batch_size, dtype=args.dtype, seed=args.seed,
                  test_size=args.test_size, print_every=args.print_every, dataset=args.dataset, shuffle=args.shuffle)


def cmd_train(args) -> dict:
    from . import data, model, results, train

    cfg = config_from_args(args)
    train_set, test_set = data.load(cfg)
    params = model.init_params(cfg.layer_sizes, cfg.dtype, cfg.seed)
    trainer = train.Sequential(cfg, params, train_set.X, train_set.y)
    history = train.fit(cfg, trainer, test_set, progress=not args.json and sys.stderr.isatty(),
                        log=None if args.json else print)
    summary = {"final_loss": history.final_loss, "test_precision": history.test_precision,
               "epoch_seconds": history.epoch_seconds, "backend": "numpy", "parallel": "sequential",
               "ranks": 1, **cfg.to_dict()}
    if not args.json:
        precision = "n/a" if history.test_precision is None else f"{history.test_precision:.4f}"
        print(f"final loss {history.final_loss:.6f}  test precision {precision}  "
              f"time per epoch {history.epoch_seconds:.3f} s")
    if args.save:
        meta = results.machine_metadata()
        rows = [{**{k: v for k, v in summary.items() if k not in ("final_loss", "test_precision", "epoch_seconds")},
                 **row} for row in history.epochs]
        for row in rows:
            row["hidden_sizes"] = " ".join(map(str, cfg.hidden_sizes))
        path = results.write_rows(results.RESULTS_ROOT / results.machine_name(meta) / f"{args.save}.csv",
                                  rows, meta, append=False)
        summary["saved"] = str(path)
        if not args.json:
            print(f"wrote {path}")
    return summary


def cmd_data_fetch(args) -> dict:
    from . import data
    folder = data.fetch(args.name, dest=args.dest, mirrors=args.mirror, timeout=args.timeout,
                        log=(lambda m: None) if args.json else print)
    return {"dataset": args.name, "folder": str(folder)}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="perflab",
        description="Train the seeds' MLP (784-H-10, sigmoid, softmax + cross-entropy, L2, SGD) and measure it.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("train", help="train the MLP and print loss, test precision and time per epoch",
                       description="Train the MLP on the CPU reference (NumPy).")
    hyperparameter_options(p)
    p.add_argument("--save", metavar="NAME", help="write the per-epoch table to results/<machine>/NAME.csv (+ .json metadata)")
    p.add_argument("--json", action="store_true", help="print one JSON object on the last line")
    p.set_defaults(run=cmd_train)

    p = sub.add_parser("data", help="datasets: fetch the IDX files for users who lack them")
    dsub = p.add_subparsers(dest="data_command", required=True, metavar="ACTION")
    f = dsub.add_parser("fetch", help="download a dataset from its canonical mirrors, verified, written atomically",
                        description="Download the four IDX files of a dataset, check them against the manifest, "
                                    "and write them under data/NAME/. Files already present are kept.")
    f.add_argument("name", choices=sorted(MIRRORS))
    f.add_argument("--mirror", action="append", metavar="URL",
                   help="base URL to download from instead of the canonical mirrors (repeatable, tried in order)")
    f.add_argument("--dest", metavar="DIR", help="data folder (default: the project's data/ or $PERFLAB_DATA)")
    f.add_argument("--timeout", type=float, default=10.0, help="seconds before a silent mirror is given up (default %(default)s)")
    f.add_argument("--json", action="store_true", help="print one JSON object on the last line")
    f.set_defaults(run=cmd_data_fetch)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        summary = args.run(args)
    except (ConfigError, DataError, CLIError) as exc:
        parser.exit(2, f"perflab: error: {exc}\n")
    if args.json:
        print(json.dumps(summary, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
