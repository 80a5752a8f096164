"""`perflab timeline`, `ceilings`, `compile` and `bench`: the machine and perflab beside its peers."""
from __future__ import annotations

from pathlib import Path

from perflab.analysis.perfmodel import widths
from perflab.commands.options import (
    CLIError,
    config_from_args,
    gemm_shape,
    hold_seconds,
    hyperparameter_options,
    net_batch,
    net_options,
    nets,
    outputs,
    positive,
    require_cupy,
    save_rows,
)
from perflab.config import DTYPES, HALF_DTYPES


def cmd_timeline(args, comm) -> dict:
    import pandas as pd

    from perflab.measure import timeline
    from perflab.report import plots
    if args.redraw:
        saved = Path(args.redraw)
        if not saved.is_file():
            raise CLIError(f"--from {args.redraw}: no such file (perflab timeline writes <run folder>/timeline_H<H>_b<b>_p<p>.csv)")
        table = pd.read_csv(saved)
        name, ranks = saved.stem, int(table["rank"].max()) + 1
        title = saved.stem.replace("timeline_", "").replace("_", " ") + (f", {table.dtype[0]}" if "dtype" in table else "")
    else:
        require_cupy("perflab timeline records CUDA streams, one GPU a rank: it")
        cfg = config_from_args(args)
        table = timeline.record(cfg, comm, args.modes, args.gemm, args.chunks, log=None if args.json or comm.rank else print)
        table = pd.concat(comm.allgather(table), ignore_index=True)
        if comm.rank != 0:
            return {}
        net = "-".join(map(str, cfg.hidden_sizes))
        name, ranks = f"timeline_H{net}_b{cfg.batch_size // comm.size}_p{comm.size}", comm.size
        saved = save_rows(name, table.to_dict("records"), args.out)
        title = f"H={net}, b={cfg.batch_size // comm.size} a GPU, p={ranks}, {cfg.dtype}"
    lanes = timeline.lanes(table)
    busy = timeline.busy(lanes)
    folder = Path(args.out) if args.out else Path(saved).parent
    figure = plots.save(plots.timeline(lanes, title=f"{title}: the second epoch"), name,
                        "Where each phase of a training step ran, rank 0, from CUDA events on each stream (the host "
                        "all-reduce from the host clock), nothing synchronized: staged, each lane waits for the one "
                        "before; pipelined, the copies and the host all-reduce run while the GPU computes; overlap, "
                        f"NCCL's all-reduces run on a side stream under backward ({ranks} rank(s)); each step launched "
                        "kernel by kernel (recorded phases cannot sit in a CUDA graph). "
                        f"Source: {Path(saved).name}.", folder / "figures")
    if not args.json:
        print(busy[busy["rank"] == 0].pivot_table(index="lane", columns="mode", values="busy_ms").round(3).to_string())
        print(f"wrote {saved}\nwrote {figure}")
    return {"saved": saved, "figure": str(figure), "busy": busy.to_dict("records")}


def cmd_ceilings(args, comm) -> dict:
    from perflab.backend import cupy_or_none
    from perflab.measure import ceilings
    if args.backend == "cupy":
        require_cupy("--backend cupy")
    gpu = {"auto": cupy_or_none() is not None, "cupy": True, "numpy": False}[args.backend]
    sizes = [2**k for k in range(12, args.max_log2_size + 1, 2)]
    asked = [widths(n) for n in nets(args, default=())]
    if args.grid == "asked" and not (asked and args.per_rank_batch):
        raise CLIError("--grid asked times the step's kernels at the nets and batches asked alone: name them with "
                       "--hidden NET... and --per-rank-batch B...")
    grid = ceilings.step_grid(gpu, asked, args.per_rank_batch or (), asked_only=args.grid == "asked")
    rows = ceilings.measure(comm, gpu, sizes, log=(lambda m: None) if args.json or comm.rank else print,
                            kernels=not args.no_step_kernels, grid=grid, nets=asked)
    if comm.rank != 0:
        return {}
    if not args.json:
        print(ceilings.summary(rows))
    name = f"ceilings_p{comm.size}"
    return {"rows": len(rows), "saved": save_rows(name, rows, args.out)}


def cmd_compile(args, comm) -> dict:
    from perflab import kernels
    require_cupy("perflab compile builds perflab's CUDA kernels into CuPy's cache: it")
    import time
    t0 = time.perf_counter()
    count = kernels.compile_all(args.processes, progress=not args.json)
    seconds = time.perf_counter() - t0
    if not args.json:
        print(f"{count} modules compiled or found in CuPy's cache in {seconds:.0f} s")
    return {"modules": count, "seconds": seconds}


