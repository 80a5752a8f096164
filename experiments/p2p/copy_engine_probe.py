"""Where exchange_early's time goes (copy_engine.patch applied: it runs only on that trial's tree), two ranks on two GPUs: each piece on the side stream timed alone
(narrow_from, the copy engine pushing this rank's copy to the peer), the whole of it, a BF16-sized GEMM alone and
with exchange_early beside it. Device-side events, median of 20 after 3, ranks in step through a barrier.

    mpirun -n 2 python experiments/p2p/copy_engine_probe.py

This is the push trial's version (1aaf738); logs/copy_engine_probe_h200x2.jsonl came from the pull trial's (a7d03c6,
with early_ready's handshake timed).
"""
import json

import cupy as cp
import numpy as np

from perflab.train.comm import MEMCPY_DEFAULT, for_gpu, world
from perflab.train.gpu import select_device

comm = world()
select_device(comm)
p2p = for_gpu(comm, "p2p")
rows = []


def timed(what, work, stream, **extra):
    """Median of 20 device-timed runs of work() on stream, after 3, every rank starting together."""
    times = []
    for i in range(23):
        cp.cuda.Device().synchronize()
        comm.barrier()
        start, end = cp.cuda.Event(), cp.cuda.Event()
        start.record(stream)
        work()
        end.record(stream)
        end.synchronize()
        if i >= 3:
            times.append(cp.cuda.get_elapsed_time(start, end) * 1e3)
    rows.append({"what": what, "us": float(np.median(times)), "rank": comm.rank, **extra})


for H in (1024, 2048):
    n = 784 * H + H + H * H + H + 10 * H + 10
    above = 784 * H + H
    G = p2p.register(n + 1, np.float32, bf16_copy=True, early_from=above)
    G.fill(1e-3)
    side, main = p2p.side, cp.cuda.Stream(non_blocking=True)
    start = 2 * p2p.kernels.BF16_VALUES * p2p.split
    peer = p2p.landing_addresses[1 - comm.rank]
    size = {"H": H, "bytes_moved": p2p.own_half.nbytes - start}
    with side:
        timed("narrow_from", lambda: p2p.kernels.narrow_from(p2p.G, p2p.own_half, n, p2p.split, p2p.blocks), side, **size)
        timed("copy engine", lambda: cp.cuda.runtime.memcpyAsync(peer + start, p2p.own_half.data.ptr + start,
                                                                   p2p.own_half.nbytes - start, MEMCPY_DEFAULT, side.ptr),
              side, **size)
    a = cp.ones((H, H), cp.float16)
    b = cp.ones((H, 3000), cp.float16)
    c = cp.empty((H, 3000), cp.float16)
    with main:
        timed("GEMM H x H x 3000 fp16", lambda: cp.matmul(a, b, out=c), main, **size)

        def both():
            p2p.exchange_early()
            cp.matmul(a, b, out=c)
            main.wait_event(p2p.joined)
        timed("exchange_early beside the GEMM", both, main, **size)

        def early_only():
            p2p.exchange_early()
            main.wait_event(p2p.joined)
        timed("exchange_early alone", early_only, main, **size)
everyone = comm.allgather(rows)
if comm.rank == 0:
    for row in (row for r in everyone for row in r):
        print(json.dumps(row))
