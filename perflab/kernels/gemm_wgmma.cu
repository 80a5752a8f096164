// TF32 (`wgmma`) and 3xTF32 (`x3tf32`) GEMMs on Hopper's warpgroup MMA (wgmma, sm_90a only).
//
// C (M x N, row-major, ldc) = alpha A Bt^T + beta C with A (M x K) and Bt (N x K) both K-major, as
// TF32 wgmma requires, each given by a TMA tensor map in device memory (wgmma.py makes them, and
// K-major copies of operands stored otherwise); M, N and K free: the copy engine reads zeros past
// the edges, and rows past them are not stored.
//
// Both kernels are warp-specialized and persistent: a CTA per multiprocessor walks the output
// tiles (N fastest, then M, then the k-split), its producer warpgroup running on into the next
// tile while the consumers store the last. Thread 0 of the producer fills shared-memory stages of
// 32 k (A's (64 WGS) x 32 and B's BN x 32, in the 128-byte swizzle wgmma reads) by the copy engine,
// each completing on its stage's mbarrier. Consumer warpgroup g (of WGS) computes its 64 rows of the
// (64 WGS) x BN tile, and frees a stage once wgmma.wait_group says its MMAs are done.
//
// gemm_wgmma (TF32): the consumers' MMAs read the stages the copy engine filled.
// gemm_x3tf32 (3xTF32, FP32-accurate): the copy engine fills RAW stages of FP32; the whole producer
// warpgroup splits each element into big = tf32(x) and small = tf32(x - big) into one of SPLIT
// stages of twice the size, and each k-step issues As Bb + Ab Bs + Ab Bb. No pass over memory
// splits the operands. The tensor cores' FP32 accumulation drifts over long sums (5e-6 at K = 784
// against SGEMM's 5e-7, experiments/wgmma), so each k-tile of 32 is summed in a fresh accumulator
// and added into FP32 registers once its MMAs are done: 2-4e-7.
//
// Split-K: split z takes k in [z kps, (z + 1) kps) (kps a multiple of 32); with several splits each
// writes alpha times its part to C + z M ldc (a workspace; beta is ignored) and wgmma_splitk_sum
// adds them.
#include "wgmma_ops.cuh"

namespace wg {
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

// a box of 32 k x rows of a K-major operand (its tensor map in global memory) into shared memory
// at dst by the copy engine, completing on `bar`'s transaction count
__device__ __forceinline__ void tma_load(unsigned dst, const void* map, int k, int row, unsigned bar) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
                 :: "r"(dst), "l"(map), "r"(k), "r"(row), "r"(bar) : "memory");
}

// one warpgroup's MMAs of a stage (A's tile then B's; X3: then their small parts) for its 64 rows
// from row 64 wg, into d, which the first MMA starts afresh unless `accumulate`
template <int BM, int BN, bool X3>
__device__ __forceinline__ void stage_mmas(float (&d)[BN / 2], unsigned stage, int wg, int accumulate) {
    constexpr int A_BYTES = BM * BK * 4, HALF = (BM + BN) * BK * 4;
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

// x rounded to TF32 (nearest, ties away: cvt.rna's result) in integer arithmetic: cvt.rna.tf32.f32
// issues at a quarter of the rate, and the split of a stage is 16K of them
__device__ __forceinline__ float tf32_round(float x) {
    return __uint_as_float((__float_as_uint(x) + 0x1000u) & 0xffffe000u);
}

// The output tiles a CTA walks, and where each one's k-tiles are: N fastest, then M, then the split.
template <int BM, int BN>
struct Walk {
    int M, N, K, kps, tiles_n, tiles_m, splits, tiles;
    __device__ Walk(int M_, int N_, int K_, int kps_) : M(M_), N(N_), K(K_), kps(kps_) {
        tiles_n = (N + BN - 1) / BN;
        tiles_m = (M + BM - 1) / BM;
        splits = (K + kps - 1) / kps;
        tiles = tiles_n * tiles_m * splits;
    }
    __device__ int n0(int tile) const { return (tile % tiles_n) * BN; }
    __device__ int m0(int tile) const { return (tile / tiles_n % tiles_m) * BM; }
    __device__ int z(int tile) const { return tile / (tiles_n * tiles_m); }
    __device__ int ktiles(int tile) const { return (min(K, z(tile) * kps + kps) - z(tile) * kps + BK - 1) / BK; }
    // the copy engine's box corner (k, row) of k-tile t of `tile`, for A and for B
    __device__ int k(int tile, int t) const { return z(tile) * kps + t * BK; }
};

// Thread 0's walk over this CTA's k-tiles in order, issuing each one's copies
template <int BM, int BN>
struct Loader {
    const Walk<BM, BN>& w;
    int tile, t;
    __device__ explicit Loader(const Walk<BM, BN>& walk) : w(walk), tile(blockIdx.x), t(0) {}
    // copy the next k-tile's A and B boxes to a and b, completing on bar (expecting `bytes`)
    __device__ void next(unsigned a, unsigned b, const void* map_a, const void* map_b, unsigned bar, int bytes) {
        while (t >= w.ktiles(tile)) {
            tile += gridDim.x;
            t = 0;
        }
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" :: "r"(bar), "r"(bytes) : "memory");
        tma_load(a, map_a, w.k(tile, t), w.m0(tile), bar);
        tma_load(b, map_b, w.k(tile, t), w.n0(tile), bar);
        ++t;
    }
};

// a warpgroup's 64 x BN result to C (split: to split z's slice of the workspace): warp w holds rows
// 16w..16w+15; lane l rows l/4 and l/4 + 8, and in each 8-column block j the columns 2(l%4) and
// 2(l%4) + 1, stored as one float2 where C allows
template <int BN>
__device__ __forceinline__ void store(const float (&d)[BN / 2], int row0, int n0, int M, int N, float alpha,
                                      float beta, float* C, int ldc, int z, bool split) {
    float* out = split ? C + (size_t)z * M * ldc : C;
    const bool pairs = (ldc % 2 == 0) && (reinterpret_cast<size_t>(C) % 8 == 0);
    const bool scale_c = !split && beta != 0.0f;
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
                if (scale_c) {
                    const float2 c = *reinterpret_cast<const float2*>(o);
                    v0 += beta * c.x;
                    v1 += beta * c.y;
                }
                *reinterpret_cast<float2*>(o) = make_float2(v0, v1);
            } else {
                o[0] = scale_c ? v0 + beta * o[0] : v0;
                if (col + 1 < N) o[1] = scale_c ? v1 + beta * o[1] : v1;
            }
        }
    }
}
}  // namespace wg

