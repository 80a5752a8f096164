// Fused elementwise steps of the training step: each reads its inputs once and writes once.
#include "common.cuh"

// z[i, j] = sigmoid(z[i, j] + b[i]): the forward hidden layer after a GEMM without epilogue (z stored
// as S: half precision in a mixed-precision step, computed in T).
template <typename T, typename S = T>
__global__ void bias_sigmoid(S* z, const T* __restrict__ b, int rows, int cols) {
    size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e < (size_t)rows * cols) z[e] = narrow<S>(sigmoid(widen(z[e]) + b[e / cols]));
}

// y = x rounded to S (a mixed-precision step's weights and images in half precision, from FP32)
template <typename S>
__global__ void narrow_copy(const float* __restrict__ x, S* __restrict__ y, size_t n) {
    size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e < n) y[e] = narrow<S>(x[e]);
}

// y = x in FP32 (a gradient summed in half precision, back into the FP32 buffer the update reads)
template <typename S>
__global__ void widen_copy(const S* __restrict__ x, float* __restrict__ y, size_t n) {
    size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e < n) y[e] = widen(x[e]);
}

// z[i, j] += b[i]
template <typename T>
__global__ void add_bias(T* z, const T* __restrict__ b, int rows, int cols) {
    size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e < (size_t)rows * cols) z[e] += b[e / cols];
}

// Per column j of the C x B logits z (+ bias b2): softmax, then
//   delta[c, j] = (yhat[c, j] - [c == y_j]) * inv_norm   (dJ/dz2 of the seeds' equation 2)
//   ce[j] = -log yhat[y_j, j]                              (only when want_ce)
// One thread a column: C is small (10), and threads of a warp read consecutive columns.
// With groups > 1, z holds that many C x B partial sums (output_forward's), added first in a
// fixed order into the first. With scale (a float16 step's loss scale, on the device so a graph
// follows it), delta is multiplied by *scale.
template <typename T>
__global__ void softmax_xent_grad(T* z, const T* __restrict__ b2, const long long* __restrict__ y,
                                  T* __restrict__ delta, T* __restrict__ ce, int want_ce, int C, int B, T inv_norm,
                                  int groups, const T* __restrict__ scale) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= B) return;
    for (int c = 0; c < C && groups > 1; ++c) {
        T s = 0;
        for (int g = 0; g < groups; ++g) s += z[((size_t)g * C + c) * B + j];
        z[c * B + j] = s;
    }
    T m = z[j] + b2[0];
    for (int c = 1; c < C; ++c) m = max(m, z[c * B + j] + b2[c]);
    T s = 0;
    for (int c = 0; c < C; ++c) s += exp(z[c * B + j] + b2[c] - m);
    int label = (int)y[j];
    if (scale != nullptr) inv_norm *= *scale;
    for (int c = 0; c < C; ++c) {
        T p = exp(z[c * B + j] + b2[c] - m) / s;
        delta[c * B + j] = (p - (c == label ? T(1) : T(0))) * inv_norm;
    }
    if (want_ce) ce[j] = -(z[label * B + j] + b2[label] - m - log(s));
}

// dz = da * a * (1 - a), in place on da: the sigmoid's backward step.
template <typename T>
__global__ void sigmoid_backward(T* da, const T* __restrict__ a, size_t n) {
    size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e < n) { T v = a[e]; da[e] *= v * (T(1) - v); }
}

// Per row i of an H x n hidden layer below another (any depth past the output layer's fused pass):
//   dz[i, j] = da[i, j] * a[i, j] * (1 - a[i, j])   in place on da (da = W^T dz of the layer above)
//   db[i]    = sum_j dz[i, j]                        the layer's bias gradient, a fixed-order tree
// One block a row, so the pass reads da and a once and writes dz once (sigmoid_backward and row_sum
// apart read dz a second time). With dz_small (float only), dz holds its TF32 big parts and dz_small
// the small ones, as output_backward writes them for x3tf32's weight gradient of the first layer.
template <typename T>
__device__ __forceinline__ T tf32_nearest(T x) {
    if constexpr (sizeof(T) == 4) return __uint_as_float((__float_as_uint(x) + 0x1000u) & 0xffffe000u);
    else return x;
}

