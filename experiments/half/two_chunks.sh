#!/usr/bin/env bash
# One device call on one GPU (session 58): two_chunks.patch (the fused forward pass over two column chunks a block)
# against main. Main's half and FP32 GPU tests first (D78's test change was not yet run on a GPU), the two output
# passes alone in each tree, the epochs in turn (epochs_ab.sh, SIDES "after two"), then the patched tree's half tests.
# The tree .two is main (AFTER_COMMIT) with the patch applied, made before the call and carried.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m perflab compile > /dev/null 2>&1 &
(cd .two && python3 -m perflab compile > /dev/null 2>&1) &
wait
PYTHONPATH=$PWD timeout 200 python3 -m pytest -q -m gpu tests/test_gpu_half.py -p no:cacheprovider 2>&1 | tail -3 \
  > "$OUT/gpu_tests_half_main.log"; cat "$OUT/gpu_tests_half_main.log"
for side in after two; do
  root=$PWD; [ $side = two ] && root=$PWD/.two
  PYTHONPATH=$root timeout 120 python3 experiments/half/output_passes.py "$side" >> "$OUT/output_passes.jsonl"
done
SIDES="after two" ROUNDS=${ROUNDS:-2} bash experiments/half/epochs_ab.sh
(cd .two && PYTHONPATH=$PWD timeout 120 python3 -m pytest -q -m gpu tests/test_gpu_half.py -k "step_kernels or trains" \
  -p no:cacheprovider 2>&1 | tail -3 > "$OUT/gpu_tests_half_two.log"); cat "$OUT/gpu_tests_half_two.log"
PYTHONPATH=$PWD timeout ${FP32_TESTS_S:-150} python3 -m pytest -q -m gpu tests/test_gpu.py -p no:cacheprovider 2>&1 | tail -3 \
  > "$OUT/gpu_tests_fp32_main.log"; cat "$OUT/gpu_tests_fp32_main.log"
