"""A/B of gemm_best.cu variants in one process: for each variant (diag/ab/<name>.cu) every
(config, blocks) tune() tries at the 18 H x 784 shapes, beside cuBLAS; writes $OUT/ab.csv."""
import math
import os
import sys

import cupy as cp
import numpy as np

from perflab import kernels
from perflab.measure.gemm_inputs import gemm_shapes
from perflab.results import machine_metadata, write_rows
from perflab.timing import time_graph_ms

kernels.tiles.SPLITS = (1, 2, 3, 4, 5, 6, 7, 8)
# EXTRA_CONFIGS="64,64,16,32,32,8,4,3,0,5;...": candidate tile configs beside TILE_CONFIGS
if os.environ.get("EXTRA_CONFIGS"):
    kernels.TILE_CONFIGS[("best", "float")] = kernels.TILE_CONFIGS[("best", "float")] + [
        tuple(map(int, c.split(","))) for c in os.environ["EXTRA_CONFIGS"].split(";")]
    kernels.tile_configs.cache_clear()

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pdl_launch


def use(variant):
    f = f"../../diag/ab/{variant}.cu"
    kernels.dispatch.source_file = lambda v: f if v in kernels.TILED_VARIANTS else f"gemm_{v}.cu"
    # PDL="pdl,pdl2": these variants launch with programmatic dependent launch
    pdl_launch.install(kernels, variant in os.environ.get("PDL", "").split(","))
    kernels.module.cache_clear(); kernels._plain_gemm_function.cache_clear()

variants = sys.argv[1:]
only = os.environ.get("SHAPES")
rng = np.random.default_rng(0)
rows = []
data = {}
for name, M, K, N, ta, tb in gemm_shapes():
    if not name.startswith(("fwd1", "bwd3")) or (only and name not in only.split(",")):
        continue
    if os.environ.get("FWD1_NN") and name.startswith("fwd1"):  # X stored 784 x N: fwd1's b n-contiguous
        tb, name = False, name + " nn"
    a = cp.asarray(rng.uniform(-1, 1, (K, M) if ta else (M, K)).astype("float32"))
    b = cp.asarray(rng.uniform(-1, 1, (N, K) if tb else (K, N)).astype("float32"))
    data[name] = (M, K, N, a.T if ta else a, b.T if tb else b)
for variant in variants:
    use(variant)
    per = {}
    for name, (M, K, N, a, b) in data.items():
        out, work = cp.empty((M, N), "float32"), kernels.workspace(M, N, "float32")
        ref = a.astype("float64") @ b.astype("float64")
        t_cublas = time_graph_ms(cp, lambda: kernels.gemm(a, b, out=out, variant="cublas"))
        for cfg, blocks in kernels.tile_choices("best", "float", M, N, K, work, kernels.multiprocessors()):
            if os.environ.get("CONFIG") and cfg not in os.environ["CONFIG"].split(","):
                continue
            out.fill(np.nan)
            run = lambda: kernels.gemm(a, b, out=out, variant="best", config=cfg, blocks=blocks, work=work)  # noqa
            run()
            err = float(cp.abs(out - ref).max() / cp.abs(ref).max())
            t = time_graph_ms(cp, run)
            rows.append(dict(variant=variant, shape=name, config=cfg, blocks=blocks,
                             schedule=kernels.schedule_name("best", "float", cfg, M, N, K, blocks), ms=t,
                             cublas_ms=t_cublas, pct_cublas=100 * t_cublas / t, max_rel_error=err))
            if err > 1e-5 or not np.isfinite(err):
                print(f"!! {variant} {name} {cfg} {blocks}: error {err}", flush=True)
        best = max((r for r in rows if r["shape"] == name and r["variant"] == variant), key=lambda r: r["pct_cublas"])
        per[name] = best["pct_cublas"]
        print(f"{variant} {name}: {best['pct_cublas']:.1f}% {best['config']} {best['schedule']}", flush=True)
    mean = math.exp(sum(map(math.log, per.values())) / len(per))
    print(f"== {variant}: geomean {mean:.1f}%, worst {min(per.values()):.1f}% ({min(per, key=per.get)})", flush=True)
    write_rows(os.path.join(os.environ.get("OUT", "."), "ab.csv"), rows, {**machine_metadata(), "variants": variants},
               append=False)
