#!/usr/bin/env bash
# One device call: GPU tests, GEMM benchmark, training checks. Writes logs and CSVs to $OUT.
# Usage (on a GPU machine, from the repository root): OUT=/tmp/out bash scripts/gpu_check.sh [stage...]
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 XLA_PYTHON_CLIENT_PREALLOCATE=false
OUT=${OUT:-/tmp/perflab-out}; mkdir -p "$OUT"
stages=${*:-"info compile tests gemm hold check train"}
for stage in $stages; do
  echo "=== $stage $(date +%T)"
  case $stage in
    info) nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
          python3 -c "import cupy, numpy; print('cupy', cupy.__version__, 'numpy', numpy.__version__)" ;;
    compile) python3 -m perflab compile 2>&1 | tail -1 ;;  # every kernel at once, in parallel: the rest starts warm
    tests) python3 -m pytest -q -m gpu tests/test_gpu.py -p no:cacheprovider 2>&1 | tee "$OUT/gpu_tests.log" | tail -25 ;;
    gemm) python3 -m perflab bench gemm --out "$OUT" 2>&1 | tail -60 ;;
    check) for dt in float32 float64; do
             python3 -m perflab check --backend cupy --dtype $dt --test-size 0 --json | tail -1 | cut -c1-400
           done 2>&1 | tee "$OUT/gpu_check_mnist.log" ;;
    train) python3 -m perflab bench train --peers perflab "perflab (tf32 gemm)" "cublas 5-gemm floor" "jax scan epoch" --out "$OUT" 2>&1 | tail -30 ;;
    peers) python3 -m perflab bench train --out "$OUT" 2>&1 | tail -40 ;;
    tensorcores) python3 -m pytest -q -m gpu tests/test_gpu.py -k "wgmma or x3tf32 or tf32" -p no:cacheprovider 2>&1 \
                   | tee "$OUT/gpu_tests_tensor_cores.log" | tail -15
                 python3 -m perflab bench train --peers perflab "perflab (wgmma gemm)" "perflab (x3tf32 gemm)" \
                   "cublas 5-gemm floor" "jax scan epoch" "jax scan epoch (3xTF32)" --out "$OUT" 2>&1 | tail -30 ;;
    tcgemm) python3 -m perflab bench gemm --variants best tf32 wgmma x3tf32 cublas cublas-x3tf32 --batches 3200 12000 \
              --out "$OUT" 2>&1 | tail -70 ;;  # the tensor-core GEMMs beside cuBLAS FP32 and TF32 and JAX's 3xTF32
    hold) python3 -m perflab bench hold --out "$OUT" 2>&1 | tail -20 ;;  # clock and power under load
  esac
done
