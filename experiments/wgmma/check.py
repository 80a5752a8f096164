"""Check and time wgmma_gemm.cu (TF32 and 3xTF32 on Hopper's wgmma) on an H100, beside cuBLAS SGEMM,
cuBLAS TF32, perflab's cuBLAS-composed 3xTF32 and (in a process of its own) JAX's TF32_TF32_F32_X3.

    python3 experiments/wgmma/check.py OUTDIR

Every kernel (tma: persistent, warp-specialized, the copy engine loads) first runs the odd sizes against float64 (outputs poisoned with NaN); then every config
and split-K count is timed at the training's two big GEMMs (forward GEMM 1: H x b x 784; backward
GEMM 3: H x 784 x b), CUDA events around 10 back-to-back calls, median of 15. Writes OUTDIR/wgmma.jsonl.
"""
import json
import math
import pathlib
import statistics
import subprocess
import sys
import time

import numpy as np

HERE = pathlib.Path(__file__).parent
BK = 32
# family: (kernel, warpgroups beside the consumers, {X3: [(consumer warpgroups, BN, stages, promote every)]})
FAMILIES = {
    "tma": ("wgmma_tma_gemm", 1, {False: [(2, 256, 4, 1), (2, 128, 6, 1), (1, 256, 5, 1), (2, 128, 4, 1), (2, 64, 8, 1)],
                                  True: [(2, 128, 3, 1), (2, 128, 3, 2), (2, 128, 3, 4), (1, 128, 4, 2), (2, 64, 4, 2)]}),
}
ODD = [(1, 1, 4), (65, 129, 36), (100, 200, 788), (511, 3001, 784), (130, 260, 1000)]
TRAINING = [("fwd1", 512, 3200, 784), ("fwd1", 1024, 3200, 784), ("fwd1", 2048, 12000, 784),
            ("bwd3", 512, 784, 3200), ("bwd3", 1024, 784, 3200), ("bwd3", 2048, 784, 12000)]


def smem(family, wgs, bn, stages, promote, x3):
    return stages * (64 * wgs + bn) * BK * 4 * (2 if x3 else 1) + 16 * stages + 1024


def label(family, cfg, x3):
    return f"{family}-{'x3' if x3 else 'tf32'}-wg{cfg[0]}-n{cfg[1]}-s{cfg[2]}" + (f"-p{cfg[3]}" if x3 else "")


def build(cp):
    """{(family, cfg, x3): kernel}, and splitk_sum."""
    names = {(f, c, x3): f"{kernel}<{c[0]},{c[1]},{c[2]},{str(x3).lower()},{c[3]}>"
             for f, (kernel, _, configs) in FAMILIES.items() for x3 in configs for c in configs[x3]}
    t0 = time.time()
    mod = cp.RawModule(code=(HERE / "wgmma_gemm.cu").read_text(), options=("-std=c++17", "-arch=sm_90a", f"-I{HERE}", f"-I{HERE.parents[1] / 'perflab' / 'kernels'}"),
                       name_expressions=tuple(names.values()))
    fns = {}
    for key, n in names.items():
        fns[key] = mod.get_function(n)
        fns[key].max_dynamic_shared_size_bytes = smem(*key[0:1], *key[1], key[2])
    print(json.dumps({"built": len(fns), "compile_s": round(time.time() - t0, 1)}), flush=True)
    return fns, mod.get_function("splitk_sum")


def split(cp, x):
    """(big, small) of x: perflab's TF32 split (the one cublas-x3tf32 uses)."""
    from perflab.kernels.cublas import tf32_split_kernel
    big, small = cp.empty_like(x), cp.empty_like(x)
    tf32_split_kernel()(x, big, small)
    return big, small


MAPS = {}
SMS = [132]


