"""Where do the 0.1-0.25 ms go that fit's epoch (one CUDA graph) takes over its device time?

`epoch_stretch.py` put them after the graph's work, in `FusedGPU.batch_loss`: a
`cudaStreamSynchronize`, then two scalar reads through CuPy (each a 0-d view and a pageable
device -> host copy). Here, per (H, B, batches), the trainer's epoch graph launched from a
synchronized start, then each way of waiting for it and reading the loss, in ms over the graph's
device time (start event before the launch, done event after it), alternating, 15 rounds, median:
  batch_loss       the trainer's own: synchronize, then float(G[-1]) and float(penalty[0])
  synchronize      stream.synchronize() alone (no read)
  spin             polling the stream (cudaStreamQuery) until it is done (no read)
  pinned           the two scalars copied on the stream into pinned host memory after the
                   launch, then synchronize and read them from NumPy
  spin_pinned      the same copies, then polling
  reads            float(G[-1]) + float(penalty[0]) alone, after the stream is synchronized
and the process's CUDA scheduling flags (cudaGetDeviceFlags; with SCHEDULE_SPIN=1 in the environment,
cudaDeviceScheduleSpin is set before the context is made).
Usage (GPU machine, repository root): python3 experiments/predictor/loss_read.py [H:B:batches ...]
"""
import ctypes
import json
import os
import statistics
import sys
import time

import cupy as cp
import numpy as np

from perflab.config import Config
from perflab.train.comm import Serial
from perflab.train.loop import batch_indices
from perflab.train.runner import Device, train_on_ranks


def cudart():
    for name in ("libcudart.so", "libcudart.so.12", "libcudart.so.13"):
        try:
            return name, ctypes.CDLL(name)
        except OSError:
            continue
    return None, None


def device_flags():
    name, lib = cudart()
    if lib is None:
        return None
    flags = ctypes.c_uint(0)
    return {"lib": name, "rc": lib.cudaGetDeviceFlags(ctypes.byref(flags)), "flags": flags.value}


if os.environ.get("SCHEDULE_SPIN") == "1":
    print(json.dumps({"cudaSetDeviceFlags(spin)": cudart()[1].cudaSetDeviceFlags(1)}), flush=True)


SHAPES = [tuple(int(v) for v in a.split(":")) for a in sys.argv[1:]] or [(512, 3000, 20), (2048, 800, 60)]
print(json.dumps({"device_flags": device_flags(), "note": "cudaDeviceScheduleSpin 1, Yield 2, BlockingSync 4"}), flush=True)
for H, B, n in SHAPES:
    cfg = Config(dataset="synthetic", hidden_sizes=(H,), batch_size=B, train_size=B * n, num_epochs=12, test_size=0,
                 learning_rate=0.01, dtype="float32")
    history, trainer = train_on_ranks(cfg, "data", Serial(), Device(backend="cupy"), log=None)
    batches = batch_indices(cfg, 0)
    last = batches[-1].stop - batches[-1].start
    graph, stream = trainer.cache[trainer.epoch_key(batches, True)], trainer.stream
    host = cp.cuda.alloc_pinned_memory(16)
    loss = np.frombuffer(host, trainer.G.dtype, 2)

    def copy_scalars():
        for k, src in enumerate((trainer.G[-1:], trainer.penalty)):
            cp.cuda.runtime.memcpyAsync(host.ptr + k * loss.itemsize, src.data.ptr, loss.itemsize,
                                        cp.cuda.runtime.memcpyDeviceToHost, stream.ptr)

    def spin():
        while not stream.done:
            pass

    waits = {
        "batch_loss": lambda: trainer.batch_loss(last),
        "synchronize": stream.synchronize,
        "spin": spin,
        "pinned": lambda: (copy_scalars(), stream.synchronize(), float(loss[0]) / last + float(loss[1])),
        "spin_pinned": lambda: (copy_scalars(), spin(), float(loss[0]) / last + float(loss[1])),
    }
    over = {k: [] for k in waits}
    reads = []
    for _ in range(15):
        for name, wait in waits.items():
            trainer.sync()
            start, done = cp.cuda.Event(), cp.cuda.Event()
            t0 = time.perf_counter()
            start.record(stream)
            graph.launch(stream)
            done.record(stream)
            wait()
            t1 = time.perf_counter()
            over[name].append((t1 - t0) * 1e3 - cp.cuda.get_elapsed_time(start, done))
        trainer.sync()
        t0 = time.perf_counter()
        float(trainer.G[-1]), float(trainer.penalty[0])
        reads.append((time.perf_counter() - t0) * 1e3)
    row = {"H": H, "B": B, "batches": n, "epoch_device_ms": round(cp.cuda.get_elapsed_time(start, done), 4),
           "fit_ms": round(1e3 * statistics.median(e["seconds"] for e in history.epochs[1:]), 4),
           "reads_ms": round(statistics.median(reads), 4)}
    row.update({f"{k}_over_ms": round(statistics.median(v), 4) for k, v in over.items()})
    print(json.dumps(row), flush=True)
    trainer.close()
