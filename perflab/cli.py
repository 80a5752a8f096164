"""`perflab` command line. Every command takes --json: its last stdout line is then one JSON object."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from perflab.config import ACCURACY, DTYPES, HOST_STAGED, MODES, Config, ConfigError
from perflab.data import DATASETS, MIRRORS, DataError

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
    g.add_argument("--validation-size", type=int, default=d.validation_size, metavar="V",
                   help="hold out V training samples (after the first N) and report their precision each epoch (default %(default)s)")
    g.add_argument("--num-epochs", type=int, default=d.num_epochs, help="passes over the training set (default %(default)s)")
    g.add_argument("--batch-size", type=int, default=d.batch_size, metavar="B",
                   help="global mini-batch, split over MPI ranks; the last batch of an epoch keeps N %% B samples (default %(default)s)")
    g.add_argument("--dtype", choices=DTYPES, default=d.dtype, help="float64 is the reference (default %(default)s)")
    g.add_argument("--seed", type=int, default=d.seed, help="seed of the initial weights and of shuffling (default %(default)s)")
    g.add_argument("--dataset", choices=DATASETS, default=d.dataset,
                   help="mnist/fashion-mnist from data/ (verified); synthetic: learnable data of any D, C, N (default %(default)s)")
    g.add_argument("--print-every", type=int, default=d.print_every, metavar="K", help="print the loss every K batches; 0: once an epoch")
    g.add_argument("--shuffle", action="store_true", help="reshuffle the training set every epoch (same order on every rank)")


def device_options(parser: argparse.ArgumentParser) -> None:
    from perflab.kernels import GEMM_VARIANTS
    g = parser.add_argument_group("device", "where the math runs (GPU options need CuPy and an NVIDIA GPU)")
    g.add_argument("--backend", choices=("numpy", "cupy", "auto"), default="numpy",
                   help="numpy: the CPU reference; cupy: one GPU per rank; auto: cupy when a GPU is there (default %(default)s)")
    g.add_argument("--mode", choices=MODES, default="resident",
                   help="resident: data copied to the GPU once, gradients all-reduced on the GPU, each step a CUDA graph; "
                        "staged: the seeds' path, each batch copied host->device, gradients through host MPI, in series; "
                        "pipelined: the staged path on streams, the next batch's copy and each gradient piece's copies "
                        "and host all-reduce overlapped with compute (default %(default)s)")
    g.add_argument("--gemm", choices=GEMM_VARIANTS, default="cublas",
                   help="GEMM on the GPU: cuBLAS (called so it can sit in CUDA graphs; the fastest measured) or one of "
                        "perflab's kernels (default %(default)s)")
    g.add_argument("--comm", choices=("nccl", "mpi", "hierarchical", "cuda-mpi"), default=None,
                   help="gradient all-reduce: nccl (GPU, on the device), mpi (host MPI; GPU buffers staged), cuda-mpi "
                        "(GPU buffers straight to a CUDA-aware MPI, detected: an error where the MPI is not), hierarchical "
                        "(reduce in each node, all-reduce across node leaders, broadcast; PERFLAB_RANKS_PER_NODE=k "
                        "pretends nodes of k ranks). Default: nccl on GPUs (mpi in staged mode), mpi on the CPU")
    g.add_argument("--no-graphs", action="store_true", help="launch kernels one by one instead of replaying CUDA graphs")
    g.add_argument("--pinned", action="store_true", help="staged mode: keep the data in page-locked host memory")
    g.add_argument("--overlap", action="store_true",
                   help="NCCL on several GPUs: all-reduce the gradients in chunks on a second stream while backward "
                        "GEMM 3 still runs (slower than one exchange after it on two H200: results/nvidia-h200)")
    g.add_argument("--chunks", type=positive, default=4, metavar="K",
                   help="dW1 is exchanged in K row chunks, each as soon as its part of backward GEMM 3 is done "
                        "(--overlap, --mode pipelined; default %(default)s)")


def device_from_args(args):
    from perflab.backend import array_module
    from perflab.train.runner import Device
    backend = "numpy" if array_module(args.backend).__name__ == "numpy" else "cupy"
    if args.backend == "auto" and getattr(args, "json", False) is False:
        print(f"backend: {backend}", file=sys.stderr)
    comm = args.comm or ("nccl" if backend == "cupy" and args.mode == "resident" else "mpi")
    if backend == "numpy" and comm in ("nccl", "cuda-mpi"):
        raise CLIError(f"--comm {comm} needs --backend cupy; on the CPU use mpi or hierarchical")
    if backend == "numpy" and args.gemm != "cublas":
        raise CLIError(f"--gemm {args.gemm} runs perflab's CUDA kernels: it needs --backend cupy (the NumPy "
                       "backend multiplies with its BLAS)")
    if args.overlap and comm != "nccl":
        raise CLIError(f"--overlap overlaps an NCCL all-reduce with the backward pass: it needs --comm nccl "
                       f"(--backend cupy --mode resident), got --comm {comm}")
    if comm == "cuda-mpi":
        from perflab.train.comm import require_cuda_aware_mpi
        try:
            require_cuda_aware_mpi()
        except ValueError as exc:
            raise CLIError(str(exc)) from None
    if args.mode != "resident" and comm in ("nccl", "cuda-mpi"):
        raise CLIError(f"--mode {args.mode} exchanges gradients through the host: use --comm mpi or hierarchical")
    if args.mode == "pipelined" and backend == "numpy":
        raise CLIError("--mode pipelined overlaps host <-> GPU copies with GPU compute: it needs --backend cupy")
    return Device(backend=backend, mode=args.mode, gemm=args.gemm, comm=comm, graphs=not args.no_graphs,
                  pinned=args.pinned, overlap=args.overlap, chunks=args.chunks)


def config_from_args(args) -> Config:
    return Config(input_size=args.input_size, hidden_sizes=tuple(args.hidden_size), num_classes=args.num_classes,
                  reg=args.reg, learning_rate=args.learning_rate, train_size=args.train_size,
                  num_epochs=args.num_epochs, batch_size=args.batch_size, dtype=args.dtype, seed=args.seed,
                  test_size=args.test_size, validation_size=args.validation_size, print_every=args.print_every,
                  dataset=args.dataset, shuffle=args.shuffle)


def cmd_train(args, comm) -> dict:
    from perflab import results
    from perflab.train import runner

    cfg = config_from_args(args)
    parallel = args.parallel if args.parallel != "auto" else ("data" if comm.size > 1 else "sequential")
    quiet = args.json or comm.rank != 0
    device = device_from_args(args)
    history, _ = runner.train_on_ranks(cfg, parallel, comm, device, log=None if quiet else print,
                                       progress=not quiet and sys.stderr.isatty(), profiled=args.profile)
    summary = {"final_loss": history.final_loss, "test_precision": history.test_precision,
               "epoch_seconds": history.epoch_seconds, "parallel": parallel, "ranks": comm.size,
               "profiled": args.profile, **device_summary(device), **cfg.to_dict()}
    if cfg.validation_size:
        summary["validation_precision"] = history.epochs[-1]["validation_precision"]
    phases = None
    if args.profile:
        import pandas as pd
        tables = comm.allgather(history.phases)
        phases = pd.concat(tables, ignore_index=True)
        summary.update(phase_report(phases, cfg, parallel, comm.size, device, quiet))
    if comm.rank != 0:
        return summary
    if not args.json:
        precision = "n/a" if history.test_precision is None else f"{history.test_precision:.4f}"
        if cfg.validation_size:
            precision += f"  validation precision {summary['validation_precision']:.4f}"
        print(f"final loss {history.final_loss:.6f}  test precision {precision}  "
              f"time per epoch {history.epoch_seconds:.3f} s  ({parallel}, {comm.size} rank(s))")
    if args.save:
        meta = results.machine_metadata()
        fixed = {k: v for k, v in summary.items() if k not in ("final_loss", "test_precision", "epoch_seconds")}
        fixed["hidden_sizes"] = " ".join(map(str, cfg.hidden_sizes))
        folder = results.run_dir(meta)
        path = results.write_rows(folder / f"{args.save}.csv", [{**fixed, **row} for row in history.epochs],
                                  meta, append=False)
        summary["saved"] = str(path)
        if phases is not None:
            rows = [{**fixed, **row} for row in phases.to_dict("records")]
            summary["saved_phases"] = str(results.write_rows(folder / f"{args.save}_phases.csv", rows, meta, append=False))
        if not args.json:
            print(f"wrote {path}")
    return summary


def phase_report(phases, cfg, parallel, ranks, device, quiet) -> dict:
    """Nsight-like summary of a --profile run and the seeds' effective rates from its medians."""
    from perflab.analysis import perfmodel
    from perflab.train import profile
    table = profile.summary(phases[phases.phase != "train setup"])
    w = perfmodel.Workload(layers=cfg.layer_sizes, B=cfg.batch_size, p=ranks, parallel=parallel if parallel != "sequential" else "data",
                           dtype=cfg.dtype, staged=device.backend == "numpy" or device.mode in HOST_STAGED,
                           host_allreduce=device.backend == "numpy" or device.comm != "nccl", N=cfg.train_size)
    rates = perfmodel.effective_rates(w, table["median"].to_dict())
    if not quiet:
        shown = table.assign(**{c: table[c] * 1e3 for c in ("total", "median", "min", "max")})
        print("phase times in ms (device synchronized at phase edges; all ranks pooled):")
        print(shown.round(4).to_string())
        print("effective rates: " + ", ".join(f"{k} = {v:.4g}" for k, v in rates.items()))
    return {"phase_medians": table["median"].to_dict(), **rates}


