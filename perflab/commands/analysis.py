"""`perflab validate`, `whatif` and `predict`: the predictor against measurements, and ahead of them."""
from __future__ import annotations

import json
from pathlib import Path

from perflab.commands.options import (
    DEFAULTS_DIFFER,
    CLIError,
    file_name,
    net_options,
    nets,
    out_folder,
    outputs,
    positive,
    positive_float,
)
from perflab.commands.report import sweeps_option
from perflab.config import HALF_DTYPES, MODES


def cmd_validate(args, comm) -> dict:
    """Predicted (from ceilings alone) against measured time per batch for every point of the main job's
    sweeps of this machine's run folder (and of those --sweeps names), or with --committed of every
    committed machine folder."""
    from perflab import results
    from perflab.analysis import validation
    from perflab.results import ResultFileError
    if args.committed and (args.folder or args.out or args.sweeps):
        raise CLIError("--committed validates every folder under results/ and writes each one's validation.csv; "
                       "--folder, --out and --sweeps name a single run folder's instead: give one or the other")
    folders = validation.committed_folders() if args.committed else [Path(args.folder or results.run_dir())]
    also = tuple(args.sweeps or ())
    summary = {}
    for folder in folders:
        if not folder.is_dir():
            raise CLIError(f"--folder {folder}: no such folder" if args.folder else
                           f"this machine's run folder {results.relative(folder)} does not exist yet: `make roofline` "
                           "(or `perflab sweep`) measures the points to check the predictor against")
        if not args.committed and not validation.sweep_files(folder):
            raise CLIError(f"{folder}: no measured sweep point to check the predictor against (a run folder gets them "
                           "from `perflab notebook roofline` or `perflab sweep`); nothing written")
        try:
            table, path = validation.validate_folder(folder, args.out, also=also)
        except (ResultFileError, validation.SweepNameError) as exc:
            raise CLIError(f"{exc}; nothing written") from None
        summary[folder.name] = validation.summary(table)
        if not args.json:
            print(f"{folder.name}: {validation.describe(table)}; wrote {results.relative(path)}")
    return summary


def transferred(args, path: Path, ceilings):
    """The ceilings (and their boots) as --gpu-kind would measure them, and what was done."""
    from perflab import results
    from perflab.analysis import predictor, transfer
    try:
        return transfer.to_kind(ceilings, results.made_on(path)["gpu"], args.gpu_kind)
    except predictor.PredictionError as exc:
        raise CLIError(str(exc)) from None


def cmd_whatif(args, comm) -> dict:
    """Predict a grid of points from one ceilings file alone (any machine's, measured or described)."""
    from perflab import results
    from perflab.data import atomic_write
    from perflab.workbook import sweep
    hidden = nets(args)  # the spelling first: a mistyped net is named before any file is read
    path, exchanges, ceilings, moved = whatif_ceilings(args)
    backend = whatif_backend(args, ceilings, hidden, path)
    try:
        points = sweep.grid(hidden=hidden, per_rank_batch=args.per_rank_batch, ranks=args.ranks,
                            parallel=args.parallel, backend=[backend], mode=args.mode, gemm=args.gemm,
                            dtype=args.dtype, N=args.train_size, launch=args.launch,
                            comm=None if args.comm == "auto" else args.comm)
    except ValueError as exc:
        raise CLIError(str(exc)) from None
    rows = whatif_rows(args, points, ceilings)
    out = Path(args.out or results.run_dir()) / f"{args.name}.json"
    made = whatif_made(args, rows, ceilings, backend, path, exchanges, moved)
    atomic_write(out, (json.dumps(made, indent=1) + "\n").encode())
    if not args.json:
        print_whatif(args, rows, made, backend, out)
    return {"saved": str(out), "rows": rows}