def cmd_bench_gemm(args, comm) -> dict:
    from perflab.kernels import GEMM_VARIANTS
    from perflab.measure import bench
    from perflab.measure.gemm_peers import GEMM_PEERS
    half = args.dtype in HALF_DTYPES
    if half and (args.variants != list(GEMM_VARIANTS) or args.peers != list(GEMM_PEERS)):
        raise CLIError(f"bench gemm --dtype {args.dtype} times perflab's half wgmma GEMM beside cuBLAS's, no other "
                       "variant or peer: leave out --variants and --peers (they are for float32 and float64)")
    require_cupy("perflab bench gemm times GEMMs on the GPU: it")
    if half:  # perflab's half wgmma GEMM beside cuBLAS's at the half step's GEMMs
        rows = bench.bench_half_gemm(args.dtype, hidden=args.hidden, batches=args.batches, repeats=args.repeats,
                                     progress=not args.json,
                                     on_shape=lambda so_far: save_rows(f"bench_gemm_{args.dtype}", so_far, args.out))
        saved = save_rows(f"bench_gemm_{args.dtype}", rows, args.out)
        if not args.json:
            import pandas as pd
            print(pd.DataFrame(rows).pivot_table(index="shape", columns="variant", values="tflops", sort=False)
                  .round(1).to_string())
            print(bench.half_gemm_ratio(rows))
        return {"rows": len(rows), "saved": saved}
    rows = bench.bench_gemm(variants=args.variants, dtype=args.dtype, hidden=args.hidden, batches=args.batches,
                            repeats=args.repeats, progress=not args.json, peers=args.peers,
                            log=(lambda m: None) if args.json else print,
                            on_shape=lambda so_far: save_rows(f"bench_gemm_{args.dtype}", so_far, args.out))
    saved = save_rows(f"bench_gemm_{args.dtype}", rows, args.out)
    if not args.json:
        print(bench.summarize_gemm(rows))
    return {"rows": len(rows), "saved": saved}


def cmd_bench_hold(args, comm) -> dict:
    from perflab.measure import bench, power
    require_cupy("perflab bench hold replays GEMMs on the GPU while nvidia-smi samples it: it")
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
    require_cupy("perflab bench train times perflab's GPU trainer beside its peers: it")
    rows = peers.bench_train(configs=args.configs, N=args.train_size, peers=args.peers, repeats=args.repeats,
                             log=(lambda m: None) if args.json else print,
                             on_config=lambda so_far: save_rows("bench_train", so_far, args.out))
    if not rows:
        raise CLIError("no peer ran (each one's reason is above): bench train needs a GPU with CuPy for perflab, "
                       "and PyTorch or JAX on it for their peers")
    saved = save_rows("bench_train", rows, args.out)
    if not args.json:
        import pandas as pd
        print(pd.DataFrame(rows).pivot_table(index=["H", "B"], columns="peer", values="epoch_ms").round(3).T.to_string())
        ratios = peers.epoch_ratios(rows)
        if ratios is not None:
            print("\nperflab's epoch over the cuBLAS floor of its precision and over the fastest peer of it:")
            print(ratios.to_string())
    return {"rows": rows, "saved": saved}


def cmd_bench_step(args, comm) -> dict:
    from perflab.measure import bench
    require_cupy("perflab bench step times each kernel of the GPU step: it")
    rows = [row for H, B in args.configs for row in bench.step_breakdown(H, B, args.dtype)]
    saved = save_rows("bench_step" if args.dtype == "float32" else f"bench_step_{args.dtype}", rows, args.out)
    if not args.json:
        import pandas as pd
        table = pd.DataFrame(rows).pivot_table(index="kernel", columns=["H", "B"], values="ms", sort=False).round(4)
        print(table.to_string(na_rep=""))  # a kernel another net's step lacks: blank
    return {"rows": rows, "saved": saved}


def cmd_bench_allreduce(args, comm) -> dict:
    from perflab.measure import bench
    if comm.size < 2:
        raise CLIError(f"bench allreduce needs several ranks, one per GPU: mpirun -n P perflab bench allreduce "
                       f"(P >= 2); got {comm.size} rank")
    require_cupy("perflab bench allreduce times GPU buffers: it")
    rows = bench.bench_allreduce(comm, sizes=args.sizes, repeats=args.repeats)
    if comm.rank != 0:
        return {"rows": rows}
    saved = save_rows(f"bench_allreduce_p{comm.size}", rows, args.out)
    if not args.json:
        import pandas as pd
        print(pd.DataFrame(rows).pivot_table(index="size_bytes", columns="impl", values="ms").round(4).to_string())
    return {"rows": rows, "saved": saved}


