"""The seeds' staged path, pipelined: the same copies and host all-reduce as `--mode staged`, on
streams that overlap them with compute (the seeds' final assignment names the cure: "pipelining
various MPI and CUDA memcpy operations ... using CUDA streams"; the HKUST lecture adds the input
pipeline and the overlap of the exchange with backward).

  images     the data set sits in page-locked host memory; batch k+1 is copied host -> device on
             a copy stream into the second of two device buffers while batch k computes
  gradients  backward's small gradients (db1, dW2, db2 and the loss slot: G's tail) go device ->
             host on a `down` stream as soon as they exist, then dW1 in row chunks, each behind its
             chunk of backward GEMM 3; the host all-reduces each piece (MPI) as it arrives, while
             the next pieces compute and copy, and sends it back on an `up` stream
  update     waits for the last piece, then one launch as in every mode
One GPU: the whole step is a CUDA graph (one per buffer), as in resident mode. Several: the step up
to the pieces' copies down is one graph, each copy followed by a 4-byte flag the host polls, so the
host is free to all-reduce from the first piece on; launched kernel by kernel, the host was still
launching when backward ended (docs/DECISIONS.md, D17).
"""
from __future__ import annotations

import time

import numpy as np

from perflab.train import profile
from perflab.train.gpu import FusedGPU, GPUError
from perflab.train.parallel import local_part
from perflab.train.pinned import pinned_copy
from perflab.train.profile import phase

HOST_TO_DEVICE, DEVICE_TO_HOST = 1, 2  # cudaMemcpyKind


def same_part(a, b) -> bool:
    if isinstance(a, slice) or isinstance(b, slice):
        return a == b
    return a is not None and b is not None and len(a) == len(b) and bool(np.array_equal(a, b))


