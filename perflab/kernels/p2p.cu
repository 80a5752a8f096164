// --comm p2p: the data-parallel gradient all-reduce and the SGD update in one kernel, for the
// GPUs of one node. Every rank reads each peer's gradient buffer straight through NVLink (mapped
// with CUDA IPC; SM loads of 16 bytes, not cached on the reader's side), adds all ranks' in rank
// order (so every rank's sum has the same bits) and updates its own parameters:
//     P[e] -= lr (sum_r G_r[e] + reg_s P[e]),    and    ce_out = sum_r G_r[n] (the CE slot).
// It is faster than NCCL's all-reduce and sgd_update after it (docs/DECISIONS.md, D15). Each peer's bytes
// cross NVLink once, read by SMs. Ordering, per block b, through flags in each rank's own memory
// ([blocks][2][p] unsigned ints, a count of rounds per block; no reset, so capturable):
//   start: tell every peer "my round v began" (so my gradient is final: kernels before this one
//          on my stream are done), wait until every peer says the same; then read;
//   end:   tell every peer "I have read your round v". The wait for that is peer_read_wait,
//          launched before this rank's backward next writes its gradient: by then it has
//          long arrived, where a wait at the end of this kernel cost time (docs/DECISIONS.md, D55).
// From p = 3 the exchange is two-shot (exchange_update_two_shot): one-shot pulls (p - 1) whole gradients
// into each GPU, two-shot 2 (p - 1) / p of one (at p = 4, 1.5 instead of 3). Rank k owns the k-th of p
// slices of the vectors: it reads that slice of every rank's gradient, sums in rank order, updates it
// in P and writes the new values over its own gradient's slice (which no peer reads: each reads its own
// slice), then says so (a third flag, "mid", released after the writes); every rank then copies each
// peer's updated slice out of that peer's gradient buffer. Every rank's P has the same bits by
// construction, and the "read" flag at the end now also covers the second read.
// A peer silent for timeout_ns is taken for dead: the first waiting block prints who, every one traps,
// so the next CUDA call raises instead of hanging (the host's watchdog, which waits less, speaks
// first). Blocks must all be resident at once (a block spins on its peer's twin): launch at most
// one block of 512 a multiprocessor.

#ifndef __CUDACC_RTC__
extern "C" __host__ __device__ int printf(const char*, ...);  // NVRTC has it built in, nvcc wants it declared
#endif
#include "common.cuh"

__device__ unsigned long long now_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// Plain volatile flags, no fence: the start signal orders nothing this kernel wrote (the gradient
// was written by kernels that ended before it began, and a peer reads it from this GPU's L2), and
// the end signal follows a __syncthreads after which every load of the block has returned (its
// value was used). vLLM's custom all-reduce signals its start and final barriers so; release and
// acquire cost more a step, fences more still (docs/DECISIONS.md, D55).
__device__ void signal_flag(unsigned* flag, unsigned v) {
    asm volatile("st.volatile.global.u32 [%0], %1;" :: "l"(flag), "r"(v) : "memory");
}

// Release / acquire at system scope for the two-shot's mid flag: it orders this kernel's own writes (the
// updated slice) before a peer's reads of them, which a plain volatile store does not.
__device__ void release_flag(unsigned* flag, unsigned v) {
    asm volatile("st.release.sys.global.u32 [%0], %1;" :: "l"(flag), "r"(v) : "memory");
}

__device__ unsigned p2p_spoke = 0;  // a wait has timed out and said so

