"""Writes the notebooks from cell sources (run once after editing; the .ipynb files are committed)."""
from pathlib import Path

import nbformat as nbf

HERE = Path(__file__).resolve().parent.parent / "notebooks"


def notebook(name, cells):
    nb = nbf.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    for kind, src in cells:
        if kind == "md":
            nb.cells.append(nbf.v4.new_markdown_cell(src.strip()))
        else:
            cell = nbf.v4.new_code_cell(src.strip())
            if kind == "params":
                cell.metadata["tags"] = ["parameters"]
            nb.cells.append(cell)
    nbf.write(nb, HERE / f"{name}.ipynb")


notebook("roofline", [
    ("md", """
# Roofline: where the training time goes, and what bounds it

The seeds' Problem 2 (HW6) and Questions 2.1-2.6 of the final assignment, done by perflab: FLOPs
and bytes per batch, effective P_flops / P_pci / P_mpi from profiled medians, the modified (serial)
roofline and the combined PCIe + MPI roofline with experimental points for H in {512, 1024, 2048}
and p with B/p constant, a B sweep, and predicted against measured time per batch.
This notebook starts local MPI engines (or uses running ones), runs the sweeps on this machine
(NumPy when there is no GPU), and draws GPU results from `results/` where they exist."""),
    ("params", """
engines = 2                      # MPI engines (ranks) to start or expect
hidden = [512, 1024, 2048]       # H sweep
ranks = [1, 2]                   # p sweep, with B/p constant
per_rank_batch = 1600            # B/p
batch_sweep = [800, 3200, 12000] # B sweep, one rank, first H
N = 38400                        # samples an epoch (the seeds' N)
backend = "numpy"                # numpy | cupy
name = "roofline"                # results/<machine>/<name>.csv
"""),
    ("code", """
import pandas as pd
from IPython.display import display
from perflab import analysis, cluster, plots, results, sweep
cluster_started, client, view = cluster.engines(engines)
print(f"{len(client.ids)} MPI engines; results go to", sweep.output_path(name))
"""),
    ("md", "## Sweeps (each point is written as it finishes; rerunning skips finished points)"),
    ("code", """
points = sweep.grid(hidden=hidden, per_rank_batch=[per_rank_batch], ranks=ranks, backend=[backend], N=N)
points += sweep.grid(hidden=[hidden[0]], batch=batch_sweep, ranks=[1], backend=[backend], N=N)
path = sweep.run_grid_engines(view, points, name)
table = analysis.load(path)
table = table[table.B <= N]
display(table[["H", "B", "p", "epoch_seconds", "t_batch iteration", "P_flops"] + [c for c in ("P_mpi", "P_pci") if c in table]])
"""),
    ("md", "## Question 2.1 / 2.3: FLOPs and bytes per batch per rank (B' = B/p)"),
    ("code", "display(analysis.flops_bytes_table(table).round(4))"),
    ("md", "## Question 2.4: effective rates from the reference point's medians"),
    ("code", """
rates = analysis.reference_rates(table)
print({k: (f"{v:.4g}" if isinstance(v, float) else v) for k, v in rates.items()})
print("the seeds' RTX 6000: P_flops 1.63e12, P_pci 1.27e10, P_mpi 7.95e9")
"""),
    ("md", """## Question 2.5 / 2.6: rooflines with the experimental points

On the CPU there is no PCIe: the exchange goes through MPI only, so the modified roofline uses
P_mpi as its bandwidth. A GPU run (staged mode) adds P_pci and the combined form."""),
    ("code", """
machine = results.machine_name()
bw = rates.get("P_pci", rates.get("P_mpi"))
exchanged = table[table.p > 1]
fig = plots.roofline(exchanged if len(exchanged) else table, rates["P_flops"], bw or 1e10, kind="serial",
                     title=f"Modified roofline, {machine}", label_bw="P_pci" if "P_pci" in rates else "P_mpi")
png = plots.save(fig, f"roofline_serial_{machine}",
    f"Modified (serial) roofline AI / (AI/P_flops + 1/BW) on {machine}, P_flops and BW the effective rates of "
    f"{rates['reference']}; points: measured FLOP/s (seeds' FLOPs per batch over the median profiled batch "
    f"iteration) of the H sweep with B/p = {per_rank_batch} at p > 1. Source: {path.name}.")
if "P_pci" in rates and "P_mpi" in rates:
    fig = plots.roofline(exchanged, rates["P_flops"], rates["P_pci"], kind="combined", P_mpi=rates["P_mpi"],
                         title=f"Combined PCIe + MPI roofline, {machine}", label_bw="P_pci")
    plots.save(fig, f"roofline_combined_{machine}", f"Combined roofline, 1/BW = (1/P_pci + 1/P_mpi)/2, on {machine}.")
from IPython.display import Image
display(Image(str(png)))
"""),
    ("md", "## Predicted against measured time per batch"),
    ("code", """
pred = analysis.prediction_table(table, rates)
display(pred.round(3))
print(f"median |error| = {100 * analysis.median_abs_error(pred):.1f}%")
fig = plots.predicted_vs_measured(pred, title=f"Serial model vs measurement, {machine}")
png = plots.save(fig, f"predicted_vs_measured_{machine}",
    f"Time per batch predicted by the serial model (GEMM FLOPs / P_flops + bytes / P_pci + bytes / P_mpi, rates from "
    f"{rates['reference']}) against the measured median batch iteration on {machine}; labels give the error. "
    f"Source: {path.name}.")
display(Image(str(png)))
"""),
    ("md", """Why they differ: the model counts only the dominant GEMMs and the exchanged bytes; the
measured batch also holds elementwise kernels, the loss, Python overhead and (at p > 1) waiting in
the all-reduce for the slowest rank. Rates taken at one point (H=512) carry that point's GEMM
efficiency to the others: larger H and B run GEMMs closer to the peak, so they come out faster than
predicted, and smaller ones slower - the seeds saw points above and below their roofline for the
same reason."""),
    ("md", """## GPU results committed under results/

The staged points (the seeds' path: images copied every batch, gradients through host MPI) carry
P_pci and P_mpi, so they get both the modified and the combined PCIe + MPI roofline; the resident
points (data on the GPU, NCCL) show how far the seeds' bottleneck moves when it is removed."""),
    ("code", """
import json
for folder, meta in analysis.machines().items():
    gpu_table = results.RESULTS_ROOT / folder / f"{name}.csv"
    if "gpu" not in meta or not gpu_table.exists():
        continue
    meta = json.loads(gpu_table.with_suffix(".json").read_text())  # this table's own machine and commit
    t = analysis.load(gpu_table)
    staged = t[t["mode"] == "staged"] if (t["mode"] == "staged").any() else t
    r = analysis.reference_rates(staged)
    print(folder, {k: (f"{v:.4g}" if isinstance(v, float) else v) for k, v in r.items()})
    ex = staged[staged.p > 1] if (staged.p > 1).any() else staged
    label = f"{meta['gpu']} x{meta.get('gpu_count', 1)} (git {meta.get('git_commit', '?')[:8]})"
    fig = plots.roofline(ex, r["P_flops"], r.get("P_pci", r.get("P_mpi", 1e10)), kind="serial",
                         title=f"Modified roofline, {label}", label_bw="P_pci")
    display(Image(str(plots.save(fig, f"roofline_serial_{folder}",
        f"Modified roofline on {label}, staged mode (the seeds' path), rates from {r['reference']}; points: the H "
        f"sweep with B/p = 3200 at p > 1. Source: {folder}/{gpu_table.name}."))))
    if "P_pci" in r and "P_mpi" in r:
        fig = plots.roofline(ex, r["P_flops"], r["P_pci"], kind="combined", P_mpi=r["P_mpi"],
                             title=f"Combined PCIe + MPI roofline, {label}", label_bw="P_pci")
        display(Image(str(plots.save(fig, f"roofline_combined_{folder}",
            f"Combined roofline AI / (AI/P_flops + (1/P_pci + 1/P_mpi)/2) on {label}, staged mode, rates from "
            f"{r['reference']}. Source: {folder}/{gpu_table.name}."))))
    pred = analysis.prediction_table(staged, r)
    print(f"{folder}: median |error| {100 * analysis.median_abs_error(pred):.1f}% (staged points)")
    display(Image(str(plots.save(plots.predicted_vs_measured(pred, title=f"Serial model vs measurement, {label}"),
        f"predicted_vs_measured_{folder}",
        f"Time per batch predicted by the serial model (rates from {r['reference']}) against the measured median "
        f"batch iteration, staged mode on {label}. Source: {folder}/{gpu_table.name}."))))
    both = t.pivot_table(index=["H", "B", "p"], columns="mode", values="t_batch iteration") * 1e3
    display(both.round(3))
"""),
    ("code", "cluster.stop(cluster_started)"),
])


