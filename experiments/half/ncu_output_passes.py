"""One call of each fused output-layer pass in half precision, for Nsight Compute (ncu_output_passes.sh): what holds
the passes at a step's batch (issue 68, item 1). Usage: python experiments/half/ncu_output_passes.py [H B dtype]"""
import sys

import cupy as cp
import numpy as np

from perflab import kernels

H, B = (int(a) for a in sys.argv[1:3]) if len(sys.argv) > 2 else (1024, 3200)
kind = sys.argv[3] if len(sys.argv) > 3 else "bfloat16"
store, C = kernels.HALF_STORAGE[kind], 10
rng = np.random.default_rng(0)
f32 = lambda *s: cp.asarray(rng.uniform(-0.5, 0.5, s).astype(np.float32))  # noqa: E731
W2, b1, b2, dW2, db1, delta = f32(C, H), f32(H), f32(C), f32(C, H), f32(H), f32(C, B)
z1 = kernels.narrow_copy(f32(H, B), cp.empty((H, B), store))
dz1, y = cp.empty_like(z1), cp.asarray(rng.integers(0, C, B))
fwd = cp.zeros(kernels.output_layer_partials(H, B, C), np.float32)
bwd = cp.zeros(kernels.output_backward_partials(H, B, C), np.float32)
kernels.output_layer(W2, b1, b2, z1, y, delta, B, fwd)
kernels.output_backward(W2, delta, z1, dz1, dW2, db1, bwd)
cp.cuda.Device().synchronize()
