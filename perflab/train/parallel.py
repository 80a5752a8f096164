"""Data-parallel and model-parallel trainers over a communicator (perflab.train.comm).

Data parallel (seeds' HW6 Problem 1): parameters replicated; each global mini-batch of B is
split over p ranks (sizes differ by at most one); each rank's gradient is divided by the
global B, so the all-reduced sum is the sequential gradient; regularization is added once,
after the exchange. One all-reduce a batch, over one fused buffer holding every gradient
(and the batch's cross-entropy sum, so the loss costs no extra message).

Model parallel (seeds' 001 section 4.3 and 003's model-parallel note; the HKUST lecture's two kinds of
partition, alternated as Megatron-LM splits an MLP): hidden layers 1, 3, 5, ... split by rows (their
units: W_l's rows and b_l's entries, the input whole), layers 2, 4, ... by columns (W_l's columns, the
input units the layer below split; b_l whole), one all-reduce of the partial z_l after each
column-split layer. With one hidden layer that is W1 by rows, W2 by columns and one all-reduce of the
C x B partial logits a batch; with an odd number of layers the output layer sees a whole input and is
replicated (every rank computes it alike). Backward: a row-split layer's input gradient is partial
(all-reduced where a layer lies below); every other gradient is a rank's own.
"""
from __future__ import annotations

import numpy as np

from perflab.backend import xp_of
from perflab.config import Config, ConfigError
from perflab.train import model
from perflab.train.comm import share
from perflab.train.loop import Sequential
from perflab.train.profile import phase
from perflab.train.protocols import TrainerDefaults
from perflab.train.step import backward_gemm, forward_gemm


class ParallelError(ConfigError):
    """A run cannot be split as asked (too many ranks for the batch or the hidden layer)."""


def local_part(index, rank: int, size: int):
    """This rank's contiguous share of a global batch (a slice or a sorted index array)."""
    if isinstance(index, slice):
        lo, hi = share(index.stop - index.start, size, rank)
        return slice(index.start + lo, index.start + hi)
    lo, hi = share(len(index), size, rank)
    return index[lo:hi]


def check_batch_split(cfg: Config, size: int) -> None:
    smallest = cfg.train_size % cfg.batch_size or cfg.batch_size
    if smallest < size:
        raise ParallelError(f"{size} ranks but a mini-batch of only {smallest} samples "
                            f"(B={cfg.batch_size}, N={cfg.train_size}); every rank needs at least one: "
                            f"use at most {smallest} ranks or a larger batch")


def fused(params, xp, extra: int = 0):
    """One flat buffer and views of it shaped like the parameters (plus `extra` slots)."""
    total = sum(p.size for p in params)
    buffer = xp.zeros(total + extra, dtype=params[0].dtype)
    views, offset = [], 0
    for p in params:
        views.append(buffer[offset:offset + p.size].reshape(p.shape))
        offset += p.size
    return buffer, views


class DataParallel(Sequential):
    name = "data"
    matmul = staticmethod(model.product)  # every GEMM of the step (perflab.train.half rounds them to half)

    def __init__(self, cfg: Config, params, X, y, comm):
        check_batch_split(cfg, comm.size)
        super().__init__(cfg, params, X, y)
        self.comm = comm
        self.buffer, self.grads = fused(params, xp_of(params[0]), extra=1)

    def gradients(self, index, scale: float = 1.0, regularize: bool = True) -> float | None:
        """Forward, backward and the exchange of this rank's share of the batch: the summed gradient, times
        `scale` (its data term: then unscaled and regularized by the caller), in self.grads; returns the batch
        loss when wanted."""
        part = local_part(index, self.comm.rank, self.comm.size)
        Xb, yb = self.X[:, part], self.y[part]
        global_b = (index.stop - index.start) if isinstance(index, slice) else len(index)
        with phase("forward"):
            acts = model.forward(self.params, Xb, matmul=self.matmul)
        with phase("backward"):  # dz_L = scale (yhat - Y) / B: every gradient carries the scale
            model.backward(self.params, acts, yb, global_b / scale, out=self.grads, matmul=self.matmul)
            self.buffer[-1] = model.cross_entropy_sum(acts[-1], yb) if self.want_loss else 0.0
            self.comm.allreduce(self.buffer)
            if regularize:
                model.add_regularization(self.grads, self.params, self.cfg.reg)
        return (float(self.buffer[-1]) / global_b + model.l2_penalty(self.params, self.cfg.reg)
                if self.want_loss else None)

    def batch(self, index):
        batch_loss = self.gradients(index)
        with phase("step"):
            model.sgd_step(self.params, self.grads, self.cfg.learning_rate)
        return batch_loss


def layer_splits(num_layers: int) -> list[str]:
    """How model parallel splits each layer: "rows", "columns" in turn from the first, the output
    layer "columns" after a row-split layer, else "whole" (replicated)."""
    kinds = ["rows" if l % 2 == 0 else "columns" for l in range(num_layers - 1)]
    return kinds + ["columns" if kinds[-1] == "rows" else "whole"]


