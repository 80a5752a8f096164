"""`perflab report`: a run folder as a report a student could hand in, organized by the seeds'
questions (FLOPs and bytes, effective rates, rooflines, predicted against measured, scaling,
convergence, correctness), each with a text written from the numbers, real tables and its figures.

ReportLab lays it out (real tables and paragraphs, not Matplotlib pages of text); `invariant`
keeps the PDF's bytes the same for the same inputs (no timestamps, fixed document id).
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

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

    def figure(self, png: Path, captioned_inside: bool = False) -> None:
        """A numbered figure, captioned once: under it, or (a notebook's figure that carries its caption
        inside the image) by its number alone."""
        from reportlab.lib.units import cm
        from reportlab.lib.utils import ImageReader
        from reportlab.platypus import Image, Paragraph
        width, height = ImageReader(str(png)).getSize()
        shown = 16.5 * cm
        self.figures += 1
        said = "" if captioned_inside else f" {escape(caption(png))}"
        label = Paragraph(f"<b>Figure {self.figures}.</b>{said}", self.styles["small"])
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


def title_page(doc: Document, title: str, run, first_lines: list[str]) -> None:
    """What was run (net, precision, machine, ranks), this run's conclusion, and the contents, before anything else."""
    from reportlab.platypus import PageBreak

    from perflab.report import questions
    doc.heading(title, "title")
    for line in first_lines:
        doc.text(f"<b>{escape(line)}</b>")
    meta, t = run.meta, run.table
    doc.text(f"<b>Machine:</b> {escape(machine_line(meta)) if meta else 'not recorded (no sweep metadata here)'}.")
    if len(t):
        doc.text(f"<b>What was run:</b> data-parallel training of the MLPs {', '.join(questions.net(h) for h in t.H.unique())} "
                 f"(sigmoid, softmax + cross-entropy, L2, SGD) in {run.dtype} on "
                 f"{'the GPU (CuPy)' if run.on_gpu else 'the CPU (NumPy)'}, p = {', '.join(map(str, run.ranks))} MPI "
                 f"rank(s), B {listed(t.B)}, data paths {listed(t['mode'])}: {len(t)} measured points in "
                 f"{', '.join(p.name for p in run.sweeps)}.")
        doc.text(f"<b>Conclusion:</b> {escape(questions.conclusion(run))}")
    doc.text("The seeds are the five course documents this report answers: " + "; ".join(
        f"<b>{k}</b>: {escape(v)}" for k, v in questions.SEEDS.items()) + ". Each section quotes its question, then "
        "answers it from this folder's files (named under each answer); rates come from one reference point"
        + (f", {run.rates['reference']}" if run.rates else "") + ".")
    doc.text("<b>Words used:</b> " + "; ".join(f"<i>{escape(k)}</i>: {escape(v)}" for k, v in questions.GLOSSARY.items())
             + ".", "small")
    doc.heading("Contents", 2)
    doc.text("<br/>".join(f"{q.id}: {escape(q.title)}" for q in questions.QUESTIONS)
             + "<br/>Appendix: other machines' committed campaigns")
    doc.add(PageBreak())


def answer_section(doc: Document, question, answer) -> None:
    """A question quoted, then its answer: text (naming its figures), tables with their captions, figures."""
    from perflab.report.answer import Missing
    doc.heading(f"{question.id}: {escape(question.title)}", 2)
    doc.text(f"<i>Topic: {escape(question.quote)}</i>" if question.topic else f"<i>\"{escape(question.quote)}\"</i>", "small")
    if isinstance(answer, Missing):
        doc.text(f"This run cannot answer: {escape(answer.why)}. What would: <font face='Courier'>{escape(answer.command)}"
                 "</font>.")
        return
    numbers = range(doc.figures + 1, doc.figures + 1 + len(answer.figures))
    refs = f" (Figure{'s' if len(answer.figures) > 1 else ''} {', '.join(map(str, numbers))}.)" if answer.figures else ""
    doc.text(answer.text + refs)
    for table, said in answer.tables:
        doc.table(table, said)
    for png in answer.figures:
        doc.figure(png)
    if answer.sources:
        doc.text("Source: " + ", ".join(f"<i>{escape(s)}</i>" for s in answer.sources) + ".", "small")


