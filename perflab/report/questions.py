"""The report's outline: the seeds' questions in their documents' order, each quoted, each answered from
one run folder's files (or, where a question needs what this run cannot do, from the committed campaign
files it names, or by a line saying which command would answer it). The PDF (`perflab.report.pdf`) lays
this list out; a test walks it.

Every rate, bound and utilization of a report comes from one reference point (`Run.rates`), named where it
is used, so a table and a figure never disagree about P_flops, P_pci or P_mpi.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from perflab.report.answer import Answer, Missing

SEEDS = {  # the source documents, named once (shared/seeds/README.md)
    "HW6": "CME 213 (Stanford, 2024), Homework 6: data-parallel MLP training on MPI + GPU",
    "FA": "CME 213, final assignment (with its solution): profiling, convergence, rooflines",
    "2019": "CME 213 (2019), final project, Part I: GEMM kernels and model parallelism",
    "HKUST": "HKUST COMP 4901Q, lecture 12: large-scale machine learning on HPC",
    "USC": "USC slides: parallel gradient descent for feed-forward networks",
}
GLOSSARY = {  # the words the answers use, defined once at the top of a report
    "data paths": "staged is the seeds' path (each batch's images copied from pageable host memory, the gradient "
                  "through the host and MPI, one step after another); pipelined is the same copies from pinned memory "
                  "on CUDA streams, overlapped with compute; resident keeps the data on the GPU and all-reduces there "
                  "(NCCL)",
    "ceilings": "this machine's microbenchmarks, timed before the sweep: GEMMs, copies, all-reduces, every kernel of the "
                "step; the predictor composes a batch from them alone",
    "reference point": "the one sweep point whose profiled phases give the seeds' effective P_flops, P_pci, P_mpi",
    "B' = B/p": "the batch a rank computes when the global batch B is split over p ranks",
    "AI": "arithmetic intensity, FLOPs over the bytes a roofline counts (each figure says which)",
    "time a batch": "profiled: the median batch of an epoch timed phase by phase, the device synchronized at every "
                    "phase edge (what the seeds plot); unprofiled: an epoch's time over its batches, shorter by those "
                    "synchronizations",
}
SEEDS_RTX6000 = {"P_flops": 1.63e12, "P_pci": 12.7e9, "P_mpi": 7.95e9}  # the final assignment's solution (Q2.4)
SEEDS_SHARES = {"copying images host -> device": 0.51, "forward": 0.12, "backward": 0.37}  # its Q2.1, one batch


@dataclass
class Question:
    id: str  # "FA Q2.4": the document's key in SEEDS, then its own number
    title: str
    quote: str  # the question's words, shortened where marked [...]
    answer: Callable  # (Run) -> Answer | Missing
    topic: bool = False  # the seed has no question here (a lecture's slide): `quote` says what it covers, unquoted

    @property
    def document(self) -> str:
        return SEEDS[self.id.split()[0]]


@dataclass
class Run:
    """One run folder as the report reads it: its main sweeps' measured points, their metadata, and the
    one reference point every rate comes from."""
    folder: Path
    sweeps: list
    table: pd.DataFrame
    meta: dict
    figures: Path  # where the report's own figures go
    rates: dict = field(default_factory=dict)
    found: dict = field(default_factory=dict)  # answers computed once for several questions (Problem 1's)

    @property
    def backend(self) -> str:
        return str(self.table.backend.iloc[0]) if len(self.table) else "numpy"

    @property
    def on_gpu(self) -> bool:
        return self.backend == "cupy"

    @property
    def ranks(self) -> list[int]:
        return sorted(int(p) for p in self.table.p.unique())

    @property
    def seeds_path(self) -> pd.DataFrame:
        """The seeds' data path: staged on a GPU (images and gradients through the host), every point on the CPU."""
        staged = self.table[self.table["mode"] == "staged"]
        return staged if len(staged) else self.table

    @property
    def dtype(self) -> str:
        return ", ".join(sorted(self.table.dtype.astype(str).unique())) if "dtype" in self.table else "float32"

    @classmethod
    def load(cls, folder: Path, sweeps: list, figures: Path) -> Run:
        from perflab.analysis import roofline
        tables, meta = [], {}
        for path in sweeps:
            t = roofline.measured(roofline.load(path))
            tables.append(t.assign(source=path.name))
            if not meta and path.with_suffix(".json").exists():
                meta = json.loads(path.with_suffix(".json").read_text())
        table = pd.concat(tables, ignore_index=True) if tables else pd.DataFrame(columns=["H", "B", "p", "backend", "mode"])
        run = cls(Path(folder), list(sweeps), table, meta, Path(figures))
        if len(table):
            run.rates = roofline.reference_rates(run.seeds_path)
        return run


# ------------------------------------------------------------------ small helpers
def ms(seconds: float) -> str:
    return f"{1e3 * seconds:.3g} ms"


def pct(fraction: float) -> str:
    return f"{100 * fraction:.0f}%" if abs(fraction) >= 0.095 else f"{100 * fraction:.1f}%"


def rate(value: float, unit: str = "FLOP/s") -> str:
    if unit == "B/s":
        return f"{value / 1e9:.3g} GB/s"
    return f"{value / 1e12:.3g} TFLOP/s" if value >= 1e11 else f"{value / 1e9:.3g} GFLOP/s"


def net(h) -> str:
    from perflab.analysis.perfmodel import net_label
    return f"784-{net_label(h)}-10"


def nets_in(table: pd.DataFrame) -> list[str]:
    """The nets of a table, by width (512 before 1024 before 2048), as 784-H-10."""
    from perflab.analysis.perfmodel import widths
    return [net(h) for h in sorted(table.H.unique(), key=lambda h: (len(widths(h)), widths(h)))]


def batch_seconds(row) -> float:
    from perflab.analysis.roofline import measured_batch_seconds
    return float(measured_batch_seconds(row))


def where(run: Run) -> str:
    return "GPU" if run.on_gpu else "CPU"


def more_ranks_command(run: Run) -> str:
    return ("make roofline on a machine with 2 or 4 GPUs (engines = GPUs)" if run.on_gpu
            else "make roofline ROOFLINE_ARGS=\"-p engines 2\" (MPI ranks on this machine's cores)")


def machine_ceilings(run: Run) -> dict:
    """This machine's roofs from its ceilings files (the fastest GEMM, pinned copy, all-reduce), or {} where none."""
    from perflab.analysis import roofline
    try:
        return roofline.folder_roofs(run.folder, "gpu" if run.on_gpu else "cpu")
    except (FileNotFoundError, KeyError, ValueError):
        return {}


def peak(run: Run) -> tuple[float, str]:
    """The utilization's denominator: the fastest GEMM this machine's ceilings measured (a measured peak,
    where the seeds used the datasheet's), else the reference point's P_flops."""
    from perflab.analysis import roofline
    try:
        roofs = roofline.folder_roofs(run.folder, "gpu" if run.on_gpu else "cpu")
        if math.isfinite(roofs.get("P_flops", math.nan)):
            return roofs["P_flops"], "the fastest GEMM in this machine's ceilings"
    except (FileNotFoundError, KeyError, ValueError):
        pass
    return run.rates["P_flops"], f"P_flops of the reference point ({run.rates['reference']})"


