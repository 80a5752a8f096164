"""Time perflab's shipped GEMMs (kernels.gemm, tuned) at the training's two big GEMMs in the storage
orders the trainer uses, beside cuBLAS FP32, cuBLAS TF32 and the cuBLAS-composed 3xTF32: one JSON
line each (CUDA-graph replays, median). python3 experiments/wgmma/product_ab.py [OUTFILE]"""
import json
import sys

import cupy as cp
import numpy as np

sys.path.insert(0, ".")
from perflab import kernels  # noqa: E402
from perflab.kernels.cublas import call_gemm, handle_on_stream  # noqa: E402
from perflab.timing import time_graph_ms  # noqa: E402

rng = np.random.default_rng(0)
out_file = open(sys.argv[1], "a") if len(sys.argv) > 1 else None
for H, B in ((512, 3200), (1024, 3200), (2048, 12000)):
    X = cp.asarray(np.asfortranarray(rng.uniform(-1, 1, (784, B)) + 0.1), np.float32)  # D x B, F-ordered: the trainer's
    W1 = cp.asarray(rng.uniform(-1, 1, (H, 784)) + 0.1, np.float32)
    da1 = cp.asarray(rng.uniform(-1, 1, (H, B)) + 0.1, np.float32)
    for name, a, b in (("fwd1", W1, X), ("bwd3", da1, X.T)):
        M, K, N = a.shape[0], a.shape[1], b.shape[1]
        exact = cp.asnumpy(a).astype(np.float64) @ cp.asnumpy(b).astype(np.float64)
        out = cp.empty((M, N), cp.float32)
        for variant in ("cublas", "cublas-tf32", "cublas-x3tf32", "wgmma", "x3tf32"):
            if variant == "cublas-tf32":
                def call():
                    with handle_on_stream(tf32=True) as (lib, handle):
                        ta, lda = kernels.storage(a, "a")
                        tb, ldb = kernels.storage(b, "b")
                        call_gemm(lib, handle, M, N, K, 1.0, a, ta, lda, b, tb, ldb, 0.0, out)
            else:
                if variant in kernels.TUNABLE_VARIANTS:
                    kernels.tune(a, b, out, variant)

                def call():
                    kernels.gemm(a, b, out=out, variant=variant)
            out.fill(np.nan)
            call()
            err = float(np.linalg.norm(cp.asnumpy(out) - exact) / np.linalg.norm(exact))
            ms = time_graph_ms(cp, call, calls=10, repeats=15)
            row = {"gemm": name, "H": H, "B": B, "variant": variant, "ms": ms, "tflops": 2 * M * N * K / ms / 1e9,
                   "err": err, "choice": str(kernels.TUNED.get((variant, "float", M, N, K, *(kernels.storage(x, n)[0] for x, n in ((a, "a"), (b, "b")))), ""))}
            print(json.dumps(row), flush=True)
            if out_file:
                out_file.write(json.dumps(row) + "\n")
