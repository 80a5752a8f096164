"""The pipelined trainer's host all-reduce at p = 2 with both ranks on one GPU: does the 1.65 ms a
2 MB piece took in training on two H200 (results/nvidia-h200/timeline_H2560_b3500_p2.csv) show on
a one-GPU machine's host, where pieces.py's pieces alone take ~0.5 ms? perflab refuses two ranks on
one GPU (select_device); this experiment puts every rank on GPU 0 and runs a perflab command.
Run: mpirun -n 2 python3 experiments/pipelined/shared_gpu.py timeline --modes pipelined ...
"""
import sys

import cupy as cp

from perflab import cli
from perflab.train import gpu


def first_gpu(comm) -> int:
    cp.cuda.Device(0).use()
    return 0


gpu.select_device = first_gpu
sys.exit(cli.main(sys.argv[1:]))
