"""Figures for the report: they read result tables and never run training.

Each figure is saved as <run folder>/figures/<name>.png (and a vector <name>.pdf for a report, not kept in git), its caption
written under the plot and into <name>.txt, so it stands on its own.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np

from perflab import results
from perflab.analysis import perfmodel
from perflab.config import HOST_STAGED


def figures_dir() -> Path:
    """This run's figures: <run folder>/figures (the results root's figures/ for the committed campaign)."""
    return results.run_dir() / "figures"


def new_figure(width=7.0, height=4.8):
    import matplotlib
    matplotlib.use("Agg") if matplotlib.get_backend().lower().startswith("agg") else None
    import matplotlib.pyplot as plt
    return plt.subplots(figsize=(width, height))


def save(fig, name: str, caption: str, folder: Path | None = None, draw_caption: bool = True) -> Path:
    """PDF + PNG + caption text; returns the PNG path. The caption is drawn under the plot too, so the PNG
    stands alone in a notebook or the README; the report draws its own figures without it (`draw_caption`
    False) and prints the caption once, under the figure."""
    import textwrap
    folder = Path(folder or figures_dir())
    folder.mkdir(parents=True, exist_ok=True)
    height = 0.0
    if draw_caption:
        said = fig.text(0.01, 0.005, "\n".join(textwrap.wrap(caption, int(fig.get_figwidth() * 17))), fontsize=7,
                        va="bottom", ha="left")
        height = said.get_window_extent(fig.canvas.get_renderer()).height / fig.bbox.height  # the caption's share
    fig.tight_layout(rect=(0, min(0.5, 0.015 + height), 1, 1))
    replace_labels(fig)  # the caption's room moved the axes under the point labels
    for a, b in text_overlaps(fig):  # said, not raised: the figure is still worth having
        print(f"perflab: figure {name}: texts overlap: {a[:60]!r} and {b[:60]!r}", file=sys.stderr)
    fig.savefig(folder / f"{name}.pdf", metadata={"CreationDate": None})  # the same figure, the same bytes
    fig.savefig(folder / f"{name}.png", dpi=130)
    (folder / f"{name}.txt").write_text(caption + "\n")
    import matplotlib.pyplot as plt
    plt.close(fig)
    return folder / f"{name}.png"


def point_rate(row) -> float:
    """Achieved FLOP/s of a sweep point: the seeds' FLOPs per batch over the median batch
    iteration (profiled run), else over the unprofiled epoch time per batch."""
    t = row.get("t_batch iteration")
    if t is None or not np.isfinite(t):
        t = row["epoch_seconds"] / row["batches"]
    return row["flops_per_batch"] / t


def roofline(points, P_flops: float, bandwidth: float, kind: str = "serial", P_mpi: float | None = None,
             peak: float | None = None, title: str = "", label_bw: str = "BW",
             xlabel: str = "arithmetic intensity (FLOPs / byte moved over PCIe + MPI)"):
    """Log-log roofline with the sweep's points. kind: standard (min), serial (the seeds'
    modified roofline), combined (PCIe + MPI: bandwidth is P_pci and P_mpi is given)."""
    fig, ax = new_figure()
    rows = [dict(r) for _, r in points.iterrows()]
    ais = [r["ai"] for r in rows if np.isfinite(r["ai"])]
    lo = min(ais + [P_flops / bandwidth]) / 10
    hi = max(ais + [P_flops / bandwidth]) * 10
    xs = no_exchange_x([r["ai"] for r in rows], [(r["H"], r["B"], r["p"]) for r in rows], hi)
    x = np.logspace(np.log10(lo), np.log10(max(xs + [hi])), 200)
    if kind == "standard":
        y = [perfmodel.roofline_standard(a, P_flops, bandwidth) for a in x]
    elif kind == "combined":
        y = [perfmodel.roofline_combined(a, P_flops, bandwidth, P_mpi) for a in x]
    else:
        y = [perfmodel.roofline_serial(a, P_flops, bandwidth) for a in x]
    ax.loglog(x, y, "k-", lw=2, label=f"{kind} roofline")
    ax.axhline(P_flops, color="k", ls=":", lw=1)
    # both roofs named at the left, where the points (low AI, low rate) and the curve (far under P_flops) leave room
    ax.text(lo * 1.2, P_flops * 1.12, f"P_flops = {P_flops / 1e12:.3g} TFLOP/s", fontsize=8, ha="left")
    slope = x[x * bandwidth <= 3 * P_flops]  # the bandwidth roof up to a little past the ridge, not to the axes' top
    ax.loglog(slope, slope * bandwidth, color="0.6", ls=":", lw=1)
    ridge = P_flops / bandwidth
    ax.text(ridge / 3, P_flops / 3 * 1.4, f"{label_bw} = {bandwidth / 1e9:.3g} GB/s", fontsize=8, color="0.4",
            ha="right", va="bottom")  # above the slope, ending left of the ridge: the slope falls away under it
    if peak:
        ax.axhline(peak, color="tab:red", ls="--", lw=1)
        ax.text(x[-1], peak * 1.08, f"datasheet peak {peak / 1e12:.3g} TFLOP/s", fontsize=8, color="tab:red", ha="right")
    markers = "osD^v<>p*h"
    hs = list(dict.fromkeys(r["H"] for r in rows))
    for r, xi in zip(rows, xs):
        ax.loglog(xi, point_rate(r), markers[hs.index(r["H"]) % len(markers)], ms=7,
                  color=f"C{int(np.log2(max(r['p'], 1)))}", mfc="none" if r["p"] == 1 else None)
    if any(not np.isfinite(r["ai"]) for r in rows):
        mark_no_exchange(ax, hi * 2, max(P_flops, peak or 0) * 1.3)
    finish_roofline(fig, ax, xlabel, title, max(P_flops, peak or 0))
    place_labels(fig, ax, [(xi, point_rate(r), f"H={r['H']} B={r['B']} p={r['p']}") for r, xi in zip(rows, xs)])
    return fig

LABEL_OFFSETS = sorted(((dx, dy) for dx in (5, -5, 45, -45) for dy in (-9, 3, -21, 15, -33, 27, -45, 39, -57, 51, -69, 63)),
                       key=lambda o: abs(o[0]) + abs(o[1] + 3))  # in points from the marker, nearest first


def place_labels(fig, ax, labels, fontsize: float = 6) -> None:
    """Annotate each (x, y, text) at the first offset (LABEL_OFFSETS) whose box meets no text already on the
    figure: the point labels of a crowded roofline stay readable (text_overlaps finds none). Kept on the
    figure, so that save places them again once the caption has moved the axes (replace_labels)."""
    from matplotlib.transforms import Bbox
    fig.perflab_labels = getattr(fig, "perflab_labels", []) + [(ax, labels, fontsize, len(ax.texts))]
    taken = [box for _, box in text_boxes(fig)]  # (it draws the figure)
    renderer = fig.canvas.get_renderer()
    for x, y in ax.transData.transform([(x, y) for x, y, _ in labels] or np.empty((0, 2))):  # the markers too
        taken.append(Bbox([[x - 5, y - 5], [x + 5, y + 5]]))
    inside = ax.get_window_extent(renderer)
    for x, y, text in labels:
        for dx, dy in LABEL_OFFSETS:
            note = ax.annotate(text, (x, y), fontsize=fontsize, xytext=(dx, dy), textcoords="offset points",
                               ha="left" if dx > 0 else "right", va="bottom", arrowprops=leader(dx, dy))
            box = text_box(note, renderer)
            if not any(box.overlaps(t) for t in taken) and inside.contains(box.x0, box.y0) \
                    and inside.contains(box.x1, box.y1):
                break
            note.remove()
        else:  # nowhere free inside the axes: the first place on the figure that is (text_overlaps says if none)
            for dx, dy in LABEL_OFFSETS:
                note = ax.annotate(text, (x, y), fontsize=fontsize, xytext=(dx, dy), textcoords="offset points",
                                   ha="left" if dx > 0 else "right", va="bottom", annotation_clip=False,
                                   arrowprops=leader(dx, dy))
                box = text_box(note, renderer)
                if not any(box.overlaps(t) for t in taken) and fig.bbox.contains(box.x0, box.y0) \
                        and fig.bbox.contains(box.x1, box.y1) or (dx, dy) == LABEL_OFFSETS[-1]:
                    break
                note.remove()
        taken.append(box)


def leader(dx: float, dy: float) -> dict | None:
    """A thin line from a label placed away from its marker back to it (none for the nearest places)."""
    return dict(arrowstyle="-", color="0.55", lw=0.5, shrinkA=0, shrinkB=4) if abs(dx) > 5 or abs(dy + 3) > 12 else None


def replace_labels(fig) -> None:
    """Take place_labels' annotations off and place them again, where the axes now are."""
    placed, fig.perflab_labels = getattr(fig, "perflab_labels", []), []
    for ax, _, _, before in placed:
        for note in ax.texts[before:]:
            note.remove()
    for ax, labels, fontsize, _ in placed:
        place_labels(fig, ax, labels, fontsize)


