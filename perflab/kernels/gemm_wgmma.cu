// TF32 (`wgmma`), 3xTF32 (`x3tf32`), BF16 and FP16 GEMMs on Hopper's warpgroup MMA (wgmma, sm_90a only).
//
// C (M x N, row-major, ldc) = alpha A Bt^T + beta C with A (M x K) and Bt (N x K), each given by a TMA
// tensor map in device memory (wgmma.py makes them); M, N and K free: the copy engine reads zeros past
// the edges, and rows past them are not stored. E is the operands' element type: float (TF32: both
// K-major, as TF32 wgmma requires; wgmma.py makes K-major copies of operands stored otherwise), or
// bf16 and fp16, which wgmma reads K-major or MN-major (TA, TB: A, Bt MN-major, that is stored with
// M or N contiguous), so that every layout a training step holds is read in place. Either way a stage
// row is 128 bytes of K (32 TF32, 64 BF16) and a k-step 32 bytes of it (k8 TF32, k16 BF16): a K-major
// tile is rows of 128 bytes; an MN-major one boxes of 64 rows of M or N (128 bytes) by the stage's
// 64 k, 8 KiB apart. C holds O: float, or E (a half-precision product: beta 0, no split-K, stored
// through shared memory, store_staged); with bias, C = sigmoid(C +
// bias[row]) (the forward layer's epilogue, applied after the split-K sum where there are splits), the
// product rounded to O first as cuBLAS's half GEMM and a bias pass of its own round it. O is a
// template parameter, not a run-time choice: two store paths made the kernel's code overflow the
// instruction cache at BN = 256 (warps stalled on "no instruction": docs/DECISIONS.md, D49).
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
// a third at BN = 256: the unclustered kernel ran at the L2's rate, not the tensor cores', whether
// TF32 or 3xTF32 (docs/DECISIONS.md, D50). A stage is free once the consumer
// warps of both CTAs have arrived on its empty mbarrier. CL = 4 likewise, each CTA loading a quarter.
//
// X3 (3xTF32, FP32-accurate): A and Bt are the operands' TF32 big parts and As, Bs their small ones
// (x = big + small, big = tf32(x), small = tf32(x - big)); each k-step issues As Bb + Ab Bs + Ab Bb.
// The tensor cores' FP32 accumulation drifts over long sums past SGEMM's error, so each k-tile of
// 32 is summed in a fresh accumulator and added into FP32 registers once its MMAs are done, which
// brings it under SGEMM's. (Splitting in the kernel instead, by the producer warpgroup from FP32
// stages, ran slower.) Both: docs/DECISIONS.md, D52.
//
// KW = 2 (ways): the consumer warpgroups share a tile's rows in pairs and take its k-stages in turn, so that
// two chains of MMAs run on each block of 64 rows (a weight gradient's small C and long K, where that
// ran faster than one chain: docs/DECISIONS.md, D73). At the tile's end each way hands the other half
// of its columns to the other through shared memory and stores its own half (swap_halves). Every
// consumer warp arrives on every stage it waits on (the other way's at once), so that no stage is
// filled again before both ways have seen its fill, and swap_halves waits for both ways before it
// writes, so that one way's halves never meet the other's C still staged from the tile before.
//
// Split-K: split z takes k in [z kps, (z + 1) kps) (kps a multiple of 32); with several splits each
// writes alpha times its part to C + z M ldc (a workspace; beta is ignored) and wgmma_splitk_sum
// adds them.
#include "wgmma_ops.cuh"

