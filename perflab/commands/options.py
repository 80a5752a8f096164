"""The options several commands share, and the argument types that name a bad value."""
from __future__ import annotations

import argparse
import os
import sys

from perflab.backend import INSTALL_CUPY
from perflab.config import ACCURACY, DTYPES, HALF_DTYPES, MODES, Config
from perflab.data import DATASETS
from perflab.train.comm import STRATEGIES

DEFAULTS = Config()


class CLIError(Exception):
    """Bad input caught after parsing; printed as `perflab: error: ...`, exit status 2."""


def hyperparameter_options(parser: argparse.ArgumentParser, dtype: str | None = None) -> None:
    """The hyperparameters train, check and timeline share; `dtype` overrides the reference's float64
    where a command looks at what a sweep measures (float32)."""
    d = DEFAULTS
    g = parser.add_argument_group(
        "hyperparameters",
        "Defaults are the seeds' performance workload {D=784, H=512, C=10, reg=1e-4, lr=1e-4, "
        "N=38400, epochs=1, B=3200}: the point the roofline analysis studies; they train too little "
        "to classify well. For accuracy (test precision ~0.98 on MNIST): "
        + " ".join(f"--{k.replace('_', '-').replace('hidden-sizes', 'hidden')} "
                   f"{'-'.join(map(str, v)) if isinstance(v, tuple) else v}"
                   for k, v in ACCURACY.items() if k != "shuffle") + " --shuffle. " + DEFAULTS_DIFFER)
    g.add_argument("--input-size", type=int, default=d.input_size, metavar="D", help="pixels per image (default %(default)s)")
    net_options(g, several=False)
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
    g.add_argument("--dtype", choices=DTYPES + HALF_DTYPES, default=dtype or d.dtype,
                   help="float64 is the reference" + (f"; {dtype}, as perflab sweep measures" if dtype else "")
                        + "; bfloat16 and float16 train in mixed precision (GEMM operands and activations in half, "
                          "FP32 accumulation, masters, update and loss; float16 with dynamic loss scaling): on the GPU "
                          "with cuBLAS's tensor-core GEMMs (--gemm cublas) or perflab's own on a Hopper (--gemm wgmma), --mode resident, on NumPy emulated in FP32 "
                          "(perflab.train.half, the reference) (default %(default)s)")
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
                   help="GEMM on the GPU: cuBLAS (called so it can sit in CUDA graphs; the fastest FP32 measured) or one "
                        "of perflab's kernels; on TF32 tensor cores (float32 only): tf32 (mma.sync), wgmma (Hopper's "
                        "warpgroup MMA), x3tf32 (3xTF32 on wgmma: FP32 accuracy at tensor-core speed, Hopper only), "
                        "cublas-x3tf32 (3xTF32 by three cuBLAS TF32 calls) (default %(default)s)")
    g.add_argument("--comm", choices=STRATEGIES + ("overlap", "auto"), default=None,
                   help="gradient all-reduce: nccl (GPU, on the device), mpi (host MPI; GPU buffers staged), cuda-mpi "
                        "(GPU buffers straight to a CUDA-aware MPI, detected: an error where the MPI is not), hierarchical "
                        "(reduce in each node, all-reduce across node leaders, broadcast; PERFLAB_RANKS_PER_NODE=k "
                        "pretends nodes of k ranks), shm (ranks of one node sum through memory they all map, no "
                        "MPI message; host buffers, GPU ones staged), p2p (GPUs of one node: each reads the others' "
                        "gradients over NVLink, sums and applies them in one kernel; from 3 GPUs each sums and applies "
                        "its 1/p, then reads the others'; resident data parallel), nccl-half "
                        "(--dtype bfloat16|float16: NCCL on the gradients rounded to the run's half precision, half the "
                        "bytes), overlap (NCCL in dW1 chunks under backward GEMM 3: --overlap), auto (the fastest of nccl, overlap, "
                        "p2p and, in half precision, "
                        "nccl-half for resident data parallel on several GPUs, an epoch "
                        "of each timed before training; printed). Default: auto on GPUs (mpi in the staged modes), "
                        "mpi on the CPU")
    from perflab.workbook.sweep import LAUNCHES
    g.add_argument("--launch", choices=LAUNCHES, default=None,
                   help="GPU: replay each step as a CUDA graph, a whole epoch as one with data resident and the loss "
                        "printed once an epoch (on several GPUs the NCCL all-reduces inside) (graph), or launch its "
                        "kernels one by one as the seeds' code does (eager) (default graph on GPUs; NumPy launches "
                        "nothing: eager)")
    g.add_argument("--pinned", action="store_true", help="staged mode: keep the data in page-locked host memory")
    g.add_argument("--overlap", action="store_true",
                   help="the old spelling of --comm overlap: NCCL on several GPUs, all-reduce the gradients in chunks on a second stream while backward "
                        "GEMM 3 still runs, all inside the step's CUDA graph (slower than one exchange after it on "
                        "two H200 and two H100: NCCL's kernels take SMs from the GEMM; experiments/p2p/README.md)")
    g.add_argument("--threads", type=positive, default=None, metavar="K",
                   help="NumPy: BLAS threads a rank (default: this node's cores shared among its ranks); 1 with "
                        "p ranks parallelizes over examples only, K with one rank inside the matrix products only")
    from perflab.train.watchdog import TIMEOUT_S
    g.add_argument("--timeout", type=positive_float, default=TIMEOUT_S, metavar="S",
                   help="several ranks: a step that waits S seconds on the others (a rank stopped, a node lost) ends "
                        "the job with one line per rank naming the silent rank, the exchange, the epoch and batch, exit "
                        "status 3; every exchange (nccl, p2p, mpi, shm, hierarchical, cuda-mpi) is watched. The first "
                        "step, which compiles kernels and captures graphs, is not (default %(default)g)")
    g.add_argument("--chunks", type=positive, default=None, metavar="K",
                   help="dW1 is exchanged in K row chunks, each as soon as its part of backward GEMM 3 is done "
                        "(default 2 with --overlap, faster than 4 on two H100: experiments/p2p/README.md; 4 with "
                        "--mode pipelined)")


