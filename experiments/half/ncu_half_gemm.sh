#!/usr/bin/env bash
# One device call: Nsight Compute on the half wgmma GEMM's configs and cuBLAS's (ncu_half_gemm.py).
# Usage (on a GPU machine, from the repository root): OUT=/tmp/out bash experiments/half/ncu_half_gemm.sh [H B]
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/perflab-out}; mkdir -p "$OUT"
METRICS=sm__cycles_elapsed.avg.per_second,lts__t_bytes.sum.per_second,lts__t_sector_hit_rate.pct,\
dram__bytes_read.sum.per_second,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,\
l1tex__m_xbar2l1tex_read_bytes.sum.per_second,regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio
timeout 400 ncu --clock-control none --nvtx --nvtx-include "measure/" --section SpeedOfLight \
  --section MemoryWorkloadAnalysis --section WarpStateStats --metrics "$METRICS" \
  python3 experiments/half/ncu_half_gemm.py "$@" > "$OUT/ncu_half_gemm.txt" 2>&1
grep -v "^==PROF==" "$OUT/ncu_half_gemm.txt" | grep -E "^  [a-zA-Z_].*\(|configs in order|Duration|SM Frequency|Throughput|Hit Rate|sm__|lts__|dram__|l1tex__|stalled_(long|barrier|wait|sleep|math|gmma|lg|mio|short|branch|no_inst|dispatch|membar|selected|not_sel)" | head -150
