"""The two interfaces every trainer and every gradient exchange keep, written down (issue 67, item 3), so that no
caller asks an object whether it has a method: it has them all, the ones it does not need as defaults.

An `Exchange` (perflab.train.comm) sums buffers over the ranks; where `exchanges_and_updates` it also applies the
SGD update in the same launch (p2p), and the trainer calls `exchange_update` where it would all-reduce and update.
A `Trainer` runs a global mini-batch (`batch`), or a whole epoch where `graphs_an_epoch` says it can (`epoch`);
`sync` waits for its device, `close` frees what it holds, `state` is what a step changes."""
from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class Exchange(Protocol):
    strategy: str               # the exchange's name (--comm's value; `serial` on one rank)
    rank: int
    size: int
    capturable: bool            # its device all-reduce can sit in a CUDA graph
    exchanges_and_updates: bool  # exchange_update sums the gradients and updates the parameters in one launch

    def allreduce(self, buf): ...

    def allreduce_scalar(self, value: float) -> float: ...

    def exchange_update(self, params, learning_rate: float, ends, regs, rounded=None) -> None: ...


@runtime_checkable
class Trainer(Protocol):
    name: str
    want_loss: bool
    graphs: bool          # it replays CUDA graphs
    whole_graph: bool     # a batch's graph holds the exchange and the update too
    epochs_graphed: int   # epochs it ran as one CUDA graph
    chosen: object        # the RunSpec --comm auto kept (perflab.train.runner.fastest_exchange), else None

    def batch(self, index) -> float | None: ...

    def graphs_an_epoch(self, batches) -> bool: ...

    def epoch(self, batches, want_loss: bool) -> float | None: ...

    def sync(self) -> None: ...

    def close(self) -> None: ...

    @property
    def state(self) -> list: ...

    def predict(self, X): ...

    def full_params(self) -> list: ...


class TrainerDefaults:
    """What a trainer that captures no CUDA graph has: no epoch graph, nothing on a device to wait for or free."""

    graphs = whole_graph = False
    epochs_graphed = 0
    chosen = None

    def graphs_an_epoch(self, batches) -> bool:
        return False

    def epoch(self, batches, want_loss: bool):
        raise NotImplementedError(f"{type(self).__name__} runs an epoch batch by batch (graphs_an_epoch is False)")

    def sync(self) -> None:
        """Wait for the device where the parameters live on a GPU (CuPy arrays): its current stream."""
        if not isinstance(self.params[0], np.ndarray):
            __import__("cupy").cuda.get_current_stream().synchronize()

    def close(self) -> None:
        pass

    @property
    def state(self) -> list:
        return list(self.params)
