// Fused elementwise steps of the training step: each reads its inputs once and writes once.
#include "common.cuh"

// z[i, j] = sigmoid(z[i, j] + b[i]): the forward hidden layer after a GEMM without epilogue (z stored
// as S: half precision in a mixed-precision step, computed in T).
// 16 bytes a thread (8 16-bit, 4 float or 2 double elements), moved at once where rows hold whole sixteens and
// z is 16-byte aligned: narrower loads, or a float a thread each with a 64-bit division for its row, fall short of
// the HBM's rate (docs/DECISIONS.md, D42).
template <typename S> constexpr int ELEMENTS_16B = 16 / sizeof(S);
template <typename T, typename S = T>
__global__ void bias_sigmoid(S* z, const T* __restrict__ b, int rows, int cols) {
    constexpr int V = ELEMENTS_16B<S>;
    const size_t total = (size_t)rows * cols;
    const size_t e = V * ((size_t)blockIdx.x * blockDim.x + threadIdx.x);
    if (e >= total) return;
    if (cols % V == 0 && (size_t)z % 16 == 0) {
        uint4 raw = *reinterpret_cast<const uint4*>(z + e);
        S* v = reinterpret_cast<S*>(&raw);
        const T bias = b[e / cols];
#pragma unroll
        for (int i = 0; i < V; ++i) v[i] = narrow<S>(sigmoid_stored(S{}, widen(v[i]) + bias));
        *reinterpret_cast<uint4*>(z + e) = raw;
    } else {
        for (size_t k = e; k < e + V && k < total; ++k) z[k] = narrow<S>(sigmoid_stored(S{}, widen(z[k]) + b[k / cols]));
    }
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
// With groups > 1, z holds that many C x B partial sums (output_forward's), added first in a fixed order into
// the first. With scale (a float16 step's loss scale, on the device so a graph follows it), delta is multiplied
// by *scale. The batch's samples are columns first .. first + valid - 1 (label y[j - first]); the other columns
// widen a half step's operands to aligned rows (docs/DECISIONS.md, D59): their delta and ce are zero, so they add
// nothing to any gradient or to the loss.
// Up to SOFTMAX_CLASSES classes a block is 32 columns by C classes, thread (x, y) class y of column x: each
// thread adds its class's partial sums (their loads issued together), the block shares the logits through shared
// memory, and each thread takes its column's max and sum in class order, so the bits are those of one thread a
// column, which the kernel runs for more classes (a thread a column had 80 loads in a chain and used a few
// multiprocessors at a step's batch: docs/DECISIONS.md, D63).
#define SOFTMAX_CLASSES 16
template <typename T>
__global__ void softmax_xent_grad(T* z, const T* __restrict__ b2, const long long* __restrict__ y,
                                  T* __restrict__ delta, T* __restrict__ ce, int want_ce, int C, int B, T inv_norm,
                                  int groups, const T* __restrict__ scale, int first, int valid) {
    const int j = blockIdx.x * blockDim.x + threadIdx.x, c = threadIdx.y;
    const bool sample = j >= first && j < first + valid;
    if (scale != nullptr) inv_norm *= *scale;
    if (blockDim.y > 1) {  // C <= SOFTMAX_CLASSES: this thread's class c
        __shared__ T logits[SOFTMAX_CLASSES][32];
        T v = 0;
        if (j < B) {
#pragma unroll 8
            for (int g = 0; g < groups; ++g) v += z[((size_t)g * C + c) * B + j];
            if (groups > 1) z[c * B + j] = v;  // the sums, where the unfused path's logits are
            logits[c][threadIdx.x] = v + b2[c];
        }
        __syncthreads();
        if (j >= B) return;
        if (!sample) {
            delta[c * B + j] = T(0);
            if (want_ce && c == 0) ce[j] = T(0);
            return;
        }
        T m = logits[0][threadIdx.x];
        for (int k = 1; k < C; ++k) m = max(m, logits[k][threadIdx.x]);
        T s = 0;
        for (int k = 0; k < C; ++k) s += exp(logits[k][threadIdx.x] - m);
        const int label = (int)y[j - first];
        const T logit = logits[c][threadIdx.x];
        delta[c * B + j] = (exp(logit - m) / s - (c == label ? T(1) : T(0))) * inv_norm;
        if (want_ce && c == label) ce[j] = -(logit - m - log(s));
        return;
    }
    if (j >= B) return;
    for (int k = 0; k < C && groups > 1; ++k) {
        T v = 0;
        for (int g = 0; g < groups; ++g) v += z[((size_t)g * C + k) * B + j];
        z[k * B + j] = v;
    }
    if (!sample) {
        for (int k = 0; k < C; ++k) delta[k * B + j] = T(0);
        if (want_ce) ce[j] = T(0);
        return;
    }
    T m = z[j] + b2[0];
    for (int k = 1; k < C; ++k) m = max(m, z[k * B + j] + b2[k]);
    T s = 0;
    for (int k = 0; k < C; ++k) s += exp(z[k * B + j] + b2[k] - m);
    const int label = (int)y[j - first];
    for (int k = 0; k < C; ++k) delta[k * B + j] = (exp(z[k * B + j] + b2[k] - m) / s - (k == label ? T(1) : T(0))) * inv_norm;
    if (want_ce) ce[j] = -(z[label * B + j] + b2[label] - m - log(s));
}

// dz = da * a * (1 - a), in place on da: the sigmoid's backward step.
template <typename T>
__global__ void sigmoid_backward(T* da, const T* __restrict__ a, size_t n) {
    size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e < n) { T v = a[e]; da[e] *= v * (T(1) - v); }
}

