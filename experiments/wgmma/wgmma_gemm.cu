// TF32 and 3xTF32 GEMMs on Hopper's warpgroup MMA (wgmma, sm_90a), for issue 32.
//
// C (M x N, row-major, ldc) = alpha A Bt^T + beta C with A (M x K, lda) and Bt (N x K, ldb) both
// K-major (row-major), as TF32 wgmma requires; K, lda, ldb multiples of 4 and the operands 16-byte
// aligned (16-byte cp.async); M and N free (rows past the edge load as zeros and are not stored).
//
// X3 (3xTF32, FP32-accurate): the operands come split, x = big + small with big = tf32(x) and
// small = tf32(x - big) (As, Bs: the small parts, A and Bt the big), and every k-step issues
// As Bb + Ab Bs + Ab Bb. The tensor cores' FP32 accumulation drifts over long sums, so each k-tile
// of 32 starts a fresh accumulator (two, alternating, so the MMAs of one tile run while the last
// one's are added) and is added into FP32 registers (promoted) once its MMAs are done.
//
// Shared memory: stages of 32 k, a stage holding A's (64 WGS) x 32 and B's BN x 32 (X3: then their
// small parts) in the 128-byte swizzle wgmma reads (row r's 16-byte chunk c at chunk c ^ (r % 8),
// 8-row groups 1024 bytes apart). Consumer warpgroup g computes rows 64g..64g+63 of the tile.
// Two kernels fill the stages:
// - wgmma_gemm: every thread loads (cp.async) and computes; a stage is refilled PREFETCH =
//   STAGES - 2 tiles ahead, after the CTA barrier that follows its MMAs' wait (wait_group 1).
// - wgmma_tma_gemm (warp-specialized): one producer thread fills stages by the copy engine (TMA,
//   tensor maps in global memory), each completing on its stage's full mbarrier; consumers wait on
//   full, issue the MMAs, and arrive on the stage's empty mbarrier once its MMAs are done.
//
// Split-K: blockIdx.z takes k in [z kps, (z + 1) kps); with gridDim.z > 1 each split writes alpha
// times its part to C + z M ldc (a workspace; beta ignored), and splitk_sum adds them.
#include "wgmma_ops.cuh"

constexpr int BK = 32;

__device__ __forceinline__ unsigned smem_u32(const void* p) { return static_cast<unsigned>(__cvta_generic_to_shared(p)); }

// The wgmma descriptor of a K-major tile in the 128-byte swizzle at byte address addr (tiles
// 1024-byte aligned; a k-step of 8 TF32 adds 32 bytes to addr).
__device__ __forceinline__ unsigned long long descriptor(unsigned addr) {
    unsigned long long d = (unsigned long long)((addr & 0x3FFFF) >> 4);
    d |= 1ull << 16;                               // leading byte offset: unused when swizzled
    d |= (unsigned long long)(1024 >> 4) << 32;    // stride byte offset: the next 8-row group
    d |= 1ull << 62;                               // the 128-byte swizzle
    return d;
}

template <int N> __device__ __forceinline__ void mma(float (&d)[N / 2], unsigned a, unsigned b, int accumulate);
template <> __device__ __forceinline__ void mma<64>(float (&d)[32], unsigned a, unsigned b, int acc) { wgmma_n64(d, descriptor(a), descriptor(b), acc); }
template <> __device__ __forceinline__ void mma<128>(float (&d)[64], unsigned a, unsigned b, int acc) { wgmma_n128(d, descriptor(a), descriptor(b), acc); }
template <> __device__ __forceinline__ void mma<256>(float (&d)[128], unsigned a, unsigned b, int acc) { wgmma_n256(d, descriptor(a), descriptor(b), acc); }

__device__ __forceinline__ void mbar_init(unsigned bar, int count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" :: "r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(unsigned bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" :: "r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity) {
    unsigned done = 0;
    while (!done)
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done) : "r"(bar), "r"(parity) : "memory");
}

struct Operands {
    const float *A, *As, *B, *Bs;
    int lda, ldb, M, N, kend, m0, n0;
};

template <int BM, int BN, bool X3>
struct Tile {
    static constexpr int A_BYTES = BM * BK * 4, HALF = (BM + BN) * BK * 4, BYTES = HALF * (X3 ? 2 : 1);
    static constexpr int CHUNKS = BYTES / 16;

