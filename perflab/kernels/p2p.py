"""The --comm p2p exchange's kernels (p2p.cu), for perflab.train.comm.P2PComm: the peers' gradients
read over NVLink, summed and applied to the parameters in one launch (one-shot at p = 2, two-shot from
p = 3), and the wait that keeps a rank from overwriting its gradient before every peer has read it."""
from __future__ import annotations

import functools

import numpy as np

from perflab.config import TWO_SHOT_FROM
from perflab.kernels.build import KernelError, ctype, i32, module, multiprocessors, u64

P2P_KERNELS = ("exchange_update<float>", "exchange_update<double>", "exchange_update_two_shot<float>",
               "exchange_update_two_shot<double>", "exchange_update_bf16", "peer_read_wait")
FLAG_SLOTS = 3  # p2p.cu's: a block's flags from each peer (begun, read, the two-shot's mid)
THREADS = 512  # a block; one block a multiprocessor, so that every block is resident at once (they spin)
BF16_VALUES = 8  # p2p.cu's: a 16-byte vector of the BF16 copy of a gradient


def ce_slot(n: int) -> int:
    """p2p.cu's: where a BF16 copy of an n-value gradient keeps the batch's CE sum (in FP32, two slots)."""
    return -(-n // BF16_VALUES) * BF16_VALUES


@functools.lru_cache(maxsize=None)
def function(name: str):
    """The kernel, cached (a look-up costs a launch host time, as elementwise's note)."""
    return module("p2p.cu", P2P_KERNELS).get_function(name)


def blocks() -> int:
    return multiprocessors()


def exchange_update(params, grads, rank: int, n: int, learning_rate, ends, regs, ce_out, flags, rounds,
                    timeout_ns: int, grid: int) -> None:
    """params[:n] -= lr (sum over ranks of G[:n] + regs[segment] params); ce_out = the ranks' G[n] summed.
    grads, flags: device arrays of every rank's buffer address (uint64, this rank's own included);
    grid: blocks(), passed in (a launch in an eager step should not ask the device each time)."""
    kernel = "exchange_update_two_shot" if grads.size >= TWO_SHOT_FROM else "exchange_update"
    function(f"{kernel}<{ctype(params.dtype)}>")(
        (grid,), (THREADS,), (params, grads, i32(grads.size), i32(rank), u64(n), params.dtype.type(learning_rate),
                              ends, regs, i32(ends.size), ce_out, flags, rounds, np.int64(timeout_ns)))


def exchange_update_bf16(params, params_half, halves, grads, rank: int, n: int, learning_rate, ends, regs, ce_out,
                         flags, rounds, timeout_ns: int, grid: int, made) -> None:
    """As exchange_update, with the peers' gradients read from their BF16 copies (halves: every rank's, this rank's
    own made from its FP32 gradient in the same launch, but for `made`: int64 [lo, hi) ranges of 8-value vectors,
    sorted, that the GEMMs wrote into it in BF16) and the new parameters rounded into params_half."""
    if made.dtype != np.int64 or made.ndim != 2 or made.shape[1] != 2:
        raise KernelError(f"made is an int64 array of [lo, hi) vector ranges, shape (k, 2), got {made.dtype} "
                          f"{made.shape}")
    function("exchange_update_bf16")(
        (grid,), (THREADS,), (params, params_half, halves, grads, i32(grads.size), i32(rank), u64(n),
                              np.float32(learning_rate), ends, regs, i32(ends.size), ce_out, flags, rounds,
                              np.int64(timeout_ns), i32(grads.size >= TWO_SHOT_FROM), made, i32(made.shape[0])))


def made_in_bf16(shapes, index, n: int) -> dict:
    """{i: [lo, hi) of 8-value vectors} of an n-value gradient laid out as `shapes` (the trainer's views, in order),
    for the arrays i in `index` that start and end on a whole vector: those a GEMM can write straight into the BF16
    copy (16-byte aligned rows of a contiguous array); the others stay FP32, narrowed by the exchange."""
    offsets = np.concatenate([[0], np.cumsum([int(np.prod(s)) for s in shapes])]).astype(int)
    if offsets[-1] != n:
        raise KernelError(f"shapes {list(shapes)} hold {offsets[-1]} values, the gradient {n}")
    return {i: (int(offsets[i]) // BF16_VALUES, int(offsets[i + 1]) // BF16_VALUES) for i in sorted(index)
            if offsets[i] % BF16_VALUES == 0 and offsets[i + 1] % BF16_VALUES == 0 and offsets[i + 1] > offsets[i]}


def read_wait(rank: int, flags, rounds, timeout_ns: int, grid: int) -> None:
    """Hold the stream until every peer has read this rank's gradient of the last exchange (of `grid` blocks)."""
    function("peer_read_wait")((1,), (1024,), (i32(flags.size), i32(rank), flags, rounds, i32(grid),
                                               np.int64(timeout_ns)))