def whatif_ceilings(args) -> tuple:
    """(--ceilings' path, the --exchange-ceilings paths, the Ceilings they make together, carried to --gpu-kind where
    it is given, and what that transfer did or None), each file checked."""
    from perflab.analysis import predictor
    path = Path(args.ceilings)
    if not path.is_file():
        raise CLIError(f"--ceilings {args.ceilings}: no such file (perflab ceilings writes <run folder>/ceilings_p<P>.csv)")
    try:
        ceilings = predictor.Ceilings.load(path)
    except predictor.PredictionError as exc:
        raise CLIError(f"--ceilings {exc}") from None
    exchanges = [Path(f) for f in args.exchange_ceilings or []]
    for exchange in exchanges:  # in order: a later file's ranks replace an earlier one's
        if not exchange.is_file():
            raise CLIError(f"--exchange-ceilings {exchange}: no such file (a ceilings_p<P>.csv of the larger machine)")
        try:
            ceilings = predictor.with_exchange(ceilings, predictor.Ceilings.load(exchange))
        except predictor.PredictionError as exc:
            raise CLIError(str(exc)) from None
    if args.gpu_kind:
        refuse_exchanges_of_the_kind(args.gpu_kind, exchanges)
    moved = transferred(args, path, ceilings) if args.gpu_kind else (ceilings, None)
    return path, exchanges, *moved


def refuse_exchanges_of_the_kind(kind: str, exchanges: list) -> None:
    """A blind prediction of `kind` reads no ceilings file measured on that kind: not as --exchange-ceilings either
    (transfer.to_kind refuses a --ceilings file of it)."""
    from perflab import results
    from perflab.analysis import transfer
    for path in exchanges:
        gpu = results.made_on(path).get("gpu")
        if transfer.measured_on(gpu, kind):
            raise CLIError(f"--gpu-kind {kind}: --exchange-ceilings {path} was measured on {gpu}, that kind itself; a "
                           f"blind prediction reads no file of the kind it predicts: drop that file, or leave --gpu-kind "
                           f"out and predict {kind} from a --ceilings file measured on it")


def whatif_rows(args, points, ceilings) -> list[dict]:
    """One row a point: its settings, the predicted batch and epoch, the band and every term (ms)."""
    from perflab.analysis import predictor
    rows = []
    for point in points:
        point["graphs"] = point["launch"] == "graph"
        point["step_graph"] = point["backend"] == "cupy" and point["parallel"] == "model" and point["graphs"]  # NCCL
        try:
            if args.comm == "auto":  # what perflab train does unless told: the faster exchange, the name kept
                point["comm"], pred = predictor.predict_auto(point, ceilings)
            else:
                pred = predictor.predict_point(point, ceilings)
        except predictor.PredictionError as exc:
            raise CLIError(str(exc)) from None
        rows.append({k: point[k] for k in ("H", "B", "p", "parallel", "backend", "mode", "gemm", "launch", "dtype", "N", "comm")}
                    | {"b": point["B"] // point["p"], "batch_ms": 1e3 * pred["batch_s"], "epoch_ms": 1e3 * pred["epoch_s"],
                       "composition": pred["composition"]} | predictor.band_ms(pred)
                    | {k: 1e3 * v for k, v in pred.items() if k.startswith("t_")})
    return rows


def whatif_made(args, rows, ceilings, backend: str, path: Path, exchanges: list, moved: dict | None) -> dict:
    """The prediction file's content: the rows, what they were made from and by, and how far to trust them."""
    from perflab import results
    device = "cpu" if backend == "numpy" else "gpu"
    grid = {g: ceilings.grid_error(ceilings.step_names(backend, g), device) for g in args.gemm}
    made = {"method": "perflab.analysis.predictor from the ceilings file alone (no training run)", "ceilings": str(path),
            "ceilings_machine": results.made_on(path), "predicted_by": results.git_commit(),
            "grid_interpolation_error": grid, "epoch_stretch": ceilings.epoch_stretch(),
            "track_record": track_record(results.made_on(path)), "rows": rows}
    if moved:
        made |= {"method": "perflab.analysis.predictor from the ceilings of another GPU kind, carried to --gpu-kind by "
                           "datasheet ratios (perflab.analysis.transfer; no file of that kind read)", "transfer": moved}
    if exchanges:
        made |= {"method": "perflab.analysis.predictor from ceilings files alone (no training run): the step, floors and "
                           "copies from `ceilings`, the all-reduces at the ranks each measured from `exchange_ceilings`",
                 "exchange_ceilings": [str(f) for f in exchanges],
                 "exchange_machines": [results.made_on(f) for f in exchanges]}
    return made