def no_exchange_x(ais, keys, hi: float) -> list[float]:
    """Where points are drawn: at their AI, or, for those that exchange nothing (AI infinite: one rank, or data
    resident on one GPU), past the finite points' right edge `hi`, one place a key (H, B, p) so a point's modes
    stand together, in a strip the figure marks."""
    slots = list(dict.fromkeys(k for k, a in zip(keys, ais) if not np.isfinite(a)))
    return [a if np.isfinite(a) else hi * 3 * 1.6 ** slots.index(k) for k, a in zip(keys, ais)]


def mark_no_exchange(ax, x0: float, y: float) -> None:
    ax.axvline(x0, color="0.7", ls=":", lw=1)
    ax.text(x0 * 1.08, y, "nothing exchanged\n(AI infinite)", fontsize=6, color="0.4", va="bottom")


def finish_roofline(fig, ax, xlabel: str, title: str, roof: float | None = None):
    ax.set_xlabel(xlabel)
    ax.set_ylabel("FLOP/s")
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    if roof:  # room above the highest roof for its label, under the title
        low, high = ax.get_ylim()
        ax.set_ylim(low, max(high, roof * 4))
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, loc="best")
    return fig


def predicted_vs_measured(table, title=""):
    """Bar chart of predicted and measured time per batch for each point, with the error; where the
    prediction has a band (a staged point: the copy ceiling's fastest and slowest walk), its ends
    as an error bar on the predicted one."""
    fig, ax = new_figure(7.5, 4.2)
    modes = "mode" in table and table["mode"].nunique() > 1
    labels = [f"H={r.H}\nB={r.B}\np={r.p}" + (f"\n{r.mode}" if modes else "") for r in table.itertuples()]
    x = np.arange(len(table))
    ax.bar(x - 0.2, table["measured_ms"], 0.4, label="measured")
    band = None
    if "predicted_low_ms" in table:
        band = np.nan_to_num(np.vstack([table["predicted_ms"] - table["predicted_low_ms"],
                                        table["predicted_high_ms"] - table["predicted_ms"]]).astype(float))
    ax.bar(x + 0.2, table["predicted_ms"], 0.4, yerr=band, capsize=2,
           label="predicted" + (" (bar: the staged copy's band)" if band is not None and band.any() else ""))
    for xi, (m, e) in enumerate(zip(table["measured_ms"], table["error"])):
        ax.text(xi, m * 1.02, f"{100 * e:+.0f}%", ha="center", fontsize=7)
    ax.set_xticks(x, labels, fontsize=7)
    ax.set_ylabel("ms per batch")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    return fig


