"""Where a launch of perflab's best GEMM leaves SMs idle, block by block (one GPU): at each shape
named (default: the two backward shapes furthest below cuBLAS in the last bench), the tuned
(config, blocks) runs from a copy of gemm_best.cu instrumented here (instrument()): every block
writes its SM, its start, the end of each share's K loop, the start of its sum of a shared tile's
parts, and its end (%globaltimer). Prints the launch's span, the SMs' idle share, and the K
loops' ends by the block's age on its SM and by whether its tiles touch the matrix's edge;
writes $OUT/gemm_timeline.npz and gemm_timeline.png (one line a block, SM by SM).
Why: Nsight Compute counts idle SM cycles, not which blocks cause them; this found the edge
tiles' slow K loop (results/nvidia-h100-80gb-hbm3/gemm_experiments/README.md, session 8; the patch is experiments/gemm/timeline/timeline.patch).
A shape may name its config and number of blocks instead of the tuned ones, "NAME/CONFIG/BLOCKS"
(e.g. "fwd1 H=512 B=800/128x64x16_w64x32_t8x8_s3_xt_b3/260": cuBLAS's decomposition there).
Usage: OUT=/tmp/out python3 scripts/gemm_timeline.py ["bwd3 H=512 B=12000" ...]"""
import json
import os
import sys
import tempfile

import numpy as np

from perflab.kernels import KERNEL_DIR
from perflab.measure.gemm_inputs import gemm_operands, gemm_shapes, named_gemm_shapes

DEFAULT_SHAPES = ("bwd3 H=1024 B=12000", "bwd3 H=512 B=12000")



SLOTS = 8  # a block's record: start, SM, end of its first three shares' K loops, sum start, end, shares
TRACE = """
__device__ unsigned long long perflab_trace[65536 * 8];
__device__ __forceinline__ unsigned long long trace_now() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
__device__ __forceinline__ unsigned long long* trace_start(int block) {
    unsigned sm;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
    unsigned long long* tr = perflab_trace + block * 8;
    if (threadIdx.x == 0) { tr[0] = trace_now(); tr[1] = sm; }
    return tr;
}
"""
# (anchor in gemm_best.cu, what goes in after it): each anchor must occur exactly once
PROBES = [
    ('#include "common.cuh"\n', TRACE),
    ("        const int i0 = (first + id % per % rows) * BM, j0 = (id % per / rows) * BN;\n",
     "        unsigned long long* tr = trace_start(id);\n"),
    ("        body(i0, j0, 0, K, 0);\n", "        if (threadIdx.x == 0) { tr[2] = trace_now(); tr[7] = 1; }\n"),
    ("        each([&](int r, int c, const T* v) { store(i0 + r, j0 + c, v, Int<G>{}); });\n        return;\n",
     None),  # replaced below: the end of a tile a block
    ("    const int end = s.start(blockIdx.x + 1);\n",
     "    unsigned long long* tr = trace_start(blockIdx.x);\n    int shares = 0;\n"),
    ('        asm volatile("" : "+r"(it));\n',
     "        if (threadIdx.x == 0 && shares < 3) tr[2 + shares] = trace_now();\n        ++shares;\n"),
    ("        if (arrived != last - first) continue;\n", "        if (threadIdx.x == 0) tr[5] = trace_now();\n"),
]
WHOLE_END = ("        each([&](int r, int c, const T* v) { store(i0 + r, j0 + c, v, Int<G>{}); });\n"
             "        if (threadIdx.x == 0) tr[6] = trace_now();\n        return;\n")
NEXT = "\n\n// Programmatic dependent launch"  # the comment after for_each_share, whose end is probed
SHARE_LOOP_END = "    }\n}" + NEXT
SHARED_END = "    if (threadIdx.x == 0) { tr[6] = trace_now(); tr[7] = shares; }\n}" + NEXT


