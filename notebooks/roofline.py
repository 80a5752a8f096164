# %% [markdown]
# # Roofline: where the training time goes, and what bounds it
#
# The seeds' Problem 2 (HW6) and Questions 2.1-2.6 of the final assignment, done by perflab: FLOPs
# and bytes per batch, effective P_flops / P_pci / P_mpi from profiled medians, the modified (serial)
# roofline and the combined PCIe + MPI roofline with experimental points for H in {512, 1024, 2048}
# and p with B/p constant, a B sweep, and predicted against measured time per batch.
# This notebook measures the machine it runs on: it picks CuPy with one MPI engine per GPU where
# there are GPUs, else NumPy with an engine per core (up to 4), starts the engines (or uses running
# ones), sweeps, and writes everything to this machine's run folder `runs/<machine key>/` (git-ignored).
# The committed campaign under `results/` is drawn beside it at the end, labelled as such.
# Every parameter below can be set with `perflab notebook roofline -p NAME VALUE`; None means the
# backend's size.

# %% tags=["parameters"]
backend = "auto"        # auto (CuPy when a GPU is visible) | numpy | cupy
engines = "auto"        # auto (one per GPU, else one per core up to 4) | a number
hidden = None           # nets: one width (512) or a deeper net's ('1024-1024'); default 512, 1024, 2048
ranks = None            # p sweep with B/p constant; default 1, 2, 4, ... up to the engines
per_rank_batch = None   # B/p (NumPy 1600, CuPy 3000)
batch_sweep = None      # B sweep on one rank at the first net; default 800, 3200, 12000
N = None                # samples an epoch (NumPy 38400, the seeds' N; CuPy 60000)
modes = None            # GPU data paths: resident, staged (the seeds' path) and pipelined (it, overlapped)
name = "roofline"       # <run folder>/<name>.csv
problem1_minutes = 1.0  # the final assignment's Problem 1: on a CPU the largest version that fits; on a GPU the full one
compare_committed = True  # also draw the committed GPU campaigns under results/

# %%
import time

job_started = time.perf_counter()  # the main job's own time, against its estimate (the last cell)
import pandas as pd
from IPython.display import Image, display

from perflab import results
from perflab.analysis import roofline
from perflab.report import plots
from perflab.workbook import cluster, plan, sweep

job = plan.roofline_plan(backend, engines, hidden, ranks, per_rank_batch, batch_sweep, N, modes, name=name)
from perflab.workbook import problem1

p1_plan = problem1.plan(problem1.budget_seconds(problem1_minutes), full=job.backend == "cupy", backend=job.backend)
job.estimate_parts["Problem 1"] = problem1.estimate_left(p1_plan, results.run_dir())
print(job.describe())
plan.record_part(results.run_dir(), plan.JOB_STARTED, job.estimate_s, 0.0)
print("results go to", sweep.output_path(name))
cluster_started, client, view = cluster.engines(job.engines)
print(f"{len(client.ids)} MPI engines running")
from perflab.measure import steadiness

steadiness.record(results.run_dir(), "start")  # the host before the ceilings, beside each point, after the sweep

# %% [markdown]
# ## This machine's ceilings, and the prediction made from them before the sweep
#
# `perflab ceilings` on the engines: every kernel of the training step timed alone at the sweep's
# shapes, and the whole step's kernels one after another (as its graph runs them), the trainer's
# host floor and what an epoch costs beyond its graph, the copies and all-reduces against size. The predictor
# (`perflab.analysis.predictor`) composes each point's time per batch from these alone; no constant is
# fitted to the sweep it predicts. Both files land in the run folder before the sweep starts.

# %%
from perflab.analysis import validation

with plan.timed_part(results.run_dir(), "ceilings", job.estimate_parts["ceilings"]):
    ceiling_files = plan.measure_ceilings(view, job, results.run_dir())
predicted = plan.predict(job, results.run_dir())
display(predicted[["H", "B", "p", "backend", "mode", "predicted_ms", "composition"]].round(3))

# %% [markdown]
# ## Sweeps (each point is written as it finishes; rerunning skips finished points)

# %%
with plan.timed_part(results.run_dir(), "sweep", job.estimate_parts["sweep"]):
    path = sweep.run_grid_engines(view, job.points, name, main_job=True, between=steadiness.beside(results.run_dir()))
