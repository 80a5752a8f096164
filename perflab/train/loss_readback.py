"""The GPU trainer's loss (perflab.train.gpu.FusedGPU): its parts stay on the device through the step (an epoch's
graph holds them) and come back to the host only where the loss is wanted."""
from __future__ import annotations

import numpy as np

from perflab import kernels
from perflab.train.pinned import pinned_copy


class LossReadBack:
    """The CE summed over the ranks (`ce_sum`, the slot the exchange fills), the L2 term (`penalty`, made in the
    step before its update, as the reference's J, with its scratch) and their pinned host copy."""

    def __init__(self, ce_sum, dtype):
        import cupy as cp
        self.ce_sum = ce_sum
        self.penalty, self.l2_part = cp.zeros(1, dtype), cp.empty(kernels.L2_BLOCKS, dtype)
        self.host = pinned_copy(np.zeros(2, dtype))  # the CE sum and the L2 term, read by read()

    def penalize(self, P, ends, regs) -> None:
        """P's L2 term into `penalty`, on the current stream."""
        kernels.l2_penalty(P, ends, regs, self.l2_part, self.penalty.reshape(()))

    def read(self, stream, loss_scale=None) -> tuple[float, float]:
        """The last step's CE sum and L2 term, copied on `stream` into pinned memory (float16's loss-scale counts
        with them) and read once it is done (docs/DECISIONS.md, D38)."""
        import cupy as cp
        copy, size = cp.cuda.runtime.memcpyAsync, self.host.itemsize
        for k, src in enumerate((self.ce_sum, self.penalty)):
            copy(self.host.ctypes.data + k * size, src.data.ptr, size, cp.cuda.runtime.memcpyDeviceToHost, stream.ptr)
        if loss_scale is not None:
            loss_scale.copy_counts(stream)
        stream.synchronize()
        return float(self.host[0]), float(self.host[1])