namespace wg {
constexpr int ROW = 128;        // bytes of K a stage holds of each row: one 128-byte swizzle row
constexpr int MN_BOX = 64 * ROW;  // an MN-major box: 64 k-rows of 64 16-bit elements
__device__ __forceinline__ unsigned smem_u32(const void* p) { return static_cast<unsigned>(__cvta_generic_to_shared(p)); }

// The wgmma descriptor of a tile in the 128-byte swizzle at byte address addr (tiles 1024-byte
// aligned). K-major: rows of 128 bytes of K, 8-row groups 1024 bytes apart (a k-step adds 32 bytes
// to addr). MN-major: k-rows of 64 elements of M or N, 8-k-row groups 1024 bytes apart, the next 64
// of M or N (the next box) MN_BOX bytes on (a k-step of 16 adds 2048 bytes).
template <bool MN>
__device__ __forceinline__ unsigned long long descriptor(unsigned addr) {
    unsigned long long d = (unsigned long long)((addr & 0x3FFFF) >> 4);
    d |= (unsigned long long)(MN ? MN_BOX >> 4 : 1) << 16;   // leading byte offset: unused when K-major
    d |= (unsigned long long)(1024 >> 4) << 32;              // stride byte offset: the next 8-row group
    d |= 1ull << 62;                                         // the 128-byte swizzle
    return d;
}

// a descriptor `bytes` further on in shared memory: its address field is the address / 16, and shared
// memory (under 256 KiB) never carries out of it, so offsets are added, not encoded again
__device__ __forceinline__ unsigned long long advanced(unsigned long long desc, unsigned bytes) { return desc + (bytes >> 4); }

// the next stage of the ring, and `phase` (how many times round it, mod 2) flipped where it wraps
template <int STAGES>
__device__ __forceinline__ void next_stage(int& s, unsigned& phase) {
    s = s + 1 == STAGES ? 0 : s + 1;
    phase ^= s == 0;
}

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

// a box of an operand (its tensor map in global memory; c0 the coordinate along the contiguous
// dimension) into shared memory at dst by the copy engine, completing on `bar`'s transaction count
__device__ __forceinline__ void tma_load(unsigned dst, const void* map, int c0, int c1, unsigned bar) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
                 :: "r"(dst), "l"(map), "r"(c0), "r"(c1), "r"(bar) : "memory");
}

// the same box into the shared memory of every CTA of the cluster in cta_mask, at the same offset,
// each completing on its own `bar` (the mbarrier at that offset in each)
__device__ __forceinline__ void tma_load_multicast(unsigned dst, const void* map, int c0, int c1, unsigned bar,
                                                   unsigned short cta_mask) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
                 " [%0], [%1, {%2, %3}], [%4], %5;\n"
                 :: "r"(dst), "l"(map), "r"(c0), "r"(c1), "r"(bar), "h"(cta_mask) : "memory");
}

// rows [row, row + rows) of an operand at k0 into a stage's tile at dst: K-major one box of the
// stage's k by rows, MN-major rows / 64 boxes of 64 rows by the stage's k; CL > 1: into every CTA of
// the cluster
template <bool MN, int CL>
__device__ __forceinline__ void load(unsigned dst, const void* map, int k0, int row, int rows, unsigned bar) {
    const int boxes = MN ? rows / 64 : 1;
    for (int j = 0; j < boxes; ++j) {
        const int c0 = MN ? row + 64 * j : k0, c1 = MN ? k0 : row;
        if constexpr (CL == 1) tma_load(dst + j * MN_BOX, map, c0, c1, bar);
        else tma_load_multicast(dst + j * MN_BOX, map, c0, c1, bar, (1 << CL) - 1);
    }
}

// an arrival on the mbarrier at `bar`'s offset in CTA `cta` of the cluster. Release at the CTA's
// scope, as a consumer's release of a stage needs (its reads are done): release.cluster made each
// arrival wait for the warp's memory operations to reach the cluster, slower in all
// (docs/DECISIONS.md, D51).
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