def register(sub) -> None:
    """timeline, ceilings, compile and bench, in the order `perflab --help` lists them."""
    timeline_parser(sub)
    ceilings_parser(sub)
    compile_parser(sub)
    bench_parser(sub)


def timeline_parser(sub) -> None:
    p = sub.add_parser("timeline", help="a few steps of the staged and pipelined paths drawn lane by lane (GPU)",
                       description="Train two short epochs per mode with every phase's start and end recorded on its "
                                   "CUDA stream (and the host all-reduce on the host clock), nothing synchronized; "
                                   "writes <run folder>/timeline_H<H>_b<b>_p<p>.csv and a figure of the second epoch. "
                                   "Keep the epoch to a few batches (--train-size a few times --batch-size). Run under "
                                   "mpiexec -n P for the host all-reduce. Every step is launched kernel by kernel while "
                                   "it records (a CUDA graph cannot be timed phase by phase), so the host's launches "
                                   "show as they do with --launch eager, not as in a graphed run.")
    hyperparameter_options(p, dtype="float32")  # a sweep point's data sizes, not the reference's (twice as large)
    from perflab.kernels import GEMM_VARIANTS
    from perflab.measure.timeline import TIMELINE_MODES
    p.add_argument("--modes", nargs="+", choices=TIMELINE_MODES, default=["staged", "pipelined"],
                   help="the data paths, and overlap: resident with --overlap, NCCL's all-reduces on a side stream under "
                        "backward (layer by layer past one hidden layer: WFBP) (default staged pipelined)")
    p.add_argument("--from", dest="redraw", metavar="CSV", help="redraw the figure of a recorded timeline (no GPU needed)")
    p.add_argument("--gemm", choices=GEMM_VARIANTS, default="cublas", help="as for train (default %(default)s)")
    p.add_argument("--chunks", type=positive, default=4, metavar="K", help="as for train (default %(default)s)")
    outputs(p)
    p.set_defaults(run=cmd_timeline)


def ceilings_parser(sub) -> None:
    p = sub.add_parser("ceilings", help="measure this machine's ceilings (GEMM rate, PCIe, MPI/NCCL all-reduce)",
                       description="Microbenchmarks for the rooflines, saved to <run folder>/ceilings_p<P>.csv with "
                                   "machine metadata: BLAS GEMM at the training shapes, and on a GPU cuBLAS and perflab's "
                                   "GEMM, host<->device bandwidth (pageable, pinned) and the device copy rate; under "
                                   "mpiexec -n P also MPI (and on GPUs NCCL) all-reduce bandwidth against size; and what "
                                   "the predictor composes a step from: every kernel of the step over an H x B grid, alone "
                                   "and the whole step's one after another, the host's floor of a step, how much longer "
                                   "a training epoch run as one CUDA graph takes than the graph alone, the staged path's batch copy (walks of the data set: its median "
                                   "and its fastest and slowest walk, the band of a staged prediction) and how much of it "
                                   "runs while the GPU is busy with the step before (perflab validate).")
    p.add_argument("--backend", choices=("auto", "numpy", "cupy"), default="auto")
    p.add_argument("--no-step-kernels", action="store_true", help="skip the step's kernels over H x B (the predictor "
                                                                   "needs them; they take about a minute on a GPU)")
    p.add_argument("--max-log2-size", type=positive, default=26, help="largest buffer, 2**K bytes (default %(default)s)")
    net_options(p, several=True, default="none", what="the nets to be predicted: their widths join the grid the step's "
                            "kernels are timed over (its powers of two are interpolated between: at other shapes the tensor-core GEMMs miss "
                            "by up to 15%%; perflab whatif says how far), and under mpiexec the all-reduces are also "
                            "timed at each net's gradient and pipelined pieces")
    p.add_argument("--per-rank-batch", nargs="+", type=positive, metavar="B/p",
                   help="also time them at these samples per rank per step (with --hidden: every pair)")
    p.add_argument("--grid", choices=("full", "asked"), default="full",
                   help="full: the step's kernels over the H x B grid and the nets and batches asked; asked: at the "
                        "nets and batches asked alone, as the main job times its sweep's shapes (minutes shorter on "
                        "a CPU; predictions then hold at those shapes only) (default %(default)s)")
    outputs(p)
    p.set_defaults(run=cmd_ceilings)


