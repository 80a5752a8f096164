"""Does a staged point run slower after other points of the same process? In the H100 blind check
(results/nvidia-h100-80gb-hbm3/prediction_check_h100_cublas_h1280_h3072_b1600_b4800.csv) staged
H=1280 b=1600 took 1.78 ms a batch right after its resident point; alone in a process, five times,
0.99-1.13 ms (results/nvidia-h100-80gb-hbm3/staged_spread.csv), the prediction 1.02. One process
runs staged, resident, staged, pipelined, staged, resident, staged at that point, as `perflab sweep`
measures them (one warm-up epoch, 5 timed, one profiled), each behind a walk of the ceilings'
staged copy (perflab ceilings' staged_images, 3 walks): does the staged batch follow the order,
and does the copy walk taken just before it follow the batch? One line a point:
    PYTHONPATH=$PWD python3 experiments/staged_copy/order.py | tee $OUT/staged_order.jsonl
"""
import json

from perflab.measure import ceilings
from perflab.train.comm import world
from perflab.workbook.sweep import measure_point

H, b = 1280, 1600
ORDER = ("staged", "resident", "staged", "pipelined", "staged", "resident", "staged")


def main():
    comm = world()
    base = {"H": H, "B": b, "p": 1, "parallel": "data", "backend": "cupy", "gemm": "cublas", "dtype": "float32",
            "N": 60000, "epochs": 5, "learning_rate": 0.1}
    for i, mode in enumerate(ORDER):
        walk = ceilings.staged_images(batches=(b,), N=60000, walks=3)[0]
        row = measure_point({**base, "mode": mode}, comm)
        print(json.dumps({"i": i, "mode": mode, "batch_ms": 1e3 * row["epoch_seconds"] / row["batches"],
                          "profiled_copy_ms": 1e3 * row.get("t_copying images host -> device", float("nan")),
                          "walk_ms": 1e3 * walk["seconds"], "walk_min_ms": 1e3 * walk["min_seconds"],
                          "walk_max_ms": 1e3 * walk["max_seconds"]}), flush=True)


if __name__ == "__main__":
    main()
