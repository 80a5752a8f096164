#!/usr/bin/env bash
# One device call on one H100 (about 3 minutes; the timeouts keep it under 6): the GEMM steps of the 2019 seed
# (naive, tiled, regblock, then best and cuBLAS) under Nsight Compute at the training shapes where regblock wins
# (fwd1) and loses (bwd3, bwd1, bwd2), for issue 66 item 6: achieved and theoretical occupancy, DRAM bytes, L2
# read sectors, global load/store sectors and requests, L1 hit rate, shared-memory load wavefronts, SM
# throughput, stall reasons; and CuPy's attributes of each kernel (registers, shared memory). Writes
# $OUT/gemm_counts.csv + .json (perflab.analysis.gemm_counts: read_measured, counts, story, answer), beside the
# Nsight Compute report (gemm_counts.ncu-rep), its raw page (gemm_counts_ncu.csv) and logs.
# Usage, from the repository root: OUT=/tmp/out bash scripts/gpu_gemm_counts.sh ["fwd1 H=512 B=3200" ...]
# (default: perflab.analysis.gemm_counts.STEP_SHAPES, six shapes at H = 512)
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/perflab-out}; mkdir -p "$OUT"
START=$SECONDS DEADLINE=${DEADLINE:-340}  # seconds for the whole call: under 6 minutes, whatever hangs
within() {  # a step's time limit: its own, or what is left of the deadline if less
  local left=$((DEADLINE - (SECONDS - START))); [ "$left" -gt "$1" ] && left=$1; [ "$left" -lt 5 ] && left=5; echo "$left"
}
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | head -1
STEP="python3 -m perflab.analysis.gemm_counts"
# 1. compile the kernels the shapes launch (parallel NVRTC into CuPy's cache) and record CuPy's attributes
echo "=== prepare $(date +%T)"
timeout "$(within 150)" $STEP prepare --out "$OUT" "$@" 2>&1 | tail -40
# 2. the same launches under Nsight Compute, inside the NVTX range "counts" (the warm-up runs outside it)
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
if [ -n "$NCU" ] && [ -f "$OUT/gemm_counts_attributes.csv" ]; then
  echo "=== ncu $(date +%T): $("$NCU" --version | tail -1)"
  METRICS=$(python3 -c "from perflab.analysis.gemm_counts import NCU_NAMED; print(','.join(NCU_NAMED))")
  PROVEN=$(python3 -c "from perflab.analysis.gemm_counts import NCU_PROVEN; print(','.join(NCU_PROVEN))")
  BASE=(--clock-control none --nvtx --nvtx-include "counts/" --section SpeedOfLight --section Occupancy
        --section LaunchStats -f -o "$OUT/gemm_counts")
  T0=$SECONDS
  timeout "$(within 200)" "$NCU" "${BASE[@]}" --metrics "$METRICS" $STEP target "$@" > "$OUT/gemm_counts_ncu.log" 2>&1
  rc=$?
  if [ $rc -ne 0 ] && [ $((SECONDS - T0)) -lt 60 ] && [ "$(within 100)" -ge 60 ]; then  # a metric this ncu does not know fails at once
    echo "ncu exit $rc with the named metrics; again with the memory chart's and those it printed before"
    grep -i -m3 "error" "$OUT/gemm_counts_ncu.log"
    timeout "$(within 100)" "$NCU" "${BASE[@]}" --section MemoryWorkloadAnalysis_Chart --metrics "$PROVEN" $STEP target "$@" \
      >> "$OUT/gemm_counts_ncu.log" 2>&1
    rc=$?
  fi
  echo "ncu exit $rc after $((SECONDS - T0)) s"; grep -c "==PROF== Profiling" "$OUT/gemm_counts_ncu.log"
  [ -f "$OUT/gemm_counts.ncu-rep" ] && timeout "$(within 40)" "$NCU" -i "$OUT/gemm_counts.ncu-rep" --csv --page raw --print-units base \
    > "$OUT/gemm_counts_ncu.csv" 2>> "$OUT/gemm_counts_ncu.log"
else
  echo "no Nsight Compute (or step 1 failed): CuPy's attributes only"
fi
# 3. one row per (variant, shape); then what the report's answer says with them
echo "=== collect $(date +%T)"
timeout "$(within 40)" $STEP collect --out "$OUT" "$@" 2>&1 | tail -5
timeout "$(within 30)" $STEP story --out "$OUT" "$@" 2>&1 | tail -5
echo "total $((SECONDS - START)) s"
ls -la "$OUT"