def gemm_progression(bench, peak_tflops: float, shapes=("fwd1 H=512 B=3200", "fwd1 H=2048 B=12000", "bwd3 H=512 B=3200")):
    """SGEMM_CUDA-style progression: TFLOP/s of naive -> tiled -> regblock -> best, then the SGEMM
    peers (cuBLAS, and PyTorch and JAX where the bench ran them)."""
    fig, ax = new_figure()
    order = [v for v in ("naive", "tiled", "regblock", "best", "cublas", "pytorch", "jax") if v in set(bench["variant"])]
    for i, shape in enumerate(s for s in shapes if s in set(bench["shape"])):
        rows = bench[bench["shape"] == shape].set_index("variant").reindex(order)
        ax.plot(order, rows["tflops"], "o-", label=shape, color=f"C{i}")
    ax.axhline(peak_tflops, color="tab:red", ls="--", lw=1)
    ax.text(0, peak_tflops * 0.93, f"FP32 peak {peak_tflops:.1f} TFLOP/s", color="tab:red", fontsize=8)
    ax.set_ylabel("TFLOP/s (FP32)")
    ax.set_xlabel("GEMM variant")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def half_gemm_ratio(bench):
    """perflab's half-precision GEMM over cuBLAS's, shape by shape (`perflab bench gemm --dtype bfloat16`):
    above 1 faster; the geometric mean in the title, as #53's target reads it."""
    import numpy as np
    fig, ax = new_figure(7.5, 0.9 + 0.16 * bench["shape"].nunique())
    ours = bench[bench.variant != "cublas"].set_index("shape")
    ratio = ours.pct_cublas.reindex(list(dict.fromkeys(bench["shape"]))) / 100  # pct_cublas: 100 x cuBLAS ms / ours
    ax.barh(range(len(ratio)), ratio.values, color=["C0" if r >= 1 else "C1" for r in ratio.values])
    ax.set_yticks(range(len(ratio)))
    ax.set_yticklabels(ratio.index, fontsize=6)
    ax.invert_yaxis()
    ax.axvline(1.0, color="k", lw=0.8)
    ax.set_xlabel("cuBLAS's time / perflab's (above 1: perflab faster)")
    ax.set_title(f"{ours.variant.iloc[0]} {ours.dtype.iloc[0]} against cuBLAS: geometric mean "
                 f"{np.exp(np.log(ratio).mean()):.3f} over {len(ratio)} shapes", fontsize=9)
    ax.grid(True, axis="x", alpha=0.3)
    return fig


TENSOR_CORE_ORDER = ("cublas", "cublas-x3tf32", "jax-x3", "x3tf32", "wgmma", "pytorch-tf32")


def save_tensor_core_roofline(path, folder=None):
    """tensor_core_roofline of one committed bench_gemm_tensor_cores.csv, saved with its caption as
    tensor_core_roofline_<machine folder> (in the run folder's figures/, or `folder`)."""
    import pandas as pd
    path = Path(path)
    bench = pd.read_csv(path)
    return save(tensor_core_roofline(bench), f"tensor_core_roofline_{path.parent.name}",
                f"The big training GEMMs (forward 1, backward 3) on {bench.gpu.iloc[0]}: FP32 (cuBLAS), 3xTF32 (perflab's "
                f"x3tf32, JAX, three cuBLAS TF32 calls) and TF32 (perflab's wgmma, cuBLAS TF32) under the FP32 peak, the "
                f"fastest TF32 rate measured and a third of it (3xTF32's roof). Operands split or copied in every call. "
                f"Source: {path.parent.name}/{path.name}.", folder=folder)