# ------------------------------------------------------------------ HW6
def strong_scaling(t: pd.DataFrame, top: float, per_rank: bool) -> pd.DataFrame:
    """HW6 Q2.1's table: each (data path, B, p) point's time a batch from its unprofiled epochs (what a user waits
    for; the profiled batch adds a synchronization at every phase edge), its FLOP rate and utilization: a rank's
    rate over one GPU's peak on GPUs, the ranks' summed rate over the machine's peak on the CPU (its ranks share it)."""
    rows = []
    for _, r in t.sort_values(["mode", "B", "p"]).iterrows():
        seconds = r["epoch_seconds"] / r["batches"]
        rank_rate = r["flops_per_batch"] / seconds
        rows.append({"data path": r["mode"], "B": int(r["B"]), "p": int(r["p"]), "B' = B/p": int(r["B"]) // int(r["p"]),
                     "epoch (ms)": 1e3 * r["epoch_seconds"], "time a batch (ms)": 1e3 * seconds,
                     "TFLOP/s a rank": rank_rate / 1e12,
                     "utilization (%)": 100 * (rank_rate if per_rank else rank_rate * r["p"]) / top})
    return pd.DataFrame(rows)


def trend(table: pd.DataFrame, B: int) -> str:
    """How the epoch moves with p at one B, said from the numbers."""
    at = table[table.B == B].sort_values("p")
    if len(at) < 2:
        return ""
    epochs = ", ".join(f"{v:.3g}" for v in at["epoch (ms)"])
    way = "longer" if at["epoch (ms)"].iloc[-1] > at["epoch (ms)"].iloc[0] else "shorter"
    return f"at B = {B} the epoch gets {way} with p ({epochs} ms at p = {', '.join(map(str, at.p))})"


def hw6_q2_1(run: Run) -> Answer | Missing:
    from perflab.analysis import roofline
    t = run.table[run.table.H.astype(str).isin(["512"]) & run.table["mode"].isin(["staged", "resident"])]
    if not (t.B == 3200).any():
        return Missing("this run has no H = 512 point at B = 3200", "make roofline (its plan sweeps B = 3200 split over p)")
    fb = roofline.flops_bytes_table(t[t.B == 3200].iloc[:1]).iloc[0]
    top, said = peak(run)
    table = strong_scaling(t[t.B.isin([800, 3200, 12000])], top, per_rank=run.on_gpu)
    at = table[table.B == 3200]
    text = (f"Forward: the dominant GEMMs z1 = W1 X and z2 = W2 a1 cost 2B'HD + 2B'HC = 2B'H(D + C) FLOPs; backward, "
            f"dW1 = dz1 X^T and dW2 = dz2 a1^T cost the same again, so a batch costs about 4B'H(D + C) a rank "
            f"({fb['forward GFLOP'] + fb['backward GFLOP']:.3g} GFLOP at H = 512, B' = {int(fb[chr(66) + chr(39)])}; the "
            f"update adds only 2(HD + H + CH + C)). Utilization is the achieved FLOP rate over {rate(top)}, {said} "
            f"(the seeds took the datasheet's 16.3 TFLOP/s of the RTX 6000), "
            + ("a rank's rate over one GPU's peak. " if run.on_gpu else "the ranks' summed rate over the machine's peak "
               "(they share its cores). ")
            + "At B = 3200: " + "; ".join(f"{r['data path']} p = {r.p}: {r['utilization (%)']:.1f}%" for _, r in at.iterrows())
            + ". ")
    said_trends = [x for x in (trend(table[table["data path"] == table["data path"].iloc[0]], b) for b in (3200, 12000)) if x]
    if said_trends:
        text += ("Measured here, " + " and ".join(said_trends) + ". Splitting a fixed B shrinks each rank's GEMMs (B' = "
                 "B/p), which then run further from the peak, while each rank still exchanges the whole gradient; a "
                 "larger B keeps the GEMMs large and the exchange a smaller share.")
    elif len(run.ranks) > 1:
        text += ("Only p = 1 ran at B = 3200 in this folder (its p > 1 points keep B/p constant, HW6 Q2.2): the main job "
                 "of this version also splits B = 3200 over every p.")
    else:
        text += f"Only p = 1 ran here: {more_ranks_command(run)} adds p = 2 and 4."
    tables = [(table, "B = 800, 3200 and 12000 split over p ranks (strong scaling), H = 512; time a batch from the "
                      "unprofiled epochs.")]
    sources = sorted(set(t.source))
    four = committed(HW6_FOUR_GPUS)
    if four is not None and run.ranks[-1] < 4:
        from perflab.analysis.roofline import measured
        c = measured(pd.read_csv(four))
        h100 = roofline.folder_roofs(four.parent.parent / "nvidia-h100-80gb-hbm3", "gpu")["P_flops"]
        ft = strong_scaling(c, h100, per_rank=True)
        text += (f" On four H100 (committed, N = 38400; utilization over {rate(h100)}, the one-H100 ceilings' fastest "
                 f"GEMM), on the seeds' staged path {trend(ft[ft['data path'] == 'staged'], 3200)}, and "
                 f"{trend(ft[ft['data path'] == 'staged'], 12000)}: at B = 3200 the copies and the host all-reduce, not "
                 "the GEMMs, set the time.")
        tables.append((ft, "Four H100: B = 800, 3200, 12000 split over p = 1, 2, 4, both data paths."))
        sources.append(f"results/{HW6_FOUR_GPUS}")
    return Answer(text, tables, sources=sources)


def hw6_q2_2(run: Run) -> Answer | Missing:
    from perflab.analysis import perfmodel, roofline
    t = run.seeds_path
    if not len(t):
        return Missing("no measured point", "make roofline")
    rows = []
    for _, r in t.iterrows():
        w = roofline.workload(r)
        by = perfmodel.phase_bytes(w)
        rows.append({"net": net(r["H"]), "B": int(r["B"]), "p": int(r["p"]), "epoch (ms)": 1e3 * r["epoch_seconds"],
                     **({"images H2D (MB)": by["pcie_images"] / 1e6, "gradient D2H (MB)": by["pcie_gradients"] / 2e6,
                         "gradient H2D (MB)": by["pcie_gradients"] / 2e6} if run.on_gpu else {}),
                     "MPI (MB, the seeds' 2x model)": by["mpi_seeds"] / 1e6})
    table = pd.DataFrame(rows)
    derivation = ("<b>Why the modified roofline.</b> The copies do not overlap compute, so the time of a batch is the "
                  "sum T = FLOPs / P_flops + Bytes / BW, not the maximum. Then FLOPs / T = FLOPs / (FLOPs / P_flops + "
                  "Bytes / BW); dividing above and below by Bytes, with AI = FLOPs / Bytes: FLOPs / T = AI / (AI / P_flops "
                  "+ 1 / BW). It tends to P_flops for large AI and to AI x BW for small AI, but lies below min(P_flops, "
                  "AI x BW) everywhere, by half at the ridge AI = P_flops / BW.")
    if run.on_gpu:
        where_bytes = ("Every cudaMemcpy between host and device is counted: the images of B' samples host to device "
                       "(D B' b bytes and their labels) and the two copies hidden in the all-reduce (gradient down, "
                       "sum back up: 2(HD + H + CH + C)b at p > 1).")
    else:
        where_bytes = ("On the CPU nothing crosses PCIe: the data are in the rank's memory and the gradient goes "
                       "through MPI only (2(HD + H + CH + C)b at p > 1), so the roofline's bandwidth is P_mpi.")
    count = count_of(run, "hw6")
    figure = roofline_figure(run, t, "hw6_roofline", count)
    text = (f"Time per epoch ({int(t.N.iloc[0])} samples; the seeds' 38400) of every point of the seeds' path is in the "
            f"table. {epoch_trends(t)}{where_bytes} {derivation} {placement(run, t, count)}")
    return Answer(text, [(table, "Time per epoch and the bytes of every copy a batch, per rank.")],
                  [figure] if figure else [], sorted(set(t.source)))


COUNTS = {  # what a roofline's AI counts as bytes moved: HW6 every cudaMemcpy; the final assignment the exchange
    "hw6": "every cudaMemcpy between host and device: images and the gradient's two copies",
    "fa": "the gradient's bytes over PCIe and MPI (images left out, as FA Q2.3 says)",
    "cpu": "the gradient's bytes through MPI (nothing crosses PCIe on the CPU)",
}


