// The fastest SIMT GEMM here (FP32/FP64 on the CUDA cores). A block computes a BM x BN tile of
// D with (BM/WM) x (BN/WN) warps; each thread a TM x TN block of its warp's WM x WN tile.
// - Operand tiles travel global -> shared with cp.async in 16-byte chunks (element-wise with
//   zero fill at the edges or when a leading dimension is not a multiple of 16 bytes; a tile
//   that lies wholly inside, or past an edge only where reading on is harmless (k_loop), takes
//   a path with no checks and no branches), in a
//   STAGES-deep ring: the copies for step k + STAGES - 1 fly while step k is multiplied, with
//   one barrier a step and no registers spent on staging (but see "xt" below).
// - A tile keeps its storage order in shared memory, padded by 16 bytes a row, or (configs with
//   KV = 0, "xt") a k-contiguous tile travels through registers and is stored transposed, so
//   that every read is along m or n: a thread then needs one k's operands at a time (TM + TN
//   registers, not KV x (TM + TN)), which leaves room for the large thread tiles that issue
//   the fewest non-FMA instructions. The inner loop reads 16-byte vectors along whichever axis
//   is contiguous in shared memory: along k (KV steps at once), or along m or n. Which
//   rows/columns a thread owns follows from that, so that the 8 threads of each 16-byte
//   shared-memory phase hit 8 different bank groups (or broadcast one address).
// - A TF32 tensor-core option (gemm_tf32) shares the tiles and the K loop.
// - Any M, N, K, and any number of blocks: the tiles' K steps are dealt out to the blocks in
//   equal shares (Schedule), so one block a tile, split-K (a multiple of the tiles) and
//   stream-K (a whole number of blocks an SM, persistent) are one code path. A block that
//   covers part of a tile writes its partial sum to the workspace; the last of a tile's blocks
//   to arrive adds them up in block order (the same bits whoever is last) and writes D.
// - The order of the work keeps DRAM traffic down, which under the H100's power cap is clock
//   gained (held for seconds, the SM clock fell below cuBLAS's): a block a tile walks the tiles
//   in groups of rows, and a shared tile's blocks start their shares' steps rotated
//   (docs/DECISIONS.md, D47).
//
// The steps past register blocking (gemm_regblock.cu), each a section marked `// Step N:` below,
// each kept by a measurement (perflab/kernels/progression.py names the result file):
//   4 cp.async ring in CUTLASS's order     5 k-contiguous tiles transposed through registers
//   6 one schedule: tile / split-K / stream-K   7 serpentine FMA order   8 G-wide epilogue writes
//   9 edge tiles without checks            10 CUTLASS's barrier at a shared tile
//  11 programmatic dependent launch        12 DRAM-saving order (groups of rows, rotation)
#include "common.cuh"

