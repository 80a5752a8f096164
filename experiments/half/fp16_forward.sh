#!/usr/bin/env bash
# One device call on one GPU (session 58): float16's fused forward pass with W_L in FP16 parts and a1 read as stored
# (two MMAs where BF16 parts took three), this tree (AFTER_COMMIT), against BEFORE_COMMIT's in .before. The half GPU
# tests on this tree, the output passes alone in each tree, then the epochs in turn (epochs_ab.sh), FP16 first.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m perflab compile > /dev/null 2>&1 &
(cd .before && python3 -m perflab compile > /dev/null 2>&1) &
wait
PYTHONPATH=$PWD timeout 200 python3 -m pytest -q -m gpu tests/test_gpu_half.py -p no:cacheprovider 2>&1 | tail -4 \
  > "$OUT/gpu_tests_half.log"; cat "$OUT/gpu_tests_half.log"
for side in before after; do
  root=$PWD; [ $side = before ] && root=$PWD/.before
  PYTHONPATH=$root timeout 120 python3 experiments/half/output_passes.py "$side" >> "$OUT/output_passes.jsonl"
done
PEERS="perflab (fp16);cublas floor (fp16);perflab (bf16)" ROUNDS=${ROUNDS:-2} bash experiments/half/epochs_ab.sh
