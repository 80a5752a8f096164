"""The half step's fused backward pass timed alone as the trainer launches it (db2 made in the pass, the reduction
after it; graph replays, device time): run with PYTHONPATH at each version's perflab (session 50: its loads of delta
issued together). Usage: python experiments/half/backward_pass.py LABEL  (prints one JSON line a shape)"""
import json
import sys

import cupy as cp
import numpy as np

from perflab import kernels
from perflab.timing import time_graph_ms

C = 10
rng = np.random.default_rng(0)
for kind, store in (("bfloat16", np.uint16), ("float16", np.float16)):
    for H, B in ((1024, 3200), (1024, 12000), (2048, 3200), (2048, 12000)):
        f32 = lambda *s: cp.asarray(rng.uniform(-0.5, 0.5, s).astype(np.float32))  # noqa: E731
        W2, dW2, db1, db2, delta = f32(C, H), f32(C, H), f32(H), f32(C), f32(C, B)
        a1 = kernels.narrow_copy(f32(H, B), cp.empty((H, B), store))
        dz1 = cp.empty_like(a1)
        part = cp.zeros(kernels.output_backward_partials(H, B, C), np.float32)
        us = 1e3 * time_graph_ms(cp, lambda: kernels.output_backward(W2, delta, a1, dz1, dW2, db1, part, db2=db2),
                                 calls=5, repeats=20)
        print(json.dumps({"version": sys.argv[1], "dtype": kind, "H": H, "B": B, "backward_us": us}), flush=True)
