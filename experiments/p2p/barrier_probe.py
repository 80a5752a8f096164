"""What the p = 2 BF16 exchange costs besides its bytes (session 60): pass_bounds.py found the kernel with every copy
read locally 9.6 us above the one-GPU update at 784-1024-1024-10's gradient (14.6 against 5.0), 6.9 at
784-2048-2048-10's. Each timed call there was read_wait's launch and the kernel; here they are timed apart, at those
two gradients and at one of 64 values (the round's barrier and launches alone), and the kernel at fewer blocks. CUDA
graphs, the ranks started together, rank 0's medians, one JSON line a row.

    mpirun -n 2 python experiments/p2p/barrier_probe.py
"""
import json

import cupy as cp
import numpy as np

from perflab import kernels
from perflab.analysis.perfmodel import gradient_buffer_bytes
from perflab.kernels import p2p as p2p_kernels
from perflab.measure.ceilings import ranks_together
from perflab.timing import time_graph_ms
from perflab.train.comm import for_gpu, world
from perflab.train.gpu import select_device

comm = world()
select_device(comm)
p2p = for_gpu(comm, "p2p")
empty = cp.ElementwiseKernel("float32 x", "float32 y", "y = x", "perflab_empty")
one_in, one_out = cp.ones(1, cp.float32), cp.empty(1, cp.float32)
rows = []
for net, n in (("64 values", 64), ("1024-1024", gradient_buffer_bytes("1024-1024") // 4),
               ("2048-2048", gradient_buffer_bytes("2048-2048") // 4)):
    p2p.register(n + 1, np.float32, bf16_copy=True).fill(1e-3)
    params, rounded = cp.ones(n, cp.float32), cp.empty(n, cp.uint16)
    ends, regs = cp.asarray([n], np.int64), cp.zeros(1, cp.float32)
    whole = cp.asarray([[0, n // 8]], np.int64)
    local = cp.asarray([int(p2p.halves[comm.rank].get())] * comm.size, np.uint64)
    G = cp.full(n, 1e-3, cp.float32)

    def exchange(halves, grid=p2p.blocks, wait=True):
        def call():
            if wait:
                p2p.read_wait()
            p2p_kernels.exchange_update_bf16(params, rounded, halves, p2p.grads, p2p.rank, n, 0.1, ends, regs, p2p.ce,
                                             p2p.flags, p2p.rounds, p2p.timeout_ns, grid, whole)
        return call
    cases = {"empty kernel": lambda: empty(one_in, one_out), "read_wait": p2p.read_wait,
             "kernel": exchange(p2p.halves), "kernel, no read_wait": exchange(p2p.halves, wait=False),
             "kernel, local copies": exchange(local), "kernel, local copies, no read_wait": exchange(local, wait=False),
             "one-GPU update": lambda: kernels.sgd_update(params, G, 0.1, ends, regs, rounded=rounded)}
    for grid in (p2p.blocks // 2, p2p.blocks // 4):
        cases[f"kernel, no read_wait, {grid} blocks"] = exchange(p2p.halves, grid, wait=False)
        cases[f"kernel, local copies, no read_wait, {grid} blocks"] = exchange(local, grid, wait=False)
    for what, call in cases.items():
        ms = time_graph_ms(cp, call, calls=10, repeats=20, before=ranks_together(p2p))
        rows.append({"net": net, "what": what, "gradient_values": n, "us": ms * 1e3, "rank": comm.rank,
                     "blocks": p2p.blocks})
if comm.rank == 0:
    for r in rows:
        print(json.dumps(r))