def device_summary(device) -> dict:
    import dataclasses
    if device.backend == "numpy":
        return {"backend": "numpy", "comm": device.comm}
    return dataclasses.asdict(device)


def cmd_check(args, comm) -> dict:
    from perflab.train import runner

    device = device_from_args(args)
    result = runner.check(config_from_args(args), args.parallel, comm, device)
    result.update(device_summary(device))
    if comm.rank == 0 and not args.json:
        print(f"{args.parallel} parallel on {comm.size} rank(s), {result['dtype']}: "
              f"relative error vs the sequential reference (tolerance {result['tolerance']:.0e})")
        for name, err in result["errors"].items():
            print(f"  {name:4s} {err:.3e}  {'ok' if err <= result['tolerance'] else 'TOO LARGE'}")
        print(f"  replicas differ across ranks by at most {result['replica_max_abs_diff']:.3e}")
        print("PASSED" if result["passed"] else "FAILED")
    if not result["passed"]:
        args.exit_code = 1
    return result


def cmd_timeline(args, comm) -> dict:
    import pandas as pd

    from perflab.backend import cupy_or_none
    from perflab.measure import timeline
    from perflab.report import plots
    if args.redraw:
        saved = Path(args.redraw)
        if not saved.is_file():
            raise CLIError(f"--from {args.redraw}: no such file (perflab timeline writes <run folder>/timeline_H<H>_b<b>_p<p>.csv)")
        table = pd.read_csv(saved)
        name, ranks = saved.stem, int(table["rank"].max()) + 1
        title = saved.stem.replace("timeline_", "").replace("_", " ")
    else:
        if cupy_or_none() is None:
            raise CLIError("perflab timeline records CUDA streams: it needs CuPy and one GPU per rank")
        cfg = config_from_args(args)
        table = timeline.record(cfg, comm, args.modes, args.gemm, args.chunks, log=None if args.json or comm.rank else print)
        table = pd.concat(comm.allgather(table), ignore_index=True)
        if comm.rank != 0:
            return {}
        name, ranks = f"timeline_H{cfg.hidden_size}_b{cfg.batch_size // comm.size}_p{comm.size}", comm.size
        saved = save_rows(name, table.to_dict("records"), args.out)
        title = f"H={cfg.hidden_size}, b={cfg.batch_size // comm.size} a GPU, p={ranks}"
    lanes = timeline.lanes(table)
    busy = timeline.busy(lanes)
    folder = Path(args.out) if args.out else Path(saved).parent
    figure = plots.save(plots.timeline(lanes, title=f"{title}: the second epoch"), name,
                        "Where each phase of the staged path ran, rank 0, from CUDA events on each stream (the host "
                        "all-reduce from the host clock), nothing synchronized: in series each lane waits for the one "
                        f"before; pipelined, the copies and the host all-reduce run while the GPU computes ({ranks} "
                        f"rank(s)). Source: {Path(saved).name}.", folder / "figures")
    if not args.json:
        print(busy[busy["rank"] == 0].pivot_table(index="lane", columns="mode", values="busy_ms").round(3).to_string())
        print(f"wrote {saved}\nwrote {figure}")
    return {"saved": saved, "figure": str(figure), "busy": busy.to_dict("records")}