// A float16 step's overflow, found by the passes that store its gradients: on one GPU, G is non-finite only where a
// gradient stored in FP16 (dz) is, or one the output layer's reduction sums in FP32 from delta (dW_L, db_L, db_{L-1});
// the rest of G are GEMMs and sums of finite FP16 operands (the images checked finite in FP16 when the trainer
// makes them) over a batch, far inside FP32's range. So the update needs no pass of its own over G to look
// (find_overflow: docs/DECISIONS.md, D72). Only a float16 pass checks: the others compile without it.
// The output layer's sums need no check where the update adds them (sgd_update_reduced, D78): a delta that is not
// finite in a sample's column makes every dz_{L-1} of that column not finite (W_L^T delta o sigmoid', with 0 x inf
// NaN), which its pass flags; with delta finite, |delta| <= scale / B, a1 in [0, 1], so |dW_L| and |db_L| <= scale
// up to rounding, and a finite scale is a power of two at most 2^127, half FLT_MAX; db_{L-1} adds B FP32 values whose
// FP16 roundings were stored finite (each below 65520).
__device__ __forceinline__ void found_overflow(int* overflow, bool bad) {
    if (overflow != nullptr && bad) *overflow = 1;
}
template <typename S> struct bf16_exact { static constexpr bool value = true; };  // S's values are BF16's (or wider)
template <> struct bf16_exact<fp16> { static constexpr bool value = false; };
// bit 15 or 31 set where the float16 value below or above in w is inf or NaN (its exponent all ones)
__device__ __forceinline__ unsigned nonfinite_bits(fp16, unsigned w) { return ((w & 0x7c007c00u) + 0x04000400u) & 0x80008000u; }

// TF32 rounding to nearest (x3tf32's split of dz into big and small parts)
template <typename T>
__device__ __forceinline__ T tf32_nearest(T x) {
    if constexpr (sizeof(T) == 4) return __uint_as_float((__float_as_uint(x) + 0x1000u) & 0xffffe000u);
    else return x;
}

// Per row i of an H x n hidden layer below another (any depth past the output layer's fused pass):
//   dz[i, j] = da[i, j] * a[i, j] * (1 - a[i, j])   in place on da (da = W^T dz of the layer above)
//   db[i]    = sum_j dz[i, j]                        the layer's bias gradient, a fixed-order tree
// One block a row, so the pass reads da and a once and writes dz once (sigmoid_backward and row_sum
// apart read dz a second time). With dz_small (float only), dz holds its TF32 big parts and dz_small
// the small ones, as output_backward writes them for x3tf32's weight gradient of the first layer.
// With overflow (a float16 step's flag), *overflow <- 1 where a dz stored is not finite (found_overflow).
template <typename T, typename S = T>
__global__ void __launch_bounds__(256)
sigmoid_backward_rows(S* __restrict__ da, const S* __restrict__ a, T* __restrict__ db, int cols,
                      T* __restrict__ dz_small, int* __restrict__ overflow) {
    __shared__ T part[256];
    const size_t row = (size_t)blockIdx.x * cols;
    T s = 0;
    bool bad = false;  // a dz stored that is not finite
    int first = 0;  // columns [0, first) done 16 bytes at a time (16-bit S, as bias_sigmoid), the rest one by one
    if constexpr (sizeof(S) == 2) {
        constexpr int V = ELEMENTS_16B<S>;
        if (cols % V == 0 && ((size_t)da | (size_t)a) % 16 == 0) {
            for (int j = V * threadIdx.x; j < cols; j += V * blockDim.x) {
                const uint4 a_raw = *reinterpret_cast<const uint4*>(a + row + j);
                uint4 d_raw = *reinterpret_cast<const uint4*>(da + row + j);
                const S* av = reinterpret_cast<const S*>(&a_raw);
                S* dv = reinterpret_cast<S*>(&d_raw);
#pragma unroll
                for (int i = 0; i < V; ++i) {
                    const T v = widen(av[i]), d = widen(dv[i]) * v * (T(1) - v);
                    dv[i] = narrow<S>(d);
                    if constexpr (!bf16_exact<S>::value) bad |= !isfinite(widen(dv[i]));  // float16's
                    s += d;
                }
                *reinterpret_cast<uint4*>(da + row + j) = d_raw;
            }
            first = cols;
        }
    }
    for (int j = first + threadIdx.x; j < cols; j += blockDim.x) {
        const T v = widen(a[row + j]);
        const T d = widen(da[row + j]) * v * (T(1) - v);
        if (dz_small != nullptr) {
            const T big = tf32_nearest(d);
            da[row + j] = narrow<S>(big);
            dz_small[row + j] = tf32_nearest(d - big);
        } else {
            const S stored = narrow<S>(d);
            da[row + j] = stored;
            if constexpr (!bf16_exact<S>::value) bad |= !isfinite(widen(stored));  // float16's
        }
        s += d;
    }
    found_overflow(overflow, bad);
    part[threadIdx.x] = s;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w >>= 1) {
        if (threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) db[blockIdx.x] = part[0];
}

