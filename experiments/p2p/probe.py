"""Can the copy engines exchange the gradient while the SMs compute? (#31; not the product)

mpirun -n 2 python3 experiments/p2p/probe.py [H] [b]   (one GPU per rank, both on one node)

Each rank maps the other's receive buffer (CUDA IPC) and copies its gradient into it with
cudaMemcpyAsync (a copy engine, no SMs), then bumps a counter in the peer's memory from a
one-thread kernel; the peer's one-thread kernel spins until the counter says the copy landed and
a sum adds it in. Device-timed in replayed CUDA graphs, beside NCCL's all-reduce (eager and in a
graph) and beside the dW1 GEMM cut into row chunks, each chunk's copy started as it is done.
Prints one JSON line per measurement from rank 0.
"""
import json
import statistics
import sys

import cupy as cp
import numpy as np

from perflab import kernels
from perflab.train.comm import for_gpu, world
from perflab.train.gpu import select_device

SOURCE = r"""
extern "C" __global__ void p2p_signal(unsigned long long* peer_flag, unsigned long long* sent) {
    unsigned long long n = *sent + 1;
    *sent = n;
    __threadfence_system();
    *(volatile unsigned long long*)peer_flag = n;
}
// the count-th wait returns once *flag >= count - lag
extern "C" __global__ void p2p_wait(const unsigned long long* flag, unsigned long long* count, int lag,
                                    long long timeout_ns) {
    unsigned long long n = *count + 1;
    *count = n;
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    while (*(const volatile unsigned long long*)flag + lag < n) {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
        if (t - t0 > timeout_ns) { printf("p2p_wait: no signal after %lld ns\n", timeout_ns); __trap(); }
    }
    __threadfence_system();
}
"""


