"""Every wgmma and x3tf32 tile config (clusters of 2 sharing B by TMA multicast, or not) at the
training's two big GEMMs, operands prepared once (as the trainer's images are) so that the kernel
alone is timed: one JSON line each (CUDA-graph replays, median; error against float64).
python3 experiments/wgmma/cluster_ab.py [OUTFILE]"""
import json
import sys

import cupy as cp
import numpy as np

sys.path.insert(0, ".")
from perflab import kernels  # noqa: E402
from perflab.kernels import wgmma  # noqa: E402
from perflab.timing import time_graph_ms  # noqa: E402

rng = np.random.default_rng(0)
out_file = open(sys.argv[1], "a") if len(sys.argv) > 1 else None
for H, B in ((512, 12000), (1024, 3200), (2048, 12000)):
    X = cp.asarray(np.asfortranarray(rng.uniform(-1, 1, (784, B)) + 0.1), np.float32)  # D x B, F-ordered: the trainer's
    W1 = cp.asarray(rng.uniform(-1, 1, (H, 784)) + 0.1, np.float32)
    da1 = cp.asarray(rng.uniform(-1, 1, (H, B)) + 0.1, np.float32)
    for x in (X, W1, da1):
        wgmma.constant(x)
    for name, a, b in (("fwd1", W1, X), ("bwd3", da1, X.T)):
        M, K, N = a.shape[0], a.shape[1], b.shape[1]
        exact = cp.asnumpy(a).astype(np.float64) @ cp.asnumpy(b).astype(np.float64)
        out = cp.empty((M, N), cp.float32)
        for variant in kernels.WGMMA_VARIANTS:
            for config in wgmma.CONFIGS[variant == "x3tf32"]:
                for splits in (1, 2) if name == "bwd3" else (1,):
                    def call():
                        kernels.gemm(a, b, out=out, variant=variant, config=wgmma.config_name(config), blocks=splits)
                    out.fill(np.nan)
                    call()
                    err = float(np.linalg.norm(cp.asnumpy(out) - exact) / np.linalg.norm(exact))
                    ms = time_graph_ms(cp, call, calls=10, repeats=15)
                    row = {"gemm": name, "H": H, "B": B, "variant": variant, "config": wgmma.config_name(config),
                           "splits": splits, "ms": ms, "tflops": 2 * M * N * K / ms / 1e9, "err": err}
                    print(json.dumps(row), flush=True)
                    if out_file:
                        out_file.write(json.dumps(row) + "\n")
    for x in (X, W1, da1):
        wgmma.forget(x)
    wgmma.release()
