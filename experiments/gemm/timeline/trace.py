"""Per-block timeline (globaltimer) of diag/ab/v5.cu: where the SMs sit idle in a shared-tile launch."""
import cupy as cp
import numpy as np

from perflab import kernels
from perflab.timing import time_graph_ms

kernels.dispatch.source_file = lambda v: "../../diag/ab/" + __import__("os").environ.get("TRACE_VARIANT", "v5") + ".cu" if v in kernels.TILED_VARIANTS else f"gemm_{v}.cu"
CASES = [(512, 12000, 784, "128x64x16_w64x32_t8x8_s3_xt_b3", 396), (512, 12000, 784, "128x64x16_w64x32_t8x8_s3_xt_b3", 260),
         (512, 12000, 784, "128x64x16_w64x32_t8x8_s3_xt_b3", 364),
         (2048, 12000, 784, "128x64x16_w64x32_t8x8_s3_xt_b3", 1040), (2048, 12000, 784, "128x64x16_w64x32_t8x8_s3_xt_b3", 396),
         (512, 784, 3200, "64x128x16_w32x64_t8x8_s3_xt_b2", 264), (512, 784, 800, "64x64x16_w32x32_t8x4_s3_xt_b4", 396)]
rng = np.random.default_rng(0)
for M, K, N, cfg, blocks in CASES:
    a = cp.asarray(rng.uniform(-1, 1, (M, K)).astype("float32"))
    b = cp.asarray(rng.uniform(-1, 1, (K, N)).astype("float32"))
    out, work = cp.empty((M, N), "float32"), kernels.workspace(M, N, "float32")
    run = lambda: kernels.gemm(a, b, out=out, variant="best", config=cfg, blocks=blocks, work=work)  # noqa
    run()
    ms = time_graph_ms(cp, run)
    mod = kernels.module(kernels.source_file("best"), kernels.gemm_names("best", "float", cfg))
    tr = cp.ndarray((65536 * 8,), cp.uint64, memptr=mod.get_global("perflab_trace"))
    tr.fill(0)
    for _ in range(3):
        run()
    cp.cuda.Device().synchronize()
    t = tr[: blocks * 8].get().reshape(blocks, 8).astype(np.int64)
    t0 = t[:, 0].min()
    start, sm, end, nsh = t[:, 0] - t0, t[:, 1], t[:, 6] - t0, t[:, 7]
    span = end.max()
    busy = {s: end[sm == s].max() - start[sm == s].min() for s in np.unique(sm)}
    kend = np.array([t[i, 2 + min(nsh[i], 3) - 1] - t0 for i in range(blocks)])
    fix = t[:, 5] > 0
    per_sm = np.bincount(sm, minlength=132)
    print(f"M={M} K={K} N={N} {cfg} blocks={blocks}: graph {ms*1e3:.1f} us, span {span/1e3:.1f} us, "
          f"SMs used {len(busy)}, blocks/SM min {per_sm.min()} max {per_sm.max()}, "
          f"idle {100*(1-np.mean(list(busy.values()))/span):.1f}%")
    print(f"  start: max {start.max()/1e3:.1f} us; p50 {np.median(start)/1e3:.1f}")
    print(f"  last K loop end: p0 {kend.min()/1e3:.1f} p10 {np.percentile(kend,10)/1e3:.1f} p50 {np.median(kend)/1e3:.1f} "
          f"p90 {np.percentile(kend,90)/1e3:.1f} max {kend.max()/1e3:.1f} us")
    print(f"  block end: p0 {end.min()/1e3:.1f} p10 {np.percentile(end,10)/1e3:.1f} p50 {np.median(end)/1e3:.1f} "
          f"p90 {np.percentile(end,90)/1e3:.1f} max {end.max()/1e3:.1f} us")
    if fix.any():
        fd = (t[fix, 6] - t[fix, 5]) / 1e3
        print(f"  fixups {fix.sum()}: start p50 {np.median(t[fix,5]-t0)/1e3:.1f} us, duration p50 {np.median(fd):.2f} max {fd.max():.2f} us")
    for n in (1, 2, 3):
        sel = nsh == n
        if sel.any():
            print(f"  {sel.sum()} blocks with {n} shares: end p50 {np.median(end[sel])/1e3:.1f} max {end[sel].max()/1e3:.1f}")
    np.save(f"{__import__('os').environ.get('OUT','.')}/trace_{M}_{K}_{N}_{blocks}.npy", t)
