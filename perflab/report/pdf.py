"""`perflab report`: a run folder as a report a student could hand in, organized by the seeds'
questions (FLOPs and bytes, effective rates, rooflines, predicted against measured, scaling,
convergence, correctness), each with a text written from the numbers, real tables and its figures.

ReportLab lays it out (real tables and paragraphs, not Matplotlib pages of text); `invariant`
keeps the PDF's bytes the same for the same inputs (no timestamps, fixed document id).
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

SEEDS_RATES = {"P_flops": 1.63e12, "P_pci": 12.7e9, "P_mpi": 7.95e9}  # RTX 6000, the seeds' solution

# figure name prefixes by the section they belong to, in report order
FIGURE_SECTIONS = [
    ("The seeds' path, serial and pipelined", ("roofline_pipelined", "timeline_")),
    ("Rooflines with measured points", ("roofline_",)),
    ("Predicted against measured", ("predictor_vs_measured", "seeds_model_vs_measured", "predicted_vs_measured")),
    ("Scaling", ("scaling", "allreduce")),
    ("Convergence", ("convergence",)),
    ("Correctness against the sequential reference", ("correctness",)),
    ("Kernels and steps", ("gemm_", "half_gemm_", "train_peers", "train_tensor_cores", "tensor_core_roofline",
                           "step_breakdown", "held_clocks")),
]


def number(value) -> str:
    """Three significant digits, plain where that reads better."""
    if isinstance(value, (bool, np.bool_)):
        return "yes" if value else "no"
    if isinstance(value, (int, np.integer)):
        return str(value)
    if isinstance(value, (float, np.floating)):
        if not math.isfinite(value):
            return "-"
        if value != 0 and (abs(value) >= 1e5 or abs(value) < 1e-3):
            return f"{value:.3g}"
        return f"{value:.4g}"
    return str(value)


class Document:
    """A flowing list of ReportLab elements with the few styles the report uses."""

    def __init__(self):
        from reportlab.lib import colors
        from reportlab.lib.styles import ParagraphStyle, getSampleStyleSheet
        sheet = getSampleStyleSheet()
        self.colors = colors
        self.styles = {"title": sheet["Title"], "h1": sheet["Heading1"], "h2": sheet["Heading2"],
                       "body": ParagraphStyle("body", parent=sheet["BodyText"], fontSize=9.5, leading=12.5),
                       "small": ParagraphStyle("small", parent=sheet["BodyText"], fontSize=7.5, leading=9.5),
                       "cell": ParagraphStyle("cell", parent=sheet["BodyText"], fontSize=7.5, leading=9)}
        self.story = []
        self.held = []  # headings waiting for what they introduce
        self.figures = 0
        self.placed = []  # (page, flowable) as save laid them out

    def add(self, *flowables, together: bool = False) -> None:
        """Append to the story, kept on one page if `together`; headings held before go with them, so none
        is left alone at the foot of a page (keepWithNext does not hold a heading to a KeepTogether)."""
        from reportlab.platypus import KeepTogether
        if self.held or together:
            self.story.append(KeepTogether([*self.held, *flowables]))
            self.held = []
        else:
            self.story += flowables

    def texts(self) -> list[str]:
        """Every paragraph's text in story order (what a test reads)."""
        def walk(flowables):
            for f in flowables:
                yield from walk(f._content) if hasattr(f, "_content") else [getattr(f, "text", "")]
        return list(walk(self.story + self.held))

    def heading(self, text: str, level: int | str = 1) -> None:
        from reportlab.platypus import Paragraph
        paragraph = Paragraph(text, self.styles[level if level == "title" else f"h{level}"])
        if level == "title":
            self.add(paragraph)
        else:
            self.held.append(paragraph)

    def text(self, text: str, style: str = "body") -> None:
        from reportlab.platypus import Paragraph, Spacer
        self.add(Paragraph(text, self.styles[style]), Spacer(1, 4))

    def table(self, frame: pd.DataFrame, caption: str | None = None) -> None:
        from reportlab.lib.units import cm
        from reportlab.platypus import Paragraph, Spacer, Table, TableStyle
        cells = [[Paragraph(f"<b>{c}</b>", self.styles["cell"]) for c in frame.columns]]
        cells += [[Paragraph(number(v), self.styles["cell"]) for v in row] for row in frame.itertuples(index=False)]
        width = 17 * cm / max(1, len(frame.columns))
        table = Table(cells, colWidths=[width] * len(frame.columns), repeatRows=1, hAlign="LEFT")
        table.setStyle(TableStyle([("GRID", (0, 0), (-1, -1), 0.3, self.colors.grey),
                                   ("BACKGROUND", (0, 0), (-1, 0), self.colors.whitesmoke),
                                   ("VALIGN", (0, 0), (-1, -1), "TOP")]))
        self.add(table, Spacer(1, 4))
        if caption:
            self.text(caption, "small")

    def figure(self, png: Path) -> None:
        from reportlab.lib.units import cm
        from reportlab.lib.utils import ImageReader
        from reportlab.platypus import Image, Paragraph
        width, height = ImageReader(str(png)).getSize()
        shown = 16.5 * cm
        self.figures += 1
        label = Paragraph(f"<b>Figure {self.figures}.</b> {escape(caption(png))}", self.styles["small"])
        self.add(Image(str(png), width=shown, height=shown * height / width), label, together=True)

    def save(self, out: Path, title: str) -> Path:
        from reportlab.lib.pagesizes import A4
        from reportlab.lib.units import cm
        from reportlab.platypus import SimpleDocTemplate
        placed = self.placed

        class Template(SimpleDocTemplate):
            def afterFlowable(self, flowable):
                placed.append((self.page, flowable))

        def footer(canvas, doc):
            canvas.setFont("Helvetica", 7.5)
            canvas.drawString(2 * cm, 1.2 * cm, f"{title}  -  page {doc.page}")

        doc = Template(str(out), pagesize=A4, leftMargin=2 * cm, rightMargin=2 * cm, topMargin=1.8 * cm,
                       bottomMargin=2 * cm, title=title, author="perflab", invariant=1)
        doc.build(self.story + self.held, onFirstPage=footer, onLaterPages=footer)
        return out


