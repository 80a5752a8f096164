#!/usr/bin/env bash
# One device call on a several-GPU machine: multi-GPU checks, ceilings, roofline sweep, scaling.
# Usage: OUT=/tmp/out P=2 bash scripts/gpu_multi.sh [stage...]
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 XLA_PYTHON_CLIENT_PREALLOCATE=false
OUT=${OUT:-/tmp/perflab-out}; mkdir -p "$OUT"; P=${P:-2}
MPI="mpirun --allow-run-as-root --oversubscribe -x PYTHONPATH -x NCCL_NVLS_ENABLE -x PERFLAB_GIT_COMMIT -x XLA_PYTHON_CLIENT_PREALLOCATE"
SMALL="--dataset synthetic --input-size 97 --hidden-size 61 --num-classes 7 --train-size 517 --batch-size 100 --num-epochs 2 --learning-rate 0.5 --test-size 0"
stages=${*:-"info check ceilings sweep scaling"}
for stage in $stages; do
  echo "=== $stage $(date +%T)"
  case $stage in
    info) nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; nvidia-smi topo -m | head -8 ;;
    check)
      for n in 1 $P; do for par in data model; do for dt in float32 float64; do for mode in resident staged; do
        $MPI -n $n python3 -m perflab check --backend cupy --parallel $par --dtype $dt --mode $mode $SMALL --json 2>&1 | tail -1 |
          python3 -c "import json,sys; d=json.load(sys.stdin); print('p=$n $par $dt $mode', f\"{d['max_rel_error']:.2e}\", d['passed'])"
      done; done; done; done 2>&1 | tee "$OUT/gpu_check_multi.log"
      $MPI -n $P python3 -m perflab check --backend cupy --dtype float32 --test-size 0 --json | tail -1 | cut -c1-300 | tee -a "$OUT/gpu_check_multi.log" ;;
    ceilings) $MPI -n $P python3 -m perflab ceilings --out "$OUT" 2>&1 | tail -45 ;;
    sweep)
      $MPI -n $P python3 -m perflab sweep --name roofline --hidden 512 1024 2048 --per-rank-batch 3200 --ranks 1 $P \
        --backend cupy --mode staged resident --gemm cublas --train-size 38400 --num-epochs 3 --out "$OUT" 2>&1 | tail -3
      $MPI -n $P python3 -m perflab sweep --name roofline --hidden 512 --batch 800 3200 12000 --ranks 1 $P \
        --backend cupy --mode staged resident --gemm cublas --train-size 38400 --num-epochs 3 --out "$OUT" 2>&1 | tail -3
      $MPI -n $P python3 -m perflab sweep --name roofline --hidden 512 2048 --per-rank-batch 3200 --ranks 1 $P \
        --parallel model --backend cupy --mode resident --gemm cublas --train-size 38400 --num-epochs 3 --out "$OUT" 2>&1 | tail -3 ;;
    scaling)
      for hb in "2048 3000" "512 800"; do set -- $hb; H=$1; b=$2
        for n in 1 $P; do
          for mode in resident staged; do
            $MPI -n $n python3 -m perflab train --backend cupy --mode $mode --gemm cublas --dataset synthetic --hidden-size $H \
              --batch-size $((b*n)) --train-size 60000 --num-epochs 5 --test-size 0 --json 2>/dev/null | tail -1 |
              python3 -c "import json,sys; d=json.load(sys.stdin); print(json.dumps({'peer': 'perflab $mode', 'H': $H, 'b': $b, 'p': $n, 'epoch_ms': 1e3*d['epoch_seconds']}))"
          done
          $MPI -n $n python3 -m perflab.peers_multi ddp $H $b 60000 2>/dev/null | tail -1
          python3 -m perflab.peers_multi jax $H $b 60000 $n 2>/dev/null | tail -1
        done
      done 2>&1 | tee "$OUT/scaling.jsonl" ;;
  esac
done
