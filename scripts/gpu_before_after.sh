#!/usr/bin/env bash
# A refactor's speed check on one GPU machine, in one call: `bench train` with the code before the change
# (its perflab/ unpacked in .before/ by `git archive <commit> perflab | tar -x -C .before`) and after it, twice
# each in turn, so a drift of the machine shows as a difference between the two runs of one side.
# Usage: OUT=/tmp/out bash scripts/gpu_before_after.sh "1024-1024,3200 2048,3200"
set -uo pipefail
OUT=${OUT:-/tmp/perflab-out}; mkdir -p "$OUT"
configs=${1:-"1024-1024,3200 2048,3200"}
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 XLA_PYTHON_CLIENT_PREALLOCATE=false
for round in 1 2; do
  for side in before after; do
    root=$PWD; [ $side = before ] && { root=$PWD/.before; ln -sfn ../data .before/data; }
    (cd "$root" && PYTHONPATH=$root python3 -m perflab bench train --configs $configs --peers perflab \
      "cublas 5-gemm floor" --out "$OUT/bench_${side}_$round" 2>&1 | tail -8)
  done
done
