"""perflab's half-precision wgmma GEMM in each tile config beside cuBLAS's, one call each inside an NVTX
range "measure", for Nsight Compute (experiments/half/ncu_half_gemm.sh): what bounds the kernel at the
half step's biggest GEMM, W a (M = H, K = H, N = B; a N-contiguous).
Usage: python experiments/half/ncu_half_gemm.py [H B]"""
import sys

import cupy as cp
import numpy as np

from perflab import kernels
from perflab.kernels.wgmma import CONFIGS, config_name

H, B = (int(v) for v in sys.argv[1:3]) if len(sys.argv) > 2 else (2048, 12000)
store = kernels.HALF_STORAGE["bfloat16"]
rng = np.random.default_rng(0)


def held(shape):
    x = cp.asarray(rng.uniform(-1, 1, shape).astype(np.float32))
    return kernels.narrow_copy(x, cp.empty(shape, store))


W, a, out = held((H, H)), held((H, B)), cp.empty((H, B), store)
configs = [config_name(c) for c in CONFIGS["half"]]
for config in configs:  # compiled, tensor maps made
    kernels.half_gemm(W, a, out, variant="wgmma", config=config, splits=1)
kernels.half_gemm(W, a, out)
cp.cuda.Device().synchronize()
cp.cuda.nvtx.RangePush("measure")
for config in configs:
    kernels.half_gemm(W, a, out, variant="wgmma", config=config, splits=1)
kernels.half_gemm(W, a, out)
cp.cuda.Device().synchronize()
cp.cuda.nvtx.RangePop()
print("configs in order:", configs, "then cuBLAS")