// out[i] = sum_j X[i, j]: bias gradients (row sums of delta) and totals. One block a row, each thread
// with ROW_SUM_ILP sums of its own whose loads go out together (a sum a thread waits out one round trip
// to memory after another: docs/DECISIONS.md, D43), then a tree in a fixed order, so the result does
// not change from run to run.
#define ROW_SUM_THREADS 1024
#define ROW_SUM_ILP 4
template <typename T>
__global__ void __launch_bounds__(ROW_SUM_THREADS) row_sum(const T* __restrict__ X, T* __restrict__ out, int rows, int cols) {
    __shared__ T part[ROW_SUM_THREADS];
    const T* x = X + (size_t)blockIdx.x * cols;
    const int step = blockDim.x;
    T s[ROW_SUM_ILP] = {};
    int j = threadIdx.x;
    for (; j + (ROW_SUM_ILP - 1) * step < cols; j += ROW_SUM_ILP * step) {
#pragma unroll
        for (int u = 0; u < ROW_SUM_ILP; ++u) s[u] += x[j + u * step];
    }
#pragma unroll
    for (int u = 0; u < ROW_SUM_ILP; ++u) if (j + u * step < cols) s[u] += x[j + u * step];
    T t = 0;
#pragma unroll
    for (int u = 0; u < ROW_SUM_ILP; ++u) t += s[u];
    part[threadIdx.x] = t;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w >>= 1) {
        if (threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = part[0];
}

// The whole SGD + L2 update in one launch over the fused parameter and gradient buffers:
//   p <- p - lr * (g + reg_s * p), reg_s = reg on weight segments, 0 on biases.
// Segment s covers [ends[s-1], ends[s]) of the buffers.
// p -= lr (g + reg p); with `rounded` (a half-precision step's), rounded = p in S too: the weights its
// GEMMs read, made in this pass rather than in a copy of P at the next step's start. A thread 16 bytes of p and
// of g, and its rounded values in one store, so that a warp's stores are contiguous (D70); one value at a time where
// they are not whole or aligned.
// SCALED (float16's loss scale): g / *scale, nothing written where *overflow (read with p and g, not before them).
template <typename S, int V>
struct alignas(V * sizeof(S)) Packed { S v[V]; };

template <bool SCALED, typename T, typename S>
__device__ __forceinline__ void update_16_bytes(T* p, const T* __restrict__ g, size_t n, T lr, const long long* __restrict__ ends,
                                           const T* __restrict__ regs, int nseg, const T* __restrict__ scale,
                                           const int* __restrict__ overflow, S* __restrict__ rounded,
                                           size_t block) {
    constexpr int V = ELEMENTS_16B<T>;
    const size_t e0 = V * (block * blockDim.x + threadIdx.x);
    if (e0 >= n) return;
    const bool vectorized = e0 + V <= n && ((size_t)p | (size_t)g) % 16 == 0 &&
                            (size_t)rounded % sizeof(Packed<S, V>) == 0;
    alignas(16) T w[V], d[V];
    if (vectorized) {
        *reinterpret_cast<uint4*>(w) = *reinterpret_cast<const uint4*>(p + e0);
        *reinterpret_cast<uint4*>(d) = *reinterpret_cast<const uint4*>(g + e0);
    } else {
#pragma unroll
        for (int i = 0; i < V; ++i) w[i] = e0 + i < n ? p[e0 + i] : T(0), d[i] = e0 + i < n ? g[e0 + i] : T(0);
    }
    const T sc = SCALED ? *scale : T(1);
    if (SCALED && *overflow) return;  // skipped: p and rounded both as they were
    int s = 0;
    Packed<S, V> r;
#pragma unroll
    for (int i = 0; i < V; ++i) {
        while (s < nseg - 1 && e0 + i >= (size_t)ends[s]) ++s;
        w[i] = w[i] - lr * ((SCALED ? d[i] / sc : d[i]) + regs[s] * w[i]);
        r.v[i] = narrow<S>(w[i]);
    }
    if (vectorized) {
        *reinterpret_cast<uint4*>(p + e0) = *reinterpret_cast<const uint4*>(w);
        if (rounded != nullptr) *reinterpret_cast<Packed<S, V>*>(rounded + e0) = r;
        return;
    }
    for (int i = 0; i < V && e0 + i < n; ++i) {
        p[e0 + i] = w[i];
        if (rounded != nullptr) rounded[e0 + i] = r.v[i];
    }
}

template <typename T, typename S = T>
__global__ void sgd_update(T* p, const T* __restrict__ g, size_t n, T lr, const long long* __restrict__ ends,
                           const T* __restrict__ regs, int nseg, S* __restrict__ rounded) {
    update_16_bytes<false>(p, g, n, lr, ends, regs, nseg, (const T*)nullptr, (const int*)nullptr, rounded, blockIdx.x);
}

// sgd_update with the fused output layer's reduction in its launch (one GPU; D77). G's last (C + 1) H + C values,
// db_{L-1}, dW_L and db_L (db_L where sums = C: a 16-bit pass's), are summed from output_backward's partials (part,
// `blocks` of them, b = 0, 1, ... in order, as output_backward_reduce sums them) by the launch's first `first` blocks,
// a value a thread, which write the sum to G and update P with it; the other blocks update P[0, tail) from G as
// sgd_update does. The sums' blocks come first, so that they run beside the update's, not after it as a launch of
// their own. With scale (float16's loss scale), as sgd_update_scaled: nothing written to P where *overflow, the
// gradients divided by *scale; the sums need no check of their own (found_overflow's note says why: D78).
template <typename T, typename S = T>
__global__ void sgd_update_reduced(T* p, T* __restrict__ g, size_t n, T lr, const long long* __restrict__ ends,
                                   const T* __restrict__ regs, int nseg, S* __restrict__ rounded,
                                   const T* __restrict__ part, int C, int H, int blocks, int sums, int first,
                                   const T* __restrict__ scale, const int* __restrict__ overflow) {
    const size_t whole = (size_t)(C + 1) * H, tail = n - whole - C;
    if (blockIdx.x >= first) {
        if (scale != nullptr) update_16_bytes<true>(p, g, tail, lr, ends, regs, nseg, scale, overflow, rounded,
                                                    blockIdx.x - first);
        else update_16_bytes<false>(p, g, tail, lr, ends, regs, nseg, scale, overflow, rounded, blockIdx.x - first);
        return;
    }
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x, e = tail + i;
    if (e >= n) return;
    T s = 0;
    if (i < whole || sums) {
        const T* q = i < H ? part + (size_t)C * H + i : i < whole ? part + (i - H) : part + blocks * whole + (i - whole);
        const size_t stride = i < whole ? whole : C;
        for (int b = 0; b < blocks; ++b) s += q[b * stride];
        g[e] = s;
    } else {
        s = g[e];  // db_L from a row_sum pass of its own (sums = 0: an FP32 step's)
    }
    const T sc = scale != nullptr ? *scale : T(1);
    if (scale != nullptr && *overflow) return;  // skipped: p and rounded as they were
    const T w = sgd(p[e], scale != nullptr ? s / sc : s, lr, reg_at(e, ends, regs, nseg));
    p[e] = w;
    if (rounded != nullptr) rounded[e] = narrow<S>(w);
}

// Dynamic loss scaling on the device (a float16 step; inside the step's or the epoch's graph):
// overflow[0] <- 1 where any gradient is not finite (0 before: zeroed when allocated, then by the last
// step's loss_scale_update), the update skipped then, else made with the gradients divided by the scale;
// then the scale follows, as LossScale in perflab/train/half.py: halved on overflow, doubled after
// `growth` good steps in a row, and overflow is reset for the next step (no launch of its own).
// counts: good steps in a row, overflowed steps in a row, overflowed steps in all.
// find_overflow: a thread four gradients, loaded as one 16-byte piece where g is so aligned (a grid-stride loop of
// one value a load was slower: docs/DECISIONS.md, D69); launched only where the passes that store the FP16
// gradients have not set the flag themselves (found_overflow: G exchanged, or the output layer unfused).
template <typename T>
__global__ void find_overflow(const T* __restrict__ g, size_t n, int* overflow) {
    const size_t e = 4 * ((size_t)blockIdx.x * blockDim.x + threadIdx.x);
    bool bad = false;
    if (sizeof(T) == 4 && e + 4 <= n && (size_t)g % 16 == 0) {
        const float4 v = *reinterpret_cast<const float4*>(g + e);
        bad = !isfinite(v.x) || !isfinite(v.y) || !isfinite(v.z) || !isfinite(v.w);
    } else {
        for (size_t i = e; i < n && i < e + 4; ++i) bad |= !isfinite(g[i]);
    }
    if (bad) *overflow = 1;
}

template <typename T, typename S = T>
__global__ void sgd_update_scaled(T* p, const T* __restrict__ g, size_t n, T lr, const long long* __restrict__ ends,
                                  const T* __restrict__ regs, int nseg, const T* __restrict__ scale,
                                  const int* __restrict__ overflow, S* __restrict__ rounded) {
    update_16_bytes<true>(p, g, n, lr, ends, regs, nseg, scale, overflow, rounded, blockIdx.x);
}

template <typename T>
__global__ void loss_scale_update(T* scale, int* overflow, long long* counts, int growth) {
    if (*overflow) {
        *overflow = 0;
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
// round trips (docs/DECISIONS.md, D44).
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
// Block: 32 lanes of V columns each (FW_BYTES a lane, at least one element: one load a row where rows
// hold whole Vs and z1 is aligned to them) x 8 warps over FW_ROWS rows, whose slice of W2 (and b1) sits
// in shared memory (read as broadcasts); FW_UNROLL rows' loads issued before any is used. 8 bytes a lane
// and 8 rows ran fastest of the variants timed (docs/DECISIONS.md, D45).
#define FW_ROWS 128
#define FW_UNROLL 8
#define FW_BYTES 8
template <int BYTES> struct Bytes;  // a register of BYTES bytes, loaded and stored at once
template <> struct Bytes<4> { using type = unsigned; };
template <> struct Bytes<8> { using type = uint2; };
template <> struct Bytes<16> { using type = uint4; };
template <typename T, int CMAX>
__global__ void __launch_bounds__(256)
output_forward(const T* __restrict__ W2, const T* __restrict__ b1, T* z1, T* __restrict__ part, int C, int H, int n) {
    constexpr int V = FW_BYTES > sizeof(T) ? FW_BYTES / sizeof(T) : 1;
    using Lane = typename Bytes<V * sizeof(T)>::type;
    // W2's slice and b1's, then (reused once they are done with) the 8 warps' sums of one of the V columns
    constexpr int SLICE = FW_ROWS * (CMAX + 1), SUMS = 8 * 32 * (CMAX + 1);
    __shared__ T smem[SLICE > SUMS ? SLICE : SUMS];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, j = (blockIdx.x * 32 + lane) * V;
    const int r0 = blockIdx.y * FW_ROWS, rows = min(FW_ROWS, H - r0);
    const bool whole = n % V == 0 && (size_t)z1 % sizeof(Lane) == 0;
    T* w = smem;                      // w[r * CMAX + c] = W2[c, r0 + r]
    T* bias = smem + FW_ROWS * CMAX;  // bias[r] = b1[r0 + r]
    for (int e = threadIdx.x; e < rows * CMAX; e += blockDim.x) {
        const int r = e / CMAX, c = e % CMAX;
        w[e] = c < C ? W2[(size_t)c * H + r0 + r] : T(0);
    }
    for (int r = threadIdx.x; r < rows; r += blockDim.x) bias[r] = b1[r0 + r];
    __syncthreads();
    T acc[V][CMAX];
#pragma unroll
    for (int v = 0; v < V; ++v)
#pragma unroll
        for (int c = 0; c < CMAX; ++c) acc[v][c] = 0;
    if (j < n) {
        for (int rb = warp; rb < rows; rb += 8 * FW_UNROLL) {
            Lane raw[FW_UNROLL];  // a row's V elements as one register (T's view: a below)
#pragma unroll
            for (int u = 0; u < FW_UNROLL; ++u) {
                const int r = rb + 8 * u;
                const T* row = z1 + (size_t)(r0 + r) * n + j;
                T* a = reinterpret_cast<T*>(&raw[u]);
                if (r < rows && whole) {
                    raw[u] = *reinterpret_cast<const Lane*>(row);
                } else {
#pragma unroll
                    for (int v = 0; v < V; ++v) a[v] = r < rows && j + v < n ? row[v] : T(0);
                }
            }
#pragma unroll
            for (int u = 0; u < FW_UNROLL; ++u) {
                const int r = rb + 8 * u;
                if (r >= rows) continue;
                T* row = z1 + (size_t)(r0 + r) * n + j;
                T* a = reinterpret_cast<T*>(&raw[u]);
#pragma unroll
                for (int v = 0; v < V; ++v) {
                    a[v] = sigmoid(a[v] + bias[r]);
#pragma unroll
                    for (int c = 0; c < CMAX; ++c) acc[v][c] += w[r * CMAX + c] * a[v];
                }
                if (whole) {
                    *reinterpret_cast<Lane*>(row) = raw[u];
                } else {
#pragma unroll
                    for (int v = 0; v < V; ++v) if (j + v < n) row[v] = a[v];
                }
            }
        }
    }
#pragma unroll
    for (int v = 0; v < V; ++v) {
        __syncthreads();  // the slice (then the last column's sums) is done with: its space takes the warps' sums
#pragma unroll
        for (int c = 0; c < CMAX; ++c) smem[(warp * 32 + lane) * (CMAX + 1) + c] = acc[v][c];
        __syncthreads();
        if (warp == 0 && j + v < n) {
            for (int c = 0; c < C; ++c) {
                T s = 0;
                for (int k = 0; k < 8; ++k) s += smem[(k * 32 + lane) * (CMAX + 1) + c];
                part[((size_t)blockIdx.y * C + c) * n + j + v] = s;
            }
        }
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

template <typename T, int CMAX>
__global__ void __launch_bounds__(256)
output_backward(const T* __restrict__ W2, const T* __restrict__ delta, const T* __restrict__ a1, T* __restrict__ dz1,
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
        // memory-bound kernel needs that many bytes in flight (one column at a time fell well short
        // of the device's bandwidth: docs/DECISIONS.md, D56)
        for (int jb = j0 + lane; jb < jend; jb += 32 * BW_UNROLL) {
            T a[BW_UNROLL][BW_ROWS], d[BW_UNROLL][CMAX];
#pragma unroll
            for (int u = 0; u < BW_UNROLL; ++u) {
                const int j = jb + 32 * u;
                const bool in = j < jend;
#pragma unroll
                for (int r = 0; r < BW_ROWS; ++r) a[u][r] = (in && h0 + r < H) ? a1[(size_t)(h0 + r) * n + j] : T(0);
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
                            dz1[at] = big;
                            dz1_small[at] = tf32_nearest(v - big);
                        } else {
                            dz1[at] = v;
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

// output_backward for 16-bit a1 and dz1, on the tensor cores (mma.sync m16n8k16, BF16 in, FP32
// accumulated). The scalar kernel above spent its time loading a column's C deltas for every two rows
// (docs/DECISIONS.md, D46); here a warp's two products are MMAs:
//   D = W2^T delta (16 rows x 8 columns a tile, K = 16 classes),  dz1 = D o a1 o (1 - a1)
//   P += delta a1^T  (16 classes x 8 rows a tile, K = 16 columns)
// and a lane moves 32 contiguous bytes of a1 (and of dz1) a row at a time. FP32 accuracy is kept by
// splitting each FP32 operand into BF16 high and low parts (x = hi + lo to 2^-16; products hi*hi +
// hi*lo + lo*hi); an FP16 a1 is exactly hi + lo too. Block: HB_WARPS warps of 16 rows (HB_ROWS) over
// HB_COLS columns, whose deltas (high and low parts) sit in shared memory with each 64-column chunk's
// columns permuted so that an accumulator tile's columns are a lane's contiguous ones:
//   chunk column o = 16 t + 2 k + e  sits at position 8 k + 2 t + e  (lane t of n-tile k, e = 0, 1).
#define HB_ROWS 16
#define HB_COLS 128
#define HB_WARPS 4
#define HB_PITCH (HB_COLS + 8)  // bf16s a row of the staged deltas: ldmatrix's 8 rows in 8 bank groups

// x's high BF16 part (to nearest) and the rest's, each pair packed as pack_bf16 does
__device__ __forceinline__ void split_bf16(float x0, float x1, unsigned& hi, unsigned& lo) {
    hi = pack_bf16(x0, x1);
    lo = pack_bf16(x0 - __uint_as_float(hi << 16), x1 - __uint_as_float(hi & 0xffff0000u));
}
__device__ __forceinline__ void mma_bf16(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
#if __CUDA_ARCH__ >= 800
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}
// x's high FP16 part (to nearest) and the rest's times FP16_LOW_SCALE, each pair packed as pack_half(fp16{}, ...) does,
// for |x| < FP16_HIGH_MAX. Scaled, the rest stays in FP16's normal range down to |x| = 2^-14, where the high part
// turns subnormal: hi + lo / FP16_LOW_SCALE is x to 2^-22 of |x| above that, and to 2^-36 below (the products with
// the low parts are summed apart, then scaled back exactly).
constexpr float FP16_HIGH_MAX = 65504.f, FP16_LOW_SCALE = 2048.f;
__device__ __forceinline__ void split_fp16(float x0, float x1, unsigned& hi, unsigned& lo) {
    hi = pack_half(fp16{}, x0, x1);
    const float2 h = unpack_half(fp16{}, hi);
    lo = pack_half(fp16{}, (x0 - h.x) * FP16_LOW_SCALE, (x1 - h.y) * FP16_LOW_SCALE);
}
__device__ __forceinline__ void mma_fp16(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
#if __CUDA_ARCH__ >= 800
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}
template <bool TRANS>
__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], const void* smem) {
#if __CUDA_ARCH__ >= 800
    const unsigned at = (unsigned)__cvta_generic_to_shared(smem);
    if (TRANS)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(at));
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(at));
#endif
}

// a lane's 16 columns [j, j + 16) of row h as 8 words (2 values each; zero outside the matrix)
template <typename S>
__device__ __forceinline__ void load_row16(unsigned (&w)[8], const S* x, int h, int j, int H, int n, bool vec) {
    if (h < H && vec && j + 16 <= n) {
        const uint4* p = reinterpret_cast<const uint4*>(x + (size_t)h * n + j);
        const uint4 v0 = p[0], v1 = p[1];
        w[0] = v0.x, w[1] = v0.y, w[2] = v0.z, w[3] = v0.w, w[4] = v1.x, w[5] = v1.y, w[6] = v1.z, w[7] = v1.w;
        return;
    }
    const unsigned short* q = reinterpret_cast<const unsigned short*>(x) + (size_t)h * n;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const unsigned lo = (h < H && j + 2 * i < n) ? q[j + 2 * i] : 0u;
        const unsigned hi = (h < H && j + 2 * i + 1 < n) ? q[j + 2 * i + 1] : 0u;
        w[i] = lo | (hi << 16);
    }
}
template <typename S>
__device__ __forceinline__ void store_row16(const unsigned (&w)[8], S* x, int h, int j, int H, int n, bool vec) {
    if (h >= H) return;
    if (vec && j + 16 <= n) {
        uint4* p = reinterpret_cast<uint4*>(x + (size_t)h * n + j);
        p[0] = make_uint4(w[0], w[1], w[2], w[3]), p[1] = make_uint4(w[4], w[5], w[6], w[7]);
        return;
    }
    unsigned short* q = reinterpret_cast<unsigned short*>(x) + (size_t)h * n;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        if (j + 2 * i < n) q[j + 2 * i] = (unsigned short)(w[i] & 0xffffu);
        if (j + 2 * i + 1 < n) q[j + 2 * i + 1] = (unsigned short)(w[i] >> 16);
    }
}

template <typename S>
__global__ void __launch_bounds__(HB_WARPS * 32)
output_backward_half(const float* __restrict__ W2, const float* __restrict__ delta, const S* __restrict__ a1,
                     S* __restrict__ dz1, float* __restrict__ part, int C, int H, int n, float* __restrict__ db2_part,
                     int* __restrict__ overflow) {
    __shared__ __align__(16) unsigned short dh[16 * HB_PITCH], dl[16 * HB_PITCH];  // delta's high and low parts
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
    const int j0 = blockIdx.x * HB_COLS, cols = min(HB_COLS, n - j0);
    const int h0 = (blockIdx.y * HB_WARPS + warp) * HB_ROWS;
    // delta's 16 x HB_COLS values, every load of a thread issued before the first is used (a loop of load, then
    // use, waited out one round trip after another: D71)
    constexpr int THREADS = HB_WARPS * 32, STAGED = 16 * HB_COLS / THREADS;
    static_assert(16 * HB_COLS % THREADS == 0 && 16 % HB_WARPS == 0 && HB_COLS % 32 == 0, "whole loads a thread");
    const auto delta_at = [&](int c, int o) { return c < C && o < cols ? delta[(size_t)c * n + j0 + o] : 0.f; };
    float x[STAGED];
#pragma unroll
    for (int k = 0; k < STAGED; ++k) {
        const int e = threadIdx.x + k * THREADS;
        x[k] = delta_at(e / HB_COLS, e % HB_COLS);
    }
#pragma unroll
    for (int k = 0; k < STAGED; ++k) {
        const int e = threadIdx.x + k * THREADS, c = e / HB_COLS, o = e % HB_COLS, within = o % 64;
        const int at = c * HB_PITCH + (o - within) + 8 * ((within % 16) / 2) + 2 * (within / 16) + within % 2;
        unsigned hi, lo;
        split_bf16(x[k], 0.f, hi, lo);
        dh[at] = (unsigned short)(hi & 0xffffu), dl[at] = (unsigned short)(lo & 0xffffu);
    }
    // W2^T's fragment (rows h0 + g, h0 + g + 8; classes 2t, 2t + 1, 2t + 8, 2t + 9), high and low parts
    unsigned wh[4], wl[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int h = h0 + g + 8 * (i % 2), c = 2 * t + 8 * (i / 2);
        const float x0 = (h < H && c < C) ? W2[(size_t)c * H + h] : 0.f;
        const float x1 = (h < H && c + 1 < C) ? W2[(size_t)(c + 1) * H + h] : 0.f;
        split_bf16(x0, x1, wh[i], wl[i]);
    }
    __syncthreads();
    const bool vec = n % 8 == 0 && ((size_t)a1 | (size_t)dz1) % 16 == 0;  // every row's 16-column pieces aligned
    float P[2][4] = {}, db[2] = {};  // P[r]: dW2 for classes g, g + 8 at rows h0 + 8 r + 2t, + 1
    unsigned bad = 0;  // nonzero where a float16 dz1 stored is not finite (with overflow: the step's flag)
    unsigned a[2][8];  // rows h0 + g and h0 + g + 8: this lane's 16 columns of the chunk
    load_row16(a[0], a1, h0 + g, j0 + 16 * t, H, n, vec);
    load_row16(a[1], a1, h0 + g + 8, j0 + 16 * t, H, n, vec);
    for (int c0 = 0; c0 < cols; c0 += 64) {
        unsigned next[2][8];  // the next chunk's, loading while this one is worked
        if (c0 + 64 < cols) {
            load_row16(next[0], a1, h0 + g, j0 + c0 + 64 + 16 * t, H, n, vec);
            load_row16(next[1], a1, h0 + g + 8, j0 + c0 + 64 + 16 * t, H, n, vec);
        }
#pragma unroll
        for (int q = 0; q < 4; ++q) {  // 16 positions: n-tiles 2q and 2q + 1, K-tile q of P
            // lanes 0-7 address classes 0-7, 8-15 classes 8-15, of positions 16q + 8 (lane / 16)
            const int at = (lane % 16) * HB_PITCH + c0 + 16 * q + 8 * (lane / 16);
            unsigned bh[4], bl[4], ah[4], al[4];
            ldmatrix_x4<true>(bh, dh + at), ldmatrix_x4<true>(bl, dl + at);    // delta as B: [c][column]
            ldmatrix_x4<false>(ah, dh + at), ldmatrix_x4<false>(al, dl + at);  // delta as A: [c][column]
            // P += delta a1^T: B = a1's rows (g: P[0], g + 8: P[1]), columns of words 2q, 2q + 1
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                unsigned b0 = a[r][2 * q], b1 = a[r][2 * q + 1];
                if (!bf16_exact<S>::value) {  // an FP16 a1 is two BF16 parts
                    const float2 x = unpack_half(S{}, b0), y = unpack_half(S{}, b1);
                    unsigned x_lo, y_lo;
                    split_bf16(x.x, x.y, b0, x_lo), split_bf16(y.x, y.y, b1, y_lo);
                    mma_bf16(P[r], ah, x_lo, y_lo);
                }
                mma_bf16(P[r], ah, b0, b1), mma_bf16(P[r], al, b0, b1);
            }
            // D = W2^T delta for n-tiles 2q (B regs 0, 1) and 2q + 1 (2, 3); dz1 over a1's words
#pragma unroll
            for (int k = 0; k < 2; ++k) {
                float d[4] = {};
                mma_bf16(d, wh, bh[2 * k], bh[2 * k + 1]), mma_bf16(d, wh, bl[2 * k], bl[2 * k + 1]);
                mma_bf16(d, wl, bh[2 * k], bh[2 * k + 1]);
#pragma unroll
                for (int r = 0; r < 2; ++r) {
                    const float2 x = unpack_half(S{}, a[r][2 * q + k]);
                    const float v0 = d[2 * r] * x.x * (1.f - x.x), v1 = d[2 * r + 1] * x.y * (1.f - x.y);
                    db[r] += v0 + v1;
                    a[r][2 * q + k] = pack_half(S{}, v0, v1);
                    if constexpr (!bf16_exact<S>::value) bad |= nonfinite_bits(S{}, a[r][2 * q + k]);  // float16's
                }
            }
        }
        store_row16(a[0], dz1, h0 + g, j0 + c0 + 16 * t, H, n, vec);
        store_row16(a[1], dz1, h0 + g + 8, j0 + c0 + 16 * t, H, n, vec);
        if (c0 + 64 < cols) {
#pragma unroll
            for (int i = 0; i < 8; ++i) a[0][i] = next[0][i], a[1][i] = next[1][i];
        }
    }
    found_overflow(overflow, bad != 0);
    // the first row block's: db2's partial sums over its columns, warp w classes w, w + HB_WARPS, ... (a fixed
    // order), in place of a row_sum pass of its own; a lane's loads all issued before its sums
    if (db2_part != nullptr && blockIdx.y == 0) {
        constexpr int CLASSES = 16 / HB_WARPS, LOADS = HB_COLS / 32;
        float d[CLASSES][LOADS];
#pragma unroll
        for (int q = 0; q < CLASSES; ++q) {
#pragma unroll
            for (int i = 0; i < LOADS; ++i) d[q][i] = delta_at(warp + q * HB_WARPS, lane + 32 * i);
        }
#pragma unroll
        for (int q = 0; q < CLASSES; ++q) {
            float s = 0.f;
#pragma unroll
            for (int i = 0; i < LOADS; ++i) s += d[q][i];
#pragma unroll
            for (int w = 16; w > 0; w >>= 1) s += __shfl_xor_sync(0xffffffffu, s, w);
            const int c = warp + q * HB_WARPS;
            if (lane == 0 && c < C) db2_part[(size_t)blockIdx.x * C + c] = s;
        }
    }
    // the block's partial sums: dW2 (classes g, g + 8; rows 2t, 2t + 1 of each 8), db1 (the row's 4 lanes')
    float* out = part + (size_t)blockIdx.x * (C + 1) * H;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int h = h0 + 8 * r + 2 * t;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int c = g + 8 * (i / 2), row = h + i % 2;
            if (c < C && row < H) out[(size_t)c * H + row] = P[r][i];
        }
        float s = db[r];
        s += __shfl_xor_sync(0xffffffffu, s, 1);
        s += __shfl_xor_sync(0xffffffffu, s, 2);
        if (t == 0 && h0 + g + 8 * r < H) out[(size_t)C * H + h0 + g + 8 * r] = s;
    }
}

