#!/usr/bin/env bash
# The final assignment's Problem 1 (Questions 1.1-1.4) at the solution's scale on a GPU machine, in one call:
# `python -m perflab.workbook.problem1 --full` (the package module: the device machines have no Jupyter). The run
# folder ($PROBLEM1_DIR, default /tmp/problem1: problem1_<part>.csv with the machine's JSON beside each, figures/)
# comes back as one tarball, $OUT/problem1.tar.gz, beside $OUT/problem1.log, whose last lines are the four answers.
# A rerun into the same folder skips the runs done.
# Usage, from the repository root: OUT=/tmp/out bash scripts/gpu_problem1.sh [part...]   (parts: check drift rates hidden)
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1  # the device machines run as root (check's mpiexec)
OUT=${OUT:-/tmp/perflab-out}; mkdir -p "$OUT"
folder=${PROBLEM1_DIR:-/tmp/problem1}
parts=${*:-"check drift rates hidden"}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
python3 -m perflab compile 2>&1 | tail -1  # every kernel at once: the fused trainer's are then warm
start=$(date +%s)
# shellcheck disable=SC2086  # the parts are words
python3 -m perflab.workbook.problem1 --full --no-progress --folder "$folder" --parts $parts 2>&1 | tee "$OUT/problem1.log"
status=${PIPESTATUS[0]}
echo "problem 1 took $(( $(date +%s) - start )) s, exit $status" | tee -a "$OUT/problem1.log"
tar czf "$OUT/problem1.tar.gz" -C "$(dirname "$folder")" "$(basename "$folder")"
ls -la "$folder" "$folder/figures"
exit "$status"