def listed(column) -> str:
    return ", ".join(number(v.item() if hasattr(v, "item") else v) for v in sorted(column.unique()))


def machine_line(meta: dict) -> str:
    gpu = f"{meta['gpu']} x{meta.get('gpu_count', 1)}, " if meta.get("gpu") else "no GPU, "
    return (f"{gpu}{meta.get('cpu', '?')} ({meta.get('cpu_count', '?')} cores), host {meta.get('host', '?')}; "
            f"git {str(meta.get('git_commit', '?'))[:12]}, measured {meta.get('date', '?')}; "
            f"MPI {meta.get('mpi', '?')}, NumPy {meta.get('numpy', '?')}"
            + (f", CuPy {meta['cupy']}" if meta.get("cupy") else ""))


def figure_sections(doc: Document, figures: list[Path], level: int = 1) -> None:
    used = set()
    for section, prefixes in FIGURE_SECTIONS + [("Other figures", ("",))]:
        chosen = [f for f in figures if f.name.startswith(prefixes) and f not in used]
        if chosen:
            doc.heading(section, level)
            for f in chosen:
                doc.figure(f, captioned_inside=True)
            used.update(chosen)


def report_sweeps(folder: Path, also=()) -> list[Path]:
    """The sweeps a report answers for: the main job's, and those named in `also`."""
    from perflab.analysis import validation
    return validation.main_sweeps(folder, tuple(also))


def build(out: str | None = None, folder: Path | None = None, also=()) -> Path:
    """The report of one run folder (this machine's by default): the seeds' questions in order, each answered
    from its sweeps; other machines' figures in an appendix."""
    from perflab import results
    from perflab.report import questions
    folder = Path(folder or results.run_dir())
    out = Path(out or folder / "report.pdf")
    figures = sorted((folder / "figures").glob("*.png"))
    sweeps = report_sweeps(folder, also)
    if not figures and not sweeps:
        raise FileNotFoundError(f"nothing to report in {folder}: run `perflab notebook roofline` first")
    run = questions.Run.load(folder, sweeps, out.parent / f"{out.stem}_figures")
    doc = Document()
    title = f"perflab report: {folder.name}"
    title_page(doc, title, run, first_lines(folder))
    answered = questions.answer_all(run)
    for source in questions.SEEDS:
        inside = [(q, a) for q, a in answered if q.id.split()[0] == source]
        if inside:
            doc.heading(escape(questions.SEEDS[source]), 1)
            for q, a in inside:
                answer_section(doc, q, a)
    committed = {d.name for d in results.RESULTS_ROOT.iterdir() if d.is_dir()} if results.RESULTS_ROOT.is_dir() else set()
    others = [f for f in figures if any(f.stem.endswith("_" + name) for name in committed)
              and not f.stem.startswith("roofline_")]  # rooflines: the report draws its own, from measured roofs only
    if others:
        doc.heading("Appendix: the committed campaigns of other machines", 1)
        doc.text("Other machines' results committed under results/ (each figure names its machine and commit), drawn by "
                 "the same code beside this machine's, for comparison only.")
        figure_sections(doc, others, level=2)
    out.parent.mkdir(parents=True, exist_ok=True)
    return doc.save(out, title)


def first_lines(folder: Path) -> list[str]:
    """What the report must say before anything else: whether the machine was noisy while it ran, then how long the
    main job took against its estimate."""
    try:
        from perflab.measure import steadiness
        from perflab.workbook import plan
    except ImportError:
        return []
    return ((steadiness.first_lines(folder) if (folder / "steadiness.csv").exists() else [])
            + plan.estimate_lines(folder))
