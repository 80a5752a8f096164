"""Why is the BF16 step slow at a batch that is not a multiple of 8 (CROSS_KIND.md: 784-1760-10, b = 2100)?
The trainer's two cuBLAS GEMMs of 784-H-10 (forward W_1 X_b, weight gradient dz_1 X_b^T) timed alone at
n = 2096, 2100, 2104, with X_b a column slice of the resident half images at an aligned and an unaligned
start, device time (CUDA events over 50 calls, median of 5). Usage: python unaligned.py H"""
import json
import sys

import cupy as cp
import numpy as np

from perflab import kernels

H, D, N = int(sys.argv[1]) if len(sys.argv) > 1 else 1760, 784, 60000
store = kernels.HALF_STORAGE["bfloat16"]
rng = np.random.default_rng(0)
X = kernels.narrow_copy(cp.asarray(rng.random((D, N), np.float32)), cp.empty((D, N), store))
W = kernels.narrow_copy(cp.asarray(rng.standard_normal((H, D), np.float32) * 0.05), cp.empty((H, D), store))
b = cp.zeros(H, np.float32)


def timed(f, reps=50):
    f()
    times = []
    for _ in range(5):
        start, stop = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        for _ in range(reps):
            f()
        stop.record()
        stop.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, stop) / reps * 1e3)
    return float(np.median(times))


for n in (2096, 2100, 2104):
    acts = cp.empty(H * n, store).reshape(H, n)
    dz = kernels.narrow_copy(cp.asarray(rng.standard_normal((H, n), np.float32)), cp.empty((H, n), store))
    dW = cp.empty((H, D), np.float32)
    for start in (0, 2100, 4200):
        Xb = X[:, start:start + n]
        row = {"H": H, "n": n, "start": start,
               "forward_us": timed(lambda: kernels.half_gemm(W, Xb, acts, b)),
               "forward_nobias_us": timed(lambda: kernels.half_gemm(W, Xb, acts)),
               "weight_gradient_us": timed(lambda: kernels.half_gemm(dz, Xb.T, dW)),
               "bias_sigmoid_us": timed(lambda: kernels.bias_sigmoid(acts, b))}
        print(json.dumps(row), flush=True)


# Part 2 (the first part showed each GEMM as fast at 2100 as at 2096, L2 warm, eager): the GEMMs of cublas_floor's
# epoch (perflab.measure.peers), one kind at a time over the whole epoch's batches, eager and captured in a graph.
def epoch_gemms(n_batch, captured):
    Xd = cp.ascontiguousarray(X.T).T  # D x N, F-ordered, as the floor keeps it
    W2 = kernels.narrow_copy(cp.asarray(rng.standard_normal((10, H), np.float32)), cp.empty((10, H), store))
    a1, d1 = cp.empty(H * n_batch, store), cp.empty(H * n_batch, store)
    a2, d2 = cp.empty(10 * n_batch, store), cp.empty(10 * n_batch, store)
    dW1, dW2 = cp.empty((H, D), np.float32), cp.empty((10, H), np.float32)
    kinds = {}
    for s in range(0, N, n_batch):
        n = min(n_batch, N - s)
        A1, D1 = a1[:H * n].reshape(H, n), d1[:H * n].reshape(H, n)
        A2, D2 = a2[:10 * n].reshape(10, n), d2[:10 * n].reshape(10, n)
        Xb = Xd[:, s:s + n]
        for name, call in (("fwd1", (W, Xb, A1)), ("fwd2", (W2, A1, A2)), ("wgrad2", (D2, A1.T, dW2)),
                           ("igrad2", (W2.T, D2, D1)), ("wgrad1", (D1, Xb.T, dW1))):
            kinds.setdefault(name, []).append(call)
    stream = cp.cuda.Stream(non_blocking=True)
    out = {}
    with stream:
        for name, calls in kinds.items():
            def run(calls=calls):
                for a_, b_, o in calls:
                    kernels.half_gemm(a_, b_, o)
            if captured:
                run()
                stream.begin_capture()
                run()
                graph = stream.end_capture()
                out[name] = timed(lambda: graph.launch(stream), reps=10)
            else:
                out[name] = timed(run, reps=10)
    return out


for captured in (False, True):
    for n in (2096, 2100, 2104):
        print(json.dumps({"H": H, "n": n, "captured": captured, "epoch_us": epoch_gemms(n, captured)}), flush=True)