steadiness.record(results.run_dir(), "end")
table = roofline.measured(roofline.load(path))
table = table[(table.B <= job.N) & (table.backend == job.backend)]
display(table[["H", "B", "p", "mode", "epoch_seconds", "t_batch iteration", "P_flops"] + [c for c in ("P_mpi", "P_pci") if c in table]])
staged = table[table["mode"] == "staged"] if (table["mode"] == "staged").any() else table

# %% [markdown]
# ## Predicted (from the ceilings, before the sweep) against measured time per batch

# %%
checked, _ = validation.validate_folder(results.run_dir())
checked = checked[checked.source == path.name]
print(validation.describe(checked))
print("\n".join(steadiness.first_lines(results.run_dir(), sweep=path.name)))
checked = steadiness.judge(checked, results.run_dir(), sweep=path.name)
display(checked[["H", "B", "p", "mode", "measured_ms", "predicted_ms", "error", "noise_low_ms", "noise_high_ms",
                 "inside_noise"]].round(3))
machine = results.machine_key()
png = plots.save(plots.predicted_vs_measured(checked, title=f"Bottom-up predictor vs measurement, {machine}"),
    f"predictor_vs_measured_{machine}",
    f"Time per batch predicted by perflab.analysis.predictor from this machine's ceilings alone ({', '.join(f.name for f in ceiling_files)}, "
    f"measured before the sweep) against the measured unprofiled epoch over its batches on {machine}; labels give the "
    f"error. Source: {path.name}, validation.csv.")
display(Image(str(png)))

# %% [markdown]
# ## The roofline whose roofs are this machine's ceilings
#
# P_flops is the fastest GEMM the ceilings measured, and each data path's bandwidth its fastest
# measured links; every point lies under its path's curve (a test checks every committed one).

# %%

roofs = roofline.folder_roofs(results.run_dir(), "gpu" if job.backend == "cupy" else "cpu")
bounds = roofline.ceiling_bounds(table[table.gemm == "cublas"], roofs)
display(bounds.round(3))
png = plots.save(plots.ceiling_roofline(bounds, roofs, title=f"Roofline from measured ceilings, {machine}"),
    f"roofline_ceilings_{machine}",
    f"Roofs from this machine's ceilings files: P_flops {roofs['P_flops'] / 1e12:.3g} TFLOP/s (fastest GEMM measured), "
    f"each path's serial bound with its fastest measured links; points: the seeds' FLOPs per batch over the measured "
    f"time per batch (unprofiled epochs). Source: {path.name}.")
display(Image(str(png)))

# %% [markdown]
# ## Serial against pipelined: the staged path's two rooflines
#
# The seeds' path moves images and gradients through the host. Run in series (`staged`), copies,
# MPI and compute take turns: its bound is the seeds' serial roofline AI / (AI/P_flops + 1/BW).
# Pipelined on streams, they overlap, and the bound is the standard min(P_flops, AI BW). Same
# links (BW from this machine's pinned copies and host all-reduce), same run; each point says
# which roof it meets.

# %%
both = roofline.overlap_bounds(table[table.gemm == "cublas"], roofs)
if len(both):
    display(both.drop(columns=["BW"]).round(3))
    png = plots.save(plots.overlap_roofline(both, roofs["P_flops"], title=f"The staged path, serial and pipelined, {machine}"),
        f"roofline_pipelined_{machine}",
        f"Seeds' FLOPs per batch over the measured time per batch (unprofiled epochs) of the staged (serial) and "
        f"pipelined points at p > 1, under the standard and the seeds' serial roofline with P_flops "
        f"{roofs['P_flops'] / 1e12:.3g} TFLOP/s and BW = 2 / (1/P_pci + 1/P_mpi) = {both.BW.iloc[0] / 1e9:.3g} GB/s "
        f"from this machine's ceilings. Source: {path.name}.")
    display(Image(str(png)))
else:
    print("no staged or pipelined GPU points with p > 1 in this run (one GPU, or the CPU): nothing is exchanged")

# %% [markdown]
# ## Question 2.1 / 2.3: FLOPs and bytes per batch per rank (B' = B/p)

# %%
display(roofline.flops_bytes_table(staged).round(4))

# %% [markdown]
# ## Question 2.4: effective rates from the reference point's medians

