"""Why do graphed tensor-core steps run 10-20% slower in training than their kernels timed alone?

Blind checks on one H100 (results/nvidia-h100-80gb-hbm3/prediction_check_h100_{launch,eager}_*)
predicted resident cuBLAS steps within -13%..+6% but every wgmma and x3tf32 one 10-20% fast. The
ceilings time each kernel alone, a few replays after an idle moment; training runs the step's
kernels in sequence for seconds, where a Hopper at its 700 W cap lowers its clock (bench_hold.csv).
Per (H, B, GEMM): the sum of the kernels timed as the ceilings time them, the whole step in one
graph replayed briefly, and the same held for 3 s, with the SM clock and power sampled by
nvidia-smi in the background. One JSON line each.
Usage (GPU machine, repository root): python3 experiments/predictor/held_step.py
"""
import json
import statistics
import subprocess
import tempfile
import time

import cupy as cp

from perflab.analysis.predictor import UPDATE, fused_step
from perflab.kernels import wgmma
from perflab.measure.bench import step_kernels, tensor_core_step_kernels
from perflab.timing import graph_replays_ms, time_graph_ms

log = tempfile.NamedTemporaryFile("w+", suffix=".csv", delete=False)
smi = subprocess.Popen(["nvidia-smi", "--query-gpu=timestamp,clocks.sm,power.draw", "--format=csv,noheader,nounits",
                        "-lms", "100"], stdout=log, text=True)


def samples(t0, t1):
    """(median SM MHz, median W) sampled between wall times t0 and t1."""
    log.flush()
    rows = []
    for line in open(log.name):
        stamp, mhz, watts = [x.strip() for x in line.split(",")]
        t = time.mktime(time.strptime(stamp.split(".")[0], "%Y/%m/%d %H:%M:%S")) + float("0." + stamp.split(".")[1])
        if t0 <= t <= t1:
            rows.append((float(mhz), float(watts)))
    if not rows:
        return None, None
    return statistics.median(r[0] for r in rows), statistics.median(r[1] for r in rows)


time.sleep(1)
for H, B in ((1280, 3100), (2816, 3100), (2816, 1300)):
    calls = {name: call for name, call, _ in step_kernels(H, B) + tensor_core_step_kernels(H, B)}
    for variant in ("cublas", "wgmma", "x3tf32"):
        names = fused_step(variant) + (UPDATE,)
        alone = {n: time_graph_ms(cp, calls[n], calls=5, repeats=10) for n in names}

        def step():
            for n in names:
                calls[n]()
        time.sleep(0.5)  # idle, as the ceilings' kernels start from a short pause
        short = statistics.median(graph_replays_ms(cp, step, 1, lambda n: n >= 10))
        t0 = time.time()
        held = graph_replays_ms(cp, step, 1, lambda n, t=t0: time.time() - t > 3.0)
        t1 = time.time()
        clock, power = samples(t1 - 1.5, t1)
        print(json.dumps({"H": H, "B": B, "gemm": variant, "kernels_alone_ms": round(sum(alone.values()), 4),
                          "step_short_ms": round(short, 4), "step_held_ms": round(statistics.median(held[len(held) // 2:]), 4),
                          "held_clock_mhz": clock, "held_power_w": power,
                          "alone_ms": {n: round(v, 4) for n, v in alone.items()}}), flush=True)
    wgmma.release()
    cp.get_default_memory_pool().free_all_blocks()
smi.terminate()
