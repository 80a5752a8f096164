// Fused elementwise steps of the training step: each reads its inputs once and writes once.
#include "common.cuh"

// z[i, j] = sigmoid(z[i, j] + b[i]): the forward hidden layer after a GEMM without epilogue.
template <typename T>
__global__ void bias_sigmoid(T* z, const T* __restrict__ b, int rows, int cols) {
    size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e < (size_t)rows * cols) z[e] = sigmoid(z[e] + b[e / cols]);
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
template <typename T>
__global__ void softmax_xent_grad(const T* __restrict__ z, const T* __restrict__ b2, const long long* __restrict__ y,
                                  T* __restrict__ delta, T* __restrict__ ce, int want_ce, int C, int B, T inv_norm) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= B) return;
    T m = z[j] + b2[0];
    for (int c = 1; c < C; ++c) m = max(m, z[c * B + j] + b2[c]);
    T s = 0;
    for (int c = 0; c < C; ++c) s += exp(z[c * B + j] + b2[c] - m);
    int label = (int)y[j];
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
