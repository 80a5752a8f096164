"""`perflab report`: the report PDF of a run (report_pdf), and the Markdown of the committed results
(results/REPORT.md and the README's results block)."""
from __future__ import annotations

import re
from pathlib import Path

from perflab.analysis.perfmodel import gradient_buffer_bytes
from perflab.config import MODES
from perflab.results import RESULTS_ROOT


def build(out: str | None = None, folder: Path | None = None) -> Path:
    """The report PDF of a run folder (this machine's by default): `report_pdf.build`."""
    from perflab.report import pdf
    return pdf.build(out, folder)


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
        tensor_cores = group.peer.str.contains("tf32|wgmma", case=False)  # the targets are FP32, on both sides
        peers = group[~group.peer.str.startswith(("perflab", "cublas")) & ~tensor_cores]
        fp32 = group.peer.str.startswith("perflab") & ~tensor_cores
        ours = group[fp32].epoch_ms.min()
        if len(peers):
            best = peers.loc[peers.epoch_ms.idxmin()]
            floor = group[group.peer.str.startswith("cublas")].epoch_ms
            best_peer[f"H={h} B={b}"] = (f"best peer {best.peer} {best.epoch_ms:.2f} ms; perflab best (FP32) {ours:.2f} ms; "
                                         f"ratio {ours / best.epoch_ms:.2f}"
                                         + (f"; FLOP rate {floor.min() / ours:.2f} of the cuBLAS floor's" if len(floor) else ""))
    out = fmt(wide.reset_index().round(3))
    return out + "\n\n" + "\n".join(f"- {k}: {v}" for k, v in best_peer.items())


def gemm_table(path: Path) -> str:
    import pandas as pd

    from perflab.measure.bench import gemm_ratios
    t = pd.read_csv(path)
    big = t[t["shape"].str.startswith(("fwd1", "bwd3"))]
    wide = big.pivot_table(index="shape", columns="variant", values="tflops", sort=False).round(2)
    lines = [fmt(wide.reset_index()), "", *(f"- {line}." for line in gemm_ratios(t))]
    return "\n".join(lines) + ("\n\nTFLOP/s; tf32 rounds its inputs to TF32 (tensor cores), every other column is "
                               "FP32. pytorch and jax: their SGEMM with TF32 off, each in a process of its own; JAX "
                               "gives no device events, so its time is the host's over calls queued back to back.")


def trainer_form_ratios(ceilings_path: Path, hidden=(512, 1024, 2048), batches=(3200, 12800)) -> list[str]:
    """cuBLAS SGEMM's time over x3tf32's as the trainer calls it: the step kernels of a ceilings
    file (`perflab ceilings`, each timed alone in replayed graphs; the images' K-major forms and
    splits made once per run, W1 split in every forward GEMM 1, and the time dz1's split adds to
    the fused backward pass charged to backward GEMM 3)."""
    import numpy as np
    import pandas as pd
    if not ceilings_path.exists():
        return []
    c = pd.read_csv(ceilings_path)
    k = c[c.ceiling == "step_kernel"].set_index(["impl", "H", "B"]).seconds
    ratios = []
    try:
        for H in hidden:
            for B in batches:
                split = max(0.0, k[("fused backward with dz1's split (x3tf32)", H, B)] - k[("fused backward: dz1, dW2, db1", H, B)])
                ratios += [k[("forward GEMM 1 (cuBLAS)", H, B)] / k[("forward GEMM 1 (x3tf32)", H, B)],
                           k[("backward GEMM 3 (cuBLAS)", H, B)] / (k[("backward GEMM 3 (x3tf32)", H, B)] + split)]
    except KeyError:  # a ceilings file from before the tensor-core step kernels
        return []
    return ["", f"As the trainer calls them, from the step kernels of {source(ceilings_path)} (each timed alone in "
                "replayed graphs; the images' K-major forms and splits made once per run, W1 split in every forward "
                "GEMM 1, the time dz1's split adds to the fused backward pass charged to backward GEMM 3): x3tf32 "
                f"{np.exp(np.log(ratios).mean()):.2f}x cuBLAS SGEMM, geometric mean over fwd1 and bwd3 at H "
                f"{'/'.join(map(str, hidden))}, B {'/'.join(map(str, batches))}, worst {min(ratios):.2f}x."]


def tensor_core_section(train_path: Path, gemm_path: Path) -> str:
    """The tensor-core GEMMs (wgmma: TF32; x3tf32: 3xTF32, FP32-accurate) in training and alone,
    beside the FP32 cuBLAS floor, JAX's 3xTF32 and cuBLAS TF32."""
    import json

    import numpy as np
    import pandas as pd
    t = pd.read_csv(train_path)
    wide = t.pivot_table(index="peer", columns=["H", "B"], values="epoch_ms")
    lines = ["### Tensor cores: TF32 (`--gemm wgmma`) and 3xTF32 (`--gemm x3tf32`) on Hopper's wgmma\n",
             f"Epochs: {source(train_path)}, 60000 samples, median of 5 epochs.\n",
             fmt(wide.set_axis([f"H={h} B={b} (ms)" for h, b in wide.columns], axis=1).reset_index().round(3)), ""]
    for (h, b), g in t.groupby(["H", "B"]):
        ms = g.set_index("peer").epoch_ms
        ratio = lambda a, c: f"{ms[a] / ms[c]:.2f}" if a in ms and c in ms else "n/a"  # noqa: E731
        lines.append(f"- H={h} B={b}: x3tf32 epoch {ratio('perflab (x3tf32 gemm)', 'cublas 5-gemm floor')} of the FP32 "
                     f"cuBLAS 5-GEMM floor, {ratio('perflab (x3tf32 gemm)', 'jax scan epoch (3xTF32)')} of JAX's 3xTF32 "
                     f"scan epoch; wgmma (TF32) {ratio('perflab (wgmma gemm)', 'cublas 5-gemm floor')} of the floor.")
    if gemm_path.exists():
        g = pd.read_csv(gemm_path)
        big = g[g["shape"].str.startswith(("fwd1", "bwd3"))]
        rates = big.pivot_table(index="shape", columns="variant", values="tflops", sort=False)
        errors = big.pivot_table(index="shape", columns="variant", values="rel_error", sort=False)
        lines += ["", f"GEMMs alone: {source(gemm_path)}; TFLOP/s, operands split (x3tf32) or copied K-major (wgmma, "
                      f"where stored otherwise) in every call, as for any caller; the trainer keeps its images' forms.\n",
                  fmt(rates.round(1).reset_index()), ""]
        for shape in rates.index:
            r, e = rates.loc[shape], errors.loc[shape]
            lines.append(f"- {shape}: x3tf32 {r['x3tf32'] / r['cublas']:.2f}x cuBLAS SGEMM, {r['x3tf32'] / r['jax-x3']:.2f}x "
                         f"JAX's 3xTF32, error {e['x3tf32']:.1e} against SGEMM's {e['cublas']:.1e}; wgmma "
                         f"{r['wgmma'] / r['pytorch-tf32']:.2f}x cuBLAS TF32 (pytorch-tf32).")
        ratios = {"x3tf32 / cuBLAS SGEMM": rates.x3tf32 / rates.cublas, "x3tf32 / JAX's 3xTF32": rates.x3tf32 / rates["jax-x3"],
                  "wgmma / cuBLAS TF32": rates.wgmma / rates["pytorch-tf32"]}
        lines += ["", f"Over these {len(rates)} shapes: " + "; ".join(
            f"{name} geometric mean {np.exp(np.log(v).mean()):.2f}, worst {v.min():.2f}" for name, v in ratios.items()) + "."]
    figure = RESULTS_ROOT / "figures" / f"tensor_core_roofline_{train_path.parent.name}.png"
    if figure.exists():  # written by `perflab report --markdown` (tensor_core_figures)
        lines += ["", f"![the tensor-core GEMMs under the FP32, TF32 and 3xTF32 roofs](results/figures/{figure.name})"]
    lines += trainer_form_ratios(train_path.parent / "ceilings_p1.csv")
    checks = sorted(train_path.parent.glob("check_tensor_cores_weights_*.log"))  # one: the run of these kernels
    if checks:
        runs = [json.loads(line) for line in checks[-1].read_text().splitlines() if line.startswith("{")]
        lines += ["", f"Weights after {runs[0]['num_epochs']} epochs (H={runs[0]['hidden_sizes'][0]}, B={runs[0]['batch_size']}, "
                      f"lr {runs[0]['learning_rate']}, {runs[0]['train_size']} {runs[0]['dataset']} samples) against the "
                      f"float64 reference, largest relative error (`perflab check`; "
                      f"`{checks[-1].relative_to(RESULTS_ROOT.parent)}`): "
                      + ", ".join(f"{r['gemm']} {r['max_rel_error']:.2g}" for r in runs) + "."]
    return "\n".join(lines)


