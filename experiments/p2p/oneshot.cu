// The gradient all-reduce and the SGD update as one kernel: every rank reads each peer's gradient
// through NVLink (CUDA IPC, SM loads of 16 bytes), sums all ranks' in rank order and updates its
// parameters. A barrier at the start (every peer's gradient is final) and at the end (every peer
// has read mine, so my next backward may overwrite it), per block, through flags in each rank's
// memory. flags: [blocks][2 phases][p ranks] unsigned ints; rounds: [blocks] (own memory).

__device__ unsigned long long now_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

__device__ unsigned load_flag(volatile unsigned* f, bool acquire) {
    unsigned v;
    if (acquire) asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(f) : "memory");
    else v = *f;
    return v;
}

// signal: tell every peer this block reached `phase` of round v; wait: until every peer's block has
__device__ void peer_barrier(int phase, unsigned v, int p, int rank, unsigned* my_flags,
                             const unsigned long long* flag_ptrs, long long timeout_ns, bool signal, bool wait,
                             bool fences, int block, bool acq_rel) {
    __syncthreads();
    int r = threadIdx.x;
    if (r < p && r != rank) {
        size_t slot = ((size_t)block * 2 + phase) * p;  // fixed per block, whatever the grid
        unsigned* peer_flag = (unsigned*)flag_ptrs[r] + slot + rank;
        if (signal && acq_rel) {
            asm volatile("st.release.sys.global.u32 [%0], %1;" :: "l"(peer_flag), "r"(v) : "memory");
        } else if (signal) {
            if (fences) __threadfence_system();
            *(volatile unsigned*)peer_flag = v;
        }
        if (wait) {
            volatile unsigned* mine = my_flags + slot + r;
            unsigned long long t0 = now_ns();
            while ((int)(load_flag(mine, acq_rel) - v) < 0) {
                if (now_ns() - t0 > (unsigned long long)timeout_ns) {
                    printf("peer exchange: rank %d block %d waited %lld ns for rank %d\n", rank, block, timeout_ns, r);
                    __trap();
                }
            }
            if (fences && !acq_rel) __threadfence_system();
        }
    }
    __syncthreads();
}

__device__ float4 add(float4 a, float4 b) { return make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w); }
__device__ double2 add(double2 a, double2 b) { return make_double2(a.x + b.x, a.y + b.y); }

template <typename T>
__device__ T reg_at(size_t e, const long long* ends, const T* regs, int nseg) {
    int s = 0;
    while (s < nseg - 1 && e >= (size_t)ends[s]) ++s;
    return regs[s];
}

template <typename T>
__device__ T sgd(T w, T g, T lr, T reg) { return w - lr * (g + reg * w); }

template <typename T>
__device__ float4 sgd4(float4 w, float4 g, T lr, size_t e, const long long* ends, const T* regs, int nseg) {
    return make_float4(sgd(w.x, g.x, lr, reg_at(e, ends, regs, nseg)), sgd(w.y, g.y, lr, reg_at(e + 1, ends, regs, nseg)),
                       sgd(w.z, g.z, lr, reg_at(e + 2, ends, regs, nseg)), sgd(w.w, g.w, lr, reg_at(e + 3, ends, regs, nseg)));
}
template <typename T>
__device__ double2 sgd4(double2 w, double2 g, T lr, size_t e, const long long* ends, const T* regs, int nseg) {
    return make_double2(sgd(w.x, g.x, lr, reg_at(e, ends, regs, nseg)), sgd(w.y, g.y, lr, reg_at(e + 1, ends, regs, nseg)));
}