// one warpgroup's MMAs of a stage (its R blocks of 64 rows of the A tile at descriptor da; in the A tile a
// block of 64 rows is 64 ROW bytes whether K-major or an MN-major box; B's tile at db) into d, which the
// first MMA starts afresh unless `accumulate`
template <typename E, int BM, int BN, int R, bool X3, bool TA, bool TB>
__device__ __forceinline__ void stage_mmas(float (&d)[R][BN / 2], unsigned long long da, unsigned long long db,
                                           int accumulate) {
    constexpr int HALF = (BM + BN) * ROW;
    constexpr int STEP_A = TA ? 16 * ROW : 32, STEP_B = TB ? 16 * ROW : 32;   // a k-step's bytes
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) {
        if constexpr (X3) {
            wgmma<TA, TB>(E{}, d[0], advanced(da, HALF + ks * 32), advanced(db, ks * 32), ks == 0 ? accumulate : 1);
            wgmma<TA, TB>(E{}, d[0], advanced(da, ks * 32), advanced(db, HALF + ks * 32), 1);
            wgmma<TA, TB>(E{}, d[0], advanced(da, ks * 32), advanced(db, ks * 32), 1);
        } else {
#pragma unroll
            for (int r = 0; r < R; ++r)
                wgmma<TA, TB>(E{}, d[r], advanced(da, r * 64 * ROW + ks * STEP_A), advanced(db, ks * STEP_B),
                              ks == 0 ? accumulate : 1);
        }
    }
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

// two adjacent elements of C at o (aligned for both): one 8-byte store of float, one 4-byte of 16-bit
__device__ __forceinline__ void store_pair(float* o, float v0, float v1) { *reinterpret_cast<float2*>(o) = make_float2(v0, v1); }
template <typename S>
__device__ __forceinline__ void store_pair(S* o, float v0, float v1) {
    *reinterpret_cast<unsigned*>(o) = narrow<S>(v0).bits | ((unsigned)narrow<S>(v1).bits << 16);
}

// C's element (of type O) from the accumulated v: alpha v + beta c (BETA), then with bias b (BIAS)
// sigmoid(. + b) of it rounded to O. The sigmoid is sigmoid_approx (a few ulp of FP32): IEEE division and expf
// made each of a thread's 128 elements a subroutine's worth of code.
template <typename O, bool BETA, bool BIAS>
__device__ __forceinline__ float epilogue(float v, float alpha, float beta, float c, float b) {
    v = BETA ? alpha * v + beta * c : alpha * v;
    return BIAS ? sigmoid_approx(widen(narrow<O>(v)) + b) : v;
}

// a warpgroup's 64 x BN result to C (split: to split z's slice of the workspace): warp w holds rows
// 16w..16w+15; lane l rows l/4 and l/4 + 8, and in each 8-column block j the columns 2(l%4) and
// 2(l%4) + 1, stored as one pair where C allows. One unrolled path per (BETA, BIAS): a path is
// 128 elements' code, and a kernel that executed a general one (beta and bias tested at each
// element) stalled on instruction fetch.
template <int BN, typename O, bool BETA, bool BIAS>
__device__ __forceinline__ void store_as(const float (&d)[BN / 2], int row0, int n0, int M, int N, float alpha,
                                         float beta, O* out, int ldc, bool pairs, const float* bias) {
    const int warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
    const int r0 = row0 + warp * 16 + (lane >> 2);
    float b[2] = {0.0f, 0.0f};
    if constexpr (BIAS) {
        for (int h = 0; h < 2; ++h) b[h] = r0 + h * 8 < M ? bias[r0 + h * 8] : 0.0f;
    }
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {
        const int col = n0 + j * 8 + (lane & 3) * 2;
        if (col >= N) continue;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = r0 + h * 8;
            if (row >= M) continue;
            O* o = out + (size_t)row * ldc + col;
            const bool both = col + 1 < N;
            const float v0 = epilogue<O, BETA, BIAS>(d[j * 4 + h * 2], alpha, beta, BETA ? widen(o[0]) : 0.0f, b[h]);
            const float v1 = epilogue<O, BETA, BIAS>(d[j * 4 + h * 2 + 1], alpha, beta,
                                                     BETA && both ? widen(o[1]) : 0.0f, b[h]);
            if (pairs && both) {
                store_pair(o, v0, v1);
            } else {
                o[0] = narrow<O>(v0);
                if (both) o[1] = narrow<O>(v1);
            }
        }
    }
}

