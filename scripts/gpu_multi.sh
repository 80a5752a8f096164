#!/usr/bin/env bash
# One device call on a several-GPU machine: multi-GPU checks, ceilings, roofline sweep, scaling,
# data against model parallel, the all-reduce bench, the pipelined staged path beside the serial one, and the
# single-GPU benchmarks (stages: info check auto ceilings sweep scaling deep parallel allreduce pipeline bench x4 exchange
# channels dataparallel watchdog wfbp halfexchange deepmodel bootbands bootbands2600 twoshot halfscaling). CEILINGS_ARGS: more for `perflab ceilings` (--hidden H.. --per-rank-batch b..).
# Four GPUs (issue 33), one call: P=4 FLAGS="- p2p overlap staged pipelined model" bash scripts/gpu_multi.sh x4 scaling ceilings allreduce
# Every command has a time limit, so one hang cannot eat the call. Usage:
#   OUT=/tmp/out P=2 bash scripts/gpu_multi.sh [stage...]
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 XLA_PYTHON_CLIENT_PREALLOCATE=false
OUT=${OUT:-/tmp/perflab-out}; mkdir -p "$OUT"; P=${P:-2}
RANKS="1"; for n in 2 4 8 16; do [ $n -le $P ] && RANKS="$RANKS $n"; done  # 1 2 4 ... P
# a function, so `LIMIT=200 mpi ...` sets that command's time limit (a string expanded LIMIT once, at 90 s)
mpi() { timeout "${LIMIT:-90}" mpirun --allow-run-as-root --oversubscribe -x PYTHONPATH -x NCCL_NVLS_ENABLE \
  -x PERFLAB_GIT_COMMIT -x XLA_PYTHON_CLIENT_PREALLOCATE "$@"; }
