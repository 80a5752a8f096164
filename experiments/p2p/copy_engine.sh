#!/usr/bin/env bash
# One device call on two GPUs (issue 68 item 3, D73): past one hidden layer, the BF16 copies of the layers above the
# first brought by the copy engine while dz_1's and dW_1's GEMMs run. bf16_exchange.sh checks p = 2 against float64
# (one, two and three hidden layers, graphed and eager), then times peers_multi BF16 epochs at p = 1 and 2 before
# (.before, BEFORE_COMMIT) and after (AFTER_COMMIT), in turn, twice, with JAX's sharded bf16 scan beside them.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi topo -m > "$OUT/topology.txt" 2>&1
CHECK_RANKS=2 BENCH_RANKS="1 2" OUT=$OUT bash experiments/p2p/bf16_exchange.sh > "$OUT/exchange.log" 2>&1
