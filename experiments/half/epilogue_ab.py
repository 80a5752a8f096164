"""The wgmma GEMM's C stored from registers (each lane 4 or 8 bytes to each of eight rows an
instruction) or through shared memory (store_staged: whole 128-byte lines), and (--no-store, the half
products only) not at all: the mainloop's time alone, what any epilogue could win. Each variant is
gemm_wgmma.cu edited in a copy of perflab/kernels; each tuned over its configs and splits, beside
cuBLAS's; device time of graph replays, operands rotated past L2. At: the half step's GEMMs (BF16),
and the TF32 and 3xTF32 GEMMs of the FP32 step's first layer. First checks that the staged store
writes what the register one does, bit for bit, at odd sizes, with and without bias and splits.
Usage: python experiments/half/epilogue_ab.py [--no-store] > epilogue_ab.jsonl"""
import json
import multiprocessing
import shutil
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from perflab import kernels
from perflab.kernels import build, wgmma

STAGED = "constexpr bool STAGED = sizeof(O) == 2 && R == 1 && BN % 64 == 0;"
STORE = "store<BN, STAGED>(d[r]"
VARIANTS = {"registers": (STAGED, "constexpr bool STAGED = false;"), "staged": ("", ""),
            "no store": (STORE, "if (M < 0) " + STORE)}
SCRATCH = Path(tempfile.mkdtemp())


def source_dir(variant: str) -> Path:
    """perflab/kernels copied, its gemm_wgmma.cu edited for the variant."""
    to = SCRATCH / variant.replace(" ", "_")
    if not to.exists():
        shutil.copytree(build.KERNEL_DIR, to)
        old, new = VARIANTS[variant]
        code = (to / "gemm_wgmma.cu").read_text()
        assert old in code
        (to / "gemm_wgmma.cu").write_text(code.replace(old, new))
    return to


def use(variant: str):
    build.KERNEL_DIR = source_dir(variant)
    build.module.cache_clear()
    wgmma.kernel.cache_clear()
    wgmma.LAUNCHES.clear()
    kernels.TUNED.clear()


def compile_job(job):
    variant, name = job
    use(variant)
    build.module("gemm_wgmma.cu", (name,)).get_function(name)


def half_operands(cp, rng, M, K, N, ta, tb, store):
    a, b = (kernels.narrow_copy(cp.asarray(rng.uniform(-1, 1, s).astype(np.float32)), cp.empty(s, store))
            for s in ((K, M) if ta else (M, K), (N, K) if tb else (K, N)))
    return (a.T if ta else a), (b.T if tb else b)


def main():
    import cupy as cp

    from perflab.measure.gemm_inputs import gemm_operands, gemm_shapes, half_gemm_shapes, operand_sets, rotating, weight_gradient
    from perflab.timing import time_graph_ms
    variants = ["registers", "staged"] + (["no store"] if "--no-store" in sys.argv else [])
    store = kernels.HALF_STORAGE["bfloat16"]
    names = [n for n in wgmma.wgmma_names() if "fp16" not in n]
    for v in variants:
        source_dir(v)
    with ProcessPoolExecutor(16, mp_context=multiprocessing.get_context("spawn")) as pool:
        list(pool.map(compile_job, [(v, n) for v in variants for n in names]))
    print("compiled", len(names) * len(variants), file=sys.stderr, flush=True)

    rng = np.random.default_rng(1)
    for M, K, N, ta, tb in ((333, 784, 1001, False, False), (200, 1517, 3000, True, False), (129, 1024, 259, False, True)):
        a, b = half_operands(cp, rng, M, K, N, ta, tb, store)
        bias = cp.asarray(rng.uniform(-1, 1, M).astype(np.float32))
        for out_type, with_bias in ((store, None), (store, bias), (np.float32, None)):
            for config, splits in wgmma.choices(M, N, K, "half"):
                got = {}
                for variant in ("registers", "staged"):
                    use(variant)
                    out = cp.full((M, N), 7, out_type)
                    kernels.half_gemm(a, b, out, bias=with_bias, variant="wgmma", config=config, splits=splits)
                    got[variant] = out.get()
                same = bool((got["registers"] == got["staged"]).all())
                print(json.dumps({"check": f"{M}x{K}x{N} ta={ta} tb={tb} bias={with_bias is not None} "
                                  f"out={np.dtype(out_type).name}", "config": config, "splits": splits,
                                  "bitwise_equal": same}), flush=True)
                assert same

    cases = [("half", s) for s in half_gemm_shapes((512, 1024, 2048), (3200, 12000))]
    cases += [(kind, s) for kind in wgmma.WGMMA_VARIANTS for s in gemm_shapes((1024, 2048), (3200, 12000))
              if s[0].startswith(("fwd1", "bwd3"))]
    for kind, (name, M, K, N, ta, tb) in cases:
        if kind == "half":
            inputs = [tuple(kernels.narrow_copy(x, cp.empty_like(x, dtype=store)) for x in pair)
                      for pair in operand_sets(cp, M, K, N, ta, tb)]
            out = cp.empty((M, N), np.float32 if weight_gradient(name) else store)

            def gemm(a, b, variant, config=None, splits=None):
                kernels.half_gemm(a, b, out, variant=variant, config=config, splits=splits)
            peer = "cublas"
        else:
            inputs = [gemm_operands(cp, rng, M, K, N, ta, tb) for _ in range(4)]
            out = cp.empty((M, N), np.float32)

            def gemm(a, b, variant, config=None, splits=None):
                kernels.gemm(a, b, out=out, variant=variant, config=config, blocks=splits)
            peer = "cublas" if kind == "wgmma" else "x3tf32"   # x3tf32: against its own register store only
        row = {"kind": kind, "shape": name, "M": M, "K": K, "N": N, "out": out.dtype.name}
        if peer == "cublas":
            call = rotating(inputs, lambda a, b: gemm(a, b, "cublas"))
            call()
            row["cublas_ms"] = time_graph_ms(cp, call, calls=2 * len(inputs), repeats=20)
        for variant in variants if kind == "half" and not weight_gradient(name) else variants[:2]:
            use(variant)
            times = {}
            for config, splits in wgmma.choices(M, N, K, kind):
                call = rotating(inputs, lambda a, b, c=config, s=splits: gemm(a, b, kind if kind != "half" else "wgmma",
                                                                               c, s))
                call()
                times[f"{config}/{splits}"] = time_graph_ms(cp, call, calls=2 * len(inputs), repeats=20)
            best = min(times, key=times.get)
            row[variant] = {"best": best, "ms": times[best], "all": times}
            if "cublas_ms" in row:
                row[variant]["vs_cublas"] = row["cublas_ms"] / times[best]
        row["staged_speedup"] = row["registers"]["ms"] / row["staged"]["ms"]
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
