// A first TF32 GEMM on Hopper's warpgroup MMA (wgmma, sm_90a), for issue 32. NOT YET COMPILED OR RUN:
// written in a session without device time, to be checked by check.py on an H100 first.
//
// C (M x N, row-major, ldc) = alpha A Bt^T + beta C, with A (M x K, row-major, lda) and Bt (N x K,
// row-major, ldb): both operands K-major, as TF32 wgmma requires. K and both leading dimensions
// must be multiples of 4 (16-byte cp.async); M and N are free (rows past the edge load as zeros
// and are not stored).
//
// One CTA = one warpgroup (128 threads) computing a 64 x 128 tile; a 3-stage cp.async pipeline
// brings 64 x 32 of A and 128 x 32 of B per stage into shared memory in the 128-byte swizzle
// wgmma reads (row r's 16-byte chunk c stored at chunk c ^ (r % 8); 8-row groups 1024 bytes
// apart); each stage is 4 wgmma k-steps of 8. No warp specialization, no TMA yet: correctness
// first, then speed.
#include <cstdint>

constexpr int BM = 64, BN = 128, BK = 32, STAGES = 3, THREADS = 128;
constexpr int A_STAGE = BM * BK * 4, B_STAGE = BN * BK * 4;   // bytes: 8 KiB, 16 KiB

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// The wgmma shared-memory matrix descriptor of a K-major tile with the 128-byte swizzle, starting
// at byte address addr (the tile 1024-byte aligned; a k-step of 8 TF32 adds 32 bytes).
__device__ __forceinline__ uint64_t descriptor(uint32_t addr) {
    uint64_t d = (uint64_t)((addr & 0x3FFFF) >> 4);     // start address, 16-byte units
    d |= (uint64_t)1 << 16;                            // leading byte offset: unused when swizzled (1)
    d |= (uint64_t)(1024 >> 4) << 32;                   // stride byte offset: next 8-row group
    d |= (uint64_t)1 << 62;                             // layout: 128-byte swizzle
    return d;
}

__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, int bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" :: "r"(dst), "l"(src), "r"(bytes));
}

// rows x 32 TF32 of a K-major operand (rows from row0, k from k0) into a swizzled stage
__device__ __forceinline__ void load_tile(uint32_t stage, const float* src, int ld, int nrows, int K,
                                          int row0, int k0, int rows) {
    for (int i = threadIdx.x; i < rows * 8; i += THREADS) {
        int r = i >> 3, c = i & 7;
        int row = row0 + r, k = k0 + c * 4;
        int bytes = (row < nrows && k < K) ? min(16, (K - k) * 4) : 0;
        const float* from = bytes ? src + (size_t)row * ld + k : src;
        cp_async16(stage + r * 128 + ((c ^ (r & 7)) << 4), from, bytes);
    }
}

// One warpgroup-wide D(64x128) += A(64x8) B(8x128) on TF32 tensor cores, A and B read from shared
// memory through their descriptors (both K-major: TF32 wgmma takes no transposed operand).
__device__ __forceinline__ void wgmma_m64n128k8(float (&d)[64], uint64_t desc_a, uint64_t desc_b) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(desc_a), "l"(desc_b), "r"(1));   // scale-d = 1: D += A B (d starts at zero)
}

extern "C" __global__ void __launch_bounds__(THREADS)
wgmma_tf32_gemm(int M, int N, int K, float alpha, const float* __restrict__ A, int lda,
                const float* __restrict__ Bt, int ldb, float beta, float* __restrict__ C, int ldc) {
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    // the dynamic shared memory is only 16-byte aligned for sure: round up to 1024
    uint32_t base = (smem_u32(smem_raw) + 1023) & ~1023u;
    uint32_t a_stage[STAGES], b_stage[STAGES];
    for (int s = 0; s < STAGES; ++s) {
        a_stage[s] = base + s * (A_STAGE + B_STAGE);
        b_stage[s] = a_stage[s] + A_STAGE;
    }
    int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    int ktiles = (K + BK - 1) / BK;
    float d[64];
    for (int i = 0; i < 64; ++i) d[i] = 0.0f;

    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < ktiles) {
            load_tile(a_stage[s], A, lda, M, K, m0, s * BK, BM);
            load_tile(b_stage[s], Bt, ldb, N, K, n0, s * BK, BN);
        }
        asm volatile("cp.async.commit_group;\n" ::);
    }
    for (int kt = 0; kt < ktiles; ++kt) {
        asm volatile("cp.async.wait_group %0;\n" :: "n"(STAGES - 2));
        asm volatile("fence.proxy.async.shared::cta;\n" ::);   // cp.async's writes, seen by wgmma
        __syncthreads();                                       // every thread's part is in; stage kt-1 is free
        int next = kt + STAGES - 1;
        if (next < ktiles) {
            load_tile(a_stage[next % STAGES], A, lda, M, K, m0, next * BK, BM);
            load_tile(b_stage[next % STAGES], Bt, ldb, N, K, n0, next * BK, BN);
        }
        asm volatile("cp.async.commit_group;\n" ::);
        int s = kt % STAGES;
        asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
        for (int ks = 0; ks < BK / 8; ++ks)
            wgmma_m64n128k8(d, descriptor(a_stage[s] + ks * 32), descriptor(b_stage[s] + ks * 32));
        asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    }

    // the accumulator: warp w holds rows 16w..16w+15; lane l rows l/4 and l/4 + 8 of them, and in
    // each 8-column block j the columns 2(l%4), 2(l%4) + 1
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int r0 = m0 + warp * 16 + (lane >> 2);
    for (int j = 0; j < BN / 8; ++j) {
        int col = n0 + j * 8 + (lane & 3) * 2;
        for (int h = 0; h < 2; ++h) {
            int row = r0 + h * 8;
            if (row >= M) continue;
            for (int e = 0; e < 2; ++e) {
                if (col + e >= N) continue;
                float* out = C + (size_t)row * ldc + col + e;
                float v = alpha * d[j * 4 + h * 2 + e];
                *out = beta == 0.0f ? v : v + beta * *out;
            }
        }
    }
}