    // cp.async of 16-byte chunk i (A big, B big, then A small, B small) of the k-tile from k0
    static __device__ __forceinline__ void copy(unsigned stage, int i, const Operands& o, int k0) {
        const bool small = X3 && i >= HALF / 16;
        if (small) i -= HALF / 16;
        const bool is_a = i < BM * 8;
        const int r = is_a ? i >> 3 : (i >> 3) - BM, c = i & 7;
        const int row = (is_a ? o.m0 : o.n0) + r, k = k0 + c * 4;
        const int bytes = (row < (is_a ? o.M : o.N) && k < o.kend) ? min(16, (o.kend - k) * 4) : 0;
        const float* from = is_a ? (small ? o.As : o.A) + (size_t)row * o.lda : (small ? o.Bs : o.B) + (size_t)row * o.ldb;
        const unsigned to = stage + (small ? HALF : 0) + (is_a ? 0 : A_BYTES) + r * 128 + ((c ^ (r & 7)) << 4);
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" :: "r"(to), "l"(bytes ? from + k : o.A), "r"(bytes));
    }

    // one warpgroup's MMAs of a stage (its 64 rows from a_row), into d; the first starts d afresh
    // unless `accumulate`
    static __device__ __forceinline__ void mmas(float (&d)[BN / 2], unsigned stage, int wg, int accumulate) {
        const unsigned a = stage + wg * 64 * 128, b = stage + A_BYTES;
        asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
        for (int ks = 0; ks < BK / 8; ++ks) {
            if constexpr (X3) {
                mma<BN>(d, a + HALF + ks * 32, b + ks * 32, ks == 0 ? accumulate : 1);
                mma<BN>(d, a + ks * 32, b + HALF + ks * 32, 1);
                mma<BN>(d, a + ks * 32, b + ks * 32, 1);
            } else {
                mma<BN>(d, a + ks * 32, b + ks * 32, ks == 0 ? accumulate : 1);
            }
        }
        asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    }
};

// The consumer's loop over k-tiles, with the kernel's own wait for a tile and release of the last
// one. X3 starts a fresh accumulator every PROMOTE tiles and adds it into `total` (FP32 registers)
// once its MMAs are done (wait_group 0: ptxas serializes every wgmma where registers of running
// MMAs are read); else d accumulates all of k and is copied to `total`.
template <int BN, bool X3, int PROMOTE, class Ready, class Done, class Mmas>
__device__ __forceinline__ void consume(int ktiles, float (&total)[BN / 2], Ready ready, Done done, Mmas mmas) {
    float d[BN / 2];
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) d[i] = total[i] = 0.0f;
    for (int t = 0; t < ktiles; ++t) {
        ready(t);
        mmas(d, t, (X3 && t % PROMOTE == 0) ? 0 : 1);
        if (X3 && (t % PROMOTE == PROMOTE - 1 || t == ktiles - 1)) {
            asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
#pragma unroll
            for (int i = 0; i < BN / 2; ++i) total[i] += d[i];
        } else {
            asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
        }
        if (t > 0) done(t - 1);
    }
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    if constexpr (!X3) {
#pragma unroll
        for (int i = 0; i < BN / 2; ++i) total[i] = d[i];
    }
}

// a warpgroup's 64 x BN accumulator to C: warp w holds rows 16w..16w+15; lane l rows l/4 and
// l/4 + 8, and in each 8-column block j the columns 2(l%4) and 2(l%4) + 1
template <int BN>
__device__ __forceinline__ void store(const float (&d)[BN / 2], int row0, int n0, int M, int N, float alpha,
                                      float beta, float* C, int ldc) {
    const bool split = gridDim.z > 1;
    float* out = split ? C + (size_t)blockIdx.z * M * ldc : C;
    const int warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
    const int r0 = row0 + warp * 16 + (lane >> 2);
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {
        const int col = n0 + j * 8 + (lane & 3) * 2;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = r0 + h * 8;
            if (row >= M) continue;
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                if (col + e >= N) continue;
                float* o = out + (size_t)row * ldc + col + e;
                const float v = alpha * d[j * 4 + h * 2 + e];
                *o = (split || beta == 0.0f) ? v : v + beta * *o;
            }
        }
    }
}

// shared memory a CTA needs: the stages, the mbarriers (ws), 1024 to align the base
template <int WGS, int BN, int STAGES, bool X3>
constexpr int smem_bytes() { return STAGES * Tile<64 * WGS, BN, X3>::BYTES + 16 * STAGES + 1024; }

