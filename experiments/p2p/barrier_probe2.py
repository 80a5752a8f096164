"""The p = 2 BF16 exchange's round, taken apart (session 60, after barrier_probe.py: the kernel at a 64-value gradient
takes 6.8 us with its copies read locally, where a one-GPU update takes 1.7). The product's kernel beside variants
compiled here from p2p.cu's text (timing only: their sums may read a copy before it is whole):
- `plain start`: begin_round's release / acquire made plain volatile stores and loads, as the FP32 kernel's;
- `no barrier`: no flag sent or waited on (the round counter still moves);
and the FP32 kernel (exchange_update, plain start) at the 64-value gradient. CUDA graphs, the ranks started together,
rank 0's medians, one JSON line a row.

    mpirun -n 2 python experiments/p2p/barrier_probe2.py
"""
import json

import cupy as cp
import numpy as np

from perflab.analysis.perfmodel import gradient_buffer_bytes
from perflab.kernels import p2p as p2p_kernels
from perflab.kernels.build import KERNEL_DIR, i32, u64
from perflab.measure.ceilings import ranks_together
from perflab.timing import time_graph_ms
from perflab.train.comm import for_gpu, world
from perflab.train.gpu import select_device

comm = world()
select_device(comm)
p2p = for_gpu(comm, "p2p")
source = (KERNEL_DIR / "p2p.cu").read_text()
CALL = "begin_round(p, rank, flags, rounds, timeout_ns, true)"
GATE = "if (r < p && r != rank) {\n        if (release)"
assert CALL in source and GATE in source, "p2p.cu changed: the variants' replacements no longer apply"
variants = {"plain start": source.replace(CALL, CALL.replace("true", "false")),
            "no barrier": source.replace(GATE, GATE.replace("r < p", "false && r < p"))}
functions = {what: cp.RawModule(code=code, options=("-std=c++17", f"-I{KERNEL_DIR}"),
                                name_expressions=("exchange_update_bf16",)).get_function("exchange_update_bf16")
             for what, code in variants.items()}
rows = []
for net, n in (("64 values", 64), ("1024-1024", gradient_buffer_bytes("1024-1024") // 4),
               ("2048-2048", gradient_buffer_bytes("2048-2048") // 4)):
    G = p2p.register(n + 1, np.float32, bf16_copy=True)
    G.fill(1e-3)
    params, rounded = cp.ones(n, cp.float32), cp.empty(n, cp.uint16)
    ends, regs = cp.asarray([n], np.int64), cp.zeros(1, cp.float32)
    whole = cp.asarray([[0, n // 8]], np.int64)

    def product():
        p2p_kernels.exchange_update_bf16(params, rounded, p2p.halves, p2p.grads, p2p.rank, n, 0.1, ends, regs, p2p.ce,
                                         p2p.flags, p2p.rounds, p2p.timeout_ns, p2p.blocks, whole)

    def variant(what):
        def call():
            functions[what]((p2p.blocks,), (p2p_kernels.THREADS,),
                            (params, rounded, p2p.halves, p2p.grads, i32(p2p.grads.size), i32(p2p.rank), u64(n),
                             np.float32(0.1), ends, regs, i32(ends.size), p2p.ce, p2p.flags, p2p.rounds,
                             np.int64(p2p.timeout_ns), i32(0), whole, i32(1)))
        return call

    def fp32():
        p2p_kernels.exchange_update(params, p2p.grads, p2p.rank, n, 0.1, ends, regs, p2p.ce, p2p.flags, p2p.rounds,
                                    p2p.timeout_ns, p2p.blocks)
    cases = {"kernel": product, "kernel, plain start": variant("plain start")}
    if n == 64:
        cases["FP32 kernel"] = fp32
    cases["kernel, no barrier"] = variant("no barrier")  # last: it sends no flags for its rounds
    for what, call in cases.items():
        ms = time_graph_ms(cp, call, calls=10, repeats=20, before=ranks_together(p2p))
        rows.append({"net": net, "what": what, "gradient_values": n, "us": ms * 1e3, "rank": comm.rank,
                     "blocks": p2p.blocks})
if comm.rank == 0:
    for r in rows:
        print(json.dumps(r))
