#!/bin/bash
# One device call for the wgmma experiment: ptxas report and SASS of the kernels, then check.py.
# Usage (device, repository root): bash experiments/wgmma/run.sh   (writes to $OUT)
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
cd experiments/wgmma
cat > /tmp/inst.cu <<'CU'
#include "wgmma_gemm.cu"
template __global__ void wgmma_tma_gemm<2,256,4,false,1>(int,int,int,int,float,const void*,const void*,const void*,const void*,float,float*,int);
template __global__ void wgmma_tma_gemm<2,128,3,true,2>(int,int,int,int,float,const void*,const void*,const void*,const void*,float,float*,int);
CU
nvcc -gencode=arch=compute_90a,code=sm_90a -cubin -std=c++17 -I. -I../../perflab/kernels -Xptxas -v -o /tmp/inst.cubin /tmp/inst.cu > $OUT/ptxas.log 2>&1
echo "HGMMA in SASS: $(cuobjdump -sass /tmp/inst.cubin | grep -c HGMMA)" >> $OUT/ptxas.log
grep -i "error\|warn\|spill\|registers\|HGMMA" $OUT/ptxas.log | head -30
cd ../..
PYTHONUNBUFFERED=1 timeout ${CHECK_TIMEOUT:-400} python3 experiments/wgmma/check.py $OUT 2>&1 | tee $OUT/check.log | grep -v "\"kind\"" | cut -c1-400
python3 experiments/wgmma/summary.py $OUT/wgmma.jsonl
