#!/usr/bin/env bash
# The main job on a GPU machine, run as the README tells a user to: `perflab notebook roofline` with
# no parameters (auto: CuPy, one MPI engine per GPU, started by the notebook through ipyparallel),
# then `perflab report`. For the device machines, which have no package registry: the notebook's
# packages travel as wheels in .whl/ (installed to /tmp/site). Brings the run folder back as one
# tarball in $OUT. Usage, from the repository root: OUT=/tmp/out bash scripts/gpu_mainjob.sh
set -uo pipefail
OUT=${OUT:-/tmp/perflab-out}; mkdir -p "$OUT"
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
export PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1  # the device machines run as root
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
python3 -m perflab compile 2>&1 | tail -1
start=$(date +%s)
python3 -m perflab notebook roofline 2>&1 | tee "$OUT/mainjob.log" | grep -v -i "warning" | tail -20
python3 -m perflab report 2>&1 | tee -a "$OUT/mainjob.log"
echo "main job took $(( $(date +%s) - start )) s" | tee -a "$OUT/mainjob.log"
run=$(python3 -c "from perflab import results; print(results.run_dir())")
tar czf "$OUT/run.tar.gz" -C "$(dirname "$run")" "$(basename "$run")"
ls -la "$run" "$run/figures" | head -40
