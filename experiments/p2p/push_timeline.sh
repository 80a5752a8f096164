#!/usr/bin/env bash
# One device call on two GPUs (session 60): why D82's push (trial a39b2aa, its perflab carried as .trial) gained
# nothing. Each rank's kernels and copies in perflab train at p = 2, BF16, b = 3000 a GPU, from PyTorch's profiler
# (step_trace_torch.py), for main (this tree) and the trial, at 784-1024-1024-10 and 784-2048-2048-10; step_events.py
# lists each rank's step. TREES: label:folder pairs (default "main:. trial:.trial").
set -uo pipefail
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; ROOT=$PWD
TREES=${TREES:-main:. trial:.trial}
for pair in $TREES; do (cd "${pair#*:}" && PYTHONPATH=$PWD python3 -m perflab compile > /dev/null 2>&1) & done; wait
for H in "1024 1024" "2048 2048"; do
  for pair in $TREES; do
    tree=${pair%%:*} root=$(cd "${pair#*:}" && pwd)
    name="${tree}_${H// /-}"
    (cd "$root" && timeout 200 mpirun --allow-run-as-root -x NCCL_NVLS_ENABLE -x PYTHONUNBUFFERED -x PYTHONPATH=$root -n 2 \
      bash -c "python3 $ROOT/experiments/half/step_trace_torch.py $OUT/trace_${name}_r\$OMPI_COMM_WORLD_RANK.csv \
      --backend cupy --parallel data --comm p2p --dtype bfloat16 --hidden-size $H --batch-size 6000 --train-size 60000 \
      --dataset synthetic --test-size 0 --num-epochs 3 --learning-rate 0.1" > "$OUT/train_$name.log" 2>&1)
    for r in 0 1; do python3 experiments/p2p/step_events.py "$OUT/trace_${name}_r$r.csv" "$name rank $r"; done
  done
done 2>&1 | tee "$OUT/push_timeline.txt"
rm -f "$OUT"/trace_*_r1.csv; gzip "$OUT"/trace_*.csv  # (rank 0's traces back: the files a call brings back are counted)
