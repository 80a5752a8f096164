"""The staged path's pageable images copy, timed on the host three ways at H=512: after a synchronize
(as the ceilings time it), right behind one launched training step (as an epoch issues it), and behind
a launched step the host waited for (to tell queued work from a cold copy). Writes $OUT/staged_copy_probe.csv."""
import csv
import os
import statistics
import time

import cupy as cp
import numpy as np

from perflab.measure.bench import step_kernels
from perflab.results import machine_metadata

N, H, REPEATS = 60000, 512, 25
X = np.asfortranarray(np.random.default_rng(0).random((784, N), dtype=np.float32))
y = np.random.default_rng(1).integers(0, 10, N)
rows = []
for B in (800, 3000):
    calls = [call for name, call, _ in step_kernels(H, B) if not name.startswith("unfused")]
    Xb, yb = cp.empty((784, B), cp.float32, order="F"), cp.empty(B, cp.int64)
    stream = cp.cuda.get_current_stream()
    for how in ("after a synchronize", "behind a launched step", "behind a finished step"):
        times = []
        for r in range(REPEATS + 2):
            cols = slice((r * B) % (N - B), (r * B) % (N - B) + B)
            if how != "after a synchronize":
                for call in calls:
                    call()
            if how != "behind a launched step":
                stream.synchronize()
            start = time.perf_counter()
            Xb.set(X[:, cols], stream=stream)
            stream.synchronize()
            times.append(time.perf_counter() - start)
        rows.append({"H": H, "B": B, "how": how, "copy_ms": 1e3 * statistics.median(times[2:]),
                     "bytes": Xb.nbytes, **{k: machine_metadata().get(k) for k in ("gpu", "git_commit")}})
        print(rows[-1], flush=True)
    # the staged trainer's own pattern on its own kind of stream: copy batch k, launch step k, next
    # (a step of copy + launches, host-timed over the loop), with and without a synchronize first
    for blocking in (False, True):
        side = cp.cuda.Stream(non_blocking=True)
        for sync in (False, True):
            with side:
                calls = [call for name, call, _ in step_kernels(H, B) if not name.startswith("unfused")]
                copies, labels, steps = [], [], []
                for r in range(REPEATS + 2):
                    cols = slice((r * B) % (N - B), (r * B) % (N - B) + B)
                    if sync:
                        side.synchronize()
                    start = time.perf_counter()
                    Xb.set(np.asfortranarray(X[:, cols]), stream=side if not blocking else None)
                    copied = time.perf_counter()
                    yb.set(np.ascontiguousarray(y[cols]), stream=side if not blocking else None)
                    labelled = time.perf_counter()
                    for call in calls:
                        call()
                    steps.append(time.perf_counter() - start)
                    copies.append(copied - start)
                    labels.append(labelled - copied)
                side.synchronize()
            how = f"training's loop, {'the null stream' if blocking else 'its stream'}, {'synchronized' if sync else 'unsynchronized'}"
            rows.append({"H": H, "B": B, "how": how, "copy_ms": 1e3 * statistics.median(copies[2:]),
                         "labels_ms": 1e3 * statistics.median(labels[2:]),
                         "step_ms": 1e3 * statistics.median(steps[2:]), "bytes": Xb.nbytes,
                         **{k: machine_metadata().get(k) for k in ("gpu", "git_commit")}})
            print(rows[-1], flush=True)
with open(os.path.join(os.environ.get("OUT", "."), "staged_copy_probe.csv"), "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=list(dict.fromkeys(k for r in rows for k in r)))
    w.writeheader()
    w.writerows(rows)
