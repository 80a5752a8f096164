#!/usr/bin/env bash
# One device call on one GPU: the update 16 bytes a thread (sgd_update, sgd_update_scaled): its GPU tests and the
# half trainer's, then the epochs before (.before, BEFORE_COMMIT) and after (AFTER_COMMIT), each in its own tree.
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
PYTHONPATH=$PWD timeout 150 python3 -m pytest -q -m gpu tests/test_gpu.py tests/test_gpu_half.py -p no:cacheprovider \
  -k "sgd_update or update_rounds or fused_half_step or float16_skips or l2_penalty" 2>&1 | tail -3 > "$OUT/gpu_tests_update.log"
ln -sfn ../data .before/data
for side in before after; do
  [ $side = before ] && root=$PWD/.before commit=$BEFORE_COMMIT || root=$PWD commit=$AFTER_COMMIT
  (cd "$root" && PYTHONPATH=$root PERFLAB_GIT_COMMIT=$commit timeout 100 python3 -m perflab bench train \
     --configs 1024-1024,3200 2048-2048,3200 --peers "perflab (bf16)" "cublas floor (bf16)" perflab \
     --out "$OUT/bench_$side" 2>&1 | tail -4)
done
