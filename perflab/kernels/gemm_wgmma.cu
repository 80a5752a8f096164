// TF32 (`wgmma`) and 3xTF32 (`x3tf32`) GEMMs on Hopper's warpgroup MMA (wgmma, sm_90a only).
//
// C (M x N, row-major, ldc) = alpha A Bt^T + beta C with A (M x K) and Bt (N x K) both K-major, as
// TF32 wgmma requires, each given by a TMA tensor map in device memory (wgmma.py makes them, and
// K-major copies of operands stored otherwise); M, N and K free: the copy engine reads zeros past
// the edges, and rows past them are not stored.
//
// Warp-specialized and persistent: a CTA per multiprocessor walks the output tiles (N fastest,
// then M, then the k-split). One producer thread fills STAGES shared-memory stages of 32 k by the
// copy engine (A's (64 WGS) x 32 and B's BN x 32, X3: then their small parts, in the 128-byte
// swizzle wgmma reads), each completing on its stage's full mbarrier, and runs on into the next
// tile while the consumers store the last. Consumer warpgroup g (of WGS) waits on full, issues its
// 64 rows' MMAs, and arrives on the stage's empty mbarrier once wgmma.wait_group says they are done.
//
// CL = 2: clusters of two CTAs take M-adjacent tiles of the same columns, and each CTA's producer
// loads half of B's tile into both (TMA multicast), so that the operands' traffic from L2 falls by
// a third at BN = 256: at 2048 x 12000 x 784 the unclustered kernel moved 5.2-5.3 TB/s from L2
// whether TF32 or 3xTF32, the L2's rate, not the tensor cores'. A stage is free once the consumer
// warps of both CTAs have arrived on its empty mbarrier.
//
// X3 (3xTF32, FP32-accurate): A and Bt are the operands' TF32 big parts and As, Bs their small ones
// (x = big + small, big = tf32(x), small = tf32(x - big)); each k-step issues As Bb + Ab Bs + Ab Bb.
// The tensor cores' FP32 accumulation drifts over long sums (5e-6 at K = 784 against SGEMM's 5e-7,
// experiments/wgmma), so each k-tile of 32 is summed in a fresh accumulator and added into FP32
// registers once its MMAs are done: 2-4e-7. (Splitting in the kernel instead, by the producer
// warpgroup from FP32 stages, ran 1.3-1.9x slower at H = 2048: experiments/wgmma/logs/inkernel_split.)
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
template <> __device__ __forceinline__ void mma<192>(float (&d)[96], unsigned a, unsigned b, int acc) { wgmma_n192(d, descriptor(a), descriptor(b), acc); }
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

// the same box into the shared memory of every CTA of the cluster in cta_mask, at the same offset,
// each completing on its own `bar` (the mbarrier at that offset in each)
__device__ __forceinline__ void tma_load_multicast(unsigned dst, const void* map, int k, int row, unsigned bar,
                                                   unsigned short cta_mask) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
                 " [%0], [%1, {%2, %3}], [%4], %5;\n"
                 :: "r"(dst), "l"(map), "r"(k), "r"(row), "r"(bar), "h"(cta_mask) : "memory");
}

// an arrival on the mbarrier at `bar`'s offset in CTA `cta` of the cluster. Release at the CTA's
// scope, as a consumer's release of a stage needs (its reads are done): release.cluster made each
// arrival wait for the warp's memory operations to reach the cluster, 3-5x slower in all
// (experiments/wgmma/logs/clusters).
__device__ __forceinline__ void mbar_arrive_cluster(unsigned bar, unsigned cta) {
    asm volatile("{\n.reg .b32 remote;\nmapa.shared::cluster.u32 remote, %0, %1;\n"
                 "mbarrier.arrive.shared::cluster.b64 _, [remote];\n}\n"
                 :: "r"(bar), "r"(cta) : "memory");
}

__device__ __forceinline__ unsigned cluster_rank() {
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
    return r;
}

__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
}

// one warpgroup's MMAs of a stage (its 64 rows from row 64 wg of the A tile) into d, which the
// first MMA starts afresh unless `accumulate`
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