def step_prediction(steps, train):
    """The epoch predicted as the sum of a step's kernels timed alone (bench_step) times N/B
    steps, against the measured epoch (bench_train), for perflab's fused step and the unfused
    one. Agreement says the step is the sum of its kernels (no gaps, no overlap to speak of)."""
    import pandas as pd
    rows = []
    for (H, B), group in steps.groupby(["H", "B"]):
        # the unfused step runs every kernel but the fused ones (its peer was named "perflab (backward
        # unfused)" in earlier files)
        for peer, drop in (("perflab", "unfused"), ("perflab (unfused)", "fused"), ("perflab (backward unfused)", "fused")):
            measured = train[(train.H == H) & (train.B == B) & (train.peer == peer)]
            if not len(measured):
                continue
            step_ms = group[~group.kernel.str.startswith(drop)].ms.sum()
            N = measured.N.iloc[0]
            predicted = step_ms * N / B
            rows.append({"H": H, "B": B, "step": peer, "kernels_ms_per_step": step_ms, "predicted_epoch_ms": predicted,
                         "measured_epoch_ms": measured.epoch_ms.iloc[0],
                         "error": predicted / measured.epoch_ms.iloc[0] - 1})
    return pd.DataFrame(rows)


def step_section() -> list[str]:
    import pandas as pd
    out = []
    for path in sorted(RESULTS_ROOT.glob("*/bench_step.csv")):
        train = path.with_name("bench_train.csv")
        if not train.exists():
            continue
        table = step_prediction(pd.read_csv(path), pd.read_csv(train))
        if len(table):
            out += ["", f"## The epoch as the sum of its kernels, {path.parent.name}", "",
                    f"Sources: {source(path)}; {source(train)}.", "", fmt(table.round(4)), "",
                    "Each kernel of a step timed alone in a replayed CUDA graph (`perflab bench step`), summed, "
                    "times N/B steps an epoch, against the measured epoch (`perflab bench train`). Median "
                    f"|error| {100 * table.error.abs().median():.1f}%: a step costs the sum of its kernels, so "
                    "the kernel table says where to spend effort (the two large cuBLAS GEMMs, then the "
                    "memory-bound kernels)."]
    return out


def launch_table(sweep):
    """ms per batch of each (H, B, mode, GEMM) measured both as a graph replay and kernel by kernel."""
    t = sweep[(sweep.get("status", "measured") == "measured") & sweep.launch.isin(["graph", "eager"])].copy()
    t["ms"] = 1e3 * t.epoch_seconds / t.batches
    wide = t.pivot_table(index=["H", "B", "mode", "gemm"], columns="launch", values="ms")
    if not {"graph", "eager"} <= set(wide.columns):
        return wide.iloc[:0]
    wide = wide.dropna()
    wide["eager / graph"] = wide["eager"] / wide["graph"]
    return wide[["graph", "eager", "eager / graph"]].reset_index()


def launch_tables() -> dict:
    """{sweep path: launch_table} for every committed sweep that measured points both ways."""
    import pandas as pd
    out = {}
    for path in sorted(RESULTS_ROOT.glob("*/*.csv")):
        head = pd.read_csv(path, nrows=0).columns
        if "launch" in head and "epoch_seconds" in head:
            table = launch_table(pd.read_csv(path))
            if len(table):
                out[path] = table
    return out


def graphs_figures() -> list[Path]:
    """results/figures/graphs_bought_<sweep>.png for each sweep measured both ways (REPORT draws them)."""
    from perflab.report import plots
    return [plots.save(plots.graphs_bought(t, f"What CUDA graphs buy, {p.parent.name}"), f"graphs_bought_{p.stem}",
                       f"Time per batch launched kernel by kernel over the same batch replayed as one CUDA graph, per "
                       f"point (perflab sweep --launch graph eager). Source: results/{p.parent.name}/{p.name}.",
                       folder=RESULTS_ROOT / "figures")
            for p, t in launch_tables().items()]


def launch_section() -> list[str]:
    """What CUDA graphs buy: the sweeps that measured each point both ways (`perflab sweep --launch graph eager`)."""
    out = []
    for path, table in launch_tables().items():
        by_mode = table.groupby("mode")["eager / graph"]
        figure = RESULTS_ROOT / "figures" / f"graphs_bought_{path.stem}.png"
        out += ["", f"## What CUDA graphs buy, {path.parent.name}, {path.stem}", "", f"Source: {source(path)}.", ""]
        out += [f"![eager over graph per point](figures/{figure.name})", ""] if figure.exists() else []
        out += [fmt(table.round(3)), "",
                "Each point's step replayed as one CUDA graph, and its kernels launched one by one as the seeds' code "
                "does (`perflab sweep --launch graph eager`), ms per batch. Kernel by kernel, the host pays every "
                "launch (and the tensor-core GEMMs' operand set-up) each step, so a step whose kernels are short "
                "waits on the host: "
                + "; ".join(f"{mode} eager / graph {g.min():.2f}-{g.max():.2f}" for mode, g in by_mode)
                + ". The eager times also move with the host's speed between points of one run (the predictor's "
                "misses on them, `experiments/predictor/README.md`), and a staged step's pageable copy drifts either "
                "way between points (`experiments/staged_copy/`); a graph replay costs the same on every lend."]
    return out


def parallel_section() -> list[str]:
    """Data against model parallel from each committed parallel.csv (`perflab sweep --name parallel
    --parallel data model`): epoch seconds, the all-reduce's median per batch and its bytes."""
    import json

    import pandas as pd
    out = []
    paths = sorted(RESULTS_ROOT.glob("*/parallel.csv")) + sorted(RESULTS_ROOT.glob("*/prediction_check_*model*.csv"))
    for path in paths:
        t = pd.read_csv(path)
        t["b"] = t.B // t.p
        t["allreduce_ms"] = 1e3 * t["t_MPI_Allreduce"] if "t_MPI_Allreduce" in t else float("nan")
        wide = t.pivot_table(index=["H", "b", "p"], columns="parallel", values=["epoch_seconds", "allreduce_ms", "bytes_mpi"])
        wide.columns = [f"{what} {how}" for what, how in wide.columns]
        wide["model / data (epoch)"] = wide["epoch_seconds model"] / wide["epoch_seconds data"]
        several = wide.reset_index()
        several = several[several.p > 1]
        wins = int((several["model / data (epoch)"] < 1).sum())
        ratio = several["bytes_mpi data"] / several["bytes_mpi model"]
        how = ("fused model parallel, one CUDA graph a step, NCCL inside" if "step_graph" in t and t.step_graph.any()
               else "fused model parallel, launched kernel by kernel on several GPUs" if "trainer" in t else "")
        out += ["", f"## Data against model parallel (b = B/p per rank), {path.parent.name}"
                + (f", {how}" if how else ""), "",
                f"Source: {source(path)}.", "", fmt(wide.reset_index().round(4)), "",
                f"Model parallel was faster at {wins} of the {len(several)} points with p > 1. Data parallel "
                "all-reduces every gradient, H(D + C + 1) + C values a batch whatever B (`bytes_mpi data`); model "
                "parallel splits the hidden units and all-reduces only the C x B logits (`bytes_mpi model`), but "
                "each rank multiplies thinner matrices and every rank repeats the softmax. The all-reduce medians "
                "include the wait for the slower rank (the bytes differ "
                f"{ratio.min():.0f} to {ratio.max():.0f} times, the medians far less)."]
        generic = "trainer" not in t or not (t.trainer[t.parallel == "model"] == "FusedModelParallel").all()
        if "gpu" in json.loads(path.with_suffix(".json").read_text()) and generic:
            out += ["", "On the GPUs model parallel runs perflab's generic CuPy path (unfused kernels launched one by "
                        "one, not the fused data-parallel trainer), so part of its gap is the kernels, not the exchange."]
        missing = wide[wide[["epoch_seconds data", "epoch_seconds model"]].isna().any(axis=1)].reset_index()
        if len(missing):
            out += ["", "Not measured (the sweep's time limit ended the run first): "
                    + ", ".join(f"H={r.H} b={r.b} p={r.p}" for r in missing.itertuples()) + "."]
    return out


