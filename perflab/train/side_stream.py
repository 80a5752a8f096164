"""The side stream of a deeper net's backward pass (perflab.train.gpu.FusedGPU): past one hidden layer, each upper
layer's weight gradient dW_l = dz_l a_{l-1}^T runs on a second stream, with cuBLAS's second handle, beside its input
gradient W_l^T dz_l, the sigmoid' pass after it and dW_1 (they only read dz_l), joined once a step
(docs/DECISIONS.md, D33). cuBLAS only (the tile kernels share one split-K workspace), FP32 and FP64; not with
--overlap, whose handoffs follow each dW_l on the main stream."""
from __future__ import annotations

import contextlib


class SideStream:
    """The stream, the events that fork work onto it and join it back, and whether a step's side work is not yet
    joined."""

    def __init__(self):
        import cupy as cp

        from perflab.kernels.cublas import own_handle
        own_handle(cp.cuda.Device().id)  # made here, never inside a graph capture
        self.stream = cp.cuda.Stream(non_blocking=True)
        self.fork, self.joined = cp.cuda.Event(disable_timing=True), cp.cuda.Event(disable_timing=True)

    @contextlib.contextmanager
    def beside(self):
        """Work enqueued in here runs on the side stream (with cuBLAS's second handle) after what the current
        stream has enqueued so far; `joined` marks its end."""
        import cupy as cp

        from perflab.kernels.cublas import side_handle
        self.fork.record(cp.cuda.get_current_stream())
        self.stream.wait_event(self.fork)
        with self.stream, side_handle():
            yield
        self.joined.record(self.stream)

    def join(self) -> None:
        """The current stream waits for the side stream's work (a captured graph's side stream must rejoin it)."""
        import cupy as cp
        cp.cuda.get_current_stream().wait_event(self.joined)