SMALL="--dataset synthetic --input-size 97 --hidden-size 61 --num-classes 7 --train-size 517 --batch-size 100 --num-epochs 2 --learning-rate 0.5 --test-size 0"
show() { python3 -c "import json,sys
lines=[l for l in sys.stdin.read().splitlines() if l.startswith('{')]
d=json.loads(lines[-1]) if lines else {}
print('$1', f\"{d.get('max_rel_error', float('nan')):.2e}\", d.get('passed', 'NO RESULT'),
      *([f\"(--comm auto kept {'overlap' if d.get('overlap') else d['comm']})\"] if d.get('exchange_trial_s') else []))"; }
stages=${*:-"info check ceilings sweep scaling"}
for stage in $stages; do
  echo "=== $stage $(date +%T)"
  case $stage in
    info) nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; nvidia-smi topo -m | head -6
          python3 -c "from perflab.train.comm import cuda_aware_mpi; print('CUDA-aware MPI:', cuda_aware_mpi())" ;;
    check)
      for args in "data float32 resident" "data float32 resident --overlap" "data float32 staged" "data float64 resident" \
                  "data float32 resident --comm p2p" "data float64 resident --comm p2p" "data float32 resident --comm p2p --launch eager" \
                  "model float32 resident" "model float64 resident" "data float32 pipelined" "data float64 pipelined" "data float32 pipelined --shuffle" \
                  "data float64 pipelined --comm shm" "data float64 staged --comm shm" "data float32 resident --shuffle"; do
        set -- $args
        mpi -n $P python3 -m perflab check --backend cupy --parallel $1 --dtype $2 --mode $3 "${@:4}" $SMALL --json 2>"$OUT/err.txt" | show "p=$P $args"
        tail -2 "$OUT/err.txt" | cut -c1-300
      done 2>&1 | tee "$OUT/gpu_check_multi.log"
      mpi -n $P python3 -m perflab check --backend cupy --dtype float32 --test-size 0 --json 2>/dev/null | show "p=$P seeds MNIST float32" | tee -a "$OUT/gpu_check_multi.log" ;;
    x4)  # issue 33 on four GPUs: the checks, then the runs of the predictions committed for them (results/predictions/h200x4_*)
      for args in "data float32" "data float64" "model float32" "model float64" "data float32 --comm p2p" "data float64 --comm p2p"; do
        set -- $args
        mpi -n $P python3 -m perflab check --backend cupy --parallel $1 --dtype $2 --mode resident "${@:3}" $SMALL --json 2>"$OUT/err.txt" | show "p=$P $args resident"
      done 2>&1 | tee "$OUT/gpu_check_x4.log"
      for hb in "2048 3000" "512 800"; do set -- $hb
        LIMIT=200 mpi -n $P python3 -m perflab sweep --name prediction_check_h200x4_data_h512_h2048_b800_b3000 --hidden $1 \
          --per-rank-batch $2 --ranks $RANKS --backend cupy --mode resident staged pipelined --gemm cublas --train-size 60000 \
          --num-epochs 3 --out "$OUT" 2>&1 | tail -1
        LIMIT=120 mpi -n $P python3 -m perflab sweep --name prediction_check_h200x4_model_h512_h2048_b800_b3000 --parallel model \
          --hidden $1 --per-rank-batch $2 --ranks $RANKS --backend cupy --mode resident --train-size 60000 --num-epochs 3 \
          --out "$OUT" 2>&1 | tail -1
      done ;;
    auto)  # --comm auto (the default) at the scaling harness's shapes: the exchange it keeps, each one's epoch
      for hb in "2048 3000" "512 800"; do set -- $hb
        mpi -n $P python3 -m perflab train --backend cupy --dataset synthetic --hidden-size $1 --batch-size $(($2 * P)) \
          --train-size 60000 --num-epochs 5 --test-size 0 --learning-rate 0.1 2>/dev/null | tail -2
      done 2>&1 | tee "$OUT/comm_auto.log" ;;
    deep)  # issue 52 on P GPUs: deeper nets checked with every exchange, then 784-1024-1024-10 at b = 3000 a GPU beside DDP and JAX
      for args in "float32" "float64" "float32 --comm nccl" "float64 --comm p2p" "float32 --comm nccl --overlap" \
                  "float32 --mode staged" "float64 --mode pipelined" "float32 --comm p2p --launch eager"; do
        for hidden in "61 37" "61 37 23"; do
          mpi -n $P python3 -m perflab check --backend cupy --parallel data --dtype $args $SMALL --hidden-size $hidden \
            --json 2>"$OUT/err.txt" | show "p=$P data $args hidden $hidden"
          tail -2 "$OUT/err.txt" | cut -c1-300
        done
      done 2>&1 | tee "$OUT/gpu_check_deep_p$P.log"
      for n in $RANKS; do
        for flags in - p2p overlap; do
          mpi -n $n python3 -m perflab.measure.peers_multi perflab 1024-1024 3000 60000 ${flags#-} 2>/dev/null | tail -1
        done
        mpi -n $n python3 -m perflab.measure.peers_multi ddp 1024-1024 3000 60000 2>/dev/null | tail -1
        timeout 120 python3 -m perflab.measure.peers_multi jax 1024-1024 3000 60000 $n 2>/dev/null | tail -1
      done 2>&1 | tee "$OUT/scaling_deep.jsonl" ;;
    bootbands)  # issue 52: the run of results/predictions/h100x2_boot_bands_* (committed before it): host-paced bands over boots
      LIMIT=300 mpi -n $P python3 -m perflab sweep --name prediction_check_h100x2_boot_bands_h1408-1408_h1664-1664-1664_b2400 \
        --hidden 1408-1408 1664-1664-1664 --per-rank-batch 2400 --ranks 1 2 --backend cupy --mode resident staged \
        --launch graph eager --gemm cublas --train-size 60000 --num-epochs 4 --out "$OUT" 2>&1 | tr '\r' '\n' | tail -2 ;;
    twoshot)  # --comm p2p, one-shot at p = 2 and two-shot from 3 ranks: checked at p = 2, 3 and P, depths 1 and 3, graphed
      # and launched kernel by kernel; then the exchange alone beside NCCL + update at p = 2, 3, P (experiments/p2p/two_shot.py)
      for n in 2 3 $P; do
        for args in "--dtype float32" "--dtype float64" "--dtype float32 --launch eager" "--dtype float64 --hidden-size 61 37 23" \
                    "--dtype float32 --hidden-size 61 37 23 --launch eager"; do
          mpi -n $n python3 -m perflab check --backend cupy --parallel data --mode resident $SMALL --comm p2p $args --json \
            2>"$OUT/err.txt" | show "p=$n p2p $args"; tail -1 "$OUT/err.txt" | cut -c1-300
        done
      done 2>&1 | tee "$OUT/gpu_check_p2p_two_shot.log"
      for n in 2 3 $P; do mpi -n $n python3 experiments/p2p/two_shot.py 2>&1 | grep '^{'; done | tee "$OUT/p2p_two_shot.jsonl" ;;
    bootbands2600)  # the same on another boot at a batch the ceilings timed, the eager staged band's top crediting no copy
      LIMIT=300 mpi -n $P python3 -m perflab sweep --name prediction_check_h100x2_boot_bands_h1408-1408_h1664-1664-1664_b2600 \
        --hidden 1408-1408 1664-1664-1664 --per-rank-batch 2600 --ranks 1 2 --backend cupy --mode resident staged \
        --launch graph eager --gemm cublas --train-size 60000 --num-epochs 4 --out "$OUT" 2>&1 | tr '\r' '\n' | tail -2 ;;
    wfbp)  # issue 52 item 2: WFBP (--overlap past one hidden layer: each layer's gradient all-reduced as backward makes it)
      # checked against the reference, then timed by --comm auto against one exchange after backward (and p2p)
      for dt in float64 float32; do for hidden in "61 37" "61 37 23" "97 61 37 23"; do
        mpi -n $P python3 -m perflab check --backend cupy --parallel data --dtype $dt --comm nccl --overlap $SMALL \
          --hidden-size $hidden --json 2>"$OUT/err.txt" | show "p=$P $dt $hidden --overlap"; tail -1 "$OUT/err.txt" | cut -c1-300
      done; done 2>&1 | tee "$OUT/wfbp_check.log"
      python3 -c "import json; from perflab.results import machine_metadata; print(json.dumps(machine_metadata()))" > "$OUT/wfbp_machine.json"
      for hidden in "1024 1024" "2048 2048" "1024 1024 1024" "4096 4096"; do for b in 3000 1000; do
        LIMIT=150 mpi -n $P python3 -m perflab train --backend cupy --dataset synthetic --hidden-size $hidden --batch-size $((b * P)) \
          --train-size 60000 --num-epochs 4 --test-size 0 --learning-rate 0.1 --json 2>/dev/null | tail -1
      done; done | tee "$OUT/wfbp.jsonl" | python3 -c "import json,sys
