// TF32 and 3xTF32 GEMMs on Hopper's warpgroup MMA (wgmma, sm_90a), for issue 32.
//
// C (M x N, row-major, ldc) = alpha A Bt^T + beta C with A (M x K, lda) and Bt (N x K, ldb) both
// K-major (row-major), as TF32 wgmma requires, each given by its TMA tensor map (the copy engine
// needs 16-byte aligned operands and leading dimensions); M, N and K free (the copy engine reads
// zeros past the edges; rows past them are not stored).
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
// Warp-specialized and persistent: a CTA per multiprocessor walks the output tiles; one producer
// thread fills the stages by the copy engine (TMA, tensor maps in global memory), each completing
// on its stage's full mbarrier, running on into the next tile while the consumers store the last;
// consumers wait on full, issue the MMAs, and arrive on the stage's empty mbarrier once its MMAs
// are done.
//
// Split-K: split z takes k in [z kps, (z + 1) kps) (kps a multiple of 32); with several splits each
// writes alpha times its part to C + z M ldc (a workspace; beta ignored), and splitk_sum adds them.
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

template <int BM, int BN, bool X3>
struct Tile {
    static constexpr int A_BYTES = BM * BK * 4, HALF = (BM + BN) * BK * 4, BYTES = HALF * (X3 ? 2 : 1);

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
    if (ktiles > 0) done(ktiles - 1);
    if constexpr (!X3) {
#pragma unroll
        for (int i = 0; i < BN / 2; ++i) total[i] = d[i];
    }
}

// a warpgroup's 64 x BN accumulator to C (split: to split z's slice of the workspace C): warp w
// holds rows 16w..16w+15; lane l rows l/4 and l/4 + 8, and in each 8-column block j the columns
// 2(l%4) and 2(l%4) + 1, stored as one float2 where C allows
template <int BN>
__device__ __forceinline__ void store(const float (&d)[BN / 2], int row0, int n0, int M, int N, float alpha,
                                      float beta, float* C, int ldc, int z, bool split) {
    float* out = split ? C + (size_t)z * M * ldc : C;
    const bool pairs = (ldc % 2 == 0) && (reinterpret_cast<size_t>(C) % 8 == 0);
    const int warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
    const int r0 = row0 + warp * 16 + (lane >> 2);
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {
        const int col = n0 + j * 8 + (lane & 3) * 2;
        if (col >= N) continue;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = r0 + h * 8;
            if (row >= M) continue;
            float* o = out + (size_t)row * ldc + col;
            float v0 = alpha * d[j * 4 + h * 2], v1 = alpha * d[j * 4 + h * 2 + 1];
            if (pairs && col + 1 < N) {
                if (!split && beta != 0.0f) {
                    const float2 c = *reinterpret_cast<const float2*>(o);
                    v0 += beta * c.x;
                    v1 += beta * c.y;
                }
                *reinterpret_cast<float2*>(o) = make_float2(v0, v1);
            } else {
                o[0] = (split || beta == 0.0f) ? v0 : v0 + beta * o[0];
                if (col + 1 < N) o[1] = (split || beta == 0.0f) ? v1 : v1 + beta * o[1];
            }
        }
    }
}

// shared memory a CTA needs: the stages, the mbarriers (ws), 1024 to align the base
template <int WGS, int BN, int STAGES, bool X3>
constexpr int smem_bytes() { return STAGES * Tile<64 * WGS, BN, X3>::BYTES + 16 * STAGES + 1024; }

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
    const int tiles_n = (N + BN - 1) / BN, tiles_m = (M + BM - 1) / BM, splits = (K + kps - 1) / kps;
    const int tiles = tiles_n * tiles_m * splits;
    struct Work { int m0, n0, z, kbegin, ktiles; };
    auto work = [&](int tile) {   // N tiles fastest, then M, then the k-split
        Work w;
        w.n0 = (tile % tiles_n) * BN;
        w.m0 = (tile / tiles_n % tiles_m) * BM;
        w.z = tile / (tiles_n * tiles_m);
        w.kbegin = w.z * kps;
        w.ktiles = (min(K, w.kbegin + kps) - w.kbegin + BK - 1) / BK;
        return w;
    };
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(full + 8 * s, 1);
            mbar_init(empty + 8 * s, 128 * WGS);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    if (threadIdx.x < 128) {   // the producer warpgroup: one thread drives the copy engine, across tiles
        if (threadIdx.x == 0) {
            int it = 0;
            for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
                const Work w = work(tile);
                for (int t = 0; t < w.ktiles; ++t, ++it) {
                    const int s = it % STAGES, k0 = w.kbegin + t * BK;
                    const unsigned stage = base + s * T::BYTES, bar = full + 8 * s;
                    mbar_wait(empty + 8 * s, ((it / STAGES) & 1) ^ 1);   // a fresh barrier passes parity 1
                    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" :: "r"(bar), "r"(T::BYTES) : "memory");
                    tma_load(stage, map_a, k0, w.m0, bar);
                    tma_load(stage + T::A_BYTES, map_b, k0, w.n0, bar);
                    if constexpr (X3) {
                        tma_load(stage + T::HALF, map_as, k0, w.m0, bar);
                        tma_load(stage + T::HALF + T::A_BYTES, map_bs, k0, w.n0, bar);
                    }
                }
            }
        }
        return;
    }
    const int wg = (threadIdx.x >> 7) - 1;
    int it = 0;   // the stages' ring position, continued across tiles
    for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        const Work w = work(tile);
        auto ready = [&](int t) { mbar_wait(full + 8 * ((it + t) % STAGES), ((it + t) / STAGES) & 1); };
        auto done = [&](int t) { mbar_arrive(empty + 8 * ((it + t) % STAGES)); };
        float total[BN / 2];
        consume<BN, X3, PROMOTE>(w.ktiles, total, ready, done,
                                 [&](float (&d)[BN / 2], int t, int acc) { T::mmas(d, base + ((it + t) % STAGES) * T::BYTES, wg, acc); });
        it += w.ktiles;
        store<BN>(total, w.m0 + wg * 64, w.n0, M, N, alpha, beta, C, ldc, w.z, splits > 1);
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