def compile_parser(sub) -> None:
    p = sub.add_parser("compile", help="compile every CUDA kernel into CuPy's cache now, in parallel (GPU)",
                       description="perflab's kernels are compiled (NVRTC) at first use, one module at a time: "
                                   "minutes on a fresh machine. This compiles all of them in parallel processes into "
                                   "CuPy's kernel cache (CUPY_CACHE_DIR, default ~/.cupy/kernel_cache), so later runs "
                                   "start at once.")
    p.add_argument("--processes", type=positive, help="compiler processes (default: one a CPU core)")
    outputs(p, folder=False)
    p.set_defaults(run=cmd_compile)


def bench_parser(sub) -> None:
    """`perflab bench WHAT`: one subcommand a benchmark."""
    p = sub.add_parser("bench", help="benchmarks: perflab beside its peers in one run (GPU)")
    bsub = p.add_subparsers(dest="bench_command", required=True, metavar="WHAT")
    bench_gemm_parser(bsub)
    bench_hold_parser(bsub)
    bench_train_parser(bsub)
    bench_step_parser(bsub)
    bench_allreduce_parser(bsub)


def bench_gemm_parser(bsub) -> None:
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
    b.add_argument("--dtype", choices=DTYPES + HALF_DTYPES, default="float32",
                   help="default float32; bfloat16 or float16: perflab's half-precision wgmma GEMM (Hopper) beside "
                        "cuBLAS's at the half step's GEMMs, each layer's, in its layouts")
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


def bench_hold_parser(bsub) -> None:
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


def bench_train_parser(bsub) -> None:
    from perflab.measure.peers import PEERS
    b = bsub.add_parser("train", help="an epoch of perflab beside PyTorch, JAX and the cuBLAS floor",
                        description="Median ms per epoch (N samples, resident on the GPU, FP32, TF32 off) for perflab "
                                    "and every installed peer; a missing peer is skipped with a message. Peers named "
                                    "(TF32) or (3xTF32) run their matmuls on the tensor cores so: the peers of "
                                    "perflab's wgmma and x3tf32 GEMMs; (bf16), (fp16) in mixed precision. After the "
                                    "table, each perflab peer's epoch over the cuBLAS floor of its precision and over "
                                    "the fastest other peer of it, where they ran.")
    b.add_argument("--configs", nargs="+", type=net_batch, default=[(512, 3200), (1024, 3200), (2048, 12000)],
                   metavar="H,B", help="hidden size and batch pairs (default 512,3200 1024,3200 2048,12000); a deeper "
                                       "net names its widths, 1024-1024,3200 for 784-1024-1024-10")
    b.add_argument("--train-size", type=positive, default=60000)
    b.add_argument("--peers", nargs="+", choices=list(PEERS), metavar="PEER", help=f"subset of: {', '.join(PEERS)}")
    b.add_argument("--repeats", type=positive, default=5)
    outputs(b)
    b.set_defaults(run=cmd_bench_train)


def bench_step_parser(bsub) -> None:
    b = bsub.add_parser("step", help="each kernel of one training step, timed alone (where the time goes)",
                        description="Device ms of every kernel of perflab's training step at H x B (and of the unfused "
                                    "output layer's kernels), each graph-timed alone, with bytes moved and % of the "
                                    "device-copy rate; writes <run folder>/bench_step.csv (bench_step_<dtype>.csv for "
                                    "another --dtype).")
    b.add_argument("--configs", nargs="+", type=net_batch, default=[(512, 3200), (2048, 12000)], metavar="H,B",
                   help="hidden size and batch pairs (default 512,3200 2048,12000); a deeper net names its widths, "
                        "1024-1024,12000 for 784-1024-1024-10")
    b.add_argument("--dtype", choices=DTYPES + HALF_DTYPES, default="float32",
                   help="the step's precision (default float32); bfloat16 or float16: the mixed-precision step as "
                        "perflab train --dtype runs it on one GPU with cuBLAS's half GEMMs (weights, activations and "
                        "their gradients in half; the output layer, the update and float16's loss scale in FP32)")
    outputs(b)
    b.set_defaults(run=cmd_bench_step)


def bench_allreduce_parser(bsub) -> None:
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