def allreduce_section() -> list[str]:
    """perflab's all-reduce paths beside torch.distributed (`perflab bench allreduce`)."""
    import pandas as pd
    out = []
    for path in sorted(RESULTS_ROOT.glob("*/bench_allreduce_p*.csv")):
        t = pd.read_csv(path)
        wide = t.pivot_table(index="size_bytes", columns="impl", values="ms")
        wide["perflab nccl / torch"] = wide["perflab nccl"] / wide["torch.distributed nccl"]
        out += ["", f"## The gradient all-reduce, perflab beside torch.distributed, p={t.ranks.iloc[0]}, {path.parent.name}",
                "", f"Source: {source(path)}.", "", fmt(wide.reset_index().round(4)), "",
                "Milliseconds per float32 all-reduce (CUDA events around 10 back-to-back calls, median of 10; the staged "
                "path host-timed). The gradient buffers (with the loss slot) are "
                + ", ".join(f"{gradient_buffer_bytes(H)} bytes at H={H}" for H in (512, 2048))
                + ". The staged path (device -> pageable host, Open MPI, host -> device: the seeds' path) takes "
                f"{(wide['perflab staged mpi'] / wide['perflab nccl']).median():.0f} times NCCL's time (median over "
                "the sizes)."]
        out += host_allreduce_text(wide)
    return out


def host_allreduce_text(wide) -> list[str]:
    """Which host all-reduce the staged paths should use, from the host rows of bench allreduce."""
    allreduce, split = "host MPI_Allreduce (pinned buffer)", "host reduce-scatter + all-gather (pinned buffer)"
    if allreduce not in wide or split not in wide:
        return []
    size = gradient_buffer_bytes(2048)
    row = wide.loc[size] if size in wide.index else wide.iloc[-1]
    pinned = "staged, pinned copies, in series"
    copy, add = "host memcpy (one rank's copy, numpy)", "host sum of two buffers (numpy)"
    return ["", f"The host all-reduce alone (what the staged paths hand MPI): MPI_Allreduce takes {row[allreduce]:.2f} ms "
            f"for the H=2048 gradient ({size / row[allreduce] / 1e6:.2f} GB/s of buffer), reduce-scatter + all-gather "
            f"{row[split]:.2f} ms: Open MPI's own all-reduce is the faster, at every size measured "
            f"({'yes' if (wide[allreduce] <= wide[split]).all() else 'no'}), so perflab keeps MPI_Allreduce. With "
            f"pinned copies in series the whole staged exchange takes {row[pinned]:.2f} ms against "
            f"{row['perflab staged mpi']:.2f} ms through pageable memory."
            + (f" What the host itself does with that buffer: NumPy copies it in {row[copy]:.2f} ms and adds two of them "
               f"in {row[add]:.2f} ms (every rank at once), so MPI_Allreduce runs at about "
               f"{row[copy] / row[allreduce]:.2f} of one copy's speed: the room a shared-memory sum (--comm shm) takes."
               if copy in row and add in row else "")]


def pipelined_section() -> list[str]:
    """The seeds' staged path in series and pipelined beside resident, one run per machine (the
    prediction checks named *pipelined*), with the roof each exchanged point meets."""
    import json

    import pandas as pd

    from perflab.analysis import roofline
    from perflab.measure import timeline
    out = []
    for path in sorted(RESULTS_ROOT.glob("*/prediction_check_*pipelined*.csv")):
        t = pd.read_csv(path)
        made = json.loads((RESULTS_ROOT / "predictions" / f"{path.stem.removeprefix('prediction_check_')}.json").read_text())
        pred = pd.DataFrame(made["rows"])[["H", "B", "p", "mode", "epoch_ms"]].rename(columns={"epoch_ms": "predicted_ms"})
        both = t.assign(measured_ms=1e3 * t.epoch_seconds).merge(pred, on=["H", "B", "p", "mode"])
        both["error"] = (both.predicted_ms / both.measured_ms - 1).map(lambda e: f"{e:+.0%}")
        wide = both.pivot_table(index="p", columns="mode", values="measured_ms")
        lines = [f"p={p}: pipelined {row.pipelined / row.resident:.2f}x the resident epoch, "
                 f"{row.staged / row.pipelined:.2f}x faster than in series" for p, row in wide.iterrows()]
        copy = both[both["mode"] == "pipelined"].iloc[0]
        roofs = roofline.folder_roofs(path.parent, "gpu")
        p_pci = copy["bytes_images"] / copy["t_copying images host -> device"]
        out += ["", f"## The seeds' path pipelined, {path.parent.name}", "",
                f"Source: {source(path)}, predicted before the run in `{Path('results/predictions') / (path.stem.removeprefix('prediction_check_') + '.json')}` "
                f"from `{made['ceilings']}`. Epochs of 60000 samples, H=2048, 3000 samples a GPU per step; median "
                "of the unprofiled epochs.", "",
                fmt(both[["H", "B", "p", "mode", "measured_ms", "predicted_ms", "error"]].round(2)), "",
                "; ".join(lines) + f". The pipelined images copy, profiled alone: {p_pci / 1e9:.1f} GB/s, "
                f"{p_pci / roofs['P_pci']:.2f} of the fastest pinned host -> device copy the ceilings measured."]
        bounds = roofline.overlap_bounds(t, roofs)
        if len(bounds):
            out += ["", "Where the exchanged points fall: the seeds' serial roofline AI / (AI/P_flops + 1/BW) against "
                    "the standard min(P_flops, AI BW), BW = 2 / (1/P_pci + 1/P_mpi) = "
                    f"{bounds.BW.iloc[0] / 1e9:.3g} GB/s from this machine's ceilings.", "",
                    fmt(bounds[["H", "p", "mode", "ai", "achieved", "of serial", "of standard", "meets"]].round(3))]
        for tl in sorted(path.parent.glob("timeline_*.csv")):
            busy = timeline.busy(timeline.lanes(pd.read_csv(tl)))
            busy = busy[busy["rank"] == 0]
            wide = busy.pivot_table(index="lane", columns="mode", values="busy_ms")
            spans = busy.groupby("mode").span_ms.first()
            out += ["", f"Lanes busy over the second epoch of `{tl.name}` (rank 0; ms, ranges merged), beside its span: "
                    + ", ".join(f"{m} {v:.2f} ms" for m, v in spans.items()) + f". Source: {source(tl)}.", "",
                    fmt(wide.reset_index().round(3))]
    return out


def held_section() -> list[str]:
    """best against cuBLAS held for seconds under load (`perflab bench hold`), the gap split into
    the clock (which the power cap sets from a kernel's energy a cycle) and the work per clock."""
    import pandas as pd
    out = []
    for path in sorted(RESULTS_ROOT.glob("*/bench_hold.csv")):
        t = pd.read_csv(path)
        per = t.groupby(["shape", "variant"], sort=False).agg(
            ms_first=("ms_first", "median"), ms_held=("ms_held", "median"), tflops_held=("tflops_held", "median"),
            clock_mhz=("clock_mhz", "median"), power_w=("power_w", "median"),
            reasons=("reasons", lambda r: ", ".join(sorted({x for v in r.dropna() for x in str(v).split(", ")}))))
        rows = []
        for shape in dict.fromkeys(t["shape"]):
            best, cublas = per.loc[(shape, "best")], per.loc[(shape, "cublas")]
            held, clock = best.tflops_held / cublas.tflops_held, best.clock_mhz / cublas.clock_mhz
            rows.append({"shape": shape, "best / cuBLAS held": held, "clock ratio": clock, "per clock": held / clock})
        split = pd.DataFrame(rows)
        per[["clock_mhz", "power_w"]] = per[["clock_mhz", "power_w"]].round().astype(int)
        out += ["", f"## The best GEMM against cuBLAS held under load, {path.parent.name}", "",
                f"Source: {source(path)}.", "", fmt(per.reset_index().round(4)), "", fmt(split.round(3)), "",
                f"Each GEMM replayed for {t.seconds.iloc[0]:g} s at a time, best and cuBLAS in turn, "
                f"{t['round'].nunique()} rounds a shape; the times and nvidia-smi's samples (every 50 ms) are "
                "taken over each hold's second half. A burst after idle runs at the boost clock. Held, a kernel "
                "that reaches the board's power limit runs at the clock the limit leaves it, which falls as the "
                "kernel's energy per cycle rises. The ratio held is the clock ratio times the work done per clock: "
                "the first is the share of the gap that is energy (DRAM traffic, instructions that are not FMAs), "
                "the second the share that is issue. Where neither kernel reaches the limit, the clocks are equal."]
    return out


