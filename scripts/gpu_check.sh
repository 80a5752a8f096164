#!/usr/bin/env bash
# One device call: GPU tests, GEMM benchmark, training checks. Writes logs and CSVs to $OUT.
# Usage (on a GPU machine, from the repository root): OUT=/tmp/out bash scripts/gpu_check.sh [stage...]
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 XLA_PYTHON_CLIENT_PREALLOCATE=false
OUT=${OUT:-/tmp/perflab-out}; mkdir -p "$OUT"
stages=${*:-"info compile tests gemm hold check train"}
known=" info compile tests gemm check train deep peers tensorcores tcgemm hold splitab stagedspread stagedtimeline half halfacc precision halfroof halfwgmma halfstep "
for stage in $stages; do  # every name checked before any runs: a typo must not skip a stage of a paid call
  [[ $known == *" $stage "* ]] || { echo "gpu_check.sh: unknown stage '$stage'; stages:$known" >&2; exit 2; }
done
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
    deep) for dt in float64 float32; do  # the seeds' Network2 against the float64 reference, on MNIST
            python3 -m perflab check --backend cupy --dtype $dt --hidden-size 1024 1024 --test-size 0 --json | tail -1 | cut -c1-400
          done 2>&1 | tee "$OUT/gpu_check_deep_mnist.log"
          python3 -m perflab bench train --configs 1024,3200 1024-1024,3200 1024-1024,12000 2048-2048,3200 2048-2048,12000 \
            --peers perflab "perflab (x3tf32 gemm)" "jax scan epoch" "pytorch cuda graph" "cublas 5-gemm floor" \
            --out "$OUT" 2>&1 | tail -40 ;;
    peers) python3 -m perflab bench train --out "$OUT" 2>&1 | tail -40 ;;
    half) python3 -m pytest -q -m gpu tests/test_gpu_half.py -p no:cacheprovider 2>&1 | tee "$OUT/gpu_tests_half.log" | tail -25
          for dt in bfloat16 float16; do for h in 1024 "1024 1024"; do  # MNIST against the emulated step
            python3 -m perflab check --backend cupy --dtype $dt --hidden-size $h --train-size 10000 --test-size 0 --json \
              | tail -1 | cut -c1-400
          done; done 2>&1 | tee "$OUT/gpu_check_half_mnist.log"
          python3 -m perflab bench train --configs 1024,3200 1024,12000 1024-1024,3200 1024-1024,12000 \
            --peers perflab "perflab (bf16)" "perflab (fp16)" "perflab (bf16, backward unfused)" "jax scan epoch (bf16)" \
            "pytorch cuda graph (bf16 autocast)" \
            "cublas floor (bf16)" "cublas floor (fp16)" "cublas 5-gemm floor" --out "$OUT" 2>&1 | tail -40 ;;
    halfwgmma) python3 -m pytest -q -m gpu tests/test_gpu_half.py -k wgmma -p no:cacheprovider 2>&1 \
                 | tee "$OUT/gpu_tests_half_wgmma.log" | tail -25
               for dt in bfloat16 float16; do  # perflab's half wgmma GEMM beside cuBLAS's at the half step's GEMMs
                 python3 -m perflab bench gemm --dtype $dt --batches 3200 12000 --out "$OUT" 2>&1 | tail -34
               done
               python3 -m perflab bench train --configs 1024,3200 1024,12000 1024-1024,3200 1024-1024,12000 \
                 --peers "perflab (bf16)" "perflab (bf16, wgmma gemm)" "perflab (fp16)" "perflab (fp16, wgmma gemm)" \
                 "jax scan epoch (bf16)" "cublas floor (bf16)" --out "$OUT" 2>&1 | tail -30 ;;
    halfstep) python3 -m pytest -q -m gpu tests/test_gpu_half.py -k "not wgmma" -p no:cacheprovider 2>&1 \
                | tee "$OUT/gpu_tests_half_step.log" | tail -25
              for net in "1024 12000" "1024 3200" "1024-1024 3200" "1024-1024 12000"; do  # the half step, kernel by kernel
                python3 experiments/half/step_kernels.py $net bfloat16 2>&1 | tail -12
              done | tee "$OUT/step_kernels_half.txt"
              python3 -m perflab bench train --configs 1024,3200 1024,12000 1024-1024,3200 1024-1024,12000 \
                --peers "perflab (bf16)" "perflab (bf16, wgmma gemm)" "perflab (fp16)" "jax scan epoch (bf16)" \
                "pytorch cuda graph (bf16 autocast)" "cublas floor (bf16)" --out "$OUT" 2>&1 | tail -30 ;;
    tensorcores) python3 -m pytest -q -m gpu tests/test_gpu.py -k "wgmma or x3tf32 or tf32" -p no:cacheprovider 2>&1 \
                   | tee "$OUT/gpu_tests_tensor_cores.log" | tail -15
                 python3 -m perflab bench train --peers perflab "perflab (wgmma gemm)" "perflab (x3tf32 gemm)" \
                   "cublas 5-gemm floor" "jax scan epoch" "jax scan epoch (3xTF32)" --out "$OUT" 2>&1 | tail -30 ;;
    tcgemm) python3 -m perflab bench gemm --variants best tf32 wgmma x3tf32 cublas cublas-x3tf32 --batches 3200 12000 \
              --out "$OUT" 2>&1 | tail -70 ;;  # the tensor-core GEMMs beside cuBLAS FP32 and TF32 and JAX's 3xTF32
    halfacc) for h in 1024 "1024 1024"; do for dt in float32 bfloat16 float16; do  # MNIST, 15 epochs, the fused step
               python3 -m perflab train --backend cupy --dtype $dt --hidden-size $h --num-epochs 15 --batch-size 50 \
                 --reg 1e-6 --learning-rate 1.0 --shuffle --train-size 60000 --json | tail -1
             done; done > "$OUT/half_accuracy_gpu.jsonl"; cut -c1-120 "$OUT/half_accuracy_gpu.jsonl" ;;
    precision) python3 -m perflab.workbook.precision --out "$OUT" 2>&1 | tail -8 ;;
    halfroof) python3 -m perflab ceilings --no-step-kernels --max-log2-size 20 --out /tmp/roof 2>&1 | tail -3
              cp /tmp/roof/ceilings_p1.csv "$OUT/ceilings_half_p1.csv"; cp /tmp/roof/ceilings_p1.json "$OUT/ceilings_half_p1.json" ;;
    hold) python3 -m perflab bench hold --out "$OUT" 2>&1 | tail -20 ;;  # clock and power under load
    splitab) python3 experiments/wgmma/split_ab.py 2>&1 | tee "$OUT/split_ab.jsonl" | tail -14 ;;  # issue 32's per-call split
    stagedspread) for i in 1 2 3 4 5; do  # one staged point in five fresh processes: the spread between runs
                    python3 -m perflab sweep --name staged_spread_$i --backend cupy --mode staged --hidden 1280 \
                      --per-rank-batch 1600 --train-size 60000 --num-epochs 5 --out /tmp/spread 2>&1 | tail -1
                  done  # one CSV back, not five: a call brings 8 files at most
                  python3 -c "import glob, pandas as pd; t = pd.concat(pd.read_csv(f) for f in sorted(glob.glob('/tmp/spread/*.csv')));\
t.to_csv('$OUT/staged_spread.csv', index=False); print((1e3 * t.epoch_seconds / t.batches).round(3).tolist())" ;;
    stagedtimeline) python3 -m perflab timeline --modes staged --hidden-size 1280 --batch-size 1600 --train-size 16000 \
                      --out "$OUT" 2>&1 | tail -3 ;;  # where the unprofiled staged batch's time goes
  esac
done
