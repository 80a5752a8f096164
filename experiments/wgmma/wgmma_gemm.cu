// TF32 and 3xTF32 GEMMs on Hopper's warpgroup MMA (wgmma, sm_90a), for issue 32.
//
// C (M x N, row-major, ldc) = alpha A Bt^T + beta C, with A (M x K, row-major, lda) and Bt (N x K,
// row-major, ldb): both operands K-major, as TF32 wgmma requires. K, lda and ldb must be multiples
// of 4 and A, Bt 16-byte aligned (16-byte cp.async); M and N are free (rows past the edge load as
// zeros and are not stored).
//
// A CTA is WGS warpgroups (128 threads each); warpgroup g computes rows 64g..64g+63 of the CTA's
// (64 WGS) x BN tile against the whole B tile. Every thread loads: STAGES shared-memory stages of
// 32 k each, filled by cp.async in the 128-byte swizzle wgmma reads (row r's 16-byte chunk c at
// chunk c ^ (r % 8); 8-row groups 1024 bytes apart), PREFETCH = STAGES - 2 tiles ahead, so that
// the MMAs of one tile run while the next tile's MMAs are issued (wgmma.wait_group 1) and a stage
// is refilled only after the barrier that follows its MMAs' wait.
//
// X3 (3xTF32, FP32-accurate): each operand x is split into big = tf32(x) and small = x - big, and
// D += As Bb + Ab Bs + Ab Bb (the small-small term is below FP32's rounding). A's parts are made in
// registers from the stage (A from registers, the _rs wgmma); B's in shared memory: the stage is
// rewritten to big in place and small goes to one of two extra buffers.
//
// Split-K: blockIdx.z takes k in [z kps, (z + 1) kps); with gridDim.z > 1 each split writes
// alpha times its part to C + z M ldc (a workspace; beta is ignored) and splitk_sum adds them.
#include "wgmma_ops.cuh"

constexpr int BK = 32;

__device__ __forceinline__ unsigned smem_u32(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// The wgmma shared-memory descriptor of a K-major tile in the 128-byte swizzle at byte address
// addr (tiles 1024-byte aligned; a k-step of 8 TF32 adds 32 bytes to addr).
__device__ __forceinline__ unsigned long long descriptor(unsigned addr) {
    unsigned long long d = (unsigned long long)((addr & 0x3FFFF) >> 4);
    d |= 1ull << 16;                               // leading byte offset: unused when swizzled
    d |= (unsigned long long)(1024 >> 4) << 32;    // stride byte offset: the next 8-row group
    d |= 1ull << 62;                               // the 128-byte swizzle
    return d;
}

__device__ __forceinline__ void cp_async16(unsigned dst, const void* src, int bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" :: "r"(dst), "l"(src), "r"(bytes));
}

// rows x 32 of a K-major operand (from row0, k from k0, k < kend) into a swizzled stage
template <int THREADS>
__device__ __forceinline__ void load_tile(unsigned stage, const float* src, int ld, int nrows, int kend,
                                          int row0, int k0, int rows) {
    for (int i = threadIdx.x; i < rows * 8; i += THREADS) {
        int r = i >> 3, c = i & 7;
        int row = row0 + r, k = k0 + c * 4;
        int bytes = (row < nrows && k < kend) ? min(16, (kend - k) * 4) : 0;
        const float* from = bytes ? src + (size_t)row * ld + k : src;
        cp_async16(stage + r * 128 + ((c ^ (r & 7)) << 4), from, bytes);
    }
}

__device__ __forceinline__ float tf32_big(float x) {   // x rounded to TF32 (low 13 bits zero)
    unsigned u;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(u) : "f"(x));
    return __uint_as_float(u);
}

