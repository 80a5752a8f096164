#!/usr/bin/env bash
# One device call on one GPU: a half step's db_L made in the fused backward pass (output_backward(..., db2=)) in place
# of a row_sum launch: the half GPU tests and the output layer's FP32 ones, then the backward work alone and the
# epochs before (.before: BEFORE_COMMIT's perflab/) and after (this tree, AFTER_COMMIT), each in its own tree.
# TESTS=0 leaves the tests out; ROUNDS (default 1) rounds of before and after, in turn (ROUND_FROM numbers them).
set -uo pipefail
TESTS=${TESTS:-1} ROUNDS=${ROUNDS:-1} ROUND_FROM=${ROUND_FROM:-1}
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m perflab compile > "$OUT/compile.log" 2>&1
[ "$TESTS" = 1 ] && PYTHONPATH=$PWD timeout 300 python3 -m pytest -q -m gpu tests/test_gpu_half.py -p no:cacheprovider 2>&1 | tail -3 > "$OUT/gpu_tests_half.log"
[ "$TESTS" = 1 ] && PYTHONPATH=$PWD timeout 200 python3 -m pytest -q -m gpu tests/test_gpu.py -k "output or fused or step or reduce" \
    -p no:cacheprovider 2>&1 | tail -3 > "$OUT/gpu_tests_output.log"
cat "$OUT"/gpu_tests_*.log 2>/dev/null
ln -sfn ../data .before/data
for round in $(seq "$ROUND_FROM" $((ROUND_FROM + ROUNDS - 1))); do
  for side in before after; do
    [ $side = before ] && root=$PWD/.before commit=$BEFORE_COMMIT || root=$PWD commit=$AFTER_COMMIT
    PYTHONPATH=$root timeout 120 python3 experiments/half/db2_pass.py "$side" >> "$OUT/db2_pass.jsonl" 2>> "$OUT/errors.log"
    (cd "$root" && PYTHONPATH=$root PERFLAB_GIT_COMMIT=$commit timeout 240 python3 -m perflab bench train \
       --configs 1024,3200 1024,12000 1024-1024,3200 2048-2048,3200 --peers "perflab (bf16)" "cublas floor (bf16)" \
       "perflab (fp16)" "cublas floor (fp16)" --out "$OUT/bench_${side}_$round" 2>&1 | tail -2)
  done
done
