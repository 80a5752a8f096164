"""The GEMM's story, step by step, as SGEMM_CUDA tells its own: where each step lives in the .cu
files (a `// Step N:` marker) and the measurement that kept it (in the machine's results folder). The
first three are files of their own; every step past register blocking is a section of
gemm_best.cu. The kernels notebook prints this table; a test checks every marker and file."""
from __future__ import annotations

H100 = "nvidia-h100-80gb-hbm3"
EXPERIMENTS = f"{H100}/gemm_experiments"

# (step, what it does, .cu file, the measurement that kept it: result file, what it showed)
STEPS = (
    (1, "naive: a thread an output, operands from global memory", "gemm_naive.cu",
     f"{H100}/bench_gemm_float32.csv", "the floor every later step is measured from"),
    (2, "tiled: operand tiles in shared memory", "gemm_tiled.cu",
     f"{H100}/bench_gemm_float32.csv", "several times naive: each operand read once a tile"),
    (3, "register blocking: a thread a block of outputs", "gemm_regblock.cu",
     f"{H100}/bench_gemm_float32.csv", "fewer shared-memory reads an FMA"),
    (4, "cp.async ring, STAGES deep, in CUTLASS's main-loop order", "gemm_best.cu",
     f"{EXPERIMENTS}/cutlass_order_configs.csv", "best / cuBLAS geometric mean 0.853 -> 0.890"),
    (5, "k-contiguous tiles through registers, stored transposed (xt)", "gemm_best.cu",
     f"{EXPERIMENTS}/xt_async.csv", "the cp.async alternative ran 0.817 against 0.853: dropped"),
    (6, "one schedule for a tile a block, split-K and stream-K", "gemm_best.cu",
     f"{EXPERIMENTS}/shared_tiles_final.csv", "0.890 -> 0.922 (the backward GEMMs' long K)"),
    (7, "serpentine FMA order in the thread tile", "gemm_best.cu",
     f"{H100}/gemm_sweep.csv", "0.922 -> 0.941 (Nsight Compute's dispatch stalls)"),
    (8, "G-wide writes of D and of the shared tiles' parts", "gemm_best.cu",
     f"{EXPERIMENTS}/ab_vector_epilogue_rotation.csv", "0.942 -> 0.957"),
    (9, "edge tiles: 16-byte zero fills, the overhang on the check-free path", "gemm_best.cu",
     f"{EXPERIMENTS}/ab_edge_zero_fill.csv", "0.958 -> 0.972; the overhang +0.6 points (ab_edge_overhang.csv)"),
    (10, "CUTLASS's barrier where blocks share a tile", "gemm_best.cu",
     f"{EXPERIMENTS}/ab_barrier.csv", "0.954 -> 0.968 over five shapes, none lost"),
    (11, "programmatic dependent launch", "gemm_best.cu",
     f"{EXPERIMENTS}/ab_pdl.csv", "the small shapes lose the launch gap (1.2 of 26 us at fwd1 H=512 B=800)"),
    (12, "DRAM-saving order: tiles in groups of rows, shared tiles' K steps rotated", "gemm_best.cu",
     f"{EXPERIMENTS}/power_ab_holds.csv", "held under the 700 W cap: less DRAM traffic is clock gained"),
)


def marker(step: int) -> str:
    return f"// Step {step}:"


def table():
    import pandas as pd
    return pd.DataFrame(STEPS, columns=["step", "what", "file", "kept by", "it showed"])