def count_of(run: Run, asked: str) -> str:
    """The count a roofline of this run can use: on the CPU the MPI bytes; on one GPU, where nothing is exchanged,
    HW6's (the images are all that crosses PCIe)."""
    if not run.on_gpu:
        return "cpu"
    if asked == "fa" and not ({"P_pci", "P_mpi"} <= set(run.rates) and (run.table.p > 1).any()):
        return "hw6"
    return asked


def ai_of(row, count: str) -> float:
    from perflab.analysis import perfmodel, roofline
    w = roofline.workload(row)
    by = perfmodel.phase_bytes(w)
    moved = {"hw6": by["pcie_images"] + by["pcie_gradients"], "fa": by["pcie_gradients"] + by["mpi_seeds"],
             "cpu": by["mpi_seeds"]}[count]
    flops = sum(perfmodel.seeds_flops(w)[k] for k in ("forward", "backward"))
    return flops / moved if moved else math.inf


def bandwidth(run: Run, count: str) -> tuple[float | None, str]:
    """The roof's bandwidth from what this run measured, or None (no roof is invented): HW6's from every copy's
    bytes over their time at the reference point (or the last point that copied); the final assignment's
    combined roof from P_pci and P_mpi; the CPU's P_mpi where ranks exchanged."""
    if count == "cpu":
        return (run.rates["P_mpi"], "P_mpi") if "P_mpi" in run.rates and (run.table.p > 1).any() else (None, "")
    if count == "fa":
        return (2 / (1 / run.rates["P_pci"] + 1 / run.rates["P_mpi"]), "BW of P_pci, P_mpi")
    copies = ["t_copying images host -> device", "t_cudaMemcpyDeviceToHost", "t_cudaMemcpyHostToDevice"]
    t = run.seeds_path
    if copies[0] not in t or not (t["bytes_images"] > 0).any():
        return None, ""
    ref = reference_row(run)
    r = ref if ref is not None and ref.get("bytes_images", 0) > 0 else t[t["bytes_images"] > 0].iloc[-1]
    seconds = sum(r[c] for c in copies if c in r and np.isfinite(r[c]))
    return float((r["bytes_images"] + r.get("bytes_pcie", 0.0)) / seconds), "P_pci (every copy)"


def roofline_plot(run: Run, points: pd.DataFrame, count: str):
    """(figure, BW, its label, AI of each point), or None where no bandwidth was measured."""
    from perflab.report import plots
    bw, label = bandwidth(run, count)
    if bw is None:
        return None
    pts = points.assign(ai=[ai_of(r, count) for _, r in points.iterrows()])
    fig = plots.roofline(pts, run.rates["P_flops"], bw, kind="serial", title=f"{'Combined PCIe + MPI' if count == 'fa' else 'Modified (serial)'} "
                         f"roofline, {machine_name(run)}", label_bw=label,
                         xlabel=f"arithmetic intensity (FLOPs / byte: {COUNTS[count].split(':')[0].split(' (')[0]})")
    return fig, bw, label, pts.ai


def epoch_trends(t: pd.DataFrame) -> str:
    """How the epoch moves with H (at p = 1) and with p (B/p constant), against what the FLOPs alone would do."""
    from perflab.analysis import perfmodel
    said = []
    one = t[t.p == 1]
    if len(one) and one.H.nunique() > 1:
        b = one.B.mode().iloc[0]
        at = one[one.B == b].copy()
        at["w"] = [perfmodel.widths(h) for h in at.H]
        at = at.sort_values("w")
        lo, hi = at.iloc[0], at.iloc[-1]
        said.append(f"From {net(lo.H)} to {net(hi.H)} (p = 1, B = {int(b)}) the FLOPs grow "
                    f"{hi.flops_per_batch / lo.flops_per_batch:.1f}x and the epoch {hi.epoch_seconds / lo.epoch_seconds:.2f}x"
                    + (": the fixed costs (copies, launches) hide the GEMMs" if hi.epoch_seconds / lo.epoch_seconds
                       < 0.5 * hi.flops_per_batch / lo.flops_per_batch else ""))
    per_rank = (t.B / t.p).round()
    for bp in sorted(per_rank.unique()):
        at = t[(per_rank == bp)]
        h = at.H.iloc[0]
        at = at[at.H == h].sort_values("p")
        if at.p.nunique() > 1:
            said.append(f"at B/p = {int(bp)} ({net(h)}) the epoch goes {', '.join(f'{1e3 * v:.3g}' for v in at.epoch_seconds)} "
                        f"ms at p = {', '.join(str(int(p)) for p in at.p)}"
                        + (" (each rank takes N/p samples, but pays the exchange)" if at.epoch_seconds.iloc[-1]
                           < at.epoch_seconds.iloc[0] else ": the exchange costs more than the split saves"))
            break
    return ("; ".join(said) + ". ") if said else ""


def roofline_figure(run: Run, points: pd.DataFrame, name: str, count: str) -> Path | None:
    """The seeds' modified (or combined) roofline at the report's reference point, with every point: those that move
    nothing (AI infinite) stand in the strip at the right, labelled."""
    from perflab.report import plots
    drawn = roofline_plot(run, points, count)
    if drawn is None:
        return None
    fig, bw, label, _ = drawn
    return plots.save(fig, f"{name}_{run.folder.name}",
                      f"The {'combined' if count == 'fa' else 'modified (serial)'} roofline AI / (AI / P_flops + 1 / BW) "
                      f"with P_flops {rate(run.rates['P_flops'])} and {label} = {rate(bw, 'B/s')}, from the reference point "
                      f"({run.rates['reference']}); AI counts {COUNTS[count]}; {len(points)} points, each its seeds' "
                      "FLOPs over its median profiled batch iteration; colour: p, marker: H.", folder=run.figures,
                      draw_caption=False)


def placement(run: Run, points: pd.DataFrame, count: str) -> str:
    """Where the points fall against the roof, said from the numbers (HW6 Q2.2, FA Q2.6)."""
    from perflab.analysis import perfmodel
    from perflab.report.plots import point_rate
    bw, _ = bandwidth(run, count)
    if bw is None or not len(points):
        return ""
    P = run.rates["P_flops"]
    rows = []
    for _, r in points.iterrows():
        ai = ai_of(r, count)
        bound = perfmodel.roofline_serial(ai, P, bw) if math.isfinite(ai) else P
        rows.append((r["H"], int(r["B"]), int(r["p"]), ai, point_rate(r) / bound))
    t = pd.DataFrame(rows, columns=["H", "B", "p", "AI", "of bound"])
    finite = t[np.isfinite(t.AI)]
    ridge = P / bw
    said = (f"The points reach {t['of bound'].min():.2f} to {t['of bound'].max():.2f} of the roof above them"
            + (f"; {int((t['of bound'] > 1).sum())} lie above it (their GEMMs run faster than the reference point's "
               "P_flops, which the seeds' method takes from one point)" if (t["of bound"] > 1).any() else "") + ". ")
    if len(finite):
        said += (f"{int((finite.AI < ridge).sum())} of {len(finite)} with a finite AI lie left of the ridge (AI = "
                 f"{ridge:.3g} FLOP/byte), where moving bytes costs more than computing. ")
        ex, one = finite[finite.p > 1], finite[finite.p == 1]
        if len(ex) and len(one):
            said += (f"The points with p > 1 sit left of the p = 1 ones (AI {ex.AI.median():.3g} against "
                     f"{one.AI.median():.3g}): they move the gradient as well. ")
    if (~np.isfinite(t.AI)).any():
        said += f"{int((~np.isfinite(t.AI)).sum())} move nothing (AI infinite) and stand in the strip at the right. "
    first = finite[finite.H.astype(str) == str(finite.H.iloc[0])] if len(finite) else finite
    by_b = first.groupby(first.B / first.p).AI.median()
    if len(by_b) > 1:
        grows = by_b.iloc[-1] > 1.2 * by_b.iloc[0]
        said += (f"At {net(first.H.iloc[0])} AI {'grows' if grows else 'does not grow'} with B/p ("
                 + ", ".join(f"{v:.3g} at B/p = {int(b)}" for b, v in by_b.items())
                 + (")." if grows else "): the bytes counted grow with the batch as the FLOPs do.") + " ")
    return said