template <int WGS, int BN, int STAGES, bool X3, int CL>
__global__ void __launch_bounds__((WGS + 1) * 128, 1)
gemm_wgmma(int M, int N, int K, int kps, float alpha, const void* map_a, const void* map_as, const void* map_b,
           const void* map_bs, float beta, float* __restrict__ C, int ldc) {
    using namespace wg;
    constexpr int BM = 64 * WGS, A_BYTES = BM * BK * 4, HALF = (BM + BN) * BK * 4, STAGE = HALF * (X3 ? 2 : 1);
    constexpr int B_PART = BN / CL * BK * 4;   // the bytes of B a CTA of the cluster loads for all
    static_assert(BN % (8 * CL) == 0, "a CTA's part of B must be whole 8-row swizzle atoms");
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    const unsigned base = (smem_u32(smem_raw) + 1023) & ~1023u;   // the 128-byte swizzle wants 1024-aligned tiles
    const unsigned full = base + STAGES * STAGE, empty = full + 8 * STAGES;
    const unsigned rank = CL > 1 ? cluster_rank() : 0;
    // a cluster's CL CTAs take the CL tiles of one column of tiles_n, M-adjacent: B's tile is shared
    const int tiles_n = (N + BN - 1) / BN, tiles_m = (M + BM * CL - 1) / (BM * CL), splits = (K + kps - 1) / kps;
    const int tiles = tiles_n * tiles_m * splits, first = blockIdx.x / CL, step = gridDim.x / CL;
    struct Work { int m0, n0, z, kbegin, ktiles; };
    auto work = [&](int tile) {
        Work w;
        w.n0 = (tile % tiles_n) * BN;
        w.m0 = ((tile / tiles_n % tiles_m) * CL + rank) * BM;   // past M: zeros loaded, nothing stored
        w.z = tile / (tiles_n * tiles_m);
        w.kbegin = w.z * kps;
        w.ktiles = (min(K, w.kbegin + kps) - w.kbegin + BK - 1) / BK;
        return w;
    };
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(full + 8 * s, 1);
            mbar_init(empty + 8 * s, 4 * WGS * CL);   // a stage is free once every consumer warp of the cluster is done
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    if constexpr (CL > 1) cluster_sync(); else __syncthreads();
    if (threadIdx.x == 0) {   // the producer: one thread drives the copy engine
        int it = 0;        // the stages' ring position, continued across tiles
        for (int tile = first; tile < tiles; tile += step) {
            const Work w = work(tile);
            for (int t = 0; t < w.ktiles; ++t, ++it) {
                const int s = it % STAGES, k0 = w.kbegin + t * BK;
                const unsigned stage = base + s * STAGE, bar = full + 8 * s;
                mbar_wait(empty + 8 * s, ((it / STAGES) & 1) ^ 1);   // a fresh barrier passes parity 1
                asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" :: "r"(bar), "r"(STAGE) : "memory");
                tma_load(stage, map_a, k0, w.m0, bar);
                if constexpr (X3) tma_load(stage + HALF, map_as, k0, w.m0, bar);
                if constexpr (CL == 1) {
                    tma_load(stage + A_BYTES, map_b, k0, w.n0, bar);
                    if constexpr (X3) tma_load(stage + HALF + A_BYTES, map_bs, k0, w.n0, bar);
                } else {   // this CTA's part of B's rows, into every CTA of the cluster
                    const unsigned part = A_BYTES + rank * B_PART;
                    const int row = w.n0 + rank * (BN / CL);
                    tma_load_multicast(stage + part, map_b, k0, row, bar, (1 << CL) - 1);
                    if constexpr (X3) tma_load_multicast(stage + HALF + part, map_bs, k0, row, bar, (1 << CL) - 1);
                }
            }
        }
    }
    if (threadIdx.x < 128) {   // the producer warpgroup waits for the cluster at the end
        if constexpr (CL > 1) cluster_sync();
        return;
    }
    const int wgi = (threadIdx.x >> 7) - 1;
    auto release = [&](int s) {   // after wgmma.wait_group: this warp's MMAs on stage s are done
        __syncwarp();
        if ((threadIdx.x & 31) == 0) {
            if constexpr (CL == 1) {
                mbar_arrive(empty + 8 * s);
            } else {
                for (int c = 0; c < CL; ++c) mbar_arrive_cluster(empty + 8 * s, c);
            }
        }
    };
    int it = 0;
    for (int tile = first; tile < tiles; tile += step) {
        const Work w = work(tile);
        float d[BN / 2], total[BN / 2];
#pragma unroll
        for (int i = 0; i < BN / 2; ++i) d[i] = total[i] = 0.0f;
        for (int t = 0; t < w.ktiles; ++t) {
            const int s = (it + t) % STAGES;
            mbar_wait(full + 8 * s, ((it + t) / STAGES) & 1);
            stage_mmas<BM, BN, X3>(d, base + s * STAGE, wgi, X3 ? 0 : 1);
            if constexpr (X3) {   // wait 0: ptxas serializes every wgmma where running MMAs' registers are read
                asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
#pragma unroll
                for (int i = 0; i < BN / 2; ++i) total[i] += d[i];
            } else {
                asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
            }
            if (t > 0) release((it + t - 1) % STAGES);   // stage t - 1's MMAs are done
        }
        asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
        if (w.ktiles > 0) release((it + w.ktiles - 1) % STAGES);
        it += w.ktiles;
        store<BN>(X3 ? total : d, w.m0 + wgi * 64, w.n0, M, N, alpha, beta, C, ldc, w.z, splits > 1);
    }
    if constexpr (CL > 1) cluster_sync();   // no CTA leaves while another may still write to it
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

// The kernel's operands made K-major: dst (rows x K, ld apart) = src, whose element (r, k) is at
// src[r sr + k sk], or (split) its TF32 big and small parts, rounded as tf32_split_kernel does.
// A 32 x 32 tile a block through shared memory, so that both the reads (along whichever of r and k
// src holds contiguous: a transposed view is the common case) and the writes (along k) are
// coalesced: an elementwise copy of a transposed view reads 4 bytes of every 32-byte sector.
__device__ __forceinline__ float tf32_round(float x) { return __uint_as_float((__float_as_uint(x) + 0x1000u) & 0xffffe000u); }

template <bool SPLIT>
__global__ void __launch_bounds__(256) k_major_copy(const float* __restrict__ src, long long sr, long long sk, int rows,
                                                    int K, float* __restrict__ big, float* __restrict__ small, int ld) {
    __shared__ float tile[32][33];
    const int r0 = blockIdx.x * 32, k0 = blockIdx.y * 32, tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
    const bool rows_contiguous = sr == 1 && sk != 1;
    for (int i = ty; i < 32; i += 8) {
        const int dr = rows_contiguous ? tx : i, dk = rows_contiguous ? i : tx;
        if (r0 + dr < rows && k0 + dk < K) tile[dr][dk] = src[(r0 + dr) * sr + (k0 + dk) * sk];
    }
    __syncthreads();
    for (int i = ty; i < 32; i += 8) {
        if (r0 + i >= rows || k0 + tx >= K) continue;
        const float x = tile[i][tx];
        const size_t at = (size_t)(r0 + i) * ld + k0 + tx;
        if (SPLIT) {
            const float b = tf32_round(x);
            big[at] = b;
            small[at] = tf32_round(x - b);
        } else {
            big[at] = x;
        }
    }
}

// x3tf32's split of an operand the kernel reads in place (rows x K, K contiguous, rows ldx apart and
// 16-byte aligned): only small = round(x - trunc(x)) is written, into rows lds apart. The operand
// itself serves as its big part, since the tensor cores read an FP32 operand's TF32 truncation: a
// third of the split's traffic saved and no copy of x (experiments/wgmma/split_ab.py: 1.07x the
// x3tf32 GEMM's speed, error 3.3e-7 against float64 where the rounded split's is 2.5e-7 and
// SGEMM's 5.0e-7). Four floats a thread where a row holds them, one by one at a row's end.
__device__ __forceinline__ float tf32_rest(float x) { return tf32_round(x - __uint_as_float(__float_as_uint(x) & 0xffffe000u)); }

extern "C" __global__ void __launch_bounds__(256) small_part(const float* __restrict__ x, int rows, int K, long long ldx,
                                                              float* __restrict__ small, long long lds) {
    const long long quads = (K + 3) / 4, n = rows * quads;
    for (long long i = blockIdx.x * 256ll + threadIdx.x; i < n; i += gridDim.x * 256ll) {
        const long long r = i / quads;
        const int k = 4 * (int)(i % quads);
        const float* src = x + r * ldx + k;
        float* dst = small + r * lds + k;
        if (k + 4 <= K) {
            float4 v = *reinterpret_cast<const float4*>(src);
            v.x = tf32_rest(v.x); v.y = tf32_rest(v.y); v.z = tf32_rest(v.z); v.w = tf32_rest(v.w);
            *reinterpret_cast<float4*>(dst) = v;
        } else {
            for (int j = 0; k + j < K; ++j) dst[j] = tf32_rest(src[j]);
        }
    }
}
