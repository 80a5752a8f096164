#!/usr/bin/env bash
# One device call on one H200 (session 62): output_passes.py in this tree (main) and in five trees whose
# elementwise.cu asks the output layer's half passes for more resident blocks (__launch_bounds__'s second argument:
# .lb_f5 and .lb_f6 the forward's 5 and 6, .lb_b6 and .lb_b7 the backward's 6 and 7, .lb_f6b6 both), made before
# the call and carried:
#   for v in f5:5:0 f6:6:0 b6:0:6 b7:0:7 f6b6:6:6; do IFS=: read name f b <<< "$v"; mkdir .lb_$name
#     git archive HEAD perflab | tar -x -C .lb_$name; cu=.lb_$name/perflab/kernels/elementwise.cu
#     [ $f != 0 ] && sed -i "s/__launch_bounds__(FW_ROWS \* 2)/__launch_bounds__(FW_ROWS * 2, $f)/" $cu
#     [ $b != 0 ] && sed -i "s/__launch_bounds__(HB_WARPS \* 32)/__launch_bounds__(HB_WARPS * 32, $b)/" $cu; done
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
for round in 1 2; do
  for side in main lb_f5 lb_f6 lb_b6 lb_b7 lb_f6b6; do
    root=$PWD; [ "$side" = main ] || root=$PWD/.$side
    PYTHONPATH=$root timeout 120 python3 experiments/half/output_passes.py "$side" >> "$OUT/launch_bounds_output_passes.jsonl" \
      2>> "$OUT/err"
  done
done
tail -2 "$OUT/err"; wc -l "$OUT"/*.jsonl