def machine_name(run: Run) -> str:
    meta = run.meta
    if meta.get("gpu"):
        return f"{meta['gpu']} x{meta.get('gpu_count', 1)}"
    return f"{meta.get('cpu', 'CPU')} ({meta.get('cpu_count', '?')} cores)"


def hw6_q1_1(run: Run) -> Answer | Missing:
    found = problem1(run, "FA Q1.1")
    if not isinstance(found, Answer):
        return found
    return Answer(found.text.split(". ")[0] + ". The check, its errors in both precisions and its table are in FA Q1.1; "
                  "`mpiexec -n 2 perflab check` checks p ranks the same way.", sources=found.sources)


# ------------------------------------------------------------------ final assignment, Problem 1
PROBLEM1_RUN = "nvidia-h100-80gb-hbm3/mainjob_6a9b7f3"  # the committed full Problem 1, for a folder that lacks its own


def problem1(run: Run, key: str) -> Answer | Missing:
    """This run's Problem 1; where it has none (a main job from before the experiment), the committed full run's,
    said to be so."""
    from perflab.workbook import problem1 as experiment
    if "problem1" not in run.found:
        run.found["problem1"] = experiment.answers(run.folder, run.figures)
    found = run.found["problem1"].get(key)
    if isinstance(found, Answer):
        return found
    there = committed(PROBLEM1_RUN)
    if there is None or there.resolve() == run.folder.resolve():
        return found
    if "problem1 committed" not in run.found:
        run.found["problem1 committed"] = experiment.answers(there, run.figures)
    other = run.found["problem1 committed"].get(key)
    if not isinstance(other, Answer):
        return found
    other = Answer(**vars(other))  # the committed answer is shared by HW6 Q1.1 and FA Q1.1: change a copy
    other.text = (f"This folder holds no Problem 1 run (`perflab notebook problem1` makes one); from the committed "
                  f"full run on one H100 (results/{PROBLEM1_RUN}): " + other.text)
    other.sources = [f"results/{PROBLEM1_RUN}/{s}" for s in other.sources]
    return other


# ------------------------------------------------------------------ final assignment, Problem 2
PHASES = ("copying images host -> device", "forward", "backward", "cudaMemcpyDeviceToHost", "MPI_Allreduce",
          "cudaMemcpyHostToDevice", "step")  # the profiled phases of a batch, in the order they run
EXCHANGE = ("cudaMemcpyDeviceToHost", "MPI_Allreduce", "cudaMemcpyHostToDevice")  # the seeds count them in backward


def fa_q2_1(run: Run) -> Answer | Missing:
    ref = reference_row(run)
    if ref is None or "t_forward" not in run.table:
        return Missing("no profiled point", "make roofline")
    total = ref["t_batch iteration"]
    times = {k: ref["t_" + k] for k in PHASES if "t_" + k in ref and np.isfinite(ref["t_" + k])}
    rows = [{"phase": k, "ms a batch": 1e3 * v, "share (%)": 100 * v / total} for k, v in times.items()]
    exchange = sum(times.get(k, 0.0) for k in EXCHANGE)
    seeds_backward = times.get("backward", 0.0) + exchange  # the seeds' backward range held the exchange
    if sum(times.values()) < total:  # medians need not add up: the rest is shown only where it is there
        rows.append({"phase": "between the phases (launches, synchronization)", "ms a batch": 1e3 * (total - sum(times.values())),
                     "share (%)": 100 * (1 - sum(times.values()) / total)})
    table = pd.DataFrame(rows)
    top = max(times, key=times.get)
    text = (f"At the reference point ({run.rates['reference']}, {where(run)}), the median profiled batch iteration "
            f"takes {ms(total)}; the largest phase is {top} ({pct(times[top] / total)}). ")
    if "copying images host -> device" in times:
        copy, forward = times["copying images host -> device"], times.get("forward", 0.0)
        text += (f"Counted the seeds' way (their backward range holds the gradient's copies and all-reduce), the batch "
                 f"is copy {pct(copy / total)}, forward {pct(forward / total)}, backward {pct(seeds_backward / total)}, "
                 "against the solution's " + " / ".join(f"{100 * v:.0f}" for v in SEEDS_SHARES.values()) + "% on an "
                 "RTX 6000. The image copy through pageable host memory "
                 "leads in both, as Homework 6 expected: it moves D B' b bytes a batch over PCIe at a few GB/s while the "
                 "GEMMs run at tens of TFLOP/s.")
    else:
        text += ("On the CPU there is no image copy (the seeds' 51%): the data are in the rank's memory, and the GEMMs "
                 "of forward and backward are the batch, as Homework 6's FLOP count expects.")
    if exchange:
        text += f" The gradient's exchange (its copies and the all-reduce) takes {pct(exchange / total)}."
    return Answer(text, [(table, "Each profiled phase of the reference point's median batch iteration, in the order "
                                 "they run.")], sources=[str(ref["source"])])


def reference_row(run: Run):
    if not run.rates:
        return None
    from perflab.analysis import perfmodel
    t = run.seeds_path
    h = run.rates["reference"].split()[0][2:]
    at = t[perfmodel.is_net(t["H"], int(h) if h.isdigit() else h)] if len(t) else t
    return at.sort_values(["p", "B"]).iloc[-1] if len(at) else None


def fa_q2_2(run: Run) -> Answer | Missing:
    modes = set(run.table["mode"])
    if not run.on_gpu or len(modes) < 2:
        return Missing("the optimizations are GPU data paths (pinned and pipelined copies, data resident on the GPU, "
                       "NCCL); this run measured only " + ", ".join(sorted(modes)),
                       "make roofline on a GPU machine (it sweeps modes resident, staged, pipelined)")
    wide = run.table.pivot_table(index=["H", "B", "p"], columns="mode", values="epoch_seconds") * 1e3
    wide = wide.reset_index()
    wide.columns = [str(c) if c in ("H", "B", "p") else f"{c} (ms an epoch)" for c in wide.columns]
    text = "Measured, each an epoch of the same net and batch: "
    parts = []
    if {"staged", "pipelined"} <= modes:
        r = (wide["staged (ms an epoch)"] / wide["pipelined (ms an epoch)"]).dropna()
        parts.append(f"pinned memory and CUDA streams that overlap the copies and the host all-reduce with compute "
                     f"(pipelined) run {r.min():.2f}x to {r.max():.2f}x faster than the seeds' serial path")
    if {"staged", "resident"} <= modes:
        r = (wide["staged (ms an epoch)"] / wide["resident (ms an epoch)"]).dropna()
        parts.append(f"keeping the data on the GPU and all-reducing there (NCCL), with the step in one CUDA graph "
                     f"(resident), runs {r.min():.2f}x to {r.max():.2f}x faster")
    text += "; ".join(parts) + ". The kernels are the cuBLAS-rate GEMMs and fused elementwise passes of FA Q2.3."
    return Answer(text, [(wide, "Epoch time of each data path at every net, batch and rank count of the sweep.")],
                  sources=sorted(set(run.table.source)))


