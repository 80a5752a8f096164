#!/usr/bin/env bash
# Does NCCL reach NVLink's bandwidth at the gradient's size? Data parallel on two H200 spends about 55 us a
# step all-reducing 6.5 MB (H=2048), 197 GB/s at 16 MB in the ceilings: half of what NVLink carries. Time the
# all-reduce at the two gradient sizes under NCCL's channel and protocol settings, then the data-parallel
# epochs under the best one. NVLS stays off. OUT=/tmp/out bash experiments/nccl_graph/channels.sh
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 WATCHDOG=60
P=experiments/nccl_graph/probe.py
SIZES="1628204 6512684"  # perfmodel.gradient_buffer_bytes at H = 512 and 2048: the G buffer data parallel all-reduces
for env in "" "NCCL_MIN_NCHANNELS=16" "NCCL_MIN_NCHANNELS=32" "NCCL_PROTO=LL128" "NCCL_PROTO=Simple" \
           "NCCL_MIN_NCHANNELS=32 NCCL_PROTO=Simple" "NCCL_ALGO=Tree"; do
  echo "--- ${env:-defaults}"
  env $env timeout 60 mpirun --allow-run-as-root -x PYTHONPATH -x NCCL_NVLS_ENABLE -x WATCHDOG \
    $(for kv in $env; do echo -x ${kv%%=*}; done) -n 2 python3 $P time $SIZES 2>&1 | grep '^{'
done