// Two adjacent elements of a 16-bit C from their accumulators, packed as pack_half does: alpha v rounded to O, then
// with BIAS sigmoid(. + b) rounded to O, as epilogue() and narrow<O> make them one at a time. Each rounding of the pair
// is one packed conversion: nvcc makes BF16's one-value conversion an F2F, a slow instruction (docs/DECISIONS.md, D80).
template <typename O, bool BIAS>
__device__ __forceinline__ unsigned epilogue_pair(float v0, float v1, float alpha, float b) {
    const unsigned z = pack_half(O{}, alpha * v0, alpha * v1);
    if constexpr (!BIAS) return z;
    const float2 w = unpack_half(O{}, z);
    return pack_half(O{}, sigmoid_approx(w.x + b), sigmoid_approx(w.y + b));
}

constexpr int STAGING_PITCH = 144;   // bytes a staging row: 64 16-bit elements, and 16 that put 8 rows on all banks

__device__ __forceinline__ void stmatrix_x4(unsigned addr, const unsigned (&r)[4]) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n"
                 :: "r"(addr), "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3]) : "memory");
}

// a warpgroup's 64 x BN 16-bit result to C through shared memory (`staging`: 16 rows of
// STAGING_PITCH a consumer warp), 64 columns at a time: stmatrix writes the accumulators' fragments
// as rows, then a lane stores 16 bytes of a row, four rows an instruction. A warp's stores are then
// whole 128-byte lines, where storing its fragments from registers wrote 4 bytes to each of eight
// rows an instruction: the half GEMMs' forward and input-gradient products ran faster. A float C
// (weight gradients, split-K's workspace, TF32) gained nothing so (8-byte pieces are whole sectors)
// and 3xTF32 lost: it stays in registers (docs/DECISIONS.md, D53).
template <int BN, typename O, bool BIAS>
__device__ __forceinline__ void store_staged(const float (&d)[BN / 2], int row0, int n0, int M, int N, float alpha,
                                             O* C, int ldc, bool vectors, const float* bias, unsigned staging) {
    const int warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
    const int r0 = row0 + warp * 16;
    float b[2] = {0.0f, 0.0f};
    if constexpr (BIAS) {
        for (int h = 0; h < 2; ++h) b[h] = r0 + (lane >> 2) + h * 8 < M ? bias[r0 + (lane >> 2) + h * 8] : 0.0f;
    }
    const unsigned mine = staging + ((threadIdx.x >> 5) - 4) * 16 * STAGING_PITCH;   // consumers' warps from 4 on
    // stmatrix's 4 matrices a call: lane l gives the address of row l % 8 of matrix l / 8, whose rows
    // start at 8 ((l / 8) % 2) and its columns at column block l / 16
    const unsigned at = mine + (8 * ((lane >> 3) & 1) + (lane & 7)) * STAGING_PITCH + (lane >> 4) * 16;
#pragma unroll
    for (int c = 0; c < BN / 64; ++c) {
#pragma unroll
        for (int jj = 0; jj < 8; jj += 2) {
            unsigned r[4];
#pragma unroll
            for (int q = 0; q < 4; ++q) {
                const int i = (c * 8 + jj + q / 2) * 4 + (q & 1) * 2;
                r[q] = epilogue_pair<O, BIAS>(d[i], d[i + 1], alpha, b[q & 1]);
            }
            stmatrix_x4(at + jj * 16, r);
        }
        __syncwarp();
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int row = i * 4 + (lane >> 3), col = n0 + c * 64 + (lane & 7) * 8;
            uint4 v;
            asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                         : "r"(mine + row * STAGING_PITCH + (lane & 7) * 16) : "memory");
            if (r0 + row >= M || col >= N) continue;
            O* o = C + (size_t)(r0 + row) * ldc + col;
            if (vectors && col + 8 <= N) {
                *reinterpret_cast<uint4*>(o) = v;
            } else {
                for (int e = 0; e < 8 && col + e < N; ++e) {
                    const unsigned w = e < 2 ? v.x : e < 4 ? v.y : e < 6 ? v.z : v.w;
                    o[e].bits = (unsigned short)(w >> (16 * (e % 2)));
                }
            }
        }
        __syncwarp();   // read back before the next 64 columns overwrite it
    }
}

