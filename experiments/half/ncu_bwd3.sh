#!/usr/bin/env bash
# One device call: Nsight Compute on dW1 = dz1 X^T, perflab's tuned half GEMM and cuBLAS's (ncu_bwd3.py).
# Usage (on a GPU machine, from the repository root): OUT=/tmp/out bash experiments/half/ncu_bwd3.sh
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/perflab-out}; mkdir -p "$OUT"
METRICS=lts__t_bytes.sum.per_second,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,\
l1tex__m_xbar2l1tex_read_bytes.sum,l1tex__m_xbar2l1tex_read_bytes.sum.per_second,dram__bytes_read.sum
timeout 400 ncu --clock-control none --nvtx --nvtx-include "measure/" --section LaunchStats --section SpeedOfLight \
  --metrics "$METRICS" python3 experiments/half/ncu_bwd3.py > "$OUT/ncu_bwd3.txt" 2>&1
grep -v "^==PROF==" "$OUT/ncu_bwd3.txt" | grep -E "^  [a-zA-Z_].*\(|order:|Duration|Grid Size|Cluster Size|Block Size|Shared Memory Config|Dynamic Shared|Registers|lts__|sm__pipe|l1tex__|dram__|Compute \(SM\) Throughput" | head -200