def exchange_from_args(args) -> str | None:
    """--comm and the old --overlap flag as one exchange: --overlap is --comm overlap (NCCL's, chunked)."""
    if not getattr(args, "overlap", False):
        return args.comm
    if args.comm == "auto":
        raise CLIError("--comm auto times NCCL with and without --overlap and keeps the faster: leave --overlap out, "
                       "or name --comm nccl")
    if args.comm not in (None, "nccl", "overlap"):
        raise CLIError(f"--overlap overlaps an NCCL all-reduce with the backward pass: it needs --comm nccl "
                       f"(--backend cupy --mode resident), got --comm {args.comm}")
    return "overlap"


def spec_from_args(args, parallel: str | None = None):
    """The RunSpec (perflab.train.spec) train, check and timeline parse into, validated: a bad combination is named
    before anything loads."""
    from perflab.train.spec import RunSpec, SpecError
    backend = resolved_backend(args.backend, quiet=getattr(args, "json", False) is not False)
    asked = getattr(args, "parallel", "data")
    parallel = parallel or ("data" if asked == "auto" else asked)  # auto: data or sequential, alike to every rule
    try:
        return RunSpec(backend=backend, parallel=parallel, mode=args.mode,
                       gemm=args.gemm, exchange=exchange_from_args(args), dtype=getattr(args, "dtype", "float32"),
                       launch=args.launch, chunks=args.chunks, nets=(one_net(args),), batches=(args.batch_size,),
                       pinned=args.pinned, threads=args.threads, timeout=args.timeout).validate()
    except SpecError as exc:
        raise CLIError(str(exc)) from None


def resolved_backend(backend: str, quiet: bool = True) -> str:
    """numpy or cupy for --backend numpy | cupy | auto; --backend cupy without CuPy ends in NO_CUPY's message."""
    from perflab.backend import cupy_or_none
    if backend == "numpy":
        return "numpy"
    found = cupy_or_none() is not None
    if backend == "cupy" and not found:
        raise CLIError(no_cupy("--backend cupy"))
    if backend == "auto" and not quiet:
        print(f"backend: {'cupy' if found else 'numpy'}", file=sys.stderr)
    return "cupy" if found else "numpy"


def no_cupy(what: str) -> str:
    return f"{what} needs CuPy and a visible NVIDIA GPU; none was found: {INSTALL_CUPY}"


def require_cupy(what: str) -> None:
    """Refuse, with the one no-CuPy message, a command that needs a GPU, before it prints or measures anything."""
    from perflab.backend import cupy_or_none
    if cupy_or_none() is None:
        raise CLIError(no_cupy(what))


