"""strip_forward.cu against the product's fused forward (output_forward_half, then softmax_xent_grad's launch), BF16:
first a1, delta and ce compared on odd sizes (the same sigmoid to the bit; delta and ce within FP32 sums' reordering),
then each timed alone (graph replays, device time) at H = 1024, 2048 and B = 3200, 12000.
Usage: python experiments/half/strip_forward.py LABEL (one JSON line a check and shape)"""
import json
import math
import pathlib
import sys

import cupy as cp
import numpy as np

from perflab import kernels
from perflab.kernels.build import KERNEL_DIR
from perflab.timing import time_graph_ms

HERE = pathlib.Path(__file__).parent
MODULE = cp.RawModule(code=(HERE / "strip_forward.cu").read_text(), options=("-std=c++17", f"-I{KERNEL_DIR}"))
STRIP, STRIP_FRAG, FRAGMENTS = (MODULE.get_function(k) for k in ("strip_forward", "strip_forward_frag", "w2_fragments"))
rng = np.random.default_rng(0)
LABEL = sys.argv[1]


def emit(**row):
    print(json.dumps({"version": LABEL, **row}), flush=True)


def operands(C, H, n, valid):
    f32 = lambda *s: cp.asarray(rng.uniform(-0.5, 0.5, s).astype(np.float32))  # noqa: E731
    z1 = kernels.narrow_copy(f32(H, n) * 8, cp.empty((H, n), np.uint16))
    return f32(C, H), f32(H), f32(C), z1, cp.asarray(rng.integers(0, C, valid))


def fragments(W2, frag):
    C, H = W2.shape
    FRAGMENTS((math.ceil(H / 16 / 4),), (128,), (W2, np.int32(C), np.int32(H), frag))


def strip(W2, b1, b2, z1, y, delta, ce, norm, first=0, frag=None):
    (C, H), n = W2.shape, z1.shape[1]
    (STRIP if frag is None else STRIP_FRAG)(
        (math.ceil(n / 16),), (256,), (W2, b1, b2, z1, y, delta, delta if ce is None else ce, np.int32(ce is not None),
                                       np.int32(C), np.int32(H), np.int32(n), np.float32(1 / norm), np.int32(first),
                                       np.int32(y.size), np.uint64(0) if frag is None else frag))


def check(C, H, n, first, valid):
    W2, b1, b2, z1, y = operands(C, H, n, valid)
    ours, theirs = z1.copy(), z1.copy()
    d0, d1 = cp.zeros((C, n), cp.float32), cp.zeros((C, n), cp.float32)
    ce0, ce1 = cp.zeros(n, cp.float32), cp.zeros(n, cp.float32)
    part = cp.zeros(kernels.output_layer_partials(H, n, C), cp.float32)
    kernels.output_layer(W2, b1, b2, theirs, y, d0, valid, part, ce0, first=first)
    frag = cp.zeros(math.ceil(H / 16) * 32 * 8, cp.uint32)
    fragments(W2, frag)
    strip(W2, b1, b2, ours, y, d1, ce1, valid, first, frag)
    same_a1 = bool(cp.all(ours == theirs))
    dd = float(cp.abs(d1 - d0).max() / cp.abs(d0).max())
    dce = float(cp.abs(ce1 - ce0).max() / cp.abs(ce0).max())
    ok = same_a1 and dd < 1e-4 and dce < 1e-4
    emit(check=f"C={C} H={H} n={n} first={first} valid={valid}", a1_bits_equal=same_a1, delta_rel=dd, ce_rel=dce, ok=ok)
    return ok


good = all([check(*args) for args in ((10, 197, 333, 0, 333), (10, 1024, 3200, 0, 3200), (16, 130, 64, 3, 50),
                                       (4, 64, 31, 0, 31), (10, 2048, 1000, 8, 990), (13, 100, 17, 1, 15))])
emit(checks_passed=good)
for H in (1024, 2048):
    for B in (3000, 3200, 12000):
        C = 10
        W2, b1, b2, z1, y = operands(C, H, B, B)
        delta, ce = cp.zeros((C, B), cp.float32), cp.zeros(B, cp.float32)
        part = cp.zeros(kernels.output_layer_partials(H, B, C), cp.float32)
        frag = cp.zeros(math.ceil(H / 16) * 32 * 8, cp.uint32)
        fragments(W2, frag)
        ways = {"output_layer (forward + softmax)": lambda: kernels.output_layer(W2, b1, b2, z1, y, delta, B, part),
                "strip_forward": lambda: strip(W2, b1, b2, z1, y, delta, None, B),
                "strip_forward_frag": lambda: strip(W2, b1, b2, z1, y, delta, None, B, frag=frag),
                "w2_fragments + strip_forward_frag": lambda: (fragments(W2, frag),
                                                              strip(W2, b1, b2, z1, y, delta, None, B, frag=frag))}
        for way, run in ways.items():
            run()
            emit(H=H, B=B, way=way, us=1e3 * time_graph_ms(cp, run, calls=5, repeats=20))
