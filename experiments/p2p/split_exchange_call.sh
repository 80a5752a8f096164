#!/usr/bin/env bash
# One device call on two GPUs for split_exchange.patch (session 63): the BF16 p2p exchange in two launches, the first
# layer's on the step's stream and the layers above it on a side stream beside the next step's first GEMM
# (PERFLAB_SPLIT_EXCHANGE blocks; 0 or unset: one launch, as main). This tree is the trial (committed, AFTER_COMMIT),
# .before main (BEFORE_COMMIT, carried: `git archive HEAD perflab tests` before the patch). The p = 2 checks with the
# split on (SPLITS' first value), then the epochs: main's p = 1 and p = 2, the trial's p = 2 at each SPLITS value, in
# turn, REPS times. Writes check.log and bench.jsonl into $OUT as it goes.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
: "${BEFORE_COMMIT:?the commit of .before}" "${AFTER_COMMIT:?the commit of this tree}"
SPLITS=${SPLITS:-16 32 8}; REPS=${REPS:-1 2}
mpi() { timeout "${LIMIT:-90}" mpirun --allow-run-as-root --oversubscribe -x PYTHONPATH -x NCCL_NVLS_ENABLE \
          -x PERFLAB_GIT_COMMIT -x PERFLAB_SPLIT_EXCHANGE "$@"; }
if [ -z "${BENCH_ONLY:-}" ]; then
  (python3 -m perflab compile > /dev/null 2>&1 & (cd .before && python3 -m perflab compile > /dev/null 2>&1) & wait)
  echo "compiled at ${SECONDS}s"
  SMALL="--dataset synthetic --input-size 97 --hidden-size 61 --num-classes 7 --train-size 517 --batch-size 100 --num-epochs 2 --learning-rate 0.5 --test-size 0"
  export PYTHONPATH=$PWD PERFLAB_SPLIT_EXCHANGE=${SPLITS%% *} PERFLAB_GIT_COMMIT=$AFTER_COMMIT
  for args in "" "--hidden-size 61 37" "--hidden-size 61 37 29" "--train-size 1999 --batch-size 400" \
              "--hidden-size 64 32" "--hidden-size 64 32 24" "--hidden-size 64 32 --gemm wgmma" \
              "--input-size 784 --hidden-size 2048 2048 --num-classes 10 --train-size 6000 --batch-size 3000 --num-epochs 3 --learning-rate 0.05"; do
    mpi -n 2 python3 -m perflab check --backend cupy --parallel data $SMALL --dtype bfloat16 --comm p2p $args --json \
        2>"$OUT/err.txt" | tail -1 | python3 -c "import json,sys; d=json.loads(sys.stdin.read().strip() or '{}'); print('p=2 $args', f\"{d.get('max_rel_error', float('nan')):.2e}\", d.get('passed', 'NO RESULT'), 'drift', d.get('replica_max_abs_diff'))"
    (grep -iE "error|heard nothing|timed out" "$OUT/err.txt" | head -4) | cut -c1-300
  done 2>&1 | tee "$OUT/check.log"
  echo "checks at ${SECONDS}s"
fi
for rep in $REPS; do
  for H in 1024-1024 2048-2048; do
    for run in "before 1 0" "before 2 0" $(for s in $SPLITS; do echo "after:2:$s"; done); do
      set -- ${run//:/ }; tree=$1 n=$2 split=$3
      [ $tree = before ] && root=$PWD/.before commit=$BEFORE_COMMIT || root=$PWD commit=$AFTER_COMMIT
      flags=$([ $n = 1 ] && echo "" || echo "p2p")
      (cd "$root" && PYTHONPATH=$root PERFLAB_GIT_COMMIT=$commit PERFLAB_SPLIT_EXCHANGE=$split mpi -n $n python3 -m \
         perflab.measure.peers_multi perflab $H 3000 60000 bf16 $flags 2>/dev/null | tail -1 | \
         python3 -c "import json,sys; d=json.loads(sys.stdin.read()); d.update(tree='$tree', rep=$rep, split=$split); print(json.dumps(d))")
    done
  done
done 2>&1 | tee -a "$OUT/bench.jsonl"
echo "end at ${SECONDS}s"