__device__ __forceinline__ unsigned smem_addr(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void cp_async16(void* dst, const void* src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_addr(dst)), "l"(src));
}
template <int BYTES>  // copies BYTES, or writes zeros when !ok (src is then never read)
__device__ __forceinline__ void cp_async_zfill(void* dst, const void* src, bool ok) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(smem_addr(dst)), "l"(src), "n"(BYTES),
                 "r"(ok ? BYTES : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

// one read of N elements (4, 8 or 16 bytes), shared or global; L2_ONLY: 16 bytes of global
// memory past the L1 (written by other blocks of this launch)
template <typename T, int N = 16 / sizeof(T), bool L2_ONLY = false>
__device__ __forceinline__ void vload(const T* p, T* r) {
    constexpr int BYTES = N * sizeof(T);
    static_assert(BYTES == 4 || BYTES == 8 || BYTES == 16, "4-, 8- or 16-byte reads");
    static_assert(!L2_ONLY || BYTES == 16, "L2-only reads are 16 bytes");
    auto load = [](const auto* q) { return L2_ONLY ? __ldcg(q) : *q; };
    if constexpr (BYTES == 4) {
        r[0] = *p;
    } else if constexpr (BYTES == 8 && sizeof(T) == 4) {
        float2 v = *reinterpret_cast<const float2*>(p);
        r[0] = v.x; r[1] = v.y;
    } else if constexpr (BYTES == 8) {
        r[0] = *p;
    } else if constexpr (sizeof(T) == 4) {
        float4 v = load(reinterpret_cast<const float4*>(p));
        r[0] = v.x; r[1] = v.y; r[2] = v.z; r[3] = v.w;
    } else {
        double2 v = load(reinterpret_cast<const double2*>(p));
        r[0] = v.x; r[1] = v.y;
    }
}

// one write of N elements (N x sizeof(T) = 4, 8 or 16 bytes, aligned) to global memory
template <typename T, int N>
__device__ __forceinline__ void vstore(T* p, const T* r) {
    constexpr int BYTES = N * sizeof(T);
    static_assert(BYTES == 4 || BYTES == 8 || BYTES == 16, "4-, 8- or 16-byte writes");
    if constexpr (N == 1) *p = r[0];
    else if constexpr (BYTES == 8 && sizeof(T) == 4) *reinterpret_cast<float2*>(p) = make_float2(r[0], r[1]);
    else if constexpr (sizeof(T) == 4) *reinterpret_cast<float4*>(p) = make_float4(r[0], r[1], r[2], r[3]);
    else *reinterpret_cast<double2*>(p) = make_double2(r[0], r[1]);
}

// Step 9: edge tiles: 16-byte zero fills, the overhang on the check-free path (load_tile, k_loop)
// Starts the copy of the R x W tile at (r0, c0) of row-major g (W contiguous) into s[R][W + V];
// elements at rows >= rlim or columns >= clim become 0.
template <typename T, int R, int W, int NT>
__device__ __forceinline__ void load_tile(T* s, const T* __restrict__ g, int ld, int r0, int c0, int rlim, int clim,
                                          bool vec, bool whole, int t) {
    constexpr int V = 16 / sizeof(T), CPR = W / V, CHUNKS = R * CPR;
    static_assert(W % V == 0 && CHUNKS % NT == 0, "tile must split into whole 16-byte chunks per thread");
    if (whole) {  // the tile lies inside and is aligned: no checks, a thread's chunks RS rows apart
        constexpr int RS = NT / CPR;
        static_assert(NT % CPR == 0, "a pass of the block covers whole rows");
        T* dst = s + (t / CPR) * (W + V) + (t % CPR) * V;
        const T* src = g + (size_t)(r0 + t / CPR) * ld + c0 + (t % CPR) * V;
#pragma unroll
        for (int l = 0; l < CHUNKS / NT; ++l) cp_async16(dst + l * RS * (W + V), src + (size_t)l * RS * ld);
        return;
    }
#pragma unroll
    for (int l = 0; l < CHUNKS / NT; ++l) {
        const int e = t + l * NT, r = e / CPR, c = (e % CPR) * V, gr = r0 + r, gc = c0 + c;
        T* dst = s + r * (W + V) + c;
        const T* src = g + (size_t)gr * ld + gc;
        if (vec && gr < rlim && gc + V <= clim) {
            cp_async16(dst, src);
        } else if (gr >= rlim || gc >= clim) {  // wholly outside: one 16-byte zero fill (four 4-byte
            cp_async_zfill<16>(dst, g, false);  // ones slowed the edge tiles' K loops: docs/DECISIONS.md, D48)
        } else {
#pragma unroll
            for (int v = 0; v < V; ++v) {
                const bool ok = gr < rlim && gc + v < clim;
                cp_async_zfill<sizeof(T)>(dst + v, ok ? src + v : g, ok);
            }
        }
    }
}

// Step 5: k-contiguous tiles through registers, stored transposed (xt)
// A k-contiguous R x W tile (R rows of m or n, W of k) at (r0, c0) of row-major g, held in
// registers between its global load and its transposed store to s[W][R + V] (zeros past
// rlim/clim): k_loop issues the load at the start of a step and stores it just before that
// step's barrier, STAGES - 1 steps ahead of the step that reads it.
template <typename T, int R, int W, int NT>
struct Staged {
    static constexpr int V = 16 / sizeof(T), CPR = W / V, PER = R * CPR / NT;
    static_assert(W % V == 0 && (R * CPR) % NT == 0, "tile must split into whole 16-byte chunks per thread");
    T v[PER][V];
    __device__ __forceinline__ void load(const T* __restrict__ g, int ld, int r0, int c0, int rlim, int clim, bool vec,
                                         bool whole, int t) {
        if (whole) {  // as load_tile's
            static_assert(NT % CPR == 0, "a pass of the block covers whole rows");
            const T* src = g + (size_t)(r0 + t / CPR) * ld + c0 + (t % CPR) * V;
#pragma unroll
            for (int l = 0; l < PER; ++l) vload<T>(src + (size_t)l * (NT / CPR) * ld, v[l]);
            return;
        }
#pragma unroll
        for (int l = 0; l < PER; ++l) {
            const int e = t + l * NT, gr = r0 + e / CPR, gc = c0 + (e % CPR) * V;
            const T* src = g + (size_t)gr * ld + gc;
            if (vec && gr < rlim && gc + V <= clim) {
                vload<T>(src, v[l]);
            } else {
#pragma unroll
                for (int i = 0; i < V; ++i) v[l][i] = gr < rlim && gc + i < clim ? src[i] : T(0);
            }
        }
    }
    __device__ __forceinline__ void store(T* s, int t) const {
#pragma unroll
        for (int l = 0; l < PER; ++l) {
            const int e = t + l * NT, r = e / CPR, c = (e % CPR) * V;
#pragma unroll
            for (int i = 0; i < V; ++i) s[(c + i) * (R + V) + r] = v[l][i];
        }
    }
};

// Step 4: cp.async ring, STAGES deep, in CUTLASS's main-loop order (perflab.kernels.progression)
// The K loop every tile kernel shares, ordered as CUTLASS's multistage main loop: tiles of op(A)
// (BM x BK) and op(B) (BK x BN) for this block's share of K stream through a STAGES-deep ring
// in shared memory; within a step, read(As, Bs, kk, buf) fills one of two register buffers
// with the operands of KS steps of k while fma(buf) multiplies the other's. The one barrier a
// step comes before the step's last fma, so a warp arrives with work left and the next step's
// first operands are read while it runs. With XT a k-contiguous operand goes through registers
// (Staged; loaded at the start of a step, stored transposed just before that barrier); the
// other copies go straight to shared memory with cp.async. The block covers k in [kbeg, kend)
// of the tile at (i0, j0), its steps taken from the rot-th on, wrapping round.
template <typename T, bool TA, bool TB, bool XT, int BM, int BN, int BK, int KS, int NT, int STAGES, typename R,
          typename F>
__device__ __forceinline__ void k_loop(T* smem, int M, int N, int K, int i0, int j0, int kbeg, int kend,
                                       const T* __restrict__ A, int lda, const T* __restrict__ B, int ldb, bool vec,
                                       int rot, R&& read, F&& fma) {
    static_assert(STAGES >= 2 && BK % KS == 0 && (BK / KS) % 2 == 0, "an even number of reads a step");
    constexpr int V = 16 / sizeof(T);
    constexpr bool A_REG = XT && !TA, B_REG = XT && TB;  // operands staged in registers
    constexpr int A_ELEMS = (TA || XT) ? BK * (BM + V) : BM * (BK + V);
    constexpr int B_ELEMS = (TB && !XT) ? BN * (BK + V) : BK * (BN + V);
    const int t = threadIdx.x, nk = (kend - kbeg + BK - 1) / BK;
    Staged<T, BM, BK, NT> ra;
    Staged<T, BN, BK, NT> rb;
    auto slot = [&](int step) { return smem + (step % STAGES) * (A_ELEMS + B_ELEMS); };
    auto issue = [&](int step) {  // starts step's copies
        if (step < nk) {
            T* As = slot(step);
            T* Bs = As + A_ELEMS;
            const int from = step + rot, k0 = kbeg + (from < nk ? from : from - nk) * BK;
            // a tile past the m (n) edge of an m- (n-) contiguous operand takes the whole path too where
            // its rows' overhang (the next rows' first elements) lies inside the matrix: those only
            // feed sums past the edge, which nobody writes (the checks and zero fills had slowed the
            // backward GEMMs' edge tiles' K loops: docs/DECISIONS.md, D48)
            auto inside = [&](int ld, int cols, int c_end) {  // row k0 + BK - 1 up to column c_end - 1
                return (long long)(k0 + BK - 1) * ld + c_end <= (long long)(K - 1) * ld + cols;
            };
            const bool wa = vec && k0 + BK <= kend && (i0 + BM <= M || (TA && inside(lda, M, i0 + BM)));
            const bool wb = vec && k0 + BK <= kend && (j0 + BN <= N || (!TB && inside(ldb, N, j0 + BN)));
            if constexpr (A_REG) ra.load(A, lda, i0, k0, M, kend, vec, wa, t);
            else if constexpr (TA) load_tile<T, BK, BM, NT>(As, A, lda, k0, i0, kend, M, vec, wa, t);
            else load_tile<T, BM, BK, NT>(As, A, lda, i0, k0, M, kend, vec, wa, t);
            if constexpr (B_REG) rb.load(B, ldb, j0, k0, N, kend, vec, wb, t);
            else if constexpr (TB) load_tile<T, BN, BK, NT>(Bs, B, ldb, j0, k0, N, kend, vec, wb, t);
            else load_tile<T, BK, BN, NT>(Bs, B, ldb, k0, j0, kend, N, vec, wb, t);
        }
        cp_async_commit();  // an empty group past the end keeps the wait counts uniform
    };
    auto land = [&](int step) {  // stores step's register-staged tiles, transposed
        if (step < nk) {
            if constexpr (A_REG) ra.store(slot(step), t);
            if constexpr (B_REG) rb.store(slot(step) + A_ELEMS, t);
        }
    };
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        issue(s);
        land(s);
    }
    cp_async_wait<STAGES - 2>();
    __syncthreads();  // step 0 has landed
    read(slot(0), slot(0) + A_ELEMS, 0, 0);
    for (int step = 0; step < nk; ++step) {
#pragma unroll
        for (int kk = 0; kk < BK; kk += KS) {
            const int buf = (kk / KS) % 2;
            if (kk + KS < BK) {
                read(slot(step), slot(step) + A_ELEMS, kk + KS, buf ^ 1);
            } else {
                land(step + STAGES - 1);  // into the slot of step - 1, read by nobody since the last barrier
                cp_async_wait<STAGES - 2>();
                __syncthreads();  // step + 1 has landed, and nobody reads this step's slot after fma(buf)
                read(slot(step + 1), slot(step + 1) + A_ELEMS, 0, buf ^ 1);  // unused after the last step
            }
            if (kk == 0) issue(step + STAGES - 1);  // into the slot of step - 1
            fma(buf);
        }
    }
    cp_async_wait<0>();
    __syncthreads();  // the ring is free for the block's next share
}

