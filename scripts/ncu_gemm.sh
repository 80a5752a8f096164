#!/usr/bin/env bash
# One device call: Nsight Compute on perflab's best GEMM beside cuBLAS at the shapes issue #11 is
# judged on (speed of light, pipes, shared-memory wavefronts, occupancy, warp stalls, the clock
# the SMs ran at), for the next tuning step.
# Usage (on a GPU machine, from the repository root): OUT=/tmp/out bash scripts/ncu_gemm.sh
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/perflab-out}; mkdir -p "$OUT"
METRICS=sm__cycles_elapsed.avg.per_second,sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active,\
sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,smsp__inst_executed_op_shared_ld.sum,\
l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,\
smsp__inst_executed.sum,smsp__sass_thread_inst_executed_op_ffma_pred_on.sum,\
regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio
timeout 400 ncu --clock-control none --nvtx --nvtx-include "measure/" --section SpeedOfLight --section Occupancy \
  --section LaunchStats --section WarpStateStats --section ComputeWorkloadAnalysis --section SchedulerStats \
  --section MemoryWorkloadAnalysis --metrics "$METRICS" python3 scripts/ncu_gemm.py > "$OUT/ncu_gemm.txt" 2>&1 ||
  timeout 300 ncu --clock-control none --nvtx --nvtx-include "measure/" --section SpeedOfLight --section Occupancy \
  --section WarpStateStats --section ComputeWorkloadAnalysis python3 scripts/ncu_gemm.py >> "$OUT/ncu_gemm.txt" 2>&1
grep -v "^==PROF==" "$OUT/ncu_gemm.txt" | grep -E "^  [a-z_].*\(|best config|Duration|SM Frequency|Compute \(SM\) Throughput|Registers Per|Achieved Occupancy|Waves Per SM|Warp Cycles Per Issued|Issued Warp|No Eligible|sm__|smsp__|l1tex__|Stall|stalled" | head -220