def cmd_data_fetch(args, comm) -> dict:
    from perflab import data
    folder = data.fetch(args.name, dest=args.dest, mirrors=args.mirror, timeout=args.timeout,
                        log=(lambda m: None) if args.json else print)
    return {"dataset": args.name, "folder": str(folder)}


def parallel_option(parser, default: str) -> None:
    parser.add_argument("--parallel", choices=("auto", "sequential", "data", "model") if default == "auto"
                        else ("data", "model"), default=default,
                        help="data: batch split over ranks, one fused gradient all-reduce a batch; model: hidden "
                             "units split over ranks (one hidden layer only), one all-reduce of the C x B logits; "
                             "auto: data under mpiexec with several ranks, else sequential (default %(default)s)")


def save_rows(name: str, rows: list[dict], out: str | None = None) -> str:
    from perflab import results
    meta = results.machine_metadata()
    folder = results.run_dir(meta) if out is None else __import__("pathlib").Path(out)
    return str(results.write_rows(folder / f"{name}.csv", rows, meta, append=False))


def cmd_bench_gemm(args, comm) -> dict:
    from perflab.measure import bench
    rows = bench.bench_gemm(variants=args.variants, dtype=args.dtype, hidden=args.hidden, batches=args.batches,
                            repeats=args.repeats, progress=not args.json, peers=args.peers,
                            log=(lambda m: None) if args.json else print,
                            on_shape=lambda so_far: save_rows(f"bench_gemm_{args.dtype}", so_far, args.out))
    saved = save_rows(f"bench_gemm_{args.dtype}", rows, args.out)
    if not args.json:
        print(bench.summarize_gemm(rows))
    return {"rows": len(rows), "saved": saved}


def cmd_bench_hold(args, comm) -> dict:
    from perflab.backend import cupy_or_none
    from perflab.measure import bench, power
    if cupy_or_none() is None:
        raise CLIError("bench hold replays GEMMs on the GPU while nvidia-smi samples it: it needs CuPy and a GPU")
    try:
        rows, samples = bench.bench_hold(args.shapes, seconds=args.seconds, rounds=args.rounds, progress=not args.json)
    except power.SamplingError as error:
        raise CLIError(str(error)) from None
    saved = save_rows("bench_hold", rows, args.out)
    save_rows("bench_hold_samples", samples, args.out)
    if not args.json:
        import pandas as pd
        table = pd.DataFrame(rows).groupby(["shape", "variant"], sort=False)[
            ["ms_first", "ms_held", "tflops_held", "pct_cublas_held", "clock_mhz", "power_w"]].median()
        print(table.round(4).to_string())
    return {"rows": len(rows), "saved": saved}


def cmd_bench_train(args, comm) -> dict:
    from perflab.measure import peers
    rows = peers.bench_train(configs=args.configs, N=args.train_size, peers=args.peers, repeats=args.repeats,
                             log=(lambda m: None) if args.json else print,
                             on_config=lambda so_far: save_rows("bench_train", so_far, args.out))
    saved = save_rows("bench_train", rows, args.out)
    if not args.json:
        import pandas as pd
        print(pd.DataFrame(rows).pivot_table(index=["H", "B"], columns="peer", values="epoch_ms").round(3).T.to_string())
    return {"rows": rows, "saved": saved}


def cmd_bench_allreduce(args, comm) -> dict:
    from perflab.backend import cupy_or_none
    from perflab.measure import bench
    if comm.size < 2:
        raise CLIError(f"bench allreduce needs several ranks, one per GPU: mpirun -n P perflab bench allreduce "
                       f"(P >= 2); got {comm.size} rank")
    if cupy_or_none() is None:
        raise CLIError("bench allreduce times GPU buffers: it needs CuPy and one GPU per rank")
    rows = bench.bench_allreduce(comm, sizes=args.sizes, repeats=args.repeats)
    if comm.rank != 0:
        return {"rows": rows}
    saved = save_rows(f"bench_allreduce_p{comm.size}", rows, args.out)
    if not args.json:
        import pandas as pd
        print(pd.DataFrame(rows).pivot_table(index="size_bytes", columns="impl", values="ms").round(4).to_string())
    return {"rows": rows, "saved": saved}


