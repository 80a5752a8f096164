"""Where a half-precision step's time goes beyond its GEMMs: each kernel of the fused bf16 step timed alone
(cupyx.profiler.benchmark, device time, median) at one net and batch, with the bytes it moves and the rate.
Usage: python experiments/half/step_kernels.py H[-H2...] B [dtype]"""
import json
import sys

import cupy as cp
import numpy as np
from cupyx.profiler import benchmark

from perflab import kernels
from perflab.config import Config
from perflab.timing import time_graph_ms
from perflab.train.comm import Serial
from perflab.train.gpu import FusedGPU

hidden = tuple(int(h) for h in sys.argv[1].split("-"))
B, kind = int(sys.argv[2]), (sys.argv[3] if len(sys.argv) > 3 else "bfloat16")
N = 4 * B
rng = np.random.default_rng(0)
X = np.asfortranarray(rng.random((784, N), dtype=np.float32))
y = rng.integers(0, 10, N)
cfg = Config(dataset="synthetic", input_size=784, hidden_sizes=hidden, num_classes=10, train_size=N, batch_size=B,
             learning_rate=0.1, reg=1e-4, dtype=kind, test_size=0)
t = FusedGPU(cfg, X, y, Serial())
t.want_loss = False
t.batch(slice(0, B))
t.sync()
W, b, dW, db = t.params[0::2], t.params[1::2], t.grads[0::2], t.grads[1::2]
Wh = t.half.params[0::2] if t.half else W
H = hidden[-1]
Xb, yb = t.X[:, :B], t.y[:B]
a1 = t.acts[-1][:H * B].reshape(H, B)
dz = t.dz[-1][:H * B].reshape(H, B)
delta = t.delta[:10 * B].reshape(10, B)
item = a1.itemsize


def step():
    t.batch(slice(0, B))


def ms(fn):
    """A kernel's device time from graph replays (no host launch in it); the whole step (a graph itself)
    between events on the trainer's stream."""
    if fn is step:
        with t.stream:
            return float(np.median(benchmark(fn, n_repeat=50, n_warmup=5).gpu_times[0])) * 1e3
    return time_graph_ms(cp, fn, calls=5, repeats=10)


rows = []


def add(name, fn, nbytes):
    m = ms(fn)
    rows.append({"kernel": name, "ms": m, "MB": nbytes / 1e6, "GB/s": nbytes / m / 1e6})


add("gemm fwd 1", lambda: t.gemm(Wh[0], Xb, t.acts[0][:hidden[0] * B].reshape(hidden[0], B)), 0)
add("output_layer", lambda: kernels.output_layer(W[-1], b[-2], b[-1], a1, yb, delta, B, t.part_forward), 2 * H * B * item)
groups = -(-H // kernels.FW_ROWS)
part = t.part_forward[:groups * 10 * B].reshape(groups * 10, B)
add("  of which the softmax", lambda: kernels.softmax_xent_grad(part, b[-1], yb, delta, B, groups=groups),
    (groups + 2) * 10 * B * 4)
add("output_backward", lambda: kernels.output_backward(W[-1], delta, a1, dz, dW[-1], db[-2], t.part), 2 * H * B * item)
if len(hidden) > 1:
    a0 = t.acts[0][:hidden[0] * B].reshape(hidden[0], B)
    add("bias_sigmoid", lambda: kernels.bias_sigmoid(a0, b[0]), 2 * hidden[0] * B * item)
    d0 = t.dz[0][:hidden[0] * B].reshape(hidden[0], B)
    add("sigmoid_backward_rows", lambda: kernels.sigmoid_backward_rows(d0, a0, db[0]), 3 * hidden[0] * B * item)
add("gemm dW1", lambda: t.gemm(t.dz[0][:hidden[0] * B].reshape(hidden[0], B), Xb.T, dW[0]), 0)
rounded = t.half.P_half if t.half else None  # the update rounds P for the next step's GEMMs (no copy of P at its start)
add("sgd_update", lambda: kernels.sgd_update(t.P, t.G[:-1], 0.1, t.ends, t.regs, rounded=rounded),
    t.P.size * (12 + (2 if t.half else 0)))
add("whole step (graph)", step, 0)
print(json.dumps({"hidden": hidden, "B": B, "dtype": kind, "rows": rows}))
for r in rows:
    print(f"{r['kernel']:24s} {r['ms'] * 1e3:8.1f} us  {r['MB']:8.1f} MB  {r['GB/s']:8.0f} GB/s")