// what: 1 start barrier, 2 the sum and update, 4 end signal, 8 end wait, 16 no fences, 32 release/acquire (the probe times them apart)
template <typename T, typename V, int U>
__device__ void exchange_update(T* __restrict__ P, const unsigned long long* grads, int p, int rank, size_t n,
                                T lr, const long long* __restrict__ ends, const T* __restrict__ regs, int nseg,
                                T* ce_out, unsigned* my_flags, const unsigned long long* flag_ptrs,
                                unsigned* rounds, long long timeout_ns, int what) {
    constexpr int W = sizeof(V) / sizeof(T);
    __shared__ unsigned v;
    if (threadIdx.x == 0) v = rounds[blockIdx.x] = rounds[blockIdx.x] + 1;
    __syncthreads();  // every thread reads v below
    const bool fences = !(what & 16);
    if (what & 1) peer_barrier(0, v, p, rank, my_flags, flag_ptrs, timeout_ns, true, true, fences, blockIdx.x, what & 32);
    if (what & 2) {
        const size_t stride = (size_t)gridDim.x * blockDim.x, nv = n / W;
        V* Pv = (V*)P;
        for (size_t base = (size_t)blockIdx.x * blockDim.x + threadIdx.x; base < nv; base += U * stride) {
            V g[U], w[U];
#pragma unroll
            for (int u = 0; u < U; ++u) if (base + u * stride < nv) w[u] = Pv[base + u * stride];
            for (int r = 0; r < p; ++r) {
                const V* src = (const V*)grads[r];
#pragma unroll
                for (int u = 0; u < U; ++u) {
                    size_t e = base + u * stride;
                    if (e < nv) { V x = __ldcg(src + e); g[u] = r == 0 ? x : add(g[u], x); }
                }
            }
#pragma unroll
            for (int u = 0; u < U; ++u) {
                size_t e = base + u * stride;
                if (e < nv) Pv[e] = sgd4(w[u], g[u], lr, e * W, ends, regs, nseg);
            }
        }
        size_t e = nv * W + (size_t)blockIdx.x * blockDim.x + threadIdx.x;  // the last n % W, and the CE slot at n
        if (e <= n) {
            T s = 0;
            for (int r = 0; r < p; ++r) s += __ldcg((const T*)grads[r] + e);
            if (e < n) P[e] = sgd(P[e], s, lr, reg_at(e, ends, regs, nseg));
            else *ce_out = s;
        }
    }
    if (what & 4) peer_barrier(1, v, p, rank, my_flags, flag_ptrs, timeout_ns, true, what & 8, fences, blockIdx.x, what & 32);
}

#define ARGS(T) (T* P, const unsigned long long* grads, int p, int rank, size_t n, T lr, const long long* ends, \
    const T* regs, int nseg, T* ce_out, unsigned* my_flags, const unsigned long long* flag_ptrs, unsigned* rounds, \
    long long timeout_ns, int what)
#define PASS (P, grads, p, rank, n, lr, ends, regs, nseg, ce_out, my_flags, flag_ptrs, rounds, timeout_ns, what)
extern "C" __global__ void exchange_update_f32 ARGS(float) { exchange_update<float, float4, 4> PASS; }
extern "C" __global__ void exchange_update_f32_u2 ARGS(float) { exchange_update<float, float4, 2> PASS; }
extern "C" __global__ void exchange_update_f64 ARGS(double) { exchange_update<double, double2, 4> PASS; }

// Before a rank's backward writes its gradient again: every peer has read the last one (the end
// signals of the last exchange's blocks). One block, a thread per exchange block.
extern "C" __global__ void peer_read_wait(int p, int rank, unsigned* my_flags, const unsigned* rounds, long long timeout_ns) {
    int b = threadIdx.x;
    unsigned v = rounds[b];
    for (int r = 0; r < p; ++r) {
        if (r == rank) continue;
        volatile unsigned* mine = my_flags + ((size_t)b * 2 + 1) * p + r;
        unsigned long long t0 = now_ns();
        while ((int)(*mine - v) < 0) {
            if (now_ns() - t0 > (unsigned long long)timeout_ns) {
                printf("peer exchange: rank %d waited %lld ns for rank %d to read block %d\n", rank, timeout_ns, r, b);
                __trap();
            }
        }
    }
}
extern "C" __global__ void exchange_update_f64_u2 ARGS(double) { exchange_update<double, double2, 2> PASS; }
