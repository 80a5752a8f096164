// Step 1: naive, a thread an output, operands from global memory (perflab/kernels/progression.py)
// Algorithm 1 of the seeds (001, section 4.1): one thread per element of D.
#include "common.cuh"

template <typename T, bool TA, bool TB, int EPI>
__global__ void gemm_naive(int M, int N, int K, T alpha, const T* __restrict__ A, int lda,
                           const T* __restrict__ B, int ldb, T beta, const T* C, int ldc,
                           T* D, int ldd, const T* __restrict__ bias) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;  // x runs along a row of D: coalesced stores
    int i = blockIdx.y * blockDim.y + threadIdx.y;
    if (i >= M || j >= N) return;
    T acc = 0;
    for (int k = 0; k < K; ++k) acc += A[at<TA>(i, k, lda)] * B[at<TB>(k, j, ldb)];
    D[i * ldd + j] = finish<T, EPI>(acc, alpha, beta, C, ldc, bias, i, j);
}