def caption(png: Path) -> str:
    """The figure's caption as plots.save wrote it beside the image (<name>.txt): what it shows and its
    source file; a figure without one is named by its file."""
    text = png.with_suffix(".txt")
    said = text.read_text().strip() if text.exists() else ""
    return said or f"The figure {png.name}, drawn by perflab.report.plots from this folder's result files."


def escape(text: str) -> str:
    """ReportLab reads a paragraph as markup: a caption's '<' or '&' is text."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def title_page(doc: Document, title: str, folder: Path, sweeps: list[Path], figures: list[Path]) -> None:
    """The machine, the date, the commit and what was run, before anything else."""
    from reportlab.platypus import PageBreak
    doc.heading(title, "title")
    metas = [json.loads(p.with_suffix(".json").read_text()) for p in sweeps if p.with_suffix(".json").exists()]
    meta = metas[0] if metas else {}
    doc.text(f"<b>Machine:</b> {escape(machine_line(meta)) if meta else 'not recorded (no sweep metadata here)'}")
    doc.text(f"<b>Measured:</b> {meta.get('date', '?')}. <b>Code:</b> git {str(meta.get('git_commit', '?'))[:12]}.")
    from perflab.analysis import roofline
    ran, deeper = [], set()
    for path in sweeps:
        t = roofline.load(path)
        done = t[t["status"] == "measured"] if "status" in t else t
        deeper |= {str(h) for h in done.H if "-" in str(h)}
        if len(done):
            ran.append(f"<i>{path.name}</i>: {len(done)} points on {listed(done.backend)} (H {listed(done.H)}; "
                       f"B {listed(done.B)}; p {listed(done.p)}; modes {listed(done['mode'])})")
    notebooks = sorted(p.stem for p in (folder / "notebooks").glob("*.ipynb"))
    doc.text("<b>What was run:</b> " + ("; ".join(ran) if ran else "no sweep") + "."
             + (f" Notebooks executed: {', '.join(notebooks)}." if notebooks else "")
             + f" {len(figures)} figures.")
    nets = "784-H-10 sigmoid MLP" + (f" and deeper nets (784-{', 784-'.join(f'{h}-10' for h in sorted(deeper))})"
                                        if deeper else "")
    doc.text(f"Data-parallel training of the seeds' {nets} (softmax, cross-entropy, L2, SGD), measured by "
             "perflab on the machine named above. Every number comes from the result files in this folder, each "
             "with its machine metadata and git commit; the sections follow the seeds' questions.")
    doc.add(PageBreak())


def listed(column) -> str:
    return ", ".join(number(v.item() if hasattr(v, "item") else v) for v in sorted(column.unique()))


def machine_line(meta: dict) -> str:
    gpu = f"{meta['gpu']} x{meta.get('gpu_count', 1)}, " if meta.get("gpu") else "no GPU, "
    return (f"{gpu}{meta.get('cpu', '?')} ({meta.get('cpu_count', '?')} cores), host {meta.get('host', '?')}; "
            f"git {str(meta.get('git_commit', '?'))[:12]}, measured {meta.get('date', '?')}; "
            f"MPI {meta.get('mpi', '?')}, NumPy {meta.get('numpy', '?')}"
            + (f", CuPy {meta['cupy']}" if meta.get("cupy") else ""))


def sweep_section(doc: Document, path: Path) -> None:
    """The seeds' questions 2.1-2.6 from one roofline sweep."""
    from perflab.analysis import perfmodel, roofline
    meta = json.loads(path.with_suffix(".json").read_text()) if path.with_suffix(".json").exists() else {}
    table = roofline.load(path)
    failed = table[table["status"] == "failed"] if "status" in table else table.iloc[:0]
    table = roofline.measured(table)
    if not len(table):
        doc.text(f"{path.name} holds no measured point yet.")
        return
    staged = table[table["mode"] == "staged"] if (table["mode"] == "staged").any() else table
    backend = ", ".join(sorted(table.backend.unique()))
    doc.heading("What was measured", 2)
    doc.text(f"Machine: {machine_line(meta)}. Source: <i>{path.name}</i>, {len(table)} measured points on {backend} "
             f"(H {listed(table.H)}, B {listed(table.B)}, p {listed(table.p)}, modes {listed(table['mode'])})" + (f"; {len(failed)} point(s) failed and are left out: "
             + "; ".join(failed.error.astype(str)) if len(failed) else "") + ". Times are medians: epoch_ms over "
             "the unprofiled epochs after a warm-up, batch_ms the median batch iteration of a profiled epoch (the "
             "device synchronized at every phase edge).")
    shown = table.assign(epoch_ms=1e3 * table.epoch_seconds, batch_ms=1e3 * table["t_batch iteration"],
                         TFLOPs=table.flops_per_batch / table["t_batch iteration"] / 1e12)
    doc.table(shown[["H", "B", "p", "backend", "mode", "epoch_ms", "batch_ms", "TFLOPs"]].rename(
        columns={"TFLOPs": "TFLOP/s (seeds' count)"}))

    doc.heading("Questions 2.1 and 2.3: FLOPs and bytes per batch", 2)
    fb = roofline.flops_bytes_table(staged)
    first = fb.iloc[0]
    local_batch = int(first["B'"])
    gradient_mb = perfmodel.gradient_buffer_bytes(first["H"]) / 1e6
    net = perfmodel.net_label(first["H"])  # 512, or a deeper net's widths: 1024-1024
    doc.text(f"Per rank and batch the GEMM passes the seeds count (4B'H(D+C) with one hidden layer; every layer's "
             f"forward GEMM and weight gradient, and past the first its input gradient, with more) cost "
             f"{first['forward GFLOP'] + first['backward GFLOP']:.3g} GFLOP at H = {net}, B' = {local_batch}. "
             f"The gradient that crosses PCIe twice and the all-reduce once is {gradient_mb:.3g} MB at H = {net} "
             "and grows with H as the FLOPs do, so the arithmetic intensity (FLOPs per gradient byte) changes only with B/p: "
             f"{fb['AI (FLOP/B)'].min():.3g} to {fb['AI (FLOP/B)'].max():.3g} FLOP/byte here.")
    doc.table(fb)

    doc.heading("Question 2.4: effective rates", 2)
    rates = roofline.reference_rates(staged)
    rows = [{"rate": k, "measured": rates[k], "seeds' RTX 6000": SEEDS_RATES[k], "ratio": rates[k] / SEEDS_RATES[k]}
            for k in SEEDS_RATES if k in rates]
    doc.text(f"The seeds' formulas over the profiled phase medians of the reference point ({rates['reference']}): "
             "P_flops = GEMM FLOPs / GEMM time, P_pci = bytes copied / copy time, P_mpi = 2 x gradient bytes / all-reduce "
             "time." + (" On the CPU nothing crosses PCIe: the exchange is the MPI all-reduce alone." if "P_pci" not in rates
                        else ""))
    doc.table(pd.DataFrame(rows))

    if "P_pci" in rates or "P_mpi" in rates:
        bw = rates.get("P_pci", rates.get("P_mpi"))
        exchanged = staged[staged.p > 1]
        if len(exchanged):
            place = roofline.roofline_placement(exchanged, {**rates, "P_pci": bw})
            ridge = rates["P_flops"] / bw
            doc.heading("Questions 2.5 and 2.6: where the points fall on the modified roofline", 2)
            doc.text(f"The modified (serial) roofline AI / (AI / P_flops + 1 / BW), BW = {'P_pci' if 'P_pci' in rates else 'P_mpi'} "
                     f"= {bw:.3g} B/s, has its ridge at AI = {ridge:.3g} FLOP/byte. {int((place.AI < ridge).sum())} of "
                     f"{len(place)} points with p > 1 lie left of it, where moving the gradient takes "
                     f"{place['bytes share'].min():.0%} to {place['bytes share'].max():.0%} of the bound's time. They reach "
                     f"{place['of serial'].min():.2f} to {place['of serial'].max():.2f} of the bound."
                     + (" Points above 1 run their GEMMs faster than the reference point's P_flops (the seeds' method "
                        "takes every rate from one point)." if (place["of serial"] > 1).any() else "")
                     + (" Points below 1 pay what the roofline leaves out: elementwise kernels, launches, the "
                        "synchronization at each profiled phase edge." if (place["of serial"] < 1).any() else ""))
            doc.table(place)

    checked = path.parent / "validation.csv"
    if checked.exists():
        from perflab.analysis import validation
        v = pd.read_csv(checked)
        v = v[(v.source == path.name) & v.error.notna()] if "error" in v else v.iloc[:0]
        if len(v):
            worst = v.iloc[v.error.abs().argmax()]
            doc.heading("Predicted from the ceilings, before the sweep, against measured time per batch", 2)
            doc.text(f"perflab.analysis.predictor composes each point's step from this machine's ceilings files alone "
                     f"({', '.join(sorted(set(v.ceilings)))}): every kernel of the step timed alone, the trainer's host "
                     f"floor, the copies and all-reduces against size. {validation.describe(v)}; the worst, "
                     f"{worst.error:+.0%}, at H = {worst.H}, B = {int(worst.B)}, p = {int(worst.p)} ({worst['mode']}).")
            doc.table(v[["H", "B", "p", "mode", "measured_ms", "predicted_ms", "error"]])
    pred = roofline.prediction_table(staged, rates)
    doc.heading("Predicted against measured time per batch (the seeds' serial model)", 2)
    worst = pred.iloc[pred.error.abs().argmax()]
    doc.text(f"GEMM FLOPs / P_flops + bytes / P_pci + bytes / P_mpi, every rate from the reference point: median "
             f"|error| {roofline.median_abs_error(pred):.0%}, worst {worst.error:+.0%} at H = {worst.H}, "
             f"B = {int(worst.B)}, p = {int(worst.p)}. The model charges every GEMM at the reference point's rate, so points whose GEMMs run "
             "nearer the peak come out slower than predicted and the small ones faster.")
    doc.table(pred)
    if {"staged", "resident"} <= set(table["mode"]):
        both = table.pivot_table(index=["H", "B", "p"], columns="mode", values="t_batch iteration") * 1e3
        both["staged / resident"] = both["staged"] / both["resident"]
        doc.heading("The seeds' path (staged) against data on the GPU (resident), ms per batch", 2)
        doc.text(f"Copying each batch host to device and the gradient through host MPI costs "
                 f"{both['staged / resident'].min():.2f}x to {both['staged / resident'].max():.2f}x the resident batch.")
        doc.table(both.reset_index())
    if {"staged", "pipelined", "resident"} <= set(table["mode"]):
        epochs = table.pivot_table(index=["H", "B", "p"], columns="mode", values="epoch_seconds") * 1e3
        epochs["pipelined / resident"] = epochs["pipelined"] / epochs["resident"]
        epochs["staged / pipelined"] = epochs["staged"] / epochs["pipelined"]
        doc.heading("The seeds' path pipelined: ms per epoch, serial against overlapped", 2)
        doc.text(f"The same copies and host all-reduce on CUDA streams (--mode pipelined): the next batch copied from "
                 f"pinned memory while this one computes, the gradient sent down, all-reduced and sent back in pieces "
                 f"as backward makes them. Pipelined runs {epochs['pipelined / resident'].min():.2f}x to "
                 f"{epochs['pipelined / resident'].max():.2f}x the resident epoch, {epochs['staged / pipelined'].min():.2f}x "
                 f"to {epochs['staged / pipelined'].max():.2f}x faster than in series.")
        doc.table(epochs.reset_index())
        roofs_file = sorted(path.parent.glob("ceilings_p*.csv"))
        bounds = roofline.overlap_bounds(table, roofline.folder_roofs(path.parent, "gpu")) if roofs_file else pd.DataFrame()
        if len(bounds):
            doc.text("Where the exchanged points fall: the seeds' serial roofline, where copies, MPI and compute take "
                     "turns, against the standard one, where they overlap (the links from this machine's ceilings).")
            doc.table(bounds.drop(columns=["BW"]))


