"""The fused output layer's two half-precision passes timed alone (graph replays, device time), before and after
the softmax and the backward reduction moved into them (D63): run with PYTHONPATH at each version's perflab.
Usage: python experiments/half/output_passes.py LABEL  (prints one JSON line a shape)"""
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
        W2, b1, b2, dW2, db1 = f32(C, H), f32(H), f32(C), f32(C, H), f32(H)
        z1 = kernels.narrow_copy(f32(H, B), cp.empty((H, B), store))
        dz1 = cp.empty_like(z1)
        y, delta = cp.asarray(rng.integers(0, C, B)), f32(C, B)
        fwd = cp.zeros(kernels.output_layer_partials(H, B, C), np.float32)
        bwd = cp.zeros(kernels.output_backward_partials(H, B, C), np.float32)
        row = {"version": sys.argv[1], "dtype": kind, "H": H, "B": B}
        row["forward_us"] = 1e3 * time_graph_ms(
            cp, lambda: kernels.output_layer(W2, b1, b2, z1, y, delta, B, fwd), calls=5, repeats=20)
        row["backward_us"] = 1e3 * time_graph_ms(
            cp, lambda: kernels.output_backward(W2, delta, z1, dz1, dW2, db1, bwd), calls=5, repeats=20)
        print(json.dumps(row), flush=True)