__device__ void wait_flag(const unsigned* flag, unsigned v, long long timeout_ns, int rank, int peer, int block,
                          bool acquire = false) {
    unsigned long long t0 = now_ns();
    for (;;) {
        unsigned seen;
        if (acquire) asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(seen) : "l"(flag) : "memory");
        else asm volatile("ld.volatile.global.u32 %0, [%1];" : "=r"(seen) : "l"(flag) : "memory");
        if ((int)(seen - v) >= 0) return;  // counts wrap after 2^32 rounds: compare by difference
        if (now_ns() - t0 > (unsigned long long)timeout_ns) {
            if (atomicExch(&p2p_spoke, 1u) == 0)  // one line, not one per waiting block
                printf("--comm p2p: rank %d heard nothing from rank %d for %.0f s (block %d first)\n", rank, peer,
                       timeout_ns * 1e-9, block);
            __trap();
        }
    }
}

__device__ float4 add(float4 a, float4 b) { return make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w); }
__device__ double2 add(double2 a, double2 b) { return make_double2(a.x + b.x, a.y + b.y); }

__device__ float4 sgd_vector(float4 w, float4 g, float lr, size_t e, const long long* ends, const float* regs, int nseg) {
    return make_float4(sgd(w.x, g.x, lr, reg_at(e, ends, regs, nseg)), sgd(w.y, g.y, lr, reg_at(e + 1, ends, regs, nseg)),
                       sgd(w.z, g.z, lr, reg_at(e + 2, ends, regs, nseg)), sgd(w.w, g.w, lr, reg_at(e + 3, ends, regs, nseg)));
}
__device__ double2 sgd_vector(double2 w, double2 g, double lr, size_t e, const long long* ends, const double* regs,
                              int nseg) {
    return make_double2(sgd(w.x, g.x, lr, reg_at(e, ends, regs, nseg)), sgd(w.y, g.y, lr, reg_at(e + 1, ends, regs, nseg)));
}

template <typename T> struct Vector;
template <> struct Vector<float> { using type = float4; };
template <> struct Vector<double> { using type = double2; };

constexpr int FLAG_SLOTS = 3;  // a block's flags from each peer: [0] round begun, [1] read what it needs of mine, [2] mid

// The start barrier of block blockIdx.x: its round (returned to every thread), told to and heard from every peer;
// `release`: what the block wrote before it (the BF16 exchange's own narrowed gradient) is the peers' to read after.
__device__ unsigned begin_round(int p, int rank, const unsigned long long* flags, unsigned* rounds, long long timeout_ns,
                                bool release = false) {
    __shared__ unsigned v;
    if (threadIdx.x == 0) v = rounds[blockIdx.x] = rounds[blockIdx.x] + 1;
    __syncthreads();
    const int r = threadIdx.x;  // thread r < p speaks with rank r
    const size_t start = (size_t)blockIdx.x * FLAG_SLOTS * p;
    if (r < p && r != rank) {
        if (release) release_flag((unsigned*)flags[r] + start + rank, v);
        else signal_flag((unsigned*)flags[r] + start + rank, v);
        wait_flag((const unsigned*)flags[rank] + start + r, v, timeout_ns, rank, r, blockIdx.x, release);
    }
    __syncthreads();
    return v;
}

// The vectors past the last whole one (n % W values), then the CE slot at G[n]: every rank sums them itself.
template <typename T>
__device__ void tail_update(T* P, const unsigned long long* grads, int p, size_t n, size_t nv, T lr,
                            const long long* ends, const T* regs, int nseg, T* ce_out) {
    using V = typename Vector<T>::type;
    constexpr int W = sizeof(V) / sizeof(T);
    size_t e = nv * W + (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e <= n) {
        T s = __ldcg((const T*)grads[0] + e);
        for (int k = 1; k < p; ++k) s += __ldcg((const T*)grads[k] + e);
        if (e < n) P[e] = sgd(P[e], s, lr, reg_at(e, ends, regs, nseg));
        else *ce_out = s;
    }
}

