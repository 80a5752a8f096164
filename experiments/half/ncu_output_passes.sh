#!/usr/bin/env bash
# One device call: Nsight Compute on the fused output layer's half passes (ncu_output_passes.py) at H B.
# Usage (on a GPU machine, from the repository root): OUT=/tmp/out bash experiments/half/ncu_output_passes.sh [H B dtype]
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/perflab-out}; mkdir -p "$OUT"
timeout 200 ncu --clock-control none -k "regex:output_|softmax" --section SpeedOfLight --section Occupancy \
  --section LaunchStats --section WarpStateStats --section MemoryWorkloadAnalysis \
  python3 experiments/half/ncu_output_passes.py "$@" > "$OUT/ncu_output_passes.txt" 2>&1
grep -v "^==PROF==" "$OUT/ncu_output_passes.txt" | grep -E "^  [a-zA-Z_].*\(|Duration|Throughput|Achieved Occupancy|Theoretical Occupancy|Block Limit|Waves Per SM|Registers Per|Stall|Warp Cycles Per Issued|Grid Size|Block Size|Memory \[%\]|DRAM" | head -120
