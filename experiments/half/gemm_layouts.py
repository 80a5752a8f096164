"""cuBLAS's half GEMMs of a one-hidden-layer step in each storage order of the images (perflab keeps X
F-ordered, D x N with D contiguous; the half floor's copy was C-ordered): device time of graph replays.
Usage: python experiments/half/gemm_layouts.py"""
import json

import cupy as cp
import numpy as np

from perflab import kernels
from perflab.timing import time_graph_ms

rng = np.random.default_rng(0)
rows = []


def held(shape, st, order="C"):
    x = cp.asarray(rng.random(shape, dtype=np.float32) - 0.5, order=order)
    return kernels.narrow_copy(x, cp.empty_like(x, dtype=st))


for H, B in ((1024, 3200), (1024, 12000), (2048, 12000)):
    D, N = 784, 60000
    for kind in ("bfloat16", "float16"):
        st = kernels.HALF_STORAGE[kind]
        W, dz = held((H, D), st), held((H, B), st)
        out_h, dW = cp.empty((H, B), st), cp.empty((H, D), np.float32)
        for order in ("F", "C"):
            X = held((D, N), st, order)
            Xb = X[:, :B]
            fwd = time_graph_ms(cp, lambda: kernels.half_gemm(W, Xb, out_h))
            wg = time_graph_ms(cp, lambda: kernels.half_gemm(dz, Xb.T, dW))
            rows.append({"H": H, "B": B, "dtype": kind, "X order": order, "fwd1_ms": fwd, "dW1_ms": wg})
            print(json.dumps(rows[-1]))
