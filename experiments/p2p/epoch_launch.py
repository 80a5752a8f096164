"""An epoch at p = 2 timed two ways (session 60, for D83's push): the host's wall time around trainer.epoch, as
peers_multi's bench times it, and the device's time between events on the trainer's stream around the same graph
launch. Where the push's memcpy nodes make the epoch graph slower to launch, the first grows and the second does not.
784-H-H-10 in BF16, b = 3000 a GPU, 60000 synthetic samples, --comm p2p; rank 0's medians of 10 epochs after 3.

    mpirun -n 2 python experiments/p2p/epoch_launch.py 1024 [label]
"""
import json
import statistics
import sys
import time

import cupy as cp
import numpy as np

from perflab.config import Config
from perflab.measure.peers import batches
from perflab.train.comm import for_gpu, world
from perflab.train.gpu import FusedGPU, select_device

H, label = int(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else ""
comm = world()
select_device(comm)
p2p = for_gpu(comm, "p2p")
N, b = 60000, 3000
rng = np.random.default_rng(0)
X, y = rng.random((N, 784), dtype=np.float32), rng.integers(0, 10, N)
cfg = Config(dataset="synthetic", input_size=784, hidden_sizes=(H, H), num_classes=10, train_size=N,
             batch_size=b * comm.size, learning_rate=0.1, reg=1e-4, dtype="bfloat16", test_size=0)
trainer = FusedGPU(cfg, np.asfortranarray(X.T), y, p2p, "resident", "cublas", True)
trainer.want_loss = False
slices = [slice(s, e) for s, e in batches(N, cfg.batch_size)]
assert trainer.graphs_an_epoch(slices)
host, device = [], []
start, stop = cp.cuda.Event(), cp.cuda.Event()
for k in range(13):
    cp.cuda.Device().synchronize()
    comm.barrier()
    t0 = time.perf_counter()
    start.record(trainer.stream)
    trainer.epoch(slices, want_loss=False)
    stop.record(trainer.stream)
    stop.synchronize()
    t1 = time.perf_counter()
    comm.barrier()
    if k >= 3:
        host.append((t1 - t0) * 1e3)
        device.append(cp.cuda.get_elapsed_time(start, stop))
if comm.rank == 0:
    print(json.dumps({"label": label, "H": H, "p": comm.size, "host_ms": statistics.median(host),
                      "device_ms": statistics.median(device), "host_all": host, "device_all": device}))