def fa_q2_3(run: Run) -> Answer | Missing:
    from perflab.analysis import perfmodel, roofline
    t = run.seeds_path
    fb = roofline.flops_bytes_table(t).drop_duplicates(subset=["H", "B", "p"])
    fb["H"] = [net(h) for h in fb.H]
    fb["B'"] = fb["B'"].round().astype(int)
    finite = fb["AI (FLOP/B)"].replace(np.inf, np.nan).dropna()
    lo, hi = (f"{finite.min():.3g}", f"{finite.max():.3g}") if len(finite) else ("", "")
    span = (f"here {lo} FLOP/byte" if lo == hi else f"here {lo} to {hi} FLOP/byte") if len(finite) else \
        "here infinite at every point: nothing is exchanged at p = 1"
    fb = fb.rename(columns={"H": "net"})
    if not run.on_gpu:  # nothing crosses PCIe on the CPU
        fb = fb.drop(columns=[c for c in fb if c.startswith("PCIe")])
    first = t.iloc[0]
    grad = perfmodel.gradient_buffer_bytes(first["H"]) / 1e6
    text = (f"The kernels that take the time are the forward GEMMs z1 = W1 X (2B'HD) and z2 = W2 a1 (2B'HC) and the "
            f"backward GEMMs dW1 (2B'HD) and dW2 (2B'CH): 4B'H(D + C) FLOPs a batch per rank, B' = B/p. The bytes: "
            f"2(HD + H + CH + C)b through MPI and, on a GPU's host-staged path, the same 2(HD + H + CH + C)b over PCIe "
            f"around the all-reduce; b = 4 in float32, so the gradient is {grad:.3g} MB at {net(first['H'])}. "
            f"Both FLOPs and bytes grow with H, so AI = FLOPs / bytes depends on B/p alone "
            f"({span}).")
    return Answer(text, [(fb, "FLOPs and bytes a batch per rank, by the seeds' count (ring: what a ring all-reduce "
                              "sends).")], sources=sorted(set(t.source)))


def fa_q2_4(run: Run) -> Answer | Missing:
    if not run.rates:
        return Missing("no measured point", "make roofline")
    unit = lambda k: "FLOP/s" if k == "P_flops" else "B/s"  # noqa: E731
    rows = [{"rate": k, "this run": rate(run.rates[k], unit(k)), "seeds' RTX 6000": rate(SEEDS_RTX6000[k], unit(k)),
             "this run / seeds'": run.rates[k] / SEEDS_RTX6000[k]} for k in SEEDS_RTX6000 if k in run.rates]
    text = (f"The seeds' formulas over the profiled phase medians of one reference point, {run.rates['reference']}, "
            f"used for every rate of this report: P_flops = GEMM FLOPs / GEMM time = {rate(run.rates['P_flops'])}"
            + (f", P_pci = gradient bytes / (D2H + H2D time) = {rate(run.rates['P_pci'], 'B/s')}" if "P_pci" in run.rates
               else ", no P_pci (nothing crossed PCIe around an exchange)")
            + (f", P_mpi = 2 x gradient bytes / all-reduce time = {rate(run.rates['P_mpi'], 'B/s')}" if "P_mpi" in run.rates
               and (run.table.p > 1).any() else ", no P_mpi (one rank: nothing exchanged)") + ".")
    ceilings = machine_ceilings(run)
    if ceilings:
        text += (" They are effective rates of the seeds' path, not the machine's: its ceilings, timed before the sweep, "
                 f"reach {rate(ceilings['P_flops'])} in a GEMM"
                 + (f", {rate(ceilings['P_pci'], 'B/s')} in a pinned copy" if math.isfinite(ceilings["P_pci"]) else "")
                 + (f", {rate(ceilings['P_mpi'], 'B/s')} in an all-reduce" if math.isfinite(ceilings["P_mpi"]) else "")
                 + (". The staged path copies pageable memory, a batch's gradient at a time, and waits for each copy: "
                    "pinned memory and streams (FA Q2.2) recover the difference." if run.on_gpu else
                    ". A rank's GEMMs run on its share of the cores (the ranks split them), the ceiling's on all of them."))
    return Answer(text, [(pd.DataFrame(rows), "Effective rates of the reference point against the seeds' solution.")],
                  sources=[str(reference_row(run)["source"])])


def fa_q2_5(run: Run) -> Answer | Missing:
    text = ("With the copies, the all-reduce and the GEMMs one after another, T = FLOPs / P_flops + bytes_PCIe / "
            "P_pci + bytes_MPI / P_mpi. With bytes_PCIe = bytes_MPI = Bytes/2 (FA Q2.3) and AI = FLOPs / Bytes: "
            "FLOPs / T = AI / (AI / P_flops + (1/P_pci + 1/P_mpi) / 2), the serial roofline with "
            "1/BW = (1/P_pci + 1/P_mpi) / 2.")
    exchanged = run.seeds_path[run.seeds_path.p > 1]
    if not ({"P_pci", "P_mpi"} <= set(run.rates) and len(exchanged)):
        return Answer(text + f" This run measured {'no P_pci' if 'P_pci' not in run.rates else 'no P_mpi'}, so its "
                      "combined roofline is not drawn (no roof that was not measured): "
                      + ("the CPU has no PCIe; FA Q2.6 draws the serial roofline with P_mpi." if not run.on_gpu
                         else f"{more_ranks_command(run)} measures both."))
    figure = roofline_figure(run, run.seeds_path, "fa_combined_roofline", "fa")
    return Answer(text, figures=[figure] if figure else [], sources=sorted(set(exchanged.source)))


def fa_q2_6(run: Run) -> Answer | Missing:
    from perflab.analysis import roofline
    t = run.seeds_path
    pred = roofline.prediction_table(t, run.rates)
    pred["error"] = 100 * pred["error"]
    pred = pred.rename(columns={"error": "error (%)", "measured_ms": "measured (ms)", "predicted_ms": "predicted (ms)"})
    worst = pred.iloc[pred["error (%)"].abs().argmax()]
    Hs, Bs = nets_in(t), sorted(int(b) for b in t.B.unique())
    count = count_of(run, "fa")
    figure = roofline_figure(run, t, "fa_points_roofline", count)
    text = (f"Points for the nets {', '.join(Hs)} and B in {', '.join(map(str, Bs))}. Raising B "
            f"raises AI (FLOPs grow with B', the gradient bytes do not) and the FLOP rate (larger GEMMs); raising H "
            f"leaves AI unchanged (both grow with H) but raises the rate. So AI = 4B'H(D + C) / (4(HD + H + CH + C)b) "
            f"~ B'/b: only a larger batch a rank (or fewer bytes: half precision, model parallelism) moves a point "
            f"right. The seeds' serial model with the reference point's rates misses by a median of "
            f"{pred['error (%)'].abs().median():.0f}% (worst {worst['error (%)']:+.0f}% at {net(worst.H)}, B = "
            f"{int(worst.B)}, p = {int(worst.p)}): it charges every GEMM at the reference point's rate (bigger GEMMs "
            f"run faster, smaller ones slower) and leaves out the elementwise kernels, launches and waiting.")
    text += " " + placement(run, t, count)
    if count == "hw6" and run.on_gpu:
        copy = t["t_copying images host -> device"] / t["t_batch iteration"]
        text += (f"Nothing is exchanged on one GPU, so the figure counts the image copies (HW6's AI). The seeds' model "
                 f"leaves the image copy out (FA Q2.3), and it is {pct(copy.min())} to {pct(copy.max())} of the measured "
                 "batch here: that, not the GEMM rate, is most of its miss.")
    validated = validation_rows(run)
    tables = [(pred, "The seeds' serial model (reference-point rates) against the measured median batch iteration.")]
    if validated is not None and len(validated):
        text += (f" The better model is perflab's own: every kernel of the step timed alone on this machine before "
                 f"the sweep, composed; it misses by a median of {validated['error (%)'].abs().median():.1f}% "
                 f"(worst {validated['error (%)'].abs().max():.0f}%).")
        tables.append((validated, "perflab's predictor, from this machine's ceilings measured before the sweep, "
                                  "against the measured time per batch."))
    return Answer(text, tables, [figure] if figure else [], sorted(set(t.source)))


