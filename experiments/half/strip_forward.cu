// The fused output layer's forward pass with its softmax in the same launch (session 62, issue 68 item 1; an
// experiment, BF16 a1): a block takes a strip of SC = 16 columns over all H rows, so that it holds its columns'
// whole logits and takes their softmax itself, where output_forward_half's blocks of 128 rows leave partial logits
// for softmax_xent_grad's launch. 8 warps; warp w takes the strip's k-tiles (16 rows) w, w + 8, ..., U of them
// loaded before any is worked. A lane loads and stores 4 bytes (columns 2g, 2g + 1) of rows 2t, 2t + 1, 2t + 8,
// 2t + 9 of a k-tile; n-tile q (0, 1) is the strip's columns 2k + q, so that b0, b1 of n-tile q are those words'
// halves q. W2 in BF16 high and low parts (a BF16 a1 is its own high part): two MMAs an n-tile and k-tile.
#include "common.cuh"

#define SC 16
#define SW 8
#define SU 4

__device__ __forceinline__ void split2(float x0, float x1, unsigned& hi, unsigned& lo) {
    hi = pack_bf16(x0, x1);
    lo = pack_bf16(x0 - __uint_as_float(hi << 16), x1 - __uint_as_float(hi & 0xffff0000u));
}
__device__ __forceinline__ void mma16816(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// W2's A fragments in BF16 high and low parts, in the order strip_forward_frag reads them: k-tile, lane, then
// wh[0..3], wl[0..3] (made once a step in a product; here a launch of its own)
extern "C" __global__ void w2_fragments(const float* __restrict__ W2, int C, int H, uint4* __restrict__ frag) {
    const int lane = threadIdx.x % 32, kt = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, g = lane / 4, t = lane % 4;
    if (kt * 16 >= H) return;
    unsigned wh[4], wl[4];
    for (int i = 0; i < 4; ++i) {
        const int c = g + 8 * (i % 2), h = kt * 16 + 2 * t + 8 * (i / 2);
        const float x0 = (c < C && h < H) ? W2[(size_t)c * H + h] : 0.f, x1 = (c < C && h + 1 < H) ? W2[(size_t)c * H + h + 1] : 0.f;
        split2(x0, x1, wh[i], wl[i]);
    }
    frag[((size_t)kt * 32 + lane) * 2] = make_uint4(wh[0], wh[1], wh[2], wh[3]);
    frag[((size_t)kt * 32 + lane) * 2 + 1] = make_uint4(wl[0], wl[1], wl[2], wl[3]);
}

template <bool FRAG>
__device__ __forceinline__ void strip_body(const float* __restrict__ W2, const float* __restrict__ b1, const float* __restrict__ b2,
              bf16* z1, const long long* __restrict__ y, float* __restrict__ delta, float* __restrict__ ce,
              int want_ce, int C, int H, int n, float inv_norm, int first, int valid, const uint4* __restrict__ frag) {
    __shared__ float sums[SW][2][4][32];
    __shared__ float logits[16][SC];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
    const int jc = blockIdx.x * SC, j = jc + 2 * g;
    const bool pair = j + 1 < n && n % 2 == 0;   // both columns, a 4-byte word (z1's rows 4-byte aligned)
    const int tiles = (H + 15) / 16;
    float acc[2][4] = {};
    for (int k0 = warp; k0 < tiles; k0 += SW * SU) {
        unsigned w[SU][4];
        float x[SU][4][2];
        uint4 fh[SU], fl[SU];
#pragma unroll
        for (int u = 0; u < SU; ++u) {   // every load of the U k-tiles first
            const int r0 = (k0 + u * SW) * 16;
#pragma unroll
            for (int m = 0; m < 4; ++m) {
                const int h = r0 + 2 * t + m % 2 + 8 * (m / 2);
                const unsigned short* q = reinterpret_cast<const unsigned short*>(z1) + (size_t)h * n;
                if (h < H && pair) w[u][m] = *reinterpret_cast<const unsigned*>(q + j);
                else w[u][m] = (h < H && j < n ? q[j] : 0u) | ((h < H && j + 1 < n ? q[j + 1] : 0u) << 16);
            }
            if constexpr (FRAG) {
                const int kt = k0 + u * SW;
                if (kt < tiles) fh[u] = frag[((size_t)kt * 32 + lane) * 2], fl[u] = frag[((size_t)kt * 32 + lane) * 2 + 1];
                continue;
            }
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int c = g + 8 * (i % 2), h = r0 + 2 * t + 8 * (i / 2);
                x[u][i][0] = (c < C && h < H) ? W2[(size_t)c * H + h] : 0.f;
                x[u][i][1] = (c < C && h + 1 < H) ? W2[(size_t)c * H + h + 1] : 0.f;
            }
        }
#pragma unroll
        for (int u = 0; u < SU; ++u) {
            const int r0 = (k0 + u * SW) * 16;
            if (r0 >= H) break;
            unsigned wh[4], wl[4];
            if constexpr (FRAG) {
                wh[0] = fh[u].x, wh[1] = fh[u].y, wh[2] = fh[u].z, wh[3] = fh[u].w;
                wl[0] = fl[u].x, wl[1] = fl[u].y, wl[2] = fl[u].z, wl[3] = fl[u].w;
            } else {
#pragma unroll
                for (int i = 0; i < 4; ++i) split2(x[u][i][0], x[u][i][1], wh[i], wl[i]);
            }
#pragma unroll
            for (int m = 0; m < 4; ++m) {
                const int h = r0 + 2 * t + m % 2 + 8 * (m / 2);
                const float bias = h < H ? b1[h] : 0.f;
                const float2 z = unpack_half(bf16{}, w[u][m]);
                w[u][m] = pack_half(bf16{}, sigmoid_approx(z.x + bias), sigmoid_approx(z.y + bias));
                unsigned short* q = reinterpret_cast<unsigned short*>(z1) + (size_t)h * n;
                if (h < H && pair) {
                    *reinterpret_cast<unsigned*>(q + j) = w[u][m];
                } else if (h < H) {
                    if (j < n) q[j] = (unsigned short)(w[u][m] & 0xffffu);
                    if (j + 1 < n) q[j + 1] = (unsigned short)(w[u][m] >> 16);
                }
            }
#pragma unroll
            for (int qn = 0; qn < 2; ++qn) {   // n-tile qn: half qn of each word
                const unsigned pick = qn ? 0x7632u : 0x5410u;
                const unsigned b0 = __byte_perm(w[u][0], w[u][1], pick), b1v = __byte_perm(w[u][2], w[u][3], pick);
                mma16816(acc[qn], wh, b0, b1v);
                mma16816(acc[qn], wl, b0, b1v);
            }
        }
    }
#pragma unroll
    for (int qn = 0; qn < 2; ++qn)
#pragma unroll
        for (int e = 0; e < 4; ++e) sums[warp][qn][e][lane] = acc[qn][e];
    __syncthreads();
    // logit (c, s) of strip column s: n-tile s % 2, its column k = s / 2 held by lane 4g + k / 2 (g = c % 8) as
    // accumulator (k % 2) + 2 (c / 8); the warps' sums added in order
    for (int e = threadIdx.x; e < 16 * SC; e += SW * 32) {
        const int c = e / SC, s = e % SC;
        if (c >= C) continue;
        const int k = s / 2, at = (k % 2) + 2 * (c / 8), l = 4 * (c % 8) + k / 2;
        float v = 0.f;
#pragma unroll
        for (int wi = 0; wi < SW; ++wi) v += sums[wi][s % 2][at][l];
        logits[c][s] = v + b2[c];
    }
    __syncthreads();
    // softmax_xent_grad's expressions, thread (c, s)
    const int c = threadIdx.x / SC, s = threadIdx.x % SC, jj = jc + s;
    if (c >= C || jj >= n) return;
    if (!(jj >= first && jj < first + valid)) {
        delta[(size_t)c * n + jj] = 0.f;
        if (want_ce && c == 0) ce[jj] = 0.f;
        return;
    }
    float m = logits[0][s];
    for (int k = 1; k < C; ++k) m = max(m, logits[k][s]);
    float sum = 0.f;
    for (int k = 0; k < C; ++k) sum += exp(logits[k][s] - m);
    const int label = (int)y[jj - first];
    const float logit = logits[c][s];
    delta[(size_t)c * n + jj] = (exp(logit - m) / sum - (c == label ? 1.f : 0.f)) * inv_norm;
    if (want_ce && c == label) ce[jj] = -(logit - m - log(sum));
}

extern "C" __global__ void __launch_bounds__(SW * 32)
strip_forward(const float* __restrict__ W2, const float* __restrict__ b1, const float* __restrict__ b2,
              bf16* z1, const long long* __restrict__ y, float* __restrict__ delta, float* __restrict__ ce,
              int want_ce, int C, int H, int n, float inv_norm, int first, int valid, const uint4* __restrict__ frag) {
    strip_body<false>(W2, b1, b2, z1, y, delta, ce, want_ce, C, H, n, inv_norm, first, valid, frag);
}
extern "C" __global__ void __launch_bounds__(SW * 32)
strip_forward_frag(const float* __restrict__ W2, const float* __restrict__ b1, const float* __restrict__ b2,
                   bf16* z1, const long long* __restrict__ y, float* __restrict__ delta, float* __restrict__ ce,
                   int want_ce, int C, int H, int n, float inv_norm, int first, int valid, const uint4* __restrict__ frag) {
    strip_body<true>(W2, b1, b2, z1, y, delta, ce, want_ce, C, H, n, inv_norm, first, valid, frag);
}
