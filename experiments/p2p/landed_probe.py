"""The p = 2 BF16 exchange's kernel time against what the peer pushed into this rank's landing (session 61, after the
stamped push, push_stamped.patch, moved the exchange 46.2 -> 39.8 us at 784-2048-2048-10 and 20.8 -> 20.2 at
784-1024-1024-10 in the step's trace). Run on the patch's tree: the kernel alone, graphed, the ranks started together,
the landing's stamp set far ahead (so no wait on a push), for landed = none, the layers above the first (the patch's
push), and every vector (what a push of dW_1's peer half as well would leave). Rank 0's medians, one JSON line a row.

    mpirun -n 2 python experiments/p2p/landed_probe.py
"""
import json

import cupy as cp
import numpy as np

from perflab.analysis.perfmodel import gradient_buffer_bytes
from perflab.kernels import p2p as p2p_kernels
from perflab.measure.ceilings import ranks_together
from perflab.timing import time_graph_ms
from perflab.train.comm import for_gpu, world
from perflab.train.gpu import select_device

comm = world()
select_device(comm)
p2p = for_gpu(comm, "p2p")
rows = []
for net, h in (("1024-1024", 1024), ("2048-2048", 2048)):
    n = gradient_buffer_bytes(net) // 4 - 1
    G = p2p.register(n + 1, np.float32, bf16_copy=True, landing=True)
    assert p2p.pushes, "the tree has no landing: run this on push_stamped.patch's tree"
    G.fill(1e-3)
    for buf in (p2p.own_half, cp.ndarray((p2p.own_half.size,), np.uint16,
                                         cp.cuda.MemoryPointer(cp.cuda.UnownedMemory(p2p.landings[p2p.rank], p2p.own_half.nbytes, p2p),
                                                               0))):
        buf.fill(0x3a83)  # 1e-3 in bfloat16
    stamp = cp.ndarray((1,), np.uint32, cp.cuda.MemoryPointer(
        cp.cuda.UnownedMemory(p2p.landings[p2p.rank] + p2p.stamp_offset, 4, p2p), 0))
    stamp.fill(0x7fff0000)  # far ahead of every round this probe runs
    params, rounded = cp.ones(n, cp.float32), cp.empty(n, cp.uint16)
    ends, regs = cp.asarray([n], np.int64), cp.zeros(1, cp.float32)
    nv = n // 8
    w1 = 784 * h // 8  # W_1 leads the gradient; the layers above it follow
    made = cp.asarray([[0, nv]], np.int64)
    cases = {"none landed": None, "above W_1 landed (the patch)": [[w1, nv]], "all landed": [[0, nv]]}
    for what, landed in cases.items():
        ranges = None if landed is None else cp.asarray(landed, np.int64)  # made before the capture

        def call():
            p2p_kernels.exchange_update_bf16(params, rounded, p2p.halves, p2p.grads, p2p.rank, n, 0.1, ends, regs,
                                             p2p.ce, p2p.flags, p2p.rounds, p2p.timeout_ns, p2p.blocks, made,
                                             None if landed is None else p2p.near,
                                             ranges)
        ms = time_graph_ms(cp, call, calls=10, repeats=20, before=ranks_together(p2p))
        rows.append({"net": net, "what": what, "landed_vectors": 0 if landed is None else landed[0][1] - landed[0][0],
                     "vectors": nv, "us": ms * 1e3, "rank": comm.rank, "blocks": p2p.blocks})
if comm.rank == 0:
    for r in rows:
        print(json.dumps(r))
