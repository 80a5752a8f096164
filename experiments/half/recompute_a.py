"""The half step's fused output layer without a1 stored (session 62, issue 68 item 1): the forward pass leaves z1 as it
is (output_layer(store_a1=False)) and the backward pass takes sigmoid(z1 + b1) as it loads z1
(output_backward(b1=)), the values the forward would have stored, so that every result is the same to the bit, against
the step's way (a1 stored over z1, the backward reading it). Checked on odd sizes, then each pass timed alone (graph
replays, device time) at H = 1024, 2048 and B = 3000, 3200, 12000. Usage: python experiments/half/recompute_a.py LABEL"""
import json
import sys

import cupy as cp
import numpy as np

from perflab import kernels
from perflab.timing import time_graph_ms

rng = np.random.default_rng(0)
LABEL = sys.argv[1]


def emit(**row):
    print(json.dumps({"version": LABEL, **row}), flush=True)


def setup(C, H, B, store):
    f32 = lambda *s: cp.asarray(rng.uniform(-0.5, 0.5, s).astype(np.float32))  # noqa: E731
    o = {"W2": f32(C, H), "b1": f32(H), "b2": f32(C), "z1": kernels.narrow_copy(f32(H, B) * 8, cp.empty((H, B), store)),
         "y": cp.asarray(rng.integers(0, C, B)), "delta": cp.zeros((C, B), cp.float32)}
    o["dz1"], o["dW2"], o["db1"], o["db2"] = cp.empty_like(o["z1"]), f32(C, H), f32(H), f32(C)
    o["fwd"] = cp.zeros(kernels.output_layer_partials(H, B, C), np.float32)
    o["bwd"] = cp.zeros(kernels.output_backward_partials(H, B, C), np.float32)
    return o


def forward(o, z1, store_a1=True):
    kernels.output_layer(o["W2"], o["b1"], o["b2"], z1, o["y"], o["delta"], z1.shape[1], o["fwd"], store_a1=store_a1)


def backward(o, a1, recompute=False):
    kernels.output_backward(o["W2"], o["delta"], a1, o["dz1"], o["dW2"], o["db1"], o["bwd"], db2=o["db2"],
                            b1=o["b1"] if recompute else None)


def check(kind, store, C, H, B):
    o = setup(C, H, B, store)
    z, a = o["z1"].copy(), o["z1"].copy()
    forward(o, a)
    backward(o, a)
    want = [x.copy() for x in (o["delta"], o["dz1"], o["dW2"], o["db1"], o["db2"])]
    forward(o, z, store_a1=False)
    backward(o, z, recompute=True)
    same = [bool(cp.all(x == w)) for x, w in zip((o["delta"], o["dz1"], o["dW2"], o["db1"], o["db2"]), want)]
    unchanged = bool(cp.all(z == o["z1"]))
    emit(check=f"{kind} C={C} H={H} B={B}", same_delta_dz1_dW2_db1_db2=same, z1_left=unchanged, ok=all(same) and unchanged)
    return all(same) and unchanged


good = all([check(kind, store, *shape) for kind, store in (("bfloat16", np.uint16), ("float16", np.float16))
            for shape in ((10, 197, 333), (16, 130, 64), (10, 1024, 3200), (4, 2048, 1000))])
emit(checks_passed=good)
for kind, store in (("bfloat16", np.uint16), ("float16", np.float16)):
    for H in (1024, 2048):
        for B in (3000, 3200, 12000):
            o = setup(10, H, B, store)
            z1 = o["z1"]
            ways = {"forward, a1 stored": lambda: forward(o, z1),
                    "forward, a1 not stored": lambda: forward(o, z1, store_a1=False),
                    "backward, a1 read": lambda: backward(o, z1),
                    "backward, a1 from z1": lambda: backward(o, z1, recompute=True)}
            for way, run in ways.items():
                run()
                emit(dtype=kind, H=H, B=B, way=way, us=1e3 * time_graph_ms(cp, run, calls=5, repeats=20))