class ModelParallel(TrainerDefaults):
    """Any depth, each layer split as layer_splits says, over the ranks."""

    name = "model"

    def __init__(self, cfg: Config, params, X, y, comm):
        self.splits = layer_splits(len(cfg.hidden_sizes) + 1)
        narrow = [h for h, kind in zip(cfg.hidden_sizes, self.splits) if kind == "rows" and h < comm.size]
        if narrow:
            raise ParallelError(f"model parallel over {comm.size} ranks needs at least {comm.size} units in each "
                                f"layer it splits by rows (hidden layers 1, 3, ...), got hidden sizes "
                                f"{list(cfg.hidden_sizes)}")
        self.cfg, self.X, self.y, self.comm = cfg, X, y, comm
        xp = xp_of(params[0])
        self.params = []
        for W, b, kind in zip(params[0::2], params[1::2], self.splits):  # this rank's shard, contiguous copies
            if kind == "rows":
                rows = slice(*share(W.shape[0], comm.size, comm.rank))
                self.params += [xp.ascontiguousarray(W[rows]), b[rows].copy()]
            elif kind == "columns":
                cols = slice(*share(W.shape[1], comm.size, comm.rank))
                self.params += [xp.ascontiguousarray(W[:, cols]), b.copy()]
            else:
                self.params += [W.copy(), b.copy()]
        self.want_loss = True

    def forward(self, X) -> list:
        return sharded_forward(self.params, self.splits, self.comm, X)

    def logits(self, X):
        return self.forward(X)[-1]

    def batch(self, index):
        Xb, yb = self.X[:, index], self.y[index]
        with phase("forward"):
            acts = self.forward(Xb)
            yhat = model.softmax(acts[-1], out=acts[-1])
        grads = [None] * len(self.params)
        with phase("backward"):
            dz = model.output_delta(yhat, yb, yb.shape[0])
            gemm = 1
            for l in range(len(self.splits) - 1, -1, -1):
                W, a_in = self.params[2 * l], acts[l]
                with phase(backward_gemm(gemm)):
                    grads[2 * l] = dz @ a_in.T
                grads[2 * l + 1] = dz.sum(axis=1)
                if l > 0:
                    with phase(backward_gemm(gemm + 1)):
                        dz = W.T @ dz
                    if self.splits[l] == "rows":  # each rank's part of the whole input's gradient
                        dz = self.comm.allreduce(dz)
                    dz *= a_in * (1 - a_in)
                gemm += 2
        batch_loss = None
        if self.want_loss:
            batch_loss = model.cross_entropy_sum(yhat, yb) / yb.shape[0] + self.penalty()
        with phase("step"):
            model.add_regularization(grads, self.params, self.cfg.reg)
            model.sgd_step(self.params, grads, self.cfg.learning_rate)
        return batch_loss

    def penalty(self) -> float:
        """reg/2 sum ||W_l||^2: the split weights' squares summed over the ranks, a replicated one's once."""
        xp = xp_of(self.params[0])
        squares = [(float(xp.vdot(W, W)), kind) for W, kind in zip(self.params[0::2], self.splits)]
        split = sum(sq for sq, kind in squares if kind != "whole")
        whole = sum(sq for sq, kind in squares if kind == "whole")
        return 0.5 * self.cfg.reg * (self.comm.allreduce_scalar(split) + whole)

    def predict(self, X, chunk: int = 8192):
        xp = xp_of(X)
        return xp.concatenate([self.logits(X[:, i:i + chunk]).argmax(axis=0) for i in range(0, X.shape[1], chunk)])

    def full_params(self) -> list:
        return gather_shards(self.params, self.comm, self.splits)


def sharded_forward(params, splits, comm, X) -> list:
    """[X, a_1, ..., logits] of a model-parallel rank, NumPy or CuPy: a row-split layer's activations are
    this rank's units, a column-split layer's output the all-reduced sum of every rank's part."""
    acts = [X]
    last = len(splits) - 1
    for l, kind in enumerate(splits):
        W, b = params[2 * l], params[2 * l + 1]
        with phase(forward_gemm(l + 1)):
            z = W @ acts[-1]
        if kind == "columns":
            z = comm.allreduce(z)
        z += b[:, None]
        acts.append(z if l == last else model.sigmoid(z, out=z))
    return acts


def gather_shards(params, comm, splits=("rows", "columns")) -> list:
    """Every rank's shards (split per layer as layer_splits says; one hidden layer: [W1 rows, b1, W2
    columns, b2]) gathered into the full parameters (on the host)."""
    from perflab.backend import to_numpy
    shards = comm.allgather([to_numpy(p) for p in params])
    full = []
    for l, kind in enumerate(splits):
        Ws, bs = [s[2 * l] for s in shards], [s[2 * l + 1] for s in shards]
        if kind == "rows":
            full += [np.concatenate(Ws, axis=0), np.concatenate(bs)]
        elif kind == "columns":
            full += [np.concatenate(Ws, axis=1), bs[0]]
        else:
            full += [Ws[0], bs[0]]
    return full


TRAINERS = {"sequential": Sequential, "data": DataParallel, "model": ModelParallel}


def make_trainer(kind: str, cfg: Config, params, X, y, comm):
    if kind not in TRAINERS:
        raise ConfigError(f"--parallel must be one of {tuple(TRAINERS)}, got {kind!r}")
    if kind == "sequential":
        if comm.size > 1:
            raise ConfigError(f"--parallel sequential runs on one rank, got {comm.size}; use data or model")
        return Sequential(cfg, params, X, y)
    return TRAINERS[kind](cfg, params, X, y, comm)