# %%
rates = roofline.reference_rates(staged)
print({k: (f"{v:.4g}" if isinstance(v, float) else v) for k, v in rates.items()})
print("the seeds' RTX 6000: P_flops 1.63e12, P_pci 1.27e10, P_mpi 7.95e9")

# %% [markdown]
# ## Question 2.5 / 2.6: the seeds' effective-rate rooflines with the experimental points
#
# The seeds' method: P_flops, P_pci, P_mpi are the effective rates of one reference point, not the
# machine's ceilings, so points whose GEMMs run faster than the reference's can cross this line
# (the roofline above, from ceilings, is the bound).
#
# HW6 counts every cudaMemcpy (images and the gradient's two copies); the final assignment the gradient over
# PCIe and MPI (its combined roof). On the CPU there is no PCIe: the exchange goes through MPI only, and the
# roof's bandwidth is P_mpi. A roof is drawn only where its bandwidth was measured.

# %%
from perflab.report import questions

seeds_run = questions.Run.load(results.run_dir(), [path], results.run_dir() / "figures")  # the report's own view
drawn = {}  # count -> name: on the CPU and on one GPU both questions use one count, drawn once
for count, name in ((questions.count_of(seeds_run, "hw6"), "roofline_serial"), (questions.count_of(seeds_run, "fa"), "roofline_combined")):
    drawn.setdefault(count, name)
for count, name in drawn.items():
    png = questions.roofline_figure(seeds_run, seeds_run.seeds_path, name, count)  # None: no bandwidth was measured
    if png:
        print(questions.COUNTS[count] + ": " + questions.placement(seeds_run, seeds_run.seeds_path, count))
        display(Image(str(png)))

# %% [markdown]
# ## The seeds' serial model against measured time per batch (rates from the reference point)

# %%
pred = roofline.prediction_table(staged, rates)
display(pred.round(3))
print(f"median |error| = {100 * roofline.median_abs_error(pred):.1f}%")
fig = plots.predicted_vs_measured(pred, title=f"The seeds' serial model vs measurement, {machine}")
png = plots.save(fig, f"seeds_model_vs_measured_{machine}",
    f"Time per batch predicted by the serial model (GEMM FLOPs / P_flops + bytes / P_pci + bytes / P_mpi, rates from "
    f"{rates['reference']}) against the measured median batch iteration on {machine}; labels give the error. "
    f"Source: {path.name}.")
display(Image(str(png)))

# %% [markdown]
# Why they differ: the model counts only the dominant GEMMs and the exchanged bytes; the
# measured batch also holds elementwise kernels, the loss, Python overhead and (at p > 1) waiting in
# the all-reduce for the slowest rank. Rates taken at one point (H=512) carry that point's GEMM
# efficiency to the others: larger H and B run GEMMs closer to the peak, so they come out faster than
# predicted, and smaller ones slower - the seeds saw points above and below their roofline for the
# same reason.

# %% [markdown]
# ## The committed GPU campaigns under results/ (other machines, for comparison)
#
# The staged points (the seeds' path: images copied every batch, gradients through host MPI) carry
# P_pci and P_mpi, so they get both the modified and the combined PCIe + MPI roofline; the resident
# points (data on the GPU, NCCL) show how far the seeds' bottleneck moves when it is removed.

# %%
import json

