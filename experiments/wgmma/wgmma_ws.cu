// TF32 and 3xTF32 GEMMs on Hopper's warpgroup MMA, warp-specialized (issue 32, second design).
//
// C (M x N, row-major, ldc) = alpha A Bt^T + beta C with A (M x K) and Bt (N x K) both K-major (row-
// major), K, lda, ldb multiples of 4 and A, Bt 16-byte aligned; M and N free.
//
// A CTA is one producer warpgroup and WGS consumer warpgroups (consumer c computes rows 64c..64c+63
// of the (64 WGS) x BN tile). STAGES shared-memory stages of 32 k each, in the 128-byte swizzle
// wgmma reads, handed over by mbarriers: the producer waits until a stage is empty, fills it by
// cp.async, and once its own copies of that stage have landed (X3: and it has split them) fences
// them for the async proxy and arrives on the stage's full barrier. A consumer waits for full,
// issues the stage's MMAs, and once wgmma.wait_group 1 says the previous stage's MMAs are done,
// arrives on that stage's empty barrier. No CTA-wide barrier in the main loop.
//
// X3 (3xTF32): the producer splits each element x of both tiles into big = tf32(x) (rounded, in
// place) and small = tf32(x - big) (the stage's second half); a consumer issues
// As Bb + Ab Bs + Ab Bb per k-step, all from shared memory.
//
// Split-K: blockIdx.z takes k in [z kps, (z + 1) kps); with gridDim.z > 1 each split writes alpha
// times its part to C + z M ldc (a workspace; beta ignored), and splitk_sum adds them.
#include "wgmma_ops.cuh"

namespace ws {
constexpr int BK = 32;

__device__ __forceinline__ unsigned smem_u32(const void* p) { return static_cast<unsigned>(__cvta_generic_to_shared(p)); }

__device__ __forceinline__ unsigned long long descriptor(unsigned addr) {
    unsigned long long d = (unsigned long long)((addr & 0x3FFFF) >> 4);
    d |= 1ull << 16;                               // leading byte offset: unused when swizzled
    d |= (unsigned long long)(1024 >> 4) << 32;    // stride byte offset: the next 8-row group
    d |= 1ull << 62;                               // the 128-byte swizzle
    return d;
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

__device__ __forceinline__ float tf32_round(float x) {
    unsigned u;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(u) : "f"(x));
    return __uint_as_float(u);
}

template <int N> struct Mma;
template <> struct Mma<64> {
    static __device__ __forceinline__ void ss(float (&d)[32], unsigned long long a, unsigned long long b) { wgmma_n64_ss(d, a, b); }
};
template <> struct Mma<128> {
    static __device__ __forceinline__ void ss(float (&d)[64], unsigned long long a, unsigned long long b) { wgmma_n128_ss(d, a, b); }
};
template <> struct Mma<256> {
    static __device__ __forceinline__ void ss(float (&d)[128], unsigned long long a, unsigned long long b) { wgmma_n256_ss(d, a, b); }
};
}  // namespace ws

// shared memory a CTA needs: the stages (X3: twice, big and small), the barriers, 1024 to align
template <int WGS, int BN, int STAGES, bool X3>
constexpr int ws_smem_bytes() { return STAGES * (64 * WGS + BN) * ws::BK * 4 * (X3 ? 2 : 1) + 16 * STAGES + 1024; }