notebook("correctness", [
    ("md", """
# Correctness: parallel training against the sequential reference

The seeds' Questions 1.1 and 1.2: after training, the data- and model-parallel runs must match
the sequential float64/float32 reference (relative Frobenius error per parameter at most 1e-12 /
1e-5; the seeds saw about 1e-16 and 1e-7). Runs on the MPI engines, p = 1 .. engines."""),
    ("params", """
engines = 2
hidden = 64
N = 1000
B = 101            # odd, so the ranks' shares differ by one
epochs = 2
learning_rate = 0.5
dataset = "synthetic"
"""),
    ("code", """
import numpy as np
from IPython.display import Image, display
from perflab import analysis, cluster, plots
cluster_started, client, view = cluster.engines(engines)
cfg = dict(dataset=dataset, input_size=784, hidden_sizes=[hidden], num_classes=10, train_size=N, batch_size=B,
           num_epochs=epochs, learning_rate=learning_rate, test_size=0)
table = analysis.correctness_table(view, cfg, ranks=list(range(1, len(client.ids) + 1)))
display(table)
assert table.passed.all(), "a parallel run left the tolerance"
"""),
    ("code", """
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
"""),
])

notebook("convergence", [
    ("md", """
# Convergence: loss, learning rate, hidden size, test precision

The seeds' Questions 1.3 and 1.4 on MNIST with the sequential reference (the parallel runs are
the same numbers, see the correctness notebook)."""),
    ("params", """
N = 60000
test_size = 10000
epochs = 5
rates = [0.01, 0.1, 0.5, 1.0]
hidden_sizes = [64, 256, 512]
batch = 100
"""),
    ("code", """
import pandas as pd
from IPython.display import Image, display
from perflab import plots
from perflab.comm import Serial
from perflab.config import Config
from perflab.runner import train_on_ranks

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
"""),
    ("code", """
curves = {f"lr={lr}": ([e["epoch"] + 1 for e in h.epochs], [e["loss"] for e in h.epochs]) for lr, h in by_rate.items()}
display(Image(str(plots.save(plots.convergence(curves), "convergence_learning_rate",
    f"Training loss (last batch of each epoch) on MNIST for several learning rates, H={hidden_sizes[-1]}, B={batch}, "
    f"N={N}, reg=1e-6, float32."))))
curves = {f"H={H}": ([e["epoch"] + 1 for e in h.epochs], [e["test_precision"] for e in h.epochs]) for H, h in by_h.items()}
display(Image(str(plots.save(plots.convergence(curves, ylabel="test precision", logy=False), "convergence_hidden_size",
    f"Test precision on the MNIST test set ({test_size} images) per epoch for several hidden sizes, lr={rates[-1]}, "
    f"B={batch}, N={N}."))))
"""),
])

