"""`perflab sweep` and `perflab notebook`: grids of points, notebooks run end to end."""
from __future__ import annotations

import os
import sys

from perflab.commands.options import (
    DEFAULTS_DIFFER,
    CLIError,
    file_name,
    net_options,
    nets,
    outputs,
    positive,
    positive_float,
    require_cupy,
    writable_folder,
)
from perflab.config import DTYPES, HALF_DTYPES, MODES
from perflab.data import DATASETS


def cmd_sweep(args, comm) -> dict:
    from perflab.workbook import sweep
    if args.emit_sbatch:
        from perflab.workbook import slurm
        argv = list(args.argv)
        for flag, takes in (("--emit-sbatch", 1), ("--nodes", 1), ("--gpus-per-node", 1), ("--nsys", 0), ("--json", 0)):
            while flag in argv:
                i = argv.index(flag)
                del argv[i:i + 1 + takes]
        try:
            text = slurm.sbatch(argv, args.name, args.nodes, args.gpus_per_node, nsys=args.nsys)
        except ValueError as exc:
            raise CLIError(str(exc)) from None
        with open(args.emit_sbatch, "w") as f:
            f.write(text)
        if not args.json:
            print(f"wrote {args.emit_sbatch}: submit with sbatch {args.emit_sbatch}")
        return {"sbatch": args.emit_sbatch}
    points = sweep_points(args)
    if any(pt["backend"] == "cupy" for pt in points):
        require_cupy("--backend cupy")  # before any point runs
    too_big = [pt["p"] for pt in points if pt["p"] > comm.size]
    if too_big:
        raise CLIError(f"the grid has points with p={max(too_big)} but {comm.size} rank(s) are running; "
                       f"start with mpiexec -n {max(too_big)} perflab sweep ...")
    if comm.rank == 0:
        from perflab import results
        writable_folder(args.out or results.run_dir(), "--out")
        if not args.json:
            print(sweep_first_line(args, points))
    path = sweep.run_grid_mpi(points, args.name, args.out, args.dataset, progress=not args.json and comm.rank == 0,
                              log=(lambda m: None) if args.json else print, timeout=args.timeout)
    if comm.rank == 0 and not args.json:
        print(f"wrote {path}")
    return {"points": len(points), "saved": str(path)}


def sweep_points(args) -> list[dict]:
    """The grid's points; a GPU-only setting in a sweep with no GPU backend is refused as train refuses it
    (perflab.train.spec), where before the points it named were dropped."""
    from perflab.train.spec import RunSpec, SpecError
    from perflab.workbook import sweep
    if "cupy" not in args.backend:
        try:
            for mode in args.mode:
                for gemm in args.gemm:
                    for launch in args.launch or [None]:
                        RunSpec(backend="numpy", mode=mode, gemm=gemm, launch=launch).validate()
        except SpecError as exc:
            raise CLIError(f"{exc} (this sweep's --backend is numpy)") from None
    try:
        return sweep.grid(hidden=nets(args), batch=args.batch, ranks=args.ranks, per_rank_batch=args.per_rank_batch,
                          parallel=args.parallel, backend=args.backend, mode=args.mode, gemm=args.gemm,
                          dtype=args.dtype, N=args.train_size, epochs=args.num_epochs,
                          learning_rate=args.learning_rate, launch=args.launch or ["graph"], comm=args.comm)
    except ValueError as exc:
        raise CLIError(str(exc)) from None


def sweep_first_line(args, points: list[dict]) -> str:
    """The sweep's first line: its points and the settings whose defaults are not train's."""
    emulated = [d for d in args.dtype if d in HALF_DTYPES] if "numpy" in args.backend else []
    return (f"perflab sweep: {len(points)} point(s), --hidden {' '.join(map(str, nets(args)))}, --dtype "
            f"{' '.join(args.dtype)}" + (f" ({', '.join(emulated)} emulated in FP32 on NumPy)" if emulated else "")
            + f", --learning-rate {args.learning_rate:g}, --dataset {args.dataset} N={args.train_size}, "
            f"{args.num_epochs} timed epoch(s) a point, --backend {' '.join(args.backend)}")


NOTEBOOKS = ("roofline", "problem1", "correctness", "convergence", "scaling", "kernels", "usc", "precision")


def notebook_parameters(notebook) -> list[str]:
    """The names the notebook's cell tagged `parameters` assigns: what `-p NAME VALUE` may set."""
    import ast
    names = []
    for cell in notebook.cells:
        if "parameters" in cell.get("metadata", {}).get("tags", []):
            for node in ast.parse(cell.source).body:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
                names += [t.id for t in targets if isinstance(t, ast.Name)]
    return names


