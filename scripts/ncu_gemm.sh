#!/usr/bin/env bash
# One device call: Nsight Compute on perflab's best GEMM beside cuBLAS at the shapes issue #11 is
# judged on (speed of light, occupancy, launch geometry, warp stalls), for the next tuning step.
# Usage (on a GPU machine, from the repository root): OUT=/tmp/out bash scripts/ncu_gemm.sh
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/perflab-out}; mkdir -p "$OUT"
timeout 300 ncu --clock-control none --nvtx --nvtx-include "measure/" --section SpeedOfLight --section Occupancy \
  --section LaunchStats --section WarpStateStats --section MemoryWorkloadAnalysis python3 scripts/ncu_gemm.py \
  > "$OUT/ncu_gemm.txt" 2>&1
grep -v "^==PROF==" "$OUT/ncu_gemm.txt" | grep -E "^  [a-z_].*\(|best config|Duration|Compute \(SM\) Throughput|Memory Throughput|Registers Per|Achieved Occupancy|Waves Per SM|Warp Cycles Per Issued" | head -80