for folder, meta in (roofline.machines() if compare_committed else {}).items():
    gpu_table = results.RESULTS_ROOT / folder / f"{name}.csv"
    if "gpu" not in meta or not gpu_table.exists():
        continue
    meta = json.loads(gpu_table.with_suffix(".json").read_text())  # this table's own machine and commit
    t = roofline.load(gpu_table)
    staged = t[t["mode"] == "staged"] if (t["mode"] == "staged").any() else t
    r = roofline.reference_rates(staged)
    print(folder, {k: (f"{v:.4g}" if isinstance(v, float) else v) for k, v in r.items()})
    ex = staged[staged.p > 1] if (staged.p > 1).any() else staged
    label = f"{meta['gpu']} x{meta.get('gpu_count', 1)} (git {meta.get('git_commit', '?')[:8]})"
    if "P_pci" in r or "P_mpi" in r:  # no roof that was not measured
        fig = plots.roofline(ex, r["P_flops"], r.get("P_pci", r.get("P_mpi")), kind="serial",
                             title=f"Modified roofline, {label}", label_bw="P_pci" if "P_pci" in r else "P_mpi")
        display(Image(str(plots.save(fig, f"roofline_serial_{folder}",
            f"Modified roofline on {label}, staged mode (the seeds' path), rates from {r['reference']}; points: the H "
            f"sweep with B/p = 3200 at p > 1. Source: {folder}/{gpu_table.name}."))))
    if "P_pci" in r and "P_mpi" in r:
        fig = plots.roofline(ex, r["P_flops"], r["P_pci"], kind="combined", P_mpi=r["P_mpi"],
                             title=f"Combined PCIe + MPI roofline, {label}", label_bw="P_pci")
        display(Image(str(plots.save(fig, f"roofline_combined_{folder}",
            f"Combined roofline AI / (AI/P_flops + (1/P_pci + 1/P_mpi)/2) on {label}, staged mode, rates from "
            f"{r['reference']}. Source: {folder}/{gpu_table.name}."))))
    pred = roofline.prediction_table(staged, r)
    print(f"{folder}: median |error| {100 * roofline.median_abs_error(pred):.1f}% (staged points)")
    display(Image(str(plots.save(plots.predicted_vs_measured(pred, title=f"The seeds' serial model vs measurement, {label}"),
        f"seeds_model_vs_measured_{folder}",
        f"Time per batch predicted by the serial model (rates from {r['reference']}) against the measured median "
        f"batch iteration, staged mode on {label}. Source: {folder}/{gpu_table.name}."))))
    checked_there = results.RESULTS_ROOT / folder / "validation.csv"
    if checked_there.exists():
        print(f"{folder}: the bottom-up predictor from its ceilings:", validation.describe(pd.read_csv(checked_there)))
    both = t.pivot_table(index=["H", "B", "p"], columns="mode", values="t_batch iteration") * 1e3
    display(both.round(3))

# %% [markdown]
# ## The bottom-up predictor on every committed machine
#
# Each folder's `validation.csv` (`perflab validate --committed`): predicted from that machine's
# ceilings alone against every committed point. Resident and pipelined points sit on the diagonal;
# the staged ones scatter, because their image copy is the host's one-core memcpy, which drifts
# over seconds (the bars: the band from the copy ceiling's fastest and slowest walk).

# %%
if compare_committed:
    tables = {f.parent.name: pd.read_csv(f) for f in sorted(results.RESULTS_ROOT.glob("*/validation.csv"))}
    display(Image(str(plots.save(plots.validation_scatter(tables), "predictor_validation_committed",
        "The bottom-up predictor against every committed point, per machine folder, ms per batch. "
        "Sources: results/<folder>/validation.csv."))))

# %% [markdown]
# ## The predictions committed before their runs (the blind tests)
#
# Each made by `perflab whatif` from a ceilings file alone, committed, then measured by a sweep run at
# that commit. Graphed resident steps (the kernels' part of the model) land within a few percent; staged
# and kernel-by-kernel steps follow the host's copy and launch speed, which move between and within boots.

# %%
if compare_committed:
    from IPython.display import Markdown

    from perflab.report import predictions
    points = predictions.check_points(predictions.committed_checks())
    if len(points):
        display(Image(str(plots.save(plots.blind_checks(points), "blind_checks_committed",
            "Every committed prediction's points against their run, |error| per check in the order they ran. "
            "Sources: results/predictions/*.json, results/<folder>/prediction_check_*.csv."))))
        display(Markdown(predictions.checks_summary(points)))

# %% [markdown]
# ## The final assignment's Problem 1 (Q1.1-Q1.4): correctness, drift, learning rate, hidden size
#
# `perflab.workbook.problem1`: on a CPU the largest version that fits `problem1_minutes` (it says what it left
# out and how long the full one takes), on a GPU the full one. Resumable like the sweeps.

# %%
problem1.run(results.run_dir(), None, planned=p1_plan, record_parts=True)
for key, answer in problem1.answers(results.run_dir()).items():
    print(key, getattr(answer, "text", getattr(answer, "why", "")))

# %%
cluster.stop(cluster_started)
plan.record_part(results.run_dir(), plan.WHOLE_JOB, job.estimate_s, time.perf_counter() - job_started)
print("\n".join(plan.estimate_lines(results.run_dir())))