// output_forward for 16-bit z1, on the tensor cores: a1 = sigmoid(z1 + b1) written over z1, and
//   part[g][c][j] = sum_{h in row block g} W2[c, h] a1[h, j]      (FW_ROWS rows a block, as output_forward)
// as mma.sync m16n8k16 (M = 16 classes, K = 16 rows, N = 8 columns), W2 split into high and low parts, so the sums
// keep about FP32's accuracy: BF16 parts for a BF16 a1; for an FP16 a1, FP16 parts (split_fp16), a1 read as stored
// (two MMAs where BF16 parts of both took three: docs/DECISIONS.md, D79), or BF16 parts of both in a warp that holds
// a W2 value past FP16's range. Block: 8 warps over HF_COLS = 64 columns, warp w the block's K-tile w (16 rows),
// summed over the warps through shared memory at the end. (A first version gave a warp 64 columns over all 128
// rows: 4 warps an SM at B = 3200, each waiting out its instructions' latencies one after another, ran slower than
// the scalar kernel: D46.) A lane loads and stores 16 contiguous bytes of each of rows 2t, 2t + 1, 2t + 8, 2t + 9
// of its warp's tile, whose columns 8g + i are column g of n-tile i; its accumulators are then classes g, g + 8 at
// columns 16t + i (n-tile i's column 2t) and 16t + 8 + i (2t + 1).
#define HF_COLS 64
template <typename S>
__device__ __forceinline__ void bf16_parts(S, float x0, float x1, unsigned& hi, unsigned& lo) {
    split_bf16(x0, x1, hi, lo);  // an FP16 value is exactly BF16 high + low
}
__device__ __forceinline__ void bf16_parts(bf16, float x0, float x1, unsigned& hi, unsigned& lo) {
    hi = pack_bf16(x0, x1), lo = 0u;  // a BF16 value is its own high part
}