def tensor_core_roofline(bench, shapes=("fwd1", "bwd3")):
    """The GEMMs of `bench gemm`'s tensor-core run on a roofline: the FP32 peak (SMs x 128 FMA lanes x
    clock), the TF32 tensor-core roof as the fastest TF32 GEMM measured (cuBLAS TF32, pytorch-tf32)
    and the 3xTF32 roof a third of it (three TF32 products an FP32 one), and the device-copy rate;
    points: each variant at each shape, its FLOPs over the bytes its operands and output hold."""
    fig, ax = new_figure()
    big = bench[bench["shape"].str.startswith(shapes)].copy()
    big["ai"] = 2.0 * big.M * big.N * big.K / (4.0 * (big.M * big.K + big.K * big.N + big.M * big.N))
    fp32, copy = 1e12 * bench.peak_tflops.iloc[0], 1e9 * bench.copy_rate_gbps.iloc[0]
    tf32 = 1e12 * bench[bench.variant == "pytorch-tf32"].tflops.max()
    x = np.logspace(np.log10(big.ai.min() / 10), np.log10(big.ai.max() * 3), 200)
    for rate, label, style in ((fp32, "FP32 peak", "k:"), (tf32, "TF32 tensor cores (fastest measured)", "k--"),
                               (tf32 / 3, "3xTF32: a third of it", "k-.")):
        if np.isfinite(rate):
            ax.loglog(x, np.minimum(rate, x * copy), style, lw=1.2)
            ax.text(x[0], rate * 1.08, f"{label}: {rate / 1e12:.3g} TFLOP/s", fontsize=7)
    ax.text(0.02, 0.03, f"slanted: device copy {copy / 1e9:.3g} GB/s", fontsize=7, color="0.4", transform=ax.transAxes)
    for i, variant in enumerate(v for v in TENSOR_CORE_ORDER if v in set(big.variant)):
        rows = big[big.variant == variant]
        ax.loglog(rows.ai, 1e12 * rows.tflops, "osD^v<"[i], color=f"C{i}", ms=6, label=variant, ls="none")
    from matplotlib.ticker import NullFormatter
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("arithmetic intensity (FLOPs / byte of operands and output)")
    ax.set_ylabel("FLOP/s")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    return fig


def held_clocks(holds, samples):
    """The SM clock (top) and board power (bottom) while `perflab bench hold` replayed best and
    cuBLAS on each shape: each hold shaded, labelled with its held TFLOP/s."""
    import matplotlib.pyplot as plt
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 5.6), sharex=True)
    start = min(samples["t"].min(), holds["t0"].min())
    for ax, column, label in ((top, "clock_mhz", "SM clock (MHz)"), (bottom, "power_w", "power (W)")):
        ax.plot(samples["t"] - start, samples[column], color="k", lw=0.8)
        ax.set_ylabel(label)
        ax.grid(True, alpha=0.3)
    for _, h in holds.iterrows():
        best = h["variant"] == "best"
        for ax in (top, bottom):
            ax.axvspan(h["t0"] - start, h["t1"] - start, color="tab:blue" if best else "tab:orange", alpha=0.2, lw=0)
        top.text((h["t0"] + h["t1"]) / 2 - start, 1.01 if best else 1.08, f"{h['tflops_held']:.1f}", fontsize=6,
                 ha="center", va="bottom", color="tab:blue" if best else "tab:orange",
                 transform=top.get_xaxis_transform())
    for shape, group in holds.groupby("shape", sort=False):
        bottom.text((group["t0"].min() + group["t1"].max()) / 2 - start, 0.02, shape, fontsize=7, ha="center",
                    va="bottom", transform=bottom.get_xaxis_transform())
    top.set_title("held TFLOP/s above each hold: best (blue), cuBLAS (orange)", fontsize=9, pad=22)
    bottom.set_xlabel("seconds")
    return fig


