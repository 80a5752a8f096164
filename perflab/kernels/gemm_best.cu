// The fastest FP32/FP64 SIMT GEMM here: 2D register tiling (each of 256 threads computes a
// TM x TN block of D), BM x BN x BK tiles double-buffered in shared memory (the next tile is
// fetched into registers while the current one is multiplied: one barrier a step), k-major
// shared tiles padded by 4 words (16-byte reads, no bank conflicts on the transposed stores),
// thread rows/columns split in halves so a warp's 16-byte shared reads are conflict-free,
// loads coalesced along each operand's storage whatever its transpose, any M, N, K.
// Split-K (gridDim.z > 1) writes partial sums to a workspace that gemm_splitk_reduce adds
// up in a fixed order (deterministic), for shapes whose tiles alone cannot fill the chip.
#include "common.cuh"

#define PAD 4

template <typename T>
__device__ __forceinline__ void lds4(const T* p, T* r) {
    if constexpr (sizeof(T) == 4) {
        float4 v = *reinterpret_cast<const float4*>(p);
        r[0] = v.x; r[1] = v.y; r[2] = v.z; r[3] = v.w;
    } else {
        double2 a = *reinterpret_cast<const double2*>(p), b = *reinterpret_cast<const double2*>(p + 2);
        r[0] = a.x; r[1] = a.y; r[2] = b.x; r[3] = b.y;
    }
}

template <typename T, bool TA, bool TB, int EPI, int BM, int BN, int BK, int TM, int TN>
__global__ void __launch_bounds__(256)
gemm_best(int M, int N, int K, T alpha, const T* __restrict__ A, int lda, const T* __restrict__ B, int ldb,
          T beta, const T* C, int ldc, T* D, int ldd, const T* __restrict__ bias, T* __restrict__ work) {
    static_assert((BM / TM) * (BN / TN) == 256, "256 threads");
    constexpr int AL = BM * BK / 256, BL = BN * BK / 256;  // elements each thread loads per tile
    constexpr int R = BM / TM, Cn = BN / TN;                // thread grid: R rows x Cn columns
    __shared__ __align__(16) T As[2][BK][BM + PAD];
    __shared__ __align__(16) T Bs[2][BK][BN + PAD];

    const int t = threadIdx.x, tr = t / Cn, tc = t % Cn;
    const int i0 = blockIdx.y * BM, j0 = blockIdx.x * BN;
    // this block's share of K (split-K along gridDim.z), in whole BK steps
    const int steps = (K + BK - 1) / BK, per = (steps + gridDim.z - 1) / gridDim.z;
    const int kbeg = blockIdx.z * per * BK, kend = min(K, kbeg + per * BK);

    T ra[AL], rb[BL];
    auto fetch = [&](int k0) {
#pragma unroll
        for (int l = 0; l < AL; ++l) {
            int e = t + l * 256;
            int r = TA ? e % BM : e / BK, k = TA ? e / BM : e % BK;
            ra[l] = (i0 + r < M && k0 + k < kend) ? A[at<TA>(i0 + r, k0 + k, lda)] : T(0);
        }
#pragma unroll
        for (int l = 0; l < BL; ++l) {
            int e = t + l * 256;
            int c = TB ? e / BK : e % BN, k = TB ? e % BK : e / BN;
            rb[l] = (k0 + k < kend && j0 + c < N) ? B[at<TB>(k0 + k, j0 + c, ldb)] : T(0);
        }
    };
    auto stash = [&](int buf) {
#pragma unroll
        for (int l = 0; l < AL; ++l) {
            int e = t + l * 256;
            As[buf][TA ? e / BM : e % BK][TA ? e % BM : e / BK] = ra[l];
        }
#pragma unroll
        for (int l = 0; l < BL; ++l) {
            int e = t + l * 256;
            Bs[buf][TB ? e % BK : e / BN][TB ? e / BK : e % BN] = rb[l];
        }
    };

    T acc[TM][TN];
#pragma unroll
    for (int m = 0; m < TM; ++m)
#pragma unroll
        for (int n = 0; n < TN; ++n) acc[m][n] = 0;

    if (kbeg < kend) {
        fetch(kbeg);
        stash(0);
        __syncthreads();
    }
    int buf = 0;
    for (int k0 = kbeg; k0 < kend; k0 += BK) {
        const bool more = k0 + BK < kend;
        if (more) fetch(k0 + BK);
#pragma unroll
        for (int k = 0; k < BK; ++k) {
            T a[TM], b[TN];
#pragma unroll
            for (int g = 0; g < TM / 4; ++g) lds4(&As[buf][k][g * 4 * R + tr * 4], &a[g * 4]);
#pragma unroll
            for (int g = 0; g < TN / 4; ++g) lds4(&Bs[buf][k][g * 4 * Cn + tc * 4], &b[g * 4]);
#pragma unroll
            for (int m = 0; m < TM; ++m)
#pragma unroll
                for (int n = 0; n < TN; ++n) acc[m][n] = fma(a[m], b[n], acc[m][n]);
        }
        if (more) stash(buf ^ 1);
        __syncthreads();
        buf ^= 1;
    }

#pragma unroll
    for (int m = 0; m < TM; ++m) {
        int i = i0 + (m / 4) * 4 * R + tr * 4 + m % 4;
        if (i >= M) continue;
#pragma unroll
        for (int n = 0; n < TN; ++n) {
            int j = j0 + (n / 4) * 4 * Cn + tc * 4 + n % 4;
            if (j >= N) continue;
            if (gridDim.z > 1) work[((size_t)blockIdx.z * M + i) * N + j] = acc[m][n];
            else D[i * ldd + j] = finish<T, EPI>(acc[m][n], alpha, beta, C, ldc, bias, i, j);
        }
    }
}

// D = finish(sum over the S partial products in work[S][M][N]), summed in order s = 0..S-1.
template <typename T, int EPI>
__global__ void gemm_splitk_reduce(int M, int N, int S, T alpha, const T* __restrict__ work, T beta,
                                   const T* C, int ldc, T* D, int ldd, const T* __restrict__ bias) {
    size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= (size_t)M * N) return;
    int i = e / N, j = e % N;
    T acc = 0;
    for (int s = 0; s < S; ++s) acc += work[(size_t)s * M * N + e];
    D[i * ldd + j] = finish<T, EPI>(acc, alpha, beta, C, ldc, bias, i, j);
}
