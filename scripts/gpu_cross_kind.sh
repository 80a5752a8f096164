#!/usr/bin/env bash
# One device call: the sweeps that test committed cross-kind predictions (perflab whatif --gpu-kind), exactly their
# points, on the kind they predict. Usage, from the repository root on the GPU machine:
#   OUT=/tmp/out bash scripts/gpu_cross_kind.sh h100_from_h200     (or h200_from_h100)
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
OUT=${OUT:?set OUT}; NAME=${1:?which prediction: h100_from_h200 or h200_from_h100}
GRID="--hidden 1760 1248-1248 --per-rank-batch 2100 5000 --train-size 60000 --backend cupy --out $OUT"
[ -f results/predictions/${NAME}_h1760_h1248-1248_b2100_b5000.json ] || { echo "no committed prediction $NAME" >&2; exit 2; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
KIND=$(python3 -c "from perflab import results; print(results.machine_name())")  # the GPU this call got
[ "$KIND" = "$(python3 -c "import json; print(json.load(open('results/predictions/${NAME}_h1760_h1248-1248_b2100_b5000.json'))['transfer']['to_kind'])")" ] \
  || { echo "this machine is $KIND, not the kind $NAME predicts: nothing measured" >&2; exit 3; }
python3 -m perflab compile 2>&1 | tail -1
python3 -m perflab sweep --name prediction_check_${NAME}_h1760_h1248-1248_b2100_b5000 $GRID \
  --mode resident staged --launch graph eager 2>&1 | tail -3
python3 -m perflab sweep --name prediction_check_${NAME}_bf16_h1760_h1248-1248_b2100_b5000 $GRID \
  --mode resident --launch graph eager --dtype bfloat16 2>&1 | tail -3