def main(H=2048, b=3000, D=784, C=10):
    w = world()
    select_device(w)
    nccl = for_gpu(w, "nccl")
    p, rank = w.size, w.rank
    assert p == 2, "the probe pairs two ranks"
    mod = cp.RawModule(code=SOURCE)
    signal, wait = mod.get_function("p2p_signal"), mod.get_function("p2p_wait")
    S = H * D + H + C * H + C + 1
    G = cp.random.rand(S, dtype=cp.float32)
    recv = cp.zeros(S, cp.float32)
    flags = cp.zeros(2 * p, cp.uint64)  # [2 s]: copies landed from rank s, [2 s + 1]: sums rank s made of mine
    counts = cp.zeros(4, cp.uint64)  # signals sent (landed, consumed), waits made (landed, may send)
    handles = w.comm.allgather((cp.cuda.runtime.ipcGetMemHandle(recv.data.ptr),
                                cp.cuda.runtime.ipcGetMemHandle(flags.data.ptr)))
    peer = 1 - rank
    peer_recv = cp.cuda.runtime.ipcOpenMemHandle(handles[peer][0], 1)
    peer_flags = cp.cuda.runtime.ipcOpenMemHandle(handles[peer][1], 1)
    side = cp.cuda.Stream(non_blocking=True)
    main_stream = cp.cuda.Stream(non_blocking=True)
    ev = [cp.cuda.Event(disable_timing=True) for _ in range(16)]

    def copy(lo, hi, stream):
        cp.cuda.runtime.memcpyAsync(peer_recv + 4 * lo, G.data.ptr + 4 * lo, 4 * (hi - lo),
                                    cp.cuda.runtime.memcpyDefault, stream.ptr)

    timeout = np.int64(10 * 10**9)

    def may_send(stream):
        """Before a step's first copy: the peer has summed what the last step sent."""
        with stream:
            wait((1,), (1,), (flags[2 * peer + 1:], counts[3:], np.int32(1), timeout))

    def finish():
        signal((1,), (1,), (np.uint64(peer_flags + 8 * 2 * rank), counts[0:]))
        wait((1,), (1,), (flags[2 * peer:], counts[2:], np.int32(0), timeout))
        cp.add(G, recv, out=G)
        signal((1,), (1,), (np.uint64(peer_flags + 8 * (2 * rank + 1)), counts[1:]))

    def p2p_exchange():
        may_send(cp.cuda.get_current_stream())
        copy(0, S, cp.cuda.get_current_stream())
        finish()

    def nccl_allreduce():
        s = cp.cuda.get_current_stream()
        nccl.communicator.allReduce(G.data.ptr, G.data.ptr, S, nccl.types["float32"], nccl.nccl.NCCL_SUM, s.ptr)

    dz1 = cp.random.rand(H, b, dtype=cp.float32)
    X = cp.random.rand(D, b, dtype=cp.float32)
    dW1 = G[:H * D].reshape(H, D)

    def gemm_chunks_nccl(k):
        """The trainer's --overlap: each chunk's NCCL all-reduce on a second stream."""
        rows = -(-H // k)
        cur = cp.cuda.get_current_stream()
        for i, r0 in enumerate(range(0, H, rows)):
            r1 = min(r0 + rows, H)
            kernels.gemm(dz1[r0:r1], X.T, out=dW1[r0:r1], variant="cublas")
            ev[i].record(cur)
            side.wait_event(ev[i])
            lo, hi = r0 * D, r1 * D if r1 < H else S
            nccl.communicator.allReduce(G.data.ptr + 4 * lo, G.data.ptr + 4 * lo, hi - lo, nccl.types["float32"],
                                        nccl.nccl.NCCL_SUM, side.ptr)
        ev[15].record(side)
        cur.wait_event(ev[15])

    def gemm_chunks(k, send):
        rows = -(-H // k)
        cur = cp.cuda.get_current_stream()
        if send:
            may_send(side)
        for i, r0 in enumerate(range(0, H, rows)):
            r1 = min(r0 + rows, H)
            kernels.gemm(dz1[r0:r1], X.T, out=dW1[r0:r1], variant="cublas")
            if send:
                ev[i].record(cur)
                side.wait_event(ev[i])
                copy(r0 * D, r1 * D if r1 < H else S, side)
        if send:
            ev[15].record(side)
            cur.wait_event(ev[15])
            finish()

    def gemm_nccl():
        kernels.gemm(dz1, X.T, out=dW1, variant="cublas")
        nccl_allreduce()

    def replayed(fn, calls=10, repeats=30):
        w.comm.Barrier()
        with main_stream:
            for _ in range(calls):
                fn()
            main_stream.synchronize()
            w.comm.Barrier()
            main_stream.begin_capture()
            for _ in range(calls):
                fn()
            graph = main_stream.end_capture()
            times = []
            for _ in range(repeats):
                w.comm.Barrier()
                a, z = cp.cuda.Event(), cp.cuda.Event()
                a.record(main_stream)
                graph.launch(main_stream)
                z.record(main_stream)
                z.synchronize()
                times.append(cp.cuda.get_elapsed_time(a, z) / calls)
        return statistics.median(times), min(times)

    def eager(fn, repeats=30):
        times = []
        with main_stream:
            for _ in range(repeats + 3):
                main_stream.synchronize()
                w.comm.Barrier()
                a, z = cp.cuda.Event(), cp.cuda.Event()
                a.record(main_stream)
                fn()
                z.record(main_stream)
                z.synchronize()
                times.append(cp.cuda.get_elapsed_time(a, z))
        return statistics.median(times[3:]), min(times[3:])

    def report(what, t):
        worst = max(w.comm.allgather(t[0]))
        if rank == 0:
            print(json.dumps({"what": what, "H": H, "b": b, "bytes": 4 * S, "median_ms": t[0], "min_ms": t[1],
                              "slowest_rank_median_ms": worst}), flush=True)

    # correctness: after one exchange G = G0 + peer's G0
    G0 = G.copy()
    peers = w.comm.allgather(float(G0[:1000].sum()))
    with main_stream:
        p2p_exchange()
        main_stream.synchronize()
    w.comm.Barrier()
    got, want = float(G[:1000].sum()), sum(peers)
    assert abs(got - want) < 1e-3 * abs(want), (got, want)
    if rank == 0:
        print(json.dumps({"check": "p2p exchange sums", "got": got, "want": want}), flush=True)
    report("nccl all-reduce eager", eager(nccl_allreduce))
    report("nccl all-reduce in graph", replayed(nccl_allreduce))
    report("p2p copy only in graph", replayed(lambda: copy(0, S, cp.cuda.get_current_stream())))
    report("p2p copy only eager", eager(lambda: copy(0, S, cp.cuda.get_current_stream())))
    report("p2p exchange eager", eager(p2p_exchange))
    report("p2p exchange in graph", replayed(p2p_exchange))
    report("dW1 gemm alone", replayed(lambda: gemm_chunks(1, False)))
    report("dW1 gemm + nccl", replayed(gemm_nccl))
    for k in (1, 2, 4, 8):
        report(f"dW1 gemm in {k} chunks alone", replayed(lambda: gemm_chunks(k, False)))
        report(f"dW1 gemm in {k} chunks + p2p", replayed(lambda: gemm_chunks(k, True)))
        report(f"dW1 gemm in {k} chunks + nccl overlapped", replayed(lambda: gemm_chunks_nccl(k)))
    cp.cuda.runtime.ipcCloseMemHandle(peer_recv)
    cp.cuda.runtime.ipcCloseMemHandle(peer_flags)


if __name__ == "__main__":
    main(*map(int, sys.argv[1:]))