def validation_rows(run: Run) -> pd.DataFrame | None:
    path = run.folder / "validation.csv"
    if not path.exists():
        return None
    v = pd.read_csv(path)
    if "error" not in v:
        return None
    v = v[v.source.isin([p.name for p in run.sweeps]) & v.error.notna()] if "source" in v else v
    if (run.folder / "steadiness.csv").exists() and len(v):  # was each miss inside what the host's noise allows?
        from perflab.measure import steadiness
        v = steadiness.judge(v, run.folder, sweep=run.sweeps[0].name)
    v = v.assign(error=100 * v.error).rename(columns={"error": "error (%)", "inside_noise": "inside the noise band",
                                                       "measured_ms": "measured (ms)", "predicted_ms": "predicted (ms)"})
    shown = ("H", "B", "p") + (("mode",) if run.on_gpu else ()) + ("measured (ms)", "predicted (ms)", "error (%)",
                                                                   "inside the noise band")  # no GPU words on CPU rows
    return v[[c for c in shown if c in v]]


def fa_optional(run: Run) -> Answer | Missing:
    from perflab.analysis import perfmodel, roofline
    ref = reference_row(run)
    if ref is None:
        return Missing("no measured point", "make roofline")
    data = perfmodel.phase_bytes(roofline.workload(ref))
    w = roofline.workload(ref)
    model = perfmodel.phase_bytes(perfmodel.Workload(layers=w.layers, B=w.B, p=max(2, w.p), parallel="model",
                                                    dtype=w.dtype))
    data_mb, model_mb = perfmodel.phase_bytes(perfmodel.Workload(layers=w.layers, B=w.B, p=max(2, w.p), dtype=w.dtype))[
        "mpi_seeds"] / 1e6, model["mpi_seeds"] / 1e6
    text = (f"Model parallelism splits W1 by rows (each rank H/p hidden units) and exchanges the C x B partial "
            f"logits instead of the gradients: at the reference point ({net(ref['H'])}, B = {int(ref['B'])}, "
            f"p = {max(2, int(ref['p']))}) {model_mb:.3g} MB a batch against {data_mb:.3g} MB for data parallelism "
            f"({data_mb / model_mb:.0f}x fewer bytes), at the price of every rank reading the whole batch. "
            f"`mpiexec -n 2 perflab train --parallel model` measures it; 2019 §4.3 compares the two.")
    del data
    return Answer(text, sources=[str(ref["source"])])


# ------------------------------------------------------------------ committed campaigns
def committed(path: str) -> Path | None:
    from perflab.results import RESULTS_ROOT
    found = RESULTS_ROOT / path
    return found if found.exists() else None


GEMM_BENCH = "nvidia-h100-80gb-hbm3/bench_gemm_float32.csv"
GEMM_COUNTS = "nvidia-h100-80gb-hbm3/gemm_counts.csv"  # Nsight Compute's counts of each GEMM (scripts/gpu_gemm_counts.sh)
HW6_FOUR_GPUS = "nvidia-h100-80gb-hbm3-x4/hw6_q21.csv"
USC_BATCHES = "nvidia-h100-80gb-hbm3-x4"  # usc_b<B>.csv: the USC runs at other batch sizes
USC_TABLE = "nvidia-h100-80gb-hbm3/usc.csv"
PARALLEL_TABLE = "cpu-amd-epyc/parallel.csv"
WFBP_RUNS = "nvidia-h100-80gb-hbm3/wfbp/wfbp_h100x2.jsonl"
ALLREDUCE_BENCH = "nvidia-h100-80gb-hbm3/bench_allreduce_p2.csv"
PROJECTION = "predictions/projection_64.csv"
HALF_BENCH = "nvidia-h200/half/bench_train_half.csv"  # the main job's kind of GPU, at the half step as it stands


def gemm_steps(run: Run) -> Answer | Missing:
    path = committed(GEMM_BENCH)
    if path is None:
        return Missing("no GEMM benchmark here", "perflab bench gemm (on a GPU)")
    from perflab.analysis import gemm_counts
    return gemm_counts.answer(path, committed(GEMM_COUNTS))


def model_parallel(run: Run) -> Answer | Missing:
    path = committed(PARALLEL_TABLE)
    here = run.table[run.table.get("parallel", pd.Series(dtype=str)) == "model"] if "parallel" in run.table else []
    if path is None and not len(here):
        return Missing("no model-parallel run", "mpiexec -n 2 perflab sweep --parallel data model")
    t = pd.read_csv(path)
    t = t[t.status.fillna("measured") == "measured"]
    wide = t.pivot_table(index=["H", "B", "p"], columns="parallel", values="epoch_seconds").reset_index()
    wide["model / data"] = wide["model"] / wide["data"]
    text = ("§4.3 blocks W1 by rows over the ranks: each computes its H/p hidden units for the whole batch and only "
            "the C x B partial logits are all-reduced, instead of the whole gradient. Measured on the CPU "
            f"(committed): model parallel takes {wide['model / data'].min():.2f}x to {wide['model / data'].max():.2f}x "
            "the data-parallel epoch: it moves fewer bytes but every rank reads every image, and its small GEMMs run "
            "further from the peak.")
    return Answer(text, [(wide, "Epoch seconds, data against model parallel.")], sources=[f"results/{PARALLEL_TABLE}"])


def wfbp(run: Run) -> Answer | Missing:
    path = committed(WFBP_RUNS)
    if path is None:
        return Missing("no WFBP run", "mpiexec -n 2 perflab train --backend cupy --comm auto")
    t = wfbp_rows(path)
    r = t["WFBP / after"].dropna()
    text = ("Wait-free backprop starts each layer's gradient exchange as soon as backward has made it, under the "
            f"layers still running. Measured on two H100 (committed, nets of two to four hidden layers): WFBP took "
            f"{r.min():.2f}x to {r.max():.2f}x the epoch of one exchange after backward, so it gains at most a few %: "
            "over NVLink the exchange is already a small share of a batch, and WFBP can hide no more than that share. "
            "p2p (each GPU reads the others' gradients over NVLink and applies the update in one kernel) was fastest "
            "in most rows; `--comm auto` times the exchanges and keeps the fastest.")
    return Answer(text, [(t, "Epoch ms by exchange, two H100.")], sources=[f"results/{WFBP_RUNS}"])


def wfbp_rows(path: Path):
    """The WFBP runs of a folder (`scripts/gpu_multi.sh wfbp`): per net and batch, each exchange's epoch as
    --comm auto timed it (ms), WFBP over one exchange after backward, and what auto kept."""
    import json

    import pandas as pd
    rows = []
    for line in path.read_text().splitlines():
        d = json.loads(line)
        t = {k: 1e3 * v for k, v in d["exchange_trial_s"].items() if isinstance(v, float)}
        rows.append({"net": "784-" + "-".join(map(str, d["hidden_sizes"])) + "-10", "b a GPU": d["batch_size"] // d["ranks"],
                     "nccl after backward (ms)": t.get("nccl"), "WFBP, --overlap (ms)": t.get("overlap"),
                     "p2p (ms)": t.get("p2p"), "WFBP / after": t.get("overlap", float("nan")) / t.get("nccl", float("nan")),
                     "--comm auto kept": "overlap" if d["overlap"] else d["comm"]})
    return pd.DataFrame(rows)