for l in sys.stdin:
    d=json.loads(l); t=d['exchange_trial_s']
    print(d['hidden_sizes'], d['batch_size'], 'kept', 'overlap' if d['overlap'] else d['comm'], {k: round(1e3*v, 3) if isinstance(v, float) else v for k, v in t.items()})" ;;
    deepmodel)  # issue 52 item 1: the fused model-parallel trainer at any depth, checked, then timed beside data parallel
      python3 -m pytest -q -m gpu tests/test_gpu.py -k fused_model_parallel -p no:cacheprovider 2>&1 | tail -2
      for dt in float64 float32; do for hidden in "61" "61 37" "61 37 23" "97 61 37 23"; do for launch in graph eager; do
        mpi -n $P python3 -m perflab check --backend cupy --parallel model --dtype $dt --comm nccl --launch $launch $SMALL \
          --hidden-size $hidden --json 2>"$OUT/err.txt" | show "p=$P model $dt $hidden $launch"; tail -1 "$OUT/err.txt" | cut -c1-300
      done; done; done 2>&1 | tee "$OUT/deep_model_check.log"
      for hidden in "1024 1024" "2048 2048" "1024 1024 1024"; do for parallel in model data; do
        LIMIT=150 mpi -n $P python3 -m perflab train --backend cupy --dataset synthetic --parallel $parallel --comm nccl \
          --hidden-size $hidden --batch-size 6000 --train-size 60000 --num-epochs 4 --test-size 0 --learning-rate 0.1 --json \
          2>/dev/null | tail -1
      done; done | python3 -c "import json,sys