// Vectors [lo, hi) of this block's grid-stride share: every rank's gradient summed in rank order, the
// update applied to P (and the new values also written to copy, where not null).
template <typename T>
__device__ void sum_update(T* P, const unsigned long long* grads, int p, size_t lo, size_t hi, T lr,
                           const long long* ends, const T* regs, int nseg, typename Vector<T>::type* copy) {
    using V = typename Vector<T>::type;
    constexpr int W = sizeof(V) / sizeof(T), U = 4;  // U vectors in flight a thread from each rank
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    V* Pv = (V*)P;
    for (size_t base = lo + (size_t)blockIdx.x * blockDim.x + threadIdx.x; base < hi; base += U * stride) {
        V g[U], w[U];
#pragma unroll
        for (int u = 0; u < U; ++u) if (base + u * stride < hi) w[u] = Pv[base + u * stride];
        for (int k = 0; k < p; ++k) {
            const V* src = (const V*)grads[k];
#pragma unroll
            for (int u = 0; u < U; ++u) {
                size_t e = base + u * stride;
                if (e < hi) { V x = __ldcg(src + e); g[u] = k == 0 ? x : add(g[u], x); }
            }
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            size_t e = base + u * stride;
            if (e < hi) {
                const V updated = sgd_vector(w[u], g[u], lr, e * W, ends, regs, nseg);
                Pv[e] = updated;
                if (copy != nullptr) copy[e] = updated;
            }
        }
    }
}

// grads, flags: p device addresses each (this rank's own at [rank]); n parameters, the CE slot at G[n]
template <typename T>
__global__ void exchange_update(T* __restrict__ P, const unsigned long long* __restrict__ grads,
        int p, int rank, size_t n, T lr, const long long* __restrict__ ends, const T* __restrict__ regs, int nseg,
        T* ce_out, const unsigned long long* __restrict__ flags, unsigned* rounds, long long timeout_ns) {
    using V = typename Vector<T>::type;
    constexpr int W = sizeof(V) / sizeof(T);
    const unsigned v = begin_round(p, rank, flags, rounds, timeout_ns);
    const int r = threadIdx.x;
    const size_t end = (size_t)blockIdx.x * FLAG_SLOTS * p + p;
    const size_t nv = n / W;
    sum_update(P, grads, p, 0, nv, lr, ends, regs, nseg, (V*)nullptr);
    tail_update(P, grads, p, n, nv, lr, ends, regs, nseg, ce_out);
    __syncthreads();  // every thread of the block has read what it needs of the peers
    if (r < p && r != rank) signal_flag((unsigned*)flags[r] + end + rank, v);
}

// The two-shot exchange (p >= 3; the file's head says why). Same arguments as exchange_update.
template <typename T>
__global__ void exchange_update_two_shot(T* __restrict__ P, const unsigned long long* __restrict__ grads,
        int p, int rank, size_t n, T lr, const long long* __restrict__ ends, const T* __restrict__ regs, int nseg,
        T* ce_out, const unsigned long long* __restrict__ flags, unsigned* rounds, long long timeout_ns) {
    using V = typename Vector<T>::type;
    constexpr int W = sizeof(V) / sizeof(T), U = 4;
    const unsigned v = begin_round(p, rank, flags, rounds, timeout_ns);
    const int r = threadIdx.x;
    const size_t end = (size_t)blockIdx.x * FLAG_SLOTS * p + p, mid = end + p;
    const size_t stride = (size_t)gridDim.x * blockDim.x, nv = n / W, first = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    V* Pv = (V*)P;
    const size_t lo = nv * rank / p, hi = nv * (rank + 1) / p;  // this rank's slice
    sum_update(P, grads, p, lo, hi, lr, ends, regs, nseg, (V*)grads[rank]);
    tail_update(P, grads, p, n, nv, lr, ends, regs, nseg, ce_out);
    __syncthreads();  // the block's slice is written (and its reads of the peers done)
    if (r < p && r != rank) {
        release_flag((unsigned*)flags[r] + mid + rank, v);
        wait_flag((const unsigned*)flags[rank] + mid + r, v, timeout_ns, rank, r, blockIdx.x, true);
    }
    __syncthreads();
    for (int j = 1; j < p; ++j) {  // each peer's slice, starting past this rank's own so the peers are read evenly
        const int k = (rank + j) % p;
        const V* src = (const V*)grads[k];
        const size_t klo = nv * k / p, khi = nv * (k + 1) / p;
        for (size_t base = klo + first; base < khi; base += U * stride) {
            V x[U];
#pragma unroll
            for (int u = 0; u < U; ++u) if (base + u * stride < khi) x[u] = __ldcg(src + base + u * stride);
#pragma unroll
            for (int u = 0; u < U; ++u) if (base + u * stride < khi) Pv[base + u * stride] = x[u];
        }
    }
    __syncthreads();
    if (r < p && r != rank) signal_flag((unsigned*)flags[r] + end + rank, v);
}

