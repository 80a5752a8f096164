"""--comm p2p's exchange at p ranks beside NCCL's (#52; not the product): the trainer's step end timed
alone in replayed CUDA graphs, at the gradients of 784-2048-10 and 784-512-10, one JSON line each.
mpirun -n P python3 experiments/p2p/two_shot.py   (one GPU per rank, one node; P >= 3 runs two-shot)

- p2p: perflab.measure.ceilings.p2p_exchange_update (the read wait, then the one kernel);
- nccl + update: the NCCL all-reduce in a graph, then sgd_update (what the trainer runs with NCCL).
"""
import json

import cupy as cp
import numpy as np

from perflab import kernels
from perflab.config import TWO_SHOT_FROM
from perflab.measure.ceilings import nccl_call, p2p_exchange_update, ranks_together
from perflab.results import machine_metadata
from perflab.timing import time_graph_ms
from perflab.train.comm import for_gpu, world
from perflab.train.gpu import select_device

GRADIENTS = {2048: (784 * 2048 + 2048 + 2048 * 10 + 10) * 4, 512: (784 * 512 + 512 + 512 * 10 + 10) * 4}


def nccl_and_update(comm, size: int) -> float:
    G, P = cp.ones(size // 4 + 1, cp.float32), cp.ones(size // 4, cp.float32)
    ends, regs = cp.asarray([P.size], np.int64), cp.zeros(1, cp.float32)
    allreduce = nccl_call(comm, G)

    def call():
        allreduce()
        kernels.sgd_update(P, G[:-1], 0.1, ends, regs)
    return time_graph_ms(cp, call, calls=10, repeats=20, before=ranks_together(comm)) / 1e3


def main():
    mpi = world()
    select_device(mpi)
    p2p, nccl = for_gpu(mpi, "p2p"), for_gpu(mpi, "nccl")
    meta = machine_metadata() if mpi.rank == 0 else None
    for H, size in GRADIENTS.items():
        (row,) = p2p_exchange_update(p2p, [size], repeats=20)
        t_nccl = nccl_and_update(nccl, size)
        if mpi.rank == 0:
            print(json.dumps({"H": H, "bytes": size, "p": mpi.size,
                              "p2p": "two-shot" if mpi.size >= TWO_SHOT_FROM else "one-shot",
                              "p2p_us": 1e6 * row["seconds"], "nccl_update_us": 1e6 * t_nccl, "machine": meta}), flush=True)


if __name__ == "__main__":
    main()
