"""What does a graphed resident epoch cost beyond its batches' graphs?

trainer_graph.py found perflab's host-timed epoch 12-31 us a batch over its own graphs replayed back
to back (one H100; logs/trainer_graph_band_shapes_h100.jsonl): about 0.6-0.7 ms an epoch, where the
ceilings' `trainer resident epoch` charges 0.46. Here the trainer (perflab sweep's resident point:
synthetic N = 60000, float32) trains 3 epochs to capture its graphs, then each piece of an epoch is
timed on the host, 15 times, medians in ms:
  epoch        the loop as loop.fit runs it (the loss at the last batch)
  epoch_noloss the same without the loss (every batch's graph without the CE slot)
  launches     the epoch's graphs launched back to back, synchronized once (host clock)
  replays      the same between two events (device clock)
  loss         trainer.batch_loss after a synchronized stream (the CE read and the L2 penalty)
  l2           model.l2_penalty alone
  first        the first batch after a synchronized stream, launch to its end
One JSON line per (H, B, GEMM).
Written for a graph a batch: since f725486 `fit` captures one graph an epoch, so run it at
39b2bcc or before (`git worktree add /tmp/at 39b2bcc`).
Usage (GPU machine, repository root): python3 experiments/predictor/epoch_fixed.py [H:B ...]
(default: 16:16 1728:1350 2432:2450).
"""
import json
import statistics
import sys
import time

import cupy as cp

from perflab.config import Config
from perflab.timing import replay_ms
from perflab.train import model
from perflab.train.comm import Serial
from perflab.train.loop import batch_indices
from perflab.train.runner import Device, train_on_ranks


def median_ms(run, repeats=15):
    times = []
    for _ in range(repeats):
        cp.cuda.Device().synchronize()
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    return round(1e3 * statistics.median(times), 4)


def epoch(trainer, batches, loss=True):
    for i, index in enumerate(batches):
        trainer.want_loss = loss and i + 1 == len(batches)
        trainer.batch(index)
    trainer.sync()


SHAPES = [tuple(int(v) for v in a.split(":")) for a in sys.argv[1:]] or [(16, 16), (1728, 1350), (2432, 2450)]
for H, B in SHAPES:
    for gemm in ("cublas", "wgmma"):
        N = B * 20 if H == 16 else 60000  # the floor's shorter epoch
        cfg = Config(dataset="synthetic", hidden_sizes=(H,), batch_size=B, train_size=N, num_epochs=3, test_size=0,
                     dtype="float32", learning_rate=0.01 if H == 16 else 0.1)
        history, trainer = train_on_ranks(cfg, "data", Serial(), Device(backend="cupy", gemm=gemm), log=None)
        batches = batch_indices(cfg, 0)
        epoch(trainer, batches, loss=False)  # captures the last batch's graph without the loss
        keys = [(s.start, s.stop, False) for s in batches]
        graphs = [trainer.cache[k] for k in keys]
        stream = trainer.stream

        def launches():
            for g in graphs:
                g.launch(stream)
            stream.synchronize()

        def first():
            trainer.want_loss = False
            trainer.batch(batches[0])
            trainer.sync()

        row = {"H": H, "B": B, "N": N, "gemm": gemm, "batches": len(batches),
               "fit_epoch_ms": round(1e3 * statistics.median(e["seconds"] for e in history.epochs[1:]), 4),
               "epoch": median_ms(lambda: epoch(trainer, batches)),
               "epoch_noloss": median_ms(lambda: epoch(trainer, batches, loss=False)),
               "launches": median_ms(launches), "replays": round(replay_ms(cp, graphs, stream, repeats=15), 4),
               "loss": median_ms(lambda: trainer.batch_loss(B)),
               "l2": median_ms(lambda: model.l2_penalty(trainer.params, cfg.reg)),
               "first": median_ms(first)}
        print(json.dumps(row), flush=True)
        trainer.close()