def figure_sections(doc: Document, figures: list[Path], level: int = 1) -> None:
    used = set()
    for section, prefixes in FIGURE_SECTIONS + [("Other figures", ("",))]:
        chosen = [f for f in figures if f.name.startswith(prefixes) and f not in used]
        if chosen:
            doc.heading(section, level)
            for f in chosen:
                doc.figure(f)
            used.update(chosen)


def report_sweeps(folder: Path) -> list[Path]:
    """The sweeps a report answers the seeds' questions for: the main job's (roofline*.csv) and any other the
    workbook or `perflab sweep` wrote there under a name of its own."""
    from perflab.analysis import validation
    return sorted(set(folder.glob("roofline*.csv")) | validation.marked_sweeps(folder))


def build(out: str | None = None, folder: Path | None = None) -> Path:
    """The report of one run folder (this machine's by default): its sweeps' questions answered,
    then its figures by section."""
    from perflab import results
    folder = Path(folder or results.run_dir())
    out = Path(out or folder / "report.pdf")
    figures = sorted((folder / "figures").glob("*.png"))
    sweeps = report_sweeps(folder)
    if not figures and not sweeps:
        raise FileNotFoundError(f"nothing to report in {folder}: run `perflab notebook roofline` first")
    doc = Document()
    title = f"perflab report: {folder.name}"
    title_page(doc, title, folder, sweeps, figures)
    for path in sweeps:
        doc.heading(f"The roofline sweep ({path.stem})", 1)
        sweep_section(doc, path)
    committed = {d.name for d in results.RESULTS_ROOT.iterdir() if d.is_dir()} if results.RESULTS_ROOT.is_dir() else set()
    others = [f for f in figures if any(f.stem.endswith("_" + name) for name in committed)]
    figure_sections(doc, [f for f in figures if f not in others])
    if others:
        doc.heading("The committed campaigns, for comparison", 1)
        doc.text("Other machines' results committed under results/ (each figure names its machine and commit), drawn by "
                 "the same code beside this machine's.")
        figure_sections(doc, others, level=2)
    out.parent.mkdir(parents=True, exist_ok=True)
    return doc.save(out, title)
