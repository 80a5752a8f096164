#!/usr/bin/env bash
# One device call: where in the machine code perflab's best GEMM and cuBLAS's kernel wait, at the
# shapes given (default: the two furthest below cuBLAS): Nsight Compute's warp-state sampling
# per SASS instruction, written as CSV, one file per shape, beside the kernels' summaries.
# Usage (on a GPU machine, from the repository root): OUT=/tmp/out bash scripts/ncu_sass.sh ["bwd3 H=512 B=12000" ...]
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/perflab-out}; mkdir -p "$OUT"
[ $# -gt 0 ] || set -- "bwd3 H=512 B=12000" "fwd1 H=512 B=800"
for shape in "$@"; do
  name=ncu_sass_$(echo "$shape" | tr -c 'a-zA-Z0-9\n' '_')
  timeout 240 ncu --clock-control none --nvtx --nvtx-include "measure/" --section WarpStateStats \
    --section SourceCounters --section SpeedOfLight -f -o "$OUT/$name" python3 scripts/ncu_gemm.py "$shape" \
    > "$OUT/$name.log" 2>&1
  ncu -i "$OUT/$name.ncu-rep" --page details > "$OUT/$name.txt" 2>&1
  ncu -i "$OUT/$name.ncu-rep" --page source --csv --print-source sass > "$OUT/$name.csv" 2>&1
  echo "$shape: $(wc -l < "$OUT/$name.csv") lines of SASS"; rm -f "$OUT/$name.ncu-rep"
done
