"""The training loop (epochs x mini-batches), shared by every trainer.

A trainer knows how to process one global mini-batch (forward, backward, exchange, step) and
how to predict; the loop around it (batching, shuffling, loss printing, test precision,
timing, progress bar) is written once, here.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from perflab.config import Config
from perflab.train import model, profile, watchdog
from perflab.train.profile import phase
from perflab.train.protocols import TrainerDefaults


class Diverged(RuntimeError):
    """The loss left the finite numbers: training has failed, so nothing after it is a measurement."""

    def __init__(self, epoch: int, batch: int, batches: int, learning_rate: float, loss: float):
        self.epoch, self.batch, self.learning_rate, self.loss = epoch, batch, learning_rate, loss
        super().__init__(f"training diverged: the loss was {loss} at epoch {epoch}, batch {batch}/{batches} "
                         f"(learning rate {learning_rate:g}); lower --learning-rate (the seeds train with 1e-4 "
                         f"to 1.0) or check the data")


class Interrupted(KeyboardInterrupt):
    """Ctrl-C inside fit: how far the run got, so the command's one line can say what was kept."""

    def __init__(self, epoch: int, epochs: int, history: "History"):
        self.epoch, self.epochs, self.history = epoch, epochs, history
        super().__init__(f"stopped by Ctrl-C in epoch {epoch + 1} of {epochs}")


class Stopped(Exception):
    """A run ended before its end (Ctrl-C, a full disk, a folder it cannot write): the message is the one line
    that says what was kept and how to resume; perflab.cli prints it once (rank 0) and exits with `code`.
    `everywhere`: every rank stops together (Ctrl-C reaches them all), so none is left to abort."""

    def __init__(self, message: str, code: int = 2, everywhere: bool = False):
        super().__init__(message)
        self.code, self.everywhere = code, everywhere


def disk_error(exc: OSError) -> str:
    """An OSError writing results, in the user's words: what failed and what frees it."""
    import errno
    why = {errno.ENOSPC: "the disk is full", errno.EDQUOT: "the disk quota is used up",
           errno.EACCES: "permission denied", errno.EROFS: "the file system is read-only"}.get(exc.errno)
    where = f" ({exc.filename})" if getattr(exc, "filename", None) else ""
    return f"{why or exc.strerror or exc}{where}"


class Sequential(TrainerDefaults):
    """The reference: the whole mini-batch on one process."""

    name = "sequential"
    want_loss = True  # the loop sets it per batch: compute the loss only when it is printed
    upcoming = None   # and the batch after this one (None after the last), which a trainer may prefetch

    def __init__(self, cfg: Config, params, X, y):
        self.cfg, self.params, self.X, self.y = cfg, params, X, y

    def batch(self, index) -> float | None:
        """One SGD step on the samples `index` (a slice or an index array) of the training set.
        Returns the batch loss J before the step when `want_loss`, else None."""
        Xb, yb = self.X[:, index], self.y[index]
        with phase("forward"):
            acts = model.forward(self.params, Xb)
        with phase("backward"):
            grads = model.backward(self.params, acts, yb, yb.shape[0])
            model.add_regularization(grads, self.params, self.cfg.reg)
        batch_loss = (model.cross_entropy_sum(acts[-1], yb) / yb.shape[0]
                      + model.l2_penalty(self.params, self.cfg.reg)) if self.want_loss else None
        with phase("step"):
            model.sgd_step(self.params, grads, self.cfg.learning_rate)
        return batch_loss

    def predict(self, X):
        return model.predict(self.params, X)

    def full_params(self) -> list:
        """The whole parameter list (a model-parallel trainer gathers its shards)."""
        return self.params


@dataclass
class History:
    """What a run returns: loss rows, per-epoch rows, and the trained parameters."""
    losses: list = field(default_factory=list)   # dicts: epoch, batch, loss
    epochs: list = field(default_factory=list)   # dicts: epoch, seconds, test_precision, loss
    params: list | None = field(default=None, repr=False)
    phases: object = field(default=None, repr=False)  # tidy phase table of a --profile run

    @property
    def final_loss(self) -> float:
        return self.losses[-1]["loss"]

    @property
    def test_precision(self) -> float | None:
        return self.epochs[-1]["test_precision"]

    @property
    def epoch_seconds(self) -> float:
        """Median wall time of an epoch's training (evaluation excluded)."""
        return float(np.median([e["seconds"] for e in self.epochs]))

    def tables(self):
        import pandas as pd
        return pd.DataFrame(self.losses), pd.DataFrame(self.epochs)


