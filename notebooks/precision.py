# %% [markdown]
# # What each precision buys and what it costs
#
# The HKUST lecture trains in FP16 "to improve GPU throughput"; Hopper's tensor cores also take TF32 and
# BF16. This notebook trains one net from one initialisation on the same batches in every precision this
# machine runs (`perflab.workbook.precision`): on a GPU FP32, TF32, 3xTF32, BF16 and FP16 (mixed precision:
# FP32 masters, FP16 loss-scaled), on NumPy FP32 and the half-precision step emulated (its rounding, not its
# speed). It puts each run's weights against the float64 reference's and times its epochs; the committed
# one-H100 runs are drawn after it.

# %% tags=["parameters"]
hidden = [256]         # hidden layer widths (784-H1-...-10)
dataset = "mnist"      # mnist (committed in data/) or synthetic
N = 12000              # training samples
B = 50                 # mini-batch
epochs = 2             # epochs before the weights are compared
backend = "auto"       # auto: CuPy where it sees a GPU, else NumPy

# %%
from IPython.display import Image, display

from perflab import results
from perflab.config import ACCURACY, Config
from perflab.report import plots
from perflab.workbook import plan, precision

backend = plan.resolve_backend(backend, plan.gpu_count())
capability = None
if backend == "cupy":
    import cupy
    capability = cupy.cuda.Device().compute_capability
cfg = Config(**{**ACCURACY, "hidden_sizes": tuple(hidden), "dataset": dataset, "train_size": N, "batch_size": B,
                "num_epochs": epochs, "test_size": 0})
rows = precision.weights_against_float64(cfg, precision.precisions_here(backend, capability), backend=backend)
table = precision.table(rows)
display(table)
machine = results.machine_key()
png = plots.save(plots.precision(table, f"Each precision against float64, {machine}"), f"precision_{machine}",
    f"784-{'-'.join(map(str, hidden))}-10 trained {epochs} epochs of {N} {dataset} samples in batches of {B} from one "
    f"initialisation in each precision on {backend} ({machine}): the worst relative error of its weights against the "
    "float64 reference's after the same batches (left, log scale) and its median training epoch (right). On NumPy the "
    "half-precision step is emulated in FP32: its rounding, not its speed. Source: this run.")
display(Image(str(png)))

# %% [markdown]
# ## The committed runs on one H100
#
# The same comparison on MNIST, 784-1024-10 (`results/nvidia-h100-80gb-hbm3/half/precision.jsonl`), and the
# half-precision step's epochs beside its peers and floors (`half/bench_train_half.csv`).

# %%
import json

import pandas as pd

for path in sorted(results.RESULTS_ROOT.glob("*/half/precision.jsonl")):
    committed = [json.loads(line) for line in path.read_text().splitlines()]
    display(precision.table([r for r in committed if r["table"] == "weights against float64"]))
for path in sorted(results.RESULTS_ROOT.glob("*/half/bench_train_half.csv")):
    display(pd.read_csv(path).pivot_table(index="peer", columns=["H", "B"], values="epoch_ms").round(3))
