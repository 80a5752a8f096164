"""Age-skewed stream-K (diag/ab/v14.cu): for each shape and config, the persistent grids of 2-4 blocks
an SM at skews of 0-6% (older blocks, c / 132, take more K steps), beside cuBLAS, each checked
against the float64 product; writes $OUT/skew.csv. Usage: SHAPES=... CONFIG=... python3 diag/ab/skew.py"""
import os

import cupy as cp
import numpy as np

from perflab import kernels
from perflab.measure.gemm_inputs import gemm_operands, gemm_shapes
from perflab.results import machine_metadata, write_rows
from perflab.timing import time_graph_ms

kernels.source_file = lambda v: "../../diag/ab/v14.cu" if v in kernels.TILED_VARIANTS else f"gemm_{v}.cu"
shapes = os.environ.get("SHAPES", "bwd3 H=1024 B=12000,bwd3 H=512 B=12000,bwd3 H=2048 B=12000").split(",")
configs = os.environ.get("CONFIG", "128x64x16_w64x32_t8x8_s3_xt_b3").split(",")
skews = [int(x) for x in os.environ.get("SKEWS", "0,10,20,30,40,60").split(",")]
sms = kernels.multiprocessors()
assert sms == 132, "v14 hard-codes 132 SMs"
rng = np.random.default_rng(0)
rows = []
for name, M, K, N, ta, tb in gemm_shapes():
    if name not in shapes:
        continue
    a, b = gemm_operands(cp, rng, M, K, N, ta, tb)
    out, work = cp.empty((M, N), "float32"), kernels.workspace(M, N, "float32")
    ref = a.astype("float64") @ b.astype("float64")
    t_cublas = time_graph_ms(cp, lambda: kernels.gemm(a, b, out=out, variant="cublas"))
    for cfg in configs:
        mod = kernels.module(kernels.source_file("best"), kernels.gemm_names("best", "float", cfg))
        skew = cp.ndarray((1,), cp.int32, memptr=mod.get_global("perflab_skew_permille"))
        for blocks in (2 * sms, 3 * sms, 4 * sms):
            for pm in skews:
                skew.fill(pm)
                out.fill(np.nan)
                run = lambda: kernels.gemm(a, b, out=out, variant="best", config=cfg, blocks=blocks, work=work)  # noqa
                run()
                err = float(cp.abs(out - ref).max() / cp.abs(ref).max())
                t = time_graph_ms(cp, run)
                rows.append(dict(shape=name, config=cfg, blocks=blocks, skew_permille=pm, ms=t, cublas_ms=t_cublas,
                                 pct_cublas=100 * t_cublas / t, max_rel_error=err))
                print(f"{name} {cfg} {blocks} skew {pm}: {100 * t_cublas / t:.1f}% err {err:.1e}", flush=True)
    write_rows(os.path.join(os.environ.get("OUT", "."), "skew.csv"), rows, machine_metadata(), append=False)