def parameter_value(name: str, text: str):
    """A `-p NAME VALUE` as the notebook gets it: a Python literal (512, [512, 1024], 'numpy'), or the text
    itself (-p backend numpy); text that opens a list, tuple, dict or string but is no literal is refused."""
    import ast
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError) as exc:
        opens = text.strip()[:1]
        if opens and opens in "[({'\"":
            raise CLIError(f"-p {name} {text}: not a Python literal ({exc.msg if isinstance(exc, SyntaxError) else exc}); "
                           f"write a list as '[512, 1024]', a text as numpy or 'numpy'; nothing run") from None
        return text


def skip_iri_grammars() -> None:
    """Keep jsonschema from importing rfc3987_syntax where it is installed: that import builds its IRI grammars, seconds
    of every notebook command before anything runs (jupytext and papermill import nbformat, which imports jsonschema),
    for format checks ("iri") that no notebook schema asks for. jsonschema leaves those checks out when the import
    fails, as where the package is not installed."""
    sys.modules.setdefault("rfc3987_syntax", None)


def cmd_notebook(args, comm) -> dict:
    """Execute notebooks/NAME.py (Jupytext percent format, the one source) end to end with papermill;
    the executed copy lands in <run folder>/notebooks/NAME.ipynb once the run ends well. While it runs
    it is NAME.running.ipynb; a run that fails becomes NAME.failed.ipynb, and the last good NAME.ipynb
    stays as it was (the report reads that one)."""
    skip_iri_grammars()
    import jupytext
    import papermill

    from perflab import results
    from perflab.data import PROJECT_ROOT
    params = {k: parameter_value(k, v) for k, v in args.parameter or []}
    source = PROJECT_ROOT / "notebooks" / f"{args.name}.py"
    notebook = jupytext.read(source)
    known = notebook_parameters(notebook)
    unknown = [k for k in params if k not in known]
    if unknown:  # papermill would only warn, and run the whole notebook on its defaults
        takes = (f"its parameters: {', '.join(known)} (the parameters cell of {results.relative(source)} says what "
                 f"each does)") if known else "it takes none"
        raise CLIError(f"notebook {args.name} has no parameter {', '.join(map(repr, unknown))}; {takes}")
    out = results.run_dir() / "notebooks" / f"{args.name}.ipynb"
    running, failed = out.with_suffix(".running.ipynb"), out.with_suffix(".failed.ipynb")
    out.parent.mkdir(parents=True, exist_ok=True)
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    from perflab.workbook import cluster
    cluster_id = os.environ[cluster.CLUSTER_ID_ENV] = f"perflab-{args.name}-{os.getpid()}"  # the kernel inherits it
    ran = False
    kept = (f"; the last good run's {results.relative(out)} is kept" if out.exists() else "")
    try:
        papermill.execute_notebook(notebook, str(running), parameters=params, cwd=str(source.parent),
                                   progress_bar=not args.json, kernel_name="python3")
        ran = True
    except papermill.PapermillExecutionError as exc:  # the cell's error in one line; the traceback is in the notebook
        raise CLIError(f"notebook {args.name} stopped in cell {exc.exec_count}: {exc.ename}: {exc.evalue} (the failed "
                       f"run's notebook, with the whole traceback: {results.relative(failed)}{kept})") from None
    finally:
        if cluster.stop_named(cluster_id):
            print(f"stopped the MPI engines notebook {args.name} had started", file=sys.stderr)
        if running.exists():
            running.write_text(results.relative_text(running.read_text()))  # its printed paths and metadata travel
            os.replace(running, out if ran else failed)
            if ran:
                failed.unlink(missing_ok=True)
    if not args.json:
        print(f"executed {results.relative(source)} -> {results.relative(out)}")
    return {"notebook": str(out), "parameters": params}


def register(sub) -> None:
    """sweep and notebook, in the order `perflab --help` lists them."""
    sweep_parser(sub)
    notebook_parser(sub)


