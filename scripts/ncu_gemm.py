"""One call each of perflab's `best` GEMM (tuned first) and cuBLAS at the shapes issue #11 is
judged on (or the shapes named on the command line), inside an NVTX range "measure", for Nsight
Compute (scripts/ncu_gemm.sh, scripts/ncu_sass.sh): why `best` trails cuBLAS, kernel by kernel."""
import sys

import numpy as np

from perflab.measure.gemm_inputs import gemm_operands, gemm_shapes, named_gemm_shapes

SHAPES = named_gemm_shapes(sys.argv[1:] or ("fwd1 H=512 B=3200", "bwd3 H=512 B=12000", "fwd1 H=2048 B=12000",
                                             "bwd3 H=2048 B=12000"))  # before anything needs a GPU

import cupy as cp  # noqa: E402

from perflab import kernels  # noqa: E402

rng = np.random.default_rng(0)
for name, M, K, N, ta, tb in gemm_shapes():
    if name not in SHAPES:
        continue
    a, b = gemm_operands(cp, rng, M, K, N, ta, tb)
    out, work = cp.empty((M, N), "float32"), kernels.workspace(M, N, "float32")
    print(name, "best config, blocks:", kernels.tune(a, b, out, "best", work))
    kernels.gemm(a, b, out=out, variant="cublas")
    cp.cuda.Device().synchronize()
    cp.cuda.nvtx.RangePush("measure")
    kernels.gemm(a, b, out=out, variant="best", work=work)
    kernels.gemm(a, b, out=out, variant="cublas")
    cp.cuda.Device().synchronize()
    cp.cuda.nvtx.RangePop()