def print_whatif(args, rows, made: dict, backend: str, out: Path) -> None:
    """The rows as a table, then what to trust of them: eager steps, the epoch's stretch, the grid's error."""
    import pandas as pd
    print(pd.DataFrame(rows).drop(columns=["composition"]).round(3).to_string(index=False))
    if "eager" in args.launch and backend == "cupy":
        print("eager steps: charged the trainer's host floor at H = 16; a step the host launches kernel by kernel "
              "moved by up to 2x between points of one run on the borrowed H100s (experiments/predictor/README.md)")
    if made["epoch_stretch"] is not None and "resident" in args.mode and "graph" in args.launch:
        print(f"an epoch run as one CUDA graph (resident, graphed; on several GPUs NCCL inside): its steps x {made['epoch_stretch']:.3f}, "
              "the ratio of the trainer's epoch to its graph replayed alone that the ceilings measured")
    for g, e in made["grid_interpolation_error"].items():
        if e is not None:
            print(f"kernels at shapes off the ceilings' grid ({g}): the grid's own points, each interpolated from its "
                  f"neighbours, miss by a median of {100 * e['median_abs']:.0f}% (worst {100 * e['worst']:+.0f}%)")
    print(track_record_text(made["track_record"]))
    if "transfer" in made:
        print(f"(that record is {made['transfer']['from_kind']} predicted from its own ceilings; across kinds the "
              "datasheets add their own error, and the host's launches and copies are the source machine's)")
    print(f"wrote {out}")


def whatif_backend(args, ceilings, hidden, path) -> str:
    """--backend, by default the ceilings file's (a CPU's file predicts NumPy), said in the run's first line with
    the settings whose defaults are not train's."""
    backend = args.backend or ("cupy" if len(ceilings.rows("step_kernel", device="gpu")) else "numpy")
    if not args.json:
        print(f"perflab whatif: --backend {backend}" + ("" if args.backend else f" (the ceilings file's: "
              f"{'GPU' if backend == 'cupy' else 'CPU'} rows)") + f", --dtype {' '.join(args.dtype)}, --train-size "
              f"{args.train_size}, --hidden {' '.join(map(str, hidden))}; predicted from {path}"
              + (f", carried to {args.gpu_kind} by datasheet ratios (no file of that kind read)" if args.gpu_kind else ""))
    return backend


def track_record(machine: dict) -> dict:
    """How far the committed blind checks on this machine's GPU model landed, per kind of step: the
    error a user can expect of each (the committed predictions against each machine folder's
    prediction_check_* files, under the results root).
    Recorded beside a prediction, not used by it."""
    from perflab import results
    from perflab.report import predictions
    folder = results.machine_name(machine) if machine.get("gpu") or machine.get("cpu") else "?"
    table = predictions.trust(predictions.check_points(predictions.committed_checks()), folder)
    return {"machine_folder": folder,
            "kinds": [{"kind": kind, "checks": int(r.checks), "points": int(r.points),
                       "median_abs_error": float(r.median), "worst_abs_error": float(r.worst)}
                      for kind, r in zip(table.index, table.itertuples())]}


def track_record_text(record: dict) -> str:
    if not record["kinds"]:
        return (f"no prediction committed before its run has been measured on {record['machine_folder']} yet: "
                "no track record to show")
    return (f"the predictions committed before their runs on {record['machine_folder']}, |error| median (worst) per "
            "kind of step: " + "; ".join(f"{k['kind']} {k['median_abs_error']:.0%} ({k['worst_abs_error']:.0%}, "
                                         f"{k['points']} points in {k['checks']} checks)" for k in record["kinds"]))


