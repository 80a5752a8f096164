#!/usr/bin/env bash
# One device call on two GPUs for push_stamped.patch (D83), written in session 60: the trial's checks and epochs
# against main (trial_call.sh: .before is main, carried; this tree the trial, committed), then the trial's step traced
# (push_timeline.sh; main's trace is logs/push_timeline_h200x2_e08d029.txt), then each tree's epoch timed by device
# events at both nets (epoch_launch.py). About 8 minutes. Usage, after the README's three lines:
#     BEFORE_COMMIT=<main's full hash> AFTER_COMMIT=<the trial's> bash experiments/p2p/stamped_call.sh
set -uo pipefail
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; R=$PWD
export LIMIT=60  # a check that hangs (a push that never lands traps after the watchdog's 60 s) costs a minute, not 90 s
# TESTS: no GPU test by default (main's half and FP32 GPU tests passed at 4de0ed0 in session 60)
TESTS=${TESTS:-tests/test_kernels_launch.py} bash experiments/p2p/trial_call.sh
[ $SECONDS -gt 430 ] && { echo "past 430 s at the checks' end: the trace and the device-event epochs left out"; exit 0; }
TREES="stamped:." timeout 120 bash experiments/p2p/push_timeline.sh > /dev/null 2>&1
grep -A16 "rank 0" "$OUT/push_timeline.txt" | grep -E "==|exchange_update|Memcpy|TNN" | cut -c1-100
for H in 1024 2048; do
  for t in before after; do
    [ $t = before ] && d=$R/.before || d=$R
    (cd "$d" && timeout 60 mpirun --allow-run-as-root -x NCCL_NVLS_ENABLE -x PYTHONPATH=$d -n 2 \
      python3 "$R/experiments/p2p/epoch_launch.py" $H $t 2>/dev/null | tail -1 | tee -a "$OUT/epoch_launch.jsonl" | cut -c1-110)
  done
done
echo "end at ${SECONDS}s"