def prediction_check_section() -> list[str]:
    """The eight-GPU prediction (results/predictions/p8.json) at the p it shares with a measured
    GPU parallel.csv (N = 60000, same H and b per GPU)."""
    import json

    import pandas as pd
    prediction = RESULTS_ROOT / "predictions" / "p8.json"
    if not prediction.exists():
        return []
    pred = pd.DataFrame(json.loads(prediction.read_text())["rows"])
    out = []
    for path in sorted(RESULTS_ROOT.glob("*/parallel.csv")):
        if "gpu" not in json.loads(path.with_suffix(".json").read_text()):
            continue
        t = pd.read_csv(path)
        t["b"], t["measured_ms"] = t.B // t.p, 1e3 * t.epoch_seconds
        both = pred.merge(t[["parallel", "H", "b", "p", "measured_ms"]], on=["parallel", "H", "b", "p"]).dropna()
        both = both[both.p > 1].rename(columns={"epoch_ms": "predicted_ms"})
        if not len(both):
            continue
        both["error"] = both.predicted_ms / both.measured_ms - 1
        table = both[["parallel", "H", "b", "p", "predicted_ms", "measured_ms", "error"]].round(3)
        by = both.groupby("parallel").error.apply(lambda e: 100 * e.abs().median())
        data = both[both.parallel == "data"]
        longest = data[(data.H == data.H.max()) & (data.b == data.b.max())]
        model_p1 = t[(t.parallel == "model") & (t.p == 1)].set_index(["H", "b"]).measured_ms
        data_p1 = t[(t.parallel == "data") & (t.p == 1)].set_index(["H", "b"]).measured_ms
        out += ["", f"## The eight-GPU prediction checked where it overlaps a measurement, {path.parent.name}", "",
                f"Sources: `{prediction.relative_to(RESULTS_ROOT.parent)}` (written before these runs); {source(path)}.",
                "", fmt(table), "",
                "Median |error| " + ", ".join(f"{k} parallel {v:.0f}%" for k, v in by.items()) + ". The data-parallel "
                f"prediction holds for the longest steps (H={data.H.max()}, b={data.b.max()}: within "
                f"{100 * longest.error.abs().max():.0f}%) and under-predicts the shorter, launch-bound ones, whose "
                "per-step launch cost was calibrated on the longest (the p=2 point H=2048 b=3000, so that point is "
                "no independent test). The model-parallel prediction assumed the fused trainer's step, "
                "but model parallel runs the generic unfused path, already "
                f"{(model_p1 / data_p1).min():.1f} to {(model_p1 / data_p1).max():.1f} times slower at p=1."]
    return out


def markdown() -> str:
    """The result tables the README shows, each generated from its committed file."""
    parts = []
    for path in sorted(RESULTS_ROOT.glob("*/bench_train.csv")):
        parts.append(f"### Training epoch, perflab beside its peers\n\nSource: {source(path)}. 60000 samples, FP32, "
                     f"TF32 off, data resident, median of 5 epochs.\n\n{train_table(path)}")
    for path in sorted(RESULTS_ROOT.glob("*/bench_gemm_float32.csv")):
        parts.append(f"### GEMM variants at the training shapes\n\nSource: {source(path)}.\n\n{gemm_table(path)}")
    for path in sorted(RESULTS_ROOT.glob("*/bench_train_tensor_cores.csv")):
        parts.append(tensor_core_section(path, path.with_name("bench_gemm_tensor_cores.csv")))
    from perflab.analysis import roofline
    scaling = roofline.scaling_rows()
    if len(scaling):
        parts.append("### Scaling over GPUs, 60000 samples an epoch, b per GPU per step\n\n"
                     + "\n".join(scaling_story(scaling)))
    parts += predictor_sections(full=False)
    for path in sorted(RESULTS_ROOT.glob("*/reference_mnist.csv")):
        import pandas as pd
        t = pd.read_csv(path)
        last = t.iloc[-1]
        parts.append(f"### CPU reference on MNIST\n\nSource: {source(path)}. After {int(last.epoch) + 1} epochs: test "
                     f"precision {last['test_precision']:.4f}, median epoch {t['seconds'].median():.2f} s "
                     f"({last['dtype']}, H={last['hidden_sizes']}, B={last['batch_size']}, lr={last['learning_rate']}, "
                     f"reg={last['reg']}).")
    return "\n\n".join(parts) + "\n"


def epoch_graph_text(folder: Path, H: int, b: int) -> list[str]:
    """Whether one CUDA graph for a whole epoch could pay at (H, b): only where the host's cost of
    replaying a step's graph exceeds the step's kernels (from the folder's ceilings)."""
    from perflab.analysis import predictor
    path = predictor.ceilings_for(folder, 1)
    if path is None:
        return []
    point = {"H": H, "B": b, "p": 1, "N": 60000, "backend": "cupy", "mode": "resident", "parallel": "data"}
    try:
        pred = predictor.predict_point(point, predictor.Ceilings.load(path))
    except predictor.PredictionError:
        return []
    kernels, host = 1e6 * pred["t_kernels"], 1e6 * pred["t_host"]
    verdict = ("the GPU is the bottleneck: a graph of the whole epoch would save launches the GPU already hides"
               if kernels > host else "the host is the bottleneck: a graph of the whole epoch would pay here")
    return ["", f"One GPU's step at H={H}, b={b}: its kernels {kernels:.0f} us against the host's {host:.0f} us to "
                f"replay its graph (`{path.relative_to(RESULTS_ROOT.parent)}`): {verdict}."]


def scaling_story(scaling) -> list[str]:
    """The scaling table per (H, b) and what it says about data against model parallel."""
    out = []
    for (machine, H, b), g in scaling.groupby(["machine", "H", "b"]):
        wide = g.pivot_table(index="peer", columns="p", values="epoch_ms")
        ps = sorted(g.p.unique())
        wide.columns = [f"p={p} (ms)" for p in wide.columns]
        top = g[g.p == ps[-1]].set_index("peer")
        wide[f"efficiency p={ps[-1]}"] = top.efficiency
        meta = g.iloc[0]
        what = f", {meta['gpu']} x{meta['gpus']}, git {meta['git_commit'][:8]}, {meta['date']}" if "git_commit" in g else ""
        out += [f"### H={H}, b={b}, `results/{machine}/scaling.jsonl`{what}", "", fmt(wide.reset_index().round(3)), ""]
        peers = top.drop(index=[i for i in top.index if i.startswith("perflab")])
        lines = []
        for name in ("perflab resident", "perflab resident, model parallel"):
            if name in top.index and len(ps) > 1:
                best = peers.epoch_ms.idxmin() if len(peers) else None
                lines.append(f"{name}: efficiency {top.efficiency[name]:.2f} at p={ps[-1]}"
                             + (f", epoch {top.epoch_ms[name] / peers.epoch_ms.min():.2f} of the best peer's ({best})"
                                if best else ""))
        out += ["; ".join(lines) + "." if lines else ""]
        out += epoch_graph_text(RESULTS_ROOT / machine, int(H), int(b))
    out += ["", "Data parallel all-reduces the whole gradient (6.5 MB at H=2048) after backward GEMM 3, the step's "
                "last work, so nothing is left to hide it behind; model parallel all-reduces the C x B logits "
                "(240 KB at B=6000) and its whole step, the NCCL all-reduce included, is one CUDA graph. "
                "The all-reduce of data parallel launches after the step's graph: capturing it too measured no "
                "faster. `--overlap` (dW1 in row chunks, each all-reduced on a second stream as it is made) is "
                "captured in the graph, where it is 1.2-6x faster than launched eagerly, but slower than no overlap "
                "at both shapes and every chunk count tried (1, 2, 4; fewer chunks lose less; not profiled) "
                "(`results/nvidia-h200/nccl_graph_capture.log`). An NCCL all-reduce captured with "
                "CuPy never hung: the old hang (`results/nvidia-h200/nccl_graphs.log`) was destroying the NCCL "
                "communicator while graphs held its all-reduces, now freed first."]
    return out


