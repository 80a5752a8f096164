"""Compile, in parallel processes, every module ab.py will load (CuPy's disk cache keeps them):
argv = variants; env EXTRA_CONFIGS, CONFIG as for ab.py."""
import os
import sys
from concurrent.futures import ProcessPoolExecutor


def one(job):
    variant, cfg = job
    from perflab import kernels
    if os.environ.get("EXTRA_CONFIGS"):
        kernels.TILE_CONFIGS[("best", "float")] += [tuple(map(int, c.split(","))) for c in os.environ["EXTRA_CONFIGS"].split(";")]
    f = f"../../diag/ab/{variant}.cu"
    names = kernels.gemm_names("best", "float", cfg)
    kernels.module(f, names).get_function(names[0])
    return variant, cfg

if __name__ == "__main__":
    jobs = [(v, c) for v in dict.fromkeys(sys.argv[1:]) for c in os.environ["CONFIG"].split(",")]
    with ProcessPoolExecutor(min(len(jobs), 15)) as pool:
        for v, c in pool.map(one, jobs):
            print("compiled", v, c, flush=True)