// the two ways' barrier (named barrier 1; barrier 0 is __syncthreads'): their 256 threads
__device__ __forceinline__ void ways_sync() { asm volatile("bar.sync 1, 256;\n" ::: "memory"); }

// the two ways (KW = 2): each keeps half the tile's columns (way 0 the first) in `mine`, the sum of both
// ways' accumulators there; the other half goes to the other way through shared memory at `area` (BN / 4
// floats a thread, laid out thread-fastest: no bank conflicts). Indices are compile-time, so the
// accumulators stay in registers.
template <int BN>
__device__ __forceinline__ void swap_halves(const float (&d)[BN / 2], float (&mine)[BN / 4], int way, unsigned area) {
    constexpr int Q = BN / 4;
    const unsigned lane4 = (threadIdx.x & 127) * 4, give = area + (1 - way) * Q * 512, take = area + way * Q * 512;
    ways_sync();   // both ways done with the area (a staged 16-bit C of the tile before)
#pragma unroll
    for (int i = 0; i < Q; ++i)
        asm volatile("st.shared.f32 [%0], %1;\n" :: "r"(give + i * 512 + lane4), "f"(way ? d[i] : d[Q + i]) : "memory");
    ways_sync();
#pragma unroll
    for (int i = 0; i < Q; ++i) {
        float other;
        asm volatile("ld.shared.f32 %0, [%1];\n" : "=f"(other) : "r"(take + i * 512 + lane4) : "memory");
        mine[i] = (way ? d[Q + i] : d[i]) + other;
    }
    ways_sync();   // read before the next tile's halves are given
}

// STAGED: a 16-bit C goes through shared memory (store_staged); the rest from registers
template <int BN, bool STAGED, typename O>
__device__ __forceinline__ void store(const float (&d)[BN / 2], int row0, int n0, int M, int N, float alpha,
                                      float beta, O* C, int ldc, int z, bool split, const float* bias,
                                      unsigned staging) {
    O* out = split ? C + (size_t)z * M * ldc : C;
    const bool pairs = (ldc % 2 == 0) && (reinterpret_cast<size_t>(C) % (2 * sizeof(O)) == 0);
    const bool scale_c = !split && beta != 0.0f;
    if constexpr (sizeof(O) == 2) {   // a product alone: half_wgmma_gemm passes beta 0, and splits sum in float
        if constexpr (STAGED) {
            const bool vectors = ldc % 8 == 0 && reinterpret_cast<size_t>(C) % 16 == 0;
            if (bias) store_staged<BN, O, true>(d, row0, n0, M, N, alpha, C, ldc, vectors, bias, staging);
            else store_staged<BN, O, false>(d, row0, n0, M, N, alpha, C, ldc, vectors, bias, staging);
        } else {
            if (bias) store_as<BN, O, false, true>(d, row0, n0, M, N, alpha, beta, C, ldc, pairs, bias);
            else store_as<BN, O, false, false>(d, row0, n0, M, N, alpha, beta, C, ldc, pairs, bias);
        }
        return;
    }
    if (scale_c && bias) store_as<BN, O, true, true>(d, row0, n0, M, N, alpha, beta, out, ldc, pairs, bias);
    else if (scale_c) store_as<BN, O, true, false>(d, row0, n0, M, N, alpha, beta, out, ldc, pairs, bias);
    else if (bias) store_as<BN, O, false, true>(d, row0, n0, M, N, alpha, beta, out, ldc, pairs, bias);
    else store_as<BN, O, false, false>(d, row0, n0, M, N, alpha, beta, out, ldc, pairs, bias);
}
}  // namespace wg