def phase_error(path: Path) -> str:
    """Median |error| over the profiled phases the ceilings time, and how many (point, phase) pairs."""
    import pandas as pd
    if not path.exists():
        return "-"
    t = pd.read_csv(path)
    return f"{t.error.abs().median():.0%} ({len(t)})"


def missed_points(folder: Path, worse_than: float = 0.2):
    """The points of a machine folder the predictor misses by more than `worse_than`, each with what
    its profiled run says: how well the predicted phases (each GEMM, the update, the image copy)
    matched there, the phase that missed by the most milliseconds, and the same configuration's
    unprofiled time in the folder's other runs (the spread between runs)."""
    import pandas as pd

    from perflab.analysis import predictor, validation
    v = pd.read_csv(folder / "validation.csv")
    if "error" not in v:
        return v.iloc[:0]
    banded = validation.inside_band(v)
    phases = pd.read_csv(folder / "validation_phases.csv") if (folder / "validation_phases.csv").exists() else None
    v["launch"] = [predictor.launch_name(r) for r in v.to_dict("records")]
    v["gemm"] = v["gemm"] if "gemm" in v else "cublas"
    keys = ["source", "H", "B", "p", "mode", "parallel", "gemm", "launch"]
    rows = []
    for _, r in v[v.error.abs() > worse_than].iterrows():
        row = {"source": r.source, "H": r.H, "B": r.B, "p": r.p, "mode": r["mode"], "parallel": r.parallel,
               "GEMM": r.gemm, "launch": r.launch,
               "predicted ms": r.predicted_ms, "measured ms": r.measured_ms, "error": f"{r.error:+.0%}"}
        if phases is not None:
            named = [k for k in keys if k in phases]  # older files name neither GEMM nor launch
            ph = phases[(phases[named] == r[named]).all(axis=1)]
            if len(ph):
                gap = (ph.measured_ms - ph.predicted_ms).abs()
                worst = ph.loc[gap.idxmax()]
                row["phases: median abs error"] = f"{ph.error.abs().median():.0%} ({len(ph)})"
                row["phase missed most"] = f"{worst.phase} ({worst.measured_ms - worst.predicted_ms:+.3f} ms)"
        if r.name in banded.index:  # the staged copy's spread over the ceiling's walks, the eager host floor's
            row["band from the copy's and the host's spread (ms)"] = (
                f"{r.predicted_low_ms:.3g}-{r.predicted_high_ms:.3g}: " + ("inside" if banded[r.name] else "outside"))
        if "error_probed" in v and pd.notna(r.error_probed):  # the copy probed beside this very run
            row["at the probed copy (ms)"] = f"{r.predicted_probed_ms:.3g} ({r.error_probed:+.0%})"
        same = v[(v[keys[1:]] == r[keys[1:]]).all(axis=1) & (v.source != r.source)]
        row["same point, other runs (ms)"] = ", ".join(f"{m:.3g}" for m in same.measured_ms) or "-"
        rows.append(row)
    return pd.DataFrame(rows)


HOST_TERMS = {"staged copy, B = 3200 (ms)": ("staged_images", None), "eager launch of a step (ms)": ("step_floor", "eager launch"),
              "trainer staged, kernel by kernel (ms)": ("step_floor", "trainer staged"),
              "trainer staged, graph (ms)": ("step_floor", "trainer staged graph"),
              "trainer resident, graph (ms)": ("step_floor", "trainer resident")}


def staged_graphed(done) -> str:
    """Median (worst) |error| and count of the staged points whose step replayed a graph (since bd32702)."""
    if "graphs" not in done:
        return "-"
    g = done[(done["mode"] == "staged") & (done.graphs.astype(str) == "True")]
    return f"{g.error.abs().median():.0%} ({g.error.abs().max():.0%}), {len(g)}" if len(g) else "-"


def lend_table(folder: Path):
    """The host-side ceilings of every ceilings file of a machine folder (its own, its main job's, those
    measured beside a sweep), one row each with the kernel boot it ran on: how much the terms a
    staged prediction rests on move between lends of one device image, and within one."""
    import json

    import pandas as pd
    rows = []
    for path in sorted(folder.glob("**/ceilings_p1.csv")):
        meta = json.loads(path.with_suffix(".json").read_text()) if path.with_suffix(".json").exists() else {}
        t = pd.read_csv(path)
        row = {"ceilings": str(path.relative_to(folder)), "boot": meta.get("boot") or "-",
               "date": str(meta.get("date", "?"))[:19], "git": str(meta.get("git_commit", "?"))[:8]}
        for name, (ceiling, impl) in HOST_TERMS.items():
            hit = t[(t.ceiling == ceiling) & ((t.impl == impl) if impl else (t.B == 3200))]
            row[name] = round(1e3 * float(hit.seconds.iloc[0]), 3) if len(hit) else "-"
        rows.append(row)
    return pd.DataFrame(rows)


def lend_section() -> list[str]:
    import pandas as pd
    out = []
    for folder in sorted(d for d in RESULTS_ROOT.iterdir() if d.is_dir()):
        t = lend_table(folder)
        if len(t) > 1:
            spread = {name: pd.to_numeric(t[name], errors="coerce").dropna() for name in HOST_TERMS}
            said = "; ".join(f"{name.removesuffix(' (ms)')} {v.max() / v.min():.2f}x" for name, v in spread.items() if len(v) > 1)
            if said:  # a GPU folder (a CPU's ceilings have no such terms)
                out.append(f"{folder.name} (slowest over fastest: {said}):\n\n" + fmt(t))
    if not out:
        return []
    return ["\n### The host's terms between lends of one machine\n\n"
            "Every ceilings file of a machine folder, with the kernel boot it ran on (metadata `boot`; lends of one "
            "device image share host name and machine-id). The host's terms a staged prediction rests on, the "
            "staged copy (the host's one-core memcpy) and a step launched kernel by kernel, move between lends and "
            "within one (the main job's ceilings run beside the notebook's engines), far more than a graph "
            "replay's floor. Hence the staged step replays a graph, a staged point "
            "carries its copy probed beside it, and a sweep is predicted from the ceilings measured on its own lend "
            "where they exist.\n\n" + "\n\n".join(out)]


def missed_section() -> list[str]:
    import pandas as pd
    parts = []
    for path in sorted(RESULTS_ROOT.glob("*/validation.csv")):
        t = missed_points(path.parent)
        if len(t):
            parts.append(t.assign(machine=path.parent.name))
    if not parts:
        return []
    t = pd.concat(parts, ignore_index=True)
    t = t[["machine"] + [c for c in t.columns if c != "machine"]]
    return ["\n### The points missed by more than 20%, and what their profiled runs say\n\n"
            "For each: the profiled run's phases that the predictor composes (`validation_phases.csv`), how well "
            "they matched, the one that missed by the most, and the same configuration measured in the folder's other "
            "runs. Where the phases match and the point does not, what is wrong lies outside the kernels and copies "
            "the ceilings time (the host between them, the staged path's pageable copies waiting on the stream); where "
            "the same point measured in another run lands near the prediction, the miss is the spread between runs "
            "(another instance of the machine, another day), which no ceilings file measured on a third can "
            "predict. The staged points' band: the batch with the ceiling's fastest and slowest walk of the data set's "
            "copies (`perflab ceilings` walks it 7 times): the pageable copy is the host's one-core memcpy into the "
            "driver's staging buffers, which drifts by 10-30% over seconds on the device machines "
            "(`experiments/staged_copy/`), so a staged point measured over one or a few epochs lands anywhere in it, "
            "and beyond it where its run met a slower moment than the ceiling's. A step launched kernel by kernel "
            "widens the band by the host floor's fastest and slowest of its three repeats (where the ceilings file "
            "timed it so; the earlier ones timed it once).\n\n" + fmt(t.round(3).fillna("-"))]


