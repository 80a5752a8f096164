"""sigmoid' in the input-gradient GEMM's epilogue on ping-pong tiles (session 62, issue 68 item 1): dsig_epilogue.patch
and ping_pong.patch applied together (the epilogue's loads chunk by chunk, as dsig_epilogue.py's first form). Checked
against the same GEMM followed by sigmoid_backward_rows (dz to the bit) at two sizes, then timed alone (graph replays,
device time) at H = 1024, 2048 and B = 3200, 12000 beside cuBLAS + the pass and the cooperative n256-s4.
Usage: python experiments/half/dsig_ping_pong.py LABEL"""
import json
import sys

import cupy as cp
import numpy as np

from perflab import kernels
from perflab.kernels import wgmma
from perflab.timing import time_graph_ms

rng = np.random.default_rng(0)
CONFIGS = ("wg2-n256-s4", "wg2-n256-s5-c2-pp", "wg2-n128-s8-c2-pp")


def emit(**row):
    print(json.dumps({"version": sys.argv[1], **row}), flush=True)


def operands(k, h, B):
    half = lambda x: kernels.narrow_copy(cp.asarray(x.astype(np.float32)), cp.empty(x.shape, np.uint16))  # noqa: E731
    return (half(rng.uniform(-0.5, 0.5, (h, k))), half(rng.uniform(-0.5, 0.5, (h, B))),
            half(rng.uniform(0.02, 0.98, (k, B))), cp.empty((k, B), np.uint16), cp.zeros(k, cp.float32),
            cp.zeros((wgmma.row_chunks(B), k), cp.float32))


for k, h, B in ((197, 131, 333), (1024, 1024, 3000)):
    for config in CONFIGS[1:]:
        W, dz_up, act, out, db, parts = operands(k, h, B)
        wgmma.half_wgmma_gemm(W.T, dz_up, out, config=config, splits=1, act=act, row_parts=parts)
        wgmma.sum_row_parts(parts, db)
        ref, ref_db = cp.empty_like(out), cp.zeros_like(db)
        wgmma.half_wgmma_gemm(W.T, dz_up, ref, config=config, splits=1)
        kernels.sigmoid_backward_rows(ref, act, ref_db)
        same = bool(cp.all(out == ref))
        db_rel = float(cp.abs(db - ref_db).max() / cp.abs(ref_db).max())
        emit(check=f"k={k} h={h} B={B} {config}", dz_bits_equal_pass=same, db_vs_pass=db_rel, ok=same and db_rel < 1e-5)
for H in (1024, 2048):
    for B in (3200, 12000):
        W, dz_up, act, out, db, parts = operands(H, H, B)
        a = W.T
        ways = {"cublas + sigmoid_backward_rows": lambda: (kernels.half_gemm(a, dz_up, out, variant="cublas"),
                                                          kernels.sigmoid_backward_rows(out, act, db)),
                "sum_row_parts": lambda: wgmma.sum_row_parts(parts, db)}
        for config in CONFIGS:
            ways[config] = lambda c=config: wgmma.half_wgmma_gemm(a, dz_up, out, config=c, splits=1)
            ways[config + " sigmoid' epilogue"] = lambda c=config: wgmma.half_wgmma_gemm(
                a, dz_up, out, config=c, splits=1, act=act, row_parts=parts)
        for way, run in ways.items():
            run()
            emit(H=H, B=B, way=way, us=1e3 * time_graph_ms(cp, run, calls=5, repeats=15))