def run_spec(args, parallel: str | None = None):
    """train's and check's RunSpec, and a --comm cuda-mpi checked against the MPI library it would run on."""
    spec = spec_from_args(args, parallel)
    if spec.exchange == "cuda-mpi":
        from perflab.train.comm import require_cuda_aware_mpi
        try:
            require_cuda_aware_mpi()
        except ValueError as exc:
            raise CLIError(str(exc)) from None
    return spec


# Config's fields as the options that set them: a ConfigError the CLI prints names the option, not the field
OPTION_OF = {"input_size": "--input-size", "hidden_sizes": "--hidden", "hidden_size": "--hidden",
             "num_classes": "--num-classes", "learning_rate": "--learning-rate", "train_size": "--train-size",
             "num_epochs": "--num-epochs", "batch_size": "--batch-size", "test_size": "--test-size",
             "validation_size": "--validation-size", "print_every": "--print-every", "dtype": "--dtype", "reg": "--reg"}


def option_names(message: str) -> str:
    """A Config message in the CLI's words: `batch_size must be ...` -> `--batch-size must be ...`."""
    import re
    return re.sub(r"(?<![-\w])(" + "|".join(OPTION_OF) + r")\b", lambda m: OPTION_OF[m[1]], message)


def first_line(command: str, cfg: Config, spec, ranks: int) -> str:
    """A run's first line: its net and the settings whose defaults differ between commands, so a number is never
    read as another command's."""
    net = "-".join(map(str, cfg.layer_sizes))
    return (f"perflab {command}: {net}, --learning-rate {cfg.learning_rate:g}, --dataset {cfg.dataset} "
            f"N={cfg.train_size}, B={cfg.batch_size}, {cfg.num_epochs} epoch(s); {spec.summary()}; {ranks} rank(s)")


def writable_folder(folder, option: str):
    """The folder a command writes into, made where missing and probed with a file, before anything runs: a folder
    it cannot write is named now, not after the run."""
    import pathlib
    import tempfile

    from perflab.train.loop import disk_error
    folder = pathlib.Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=folder).close()
    except OSError as exc:
        raise CLIError(f"{option}: cannot write into {folder}: {disk_error(exc)}; nothing was run") from None
    return folder


def config_from_args(args) -> Config:
    return Config(input_size=args.input_size, hidden_sizes=one_net(args), num_classes=args.num_classes,
                  reg=args.reg, learning_rate=args.learning_rate, train_size=args.train_size,
                  num_epochs=args.num_epochs, batch_size=args.batch_size, dtype=args.dtype, seed=args.seed,
                  test_size=args.test_size, validation_size=args.validation_size, print_every=args.print_every,
                  dataset=args.dataset, shuffle=args.shuffle)


def parallel_option(parser, default: str) -> None:
    parser.add_argument("--parallel", choices=("auto", "sequential", "data", "model") if default == "auto"
                        else ("data", "model"), default=default,
                        help="data: batch split over ranks, one fused gradient all-reduce a batch; model: layers "
                             "split over ranks, by rows and by columns in turn (one hidden layer: its units, one "
                             "all-reduce of the C x B logits; deeper: one all-reduce after each column-split layer)"
                             + ("; auto: data under mpiexec with several ranks, else sequential" if default == "auto"
                                else "") + " (default %(default)s)")


def device_summary(spec) -> dict:
    """Where and how the run executed, as a --json row names it."""
    if spec.backend == "numpy":
        return {"backend": "numpy", "comm": spec.comm, "threads": spec.threads}
    return {"backend": spec.backend, "mode": spec.mode, "gemm": spec.gemm, "comm": spec.comm, "graphs": spec.graphs,
            "pinned": spec.pinned, "overlap": spec.overlap, "chunks": spec.chunks, "timeout": spec.wait_s,
            "threads": spec.threads}


def file_name(text: str) -> str:
    """A result file's name: plain, so that it lands in the folder --out (or the run folder) names."""
    if not text or text in (".", "..") or "/" in text or "\\" in text or text.startswith("."):
        raise argparse.ArgumentTypeError(f"expected a plain file name like run1, without a folder (the file goes to "
                                         f"the run folder, or where --out says), got {text!r}")
    return text


def save_rows(name: str, rows: list[dict], out: str | None = None) -> str:
    from perflab import results
    meta = results.machine_metadata()
    folder = results.run_dir(meta) if out is None else __import__("pathlib").Path(out)
    return str(results.write_rows(folder / f"{name}.csv", rows, meta, append=False))