notebook("scaling", [
    ("md", """
# Scaling: time and efficiency against p; staged against resident

Reads the committed multi-GPU results (`results/*/scaling.jsonl`, `results/*/roofline.csv`);
runs nothing. Efficiency is T1 / (p Tp) with the batch per GPU fixed (the seeds' Question 2.2)."""),
    ("code", """
from IPython.display import Image, display
from perflab import analysis, plots
t = analysis.scaling_rows()
display(t)
"""),
    ("code", """
if len(t):
    fig, ax = plots.new_figure()
    for peer, g in t.groupby("peer"):
        ax.plot(g.p, g.epoch_ms, "o-", label=peer)
    ax.set_xlabel("GPUs p"); ax.set_ylabel("ms per epoch (60000 samples)"); ax.set_yscale("log"); ax.legend(fontsize=8)
    display(Image(str(plots.save(fig, "scaling_epoch",
        "Epoch time against the number of GPUs, H=2048, 3000 samples per GPU per step, 60000 an epoch, FP32: perflab "
        "resident (NCCL) and staged (host MPI, the seeds' path) beside PyTorch DDP and JAX's sharded scan. "
        f"Machines: {', '.join(sorted(t.machine.unique()))}."))))
"""),
    ("md", """## The gradient all-reduce, perflab beside torch.distributed

`mpirun -n P perflab bench allreduce` on the GPUs: perflab's NCCL (what training uses), its
host-staged MPI (the seeds' path) and PyTorch's NCCL, device-timed, at the gradient sizes."""),
    ("code", """
import pandas as pd
from perflab.results import RESULTS_ROOT
for path in sorted(RESULTS_ROOT.glob("*/bench_allreduce_p*.csv")):
    bench = pd.read_csv(path)
    display(bench.pivot_table(index="size_bytes", columns="impl", values="ms"))
    label = f"{path.parent.name}, p={bench.ranks.iloc[0]}"
    display(Image(str(plots.save(plots.allreduce(bench, title=f"All-reduce, {label}"), f"allreduce_{path.parent.name}",
        f"Milliseconds per float32 all-reduce against its size on {label}: perflab's NCCL and host-staged MPI beside "
        f"torch.distributed's NCCL (CUDA events, median); dotted: the gradient buffers of H=512 and H=2048. "
        f"Source: {path.parent.name}/{path.name}."))))
"""),
    ("md", """## Running the sweeps on a cluster

On a Slurm cluster, start the engines with the cluster's launcher, one engine per GPU, with the
controller listening on an address the compute nodes can reach (on one machine it stays on
localhost):

    ipcluster start -n 16 --engines=slurm --ip='*'

The notebooks then find the running cluster (`perflab.cluster.engines` connects before it starts
its own), and `sweep.run_grid_engines(view, points, name)` runs each point on the first p engines.
Engines must be started by an MPI-aware launcher (srun with the PMI the MPI was built for, or
mpiexec), else each engine is an MPI world of one. For batch jobs instead:

    perflab sweep --hidden 512 2048 --per-rank-batch 3000 --ranks 8 16 --backend cupy \\
        --emit-sbatch job.sh --nodes 2 --gpus-per-node 8 && sbatch job.sh"""),
    ("md", """## Beyond one machine: projected efficiency to 64 GPUs

`perflab predict --multinode` (nodes of 8 H200, a 200 Gb/s network per node, 5 us a ring step; the
NVLink all-reduce and one-GPU step measured) against the measured points. Flat ring: every one of
the 2(p-1) ring steps crosses the network; hierarchical: all-reduce inside the node, a ring of the
node leaders only (the lecture's hybrid all-reduce); model parallel exchanges C x B logits."""),
    ("code", """
path = RESULTS_ROOT / "predictions" / "projection_64.csv"
if path.exists():
    proj = pd.read_csv(path)
    fig, ax = plots.new_figure()
    for strategy, g in proj.groupby("strategy"):
        ax.plot(g.p, g.efficiency, "-", label=f"projected: {strategy}")
    if len(t):
        ours = t[t.peer == "perflab resident"]
        ax.plot(ours.p, ours.efficiency, "ko", label="measured: perflab resident")
    ax.set_xscale("log", base=2); ax.set_xlabel("GPUs p"); ax.set_ylabel("efficiency T1 / (p Tp)"); ax.legend(fontsize=8)
    display(Image(str(plots.save(fig, "scaling_projection",
        "Projected scaling efficiency of H=2048, 3000 samples per GPU per step, N=60000, to 64 GPUs on nodes of 8 "
        "(perflab predict --multinode --calibration scaling_calibration_graphs.jsonl: NCCL fit, one-GPU step and "
        "per-step cost from the H200 runs with per-step graphs, a 25 GB/s network per node), "
        f"with the measured perflab points. Source: {path.name}."))))
"""),
])