template <typename E, typename O, int WGS, int BN, int STAGES, bool X3, int CL, bool TA, bool TB, int R, int KW>
__global__ void __launch_bounds__((WGS + 1) * 128, 1)
gemm_wgmma(int M, int N, int K, int kps, float alpha, const void* map_a, const void* map_as, const void* map_b,
           const void* map_bs, float beta, O* __restrict__ C, int ldc, const float* __restrict__ bias, int m_fastest) {
    using namespace wg;
    constexpr int BK = ROW / sizeof(E);   // k a stage
    constexpr int BM = 64 * (WGS / KW) * R, A_BYTES = BM * ROW, HALF = (BM + BN) * ROW, STAGE = HALF * (X3 ? 2 : 1);
    // R > 1: a consumer warpgroup holds R x BN / 2 accumulators a thread, more than an even share of the
    // register file allows; the producer warpgroup gives most of its registers to the consumers
    constexpr int PRODUCER_REGS = 40, CONSUMER_REGS = (65536 / 128 - PRODUCER_REGS) / WGS / 8 * 8;
    static_assert(R == 1 || !X3, "3xTF32 keeps one block of rows a warpgroup");
    // two ways: one pair of warpgroups (their halves' area is where a 16-bit C is staged after: a second pair's
    // halves could still be in it), one block of rows, halves of whole 8-column blocks
    static_assert(KW == 1 || (KW == 2 && WGS == 2 && R == 1 && !X3 && BN % 16 == 0), "two ways: see above");
    constexpr int B_PART = BN / CL * ROW;   // the bytes of B a CTA of the cluster loads for all
    // a 16-bit C is stored through shared memory past the mbarriers (store_staged), 64 columns at a
    // time, where one block of rows a warpgroup leaves room for it (wgmma.py's smem_bytes)
    constexpr bool STAGED = sizeof(O) == 2 && R == 1 && (BN / KW) % 64 == 0;
    static_assert(BN % (8 * CL) == 0, "a CTA's part of B must be whole 8-row swizzle atoms");
    static_assert(sizeof(E) == 2 || (!TA && !TB), "TF32 operands are K-major");
    static_assert(sizeof(E) == 4 || !X3, "3xTF32 splits FP32 operands");
    static_assert(!TB || (BN / CL) % 64 == 0, "an MN-major B part is whole boxes of 64");
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    const unsigned base = (smem_u32(smem_raw) + 1023) & ~1023u;   // the 128-byte swizzle wants 1024-aligned tiles
    const unsigned full = base + STAGES * STAGE, empty = full + 8 * STAGES, staging = empty + 8 * STAGES;
    const unsigned rank = CL > 1 ? cluster_rank() : 0;
    // a cluster's CL CTAs take the CL tiles of one column of tiles_n, M-adjacent: B's tile is shared.
    // m_fastest: tiles walk M first, so that the CTAs running at once share a few of B's column blocks
    // (which stay in L2) where N first has each wave of tiles read all of B again
    const int tiles_n = (N + BN - 1) / BN, tiles_m = (M + BM * CL - 1) / (BM * CL), splits = (K + kps - 1) / kps;
    const int tiles = tiles_n * tiles_m * splits, first = blockIdx.x / CL, step = gridDim.x / CL;
    struct Work { int m0, n0, z, kbegin, ktiles; };
    auto work = [&](int tile) {
        Work w;
        const int t = tile % (tiles_n * tiles_m);
        w.n0 = (m_fastest ? t / tiles_m : t % tiles_n) * BN;
        w.m0 = ((m_fastest ? t % tiles_m : t / tiles_n) * CL + rank) * BM;   // past M: zeros loaded, nothing stored
        w.z = tile / (tiles_n * tiles_m);
        w.kbegin = w.z * kps;
        w.ktiles = (min(K, w.kbegin + kps) - w.kbegin + BK - 1) / BK;
        return w;
    };
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(full + 8 * s, 1);
            mbar_init(empty + 8 * s, 4 * WGS * CL);   // free once every consumer warp of the cluster has seen it
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    if constexpr (CL > 1) cluster_sync(); else __syncthreads();
    if (threadIdx.x < 128) {   // the producer warpgroup
        if constexpr (R > 1) asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" :: "n"(PRODUCER_REGS));
        if (threadIdx.x == 0) {   // the producer: one thread drives the copy engine
            int s = 0;              // the stages' ring position, continued across tiles
            unsigned phase = 0;     // and how many times round it, mod 2
            for (int tile = first; tile < tiles; tile += step) {
                const Work w = work(tile);
                for (int t = 0; t < w.ktiles; ++t, next_stage<STAGES>(s, phase)) {
                    const int k0 = w.kbegin + t * BK;
                    const unsigned stage = base + s * STAGE, bar = full + 8 * s;
                    mbar_wait(empty + 8 * s, phase ^ 1);   // a fresh barrier passes parity 1
                    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" :: "r"(bar), "r"(STAGE) : "memory");
                    load<TA, 1>(stage, map_a, k0, w.m0, BM, bar);
                    if constexpr (X3) load<TA, 1>(stage + HALF, map_as, k0, w.m0, BM, bar);
                    // this CTA's part of B's rows (with clusters, into every CTA of the cluster)
                    const unsigned part = A_BYTES + rank * B_PART;
                    const int row = w.n0 + rank * (BN / CL);
                    load<TB, CL>(stage + part, map_b, k0, row, BN / CL, bar);
                    if constexpr (X3) load<TB, CL>(stage + HALF + part, map_bs, k0, row, BN / CL, bar);
                }
            }
        }
        if constexpr (CL > 1) cluster_sync();   // the producer warpgroup waits for the cluster at the end
        return;
    }
    // the consumers (R > 1: with the registers the producer gave up; ptxas holds the code this
    // dominates within them)
    if constexpr (R > 1) asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" :: "n"(CONSUMER_REGS));
    const int wgi = (threadIdx.x >> 7) - 1, way = wgi % KW, group = wgi / KW;
    // this warp is done with stage s: its MMAs on it waited for, or (two ways) the other way's stage seen
    auto release = [&](int s) {
        __syncwarp();
        if ((threadIdx.x & 31) == 0) {
            if constexpr (CL == 1) {
                mbar_arrive(empty + 8 * s);
            } else {
                for (int c = 0; c < CL; ++c) mbar_arrive_cluster(empty + 8 * s, c);
            }
        }
    };
    // the descriptors of stage 0's tiles (this warpgroup's rows of A, and B), which each stage's offset advances;
    // the group read from lane 0, so that ptxas knows it is the same across the warp and keeps the descriptors in
    // the uniform registers a wgmma reads them from, not moved there before each one
    const unsigned long long da0 = descriptor<TA>(base + __shfl_sync(0xffffffffu, group, 0) * R * 64 * ROW),
                             db0 = descriptor<TB>(base + A_BYTES);
    int s = 0;              // the stages' ring position, continued across tiles, as the producer's
    unsigned phase = 0;
    for (int tile = first; tile < tiles; tile += step) {
        const Work w = work(tile);
        float d[R][BN / 2], total[X3 ? BN / 2 : 1];
#pragma unroll
        for (int i = 0; i < BN / 2; ++i) {
#pragma unroll
            for (int r = 0; r < R; ++r) d[r][i] = 0.0f;
            if constexpr (X3) total[i] = 0.0f;
        }
        int last = -1;   // the stage of this warpgroup's last k-step of the tile (its way takes every KW-th)
        for (int t = 0; t < w.ktiles; ++t, next_stage<STAGES>(s, phase)) {
            // every stage waited on in order, the other way's too, so that no wait passes on a stage's
            // earlier phase (a stage's fill may land after a later one's)
            mbar_wait(full + 8 * s, phase);
            if (t % KW != way) {   // the other way's stage: seen, so it may be filled again once that way is done
                release(s);
                continue;
            }
            stage_mmas<E, BM, BN, R, X3, TA, TB>(d, advanced(da0, s * STAGE), advanced(db0, s * STAGE), X3 ? 0 : 1);
            if constexpr (X3) {   // wait 0: ptxas serializes every wgmma where running MMAs' registers are read
                asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
#pragma unroll
                for (int i = 0; i < BN / 2; ++i) total[i] += d[0][i];
            } else {
                asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
            }
            if (last >= 0) release(last);   // the MMAs of the stage before are done
            last = s;
        }
        asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
        if (last >= 0) release(last);
        if constexpr (KW == 2) {
            float mine[BN / 4];
            swap_halves<BN>(d[0], mine, way, staging);
            store<BN / 2, STAGED>(mine, w.m0, w.n0 + way * (BN / 2), M, N, alpha, beta, C, ldc, w.z,
                                  splits > 1, bias, staging);
        } else if constexpr (X3) {
            store<BN, STAGED>(total, w.m0 + wgi * 64, w.n0, M, N, alpha, beta, C, ldc, w.z, splits > 1, bias, staging);
        } else {
#pragma unroll
            for (int r = 0; r < R; ++r)
                store<BN, STAGED>(d[r], w.m0 + (wgi * R + r) * 64, w.n0, M, N, alpha, beta, C, ldc, w.z, splits > 1,
                                  bias, staging);
        }
    }
    if constexpr (CL > 1) cluster_sync();   // no CTA leaves while another may still write to it
}

