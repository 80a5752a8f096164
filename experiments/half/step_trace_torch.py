"""perflab train's kernels as the GPU ran them, from PyTorch's profiler (CUPTI traces every kernel of the process,
CuPy's and those of a CUDA graph's nodes too), written as the CSV step_timeline.py reads (where no nsys is).

    python experiments/half/step_trace_torch.py out.csv perflab-train-arguments...
"""
import csv
import sys

import torch
from torch.profiler import ProfilerActivity, profile

from perflab.cli import main

torch.cuda.init()
with profile(activities=[ProfilerActivity.CUDA]) as prof:
    try:
        main(["train", *sys.argv[2:]])
    except SystemExit:
        pass
with open(sys.argv[1], "w", newline="") as f:
    out = csv.writer(f)
    out.writerow(["Start (ns)", "Duration (ns)", "Name"])
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA and e.time_range.elapsed_us() > 0:
            out.writerow([int(e.time_range.start * 1e3), int(e.time_range.elapsed_us() * 1e3), e.name])
