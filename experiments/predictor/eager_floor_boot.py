"""Is the eager trainer's floor at H = 16 the host's cost of a real eager step? (The blind check
`prediction_check_h100_kept_*`, predicted from another boot's ceilings, found tensor-core eager
steps at H 2304 b 1400 of 0.16-0.20 ms against a floor of 0.25-0.28 ms a step at H = 16.)
On one boot, in rounds: the floor as perflab ceilings times it (the trainer at H = 16 and 16
samples, epochs of 20 and 400 steps) and the eager resident step at the check's shapes, per GEMM.
Run it under two checkouts to compare them on one boot (PYTHONPATH=<other checkout>). One JSON
line per measurement. Usage (GPU machine, repository root):
  python3 experiments/predictor/eager_floor_boot.py LABEL [rounds]
"""
import json
import statistics
import sys

from perflab.config import Config
from perflab.train.comm import Serial
from perflab.train.runner import Device, train_on_ranks

label, rounds = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 2
SHAPES = ((1536, 1400), (2304, 1400), (2304, 2800))


def step_s(H: int, b: int, N: int, gemm: str, mode: str = "resident") -> float:
    cfg = Config(dataset="synthetic", hidden_sizes=(H,), batch_size=b, train_size=N, num_epochs=4, test_size=0,
                 dtype="float32", learning_rate=0.01)
    history, _ = train_on_ranks(cfg, "data", Serial(), Device(backend="cupy", mode=mode, gemm=gemm, graphs=False),
                                log=None)
    return statistics.median(e["seconds"] for e in history.epochs[1:]) / cfg.num_batches


for r in range(rounds):
    for gemm in ("cublas", "wgmma", "x3tf32"):
        short, long = step_s(16, 16, 16 * 20, gemm) * 20, step_s(16, 16, 16 * 400, gemm) * 400
        print(json.dumps({"label": label, "round": r, "gemm": gemm, "what": "floor H 16",
                          "ms": round(1e3 * (long - short) / 380, 4)}), flush=True)
        for H, b in SHAPES:
            print(json.dumps({"label": label, "round": r, "gemm": gemm, "what": f"step H {H} b {b}",
                              "ms": round(1e3 * step_s(H, b, 60000, gemm), 4)}), flush=True)
