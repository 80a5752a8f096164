#!/usr/bin/env bash
# One device call on two GPUs (issue 68 item 3): copy_engine.patch applied (at 82ec840) in the tree, the tree without it
# in .before (BEFORE_COMMIT; AFTER_COMMIT the trial's). The BF16 p2p checks of two and three hidden layers (graphed and
# eager) against float64, copy_engine_probe.py (the pieces timed alone and beside a GEMM), then bf16_exchange.sh's
# peers_multi epochs at p = 1 and 2, before and after in turn, twice, JAX's sharded bf16 scan beside them.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
SMALL="--dataset synthetic --input-size 97 --hidden-size 61 --num-classes 7 --train-size 517 --batch-size 100 --num-epochs 2 --learning-rate 0.5 --test-size 0"
mpi() { timeout 120 mpirun --allow-run-as-root -n 2 -x PYTHONPATH -x NCCL_NVLS_ENABLE "$@"; }
for a in "--hidden-size 61 37" "--hidden-size 61 37 --launch eager" "--hidden-size 61 37 29"; do
  mpi python3 -m perflab check --backend cupy --parallel data $SMALL --dtype bfloat16 --comm p2p $a --json 2>"$OUT/err.txt" | \
    tail -1 | python3 -c "import json,sys; d=json.loads(sys.stdin.read() or '{}'); print('p=2 $a', f\"{d.get('max_rel_error', float('nan')):.2e}\", d.get('passed', 'NO RESULT'), d.get('comm'))"
  tail -2 "$OUT/err.txt" | cut -c1-300
done | tee "$OUT/check_deep.log"  # bf16_exchange.sh below writes check.log (empty with CHECK_RANKS=none)
mpi python3 experiments/p2p/copy_engine_probe.py 2>/dev/null | grep '^{' > "$OUT/probe.jsonl"
CHECK_RANKS=none BENCH_RANKS="1 2" OUT=$OUT timeout 400 bash experiments/p2p/bf16_exchange.sh > /dev/null 2>&1
