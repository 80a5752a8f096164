// Step 3: register blocking, a thread a block of outputs (perflab/kernels/progression.py)
// Section 4.2 of the seeds: 16 x 4 = 64 threads compute a 64 x 16 tile of D; each thread one
// 1 x 16 row of it. Per step of 4 along k, the block stages a 4 x 16 tile of op(B) in shared
// memory (one element a thread) and each thread keeps its 1 x 4 slice of op(A) in registers.
#include "common.cuh"

template <typename T, bool TA, bool TB, int EPI>
__global__ void gemm_regblock(int M, int N, int K, T alpha, const T* __restrict__ A, int lda,
                              const T* __restrict__ B, int ldb, T beta, const T* C, int ldc,
                              T* D, int ldd, const T* __restrict__ bias) {
    __shared__ T Bs[4][16];
    int t = threadIdx.y * 16 + threadIdx.x;  // 0..63: the row of the tile this thread owns
    int i = blockIdx.y * 64 + t, j0 = blockIdx.x * 16;
    T acc[16];
#pragma unroll
    for (int c = 0; c < 16; ++c) acc[c] = 0;
    for (int k0 = 0; k0 < K; k0 += 4) {
        int bk = TB ? t % 4 : t / 16, bc = TB ? t / 4 : t % 16;  // coalesced along storage
        Bs[bk][bc] = (k0 + bk < K && j0 + bc < N) ? B[at<TB>(k0 + bk, j0 + bc, ldb)] : T(0);
        T a[4];
#pragma unroll
        for (int q = 0; q < 4; ++q) a[q] = (i < M && k0 + q < K) ? A[at<TA>(i, k0 + q, lda)] : T(0);
        __syncthreads();
#pragma unroll
        for (int q = 0; q < 4; ++q)
#pragma unroll
            for (int c = 0; c < 16; ++c) acc[c] += a[q] * Bs[q][c];
        __syncthreads();
    }
    if (i >= M) return;
#pragma unroll
    for (int c = 0; c < 16; ++c)
        if (j0 + c < N) D[i * ldd + j0 + c] = finish<T, EPI>(acc[c], alpha, beta, C, ldc, bias, i, j0 + c);
}
