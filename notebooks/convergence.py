# %% [markdown]
# # Convergence: loss, learning rate, hidden size, test precision
#
# The seeds' Questions 1.3 and 1.4 on MNIST with the sequential reference (the parallel runs are
# the same numbers, see the correctness notebook).

# %% tags=["parameters"]
N = 60000
test_size = 10000
epochs = 5
rates = [0.01, 0.1, 0.5, 1.0]
hidden_sizes = [64, 256, 512]
batch = 100

# %%
import pandas as pd
from IPython.display import Image, display

from perflab.config import Config
from perflab.report import plots
from perflab.train.comm import Serial
from perflab.train.runner import train_on_ranks


def run(**kw):
    cfg = Config(train_size=N, test_size=test_size, num_epochs=epochs, batch_size=batch, reg=1e-6, dtype="float32",
                 shuffle=True, **kw)
    return train_on_ranks(cfg, "sequential", Serial(), log=None)[0]

by_rate = {lr: run(learning_rate=lr, hidden_sizes=(hidden_sizes[-1],)) for lr in rates}
by_h = {h: run(learning_rate=rates[-1], hidden_sizes=(h,)) for h in hidden_sizes}
summary = pd.DataFrame([{"learning_rate": lr, "H": hidden_sizes[-1], "final_loss": h.final_loss,
                         "test_precision": h.test_precision} for lr, h in by_rate.items()] +
                       [{"learning_rate": rates[-1], "H": H, "final_loss": h.final_loss,
                         "test_precision": h.test_precision} for H, h in by_h.items()])
display(summary)

# %%
curves = {f"lr={lr}": ([e["epoch"] + 1 for e in h.epochs], [e["loss"] for e in h.epochs]) for lr, h in by_rate.items()}
display(Image(str(plots.save(plots.convergence(curves), "convergence_learning_rate",
    f"Training loss (last batch of each epoch) on MNIST for several learning rates, H={hidden_sizes[-1]}, B={batch}, "
    f"N={N}, reg=1e-6, float32."))))
curves = {f"H={H}": ([e["epoch"] + 1 for e in h.epochs], [e["test_precision"] for e in h.epochs]) for H, h in by_h.items()}
display(Image(str(plots.save(plots.convergence(curves, ylabel="test precision", logy=False), "convergence_hidden_size",
    f"Test precision on the MNIST test set ({test_size} images) per epoch for several hidden sizes, lr={rates[-1]}, "
    f"B={batch}, N={N}."))))
