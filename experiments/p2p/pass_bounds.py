"""Where the BF16 p2p exchange's time goes after D81 (session 59): at the gradients of 784-1024-1024-10 and
784-2048-2048-10, each in CUDA graphs with the ranks started together, one JSON line a row (rank 0's):
- `kernel`: exchange_update_bf16 as the trainer launches it, its GEMMs having written the copy (made = all);
- `kernel, local copies`: the same, every rank's copy address replaced by this rank's own (no NVLink reads;
  the barriers still cross);
- `kernel, narrowing all`: made = none, as before D81;
- `SM copy of the peer's copy`: an elementwise kernel copying the peer's BF16 copy (8-byte loads) into a local
  buffer, both ranks at once: what SM loads over NVLink take for those bytes;
- `one-GPU update`: sgd_update rounding into P_half, the update a rank makes alone (p = 1).

    mpirun -n 2 python experiments/p2p/pass_bounds.py
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
copy = cp.ElementwiseKernel("uint64 x", "uint64 y", "y = x", "perflab_sm_copy")
rows = []
for net in ("1024-1024", "2048-2048"):
    n = gradient_buffer_bytes(net) // 4
    p2p.register(n + 1, np.float32, bf16_copy=True).fill(1e-3)
    params, rounded = cp.ones(n, cp.float32), cp.empty(n, cp.uint16)
    ends, regs = cp.asarray([n], np.int64), cp.zeros(1, cp.float32)
    whole, none = cp.asarray([[0, n // 8]], np.int64), cp.zeros((0, 2), np.int64)
    own = int(p2p.halves[comm.rank].get())
    local = cp.asarray([own] * comm.size, np.uint64)
    peer = int(p2p.halves[1 - comm.rank].get())
    words = (n // 8) * 2  # the copy's whole vectors, as 8-byte words
    mapped = cp.cuda.UnownedMemory(peer, words * 8, None, cp.cuda.Device().id)  # the peer's, mapped here by IPC
    remote = cp.ndarray(words, cp.uint64, cp.cuda.MemoryPointer(mapped, 0))
    landing = cp.empty(words, cp.uint64)

    def exchange(halves, made):
        def call():
            p2p.read_wait()
            p2p_kernels.exchange_update_bf16(params, rounded, halves, p2p.grads, p2p.rank, n, 0.1, ends, regs, p2p.ce,
                                             p2p.flags, p2p.rounds, p2p.timeout_ns, p2p.blocks, made)
        return call
    G = cp.full(n, 1e-3, cp.float32)
    cases = {"kernel": exchange(p2p.halves, whole), "kernel, local copies": exchange(local, whole),
             "kernel, narrowing all": exchange(p2p.halves, none),
             "SM copy of the peer's copy": lambda: copy(remote, landing),
             "one-GPU update": lambda: kernels.sgd_update(params, G, 0.1, ends, regs, rounded=rounded)}
    for what, call in cases.items():
        ms = time_graph_ms(cp, call, calls=10, repeats=20, before=ranks_together(p2p))
        rows.append({"net": net, "what": what, "gradient_values": n, "copy_bytes": words * 8, "us": ms * 1e3,
                     "rank": comm.rank})
if comm.rank == 0:
    for r in rows:
        print(json.dumps(r))