template <typename S>
__global__ void __launch_bounds__(FW_ROWS * 2)
output_forward_half(const float* __restrict__ W2, const float* __restrict__ b1, S* z1, float* __restrict__ part,
                    int C, int H, int n) {
    constexpr int WARPS = FW_ROWS / 16;
    static_assert(WARPS == HF_COLS / 8, "the sum over the warps gives warp q the block's n-tile q");
    __shared__ float sums[WARPS][32][32];  // [warp][accumulator][lane]
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
    const int r0 = blockIdx.y * FW_ROWS + warp * 16, jc = blockIdx.x * HF_COLS, j = jc + 8 * g;
    const bool vec = n % 8 == 0 && (size_t)z1 % 16 == 0 && j + 8 <= n;
    unsigned w[4][4];  // rows 2t, 2t + 1, 2t + 8, 2t + 9 of the tile: 8 columns each, loaded first
#pragma unroll
    for (int m = 0; m < 4; ++m) {
        const int h = r0 + 2 * t + m % 2 + 8 * (m / 2);
        if (h < H && vec) {
            const uint4 x = *reinterpret_cast<const uint4*>(z1 + (size_t)h * n + j);
            w[m][0] = x.x, w[m][1] = x.y, w[m][2] = x.z, w[m][3] = x.w;
        } else {
            const unsigned short* q = reinterpret_cast<const unsigned short*>(z1) + (size_t)h * n;
#pragma unroll
            for (int i = 0; i < 4; ++i)
                w[m][i] = (h < H && j + 2 * i < n ? q[j + 2 * i] : 0u) | ((h < H && j + 2 * i + 1 < n ? q[j + 2 * i + 1] : 0u) << 16);
        }
    }
    unsigned wh[4], wl[4];  // A = W2[c][h]: classes g, g + 8; rows 2t, 2t + 1 and 2t + 8, 2t + 9
    float x[4][2];
    bool wide = false;  // a W2 value past FP16_HIGH_MAX: the warp's float16 sums take BF16 parts (as bfloat16's)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int c = g + 8 * (i % 2), h = r0 + 2 * t + 8 * (i / 2);
        x[i][0] = (c < C && h < H) ? W2[(size_t)c * H + h] : 0.f;
        x[i][1] = (c < C && h + 1 < H) ? W2[(size_t)c * H + h + 1] : 0.f;
        wide |= !(fabsf(x[i][0]) < FP16_HIGH_MAX && fabsf(x[i][1]) < FP16_HIGH_MAX);
    }
    const bool in_fp16 = !bf16_exact<S>::value && !__any_sync(0xffffffffu, wide);  // the same in every lane
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        if (in_fp16) split_fp16(x[i][0], x[i][1], wh[i], wl[i]);
        else split_bf16(x[i][0], x[i][1], wh[i], wl[i]);
    }
