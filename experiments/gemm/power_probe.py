"""Clock, power and throughput of best and cuBLAS held on one shape for seconds, beside
nvidia-smi samples; and tune()'s timings twice (their noise). Writes $OUT/power_*."""
import datetime
import json
import os
import statistics
import subprocess
import time

import cupy as cp
import numpy as np

from perflab import kernels, timing
from perflab.measure import gemm_inputs

OUT = os.environ.get("OUT", "/tmp/out")
SHAPES = os.environ.get("SHAPES", "fwd1 H=2048 B=12000;bwd3 H=2048 B=12000;fwd1 H=1024 B=12000;fwd1 H=512 B=3200").split(";")
HOLD = float(os.environ.get("HOLD", "2.0"))
fields = "timestamp,clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active"
smi_file = open(f"{OUT}/power_smi.csv", "w")
smi = subprocess.Popen(["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader,nounits", "-lms", "50"],
                       stdout=smi_file, stderr=subprocess.STDOUT)
phases, tunes = [], []
shapes = {s[0]: s for s in gemm_inputs.gemm_shapes()}
for name in SHAPES:
    _, M, K, N, ta, tb = shapes[name]
    rng = np.random.default_rng(0)
    sets = gemm_inputs.input_sets(M, K, N)
    inputs = [gemm_inputs.gemm_operands(cp, rng, M, K, N, ta, tb) for _ in range(sets)]
    out = cp.empty((M, N), cp.float32)
    work = kernels.workspace(M, N, cp.float32)
    a0, b0 = inputs[0]
    for rep in range(2):
        for config, blocks in kernels.tile_choices("best", "float", M, N, K, work, kernels.multiprocessors()):
            run = lambda: kernels.gemm(a0, b0, out=out, variant="best", config=config, blocks=blocks, work=work)
            tunes.append({"shape": name, "rep": rep, "config": config, "blocks": blocks,
                          "schedule": kernels.schedule_name("best", "float", config, M, N, K, blocks),
                          "ms": timing.time_graph_ms(cp, run, calls=5, repeats=5)})
    choice = kernels.tune(a0, b0, out, variant="best", work=work)
    for variant in ("best", "cublas", "best", "cublas"):
        turn = iter(range(10**9))

        def call():
            a, b = inputs[next(turn) % sets]
            kernels.gemm(a, b, out=out, variant=variant, work=work)
        stream = cp.cuda.Stream(non_blocking=True)
        calls = 2 * sets
        with stream:
            call()
            stream.begin_capture()
            for _ in range(calls):
                call()
            graph = stream.end_capture()
            time.sleep(0.5)
            t0 = time.time()
            ms = []
            while time.time() - t0 < HOLD:
                start, stop = cp.cuda.Event(), cp.cuda.Event()
                start.record(stream)
                graph.launch(stream)
                stop.record(stream)
                stop.synchronize()
                ms.append(cp.cuda.get_elapsed_time(start, stop) / calls)
            t1 = time.time()
        n = len(ms)
        phases.append({"shape": name, "variant": variant, "config": choice[0] if variant == "best" else "",
                       "blocks": choice[1] if variant == "best" else None, "t0": t0, "t1": t1, "replays": n,
                       "ms_median": statistics.median(ms), "ms_first10": statistics.median(ms[:10]),
                       "ms_last10": statistics.median(ms[-10:]), "ms_min": min(ms),
                       "tflops_median": 2 * M * N * K / statistics.median(ms) / 1e9})
        print(phases[-1], flush=True)
time.sleep(0.3)
smi.terminate()
smi_file.close()
samples = []
for line in open(f"{OUT}/power_smi.csv"):
    parts = [p.strip() for p in line.split(",")]
    try:
        t = datetime.datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
        samples.append((t, float(parts[1]), float(parts[2]), float(parts[3]), parts[4]))
    except (ValueError, IndexError):
        print("smi:", line.strip())
for p in phases:
    inside = [s for s in samples if p["t0"] + 0.2 <= s[0] <= p["t1"]]
    if inside:
        p["clock_mhz_median"] = statistics.median(s[1] for s in inside)
        p["clock_mhz_min"] = min(s[1] for s in inside)
        p["power_w_median"] = statistics.median(s[2] for s in inside)
        p["power_w_max"] = max(s[2] for s in inside)
        p["temp_c_max"] = max(s[3] for s in inside)
        p["reasons"] = sorted({s[4] for s in inside})
    p["samples"] = len(inside)
import pandas as pd

pd.DataFrame(phases).to_csv(f"{OUT}/power_phases.csv", index=False)
pd.DataFrame(tunes).to_csv(f"{OUT}/power_tunes.csv", index=False)
json.dump({"gpu": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(), "commit": os.environ.get("PERFLAB_GIT_COMMIT"),
           "date": datetime.datetime.now().isoformat(), "hold_s": HOLD}, open(f"{OUT}/power_meta.json", "w"))
cols = ["shape", "variant", "config", "blocks", "replays", "ms_median", "ms_first10", "ms_last10", "tflops_median",
        "clock_mhz_median", "clock_mhz_min", "power_w_median", "power_w_max", "temp_c_max", "reasons"]
print(pd.DataFrame(phases)[[c for c in cols if c in pd.DataFrame(phases)]].to_string())
t = pd.DataFrame(tunes)
print(t.pivot_table(index=["shape", "config", "schedule"], columns="rep", values="ms").round(4).to_string())
