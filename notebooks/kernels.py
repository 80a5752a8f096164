# %% [markdown]
# # Kernels: each GEMM variant against cuBLAS
#
# Reads `results/*/bench_gemm_float32.csv` (from `perflab bench gemm` on a GPU),
# `results/*/bench_train.csv`, `bench_step.csv` and `bench_hold.csv` (the
# clock and power under load); runs nothing.

# %%
import pandas as pd
from IPython.display import Image, display

from perflab.report import plots
from perflab.results import RESULTS_ROOT

for path in sorted(RESULTS_ROOT.glob("*/bench_gemm_float32.csv")):
    bench = pd.read_csv(path)
    display(bench.pivot_table(index="shape", columns="variant", values="tflops", sort=False).round(2))
    fig = plots.gemm_progression(bench, bench.peak_tflops.iloc[0])
    display(Image(str(plots.save(fig, f"gemm_progression_{path.parent.name}",
        f"FP32 GEMM rate of perflab's kernels naive -> tiled -> regblock -> best against the SGEMM of cuBLAS (and of "
        f"PyTorch and JAX where the file has them, TF32 off) at three training shapes "
        f"on {bench.gpu.iloc[0]}, device time from CUDA-graph replays (JAX: the host's over calls queued back to back); dashed: the FP32 peak. Source: {path.parent.name}/{path.name}."))))
# %% [markdown]
# ## The steps from naive to best, and what kept each
#
# One `.cu` file each for the first three; every later step is a section of `gemm_best.cu`
# marked `// Step N:`. Each was kept (or its alternative dropped) by the measurement named.

# %%
from perflab.kernels import progression

display(progression.table())

# %%
for path in sorted(RESULTS_ROOT.glob("*/bench_train.csv")):
    fig = plots.train_peers(pd.read_csv(path))
    display(Image(str(plots.save(fig, f"train_peers_{path.parent.name}",
        f"Epoch time of perflab and its peers (median of 5 epochs) on {path.parent.name}. Source: {path.name}."))))
for path in sorted(RESULTS_ROOT.glob("*/bench_step.csv")) + sorted(RESULTS_ROOT.glob("*/bench_step_deep.csv")):
    fig = plots.step_breakdown(pd.read_csv(path))
    display(Image(str(plots.save(fig, f"{path.stem.replace('bench_step', 'step_breakdown')}_{path.parent.name}",
        f"Each kernel of one training step timed alone (CUDA-graph replays) on {path.parent.name}: perflab's step "
        f"(fused backward) and the unfused kernels it replaces. Source: {path.name}."))))
for path in sorted(RESULTS_ROOT.glob("*/bench_hold.csv")):
    holds, samples = pd.read_csv(path), pd.read_csv(path.with_name("bench_hold_samples.csv"))
    display(holds.groupby(["shape", "variant"], sort=False)[["ms_first", "ms_held", "pct_cublas_held", "clock_mhz",
                                                            "power_w"]].median().round(3))
    fig = plots.held_clocks(holds, samples)
    display(Image(str(plots.save(fig, f"held_clocks_{path.parent.name}",
        f"SM clock and board power (nvidia-smi every 50 ms) while perflab's best GEMM and cuBLAS were replayed in turn, "
        f"{holds.seconds.iloc[0]:g} s each, on {path.parent.name}. Where both draw the power limit, the clock is set by "
        f"the energy a kernel spends a cycle, so the held rate can differ from a short burst's. Source: {path.name}."))))
# %% [markdown]
# ## Tensor cores: TF32 and 3xTF32 on Hopper's wgmma
#
# `wgmma` is a TF32 GEMM of perflab's own on the warpgroup MMA (persistent, warp-specialized, fed
# by the copy engine); `x3tf32` the same core three times a k-step on operands split into TF32 big
# and small parts, each k-tile's sum promoted to FP32 registers: FP32's accuracy at tensor-core
# speed. Beside them: cuBLAS SGEMM (`cublas`), cuBLAS TF32 (`pytorch-tf32`), JAX's
# TF32_TF32_F32_X3 (`jax-x3`) and three cuBLAS TF32 calls (`cublas-x3tf32`), in one run.

# %%
for path in sorted(RESULTS_ROOT.glob("*/bench_gemm_tensor_cores.csv")):
    bench = pd.read_csv(path)
    big = bench[bench["shape"].str.startswith(("fwd1", "bwd3"))]
    display(big.pivot_table(index="shape", columns="variant", values="tflops", sort=False).round(1))
    display(big.pivot_table(index="shape", columns="variant", values="rel_error", sort=False))
    display(Image(str(plots.save_tensor_core_roofline(path))))
for path in sorted(RESULTS_ROOT.glob("*/bench_train_tensor_cores.csv")):
    epochs = pd.read_csv(path)
    display(epochs.pivot_table(index="peer", columns=["H", "B"], values="epoch_ms").round(3))
    fig = plots.train_peers(epochs)
    display(Image(str(plots.save(fig, f"train_tensor_cores_{path.parent.name}",
        f"Epoch time with perflab's tensor-core GEMMs beside its FP32 epoch, the FP32 cuBLAS 5-GEMM floor, JAX's "
        f"scan epoch in FP32, TF32 and 3xTF32 and PyTorch's CUDA-graph step in TF32 (where the run had them), on "
        f"{path.parent.name}. Source: {path.name}."))))
# %% [markdown]
# ## Deeper nets and half precision
#
# The epoch at 784-1024-1024-10 and 784-2048-2048-10 beside the same peers (`bench_train_deep.csv`), the
# epoch in BF16 and FP16 mixed precision beside JAX's bf16 scan, PyTorch's autocast graph and the cuBLAS half
# GEMM floor (`half/bench_train_half*.csv`), and perflab's own BF16 and FP16 GEMMs on wgmma against cuBLAS's
# at every GEMM shape of those steps (`half/bench_gemm_*_wgmma.csv`).

# %%
def machine(path):
    return path.parent.parent.name if path.parent.name == "half" else path.parent.name


for path in sorted(RESULTS_ROOT.glob("*/bench_train_deep.csv")) + sorted(RESULTS_ROOT.glob("*/half/bench_train_half*.csv")):
    epochs = pd.read_csv(path)
    display(epochs.pivot_table(index="peer", columns=["H", "B"], values="epoch_ms").round(3))
    display(Image(str(plots.save(plots.train_peers(epochs), f"train_peers_{path.stem}_{machine(path)}",
        f"Epoch time of perflab and its peers, each in its own process (median of its epochs after warm-up), at "
        f"deeper nets or in half precision as the peers' names say, on {machine(path)}. "
        f"Source: {machine(path)}/{path.relative_to(RESULTS_ROOT / machine(path))}."))))
for path in sorted(RESULTS_ROOT.glob("*/half/bench_gemm_*_wgmma.csv")):
    bench = pd.read_csv(path)
    display(bench.pivot_table(index="shape", columns="variant", values="tflops", sort=False).round(1))
    display(Image(str(plots.save(plots.half_gemm_ratio(bench), f"half_gemm_{path.stem}_{machine(path)}",
        f"perflab's half-precision GEMM on wgmma against cuBLAS's, shape by shape (device time of graph replays, "
        f"operands as the half step holds them) on {bench.gpu.iloc[0]}; the title gives the geometric mean. "
        f"Source: {machine(path)}/half/{path.name}."))))
