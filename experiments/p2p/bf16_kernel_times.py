"""The p2p exchange kernels alone, at the gradients of the nets of bf16_exchange.sh: FP32 and BF16 copies, in CUDA
graphs as the ceilings time them (perflab.measure.ceilings.p2p_exchange_update), beside the one-GPU update (sgd_update
rounding into P_half) and the copy of P into P_half it replaced. One JSON line a row.

    mpirun -n 2 python experiments/p2p/bf16_kernel_times.py
"""
import json

import cupy as cp
import numpy as np

from perflab import kernels
from perflab.analysis.perfmodel import gradient_buffer_bytes
from perflab.measure.ceilings import p2p_exchange_update
from perflab.timing import time_graph_ms
from perflab.train.comm import for_gpu, world
from perflab.train.gpu import select_device

comm = world()
select_device(comm)
nets = ["1024-1024", "2048-2048", 1024]
sizes = [gradient_buffer_bytes(h) for h in nets]
p2p = for_gpu(comm, "p2p")
rows = p2p_exchange_update(p2p, sizes, calls=10, repeats=20) + p2p_exchange_update(p2p, sizes, calls=10, repeats=20, bf16=True)
if comm.rank == 0:
    for r in rows:
        print(json.dumps({k: r[k] for k in ("ceiling", "impl", "size_bytes", "ranks", "seconds")}))
    for size in sizes:
        n = size // 4
        P, G, half = cp.ones(n, cp.float32), cp.full(n, 1e-3, cp.float32), cp.empty(n, cp.uint16)
        ends, regs = cp.asarray([n], np.int64), cp.zeros(1, cp.float32)
        for what, call in (("sgd_update rounding into P_half", lambda: kernels.sgd_update(P, G, 0.1, ends, regs, rounded=half)),
                           ("narrow_copy P -> P_half", lambda: kernels.narrow_copy(P, half))):
            print(json.dumps({"ceiling": "one GPU", "impl": what, "size_bytes": size, "ranks": 1,
                              "seconds": time_graph_ms(cp, call, calls=10, repeats=20) / 1e3}))