from perflab.results import machine_metadata
meta = machine_metadata()
for l in sys.stdin:
    d = json.loads(l); print(json.dumps({**d, 'machine': meta}))" | tee "$OUT/deep_model.jsonl" | python3 -c "import json,sys
for l in sys.stdin:
    d=json.loads(l); print(d['parallel'], d['hidden_sizes'], d['batch_size'], round(1e3 * d['epoch_seconds'], 3), 'ms an epoch')" ;;
    halfexchange)  # issue 53 item 4: the gradients exchanged in half precision or in FP32, checked, then timed by --comm auto
      python3 -m pytest -q -m gpu tests/test_gpu_half.py -k exchange -p no:cacheprovider 2>&1 | tail -2
      for dt in bfloat16 float16; do for args in "--comm nccl-half" "--comm nccl-half --hidden-size 61 37" "--comm auto"; do
        mpi -n $P python3 -m perflab check --backend cupy --parallel data --dtype $dt $SMALL $args --json 2>"$OUT/err.txt" \
          | show "p=$P $dt $args"; tail -1 "$OUT/err.txt" | cut -c1-300
      done; done 2>&1 | tee "$OUT/half_exchange_check.log"
      for run in "bfloat16 3000 1024" "bfloat16 1000 1024" "bfloat16 3000 1024 1024" "bfloat16 3000 4096 4096" \
                 "float16 3000 1024" "float16 3000 1024 1024"; do
        set -- $run; dt=$1; b=$2; shift 2
        LIMIT=150 mpi -n $P python3 -m perflab train --backend cupy --dataset synthetic --dtype $dt --hidden-size "$@" \
          --batch-size $((b * P)) --train-size 60000 --num-epochs 4 --test-size 0 --learning-rate 0.1 --json 2>/dev/null | tail -1
      done | python3 -c "import json,sys
from perflab.results import machine_metadata
meta = machine_metadata()
for l in sys.stdin:
    d = json.loads(l); print(json.dumps({**d, 'machine': meta}))" | tee "$OUT/half_exchange.jsonl" | python3 -c "import json,sys
for l in sys.stdin:
    d=json.loads(l); t=d['exchange_trial_s']
    print(d['dtype'], d['hidden_sizes'], d['batch_size'], 'kept', 'overlap' if d['overlap'] else d['comm'], {k: round(1e3*v, 3) if isinstance(v, float) else v for k, v in t.items()})" ;;
    watchdog)  # issue 54: rank 1 stopped (SIGSTOP) mid-training; the job must end within --timeout and a little, each other rank naming it
      for args in "--comm nccl" "--comm nccl --launch eager" "--comm p2p" "--comm p2p --launch eager" "--comm mpi --mode staged" \
                  "--comm nccl --parallel model" "--mode pipelined --comm mpi" "--comm nccl --hidden-size 1024 1024"; do
        name=$(echo "$args" | tr -d '-' | tr ' ' '_')
        timeout 150 python3 scripts/freeze_rank.py --after 3 --limit 100 --json "$OUT/watchdog.json" -- \
          mpirun --allow-run-as-root --oversubscribe -x PYTHONPATH -x NCCL_NVLS_ENABLE -x PERFLAB_GIT_COMMIT -x PERFLAB_FREEZE_TOKEN \
          -n $P python3 -m perflab train --backend cupy --dataset synthetic --hidden-size 1024 --train-size 60000 --batch-size 6000 \
          --num-epochs 1000000 --test-size 0 --print-every 0 --timeout 15 $args >/dev/null
        python3 -c "import json; d=json.load(open('$OUT/watchdog.json')); print('$args: exit', d['exit_status'], 'after',