template <typename T, typename S = T>
__global__ void __launch_bounds__(256)
sigmoid_backward_rows(S* __restrict__ da, const S* __restrict__ a, T* __restrict__ db, int cols,
                      T* __restrict__ dz_small) {
    __shared__ T part[256];
    const size_t row = (size_t)blockIdx.x * cols;
    T s = 0;
    for (int j = threadIdx.x; j < cols; j += blockDim.x) {
        const T v = widen(a[row + j]);
        const T d = widen(da[row + j]) * v * (T(1) - v);
        if (dz_small != nullptr) {
            const T big = tf32_nearest(d);
            da[row + j] = narrow<S>(big);
            dz_small[row + j] = tf32_nearest(d - big);
        } else {
            da[row + j] = narrow<S>(d);
        }
        s += d;
    }
    part[threadIdx.x] = s;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w >>= 1) {
        if (threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) db[blockIdx.x] = part[0];
}

// out[i] = sum_j X[i, j]: bias gradients (row sums of delta). One block a row, tree reduce
// in a fixed order so the result does not change from run to run.
template <typename T>
__global__ void row_sum(const T* __restrict__ X, T* __restrict__ out, int rows, int cols) {
    __shared__ T part[256];
    int i = blockIdx.x;
    T s = 0;
    for (int j = threadIdx.x; j < cols; j += blockDim.x) s += X[(size_t)i * cols + j];
    part[threadIdx.x] = s;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w >>= 1) {
        if (threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[i] = part[0];
}

// The whole SGD + L2 update in one launch over the fused parameter and gradient buffers:
//   p <- p - lr * (g + reg_s * p), reg_s = reg on weight segments, 0 on biases.
// Segment s covers [ends[s-1], ends[s]) of the buffers.
template <typename T>
__global__ void sgd_update(T* p, const T* __restrict__ g, size_t n, T lr, const long long* __restrict__ ends,
                           const T* __restrict__ regs, int nseg) {
    size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= n) return;
    int s = 0;
    while (s < nseg - 1 && e >= (size_t)ends[s]) ++s;
    p[e] -= lr * (g[e] + regs[s] * p[e]);
}

// Dynamic loss scaling on the device (a float16 step; inside the step's or the epoch's graph):
// overflow[0] <- 1 where any gradient is not finite (reset to 0 before), the update skipped then,
// else made with the gradients divided by the scale; then the scale follows, as LossScale in
// perflab/train/half.py: halved on overflow, doubled after `growth` good steps in a row.
// counts: good steps in a row, overflowed steps in a row, overflowed steps in all.
template <typename T>
__global__ void find_overflow(const T* __restrict__ g, size_t n, int* overflow) {
    for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += (size_t)gridDim.x * blockDim.x)
        if (!isfinite(g[e])) { *overflow = 1; return; }
}

template <typename T>
__global__ void sgd_update_scaled(T* p, const T* __restrict__ g, size_t n, T lr, const long long* __restrict__ ends,
                                  const T* __restrict__ regs, int nseg, const T* __restrict__ scale,
                                  const int* __restrict__ overflow) {
    size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= n || *overflow) return;
    int s = 0;
    while (s < nseg - 1 && e >= (size_t)ends[s]) ++s;
    p[e] -= lr * (g[e] / *scale + regs[s] * p[e]);
}

template <typename T>
__global__ void loss_scale_update(T* scale, const int* __restrict__ overflow, long long* counts, int growth) {
    if (*overflow) {
        *scale /= 2;
        counts[0] = 0;
        counts[1] += 1;
        counts[2] += 1;
    } else {
        counts[0] += 1;
        counts[1] = 0;
        if (counts[0] % growth == 0) *scale *= 2;
    }
}

// The loss's L2 term on the device, half of sum_s reg_s ||segment s||^2 over the fused parameter
// buffer (reg_s = 0 on biases), one partial per block of 256 threads, added in a fixed order after:
// no atomics, the same sum every run. Computed in the step's graph, it spares the loss the host's
// round trips: the loss took 0.18-0.35 ms of each epoch on one H100, 0.03-0.05 ms with this kernel
// (experiments/predictor/logs/epoch_fixed_h100.jsonl, epoch_fixed_l2_on_device_h100.jsonl).
template <typename T>
__global__ void l2_partials(const T* __restrict__ p, size_t n, const long long* __restrict__ ends,
                            const T* __restrict__ regs, int nseg, T* __restrict__ part) {
    __shared__ T sums[256];
    T s_acc = 0;
    int s = 0;
    for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += (size_t)gridDim.x * blockDim.x) {
        while (s < nseg - 1 && e >= (size_t)ends[s]) ++s;  // e only grows: the segment never moves back
        s_acc += regs[s] * p[e] * p[e];
    }
    sums[threadIdx.x] = s_acc;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w >>= 1) {
        if (threadIdx.x < w) sums[threadIdx.x] += sums[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) part[blockIdx.x] = sums[0] / 2;
}