def tensor_core_figures() -> list[Path]:
    """results/figures/tensor_core_roofline_<folder>.png for each committed tensor-core GEMM bench
    (the kernels notebook draws the same), for the README's tensor-core section."""
    from perflab.report import plots
    return [plots.save_tensor_core_roofline(path, folder=RESULTS_ROOT / "figures")
            for path in sorted(RESULTS_ROOT.glob("*/bench_gemm_tensor_cores.csv"))]


VALIDATION_FIGURE = "predictor_validation"


def validation_figure() -> Path | None:
    """results/figures/predictor_validation.png: every committed folder's validation.csv drawn
    predicted against measured (plots.validation_scatter); None where no folder has a prediction."""
    import pandas as pd

    from perflab.report import plots
    tables = {p.parent.name: pd.read_csv(p) for p in sorted(RESULTS_ROOT.glob("*/validation.csv"))}
    if not any("predicted_ms" in t and t.predicted_ms.notna().any() for t in tables.values()):
        return None  # validation_scatter draws the folders with a prediction
    return plots.save(plots.validation_scatter(tables), VALIDATION_FIGURE,
                      "The bottom-up predictor (perflab.analysis.predictor, each machine's ceilings alone) against every "
                      "committed point, ms per batch; bars: a point's band (the copy ceiling's fastest and slowest walk; the "
                      "host floor's fastest and slowest repeat, kernel by kernel). Sources: results/<folder>/validation.csv (perflab validate --committed).",
                      folder=RESULTS_ROOT / "figures")


def check_table(pred, measured) -> tuple:
    """A committed prediction's rows beside its run's, matched on every setting both name (a point
    predicted graphed and eager pairs with its own launch only): (table, error per row, columns)."""
    import pandas as pd
    keys = ["H", "B", "p", "mode"] + [k for k in ("parallel", "gemm", "launch") if k in pred and k in measured]
    both = pred.merge(measured.assign(measured_ms=1e3 * measured.epoch_seconds / measured.batches), on=keys)
    err = both.batch_ms / both.measured_ms - 1
    both["error"] = err.map(lambda e: f"{e:+.0%}")
    columns = ["H", "b", "p", *(k for k in ("parallel", "gemm") if k in keys), "mode",
               *(["launch"] if "launch" in keys else []), "batch_ms", "measured_ms", "error"]
    if "low_ms" in both:  # the band from the copy ceiling's spread (staged) and the eager host floor's
        both["band ms/batch"] = [f"{lo:.3g}-{hi:.3g}" if pd.notna(lo) else "-" for lo, hi in zip(both.low_ms, both.high_ms)]
        columns.append("band ms/batch")
    return both, err, columns


def committed_checks() -> list[tuple[Path, dict, Path | None]]:
    """Every committed prediction (results/predictions/*_h*_b*.json) with the sweep that tested it
    (`*/prediction_check_<its name>.csv`), or None where its run is not made yet."""
    import json
    out = []
    for made_path in sorted((RESULTS_ROOT / "predictions").glob("*_h*_b*.json")):
        checks = sorted(RESULTS_ROOT.glob(f"*/prediction_check_{made_path.stem}.csv"))  # each names its prediction
        out.append((made_path, json.loads(made_path.read_text()), checks[0] if checks else None))
    return out


def median_worst(err) -> str:
    return f"{err.abs().median():.0%} ({err.abs().max():.0%}), {len(err)}" if len(err) else "-"


def check_points(checks):
    """Every point of every measured prediction, one row each: the check, its machine folder, when it
    was measured, the prediction's git, mode, launch (None where the check did not name it) and error."""
    import json

    import pandas as pd
    parts = []
    for made_path, made, check in checks:
        if check is None:
            continue
        both, err, _ = check_table(pd.DataFrame(made["rows"]), pd.read_csv(check))
        meta = json.loads(check.with_suffix(".json").read_text()) if check.with_suffix(".json").exists() else {}
        parts.append(pd.DataFrame({"check": made_path.stem, "machine": check.parent.name,
                                   "measured": str(meta.get("date", "?"))[:16], "predicted at": made["predicted_by"][:8],
                                   "mode": both["mode"], "launch": both["launch"] if "launch" in both else None,
                                   "error": err}))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def checks_summary(points) -> str:
    """One row per measured prediction (check_points), newest run first: how far each blind test
    landed, overall, per mode, and for the graphed resident steps (the kernels' part of the model)."""
    import pandas as pd
    if not len(points):
        return ""
    rows = []
    for (check, machine, measured, git), g in points.groupby(["check", "machine", "measured", "predicted at"], sort=False):
        err = g.error
        row = {"check": check, "machine": machine, "measured": measured, "predicted at": git, "points": len(err),
               "median abs error": f"{err.abs().median():.0%}", "worst": f"{err.abs().max():.0%}"}
        for mode in MODES:
            row[mode] = median_worst(err[g["mode"] == mode])
        row["resident, graphed"] = median_worst(err[(g["mode"] == "resident") & (g.launch == "graph")])
        row["kernel by kernel"] = median_worst(err[g.launch == "eager"]) if g.launch.notna().any() else "-"
        rows.append(row)
    return fmt(pd.DataFrame(rows).sort_values("measured", ascending=False))


CHECKS_FIGURE = "blind_checks"


def checks_figure(points) -> Path | None:
    """results/figures/blind_checks.png: every blind check's points, |error| per check in the order
    they ran (plots.blind_checks); None where no prediction was measured yet."""
    from perflab.report import plots
    if not len(points):
        return None
    return plots.save(plots.blind_checks(points), CHECKS_FIGURE,
                      "Every prediction committed before its run, then measured (results/predictions/*.json against "
                      "results/<folder>/prediction_check_*.csv): |predicted / measured - 1| per point, the checks in "
                      "the order they ran, a colour per kind of step; lines: the median per kind and check.",
                      folder=RESULTS_ROOT / "figures")