template <int WGS, int BN, int STAGES, bool X3, int PROMOTE>
__global__ void __launch_bounds__(WGS * 128, 1)
wgmma_gemm(int M, int N, int K, int kps, float alpha, const float* __restrict__ A, const float* __restrict__ As,
           int lda, const float* __restrict__ Bt, const float* __restrict__ Bs, int ldb, float beta,
           float* __restrict__ C, int ldc) {
    using T = Tile<64 * WGS, BN, X3>;
    constexpr int PREFETCH = STAGES - 2;
    static_assert(PREFETCH >= 1, "STAGES >= 3");
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    const unsigned base = (smem_u32(smem_raw) + 1023) & ~1023u;
    const int kbegin = blockIdx.z * kps;
    const Operands o{A, As, Bt, Bs, lda, ldb, M, N, min(K, kbegin + kps), (int)blockIdx.y * 64 * WGS, (int)blockIdx.x * BN};
    const int ktiles = o.kend > kbegin ? (o.kend - kbegin + BK - 1) / BK : 0;
    auto load = [&](int t) {
        for (int i = threadIdx.x; i < T::CHUNKS; i += WGS * 128) T::copy(base + (t % STAGES) * T::BYTES, i, o, kbegin + t * BK);
    };
    for (int t = 0; t < PREFETCH; ++t) {
        if (t < ktiles) load(t);
        asm volatile("cp.async.commit_group;\n" ::);
    }
    auto ready = [&](int t) {
        asm volatile("cp.async.wait_group %0;\n" :: "n"(PREFETCH - 1));
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");   // cp.async's writes, seen by wgmma
        __syncthreads();   // tile t is in; every warp is past the wait for the MMAs of tile t - 2
        if (t + PREFETCH < ktiles) load(t + PREFETCH);                   // into tile t - 2's stage
        asm volatile("cp.async.commit_group;\n" ::);
    };
    const int wg = threadIdx.x >> 7;
    float total[BN / 2];
    consume<BN, X3, PROMOTE>(ktiles, total, ready, [](int) {},
                    [&](float (&d)[BN / 2], int t, int acc) { T::mmas(d, base + (t % STAGES) * T::BYTES, wg, acc); });
    store<BN>(total, o.m0 + wg * 64, o.n0, M, N, alpha, beta, C, ldc);
}

// a box of 32 k x rows of a K-major operand (its tensor map in global memory) into shared memory
// at dst, by the copy engine, completing `bar`'s transaction count (rows or k past the edge: zeros)
__device__ __forceinline__ void tma_load(unsigned dst, const void* map, int k, int row, unsigned bar) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
                 :: "r"(dst), "l"(map), "r"(k), "r"(row), "r"(bar) : "memory");
}

template <int WGS, int BN, int STAGES, bool X3, int PROMOTE>
__global__ void __launch_bounds__((WGS + 1) * 128, 1)
wgmma_tma_gemm(int M, int N, int K, int kps, float alpha, const void* map_a, const void* map_as, const void* map_b,
               const void* map_bs, float beta, float* __restrict__ C, int ldc) {
    using T = Tile<64 * WGS, BN, X3>;
    constexpr int BM = 64 * WGS;
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    const unsigned base = (smem_u32(smem_raw) + 1023) & ~1023u;
    const unsigned full = base + STAGES * T::BYTES, empty = full + 8 * STAGES;
    const int kbegin = blockIdx.z * kps, kend = min(K, kbegin + kps);
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    const int ktiles = kend > kbegin ? (kend - kbegin + BK - 1) / BK : 0;
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(full + 8 * s, 1);
            mbar_init(empty + 8 * s, 128 * WGS);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    if (threadIdx.x < 128) {   // the producer warpgroup: one thread drives the copy engine
        if (threadIdx.x == 0) {
            for (int t = 0; t < ktiles; ++t) {
                const int s = t % STAGES, k0 = kbegin + t * BK;
                const unsigned stage = base + s * T::BYTES, bar = full + 8 * s;
                mbar_wait(empty + 8 * s, ((t / STAGES) & 1) ^ 1);   // a fresh barrier passes parity 1
                asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" :: "r"(bar), "r"(T::BYTES) : "memory");
                tma_load(stage, map_a, k0, m0, bar);
                tma_load(stage + T::A_BYTES, map_b, k0, n0, bar);
                if constexpr (X3) {
                    tma_load(stage + T::HALF, map_as, k0, m0, bar);
                    tma_load(stage + T::HALF + T::A_BYTES, map_bs, k0, n0, bar);
                }
            }
        }
        return;
    }
    const int wg = (threadIdx.x >> 7) - 1;
    auto ready = [&](int t) { mbar_wait(full + 8 * (t % STAGES), (t / STAGES) & 1); };
    auto done = [&](int t) { mbar_arrive(empty + 8 * (t % STAGES)); };
    float total[BN / 2];
    consume<BN, X3, PROMOTE>(ktiles, total, ready, done,
                             [&](float (&d)[BN / 2], int t, int acc) { T::mmas(d, base + (t % STAGES) * T::BYTES, wg, acc); });
    store<BN>(total, m0 + wg * 64, n0, M, N, alpha, beta, C, ldc);
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