// The hidden layer's activation and the output layer's GEMM in one pass over z1 = W1 X (the C x H
// by H x n GEMM moves more bytes than it computes, so it belongs with the activation):
//   a1 = sigmoid(z1 + b1), written over z1;   part[g][c][j] = sum_{h in row block g} W2[c, h] a1[h, j]
// softmax_xent_grad then adds the row blocks' partial sums (fixed order) and takes the softmax.
// Block: 32 columns (a lane each, coalesced) x 8 warps over FW_ROWS rows, whose slice of W2 (and
// b1) sits in shared memory (read as broadcasts); FW_UNROLL rows' loads issued before any is used.
#define FW_ROWS 128
#define FW_UNROLL 8
template <typename T, int CMAX, typename S = T>
__global__ void __launch_bounds__(256)
output_forward(const T* __restrict__ W2, const T* __restrict__ b1, S* z1, T* __restrict__ part, int C, int H, int n) {
    // W2's slice and b1's, then (reused once they are done with) the 8 warps' sums
    constexpr int SLICE = FW_ROWS * (CMAX + 1), SUMS = 8 * 32 * (CMAX + 1);
    __shared__ T smem[SLICE > SUMS ? SLICE : SUMS];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, j = blockIdx.x * 32 + lane;
    const int r0 = blockIdx.y * FW_ROWS, rows = min(FW_ROWS, H - r0);
    T* w = smem;                      // w[r * CMAX + c] = W2[c, r0 + r]
    T* bias = smem + FW_ROWS * CMAX;  // bias[r] = b1[r0 + r]
    for (int e = threadIdx.x; e < rows * CMAX; e += blockDim.x) {
        const int r = e / CMAX, c = e % CMAX;
        w[e] = c < C ? W2[(size_t)c * H + r0 + r] : T(0);
    }
    for (int r = threadIdx.x; r < rows; r += blockDim.x) bias[r] = b1[r0 + r];
    __syncthreads();
    T acc[CMAX];
#pragma unroll
    for (int c = 0; c < CMAX; ++c) acc[c] = 0;
    if (j < n) {
        for (int rb = warp; rb < rows; rb += 8 * FW_UNROLL) {
            T a[FW_UNROLL];
#pragma unroll
            for (int u = 0; u < FW_UNROLL; ++u) {
                const int r = rb + 8 * u;
                a[u] = r < rows ? widen(z1[(size_t)(r0 + r) * n + j]) : T(0);
            }
#pragma unroll
            for (int u = 0; u < FW_UNROLL; ++u) {
                const int r = rb + 8 * u;
                if (r < rows) {
                    const S stored = narrow<S>(sigmoid(a[u] + bias[r]));
                    const T v = widen(stored);  // a1 as the next GEMMs read it
                    z1[(size_t)(r0 + r) * n + j] = stored;
#pragma unroll
                    for (int c = 0; c < CMAX; ++c) acc[c] += w[r * CMAX + c] * v;
                }
            }
        }
    }
    __syncthreads();  // the slice is done with: its space takes the warps' sums
#pragma unroll
    for (int c = 0; c < CMAX; ++c) smem[(warp * 32 + lane) * (CMAX + 1) + c] = acc[c];
    __syncthreads();
    if (warp != 0 || j >= n) return;
    for (int c = 0; c < C; ++c) {
        T s = 0;
        for (int k = 0; k < 8; ++k) s += smem[(k * 32 + lane) * (CMAX + 1) + c];
        part[((size_t)blockIdx.y * C + c) * n + j] = s;
    }
}

// The backward pass of both layers except dW1's GEMM, in one pass over a1 (C <= CMAX classes;
// these GEMMs have K = C or M = C and move more bytes than they compute):
//   dz1 = (W2^T delta) o a1 o (1 - a1)                       (H x n, written)
//   part[b][c][h] = sum_{j in column block b} delta[c, j] a1[h, j]   (c < C: dW2's partial sums)
//   part[b][C][h] = sum_{j in column block b} dz1[h, j]               (db1's partial sums)
// Block: 8 warps x BW_ROWS rows each, over BW_COLS columns. The warps of a block read the same
// columns of delta, so all but the first find them in L1 (delta is read from L2 once per 8 x
// BW_ROWS rows, not once per row pair). A warp's partial sums are reduced by shuffles in a
// fixed order, and over column blocks by output_backward_reduce: no dependence on scheduling.
// With dz1_small (float only; x3tf32's backward GEMM 3 reads both): dz1 holds v's TF32 big part,
// tf32(v), and dz1_small its small part, tf32(v - big) (rounded as the split of wgmma.py is), so that
// GEMM makes no pass of its own over dz1 to split it.
#define BW_ROWS 2
#define BW_COLS 512