def parse_runs(args: list) -> list:
    """[(shape name, config or None, blocks or None)] from "NAME" or "NAME/CONFIG/BLOCKS", each
    checked here, before anything needs a GPU."""
    from perflab.kernels import tile_configs
    runs = []
    for arg in args:
        name, *choice = arg.split("/")
        if choice and (len(choice) != 2 or choice[0] not in tile_configs("best", "float")
                       or not choice[1].isdigit() or int(choice[1]) < 1):
            raise SystemExit(f"{arg!r}: after the shape name give /CONFIG/BLOCKS, a config of "
                             f"{list(tile_configs('best', 'float'))} and a number of blocks >= 1")
        runs.append((name, choice[0] if choice else None, int(choice[1]) if choice else None))
    named_gemm_shapes([r[0] for r in runs])
    return runs


def instrument(source: str) -> str:
    """gemm_best.cu with the timeline probes; names the anchor that moved if the kernel changed."""
    for anchor, _ in PROBES + [(SHARE_LOOP_END, None)]:
        if source.count(anchor) != 1:
            raise SystemExit(f"gemm_best.cu changed: the probe anchor {anchor.strip()[:60]!r} is not there once")
    for anchor, probe in PROBES:
        source = source.replace(anchor, WHOLE_END if probe is None else anchor + probe)
    return source.replace(SHARE_LOOP_END, "    }\n" + SHARED_END)


def summary(name: str, t: np.ndarray, M: int, N: int, K: int, bm: int, bn: int, bk: int) -> str:
    """The launch in words: span, SMs' idle share, K-loop ends by age on the SM and by edge."""
    t = t.astype(np.int64)
    t0 = t[:, 0].min()
    start, sm, end, shares = (t[:, 0] - t0) / 1e3, t[:, 1], (t[:, 6] - t0) / 1e3, t[:, 7]
    k_end = (t[np.arange(len(t)), 1 + np.clip(shares, 1, 3)] - t0) / 1e3
    span = end.max()
    busy = [end[sm == s].max() - start[sm == s].min() for s in np.unique(sm)]
    age = np.zeros(len(t), int)
    for s in np.unique(sm):
        idx = np.flatnonzero(sm == s)
        age[idx[np.argsort(t[idx, 0], kind="stable")]] = np.arange(len(idx))
    edge = edge_blocks(len(t), M, N, K, bm, bn, bk)
    lines = [f"{name}: {len(t)} blocks, span {span:.1f} us, SMs idle {100 * (1 - np.mean(busy) / span):.1f}% "
             f"of it; last start {start.max():.1f} us"]
    for a in range(age.max() + 1):
        for e in (False, True):
            sel = (age == a) & (edge == e)
            if sel.any():
                lines.append(f"  age {a} on its SM, {'edge' if e else 'inner'} tiles: {sel.sum()} blocks, K loops end "
                             f"median {np.median(k_end[sel]):.1f} us, max {k_end[sel].max():.1f}")
    fixup = t[:, 5] > t[:, 0]  # (a record left by an earlier launch is older than this launch's start)
    if not fixup.all():
        lines.append(f"  after the last K loop, blocks that sum no tile: median {np.median((end - k_end)[~fixup]):.2f} us "
                     "(D's write, or a part's write and the arrival)")
    if fixup.any():
        to_sum = (t[fixup, 5] - t0) / 1e3 - k_end[fixup]
        lines.append(f"  {fixup.sum()} sums of shared tiles: from the K loop's end to the sum median {np.median(to_sum):.2f} "
                     f"us, the sum median {np.median((t[fixup, 6] - t[fixup, 5]) / 1e3):.2f} us")
    return "\n".join(lines)


