"""The wgmma GEMMs with their tiles walked N first or M first (wgmma.M_FASTEST), each tuned anew, at the
TF32 GEMMs' FP32-step shapes and the BF16 GEMMs' half-step shapes: device time of graph replays.
Usage: python experiments/half/raster_ab.py > raster_ab.jsonl"""
import json

import cupy as cp
import numpy as np

from perflab import kernels
from perflab.kernels import wgmma
from perflab.measure.gemm_inputs import gemm_operands, gemm_shapes, half_gemm_shapes, weight_gradient
from perflab.timing import time_graph_ms

rng = np.random.default_rng(0)
store = kernels.HALF_STORAGE["bfloat16"]
cases = [("wgmma", s) for s in gemm_shapes((1024, 2048), (3200, 12000)) if s[0].startswith(("fwd1", "bwd3"))]
cases += [("bf16", s) for s in half_gemm_shapes((1024, 2048), (3200, 12000))]
for kind, (name, M, K, N, ta, tb) in cases:
    a, b = gemm_operands(cp, rng, M, K, N, ta, tb)
    if kind == "bf16":
        a, b = (kernels.narrow_copy(x, cp.empty_like(x, dtype=store)) for x in (a, b))
        out = cp.empty((M, N), np.float32 if weight_gradient(name) else store)
        call = lambda: kernels.half_gemm(a, b, out, variant="wgmma")  # noqa: E731
    else:
        out = cp.empty((M, N), np.float32)
        call = lambda: kernels.gemm(a, b, out=out, variant="wgmma")  # noqa: E731
    row = {"kind": kind, "shape": name}
    for m_fastest in (False, True):
        wgmma.M_FASTEST = m_fastest
        wgmma.LAUNCHES.clear()
        kernels.TUNED.clear()
        choice = kernels.tune(a, b, out, "wgmma")
        row[f"ms_{'m' if m_fastest else 'n'}_first"] = time_graph_ms(cp, call, calls=10, repeats=10)
        row[f"config_{'m' if m_fastest else 'n'}_first"] = choice
    row["m_first_speedup"] = row["ms_n_first"] / row["ms_m_first"]
    print(json.dumps(row), flush=True)
