"""Does the p = 2 BF16 exchange run slower with its memory out of the L2, as in a step? (session 61: the blind
checks under-predicted p = 2 by 7% and 4% at 784-1280-1280-10 and 784-1792-1792-10, whose exchanges the ceilings time
with P, the copies and P's rounding, 27-46 MB, in the L2 of a replay loop; at 784-2304-2304-10, past the L2, they did
not.) The ceilings' call (read_wait, then the exchange, the GEMMs having made the whole copy), graphed, the ranks
started together: alone; after a 256 MB fill that pushes the L2 out; and the fill alone. Rank 0's medians, us, one
JSON line a net.

    mpirun -n 2 python experiments/p2p/cold_exchange_probe.py
"""
import json

import cupy as cp
import numpy as np

from perflab.analysis.perfmodel import gradient_buffer_bytes
from perflab.measure.ceilings import ranks_together
from perflab.timing import time_graph_ms
from perflab.train.comm import for_gpu, world
from perflab.train.gpu import select_device

comm = world()
select_device(comm)
p2p = for_gpu(comm, "p2p")
flood = cp.empty(1 << 26, cp.float32)  # 256 MB: five times the H200's L2
regs = cp.zeros(1, cp.float32)
rows = []
for net in ("1024-1024", "1280-1280", "1792-1792", "2048-2048", "2304-2304"):
    n = gradient_buffer_bytes(net) // 4 - 1
    p2p.register(n + 1, np.float32, bf16_copy=True).fill(1e-3)
    p2p.in_copy([None], [(n,)], [0])
    params, ends, rounded = cp.ones(n, cp.float32), cp.asarray([n], np.int64), cp.empty(n, cp.uint16)

    def exchange():
        p2p.read_wait()
        p2p.exchange_update(params, 0.1, ends, regs, rounded=rounded)

    def cold():
        flood.fill(0)
        exchange()
    us = {what: time_graph_ms(cp, fn, calls=10, repeats=20, before=ranks_together(p2p)) * 1e3
          for what, fn in (("warm", exchange), ("after the fill", cold), ("the fill", lambda: flood.fill(0)))}
    rows.append({"net": net, "gradient_bytes": 4 * n, **us, "cold": us["after the fill"] - us["the fill"],
                 "rank": comm.rank})
if comm.rank == 0:
    for r in rows:
        print(json.dumps(r))
