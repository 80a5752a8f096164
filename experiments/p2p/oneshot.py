"""The all-reduce and the SGD update as one kernel, the peers' gradients read over NVLink by the SMs
(#31; not the product). mpirun -n P python3 experiments/p2p/oneshot.py   (one GPU per rank, one node)

Beside the trainer's step end today (NCCL all-reduce of the flat gradient, then sgd_update), both
timed on the device in replayed CUDA graphs (10 calls a graph, median of 30), at the gradient sizes
of H = 512 ... 4096. First a check: after one call every rank's parameters equal the float64
update with the sum of all ranks' gradients, and are the same bits on every rank.
"""
import hashlib
import json
import statistics
from pathlib import Path

import cupy as cp
import numpy as np

from perflab import kernels
from perflab.train.comm import for_gpu, world
from perflab.train.gpu import select_device

SOURCE = (Path(__file__).parent / "oneshot.cu").read_text()
TIMEOUT_NS = np.int64(10 * 10**9)


def own(nbytes):
    mem = cp.cuda.memory.Memory(nbytes)
    KEPT.append(mem)
    return cp.cuda.MemoryPointer(mem, 0)


KEPT = []


def main():
    w = world()
    select_device(w)
    nccl = for_gpu(w, "nccl")
    p, rank = w.size, w.rank
    mod = cp.RawModule(code=SOURCE)
    empty = cp.RawKernel('extern "C" __global__ void empty() {}', "empty")
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    stream = cp.cuda.Stream(non_blocking=True)

    def replayed(fn, calls=10, repeats=30):
        with stream:
            for _ in range(2):
                fn()
            stream.synchronize()
            w.comm.Barrier()
            stream.begin_capture()
            for _ in range(calls):
                fn()
            graph = stream.end_capture()
            times = []
            for _ in range(repeats):
                w.comm.Barrier()
                a, z = cp.cuda.Event(), cp.cuda.Event()
                a.record(stream)
                graph.launch(stream)
                z.record(stream)
                z.synchronize()
                times.append(cp.cuda.get_elapsed_time(a, z) / calls * 1000)
        return statistics.median(times), min(times)

    def report(**row):
        slowest = max(w.comm.allgather(row.get("median_us", 0)))
        if rank == 0:
            print(json.dumps({**row, "p": p, "slowest_rank_median_us": slowest}), flush=True)

    for dtype, H in [("float32", 512), ("float32", 1024), ("float32", 2048), ("float64", 2048)]:
        D, C = 784, 10
        dt = np.dtype(dtype)
        n = H * D + H + C * H + C
        rng = np.random.default_rng(rank)
        G = cp.ndarray(n + 1, dt, memptr=own((n + 1) * dt.itemsize))
        G.set(rng.standard_normal(n + 1).astype(dt))
        P0 = np.random.default_rng(99).standard_normal(n).astype(dt)
        P = cp.asarray(P0)
        ends = cp.asarray(np.cumsum([H * D, H, C * H, C]), np.int64)
        regs = cp.asarray([1e-3, 0, 1e-3, 0], dt)
        lr = dt.type(0.1)
        ce = cp.zeros(1, dt)
        flags = cp.ndarray(2 * 4 * sms * p, np.uint32, memptr=own(2 * 4 * sms * p * 4))
        flags.fill(0)
        rounds = cp.zeros(4 * sms, np.uint32)
        runtime = cp.cuda.runtime
        handles = w.comm.allgather((runtime.ipcGetMemHandle(G.data.ptr), runtime.ipcGetMemHandle(flags.data.ptr)))
        opened = [(runtime.ipcOpenMemHandle(h[0], 1), runtime.ipcOpenMemHandle(h[1], 1)) if r != rank else None
                  for r, h in enumerate(handles)]
        grads = cp.asarray([G.data.ptr if r == rank else opened[r][0] for r in range(p)], np.uint64)
        flag_ptrs = cp.asarray([flags.data.ptr if r == rank else opened[r][1] for r in range(p)], np.uint64)
        kind = "f32" if dtype == "float32" else "f64"
        w.comm.Barrier()

        def fused(grid=sms, block=512, what=15, name=""):
            mod.get_function(f"exchange_update_{kind}{name}")(
                (grid,), (block,), (P, grads, np.int32(p), np.int32(rank), np.uint64(n), lr, ends, regs,
                                    np.int32(4), ce, flags, flag_ptrs, rounds, TIMEOUT_NS, np.int32(what)))

        def read_wait():
            mod.get_function("peer_read_wait")((1,), (sms,), (np.int32(p), np.int32(rank), flags, rounds, TIMEOUT_NS))

        def nccl_update():
            s = cp.cuda.get_current_stream()
            nccl.communicator.allReduce(G.data.ptr, G.data.ptr, n + 1, nccl.types[dtype], nccl.nccl.NCCL_SUM, s.ptr)
            kernels.sgd_update(P, G[:-1], float(lr), ends, regs)

        # the check: one call, against float64 on the host
        Gs = [np.random.default_rng(r).standard_normal(n + 1).astype(dt) for r in range(p)]
        with stream:
            fused()
            stream.synchronize()
        w.comm.Barrier()
        total = sum(g.astype(np.float64) for g in Gs)
        regs_h = np.repeat([1e-3, 0, 1e-3, 0], [H * D, H, C * H, C])
        want = P0 - float(lr) * (total[:n] + regs_h * P0)
        got = P.get()
        err = float(np.max(np.abs(got - want)) / np.max(np.abs(want)))
        same = w.comm.allgather(hashlib.sha256(got.tobytes()).hexdigest())
        report(check="exchange_update", dtype=dtype, H=H, max_rel_error=err, ce_error=abs(float(ce.get()[0]) - total[n]),
               same_bits_on_every_rank=len(set(same)) == 1)
        for what, f in ([("nccl all-reduce + sgd_update (the trainer)", nccl_update),
                        ("sgd_update alone", lambda: kernels.sgd_update(P, G[:-1], float(lr), ends, regs)),
                        (f"fused exchange + update, grid {sms}x512", fused),
                        (f"fused exchange + update, grid {sms}x1024", lambda: fused(sms, 1024)),
                        (f"fused, the barriers alone, grid {sms}x512", lambda: fused(what=13)),
                        (f"fused, the start barrier alone, grid {sms}x512", lambda: fused(what=1)),
                        (f"fused, the start barrier alone, no fences", lambda: fused(what=17)),
                        (f"fused, the sum and update alone, grid {sms}x512", lambda: fused(what=2)),
                        (f"fused, start barrier + update + end signal (no end wait)", lambda: fused(what=7)),
                        (f"fused, no end wait, then sgd_update, then the read wait", lambda: (
                            fused(what=7), kernels.sgd_update(P, G[:-1], float(lr), ends, regs), read_wait())),
                        (f"fused, no end wait, no fences", lambda: fused(what=23)),
                        (f"fused, no end wait, release/acquire", lambda: fused(what=39)),
                        (f"fused, the start barrier alone, release/acquire", lambda: fused(what=33)),
                        ("empty kernel", lambda: empty((1,), (32,), ())),
                        (f"fused exchange + update, grid {sms}x512, u2", lambda: fused(name="_u2"))]):
            med, low = replayed(f)
            report(what=what, dtype=dtype, H=H, bytes=(n + 1) * dt.itemsize, median_us=med, min_us=low)
        # nothing may reopen the peers' memory while it can still be read: close after all ranks are done
        stream.synchronize()
        w.comm.Barrier()
        for o in opened:
            if o:
                runtime.ipcCloseMemHandle(o[0])
                runtime.ipcCloseMemHandle(o[1])


if __name__ == "__main__":
    main()
