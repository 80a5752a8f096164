"""The fused GPU trainer's forward and backward passes (perflab.train.gpu.FusedGPU: the plan in its docstring),
on the trainer's buffers; model parallel (perflab.train.model_parallel_gpu) and the pipelined path
(perflab.train.pipelined) override its hooks."""
from __future__ import annotations

import contextlib

from perflab import kernels
from perflab.train import profile
from perflab.train.profile import phase
from perflab.train.step import (
    backward_flags_overflow,
    backward_gemm,
    forward_gemm,
    fused_backward_makes_db_out,
    update_adds_output_sums,
)


class FusedStep:
    """forward and backward into G, for any depth: the trainer supplies params, grads, its buffers, gemm and its
    features (half, overlap, side, tf32_split, peer_exchange)."""

    overflow_found = False  # whether this step's backward passes set float16's overflow flag (overflow_flag)
    partials = None  # the output layer's partial sums the update adds (gradients(leave_sums=True)), or None

    @property
    def last_gemm(self) -> str:
        """The phase name of dW_1 = dz_1 X^T, the step's last GEMM: backward GEMM 2L - 1."""
        return backward_gemm(len(self.params) - 1)

    def gradients(self, Xb, yb, global_b: int, want_loss: bool, first: int = 0, leave_sums: bool = False):
        """Enqueue forward and backward into G (capturable on one GPU; with --overlap, the
        exchange of G's chunks too); the samples are Xb's columns from `first` on, the others' delta zero.
        leave_sums (step, where sums_in_update): the fused output layer's sums of dW_L, db_{L-1} and db_L are left
        to the update's launch (G's last values are then made by update, not here)."""
        W = self.params[0::2]
        Wg = self.half.weights() if self.half else W  # W for the GEMMs (the fused output layer's kernels read W[-1] in FP32)
        n, C = Xb.shape[1], W[-1].shape[0]
        acts = [Xb] + [a[:w.shape[0] * n].reshape(w.shape[0], n) for a, w in zip(self.acts, W)]
        delta = self.delta[:C * n].reshape(C, n)
        with phase("forward"):
            self.forward(Wg, acts, yb, delta, global_b, self.ce[:n] if want_loss else None, first)
        with phase("backward"):
            self.backward(Wg, acts, delta, Xb, want_loss, leave_sums)

    def forward(self, Wg, acts, yb, delta, global_b: int, ce, first: int = 0):
        """Every layer's GEMM and activation, then the softmax's delta (and each sample's CE where `ce`)."""
        W, b = self.params[0::2], self.params[1::2]
        L = len(W)
        fused = self.fuse_output and not profile.ACTIVE  # phases stay separate when profiling
        for l in range(L - 1):  # the hidden layers; the last one's bias + sigmoid waits for the fused pass
            deferred, exchanged = fused and l == L - 2, self.output_exchanged(l)
            with phase(forward_gemm(l + 1)):
                self.gemm(Wg[l], acts[l], acts[l + 1], bias=None if deferred or exchanged else b[l])
            if exchanged:  # the ranks' partial sums of the whole layer, then its bias and sigmoid
                self.comm.allreduce(acts[l + 1])
                if not deferred:
                    kernels.bias_sigmoid(acts[l + 1], b[l])
        if fused:  # bias + sigmoid (in place) + the output GEMM in one pass, then the softmax
            kernels.output_layer(W[-1], b[-2], b[-1], acts[-1], yb, delta, global_b, self.part_forward, ce, self.scale,
                                 first)
            return
        z_out = self.z_out[:delta.size].reshape(delta.shape)
        with phase(forward_gemm(L)):
            self.gemm(Wg[-1], acts[-1], z_out)
        if self.output_exchanged(L - 1):
            self.comm.allreduce(z_out)
        kernels.softmax_xent_grad(z_out, b[-1], yb, delta, global_b, ce, scale=self.scale, first=first)

    def backward(self, Wg, acts, delta, Xb, want_loss: bool, leave_sums: bool = False):
        """Every gradient into G, the output layer's first, dW_1 = dz_1 X^T last."""
        W, dW, db, n, L = self.params[0::2], self.grads[0::2], self.grads[1::2], Xb.shape[1], len(Wg)
        dz = [d[:w.shape[0] * n].reshape(w.shape[0], n) for d, w in zip(self.dz, W)]
        if self.peer_exchange:  # the peers have read the last step's gradient before this one overwrites it
            self.comm.read_wait()
        fused = self.fuse_backward and not profile.ACTIVE
        self.partials = None  # set below where the fused pass leaves its sums to the update
        flag = self.overflow_flag(fused)
        self.overflow_found = flag is not None
        db_out = db[-1] if fused_backward_makes_db_out(self.cfg.dtype, fused) else None
        if db_out is None:
            kernels.row_sum(delta, db[-1])
        # x3tf32: the pass that makes dz_1 writes its TF32 big and small parts, which dW_1's GEMM reads as they are
        small = self.tf32_split.begin(dz[0]) if self.tf32_split else None
        if fused:  # backward GEMMs 1 and 2 + sigmoid' + db_{L-1} (and a half step's db_L) in one pass
            made = kernels.output_backward(W[-1], delta, acts[-1], dz[-1], dW[-1], db[-2], self.part,
                                           small if L == 2 else None, db_out, overflow=flag, reduce=not leave_sums)
            if leave_sums:
                self.partials = made
        else:
            delta_op = self.half.rounded_delta(delta) if self.half else delta
            with phase(backward_gemm(1)):
                self.gemm(delta_op, acts[-1].T, dW[-1], weight_gradient=True)
            with phase(backward_gemm(2)):
                self.gemm(Wg[-1].T, delta_op, dz[-1])
            kernels.sigmoid_backward_rows(dz[-1], acts[-1], db[-2], small if L == 2 else None)
        unsent = self.G.size  # with --overlap, G[unsent:] is already on its way
        if want_loss:  # the CE slot is all-reduced with the gradients (the output layer's slice); stale when unused
            kernels.total(self.ce[:n], self.G[-1:])
        side = self.side_gemms and not profile.ACTIVE  # phases are timed one after another
        for l in range(L - 2, 0, -1):  # hidden layer l + 1 over hidden layer l (1-based): W[l] is W_{l+1}
            k = 2 * (L - l) - 1
            with phase(backward_gemm(k)), self.side.beside() if side else contextlib.nullcontext():
                self.gemm(dz[l], acts[l].T, dW[l], weight_gradient=True)
            if self.overlap:  # layer l + 1 (and those above it, the first time) is final: send it (WFBP)
                unsent = self.overlap.send_layer(l, unsent)
            with phase(backward_gemm(k + 1)):
                self.gemm(Wg[l].T, dz[l], dz[l - 1])
            if self.gradient_exchanged(l):  # the ranks' partial sums of the whole input gradient
                self.comm.allreduce(dz[l - 1])
            kernels.sigmoid_backward_rows(dz[l - 1], acts[l], db[l - 1], small if l == 1 else None, overflow=flag)
        self.side_pending = side  # the side's dW_l run on under dW_1 too, joined after it (join_side)
        if self.tf32_split:
            self.tf32_split.made = True
        if want_loss:
            self.loss.penalize(self.P, self.ends, self.penalty_regs)
        self.first_weight_gradient(dz[0], Xb, dW[0], unsent)
        self.join_side()

    @property
    def sums_in_update(self) -> bool:
        """Whether a step leaves the output layer's sums to the update's launch (gradients(leave_sums=)): where
        step.update_adds_output_sums says, with the update right after the backward."""
        return update_adds_output_sums(self.fuse_backward, self.comm.size) and not self.peer_exchange and not self.overlap

    def overflow_flag(self, fused: bool):
        """float16's overflow flag for the passes that store the step's FP16 gradients to set, or None where the update
        must look for an overflow in G itself (find_overflow; step.backward_flags_overflow says where)."""
        return self.loss_scale.overflow if backward_flags_overflow(self.cfg.dtype, fused, self.comm.size) else None

    def join_side(self):
        """The current stream waits for the side stream's weight gradients, once a step (the exchange and the
        update read them)."""
        if self.side_pending:
            self.side.join()
            self.side_pending = False

    def output_exchanged(self, l: int) -> bool:
        """Whether layer l's GEMM (0-based; L - 1 the output layer) leaves each rank a partial sum of the
        layer's whole output, all-reduced before its bias (model parallel's column-split layers)."""
        return False

    def gradient_exchanged(self, l: int) -> bool:
        """Whether layer l's input gradient W_l^T dz_l is each rank's partial sum, all-reduced (model
        parallel's row-split layers)."""
        return False

    def first_weight_gradient(self, dz1, Xb, dW1, unsent: int):
        """dW_1 = dz_1 X^T, the step's last GEMM (in chunks, each exchanged as it is done, with --overlap;
        the last chunk carries what of G[:unsent] is not dW_1: b_1, and with one hidden layer the rest)."""
        if self.overlap:
            self.overlap.first_weight_gradient(self.gemm, dz1, Xb, dW1, unsent, self.last_gemm)
        else:
            with phase(self.last_gemm):
                self.gemm(dz1, Xb.T, dW1, weight_gradient=True)
