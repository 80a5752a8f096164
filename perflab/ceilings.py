"""`perflab ceilings`: microbenchmarks of the machine it runs on, for the rooflines.

Rows (tidy): ceiling, size_bytes or shape, ranks, value, unit. Measured where they apply:
  gemm_flops       GEMM rate at the training shapes: BLAS on the CPU; cuBLAS and perflab's
                   best kernel on the GPU
  h2d / d2h        host <-> device bandwidth against size, pageable and pinned (GPU)
  device_copy      device-to-device copy, bytes read + written (GPU)
  mpi_allreduce    host MPI all-reduce against size and p: algorithm bandwidth S/t and the
                   bus bandwidth 2(p-1)/p * S/t (the nccl-tests definition)
  nccl_allreduce   the same through NCCL on device buffers (several GPUs)
"""
from __future__ import annotations

import statistics
import time

import numpy as np

SIZES = [2**k for k in range(12, 29, 2)]  # 4 KiB .. 256 MiB
TRAINING_SHAPES = [(512, 784, 3200), (1024, 784, 3200), (2048, 784, 12000), (512, 3200, 784)]


def median_seconds(fn, repeats: int = 10, warmup: int = 2, sync=lambda: None) -> float:
    for _ in range(warmup):
        fn()
    sync()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def cpu_gemm(shapes=TRAINING_SHAPES, dtype="float32", repeats=5) -> list[dict]:
    rows = []
    rng = np.random.default_rng(0)
    for M, K, N in shapes:
        a, b = rng.random((M, K)).astype(dtype), rng.random((K, N)).astype(dtype)
        out = np.empty((M, N), dtype)
        t = median_seconds(lambda: np.matmul(a, b, out=out), repeats)
        rows.append({"ceiling": "gemm_flops", "device": "cpu", "impl": "numpy BLAS", "dtype": dtype,
                     "shape": f"{M}x{K}x{N}", "size_bytes": a.nbytes + b.nbytes, "ranks": 1,
                     "value": 2 * M * K * N / t, "unit": "FLOP/s"})
    return rows


def mpi_allreduce(comm, sizes=SIZES, repeats=10) -> list[dict]:
    """Host MPI all-reduce of float32 buffers; rank 0's median over repeats (barrier first)."""
    rows = []
    p = comm.size
    for size in sizes:
        buf = np.ones(size // 4, np.float32)
        def call():
            comm.comm.Allreduce(comm.MPI.IN_PLACE, buf, op=comm.MPI.SUM)
        comm.barrier()
        t = median_seconds(call, repeats, sync=comm.barrier)
        rows.append({"ceiling": "mpi_allreduce", "device": "cpu", "impl": comm.MPI.Get_library_version().split()[0],
                     "dtype": "float32", "shape": "", "size_bytes": size, "ranks": p, "seconds": t,
                     "value": size / t, "bus_value": 2 * (p - 1) / p * size / t, "unit": "B/s"})
    return rows


def gpu_ceilings(sizes=SIZES, shapes=TRAINING_SHAPES, repeats=10) -> list[dict]:
    import cupy as cp

    from . import kernels
    from .bench import device_copy_rate, time_ms
    rows = []
    rng = np.random.default_rng(0)
    for M, K, N in shapes:
        a = cp.asarray(rng.random((M, K), dtype=np.float32))
        b = cp.asarray(rng.random((K, N), dtype=np.float32))
        out = cp.empty((M, N), cp.float32)
        for impl in ("cublas", "best"):
            ms = time_ms(cp, lambda: kernels.gemm(a, b, out=out, variant=impl), repeats)
            rows.append({"ceiling": "gemm_flops", "device": "gpu", "impl": impl, "dtype": "float32",
                         "shape": f"{M}x{K}x{N}", "size_bytes": a.nbytes + b.nbytes, "ranks": 1,
                         "value": 2 * M * K * N / (ms * 1e-3), "unit": "FLOP/s"})
    rows.append({"ceiling": "device_copy", "device": "gpu", "impl": "cupy copy", "dtype": "float32", "shape": "",
                 "size_bytes": 1 << 30, "ranks": 1, "value": device_copy_rate(cp), "unit": "B/s"})
    stream = cp.cuda.Stream(non_blocking=True)
    for pinned in (False, True):
        for size in sizes:
            dev = cp.empty(size, cp.uint8)
            if pinned:
                host = np.frombuffer(cp.cuda.alloc_pinned_memory(size), np.uint8, size)
            else:
                host = np.empty(size, np.uint8)
            host[:] = 1
            for direction in ("h2d", "d2h"):
                def copy():
                    if direction == "h2d":
                        dev.set(host, stream=stream)
                    else:
                        dev.get(out=host, stream=stream)
                t = median_seconds(copy, repeats, sync=stream.synchronize)
                rows.append({"ceiling": direction, "device": "gpu", "impl": "pinned" if pinned else "pageable",
                             "dtype": "uint8", "shape": "", "size_bytes": size, "ranks": 1, "value": size / t, "unit": "B/s"})
    return rows


def nccl_allreduce(comm, sizes=SIZES, repeats=20) -> list[dict]:
    """NCCL all-reduce of float32 device buffers (the comm must be an NCCLComm)."""
    import cupy as cp
    rows = []
    p = comm.size
    stream = cp.cuda.Stream(non_blocking=True)
    for size in sizes:
        buf = cp.ones(size // 4, cp.float32)
        with stream:
            def call():
                comm.communicator.allReduce(buf.data.ptr, buf.data.ptr, buf.size, comm.types["float32"],
                                            comm.nccl.NCCL_SUM, stream.ptr)
            comm.barrier()
            t = median_seconds(call, repeats, sync=stream.synchronize)
        rows.append({"ceiling": "nccl_allreduce", "device": "gpu", "impl": "nccl", "dtype": "float32", "shape": "",
                     "size_bytes": size, "ranks": p, "seconds": t, "value": size / t,
                     "bus_value": 2 * (p - 1) / p * size / t, "unit": "B/s"})
    return rows


def measure(comm, gpu: bool, sizes=SIZES, log=print) -> list[dict]:
    """Everything that applies here; rank 0's rows are the ones kept."""
    rows = []
    if comm.rank == 0:
        log("CPU GEMM ...")
        rows += cpu_gemm()
    if comm.size > 1:
        log("MPI all-reduce ...") if comm.rank == 0 else None
        rows += mpi_allreduce(comm, sizes)
    if gpu:
        from .comm import for_gpu
        from .gpu import select_device
        select_device(comm)
        if comm.rank == 0:
            log("GPU GEMM, copies ...")
            rows += gpu_ceilings(sizes)
        if comm.size > 1:
            rows += nccl_allreduce(for_gpu(comm, "nccl"), sizes)
    return rows
