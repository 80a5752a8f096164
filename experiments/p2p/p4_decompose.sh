#!/usr/bin/env bash
# One device call on four GPUs: where BF16 data parallel's p = 4 epoch goes (issue 68 item 3). The exchange kernels
# alone at p = 2 and 4 (bf16_kernel_times.py), then peers_multi epochs at b = 3000 a GPU with 60000 samples and with
# 4x as many (20 steps an epoch at p = 4, as p = 1 has at 60000): the difference is what an epoch pays once, not a step.
# PERFLAB_GIT_COMMIT: the commit of the tree (the device's git may be older).
set -uo pipefail
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
mpi() { timeout 120 mpirun --allow-run-as-root -x PYTHONPATH -x NCCL_NVLS_ENABLE -x PERFLAB_GIT_COMMIT "$@"; }
for n in 2 4; do
  mpi -n $n python3 experiments/p2p/bf16_kernel_times.py 2>/dev/null | \
    python3 -c "import json,sys; [print(json.dumps({**json.loads(l), 'ranks': $n})) for l in sys.stdin if l.startswith('{')]"
done > "$OUT/p4_kernel_times.jsonl"
for H in ${NETS:-1024-1024 2048-2048}; do
  for N in 15000 60000; do mpi -n 1 python3 -m perflab.measure.peers_multi perflab $H 3000 $N bf16 2>/dev/null | tail -1; done
  for N in 60000 120000; do mpi -n 2 python3 -m perflab.measure.peers_multi perflab $H 3000 $N bf16 p2p 2>/dev/null | tail -1; done
  for flags in p2p nccl-half; do
    for N in 60000 240000; do mpi -n 4 python3 -m perflab.measure.peers_multi perflab $H 3000 $N bf16 $flags 2>/dev/null | tail -1; done
  done
done | tee "$OUT/p4_epochs.jsonl"
