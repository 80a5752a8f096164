"""Why does a BF16 eager point diverge in `perflab sweep` (H100, 026068f: 784-1760-10, b = 2100, lr 0.1, synthetic)
when `perflab train` with the same settings converges? One process, the point run as the sweep runs it, then the
same training through train_on_ranks with one thing changed at a time. Usage: python sweep_nan.py"""

from perflab.analysis import perfmodel
from perflab.config import Config
from perflab.train.comm import on_first_ranks
from perflab.train.loop import Diverged
from perflab.train.runner import train_on_ranks
from perflab.train.spec import RunSpec
from perflab.workbook import sweep

point = sweep.grid(hidden=(1760,), batch=(2100,), backend=("cupy",), dtype=("bfloat16",), N=60000,
                   launch=("eager",))[0]
print("point", {k: point[k] for k in ("H", "B", "dtype", "launch", "comm", "learning_rate", "epochs")})
row = sweep.run_point_on_world(point, "synthetic", 60.0)
print("sweep.run_point_on_world:", row["status"], row.get("error", ""), row.get("final_loss"))


def trained(name, dataset="synthetic", **changes):
    cfg = Config(dataset=dataset, hidden_sizes=perfmodel.widths(point["H"]), batch_size=point["B"], train_size=point["N"],
                 num_epochs=2, dtype=point["dtype"], test_size=0, learning_rate=point["learning_rate"])
    spec = RunSpec.from_point(point).validate()
    cfg = cfg.replace(**{k: v for k, v in changes.items() if hasattr(cfg, k)})
    spec = spec.replace(**{k: v for k, v in changes.items() if not hasattr(cfg, k)})
    try:
        history, trainer = on_first_ranks(1, lambda comm: train_on_ranks(cfg, "data", comm, spec, log=None))
        losses = [e.get("loss") for e in history.epochs]
        print(f"{name}: final loss {history.final_loss}, epochs {losses}")
        trainer.close()
    except Diverged as exc:
        print(f"{name}: DIVERGED {exc}")


trained("as the sweep (2 epochs)")
trained("timeout 0 -> default", timeout=None)
trained("graph", launch="graph")
trained("float32", dtype="float32")
trained("print every batch", print_every=1)
