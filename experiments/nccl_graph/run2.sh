#!/usr/bin/env bash
# Second round on two GPUs: where the exit hangs, and whether an overlap in the graph pays (chunks, NCCL channels)
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 NCCL_DEBUG=${NCCL_DEBUG:-WARN} WATCHDOG=60
MPI="timeout 80 mpirun --allow-run-as-root -x PYTHONPATH -x NCCL_NVLS_ENABLE -x NCCL_DEBUG -x WATCHDOG -x PYTHONUNBUFFERED -x NCCL_MAX_NCHANNELS"
P=experiments/nccl_graph/probe.py
python3 -m perflab compile >/dev/null 2>&1
for v in teardown-graphs-first teardown-comm-first; do echo "--- $v $(date +%T)"; $MPI -n 2 python3 $P $v 2>&1 | grep -v "^ *$" | tail -12; done
for hb in "2048 3000" "512 800"; do
  for k in 1 2 4; do echo "--- overlap $hb chunks $k $(date +%T)"; $MPI -n 2 python3 $P trainer-overlap $hb 60000 $k 2>&1 | tail -1; done
  echo "--- no overlap $hb $(date +%T)"; $MPI -n 2 python3 $P trainer $hb 60000 4 2>&1 | tail -1
  for c in 4 8; do echo "--- overlap $hb chunks 2 channels $c"; NCCL_MAX_NCHANNELS=$c $MPI -n 2 python3 $P trainer-overlap $hb 60000 2 2>&1 | tail -1; done
done