template <int WGS, int BN, int STAGES>
__global__ void __launch_bounds__((WGS + 1) * 128, 1)
gemm_wgmma(int M, int N, int K, int kps, float alpha, const void* map_a, const void* map_b, float beta,
           float* __restrict__ C, int ldc) {
    using namespace wg;
    constexpr int BM = 64 * WGS, A_BYTES = BM * BK * 4, STAGE = (BM + BN) * BK * 4;
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    const unsigned base = (smem_u32(smem_raw) + 1023) & ~1023u;   // the 128-byte swizzle wants 1024-aligned tiles
    const unsigned full = base + STAGES * STAGE, empty = full + 8 * STAGES;
    const Walk<BM, BN> w(M, N, K, kps);
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(full + 8 * s, 1);
            mbar_init(empty + 8 * s, 128 * WGS);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    int total = 0;   // this CTA's k-tiles
    for (int tile = blockIdx.x; tile < w.tiles; tile += gridDim.x) total += w.ktiles(tile);
    if (threadIdx.x < 128) {   // the producer warpgroup: one thread drives the copy engine
        if (threadIdx.x == 0) {
            Loader<BM, BN> load(w);
            for (int it = 0; it < total; ++it) {
                const int s = it % STAGES;
                mbar_wait(empty + 8 * s, ((it / STAGES) & 1) ^ 1);   // a fresh barrier passes parity 1
                load.next(base + s * STAGE, base + s * STAGE + A_BYTES, map_a, map_b, full + 8 * s, STAGE);
            }
        }
        return;
    }
    const int wgi = (threadIdx.x >> 7) - 1;
    int it = 0;   // the stages' ring position, continued across tiles
    for (int tile = blockIdx.x; tile < w.tiles; tile += gridDim.x) {
        const int ktiles = w.ktiles(tile);
        float d[BN / 2];
#pragma unroll
        for (int i = 0; i < BN / 2; ++i) d[i] = 0.0f;
        for (int t = 0; t < ktiles; ++t) {
            const int s = (it + t) % STAGES;
            mbar_wait(full + 8 * s, ((it + t) / STAGES) & 1);
            stage_mmas<BM, BN, false>(d, base + s * STAGE, wgi, 1);
            asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
            if (t > 0) mbar_arrive(empty + 8 * ((it + t - 1) % STAGES));   // stage t - 1's MMAs are done
        }
        asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
        if (ktiles > 0) mbar_arrive(empty + 8 * ((it + ktiles - 1) % STAGES));
        it += ktiles;
        store<BN>(d, w.m0(tile) + wgi * 64, w.n0(tile), M, N, alpha, beta, C, ldc, w.z(tile), w.splits > 1);
    }
}

