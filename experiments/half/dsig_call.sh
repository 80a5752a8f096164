#!/usr/bin/env bash
# One device call on one H200 (session 62): the sigmoid' epilogue's tree (this one) against .before (HEAD's
# perflab, carried): the half wgmma GPU tests, dsig_epilogue.py's checks and times, and epilogue_cost.py in both
# trees (the plain and bias epilogues must not slow down with the third path in the kernel).
set -uo pipefail
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m perflab compile > /dev/null 2>&1 &
(cd .before && python3 -m perflab compile > /dev/null 2>&1) &
wait
timeout 240 python3 -m pytest -q -m gpu tests/test_gpu_half.py -k "wgmma" -p no:cacheprovider --tb=line 2>&1 \
  | grep -v '^\.' | tail -12 | tee "$OUT/dsig_gpu_tests.log"
timeout 300 python3 experiments/half/dsig_epilogue.py after > "$OUT/dsig_epilogue.jsonl" 2> "$OUT/dsig_epilogue.err"
tail -3 "$OUT/dsig_epilogue.err"; grep -c . "$OUT/dsig_epilogue.jsonl"; grep checks_passed "$OUT/dsig_epilogue.jsonl"
for side in before after; do
  root=$PWD; [ "$side" = after ] || root=$PWD/.before
  PYTHONPATH=$root timeout 120 python3 experiments/half/epilogue_cost.py "$side" >> "$OUT/epilogue_cost_ab.jsonl"
done
for side in after before; do
  root=$PWD; [ "$side" = after ] || root=$PWD/.before
  PYTHONPATH=$root timeout 120 python3 experiments/half/epilogue_cost.py "$side" >> "$OUT/epilogue_cost_ab.jsonl"
done
wc -l "$OUT"/*.jsonl
