"""--overlap on several GPUs (perflab.train.gpu.FusedGPU, NCCL): the lecture's overlap of the gradient exchange
with the backward pass. dW_1 = dz_1 X^T runs in row chunks, each all-reduced on a side stream as soon as it is
done; past one hidden layer each upper layer's slice of G goes as soon as backward has made it (the lecture's
wait-free backprop, WFBP), under the GEMMs of the layers below."""
from __future__ import annotations

import numpy as np

from perflab.train.profile import phase
from perflab.train.step import backward_gemm


class Overlap:
    """The side stream the chunks' all-reduces run on, the event that hands each chunk to it, dW_1's row chunks
    and each layer's place in G."""

    def __init__(self, allreduce, G, host_params, chunks: int):
        import cupy as cp
        self.allreduce, self.G = allreduce, G
        self.stream = cp.cuda.Stream(non_blocking=True)
        self.handoff = cp.cuda.Event(disable_timing=True)
        self.chunks = row_chunks(host_params[0].shape[0], chunks)
        sizes = [int(np.prod(p.shape)) for p in host_params]
        self.layer_starts = [int(sum(sizes[:k])) for k in range(0, len(sizes), 2)]  # W_l's place in G

    def send_layer(self, l: int, hi: int) -> int:
        """All-reduce G[lo:hi] (lo: layer l's start) on the side stream once the current stream has made it;
        returns lo."""
        import cupy as cp
        lo = self.layer_starts[l]
        self.handoff.record(cp.cuda.get_current_stream())
        self.stream.wait_event(self.handoff)
        with self.stream:
            self.allreduce(self.G[lo:hi])
        return lo

    def first_weight_gradient(self, gemm, dz1, Xb, dW1, unsent: int, name: str) -> None:
        overlapped_gemm3(gemm, self.allreduce, dz1, Xb, dW1, self.G[:unsent], self.chunks, self.stream, self.handoff,
                         name)


def row_chunks(H: int, k: int) -> list[tuple[int, int]]:
    """[r0, r1) of dW1's H rows in k chunks (the last one shorter where k does not divide H)."""
    rows = -(-H // k)
    return [(r, min(r + rows, H)) for r in range(0, H, rows)]


def overlapped_gemm3(gemm, allreduce, da1, Xb, dW1, G, chunks, side, handoff, name=backward_gemm(3)):
    """--overlap's backward GEMM 3: dW1 = dz1 X^T in row chunks on the current stream, the all-reduce
    of each finished chunk (contiguous rows of G) on `side` while the next chunks compute; the last
    chunk's carries the rest of G (b1, W2, b2, the CE slot), all final by then: one NCCL call fewer
    (docs/DECISIONS.md, D34). The current stream waits for the last exchange.
    The trainer runs it (Overlap.first_weight_gradient; `name`: its phase), and perflab ceilings times it
    (overlap_exchange)."""
    import cupy as cp
    main, D = cp.cuda.get_current_stream(), dW1.shape[1]
    for (r0, r1), (lo, hi) in zip(chunks, overlap_pieces(chunks, D, G.size)):
        with phase(name):
            gemm(da1[r0:r1], Xb.T, dW1[r0:r1])
        handoff.record(main)
        side.wait_event(handoff)
        with side:
            allreduce(G[lo:hi])
    handoff.record(side)
    main.wait_event(handoff)


def overlap_pieces(chunks, D: int, total: int) -> list[tuple[int, int]]:
    """[lo, hi) of the flat gradient buffer G exchanged after each dW1 row chunk (rows r0..r1 of a
    D-column dW1 at G's start): the chunk's rows, the last chunk's also the rest of G."""
    return [(r0 * D, r1 * D if i < len(chunks) - 1 else total) for i, (r0, r1) in enumerate(chunks)]
