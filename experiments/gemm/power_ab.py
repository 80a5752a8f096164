"""A/B of gemm_best.cu variants (diag/ab/<name>.cu) in bursts (tune()'s timing of every choice)
and held for seconds under the 700 W cap, beside cuBLAS, with nvidia-smi's clock and power.
argv: variants; env SHAPES (';'-separated), HOLD seconds. Writes $OUT/pab_*."""
import datetime
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np

OUT = os.environ.get("OUT", "/tmp/out")
HOLD = float(os.environ.get("HOLD", "1.5"))


def use(variant):
    from perflab import kernels
    f = f"../../diag/ab/{variant}.cu"
    kernels.dispatch.source_file = lambda v: f if v in kernels.TILED_VARIANTS else f"gemm_{v}.cu"
    kernels.gemm_function.cache_clear()
    kernels.TUNED.clear()


def compile_one(job):
    variant, config = job
    from perflab import kernels
    use(variant)
    names = kernels.gemm_names("best", "float", config)
    kernels.module(kernels.source_file("best"), names).get_function(names[0])
    return job


def hold(cp, call, calls):
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        call()
        stream.begin_capture()
        for _ in range(calls):
            call()
        graph = stream.end_capture()
        time.sleep(0.3)
        t0, ms = time.time(), []
        while time.time() - t0 < HOLD:
            start, stop = cp.cuda.Event(), cp.cuda.Event()
            start.record(stream)
            graph.launch(stream)
            stop.record(stream)
            stop.synchronize()
            ms.append(cp.cuda.get_elapsed_time(start, stop) / calls)
    return t0, time.time(), ms


def main():
    variants = sys.argv[1:]
    from perflab import kernels, timing
    from perflab.measure import gemm_inputs
    configs = list(kernels.tile_configs("best", "float"))
    t = time.time()
    with ProcessPoolExecutor(15, mp_context=multiprocessing.get_context("spawn")) as pool:
        list(pool.map(compile_one, [(v, c) for v in variants for c in configs]))
    print(f"compiled {len(variants)} x {len(configs)} in {time.time() - t:.0f} s", flush=True)
    import cupy as cp
    smi_file = open(f"{OUT}/pab_smi.csv", "w")
    smi = subprocess.Popen(["nvidia-smi", "--query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,"
                            "clocks_throttle_reasons.active", "--format=csv,noheader,nounits", "-lms", "50"],
                           stdout=smi_file, stderr=subprocess.STDOUT)
    shapes = {s[0]: s for s in gemm_inputs.gemm_shapes()}
    bursts, holds = [], []
    for name in os.environ["SHAPES"].split(";"):
        _, M, K, N, ta, tb = shapes[name]
        rng = np.random.default_rng(0)
        sets = gemm_inputs.input_sets(M, K, N)
        inputs = [gemm_inputs.gemm_operands(cp, rng, M, K, N, ta, tb) for _ in range(sets)]
        out = cp.empty((M, N), cp.float32)
        work = kernels.workspace(M, N, cp.float32)
        a0, b0 = inputs[0]
        ref = a0.astype(cp.float64) @ b0.astype(cp.float64)
        chosen = {}
        for variant in variants:
            use(variant)
            for config, blocks in kernels.tile_choices("best", "float", M, N, K, work, kernels.multiprocessors()):
                run = lambda: kernels.gemm(a0, b0, out=out, variant="best", config=config, blocks=blocks, work=work)
                out.fill(np.nan)
                run()
                err = float(cp.linalg.norm(out - ref) / cp.linalg.norm(ref))
                ms = timing.time_graph_ms(cp, run, calls=5, repeats=5)
                bursts.append({"shape": name, "variant": variant, "config": config, "blocks": blocks, "ms": ms,
                               "schedule": kernels.schedule_name("best", "float", config, M, N, K, blocks),
                               "rel_error": err})
                if not err <= 1e-5:
                    print(f"!! {variant} {name} {config} {blocks}: error {err}", flush=True)
            mine = [r for r in bursts if r["shape"] == name and r["variant"] == variant]
            pick = min(mine, key=lambda r: r["ms"])
            chosen[variant] = (pick["config"], pick["blocks"])
        plan = [(v, chosen[v]) for v in variants]
        base_choice = chosen[variants[0]]
        plan += [(v, base_choice) for v in variants[1:] if chosen[v] != base_choice]
        for rep in range(2):
            for variant, (config, blocks) in plan + [("cublas", (None, None))]:
                if variant != "cublas":
                    use(variant)
                turn = iter(range(10**9))

                def call():
                    a, b = inputs[next(turn) % sets]
                    if variant == "cublas":
                        kernels.gemm(a, b, out=out, variant="cublas")
                    else:
                        kernels.gemm(a, b, out=out, variant="best", config=config, blocks=blocks, work=work)
                t0, t1, ms = hold(cp, call, 2 * sets)
                holds.append({"shape": name, "variant": variant, "config": config, "blocks": blocks, "rep": rep,
                              "t0": t0, "t1": t1, "replays": len(ms), "ms_median": statistics.median(ms),
                              "ms_first10": statistics.median(ms[:10]), "ms_last10": statistics.median(ms[-10:]),
                              "tflops": 2 * M * N * K / statistics.median(ms) / 1e9})
                print({k: holds[-1][k] for k in ("shape", "variant", "config", "blocks", "ms_median", "ms_first10",
                                                  "ms_last10")}, flush=True)
    time.sleep(0.3)
    smi.terminate()
    smi_file.close()
    samples = []
    for line in open(f"{OUT}/pab_smi.csv"):
        p = [x.strip() for x in line.split(",")]
        try:
            samples.append((datetime.datetime.strptime(p[0], "%Y/%m/%d %H:%M:%S.%f").timestamp(),
                            float(p[1]), float(p[2])))
        except (ValueError, IndexError):
            pass
    for h in holds:
        inside = [s for s in samples if h["t0"] + 0.2 <= s[0] <= h["t1"]]
        if inside:
            h["clock_mhz"] = statistics.median(s[1] for s in inside)
            h["power_w"] = statistics.median(s[2] for s in inside)
    import pandas as pd
    pd.DataFrame(bursts).to_csv(f"{OUT}/pab_bursts.csv", index=False)
    hd = pd.DataFrame(holds)
    hd.to_csv(f"{OUT}/pab_holds.csv", index=False)
    json.dump({"gpu": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(),
               "commit": os.environ.get("PERFLAB_GIT_COMMIT"), "variants": variants,
               "date": datetime.datetime.now().isoformat(), "hold_s": HOLD}, open(f"{OUT}/pab_meta.json", "w"))
    print(hd[["shape", "variant", "config", "blocks", "rep", "ms_median", "ms_first10", "ms_last10", "tflops",
              "clock_mhz", "power_w"]].round(4).to_string())
    bd = pd.DataFrame(bursts)
    print(bd.loc[bd.groupby(["shape", "variant"])["ms"].idxmin()].to_string())


if __name__ == "__main__":
    main()
