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