def convergence(losses_by_label: dict, ylabel="training loss", xlabel="epoch", logy=True):
    fig, ax = new_figure()
    for label, (x, y) in losses_by_label.items():
        ax.plot(x, y, "o-", ms=3, label=label)
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def train_peers(bench):
    """Epoch time of perflab and each peer per configuration (log scale)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter
    fig, ax = new_figure(7.5, 4.5)
    table = bench.pivot_table(index="peer", columns=["H", "B"], values="epoch_ms")
    table.plot.barh(ax=ax, logx=True)
    ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))  # 1, 2, 5, 10, 20 ...: read as plain ms
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_formatter(NullFormatter())  # a narrow log range labels its minor ticks on top of each other
    samples = f"{int(bench.N.iloc[0])} samples, " if "N" in bench else ""
    ax.set_xlabel(f"ms per epoch ({samples}data resident)\nFP32 unless the peer's name says otherwise")
    ax.grid(True, axis="x", alpha=0.3)
    ax.legend(title="H, B", fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))  # beside the bars, not on them
    return fig


def step_breakdown(steps):
    """Where a training step's time goes: the kernels perflab runs (stacked), beside the
    unfused kernels its fused ones replace, one bar pair per (H, B) (`perflab bench step`)."""
    import matplotlib.pyplot as plt
    fig, ax = new_figure(7.5, 4.5)
    names = list(dict.fromkeys(steps.kernel.str.replace("unfused: ", "", regex=False)))
    color = {n: plt.cm.tab20(i % 20) for i, n in enumerate(names)}
    labels, shown = [], set()
    for i, ((H, B), group) in enumerate(steps.groupby(["H", "B"])):
        for j, unfused in enumerate((False, True)):
            drop = "fused" if unfused else "unfused"  # unfused: what runs instead of the fused kernels
            left = 0.0
            for row in group[~group.kernel.str.startswith(drop)].itertuples():
                name = row.kernel.replace("unfused: ", "")
                ax.barh(2 * i + j, row.ms, left=left, color=color[name], label=None if name in shown else name)
                shown.add(name)
                left += row.ms
            labels.append(f"H={H} B={B} {'unfused' if unfused else 'perflab'}")
    ax.set_yticks(range(len(labels)), labels, fontsize=8)
    ax.set_xlabel("device ms per step (each kernel timed alone)")
    ax.grid(True, axis="x", alpha=0.3)
    ax.legend(fontsize=6, ncol=2, loc="lower right")
    return fig


def validation_scatter(tables: dict):
    """Predicted against measured ms per batch, one panel per machine folder (tables: folder ->
    its validation.csv), log-log, a colour per mode, hollow where p > 1; the diagonal with the
    inner and outer error bands' lines either side; a staged point's band as a vertical bar. Skipped points
    (no prediction) are left out."""
    import matplotlib.pyplot as plt
    tables = {k: t[t["predicted_ms"].notna()] for k, t in tables.items() if "predicted_ms" in t and t["predicted_ms"].notna().any()}
    fig, axes = plt.subplots(1, max(1, len(tables)), figsize=(3.6 * max(1, len(tables)), 3.9), squeeze=False)
    colours = {"resident": "C0", "staged": "C1", "pipelined": "C2", "numpy": "C4"}
    for ax, (folder, t) in zip(axes[0], tables.items()):
        t = t.assign(mode=t["mode"].where(t["backend"] != "numpy", "numpy")) if "backend" in t else t
        lo, hi = 0.7 * min(t.measured_ms.min(), t.predicted_ms.min()), 1.4 * max(t.measured_ms.max(), t.predicted_ms.max())
        line = np.array([lo, hi])
        ax.loglog(line, line, color="0.3", lw=1)
        for f, style in ((1.1, ":"), (1.25, "--")):
            for g in (f, 1 / f):
                ax.loglog(line, g * line, color="0.6", lw=0.8, ls=style)
        for mode, g in t.groupby("mode"):
            several = g.p > 1
            for mask, face in ((~several, colours.get(mode, "C3")), (several, "none")):
                part = g[mask]
                if not len(part):
                    continue
                ax.scatter(part.measured_ms, part.predicted_ms, s=16, facecolors=face, edgecolors=colours.get(mode, "C3"),
                           label=f"{mode}" + (", p > 1" if face == "none" else ""))
            if "predicted_low_ms" in g and g.predicted_low_ms.notna().any():
                b = g[g.predicted_low_ms.notna()]
                ax.vlines(b.measured_ms, b.predicted_low_ms, b.predicted_high_ms, color=colours.get(mode, "C3"), lw=0.8, alpha=0.6)
        err = (t.predicted_ms / t.measured_ms - 1).abs()
        ax.set_title(f"{folder}\n{len(t)} points, median |error| {err.median():.0%}, worst {err.max():.0%}", fontsize=8)
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        ax.set_xlabel("measured ms per batch", fontsize=8)
        ax.grid(True, which="both", alpha=0.2)
        ax.legend(fontsize=6, loc="upper left")
    axes[0][0].set_ylabel("predicted ms per batch (dotted 10%, dashed 25%)", fontsize=8)
    return fig


CHECK_COLOURS = {"resident, graphed": "C0", "staged": "C1", "kernel by kernel": "C3", "other": "C2"}  # predictions.CHECK_KINDS


def blind_checks(points):
    """|error| of every blind check's points (predictions.check_points), a panel per machine folder, the
    checks left to right in the order they ran, a colour per kind of step (check_kind), a line
    through each kind's median per check; the inner band dotted, the outer dashed."""
    import matplotlib.pyplot as plt
    points = points.assign(abs_error=points.error.abs())
    machines = sorted(points.machine.unique())
    fig, axes = plt.subplots(len(machines), 1, figsize=(9, 4.2 * len(machines)), squeeze=False)
    for ax, machine in zip(axes[:, 0], machines):
        t = points[points.machine == machine]
        order = sorted(t.check.unique(), key=lambda c: t[t.check == c].measured.iloc[0])
        x = {c: i for i, c in enumerate(order)}
        for kind, colour in CHECK_COLOURS.items():
            g = t[t.kind == kind]
            if not len(g):
                continue
            jitter = (np.arange(len(g)) % 7 - 3) * 0.03
            top = 3 if kind == "resident, graphed" else 2  # the kernels' points over the host's
            ax.scatter(g.check.map(x) + jitter, 100 * g.abs_error, s=9, color=colour, alpha=0.6, label=kind, zorder=top)
            med = g.groupby("check").abs_error.median()
            ax.plot([x[c] for c in order if c in med], [100 * med[c] for c in order if c in med], color=colour, lw=1.2,
                    zorder=top)
        for level, style in ((10, ":"), (25, "--")):
            ax.axhline(level, color="0.5", lw=0.8, ls=style)
        ax.set_xticks(range(len(order)))
        prefix = os.path.commonprefix(order).rpartition("_")[0]  # h100_..., h200...: the panel's title says it
        names = [c[len(prefix):].lstrip("_") for c in order]  # a deep check's widths run long: cut, marked
        ax.set_xticklabels([n if len(n) <= 32 else n[:31] + "…" for n in names], rotation=35, ha="right", fontsize=6)
        ax.set_ylabel("|error| %", fontsize=8)
        ax.set_title(f"{machine}: {len(order)} checks, {len(t)} points", fontsize=8)
        ax.grid(True, axis="y", alpha=0.2)
        ax.legend(fontsize=6, loc="upper right")
    return fig