def sweep_parser(sub) -> None:
    p = sub.add_parser("sweep", help="measure a grid of points (H, B, p, mode, ...) into <run folder>/NAME.csv",
                       description="Each point trains (N samples, E epochs) unprofiled for the epoch time and once "
                                   "profiled for the phase medians; its row is written as soon as it finishes, and a "
                                   "rerun skips points already in the file. Run under mpiexec -n P (P >= largest p); "
                                   "points with fewer ranks use the first p. " + DEFAULTS_DIFFER)
    from perflab.kernels import GEMM_VARIANTS as variants
    p.add_argument("--name", default="sweep", type=file_name, help="result file name (default %(default)s)")
    net_options(p, several=True)
    p.add_argument("--batch", nargs="+", type=positive, default=[3200], metavar="B",
                   help="global mini-batch sizes, split over the ranks (default 3200)")
    p.add_argument("--per-rank-batch", nargs="+", type=positive, metavar="B/p",
                   help="instead of --batch: B = p * B/p, the seeds' sweep with B/p constant")
    p.add_argument("--ranks", nargs="+", type=positive, default=[1], metavar="P", help="process counts (default 1)")
    p.add_argument("--parallel", nargs="+", choices=("data", "model"), default=["data"], help="default data")
    p.add_argument("--backend", nargs="+", choices=("numpy", "cupy"), default=["numpy"], help="default numpy")
    p.add_argument("--mode", nargs="+", choices=MODES, default=["resident"],
                   help="GPU data and exchange path (default resident)")
    p.add_argument("--gemm", nargs="+", choices=variants, default=["cublas"], help="GPU GEMM variants (default cublas)")
    from perflab.config import GPU_EXCHANGES
    from perflab.workbook.sweep import EXCHANGES_HELP, LAUNCHES, MIN_TIMED_SECONDS
    p.add_argument("--launch", nargs="+", choices=LAUNCHES, default=None,
                   help="GPU: replay each step as a CUDA graph where the trainer can, a whole epoch as one with data "
                        "resident (graph), or launch its kernels one by one as the seeds do (eager); both to "
                        "see what graphs buy (default graph)")
    p.add_argument("--comm", choices=GPU_EXCHANGES, default=None,
                   help=EXCHANGES_HELP + "; default nccl there, host MPI in the staged modes and on the CPU")
    p.add_argument("--dtype", nargs="+", choices=DTYPES + HALF_DTYPES, default=["float32"],
                   help="float32 or float64; bfloat16 | float16: mixed precision (on GPUs its fused step, resident data "
                        "parallel; on NumPy emulated) (default float32)")
    from perflab.train.watchdog import TIMEOUT_S
    p.add_argument("--timeout", type=positive_float, default=TIMEOUT_S, metavar="S",
                   help="a point's step that waits S seconds on the other ranks ends the sweep (the points written "
                        "stay; a rerun resumes after them), every other rank naming the silent one; between points, "
                        "and while ranks wait out a point on fewer ranks, so does a rank silent for S seconds "
                        "(default %(default)g)")
    p.add_argument("--train-size", type=positive, default=38400, metavar="N",
                   help="samples an epoch (default %(default)s, the seeds')")
    p.add_argument("--num-epochs", type=positive, default=1, help="timed epochs a point, after one warm-up "
                        f"(default %(default)s; more where they would take under {MIN_TIMED_SECONDS} s, so that one "
                        "host stall is not the median)")
    p.add_argument("--dataset", choices=DATASETS, default="synthetic", help="default synthetic (any size)")
    p.add_argument("--learning-rate", type=positive_float, default=0.1, help="SGD step of every point (default %(default)s); a "
                                                                    "point whose loss diverges is written as failed")
    p.add_argument("--emit-sbatch", metavar="FILE", help="instead of running: write a Slurm script that runs this sweep "
                                                         "with one rank per GPU on --nodes x --gpus-per-node")
    p.add_argument("--nodes", type=int, default=1, help="with --emit-sbatch (default 1)")
    p.add_argument("--gpus-per-node", type=int, default=4, help="with --emit-sbatch (default 4)")
    p.add_argument("--nsys", action="store_true", help="with --emit-sbatch: profile each rank with Nsight Systems")
    outputs(p)
    p.set_defaults(run=cmd_sweep)


def notebook_parser(sub) -> None:
    p = sub.add_parser("notebook", help="run a workbook notebook end to end (papermill)",
                       description="Execute notebooks/NAME.py (Jupytext percent format: open it in Jupyter with jupytext "
                                   "installed, or edit it as text) with parameters; the executed copy and its figures "
                                   "go to results/. Example: perflab notebook roofline -p engines 4 -p backend cupy")
    p.add_argument("name", choices=NOTEBOOKS)
    p.add_argument("-p", "--parameter", nargs=2, action="append", metavar=("NAME", "VALUE"),
                   help="override a parameter (Python literal)")
    outputs(p, folder=False)
    p.set_defaults(run=cmd_notebook)
