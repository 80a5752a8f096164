#!/usr/bin/env bash
# One device call on one GPU, a change to float16's update before and after (session 48: the overflow flag reset in
# loss_scale_update, find_overflow four gradients a thread, sgd_update_scaled loading p and g with the flag): the half
# GPU tests, then the epochs before (.before: BEFORE_COMMIT's perflab/) and after (this tree, AFTER_COMMIT), two
# rounds in turn, into one CSV (bench train's files for each run would pass the call's limit on files).
set -uo pipefail
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m perflab compile > /dev/null 2>&1
PYTHONPATH=$PWD timeout 300 python3 -m pytest -q -m gpu tests/test_gpu_half.py -p no:cacheprovider 2>&1 | tail -3 > "$OUT/gpu_tests_half.log"
cat "$OUT/gpu_tests_half.log"
ln -sfn ../data .before/data
for round in 1 2; do
  for side in before after; do
    [ $side = before ] && root=$PWD/.before commit=$BEFORE_COMMIT || root=$PWD commit=$AFTER_COMMIT
    (cd "$root" && PYTHONPATH=$root PERFLAB_GIT_COMMIT=$commit timeout 200 python3 -m perflab bench train \
       --configs 1024,3200 1024,12000 1024-1024,3200 --peers "perflab (fp16)" "cublas floor (fp16)" "perflab (bf16)" \
       --out "/tmp/bench_${side}_$round" 2>&1 | tail -2)
    python3 - "$side" "$round" "$commit" "/tmp/bench_${side}_$round" >> "$OUT/epochs.csv" <<'PY'
import json, sys
import pandas as pd
side, rnd, commit, folder = sys.argv[1:]
t = pd.read_csv(f"{folder}/bench_train.csv")
meta = json.load(open(f"{folder}/bench_train.json"))
t.insert(0, "commit", commit), t.insert(0, "round", rnd), t.insert(0, "side", side)
t["gpu"], t["boot"], t["date"] = meta["gpu"], meta["boot"], meta["date"]
t.to_csv(sys.stdout, index=False, header=(side == "before" and rnd == "1"))
PY
  done
done
