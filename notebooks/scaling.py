# %% [markdown]
# # Scaling: time and efficiency against p; data against model parallel; staged against resident
#
# Reads the committed multi-GPU results (`results/*/scaling.jsonl`, `results/*/roofline.csv`);
# runs nothing. Efficiency is T1 / (p Tp) with the batch per GPU fixed (the seeds' Question 2.2).

# %%
from IPython.display import Image, display

from perflab.analysis import roofline
from perflab.report import plots

t = roofline.scaling_rows()
display(t)

# %%
for (machine, H, b), shape in t.groupby(["machine", "H", "b"]) if len(t) else []:
    fig = plots.scaling_epoch(shape, f"{machine}, H={H}, b={b}")
    display(Image(str(plots.save(fig, f"scaling_epoch_{machine}_H{H}_b{b}",
        f"Epoch time against the number of GPUs on {machine} ({shape.gpu.iloc[0]} x{shape.gpus.iloc[0]}), H={H}, {b} "
        "samples per GPU per step, 60000 an epoch, FP32: perflab resident data parallel (NCCL, and where run --comm "
        "p2p: the peers' gradients read over NVLink) and model parallel, and staged (host MPI, the seeds' path), "
        "beside PyTorch DDP and JAX's sharded scan; dashed: a variant that changes only the exchange, from the "
        "one-GPU epoch it shares. "
        f"Source: results/{machine}/scaling.jsonl."))))

# %% [markdown]
# ## The gradient all-reduce, perflab beside torch.distributed
#
# `mpirun -n P perflab bench allreduce` on the GPUs: perflab's NCCL (what training uses), its
# host-staged MPI (the seeds' path) and PyTorch's NCCL, device-timed, at the gradient sizes.

# %%
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

# %% [markdown]
# ## Running the sweeps on a cluster
#
# On a Slurm cluster, start the engines with the cluster's launcher, one engine per GPU, with the
# controller listening on an address the compute nodes can reach (on one machine it stays on
# localhost):
#
#     ipcluster start -n 16 --engines=slurm --ip='*'
#
# The notebooks then find the running cluster (`perflab.workbook.cluster.engines` connects before it starts
# its own), and `sweep.run_grid_engines(view, points, name)` runs each point on the first p engines.
# Engines must be started by an MPI-aware launcher (srun with the PMI the MPI was built for, or
# mpiexec), else each engine is an MPI world of one. For batch jobs instead:
#
#     perflab sweep --hidden 512 2048 --per-rank-batch 3000 --ranks 8 16 --backend cupy \
#         --emit-sbatch job.sh --nodes 2 --gpus-per-node 8 && sbatch job.sh

# %% [markdown]
# ## Beyond one machine: projected efficiency to 64 GPUs
#
# `perflab predict --multinode` (nodes of 8 H200, a 200 Gb/s network per node, 5 us a ring step; the
# NVLink all-reduce and one-GPU step measured) against the measured points. Flat ring: every one of
# the 2(p-1) ring steps crosses the network; hierarchical: all-reduce inside the node, a ring of the
# node leaders only (the lecture's hybrid all-reduce); model parallel exchanges C x B logits.

# %%
path = RESULTS_ROOT / "predictions" / "projection_64.csv"
if path.exists():
    proj = pd.read_csv(path)
    fig, ax = plots.new_figure()
    for strategy, g in proj.groupby("strategy"):
        ax.plot(g.p, g.efficiency, "-", label=f"projected: {strategy}")
    if len(t):
        ours = t[(t.peer == "perflab resident") & (t.H == 2048) & (t.b == 3000)]
        ax.plot(ours.p, ours.efficiency, "ko", label="measured: perflab resident")
    ax.set_xscale("log", base=2); ax.set_xlabel("GPUs p"); ax.set_ylabel("efficiency T1 / (p Tp)"); ax.legend(fontsize=8)
    display(Image(str(plots.save(fig, "scaling_projection",
        "Projected scaling efficiency of H=2048, 3000 samples per GPU per step, N=60000, to 64 GPUs on nodes of 8 "
        "(perflab predict --multinode --calibration scaling_calibration_graphs.jsonl: NCCL fit, one-GPU step and "
        "per-step cost from the H200 runs with per-step graphs, a 25 GB/s network per node), "
        f"with the measured perflab points. Source: {path.name}."))))