def outputs(parser, folder: bool = True):
    """The output options most commands share: --out DIR for the result CSV, and --json."""
    if folder:
        parser.add_argument("--out", metavar="DIR", type=out_folder, help="folder for the CSV (default this machine's run folder, runs/<machine key>/)")
    parser.add_argument("--json", action="store_true", help="print one JSON object on the last line")


def out_folder(text: str) -> str:
    """argparse type: a folder to write into (made where missing), not an existing file."""
    if os.path.exists(text) and not os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"expected a folder to write into, got {text!r}, which is a file")
    return text


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


def net_batch(text: str) -> tuple:
    """'512,3200' -> (512, 3200); '1024-1024,3200' -> ((1024, 1024), 3200): a net's hidden widths
    (784-1024-1024-10) and a batch, for bench train's --configs."""
    from perflab.measure.peers_multi import net_width
    try:
        net, b = text.split(",")
        H = net_width(net)
        if int(b) > 0:
            return H, int(b)
    except ValueError:  # NetError too
        pass
    raise argparse.ArgumentTypeError(f"expected H,B (one hidden layer, like 512,3200) or H1-H2-...,B (deeper, like "
                                     f"1024-1024,3200) with positive integers, got {text!r}")


NET_HELP = "a net's hidden widths joined by '-': 512 is 784-512-10, 1280-1280 is 784-1280-1280-10"
OLD_NET_HELP = "the old spelling of one net, its widths apart: --hidden-size 1280 1280 is --hidden 1280-1280"
# the defaults that differ between commands: each command's --help names them, and its first line shows them
DEFAULTS_DIFFER = ("Defaults differ between commands: train, check: float64, --learning-rate 1e-4, --dataset mnist, "
                   "--train-size 38400; sweep: float32, 0.1, synthetic, 38400; timeline: float32; whatif: float32, "
                   "--train-size 60000, --backend from the ceilings file.")


def net_options(parser, several: bool, default: str = "512", what: str = "") -> None:
    """--hidden, written one way everywhere (1280-1280 is one net, 784-1280-1280-10; a command that takes several
    nets takes them as several values), and --hidden-size, the old spelling of one net (its widths apart)."""
    parser.add_argument("--hidden", nargs="+", type=net, metavar="NET",
                        help=(what + ": " if what else "") + NET_HELP
                        + ("; several nets as several values, 512 1280-1280" if several else "")
                        + f" (default {default})")
    parser.add_argument("--hidden-size", nargs="+", type=positive, metavar="H", help=OLD_NET_HELP)


def nets(args, default=(512,)) -> list:
    """The nets --hidden names (each as perfmodel.net_label writes it), or the one --hidden-size spells apart.
    A net named twice is refused: `--hidden 1280 1280` once meant two identical one-layer nets here and one
    two-layer net in train."""
    from perflab.analysis.perfmodel import net_label
    if args.hidden and args.hidden_size:
        raise CLIError(f"--hidden-size is the old spelling of --hidden: give one of them (--hidden "
                       f"{'-'.join(map(str, args.hidden_size))} for 784-{'-'.join(map(str, args.hidden_size))}-10)")
    if args.hidden_size:
        return [net_label(tuple(args.hidden_size))]
    chosen = list(args.hidden or default)
    twice = sorted({str(n) for n in chosen if chosen.count(n) > 1})
    if twice:
        given = " ".join(map(str, chosen))
        raise CLIError(f"--hidden {given} names the net 784-{twice[0]}-10 more than once: a net's widths are joined by "
                       f"'-' (--hidden {'-'.join(map(str, chosen))} is one net, 784-{'-'.join(map(str, chosen))}-10); "
                       f"several nets are several values (--hidden 512 1280-1280)")
    return chosen


def one_net(args) -> tuple:
    """The hidden widths of the one net train, check and timeline run."""
    from perflab.analysis.perfmodel import widths
    if args.hidden and len(args.hidden) > 1:
        joined = "-".join(str(n) for n in args.hidden)
        raise CLIError(f"--hidden {' '.join(map(str, args.hidden))}: perflab {args.command} runs one net; write "
                       f"784-{joined}-10 as --hidden {joined} (perflab sweep and whatif take several nets, one a value)")
    return widths(nets(args, default=(DEFAULTS.hidden_sizes,))[0])


def net(text: str):
    """argparse type of a sweep's or what-if's --hidden: '512' -> 512, '1024-1024' -> '1024-1024' (784-1024-1024-10,
    as a sweep row names it: perfmodel.net_label), named in the error otherwise."""
    from perflab.analysis.perfmodel import NetError, net_label
    try:
        return net_label(text)
    except NetError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