#pragma unroll
    for (int m = 0; m < 4; ++m) {
        const int h = r0 + 2 * t + m % 2 + 8 * (m / 2);
        const float bias = h < H ? b1[h] : 0.f;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const float2 z = unpack_half(S{}, w[m][i]);
            w[m][i] = pack_half(S{}, sigmoid_approx(z.x + bias), sigmoid_approx(z.y + bias));  // a1 as stored, as the GEMMs read it
        }
        if (h < H && vec) {
            *reinterpret_cast<uint4*>(z1 + (size_t)h * n + j) = make_uint4(w[m][0], w[m][1], w[m][2], w[m][3]);
        } else if (h < H) {
            unsigned short* q = reinterpret_cast<unsigned short*>(z1) + (size_t)h * n;
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                if (j + 2 * i < n) q[j + 2 * i] = (unsigned short)(w[m][i] & 0xffffu);
                if (j + 2 * i + 1 < n) q[j + 2 * i + 1] = (unsigned short)(w[m][i] >> 16);
            }
        }
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) {  // n-tile i: column g is this lane's column j + i
        float acc[4] = {};
        if (in_fp16) {  // a1 as stored, rows (2t, 2t + 1) and (2t + 8, 2t + 9) of column j + i: two MMAs, not three
            const unsigned pick = i % 2 ? 0x7632u : 0x5410u, b0 = __byte_perm(w[0][i / 2], w[1][i / 2], pick);
            const unsigned b1 = __byte_perm(w[2][i / 2], w[3][i / 2], pick);
            float low[4] = {};
            mma_fp16(acc, wh, b0, b1), mma_fp16(low, wl, b0, b1);
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[e] += low[e] * (1.f / FP16_LOW_SCALE);
        } else {
            float v[4];  // a1 as stored at rows 2t, 2t + 1, 2t + 8, 2t + 9 of column j + i (0 past H)
#pragma unroll
            for (int m = 0; m < 4; ++m) {
                const float2 s = unpack_half(S{}, w[m][i / 2]);
                v[m] = r0 + 2 * t + m % 2 + 8 * (m / 2) < H ? (i % 2 ? s.y : s.x) : 0.f;
            }
            unsigned b0h, b0l, b1h, b1l;  // rows (2t, 2t + 1) and (2t + 8, 2t + 9)
            bf16_parts(S{}, v[0], v[1], b0h, b0l);
            bf16_parts(S{}, v[2], v[3], b1h, b1l);
            mma_bf16(acc, wh, b0h, b1h), mma_bf16(acc, wl, b0h, b1h);
            if (!bf16_exact<S>::value) mma_bf16(acc, wh, b0l, b1l);
        }
#pragma unroll
        for (int e = 0; e < 4; ++e) sums[warp][4 * i + e][lane] = acc[e];
    }
    __syncthreads();
    // thread (q, lane), q = warp: n-tile q's 4 accumulators of that lane, summed over the warps in order;
    // classes g (e = 0, 1) and g + 8 (e = 2, 3) at columns jc + 16t + q (e even) and jc + 16t + 8 + q
