#!/usr/bin/env bash
# One device call on one GPU: a patch's tree against this one (written in session 58 for the patches it left to run;
# two_chunks.sh and fp16_forward.sh are the forms that ran). The tree .SIDE is this tree (AFTER_COMMIT) with the patch
# applied, made before the call and carried (experiments/half/README.md). Both trees compiled, the patched tree's half
# GPU tests (TESTS_K: pytest's -k, default all of tests/test_gpu_half.py), PASSES (a script of this folder run in each
# tree with its side as label: output_passes.py, epilogue_cost.py), then the epochs in turn (epochs_ab.sh; PEERS).
set -uo pipefail
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
SIDE=${SIDE:?name the patched tree: SIDE=X for .X}
python3 -m perflab compile > /dev/null 2>&1 &
(cd ".$SIDE" && python3 -m perflab compile > /dev/null 2>&1) &
wait
(cd ".$SIDE" && PYTHONPATH=$PWD timeout 200 python3 -m pytest -q -m gpu tests/test_gpu_half.py ${TESTS_K:+-k "$TESTS_K"} \
  -p no:cacheprovider --tb=line 2>&1 | grep -v '^\.' | tail -12 > "$OUT/gpu_tests_$SIDE.log"); cat "$OUT/gpu_tests_$SIDE.log"
for script in ${PASSES:-output_passes.py}; do
  for side in after "$SIDE"; do
    root=$PWD; [ "$side" = after ] || root=$PWD/.$side
    PYTHONPATH=$root timeout 120 python3 "experiments/half/$script" "$side" >> "$OUT/${script%.py}.jsonl"
  done
done
SIDES="after $SIDE" ROUNDS=${ROUNDS:-2} bash experiments/half/epochs_ab.sh