notebook("kernels", [
    ("md", """
# Kernels: each GEMM variant against cuBLAS

Reads `results/*/bench_gemm_float32.csv` (from `perflab bench gemm` on a GPU) and
`results/*/bench_train.csv`; runs nothing."""),
    ("code", """
import pandas as pd
from IPython.display import Image, display
from perflab import plots
from perflab.results import RESULTS_ROOT
for path in sorted(RESULTS_ROOT.glob("*/bench_gemm_float32.csv")):
    bench = pd.read_csv(path)
    display(bench.pivot_table(index="shape", columns="variant", values="tflops", sort=False).round(2))
    fig = plots.gemm_progression(bench, bench.peak_tflops.iloc[0])
    display(Image(str(plots.save(fig, f"gemm_progression_{path.parent.name}",
        f"FP32 GEMM rate of perflab's kernels naive -> tiled -> regblock -> best against the SGEMM of cuBLAS (and of "
        f"PyTorch and JAX where the file has them, TF32 off) at three training shapes "
        f"on {bench.gpu.iloc[0]}, device time from CUDA-graph replays (JAX: the host's over calls queued back to back); dashed: the FP32 peak. Source: {path.parent.name}/{path.name}."))))
for path in sorted(RESULTS_ROOT.glob("*/bench_train.csv")):
    fig = plots.train_peers(pd.read_csv(path))
    display(Image(str(plots.save(fig, f"train_peers_{path.parent.name}",
        f"Epoch time of perflab and its peers (median of 5 epochs) on {path.parent.name}. Source: {path.name}."))))
for path in sorted(RESULTS_ROOT.glob("*/bench_step.csv")):
    fig = plots.step_breakdown(pd.read_csv(path))
    display(Image(str(plots.save(fig, f"step_breakdown_{path.parent.name}",
        f"Each kernel of one training step timed alone (CUDA-graph replays) on {path.parent.name}: perflab's step "
        f"(fused backward) and the unfused kernels it replaces. Source: {path.name}."))))
"""),
])
