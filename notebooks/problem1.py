# %% [markdown]
# # The final assignment's Problem 1: convergence of the model
#
# Questions 1.1-1.4 of the CME 213 final assignment: the seeds' correctness test in single and double precision;
# how far this machine's device run (the GPU, or on a CPU the batch's gradient summed over virtual ranks) drifts
# from the sequential CPU reference as the learning rate, hidden size and epochs grow, and why; the learning rate
# that converges fastest; a long run to its plateau and the precision against the hidden size, on a validation set
# carved from the training set. `perflab.workbook.problem1` runs them and writes `problem1_<part>.csv` into the run
# folder as it goes (a rerun skips what is done). On a CPU it runs the largest version whose estimate fits
# `budget_minutes` and says what it left out; on a GPU, `full = True` runs the solution's scale in minutes.

# %% tags=["parameters"]
budget_minutes = 3   # on a CPU: the largest version that should fit (the full one takes hours there)
full = False         # the solution's scale: 60000 samples, lr 1e-3 to 100, H 16 to 2048, up to 1000 epochs
parts = "all"        # or a list among "check", "drift", "rates", "hidden" (Q1.1 to Q1.4)
backend = "auto"     # auto: CuPy where it sees a GPU, else NumPy
rates = None         # Q1.3's learning rates, all > 0 (None: the version's)
hidden = None        # Q1.4's hidden sizes, all >= 1 (None: the version's)

# %%
from IPython.display import Image, Markdown, display

from perflab import results
from perflab.workbook import problem1

folder = results.run_dir()
changes = {k: v for k, v in (("rates", rates), ("hidden", hidden)) if v is not None}
problem1.run(folder, None if full else problem1.budget_seconds(budget_minutes), full=full, backend=backend,
             parts=parts, **changes)

# %%
for key, answer in problem1.answers(folder).items():
    if not hasattr(answer, "text"):
        display(Markdown(f"### {key}\n\nNot run here ({answer.why}): `{answer.command}`"))
        continue
    display(Markdown(f"### {key}\n\n{answer.text}"))
    for table, caption in answer.tables:
        display(Markdown(f"*{caption}*"), table)
    for png in answer.figures:
        display(Image(str(png)))