def tensor_map(cp, x, box_rows):
    """The TMA descriptor of K-major x (rows x K, row-major) for boxes of 32 k x box_rows, 128-byte
    swizzle, zeros past the edges, in device memory (cached per array and box)."""
    import ctypes
    key = (x.data.ptr, x.shape, box_rows)
    if key not in MAPS:
        cuda = ctypes.CDLL("libcuda.so.1")
        rows, K = x.shape
        m = (ctypes.c_uint64 * 16)()
        status = cuda.cuTensorMapEncodeTiled(
            ctypes.byref(m), 7, 2, ctypes.c_void_p(x.data.ptr), (ctypes.c_uint64 * 2)(K, rows),
            (ctypes.c_uint64 * 1)(x.strides[0]), (ctypes.c_uint32 * 2)(BK, box_rows), (ctypes.c_uint32 * 2)(1, 1),
            0, 3, 2, 0)  # no interleave, 128-byte swizzle, 128-byte L2 promotion, zero fill
        if status != 0:
            raise RuntimeError(f"cuTensorMapEncodeTiled failed: CUresult {status} for {x.shape} box {box_rows}")
        MAPS[key] = (cp.asarray(np.frombuffer(bytes(m), np.uint8)), x)
    return MAPS[key][0]


def run(cp, fns, ssum, key, splits, A, Bt, C, work):
    """C = A Bt^T with kernel `key` and `splits` k-splits (work: splits x M x N floats). A and Bt
    are (big, small) pairs for X3 kernels."""
    family, cfg, x3 = key
    (a, a_small), (bt, bt_small) = (A, Bt) if x3 else ((A, A), (Bt, Bt))
    M, K = a.shape
    N = bt.shape[0]
    kps = math.ceil(math.ceil(K / splits) / BK) * BK
    z = math.ceil(K / kps)
    tiles = math.ceil(N / cfg[1]) * math.ceil(M / (64 * cfg[0])) * z
    grid = (min(tiles, SMS[0]),)   # persistent: a CTA per multiprocessor at most
    target = C if z == 1 else work
    threads = 128 * (cfg[0] + FAMILIES[family][1])
    head = (np.int32(M), np.int32(N), np.int32(K), np.int32(kps), np.float32(1.0))
    tail = (np.float32(0.0), target, np.int32(N))
    bm = 64 * cfg[0]
    args = (tensor_map(cp, a, bm), tensor_map(cp, a_small, bm), tensor_map(cp, bt, cfg[1]), tensor_map(cp, bt_small, cfg[1]))
    fns[key](grid, (threads,), head + args + tail, shared_mem=smem(family, *cfg, x3))
    if z > 1:
        ssum((math.ceil(M * N / 256),), (256,), (np.int32(M), np.int32(N), np.int32(z), work, np.float32(0.0), C, np.int32(N)))


def device_ms(cp, call, calls=10, repeats=15):
    call()
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    times = []
    for _ in range(repeats):
        start.record()
        for _ in range(calls):
            call()
        stop.record()
        stop.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, stop) / calls)
    return statistics.median(times)


def rel(cp, x, ref):
    x = cp.asnumpy(x).astype(np.float64)
    return float(np.linalg.norm(x - ref) / np.linalg.norm(ref)) if np.isfinite(x).all() else float("nan")


def operands(M, N, K, seed=0):
    rng = np.random.default_rng(seed)
    return rng.uniform(-1, 1, (M, K)) + 0.1, rng.uniform(-1, 1, (N, K)) + 0.1


def jax_x3(out):
    """JAX's TF32_TF32_F32_X3 dot at the training shapes: host clock around 10 queued calls."""
    import jax
    import jax.numpy as jnp
    algo = jax.lax.DotAlgorithmPreset.TF32_TF32_F32_X3
    for kind, M, N, K in TRAINING:
        A, Bt = operands(M, N, K)
        a, bt = jnp.asarray(A, jnp.float32), jnp.asarray(Bt, jnp.float32)
        f = jax.jit(lambda a, bt: jax.lax.dot_general(a, bt, (((1,), (1,)), ((), ())), precision=algo,
                                                       preferred_element_type=jnp.float32))
        c = jax.block_until_ready(f(a, bt))
        err = float(np.linalg.norm(np.asarray(c, np.float64) - A @ Bt.T) / np.linalg.norm(A @ Bt.T))
        times = []
        for _ in range(15):
            t0 = time.perf_counter()
            for _ in range(10):
                c = f(a, bt)
            jax.block_until_ready(c)
            times.append((time.perf_counter() - t0) * 100)
        ms = statistics.median(times)
        out.write(json.dumps({"kind": kind, "M": M, "N": N, "K": K, "kernel": "jax-x3", "ms": ms, "err": err,
                              "tflops": 2 * M * N * K / ms / 1e9}) + "\n")


