"""Where the p = 2 BF16 exchange kernel's time goes beyond its bytes (session 61: update_grid_probe.py moved the
kernel's local traffic at its own grid in 6.0 and 20.3 us at 784-1024-1024-10 and 784-2048-2048-10, where the kernel
with every copy local took 12.2 and 23.9 in session 60). Variants of p2p.cu's text compiled here, each timed reading
the peer's copy over NVLink (as the product) and reading a second local copy instead (timing only: no variant's sums
are checked, and without the barrier a copy may be read before it is whole):
- `no narrowing`: the narrowing of the rank's own FP32 gradient before the round (here the GEMMs "made" all of it, so
  the pass only walks its vectors) left out; `no narrow_share`, `no narrow_tail` (session 61, later): either half of
  it (the vectors' walk; the values past the last whole vector and the CE, written before the round's release);
- `no barrier`: no flag sent or waited on at the round's start;
- `U=1`, `U=4`: vectors a thread at a time in the sums (2 in the product);
- the last: all of no narrowing, no barrier.
Graphed, the ranks started together, rank 0's medians, one JSON line a row.

    mpirun -n 2 python experiments/p2p/exchange_variants.py
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
NARROW = "        narrow_share(G, own, 0, nv, made, nmade);\n    }\n    narrow_tail(G, own, n, nv);"
GATE = "if (r < p && r != rank) {\n        if (release)"
UNROLL = "constexpr int U = 2;  // vectors a thread from each rank"
for text in (NARROW, GATE, UNROLL):
    assert source.count(text) == 1, f"p2p.cu changed: {text!r} no longer found once"
no_narrow = NARROW.replace("narrow_share(G, own, 0, nv, made, nmade);", "").replace("narrow_tail(G, own, n, nv);", "")
no_gate = GATE.replace("r < p", "false && r < p")
variants = {"product": source, "no narrowing": source.replace(NARROW, no_narrow),
            "no narrow_share": source.replace(NARROW, NARROW.replace("narrow_share(G, own, 0, nv, made, nmade);", "")),
            "no narrow_tail": source.replace(NARROW, NARROW.replace("narrow_tail(G, own, n, nv);", "")),
            "U=1": source.replace(UNROLL, UNROLL.replace("2", "1")), "U=4": source.replace(UNROLL, UNROLL.replace("2", "4")),
            "no barrier": source.replace(GATE, no_gate),  # the last two: they send no flags for their rounds
            "no narrowing, no barrier": source.replace(NARROW, no_narrow).replace(GATE, no_gate)}
functions = {what: cp.RawModule(code=code, options=("-std=c++17", f"-I{KERNEL_DIR}"),
                                name_expressions=("exchange_update_bf16",)).get_function("exchange_update_bf16")
             for what, code in variants.items()}
rows = []
for net in ("1024-1024", "2048-2048"):
    n = gradient_buffer_bytes(net) // 4 - 1
    nv = n // 8
    G = p2p.register(n + 1, np.float32, bf16_copy=True)
    G.fill(1e-3)
    p2p.own_half.fill(0x3a83)
    second = cp.full(p2p.own_half.size, 0x3a83, cp.uint16)  # a local stand-in for the peer's copy
    local = cp.asarray([p2p.own_half.data.ptr, second.data.ptr][::1 if p2p.rank == 0 else -1], np.uint64)
    params, rounded = cp.ones(n, cp.float32), cp.empty(n, cp.uint16)
    ends, regs = cp.asarray([n], np.int64), cp.zeros(1, cp.float32)
    whole = cp.asarray([[0, nv]], np.int64)
    for what, function in functions.items():
        for copies, halves in (("peer over NVLink", p2p.halves), ("both local", local)):
            def call():
                function((p2p.blocks,), (p2p_kernels.THREADS,),
                         (params, rounded, halves, p2p.grads, i32(p2p.grads.size), i32(p2p.rank), u64(n),
                          np.float32(0.1), ends, regs, i32(ends.size), p2p.ce, p2p.flags, p2p.rounds,
                          np.int64(p2p.timeout_ns), i32(0), whole, i32(1)))
            ms = time_graph_ms(cp, call, calls=10, repeats=20, before=ranks_together(p2p))
            rows.append({"net": net, "variant": what, "copies": copies, "us": ms * 1e3, "rank": comm.rank,
                         "blocks": p2p.blocks})
if comm.rank == 0:
    for r in rows:
        print(json.dumps(r))
