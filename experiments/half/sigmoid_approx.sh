#!/usr/bin/env bash
# One device call on one GPU: the half step's sigmoid by the hardware's exp2 and reciprocal (sigmoid_approx, D65):
# the half GPU tests, then the output passes alone and the half epochs before (.before, BEFORE_COMMIT) and after
# (AFTER_COMMIT), each in its own tree.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
PYTHONPATH=$PWD timeout 300 python3 -m pytest -q -m gpu tests/test_gpu_half.py -p no:cacheprovider -x 2>&1 | tail -3 > "$OUT/gpu_tests_half.log"
ln -sfn ../data .before/data
for side in before after; do
  [ $side = before ] && root=$PWD/.before commit=$BEFORE_COMMIT || root=$PWD commit=$AFTER_COMMIT
  PYTHONPATH=$root timeout 120 python3 experiments/half/output_passes.py $side >> "$OUT/output_passes.jsonl" 2>/dev/null
  (cd "$root" && PYTHONPATH=$root PERFLAB_GIT_COMMIT=$commit timeout 200 python3 -m perflab bench train \
     --configs 1024,3200 1024,12000 1024-1024,3200 2048-2048,3200 --peers "perflab (bf16)" "cublas floor (bf16)" \
     "perflab (fp16)" "cublas floor (fp16)" --out "$OUT/bench_$side" 2>&1 | tail -3)
done