template <int N>
struct Int {  // a compile-time int a generic lambda can take
    static constexpr int value = N;
};

// Step 6: one schedule for a tile a block, split-K and stream-K
// How the blocks share the work: the tiles (row-major, N fastest) times their K steps make
// `iters` iterations (fewer than 2^31), and block c takes [start(c), start(c + 1)): equal
// shares, give or take one, whatever the number of blocks (at most iters).
struct Schedule {
    int per, rem;  // iters / blocks, iters % blocks: the first rem blocks take one more
    __device__ int start(int c) const { return c * per + min(c, rem); }
    __device__ int owner(int i) const {  // the block of iteration i
        return i < rem * (per + 1) ? i / (per + 1) : rem + (i - rem * (per + 1)) / per;
    }
};

// The workspace: FLAG_SLOTS counters (ints, zero between launches), then two BM x BN partial
// sums a block (for its first and its last tile).
constexpr int FLAG_SLOTS = 1 << 16;
constexpr long long L2_BYTES = 25 << 20;  // half of the H100's L2: one of its two partitions

// Step 8: G-wide writes of D and of the shared tiles' parts (each(f) below)
// Runs body(i0, j0, kbeg, kend, rot) for each tile share of this block, then finishes it: a whole
// tile goes to D; a part is written to the workspace, and the last block of the tile to
// arrive sums the parts from there in block order (the same bits whoever is last) and writes
// D. each(f) calls f(r, c, v) for every G elements side by side in a row that the thread holds
// (r, c within the tile of the first, v a pointer to their sums), so that D and the workspace
// take G-wide writes: scalar ones cost a third of the kernel's sectors (Nsight Compute). Without
// SHARED the grid is the tiles (N-major), a block each: compiled apart, as the schedule's loop
// and counters cost registers that the K loop would otherwise keep. D takes the G-wide writes
// where its rows are 16-byte aligned.
template <typename T, int EPI, bool SHARED, int BM, int BN, int BK, int NT, int G, typename Body, typename Each>
__device__ __forceinline__ void for_each_share(int M, int N, int K, T alpha, T beta, const T* C, int ldc, T* D,
                                               int ldd, const T* __restrict__ bias, T* __restrict__ work, Body&& body,
                                               Each&& each) {
    const bool dvec = reinterpret_cast<size_t>(D) % 16 == 0 && ldd % (16 / sizeof(T)) == 0;
    auto store = [&](int i, int j, const T* v, auto width) {  // width.value sums of row i from column j on
        constexpr int W = decltype(width)::value;
        if (i >= M) return;
        if (W > 1 && dvec && j + W <= N) {
            T r[W];
#pragma unroll
            for (int w = 0; w < W; ++w) r[w] = finish<T, EPI>(v[w], alpha, beta, C, ldc, bias, i, j + w);
            vstore<T, W>(D + (size_t)i * ldd + j, r);
        } else {
#pragma unroll
            for (int w = 0; w < W; ++w)
                if (j + w < N) D[(size_t)i * ldd + j + w] = finish<T, EPI>(v[w], alpha, beta, C, ldc, bias, i, j + w);
        }
    };
    if constexpr (!SHARED) {
        // Step 12: DRAM-saving order: tiles in groups of rows, shared tiles' K steps rotated (rot)
        // the tiles in groups of GROUP rows, taken column by column: the blocks the SMs hold at once
        // then read the same columns of b, from L2, where in row order each row of tiles streams
        // all of b from DRAM again (Triton's and CUTLASS's swizzle)
        constexpr int GROUP = 8;
        const int id = blockIdx.y * gridDim.x + blockIdx.x, per = GROUP * gridDim.x, first = id / per * GROUP;
        const int rows = min((int)gridDim.y - first, GROUP);
        const int i0 = (first + id % per % rows) * BM, j0 = (id % per / rows) * BN;
        body(i0, j0, 0, K, 0);
        each([&](int r, int c, const T* v) { store(i0 + r, j0 + c, v, Int<G>{}); });
        return;
    }
    __shared__ int arrived;
    const int tiles_n = (N + BN - 1) / BN, steps = (K + BK - 1) / BK, iters = (M + BM - 1) / BM * tiles_n * steps;
    const Schedule s{iters / (int)gridDim.x, iters % (int)gridDim.x};
    const int end = s.start(blockIdx.x + 1);
    for (int it = s.start(blockIdx.x); it < end;) {
        {
            const int tile = it / steps, t0 = tile * steps, nk = min(steps, end - t0) - (it - t0);
            // the share's steps rotated so that at its n-th step every block is at a step of its
            // tile = n (mod the longest share, L): the blocks on a row (column) of tiles read the
            // same k slices of A (B) at once, from L2, where unrotated each read its own from DRAM.
            // Only where the operands overflow L2 do the reads reach DRAM: elsewhere the rotation
            // only costs (docs/DECISIONS.md, D47), so it is left out
            const bool rotate = (M + N) * (long long)K * sizeof(T) > L2_BYTES;
            const int L = s.per + (s.rem > 0), rot = rotate ? ((t0 - s.start(blockIdx.x)) % L + L) % L % nk : 0;
            body((tile / tiles_n) * BM, (tile % tiles_n) * BN, (it - t0) * BK, min(K, min(steps, end - t0) * BK), rot);
        }
        // the share's numbers again from `it` alone, hidden from the compiler so that it keeps
        // no more than `it` in registers through the K loop
        asm volatile("" : "+r"(it));
        const int tile = it / steps, t0 = tile * steps, s0 = it - t0, s1 = min(steps, end - t0);
        const int i0 = (tile / tiles_n) * BM, j0 = (tile % tiles_n) * BN;
        it = t0 + s1;
        if (s0 == 0 && s1 == steps) {
            each([&](int r, int c, const T* v) { store(i0 + r, j0 + c, v, Int<G>{}); });
            continue;
        }
        // a share of the tile: a block's first tile has its part in slot 2c, its last in 2c + 1
        auto part = [&](int c) { return work + FLAG_SLOTS + (2 * c + (s.start(c) >= t0 ? 0 : 1)) * (size_t)(BM * BN); };
        T* mine = part(blockIdx.x);
        each([&](int r, int c, const T* v) {
            T w[G];  // new registers (x + 0 is not x at -0): a G-wide write straight from the
#pragma unroll       // accumulators would tie them to aligned groups, and the K loop's FMAs
            for (int g = 0; g < G; ++g) w[g] = v[g] + T(0);  // to register-bank conflicts (SASS)
            vstore<T, G>(mine + r * BN + c, w);
        });
        const int first = s.owner(t0), last = s.owner(t0 + steps - 1);
        // Step 10: CUTLASS's barrier where blocks share a tile
        __syncthreads();  // the block's part is written: thread 0's release below covers it (CUTLASS's barrier)
        if (threadIdx.x == 0) {  // one counter a shared tile, at its first block (whose last tile it is)
            int* count = reinterpret_cast<int*>(work) + first;
            asm volatile("fence.acq_rel.gpu;\n" ::: "memory");
            arrived = atomicAdd(count, 1);
            if (arrived == last - first) {
                *count = 0;  // ready for the next launch
                asm volatile("fence.acq_rel.gpu;\n" ::: "memory");  // the others' parts are visible after the barrier
            }
        }
        __syncthreads();
        if (arrived != last - first) continue;
        // the whole tile, 16 bytes a thread at a time: U of them a part, two parts in flight (the
        // parts' latency, not their bytes, is what this costs)
        constexpr int V = 16 / sizeof(T), U = BM * BN / (NT * V) < 8 ? BM * BN / (NT * V) : 8;
        static_assert(BM * BN % (NT * V * U) == 0, "the tile splits into whole rounds of the block");
#pragma unroll 1
        for (int e0 = threadIdx.x * V; e0 < BM * BN; e0 += NT * V * U) {
            T sum[U][V] = {};
#pragma unroll 2
            for (int b = first; b <= last; ++b) {
                T v[U][V];
#pragma unroll
                for (int u = 0; u < U; ++u) vload<T, V, true>(part(b) + e0 + u * NT * V, v[u]);
#pragma unroll
                for (int u = 0; u < U; ++u)
#pragma unroll
                    for (int i = 0; i < V; ++i) sum[u][i] += v[u][i];
            }
#pragma unroll
            for (int u = 0; u < U; ++u) store(i0 + (e0 + u * NT * V) / BN, j0 + (e0 + u * NT * V) % BN, sum[u], Int<V>{});
        }
    }
}

