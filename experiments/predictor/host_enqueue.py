"""Does a kernel's host enqueue time depend on its shape, or on when it is measured?

perflab ceilings' first host_seconds (H100, 40ad2ac) put `db2 row sums` at 15 us at H = 512 and
30 us at H = 2048, B = 3200, and lower again at H = 4096: a row sum's launch cannot depend on H.
Here the same calls are timed at every shape in shuffled order, three rounds, with the GPU idle
at the start of each run (as the ceilings do) and with it busy (a spin kernel of 2 ms first), so
drift over time, shape, and the state of the GPU can be told apart. One JSON line a measurement.
Usage (GPU machine, repository root): python3 experiments/predictor/host_enqueue.py
"""
import json
import random
import time

import cupy as cp

from perflab.measure.bench import step_kernels
from perflab.measure.ceilings import SPIN

def host_enqueue_seconds(cp, fn, calls=5, repeats=7):
    """Median host seconds one fn() takes to enqueue its work, the device idle at the start of each run."""
    fn()
    times = []
    for _ in range(repeats):
        cp.cuda.get_current_stream().synchronize()
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - start) / calls)
    cp.cuda.get_current_stream().synchronize()
    return sorted(times)[len(times) // 2]


spin = cp.RawKernel(SPIN, "spin")
clock = cp.cuda.Device().attributes["ClockRate"] * 1e3  # Hz


def busy_enqueue(call, calls=5, repeats=7):
    times = []
    for _ in range(repeats):
        cp.cuda.get_current_stream().synchronize()
        spin((1,), (1,), (cp.int64(int(2e-3 * clock)),))
        start = time.perf_counter()
        for _ in range(calls):
            call()
        times.append((time.perf_counter() - start) / calls)
    cp.cuda.get_current_stream().synchronize()
    return sorted(times)[len(times) // 2]


shapes = [(H, B) for H in (512, 2048, 4096) for B in (800, 3200)]
wanted = ("db2 row sums", "SGD + L2 update", "forward GEMM 1 (cuBLAS)", "backward GEMM 3 (cuBLAS)")
t0 = time.perf_counter()
for round_ in range(3):
    random.Random(round_).shuffle(shapes)
    for H, B in shapes:
        calls = {name: call for name, call, _ in step_kernels(H, B) if name in wanted}
        for name, call in calls.items():
            idle = host_enqueue_seconds(cp, call)
            busy = busy_enqueue(call)
            print(json.dumps({"round": round_, "t": round(time.perf_counter() - t0, 2), "H": H, "B": B, "kernel": name,
                              "idle_us": round(1e6 * idle, 1), "busy_us": round(1e6 * busy, 1)}), flush=True)
        cp.get_default_memory_pool().free_all_blocks()
