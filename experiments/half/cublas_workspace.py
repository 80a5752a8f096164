"""Does cuBLAS's workspace decide the memsets and gaps before its BF16 GEMMs in a graph? (session 56, issue 68 item 1)

At 784-2048-2048-10, B = 3200, the BF16 step's cuBLAS forward GEMMs each open with a memset and 1.3-4.2 us of gaps
(logs/step_timeline_h200_cublas_wgmma_885f8f6.txt), about 11 us of a 245 us step with the memsets. perflab sets the
stream on CuPy's handle at every call, and cublasSetStream resets the handle to cuBLAS's default workspace pool. A
MODE a process:

  default     as perflab calls cuBLAS now
  workspace   a 32 MiB workspace of our own set after each cublasSetStream (NVIDIA's size for Hopper)
  none        no workspace at all (cublasSetWorkspace with 0 bytes)

    python cublas_workspace.py gemms MODE OUT.jsonl   the 30 half-step shapes, cuBLAS BF16, graph replays (median)
    python cublas_workspace.py trace MODE OUT.txt     PyTorch's profiler over one replay of two H = 2048 GEMMs
    python cublas_workspace.py train MODE OUT.jsonl   epochs of "perflab (bf16)" and "cublas floor (bf16)"

What it found (one H200, ff0cc06, logs/cublas_workspace_*): with no workspace cuBLAS runs the products (a 16-bit C)
with no memset and up to 11% faster, and the weight gradients (float C) up to 30% slower; our own 32 MiB ran as the
default. perflab now makes a half product with none (docs/DECISIONS.md, D76), so on later trees "default" is that,
and the other two modes set every call's workspace after perflab's choice.
"""
import contextlib
import ctypes
import json
import sys

import numpy as np

COMMANDS, MODES = ("gemms", "trace", "train"), ("default", "workspace", "none")
WORKSPACE_BYTES = 32 << 20


def use(mode):
    """Every cuBLAS call of this process (perflab's module attribute, looked up at each call) in `mode`."""
    from perflab.kernels import cublas
    if mode == "default":
        return
    import cupy as cp
    plain = cublas.handle_on_stream
    buffer = cp.cuda.alloc(WORKSPACE_BYTES) if mode == "workspace" else None  # allocated outside any capture

    @contextlib.contextmanager
    def with_workspace(tf32=False, **rest):   # (rest: handle_on_stream's workspace= on trees after D76)
        with plain(tf32, **rest) as (lib, handle):
            ptr, size = (buffer.ptr, WORKSPACE_BYTES) if buffer is not None else (0, 0)
            status = lib.cublasSetWorkspace_v2(ctypes.c_void_p(handle), ctypes.c_void_p(ptr), ctypes.c_size_t(size))
            if status != 0:
                raise RuntimeError(f"cublasSetWorkspace failed with status {status}")
            yield lib, handle
    cublas.handle_on_stream = with_workspace


def gemms(path):
    import cupy as cp

    from perflab import kernels
    from perflab.measure.gemm_inputs import half_gemm_shapes, operand_sets, rotating, weight_gradient
    from perflab.timing import time_graph_ms
    store = kernels.HALF_STORAGE["bfloat16"]
    with open(path, "a") as out:
        for name, M, K, N, ta, tb in half_gemm_shapes((512, 1024, 2048), (3200, 12000)):
            inputs = [tuple(kernels.narrow_copy(x, cp.empty_like(x, dtype=store)) for x in pair)
                      for pair in operand_sets(cp, M, K, N, ta, tb)]
            c = cp.empty((M, N), np.float32 if weight_gradient(name) else store)
            call = rotating(inputs, lambda a, b: kernels.half_gemm(a, b, c, variant="cublas"))
            ms = time_graph_ms(cp, call, calls=2 * len(inputs), repeats=20)
            out.write(json.dumps({"mode": MODE, "shape": name, "M": M, "K": K, "N": N, "ms": ms}) + "\n")


def trace(path):
    import cupy as cp
    import torch
    from torch.profiler import ProfilerActivity, profile

    from perflab import kernels
    store = kernels.HALF_STORAGE["bfloat16"]
    rng = np.random.default_rng(0)

    def held(shape):
        return kernels.narrow_copy(cp.asarray(rng.uniform(-1, 1, shape).astype(np.float32)), cp.empty(shape, store))
    W1, X, W2 = held((2048, 784)), held((784, 3200)), held((2048, 2048))
    a1, z2 = cp.empty((2048, 3200), store), cp.empty((2048, 3200), store)

    def step():  # the step's two forward GEMMs at 784-2048-2048-10, B = 3200, as the trainer lays them out
        kernels.half_gemm(W1, X, a1, variant="cublas")
        kernels.half_gemm(W2, a1, z2, variant="cublas")
    step()
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        stream.begin_capture()
        step()
        graph = stream.end_capture()
    graph.launch(stream)
    stream.synchronize()
    torch.cuda.init()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(3):
            graph.launch(stream)
        stream.synchronize()
    with open(path, "a") as out:
        out.write(f"== {MODE}\n")
        for e in prof.events():
            if e.device_type == torch.autograd.DeviceType.CUDA and e.time_range.elapsed_us() > 0:
                out.write(f"{e.time_range.start:14.1f} {e.time_range.elapsed_us():8.2f} us  {e.name[:90]}\n")


def train(path):
    from perflab.measure.peers import run_peer
    with open(path, "a") as out:
        for H, B in ((1024,), 3200), ((1024,), 12000), ((1024, 1024), 3200), ((2048, 2048), 3200):
            for peer in ("perflab (bf16)", "cublas floor (bf16)"):
                ms = run_peer(peer, H, B, 60000, 0.1, 1e-4, warmup=2, repeats=5)
                out.write(json.dumps({"mode": MODE, "H": "-".join(map(str, H)), "B": B, "peer": peer,
                                      "epoch_ms": ms}) + "\n")


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] not in COMMANDS:
        sys.exit(f"cublas_workspace.py: a command ({', '.join(COMMANDS)}), a mode and a file, got {sys.argv[1:]}\n{__doc__}")
    MODE = sys.argv[2]
    if MODE not in MODES:
        sys.exit(f"cublas_workspace.py: the modes are {', '.join(MODES)}, got {MODE!r}")
    use(MODE)
    {"gemms": gemms, "trace": trace, "train": train}[sys.argv[1]](sys.argv[3])
