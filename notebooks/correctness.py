# %% [markdown]
# # Correctness: parallel training against the sequential reference
#
# The seeds' Questions 1.1 and 1.2: after training, the data- and model-parallel runs must match
# the sequential float64/float32 reference (relative Frobenius error per parameter at most 1e-12 /
# 1e-5; the seeds saw about 1e-16 and 1e-7). Runs on the MPI engines, p = 1 .. engines.

# %% tags=["parameters"]
engines = 2
hidden = 64
N = 1000
B = 101            # odd, so the ranks' shares differ by one
epochs = 2
learning_rate = 0.5
dataset = "synthetic"

# %%
from IPython.display import Image, display

from perflab.report import plots
from perflab.workbook import cluster, correctness

cfg = dict(dataset=dataset, input_size=784, hidden_sizes=[hidden], num_classes=10, train_size=N, batch_size=B,
           num_epochs=epochs, learning_rate=learning_rate, test_size=0)
correctness.checked(cfg)  # a bad parameter (the Config's or the RunSpec's) is named before any engine starts
cluster_started, client, view = cluster.engines(engines)
table = correctness.correctness_table(view, cfg, ranks=list(range(1, len(client.ids) + 1)))
display(table)
assert table.passed.all(), "a parallel run left the tolerance"

# %%
fig, ax = plots.new_figure()
for (dtype, parallel), g in table.groupby(["dtype", "parallel"]):
    ax.semilogy(g.p, g.max_rel_error.clip(lower=1e-18), "o-", label=f"{parallel}, {dtype}")
for tol in (1e-12, 1e-5):
    ax.axhline(tol, color="k", ls=":", lw=1)
ax.set_xlabel("MPI ranks p"); ax.set_ylabel("max relative error vs sequential"); ax.legend(fontsize=8)
display(Image(str(plots.save(fig, "correctness",
    f"Largest per-parameter relative error (Frobenius) of data- and model-parallel training against the sequential "
    f"reference after {epochs} epochs (H={hidden}, N={N}, B={B}, {dataset}); dotted: the float64 and float32 tolerances."))))
cluster.stop(cluster_started)