// Programmatic dependent launch (sm_90 on): perflab launches the tile kernels so that the next
// one in the stream may start while this one finishes (kernels.launch_tile). Its blocks let the
// next launch begin at once, then wait here, before touching global memory, until the grid
// before them has completed and its writes are visible. Launched plainly, both are no-ops.
// Step 11: programmatic dependent launch
__device__ __forceinline__ void after_previous_grid() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

// KV: steps of k read at once along a k-contiguous tile (KV = 16 bytes' worth reads least,
// smaller KV holds fewer registers), or 0: k-contiguous tiles are stored transposed (XT) and
// read one k at a time along m and n; MINB: blocks an SM must fit (caps the registers), one
// fewer where both operands are transposed, or either is and blocks share tiles (SHARED):
// their index arithmetic needs more registers, and they give up a block an SM rather than
// spill (training shares tiles in these orientations for the GEMMs with C = 10 in them).
// vec: the rows of A and B are 16-byte aligned (16-byte copies).
template <typename T, bool TA, bool TB, int EPI, bool SHARED, int BM, int BN, int BK, int WM, int WN, int TM, int TN,
          int STAGES, int KV, int MINB>
__global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32, ((TA && TB) || (SHARED && (TA || TB))) && MINB > 1 ? MINB - 1 : MINB)
gemm_best(int M, int N, int K, T alpha, const T* __restrict__ A, int lda, const T* __restrict__ B, int ldb,
          T beta, const T* C, int ldc, T* D, int ldd, const T* __restrict__ bias, T* __restrict__ work, int vec) {
    constexpr int NT = (BM / WM) * (BN / WN) * 32, V = 16 / sizeof(T);
    constexpr int WTR = WM / TM, WTC = WN / TN;  // a warp's threads: WTR rows x WTC columns
    constexpr bool XT = KV == 0, A_MN = TA || XT, B_K = TB && !XT;  // A read along m? B along k?
    constexpr int KS = XT ? 1 : KV;                                   // steps of k a read covers
    static_assert(WTR * WTC == 32 && TM % V == 0 && TN % V == 0 && BK % V == 0 && V % KS == 0, "bad tile shape");
    extern __shared__ __align__(16) unsigned char smem_raw[];
    after_previous_grid();

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int wm = (warp / (BN / WN)) * WM, wn = (warp % (BN / WN)) * WN;
    const int tr = lane / WTC, tc = lane % WTC;
    // the rows (columns) a thread owns: V-wide groups where the operand is read along m (n),
    // a stride of WTR (WTC) where it is read along k
    auto row = [&](int m) { return A_MN ? wm + (m / V) * WTR * V + tr * V + m % V : wm + m * WTR + tr; };
    auto col = [&](int n) { return B_K ? wn + n * WTC + tc : wn + (n / V) * WTC * V + tc * V + n % V; };

    constexpr int G = B_K ? 1 : V;  // columns a thread holds side by side
    T acc[TM][TN];
    auto each = [&](auto&& f) {
#pragma unroll
        for (int m = 0; m < TM; ++m)
#pragma unroll
            for (int n = 0; n < TN; n += G) f(row(m), col(n), &acc[m][n]);
    };
    auto body = [&](int i0, int j0, int kbeg, int kend, int rot) {
#pragma unroll
        for (int m = 0; m < TM; ++m)
#pragma unroll
            for (int n = 0; n < TN; ++n) acc[m][n] = 0;
        T a[2][KS][TM], b[2][KS][TN];  // two buffers of the operands of KS steps of k
        k_loop<T, TA, TB, XT, BM, BN, BK, KS, NT, STAGES>(
            reinterpret_cast<T*>(smem_raw), M, N, K, i0, j0, kbeg, kend, A, lda, B, ldb, vec, rot,
            [&](const T* As, const T* Bs, int kk, int buf) {
                if constexpr (A_MN) {
#pragma unroll
                    for (int k = 0; k < KS; ++k)
#pragma unroll
                        for (int g = 0; g < TM; g += V) vload(&As[(kk + k) * (BM + V) + row(g)], &a[buf][k][g]);
                } else {
#pragma unroll
                    for (int m = 0; m < TM; ++m) {
                        T v[KS];
                        vload<T, KS>(&As[row(m) * (BK + V) + kk], v);
#pragma unroll
                        for (int k = 0; k < KS; ++k) a[buf][k][m] = v[k];
                    }
                }
                if constexpr (B_K) {
#pragma unroll
                    for (int n = 0; n < TN; ++n) {
                        T v[KS];
                        vload<T, KS>(&Bs[col(n) * (BK + V) + kk], v);
#pragma unroll
                        for (int k = 0; k < KS; ++k) b[buf][k][n] = v[k];
                    }
                } else {
#pragma unroll
                    for (int k = 0; k < KS; ++k)
#pragma unroll
                        for (int g = 0; g < TN; g += V) vload(&Bs[(kk + k) * (BN + V) + col(g)], &b[buf][k][g]);
                }
            },
            [&](int buf) {
#pragma unroll
                for (int k = 0; k < KS; ++k)
#pragma unroll
                    for (int m = 0; m < TM; ++m)
#pragma unroll
                        // Step 7: serpentine FMA order in the thread tile
                        for (int j = 0; j < TN; ++j) {  // serpentine: a row's last b is the next row's
                            // first, so consecutive FMAs share an operand (kept by step 7's measurement)
                            const int n = m % 2 ? TN - 1 - j : j;
                            acc[m][n] = fma(a[buf][k][m], b[buf][k][n], acc[m][n]);
                        }
            });
    };
    for_each_share<T, EPI, SHARED, BM, BN, BK, NT, G>(M, N, K, alpha, beta, C, ldc, D, ldd, bias, work, body, each);
}