def allreduce(bench, title=""):
    """Milliseconds of one all-reduce against its size, one line per implementation
    (`perflab bench allreduce`), with the gradient sizes of H=512 and H=2048 marked."""
    fig, ax = new_figure()
    for impl, g in bench.groupby("impl"):
        g = g.sort_values("size_bytes")
        ax.loglog(g.size_bytes, g.ms, "o-", label=impl)
    for H in (512, 2048):
        ax.axvline(perfmodel.gradient_buffer_bytes(H), color="0.7", ls=":", lw=1)
        ax.text(perfmodel.gradient_buffer_bytes(H), ax.get_ylim()[1] / 1.5, f" H={H}", fontsize=8, color="0.4")
    ax.set_xlabel("bytes all-reduced (float32)")
    ax.set_ylabel("ms per all-reduce")
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def ceiling_roofline(bounds, roofs: dict, title: str = ""):
    """The roofline whose roofs are this machine's measured ceilings: P_flops the fastest GEMM it
    ran, and for each data path in the points the serial bound AI / (AI / P_flops + 1 / BW) with BW
    its fastest measured links (staged GPU: PCIe and host MPI; CPU: MPI; resident: NCCL). Points
    (FLOP/s of the seeds' FLOPs over the measured batch) lie under their path's curve."""
    fig, ax = new_figure()
    paths = {"staged (PCIe + host MPI)": 2 / (1 / roofs["P_pci"] + 1 / roofs["P_mpi"]),
             "NumPy (host MPI)": 2 * roofs["P_mpi"], "resident (NCCL)": roofs["P_nccl"]}
    path_of = lambda r: "NumPy (host MPI)" if r["backend"] == "numpy" else (  # noqa: E731
        "staged (PCIe + host MPI)" if r["mode"] in HOST_STAGED else "resident (NCCL)")
    finite = list(bounds.ai[np.isfinite(bounds.ai)]) or [1.0]
    hi = max(finite) * 100
    shown = bounds.assign(x=no_exchange_x(list(bounds.ai), [(r.H, r.B, r.p) for r in bounds.itertuples()], hi))
    x = np.logspace(np.log10(min(finite) / 10), np.log10(max(list(shown.x) + [hi])), 200)
    ax.axhline(roofs["P_flops"], color="k", ls=":", lw=1)
    ax.text(x[0], roofs["P_flops"] * 1.08, f"P_flops = {roofs['P_flops'] / 1e12:.3g} TFLOP/s (fastest GEMM measured)",
            fontsize=8)
    top = roofs["P_flops"]
    if np.isfinite(roofs.get("P_half", np.nan)):  # --dtype bfloat16 | float16's GEMMs: the roof above FP32's
        top = roofs["P_half"]
        ax.axhline(top, color="tab:purple", ls="--", lw=1)
        ax.text(x[0], top * 1.08, f"P_half = {top / 1e12:.3g} TFLOP/s (cuBLAS BF16/FP16, fastest measured)", fontsize=8,
                color="tab:purple")
    marks = dict(zip(dict.fromkeys(shown["mode"]), "os^Dv<>p"))
    for i, (path, group) in enumerate(shown.groupby(shown.apply(path_of, axis=1))):
        bw = paths[path]
        ax.loglog(x, [perfmodel.roofline_serial(a, roofs["P_flops"], bw) for a in x], "-", color=f"C{i}", lw=2,
                  label=f"{path}: BW = {bw / 1e9:.3g} GB/s")
        for mode, points in group.groupby("mode"):
            ax.loglog(points.x, points.achieved, marks[mode], color=f"C{i}", ms=7, mfc="none")
    for mode, mark in marks.items():  # the marker names the mode
        ax.loglog([], [], mark, color="0.3", mfc="none", label=mode)
    if not np.isfinite(bounds.ai).all():
        mark_no_exchange(ax, hi * 2, roofs["P_flops"] * 1.3)
    finish_roofline(fig, ax, "arithmetic intensity (seeds' FLOPs / byte moved over PCIe + MPI)", title, top)
    labels = shown.groupby(["H", "B", "p", "x"], sort=False).achieved.max().reset_index()  # a label per place
    place_labels(fig, ax, [(r.x, r.achieved, f"H={r.H} B={r.B} p={r.p}") for r in labels.itertuples()])
    return fig


