"""The tuning loop behind kernels.TILE_CONFIGS (one GPU): time every committed `best` config and
the candidates given, at every number of blocks tune() tries (a tile a block, split-K,
stream-K), at the forward and backward shapes with H x 784 in them, beside cuBLAS (CUDA-graph
replays, so no launch overhead), each checked against the float64 product. Prints the fastest
per shape and the geometric mean with and without the candidates; writes $OUT/gemm_sweep.csv
(and .json, the machine's metadata).
Usage: OUT=/tmp/out python3 scripts/gemm_sweep.py "(128,128,16,32,64,8,8,2,0,2)" ...
(a config: BM, BN, BK, WM, WN, TM, TN, STAGES, KV, MINB; KV = 0 stores k-contiguous tiles transposed)"""
import ast
import math
import os
import sys

import numpy as np

from perflab import kernels
from perflab.measure.gemm_inputs import gemm_operands, gemm_shapes
from perflab.results import machine_metadata, write_rows
from perflab.timing import time_graph_ms


def config(text: str) -> tuple:
    """A candidate from the command line, or exit naming what is wrong with it."""
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        value = None
    if not (isinstance(value, tuple) and len(value) == 10 and all(isinstance(v, int) and v >= 0 for v in value)):
        raise SystemExit(f"a config is 10 non-negative integers (BM, BN, BK, WM, WN, TM, TN, STAGES, KV, MINB), "
                         f"got {text!r}")
    return value


def main(candidates):
    import cupy as cp  # after the arguments are read: a bad one is named without a GPU
    committed = list(kernels.tile_configs("best", "float"))
    kernels.TILE_CONFIGS[("best", "float")] = kernels.TILE_CONFIGS[("best", "float")] + candidates
    kernels.tile_configs.cache_clear()
    rng = np.random.default_rng(0)
    rows = []
    for name, M, K, N, ta, tb in gemm_shapes():
        if not name.startswith(("fwd1", "bwd3")):
            continue
        a, b = gemm_operands(cp, rng, M, K, N, ta, tb)
        out, work = cp.empty((M, N), "float32"), kernels.workspace(M, N, "float32")
        ref = a.astype("float64") @ b.astype("float64")
        t_cublas = time_graph_ms(cp, lambda: kernels.gemm(a, b, out=out, variant="cublas"))
        for cfg, blocks in kernels.tile_choices("best", "float", M, N, K, work, kernels.multiprocessors()):
            out.fill(np.nan)
            run = lambda: kernels.gemm(a, b, out=out, variant="best", config=cfg, blocks=blocks, work=work)  # noqa: E731
            run()
            err = float(cp.abs(out - ref).max() / cp.abs(ref).max())
            t = time_graph_ms(cp, run)
            rows.append(dict(shape=name, config=cfg, blocks=blocks,
                             schedule=kernels.schedule_name("best", "float", cfg, M, N, K, blocks), ms=t,
                             tflops=2 * M * N * K / t / 1e9, pct_cublas=100 * t_cublas / t, max_rel_error=err,
                             committed=cfg in committed))
        best = max((r for r in rows if r["shape"] == name), key=lambda r: r["pct_cublas"])
        print(f"{name}: {best['pct_cublas']:.1f}% of cuBLAS, {best['config']} {best['schedule']}", flush=True)
    for label, keep in (("committed configs", lambda r: r["committed"]), ("with the candidates", lambda r: True)):
        per = {}
        for r in filter(keep, rows):
            per[r["shape"]] = max(per.get(r["shape"], 0), r["pct_cublas"])
        mean = math.exp(sum(map(math.log, per.values())) / len(per))
        print(f"{label}: geometric mean {mean:.1f}% of cuBLAS, worst {min(per.values()):.1f}% ({min(per, key=per.get)})")
    meta = {**machine_metadata(), "candidates": [list(c) for c in candidates], "splits": list(kernels.SPLITS),
            "stream_k_blocks_per_sm": list(kernels.STREAM_K_BLOCKS_PER_SM)}
    write_rows(os.path.join(os.environ.get("OUT", "."), "gemm_sweep.csv"), rows, meta, append=False)


if __name__ == "__main__":
    main([config(c) for c in sys.argv[1:]])