template <typename T, int CMAX, typename S = T>
__global__ void __launch_bounds__(256)
output_backward(const T* __restrict__ W2, const T* __restrict__ delta, const S* __restrict__ a1, S* __restrict__ dz1,
                T* __restrict__ part, int C, int H, int n, T* __restrict__ dz1_small) {
    // columns a lane loads at once: as many as the registers hold (4 for float and C <= 10)
    constexpr int BW_UNROLL = CMAX * sizeof(T) <= 40 ? 4 : CMAX * sizeof(T) <= 80 ? 2 : 1;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int h0 = (blockIdx.y * 8 + warp) * BW_ROWS, j0 = blockIdx.x * BW_COLS, jend = min(n, j0 + BW_COLS);
    T w[BW_ROWS][CMAX], acc[BW_ROWS][CMAX + 1];
#pragma unroll
    for (int r = 0; r < BW_ROWS; ++r)
#pragma unroll
        for (int c = 0; c <= CMAX; ++c) {
            if (c < CMAX) w[r][c] = (c < C && h0 + r < H) ? W2[c * H + h0 + r] : T(0);
            acc[r][c] = 0;
        }
    if (h0 < H) {
        // BW_UNROLL columns a lane at a time, all their loads issued before any is used: a
        // memory-bound kernel needs that many bytes in flight (one column at a time ran at a
        // third of the device's bandwidth on an H100)
        for (int jb = j0 + lane; jb < jend; jb += 32 * BW_UNROLL) {
            T a[BW_UNROLL][BW_ROWS], d[BW_UNROLL][CMAX];
#pragma unroll
            for (int u = 0; u < BW_UNROLL; ++u) {
                const int j = jb + 32 * u;
                const bool in = j < jend;
#pragma unroll
                for (int r = 0; r < BW_ROWS; ++r) a[u][r] = (in && h0 + r < H) ? widen(a1[(size_t)(h0 + r) * n + j]) : T(0);
#pragma unroll
                for (int c = 0; c < CMAX; ++c) d[u][c] = (in && c < C) ? delta[(size_t)c * n + j] : T(0);
            }
#pragma unroll
            for (int u = 0; u < BW_UNROLL; ++u) {
                const int j = jb + 32 * u;
#pragma unroll
                for (int r = 0; r < BW_ROWS; ++r) {
                    T s = 0;
#pragma unroll
                    for (int c = 0; c < CMAX; ++c) {
                        s += w[r][c] * d[u][c];
                        acc[r][c] += d[u][c] * a[u][r];  // zero where out of range
                    }
                    const T v = s * a[u][r] * (T(1) - a[u][r]);
                    if (j < jend && h0 + r < H) {
                        const size_t at = (size_t)(h0 + r) * n + j;
                        if (dz1_small != nullptr) {
                            const T big = tf32_nearest(v);
                            dz1[at] = narrow<S>(big);
                            dz1_small[at] = tf32_nearest(v - big);
                        } else {
                            dz1[at] = narrow<S>(v);
                        }
                    }
                    acc[r][CMAX] += v;
                }
            }
        }
    }
#pragma unroll
    for (int r = 0; r < BW_ROWS; ++r)
#pragma unroll
        for (int c = 0; c <= CMAX; ++c) {
            T v = acc[r][c];
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
            const int row = c == CMAX ? C : c;  // db1's partials sit after the C rows of dW2's
            if (lane == 0 && h0 + r < H && (c < C || c == CMAX))
                part[((size_t)blockIdx.x * (C + 1) + row) * H + h0 + r] = v;
        }
}

// dW2[c][h] = sum_b part[b][c][h], db1[h] = sum_b part[b][C][h], b = 0, 1, ... in order.
template <typename T>
__global__ void output_backward_reduce(const T* __restrict__ part, T* __restrict__ dW2, T* __restrict__ db1, int C,
                                       int H, int blocks) {
    const int e = blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= (C + 1) * H) return;
    T s = 0;
    for (int b = 0; b < blocks; ++b) s += part[(size_t)b * (C + 1) * H + e];
    if (e < C * H) dW2[e] = s;
    else db1[e - C * H] = s;
}