def timeline(lanes, rank: int = 0, title: str = ""):
    """A few training steps per mode, one row per lane (`perflab timeline`): in series each lane
    waits for the one before; pipelined, the copies and the host all-reduce run under compute."""
    import matplotlib.pyplot as plt

    from perflab.measure.timeline import LANE_ORDER
    t = lanes[lanes["rank"] == rank]
    modes = list(dict.fromkeys(t["mode"]))
    order = [lane for lane in LANE_ORDER if lane in set(t.lane)]
    fig, axes = plt.subplots(len(modes), 1, figsize=(9, 1.2 + 1.4 * len(modes)), sharex=True, squeeze=False)
    colors = {lane: plt.cm.tab10(i) for i, lane in enumerate(order)}
    for ax, mode in zip(axes[:, 0], modes):
        m = t[t["mode"] == mode]
        for y, lane in enumerate(order):
            g = m[m.lane == lane]
            ax.broken_barh(list(zip(g.start_ms, g.end_ms - g.start_ms)), (y - 0.4, 0.8), color=colors[lane])
        for _, g in m.groupby("batch"):  # where each step's compute starts
            ax.axvline(g[g.lane == "compute"].start_ms.min(), color="0.6", lw=0.5, ls=":")
        ax.set_yticks(range(len(order)), order, fontsize=7)
        ax.invert_yaxis()
        ax.set_title(f"{mode} (rank {rank})", fontsize=9, loc="left")
        ax.grid(True, axis="x", alpha=0.3)
    axes[-1, 0].set_xlabel("milliseconds (CUDA events on each stream; the host all-reduce on the host clock)")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def overlap_roofline(bounds, P_flops: float, title: str = ""):
    """The staged path's two rooflines (`analysis.overlap_bounds`) with the serial and the pipelined
    points of one run: the seeds' serial roofline, where copies, MPI and compute take turns, under
    the standard one, where they overlap."""
    fig, ax = new_figure()
    bw = float(bounds.BW.iloc[0])
    x = np.logspace(np.log10(bounds.ai.min() / 30), np.log10(max(bounds.ai.max(), P_flops / bw) * 30), 200)
    ax.loglog(x, [perfmodel.roofline_standard(a, P_flops, bw) for a in x], "k-", lw=2,
              label=f"standard: min(P_flops, AI BW), BW = {bw / 1e9:.3g} GB/s")
    ax.loglog(x, [perfmodel.roofline_serial(a, P_flops, bw) for a in x], "k--", lw=2, label="seeds' serial: AI / (AI/P_flops + 1/BW)")
    for i, (mode, group) in enumerate(bounds.groupby("mode")):
        ax.loglog(group.ai, group.achieved, "os"[i % 2], color=f"C{i}", ms=8, label=f"{mode} (measured)")
    finish_roofline(fig, ax, "arithmetic intensity (seeds' FLOPs / byte moved over PCIe + MPI)", title, P_flops)
    place_labels(fig, ax, [(r["ai"], r["achieved"], f"H={r['H']} p={r['p']}: {r['of standard']:.2f} of standard")
                           for _, r in bounds.iterrows()])
    return fig


def graphs_bought(table, title: str = ""):
    """Each point's batch launched kernel by kernel over the same batch replayed as one CUDA graph
    (markdown.launch_table rows, of one sweep or many): per GEMM, resident and staged side by side, a
    dot per point and a bar at their median."""
    fig, ax = new_figure(7.0, 4.0)
    gemms = sorted(set(table["gemm"]))
    x = np.arange(len(gemms))
    for k, (mode, colour) in enumerate((("resident", "tab:blue"), ("staged", "tab:orange"))):
        at = x + (k - 0.5) * 0.4
        ratios = [table[(table["mode"] == mode) & (table["gemm"] == g)]["eager / graph"].to_numpy() for g in gemms]
        ax.bar(at, [np.median(r) if len(r) else np.nan for r in ratios], 0.4, color=colour, alpha=0.5,
               label=f"{mode} (median)")
        for where, r in zip(at, ratios):
            ax.plot(np.full(len(r), where), r, "o", color=colour, ms=3)
    ax.axhline(1.0, color="black", lw=0.8)
    ax.set_xticks(x, gemms)
    ax.set_ylabel("eager / graph (time per batch)")
    ax.set_title(title or "What CUDA graphs buy")
    ax.legend()
    return fig