def fusion(run: Run) -> Answer | Missing:
    path = committed(ALLREDUCE_BENCH)
    if path is None:
        return Missing("no all-reduce benchmark", "perflab bench allreduce (on 2 GPUs)")
    t = pd.read_csv(path)
    t = t[t.impl == "perflab nccl"].sort_values("size_bytes")
    small, large = t.iloc[0], t.iloc[-1]
    text = (f"Tensor fusion sends all gradients in one buffer rather than one message a tensor. An NCCL all-reduce "
            f"of {small.size_bytes / 1e3:.0f} kB takes {small.ms * 1e3:.0f} us, of {large.size_bytes / 1e6:.1f} MB "
            f"{large.ms * 1e3:.0f} us (two H100, committed): the fixed cost of a message is paid once by the fused "
            "buffer. perflab keeps every gradient in one contiguous buffer and exchanges it in one call.")
    shown = pd.DataFrame({"size (MB)": t.size_bytes / 1e6, "time (us)": 1e3 * t.ms, "bus bandwidth (GB/s)": t.bus_GBps})
    return Answer(text, [(shown, "NCCL all-reduce time against size.")],
                  sources=[f"results/{ALLREDUCE_BENCH}"])


def hybrid(run: Run) -> Answer | Missing:
    path = committed(PROJECTION)
    if path is None:
        return Missing("no projection", "perflab predict --multinode")
    t = pd.read_csv(path)
    at = t[t.p == t.p.max()]
    text = (f"Hybrid (hierarchical) all-reduce reduces inside each node over NVLink, across nodes among the leaders, "
            f"then broadcasts. Projected by perflab from measured ceilings (not measured across nodes here) at "
            f"p = {int(at.p.iloc[0])}: " + "; ".join(f"{s} {e:.2f}" for s, e in zip(at.strategy, at.efficiency))
            + " (efficiency).")
    return Answer(text, [(at, "Projected epoch and efficiency at the largest p.")], sources=[f"results/{PROJECTION}"])


HALF_PEERS = ("jax scan epoch (bf16)", "pytorch cuda graph (bf16 autocast)")  # the half-precision peers a user writes


def fp16(run: Run) -> Answer | Missing:
    path = committed(HALF_BENCH)
    if path is None:
        return Missing("no half-precision run", "perflab bench train --dtype bfloat16 (on a GPU)")
    t = pd.read_csv(path)
    meta = json.loads(path.with_suffix(".json").read_text()) if path.with_suffix(".json").exists() else {}
    rows, fastest = [], []  # fastest: the faster half-precision peer of each row, by its label in the file
    for (h, b), g in t.groupby(["H", "B"], sort=False):
        ms = g.set_index("peer").epoch_ms
        if not {"perflab", "perflab (bf16)"} <= set(ms.index):
            continue
        bf16, peers = ms["perflab (bf16)"], ms.reindex(HALF_PEERS).dropna()
        fastest.append(peers.idxmin() if len(peers) else None)
        rows.append({"net": net(h), "B": int(b), "FP32 (ms)": ms["perflab"], "BF16 (ms)": bf16,
                     "FP16 (ms)": ms.get("perflab (fp16)", np.nan), "speedup": ms["perflab"] / bf16,
                     "GEMM floor speedup": ms.get("cublas 5-gemm floor", np.nan) / ms.get("cublas floor (bf16)", np.nan),
                     "BF16 / its GEMM floor": bf16 / ms.get("cublas floor (bf16)", np.nan),
                     "BF16 / fastest half peer": bf16 / peers.min() if len(peers) else np.nan})
    table = pd.DataFrame(rows)
    if not len(table):
        return Missing("no FP32 and BF16 epochs side by side", "perflab bench train --dtype bfloat16 (on a GPU)")
    gpu, peers = meta.get("gpu", "a GPU"), table["BF16 / fastest half peer"].dropna()
    text = ("Half precision halves the bytes and runs the GEMMs on tensor cores; FP32 master weights and a loss scale "
            f"(FP16) keep the training. Measured on one {gpu} (committed), BF16 mixed precision runs the epoch "
            f"{table.speedup.min():.1f}x to {table.speedup.max():.1f}x faster than FP32, where the cuBLAS GEMMs of its "
            f"layers alone run {table['GEMM floor speedup'].min():.1f}x to {table['GEMM floor speedup'].max():.1f}x "
            "faster in BF16 than in FP32. So what the GEMMs used to hide shows: the BF16 epoch takes "
            f"{table['BF16 / its GEMM floor'].min():.2f}x to {table['BF16 / its GEMM floor'].max():.2f}x the cuBLAS "
            "BF16 GEMMs of its layers alone (its floor), the rest being the elementwise passes, the output layer and "
            "the update" + (
                f"; and {peers.min():.2f}x to {peers.max():.2f}x the epoch of the fastest half-precision peer of "
                f"{' and '.join(HALF_PEERS)}: " + ", ".join(f"{name} at {fastest.count(name)} of {len(fastest)} rows"
                                                             for name in sorted(set(fastest) - {None}))
                if len(peers) else " (no half-precision peer ran)")
            + ". `perflab notebook precision` shows what each precision costs in accuracy.")
    return Answer(text, [(table.round(3), "Epoch ms in FP32, BF16 and FP16; BF16 against its floor and its peers.")],
                  sources=[f"results/{HALF_BENCH}"])


def usc_networks(run: Run) -> Answer | Missing:
    path = committed(USC_TABLE)
    if path is None:
        return Missing("no USC run", "perflab notebook usc")
    t = pd.read_csv(path)
    serial = t[t.way == "serial"].set_index("net").epoch_seconds
    t = t.assign(speedup=[serial.get(n, np.nan) / s for n, s in zip(t.net, t.epoch_seconds)])
    best = t.loc[t.groupby(["net", "way"]).speedup.idxmax()][["net", "way", "cores", "B", "epoch_seconds", "speedup"]]
    text = ("Network1 (784-1024-10) against Network2 (784-1024-1024-10), parallelized over examples (data parallel) "
            "and inside the matrix products (threads in the GEMMs), against the serial run, committed from one H100 "
            "machine: " + "; ".join(f"{r.net} {r.way} {r.speedup:.1f}x" for r in best.itertuples() if r.way != "serial") + ".")
    return Answer(text, [(best, "Best speedup of each way over the serial CPU run.")], sources=[f"results/{USC_TABLE}"])


def usc_batch(run: Run) -> Answer | Missing:
    folder = committed(USC_BATCHES)
    files = sorted(folder.glob("usc_b*.csv")) if folder is not None else []
    if not files:
        return Missing("the USC runs used B = 1000 only", "perflab notebook usc -p batch 100 (and 10000)")
    t = pd.concat([pd.read_csv(f) for f in files], ignore_index=True)
    serial = t[t.way == "serial"].set_index(["net", "B"]).epoch_seconds
    t = t.assign(speedup=[serial.get((n, b), np.nan) / s for n, b, s in zip(t.net, t.B, t.epoch_seconds)])
    wide = t[t.way != "serial"].pivot_table(index=["net", "way", "cores"], columns="B", values="speedup").reset_index()
    wide.columns = [f"speedup at B = {c}" if isinstance(c, (int, np.integer)) else c for c in wide.columns]
    ex = t[(t.way == "examples") & (t.cores == t.cores.max())].set_index(["net", "B"]).speedup
    text = (f"Over examples, the batch is the work each core gets: with {int(t.cores.max())} cores Network1 reached a speedup of "
            f"{ex.get(('Network1', t.B.min()), np.nan):.2f} at B = {int(t.B.min())} and "
            f"{ex.get(('Network1', t.B.max()), np.nan):.2f}x at B = {int(t.B.max())}: at a small B each core's share is "
            "a few samples, and the exchange and the launch of every batch dominate. Inside the products the gain "
            "grows less with B (the GEMMs are already split); the GPU gains most at a large B. Committed from four H100's "
            "host (16 of its 64 cores used), B = 1000 in the table above.")
    return Answer(text, [(wide, "Speedup over the serial CPU epoch by way, cores and B.")],
                  sources=[f"results/{USC_BATCHES}/{f.name}" for f in files])


