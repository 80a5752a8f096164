"""`perflab report`: every figure in results/figures with its caption, in one PDF."""
from __future__ import annotations

import textwrap
from pathlib import Path

from .plots import FIGURES
from .results import RESULTS_ROOT


def build(out: str | None = None) -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.image as mpimg
    import matplotlib.pyplot as plt
    from matplotlib.backends.backend_pdf import PdfPages
    out = Path(out or RESULTS_ROOT / "report.pdf")
    figures = sorted(FIGURES.glob("*.png"))
    if not figures:
        raise FileNotFoundError(f"no figures in {FIGURES}: run `perflab notebook roofline` first")
    with PdfPages(out) as pdf:
        page = plt.figure(figsize=(8.27, 11.69))
        page.text(0.1, 0.9, "perflab report", fontsize=20)
        lines = [f"{i + 1}. {f.stem}" for i, f in enumerate(figures)]
        page.text(0.1, 0.85, "\n".join(lines), fontsize=9, va="top", family="monospace")
        pdf.savefig(page)
        plt.close(page)
        for f in figures:
            page = plt.figure(figsize=(8.27, 11.69))
            ax = page.add_axes((0.05, 0.3, 0.9, 0.65))
            ax.imshow(mpimg.imread(f))
            ax.axis("off")
            caption = f.with_suffix(".txt").read_text() if f.with_suffix(".txt").exists() else f.stem
            page.text(0.07, 0.27, "\n".join(textwrap.wrap(f"{f.stem}: {caption}", 95)), fontsize=9, va="top")
            pdf.savefig(page)
            plt.close(page)
    return out


# ------------------------------------------------------------------ tables from result files
def fmt(table) -> str:
    """A pandas table as GitHub markdown (no extra dependency)."""
    cols = list(table.columns)
    lines = ["| " + " | ".join(map(str, cols)) + " |", "|" + "---|" * len(cols)]
    for row in table.itertuples(index=False):
        lines.append("| " + " | ".join(f"{v:.3g}" if isinstance(v, float) else str(v) for v in row) + " |")
    return "\n".join(lines)


def source(path: Path) -> str:
    import json
    meta = json.loads(path.with_suffix(".json").read_text()) if path.with_suffix(".json").exists() else {}
    what = meta.get("gpu") or meta.get("cpu", "?")
    return f"`{path.relative_to(RESULTS_ROOT.parent)}` ({what}, git {str(meta.get('git_commit', '?'))[:8]}, {meta.get('date', '?')})"


def train_table(path: Path) -> str:
    import pandas as pd
    t = pd.read_csv(path)
    wide = t.pivot_table(index="peer", columns=["H", "B"], values="epoch_ms")
    wide.columns = [f"H={h} B={b} (ms)" for h, b in wide.columns]
    best_peer = {}
    for (h, b), group in t.groupby(["H", "B"]):
        peers = group[~group.peer.str.startswith(("perflab", "cublas"))]
        ours = group[group.peer.str.startswith("perflab")].epoch_ms.min()
        if len(peers):
            best = peers.loc[peers.epoch_ms.idxmin()]
            best_peer[f"H={h} B={b}"] = f"best peer {best.peer} {best.epoch_ms:.2f} ms; perflab best {ours:.2f} ms; " \
                                        f"ratio {ours / best.epoch_ms:.2f}"
    out = fmt(wide.reset_index().round(3))
    return out + "\n\n" + "\n".join(f"- {k}: {v}" for k, v in best_peer.items())


def gemm_table(path: Path) -> str:
    import math

    import pandas as pd
    t = pd.read_csv(path)
    big = t[t["shape"].str.startswith(("fwd1", "bwd3"))]
    wide = big.pivot_table(index="shape", columns="variant", values="tflops", sort=False).round(2)
    ratio = big[big.variant == "best"].set_index("shape")["pct_cublas"] / 100
    geo = math.exp(ratio.apply(math.log).mean())
    return (fmt(wide.reset_index()) + f"\n\nTFLOP/s (FP32). `best` against cuBLAS at the H x 784 shapes: geometric mean "
            f"{geo:.2f}, worst {ratio.min():.2f} ({ratio.idxmin()}).")


def scaling_table(path: Path) -> str:
    import json

    import pandas as pd
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.startswith("{")]
    t = pd.DataFrame(rows)
    wide = t.pivot_table(index="peer", columns="p", values="epoch_ms")
    wide.columns = [f"p={p} (ms)" for p in wide.columns]
    ps = sorted(t.p.unique())
    if len(ps) > 1:
        p = ps[-1]
        wide[f"efficiency p={p}"] = wide[f"p={ps[0]} (ms)"] / (p * wide[f"p={p} (ms)"])
    return fmt(wide.reset_index().round(3))


def markdown() -> str:
    """The result tables the README shows, each generated from its committed file."""
    parts = []
    for path in sorted(RESULTS_ROOT.glob("*/bench_train.csv")):
        parts.append(f"### Training epoch, perflab beside its peers\n\nSource: {source(path)}. 60000 samples, FP32, "
                     f"TF32 off, data resident, median of 5 epochs.\n\n{train_table(path)}")
    for path in sorted(RESULTS_ROOT.glob("*/bench_gemm_float32.csv")):
        parts.append(f"### GEMM variants at the training shapes\n\nSource: {source(path)}.\n\n{gemm_table(path)}")
    for path in sorted(RESULTS_ROOT.glob("*/scaling.jsonl")):
        meta = path.with_name("roofline.json")
        parts.append(f"### Data-parallel scaling, H=2048, 3000 samples per GPU per step, 60000 an epoch\n\n"
                     f"Source: `{path.relative_to(RESULTS_ROOT.parent)}` (machine in `{meta.name}` beside it).\n\n"
                     f"{scaling_table(path)}")
    for path in sorted(RESULTS_ROOT.glob("*/reference_mnist.csv")):
        import pandas as pd
        t = pd.read_csv(path)
        last = t.iloc[-1]
        parts.append(f"### CPU reference on MNIST\n\nSource: {source(path)}. After {int(last.epoch) + 1} epochs: test "
                     f"precision {last['test_precision']:.4f}, median epoch {t['seconds'].median():.2f} s "
                     f"({last['dtype']}, H={last['hidden_sizes']}, B={last['batch_size']}, lr={last['learning_rate']}, "
                     f"reg={last['reg']}).")
    return "\n\n".join(parts) + "\n"


BEGIN, END = "<!-- results: generated by `perflab report --readme` -->", "<!-- end of results -->"


def update_readme(readme: Path) -> bool:
    """Replace the generated block of the README; True when it changed."""
    text = readme.read_text()
    start, stop = text.index(BEGIN) + len(BEGIN), text.index(END)
    new = text[:start] + "\n" + markdown() + text[stop:]
    if new != text:
        readme.write_text(new)
    return new != text
