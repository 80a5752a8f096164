"""Half precision on the GPU (perflab.train.gpu.FusedGPU, --dtype bfloat16 | float16): the rounded copies of the
weights and of delta that the GEMMs read, and float16's dynamic loss scale, which lives on the device so that a
graph an epoch holds it; perflab.train.half emulates the same step on NumPy."""
from __future__ import annotations

import numpy as np

from perflab import kernels


class HalfWeights:
    """The weights as the half-precision GEMMs read them (P_half: P rounded by each update) and delta rounded for
    the unfused output layer's GEMMs; the FP32 masters, gradients and update stay in the trainer."""

    def __init__(self, kind: str, P, shapes, views, C: int, bmax: int):
        import cupy as cp
        self.kind, self.store = kind, kernels.HALF_STORAGE[kind]
        self.P_half = kernels.narrow_copy(P, cp.empty(P.size, self.store))
        self.params = views(self.P_half, shapes)
        self.delta = cp.empty(C * bmax, self.store)

    def weights(self) -> list:
        """The GEMMs' weights (every update, sgd_update's or p2p's, rounds P into P_half)."""
        return self.params[0::2]

    def rounded_delta(self, delta):
        return kernels.narrow_copy(delta, self.delta[:delta.size].reshape(delta.shape))

    def images(self, X):
        """The images in half precision, once, C-ordered (docs/DECISIONS.md, D32), each row N rounded up to ALIGN
        and ALIGN more columns long (so every row starts on 16 bytes), the columns past N zero: a widened batch
        (widened) may take them in."""
        import cupy as cp

        from perflab.train.half import check_images
        check_images(X, self.kind)
        wide = cp.zeros((X.shape[0], aligned(X.shape[1]) + ALIGN), self.store)
        wide[:, :X.shape[1]] = kernels.narrow_copy(cp.ascontiguousarray(X), cp.empty(X.shape, self.store))
        return wide


ALIGN = 8  # a half GEMM operand's rows start on 16 bytes: cuBLAS's BF16 GEMMs run far slower otherwise (D59)


def aligned(n: int) -> int:
    """n rounded up to a multiple of ALIGN."""
    return -(-n // ALIGN) * ALIGN


def widest(n: int) -> int:
    """The most columns a widened batch of at most n samples takes."""
    return aligned(n + ALIGN - 1)


def widened(wide, y, part):
    """(Xb, yb, first): a batch's images (wide: HalfWeights.images') widened to a multiple of ALIGN columns that
    starts at a multiple of ALIGN, its samples from column `first` on. A slice takes in its neighbours' images
    (or the zero columns past the last), an index array the first zero column; the softmax gives every extra
    column a zero delta, so none adds to a gradient (docs/DECISIONS.md, D59)."""
    if isinstance(part, slice):
        first = part.start % ALIGN
        start = part.start - first
        return wide[:, start:start + aligned(part.stop - start)], y[part], first
    n = len(part)
    index = np.concatenate([np.asarray(part), np.full(aligned(n) - n, wide.shape[1] - ALIGN)])
    return wide[:, index], y[part], 0


class DeviceLossScale:
    """float16's dynamic loss scale on the device: the scale, whether this step overflowed, and the counts (good
    steps in a row, overflowed in a row, overflowed in all), copied to the host with the loss."""

    def __init__(self, dtype):
        import cupy as cp

        from perflab.train import half
        from perflab.train.pinned import pinned_copy
        self.scale = cp.asarray([half.INITIAL_SCALE["float16"]], dtype)
        self.overflow, self.counts = cp.zeros(1, np.int32), cp.zeros(4, np.int64)  # the 4th: sgd_update_scaled's own
        self.counts_host = pinned_copy(np.zeros(3, np.int64))  # the first three

    def update(self, P, G, learning_rate: float, ends, regs, rounded, find: bool = True) -> None:
        """P's update, skipped where the scaled gradient overflowed, the scale grown or halved; find=False where the
        backward passes have set the overflow flag themselves (FusedStep.overflow_flag)."""
        from perflab.train.half import GROWTH_INTERVAL
        kernels.sgd_update_scaled(P, G, learning_rate, ends, regs, self.scale, self.overflow, self.counts,
                                  GROWTH_INTERVAL, rounded=rounded, find=find)

    def copy_counts(self, stream) -> None:
        import cupy as cp
        cp.cuda.runtime.memcpyAsync(self.counts_host.ctypes.data, self.counts.data.ptr, self.counts_host.nbytes,
                                    cp.cuda.runtime.memcpyDeviceToHost, stream.ptr)

    def check(self) -> int:
        """The steps skipped so far; LossScaleError where the scale overflowed step after step (read with the
        loss, so at the latest where the epoch ends)."""
        from perflab.train.half import MOST_SKIPS, overflow_error
        good, in_a_row, skipped = (int(v) for v in self.counts_host)
        if in_a_row >= MOST_SKIPS:
            raise overflow_error("float16", in_a_row, "on the GPU", float(self.scale.get()[0]))
        return skipped