# ------------------------------------------------------------------ the outline
QUESTIONS = [
    Question("HW6 Q1.1", "Data-parallel training matches the CPU",
             "We will check that the updated parameters of the neural network obtained using your implementation match "
             "the updated parameters obtained using the CPU implementation.", hw6_q1_1),
    Question("HW6 Q2.1", "FLOPs and utilization at B = 3200 on 1, 2 and 4 ranks",
             "Approximate the number of FLOPs performed in a single forward pass and [...] backward pass [...] With D=784, "
             "H=512, and B=3200, what is the effective compute utilization of 1, 2, and 4 GPUs when training with 1, 2, "
             "and 4 MPI processes respectively? [...] What happens when you increase the number of processes or change "
             "the batch size B?", hw6_q2_1),
    Question("HW6 Q2.2", "Time per epoch, bytes of every copy, the modified roofline",
             "Measure the total time taken to train when H increases from 512 to 1024 to 2048, and [...] when num_procs "
             "increases from 1 to 2 to 4 while B/num_procs remains constant. [...] Approximate the number of bytes moved "
             "per batch [...] Show that FLOPs / Total time = AI / (AI / Peak GPU computation performance + 1 / Peak PCIe "
             "bandwidth), and plot the corresponding roofline.", hw6_q2_2),
    Question("FA Q1.1", "The tests pass in both precisions",
             "Run your code [...] in double precision [...] Does your code pass all the tests?", lambda r: problem1(r, "FA Q1.1")),
    Question("FA Q1.2", "When and why the weights drift from the CPU's",
             "Vary hidden_size, num_epochs, learning_rate. Does your code report errors? [...] Can you explain this "
             "discrepancy? Does it matter? What precision do you get using the CPU and GPU codes?",
             lambda r: problem1(r, "FA Q1.2")),
    Question("FA Q1.3", "The learning rate that converges fastest",
             "What learning rate seems to lead to the fastest convergence? What happens when you increase or decrease "
             "this learning rate?", lambda r: problem1(r, "FA Q1.3")),
    Question("FA Q1.4", "Many epochs, and the hidden size to recommend",
             "Train your model for many epochs. What loss are you able to achieve? Has your model converged? What is the "
             "precision of your model? Does the precision depend on hidden_size? What value of hidden_size would you "
             "recommend? What happens when you reduce or increase it?", lambda r: problem1(r, "FA Q1.4")),
    Question("FA Q2.1", "The steps that take the most time",
             "In your profile, what are the steps that take the most time? Is this consistent with the analysis from "
             "Homework 6?", fa_q2_1),
    Question("FA Q2.2", "Optimizations, measured",
             "Can you identify areas of the code that could be improved based on the profiling? What changes would you "
             "suggest?", fa_q2_2),
    Question("FA Q2.3", "FLOPs and bytes of the kernels and transfers",
             "List the CUDA kernels and calculations that take a substantial amount of runtime [...] estimate the number "
             "of flops. [...] Estimate the number of bytes transferred.", fa_q2_3),
    Question("FA Q2.4", "Effective P_flops, P_pci, P_mpi",
             "Based on your profiling measurements, provide an estimate for the effective compute throughput P_flops, "
             "and the cudaMemcpy (P_pci) and MPI_Allreduce (P_mpi) memory bandwidth throughputs.", fa_q2_4),
    Question("FA Q2.5", "The combined roofline",
             "Provide a theoretical estimate of the roofline model. [...] The answer will involve P_flops, P_pci, and "
             "P_mpi.", fa_q2_5),
    Question("FA Q2.6", "Experimental points for several H and B",
             "Run a few experiments with different values of H and B. Plot your experimental values along with the "
             "roofline model. [...] Do the theoretical and experimental estimates agree? [...] Explain how you would "
             "improve your theoretical roofline model.", fa_q2_6),
    Question("FA optional", "Model parallel against data parallel",
             "Do a theoretical estimate of the running time of the model parallel approach compared to the data "
             "parallel approach.", fa_optional),
    Question("2019 §4.1-4.2", "The GEMMs, and why each step wins",
             "Implement [...] GEMM [...] Explain why the approach you picked is advantageous compared to Algorithm 1.",
             gemm_steps),
    Question("2019 §4.3", "Model parallelism and its blockings",
             "The model parallel approach: the weight matrices partitioned across processes, to reduce the bytes MPI "
             "moves.", model_parallel, topic=True),
    Question("HKUST WFBP", "Wait-free backprop", "Overlap the gradient communication of a layer with the backward "
             "computation of the layers below it.", wfbp, topic=True),
    Question("HKUST fusion", "Tensor fusion", "Fuse small gradient tensors into one buffer before the all-reduce.",
             fusion, topic=True),
    Question("HKUST hybrid", "Hybrid all-reduce", "Reduce inside the node, then across nodes.", hybrid, topic=True),
    Question("HKUST FP16", "Half precision", "Train in FP16 with FP32 master weights to halve the bytes and use the "
             "tensor cores.", fp16, topic=True),
    Question("USC networks", "Network1 against Network2, over examples and inside the products",
             "Parallelize over examples versus inside the matrix products; networks 784-1024-10 and 784-1024-1024-10.",
             usc_networks, topic=True),
    Question("USC batch", "The batch size", "How the mini-batch size changes the parallel speedup.", usc_batch,
             topic=True),
]


def answer_all(run: Run) -> list[tuple[Question, Answer | Missing]]:
    """Every question's answer; one that fails on this folder's files says so instead of ending the report."""
    out = []
    for q in QUESTIONS:
        try:
            a = q.answer(run) if len(run.table) else Missing("this folder holds no measured point", "make roofline")
        except (KeyError, ValueError, IndexError, FileNotFoundError) as exc:
            a = Missing(f"its files could not answer ({type(exc).__name__}: {exc})", "make roofline")
        out.append((q, a))
    return out


def conclusion(run: Run) -> str:
    """What this run shows, in three sentences: its largest phase, the speedup at p = 2 on each data path and net,
    how well it was predicted."""
    if not len(run.table):
        return "No measured point."
    parts = []
    ref = reference_row(run)
    if ref is not None and "t_forward" in ref:
        times = {k: ref["t_" + k] for k in PHASES if "t_" + k in ref and np.isfinite(ref["t_" + k])}
        top = max(times, key=times.get)
        parts.append(f"At the reference point ({run.rates['reference']}) the largest phase of a batch is {top} "
                     f"({pct(times[top] / ref['t_batch iteration'])}).")
    speedups = []
    for (mode, h), g in run.table.groupby(["mode", run.table.H.astype(str)]):
        for _, two in g[g.p == 2].iterrows():
            one = g[(g.p == 1) & (g.B == two.B // 2)]
            if len(one):
                speedups.append((mode, h, one.epoch_seconds.iloc[0] / two.epoch_seconds))
    if speedups:
        by_mode = pd.DataFrame(speedups, columns=["mode", "H", "speedup"]).groupby("mode").speedup
        parts.append("Two ranks at the same batch a rank give a speedup (epoch at p = 1 over p = 2) of " + "; ".join(
            (f"{lo:.2f} to {hi:.2f}" if lo != hi else f"{lo:.2f}") + f" on the {mode} path"
            for mode, lo, hi in zip(by_mode.min().index, by_mode.min(), by_mode.max())) + " (below 1: slower).")
    v = validation_rows(run)
    if v is not None and len(v):
        parts.append(f"Predicted from the ceilings before the sweep, the points land within a median "
                     f"{v['error (%)'].abs().median():.1f}% (worst {v['error (%)'].abs().max():.0f}%).")
    return " ".join(parts)
