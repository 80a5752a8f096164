"""Why did an NCCL all-reduce captured in a CuPy CUDA graph hang (results/nvidia-h200/nccl_graphs.log)?
One variant per process (mpirun -n 2 python probe.py VARIANT), each with a watchdog that prints the
Python stack and exits if it hangs. Variants:
  raw-<mode>[-warm][-kernels]   capture one allReduce on a non-blocking stream; mode: default (CuPy's),
                                global, thread, relaxed; -warm: one eager allReduce on that stream first;
                                -kernels: an elementwise kernel before and after it in the graph
  teardown-graphs-first, teardown-comm-first
                                a small trainer with graphs holding the all-reduce, then the CUDA graphs and
                                the NCCL communicator freed in that order, a line printed after each
  time BYTES...                 median microseconds of one float32 all-reduce of each size (eager, CUDA events,
                                200 back to back), under whatever NCCL_* settings the environment holds
  trainer[-overlap] H b N [K]   FusedGPU with the exchange and update inside the graph (whole_graph),
                                against the same trainer with the exchange after the graph: parameters
                                after an epoch must agree; then median epoch ms of both (K: dW1 chunks)
"""
import faulthandler
import json
import os
import sys

import cupy as cp
import numpy as np
from cupy.cuda import nccl
from mpi4py import MPI

world = MPI.COMM_WORLD
cp.cuda.Device(world.rank % cp.cuda.runtime.getDeviceCount()).use()
faulthandler.dump_traceback_later(int(os.environ.get("WATCHDOG", "25")), exit=True)
variant = sys.argv[1]


def say(**kw):
    if world.rank == 0:
        print(json.dumps({"variant": variant, **kw}), flush=True)


def raw():
    uid = world.bcast(nccl.get_unique_id() if world.rank == 0 else None)
    comm = nccl.NcclCommunicator(world.size, uid, world.rank)
    s = cp.cuda.Stream(non_blocking=True)
    x = cp.empty(1 << 20, dtype=cp.float32)

    def allreduce():
        comm.allReduce(x.data.ptr, x.data.ptr, x.size, nccl.NCCL_FLOAT32, nccl.NCCL_SUM, s.ptr)
    mode = variant.split("-")[1]
    with s:
        if "warm" in variant:
            x.fill(1.0)
            allreduce()
            s.synchronize()
        say(stage="capturing")
        if mode == "default":
            s.begin_capture()
        else:
            s.begin_capture({"global": 0, "thread": 1, "relaxed": 2}[mode])
        if "kernels" in variant:
            x *= 2.0
        allreduce()
        if "kernels" in variant:
            x += 1.0
        graph = s.end_capture()
        say(stage="captured")
        for _ in range(10):
            x.fill(world.rank + 1.0)
            graph.launch(s)
            s.synchronize()
        total = sum(r + 1.0 for r in range(world.size))
        want = 2 * total + 1 if "kernels" in variant else total
        got = float(x[0])
        say(stage="replayed", got=got, want=want, passed=bool(got == want and bool((x == x[0]).all())),
            nccl=nccl.get_version(), cupy=cp.__version__)


def trainer(overlap, H, b, N, chunks=4, compare=True):
    from perflab.config import Config
    from perflab.measure.peers import timed_epochs
    from perflab.train.comm import MPIComm, for_gpu
    from perflab.train.gpu import FusedGPU
    comm = for_gpu(MPIComm(world), "nccl")
    rng = np.random.default_rng(0)
    X, y = rng.random((784, N), dtype=np.float32), rng.integers(0, 10, N)
    X = np.asfortranarray(X)
    cfg = Config(dataset="synthetic", input_size=784, hidden_sizes=(H,), num_classes=10, train_size=N,
                 batch_size=b * world.size, learning_rate=0.1, reg=1e-4, dtype="float32", test_size=0)
    B = b * world.size
    slices = [slice(s, min(s + B, N)) for s in range(0, N, B)]
    out = {}
    for name, whole in (("eager exchange", False), ("in graph", True))[0 if compare else 1:]:
        t = FusedGPU(cfg, X, y, comm, overlap=overlap, overlap_chunks=chunks)
        t.want_loss = False
        if whole:
            t.graphs, t.whole_graph = True, True
        say(stage=f"{name}: first epoch")

        def epoch():
            for s in slices:
                t.batch(s)
        epoch()
        t.sync()
        out[name] = t.P.get()
        say(stage=f"{name}: first epoch done")

        def sync():
            t.sync()
            comm.barrier()
        out[name + " ms"] = timed_epochs(epoch, sync, 3, 7)
    if compare:
        diff = float(np.abs(out["eager exchange"] - out["in graph"]).max())
        say(H=H, b=b, p=world.size, overlap=overlap, chunks=chunks, max_abs_diff=diff, passed=diff < 1e-6,
            eager_ms=out["eager exchange ms"], graph_ms=out["in graph ms"])
    else:
        say(H=H, b=b, p=world.size, overlap=overlap, chunks=chunks, graph_ms=out["in graph ms"],
            channels=os.environ.get("NCCL_MAX_NCHANNELS"))
    return t, comm


def teardown(graphs_first):
    t, comm = trainer(False, 512, 100, 1000, compare=False)
    steps = [("graphs freed", t.cache.clear), ("communicator destroyed", comm.communicator.destroy)]
    for what, run in steps if graphs_first else steps[::-1]:
        run()
        t.sync()
        say(stage=what)


def time_allreduce(sizes):
    uid = world.bcast(nccl.get_unique_id() if world.rank == 0 else None)
    comm = nccl.NcclCommunicator(world.size, uid, world.rank)
    s = cp.cuda.Stream(non_blocking=True)
    for nbytes in sizes:
        x = cp.ones(nbytes // 4, dtype=cp.float32)
        start, stop = cp.cuda.Event(), cp.cuda.Event()
        runs = []
        for _ in range(5):
            world.Barrier()
            start.record(s)
            for _ in range(200):
                comm.allReduce(x.data.ptr, x.data.ptr, x.size, nccl.NCCL_FLOAT32, nccl.NCCL_SUM, s.ptr)
            stop.record(s)
            stop.synchronize()
            runs.append(cp.cuda.get_elapsed_time(start, stop) * 1e3 / 200)
        say(bytes=nbytes, us=float(np.median(runs)), p=world.size,
            env={k: v for k, v in os.environ.items() if k.startswith("NCCL_")})


if variant.startswith("raw"):
    raw()
elif variant == "time":
    time_allreduce([int(n) for n in sys.argv[2:]])
elif variant.startswith("teardown"):
    teardown(variant == "teardown-graphs-first")
    say(stage="returning")
else:
    t, comm = trainer("overlap" in variant, *map(int, sys.argv[2:6]), compare=len(sys.argv) < 6)
    t.cache.clear()  # the graphs before the communicator (see teardown-*)
    t.sync()
