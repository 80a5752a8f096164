# %% [markdown]
# # The USC experiment: Network1 against Network2, over examples and inside the matrix products
#
# The USC slides ("Parallel Gradient Descent for Multilayer Feedforward Neural Networks") train
# Network1 (784-1024-10) and Network2 (784-1024-1024-10) serially, parallelized over examples
# (threads: here MPI ranks of one BLAS thread each, the batch split over them), inside the matrix
# products (one process, k BLAS threads) and on a GPU, and compare time per epoch, GFLOP/s and the
# speedup over the serial run. This notebook measures the machine it runs on (`perflab.workbook.usc`:
# each configuration its own `perflab train` process, float32, synthetic data); the committed runs
# are drawn after it.

# %% tags=["parameters"]
cores = None     # CPU core counts; None: 1, 2, 4, ... up to this machine's
batch = 1000     # mini-batch B
N = 12000        # samples an epoch
epochs = 3       # epochs a configuration (their median)
gpu = None       # also one GPU; None: where CuPy sees one

# %%
from IPython.display import Image, display

from perflab import results
from perflab.report import plots
from perflab.workbook import usc

table = usc.run(cores, batch=batch, N=N, epochs=epochs, gpu=gpu)
display(table.round(3))
machine = results.machine_key()
png = plots.save(plots.usc(table, f"Network1 against Network2, {machine}"), f"usc_{machine}",
    f"Time per epoch, GFLOP/s (the seeds' FLOP count) and speedup over the serial run of Network1 (784-1024-10, solid) "
    f"and Network2 (784-1024-1024-10, dashed) against CPU cores on {machine}: over examples (MPI ranks of one BLAS "
    f"thread) and inside the matrix products (one rank, k BLAS threads), and one GPU as a level where there is one; "
    f"B = {batch}, {N} samples an epoch, float32. Source: usc.csv in this run's folder.")
display(Image(str(png)))

# %% [markdown]
# ## What the numbers say
#
# The speedup of each way at the most cores, per net, and the GPU's over the serial run.

# %%
best = table[table.cores == table.cores.max()]
for _, r in best.iterrows():
    print(f"{r.net}: {r.way} on {r.cores} cores runs an epoch in {r.epoch_seconds:.3f} s, "
          f"{r.speedup:.1f}x the serial run ({r.gflops:.0f} GFLOP/s)")
for _, r in table[table.way == "gpu"].iterrows():
    print(f"{r.net}: one GPU runs an epoch in {r.epoch_seconds:.4f} s, {r.speedup:.0f}x the serial run "
          f"({r.gflops:.0f} GFLOP/s)")

# %% [markdown]
# ## The committed runs
#
# The same experiment on the GPU machines of the campaign (`results/<machine>/usc.csv`).

# %%
import pandas as pd

for path in sorted(results.RESULTS_ROOT.glob("*/usc.csv")):
    committed = usc.with_speedup(pd.read_csv(path))
    display(committed.round(3))
    display(Image(str(plots.save(plots.usc(committed, f"Network1 against Network2, {path.parent.name} (committed)"),
        f"usc_{path.parent.name}_committed",
        f"The USC experiment on {path.parent.name} as committed: time per epoch, GFLOP/s and speedup against CPU "
        f"cores, over examples and inside the matrix products, and one GPU. Source: results/{path.parent.name}/usc.csv."))))
