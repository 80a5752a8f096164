"""x3tf32's split operand in the GPU trainer's step (perflab.train.gpu.FusedGPU, --gemm x3tf32): the pass that
makes dz_1 writes its TF32 big parts into dz[0] and its small parts beside them, which dW_1's GEMM reads as they
are instead of splitting dz_1 again."""
from __future__ import annotations


class TF32Split:
    """dz_1's TF32 small parts (`small`, as large as dz[0]) and whether this step's pass made them (`made`)."""

    def __init__(self, dz1, dtype):
        import cupy as cp
        self.whole = dz1  # dz[0], the flat buffer of dz_1's big parts
        self.small = cp.empty(dz1.size, dtype)
        self.made = False

    def begin(self, dz1):
        """The small parts at dz_1's shape for the pass that makes them; until it has run, dz[0] is not split."""
        self.made = False
        return self.small[:dz1.size].reshape(dz1.shape)

    def small_part(self, a):
        """The view of the small parts at a's place in dz[0], where they are made and a is a view of dz[0], else
        None."""
        import cupy as cp
        if not self.made:
            return None
        whole = self.whole
        offset = a.data.ptr - whole.data.ptr
        if not 0 <= offset < whole.nbytes:
            return None
        flat = self.small[offset // whole.itemsize:]
        return cp.lib.stride_tricks.as_strided(flat, a.shape, a.strides)