template <int WGS, int BN, int STAGES, bool X3>
__global__ void __launch_bounds__((WGS + 1) * 128, 1)
wgmma_ws_gemm(int M, int N, int K, int kps, float alpha, const float* __restrict__ A, int lda,
              const float* __restrict__ Bt, int ldb, float beta, float* __restrict__ C, int ldc) {
    using namespace ws;
    constexpr int BM = 64 * WGS, A_BYTES = BM * BK * 4, B_BYTES = BN * BK * 4;
    constexpr int HALF = A_BYTES + B_BYTES, STAGE_BYTES = HALF * (X3 ? 2 : 1), CHUNKS = (BM + BN) * 8;
    static_assert(STAGES >= 3, "the producer finishes stage t - 1 after waiting for stage t to be empty");
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    const unsigned base = (smem_u32(smem_raw) + 1023) & ~1023u;
    const unsigned full = base + STAGES * STAGE_BYTES, empty = full + 8 * STAGES;
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    const int kbegin = blockIdx.z * kps, kend = min(K, kbegin + kps);
    const int ktiles = kend > kbegin ? (kend - kbegin + BK - 1) / BK : 0;
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(full + 8 * s, 128);
            mbar_init(empty + 8 * s, 128 * WGS);
        }
    }
    __syncthreads();

    if (threadIdx.x < 128) {   // the producer warpgroup
        const int p = threadIdx.x;
        auto issue = [&](int t) {
            const unsigned stage = base + (t % STAGES) * STAGE_BYTES;
            const int k0 = kbegin + t * BK;
            for (int i = p; i < CHUNKS; i += 128) {
                const bool is_a = i < BM * 8;
                const int r = is_a ? i >> 3 : (i >> 3) - BM, c = i & 7;
                const int row = (is_a ? m0 : n0) + r, k = k0 + c * 4;
                const int nrows = is_a ? M : N;
                const int bytes = (row < nrows && k < kend) ? min(16, (kend - k) * 4) : 0;
                const float* src = is_a ? A + (size_t)row * lda + k : Bt + (size_t)row * ldb + k;
                const unsigned dst = stage + (is_a ? 0 : A_BYTES) + r * 128 + ((c ^ (r & 7)) << 4);
                asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" :: "r"(dst), "l"(bytes ? src : A), "r"(bytes));
            }
            asm volatile("cp.async.commit_group;\n" ::);
        };
        auto finish = [&](int t, bool last) {   // stage t has landed: (split it,) hand it over
            if (last) asm volatile("cp.async.wait_group 0;\n" ::: "memory");
            else asm volatile("cp.async.wait_group 1;\n" ::: "memory");
            const unsigned stage = base + (t % STAGES) * STAGE_BYTES;
            if constexpr (X3) {
                for (int i = p; i < CHUNKS; i += 128) {
                    const bool is_a = i < BM * 8;
                    const int r = is_a ? i >> 3 : (i >> 3) - BM, c = i & 7;
                    const unsigned at = stage + (is_a ? 0 : A_BYTES) + r * 128 + ((c ^ (r & 7)) << 4);
                    float x0, x1, x2, x3;
                    asm volatile("ld.shared.v4.f32 {%0,%1,%2,%3}, [%4];\n" : "=f"(x0), "=f"(x1), "=f"(x2), "=f"(x3) : "r"(at));
                    const float b0 = tf32_round(x0), b1 = tf32_round(x1), b2 = tf32_round(x2), b3 = tf32_round(x3);
                    asm volatile("st.shared.v4.f32 [%0], {%1,%2,%3,%4};\n" :: "r"(at), "f"(b0), "f"(b1), "f"(b2), "f"(b3));
                    asm volatile("st.shared.v4.f32 [%0], {%1,%2,%3,%4};\n" :: "r"(at + HALF), "f"(tf32_round(x0 - b0)),
                                 "f"(tf32_round(x1 - b1)), "f"(tf32_round(x2 - b2)), "f"(tf32_round(x3 - b3)));
                }
            }
            asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");   // this thread's writes, seen by wgmma
            mbar_arrive(full + 8 * (t % STAGES));
        };
        for (int t = 0; t < ktiles; ++t) {
            mbar_wait(empty + 8 * (t % STAGES), ((t / STAGES) & 1) ^ 1);   // a fresh barrier passes parity 1
            issue(t);
            if (t > 0) finish(t - 1, false);
        }
        if (ktiles > 0) finish(ktiles - 1, true);
        return;
    }

    // a consumer warpgroup
    const int wg = (threadIdx.x >> 7) - 1, warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
    float d[BN / 2];
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) d[i] = 0.0f;
    for (int t = 0; t < ktiles; ++t) {
        const int s = t % STAGES;
        mbar_wait(full + 8 * s, (t / STAGES) & 1);
        const unsigned a_big = base + s * STAGE_BYTES + wg * 64 * 128, b_big = base + s * STAGE_BYTES + A_BYTES;
        asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
        for (int ks = 0; ks < BK / 8; ++ks) {
            if constexpr (X3) {
                Mma<BN>::ss(d, descriptor(a_big + HALF + ks * 32), descriptor(b_big + ks * 32));
                Mma<BN>::ss(d, descriptor(a_big + ks * 32), descriptor(b_big + HALF + ks * 32));
            }
            Mma<BN>::ss(d, descriptor(a_big + ks * 32), descriptor(b_big + ks * 32));
        }
        asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
        if (t > 0) mbar_arrive(empty + 8 * ((t - 1) % STAGES));   // stage t - 1's MMAs are done
    }
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");

    const bool split = gridDim.z > 1;
    float* out = split ? C + (size_t)blockIdx.z * M * ldc : C;
    const int r0 = m0 + wg * 64 + warp * 16 + (lane >> 2);
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
