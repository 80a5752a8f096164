#!/usr/bin/env bash
# One device call for the report's questions (issue 66) that need GPUs: HW6 Q2.1 as asked (B = 3200 split over
# p = 1, 2, 4, with B varied too), the USC seed's batch sizes, and the final assignment's Problem 1 in full.
# Stages: hw6 usc problem1. Every command has a time limit. Usage, from the repository root:
#   OUT=/tmp/out P=4 bash scripts/gpu_report.sh [stage...]
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
OUT=${OUT:-/tmp/perflab-out}; mkdir -p "$OUT"; P=${P:-4}
RANKS="1"; for n in 2 4 8; do [ $n -le $P ] && RANKS="$RANKS $n"; done
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -1
timeout 300 python3 -m perflab compile 2>&1 | tail -1
for stage in ${*:-hw6 usc problem1}; do
  echo "=== $stage $(date +%T)"
  case $stage in
    hw6)  # the seeds' setup: 784-512-10, N = 38400, B = 3200 split over the ranks (and 800, 12000), both data paths
      timeout 300 mpirun --allow-run-as-root --oversubscribe -x PYTHONPATH -x NCCL_NVLS_ENABLE -x PERFLAB_GIT_COMMIT -n "$P" \
        python3 -m perflab sweep --name hw6_q21 --hidden 512 --batch 800 3200 12000 --ranks $RANKS --backend cupy \
        --mode staged resident --train-size 38400 --num-epochs 5 --out "$OUT" 2>&1 | grep -v -i warning | tail -8 ;;
    usc)  # Network1 and Network2 over B (1000 is committed): serial, over examples, inside the products, one GPU
      timeout 300 python3 -c "
from pathlib import Path
from perflab.workbook import usc
for b in (100, 10000):
    print(usc.run([1, 4, 16], batch=b, N=12000, epochs=3, name=f'usc_b{b}', out=Path('$OUT'), progress=False)
          [['net', 'way', 'cores', 'B', 'epoch_seconds', 'speedup']].to_string())" 2>&1 | tail -30 ;;
    problem1) [ -f scripts/gpu_problem1.sh ] && timeout 420 bash scripts/gpu_problem1.sh 2>&1 | tail -30 ;;
  esac
done
ls -la "$OUT"