def cmd_bench_step(args, comm) -> dict:
    from perflab.measure import bench
    rows = [row for H, B in args.configs for row in bench.step_breakdown(H, B)]
    saved = save_rows("bench_step", rows, args.out)
    if not args.json:
        import pandas as pd
        print(pd.DataFrame(rows).pivot_table(index="kernel", columns=["H", "B"], values="ms", sort=False).round(4))
    return {"rows": rows, "saved": saved}


def cmd_compile(args, comm) -> dict:
    from perflab import kernels
    from perflab.backend import cupy_or_none
    if cupy_or_none() is None:
        raise CLIError("compile builds perflab's CUDA kernels into CuPy's cache: it needs CuPy and a GPU")
    import time
    t0 = time.perf_counter()
    count = kernels.compile_all(args.processes, progress=not args.json)
    seconds = time.perf_counter() - t0
    if not args.json:
        print(f"{count} modules compiled or found in CuPy's cache in {seconds:.0f} s")
    return {"modules": count, "seconds": seconds}


def cmd_ceilings(args, comm) -> dict:
    from perflab.backend import cupy_or_none
    from perflab.measure import ceilings
    gpu = {"auto": cupy_or_none() is not None, "cupy": True, "numpy": False}[args.backend]
    sizes = [2**k for k in range(12, args.max_log2_size + 1, 2)]
    rows = ceilings.measure(comm, gpu, sizes, log=(lambda m: None) if args.json or comm.rank else print,
                            kernels=not args.no_step_kernels)
    if comm.rank != 0:
        return {}
    import pandas as pd
    df = pd.DataFrame(rows)
    if not args.json:
        shown = df.assign(value=df["value"] / 1e9).rename(columns={"value": "value (G/s)"})
        print(shown.drop(columns=[c for c in ("seconds", "bus_value") if c in shown]).to_string(index=False))
    name = f"ceilings_p{comm.size}"
    return {"rows": len(rows), "saved": save_rows(name, rows, args.out)}


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
    points = sweep.grid(hidden=args.hidden, batch=args.batch, ranks=args.ranks, per_rank_batch=args.per_rank_batch,
                        parallel=args.parallel, backend=args.backend, mode=args.mode, gemm=args.gemm,
                        dtype=args.dtype, N=args.train_size, epochs=args.num_epochs, learning_rate=args.learning_rate)
    too_big = [pt["p"] for pt in points if pt["p"] > comm.size]
    if too_big:
        raise CLIError(f"the grid has points with p={max(too_big)} but {comm.size} rank(s) are running; "
                       f"start with mpiexec -n {max(too_big)} perflab sweep ...")
    path = sweep.run_grid_mpi(points, args.name, args.out, args.dataset, progress=not args.json and comm.rank == 0,
                              log=(lambda m: None) if args.json else print)
    if comm.rank == 0 and not args.json:
        print(f"wrote {path}")
    return {"points": len(points), "saved": str(path)}


NOTEBOOKS = ("roofline", "correctness", "convergence", "scaling", "kernels")


def cmd_notebook(args, comm) -> dict:
    """Execute notebooks/NAME.py (Jupytext percent format, the one source) end to end with
    papermill; the executed copy lands in <run folder>/notebooks/NAME.ipynb."""
    import ast

    import jupytext
    import papermill

    from perflab import results
    from perflab.data import PROJECT_ROOT
    params = {}
    for k, v in args.parameter or []:
        try:
            params[k] = ast.literal_eval(v)
        except (ValueError, SyntaxError):
            params[k] = v
    source = PROJECT_ROOT / "notebooks" / f"{args.name}.py"
    out = results.run_dir() / "notebooks" / f"{args.name}.ipynb"
    out.parent.mkdir(parents=True, exist_ok=True)
    notebook = jupytext.read(source)
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    papermill.execute_notebook(notebook, str(out), parameters=params, cwd=str(source.parent),
                               progress_bar=not args.json, kernel_name="python3")
    if not args.json:
        print(f"executed {source} -> {out}")
    return {"notebook": str(out), "parameters": params}


def cmd_report(args, comm) -> dict:
    from perflab.data import PROJECT_ROOT
    from perflab.report import markdown
    if args.markdown:
        from perflab.results import RESULTS_ROOT
        path = RESULTS_ROOT / "REPORT.md"
        path.write_text(markdown.analysis_markdown())
        if not args.json:
            print(f"wrote {path}")
        return {"report": str(path)}
    if args.readme:
        changed = markdown.update_readme(PROJECT_ROOT / "README.md")
        if not args.json:
            print("README results block " + ("updated" if changed else "already up to date"))
        return {"readme_changed": changed}
    if args.folder and not __import__("pathlib").Path(args.folder).is_dir():
        raise CLIError(f"--folder {args.folder}: no such folder (a run folder holds roofline.csv and figures/)")
    try:
        path = markdown.build(args.out, args.folder)
    except FileNotFoundError as exc:
        raise CLIError(str(exc)) from None
    if not args.json:
        print(f"wrote {path}")
    return {"report": str(path)}


