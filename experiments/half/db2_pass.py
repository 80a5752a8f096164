"""The fused output layer's backward work in a half step timed alone (graph replays, device time): before, db_L's row
sums as a row_sum launch of their own beside output_backward; after, made in output_backward's pass (db2=). Run with
PYTHONPATH at each version's perflab. Usage: python experiments/half/db2_pass.py LABEL  (one JSON line a shape)"""
import inspect
import json
import sys

import cupy as cp
import numpy as np

from perflab import kernels
from perflab.timing import time_graph_ms

C = 10
fused = "db2" in inspect.signature(kernels.output_backward).parameters
rng = np.random.default_rng(0)
for kind, store in (("bfloat16", np.uint16), ("float16", np.float16)):
    for H, B in ((1024, 3200), (1024, 12000), (2048, 3200), (2048, 12000)):
        f32 = lambda *s: cp.asarray(rng.uniform(-0.5, 0.5, s).astype(np.float32))  # noqa: E731
        W2, dW2, db1, db2 = f32(C, H), f32(C, H), f32(H), f32(C)
        a1 = kernels.narrow_copy(f32(H, B), cp.empty((H, B), store))
        dz1, delta = cp.empty_like(a1), f32(C, B)
        part = cp.zeros(kernels.output_backward_partials(H, B, C), np.float32)

        def backward():
            if fused:
                kernels.output_backward(W2, delta, a1, dz1, dW2, db1, part, db2=db2)
            else:
                kernels.row_sum(delta, db2)
                kernels.output_backward(W2, delta, a1, dz1, dW2, db1, part)
        row = {"version": sys.argv[1], "db2_in_pass": fused, "dtype": kind, "H": H, "B": B,
               "backward_us": 1e3 * time_graph_ms(cp, backward, calls=5, repeats=20)}
        print(json.dumps(row), flush=True)
