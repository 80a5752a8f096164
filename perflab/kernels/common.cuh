// Shared by every perflab kernel. Matrices are row-major with a leading dimension; a
// transposed operand is read through its storage: op(A)(i, k) = TA ? A[k * lda + i] : A[i * lda + k].
#pragma once

template <bool T>
__device__ __forceinline__ int at(int r, int c, int ld) { return T ? c * ld + r : r * ld + c; }

template <typename T>
__device__ __forceinline__ T sigmoid(T z) { return T(1) / (T(1) + exp(-z)); }

// The sigmoid of a value stored in 16 bits after (a half step's activations): the hardware's exp2 and reciprocal,
// a few FP32 ulps off, far below the half format's rounding, in a fifth of the instructions (docs/DECISIONS.md, D65).
// Past either end: exp2 gives inf or 0, the reciprocal 0 or 1.
__device__ __forceinline__ float sigmoid_approx(float z) {
    float e, r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(-1.4426950408889634f * z));
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(1.f + e));
    return r;
}

// D = alpha * acc + beta * C, then the optional epilogue: 1 adds bias[row] and applies sigmoid.
template <typename T, int EPI>
__device__ __forceinline__ T finish(T acc, T alpha, T beta, const T* C, int ldc, const T* bias, int i, int j) {
    T v = alpha * acc;
    if (beta != T(0)) v += beta * C[i * ldc + j];
    if (EPI == 1) v = sigmoid(v + bias[i]);
    return v;
}

// Half-precision storage for the step's big arrays (activations, their gradients, the images): a
// kernel computes in T (float) and reads and writes S. bf16 and fp16 are their bits (CuPy has no
// bfloat16: perflab holds it in uint16 arrays); float and double pass through.
struct bf16 { unsigned short bits; };
struct fp16 { unsigned short bits; };

__device__ __forceinline__ float widen(float x) { return x; }
__device__ __forceinline__ double widen(double x) { return x; }
__device__ __forceinline__ float widen(bf16 x) { return __uint_as_float((unsigned)x.bits << 16); }
__device__ __forceinline__ float widen(fp16 x) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x.bits));
    return f;
}

template <typename S, typename T>
__device__ __forceinline__ S narrow(T v) { return S(v); }
template <>
__device__ __forceinline__ bf16 narrow<bf16, float>(float v) {  // to nearest, ties to even (sm_80 and later)
    unsigned short h;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(v));
    return bf16{h};
}
template <>
__device__ __forceinline__ fp16 narrow<fp16, float>(float v) {  // to nearest even; past 65504: inf
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v));
    return fp16{h};
}

// Two values in one 32-bit word of 16-bit storage, lo in the low half (to nearest even), and back.
__device__ __forceinline__ unsigned pack_bf16(float lo, float hi) {
    unsigned r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
__device__ __forceinline__ unsigned pack_half(bf16, float lo, float hi) { return pack_bf16(lo, hi); }
__device__ __forceinline__ unsigned pack_half(fp16, float lo, float hi) {
    unsigned r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
__device__ __forceinline__ float2 unpack_half(bf16, unsigned w) {
    return make_float2(__uint_as_float(w << 16), __uint_as_float(w & 0xffff0000u));
}
__device__ __forceinline__ float2 unpack_half(fp16, unsigned w) {
    float lo, hi;
    asm("{.reg .b16 l, h; mov.b32 {l, h}, %2; cvt.f32.f16 %0, l; cvt.f32.f16 %1, h;}" : "=f"(lo), "=f"(hi) : "r"(w));
    return make_float2(lo, hi);
}

// The L2 weight of parameter e: regs[s] of the segment s (ends: each segment's end) that holds it.
template <typename T>
__device__ T reg_at(size_t e, const long long* ends, const T* regs, int nseg) {
    int s = 0;
    while (s < nseg - 1 && e >= (size_t)ends[s]) ++s;
    return regs[s];
}

template <typename T>
__device__ T sgd(T w, T g, T lr, T reg) { return w - lr * (g + reg * w); }  // sgd_update's expression

// sigmoid(z) for a value a step stores in S: sigmoid_approx where S holds 16 bits
template <typename S, typename T>
__device__ __forceinline__ T sigmoid_stored(S, T z) { return sigmoid(z); }
__device__ __forceinline__ float sigmoid_stored(bf16, float z) { return sigmoid_approx(z); }
__device__ __forceinline__ float sigmoid_stored(fp16, float z) { return sigmoid_approx(z); }