def predictor_sections(full: bool = True) -> list[str]:
    """The bottom-up predictor against every committed point (validation.csv per machine folder),
    and the predictions committed before their runs (results/predictions/*.json with their checks).
    full: REPORT.md's, with every check's points, the missed points and the host's terms per lend;
    the README's leaves those to it."""
    import pandas as pd

    from perflab.analysis import predictor, validation
    rows = []
    for path in sorted(RESULTS_ROOT.glob("*/validation.csv")):
        v = pd.read_csv(path)
        s = validation.summary(v)
        done = v[v["error"].notna()] if "error" in v else v.iloc[:0]
        by_mode = {m: f"{g.error.abs().median():.0%}" for m, g in done.groupby("mode")} if len(done) else {}
        rows.append({"machine folder": path.parent.name, "points": s["points"], "skipped": s["skipped"],
                     "median abs error": f"{s['median_abs_error']:.0%}" if s["points"] else "-",
                     "worst": f"{s['worst_abs_error']:.0%}" if s["points"] else "-",
                     **{mode: by_mode.get(mode, "-") for mode in MODES},
                     "staged, graphed": staged_graphed(done),
                     "staged in band": f"{s['inside_band']} of {s['banded']}" if "banded" in s else "-",
                     "resident, kernel by kernel, in band": (f"{s['inside_host_band']} of {s['host_banded']}"
                                                             if "host_banded" in s else "-"),
                     "staged, copy probed: blind / at the probe": (
                         f"{s['probed']}: {s['median_abs_error_blind_probed']:.0%} ({s['worst_abs_error_blind_probed']:.0%}) / "
                         f"{s['median_abs_error_probed']:.0%} ({s['worst_abs_error_probed']:.0%})") if "probed" in s else "-",
                     "ceilings of the point's own lend": (
                         f"{s['same_lend']}: {s['median_abs_error_same_lend']:.0%} ({s['worst_abs_error_same_lend']:.0%})"
                         + (f"; graphed {s['same_lend_graphed']}: {s['median_abs_error_same_lend_graphed']:.0%} "
                            f"({s['worst_abs_error_same_lend_graphed']:.0%})" if "same_lend_graphed" in s else "")
                         if "same_lend" in s else "-"),
                     "profiled phases": phase_error(path.with_name("validation_phases.csv")),
                     **({"sources": ", ".join(sorted(set(done.source))) if len(done) else
                         "no ceilings with the step's kernels"} if full else {})})
    if not rows:
        return []
    out = ["### The bottom-up predictor against every committed point\n\n"
           "Time per batch composed from each machine's ceilings files alone (`perflab ceilings`; `perflab.analysis.predictor`), "
           "against the measured unprofiled epoch over its batches. Sources: `results/<folder>/validation.csv` "
           "(`perflab validate --committed`), each row naming the ceilings file it used; the profiled phases (the "
           "seeds' NVTX names, each GEMM, the update, the image copy) in `validation_phases.csv`. No constant is fitted "
           "to these points, but they are not a blind test: most were measured before the ceilings that predict them "
           "were committed (the main jobs' predictions were written before their sweeps, in the same run), and the "
           "predictor's terms were chosen while comparing with them. The blind tests are the predictions below, "
           "each committed before its run. Staged points measured with their copy probed beside them (the sweep "
           "walks the staged copy just before and after the timed epochs: `copy_probe_s`) are also predicted with the "
           "ceilings' copy at the probe's level: median (worst) |error| from the ceilings, then at the probe, says how "
           "much of a staged error is the copy's drift between the ceilings run and the point's. The points "
           "predicted from ceilings measured on their own lend of the machine (the same kernel boot in both files' "
           "metadata; a user's main job is this case) are counted apart: the host's terms move between lends.\n\n"
           + fmt(pd.DataFrame(rows))]
    checks = committed_checks()
    summary = checks_summary(check_points(checks))
    if summary:
        out.append("### The predictions committed before their runs\n\n"
                   "Each made by `perflab whatif` from a ceilings file alone and committed, then measured by a sweep "
                   "run at that commit (`test_the_committed_predictions_came_before_their_measurements` checks the "
                   "order): median (worst) |error| and points, newest run first. The graphed resident steps are the "
                   "kernels' part of the model; staged and kernel-by-kernel points follow the host's copy and launch "
                   "speed, which move between and within lends of a machine"
                   + (" (below: every point, and the host's terms per lend)" if full else
                      " (every point of every check, and the host's terms per lend: `results/REPORT.md`)")
                   + ".\n\n" + (f"![every blind check's points](figures/{CHECKS_FIGURE}.png)\n\n" if full else
                                  f"![every blind check's points](results/figures/{CHECKS_FIGURE}.png)\n\n")
                   + summary)
    if full:
        out += missed_section()
        out += lend_section()
    waiting = []
    for made_path, made, check in checks:
        if check is None:
            sources = " and ".join(f"`{f}`" for f in [made["ceilings"], *predictor.exchange_files(made)])
            waiting.append(f"- `{made_path.relative_to(RESULTS_ROOT.parent)}`: {len(made['rows'])} points, from {sources}, "
                           f"at git {made['predicted_by'][:8]}")
        elif full:
            both, err, columns = check_table(pd.DataFrame(made["rows"]), pd.read_csv(check))
            by_mode = "; ".join(f"{mode} median |error| {e.abs().median():.0%}, worst {e.abs().max():.0%} ({len(e)})"
                                for mode, e in err.groupby(both["mode"]))
            out.append(f"### Committed before its run: {made_path.stem}\n\nPredicted by `perflab whatif` at git "
                       f"{made['predicted_by'][:8]} from `{made['ceilings']}` alone (`{made_path.relative_to(RESULTS_ROOT.parent)}`), "
                       f"then measured: {source(check)}.\n\n"
                       + fmt(both[columns].rename(
                           columns={"batch_ms": "predicted ms/batch", "measured_ms": "measured ms/batch"}).round(3))
                       + f"\n\n{by_mode}.\n")
    if waiting:
        out.append("### Predictions committed, their runs not yet made\n\n" + "\n".join(waiting))
    seeds_check = RESULTS_ROOT / "seeds-rtx6000" / "whatif_check.csv"
    if seeds_check.exists():
        t = pd.read_csv(seeds_check)
        t["error"] = t.error.map(lambda e: f"{e:+.0%}")
        out.append("### The seeds' machine from its three rates (a what-if)\n\n"
                   "A ceilings file built from the seeds' P_flops, P_pci and P_mpi alone (RTX 6000, two ranks, H = 512, "
                   "B = 3000; `perflab.analysis.seeds_machine`), its prediction beside the seeds' own phase medians (final "
                   "assignment, Figure 11). The copies and the all-reduce come back by construction (the rates were "
                   "taken from those medians); one P_flops for every GEMM overcharges the large ones and undercharges "
                   "the small, and the work three rates do not describe (elementwise kernels, launches) is what the "
                   "batch misses. Source: `results/seeds-rtx6000/whatif_check.csv`.\n\n" + fmt(t.round(1)))
    return out


BEGIN, END = "<!-- results: generated by `perflab report --readme` -->", "<!-- end of results -->"


def update_readme(readme: Path) -> bool:
    """Replace the generated block of the README; True when it changed."""
    text = readme.read_text()
    start, stop = text.index(BEGIN) + len(BEGIN), text.index(END)
    new = text[:start] + "\n" + markdown() + text[stop:]
    if new != text:
        readme.write_text(new)
    return new != text


# FP32 FMA peak, 132 SMs x 128 lanes x 2 FLOPs x 1.98 GHz boost (bench gemm reads it off the device)
FP32_PEAK = {"NVIDIA H100 80GB HBM3": 66.9e12, "NVIDIA H200": 66.9e12}
SEEDS_RATES = {"P_flops": 1.63e12, "P_pci": 12.7e9, "P_mpi": 7.95e9}  # RTX 6000, the seeds' solution


def span(values, spec: str) -> str:
    """'a to b' for a range of values, 'a' when they are all one."""
    lo, hi = format(values.min(), spec), format(values.max(), spec)
    return lo if lo == hi else f"{lo} to {hi}"


def roofline_text(place, rates: dict) -> list[str]:
    """The placement table and what it says, from the numbers in it."""
    if not len(place):
        return []
    ridge = rates["P_flops"] / rates["P_pci"]
    left = place[place.AI < ridge]
    out = ["", "### Where the points with p > 1 fall on the modified and combined rooflines (staged, rates above)", "",
           fmt(place.round(3)), "",
           f"The modified roofline's ridge is at AI = P_flops / P_pci = {ridge:.0f} FLOP/byte; {len(left)} of "
           f"{len(place)} points lie left of it (AI {span(place.AI, '.0f')}: FLOPs and gradient bytes both grow "
           "with H, so AI changes only with B/p and p), where the gradient bytes over PCIe take "
           f"{span(place['bytes share'], '.0%')} of the bound's time. The points reach "
           f"{span(place['of serial'], '.2f')} of the serial bound"
           + (f" and {span(place['of combined'], '.2f')} of the combined one, which charges the all-reduce at "
              "P_mpi as well." if "of combined" in place else ".")]
    if (place["of serial"] < 1).any():
        out += ["Points under their bound pay what the roofline leaves out: kernel launches, the elementwise "
                "kernels, the device synchronization at each profiled phase edge, the host's share of MPI; the "
                "smaller H, the larger that share."]
    if (place["of serial"] > 1).any():
        out += ["Points above it run their GEMMs faster than the reference point's P_flops (it is measured at "
                "H = 512, where the GEMMs leave SMs idle)."]
    return out


def with_contents(lines: list[str]) -> str:
    """The report with a list of its sections (its `## ` headings, each a link) after the title and
    its first paragraph: REPORT.md runs to a thousand lines."""
    text = "\n".join(lines) + "\n"
    headings = [h[3:].strip() for h in text.splitlines() if h.startswith("## ")]
    if not headings:
        return text
    seen: dict = {}
    items = []
    for h in headings:
        slug = re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-")  # GitHub's anchors
        items.append(f"- [{h}](#{slug}" + (f"-{seen[slug]}" if slug in seen else "") + ")")
        seen[slug] = seen.get(slug, 0) + 1
    parts = text.split("\n\n", 2)
    return "\n\n".join(parts[:2] + ["## Contents\n\n" + "\n".join(items)] + parts[2:])


