#!/usr/bin/env bash
# Issue 52: where 784-1024-1024-10's FP32 epoch at B = 12000 spends its time over the cuBLAS floor. nsys
# traces perflab's epoch (one CUDA graph an epoch, each node traced) and the floor's (its GEMMs alone), 2
# warm-up and 5 timed epochs each, in processes of their own; the kernel summaries (total device time by
# kernel over the 7 epochs) go to $OUT. Usage: OUT=dir bash experiments/deep/trace_epoch.sh
set -euo pipefail
OUT=${OUT:-/tmp/trace}; mkdir -p "$OUT"
command -v nsys > /dev/null || { echo "trace_epoch.sh: nsys is not on PATH"; exit 0; }
for peer in perflab cublas_floor; do
  nsys profile -q --force-overwrite true --cuda-graph-trace=node -o "/tmp/trace_$peer" python3 -c "
import numpy as np
from perflab.measure import peers
rng = np.random.default_rng(0)
X, y = rng.random((60000, 784), dtype=np.float32), rng.integers(0, 10, 60000)
fn = peers.perflab_epoch if '$peer' == 'perflab' else peers.cublas_floor
print('$peer', fn(X, y, '1024-1024', 12000, 0.1, 1e-4), 'ms an epoch')"
  nsys stats -q -f csv -r cuda_gpu_kern_sum "/tmp/trace_$peer.nsys-rep" > "$OUT/trace_kernels_${peer}_1024-1024_12000.csv"
  cut -d, -f2,3,4,9 "$OUT/trace_kernels_${peer}_1024-1024_12000.csv" | cut -c1-150 | head -20
done