def cmd_predict(args, comm) -> dict:

    from perflab import results
    from perflab.analysis import projection
    from perflab.data import atomic_write
    from perflab.results import RESULTS_ROOT
    if not (RESULTS_ROOT / "nvidia-h200" / args.calibration).exists():
        raise CLIError(f"--calibration {args.calibration}: no such file in {RESULTS_ROOT / 'nvidia-h200'}")
    folder = Path(args.out or results.run_dir())  # a user's run never rewrites the committed predictions
    if args.multinode:
        table = projection.multinode(RESULTS_ROOT, per_node=args.per_node, inter=(args.inter_latency, args.inter_bw),
                                     scaling=args.calibration)
        out = folder / f"{args.name}.csv"
        out.parent.mkdir(parents=True, exist_ok=True)
        table.to_csv(out, index=False)
        if not args.json:
            print(table.pivot_table(index="p", columns="strategy", values="efficiency").round(3).to_string())
            print(f"wrote {out}")
        return {"saved": str(out)}
    prediction = projection.predictions(RESULTS_ROOT, ranks=args.ranks, scaling=args.calibration)
    out = folder / f"{args.name}.json"
    atomic_write(out, (json.dumps(prediction, indent=1) + "\n").encode())
    if not args.json:
        import pandas as pd
        print(pd.DataFrame(prediction["rows"]).round(3).to_string(index=False))
        print(f"wrote {out}")
    return {"saved": str(out)}


def register(sub) -> None:
    """validate, whatif and predict, in the order `perflab --help` lists them."""
    validate_parser(sub)
    whatif_parser(sub)
    predict_parser(sub)


def validate_parser(sub) -> None:
    p = sub.add_parser("validate", help="the predictor against every measured sweep point (ceilings alone, no fit)",
                       description="For each point of the main job's sweeps of a run folder (where the main job "
                                   "never ran: roofline*.csv, parallel.csv, prediction_check*.csv and any other sweep), "
                                   "and each of perflab's rows of the multi-GPU scaling harness (scaling.jsonl): the "
                                   "time per batch the predictor composes from the folder's ceilings_p<P>.csv (perflab "
                                   "ceilings) against the measured unprofiled epoch over its batches; writes "
                                   "validation.csv beside them with the ceilings file each prediction used.")
    p.add_argument("--folder", metavar="DIR", help="default this machine's run folder, runs/<machine key>/")
    p.add_argument("--committed", action="store_true", help="every machine folder under results/ instead (developers: "
                                                            "rewrites their validation.csv)")
    p.add_argument("--out", metavar="CSV", help="write here instead of <folder>/validation.csv (with --sweeps "
                                                 "<folder>/validation_<names>.csv: the main job's file stays as it ran)")
    sweeps_option(p)
    outputs(p, folder=False)
    p.set_defaults(run=cmd_validate)


