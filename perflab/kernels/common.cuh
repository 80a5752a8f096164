// Shared by every perflab kernel. Matrices are row-major with a leading dimension; a
// transposed operand is read through its storage: op(A)(i, k) = TA ? A[k * lda + i] : A[i * lda + k].
#pragma once

template <bool T>
__device__ __forceinline__ int at(int r, int c, int ld) { return T ? c * ld + r : r * ld + c; }

template <typename T>
__device__ __forceinline__ T sigmoid(T z) { return T(1) / (T(1) + exp(-z)); }

// D = alpha * acc + beta * C, then the optional epilogue: 1 adds bias[row] and applies sigmoid.
template <typename T, int EPI>
__device__ __forceinline__ T finish(T acc, T alpha, T beta, const T* C, int ldc, const T* bias, int i, int j) {
    T v = alpha * acc;
    if (beta != T(0)) v += beta * C[i * ldc + j];
    if (EPI == 1) v = sigmoid(v + bias[i]);
    return v;
}