template <int WGS, int BN, int RAW, int SPLIT>
__global__ void __launch_bounds__((WGS + 1) * 128, 1)
gemm_x3tf32(int M, int N, int K, int kps, float alpha, const void* map_a, const void* map_b, float beta,
            float* __restrict__ C, int ldc) {
    using namespace wg;
    constexpr int BM = 64 * WGS, A_BYTES = BM * BK * 4, HALF = (BM + BN) * BK * 4, CHUNKS = HALF / 16;
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    const unsigned base = (smem_u32(smem_raw) + 1023) & ~1023u;
    const unsigned split_base = base + RAW * HALF;                 // SPLIT stages of 2 HALF: big, then small
    const unsigned bars = split_base + SPLIT * 2 * HALF;
    const unsigned raw_full = bars, raw_empty = raw_full + 8 * RAW, split_full = raw_empty + 8 * RAW,
                   split_empty = split_full + 8 * SPLIT;
    const Walk<BM, BN> w(M, N, K, kps);
    if (threadIdx.x == 0) {
        for (int s = 0; s < RAW; ++s) {
            mbar_init(raw_full + 8 * s, 1);
            mbar_init(raw_empty + 8 * s, 128);
        }
        for (int s = 0; s < SPLIT; ++s) {
            mbar_init(split_full + 8 * s, 128);
            mbar_init(split_empty + 8 * s, 128 * WGS);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    int total = 0;
    for (int tile = blockIdx.x; tile < w.tiles; tile += gridDim.x) total += w.ktiles(tile);
    if (threadIdx.x < 128) {   // the producer warpgroup: thread 0 loads, all 128 split
        Loader<BM, BN> load(w);
        if (threadIdx.x == 0)
            for (int i = 0; i < min(RAW, total); ++i) load.next(base + i * HALF, base + i * HALF + A_BYTES, map_a, map_b, raw_full + 8 * i, HALF);
        for (int it = 0; it < total; ++it) {
            const int r = it % RAW, q = it % SPLIT;
            const unsigned raw = base + r * HALF, out = split_base + q * 2 * HALF;
            mbar_wait(raw_full + 8 * r, (it / RAW) & 1);
            mbar_wait(split_empty + 8 * q, ((it / SPLIT) & 1) ^ 1);
            for (int i = threadIdx.x; i < CHUNKS; i += 128) {   // the same swizzled offset in all three
                float x0, x1, x2, x3;
                asm volatile("ld.shared.v4.f32 {%0,%1,%2,%3}, [%4];\n" : "=f"(x0), "=f"(x1), "=f"(x2), "=f"(x3) : "r"(raw + i * 16));
                const float b0 = tf32_round(x0), b1 = tf32_round(x1), b2 = tf32_round(x2), b3 = tf32_round(x3);
                asm volatile("st.shared.v4.f32 [%0], {%1,%2,%3,%4};\n" :: "r"(out + i * 16), "f"(b0), "f"(b1), "f"(b2), "f"(b3));
                asm volatile("st.shared.v4.f32 [%0], {%1,%2,%3,%4};\n" :: "r"(out + HALF + i * 16), "f"(tf32_round(x0 - b0)),
                             "f"(tf32_round(x1 - b1)), "f"(tf32_round(x2 - b2)), "f"(tf32_round(x3 - b3)));
            }
            asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");   // the split, seen by wgmma; the raw stage's
            mbar_arrive(split_full + 8 * q);                                  // reads, before the copy engine refills it
            mbar_arrive(raw_empty + 8 * r);
            if (threadIdx.x == 0 && it + RAW < total) {
                mbar_wait(raw_empty + 8 * r, (it / RAW) & 1);
                load.next(raw, raw + A_BYTES, map_a, map_b, raw_full + 8 * r, HALF);
            }
        }
        return;
    }
    const int wgi = (threadIdx.x >> 7) - 1;
    int it = 0;
    for (int tile = blockIdx.x; tile < w.tiles; tile += gridDim.x) {
        const int ktiles = w.ktiles(tile);
        float d[BN / 2], sum[BN / 2];
#pragma unroll
        for (int i = 0; i < BN / 2; ++i) sum[i] = 0.0f;
        for (int t = 0; t < ktiles; ++t, ++it) {
            const int q = it % SPLIT;
            mbar_wait(split_full + 8 * q, (it / SPLIT) & 1);
            stage_mmas<BM, BN, true>(d, split_base + q * 2 * HALF, wgi, 0);
            asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");   // ptxas serializes every wgmma where
            mbar_arrive(split_empty + 8 * q);                                    // running MMAs' registers are read
#pragma unroll
            for (int i = 0; i < BN / 2; ++i) sum[i] += d[i];
        }
        store<BN>(sum, w.m0(tile) + wgi * 64, w.n0(tile), M, N, alpha, beta, C, ldc, w.z(tile), w.splits > 1);
    }
}

// C = the sum of the splits of work (splits x M x ldc) + beta C
extern "C" __global__ void wgmma_splitk_sum(int M, int N, int splits, const float* __restrict__ work, float beta,
                                            float* __restrict__ C, int ldc) {
    const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= (size_t)M * N) return;
    const size_t at = (i / N) * ldc + i % N;
    float s = 0.0f;
    for (int z = 0; z < splits; ++z) s += work[z * (size_t)M * ldc + at];
    C[at] = beta == 0.0f ? s : s + beta * C[at];
}