// Before this rank's backward writes its gradient again: every peer has read the last round of
// it. One block, thread b for exchange block b.
__global__ void peer_read_wait(int p, int rank, const unsigned long long* __restrict__ flags,
                               const unsigned* __restrict__ rounds, int blocks, long long timeout_ns) {
    int b = threadIdx.x;
    if (b >= blocks) return;
    const unsigned* mine = (const unsigned*)flags[rank] + ((size_t)b * FLAG_SLOTS + 1) * p;
    for (int k = 0; k < p; ++k)
        if (k != rank) wait_flag(mine + k, rounds[b], timeout_ns, rank, k, b);
}

// --comm p2p in a bfloat16 run: the peers read each other's gradient in BF16, half the bytes over NVLink. Each
// block first narrows its share of its own FP32 gradient G (the vectors its twin on every peer reads, 8 values a
// 16-byte load; not those the GEMMs wrote in the copy already: D81) into its BF16 copy, which the peers map
// (`halves`: every rank's copy; the batch's CE sum kept in FP32 at ce_slot(n)), then starts the round with a
// release; the sums add the BF16 values in rank order in FP32, update P and write the new values rounded to BF16
// into P_half, the GEMMs' copy. Two-shot (p >= 3): the updated
// slice travels in FP32 through G, as in exchange_update_two_shot, so every rank's P keeps the same bits.
constexpr int BF16_VALUES = 8;  // a 16-byte vector of the BF16 copy

__host__ __device__ size_t ce_slot(size_t n) { return (n + BF16_VALUES - 1) / BF16_VALUES * BF16_VALUES; }

__device__ uint4 narrow8(float4 a, float4 b) {
    return make_uint4(pack_bf16(a.x, a.y), pack_bf16(a.z, a.w), pack_bf16(b.x, b.y), pack_bf16(b.z, b.w));
}
__device__ void widen_add(uint4 x, float* s, bool first) {
    const unsigned w[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const float2 v = unpack_half(bf16{}, w[i]);
        s[2 * i] = first ? v.x : s[2 * i] + v.x;
        s[2 * i + 1] = first ? v.y : s[2 * i + 1] + v.y;
    }
}