template <int N> struct Wgmma;
template <> struct Wgmma<64> {
    static __device__ __forceinline__ void ss(float (&d)[32], unsigned long long a, unsigned long long b) { wgmma_n64_ss(d, a, b); }
    static __device__ __forceinline__ void rs(float (&d)[32], const unsigned (&a)[4], unsigned long long b) { wgmma_n64_rs(d, a, b); }
};
template <> struct Wgmma<128> {
    static __device__ __forceinline__ void ss(float (&d)[64], unsigned long long a, unsigned long long b) { wgmma_n128_ss(d, a, b); }
    static __device__ __forceinline__ void rs(float (&d)[64], const unsigned (&a)[4], unsigned long long b) { wgmma_n128_rs(d, a, b); }
};
template <> struct Wgmma<256> {
    static __device__ __forceinline__ void ss(float (&d)[128], unsigned long long a, unsigned long long b) { wgmma_n256_ss(d, a, b); }
    static __device__ __forceinline__ void rs(float (&d)[128], const unsigned (&a)[4], unsigned long long b) { wgmma_n256_rs(d, a, b); }
};

// shared memory a CTA needs (+ 1024 for aligning the base)
template <int WGS, int BN, int STAGES, bool X3>
constexpr int smem_bytes() { return STAGES * (64 * WGS + BN) * BK * 4 + (X3 ? 2 * BN * BK * 4 : 0) + 1024; }

