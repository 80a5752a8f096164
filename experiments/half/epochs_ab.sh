#!/usr/bin/env bash
# One device call on one GPU: a change to the step before and after (session 50: beside_first.patch, the output
# layer's reduction and the layers above the first's update beside dW_1's GEMM, dropped; the update 16 bytes a thread
# with its rounded weights in one store). `bench train` before (.before: BEFORE_COMMIT's perflab/) and after (this tree,
# AFTER_COMMIT), ROUNDS rounds in turn, BF16 and FP32 epochs beside the BF16 cuBLAS floor, into one CSV with side,
# round, commit and the run's GPU and boot (written as it goes: a call cut short keeps what ran); then TESTS, if set.
# PEERS (separated by ";", as peer names hold commas) replaces the three peers. SIDES (default "before after") may
# name more: side X runs the tree in .X (commit AFTER_COMMIT+X: this tree with a patch applied, session 51).
set -uo pipefail
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
IFS=";" read -ra PEERS <<< "${PEERS:-perflab (bf16);cublas floor (bf16);perflab}"  # bench train's peers, ";" between
source "$(dirname "$0")/sides.sh"
CONFIGS=${CONFIGS:-"1024,3200 1024,12000 1024-1024,3200 2048-2048,3200"}
for round in $(seq 1 "${ROUNDS:-2}"); do
  for side in $SIDES; do
    root=$(root_of "$side") commit=$(commit_of "$side")
    (cd "$root" && PYTHONPATH=$root PERFLAB_GIT_COMMIT=$commit timeout 240 python3 -m perflab bench train \
       --configs $CONFIGS --peers "${PEERS[@]}" --out "/tmp/bench_${side}_$round" \
       2>&1 | tail -2)
    python3 - "$side" "$round" "$commit" "/tmp/bench_${side}_$round" "$OUT/epochs.csv" >> "$OUT/epochs.csv" <<'PY'
import json, os, sys
import pandas as pd
side, rnd, commit, folder, into = sys.argv[1:]
t = pd.read_csv(f"{folder}/bench_train.csv")
meta = json.load(open(f"{folder}/bench_train.json"))
t.insert(0, "commit", commit), t.insert(0, "round", rnd), t.insert(0, "side", side)
t["gpu"], t["boot"], t["date"] = meta["gpu"], meta["boot"], meta["date"]
t.to_csv(sys.stdout, index=False, header=not os.path.exists(into) or not os.path.getsize(into))
PY
  done
done
if [ -n "${TESTS:-}" ]; then PYTHONPATH=$PWD timeout 300 python3 -m pytest -q -m gpu $TESTS -p no:cacheprovider 2>&1 | tail -5 > "$OUT/gpu_tests.log"; cat "$OUT/gpu_tests.log"; fi
