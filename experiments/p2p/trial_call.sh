#!/usr/bin/env bash
# One device call on two GPUs for a p2p trial (session 59, for push_landed.patch; .before from `git archive HEAD perflab
# tests`, its GPU tests with it): this tree is the trial (committed,
# AFTER_COMMIT), .before the tree it changes (BEFORE_COMMIT, carried). Both compiled at once; the GPU tests of .before
# (TESTS: pytest paths, default the half and FP32 GPU tests: main's own, which a trial's call can run on the side);
# then bf16_exchange.sh: the p = 2 checks, and the epochs before and after in turn, twice; then the p = 4 checks with
# the ranks sharing one GPU (the two-shot's bits). Each part writes into $OUT as it goes.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
: "${BEFORE_COMMIT:?the commit of .before}" "${AFTER_COMMIT:?the commit of this tree}"
(python3 -m perflab compile > /dev/null 2>&1 & (cd .before && python3 -m perflab compile > /dev/null 2>&1) & wait)
echo "compiled at ${SECONDS}s"
(cd .before && PYTHONPATH=$PWD timeout 240 python3 -m pytest -q -m gpu ${TESTS:-tests/test_gpu_half.py tests/test_gpu.py} \
  -p no:cacheprovider --tb=line 2>&1 | grep -v '^\.' | tail -15) > "$OUT/gpu_tests_before.log"
tail -3 "$OUT/gpu_tests_before.log"; echo "tests at ${SECONDS}s"
CHECK_RANKS=2 BENCH_RANKS="1 2" JAX_RANKS=none PERFLAB_GIT_COMMIT=$AFTER_COMMIT timeout 330 \
  bash experiments/p2p/bf16_exchange.sh > "$OUT/exchange.log" 2>&1
mv "$OUT/check.log" "$OUT/check_p2.log"; grep -c True "$OUT/check_p2.log"; echo "exchange at ${SECONDS}s"
CHECK_ONLY=1 CHECK_RANKS=4 RUNNER=experiments/p2p/shared_gpu.py timeout 200 bash experiments/p2p/bf16_exchange.sh \
  > /dev/null 2>&1
mv "$OUT/check.log" "$OUT/check_p4_shared.log"; grep -c True "$OUT/check_p4_shared.log"; echo "end at ${SECONDS}s"
