#!/usr/bin/env bash
# One device call: Nsight Compute on the fused output layer's half passes (ncu_output_passes.py) at each H B given,
# caches left warm as in the step (--cache-control none), with each pass's stall reasons (warps stalled a issued
# instruction, by reason) and its pipes' use, to find what holds them (session 50, issue 68 item 1).
# Usage (on a GPU machine, from the repository root): OUT=/tmp/out bash experiments/half/ncu_stalls.sh "1024 3200" ...
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/perflab-out}; mkdir -p "$OUT"
for shape in "$@"; do
  echo "== $shape bfloat16" >> "$OUT/ncu_stalls.txt"
  timeout 200 ncu --clock-control none --cache-control none -k "regex:output_|softmax" --section SpeedOfLight \
    --section Occupancy --section LaunchStats --section ComputeWorkloadAnalysis \
    --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum" \
    python3 experiments/half/ncu_output_passes.py $shape bfloat16 2>&1 | grep -v "^==PROF==" >> "$OUT/ncu_stalls.txt"
done
grep -E "^  [a-zA-Z_].*\(|^== |Duration|Memory Throughput|Compute \(SM\)|Achieved Occupancy|Registers Per|stalled_(long|short|math|mio|barrier|wait|lg|not_sel|selected|no_inst|dispatch|drain|branch)|pipe_xu|Issue Slots Busy|Executed Ipc A" "$OUT/ncu_stalls.txt" | head -150