class Pipelined(FusedGPU):
    """Data-parallel GPU trainer on the seeds' host-staged path, its copies and MPI overlapped."""

    def __init__(self, cfg, X, y, comm, gemm="cublas", graphs=True, chunks=4):
        super().__init__(cfg, X, y, comm, mode="staged", gemm=gemm, graphs=False, pinned=True)
        cp = self.cp
        self.mode, self.graphs = "pipelined", graphs and not cfg.shuffle
        D, H = self.cfg.layer_sizes[:2]
        self.y = pinned_copy(np.ascontiguousarray(y))
        self.Xdev = [self.Xdev, cp.empty_like(self.Xdev)]
        self.ydev = [self.ydev, cp.empty_like(self.ydev)]
        self.gathered = [None, None]  # pinned buffers for shuffled batches (gathered on the host)
        self.copy_stream = cp.cuda.Stream(non_blocking=True)
        event = lambda: cp.cuda.Event(disable_timing=True)
        self.copied, self.consumed = [event(), event()], [event(), event()]
        for e in self.consumed:
            e.record(self.stream)
        self.prefetched, self.free_slot = None, 0
        if comm.size > 1:
            rows = -(-H // chunks)
            self.chunks = [(r, min(r + rows, H)) for r in range(0, H, rows)]
            self.hostG = pinned_copy(np.zeros(self.G.size, self.G.dtype))
            self.down, self.up = cp.cuda.Stream(non_blocking=True), cp.cuda.Stream(non_blocking=True)
            self.produced = [event() for _ in range(len(self.chunks) + 1)]
            self.returned, self.joined = event(), event()
            self.sent = []
            # landed[j] = 1 once piece j is on the host: a graph's replay records no event the host can wait on
            self.landed = pinned_copy(np.zeros(len(self.chunks) + 1, np.int32))
            self.one = cp.ones(1, np.int32)

    # -- the input pipeline -------------------------------------------------------------------
    def prefetch(self, part, slot: int) -> None:
        """Enqueue this rank's share `part` of a batch into device buffer `slot` on the copy stream,
        once the step that last read that buffer is done."""
        n = (part.stop - part.start) if isinstance(part, slice) else len(part)
        copy = self.copy_stream
        copy.wait_event(self.consumed[slot])
        if isinstance(part, slice):  # contiguous columns of the pinned, column-major data set
            X, y = self.X[:, part], self.y[part]
        else:  # a shuffled batch: gathered into a pinned buffer first (its previous copy must be done)
            self.copied[slot].synchronize()
            if self.gathered[slot] is None:
                self.gathered[slot] = (pinned_copy(np.zeros(self.Xdev[0].shape, self.X.dtype, order="F")),
                                       pinned_copy(np.zeros(self.ydev[0].shape, self.y.dtype)))
            X, y = self.gathered[slot][0][:, :n], self.gathered[slot][1][:n]
            np.take(self.X, part, axis=1, out=X)
            np.take(self.y, part, out=y)
        with copy, phase("copying images host -> device"):
            self.memcpy(self.Xdev[slot][:, :n], X, HOST_TO_DEVICE, copy)
            self.memcpy(self.ydev[slot][:n], y, HOST_TO_DEVICE, copy)
        self.copied[slot].record(copy)
        self.prefetched = (part, slot)

    def memcpy(self, device, host: np.ndarray, kind: int, stream) -> None:
        """Asynchronous copy between a contiguous device array and pinned host memory of equal size."""
        assert device.nbytes == host.nbytes and (host.flags.c_contiguous or host.flags.f_contiguous)
        src, dst = (host.ctypes.data, device.data.ptr) if kind == HOST_TO_DEVICE else (device.data.ptr, host.ctypes.data)
        self.cp.cuda.runtime.memcpyAsync(dst, src, host.nbytes, kind, stream.ptr)

    def ready(self, part) -> int:
        """The device buffer holding `part`: prefetched, or copied now."""
        if self.prefetched is None or not same_part(self.prefetched[0], part):
            self.prefetch(part, self.free_slot)
        slot = self.prefetched[1]
        self.prefetched, self.free_slot = None, 1 - slot
        return slot

    def batch(self, index):
        rank, size = self.comm.rank, self.comm.size
        part = local_part(index, rank, size)
        global_b = (index.stop - index.start) if isinstance(index, slice) else len(index)
        n = (part.stop - part.start) if isinstance(part, slice) else len(part)
        slot, want = self.ready(part), self.want_loss
        if self.upcoming is not None:  # the next batch copies while this one computes
            self.prefetch(local_part(self.upcoming, rank, size), 1 - slot)
        Xb, yb = self.Xdev[slot][:, :n], self.ydev[slot][:n]
        with self.stream:
            self.stream.wait_event(self.copied[slot])
            if self.graphs and not profile.recording():
                if size == 1:
                    self.replay((slot, n, want), self.step, Xb, yb, global_b, want)
                else:  # the graph up to the pieces' copies down; the host all-reduces them as they land
                    fresh = (slot, n, want) not in self.cache
                    self.replay((slot, n, want), self.gradients, Xb, yb, global_b, want)
                    if fresh:  # replay ran the step once before its capture: let its copies land before the flags count
                        self.stream.synchronize()
                    self.exchange_and_update()
            else:
                self.step(Xb, yb, global_b, want)
            self.consumed[slot].record(self.stream)
        return self.batch_loss(global_b) if want else None

    # -- the gradient pipeline (several GPUs) ---------------------------------------------------
    def first_weight_gradient(self, dz1, Xb, dW1, unsent: int):
        """G's tail goes down first (it is complete before dW1's GEMM), then each dW1 row chunk behind its GEMM."""
        if self.comm.size == 1:
            return super().first_weight_gradient(dz1, Xb, dW1, unsent)
        self.join_side()  # the tail holds the upper layers' dW_l, made on the side stream
        D = dW1.shape[1]
        self.sent = []
        self.send(dW1.size, self.G.size)
        for r0, r1 in self.chunks:
            with phase(self.last_gemm):
                self.gemm(dz1[r0:r1], Xb.T, dW1[r0:r1])
            self.send(r0 * D, r1 * D)
        self.joined.record(self.down)  # the down stream joins back (a graph's capture must end on one stream)
        self.cp.cuda.get_current_stream().wait_event(self.joined)

    def send(self, lo: int, hi: int) -> None:
        """G[lo:hi] device -> host on the down stream once the compute stream has made it."""
        j = len(self.sent)
        self.produced[j].record(self.cp.cuda.get_current_stream())
        self.down.wait_event(self.produced[j])
        with self.down, phase("cudaMemcpyDeviceToHost"):
            self.memcpy(self.G[lo:hi], self.hostG[lo:hi], DEVICE_TO_HOST, self.down)
            self.memcpy(self.one, self.landed[j:j + 1], DEVICE_TO_HOST, self.down)  # after it, in stream order
        self.sent.append((lo, hi))

    def wait_landed(self, j: int, limit_s: float = 60.0) -> None:
        """Spin until piece j's flag says it is on the host (the copies are in stream order: its bytes
        first); a step that never lands it raises instead of hanging, with the down stream's error."""
        start = time.perf_counter()
        while not self.landed[j]:
            if time.perf_counter() - start > limit_s:
                self.down.synchronize()  # raises the CUDA error that stopped the copies, if any
                raise GPUError(f"gradient piece {j} did not reach the host in {limit_s:g} s")

    def exchange_and_update(self):
        """Each piece all-reduced on the host as it arrives and sent back up; the update waits for the last."""
        if self.comm.size == 1:
            return super().exchange_and_update()
        start = time.perf_counter()
        for j, (lo, hi) in enumerate(self.sent):
            self.wait_landed(j)
            with phase("MPI_Allreduce"):
                self.comm.reduce_host(self.hostG[lo:hi])
            with self.up, phase("cudaMemcpyHostToDevice"):
                self.memcpy(self.G[lo:hi], self.hostG[lo:hi], HOST_TO_DEVICE, self.up)
        self.landed[:] = 0  # every flag seen: clear them for the next step's pieces
        self.returned.record(self.up)
        self.cp.cuda.get_current_stream().wait_event(self.returned)
        self.comm.records.append({"op": "allreduce", "strategy": "pipelined " + self.comm.strategy,
                                  "rank": self.comm.rank, "ranks": self.comm.size, "bytes": self.G.nbytes,
                                  "seconds": time.perf_counter() - start})
        self.update()
