"""Model parallel on GPUs with the fused trainer's kernels (perflab.train.gpu.FusedGPU): its hooks say which
layers' outputs and input gradients are partial sums all-reduced over the ranks."""
from __future__ import annotations

import numpy as np

from perflab.train import model
from perflab.train.gpu import FusedGPU
from perflab.train.parallel import gather_shards, sharded_forward


class FusedModelParallel(FusedGPU):
    """Model parallel on GPUs with the fused trainer's kernels, any depth (seeds' 001, section 4.3, and the
    HKUST lecture's partition by layers in turn): each layer split as parallel.layer_splits says, the
    hidden layers by rows and by columns in turn, the output layer by columns after a row-split layer
    (else replicated), the data replicated. A column-split layer's GEMM leaves every rank a partial sum
    of its whole output, all-reduced before its bias and sigmoid (the C x B logits at one hidden layer);
    backward, a row-split layer's input gradient is all-reduced the same way; nothing else is
    exchanged (each rank's gradients are its shard's; a replicated layer's are the same everywhere).
    One rank: the data-parallel trainer's step exactly; the whole step one CUDA graph with NCCL
    (launched one by one with a CUDA-aware MPI, which a graph cannot hold)."""

    name = "model"

    def __init__(self, cfg, X, y, comm, gemm="cublas", graphs=True):
        from perflab.train.parallel import ParallelError, layer_splits
        self.splits = layer_splits(len(cfg.hidden_sizes) + 1)
        narrow = [h for h, kind in zip(cfg.hidden_sizes, self.splits) if kind == "rows" and h < comm.size]
        if narrow:
            raise ParallelError(f"model parallel over {comm.size} ranks needs at least {comm.size} units in each layer "
                                f"it splits by rows (hidden layers 1, 3, ...), got hidden sizes {list(cfg.hidden_sizes)}")
        # the output layer fused (bias + sigmoid + its GEMM in one pass) where its logits need no all-reduce
        super().__init__(cfg, X, y, comm, "resident", gemm, graphs and comm.capturable,
                         fuse_output=comm.size == 1 or self.splits[-1] == "whole")
        self.whole_graph = True  # the all-reduces are inside the step; the update exchanges nothing
        if comm.size > 1:  # the loss's L2 term is summed over the ranks: a replicated layer's counted once
            scale = [1 / comm.size if kind == "whole" else 1.0 for kind in self.splits for _ in (0, 1)]
            self.penalty_regs = self.regs * self.cp.asarray(scale, self.regs.dtype)
            self.settle()

    def shard(self):
        from perflab.train.comm import share
        full = model.init_params(self.cfg.layer_sizes, self.cfg.storage_dtype, self.cfg.seed)
        out = []
        for W, b, kind in zip(full[0::2], full[1::2], self.splits):
            if kind == "rows":
                rows = slice(*share(W.shape[0], self.comm.size, self.comm.rank))
                out += [W[rows].copy(), b[rows].copy()]
            elif kind == "columns":
                out += [np.ascontiguousarray(W[:, slice(*share(W.shape[1], self.comm.size, self.comm.rank))]), b.copy()]
            else:
                out += [W.copy(), b.copy()]
        return out, self.cfg.batch_size

    def local(self, index):
        return index  # every rank takes the whole batch

    def output_exchanged(self, l: int) -> bool:
        return self.comm.size > 1 and self.splits[l] == "columns"

    def gradient_exchanged(self, l: int) -> bool:
        return self.comm.size > 1 and self.splits[l] == "rows"

    def exchange_and_update(self):
        self.update()  # the gradients are this rank's own shard's

    def batch_loss(self, global_b: int) -> float:
        ce, penalty = self.loss_parts()
        return ce / global_b + self.comm.allreduce_scalar(penalty)  # each rank's L2 term is its shard's

    def predict(self, X, chunk: int = 8192):
        with self.stream:
            out = self.cp.concatenate([sharded_forward(self.params, self.splits, self.comm,
                                                       self.cp.asarray(X[:, i:i + chunk]))[-1].argmax(axis=0)
                                       for i in range(0, X.shape[1], chunk)])
        self.stream.synchronize()
        return out

    def full_params(self) -> list:
        self.stream.synchronize()
        return gather_shards(self.params, self.comm, self.splits)
