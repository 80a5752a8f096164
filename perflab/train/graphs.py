"""CUDA graphs of the fused GPU trainer (perflab.train.gpu.FusedGPU): each batch's step captured once and
replayed, and where batches come in order a whole epoch as one graph (docs/DECISIONS.md, D36)."""
from __future__ import annotations

import numpy as np

from perflab import kernels
from perflab.train import profile
from perflab.train.profile import phase


class Graphs:
    """The trainer's batches and epochs, graphed or not, and its graphs: `cache` (by key), `epochs_graphed`,
    `epoch_graphs`; close frees them (and wgmma's copies of the images). The trainer (FusedGPU) supplies the step, its buffers and the flags
    graphs, whole_graph, capturable and mode."""

    cache: dict = {}  # the CUDA graphs by key: each trainer's own from __init__ (this empty one where it failed first)

    def batch(self, index):
        part = self.local(index)
        global_b = (index.stop - index.start) if isinstance(index, slice) else len(index)
        want = self.want_loss
        with self.stream:
            if self.mode == "staged":
                n = (part.stop - part.start) if isinstance(part, slice) else len(part)
                Xb, yb, first, key = self.Xdev[:, :n], self.ydev[:n], 0, ("staged", n, want)
                with phase("copying images host -> device"):
                    Xb.set(np.asfortranarray(self.X[:, part]), stream=self.stream)
                    yb.set(np.ascontiguousarray(self.y[part]), stream=self.stream)
            else:
                Xb, yb, first = self.batch_images(part)
                key = (part.start, part.stop, want) if isinstance(part, slice) else None
            if not self.graphs or profile.recording():  # a graph cannot be timed phase by phase
                self.step(Xb, yb, global_b, want, first)
            else:
                whole = self.whole_graph
                self.replay(key, self.step if whole else self.gradients, Xb, yb, global_b, want, first)
                if not whole:
                    self.exchange_and_update()
        return self.batch_loss(global_b) if want else None

    def graphs_an_epoch(self, batches) -> bool:
        """Whether `epoch` may run these batches as one graph: data resident, batches in order
        (slices), steps graphed, the exchange capturable (one GPU, or NCCL: the all-reduces inside
        the graph, no host launch between steps) and nothing recording phases."""
        return (self.epoch_graphs and self.graphs and self.capturable and self.mode == "resident"
                and all(isinstance(i, slice) for i in batches) and not profile.recording())

    def epoch(self, batches, want_loss: bool):
        """Every batch's step as one CUDA graph, captured on first use; the loss (when wanted) at the
        last batch, returned: one launch an epoch (docs/DECISIONS.md, D36)."""
        with self.stream:
            self.replay(self.epoch_key(batches, want_loss), self.steps, batches, want_loss)
        self.epochs_graphed += 1
        return self.batch_loss(batches[-1].stop - batches[-1].start) if want_loss else None

    @staticmethod
    def epoch_key(batches, want_loss: bool) -> tuple:
        """The cache key of the epoch graph of these batches (slices)."""
        return ("epoch", tuple((i.start, i.stop) for i in batches), want_loss)

    def steps(self, batches, want_loss: bool):
        for k, index in enumerate(batches):
            Xb, yb, first = self.batch_images(self.local(index))
            self.step(Xb, yb, index.stop - index.start, want_loss and k + 1 == len(batches), first)

    def replay(self, key, run, *args):
        """Launch the CUDA graph of run(*args) on self.stream, captured on first use."""
        graph = self.cache.get(key)
        if graph is None:
            saved = [x.copy() for x in self.state]  # a warm-up pass loads every kernel before capture...
            run(*args)
            for x, was in zip(self.state, saved):  # ...and is undone, so the replay below is the only step
                x[...] = was
            self.stream.begin_capture()
            run(*args)
            graph = self.cache[key] = self.stream.end_capture()
        graph.launch(self.stream)

    def close(self):
        """Free the CUDA graphs. They must go before the NCCL communicator whose all-reduces they
        hold, else ncclCommDestroy hangs (docs/DECISIONS.md, D37); a trainer's attributes are freed in the order
        they were set, the comm before the graphs."""
        self.cache.clear()
        images = self.__dict__.pop("constant_images", None)  # once, though close() runs again as __del__
        if images is not None:
            kernels.wgmma.forget(images)

    __del__ = close
