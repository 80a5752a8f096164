#!/usr/bin/env bash
# One device call on one H200 (session 62): the ping-pong configs' tree (this one): compiled, the half wgmma GPU tests
# (every config, the ping-pong ones among them), then, if they passed, pp_configs.py.
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
timeout 300 python3 -m perflab compile 2>&1 | tail -1
timeout 150 python3 -m pytest -q -x -m gpu tests/test_gpu_half.py -k "two_ways or every_half_wgmma_config" -p no:cacheprovider --tb=short 2>&1 \
  | grep -v '^\.' | tail -30 | tee "$OUT/pp_gpu_tests.log"
grep -q " passed" "$OUT/pp_gpu_tests.log" && ! grep -q -i "failed\|error" "$OUT/pp_gpu_tests.log" || exit 1
PYTHONPATH=$PWD timeout 240 python3 experiments/half/pp_configs.py pp > "$OUT/pp_configs.jsonl" 2> "$OUT/pp_configs.err"
tail -3 "$OUT/pp_configs.err"; wc -l "$OUT/pp_configs.jsonl"