def whatif_parser(sub) -> None:
    p = sub.add_parser("whatif", help="predict points from a ceilings file alone (perflab.analysis.predictor; no training run)",
                       description="Time per batch and per epoch of every (H, b, p, mode) point composed from one "
                                   "ceilings file (perflab ceilings on that machine): commit the prediction before the "
                                   "run that tests it. Writes <run folder>/NAME.json (or --out DIR) naming the file used. "
                                   + DEFAULTS_DIFFER)
    p.add_argument("--ceilings", required=True, metavar="CSV", help="a ceilings_p<P>.csv (P >= the largest --ranks)")
    p.add_argument("--exchange-ceilings", nargs="+", metavar="CSV",
                   help="the all-reduces from these ceilings files instead, each at the ranks it measured: machines "
                        "with more of the same GPUs whose step kernels were never measured (the rest from --ceilings)")
    from perflab.analysis.datasheets import KINDS
    p.add_argument("--gpu-kind", choices=KINDS, metavar="KIND",
                   help="predict this GPU kind from --ceilings measured on another of the same architecture, its kernels "
                        "scaled by the two datasheets (perflab.analysis.transfer); the host and links as measured. "
                        f"Kinds: {', '.join(KINDS)}")
    net_options(p, several=True)
    p.add_argument("--per-rank-batch", nargs="+", type=positive, default=[3000], metavar="b", help="samples per rank per step")
    p.add_argument("--ranks", nargs="+", type=positive, default=[1], metavar="P")
    p.add_argument("--backend", choices=("numpy", "cupy"), default=None,
                   help="predict NumPy's step or the GPU's (default: the ceilings file's, cupy where it has GPU rows)")
    p.add_argument("--mode", nargs="+", choices=MODES, default=["resident"])
    p.add_argument("--parallel", nargs="+", choices=("data", "model"), default=["data"],
                   help="data (B = p x b, split) or model (H split, every rank the whole B = p x b); default data")
    from perflab.kernels import WGMMA_VARIANTS
    p.add_argument("--gemm", nargs="+", choices=("cublas",) + WGMMA_VARIANTS, default=["cublas"],
                   help="the step's GEMMs: cublas, or Hopper's tensor-core GEMMs (data parallel, resident or staged; "
                        "their kernels in the ceilings file); default cublas")
    from perflab.config import GPU_EXCHANGES
    from perflab.workbook.sweep import EXCHANGES_HELP, LAUNCHES
    p.add_argument("--launch", nargs="+", choices=LAUNCHES, default=["graph"],
                   help="each step a CUDA graph replay where the trainer makes one (graph), or its kernels launched one "
                        "by one (eager; the seeds' way); default graph")
    p.add_argument("--comm", choices=GPU_EXCHANGES + ("auto",), default=None,
                   help=EXCHANGES_HELP + ", or auto (the fastest of them predicted, as perflab train keeps by timing "
                        "them; the row names the one kept); default nccl there (as perflab sweep measures), host MPI "
                        "in the staged modes and on the CPU")
    p.add_argument("--dtype", nargs="+", choices=("float32",) + HALF_DTYPES, default=["float32"],
                   help="float32, or bfloat16 | float16: the mixed-precision step (resident data parallel; its ceilings "
                        "from a GPU that runs it) (default float32)")
    p.add_argument("--train-size", type=positive, default=60000, metavar="N")
    p.add_argument("--name", default="whatif", type=file_name, help="file name (default %(default)s)")
    p.add_argument("--out", metavar="DIR", type=out_folder, help="folder (default this machine's run folder)")
    outputs(p, folder=False)
    p.set_defaults(run=cmd_whatif)


def predict_parser(sub) -> None:
    p = sub.add_parser("predict", help="predict scaling to p GPUs from the committed H200 measurements",
                       description="Projected epoch time and efficiency (data parallel, model parallel; H in {512, 2048}, "
                                   "b in {800, 3000} per GPU, N = 60000) for p GPUs, from the NCCL all-reduce fit and the "
                                   "one-GPU steps measured on the H200s; written to <run folder>/NAME.json (the "
                                   "committed ones: --out results/predictions).")
    p.add_argument("--ranks", nargs="+", type=positive, default=[1, 2, 4, 8], help="GPU counts (default 1 2 4 8)")
    p.add_argument("--name", default="p8", type=file_name, help="file name (default %(default)s; with --multinode a CSV)")
    p.add_argument("--out", metavar="DIR", type=out_folder, help="folder (default this machine's run folder)")
    p.add_argument("--calibration", default="scaling_calibration.jsonl", metavar="FILE",
                   help="the scaling runs (in results/nvidia-h200/) that calibrate the per-step cost on several GPUs "
                        "(default %(default)s, the eager steps p8.json was made from; scaling.jsonl: the latest)")
    p.add_argument("--multinode", action="store_true",
                   help="instead: project H=2048, 3000 per GPU to 64 GPUs on nodes joined by a network (CSV)")
    p.add_argument("--per-node", type=positive, default=8, help="GPUs per node (default %(default)s)")
    p.add_argument("--inter-bw", type=positive_float, default=25e9, help="network bandwidth per node, B/s (default %(default)s: 200 Gb/s)")
    p.add_argument("--inter-latency", type=positive_float, default=5e-6, help="network latency per ring step, s (default %(default)s)")
    outputs(p, folder=False)
    p.set_defaults(run=cmd_predict)
