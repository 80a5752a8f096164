#!/usr/bin/env bash
# All probe variants on a two-GPU machine, each under its own time limit: OUT=/tmp/out bash run.sh
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 NCCL_DEBUG=${NCCL_DEBUG:-WARN}
MPI="timeout 60 mpirun --allow-run-as-root -x PYTHONPATH -x NCCL_NVLS_ENABLE -x NCCL_DEBUG -x PYTHONUNBUFFERED"
P=experiments/nccl_graph/probe.py
python3 -c "import cupy, cupy.cuda.nccl as n; print('cupy', cupy.__version__, 'nccl', n.get_version(), 'runtime', cupy.cuda.runtime.runtimeGetVersion(), 'driver', cupy.cuda.runtime.driverGetVersion())"
for v in raw-default raw-relaxed raw-global raw-thread raw-relaxed-warm raw-default-kernels raw-global-warm-kernels; do
  echo "--- $v"; $MPI -n 2 python3 $P $v 2>&1 | tail -25
done
python3 -m perflab compile >/dev/null 2>&1
for args in "trainer 512 100 1000" "trainer 2048 3000 60000" "trainer 512 800 60000" "trainer-overlap 2048 3000 60000" "trainer-overlap 512 800 60000"; do
  echo "--- $args"; WATCHDOG=100 timeout 150 mpirun --allow-run-as-root -x PYTHONPATH -x NCCL_NVLS_ENABLE -x NCCL_DEBUG -x WATCHDOG -n 2 python3 $P $args 2>&1 | tail -25
done
for args in "trainer 2048 3000 60000" "trainer 512 800 60000"; do
  echo "--- p=1 $args"; WATCHDOG=100 timeout 150 mpirun --allow-run-as-root -x PYTHONPATH -n 1 python3 $P $args 2>&1 | tail -5
done
