"""Data-parallel and model-parallel trainers over a communicator (perflab.train.comm).

Data parallel (seeds' HW6 Problem 1): parameters replicated; each global mini-batch of B is
split over p ranks (sizes differ by at most one); each rank's gradient is divided by the
global B, so the all-reduced sum is the sequential gradient; regularization is added once,
after the exchange. One all-reduce a batch, over one fused buffer holding every gradient
(and the batch's cross-entropy sum, so the loss costs no extra message).

Model parallel (seeds' 001 section 4.3 and 003's model-parallel note): W1 split by rows
(hidden units), W2 by columns, b1 split with W1, b2 replicated, the data replicated. Per batch
one all-reduce of the C x B partial logits z2 = sum_r W2_r a1_r; softmax and the backward
pass then need no communication.
"""
from __future__ import annotations

import numpy as np

from perflab.backend import xp_of
from perflab.config import Config, ConfigError
from perflab.train import model
from perflab.train.comm import share
from perflab.train.loop import Sequential
from perflab.train.profile import phase


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

    def __init__(self, cfg: Config, params, X, y, comm):
        check_batch_split(cfg, comm.size)
        super().__init__(cfg, params, X, y)
        self.comm = comm
        self.buffer, self.grads = fused(params, xp_of(params[0]), extra=1)

    def batch(self, index):
        part = local_part(index, self.comm.rank, self.comm.size)
        Xb, yb = self.X[:, part], self.y[part]
        global_b = (index.stop - index.start) if isinstance(index, slice) else len(index)
        with phase("forward"):
            acts = model.forward(self.params, Xb)
        with phase("backward"):
            model.backward(self.params, acts, yb, global_b, out=self.grads)
            self.buffer[-1] = model.cross_entropy_sum(acts[-1], yb) if self.want_loss else 0.0
            self.comm.allreduce(self.buffer)
            model.add_regularization(self.grads, self.params, self.cfg.reg)
        batch_loss = (float(self.buffer[-1]) / global_b + model.l2_penalty(self.params, self.cfg.reg)
                      if self.want_loss else None)
        with phase("step"):
            model.sgd_step(self.params, self.grads, self.cfg.learning_rate)
        return batch_loss


class ModelParallel:
    """One hidden layer, its units split over the ranks."""

    name = "model"

    def __init__(self, cfg: Config, params, X, y, comm):
        if len(cfg.hidden_sizes) != 1:
            raise ParallelError(f"model parallel splits one hidden layer; got hidden sizes {list(cfg.hidden_sizes)} "
                                "(use --parallel data for deeper nets)")
        if cfg.hidden_size < comm.size:
            raise ParallelError(f"model parallel over {comm.size} ranks needs at least {comm.size} hidden units, "
                                f"got H={cfg.hidden_size}")
        self.cfg, self.X, self.y, self.comm = cfg, X, y, comm
        self.rows = slice(*share(cfg.hidden_size, comm.size, comm.rank))
        W1, b1, W2, b2 = params
        xp = xp_of(W1)
        # this rank's shard: W1 rows, b1 entries, W2 columns (contiguous copies), b2 whole
        self.params = [xp.ascontiguousarray(W1[self.rows]), b1[self.rows].copy(),
                       xp.ascontiguousarray(W2[:, self.rows]), b2.copy()]
        self.want_loss = True

    def logits(self, X):
        return sharded_logits(self.params, X, self.comm)

    def batch(self, index):
        Xb, yb = self.X[:, index], self.y[index]
        W1, b1, W2, b2 = self.params
        with phase("forward"):
            a1, z2 = self.logits(Xb)
            yhat = model.softmax(z2, out=z2)
        with phase("backward"):
            delta = model.output_delta(yhat, yb, yb.shape[0])
            with phase("backward GEMM 1"):
                grads = [None, None, delta @ a1.T, delta.sum(axis=1)]
            with phase("backward GEMM 2"):
                dz1 = W2.T @ delta
            dz1 *= a1 * (1 - a1)
            with phase("backward GEMM 3"):
                grads[0] = dz1 @ Xb.T
            grads[1] = dz1.sum(axis=1)
        batch_loss = None
        if self.want_loss:
            squares = self.comm.allreduce_scalar(sum(float(xp_of(W).vdot(W, W)) for W in (W1, W2)))
            batch_loss = model.cross_entropy_sum(yhat, yb) / yb.shape[0] + 0.5 * self.cfg.reg * squares
        with phase("step"):
            model.add_regularization(grads, self.params, self.cfg.reg)
            model.sgd_step(self.params, grads, self.cfg.learning_rate)
        return batch_loss

    def predict(self, X, chunk: int = 8192):
        xp = xp_of(X)
        return xp.concatenate([self.logits(X[:, i:i + chunk])[1].argmax(axis=0)
                               for i in range(0, X.shape[1], chunk)])

    def full_params(self) -> list:
        return gather_shards(self.params, self.comm)


def sharded_logits(params, X, comm):
    """a1 of this rank's hidden units and the full z2 (one all-reduce of the C x B partial sums);
    every model-parallel trainer's forward pass, NumPy or CuPy."""
    W1, b1, W2, b2 = params
    with phase("forward GEMM 1"):
        z1 = W1 @ X
    z1 += b1[:, None]
    a1 = model.sigmoid(z1, out=z1)
    with phase("forward GEMM 2"):
        partial = W2 @ a1
    z2 = comm.allreduce(partial)
    z2 += b2[:, None]
    return a1, z2


def gather_shards(params, comm) -> list:
    """Every rank's shards [W1 rows, b1, W2 columns, b2] gathered into the full parameters (on the host)."""
    from perflab.backend import to_numpy
    shards = comm.allgather([to_numpy(p) for p in params])
    return [np.concatenate([s[0] for s in shards], axis=0), np.concatenate([s[1] for s in shards]),
            np.concatenate([s[2] for s in shards], axis=1), shards[0][3]]


TRAINERS = {"sequential": Sequential, "data": DataParallel, "model": ModelParallel}


def make_trainer(kind: str, cfg: Config, params, X, y, comm):
    if kind not in TRAINERS:
        raise ConfigError(f"--parallel must be one of {tuple(TRAINERS)}, got {kind!r}")
    if kind == "sequential":
        if comm.size > 1:
            raise ConfigError(f"--parallel sequential runs on one rank, got {comm.size}; use data or model")
        return Sequential(cfg, params, X, y)
    return TRAINERS[kind](cfg, params, X, y, comm)
