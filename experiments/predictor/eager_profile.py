"""Where does the host spend an eager tensor-core step? (The blind checks saw wgmma resident eager
steps of 0.47 ms at H 1280 b 1300 and 1.40 ms at b 3100, against 0.09 and 0.17 ms as graphs.)
cProfile over two epochs of the trainer launched kernel by kernel, per (H, b, GEMM): the
host's seconds per step and the functions that take them, top by own time. One JSON line each.
Usage (GPU machine, repository root): python3 experiments/predictor/eager_profile.py
"""
import cProfile
import json
import pstats

from perflab.config import Config
from perflab.train.comm import Serial
from perflab.train.runner import Device, train_on_ranks

for H, b, gemm in ((1280, 1300, "wgmma"), (1280, 3100, "wgmma"), (1280, 3100, "x3tf32"), (1280, 3100, "cublas")):
    cfg = Config(dataset="synthetic", hidden_sizes=(H,), batch_size=b, train_size=60000, num_epochs=3, test_size=0,
                 dtype="float32", learning_rate=0.1)
    device = Device(backend="cupy", gemm=gemm, graphs=False)
    train_on_ranks(cfg.replace(num_epochs=1), "data", Serial(), device, log=None)  # compile, tune
    profiler = cProfile.Profile()
    profiler.enable()
    history, _ = train_on_ranks(cfg, "data", Serial(), device, log=None)
    profiler.disable()
    stats = pstats.Stats(profiler)
    steps = cfg.num_epochs * cfg.num_batches
    top = sorted(stats.stats.items(), key=lambda kv: -kv[1][2])[:12]  # by own (total) time
    print(json.dumps({"H": H, "b": b, "gemm": gemm,
                      "epoch_ms_per_step": [round(1e3 * e["seconds"] / cfg.num_batches, 3) for e in history.epochs],
                      "top_own_us_per_step": {f"{k[0].split('/')[-1]}:{k[1]}:{k[2]}": round(1e6 * v[2] / steps, 1)
                                              for k, v in top}}), flush=True)