d.get('seconds_after_freeze'), 's', *[l for l in d['stderr'] if 'perflab' in l or 'p2p' in l or 'Timeout' in l], sep='\n  ')"
        cat "$OUT/watchdog.json" >> "$OUT/watchdog.jsonl"; rm "$OUT/watchdog.json"
      done 2>&1 | tee "$OUT/watchdog.log" ;;
    allreduce) LIMIT=150 mpi -n $P python3 -m perflab bench allreduce --out "$OUT" 2>&1 | tail -12 ;;
    ceilings) LIMIT=${LIMIT:-150} mpi -n $P python3 -m perflab ceilings ${CEILINGS_ARGS:-} --out "$OUT" 2>&1 | grep -v "^ *mpi_allreduce\|^ *nccl_allreduce.* 0\.0" | tail -30 ;;
    sweep)
      for mode in staged resident; do
        LIMIT=300 mpi -n $P python3 -m perflab sweep --name roofline --hidden 512 1024 2048 --per-rank-batch 3200 --ranks $RANKS \
          --backend cupy --mode $mode --gemm cublas --train-size 38400 --num-epochs 3 --out "$OUT" 2>&1 | tail -2
      done
      LIMIT=120 mpi -n $P python3 -m perflab sweep --name roofline --hidden 512 --batch 800 12000 --ranks 1 \
        --backend cupy --mode staged --gemm cublas --train-size 38400 --num-epochs 3 --out "$OUT" 2>&1 | tail -2 ;;
    pipeline)  # issue 30: resident, serial staged and pipelined side by side in one sweep; their timelines; the host all-reduce
      LIMIT=400 mpi -n $P python3 -m perflab sweep --name pipeline --hidden 2048 --per-rank-batch 3000 --ranks $RANKS \
        --backend cupy --mode resident staged pipelined --gemm cublas --train-size 60000 --num-epochs 5 --out "$OUT" 2>&1 | tail -2
      for n in $RANKS; do
        LIMIT=120 mpi -n $n python3 -m perflab timeline --dataset synthetic --hidden-size 2048 --batch-size $((3000 * n)) \
          --train-size $((18000 * n)) --test-size 0 --out "$OUT" 2>&1 | tail -9
      done
      LIMIT=150 mpi -n $P python3 -m perflab bench allreduce --out "$OUT" 2>&1 | tail -12
      # the host all-reduce (MPI_Allreduce or shared memory) and the dW1 chunks, each a run of 6 epochs at p = P
      { python3 -c "import json; from perflab import results; print(json.dumps(results.machine_metadata()))"
        for comm in mpi shm; do for mode in staged pipelined; do for k in $([ $mode = pipelined ] && echo 1 2 4 8 16 || echo 4); do
          mpi -n $P python3 -m perflab train --backend cupy --mode $mode --comm $comm --chunks $k --dataset synthetic \
            --hidden-size 2048 --batch-size $((3000 * P)) --train-size 60000 --num-epochs 6 --test-size 0 \
            --learning-rate 0.1 --json 2>/dev/null | tail -1 | python3 -c "import json,sys; d=json.loads(sys.stdin.read())
print(json.dumps({k: d[k] for k in ('mode', 'comm', 'chunks', 'ranks', 'hidden_sizes', 'batch_size', 'train_size', 'epoch_seconds')}))"
        done; done; done; } 2>&1 | tee "$OUT/pipeline_comm.jsonl" ;;
    parallel)  # data against model parallel on the GPUs (REPORT.md "Data against model parallel")
      LIMIT=240 mpi -n $P python3 -m perflab sweep --name parallel --parallel data model --hidden 512 2048 \
        --per-rank-batch 800 3000 --ranks $RANKS --backend cupy --mode resident --train-size 60000 --num-epochs 3 --out "$OUT" 2>&1 | tail -2 ;;
    bench)  # the single-GPU benchmarks on this machine's first GPU (bench train saves after each config)
      timeout 120 python3 -m perflab bench gemm --out "$OUT" 2>&1 | tail -3
      timeout 150 python3 -m perflab bench step --out "$OUT" 2>&1 | tail -14
      timeout 400 python3 -m perflab bench train --peers perflab "perflab (output layer unfused)" "perflab (unfused)" "jax scan epoch" \
        "torch.compile default" "torch.compile reduce-overhead" "pytorch cuda graph" "cublas 5-gemm floor" --out "$OUT" 2>&1 | tail -12 ;;
    exchange)  # the pipelined path's host all-reduce (issue 28): its pieces alone, then the float32 timeline of training
      mpi -n $P python3 experiments/pipelined/pieces.py 2>&1 | tee "$OUT/pieces_x$P.jsonl" | grep '"piece": 1'
      for hb in "1280 3500" "2560 3500"; do set -- $hb
        mpi -n $P python3 -m perflab timeline --dataset synthetic --hidden-size $1 --batch-size $(($2 * P)) \
          --train-size $(($2 * P * 6)) --test-size 0 --out "$OUT" 2>&1 | tail -4
      done ;;
    channels)  # why the exchanges are slower than NVLink: NCCL's channel and protocol settings at the gradient sizes (issue 31)
      bash experiments/nccl_graph/channels.sh 2>&1 | tee "$OUT/nccl_channels.log" ;;
    dataparallel)  # perflab resident data parallel alone at p = 1 .. P in the scaling harness, under NCCL_ENV (issue 31)
      for hb in "2048 3000" "512 800"; do set -- $hb
        for n in $RANKS; do
          ( [ -n "${NCCL_ENV:-}" ] && export ${NCCL_ENV}; mpi -n $n $(for kv in ${NCCL_ENV:-}; do echo -x ${kv%%=*}; done) \
            python3 -m perflab.measure.peers_multi perflab $1 $2 60000 2>/dev/null | tail -1 )
        done
      done 2>&1 | tee "$OUT/dataparallel_$(echo "${NCCL_ENV:-defaults}" | tr -c 'A-Za-z0-9._\n-' '_').jsonl" ;;
    scaling)  # every peer in one harness (perflab.measure.peers_multi): same warm-up, median of the same epochs
      for hb in "2048 3000" "512 800"; do set -- $hb; H=$1; b=$2
        for n in $RANKS; do
          for flags in ${FLAGS:-- p2p overlap no-graphs staged pipelined model}; do  # "-": resident, no flag
            mpi -n $n python3 -m perflab.measure.peers_multi perflab $H $b 60000 ${flags#-} 2>/dev/null | tail -1
          done
          mpi -n $n python3 -m perflab.measure.peers_multi ddp $H $b 60000 2>/dev/null | tail -1
          timeout 120 python3 -m perflab.measure.peers_multi jax $H $b 60000 $n 2>/dev/null | tail -1
        done
      done 2>&1 | tee "$OUT/scaling.jsonl" ;;
    halfscaling)  # issue 68 item 3: BF16 data parallel at b = 3000 a GPU, each exchange (HALF_FLAGS), beside JAX's
      # sharded bf16 scan; then which exchange `perflab train --comm auto` keeps at each p (its trial of each)
      for H in ${NETS:-1024 1024-1024 2048-2048}; do
        for n in $RANKS; do
          for flags in $([ $n = 1 ] && echo - || echo "${HALF_FLAGS:-- nccl-half p2p overlap}"); do
            mpi -n $n python3 -m perflab.measure.peers_multi perflab $H 3000 60000 bf16 ${flags#-} 2>/dev/null | tail -1
          done
          timeout 120 python3 -m perflab.measure.peers_multi jax $H 3000 60000 $n bf16 2>/dev/null | tail -1
          [ $n = 1 ] || mpi -n $n python3 -m perflab train --backend cupy --dtype bfloat16 --comm auto --hidden $H \
            --dataset synthetic --train-size 60000 --test-size 0 --batch-size $((3000 * n)) --num-epochs 3 --json \
            2>/dev/null | tail -1 | python3 -c "import json,sys; d=json.loads(sys.stdin.read()); print(json.dumps(
              {'auto': d.get('comm'), 'overlap': d.get('overlap'), 'trial_s': d.get('exchange_trial_s'), 'H': '$H', 'p': $n}))"
        done
      done 2>&1 | tee "$OUT/half_scaling.jsonl" ;;
  esac
done