// The TF32 tensor-core option (float only): the same tiles and K loop, each warp's WM x WN
// tile computed by mma.sync m16n8k8 (inputs rounded to TF32, FP32 accumulation).
__device__ __forceinline__ unsigned to_tf32(float x) {
    unsigned u;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(u) : "f"(x));
    return u;
}

template <bool TA, bool TB, int EPI, bool SHARED, int BM, int BN, int BK, int WM, int WN, int STAGES>
__global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32, 1)  // one block an SM at least: no cap below 255
gemm_tf32(int M, int N, int K, float alpha, const float* __restrict__ A, int lda, const float* __restrict__ B,
          int ldb, float beta, const float* C, int ldc, float* D, int ldd, const float* __restrict__ bias,
          float* __restrict__ work, int vec) {
    constexpr int NT = (BM / WM) * (BN / WN) * 32, V = 4, MI = WM / 16, NI = WN / 8;
    static_assert(WM % 16 == 0 && WN % 8 == 0 && BK % 8 == 0, "bad tile shape");
    extern __shared__ __align__(16) unsigned char smem_raw[];
    after_previous_grid();
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
    const int wm = (warp / (BN / WN)) * WM, wn = (warp % (BN / WN)) * WN;

    float acc[MI][NI][4];
    auto each = [&](auto&& f) {
#pragma unroll
        for (int mi = 0; mi < MI; ++mi)
#pragma unroll
            for (int ni = 0; ni < NI; ++ni)
#pragma unroll
                for (int r = 0; r < 4; r += 2)  // c0, c1: row g; c2, c3: row g + 8; columns 2q, 2q + 1
                    f(wm + mi * 16 + g + (r / 2) * 8, wn + ni * 8 + 2 * q, &acc[mi][ni][r]);
    };
    auto body = [&](int i0, int j0, int kbeg, int kend, int rot) {
#pragma unroll
        for (int mi = 0; mi < MI; ++mi)
#pragma unroll
            for (int ni = 0; ni < NI; ++ni)
#pragma unroll
                for (int r = 0; r < 4; ++r) acc[mi][ni][r] = 0.f;
        unsigned a[2][MI][4], b[2][NI][2];  // two buffers of the fragments of 8 steps of k
        k_loop<float, TA, TB, false, BM, BN, BK, 8, NT, STAGES>(
            reinterpret_cast<float*>(smem_raw), M, N, K, i0, j0, kbeg, kend, A, lda, B, ldb, vec, rot,
            [&](const float* As, const float* Bs, int kk, int buf) {
                auto a_at = [&](int m, int k) { return TA ? As[k * (BM + V) + m] : As[m * (BK + V) + k]; };
                auto b_at = [&](int k, int n) { return TB ? Bs[n * (BK + V) + k] : Bs[k * (BN + V) + n]; };
#pragma unroll
                for (int mi = 0; mi < MI; ++mi) {
                    const int m = wm + mi * 16 + g;
                    a[buf][mi][0] = to_tf32(a_at(m, kk + q));
                    a[buf][mi][1] = to_tf32(a_at(m + 8, kk + q));
                    a[buf][mi][2] = to_tf32(a_at(m, kk + q + 4));
                    a[buf][mi][3] = to_tf32(a_at(m + 8, kk + q + 4));
                }
#pragma unroll
                for (int ni = 0; ni < NI; ++ni) {
                    const int n = wn + ni * 8 + g;
                    b[buf][ni][0] = to_tf32(b_at(kk + q, n));
                    b[buf][ni][1] = to_tf32(b_at(kk + q + 4, n));
                }
            },
            [&](int buf) {
#pragma unroll
                for (int mi = 0; mi < MI; ++mi)
#pragma unroll
                    for (int ni = 0; ni < NI; ++ni)
                        asm volatile(
                            "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
                            "{%8,%9}, {%0,%1,%2,%3};\n"
                            : "+f"(acc[mi][ni][0]), "+f"(acc[mi][ni][1]), "+f"(acc[mi][ni][2]), "+f"(acc[mi][ni][3])
                            : "r"(a[buf][mi][0]), "r"(a[buf][mi][1]), "r"(a[buf][mi][2]), "r"(a[buf][mi][3]),
                              "r"(b[buf][ni][0]), "r"(b[buf][ni][1]));
            });
    };
    for_each_share<float, EPI, SHARED, BM, BN, BK, NT, 2>(M, N, K, alpha, beta, C, ldc, D, ldd, bias, work, body, each);
}
