"""Where does the host spend an eager step? (The blind checks saw wgmma resident eager steps of
0.47 ms at H 1280 b 1300 and 1.40 ms at b 3100, against 0.09 and 0.17 ms as graphs; after the
kernel look-ups were cached, still 0.44 and 0.71 ms at H 2560 b 1500 and 2600, against kernels
of 0.12 and 0.19 ms.) cProfile over epochs of the trainer launched kernel by kernel, per
(mode, H, b, GEMM): the host's seconds per step, the functions that take them (top by own time),
and the cumulative time of the suspects named in SUSPECTS. One JSON line each.
Usage (GPU machine, repository root):
  python3 experiments/predictor/eager_profile.py [mode:H:b:gemm ...]
(default: the first session's four resident points).
"""
import cProfile
import json
import pstats
import sys

from perflab.config import Config
from perflab.train.comm import Serial
from perflab.train.runner import Device, train_on_ranks

SUSPECTS = ("wgmma_gemm", "launch_ex", "launch_config", "k_major", "prepared", "tensor_map", "heuristic",
            "max_active_clusters", "cublas_gemm", "gemm", "set", "_staged_batch")
DEFAULT = ("resident:1280:1300:wgmma", "resident:1280:3100:wgmma", "resident:1280:3100:x3tf32",
           "resident:1280:3100:cublas")

for point in sys.argv[1:] or DEFAULT:
    mode, H, b, gemm = point.split(":")
    H, b = int(H), int(b)
    cfg = Config(dataset="synthetic", hidden_sizes=(H,), batch_size=b, train_size=60000, num_epochs=3, test_size=0,
                 dtype="float32", learning_rate=0.1)
    device = Device(backend="cupy", mode=mode, gemm=gemm, graphs=False)
    train_on_ranks(cfg.replace(num_epochs=1), "data", Serial(), device, log=None)  # compile, tune
    plain, _ = train_on_ranks(cfg, "data", Serial(), device, log=None)  # unprofiled: the step as a sweep sees it
    profiler = cProfile.Profile()
    profiler.enable()
    history, _ = train_on_ranks(cfg, "data", Serial(), device, log=None)
    profiler.disable()
    stats = pstats.Stats(profiler)
    steps = cfg.num_epochs * cfg.num_batches
    top = sorted(stats.stats.items(), key=lambda kv: -kv[1][2])[:14]  # by own (total) time
    suspects = {}
    for key, v in stats.stats.items():
        if key[2] in SUSPECTS:
            name = f"{key[0].split('/')[-1]}:{key[2]}"
            suspects[name] = {"calls_per_step": round(v[1] / steps, 2), "cum_us_per_step": round(1e6 * v[3] / steps, 1)}
    print(json.dumps({"mode": mode, "H": H, "b": b, "gemm": gemm,
                      "plain_ms_per_step": [round(1e3 * e["seconds"] / cfg.num_batches, 3) for e in plain.epochs],
                      "profiled_ms_per_step": [round(1e3 * e["seconds"] / cfg.num_batches, 3) for e in history.epochs],
                      "suspects": suspects,
                      "top_own_us_per_step": {f"{k[0].split('/')[-1]}:{k[1]}:{k[2]}": round(1e6 * v[2] / steps, 1)
                                              for k, v in top}}), flush=True)
