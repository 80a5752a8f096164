"""The half wgmma GEMM's ping-pong configs (session 62, issue 68 item 2: the consumer warpgroups take a CTA's tiles in
turn, so that one's epilogue runs beside the other's MMAs) against the cooperative ones: every config timed alone
(graph replays, device time, split-K 1) at the half step's GEMMs in its layouts, beside cuBLAS, and with the bias +
sigmoid epilogue where the GEMM is a forward one. Usage: python experiments/half/ping_pong_configs.py LABEL"""
import json
import sys

import cupy as cp
import numpy as np

from perflab import kernels
from perflab.kernels.wgmma import CONFIGS, config_name
from perflab.timing import time_graph_ms

rng = np.random.default_rng(0)
D = 784


def half(*shape):
    return kernels.narrow_copy(cp.asarray(rng.uniform(-0.5, 0.5, shape).astype(np.float32)), cp.empty(shape, np.uint16))


for H in (1024, 2048):
    for B in (3200, 12000):
        X, W1, W, dz, a = half(D, B), half(H, D), half(H, H), half(H, B), half(H, B)
        shapes = {"fwd1": (W1, X, (H, B), np.uint16, True), "fwd": (W, a, (H, B), np.uint16, True),
                  "bwd dz": (W.T, dz, (H, B), np.uint16, False), "bwd dW": (dz, a.T, (H, H), np.float32, False),
                  "bwd3 dW1": (dz, X.T, (H, D), np.float32, False)}
        for shape, (A, Bm, out_shape, out_type, forward) in shapes.items():
            out, bias = cp.empty(out_shape, out_type), cp.asarray(rng.uniform(-1, 1, out_shape[0]).astype(np.float32))
            ways = {"cublas": lambda: kernels.half_gemm(A, Bm, out, variant="cublas")}
            if forward:
                ways["cublas + bias_sigmoid"] = lambda: kernels.half_gemm(A, Bm, out, bias, variant="cublas")
            for c in CONFIGS["half"]:
                name = config_name(c)
                ways[name] = lambda n=name: kernels.half_gemm(A, Bm, out, variant="wgmma", config=n, splits=1)
                if forward and c[4] == 1:
                    ways[name + " + bias, sigmoid"] = lambda n=name: kernels.half_gemm(A, Bm, out, bias, variant="wgmma",
                                                                                     config=n, splits=1)
            for way, run in ways.items():
                try:
                    run()
                    us = 1e3 * time_graph_ms(cp, run, calls=5, repeats=15)
                except kernels.KernelError as e:
                    print(json.dumps({"version": sys.argv[1], "H": H, "B": B, "shape": shape, "way": way,
                                      "error": str(e)[:200]}), flush=True)
                    continue
                print(json.dumps({"version": sys.argv[1], "H": H, "B": B, "shape": shape, "way": way, "us": us}),
                      flush=True)
