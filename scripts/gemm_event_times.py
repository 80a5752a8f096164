"""cuBLAS SGEMM (CuPy matmul) and perflab's best GEMM (tuned) at the training shapes with H x 784
in them, timed as scripts/cutlass_simt_sgemm.cu times CUTLASS (median of 20-launch loops timed
by CUDA events), so the three compare in one device call. The layouts are the CUTLASS program's:
fwd1 as training calls it, bwd3 with A column-major (training's bwd3, gemm_inputs.gemm_shapes, has A
row-major), so its bwd3 lines compare the three in a layout training does not use.
Usage: python3 scripts/gemm_event_times.py"""
import cupy as cp
import numpy as np

from perflab import kernels


def event_ms(f):
    for _ in range(5):
        f()
    s, e = cp.cuda.Event(), cp.cuda.Event()
    t = []
    for _ in range(7):
        s.record()
        for _ in range(20):
            f()
        e.record()
        e.synchronize()
        t.append(cp.cuda.get_elapsed_time(s, e) / 20)
    return float(np.median(t))


def main():
    for H in (512, 1024, 2048):
        for B in (800, 3200, 12000):
            for name, (M, N, K), (ta, tb) in ((f"fwd1_H={H}_B={B}", (H, B, 784), (False, True)),
                                              (f"bwd3_H={H}_B={B}", (H, 784, B), (True, False))):
                a = cp.random.uniform(-.5, .5, (K, M) if ta else (M, K), dtype=cp.float32)
                b = cp.random.uniform(-.5, .5, (N, K) if tb else (K, N), dtype=cp.float32)
                a, b = (a.T if ta else a), (b.T if tb else b)
                out = cp.empty((M, N), cp.float32)
                work = kernels.workspace(M, N, cp.float32)
                cfg, blocks = kernels.tune(a, b, out, "best", work=work)
                for label, f in (("cublas", lambda: cp.matmul(a, b, out=out)),
                                 ("perflab-best", lambda: kernels.gemm(a, b, out=out, config=cfg, blocks=blocks, work=work))):
                    ms = event_ms(f)
                    print(f"{name} {label} {cfg if label != 'cublas' else '-'} blocks{blocks if label != 'cublas' else '-'} "
                          f"{ms:.5f} ms {2 * M * N * K / ms / 1e9:.2f} TFLOP/s", flush=True)


if __name__ == "__main__":
    main()