def analysis_markdown() -> str:
    """results/REPORT.md: the seeds' questions answered from the committed GPU sweeps."""
    import json

    import numpy as np
    import pandas as pd

    from perflab.analysis import roofline
    out = ["# perflab report: the seeds' questions on measured GPUs",
           "", "Generated by `perflab report --markdown` from the committed result files named in each section."]
    for path in sorted(RESULTS_ROOT.glob("*/roofline.csv")):
        meta = json.loads(path.with_suffix(".json").read_text())
        if "gpu" not in meta:
            continue
        t = pd.read_csv(path)
        peak = FP32_PEAK.get(meta["gpu"], float("nan"))
        t["t_batch_ms"] = 1e3 * t["t_batch iteration"]
        t["GFLOP/batch"] = t["flops_per_batch"] / 1e9
        t["TFLOP/s"] = t["flops_per_batch"] / t["t_batch iteration"] / 1e12
        t["utilization"] = t["TFLOP/s"] * 1e12 / peak
        out += ["", f"## {meta['gpu']} x{meta.get('gpu_count', '?')}", "", f"Source: {source(path)}.", "",
                "### Questions 2.1 / 2.2: FLOPs per batch (seeds' 4B'H(D+C)) and effective compute utilization "
                f"(against the FP32 peak {peak / 1e12:.1f} TFLOP/s), median batch iteration of the profiled run "
                "(synchronized at every phase edge, so slower than the unprofiled epochs in `epoch_seconds`)", "",
                fmt(t[["H", "B", "p", "mode", "gemm", "GFLOP/batch", "t_batch_ms", "TFLOP/s", "utilization"]].round(4))]
        staged = t[t["mode"] == "staged"]
        ref = staged[(staged.H == 512) & (staged.p > 1)]
        if len(ref):
            r = ref.iloc[0]
            rates = pd.DataFrame([{"rate": k, "measured": r[k], "seeds RTX 6000": SEEDS_RATES[k],
                                   "ratio": r[k] / SEEDS_RATES[k]} for k in SEEDS_RATES if k in r and np.isfinite(r[k])])
            ceilings_file = min(path.parent.glob("ceilings_p*.csv"), default=None,
                                key=lambda f: abs(int(f.stem.split("_p")[1]) - int(r["p"])))
            if ceilings_file is not None:
                top = roofline.ceiling_rates(pd.read_csv(ceilings_file), gradient_buffer_bytes(int(r["H"])), int(r["p"]))
                rates["machine ceiling"] = [top[k] for k in rates.rate]
                rates["of ceiling"] = rates.measured / rates["machine ceiling"]
            out += ["", f"### Question 2.4: effective rates at H=512, B={r['B']}, p={r['p']}, staged (the seeds' path)", "",
                    fmt(rates), "",
                    (f"Machine ceilings from `{ceilings_file.name}` beside it, counted as the seeds' formulas count "
                     "(the fastest cuBLAS GEMM at the training shapes; pageable copies and host MPI at the gradient's "
                     "size). P_flops sits well under the GEMM ceiling because the profiled GEMM phases include a "
                     "device synchronization each and H = 512's GEMMs leave SMs idle. " if ceilings_file else "")
                    + "P_pci and P_mpi are the seeds' formulas over our medians: the gradient copies go to pageable host "
                    "memory and the all-reduce is Open MPI on the host (not CUDA-aware), the same path as the seeds, "
                    "which is why they land near the seeds' numbers while P_flops is an order of magnitude higher."]
            rates_dict = {k: float(r[k]) for k in ("P_flops", "P_pci", "P_mpi") if np.isfinite(r[k])}
            if "P_pci" in rates_dict:  # the modified rooflines count gradient bytes: points that exchange them
                out += roofline_text(roofline.roofline_placement(staged[staged.p > 1], rates_dict), rates_dict)
            pred = roofline.prediction_table(staged, rates_dict)
            pred["mode"] = "staged"
            worst = pred[pred.error.abs() > 0.15]
            out += ["", "### Predicted (serial model, rates above) against measured time per batch, staged mode", "",
                    fmt(pred.round(3)), "", f"Median |error| {100 * roofline.median_abs_error(pred):.0f}%. "
                    f"{len(worst)} of {len(pred)} points are off by more than 15%. The model charges GEMM FLOPs at one "
                    "P_flops and the image and gradient bytes at P_pci and P_mpi, all taken at the reference point. "
                    "Points below the prediction are the short batches (B = 800, and H = 512): fixed per-batch costs "
                    "the model leaves out (kernel launches, the elementwise kernels, the device synchronization at "
                    "each profiled phase edge) are a larger share of them. Points above it (H = 2048) run their GEMMs "
                    "nearer the peak than the H = 512 reference does, so the reference P_flops undercharges them."]
        both = t[t.gemm == "cublas"].pivot_table(index=["H", "B", "p"], columns="mode", values="t_batch_ms")
        if {"staged", "resident"} <= set(both.columns):
            both["staged / resident"] = both["staged"] / both["resident"]
            out += ["", "### Staged (the seeds' path) against resident (data on the GPU, NCCL), ms per batch", "",
                    fmt(both.reset_index().round(3))]
    out += ["", "## The bottom-up predictor (perflab.analysis.predictor, from ceilings alone)", ""]
    if (RESULTS_ROOT / "figures" / f"{VALIDATION_FIGURE}.png").exists():
        out += [f"![predicted against measured, every committed folder](figures/{VALIDATION_FIGURE}.png)", ""]
    out += predictor_sections()
    out += step_section()
    out += launch_section()
    out += parallel_section()
    out += allreduce_section()
    out += pipelined_section()
    out += held_section()
    out += prediction_check_section()
    scaling = roofline.scaling_rows()
    if len(scaling):
        out += ["", "## Scaling over GPUs (60000 samples an epoch, b per GPU per step)", "",
                "Every peer in one harness (`perflab.measure.peers_multi`), the median of 7 epochs after 3. "
                "Efficiency T1 / (p Tp), each against its own one-GPU epoch. perflab's model parallel splits H over "
                "the GPUs and gives each the whole batch of p x b: the same samples per step as data parallel.", ""]
        out += scaling_story(scaling)
        first = RESULTS_ROOT / "nvidia-h200-x4" / "scaling_first_harness.jsonl"
        if first.exists():
            rows = pd.DataFrame([json.loads(line) for line in first.read_text().splitlines() if line.startswith("{")])
            p4 = rows[rows.p == 4].set_index("peer").epoch_ms
            out += ["", "Four H200 (`results/nvidia-h200-x4/scaling_first_harness.jsonl`, an earlier harness and commit): "
                        + ", ".join(f"{k} {v:.2f} ms" for k, v in p4.items()) + " at p=4. perflab's number there is "
                        "the median of 5 epochs with the first included, and on four GPUs the first two or three "
                        "epochs pay NCCL's set-up (1.9 s, then about 48 ms, then 3.8 ms: "
                        "`results/nvidia-h200-x4/warmup_p4.log`, eager launches). The steady-state 3.8 ms would be "
                        "an efficiency of 0.74 and beat the JAX and DDP figures above. The harness now gives every "
                        "peer 3 warm-up epochs and the median of 7 (`perflab.measure.peers_multi`); the four-GPU machine was "
                        "withdrawn before it could be rerun."]
    from perflab.analysis.projection import CALIBRATIONS
    for name, scaling in CALIBRATIONS.items():  # the eight-GPU predictions (JSON)
        prediction = RESULTS_ROOT / "predictions" / f"{name}.json"
        if not prediction.exists():
            continue
        made = json.loads(prediction.read_text())
        pred = pd.DataFrame(made["rows"])
        wide = pred.pivot_table(index=["parallel", "H", "b"], columns="p", values="epoch_ms")
        wide.columns = [f"p={p} (ms)" for p in wide.columns]
        wide["efficiency p=8"] = pred[pred.p == 8].set_index(["parallel", "H", "b"])["efficiency"]
        out += ["", f"## Prediction for eight H200, written before the run (`{prediction.name}`)", "",
                f"Source: `{prediction.relative_to(RESULTS_ROOT.parent)}` (method inside; `perflab predict`), "
                f"calibrated on `results/nvidia-h200/{scaling}` (per-step cost on several GPUs beyond compute and all-reduce: "
                f"{made['t_eager_us']:.0f} us). N = 60000, b samples per GPU per step.", "", fmt(wide.reset_index().round(3))]
    return with_contents(out)