def cmd_validate(args, comm) -> dict:
    """Predicted (from ceilings alone) against measured time per batch for every sweep point of
    this machine's run folder, or with --committed of every committed machine folder."""
    from perflab import results
    from perflab.analysis import validation
    if args.committed and (args.folder or args.out):
        raise CLIError("--committed validates every folder under results/ and writes each one's validation.csv; "
                       "--folder and --out name a single run folder instead: give one or the other")
    folders = validation.committed_folders() if args.committed else [Path(args.folder or results.run_dir())]
    summary = {}
    for folder in folders:
        if not folder.is_dir():
            raise CLIError(f"--folder {folder}: no such folder")
        table, path = validation.validate_folder(folder, args.out)
        summary[folder.name] = validation.summary(table)
        if not args.json:
            print(f"{folder.name}: {validation.describe(table)}; wrote {path}")
    return summary


def cmd_whatif(args, comm) -> dict:
    """Predict a grid of points from one ceilings file alone (any machine's, measured or described)."""
    import json

    import pandas as pd

    from perflab import results
    from perflab.analysis import predictor
    from perflab.data import atomic_write
    from perflab.workbook import sweep
    path = Path(args.ceilings)
    if not path.is_file():
        raise CLIError(f"--ceilings {args.ceilings}: no such file (perflab ceilings writes <run folder>/ceilings_p<P>.csv)")
    ceilings = predictor.Ceilings.load(path)
    points = sweep.grid(hidden=args.hidden, per_rank_batch=args.per_rank_batch, ranks=args.ranks,
                        backend=[args.backend], mode=args.mode, N=args.train_size)
    rows = []
    for point in points:
        try:
            pred = predictor.predict_point(point, ceilings)
        except predictor.PredictionError as exc:
            raise CLIError(str(exc)) from None
        rows.append({k: point[k] for k in ("H", "B", "p", "backend", "mode", "N")}
                    | {"b": point["B"] // point["p"], "batch_ms": 1e3 * pred["batch_s"], "epoch_ms": 1e3 * pred["epoch_s"],
                       "composition": pred["composition"]} | {k: 1e3 * v for k, v in pred.items() if k.startswith("t_")})
    meta = json.loads(path.with_suffix(".json").read_text()) if path.with_suffix(".json").exists() else {}
    out = Path(args.out or results.run_dir()) / f"{args.name}.json"
    made = {"method": "perflab.analysis.predictor from the ceilings file alone (no training run)", "ceilings": str(path),
            "ceilings_machine": {k: meta.get(k) for k in ("gpu", "gpu_count", "cpu", "cpu_count", "git_commit", "date")},
            "predicted_by": results.git_commit(), "rows": rows}
    atomic_write(out, (json.dumps(made, indent=1) + "\n").encode())
    if not args.json:
        print(pd.DataFrame(rows).drop(columns=["composition"]).round(3).to_string(index=False))
        print(f"wrote {out}")
    return {"saved": str(out), "rows": rows}


def cmd_predict(args, comm) -> dict:
    import json

    from perflab.analysis import projection
    from perflab.data import atomic_write
    from perflab.results import RESULTS_ROOT
    if not (RESULTS_ROOT / "nvidia-h200" / args.calibration).exists():
        raise CLIError(f"--calibration {args.calibration}: no such file in {RESULTS_ROOT / 'nvidia-h200'}")
    if args.multinode:
        table = projection.multinode(RESULTS_ROOT, per_node=args.per_node, inter=(args.inter_latency, args.inter_bw),
                                     scaling=args.calibration)
        out = RESULTS_ROOT / "predictions" / f"{args.name}.csv"
        out.parent.mkdir(parents=True, exist_ok=True)
        table.to_csv(out, index=False)
        if not args.json:
            print(table.pivot_table(index="p", columns="strategy", values="efficiency").round(3).to_string())
            print(f"wrote {out}")
        return {"saved": str(out)}
    prediction = projection.predictions(RESULTS_ROOT, ranks=args.ranks, scaling=args.calibration)
    out = RESULTS_ROOT / "predictions" / f"{args.name}.json"
    atomic_write(out, (json.dumps(prediction, indent=1) + "\n").encode())
    if not args.json:
        import pandas as pd
        print(pd.DataFrame(prediction["rows"]).round(3).to_string(index=False))
        print(f"wrote {out}")
    return {"saved": str(out)}


