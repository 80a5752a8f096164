"""`perflab train` and `perflab check`: the trainers, run on every rank."""
from __future__ import annotations

import sys

from perflab.commands.options import (
    config_from_args,
    device_options,
    device_summary,
    file_name,
    first_line,
    hyperparameter_options,
    outputs,
    parallel_option,
    run_spec,
    writable_folder,
)
from perflab.config import HALF_DTYPES, HOST_STAGED


def cmd_train(args, comm) -> dict:
    from perflab import results
    from perflab.train import runner

    cfg = config_from_args(args)
    parallel = args.parallel if args.parallel != "auto" else ("data" if comm.size > 1 else "sequential")
    quiet = args.json or comm.rank != 0
    spec = run_spec(args, parallel)
    folder = writable_folder(results.run_dir(results.machine_metadata()), "--save") if args.save else None
    if not quiet:
        print(first_line("train", cfg, spec, comm.size))
    history, trainer = train_until_stopped(args, cfg, parallel, comm, spec, quiet)
    chosen = runner.exchange_summary(trainer)
    spec = spec.replace(exchange="overlap" if chosen["overlap"] else chosen["comm"]) if chosen else spec
    summary = {"final_loss": history.final_loss, "test_precision": history.test_precision,
               "epoch_seconds": history.epoch_seconds, "parallel": parallel, "ranks": comm.size,
               "profiled": args.profile, **device_summary(spec), **chosen, **cfg.to_dict()}
    if cfg.validation_size:
        summary["validation_precision"] = history.epochs[-1]["validation_precision"]
    phases = None
    if args.profile:
        import pandas as pd
        tables = comm.allgather(history.phases)
        phases = pd.concat(tables, ignore_index=True)
        summary.update(phase_report(phases, cfg, parallel, comm.size, spec, quiet))
    if comm.rank != 0:
        return summary
    if args.json or args.save:  # a run's --json line (and --save's file) is a result row: where and at which commit
        summary["machine"] = results.machine_metadata()
    if not args.json:
        precision = "n/a" if history.test_precision is None else f"{history.test_precision:.4f}"
        if cfg.validation_size:
            precision += f"  validation precision {summary['validation_precision']:.4f}"
        print(f"final loss {history.final_loss:.6f}  test precision {precision}  "
              f"time per epoch {history.epoch_seconds:.3f} s  ({parallel}, {comm.size} rank(s))")
        if chosen.get("exchange_trial_s"):
            print(runner.trial_text(chosen))
    if args.save:
        save_run(args, summary, history, phases, cfg, folder)
    return summary


def train_until_stopped(args, cfg, parallel, comm, spec, quiet):
    """train_on_ranks; Ctrl-C ends it with one line saying what was kept (train keeps no checkpoint)."""
    from perflab.train import runner
    from perflab.train.loop import Stopped
    try:
        return runner.train_on_ranks(cfg, parallel, comm, spec, log=None if quiet else print,
                                     progress=not quiet and sys.stderr.isatty(), profiled=args.profile)
    except KeyboardInterrupt as exc:
        done = len(exc.history.epochs) if hasattr(exc, "history") else 0
        where = f" in epoch {exc.epoch + 1} of {exc.epochs}" if hasattr(exc, "epoch") else ""
        raise Stopped(f"stopped by Ctrl-C{where}: {done} epoch(s) finished, their loss lines above; nothing was "
                      f"written{' to --save ' + args.save if args.save else ''} (train keeps no checkpoint): run the "
                      "same command again to train from the start", code=130, everywhere=True) from None


def save_run(args, summary, history, phases, cfg, folder) -> None:
    """--save: the per-epoch table (and --profile's phases); a write that fails ends in one line saying so."""
    from perflab import results
    from perflab.train.loop import Stopped, disk_error
    meta = summary["machine"]
    fixed = {k: v for k, v in summary.items() if k not in ("final_loss", "test_precision", "epoch_seconds", "machine")}
    fixed["hidden_sizes"] = " ".join(map(str, cfg.hidden_sizes))
    try:
        path = results.write_rows(folder / f"{args.save}.csv", [{**fixed, **row} for row in history.epochs],
                                  meta, append=False)
        summary["saved"] = str(path)
        if phases is not None:
            rows = [{**fixed, **row} for row in phases.to_dict("records")]
            summary["saved_phases"] = str(results.write_rows(folder / f"{args.save}_phases.csv", rows, meta,
                                                             append=False))
    except OSError as exc:
        raise Stopped(f"trained, but --save {args.save} could not be written to {folder}: {disk_error(exc)}; "
                      "the results are in the line above: free space (or fix the folder) and run again") from None
    if not args.json:
        print(f"wrote {path}")