template <int WGS, int BN, int STAGES, bool X3>
__global__ void __launch_bounds__(WGS * 128, 1)
wgmma_gemm(int M, int N, int K, int kps, float alpha, const float* __restrict__ A, int lda,
           const float* __restrict__ Bt, int ldb, float beta, float* __restrict__ C, int ldc) {
    constexpr int THREADS = WGS * 128, BM = 64 * WGS, PREFETCH = STAGES - 2;
    constexpr int A_BYTES = BM * BK * 4, B_BYTES = BN * BK * 4, STAGE_BYTES = A_BYTES + B_BYTES;
    static_assert(PREFETCH >= 1, "STAGES >= 3");
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    const unsigned base = (smem_u32(smem_raw) + 1023) & ~1023u;
    const unsigned small_base = base + STAGES * STAGE_BYTES;   // X3: B's small parts, two buffers
    const int wg = threadIdx.x >> 7, warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    const int kbegin = blockIdx.z * kps, kend = min(K, kbegin + kps);
    const int ktiles = kend > kbegin ? (kend - kbegin + BK - 1) / BK : 0;
    float d[BN / 2];
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) d[i] = 0.0f;

    auto load = [&](int t) {
        unsigned a = base + (t % STAGES) * STAGE_BYTES;
        load_tile<THREADS>(a, A, lda, M, kend, m0, kbegin + t * BK, BM);
        load_tile<THREADS>(a + A_BYTES, Bt, ldb, N, kend, n0, kbegin + t * BK, BN);
    };
    for (int t = 0; t < PREFETCH; ++t) {
        if (t < ktiles) load(t);
        asm volatile("cp.async.commit_group;\n" ::);
    }
    for (int kt = 0; kt < ktiles; ++kt) {
        asm volatile("cp.async.wait_group %0;\n" :: "n"(PREFETCH - 1));
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");   // cp.async's writes, seen by wgmma
        __syncthreads();   // tile kt is in; every warp is past the wait for the MMAs of tile kt - 2
        if (kt + PREFETCH < ktiles) load(kt + PREFETCH);                  // into tile kt - 2's stage
        asm volatile("cp.async.commit_group;\n" ::);
        const unsigned a_stage = base + (kt % STAGES) * STAGE_BYTES, b_stage = a_stage + A_BYTES;
        if constexpr (X3) {
            const unsigned b_small = small_base + (kt & 1) * B_BYTES;    // tile kt - 2's MMAs are done with it
            for (int i = threadIdx.x; i < BN * 8; i += THREADS) {
                float4 x;
                asm volatile("ld.shared.v4.f32 {%0,%1,%2,%3}, [%4];\n" : "=f"(x.x), "=f"(x.y), "=f"(x.z), "=f"(x.w) : "r"(b_stage + i * 16));
                float4 big = make_float4(tf32_big(x.x), tf32_big(x.y), tf32_big(x.z), tf32_big(x.w));
                asm volatile("st.shared.v4.f32 [%0], {%1,%2,%3,%4};\n" :: "r"(b_stage + i * 16), "f"(big.x), "f"(big.y), "f"(big.z), "f"(big.w));
                asm volatile("st.shared.v4.f32 [%0], {%1,%2,%3,%4};\n" :: "r"(b_small + i * 16), "f"(tf32_big(x.x - big.x)), "f"(tf32_big(x.y - big.y)), "f"(tf32_big(x.z - big.z)), "f"(tf32_big(x.w - big.w)));
            }
            asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
            __syncthreads();
            // A's fragments of this warp's 16 rows, for the 4 k-steps: rows g, g + 8; k t, t + 4
            unsigned big[BK / 8][4], small[BK / 8][4];
            const int r = wg * 64 + warp * 16 + (lane >> 2), t = lane & 3;
#pragma unroll
            for (int ks = 0; ks < BK / 8; ++ks) {
#pragma unroll
                for (int q = 0; q < 4; ++q) {
                    int row = r + (q & 1) * 8, k = ks * 8 + t + (q >> 1) * 4;
                    float x;
                    asm volatile("ld.shared.f32 %0, [%1];\n" : "=f"(x) : "r"(a_stage + row * 128 + (((k >> 2) ^ (row & 7)) << 4) + (k & 3) * 4));
                    float b = tf32_big(x);
                    big[ks][q] = __float_as_uint(b);
                    small[ks][q] = __float_as_uint(tf32_big(x - b));   // rounded too: cut bits bias the sum
                }
            }
            asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
            for (int ks = 0; ks < BK / 8; ++ks) {
                Wgmma<BN>::rs(d, small[ks], descriptor(b_stage + ks * 32));
                Wgmma<BN>::rs(d, big[ks], descriptor(b_small + ks * 32));
                Wgmma<BN>::rs(d, big[ks], descriptor(b_stage + ks * 32));
            }
        } else {
            asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
            for (int ks = 0; ks < BK / 8; ++ks)
                Wgmma<BN>::ss(d, descriptor(a_stage + wg * 64 * 128 + ks * 32), descriptor(b_stage + ks * 32));
        }
        asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
        if constexpr (X3)   // A's fragment registers are rewritten next: its MMAs must be done with them
            asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
        else
            asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
    }
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");

    // the accumulator: warp w of the warpgroup holds rows 16w..16w+15; lane l rows l/4 and l/4 + 8,
    // and in each 8-column block j the columns 2(l%4) and 2(l%4) + 1
    const bool split = gridDim.z > 1;
    float* out = split ? C + (size_t)blockIdx.z * M * ldc : C;
    const int r0 = m0 + wg * 64 + warp * 16 + (lane >> 2);
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {
        int col = n0 + j * 8 + (lane & 3) * 2;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            int row = r0 + h * 8;
            if (row >= M) continue;
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                if (col + e >= N) continue;
                float* o = out + (size_t)row * ldc + col + e;
                float v = alpha * d[j * 4 + h * 2 + e];
                *o = (split || beta == 0.0f) ? v : v + beta * *o;
            }
        }
    }
}

// C = sum over the splits of work (splits x M x ldc) + beta C
extern "C" __global__ void splitk_sum(int M, int N, int splits, const float* __restrict__ work, float beta,
                                      float* __restrict__ C, int ldc) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= (size_t)M * N) return;
    size_t at = (i / N) * ldc + i % N;
    float s = 0.0f;
    for (int z = 0; z < splits; ++z) s += work[z * (size_t)M * ldc + at];
    C[at] = beta == 0.0f ? s : s + beta * C[at];
}