def positive(text: str) -> int:
    """argparse type: an integer >= 1, named in the error otherwise."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def hold_seconds(text: str) -> float:
    """argparse type: seconds a hold lasts, 0.2 to 60 (shorter leaves no clock samples to speak of)."""
    value = positive_float(text)
    if not 0.2 <= value <= 60:
        raise argparse.ArgumentTypeError(f"expected seconds from 0.2 to 60, got {text!r}")
    return value


def gemm_shape(text: str) -> str:
    """argparse type: a training GEMM shape as bench gemm names it ("fwd1 H=512 B=3200")."""
    from perflab.measure.gemm_inputs import gemm_shapes
    names = [s[0] for s in gemm_shapes()]
    if text not in names:
        raise argparse.ArgumentTypeError(f"unknown shape {text!r}: expected one of {', '.join(names)}")
    return text


def hidden_batch(text: str) -> tuple[int, int]:
    """'512,3200' -> (512, 3200), for --configs."""
    try:
        h, b = (int(v) for v in text.split(","))
        if h > 0 and b > 0:
            return h, b
    except ValueError:
        pass
    raise argparse.ArgumentTypeError(f"expected H,B with two positive integers like 512,3200, got {text!r}")


def outputs(parser, folder: bool = True):
    """The output options most commands share: --out DIR for the result CSV, and --json."""
    if folder:
        parser.add_argument("--out", metavar="DIR", help="folder for the CSV (default this machine's run folder, runs/<machine key>/)")
    parser.add_argument("--json", action="store_true", help="print one JSON object on the last line")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="perflab",
        description="Train the seeds' MLP (784-H-10, sigmoid, softmax + cross-entropy, L2, SGD) and measure it.")
    from perflab import __version__
    parser.add_argument("--version", action="version", version=f"perflab {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("train", help="train the MLP and print loss, test precision and time per epoch",
                       description="Train the MLP: the sequential NumPy reference, or data/model parallel "
                                   "over MPI ranks (mpiexec -n P perflab train --parallel data).")
    hyperparameter_options(p)
    parallel_option(p, "auto")
    device_options(p)
    p.add_argument("--profile", action="store_true",
                   help="time every phase (the seeds' NVTX names), synchronizing the device at phase edges; prints an "
                        "Nsight-like summary and P_flops/P_pci/P_mpi. Without it only whole epochs are timed.")
    p.add_argument("--save", metavar="NAME", help="write the per-epoch table to <run folder>/NAME.csv (+ .json metadata)")
    outputs(p, folder=False)
    p.set_defaults(run=cmd_train)

    p = sub.add_parser("check", help="compare a parallel run with the sequential reference (the seeds' test)",
                       description="Train the parallel trainer and the sequential NumPy reference from the same "
                                   "initial parameters on the same data; report per-parameter relative Frobenius "
                                   "errors. Passes at <= 1e-12 (float64) or <= 1e-5 (float32); exit status 1 if not. "
                                   "Run under mpiexec -n P.")
    hyperparameter_options(p)
    parallel_option(p, "data")
    device_options(p)
    outputs(p, folder=False)
    p.set_defaults(run=cmd_check)

    p = sub.add_parser("sweep", help="measure a grid of points (H, B, p, mode, ...) into <run folder>/NAME.csv",
                       description="Each point trains (N samples, E epochs) unprofiled for the epoch time and once "
                                   "profiled for the phase medians; its row is written as soon as it finishes, and a "
                                   "rerun skips points already in the file. Run under mpiexec -n P (P >= largest p); "
                                   "points with fewer ranks use the first p.")
    from perflab.kernels import GEMM_VARIANTS as variants
    p.add_argument("--name", default="sweep", help="result file name (default %(default)s)")
    p.add_argument("--hidden", nargs="+", type=positive, default=[512], metavar="H", help="hidden sizes (default 512)")
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
    p.add_argument("--dtype", nargs="+", choices=DTYPES, default=["float32"], help="default float32")
    p.add_argument("--train-size", type=positive, default=38400, metavar="N",
                   help="samples an epoch (default %(default)s, the seeds')")
    p.add_argument("--num-epochs", type=positive, default=1, help="timed epochs a point, after one warm-up "
                                                                  "(default %(default)s)")
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

    p = sub.add_parser("timeline", help="a few steps of the staged and pipelined paths drawn lane by lane (GPU)",
                       description="Train two short epochs per mode with every phase's start and end recorded on its "
                                   "CUDA stream (and the host all-reduce on the host clock), nothing synchronized; "
                                   "writes <run folder>/timeline_H<H>_b<b>_p<p>.csv and a figure of the second epoch. "
                                   "Keep the epoch to a few batches (--train-size a few times --batch-size). Run under "
                                   "mpiexec -n P for the host all-reduce.")
    hyperparameter_options(p)
    from perflab.kernels import GEMM_VARIANTS
    p.add_argument("--modes", nargs="+", choices=MODES, default=["staged", "pipelined"], help="default staged pipelined")
    p.add_argument("--from", dest="redraw", metavar="CSV", help="redraw the figure of a recorded timeline (no GPU needed)")
    p.add_argument("--gemm", choices=GEMM_VARIANTS, default="cublas", help="as for train (default %(default)s)")
    p.add_argument("--chunks", type=positive, default=4, metavar="K", help="as for train (default %(default)s)")
    outputs(p)
    p.set_defaults(run=cmd_timeline)

    p = sub.add_parser("notebook", help="run a workbook notebook end to end (papermill)",
                       description="Execute notebooks/NAME.py (Jupytext percent format: open it in Jupyter with jupytext "
                                   "installed, or edit it as text) with parameters; the executed copy and its figures "
                                   "go to results/. Example: perflab notebook roofline -p engines 4 -p backend cupy")
    p.add_argument("name", choices=NOTEBOOKS)
    p.add_argument("-p", "--parameter", nargs=2, action="append", metavar=("NAME", "VALUE"),
                   help="override a parameter (Python literal)")
    outputs(p, folder=False)
    p.set_defaults(run=cmd_notebook)

    p = sub.add_parser("report", help="the report PDF of a run: the seeds' questions answered from its results, its figures",
                       description="Writes <run folder>/report.pdf: FLOPs and bytes, effective rates, rooflines with "
                                   "their points, predicted against measured, scaling, convergence, correctness, each "
                                   "with tables and a text generated from the numbers.")
    p.add_argument("--out", metavar="PDF", help="default <run folder>/report.pdf")
    p.add_argument("--readme", action="store_true", help="instead: regenerate the README's results block from results/")
    p.add_argument("--markdown", action="store_true", help="instead: write results/REPORT.md (the seeds' questions "
                                                           "answered from the committed GPU results)")
    p.add_argument("--folder", metavar="DIR", help="the run folder to report on (default: this machine's, "
                                                    "runs/<machine key>/; a committed one: results/nvidia-h200)")
    outputs(p, folder=False)
    p.set_defaults(run=cmd_report)

    p = sub.add_parser("validate", help="the predictor against every measured sweep point (ceilings alone, no fit)",
                       description="For each sweep point (roofline*.csv, parallel.csv) of a run folder: the time per batch "
                                   "the predictor composes from the folder's ceilings_p<P>.csv (perflab ceilings) against "
                                   "the measured unprofiled epoch over its batches; writes validation.csv beside them "
                                   "with the ceilings file each prediction used.")
    p.add_argument("--folder", metavar="DIR", help="default this machine's run folder, runs/<machine key>/")
    p.add_argument("--committed", action="store_true", help="every machine folder under results/ instead (developers: "
                                                            "rewrites their validation.csv)")
    p.add_argument("--out", metavar="CSV", help="with --folder: write here instead of <folder>/validation.csv")
    outputs(p, folder=False)
    p.set_defaults(run=cmd_validate)

    p = sub.add_parser("whatif", help="predict points from a ceilings file alone (perflab.analysis.predictor; no training run)",
                       description="Time per batch and per epoch of every (H, b, p, mode) point composed from one "
                                   "ceilings file (perflab ceilings on that machine): commit the prediction before the "
                                   "run that tests it. Writes <run folder>/NAME.json (or --out DIR) naming the file used.")
    p.add_argument("--ceilings", required=True, metavar="CSV", help="a ceilings_p<P>.csv (P >= the largest --ranks)")
    p.add_argument("--hidden", nargs="+", type=positive, default=[512], metavar="H")
    p.add_argument("--per-rank-batch", nargs="+", type=positive, default=[3000], metavar="b", help="samples per rank per step")
    p.add_argument("--ranks", nargs="+", type=positive, default=[1], metavar="P")
    p.add_argument("--backend", choices=("numpy", "cupy"), default="cupy")
    p.add_argument("--mode", nargs="+", choices=MODES, default=["resident"])
    p.add_argument("--train-size", type=positive, default=60000, metavar="N")
    p.add_argument("--name", default="whatif", help="file name (default %(default)s)")
    p.add_argument("--out", metavar="DIR", help="folder (default this machine's run folder)")
    outputs(p, folder=False)
    p.set_defaults(run=cmd_whatif)

    p = sub.add_parser("predict", help="predict scaling to p GPUs from the committed H200 measurements",
                       description="Projected epoch time and efficiency (data parallel, model parallel; H in {512, 2048}, "
                                   "b in {800, 3000} per GPU, N = 60000) for p GPUs, from the NCCL all-reduce fit and the "
                                   "one-GPU steps measured on the H200s; written to results/predictions/NAME.json.")
    p.add_argument("--ranks", nargs="+", type=positive, default=[1, 2, 4, 8], help="GPU counts (default 1 2 4 8)")
    p.add_argument("--name", default="p8", help="result name under results/predictions/ (default %(default)s)")
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

    p = sub.add_parser("ceilings", help="measure this machine's ceilings (GEMM rate, PCIe, MPI/NCCL all-reduce)",
                       description="Microbenchmarks for the rooflines, saved to <run folder>/ceilings_p<P>.csv with "
                                   "machine metadata: BLAS GEMM at the training shapes, and on a GPU cuBLAS and perflab's "
                                   "GEMM, host<->device bandwidth (pageable, pinned) and the device copy rate; under "
                                   "mpiexec -n P also MPI (and on GPUs NCCL) all-reduce bandwidth against size; and what "
                                   "the predictor composes a step from: every kernel of the step over an H x B grid, the "
                                   "host's floor of a step, the staged path's host gather (perflab validate).")
    p.add_argument("--backend", choices=("auto", "numpy", "cupy"), default="auto")
    p.add_argument("--no-step-kernels", action="store_true", help="skip the step's kernels over H x B (the predictor "
                                                                   "needs them; they take about a minute)")
    p.add_argument("--max-log2-size", type=positive, default=26, help="largest buffer, 2**K bytes (default %(default)s)")
    outputs(p)
    p.set_defaults(run=cmd_ceilings)

    p = sub.add_parser("compile", help="compile every CUDA kernel into CuPy's cache now, in parallel (GPU)",
                       description="perflab's kernels are compiled (NVRTC) at first use, one module at a time: "
                                   "minutes on a fresh machine. This compiles all of them in parallel processes into "
                                   "CuPy's kernel cache (CUPY_CACHE_DIR, default ~/.cupy/kernel_cache), so later runs "
                                   "start at once.")
    p.add_argument("--processes", type=positive, help="compiler processes (default: one a CPU core)")
    outputs(p, folder=False)
    p.set_defaults(run=cmd_compile)

    p = sub.add_parser("bench", help="benchmarks: perflab beside its peers in one run (GPU)")
    bsub = p.add_subparsers(dest="bench_command", required=True, metavar="WHAT")
    from perflab.kernels import GEMM_VARIANTS
    from perflab.measure.gemm_peers import GEMM_PEERS
    b = bsub.add_parser("gemm", help="every GEMM variant beside cuBLAS, PyTorch and JAX at the training shapes",
                        description="Times each GEMM variant, cuBLAS and the installed SGEMM peers (calls captured in a "
                                    "CUDA graph and replayed between CUDA events, median, inputs rotated past L2) at the "
                                    "forward/backward shapes for H x B; prints TFLOP/s, % of cuBLAS and of the fastest "
                                    "peer, % of the FP32 peak; writes <run folder>/bench_gemm_<dtype>.csv after each "
                                    "shape.")
    b.add_argument("--variants", nargs="+", choices=GEMM_VARIANTS, default=list(GEMM_VARIANTS),
                   help="default: all")
    b.add_argument("--dtype", choices=DTYPES, default="float32", help="default float32")
    b.add_argument("--hidden", nargs="+", type=positive, default=[512, 1024, 2048], metavar="H",
                   help="hidden sizes of the training shapes (default 512 1024 2048)")
    b.add_argument("--batches", nargs="+", type=positive, default=[800, 3200, 12000], metavar="B",
                   help="batch sizes of the training shapes (default 800 3200 12000)")
    b.add_argument("--repeats", type=positive, default=20, help="timed repeats, median kept (default %(default)s)")
    b.add_argument("--peers", nargs="*", choices=GEMM_PEERS, default=list(GEMM_PEERS), metavar="PEER",
                   help=f"SGEMM peers beside cuBLAS, float32 only, each in its own process; a missing one is skipped "
                        f"with a message (default: {' '.join(GEMM_PEERS)}; none: --peers alone)")
    outputs(b)
    b.set_defaults(run=cmd_bench_gemm)
    from perflab.measure.bench import HOLD_SHAPES
    b = bsub.add_parser("hold", help="best and cuBLAS held on a shape for seconds, with the SM clock and power",
                        description="Replays best (tuned) and cuBLAS in turn on each shape for --seconds, --rounds times, "
                                    "while nvidia-smi samples the SM clock, power and clock event reasons every 50 ms. "
                                    "A short burst runs at the boost clock; held, a large GEMM runs at what the power "
                                    "cap leaves it. Writes <run folder>/bench_hold.csv (ms of the first replays and "
                                    "of the held second half, % of cuBLAS held, clock and power) and "
                                    "bench_hold_samples.csv (every sample).")
    b.add_argument("--shapes", nargs="+", type=gemm_shape, default=list(HOLD_SHAPES), metavar="SHAPE",
                   help=f"shapes as bench gemm names them (default: {'; '.join(HOLD_SHAPES)})")
    b.add_argument("--seconds", type=hold_seconds, default=2.0, help="seconds each hold lasts, 0.2-60 (default 2)")
    b.add_argument("--rounds", type=positive, default=2, help="times best and cuBLAS alternate a shape (default 2)")
    outputs(b)
    b.set_defaults(run=cmd_bench_hold)
    from perflab.measure.peers import PEERS
    b = bsub.add_parser("train", help="an epoch of perflab beside PyTorch, JAX and the cuBLAS floor",
                        description="Median ms per epoch (N samples, resident on the GPU, FP32, TF32 off) for perflab "
                                    "and every installed peer; a missing peer is skipped with a message.")
    b.add_argument("--configs", nargs="+", type=hidden_batch, default=[(512, 3200), (1024, 3200), (2048, 12000)],
                   metavar="H,B", help="hidden size and batch pairs (default 512,3200 1024,3200 2048,12000)")
    b.add_argument("--train-size", type=positive, default=60000)
    b.add_argument("--peers", nargs="+", choices=list(PEERS), metavar="PEER", help=f"subset of: {', '.join(PEERS)}")
    b.add_argument("--repeats", type=positive, default=5)
    outputs(b)
    b.set_defaults(run=cmd_bench_train)

    b = bsub.add_parser("step", help="each kernel of one training step, timed alone (where the time goes)",
                        description="Device ms of every kernel of perflab's training step at H x B (and of the unfused "
                                    "backward kernels), graph-timed, with bytes moved and % of the device-copy rate; "
                                    "writes <run folder>/bench_step.csv.")
    b.add_argument("--configs", nargs="+", type=hidden_batch, default=[(512, 3200), (2048, 12000)], metavar="H,B")
    outputs(b)
    b.set_defaults(run=cmd_bench_step)

    from perflab.measure.bench import ALLREDUCE_SIZES
    b = bsub.add_parser("allreduce", help="the gradient all-reduce: perflab's NCCL and staged MPI beside torch.distributed",
                        description="Run under mpirun, one rank per GPU. Device ms of one float32 all-reduce (CUDA events "
                                    "around 10 back-to-back calls, median) through perflab's NCCL, perflab's host-staged "
                                    "MPI (host-timed) and torch.distributed's NCCL, with bus bandwidth and the ratio to the "
                                    "fastest peer; writes <run folder>/bench_allreduce_p<P>.csv.")
    b.add_argument("--sizes", nargs="+", type=positive, default=list(ALLREDUCE_SIZES), metavar="BYTES",
                   help="buffer sizes in bytes (default: 64 KiB to 64 MiB, with the H=512 and H=2048 gradients)")
    b.add_argument("--repeats", type=positive, default=10, help="timed repeats per size; the median is kept "
                                                                "(default %(default)s)")
    outputs(b)
    b.set_defaults(run=cmd_bench_allreduce)

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
    except (ConfigError, DataError, CLIError, RuntimeError) as exc:
        from perflab.train.loop import Diverged
        deterministic = isinstance(exc, (ConfigError, Diverged))
        if comm.rank == 0 or not deterministic:
            where = f"rank {comm.rank}: " if comm.size > 1 else ""
            print(f"perflab: error: {where}{exc}", file=sys.stderr, flush=True)
        if comm.size > 1 and not deterministic:
            comm.abort(2)
        raise SystemExit(2) from None
    except Exception as exc:
        if comm.size == 1:
            raise
        print(f"perflab: error: rank {comm.rank}: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        comm.abort(1)
    if args.json and comm.rank == 0:
        print(json.dumps(summary, default=str))
    return args.exit_code


if __name__ == "__main__":
    sys.exit(main())
