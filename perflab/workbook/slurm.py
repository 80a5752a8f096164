"""Slurm batch scripts for sweeps on a cluster: one rank per GPU, N nodes x G GPUs."""
from __future__ import annotations

import shlex

TEMPLATE = """#!/bin/bash
# Written by `perflab sweep --emit-sbatch`: {nodes} node(s) x {gpus} GPU(s), one MPI rank per GPU.
#SBATCH --job-name=perflab-{name}
#SBATCH --nodes={nodes}
#SBATCH --ntasks-per-node={gpus}
#SBATCH --gpus-per-node={gpus}
#SBATCH --cpus-per-task={cpus}
#SBATCH --time={time}
#SBATCH --output=perflab-{name}-%j.out
set -euo pipefail
export NCCL_NVLS_ENABLE=0       # no NVLink multicast
export NCCL_DEBUG=WARN
export OMP_NUM_THREADS={cpus}
# ranks find their GPU by node-local rank; the NCCL id travels over MPI, so nodes need no extra set-up
srun --mpi={mpi} {profiler}perflab sweep {args}
"""
NSYS = "nsys profile --trace=cuda,nvtx,mpi --output=perflab-{name}-%q{{SLURM_JOB_ID}}-%q{{SLURM_PROCID}} "


def sbatch(sweep_args: list[str], name: str, nodes: int, gpus: int, cpus: int = 4, time: str = "00:30:00",
           mpi: str = "pmix", nsys: bool = False) -> str:
    for label, value in (("--nodes", nodes), ("--gpus-per-node", gpus), ("--cpus-per-task", cpus)):
        if value < 1:
            raise ValueError(f"{label} must be at least 1, got {value}")
    return TEMPLATE.format(name=name, nodes=nodes, gpus=gpus, cpus=cpus, time=time, mpi=mpi,
                           profiler=NSYS.format(name=name) if nsys else "", args=shlex.join(sweep_args))