def phase_report(phases, cfg, parallel, ranks, spec, quiet) -> dict:
    """Nsight-like summary of a --profile run and the seeds' effective rates from its medians."""
    from perflab.analysis import perfmodel
    from perflab.train import profile
    table = profile.summary(phases[phases.phase != "train setup"])
    w = perfmodel.Workload(layers=cfg.layer_sizes, B=cfg.batch_size, p=ranks, parallel=parallel if parallel != "sequential" else "data",
                           dtype=cfg.dtype, staged=spec.backend == "numpy" or spec.mode in HOST_STAGED,
                           host_allreduce=spec.backend == "numpy" or spec.comm not in ("nccl", "nccl-half"),
                           N=cfg.train_size)
    rates = perfmodel.effective_rates(w, table["median"].to_dict())
    if not quiet:
        shown = table.assign(**{c: table[c] * 1e3 for c in ("total", "median", "min", "max")})
        print("phase times in ms (device synchronized at phase edges; all ranks pooled):")
        print(shown.round(4).to_string())
        print("effective rates: " + ", ".join(f"{k} = {v:.4g}" for k, v in rates.items()))
    return {"phase_medians": table["median"].to_dict(), **rates}


def cmd_check(args, comm) -> dict:
    from perflab import results
    from perflab.train import runner

    spec = run_spec(args)
    cfg = config_from_args(args)
    if comm.rank == 0 and not args.json:
        print(first_line("check", cfg, spec, comm.size))
    result = runner.check(cfg, args.parallel, comm, spec)
    result = {**device_summary(spec), **result,  # the exchange --comm auto kept over the asked one
              "parallel_checked": comm.size > 1}
    if comm.rank == 0 and args.json:
        result["machine"] = results.machine_metadata()  # as train's: the --json line is a result row
    if comm.rank == 0 and not args.json:
        print(f"{args.parallel} parallel on {comm.size} rank(s), {result['dtype']}: "
              f"relative error vs the sequential reference (tolerance {result['tolerance']:.0e})")
        for name, err in result["errors"].items():
            print(f"  {name:4s} {err:.3e}  {'ok' if err <= result['tolerance'] else 'TOO LARGE'}")
        print(f"  replicas differ across ranks by at most {result['replica_max_abs_diff']:.3e}")
        if result.get("exchange_trial_s"):
            print(f"  {runner.trial_text(result)}")
        print(("PASSED" if result["passed"] else "FAILED") + ("" if comm.size > 1 else ONE_RANK))
        if not result["passed"] and result["dtype"] in HALF_DTYPES and result["replica_max_abs_diff"] == 0:
            print("  " + ("The replicas agree, so the exchange did not err. " if comm.size > 1 else "") + HALF_MISS)
    if not result["passed"]:
        args.exit_code = 1
    return result


HALF_MISS = ("A half-precision run is checked against its own step emulated on the CPU, which rounds every product where "
             "the GPU's fused output layer keeps about FP32's accuracy; a bias starts at zero, so its relative error "
             "can be large, and it grows with the learning rate and the net's width. Check with a smaller "
             "--learning-rate, or the parallel code itself with --dtype float32.")
ONE_RANK = (" on one rank: nothing parallel was checked (no gradient was split or exchanged; the trainer ran as "
            "the sequential one does): run it under mpiexec -n 2 or more")


def register(sub) -> None:
    p = sub.add_parser("train", help="train the MLP and print loss, test precision and time per epoch",
                       description="Train the MLP: the sequential NumPy reference, or data/model parallel "
                                   "over MPI ranks (mpiexec -n P perflab train --parallel data).")
    hyperparameter_options(p)
    parallel_option(p, "auto")
    device_options(p)
    p.add_argument("--profile", action="store_true",
                   help="time every phase (the seeds' NVTX names), synchronizing the device at phase edges; prints an "
                        "Nsight-like summary and P_flops/P_pci/P_mpi. Without it only whole epochs are timed.")
    p.add_argument("--save", metavar="NAME", type=file_name, help="write the per-epoch table to <run folder>/NAME.csv (+ .json metadata)")
    outputs(p, folder=False)
    p.set_defaults(run=cmd_train)

    from perflab.train.runner import TOLERANCE
    tolerances = ", ".join(f"{name} {tol:.0e}" for name, tol in TOLERANCE.items())
    p = sub.add_parser("check", help="compare a parallel run with the sequential reference (the seeds' test)",
                       description="Train the parallel trainer and the sequential NumPy reference from the same "
                                   "initial parameters on the same data; report per-parameter relative Frobenius "
                                   f"errors. Passes where each is within its precision's tolerance ({tolerances}; "
                                   "tf32: one TF32 product a GEMM, --gemm tf32 or wgmma in float32) and the replicas "
                                   "agree to the bit; exit status 1 if not. A half-precision run's reference is its "
                                   "own step, emulated on the CPU. Run under mpiexec -n P.")
    hyperparameter_options(p)
    parallel_option(p, "data")
    device_options(p)
    outputs(p, folder=False)
    p.set_defaults(run=cmd_check)