// Vectors [lo, hi) of this block's grid-stride share of G, narrowed into `half`: the ones sum_update_bf16 reads. made:
// nmade sorted [lo, hi) ranges of vectors already in `half`, which the weight-gradient GEMMs wrote there in BF16
// (the same rounding of the same FP32 sums), so that their FP32 values were never stored: skipped.
__device__ void narrow_share(const float* G, unsigned short* half, size_t lo, size_t hi, const long long* made,
                             int nmade) {
    const float4* g = (const float4*)G;
    int m = 0;
    for (size_t e = lo + (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < hi; e += (size_t)gridDim.x * blockDim.x) {
        while (m < nmade && e >= (size_t)made[2 * m + 1]) ++m;
        if (m < nmade && e >= (size_t)made[2 * m]) continue;
        ((uint4*)half)[e] = narrow8(g[2 * e], g[2 * e + 1]);
    }
}

// The values past the last whole vector and the CE slot, as tail_update_bf16 reads them.
__device__ void narrow_tail(const float* G, unsigned short* half, size_t n, size_t nv) {
    const size_t e = nv * BF16_VALUES + (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e < n) half[e] = narrow<bf16>(G[e]).bits;
    else if (e == n) *(float*)(half + ce_slot(n)) = G[n];
}

// P[e0 .. e0 + 7] (w, loaded before) updated with the summed gradient s, written to P, to P_half rounded, and to copy
// where not null.
__device__ void update8(float* P, unsigned short* P_half, float* copy, size_t e0, const float4* w, const float* s,
                        float lr, const long long* ends, const float* regs, int nseg) {
    int seg = 0;
    while (seg < nseg - 1 && e0 >= (size_t)ends[seg]) ++seg;
    float v[8] = {w[0].x, w[0].y, w[0].z, w[0].w, w[1].x, w[1].y, w[1].z, w[1].w};
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        while (seg < nseg - 1 && e0 + i >= (size_t)ends[seg]) ++seg;
        v[i] = sgd(v[i], s[i], lr, regs[seg]);
    }
    const float4 na = make_float4(v[0], v[1], v[2], v[3]), nb = make_float4(v[4], v[5], v[6], v[7]);
    float4* Pv = (float4*)(P + e0);
    Pv[0] = na, Pv[1] = nb;
    *(uint4*)(P_half + e0) = narrow8(na, nb);
    if (copy != nullptr) ((float4*)(copy + e0))[0] = na, ((float4*)(copy + e0))[1] = nb;
}

// Vectors [lo, hi) of this block's share: every rank's BF16 gradient summed in rank order, P updated. A thread makes
// about one pass at a step's gradient, so its loads go out together: P's and two ranks' copies at a time.
__device__ void sum_update_bf16(float* P, unsigned short* P_half, const unsigned long long* halves, int p, size_t lo,
                                size_t hi, float lr, const long long* ends, const float* regs, int nseg, float* copy) {
    constexpr int U = 2;  // vectors a thread from each rank (more spill registers at 512 threads a block)
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t base = lo + (size_t)blockIdx.x * blockDim.x + threadIdx.x; base < hi; base += U * stride) {
        float4 w[U][2];
        float s[U][BF16_VALUES];
#pragma unroll
        for (int u = 0; u < U; ++u)
            if (base + u * stride < hi) w[u][0] = ((const float4*)P)[2 * (base + u * stride)], w[u][1] = ((const float4*)P)[2 * (base + u * stride) + 1];
        for (int k = 0; k < p; k += 2) {
            const uint4* a = (const uint4*)halves[k];
            const uint4* b = (const uint4*)halves[k + 1 < p ? k + 1 : k];
            uint4 x[U], y[U];
#pragma unroll
            for (int u = 0; u < U; ++u)
                if (base + u * stride < hi) x[u] = __ldcg(a + base + u * stride), y[u] = __ldcg(b + base + u * stride);
#pragma unroll
            for (int u = 0; u < U; ++u) {
                if (base + u * stride >= hi) continue;
                widen_add(x[u], s[u], k == 0);
                if (k + 1 < p) widen_add(y[u], s[u], false);
            }
        }
#pragma unroll
        for (int u = 0; u < U; ++u)
            if (base + u * stride < hi)
                update8(P, P_half, copy, (base + u * stride) * BF16_VALUES, w[u], s[u], lr, ends, regs, nseg);
    }
}

__device__ void tail_update_bf16(float* P, unsigned short* P_half, const unsigned long long* halves, int p, size_t n,
                                 size_t nv, float lr, const long long* ends, const float* regs, int nseg, float* ce_out) {
    const size_t e = nv * BF16_VALUES + (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e < n) {
        float s = 0.f;
        for (int k = 0; k < p; ++k) s += __uint_as_float((unsigned)__ldcg((const unsigned short*)halves[k] + e) << 16);
        const float v = sgd(P[e], s, lr, reg_at(e, ends, regs, nseg));
        P[e] = v, P_half[e] = narrow<bf16>(v).bits;
    } else if (e == n) {
        float s = 0.f;
        for (int k = 0; k < p; ++k) s += __ldcg((const float*)((const unsigned short*)halves[k] + ce_slot(n)));
        *ce_out = s;
    }
}