def main(outdir):
    sys.path.insert(0, str(HERE.parents[1]))
    import cupy as cp
    from perflab import kernels
    from perflab.kernels.cublas import call_gemm, handle_on_stream
    fns, ssum = build(cp)
    SMS[0] = cp.cuda.runtime.getDeviceProperties(0)["multiProcessorCount"]
    log = open(outdir / "wgmma.jsonl", "a")

    def emit(row):
        print(json.dumps(row), flush=True)
        log.write(json.dumps(row) + "\n")
    work = cp.empty(8 * 2048 * 12000, np.float32)
    # correctness: every config, odd sizes, 1 and 3 splits
    for M, N, K in ODD:
        A, Bt = operands(M, N, K, seed=M)
        ref = A @ Bt.T
        a, bt = cp.asarray(A, np.float32), cp.asarray(Bt, np.float32)
        parts = {False: (a, bt), True: (split(cp, a), split(cp, bt))}
        row = {"kind": "odd", "M": M, "N": N, "K": K}
        for key in fns:
            for splits in (1, 3):
                c = cp.full((M, N), np.nan, np.float32)
                run(cp, fns, ssum, key, splits, *parts[key[2]], c, work)
                row[f"{label(*key)}-k{splits}"] = rel(cp, c, ref)
        c = cp.full((M, N), np.nan, np.float32)
        kernels.gemm(a, bt.T, out=c, variant="cublas")
        row["sgemm"] = rel(cp, c, ref)
        emit(row)
    # timing: training shapes
    for kind, M, N, K in TRAINING:
        A, Bt = operands(M, N, K)
        ref = A @ Bt.T
        a, bt = cp.asarray(A, np.float32), cp.asarray(Bt, np.float32)
        c = cp.full((M, N), np.nan, np.float32)
        parts = {False: (a, bt), True: (split(cp, a), split(cp, bt))}
        flops = 2.0 * M * N * K

        def record(kernel, call):
            c[...] = np.nan
            call()
            ms = device_ms(cp, call)
            emit({"kind": kind, "M": M, "N": N, "K": K, "kernel": kernel, "ms": ms, "err": rel(cp, c, ref),
                  "tflops": flops / ms / 1e9})
        record("cublas-sgemm", lambda: kernels.gemm(a, bt.T, out=c, variant="cublas"))

        def cublas_tf32():
            with handle_on_stream(tf32=True) as (lib, handle):
                call_gemm(lib, handle, M, N, K, 1.0, a, False, K, bt.T, True, K, 0.0, c)
        record("cublas-tf32", cublas_tf32)
        record("cublas-x3tf32", lambda: kernels.gemm(a, bt.T, out=c, variant="cublas-x3tf32"))
        for key in fns:
            for splits in (1, 2, 4, 8):
                if K / splits >= 4 * BK:
                    record(f"{label(*key)}-k{splits}", lambda: run(cp, fns, ssum, key, splits, *parts[key[2]], c, work))
        record("split-a-and-b", lambda: (split(cp, a), split(cp, bt)))
    log.close()
    subprocess.run([sys.executable, __file__, "--jax", str(outdir)], check=False)


if __name__ == "__main__":
    if sys.argv[1] == "--jax":
        with open(pathlib.Path(sys.argv[2]) / "wgmma.jsonl", "a") as out:
            jax_x3(out)
    else:
        main(pathlib.Path(sys.argv[1]))
