"""Why does the pipelined path's host all-reduce of a ~2 MB gradient piece take 1.65 ms in training
(results/nvidia-h200/timeline_H2560_b3500_p2.csv) when the ceilings' MPI_Allreduce of that size
takes ~0.45 ms? Each candidate cause, one at a time, on the pieces the trainer cuts at H = 2560
(G's tail, then four dW1 row chunks of 640 x 784 floats), median of 20 steps:
  pageable   MPI_Allreduce on a reused NumPy buffer, barrier first (as perflab ceilings time it)
  pinned     the same on slices of one page-locked buffer (the trainer's hostG)
  dma        the pinned slices freshly written by a device -> host copy before each all-reduce
  chain      the trainer's own chain: copy down on a stream, wait for its event, MPI, copy up
  busy       the chain while the GPU runs a long GEMM loop on another stream (training's backward)
  skewed     the chain with no barrier first, rank 1 starting 0.2 ms late (one rank's host slower)
Run: mpirun -n 2 python3 experiments/pipelined/pieces.py   (one JSON line per case and piece)
"""
import json
import statistics
import time

import cupy as cp
import numpy as np
from mpi4py import MPI

from perflab.train.gpu import pinned_copy

comm = MPI.COMM_WORLD
rank = comm.Get_rank()
cp.cuda.Device(rank % cp.cuda.runtime.getDeviceCount()).use()
H, D = 2560, 784
rows = -(-H // 4)
sizes = [H + 10 * H + 10 + 1] + [rows * D] * 4  # floats: G's tail, then the dW1 chunks
total = sum(sizes)
offsets = np.cumsum([0] + sizes)
G = cp.random.random(total, dtype=cp.float32)
hostG = pinned_copy(np.zeros(total, np.float32))
pageable = [np.ones(n, np.float32) for n in sizes]
down, up, work = (cp.cuda.Stream(non_blocking=True) for _ in range(3))
events = [cp.cuda.Event(disable_timing=True) for _ in sizes]
A = cp.random.random((4096, 4096), dtype=cp.float32)


def memcpy(dst, src, nbytes, kind, stream):
    cp.cuda.runtime.memcpyAsync(dst, src, nbytes, kind, stream.ptr)


def allreduce(buf):
    start = time.perf_counter()
    comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
    return time.perf_counter() - start


def case(name, steps=20, barrier=True, skew=0.0, busy=False, source="pinned", fresh=False, chain=False):
    times = [[] for _ in sizes]
    for _ in range(steps + 2):
        if busy:
            with work:
                for _ in range(8):
                    A @ A  # ~8 ms of GEMMs beside the exchange
        if fresh and not chain:
            memcpy(hostG.ctypes.data, G.data.ptr, hostG.nbytes, 2, down)
            down.synchronize()
        if barrier:
            comm.Barrier()
        if skew and rank == 1:
            time.sleep(skew)
        if chain:
            for j, n in enumerate(sizes):
                lo = offsets[j]
                memcpy(hostG[lo:].ctypes.data, G[lo:].data.ptr, 4 * n, 2, down)
                events[j].record(down)
        for j, n in enumerate(sizes):
            lo = offsets[j]
            buf = pageable[j] if source == "pageable" else hostG[lo:lo + n]
            if chain:
                events[j].synchronize()
            times[j].append(allreduce(buf))
            if chain:
                memcpy(G[lo:].data.ptr, hostG[lo:].ctypes.data, 4 * n, 1, up)
        up.synchronize()
        work.synchronize()
    if rank == 0:
        for j, n in enumerate(sizes):
            t = times[j][2:]
            print(json.dumps({"case": name, "piece": j, "bytes": 4 * n, "median_ms": round(1e3 * statistics.median(t), 3),
                              "max_ms": round(1e3 * max(t), 3)}), flush=True)


case("pageable", source="pageable")
case("pinned")
case("dma", fresh=True)
case("chain", chain=True)
case("busy", chain=True, busy=True)
case("skewed", chain=True, barrier=False, skew=2e-4)
case("chain again", chain=True)
