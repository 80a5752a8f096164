"""Is the p = 2 BF16 exchange's local work held back by its grid? (session 61: landed_probe.py found the kernel at
15.2 and 31.4 us with every copy read locally, 26 and 82 MB moved: 1.7 and 2.6 TB/s.) A kernel of the same traffic
(P's FP32 read and written, two BF16 copies read, P's BF16 rounding written), nothing else, compiled here, at the
exchange's grid (one block of 512 a multiprocessor, 2 vectors a thread at a time: its blocks spin, so all must be
resident) and at others; then the product's exchange kernel (peer read over NVLink) for scale. Graphed, medians,
rank 0's lines, one JSON line a row.

    mpirun -n 2 python experiments/p2p/update_grid_probe.py
"""
import json

import cupy as cp
import numpy as np

from perflab.analysis.perfmodel import gradient_buffer_bytes
from perflab.kernels import p2p as p2p_kernels
from perflab.measure.ceilings import ranks_together
from perflab.timing import time_graph_ms
from perflab.train.comm import for_gpu, world
from perflab.train.gpu import select_device

SOURCE = r"""
__device__ float lo16(unsigned v) { return __uint_as_float(v << 16); }
__device__ float hi16(unsigned v) { return __uint_as_float(v & 0xffff0000u); }
__device__ unsigned pack(float a, float b) { return (__float_as_uint(a) >> 16) | (__float_as_uint(b) & 0xffff0000u); }
template <int U>
__global__ void traffic(float4* __restrict__ P, uint4* __restrict__ Ph, const uint4* __restrict__ a,
                        const uint4* __restrict__ b, size_t nv, float lr) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t base = (size_t)blockIdx.x * blockDim.x + threadIdx.x; base < nv; base += U * stride) {
        float4 w[U][2];
        uint4 x[U], y[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const size_t e = base + u * stride;
            if (e < nv) w[u][0] = P[2 * e], w[u][1] = P[2 * e + 1], x[u] = __ldcg(a + e), y[u] = __ldcg(b + e);
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const size_t e = base + u * stride;
            if (e >= nv) continue;
            float4 p = w[u][0], q = w[u][1];
            p.x -= lr * (lo16(x[u].x) + lo16(y[u].x)); p.y -= lr * (hi16(x[u].x) + hi16(y[u].x));
            p.z -= lr * (lo16(x[u].y) + lo16(y[u].y)); p.w -= lr * (hi16(x[u].y) + hi16(y[u].y));
            q.x -= lr * (lo16(x[u].z) + lo16(y[u].z)); q.y -= lr * (hi16(x[u].z) + hi16(y[u].z));
            q.z -= lr * (lo16(x[u].w) + lo16(y[u].w)); q.w -= lr * (hi16(x[u].w) + hi16(y[u].w));
            P[2 * e] = p, P[2 * e + 1] = q;
            Ph[e] = make_uint4(pack(p.x, p.y), pack(p.z, p.w), pack(q.x, q.y), pack(q.z, q.w));
        }
    }
}
"""
comm = world()
select_device(comm)
p2p = for_gpu(comm, "p2p")
module = cp.RawModule(code=SOURCE, options=("-std=c++17",), name_expressions=[f"traffic<{u}>" for u in (1, 2, 4)])
sms = cp.cuda.Device().attributes["MultiProcessorCount"]
rows = []
for net in ("1024-1024", "2048-2048"):
    n = gradient_buffer_bytes(net) // 4 - 1
    nv = n // 8
    P, Ph = cp.ones(nv * 8, cp.float32), cp.empty(nv * 8, cp.uint16)
    a, b = cp.full(nv * 8, 0x3a83, cp.uint16), cp.full(nv * 8, 0x3a83, cp.uint16)
    moved = nv * 8 * (4 + 4 + 2 + 2 + 2)
    for blocks, threads, u in ((sms, 512, 2), (sms, 512, 4), (sms, 1024, 2), (2 * sms, 512, 2), (4 * sms, 256, 2),
                               (-(-nv // 256), 256, 1)):
        kernel = module.get_function(f"traffic<{u}>")

        def call():
            kernel((blocks,), (threads,), (P, Ph, a, b, np.uint64(nv), np.float32(1e-6)))
        us = time_graph_ms(cp, call, calls=10, repeats=20) * 1e3
        rows.append({"net": net, "what": "same traffic, local", "blocks": blocks, "threads": threads, "vectors_a_thread": u,
                     "us": us, "TB/s": moved / us * 1e-6, "rank": comm.rank})
    G = p2p.register(n + 1, np.float32, bf16_copy=True)
    G.fill(1e-3)
    params, rounded = cp.ones(n, cp.float32), cp.empty(n, cp.uint16)
    ends, regs, whole = cp.asarray([n], np.int64), cp.zeros(1, cp.float32), cp.asarray([[0, nv]], np.int64)

    def product():
        p2p_kernels.exchange_update_bf16(params, rounded, p2p.halves, p2p.grads, p2p.rank, n, 0.1, ends, regs, p2p.ce,
                                         p2p.flags, p2p.rounds, p2p.timeout_ns, p2p.blocks, whole)
    us = time_graph_ms(cp, product, calls=10, repeats=20, before=ranks_together(p2p)) * 1e3
    rows.append({"net": net, "what": "the exchange (peer over NVLink)", "blocks": p2p.blocks,
                 "threads": p2p_kernels.THREADS, "vectors_a_thread": 2, "us": us, "TB/s": moved / us * 1e-6,
                 "rank": comm.rank})
if comm.rank == 0:
    for r in rows:
        print(json.dumps(r))
