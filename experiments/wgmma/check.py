"""Check and time experiments/wgmma/wgmma_tf32.cu on an H100 (issue 32's first step), beside cuBLAS
SGEMM, cuBLAS TF32 and perflab's mma.sync `tf32` kernel, at odd sizes and the training shapes.

    python3 experiments/wgmma/check.py [--out DIR]

Prints one JSON line per shape: each kernel's relative error against float64 (outputs poisoned
with NaN first) and median ms (CUDA events). Compiles with -arch=sm_90a (wgmma needs the 'a').
"""
import json
import math
import pathlib
import subprocess
import sys

import cupy as cp
import numpy as np

HERE = pathlib.Path(__file__).parent
BM, BN, STAGES = 64, 128, 3
SMEM = STAGES * (BM + BN) * 32 * 4 + 1024  # + the round-up of the base to 1024 bytes


def kernel():
    """NVRTC through CuPy first (what perflab uses); nvcc's cubin where NVRTC refuses sm_90a."""
    code = (HERE / "wgmma_tf32.cu").read_text()
    errors = []
    for arch in ("-arch=sm_90a", "--gpu-architecture=sm_90a"):
        try:
            fn = cp.RawModule(code=code, options=("-std=c++17", arch)).get_function("wgmma_tf32_gemm")
            fn.max_dynamic_shared_size_bytes = SMEM
            print(json.dumps({"built_with": f"nvrtc {arch}"}), flush=True)
            return fn
        except Exception as exc:  # noqa: BLE001 - the compiler's message is what we need to see
            errors.append(f"{arch}: {exc}")
    print("\n".join(errors), flush=True)
    cubin = pathlib.Path("/tmp/wgmma_tf32.cubin")
    subprocess.run(["nvcc", "-gencode=arch=compute_90a,code=sm_90a", "-cubin", "-std=c++17", "-o", str(cubin),
                    str(HERE / "wgmma_tf32.cu")], check=True)
    fn = cp.RawModule(path=str(cubin)).get_function("wgmma_tf32_gemm")
    fn.max_dynamic_shared_size_bytes = SMEM
    print(json.dumps({"built_with": "nvcc cubin"}), flush=True)
    return fn


def wgmma_gemm(fn, A, Bt, C, alpha=1.0, beta=0.0):
    """C = alpha A Bt^T + beta C (A: M x K, Bt: N x K, both row-major, K % 4 == 0)."""
    M, K = A.shape
    N = Bt.shape[0]
    assert K % 4 == 0 and A.flags.c_contiguous and Bt.flags.c_contiguous and C.flags.c_contiguous
    grid = (math.ceil(N / BN), math.ceil(M / BM))
    fn(grid, (128,), (np.int32(M), np.int32(N), np.int32(K), np.float32(alpha), A, np.int32(K), Bt, np.int32(K),
                      np.float32(beta), C, np.int32(N)), shared_mem=SMEM)


def ms(run, repeats=20):
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    run()
    times = []
    for _ in range(repeats):
        start.record()
        run()
        stop.record()
        stop.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, stop))
    return float(np.median(times))


def rel(x, ref):
    x = cp.asnumpy(x).astype(np.float64)
    if not np.isfinite(x).all():
        return float("nan")
    return float(np.linalg.norm(x - ref) / np.linalg.norm(ref))


def main():
    sys.path.insert(0, str(HERE.parents[1]))
    from perflab import kernels
    fn = kernel()
    rng = np.random.default_rng(0)
    shapes = [(64, 128, 32), (1, 1, 4), (65, 129, 36), (100, 200, 788), (511, 3001, 784),  # odd: edges, tails
              (512, 3200, 784), (1024, 3200, 784), (2048, 12000, 784)]                  # forward GEMM 1
    for M, N, K in shapes:
        A = rng.uniform(-1, 1, (M, K)) + 0.1
        Bt = rng.uniform(-1, 1, (N, K)) + 0.1
        ref = A @ Bt.T
        a, bt = cp.asarray(A, np.float32), cp.asarray(Bt, np.float32)
        row = {"M": M, "N": N, "K": K}
        c = cp.full((M, N), np.nan, np.float32)
        wgmma_gemm(fn, a, bt, c)
        cp.cuda.Device().synchronize()
        row["wgmma_err"] = rel(c, ref)
        row["wgmma_ms"] = ms(lambda: wgmma_gemm(fn, a, bt, c))
        b = bt.T  # K x N, column-major: what cuBLAS and perflab's kernels take as is
        for name, variant in (("sgemm", "cublas"), ("perflab_tf32", "tf32")):
            out = cp.full((M, N), np.nan, np.float32)
            kernels.gemm(a, b, out=out, variant=variant)
            row[f"{name}_err"] = rel(out, ref)
            row[f"{name}_ms"] = ms(lambda: kernels.gemm(a, b, out=out, variant=variant))
        flops = 2.0 * M * N * K
        row |= {f"{k[:-3]}_tflops": flops / row[k] / 1e9 for k in list(row) if k.endswith("_ms")}
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
