"""The options several commands share, and the argument types that name a bad value."""
from __future__ import annotations

import argparse
import os
import sys

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
        + " ".join(f"--{k.replace('_', '-').replace('hidden-sizes', 'hidden-size')} "
                   f"{' '.join(map(str, v)) if isinstance(v, tuple) else v}"
                   for k, v in ACCURACY.items() if k != "shuffle") + " --shuffle")
    g.add_argument("--input-size", type=int, default=d.input_size, metavar="D", help="pixels per image (default %(default)s)")
    g.add_argument("--hidden-size", type=positive, nargs="+", default=list(d.hidden_sizes), metavar="H",
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
    g.add_argument("--comm", choices=STRATEGIES + ("auto",), default=None,
                   help="gradient all-reduce: nccl (GPU, on the device), mpi (host MPI; GPU buffers staged), cuda-mpi "
                        "(GPU buffers straight to a CUDA-aware MPI, detected: an error where the MPI is not), hierarchical "
                        "(reduce in each node, all-reduce across node leaders, broadcast; PERFLAB_RANKS_PER_NODE=k "
                        "pretends nodes of k ranks), shm (ranks of one node sum through memory they all map, no "
                        "MPI message; host buffers, GPU ones staged), p2p (GPUs of one node: each reads the others' "
                        "gradients over NVLink, sums and applies them in one kernel; from 3 GPUs each sums and applies "
                        "its 1/p, then reads the others'; resident data parallel), nccl-half "
                        "(--dtype bfloat16|float16: NCCL on the gradients rounded to the run's half precision, half the "
                        "bytes), auto (the fastest of nccl, overlap (nccl with --overlap), p2p and, in half precision, "
                        "nccl-half for resident data parallel on several GPUs, an epoch "
                        "of each timed before training; printed). Default: auto on GPUs (mpi in the staged modes), "
                        "mpi on the CPU")
    from perflab.workbook.sweep import LAUNCHES
    g.add_argument("--launch", choices=LAUNCHES, default="graph",
                   help="GPU: replay each step as a CUDA graph, a whole epoch as one with data resident and the loss "
                        "printed once an epoch (on several GPUs the NCCL all-reduces inside) (graph), or launch its "
                        "kernels one by one as the seeds' code does (eager) (default %(default)s)")
    g.add_argument("--pinned", action="store_true", help="staged mode: keep the data in page-locked host memory")
    g.add_argument("--overlap", action="store_true",
                   help="NCCL on several GPUs: all-reduce the gradients in chunks on a second stream while backward "
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


def device_from_args(args):
    from perflab.backend import array_module
    from perflab.kernels import TF32_VARIANTS
    from perflab.train.runner import Device
    backend = "numpy" if array_module(args.backend).__name__ == "numpy" else "cupy"
    if args.backend == "auto" and getattr(args, "json", False) is False:
        print(f"backend: {backend}", file=sys.stderr)
    comm = args.comm or ("nccl" if args.overlap and backend == "cupy" and args.mode == "resident" else "auto")
    if comm == "auto" and (backend == "numpy" or args.mode != "resident"):
        comm = "mpi"  # the one exchange those runs take
    if comm == "auto" and args.overlap:
        raise CLIError("--comm auto times NCCL with and without --overlap and keeps the faster: leave --overlap out, "
                       "or name --comm nccl")
    if backend == "numpy" and comm in ("nccl", "nccl-half", "cuda-mpi", "p2p"):
        raise CLIError(f"--comm {comm} needs --backend cupy; on the CPU use mpi or hierarchical")
    if backend != "numpy" and getattr(args, "threads", None):
        raise CLIError(f"--threads {args.threads} sets NumPy's BLAS threads a rank: it needs --backend numpy (a GPU "
                       "rank's math runs on its GPU)")
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
    if comm == "p2p" and getattr(args, "parallel", "data") == "model":
        raise CLIError("--comm p2p exchanges the data-parallel gradient buffer; model parallel all-reduces its logits: "
                       "use --comm nccl")
    if args.mode != "resident" and comm in ("nccl", "nccl-half", "cuda-mpi", "p2p"):
        raise CLIError(f"--mode {args.mode} exchanges gradients through the host: use --comm mpi or hierarchical")
    if args.mode == "pipelined" and backend == "numpy":
        raise CLIError("--mode pipelined overlaps host <-> GPU copies with GPU compute: it needs --backend cupy")
    if args.mode == "pipelined" and getattr(args, "parallel", "data") == "model":
        raise CLIError("--mode pipelined exchanges gradients: it runs --parallel data (model parallel keeps the data "
                       "on the GPU: --mode resident)")
    if comm == "nccl-half" and getattr(args, "dtype", "float32") not in HALF_DTYPES:
        raise CLIError(f"--comm nccl-half exchanges the gradients in the run's half precision: it needs --dtype "
                       f"bfloat16 or float16, got --dtype {getattr(args, 'dtype', 'float32')} (use --comm nccl)")
    dtype = getattr(args, "dtype", "float32")
    half_wgmma = args.gemm == "wgmma" and dtype in HALF_DTYPES  # perflab's own BF16/FP16 GEMM
    if args.gemm in TF32_VARIANTS and dtype != "float32" and not half_wgmma:
        raise CLIError(f"--gemm {args.gemm} runs on TF32 tensor cores from float32 operands: it needs --dtype float32"
                       + (" (or, wgmma only, bfloat16 or float16)" if args.gemm == "wgmma" else "")
                       + f", got --dtype {dtype}")
    return Device(backend=backend, mode=args.mode, gemm=args.gemm, comm=comm, graphs=args.launch == "graph",
                  pinned=args.pinned, overlap=args.overlap, chunks=args.chunks, timeout=args.timeout,
                  threads=args.threads)


def config_from_args(args) -> Config:
    return Config(input_size=args.input_size, hidden_sizes=tuple(args.hidden_size), num_classes=args.num_classes,
                  reg=args.reg, learning_rate=args.learning_rate, train_size=args.train_size,
                  num_epochs=args.num_epochs, batch_size=args.batch_size, dtype=args.dtype, seed=args.seed,
                  test_size=args.test_size, validation_size=args.validation_size, print_every=args.print_every,
                  dataset=args.dataset, shuffle=args.shuffle)


def parallel_option(parser, default: str) -> None:
    parser.add_argument("--parallel", choices=("auto", "sequential", "data", "model") if default == "auto"
                        else ("data", "model"), default=default,
                        help="data: batch split over ranks, one fused gradient all-reduce a batch; model: layers "
                             "split over ranks, by rows and by columns in turn (one hidden layer: its units, one "
                             "all-reduce of the C x B logits; deeper: one all-reduce after each column-split layer); "
                             "auto: data under mpiexec with several ranks, else sequential (default %(default)s)")


def device_summary(device) -> dict:
    import dataclasses
    if device.backend == "numpy":
        return {"backend": "numpy", "comm": device.comm, "threads": device.threads}
    return dataclasses.asdict(device)


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


def net(text: str):
    """argparse type of a sweep's or what-if's --hidden: '512' -> 512, '1024-1024' -> '1024-1024' (784-1024-1024-10,
    as a sweep row names it: perfmodel.net_label), named in the error otherwise."""
    from perflab.analysis.perfmodel import NetError, net_label
    try:
        return net_label(text)
    except NetError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
