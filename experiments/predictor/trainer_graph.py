"""Where do graphed tensor-core steps spend the 10-20% their kernels timed alone leave out?

held_step.py ruled out the sequence and the clock. Here the trainer itself (perflab sweep's
resident point: synthetic N = 60000, float32, 3 epochs) runs, then its own cached CUDA graphs are
replayed between events: one full batch's graph alone, and the epoch's graphs back to back. With
the host-timed epoch and the kernels timed alone (as perflab ceilings do), this splits the gap
into what the graphs hold (their kernel names, from the graph's DOT dump) and what the epoch
adds around them. One JSON line per (H, B, GEMM).
Written for a graph a batch: since f725486 `fit` captures one graph an epoch, so run it at
39b2bcc or before (`git worktree add /tmp/at 39b2bcc`).
Usage (GPU machine, repository root): [DOT_DIR=dir] python3 experiments/predictor/trainer_graph.py [H:B ...]
(default: 1280:3100 2816:1300, the first session's shapes).
"""
import collections
import json
import os
import re
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


def main():
    SHAPES = [tuple(int(v) for v in a.split(":")) for a in sys.argv[1:]] or [(1280, 3100), (2816, 1300)]
    for H, B in SHAPES:
        calls = {name: call for name, call, _ in step_kernels(H, B) + tensor_core_step_kernels(H, B)}
        for gemm in ("cublas", "wgmma", "x3tf32"):
            alone = sum(time_graph_ms(cp, calls[n], calls=5, repeats=10) for n in fused_step(gemm) + (UPDATE,))
            cfg = Config(dataset="synthetic", hidden_sizes=(H,), batch_size=B, train_size=60000, num_epochs=3, test_size=0,
                         dtype="float32", learning_rate=0.1)
            history, trainer = train_on_ranks(cfg, "data", Serial(), Device(backend="cupy", gemm=gemm), log=None)
            epoch_ms = 1e3 * statistics.median(e["seconds"] for e in history.epochs[1:]) / cfg.num_batches
            keys = [k for k in trainer.cache if k[2] is False]  # the batches without the loss, in epoch order
            full = [k for k in keys if k[1] - k[0] == B]
            stream = trainer.stream
            one = replay_ms(cp, [trainer.cache[full[0]]], stream, repeats=20)
            epoch_graphs = replay_ms(cp, [trainer.cache[k] for k in keys], stream, repeats=5) / len(keys)
            dot = trainer.cache[full[0]].debug_dot_str()
            if os.environ.get("DOT_DIR") and H == 1280:  # the graph's DOT dump, to read the parse above against
                open(os.path.join(os.environ["DOT_DIR"], f"graph_{gemm}.dot"), "w").write(dot)
            names = collections.Counter(re.sub(r"[<(].*", "", n) for n in re.findall(r"\\n(\w[\w:<>, ]*)\\n", dot))
            print(json.dumps({"H": H, "B": B, "gemm": gemm, "kernels_alone_ms": round(alone, 4),
                              "graph_alone_ms": round(one, 4), "epoch_graphs_ms": round(epoch_graphs, 4),
                              "epoch_ms": round(epoch_ms, 4), "graphs": len(trainer.cache),
                              "nodes": dot.count("[label="), "kernels": dict(names)}), flush=True)
            trainer.close()
            del trainer
        wgmma.release()
        cp.get_default_memory_pool().free_all_blocks()


if __name__ == "__main__":
    main()
