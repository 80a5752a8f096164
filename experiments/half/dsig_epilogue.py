"""sigmoid' in the input-gradient GEMM's epilogue (session 62, issue 68 item 1): a hidden layer's
dz_l = (W_{l+1}^T dz_{l+1}) o a_l o (1 - a_l) and its row sums db_l, made by perflab's half wgmma GEMM
(half_wgmma_gemm(act=, row_parts=), then sum_row_parts), against the GEMM and sigmoid_backward_rows's pass
as the cuBLAS and wgmma steps make them. First checks the epilogue on odd sizes against float64 and
against the same GEMM with the pass (dz to the bit), then times each way alone (graph replays, device
time) at the trainer's layouts. Usage: python experiments/half/dsig_epilogue.py LABEL (one JSON line a
check, shape and way)"""
import json
import sys

import cupy as cp
import numpy as np

from perflab import kernels
from perflab.kernels import wgmma
from perflab.timing import time_graph_ms

rng = np.random.default_rng(0)
LABEL = sys.argv[1]


def emit(**row):
    print(json.dumps({"version": LABEL, **row}), flush=True)


def operands(k, h, B, store):
    """W_{l+1} (h x k), dz_{l+1} (h x B), a_l (k x B) in half, and the outputs: dz_l, db_l, the partials."""
    half = lambda x: kernels.narrow_copy(cp.asarray(x.astype(np.float32)), cp.empty(x.shape, store))  # noqa: E731
    W = half(rng.uniform(-0.5, 0.5, (h, k)))
    dz_up = half(rng.uniform(-0.5, 0.5, (h, B)))
    act = half(rng.uniform(0.02, 0.98, (k, B)))
    return W, dz_up, act, cp.empty((k, B), store), cp.zeros(k, cp.float32), cp.zeros((wgmma.row_chunks(B), k),
                                                                                     cp.float32)


def widened(x):
    return cp.asnumpy(kernels.widen_copy(x, cp.empty(x.shape, cp.float32))).astype(np.float64)


def check(kind, store, k, h, B, config):
    W, dz_up, act, out, db, parts = operands(k, h, B, store)
    wgmma.half_wgmma_gemm(W.T, dz_up, out, config=config, splits=1, act=act, row_parts=parts)
    wgmma.sum_row_parts(parts, db)
    fused, fused_db = widened(out), cp.asnumpy(db).astype(np.float64)
    ref_out, ref_db = cp.empty_like(out), cp.zeros_like(db)
    wgmma.half_wgmma_gemm(W.T, dz_up, ref_out, config=config, splits=1)
    kernels.sigmoid_backward_rows(ref_out, act, ref_db)
    a = widened(act)
    exact = widened(W).T @ widened(dz_up) * a * (1 - a)
    err = float(np.abs(fused - exact).max() / np.abs(exact).max())
    db_err = float(np.abs(fused_db - exact.sum(1)).max() / np.abs(exact.sum(1)).max())
    same = bool(cp.all(out.view(cp.uint16) == ref_out.view(cp.uint16)))
    db_pass = float(np.abs(fused_db - cp.asnumpy(ref_db)).max() / np.abs(cp.asnumpy(ref_db)).max())
    ok = same and err < 1e-2 and db_err < 5e-3 and db_pass < 1e-5
    emit(check=f"{kind} k={k} h={h} B={B} {config}", dz_bits_equal_pass=same, rel_err_dz=err, rel_err_db=db_err,
         db_vs_pass=db_pass, ok=ok)
    return ok


STAGED = [wgmma.config_name(c) for c in wgmma.CONFIGS["half"] if wgmma.staged(c)]
good = all([check(kind, store, k, h, B, config)
            for kind, store in (("bfloat16", np.uint16), ("float16", np.float16))
            for k, h, B in ((197, 131, 333), (256, 200, 64), (1024, 1024, 3000))
            for config in STAGED])
emit(checks_passed=good)  # the times below are kept either way; a failed check is in the lines above

for H in (1024, 2048):
    for B in (3000, 3200, 12000):
        W, dz_up, act, out, db, parts = operands(H, H, B, np.uint16)
        a = W.T  # the trainer's Wg[l].T: read MN-major in place
        kernels.tune(a, dz_up, out, "wgmma")
        ways = {"cublas + sigmoid_backward_rows": lambda: (kernels.half_gemm(a, dz_up, out, variant="cublas"),
                                                          kernels.sigmoid_backward_rows(out, act, db)),
                "wgmma tuned": lambda: kernels.half_gemm(a, dz_up, out, variant="wgmma"),
                "wgmma tuned + sigmoid_backward_rows": lambda: (kernels.half_gemm(a, dz_up, out, variant="wgmma"),
                                                               kernels.sigmoid_backward_rows(out, act, db)),
                "cublas": lambda: kernels.half_gemm(a, dz_up, out, variant="cublas"),
                "sigmoid_backward_rows": lambda: kernels.sigmoid_backward_rows(out, act, db),
                "sum_row_parts": lambda: wgmma.sum_row_parts(parts, db)}
        for config in STAGED:
            ways[f"wgmma {config}"] = lambda c=config: wgmma.half_wgmma_gemm(a, dz_up, out, config=c, splits=1)
            ways[f"wgmma {config} sigmoid' epilogue"] = lambda c=config: wgmma.half_wgmma_gemm(
                a, dz_up, out, config=c, splits=1, act=act, row_parts=parts)
            ways[f"wgmma {config} sigmoid' epilogue + sum_row_parts"] = lambda c=config: (
                wgmma.half_wgmma_gemm(a, dz_up, out, config=c, splits=1, act=act, row_parts=parts),
                wgmma.sum_row_parts(parts, db))
        for way, run in ways.items():
            run()
            emit(dtype="bfloat16", H=H, B=B, way=way, us=1e3 * time_graph_ms(cp, run, calls=5, repeats=20))