// G: this rank's FP32 gradient (n values, the CE at G[n]); halves, grads: every rank's BF16 copy and FP32 gradient;
// made: the vector ranges of this rank's copy its GEMMs wrote (narrow_share).
__global__ void __launch_bounds__(512) exchange_update_bf16(float* __restrict__ P, unsigned short* __restrict__ P_half,
        const unsigned long long* __restrict__ halves, const unsigned long long* __restrict__ grads, int p, int rank,
        size_t n, float lr, const long long* __restrict__ ends, const float* __restrict__ regs, int nseg,
        float* ce_out, const unsigned long long* __restrict__ flags, unsigned* rounds, long long timeout_ns,
        int two_shot, const long long* __restrict__ made, int nmade) {
    const float* G = (const float*)grads[rank];
    unsigned short* own = (unsigned short*)halves[rank];
    const size_t nv = n / BF16_VALUES;
    if (two_shot) {  // rank k reads slice k from the slice's own start
        for (int k = 0; k < p; ++k) narrow_share(G, own, nv * k / p, nv * (k + 1) / p, made, nmade);
    } else {
        narrow_share(G, own, 0, nv, made, nmade);
    }
    narrow_tail(G, own, n, nv);
    const unsigned v = begin_round(p, rank, flags, rounds, timeout_ns, true);
    const int r = threadIdx.x;
    const size_t end = (size_t)blockIdx.x * FLAG_SLOTS * p + p, mid = end + p;
    if (!two_shot) {
        sum_update_bf16(P, P_half, halves, p, 0, nv, lr, ends, regs, nseg, nullptr);
        tail_update_bf16(P, P_half, halves, p, n, nv, lr, ends, regs, nseg, ce_out);
        __syncthreads();
        if (r < p && r != rank) signal_flag((unsigned*)flags[r] + end + rank, v);
        return;
    }
    constexpr int U = 4;
    const size_t stride = (size_t)gridDim.x * blockDim.x, first = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    const size_t lo = nv * rank / p, hi = nv * (rank + 1) / p;
    sum_update_bf16(P, P_half, halves, p, lo, hi, lr, ends, regs, nseg, (float*)G);
    tail_update_bf16(P, P_half, halves, p, n, nv, lr, ends, regs, nseg, ce_out);
    __syncthreads();  // the block's slice is written (and its reads of the peers done)
    if (r < p && r != rank) {
        release_flag((unsigned*)flags[r] + mid + rank, v);
        wait_flag((const unsigned*)flags[rank] + mid + r, v, timeout_ns, rank, r, blockIdx.x, true);
    }
    __syncthreads();
    for (int j = 1; j < p; ++j) {  // each peer's updated slice, in FP32, from its G
        const int k = (rank + j) % p;
        const float4* src = (const float4*)grads[k];
        const size_t klo = nv * k / p, khi = nv * (k + 1) / p;
        for (size_t base = klo + first; base < khi; base += U * stride) {
            float4 x[U][2];
#pragma unroll
            for (int u = 0; u < U; ++u)
                if (base + u * stride < khi) x[u][0] = __ldcg(src + 2 * (base + u * stride)), x[u][1] = __ldcg(src + 2 * (base + u * stride) + 1);
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const size_t e = base + u * stride;
                if (e < khi) {
                    ((float4*)P)[2 * e] = x[u][0], ((float4*)P)[2 * e + 1] = x[u][1];
                    ((uint4*)P_half)[e] = narrow8(x[u][0], x[u][1]);
                }
            }
        }
    }
    __syncthreads();
    if (r < p && r != rank) signal_flag((unsigned*)flags[r] + end + rank, v);
}
