#!/usr/bin/env bash
# One device call on one GPU: a float16 step's overflow flag reset by loss_scale_update, not by a launch of its own
# (sgd_update_scaled's overflow.fill(0) dropped): the half GPU tests, then the epochs before (.before: BEFORE_COMMIT's
# perflab/) and after (this tree, AFTER_COMMIT), each in its own tree, two rounds in turn.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m perflab compile > "$OUT/compile.log" 2>&1
PYTHONPATH=$PWD timeout 300 python3 -m pytest -q -m gpu tests/test_gpu_half.py -p no:cacheprovider 2>&1 | tail -3 > "$OUT/gpu_tests_half.log"
cat "$OUT/gpu_tests_half.log"
ln -sfn ../data .before/data
for round in 1 2; do
  for side in before after; do
    [ $side = before ] && root=$PWD/.before commit=$BEFORE_COMMIT || root=$PWD commit=$AFTER_COMMIT
    (cd "$root" && PYTHONPATH=$root PERFLAB_GIT_COMMIT=$commit timeout 200 python3 -m perflab bench train \
       --configs 1024,3200 1024,12000 1024-1024,3200 --peers "perflab (fp16)" "cublas floor (fp16)" "perflab (bf16)" \
       --out "$OUT/bench_${side}_$round" 2>&1 | tail -2)
  done
done