def batch_indices(cfg: Config, epoch: int):
    """The global mini-batches of one epoch: slices in order, or index arrays of a
    permutation seeded by (seed, epoch) so every rank draws the same one."""
    n, b = cfg.train_size, cfg.batch_size
    if not cfg.shuffle:
        return [slice(s, min(s + b, n)) for s in range(0, n, b)]
    order = np.random.default_rng([cfg.seed, epoch]).permutation(n)
    return [np.sort(order[s:s + b]) for s in range(0, n, b)]


def precision(trainer, test) -> float | None:
    """Fraction of test labels predicted correctly (the seeds' 'precision')."""
    if test is None:
        return None
    predicted = trainer.predict(test.X)
    return float((predicted == test.y).mean())


def fit(cfg: Config, trainer, test=None, progress: bool = True, log=None, sync=lambda: None,
        validation=None, dog=None) -> History:
    """Train for cfg.num_epochs; `log(msg)` receives the loss lines, `sync()` waits for the
    device so epoch times are honest on a GPU. Precision on the test (and validation) set is
    measured after each epoch, outside the epoch's time. A non-finite loss (checked wherever it
    is computed: every `print_every` batches and each epoch's last) raises Diverged. `dog`
    (perflab.train.watchdog) is armed around everything that waits on the other ranks."""
    from tqdm.auto import tqdm

    dog = dog or watchdog.Idle()
    history = History()
    bar = tqdm(total=cfg.num_epochs * cfg.num_batches, unit="batch", disable=not progress, leave=False)
    try:
        run_epochs(cfg, trainer, test, log, sync, validation, dog, history, bar)
    except KeyboardInterrupt:
        bar.close()
        raise Interrupted(len(history.epochs), cfg.num_epochs, history) from None
    bar.close()
    history.params = trainer.full_params()
    return history


def run_epochs(cfg: Config, trainer, test, log, sync, validation, dog, history: History, bar) -> None:
    """fit's epochs, each appended to `history` as it ends."""
    every = cfg.print_every or cfg.num_batches
    step = 0
    following = batch_indices(cfg, 0)
    for epoch in range(cfg.num_epochs):
        batches = following
        following = batch_indices(cfg, epoch + 1) if epoch + 1 < cfg.num_epochs else [None]
        # the loss only at the epoch's end: a trainer that can runs the whole epoch as one CUDA graph
        whole = every >= len(batches) and trainer.graphs_an_epoch(batches)
        sync()
        start = time.perf_counter()
        for i, index in [(len(batches) - 1, batches)] if whole else enumerate(batches):
            dog.arm(epoch, None if whole else i, len(batches))
            if whole:  # the epoch's last batch stands for them all
                step += len(batches) - 1
                batch_loss = trainer.epoch(index, want_loss=True)
            else:
                trainer.want_loss = (i + 1) % every == 0 or i + 1 == len(batches)
                trainer.upcoming = batches[i + 1] if i + 1 < len(batches) else following[0]  # for a prefetching trainer
                if profile.current() is not None:
                    profile.current().batch = step
                with phase("batch iteration"):
                    batch_loss = trainer.batch(index)
            dog.disarm()
            if batch_loss is not None:
                if not np.isfinite(batch_loss):
                    bar.close()
                    raise Diverged(epoch, i + 1, len(batches), cfg.learning_rate, float(batch_loss))
                history.losses.append({"epoch": epoch, "batch": i, "step": step, "loss": batch_loss})
                if log and (i + 1) % every == 0:
                    log(f"epoch {epoch} batch {i + 1}/{len(batches)} loss {batch_loss:.6f}")
            step += 1
            bar.update(len(batches) if whole else 1)
        dog.arm(epoch, None, len(batches))
        sync()
        seconds = time.perf_counter() - start
        with profile.paused():  # evaluation is not a training phase
            row = {"epoch": epoch, "seconds": seconds, "loss": history.losses[-1]["loss"],
                   "test_precision": precision(trainer, test)}
            if validation is not None:
                row["validation_precision"] = precision(trainer, validation)
        dog.disarm()
        history.epochs.append(row)
        bar.set_postfix(loss=f"{row['loss']:.4f}", precision=row["test_precision"])
