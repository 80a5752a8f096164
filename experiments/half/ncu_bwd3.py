"""The first layer's BF16 weight gradient dW1 = dz1 X^T (M = H, K = B, N = 784, both operands K-major, float
out), the half wgmma GEMM's weakest shape, at each (H, B), in two passes (experiments/half/ncu_bwd3.sh):

  python ncu_bwd3.py --times TIMES.jsonl CHOICES.json   without a profiler: every (config, splits) the tuner
      tries, and cuBLAS, timed (graph replays, median) a line each; the fastest choice a shape into CHOICES.json
  python ncu_bwd3.py --profile CHOICES.json [H,B]      under Nsight Compute: at each shape (or at H,B alone)
      perflab's fastest choice, the 128 x 112 tile in clusters of 2 (cuBLAS's tile and grid there), then cuBLAS,
      inside an NVTX range "measure"

Session 52 ran the profile with the tuner inside ncu, whose picks then differed at every shape from a run without
it (logs/ncu_bwd3_h200.txt): hence the choices are made first, outside the profiler."""
import json
import sys

import cupy as cp
import numpy as np

from perflab import kernels
from perflab.kernels.wgmma import choices
from perflab.timing import time_graph_ms

SHAPES = [(H, B) for H in (512, 1024, 2048) for B in (3200, 12000)]
CUBLAS_TILE = ("wg2-n112-s6-c2", 1)  # 128 x 112 in clusters of 2: cuBLAS's tile and grid at dW1 (H >= 1024)
rng = np.random.default_rng(0)


def held(shape):
    x = cp.asarray(rng.uniform(-1, 1, shape).astype(np.float32))
    return kernels.narrow_copy(x, cp.empty(shape, kernels.HALF_STORAGE["bfloat16"]))


def operands(H, B):
    return held((H, B)), held((784, B)), cp.empty((H, 784), np.float32)


def times(lines_path, choices_path):
    best = {}
    with open(lines_path, "w") as lines:
        for H, B in SHAPES:
            dz, X, out = operands(H, B)
            cublas = time_graph_ms(cp, lambda: kernels.half_gemm(dz, X.T, out), calls=5, repeats=20)
            for config, splits in choices(H, 784, B, "half"):
                ms = time_graph_ms(cp, lambda: kernels.half_gemm(dz, X.T, out, variant="wgmma", config=config,
                                                                 splits=splits), calls=5, repeats=20)
                lines.write(json.dumps({"H": H, "B": B, "config": config, "splits": splits, "ms": ms,
                                        "cublas_ms": cublas, "of_cublas": cublas / ms}) + "\n")
                if ms < best.get(f"{H},{B}", (None, None, np.inf))[2]:
                    best[f"{H},{B}"] = (config, splits, ms)
    json.dump(best, open(choices_path, "w"), indent=1)


def profile(choices_path, only=None):
    best = json.load(open(choices_path))
    if only and only not in best:
        sys.exit(f"ncu_bwd3.py --profile: no shape {only!r} in {choices_path}; the shapes are {', '.join(best)}")
    shapes = [tuple(map(int, only.split(",")))] if only else SHAPES
    cases = [(operands(H, B), best[f"{H},{B}"][:2]) for H, B in shapes]
    for (dz, X, out), (config, splits) in cases:  # compiled and warm before the range
        for c, s in ((config, splits), CUBLAS_TILE):
            kernels.half_gemm(dz, X.T, out, variant="wgmma", config=c, splits=s)
        kernels.half_gemm(dz, X.T, out)
    cp.cuda.Device().synchronize()
    cp.cuda.nvtx.RangePush("measure")
    for (dz, X, out), (config, splits) in cases:
        for c, s in ((config, splits), CUBLAS_TILE):
            kernels.half_gemm(dz, X.T, out, variant="wgmma", config=c, splits=s)
        kernels.half_gemm(dz, X.T, out)
    cp.cuda.Device().synchronize()
    cp.cuda.nvtx.RangePop()
    print("order: at each (H, B) of", shapes, "perflab's fastest choice, then", CUBLAS_TILE, "then cuBLAS;",
          {k: v[:2] for k, v in best.items()})


if __name__ == "__main__":
    if sys.argv[1:2] == ["--times"] and len(sys.argv) == 4:
        times(sys.argv[2], sys.argv[3])
    elif sys.argv[1:2] == ["--profile"] and len(sys.argv) in (3, 4):
        profile(*sys.argv[2:])
    else:
        sys.exit(__doc__)
