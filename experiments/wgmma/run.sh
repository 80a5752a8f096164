#!/bin/bash
# One device call for the wgmma experiment: ptxas report and SASS of the kernel, then check.py.
# Usage (device): bash experiments/wgmma/run.sh   (writes to $OUT)
cd "$(dirname "$0")"
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvcc --version | tail -2
for f in *.cu; do
  nvcc -gencode=arch=compute_90a,code=sm_90a -cubin -std=c++17 -Xptxas -v -o /tmp/${f%.cu}.cubin $f 2>&1 | tee -a $OUT/ptxas.log
  echo "$f: HGMMA in SASS: $(cuobjdump -sass /tmp/${f%.cu}.cubin | grep -c HGMMA)" | tee -a $OUT/ptxas.log
done
cd ../..
PYTHONUNBUFFERED=1 timeout ${CHECK_TIMEOUT:-300} python3 experiments/wgmma/check.py "$@" 2>&1 | tee $OUT/check.log
