"""The output layer's forward in the last hidden layer's GEMM epilogue (session 62, issue 68 item 1; session 52's
plan): perflab's half wgmma GEMM with bias + sigmoid stores a = sigmoid(W x + b) and, from its staged rows, each 64
rows' partial logits W_L a (logits_epilogue.patch: half_wgmma_gemm(w_out=, logit_parts=)); softmax_xent_grad adds
them. Checked against the same GEMM followed by output_layer (a to the bit, delta within FP32 sums' reordering), then
timed alone (graph replays, device time) against the step's ways: cuBLAS, or wgmma, then output_layer.
Usage: python experiments/half/logits_epilogue.py LABEL"""
import json
import math
import sys

import cupy as cp
import numpy as np

from perflab import kernels
from perflab.kernels import wgmma
from perflab.timing import time_graph_ms

rng = np.random.default_rng(0)
D, N_IMAGES = 784, 60000
CONFIGS = ("wg2-n256-s4", "wg2-n128-s6", "wg2-n128-s6-c2")


def emit(**row):
    print(json.dumps({"version": sys.argv[1], **row}), flush=True)


def f32(*shape):
    return cp.asarray(rng.uniform(-0.5, 0.5, shape).astype(np.float32))


def half(x):
    return kernels.narrow_copy(x, cp.empty(x.shape, np.uint16))


def layer(M, K, B, C, images=None):
    o = {"W": half(f32(M, K) * 0.3), "x": images if images is not None else half(f32(K, B)), "b1": f32(M),
         "W2": f32(C, M), "b2": f32(C), "y": cp.asarray(rng.integers(0, C, B)), "a": cp.empty((M, B), np.uint16)}
    o["delta"], o["groups"] = cp.zeros((C, B), cp.float32), math.ceil(M / 64)
    o["parts"] = cp.zeros((o["groups"], C, B), cp.float32)
    o["part"] = cp.zeros(kernels.output_layer_partials(M, B, C), cp.float32)
    return o


def fused(o, config):
    wgmma.half_wgmma_gemm(o["W"], o["x"], o["a"], o["b1"], config=config, splits=1, w_out=o["W2"],
                          logit_parts=o["parts"])
    C, B = o["delta"].shape
    kernels.softmax_xent_grad(o["parts"].reshape(o["groups"] * C, B), o["b2"], o["y"], o["delta"], B,
                              groups=o["groups"])


def step_way(o, variant, config=None):
    kernels.half_gemm(o["W"], o["x"], o["a"], variant=variant, config=config, splits=1 if config else None)
    kernels.output_layer(o["W2"], o["b1"], o["b2"], o["a"], o["y"], o["delta"], o["delta"].shape[1], o["part"])


good = True
for M, K, B, C in ((197, 104, 333, 10), (1024, 784, 3200, 10), (130, 256, 64, 16), (64, 64, 40, 3)):
    for config in CONFIGS[:2]:
        o = layer(M, K, B, C)
        fused(o, config)
        a, delta = o["a"].copy(), o["delta"].copy()
        step_way(o, "wgmma", config)
        same = bool(cp.all(a == o["a"]))
        rel = float(cp.abs(delta - o["delta"]).max() / cp.abs(o["delta"]).max())
        good &= same and rel < 1e-5
        emit(check=f"M={M} K={K} B={B} C={C} {config}", a_bits_equal=same, delta_rel=rel, ok=same and rel < 1e-5)
emit(checks_passed=good)
images = half(f32(D, N_IMAGES))
for H in (1024, 2048):
    for B in (3200, 12000):
        for name, K in (("forward GEMM 1", D), ("hidden forward GEMM", H)):
            o = layer(H, K, B, 10, images[:, 2 * B:3 * B] if K == D else None)
            kernels.tune(o["W"], o["x"], o["a"], "wgmma")
            ways = {"cublas + output_layer": lambda: step_way(o, "cublas"),
                    "wgmma tuned + output_layer": lambda: step_way(o, "wgmma")}
            for config in CONFIGS:
                ways[f"{config} logits epilogue + softmax"] = lambda c=config: fused(o, c)
            ways["softmax alone"] = lambda: kernels.softmax_xent_grad(
                o["parts"].reshape(o["groups"] * 10, B), o["b2"], o["y"], o["delta"], B, groups=o["groups"])
            for way, run in ways.items():
                run()
                emit(H=H, B=B, layer=name, way=way, us=1e3 * time_graph_ms(cp, run, calls=5, repeats=15))
