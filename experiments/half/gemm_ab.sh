#!/usr/bin/env bash
# One device call on one GPU: a change to gemm_wgmma before and after (session 49: splitk_in_kernel.patch, split-K
# summed in the GEMM's own launch, applied to 012f6e2 for the run, dropped: logs/splitk_in_kernel_*; then the 64 x 112
# tile in clusters of 4: logs/b112_c4_*). `bench gemm` before (.before: BEFORE_COMMIT's perflab/) and after (this tree,
# AFTER_COMMIT) in turn (STAGES: bfloat16 at the 30 half-step shapes, float32: TF32 and 3xTF32 at H = 1024 and 2048),
# each run's rows into one CSV a dtype with side, commit and the run's GPU and boot; then the wgmma GPU tests.
# SIDES (default "before after", sides.sh) may name more: side X runs the tree in .X (commit AFTER_COMMIT+X), so that
# two patches are timed beside main in one call (session 56).
set -uo pipefail
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
source "$(dirname "$0")/sides.sh"
run() {  # side, dtype, extra bench arguments...
  local side=$1 dtype=$2 root commit; shift 2
  root=$(root_of "$side") commit=$(commit_of "$side")
  (cd "$root" && PYTHONPATH=$root PERFLAB_GIT_COMMIT=$commit timeout ${BENCH_S:-150} python3 -m perflab bench gemm --dtype "$dtype" \
     --batches 3200 12000 --out "/tmp/gemm_${side}_$dtype" "$@" 2>&1 | tail -1)
  python3 - "$side" "$commit" "/tmp/gemm_${side}_$dtype/bench_gemm_$dtype.csv" "$OUT/gemm_ab_$dtype.csv" \
    >> "$OUT/gemm_ab_$dtype.csv" <<'PY'
import json, os, sys
import pandas as pd
side, commit, path, into = sys.argv[1:]
t = pd.read_csv(path)
meta = json.load(open(path.replace(".csv", ".json")))
t.insert(0, "commit", commit), t.insert(0, "side", side)
t["boot"], t["date"] = meta["boot"], meta["date"]
t.to_csv(sys.stdout, index=False, header=not os.path.getsize(into))
PY
}
# every side's kernels compiled first, each tree in parallel (a fresh machine compiles a shape's configs in about 30 s
# otherwise, inside the benches' time limits: session 55 lost two benches so)
for side in $SIDES; do root=$(root_of "$side"); (cd "$root" && PYTHONPATH=$root timeout 300 python3 -m perflab compile 2>&1 | tail -1); done
STAGES=${STAGES:-"bfloat16 float32"}
[[ $STAGES == *bfloat16* ]] && for side in $SIDES; do run $side bfloat16; done
[[ $STAGES == *float32* ]] && for side in $SIDES; do run $side float32 --variants wgmma x3tf32 cublas --hidden 1024 2048 --peers; done
[ "${TEST_S:-400}" = 0 ] && exit 0  # TEST_S=0: the benches alone
PYTHONPATH=$PWD timeout ${TEST_S:-400} python3 -m pytest -q -m gpu tests/test_gpu_half.py tests/test_gpu.py -k "wgmma or x3tf32 or half" \
  -p no:cacheprovider 2>&1 | tail -4 > "$OUT/gpu_tests_wgmma.log"
cat "$OUT/gpu_tests_wgmma.log"