#pragma unroll
    for (int e = 0; e < 4; ++e) {
        float s = 0.f;
#pragma unroll
        for (int k = 0; k < WARPS; ++k) s += sums[k][4 * warp + e][lane];
        const int c = g + 8 * (e / 2), col = jc + 16 * t + 8 * (e % 2) + warp;
        if (c < C && col < n) part[((size_t)blockIdx.y * C + c) * n + col] = s;
    }
}

// dW2[c][h] = sum_b part[b][c][h], db1[h] = sum_b part[b][C][h], b = 0, 1, ... in order; with db2, also
// db2[c] = sum_b part[blocks][b][c] (the 16-bit pass's row sums of delta, past the blocks' partials). With overflow
// (a float16 step's flag), *overflow <- 1 where a sum is not finite: these FP32 gradients come from delta, not from
// an FP16 one (found_overflow).
template <typename T>
__global__ void output_backward_reduce(const T* __restrict__ part, T* __restrict__ dW2, T* __restrict__ db1, int C,
                                       int H, int blocks, T* __restrict__ db2, int* __restrict__ overflow) {
    const int e = blockIdx.x * blockDim.x + threadIdx.x;
    const size_t whole = (size_t)(C + 1) * H;
    if (e >= whole + (db2 != nullptr ? C : 0)) return;
    T s = 0;
    if (e >= whole) {
        for (int b = 0; b < blocks; ++b) s += part[blocks * whole + (size_t)b * C + (e - whole)];
        db2[e - whole] = s;
    } else {
        for (int b = 0; b < blocks; ++b) s += part[(size_t)b * whole + e];
        if (e < C * H) dW2[e] = s;
        else db1[e - C * H] = s;
    }
    found_overflow(overflow, !isfinite(s));
}
