// Step 2: tiled, operand tiles in shared memory (perflab/kernels/progression.py)
// Algorithm 2 of the seeds: 32 x 32 thread blocks, each computes a 32 x 32 tile of D from
// 32 x 32 tiles of op(A) and op(B) staged in shared memory. Loads are coalesced whichever
// way an operand is stored (a transposed operand is written transposed into shared memory);
// rows are padded by one word so the transposed stores do not hit one bank.
#include "common.cuh"

#define TILE 32

template <typename T, bool TA, bool TB, int EPI>
__global__ void gemm_tiled(int M, int N, int K, T alpha, const T* __restrict__ A, int lda,
                           const T* __restrict__ B, int ldb, T beta, const T* C, int ldc,
                           T* D, int ldd, const T* __restrict__ bias) {
    __shared__ T As[TILE][TILE + 1];  // As[r][k] = op(A)(i0 + r, k0 + k)
    __shared__ T Bs[TILE][TILE + 1];  // Bs[k][c] = op(B)(k0 + k, j0 + c)
    int tx = threadIdx.x, ty = threadIdx.y;
    int i0 = blockIdx.y * TILE, j0 = blockIdx.x * TILE;
    T acc = 0;
    for (int k0 = 0; k0 < K; k0 += TILE) {
        // A: tx runs along the stored row (k when not transposed, i when transposed)
        int ar = TA ? tx : ty, ak = TA ? ty : tx;
        As[ar][ak] = (i0 + ar < M && k0 + ak < K) ? A[at<TA>(i0 + ar, k0 + ak, lda)] : T(0);
        int bk = TB ? tx : ty, bc = TB ? ty : tx;
        Bs[bk][bc] = (k0 + bk < K && j0 + bc < N) ? B[at<TB>(k0 + bk, j0 + bc, ldb)] : T(0);
        __syncthreads();
#pragma unroll
        for (int k = 0; k < TILE; ++k) acc += As[ty][k] * Bs[k][tx];
        __syncthreads();
    }
    int i = i0 + ty, j = j0 + tx;
    if (i < M && j < N) D[i * ldd + j] = finish<T, EPI>(acc, alpha, beta, C, ldc, bias, i, j);
}
