"""Where do graphed resident epochs (one CUDA graph an epoch) spend the 1-15% the predictor leaves out?

The predictor's kernel term is each step kernel timed alone (ceilings: a graph of repeated calls of
that one kernel), summed. Here, per (H, B, GEMM), in ms per full batch:
  kernels_alone   that sum (as the ceilings time it)
  in_sequence     the same kernels called in the step's order, as one graph of repeated steps
  epoch_graph     the trainer's own epoch graph replayed between events, over its batches
  fit_epoch       the trainer's host-timed epoch from loop.fit, over its batches
in_sequence against kernels_alone says what the order (operands leaving L2, one kernel after
another) costs; epoch_graph against in_sequence what the trainer's graph adds.
Usage (GPU machine, repository root): python3 experiments/predictor/epoch_graph_gap.py [H:B ...]
(default: 1472:2750 2624:1320, the H100 epoch-graph check's shapes).
"""
import json
import statistics
import sys

import cupy as cp

from perflab.analysis.predictor import UPDATE, fused_step
from perflab.config import Config
from perflab.kernels import wgmma
from perflab.measure.bench import step_kernels, tensor_core_step_kernels
from perflab.timing import replay_ms, time_graph_ms
from perflab.train.comm import Serial
from perflab.train.runner import Device, train_on_ranks

SHAPES = [tuple(int(v) for v in a.split(":")) for a in sys.argv[1:]] or [(1472, 2750), (2624, 1320)]
for H, B in SHAPES:
    calls = {name: call for name, call, _ in step_kernels(H, B) + tensor_core_step_kernels(H, B)}
    for gemm in ("cublas", "wgmma", "x3tf32"):
        names = fused_step(gemm) + (UPDATE,)
        alone = sum(time_graph_ms(cp, calls[n], calls=5, repeats=10) for n in names)
        in_sequence = time_graph_ms(cp, lambda: [calls[n]() for n in names], calls=5, repeats=10)
        cfg = Config(dataset="synthetic", hidden_sizes=(H,), batch_size=B, train_size=60000, num_epochs=3, test_size=0,
                     dtype="float32", learning_rate=0.1)
        history, trainer = train_on_ranks(cfg, "data", Serial(), Device(backend="cupy", gemm=gemm), log=None)
        graphs = [g for k, g in trainer.cache.items() if k[0] == "epoch"]
        full = cfg.train_size / B  # the epoch in full batches (its last one partial)
        row = {"H": H, "B": B, "gemm": gemm, "kernels_alone_ms": round(alone, 4), "in_sequence_ms": round(in_sequence, 4),
               "epoch_graph_ms": round(replay_ms(cp, graphs, trainer.stream, repeats=10) / full, 4) if len(graphs) == 1 else None,
               "fit_epoch_ms": round(1e3 * statistics.median(e["seconds"] for e in history.epochs[1:]) / full, 4)}
        print(json.dumps(row), flush=True)
        trainer.close()
    wgmma.release()
    cp.get_default_memory_pool().free_all_blocks()
