"""Run a perflab command with every rank on GPU 0 (the product refuses more ranks than GPUs): on a one-GPU machine
the p2p exchange's ranks then take turns on the GPU (time-sliced contexts), which checks its bits, not its speed.

    mpirun -n P python experiments/p2p/shared_gpu.py check --backend cupy --comm p2p ...
"""
import sys

from perflab.train import gpu


def gpu_zero(comm) -> int:
    import cupy as cp
    cp.cuda.Device(0).use()
    return 0


gpu.select_device = gpu_zero
from perflab.cli import main  # noqa: E402  (after the patch, which the runner looks up at call time)

sys.exit(main(sys.argv[1:]))
