"""Where does fit's epoch, one CUDA graph, spend the 1-6% it takes over that graph replayed alone?

`perflab ceilings` (epoch_overhead) measures fit's epoch against the trainer's own epoch graph
replayed between events, and the predictor stretches a graphed epoch by that ratio. Here, per
(H, B, batches), in ms an epoch:
  fit           fit's host-timed epoch (median after the first), as the ceilings take it
  replay        the epoch graph replayed between events, as the ceilings take it
  loop_host     the trainer's epoch call alone (the graph's launch, then the loss: a synchronize and
                two reads), host-timed from a synchronized start, 7 times, median
  loop_device   the same calls between events: the graph's launch to the end of its work
  launch_host   the host's time in the graph's launch call alone
fit against loop_host says what fit's loop adds around the epoch call; loop_device against replay
whether the graph itself runs slower when the trainer launches it.
Usage (GPU machine, repository root): python3 experiments/predictor/epoch_stretch.py [H:B:batches ...]
(default: 1024:1600:30 2048:800:60, the ceilings' sizes).
"""
import json
import statistics
import sys
import time

import cupy as cp

from perflab.config import Config
from perflab.timing import replay_ms
from perflab.train.comm import Serial
from perflab.train.loop import batch_indices
from perflab.train.runner import Device, train_on_ranks

SHAPES = [tuple(int(v) for v in a.split(":")) for a in sys.argv[1:]] or [(1024, 1600, 30), (2048, 800, 60)]
for H, B, n in SHAPES:
    cfg = Config(dataset="synthetic", hidden_sizes=(H,), batch_size=B, train_size=B * n, num_epochs=8, test_size=0,
                 learning_rate=0.01, dtype="float32")
    history, trainer = train_on_ranks(cfg, "data", Serial(), Device(backend="cupy"), log=None)
    fit = statistics.median(e["seconds"] for e in history.epochs[1:])
    graphs = [g for k, g in trainer.cache.items() if k[0] == "epoch"]
    replay = replay_ms(cp, graphs, trainer.stream, repeats=10) / 1e3
    batches = batch_indices(cfg, 0)
    key = trainer.epoch_key(batches, True)
    host, device, launch = [], [], []
    for _ in range(7):
        trainer.sync()
        start, done = cp.cuda.Event(), cp.cuda.Event()
        t0 = time.perf_counter()
        start.record(trainer.stream)
        trainer.cache[key].launch(trainer.stream)
        t1 = time.perf_counter()
        done.record(trainer.stream)
        trainer.batch_loss(batches[-1].stop - batches[-1].start)
        t2 = time.perf_counter()
        host.append(t2 - t0)
        launch.append(t1 - t0)
        device.append(cp.cuda.get_elapsed_time(start, done) / 1e3)
    ms = lambda v: round(1e3 * v, 4)  # noqa: E731
    print(json.dumps({"H": H, "B": B, "batches": n, "fit_ms": ms(fit), "replay_ms": ms(replay),
                      "loop_host_ms": ms(statistics.median(host)), "loop_device_ms": ms(statistics.median(device)),
                      "launch_host_ms": ms(statistics.median(launch)), "fit_over_replay": round(fit / replay, 4)}),
          flush=True)
    trainer.close()
