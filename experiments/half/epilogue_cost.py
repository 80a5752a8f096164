"""What the half wgmma GEMM's bias + sigmoid epilogue costs (session 58, issue 68 item 1), before the output layer's
forward is put in the same epilogue: each hidden layer's forward GEMM of the half step at B = 3200, in the trainer's
layouts (the first's images a column slice of the resident 784 x 60000 set), timed alone (graph replays, device time)
on perflab's wgmma with and without its bias, beside cuBLAS alone and cuBLAS + bias_sigmoid (the cuBLAS step's way).
Usage: python experiments/half/epilogue_cost.py LABEL  (prints one JSON line a shape and way)"""
import json
import sys

import cupy as cp
import numpy as np

from perflab import kernels
from perflab.timing import time_graph_ms

B, N_IMAGES, D = 3200, 60000, 784
rng = np.random.default_rng(0)
f32 = lambda *s: cp.asarray(rng.uniform(-0.5, 0.5, s).astype(np.float32))  # noqa: E731
for kind, store in (("bfloat16", np.uint16), ("float16", np.float16)):
    half = lambda x: kernels.narrow_copy(x, cp.empty(x.shape, store))  # noqa: E731
    images = half(f32(D, N_IMAGES))
    for H in (1024, 2048):
        for layer, a, b in (("forward GEMM 1", half(f32(H, D)), images[:, 2 * B:3 * B]),
                            ("hidden forward GEMM", half(f32(H, H)), half(f32(H, B)))):
            out, bias = cp.empty((H, B), store), f32(H)
            kernels.tune(a, b, out, "wgmma")
            ways = {"wgmma": lambda: kernels.half_gemm(a, b, out, variant="wgmma"),
                    "wgmma + bias, sigmoid epilogue": lambda: kernels.half_gemm(a, b, out, bias, variant="wgmma"),
                    "cublas": lambda: kernels.half_gemm(a, b, out, variant="cublas"),
                    "cublas + bias_sigmoid pass": lambda: kernels.half_gemm(a, b, out, bias, variant="cublas")}
            for way, run in ways.items():
                run()
                row = {"version": sys.argv[1], "dtype": kind, "H": H, "B": B, "layer": layer, "way": way,
                       "us": 1e3 * time_graph_ms(cp, run, calls=5, repeats=20)}
                print(json.dumps(row), flush=True)
