#!/usr/bin/env bash
# One device call on one GPU: the half step's kernels inside perflab train's epoch graph, from Nsight Systems with
# each graph node traced (--cuda-graph-trace=node), or where the machine has no nsys from PyTorch's profiler
# (step_trace_torch.py), so the gaps between kernels show beside the kernels (step_timeline.py reads the trace).
# Usage: OUT=/tmp/out [GEMM=wgmma] bash experiments/half/step_timeline.sh [H B dtype]...  (GEMM: --gemm, cublas unless set)
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
NSYS=$(command -v nsys || ls /usr/local/cuda*/bin/nsys /opt/nvidia/nsight-systems*/bin/nsys 2>/dev/null | head -1)
set -- ${*:-1024 3200 bfloat16 1024-1024 3200 bfloat16 1024 3200 float32}
while [ $# -ge 3 ]; do
  H=$1 B=$2 dt=$3; shift 3
  name="timeline_${H}_${B}_${dt}_${GEMM:-cublas}"
  train="--backend cupy --dtype $dt --gemm ${GEMM:-cublas} --hidden $H --batch-size $B --train-size 60000 --dataset synthetic --test-size 0
         --num-epochs 4 --learning-rate 0.1"
  if [ -n "$NSYS" ]; then
    timeout 180 "$NSYS" profile --cuda-graph-trace=node --trace=cuda -o "$OUT/$name" --force-overwrite true \
      python3 -m perflab train $train > "$OUT/$name.train.log" 2>&1
    timeout 180 "$NSYS" stats --report cuda_gpu_trace --format csv --output "$OUT/$name" "$OUT/$name.nsys-rep" > /dev/null 2>&1
  else  # PyTorch's profiler (CUPTI) where there is no nsys
    timeout 180 python3 experiments/half/step_trace_torch.py "$OUT/${name}_cuda_gpu_trace.csv" $train > "$OUT/$name.train.log" 2>&1
  fi
  python3 experiments/half/step_timeline.py "$OUT/${name}_cuda_gpu_trace.csv" "$H $B $dt ${GEMM:-cublas}" | tee -a "$OUT/step_timeline.txt"
  rm -f "$OUT/$name.nsys-rep" "$OUT/$name.sqlite"
done
