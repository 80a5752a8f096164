#!/usr/bin/env bash
# One device call on one H200 (session 62), in the tree with ping_pong.patch applied (trial 2c34c5f): compiled, the half
# wgmma GPU tests (every config, the ping-pong ones among them), then, if they passed, ping_pong_configs.py.
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
timeout 300 python3 -m perflab compile 2>&1 | tail -1
timeout 150 python3 -m pytest -q -x -m gpu tests/test_gpu_half.py -k "two_ways or every_half_wgmma_config" -p no:cacheprovider --tb=short 2>&1 \
  | grep -v '^\.' | tail -30 | tee "$OUT/ping_pong_gpu_tests.log"
grep -q " passed" "$OUT/ping_pong_gpu_tests.log" && ! grep -q -i "failed\|error" "$OUT/ping_pong_gpu_tests.log" || exit 1
PYTHONPATH=$PWD timeout 240 python3 experiments/half/ping_pong_configs.py pp > "$OUT/ping_pong_configs.jsonl" 2> "$OUT/ping_pong_configs.err"
tail -3 "$OUT/ping_pong_configs.err"; wc -l "$OUT/ping_pong_configs.jsonl"
