"""Do the ceilings undercharge the GEMMs that read the images? `perflab ceilings` times forward GEMM 1
and backward GEMM 3 on one batch of images replayed (hot in L2); the trainer walks the epoch, each
batch's images (and, for x3tf32, their kept big and small parts) read from HBM once an epoch. Each
GEMM as the ceilings time it, then with each call of the replayed graph on the next batch of a
60000-sample epoch: one JSON line each. python3 experiments/predictor/l2_images.py [OUTFILE]"""
import json
import sys

import cupy as cp
import numpy as np

sys.path.insert(0, ".")
from perflab import kernels  # noqa: E402
from perflab.kernels import wgmma  # noqa: E402
from perflab.timing import time_graph_ms  # noqa: E402

N, D = 60000, 784
rng = np.random.default_rng(0)
out_file = open(sys.argv[1], "a") if len(sys.argv) > 1 else None
X = cp.asfortranarray(cp.asarray(rng.uniform(0.05, 0.95, (D, N)), cp.float32))  # the trainer's images, D x N
wgmma.constant(X)
for H, B in ((768, 6000), (1536, 2000)):
    W1 = cp.asarray(rng.uniform(-1, 1, (H, D)), cp.float32)
    a1, da1, da1_small = (cp.asarray(rng.uniform(-1, 1, (H, B)), cp.float32) for _ in range(3))
    dW1 = cp.empty((H, D), cp.float32)
    batches = N // B
    for variant in ("cublas", "wgmma", "x3tf32"):
        small = da1_small if variant == "x3tf32" else None
        gemms = {"forward GEMM 1": lambda Xb: kernels.gemm(W1, Xb, out=a1, variant=variant),
                 "backward GEMM 3": lambda Xb: kernels.gemm(da1, Xb.T, out=dW1, variant=variant, a_small=small)}
        if variant != "cublas":
            kernels.tune(W1, X[:, :B], a1, variant)
            kernels.tune(da1, X[:, :B].T, dW1, variant)
        for name, gemm in gemms.items():
            state = {"j": 0}

            def rotating():
                j = state["j"] % batches
                state["j"] += 1
                gemm(X[:, j * B:(j + 1) * B])
            hot = time_graph_ms(cp, lambda: gemm(X[:, :B]), calls=batches, repeats=15)
            cold = time_graph_ms(cp, rotating, calls=batches, repeats=15)
            row = {"H": H, "B": B, "variant": variant, "kernel": name, "hot_ms": hot, "epoch_walk_ms": cold,
                   "ratio": cold / hot}
            print(json.dumps(row), flush=True)
            if out_file:
                out_file.write(json.dumps(row) + "\n")