// C = the sum of the splits of work (splits x M x ldc) + beta C, with bias sigmoid(. + bias[row])
template <typename O>
__global__ void wgmma_splitk_sum(int M, int N, int splits, const float* __restrict__ work, float beta,
                                 O* __restrict__ C, int ldc, const float* __restrict__ bias) {
    const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= (size_t)M * N) return;
    const size_t at = (i / N) * ldc + i % N;
    float s = 0.0f;
    for (int z = 0; z < splits; ++z) s += work[z * (size_t)M * ldc + at];
    const float b = bias ? bias[i / N] : 0.0f, c = beta == 0.0f ? 0.0f : widen(C[at]);
    C[at] = narrow<O>(bias ? wg::epilogue<O, true, true>(s, 1.0f, beta, c, b) : wg::epilogue<O, true, false>(s, 1.0f, beta, c, b));
}

// The kernel's operands made K-major: dst (rows x K, ld apart) = src, whose element (r, k) is at
// src[r sr + k sk] (float, or a 16-bit type's bits), or (split, float) its TF32 big and small parts.
// A 32 x 32 tile a block through shared memory, so that both the reads (along whichever of r and k
// src holds contiguous: a transposed view is the common case) and the writes (along k) are
// coalesced: an elementwise copy of a transposed view reads 4 bytes of every 32-byte sector.
__device__ __forceinline__ float tf32_round(float x) { return __uint_as_float((__float_as_uint(x) + 0x1000u) & 0xffffe000u); }

template <typename T, bool SPLIT>
__global__ void __launch_bounds__(256) k_major_copy(const T* __restrict__ src, long long sr, long long sk, int rows,
                                                    int K, T* __restrict__ big, T* __restrict__ small, int ld) {
    __shared__ T tile[32][33];
    const int r0 = blockIdx.x * 32, k0 = blockIdx.y * 32, tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
    const bool rows_contiguous = sr == 1 && sk != 1;
    for (int i = ty; i < 32; i += 8) {
        const int dr = rows_contiguous ? tx : i, dk = rows_contiguous ? i : tx;
        if (r0 + dr < rows && k0 + dk < K) tile[dr][dk] = src[(r0 + dr) * sr + (k0 + dk) * sk];
    }
    __syncthreads();
    for (int i = ty; i < 32; i += 8) {
        if (r0 + i >= rows || k0 + tx >= K) continue;
        const T x = tile[i][tx];
        const size_t at = (size_t)(r0 + i) * ld + k0 + tx;
        if constexpr (SPLIT) {
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
// third of the split's traffic saved and no copy of x, at an error still under SGEMM's
// (docs/DECISIONS.md, D54). Four floats a thread where a row holds them, one by one at a row's end.
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
