#!/usr/bin/env bash
# One device call on two GPUs: the BF16 p2p kernel with its loads issued together (P's and two ranks' copies at a
# time), checked at p = 2 and at p = 4 with the ranks sharing GPU 0 (the two-shot), timed alone
# (bf16_kernel_times.py) and in the epoch before (.before, BEFORE_COMMIT) and after (AFTER_COMMIT).
set -uo pipefail
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
CHECK_RANKS=2 BENCH_RANKS="1 2" OUT=$OUT bash experiments/p2p/bf16_exchange.sh > "$OUT/exchange.log" 2>&1
mv "$OUT/check.log" "$OUT/check_p2.log"
CHECK_ONLY=1 CHECK_RANKS=4 RUNNER=experiments/p2p/shared_gpu.py OUT=$OUT bash experiments/p2p/bf16_exchange.sh > /dev/null 2>&1
mv "$OUT/check.log" "$OUT/check_p4_shared.log"
for tree in before after; do
  [ $tree = before ] && root=$PWD/.before commit=$BEFORE_COMMIT || root=$PWD commit=$AFTER_COMMIT
  PYTHONPATH=$root PERFLAB_GIT_COMMIT=$commit timeout 120 mpirun --allow-run-as-root -n 2 -x PYTHONPATH -x NCCL_NVLS_ENABLE \
    -x PERFLAB_GIT_COMMIT python3 experiments/p2p/bf16_kernel_times.py 2>/dev/null | \
    python3 -c "import json,sys; [print(json.dumps({**json.loads(l), 'tree': '$tree'})) for l in sys.stdin if l.startswith('{')]"
done > "$OUT/kernel_times.jsonl"