def edge_blocks(blocks: int, M: int, N: int, K: int, bm: int, bn: int, bk: int) -> np.ndarray:
    """Which blocks have a tile in the last row or column of tiles (as gemm_best.cu deals them)."""
    tiles_m, tiles_n, steps = -(-M // bm), -(-N // bn), -(-K // bk)
    tiles = tiles_m * tiles_n
    if blocks == tiles:  # in groups of GROUP = 8 rows of tiles, column by column, as for_each_share
        ids, group = np.arange(blocks), 8
        first = ids // (group * tiles_n) * group
        rows = np.minimum(tiles_m - first, group)
        row, col = first + ids % (group * tiles_n) % rows, ids % (group * tiles_n) // rows
        return (row == tiles_m - 1) | (col == tiles_n - 1)
    per, rem = divmod(tiles * steps, blocks)
    first = np.array([c * per + min(c, rem) for c in range(blocks + 1)])
    out = np.zeros(blocks, bool)
    for c in range(blocks):
        for tile in range(first[c] // steps, (first[c + 1] - 1) // steps + 1):
            out[c] |= tile // tiles_n == tiles_m - 1 or tile % tiles_n == tiles_n - 1
    return out


def plot(traces: dict, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(len(traces), 1, figsize=(10, 4 * len(traces)), squeeze=False)
    for ax, (name, (t, edge)) in zip(axes[:, 0], traces.items()):
        t = t.astype(np.int64)
        t0 = t[:, 0].min()
        k_end = t[np.arange(len(t)), 1 + np.clip(t[:, 7], 1, 3)]
        for i in np.argsort(t[:, 1], kind="stable"):
            y = t[i, 1] + 0.25 * (np.sum((t[:, 1] == t[i, 1]) & (t[:, 0] < t[i, 0])))
            ax.plot([(t[i, 0] - t0) / 1e3, (k_end[i] - t0) / 1e3], [y, y], lw=1, color="C3" if edge[i] else "C0")
            ax.plot([(k_end[i] - t0) / 1e3, (t[i, 6] - t0) / 1e3], [y, y], lw=1, color="0.6")
        ax.set(title=f"{name}: K loops (red: tiles at the matrix's edge), then sums and writes (grey)",
               xlabel="microseconds from the first block's start", ylabel="SM (a line a block)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(runs: list):
    import cupy as cp

    from perflab import kernels
    from perflab.kernels import dispatch
    from perflab.results import machine_metadata
    out = os.environ.get("OUT", ".")
    tmp = tempfile.mkdtemp()
    with open(os.path.join(tmp, "gemm_timeline.cu"), "w") as f:
        f.write(instrument((KERNEL_DIR / "gemm_best.cu").read_text()))
    shipped = dispatch.source_file
    timeline = lambda v: os.path.join(tmp, "gemm_timeline.cu") if v in kernels.TILED_VARIANTS else shipped(v)  # noqa: E731
    rng = np.random.default_rng(0)
    traces, text = {}, []
    shapes = {s[0]: s[1:] for s in gemm_shapes()}
    for name, config, blocks in runs:
        M, K, N, ta, tb = shapes[name]
        a, b = gemm_operands(cp, rng, M, K, N, ta, tb)
        out_m, work = cp.empty((M, N), "float32"), kernels.workspace(M, N, "float32")
        if config is None:
            config, blocks = kernels.tune(a, b, out_m, "best", work)  # the shipped kernel's choice
        dispatch.source_file = timeline  # gemm_function reads the file name from dispatch
        kernels.module.cache_clear()
        kernels.gemm_function.cache_clear()
        run = lambda: kernels.gemm(a, b, out=out_m, variant="best", config=config, blocks=blocks, work=work)  # noqa: E731
        for _ in range(3):  # warm: the last launch's records stay
            run()
        cp.cuda.Device().synchronize()
        mod = kernels.module(dispatch.source_file("best"), kernels.gemm_names("best", "float", config))
        t = cp.ndarray((blocks * SLOTS,), cp.uint64, memptr=mod.get_global("perflab_trace")).get().reshape(blocks, SLOTS)
        bm, bn, bk = kernels.tile_configs("best", "float")[config][:3]
        label = f"{name} {config} {kernels.schedule_name('best', 'float', config, M, N, K, blocks)}"
        text.append(summary(label, t, M, N, K, bm, bn, bk))
        print(text[-1], flush=True)
        traces[label] = (t, edge_blocks(blocks, M, N, K, bm, bn, bk))
        dispatch.source_file = shipped
        kernels.module.cache_clear()
        kernels.gemm_function.cache_clear()
    np.savez(os.path.join(out, "gemm_timeline.npz"), **{k: v[0] for k, v in traces.items()})
    with open(os.path.join(out, "gemm_timeline.txt"), "w") as f:
        f.write("\n".join(text) + "\n")
    with open(os.path.join(out, "gemm_timeline.json"), "w") as f:
        json.dump({**machine_metadata(), "shapes": list(traces)}, f, indent=1)
    plot(traces, os.path.join(out, "gemm_timeline.png"))


if __name__ == "__main__":
    main(parse_runs(sys.argv[1:] or list(DEFAULT_SHAPES)))