def scaling_epoch(shape, title: str = ""):
    """Epoch time against the number of GPUs, a line per peer, for the scaling_rows of one machine
    and shape (H, b): log time, the ticks at the p measured. A perflab variant that changes only
    the exchange and was not run on one GPU (roofline.one_gpu_twin) starts, dashed, from the
    one-GPU epoch it shares."""
    from matplotlib.ticker import ScalarFormatter

    from perflab.analysis.roofline import one_gpu_twin
    fig, ax = new_figure()
    ones = {row.peer: row.epoch_ms for row in shape[shape.p == 1].itertuples()}
    for peer, g in shape.sort_values("p").groupby("peer"):
        line, = ax.plot(g.p, g.epoch_ms, "o-", label=peer)
        twin = one_gpu_twin(peer)
        if 1 not in set(g.p) and twin != peer and twin in ones:
            ax.plot([1, g.p.iloc[0]], [ones[twin], g.epoch_ms.iloc[0]], "--", color=line.get_color())
    ax.set_xticks(sorted(int(p) for p in shape.p.unique()))
    ax.set_xlabel("GPUs p")
    ax.set_ylabel("ms per epoch (60000 samples)")
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(ScalarFormatter())
    ax.yaxis.set_minor_formatter(ScalarFormatter())
    ax.set_title(title)
    ax.legend(fontsize=8)
    return fig


def text_box(text, renderer):
    """The box of a text's letters alone: an annotation's own extent also spans its leader line."""
    import matplotlib.text
    if isinstance(text, matplotlib.text.Annotation):
        text.update_positions(renderer)
    return matplotlib.text.Text.get_window_extent(text, renderer)


def text_boxes(fig) -> list:
    """(text, box) of every text a reader sees on a drawn figure: titles, axis labels, annotations, texts
    placed in the axes or on the figure (the caption), each legend as one box. Tick labels are left to
    matplotlib, which spaces them. The figure is laid out as a draw would, without painting any pixel: savefig
    draws it again anyway."""
    import matplotlib.text
    from matplotlib.axis import Tick
    from matplotlib.legend import Legend
    fig.draw_without_rendering()
    renderer = fig.canvas.get_renderer()
    ticks = {id(t) for tick in fig.findobj(Tick) for t in (tick.label1, tick.label2)}
    legends = fig.findobj(Legend)
    inside = {id(t) for legend in legends for t in legend.findobj(matplotlib.text.Text)}
    out = [(f"legend: {', '.join(t.get_text() for t in legend.get_texts())}", legend.get_window_extent(renderer))
           for legend in legends if legend.get_visible()]
    for t in fig.findobj(matplotlib.text.Text):
        if id(t) in ticks or id(t) in inside or not t.get_visible() or not t.get_text().strip():
            continue
        out.append((t.get_text(), text_box(t, renderer)))
    return out


def text_overlaps(fig) -> list[tuple[str, str]]:
    """Pairs of texts (text_boxes) whose boxes intersect: a figure a reader cannot read."""
    boxes = text_boxes(fig)
    return [(a, b) for i, (a, box_a) in enumerate(boxes) for b, box_b in boxes[i + 1:] if box_a.overlaps(box_b)]


def usc(table, title: str = ""):
    """The USC seed's three plots side by side (perflab.workbook.usc): time per epoch, GFLOP/s and speedup over the
    serial run against cores, a line per net and way of running in parallel; the GPU's as a dashed level."""
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.8))
    columns = (("epoch_seconds", "seconds per epoch", True), ("gflops", "GFLOP/s (seeds' count)", True),
               ("speedup", "speedup over serial", True))
    styles = {"Network1": "-", "Network2": "--"}
    for ax, (column, label, log) in zip(axes, columns):
        for i, (way, marker) in enumerate((("examples", "o"), ("matrices", "s"))):
            for net, group in table[table.way.isin([way, "serial"])].groupby("net"):
                g = group.sort_values("cores")
                ax.plot(g.cores, g[column], styles.get(net, ":"), marker=marker, color=f"C{i}", ms=5,
                        label=f"{net}, {way}")
        for net, group in table[table.way == "gpu"].groupby("net"):
            ax.axhline(group[column].iloc[0], color="C2", ls=styles.get(net, ":"), lw=1, label=f"{net}, one GPU")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log" if log else "linear")
        ax.set_xlabel("CPU cores")
        ax.set_title(label, fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=6, loc="best")
    if title:
        fig.suptitle(title, fontsize=10)
    return fig


def precision(table, title: str = ""):
    """What each precision costs and buys (perflab.workbook.precision): the worst relative error of its weights
    against float64 after the same batches (log scale), and its training epoch's time, a bar each."""
    import matplotlib.pyplot as plt
    fig, (err, time) = plt.subplots(1, 2, figsize=(9, 3.6))
    names = list(table.precision)
    colors = [f"C{i}" for i in range(len(names))]
    err.bar(names, table.max_rel_error, color=colors)
    err.set_yscale("log")
    err.set_title("worst relative error of the weights against float64", fontsize=9)
    time.bar(names, 1e3 * table.epoch_seconds, color=colors)
    time.set_title("ms an epoch (training)", fontsize=9)
    for ax in (err, time):
        ax.tick_params(axis="x", labelsize=7, rotation=20)
        ax.grid(True, axis="y", which="both", alpha=0.3)
    if title:
        fig.suptitle(title, fontsize=10)
    return fig
