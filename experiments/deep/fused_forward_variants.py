"""Issue 52, FP32 deeper nets: the fused forward pass (bias + sigmoid of the last hidden layer, the output
layer's GEMM, its row blocks' partial sums) and delta's row sums (db of the output layer), before and after
a lane's columns widened (output_forward: FW_BYTES) and four loads in flight a thread in 1024-thread blocks
(row_sum).

Each kernel alone, from `before` (elementwise_before.cu, not committed: make it with
`git show 91249e1:perflab/kernels/elementwise.cu > experiments/deep/elementwise_before.cu`) and the current elementwise.cu with FW_BYTES and FW_UNROLL set in its text, compiled as perflab
compiles them (NVRTC), timed by CUDA-graph replays (device time), median of 20.
Usage: python3 experiments/deep/fused_forward_variants.py OUT.jsonl
"""
from __future__ import annotations

import json
import math
import pathlib
import re
import sys

import cupy as cp
import numpy as np

from perflab.kernels import KERNEL_DIR
from perflab.results import machine_metadata
from perflab.timing import time_graph_ms

HERE = pathlib.Path(__file__).parent
SHAPES = [(1024, 12000), (2048, 12000), (1024, 3200), (512, 3200), (1024, 4097)]
C = 10
VARIANTS = [(lane, unroll) for lane in (4, 8, 16) for unroll in (8, 16)]  # (FW_BYTES, FW_UNROLL)


def module(source: str, T: str):
    names = [f"output_forward<{T},10>", f"row_sum<{T}>"]
    mod = cp.RawModule(code=source, options=("-std=c++17", f"-I{KERNEL_DIR}"), name_expressions=names)
    return [mod.get_function(n) for n in names]


def sources():
    now = (KERNEL_DIR / "elementwise.cu").read_text()
    before = HERE / "elementwise_before.cu"
    if not before.exists():
        sys.exit(f"{before} is missing: git show 91249e1:perflab/kernels/elementwise.cu > {before}")
    yield "before", before.read_text(), 4
    for lane, unroll in VARIANTS:
        source = re.sub(r"#define FW_UNROLL \d+", f"#define FW_UNROLL {unroll}", now)
        yield f"{lane}B unroll {unroll}", re.sub(r"#define FW_BYTES \d+", f"#define FW_BYTES {lane}", source), lane


def main(out: str):
    rows = []
    for T, dtype in (("float", np.float32), ("double", np.float64)):
        for name, source, lane in sources():
            forward, row_sum = module(source, T)
            for H, n in SHAPES if T == "float" else SHAPES[:1]:
                rng = cp.random.default_rng(0)
                W2, b1 = rng.random((C, H), dtype=dtype), rng.random(H, dtype=dtype)
                z1 = rng.random((H, n), dtype=dtype)
                part = cp.empty(math.ceil(H / 128) * C * n, dtype)
                delta, db = rng.random((C, n), dtype=dtype), cp.empty(C, dtype)
                columns = 32 * max(1, lane // np.dtype(dtype).itemsize)
                args = (W2, b1, z1, part, np.int32(C), np.int32(H), np.int32(n))
                fwd = time_graph_ms(cp, lambda: forward((math.ceil(n / columns), math.ceil(H / 128)), (256,), args),
                                    calls=10, repeats=20)
                threads = 256 if name == "before" else 1024
                rs = time_graph_ms(cp, lambda: row_sum((C,), (threads,), (delta, db, np.int32(C), np.int32(n))),
                                   calls=10, repeats=20)
                moved = 2 * H * n * np.dtype(dtype).itemsize
                row = dict(variant=name, dtype=T, H=H, n=n, output_forward_us=1e3 * fwd,
                           output_forward_tbs=moved / fwd / 1e9, row_sum_us=1e3 * rs)
                print(json.dumps(row), flush=True)
                rows.append(row)
    meta = machine_metadata()
    with open(out, "w") as f:
        for row in rows:
            f.write(json.dumps({**row, **meta}) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
