#!/usr/bin/env bash
# One device call: dW1 = dz1 X^T at each (H, B), every choice of perflab's half GEMM timed without a profiler
# (ncu_bwd3_times.jsonl), then Nsight Compute on the fastest choice, the 128 x 112 tile and cuBLAS's (ncu_bwd3.py).
# Usage (on a GPU machine, from the repository root): OUT=/tmp/out [STALLS=1] bash experiments/half/ncu_bwd3.sh
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/perflab-out}; mkdir -p "$OUT"
timeout 300 python3 experiments/half/ncu_bwd3.py --times "$OUT/ncu_bwd3_times.jsonl" "$OUT/ncu_bwd3_choices.json" || exit 1
METRICS=lts__t_bytes.sum.per_second,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,\
l1tex__m_xbar2l1tex_read_bytes.sum,l1tex__m_xbar2l1tex_read_bytes.sum.per_second,dram__bytes_read.sum,lts__t_bytes.sum
# STALLS=1: each warp's cycles a issued instruction by stall reason as well (not yet run: session 53 wrote it after the
# device time was spent; the next measurement of item 2, where dW1 moves cuBLAS's bytes at 60% of its rate)
[ -n "${STALLS:-}" ] && METRICS="$METRICS,regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio"
timeout 400 ncu --clock-control none --nvtx --nvtx-include "measure/" --section LaunchStats --section SpeedOfLight \
  --section WarpStateStats --metrics "$METRICS" python3 experiments/half/ncu_bwd3.py --profile "$OUT/ncu_bwd3_choices.json" \
  > "$OUT/ncu_bwd3.txt" 2>&1
grep -v "^==PROF==" "$OUT/ncu_bwd3.txt" | grep -E "^  [a-zA-Z_].*\(|order:|Duration|Grid Size|Cluster Size|Block Size|Shared Memory Config|Dynamic Shared|Registers|lts__|sm__pipe|l1tex__|dram__|Compute \(SM\) Throughput|Warp Cycles Per Issued|Stall|issue_stalled" > "$OUT/ncu_bwd3_summary.txt"
cat "$OUT/ncu_bwd3_summary.txt"  # whole: session 53's first run kept the first 300 lines and cut the (2048, *) shapes
# STALLS=1: then the worst shape (H = 1024, B = 3200) alone, its stalls instruction by instruction (SASS, sampled)
if [ -n "${STALLS:-}" ]; then
  timeout 150 ncu --clock-control none --nvtx --nvtx-include "measure/" --section WarpStateStats --section SourceCounters \
    --import-source no -f -o "$OUT/ncu_bwd3_1024_3200" python3 experiments/half/ncu_bwd3.py --profile \
    "$OUT/ncu_bwd3_choices.json" 1024,3200 > "$OUT/ncu_bwd3_source_run.txt" 2>&1
  ncu -i "$OUT/ncu_bwd3_1024_3200.ncu-rep" --page source --csv --print-source sass 2>&1 | gzip > "$OUT/ncu_bwd3_sass.csv.gz"
  ls -la "$OUT"
fi
