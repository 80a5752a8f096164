"""Does a push of a BF16 gradient to the peer overlap a GEMM? (session 59) copy_engine.patch's trials found a GEMM and
a cudaMemcpyAsync to the peer beside it took about the sum of their times. If the runtime made that copy with a
kernel, it waited for SMs the GEMM held. Two ranks on two GPUs, each pushing its buffer into the peer's (mapped by
IPC) while a BF16 GEMM of 784-2048-2048-10's dz_1 (2048 x 2048 x 3000) runs on another stream; the copy made by:
- `memcpyAsync`: cudaMemcpyAsync, cudaMemcpyDefault (the trials' way);
- `batch, overlap`: cudaMemcpyBatchAsync with cudaMemcpyFlagPreferOverlapWithCompute (CUDA 12.8+: a hint to
  overlap the copy with compute work);
- `SM copy`: an elementwise kernel storing into the peer's buffer.
Each alone and beside the GEMM; device-side events, the median of 20 after 3, the ranks started together by a
barrier. One JSON line a row (rank 0's).

    mpirun -n 2 python experiments/p2p/overlap_probe.py
"""
import ctypes
import glob
import json
import os

import cupy as cp
import numpy as np

from perflab import kernels
from perflab.train.comm import for_gpu, world
from perflab.train.gpu import select_device


class MemLocation(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class MemcpyAttributes(ctypes.Structure):
    _fields_ = [("srcAccessOrder", ctypes.c_int), ("srcLocHint", MemLocation), ("dstLocHint", MemLocation),
                ("flags", ctypes.c_uint)]


def cudart():
    major = cp.cuda.runtime.runtimeGetVersion() // 1000
    roots = [os.path.dirname(cp.__file__), *(p for p in os.environ.get("LD_LIBRARY_PATH", "").split(":") if p)]
    for name in [f"libcudart.so.{major}", "libcudart.so"] + [f for r in roots for f in glob.glob(
            os.path.join(r, "..", "nvidia", "cu*", "lib", "libcudart.so*"))]:
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    raise OSError("libcudart not found")


comm = world()
select_device(comm)
p2p = for_gpu(comm, "p2p")
lib = cudart()
rows = []
SIZES = {"784-1024-1024-10's W_2": 1024 * 1024 * 2, "784-2048-2048-10's W_2": 2048 * 2048 * 2}
W, dz = cp.full((2048, 2048), 0x3C00, cp.uint16), cp.full((2048, 3000), 0x3C00, cp.uint16)
out = cp.empty((2048, 3000), cp.uint16)
main, side = cp.cuda.Stream(non_blocking=True), cp.cuda.Stream(non_blocking=True)
store = cp.ElementwiseKernel("uint64 x", "uint64 y", "y = x", "perflab_sm_push")


def timed(what, gemm, copy, **extra):
    """The span from an event on main (side waits on it) to main's end (after side's), median of 20 after 3."""
    times = []
    for i in range(23):
        cp.cuda.Device().synchronize()
        comm.barrier()
        start, end, joined = cp.cuda.Event(), cp.cuda.Event(), cp.cuda.Event()
        start.record(main)
        side.wait_event(start)
        if gemm:
            with main:
                kernels.half_gemm(W, dz, out)
        if copy:
            copy()
        joined.record(side)
        main.wait_event(joined)
        end.record(main)
        end.synchronize()
        if i >= 3:
            times.append(cp.cuda.get_elapsed_time(start, end) * 1e3)
    rows.append({"what": what, "us": float(np.median(times)), "rank": comm.rank, **extra})


timed("GEMM alone", True, None)
for label, nbytes in SIZES.items():
    p2p.register(nbytes // 4 + 1, np.float32)  # G: the peers map it; its first nbytes are the landing
    src = cp.full(nbytes // 8, 7, cp.uint64)
    peer = int(p2p.grads[1 - comm.rank].get())
    landing = cp.ndarray(nbytes // 8, cp.uint64,
                         cp.cuda.MemoryPointer(cp.cuda.UnownedMemory(peer, nbytes, None, cp.cuda.Device().id), 0))
    dsts, srcs = (ctypes.c_void_p * 1)(peer), (ctypes.c_void_p * 1)(src.data.ptr)
    sizes, idx = (ctypes.c_size_t * 1)(nbytes), (ctypes.c_size_t * 1)(0)
    attrs = (MemcpyAttributes * 1)(MemcpyAttributes(1, MemLocation(0, 0), MemLocation(0, 0), 1))

    def memcpy():
        cp.cuda.runtime.memcpyAsync(peer, src.data.ptr, nbytes, 4, side.ptr)

    def batch():
        status = lib.cudaMemcpyBatchAsync(dsts, srcs, sizes, ctypes.c_size_t(1), attrs, idx, ctypes.c_size_t(1),
                                          ctypes.c_void_p(side.ptr))
        if status != 0:
            raise RuntimeError(f"cudaMemcpyBatchAsync failed with status {status}")

    def sm_copy():
        with side:
            store(src, landing)
    for way, copy in (("memcpyAsync", memcpy), ("batch, overlap", batch), ("SM copy", sm_copy)):
        try:
            timed(f"{way} alone", False, copy, bytes=nbytes, gradient=label)
            timed(f"{way} beside the GEMM", True, copy, bytes=nbytes, gradient=label)
        except Exception as exc:  # noqa: BLE001  (a probe: say what failed and go on)
            rows.append({"what": way, "error": repr(exc)[:300], "rank": comm.rank})
if comm.rank == 0:
    for r in rows:
        print(json.dumps(r))
