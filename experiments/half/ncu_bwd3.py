"""The first layer's BF16 weight gradient dW1 = dz1 X^T (M = H, K = B, N = 784, both operands K-major, float
out), the half wgmma GEMM's weakest shape: cuBLAS's call and perflab's tuned one at each (H, B), inside an
NVTX range "measure", for Nsight Compute (experiments/half/ncu_bwd3.sh): what kernels, grids and tiles
cuBLAS runs there, and what bounds each.
Usage: python experiments/half/ncu_bwd3.py"""
import cupy as cp
import numpy as np

from perflab import kernels
from perflab.kernels.wgmma import CONFIGS, config_name

store = kernels.HALF_STORAGE["bfloat16"]
rng = np.random.default_rng(0)


def held(shape):
    x = cp.asarray(rng.uniform(-1, 1, shape).astype(np.float32))
    return kernels.narrow_copy(x, cp.empty(shape, store))


cases = []
for H in (512, 1024, 2048):
    for B in (3200, 12000):
        dz, X, out = held((H, B)), held((784, B)), cp.empty((H, 784), np.float32)
        choice = kernels.tune(dz, X.T, out, "wgmma")
        cases.append((H, B, dz, X, out, choice))
        kernels.half_gemm(dz, X.T, out)
cp.cuda.Device().synchronize()
cp.cuda.nvtx.RangePush("measure")
for _, _, dz, X, out, _ in cases:
    kernels.half_gemm(dz, X.T, out, variant="wgmma")
    kernels.half_gemm(dz, X.T, out)
cp.cuda.Device().synchronize()
cp.cuda.nvtx.RangePop()
print("order: for H in 512 1024 2048, B in 3200 12000: perflab (tuned) then cuBLAS;",
      [(H, B, choice) for H, B, *_, choice in cases], [config_name(c) for c in CONFIGS["half"]])
