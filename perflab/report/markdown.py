"""`perflab report`: the report PDF of a run (report_pdf), and the Markdown of the committed results
(REPORT.md and its appendix CAMPAIGNS.md, README.md under the results root and the README's headline)."""
from __future__ import annotations

import re
from pathlib import Path

from perflab.analysis.perfmodel import gradient_buffer_bytes, is_net
from perflab.report import claims, predictions
from perflab.report.claims import span
from perflab.report.questions import wfbp_rows  # noqa: F401 (the committed WFBP table, read here and by the report)
from perflab.report.tables import fmt, source
from perflab.results import RESULTS_ROOT, read_table
from perflab.train.step import display_name


def build(out: str | None = None, folder: Path | None = None) -> Path:
    """The report PDF of a run folder (this machine's by default): `report_pdf.build`."""
    from perflab.report import pdf
    return pdf.build(out, folder)


# ------------------------------------------------------------------ what campaigns.json names
def found(name: str, key: str = "files") -> list[Path]:
    """The committed files a section reads (campaigns.json names them): each of its patterns globbed under the
    results root, sorted, one pattern after the other."""
    patterns = claims.section(name)[key]
    return [path for pattern in ([patterns] if isinstance(patterns, str) else patterns)
            for path in sorted(RESULTS_ROOT.glob(pattern))]


def said(name: str, claim: str, **values) -> str:
    """One claim of a section (campaigns.json), its numbers filled in."""
    return claims.section(name)["claims"][claim].format(**values)


def renamed(path: Path, rule: list) -> Path:
    """The file beside `path` that a campaigns.json rule names: [old, new] replaced in its name, then [suffix]."""
    out = path.with_name(path.name.replace(rule[0], rule[1]))
    return out.with_suffix(rule[2]) if len(rule) > 2 else out


# ------------------------------------------------------------------ tables from result files
def train_table(path: Path) -> str:
    import pandas as pd
    labels = claims.section("bench_train")["peers"]
    t = pd.read_csv(path)
    wide = t.pivot_table(index="peer", columns=["H", "B"], values="epoch_ms")
    wide.columns = [f"H={h} B={b} (ms)" for h, b in wide.columns]
    best_peer = {}
    for (h, b), group in t.groupby(["H", "B"]):
        tensor_cores = group.peer.str.contains(labels["tensor_cores"], case=False)  # the targets are FP32, on both sides
        peers = group[~group.peer.str.startswith((labels["mine"], labels["floor"])) & ~tensor_cores]
        fp32 = group.peer.str.startswith(labels["mine"]) & ~tensor_cores
        ours = group[fp32].epoch_ms.min()
        if len(peers):
            best = peers.loc[peers.epoch_ms.idxmin()]
            floor = group[group.peer.str.startswith(labels["floor"]) & ~tensor_cores].epoch_ms
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
                split = max(0.0, k[(display_name("fused_bwd_split_x3tf32"), H, B)] - k[(display_name("fused_bwd2"), H, B)])
                ratios += [k[(display_name("fwd_gemm1_cublas"), H, B)] / k[(display_name("fwd_gemm1_x3tf32"), H, B)],
                           k[(display_name("bwd_gemm3_cublas"), H, B)] / (k[(display_name("bwd_gemm3_x3tf32"), H, B)] + split)]
    except KeyError:  # a ceilings file from before the tensor-core step kernels
        return []
    return ["", f"As the trainer calls them, from the step kernels of {source(ceilings_path)} (each timed alone in "
                "replayed graphs; the images' K-major forms and splits made once per run, W1 split in every forward "
                "GEMM 1, the time dz1's split adds to the fused backward pass charged to backward GEMM 3): x3tf32 "
                f"{np.exp(np.log(ratios).mean()):.2f}x cuBLAS SGEMM, geometric mean over fwd1 and bwd3 at H "
                f"{'/'.join(map(str, hidden))}, B {'/'.join(map(str, batches))}, worst {min(ratios):.2f}x."]


def tensor_core_section(train_path: Path, gemm_path: Path) -> str:
    """The tensor-core GEMMs (wgmma: TF32; x3tf32: 3xTF32, FP32-accurate) in training and alone,
    beside the FP32 cuBLAS floor, JAX's 3xTF32, the TF32 peers (where the run had them) and cuBLAS TF32."""
    import json

    import pandas as pd
    part = claims.section("tensor_cores")
    peer = part["peers"]
    t = pd.read_csv(train_path)
    wide = t.pivot_table(index="peer", columns=["H", "B"], values="epoch_ms")
    lines = [f"### Tensor cores: TF32 (`--gemm wgmma`) and 3xTF32 (`--gemm x3tf32`) on Hopper's wgmma, {train_path.parent.name}\n",
             f"Epochs: {source(train_path)}, 60000 samples, median of 5 epochs.\n",
             fmt(wide.set_axis([f"H={h} B={b} (ms)" for h, b in wide.columns], axis=1).reset_index().round(3)), ""]
    for (h, b), g in t.groupby(["H", "B"]):
        ms = g.set_index("peer").epoch_ms
        ratio = lambda a, c: f"{ms[a] / ms[c]:.2f}" if a in ms and c in ms else "n/a"  # noqa: E731
        tf32 = ms[ms.index.str.endswith(peer["tf32"]) & ~ms.index.str.startswith(peer["mine"])]
        against_tf32 = (f", {ratio(peer['wgmma'], tf32.idxmin())} of the fastest TF32 peer's ({tf32.idxmin()})"
                        if len(tf32) else "")
        lines.append(f"- H={h} B={b}: x3tf32 epoch {ratio(peer['x3tf32'], peer['floor'])} of the FP32 "
                     f"cuBLAS 5-GEMM floor, {ratio(peer['x3tf32'], peer['jax'])} of JAX's 3xTF32 "
                     f"scan epoch; wgmma (TF32) {ratio(peer['wgmma'], peer['floor'])} of the floor"
                     f"{against_tf32}.")
    if gemm_path.exists():
        lines += tensor_core_gemm_lines(gemm_path)
    figure = RESULTS_ROOT / "figures" / f"tensor_core_roofline_{train_path.parent.name}.png"
    if figure.exists():  # written by `perflab report --markdown` (tensor_core_figures)
        lines += ["", f"![the tensor-core GEMMs under the FP32, TF32 and 3xTF32 roofs](figures/{figure.name})"]
    lines += trainer_form_ratios(train_path.parent / part["ceilings"])
    checks = sorted(train_path.parent.glob(part["checks"]))  # one: the run of these kernels
    if checks:
        runs = [json.loads(line) for line in checks[-1].read_text().splitlines() if line.startswith("{")]
        lines += ["", f"Weights after {runs[0]['num_epochs']} epochs (H={runs[0]['hidden_sizes'][0]}, B={runs[0]['batch_size']}, "
                      f"lr {runs[0]['learning_rate']}, {runs[0]['train_size']} {runs[0]['dataset']} samples) against the "
                      f"float64 reference, largest relative error (`perflab check`; "
                      f"`{checks[-1].relative_to(RESULTS_ROOT.parent)}`): "
                      + ", ".join(f"{r['gemm']} {r['max_rel_error']:.2g}" for r in runs) + "."]
    return "\n".join(lines)


def tensor_core_gemm_lines(gemm_path: Path) -> list[str]:
    """The tensor-core GEMMs alone at the training shapes (bench gemm): their rates, and each against
    cuBLAS SGEMM, JAX's 3xTF32 and cuBLAS TF32."""
    import numpy as np
    import pandas as pd
    g = pd.read_csv(gemm_path)
    big = g[g["shape"].str.startswith(("fwd1", "bwd3"))]
    rates = big.pivot_table(index="shape", columns="variant", values="tflops", sort=False)
    errors = big.pivot_table(index="shape", columns="variant", values="rel_error", sort=False)
    lines = ["", f"GEMMs alone: {source(gemm_path)}; TFLOP/s, operands split (x3tf32) or copied K-major (wgmma, "
                 f"where stored otherwise) in every call, as for any caller; the trainer keeps its images' forms.\n",
             fmt(rates.round(1).reset_index()), ""]
    for shape in rates.index:
        r, e = rates.loc[shape], errors.loc[shape]
        lines.append(f"- {shape}: x3tf32 {r['x3tf32'] / r['cublas']:.2f}x cuBLAS SGEMM, {r['x3tf32'] / r['jax-x3']:.2f}x "
                     f"JAX's 3xTF32, error {e['x3tf32']:.1e} against SGEMM's {e['cublas']:.1e}; wgmma "
                     f"{r['wgmma'] / r['pytorch-tf32']:.2f}x cuBLAS TF32 (pytorch-tf32).")
    ratios = {"x3tf32 / cuBLAS SGEMM": rates.x3tf32 / rates.cublas, "x3tf32 / JAX's 3xTF32": rates.x3tf32 / rates["jax-x3"],
              "wgmma / cuBLAS TF32": rates.wgmma / rates["pytorch-tf32"]}
    return lines + ["", f"Over these {len(rates)} shapes: " + "; ".join(
        f"{name} geometric mean {np.exp(np.log(v).mean()):.2f}, worst {v.min():.2f}" for name, v in ratios.items()) + "."]


def step_prediction(steps, train):
    """The epoch predicted as the sum of a step's kernels timed alone (bench_step) times N/B
    steps, against the measured epoch (bench_train), for perflab's fused step and the unfused
    one. Agreement says the step is the sum of its kernels (no gaps, no overlap to speak of)."""
    import pandas as pd
    rows = []
    for (H, B), group in steps.groupby(["H", "B"]):
        # each step's peer, and the kernels it does not run (those named so): the unfused step runs every kernel but
        # the fused ones (campaigns.json lists its earlier names)
        for peer, drop in claims.section("step")["steps"]:
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
    """`perflab bench step`'s kernels of one hidden layer and of deeper nets (campaigns.json: each pattern with its
    heading's suffix), each beside the bench train file of the same suffix."""
    import pandas as pd
    part = claims.section("step")
    out = []
    pairs = [(path, renamed(path, part["epochs"]), nets) for pattern, nets in part["files"].items()
             for path in sorted(RESULTS_ROOT.glob(pattern))]
    for path, train, nets in pairs:
        if not train.exists():
            continue
        steps = pd.read_csv(path)
        table = step_prediction(steps, pd.read_csv(train))
        if len(table):
            out += ["", f"## The epoch as the sum of its kernels, {path.parent.name}{nets}", "",
                    f"Sources: {source(path)}; {source(train)}.", "", fmt(table.round(4)), "",
                    "Each kernel of a step timed alone in a replayed CUDA graph (`perflab bench step`), summed, "
                    "times N/B steps an epoch, against the measured epoch (`perflab bench train`). "
                    + said("step", "sum", error=100 * table.error.abs().median())]
            for (H, B), group in steps.groupby(["H", "B"], sort=False):
                out += ["", f"{H} x {B}:", "", fmt(group[["kernel", "ms", "gbps"]].round({"ms": 4}).astype({"gbps": int}))]
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
    for path in found("launch"):
        head = pd.read_csv(path, nrows=0).columns
        if "launch" in head and "epoch_seconds" in head:
            table = launch_table(pd.read_csv(path))
            if len(table):
                out[path] = table
    return out


def launch_points() -> dict:
    """{machine folder: every point measured both ways, from all its sweeps (a `source` column)}."""
    import pandas as pd
    by_machine = {}
    for path, table in launch_tables().items():
        by_machine.setdefault(path.parent.name, []).append(table.assign(source=path.name))
    return {machine: pd.concat(tables, ignore_index=True) for machine, tables in by_machine.items()}


def graphs_figures() -> list[Path]:
    """figures/graphs_bought_<machine>.png: every point measured both ways on that machine (REPORT draws them)."""
    from perflab.report import plots
    return [plots.save(plots.graphs_bought(t, f"What CUDA graphs buy, {machine}"), f"graphs_bought_{machine}",
                       f"Time per batch launched kernel by kernel over the same batch replayed as one CUDA graph, every "
                       f"point measured both ways (perflab sweep --launch graph eager) on {machine}: a dot per point, "
                       "a bar at the median. Sources: the sweeps results/REPORT.md lists.", folder=RESULTS_ROOT / "figures")
            for machine, t in launch_points().items()]


def half_floor_section() -> list[str]:
    """What half precision would buy a one-hidden-layer step's GEMMs: cuBLAS at FP32, TF32, BF16 and FP16 on the
    training shapes (`perflab bench gemm` with the half peers), summed per batch (issue 53's floor)."""
    import numpy as np
    import pandas as pd
    out = []
    for path in found("half_floor"):
        t = pd.read_csv(path)
        t["H"] = t["shape"].str.extract(r"H=(\d+)")[0].astype(int)
        t["B"] = t["shape"].str.extract(r"B=(\d+)")[0].astype(int)
        names = {"cublas": "FP32 (ms)", "pytorch-tf32": "TF32 (ms)", "pytorch-bf16": "BF16 (ms)", "pytorch-fp16": "FP16 (ms)"}
        step = t[t.variant.isin(list(names))].pivot_table(index=["H", "B"], columns="variant", values="ms", aggfunc="sum")
        step = step[list(names)].rename(columns=names)
        step["FP32 / BF16"] = step["FP32 (ms)"] / step["BF16 (ms)"]
        half = t[t.variant.isin(["pytorch-bf16", "pytorch-fp16"])]
        big = step[step.index.get_level_values("B") >= 3200]
        out += ["", f"## The half-precision GEMM floor, {path.parent.name}", "", f"Source: {source(path)}. The five GEMMs of "
                "a one-hidden-layer step (forward 1 and 2, backward 1-3: `perflab bench gemm`'s training shapes), each "
                "cuBLAS's, in FP32 (perflab's cuBLAS call), TF32 and, with operands and product in half precision and "
                "FP32 accumulation, BF16 and FP16 (PyTorch's matmul in a replayed CUDA graph), summed per batch: the "
                "floor of issue 53's half-precision step. Every half product matched the float64 one to the precision "
                f"its operands keep (relative error BF16 {half[half.variant == 'pytorch-bf16'].rel_error.max():.1e}, FP16 "
                f"{half[half.variant == 'pytorch-fp16'].rel_error.max():.1e}).", "",
                fmt(step.reset_index().round(4)), "",
                f"At B of 3200 and more, BF16's GEMMs take {np.exp(np.log(1 / big['FP32 / BF16']).mean()):.2f} of FP32's "
                f"time (geometric mean; {big['FP32 / BF16'].min():.1f}x to {big['FP32 / BF16'].max():.1f}x faster). "
                + said("half_floor", "step")]
    return out


def half_roof_section() -> list[str]:
    """The half-precision GEMM rates `perflab ceilings` measured on one GPU beside FP32's and TF32's: the roof
    above P_flops."""
    out = []
    for path in found("half_roof"):
        t = read_table(path, ("ceiling", "impl", "shape", "value"), "a ceilings file")
        gemm = t[(t.ceiling == "gemm_flops") & t.impl.isin(["cublas", "wgmma", "cublas-bf16", "cublas-fp16"])]
        wide = (gemm.pivot_table(index="shape", columns="impl", values="value") / 1e12).round(1)
        wide = wide[[c for c in ("cublas", "wgmma", "cublas-bf16", "cublas-fp16") if c in wide]]
        wide.columns = [{"cublas": "FP32 cuBLAS", "wgmma": "TF32 (perflab wgmma)", "cublas-bf16": "BF16 cuBLAS",
                         "cublas-fp16": "FP16 cuBLAS"}[c] + " (TFLOP/s)" for c in wide.columns]
        out += ["", f"## The half-precision GEMM roof, {path.parent.parent.name}", "",
                f"Source: {source(path)}. `perflab ceilings` on one GPU: each GEMM rate at the training shapes (M x K x N), "
                "the half-precision ones as the step calls them (operands and product in half, FP32 accumulation; "
                "cuBLAS FP32 timed launch by launch, the others in replayed graphs). Their fastest, P_half = "
                f"{gemm[gemm.impl.isin(['cublas-bf16', 'cublas-fp16'])].value.max() / 1e12:.0f} TFLOP/s, is the roof the "
                "ceilings roofline draws above P_flops.", "", fmt(wide.reset_index())]
    return out


def half_accuracy_section() -> list[str]:
    """What half precision costs in accuracy: MNIST test precision after the runs in each machine folder's half/ (perflab
    train --dtype, the emulated mixed-precision step) beside FP32's."""
    import json

    import pandas as pd
    part = claims.section("half_accuracy")
    out = []
    runs = sorted((p, kind) for pattern, kind in part["files"].items() for p in RESULTS_ROOT.glob(pattern))
    for path, kind in runs:  # kind: the step they ran, emulated or on the tensor cores
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        meta = rows[0]["machine"]
        t = pd.DataFrame([{"net": "784-" + "-".join(map(str, r["hidden_sizes"])) + "-10", "dtype": r["dtype"],
                           "test precision": r["test_precision"], "final loss": r["final_loss"]} for r in rows])
        fp32 = t[t.dtype == "float32"].set_index("net")["test precision"]
        t["points from FP32"] = [100 * (p - fp32[n]) for n, p in zip(t.net, t["test precision"])]
        first = rows[0]
        half = t[t.dtype != "float32"]
        t["test precision"] = t["test precision"].map("{:.4f}".format)  # the points that differ are in the 4th digit
        slower = (min(r['epoch_seconds'] for r in rows if r['dtype'] != 'float32')
                  / max(r['epoch_seconds'] for r in rows if r['dtype'] == 'float32'))
        out += ["", f"## The half-precision accuracy, {kind}, {path.parent.parent.name}", "",
                f"Source: {source(path, meta)}. `perflab train --dtype`, MNIST, {first['num_epochs']} epochs of {first['train_size']} "
                f"samples, B = {first['batch_size']}, learning rate {first['learning_rate']}, reg {first['reg']}, "
                f"shuffled; bfloat16 and float16 on {part['steps'][kind]}, FP32 on the fused trainer.", "", fmt(t.round(4)), "",
                f"Every half-precision run lands within {half['points from FP32'].abs().max():.2f} points of FP32's test "
                "precision (issue 53's target: 0.3). " + said("half_accuracy", kind, slower=slower)]
    return out


def half_step_section() -> list[str]:
    """perflab's half-precision epoch beside the half-precision peers and the cuBLAS half GEMM floor of the
    layers (bench train), and issue 53's two epoch targets (issue 68's floor targets, BF16's and FP16's), from the
    file."""
    import pandas as pd
    part = claims.section("half_step")
    peer = part["peers"]
    out = []
    for path in found("half_step"):
        t = pd.read_csv(path)
        wide = t.pivot_table(index="peer", columns=["H", "B"], values="epoch_ms")
        wide.columns = [f"784-{h}-10, B={b} (ms)" for h, b in wide.columns]
        lines = []
        epochs = t.pivot_table(index=["H", "B"], columns="peer", values="epoch_ms")
        unfused = epochs[peer["unfused"]] / epochs[peer["mine"]] if peer["unfused"] in epochs else None  # (a run without it)
        with_unfused, passes = ("", "") if unfused is None else (
            ", and with the output layer's backward pass unfused",
            said("half_step", "passes", fewest=unfused.min(), most=unfused.max()))
        floor = epochs[peer["mine"]] / epochs[peer["floor"]]
        fp16_floor = epochs[peer["fp16"]] / epochs[peer["fp16_floor"]]
        for (h, b), g in t.groupby(["H", "B"], sort=False):
            ms = g.set_index("peer").epoch_ms
            best = ms[peer["half_peers"]].idxmin()
            mine = ms[peer["mine"]]
            lines.append(said("half_step", "row", h=h, b=b, mine=mine, of_peer=mine / ms[best], best=best, best_ms=ms[best],
                              of_floor=mine / ms[peer["floor"]], faster=ms[peer["fp32"]] / mine, fp16=ms[peer["fp16"]],
                              fp16_of_floor=ms[peer["fp16"]] / ms[peer["fp16_floor"]]))
        met = "floor_missed" if floor.max() > part["floor_target"] else "floor_met"
        fp16_met = "fp16_floor_missed" if fp16_floor.max() > part["fp16_floor_target"] else "fp16_floor_met"
        out += ["", f"## The half-precision step against its peers, {path.parent.parent.name}", "",
                f"Source: {source(path)}. `perflab bench train`, 60000 samples, the median epoch, each peer in a process "
                "of its own: perflab's fused step in BF16 and FP16 (`--dtype`; cuBLAS's half GEMMs, its own fused "
                f"kernels reading and writing half){with_unfused}; JAX's "
                "whole-epoch scan in bfloat16 as a JAX user writes it (FP32 masters cast each step, images and "
                "activations in bfloat16, logits and loss in FP32); PyTorch's graphed step under bfloat16 autocast; "
                "the cuBLAS GEMM floor of the layers in BF16, FP16 and FP32 (each layer's forward GEMM and weight "
                "gradient, past the first its input gradient, graphed, nothing else).", "",
                fmt(wide.reset_index().round(3)), "", *lines, "",
                said("half_step", met, worst=floor.max()) + "; " + said("half_step", fp16_met, worst=fp16_floor.max())
                + ". " + passes]
    return out


def half_gemm_section() -> list[str]:
    """perflab's own BF16/FP16 GEMM on wgmma beside cuBLAS's at the half step's GEMMs (bench gemm --dtype), and the
    epoch on it beside the epoch on cuBLAS's (bench train), from the files; issue 53's 0.9 target."""
    import pandas as pd

    from perflab.measure.bench import half_gemm_ratio
    part = claims.section("half_gemm")
    out = []
    for folder in sorted({p.parent for p in found("half_gemm")}):
        lines, tables, verdict = [], [], ""
        for kind in ("bfloat16", "float16"):
            path = folder / part["gemms"].format(kind=kind)
            if not path.exists():
                continue
            t = pd.read_csv(path)
            lines.append(f"- {half_gemm_ratio(t.to_dict('records'))} (source: {source(path)}).")
            if kind == "bfloat16":
                verdict = half_gemm_verdict(t)
                wide = t.pivot_table(index="shape", columns="variant", values="tflops", sort=False).round(1)
                wide["wgmma / cublas"] = (wide["wgmma"] / wide["cublas"]).round(2)
                tables = ["", fmt(wide.reset_index().rename(columns={"cublas": "cuBLAS (TFLOP/s)",
                                                                     "wgmma": "wgmma (TFLOP/s)"}))]
        lines += half_gemm_epochs(folder / part["epochs"])
        out += ["", f"## The half-precision GEMM of perflab's own against cuBLAS's, {folder.parent.name}", "",
                "`perflab bench gemm --dtype bfloat16|float16`: perflab's wgmma GEMM (BF16 or FP16 operands, FP32 "
                "accumulation, each operand read in place K-major or MN-major, tuned per shape) beside cuBLAS's "
                "(cublasGemmEx, as the half step calls it) at the half step's GEMMs in its layouts: forward W X "
                "(images N-contiguous) and dW1 = dz1 X^T, and a second hidden layer's W a, dW = dz a^T and "
                "W^T dz. Graph replays, inputs rotated past L2, the median. The target is 0.9 of cuBLAS (geometric "
                "mean).", *tables, "", *lines, "",
                verdict]
    return out


def half_gemm_verdict(t) -> str:
    """Whether the BF16 wgmma GEMM met its target (the geometric mean of its share of cuBLAS's speed), and
    where it stands shape by shape: the forward and input-gradient GEMMs, the weight gradients, dW1."""
    import numpy as np

    from perflab.measure.gemm_inputs import weight_gradient
    ratio = t[t.variant == "wgmma"].set_index("shape").pct_cublas / 100
    grads = ratio[[weight_gradient(name) for name in ratio.index]]
    first = grads[grads.index.str.startswith("bwd3")]
    rest = ratio.drop(grads.index)
    met = "Met" if float(np.exp(np.log(ratio).mean())) >= claims.section("half_gemm")["target"] else "Missed"
    return said("half_gemm", "verdict", met=met, rest_low=rest.min(), rest_high=rest.max(), grads_low=grads.min(),
                grads_high=grads.max(), first_low=first.min(), first_high=first.max())


def half_gemm_epochs(epochs: Path) -> list[str]:
    """The half step's epoch on perflab's wgmma GEMM over its epoch on cuBLAS's (bench train), where measured."""
    import pandas as pd
    if not epochs.exists():
        return []
    peer = claims.section("half_gemm")["peers"]
    e = pd.read_csv(epochs).pivot_table(index=["H", "B"], columns="peer", values="epoch_ms")
    slower = pd.concat([e[peer["wgmma"].format(kind=k)] / e[peer["cublas"].format(kind=k)] for k in peer["kinds"]])
    faster = int((slower < 1).sum())
    return [said("half_gemm", "epochs", fewest=slower.min(), most=slower.max(), source=source(epochs), faster=faster,
                 points=len(slower)) + said("half_gemm", "all_faster" if faster == len(slower) else "some_slower")]


def half_exchange_section() -> list[str]:
    """The gradients all-reduced in half precision or in FP32 (--comm auto's trial epochs, several GPUs)."""
    import json

    import pandas as pd
    out = []
    for path in found("half_exchange"):
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        meta, first = rows[0]["machine"], rows[0]
        t = pd.DataFrame([{"dtype": r["dtype"], "net": "784-" + "-".join(map(str, r["hidden_sizes"])) + "-10",
                           "b a GPU": r["batch_size"] // r["ranks"],
                           **{f"{k} (ms)": (1e3 * v if isinstance(v, float) else "refused")
                              for k, v in r["exchange_trial_s"].items()},
                           "kept": "overlap" if r["overlap"] else r["comm"]} for r in rows])
        gain = t["nccl-half (ms)"] / t["nccl (ms)"]
        out += ["", f"## The half-precision gradient exchange, {path.parent.parent.name}", "",
                f"Source: {source(path, meta)}. `mpirun -n {first['ranks']} perflab train --dtype bfloat16|float16 --comm "
                f"auto`, synthetic data, {first['train_size']} samples: the first epoch with each exchange, as --comm auto "
                "times it (the slowest rank's), in ms: NCCL's all-reduce of the FP32 gradient after the backward pass, "
                "with --overlap (layer by layer), p2p (the peers' FP32 gradients read over NVLink, summed and applied "
                "in one kernel), and nccl-half (the gradient rounded to the run's half precision, summed by NCCL in "
                "it, widened back: half the bytes). p2p applies the update itself and does not unscale float16's "
                "loss scale, so it is refused there.", "", fmt(t.round(3)), "",
                said("half_exchange", "gain", fewest=gain.min(), most=gain.max())]
    return out


def precision_section() -> list[str]:
    """What each precision does to the weights against float64, and FP16's gradient without a loss scale
    (perflab.workbook.precision)."""
    import json

    import pandas as pd
    out = []
    for path in found("precision"):
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        meta, first = rows[0]["machine"], rows[0]
        weights = pd.DataFrame([{"precision": r["precision"], "GEMMs": r["gemm"],
                                 **{f"{n} error": v for n, v in r["errors"].items()}, "worst": r["max_rel_error"]}
                                for r in rows if r["table"] == "weights against float64"])
        grads = pd.DataFrame([{"loss scale": f"{r['loss_scale']:g}", "dz1 flushed to zero": r["dz1_flushed_to_zero"],
                               **{f"{n} error": v for n, v in r["errors"].items()}}
                              for r in rows if r["table"] == "float16 gradient"])
        fmt_e = lambda t: t.map(lambda v: f"{v:.2e}" if isinstance(v, float) else v)  # noqa: E731
        unscaled = grads[grads["loss scale"] == "1"].iloc[0]
        scaled = grads[grads["loss scale"] != "1"].iloc[0]
        out += ["", f"## The half-precision weights against float64, {path.parent.parent.name}", "",
                f"Source: {source(path, meta)}. `python -m perflab.workbook.precision`: 784-"
                f"{'-'.join(map(str, first['hidden_sizes']))}-10 on MNIST, {first['num_epochs']} epochs of "
                f"{first['train_size']} samples in batches of {first['batch_size']} (learning rate {first['learning_rate']}, "
                "shuffled), from one initialisation, on one GPU; each parameter's relative error (Frobenius) against "
                "the float64 NumPy reference's after the same batches.", "", fmt(fmt_e(weights)), "",
                "One batch's gradient at the weights of 15 FP32 epochs (where gradients are small), by the fused "
                "FP16 step without a loss scale and with float16's starting scale, 2^16, against the FP32 step's: "
                "the share of the first hidden layer's gradient (held in FP16) flushed to zero where FP32's is not, "
                "and each parameter's relative error.", "", fmt(fmt_e(grads)), "",
                said("precision", "flushed", unscaled=100 * unscaled['dz1 flushed to zero'],
                     scaled=100 * scaled['dz1 flushed to zero'], unscaled_w1=unscaled['W1 error'],
                     scaled_w1=scaled['W1 error'])]
    return out


def usc_figures() -> list[Path]:
    """figures/usc_<machine>.png: the USC seed's experiment as committed (REPORT draws them)."""
    import pandas as pd

    from perflab.report import plots
    from perflab.workbook import usc
    return [plots.save(plots.usc(usc.with_speedup(pd.read_csv(path)), f"Network1 against Network2, {path.parent.name}"),
                       f"usc_{path.parent.name}",
                       f"Time per epoch, GFLOP/s (the seeds' FLOP count) and speedup over the serial run of Network1 "
                       f"(784-1024-10, solid) and Network2 (784-1024-1024-10, dashed) against CPU cores on "
                       f"{path.parent.name}: over examples (MPI ranks of one BLAS thread) and inside the matrix products "
                       f"(one rank, k BLAS threads); one GPU as a level. Source: results/{path.parent.name}/{path.name}.",
                       folder=RESULTS_ROOT / "figures")
            for path in found("usc")]


def usc_section() -> list[str]:
    """The USC seed's experiment from the committed runs (perflab.workbook.usc)."""
    import pandas as pd

    from perflab.workbook import usc
    out = []
    for path in found("usc"):
        t = usc.with_speedup(pd.read_csv(path))
        cpu = t[t.way.isin(["examples", "matrices"])]
        best = cpu.loc[cpu.groupby(["net", "way"]).speedup.idxmax()]
        gpu = t[t.way == "gpu"]
        out += ["", f"## The USC experiment: Network1 against Network2, {path.parent.name}", "",
                f"Source: {source(path)}. Each row one `perflab train` process (perflab.workbook.usc), float32, "
                f"B = {t.B.iloc[0]}, {t.N.iloc[0]} synthetic samples an epoch, the median of {t.epochs.iloc[0]} epochs: "
                "serial (one rank, one BLAS thread), over examples (MPI ranks of one BLAS thread, the batch split "
                "over them), inside the matrix products (one rank, k BLAS threads), and one GPU.", "",
                f"![the USC experiment](figures/usc_{path.parent.name}.png)", "",
                fmt(t[["net", "way", "cores", "epoch_seconds", "gflops", "speedup"]].round(3)), "",
                "Best CPU speedups over serial: " + "; ".join(
                    f"{r.net} {r.way} {r.speedup:.2f}x on {r.cores} cores" for r in best.itertuples()) + ". "
                + ("One GPU: " + "; ".join(f"{r.net} {r.speedup:.0f}x ({r.gflops / 1e3:.1f} TFLOP/s)"
                                            for r in gpu.itertuples()) + ". " if len(gpu) else "")
                + said("usc", "against_slides")]
    return out


def launch_section() -> list[str]:
    """What CUDA graphs buy, per machine: every point of the sweeps that measured each point both ways
    (`perflab sweep --launch graph eager`), summarised per mode and GEMM."""
    points = launch_points()
    if not points:
        return []
    out = ["", "## What CUDA graphs buy", "",
           "Each point's step replayed as one CUDA graph, and its kernels launched one by one as the seeds' code does "
           "(`perflab sweep --launch graph eager`): eager over graph, time per batch, per mode and GEMM over every "
           "point measured both ways. Kernel by kernel, the host pays every launch (and the tensor-core GEMMs' "
           "operand set-up) each step, so a step whose kernels are short waits on the host. " + said("launch", "drift")]
    for machine, t in points.items():
        summary = t.groupby(["mode", "gemm"])["eager / graph"].agg(points="size", median="median", lowest="min",
                                                                   highest="max").reset_index()
        figure = RESULTS_ROOT / "figures" / f"graphs_bought_{machine}.png"
        out += ["", f"### {machine}", ""]
        out += [f"![eager over graph per point](figures/{figure.name})", ""] if figure.exists() else []
        out += [fmt(summary.round(2)), "", "Sources: " + ", ".join(source(RESULTS_ROOT / machine / name)
                                                                   for name in sorted(set(t.source))) + "."]
    return out


def deep_model_section() -> list[str]:
    """Data against model parallel for deeper nets on GPUs (FusedModelParallel at any depth): each net's
    epoch both ways from the same run's `perflab train --json` lines."""
    import json

    import pandas as pd
    out = []
    for path in found("deep_model"):
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        meta, first = rows[0]["machine"], rows[0]
        t = pd.DataFrame([{"net": "784-" + "-".join(map(str, r["hidden_sizes"])) + "-10", "parallel": r["parallel"],
                           "epoch_ms": 1e3 * r["epoch_seconds"]} for r in rows])
        wide = t.pivot_table(index="net", columns="parallel", values="epoch_ms", sort=False)
        wide["model / data"] = wide["model"] / wide["data"]
        out += ["", f"## Data against model parallel, deeper nets, {path.parent.name}", "",
                f"Source: {source(path, meta)}. `mpirun -n {first['ranks']} perflab train --parallel model|data --comm "
                f"nccl`, synthetic data, B = {first['batch_size']} ({first['batch_size'] // first['ranks']} a GPU in data "
                f"parallel), {first['train_size']} samples, the median epoch (ms). Model parallel splits the hidden layers "
                "by rows and by columns in turn (each rank a slice of every layer; a column-split layer's output and a "
                "row-split layer's input gradient all-reduced, H x B values each), the whole step one CUDA graph with "
                "NCCL inside; data parallel all-reduces the gradient once a step.", "", fmt(wide.reset_index().round(3)),
                "", said("deep_model", "exchange", fewest=wide['model / data'].min(), most=wide['model / data'].max())
                + " The checks at depths 1-4 on these GPUs: "
                f"`{renamed(path, claims.section('deep_model')['checks']).relative_to(RESULTS_ROOT.parent)}`."]
    return out


def parallel_section() -> list[str]:
    """Data against model parallel from each committed parallel.csv (`perflab sweep --name parallel
    --parallel data model`): epoch seconds, the all-reduce's median per batch and its bytes."""
    import json

    import pandas as pd
    out = []
    for path in found("parallel"):  # the parallel sweeps, then the model-parallel blind checks
        t, data_source = pd.read_csv(path), ""
        if "data" not in set(t.parallel):  # a model-only sweep: its data-parallel side is the sweep named without _model
            sibling = path.with_name(path.name.replace("_model", ""))
            if not sibling.exists():
                continue
            data = pd.read_csv(sibling)
            t, data_source = pd.concat([t, data[data["mode"] == "resident"]], ignore_index=True), f"; data parallel: {source(sibling)}"
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
                f"Source: {source(path)}{data_source}.", "", fmt(wide.reset_index().round(4)), "",
                f"Model parallel was faster at {wins} of the {len(several)} points with p > 1. "
                + said("parallel", "exchange", fewest=ratio.min(), most=ratio.max())]
        generic = "trainer" not in t or not (t.trainer[t.parallel == "model"] == "FusedModelParallel").all()
        if "gpu" in json.loads(path.with_suffix(".json").read_text()) and generic:
            out += ["", said("parallel", "generic")]
        missing = wide[wide[["epoch_seconds data", "epoch_seconds model"]].isna().any(axis=1)].reset_index()
        if len(missing):
            out += ["", "Not measured (the sweep's time limit ended the run first): "
                    + ", ".join(f"H={r.H} b={r.b} p={r.p}" for r in missing.itertuples()) + "."]
    return out


def allreduce_section() -> list[str]:
    """perflab's all-reduce paths beside torch.distributed (`perflab bench allreduce`)."""
    import pandas as pd
    impl = claims.section("allreduce")["impls"]
    out = []
    for path in found("allreduce"):
        t = pd.read_csv(path)
        wide = t.pivot_table(index="size_bytes", columns="impl", values="ms")
        wide["perflab nccl / torch"] = wide[impl["nccl"]] / wide[impl["torch"]]
        out += ["", f"## The gradient all-reduce, perflab beside torch.distributed, p={t.ranks.iloc[0]}, {path.parent.name}",
                "", f"Source: {source(path)}.", "", fmt(wide.reset_index().round(4)), "",
                "Milliseconds per float32 all-reduce (CUDA events around 10 back-to-back calls, median of 10; the staged "
                "path host-timed). The gradient buffers (with the loss slot) are "
                + ", ".join(f"{gradient_buffer_bytes(H)} bytes at H={H}" for H in (512, 2048))
                + ". The staged path (device -> pageable host, Open MPI, host -> device: the seeds' path) takes "
                f"{(wide[impl['staged']] / wide[impl['nccl']]).median():.0f} times NCCL's time (median over "
                "the sizes)."]
        out += host_allreduce_text(wide)
    return out


def wfbp_section() -> list[str]:
    """The gradient exchanged layer by layer under backward (WFBP) against one exchange after it."""
    out = []
    for path in found("wfbp"):
        import json
        t = wfbp_rows(path)
        meta = json.loads(path.read_text().splitlines()[0])["machine"]
        pays = t[t["WFBP / after"] < 0.99]
        out += ["", f"## The gradient exchange layer by layer (WFBP), {path.parent.parent.name}", "",
                f"Source: {source(path, meta)}, each row one `perflab train --comm auto` on {meta['gpu_count']} "
                "GPUs, 60000 samples: each exchange's epoch as auto timed it before training (median of 3 after one), "
                "then the one it kept. With --overlap past one hidden layer, each layer's gradient is all-reduced on a "
                "side stream as soon as backward has made it, under the GEMMs of the layers below; dW1's rows go in "
                "chunks last. Checked against the float64 reference at depths 2-4 "
                f"(`{claims.section('wfbp')['checks']}` beside it).", "",
                fmt(t.round(3)), "",
                f"WFBP beat the exchange after backward by more than 1% at {len(pays)} of {len(t)} points"
                + (" (" + ", ".join(f"{net} b={b}" for net, b in zip(pays.net, pays["b a GPU"])) + ")" if len(pays) else "")
                + f"; over all, WFBP / after spans {t['WFBP / after'].min():.3f}-{t['WFBP / after'].max():.3f}. "
                + said("wfbp", "where_it_pays")]
        out += wfbp_timelines(path.parent)
    return out


def wfbp_timelines(folder: Path) -> list[str]:
    """The timelines beside a WFBP run (`perflab timeline --modes resident overlap`): where the exchange ran."""
    import pandas as pd

    from perflab.measure import timeline
    out = []
    for path in sorted(folder.glob(claims.section("wfbp")["timelines"])):
        t = pd.read_csv(path)
        busy = timeline.first_rank_busy(t).pivot_table(index="mode", columns="lane", values="busy_ms")
        epoch = t.groupby("mode").epoch_seconds.first() * 1e3
        net = path.stem.split("_")[1].removeprefix("H")
        out += ["", f"Where the exchange ran, 784-{net}-10 ({path.name}, rank 0, the second of two epochs, each step "
                "launched kernel by kernel as recording needs):", "",
                f"![timeline]({path.parent.relative_to(RESULTS_ROOT)}/figures/{path.stem}.png)", "",
                fmt(pd.DataFrame({"epoch (ms)": epoch, "compute busy (ms)": busy["compute"],
                                  "NCCL busy (ms)": busy[timeline.DEVICE_EXCHANGE]}).reset_index().round(3)), "",
                "After backward, each step's all-reduce is one short call once the gradient is whole. Under backward, "
                "each layer's all-reduce is enqueued as soon as that layer is done and runs until the peer reaches "
                "the same call, its kernels holding SMs all the while: the NCCL lane is busy "
                f"{busy.loc['overlap', timeline.DEVICE_EXCHANGE] / busy.loc['resident', timeline.DEVICE_EXCHANGE]:.0f}x "
                "as long, and the compute beside it (forward, backward, the update) is busy "
                f"{busy.loc['overlap', 'compute'] / busy.loc['resident', 'compute']:.2f}x as long."]
    return out


def host_allreduce_text(wide) -> list[str]:
    """Which host all-reduce the staged paths should use, from the host rows of bench allreduce."""
    impl = claims.section("allreduce")["impls"]
    allreduce, split = impl["allreduce"], impl["split"]
    if allreduce not in wide or split not in wide:
        return []
    size = gradient_buffer_bytes(2048)
    row = wide.loc[size] if size in wide.index else wide.iloc[-1]
    pinned = impl["pinned"]
    copy, add = impl["copy"], impl["add"]
    return ["", f"The host all-reduce alone (what the staged paths hand MPI): MPI_Allreduce takes {row[allreduce]:.2f} ms "
            f"for the H=2048 gradient ({size / row[allreduce] / 1e6:.2f} GB/s of buffer), reduce-scatter + all-gather "
            f"{row[split]:.2f} ms: Open MPI's own all-reduce is the faster, at every size measured "
            f"({'yes' if (wide[allreduce] <= wide[split]).all() else 'no'}), so perflab keeps MPI_Allreduce. With "
            f"pinned copies in series the whole staged exchange takes {row[pinned]:.2f} ms against "
            f"{row[impl['staged']]:.2f} ms through pageable memory."
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
    part = claims.section("pipelined")
    out, timelines_shown = [], set()  # a machine folder's timelines once, after its first run
    for path in found("pipelined"):
        t = pd.read_csv(path)
        name = path.stem.removeprefix(part["check_prefix"])  # the blind check's name, its prediction's file's
        made = json.loads((RESULTS_ROOT / part["made"].format(name=name)).read_text())
        pred = pd.DataFrame(made["rows"])[["H", "B", "p", "mode", "epoch_ms"]].rename(columns={"epoch_ms": "predicted_ms"})
        both = t.assign(measured_ms=1e3 * t.epoch_seconds).merge(pred, on=["H", "B", "p", "mode"])
        both["error"] = (both.predicted_ms / both.measured_ms - 1).map(lambda e: f"{e:+.0%}")
        both["b"] = both.B // both.p
        wide = both.pivot_table(index=["H", "b", "p"], columns="mode", values="measured_ms")
        lines = [f"H={H} b={b} p={p}: pipelined {row.pipelined / row.resident:.2f}x the resident epoch, "
                 f"{row.staged / row.pipelined:.2f}x faster than in series" for (H, b, p), row in wide.iterrows()
                 if {"resident", "staged"} <= set(wide.columns)]  # a check of the pipelined mode alone compares nothing
        shapes = f"H {', '.join(map(str, sorted(set(both.H))))}; b {', '.join(map(str, sorted(set(both.b))))}"
        copy = both[both["mode"] == "pipelined"].iloc[0]
        roofs = roofline.folder_roofs(path.parent, "gpu")
        p_pci = copy["bytes_images"] / copy["t_copying images host -> device"]
        out += ["", f"## The seeds' path pipelined, {path.parent.name}, {name}", "",
                f"Source: {source(path)}, predicted before the run in `{Path('results') / part['made'].format(name=name)}` "
                f"from `{made['ceilings']}`. Epochs of {int(both.N.iloc[0])} samples; {shapes} samples a GPU per "
                "step; median of the unprofiled epochs.", "",
                fmt(both[["H", "B", "p", "mode", "measured_ms", "predicted_ms", "error"]].round(2)), "",
                ("; ".join(lines) + ". " if lines else "") + f"The pipelined images copy, profiled alone: {p_pci / 1e9:.1f} GB/s, "
                f"{p_pci / roofs['P_pci']:.2f} of the fastest pinned host -> device copy the ceilings measured."]
        bounds = roofline.overlap_bounds(t, roofs)
        if len(bounds):
            out += ["", "Where the exchanged points fall: the seeds' serial roofline AI / (AI/P_flops + 1/BW) against "
                    "the standard min(P_flops, AI BW), BW = 2 / (1/P_pci + 1/P_mpi) = "
                    f"{bounds.BW.iloc[0] / 1e9:.3g} GB/s from this machine's ceilings.", "",
                    fmt(bounds[["H", "p", "mode", "ai", "achieved", "of serial", "of standard", "meets"]].round(3))]
        if path.parent not in timelines_shown:
            timelines_shown.add(path.parent)
            out += lanes_busy(path.parent)
    return out


def lanes_busy(folder: Path) -> list[str]:
    """Each timeline of a machine folder (`perflab timeline`): how long each lane was busy on rank 0."""
    import pandas as pd

    from perflab.measure import timeline
    out = []
    for tl in sorted(folder.glob(claims.section("pipelined")["timelines"])):
        recorded = pd.read_csv(tl)
        busy = timeline.first_rank_busy(recorded)
        wide = busy.pivot_table(index="lane", columns="mode", values="busy_ms")
        spans = busy.groupby("mode").span_ms.first()
        out += ["", f"Lanes busy over the second epoch of `{tl.name}` ({timeline_dtype(recorded)}; rank 0; ms, "
                "ranges merged), beside its span: "
                + ", ".join(f"{m} {v:.2f} ms" for m, v in spans.items()) + f". Source: {source(tl)}.", "",
                fmt(wide.reset_index().round(3))]
    return out


def timeline_dtype(recorded) -> str:
    """A timeline's dtype: its column, or float64 for one recorded before the column, when perflab
    timeline took train's reference dtype (its data sizes twice a float32 sweep point's)."""
    if "dtype" in recorded:
        return str(recorded["dtype"].iloc[0])
    return "float64, twice the sweep's data sizes"


def held_section() -> list[str]:
    """best against cuBLAS held for seconds under load (`perflab bench hold`), the gap split into
    the clock (which the power cap sets from a kernel's energy a cycle) and the work per clock."""
    import pandas as pd
    out = []
    for path in found("held"):
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


def markdown() -> str:
    """The result tables the README shows, each generated from its committed file, in the order campaigns.json's
    readme lists them."""
    parts = []
    for name in claims.page("readme"):
        parts += README_SECTIONS[name]()
    return "\n\n".join(parts) + "\n"


def train_parts() -> list[str]:
    return [f"### Training epoch, perflab beside its peers\n\nSource: {source(path)}. 60000 samples, FP32, "
            f"TF32 off, data resident, median of 5 epochs.\n\n{train_table(path)}" for path in found("bench_train")]


def gemm_parts() -> list[str]:
    return [f"### GEMM variants at the training shapes\n\nSource: {source(path)}.\n\n{gemm_table(path)}"
            for path in found("bench_gemm")]


def tensor_core_parts() -> list[str]:
    gemms = claims.section("tensor_cores")["gemms"]
    return [tensor_core_section(path, path.with_name(gemms)) for path in found("tensor_cores")]


def scaling_parts() -> list[str]:
    from perflab.analysis import roofline
    scaling = roofline.scaling_rows()
    if not len(scaling):
        return []
    return ["### Scaling over GPUs, 60000 samples an epoch, b per GPU per step\n\n" + "\n".join(scaling_story(scaling))]


def reference_parts() -> list[str]:
    import pandas as pd
    parts = []
    for path in found("reference_mnist"):
        t = pd.read_csv(path)
        last = t.iloc[-1]
        parts.append(f"### CPU reference on MNIST\n\nSource: {source(path)}. After {int(last.epoch) + 1} epochs: test "
                     f"precision {last['test_precision']:.4f}, median epoch {t['seconds'].median():.2f} s "
                     f"({last['dtype']}, H={last['hidden_sizes']}, B={last['batch_size']}, lr={last['learning_rate']}, "
                     f"reg={last['reg']}).")
    return parts


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


def harness_errors(machine: str, H: int, b: int) -> dict:
    """{(peer, p): predicted / measured - 1} of a machine's scaling harness rows at (H, b), from its
    validation.csv (rows the predictor skipped have none)."""
    import pandas as pd
    part = claims.section("scaling")
    path = RESULTS_ROOT / machine / part["validation"]
    if not path.exists():
        return {}
    t = pd.read_csv(path)
    if "peer" not in t:
        return {}
    t = t[(t.source == part["harness"]) & is_net(t.H, H) & (t.B == b * t.p) & t.error.notna()]
    return {(peer, int(p)): float(e) for peer, p, e in zip(t.peer, t.p, t.error)}


def scaling_story(scaling) -> list[str]:
    """The scaling table per (H, b), the predictor's error at each perflab point, and what it says
    about data against model parallel."""
    part = claims.section("scaling")
    out = []
    for (machine, H, b), g in scaling.groupby(["machine", "H", "b"]):
        wide = g.pivot_table(index="peer", columns="p", values="epoch_ms")
        ps = sorted(g.p.unique())
        wide.columns = [f"p={p} (ms)" for p in wide.columns]
        top = g[g.p == ps[-1]].set_index("peer")
        wide[f"efficiency p={ps[-1]}"] = top.efficiency
        errors = harness_errors(machine, H, b)
        for p in ps:  # the predictor's error at each point it predicts (perflab validate, from the boot's ceilings)
            wide[f"prediction error p={p}"] = [f"{errors[(peer, p)]:+.0%}" if (peer, p) in errors else "-" for peer in wide.index]
        meta = g.iloc[0]
        what = f", {meta['gpu']} x{meta['gpus']}, git {meta['git_commit'][:8]}, {meta['date']}" if "git_commit" in g else ""
        out += [f"### H={H}, b={b}, `results/{machine}/{part['harness']}`{what}", "", fmt(wide.reset_index().round(3)), ""]
        peers = top.drop(index=[i for i in top.index if i.startswith(part["mine"])])
        lines = []
        for name in part["peers"]:
            if name in top.index and len(ps) > 1:
                best = peers.epoch_ms.idxmin() if len(peers) else None
                efficiency = top.efficiency[name]
                lines.append(f"{name}: " + (f"efficiency {efficiency:.2f} at p={ps[-1]}" if efficiency == efficiency
                                            else f"no one-GPU epoch in this run, p={ps[-1]}")
                             + (f", epoch {top.epoch_ms[name] / peers.epoch_ms.min():.2f} of the best peer's ({best})"
                                if best else ""))
        out += ["; ".join(lines) + "." if lines else ""]
        out += epoch_graph_text(RESULTS_ROOT / machine, int(H), int(b)) + [""]
    out += ["", claims.note("exchange")]
    return out


def tensor_core_figures() -> list[Path]:
    """figures/tensor_core_roofline_<folder>.png for each committed tensor-core GEMM bench
    (the kernels notebook draws the same), for the README's tensor-core section."""
    from perflab.report import plots
    return [plots.save_tensor_core_roofline(path, folder=RESULTS_ROOT / "figures")
            for path in found("tensor_cores", "gemm_files")]


BEGIN, END = "<!-- results: generated by `perflab report --readme` -->", "<!-- end of results -->"
def headline() -> str:
    """The README's headline: one claim a row, each from its committed file (the claims file's headline section)."""
    import pandas as pd
    return fmt(pd.DataFrame(claims.render(claims.load("headline")))) + "\n"


HEADLINE_BEGIN, HEADLINE_END = "<!-- headline: generated by `perflab report --readme` -->", "<!-- end of headline -->"


def generated(path: Path, begin: str, end: str) -> str:
    """The generated block of a page, between its markers."""
    text = path.read_text()
    return text[text.index(begin) + len(begin):text.index(end)]


def update_readme(readme: Path) -> bool:
    """Regenerate the README's headline and the results root's README.md tables; True when either changed."""
    changed = False
    for path, begin, end, block in ((readme, HEADLINE_BEGIN, HEADLINE_END, headline()),
                                    (RESULTS_ROOT / "README.md", BEGIN, END, markdown())):
        text = path.read_text()
        new = text.replace(begin + generated(path, begin, end) + end, begin + "\n" + block + end)
        if new != text:
            path.write_text(new)
            changed = True
    return changed


# FP32 FMA peak, 132 SMs x 128 lanes x 2 FLOPs x 1.98 GHz boost (bench gemm reads it off the device)
FP32_PEAK = {"NVIDIA H100 80GB HBM3": 66.9e12, "NVIDIA H200": 66.9e12}
SEEDS_RATES = {"P_flops": 1.63e12, "P_pci": 12.7e9, "P_mpi": 7.95e9}  # RTX 6000, the seeds' solution


def roofline_text(place, rates: dict, machine: str) -> list[str]:
    """The placement table and what it says, from the numbers in it."""
    if not len(place):
        return []
    ridge = rates["P_flops"] / rates["P_pci"]
    left = place[place.AI < ridge]
    out = ["", f"## {Q_ROOFLINES}, {machine}", "", "The points with p > 1, staged, on the modified and combined "
           "rooflines of the effective rates above.", "", fmt(place.round(3)), "",
           f"The modified roofline's ridge is at AI = P_flops / P_pci = {ridge:.0f} FLOP/byte; {len(left)} of "
           f"{len(place)} points lie left of it (AI {span(place.AI, '.0f')}: FLOPs and gradient bytes both grow "
           "with H, so AI changes only with B/p and p), where the gradient bytes over PCIe take "
           f"{span(place['bytes share'], '.0%')} of the bound's time. The points reach "
           f"{span(place['of serial'], '.2f')} of the serial bound"
           + (f" and {span(place['of combined'], '.2f')} of the combined one, which charges the all-reduce at "
              "P_mpi as well." if "of combined" in place else ".")]
    if (place["of serial"] < 1).any():
        out += [said("roofline", "under_bound")]
    if (place["of serial"] > 1).any():
        out += [said("roofline", "above_bound")]
    return out


# CAMPAIGNS.md by question: each `## ` section the generators write goes under the question whose answer it holds
# (by its title's start), the seeds' questions first, then the campaign's; what follows the start names the part
Q_FLOPS = "Questions 2.1 and 2.2: FLOPs per batch and the share of the peak"
Q_RATES = "Question 2.4: the effective rates"
Q_ROOFLINES = "Questions 2.5 and 2.6: the points on the modified and combined rooflines"
Q_SERIAL_MODEL = "The seeds' serial model against measured time per batch"
Q_STAGED = "What the seeds' staged path costs, and what pipelining it buys"
QUESTIONS = [  # (question, whose, the section titles that answer it)
    (Q_FLOPS, "seeds", (Q_FLOPS,)),
    (Q_RATES, "seeds", (Q_RATES,)),
    (Q_ROOFLINES, "seeds", (Q_ROOFLINES,)),
    (Q_SERIAL_MODEL, "seeds", (Q_SERIAL_MODEL,)),
    (Q_STAGED, "seeds", (Q_STAGED, "The seeds' path pipelined")),
    ("Data against model parallel: which partition is faster, and where", "seeds", ("Data against model parallel",)),
    ("The USC experiment: Network1 against Network2", "seeds", ("The USC experiment: Network1 against Network2",)),
    ("How training scales over GPUs", "seeds", ("Scaling over GPUs", "The eight-GPU prediction", "Prediction for eight")),
    ("How well perflab predicts a step from its ceilings, blind", "campaign", ("The bottom-up predictor",)),
    ("Where an epoch's time goes: the sum of its kernels", "campaign", ("The epoch as the sum of its kernels",)),
    ("What CUDA graphs buy", "campaign", ("What CUDA graphs buy",)),
    ("How fast the gradient exchange runs", "campaign", ("The gradient all-reduce", "The gradient exchange layer by layer")),
    ("Whether perflab's best GEMM holds cuBLAS's pace under load", "campaign", ("The best GEMM against cuBLAS",)),
    ("What half precision buys and what it costs", "campaign", ("The half-precision GEMM floor",
                                                                 "The half-precision GEMM roof",
                                                                 "The half-precision GEMM of perflab's own",
                                                                 "The half-precision step",
                                                                 "The half-precision gradient exchange",
                                                                 "The half-precision accuracy",
                                                                 "The half-precision weights")),
]


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def by_question(lines: list[str]) -> str:
    """The report regrouped: a contents list of the questions (the seeds', then the campaign's), then each
    question with the sections that answer it as its parts, one level down. A section no question claims
    is an error here, not a page lost at the end."""
    head, *sections = re.split(r"\n(?=## )", "\n".join(lines) + "\n")
    parts: dict = {q: [] for q, _, _ in QUESTIONS}
    for section in sections:
        title, _, body = section.partition("\n")
        title = title[3:].strip()
        question = next((q for q, _, starts in QUESTIONS if title.startswith(starts)), None)
        if question is None:
            raise ValueError(f"CAMPAIGNS.md section {title!r} answers none of markdown.QUESTIONS: add it there")
        start = next(s for s in dict(((q, st) for q, _, st in QUESTIONS))[question] if title.startswith(s))
        part = title[len(start):].strip(" ,:") if start == question else title
        body = re.sub(r"^(#{2,5}) ", lambda m: "#" + m.group(1) + " ", body, flags=re.M)  # one level down
        parts[question].append(f"### {part or 'Every machine'}\n{body}")
    out = [head.rstrip(), "", "## Contents"]
    for whose, heading in (("seeds", "The seeds' questions"), ("campaign", "The campaign's questions")):
        out += ["", f"{heading}:", ""] + [f"- [{q}](#{anchor(q)})" for q, w, _ in QUESTIONS if w == whose and parts[q]]
    for q, _, _ in QUESTIONS:
        if parts[q]:
            out += ["", f"## {q}", ""] + [p.rstrip() + "\n" for p in parts[q]]
    return "\n".join(out).rstrip() + "\n"


CAMPAIGNS_HEAD = ["# perflab campaigns: the appendix of REPORT.md",
                  "", "Other machines' and other experiments' campaigns, the appendix of [REPORT.md](REPORT.md) (which "
                  "answers the seeds' questions from one run). Generated by `perflab report --markdown` from the committed "
                  "result files named in each section, question by question: the seeds' first, then those the campaign "
                  "asked on the way. Each part names its machine and its source file."]


def analysis_markdown() -> str:
    """CAMPAIGNS.md, REPORT.md's appendix: the committed campaigns' sections in the order campaigns.json lists
    them, each drawn by its function (CAMPAIGN_SECTIONS), then regrouped by question."""
    out = list(CAMPAIGNS_HEAD)
    for name in claims.page("campaigns"):
        out += CAMPAIGN_SECTIONS[name]()
    return by_question(out)


def roofline_sections() -> list[str]:
    """Each GPU's profiled sweep (roofline.csv): FLOPs and the peak's share, the effective rates, the points on
    the rooflines, the seeds' serial model, staged against resident."""
    import json

    import pandas as pd
    out = []
    for path in found("roofline"):
        meta = json.loads(path.with_suffix(".json").read_text())
        if "gpu" not in meta:
            continue
        t = pd.read_csv(path)
        peak = FP32_PEAK.get(meta["gpu"], float("nan"))
        t["t_batch_ms"] = 1e3 * t["t_batch iteration"]
        t["GFLOP/batch"] = t["flops_per_batch"] / 1e9
        t["TFLOP/s"] = t["flops_per_batch"] / t["t_batch iteration"] / 1e12
        t["utilization"] = t["TFLOP/s"] * 1e12 / peak
        machine = f"{meta['gpu']} x{meta.get('gpu_count', '?')}"
        out += ["", f"## {Q_FLOPS}, {machine}", "", f"Source: {source(path)}. FLOPs per batch as the seeds count them "
                f"(4B'H(D+C)), and the share of the FP32 peak {peak / 1e12:.1f} TFLOP/s reached over the median batch "
                "iteration of the profiled run (synchronized at every phase edge, so slower than the unprofiled epochs "
                "in `epoch_seconds`).", "",
                fmt(t[["H", "B", "p", "mode", "gemm", "GFLOP/batch", "t_batch_ms", "TFLOP/s", "utilization"]].round(4))]
        staged = t[t["mode"] == "staged"]
        ref = staged[is_net(staged.H, 512) & (staged.p > 1)]
        if len(ref):
            out += rates_sections(path, staged, ref.iloc[0], machine)
        out += staged_section(path, t, machine)
    return out


def rates_sections(path: Path, staged, r, machine: str) -> list[str]:
    """The seeds' effective rates at the reference point r (H = 512, staged, p > 1) beside the seeds' and the
    machine's ceilings, then the points on the rooflines of those rates and the serial model's prediction."""
    import numpy as np
    import pandas as pd

    from perflab.analysis import roofline
    rates = pd.DataFrame([{"rate": k, "measured": r[k], "seeds RTX 6000": SEEDS_RATES[k],
                           "ratio": r[k] / SEEDS_RATES[k]} for k in SEEDS_RATES if k in r and np.isfinite(r[k])])
    ceilings_file = min(path.parent.glob(claims.section("roofline")["ceilings"]), default=None,
                        key=lambda f: abs(int(f.stem.split("_p")[1]) - int(r["p"])))
    if ceilings_file is not None:
        top = roofline.ceiling_rates(pd.read_csv(ceilings_file), gradient_buffer_bytes(r["H"]), int(r["p"]))
        rates["machine ceiling"] = [top[k] for k in rates.rate]
        rates["of ceiling"] = rates.measured / rates["machine ceiling"]
    out = ["", f"## {Q_RATES}, {machine}", "", f"Source: {source(path)}. At H=512, B={r['B']}, p={r['p']}, "
           "staged (the seeds' path).", "", fmt(rates), "",
           (f"Machine ceilings from `{ceilings_file.name}` beside it, counted as the seeds' formulas count "
            "(the fastest cuBLAS GEMM at the training shapes; pageable copies and host MPI at the gradient's "
            "size). " + said("roofline", "below_ceiling") if ceilings_file else "")
           + said("roofline", "seeds_path")]
    rates_dict = {k: float(r[k]) for k in ("P_flops", "P_pci", "P_mpi") if np.isfinite(r[k])}
    if "P_pci" in rates_dict:  # the modified rooflines count gradient bytes: points that exchange them
        out += roofline_text(roofline.roofline_placement(staged[staged.p > 1], rates_dict), rates_dict, machine)
    return out + serial_model_section(path, staged, rates_dict, machine)


def serial_model_section(path: Path, staged, rates: dict, machine: str) -> list[str]:
    """The seeds' serial model with the reference point's effective rates against every staged point."""
    from perflab.analysis import roofline
    pred = roofline.prediction_table(staged, rates)
    pred["mode"] = "staged"
    worst = pred[pred.error.abs() > 0.15]
    return ["", f"## {Q_SERIAL_MODEL}, {machine}", "", f"Source: {source(path)}. The serial model with the "
            "effective rates of its reference point, staged mode.", "", fmt(pred.round(3)), "", f"Median |error| {100 * roofline.median_abs_error(pred):.0f}%. "
            f"{len(worst)} of {len(pred)} points are off by more than 15%. " + said("roofline", "serial_model")]


def staged_section(path: Path, t, machine: str) -> list[str]:
    """Staged against resident, ms per batch at each (H, B, p) the sweep ran both ways (cuBLAS)."""
    both = t[t.gemm == "cublas"].pivot_table(index=["H", "B", "p"], columns="mode", values="t_batch_ms")
    if not {"staged", "resident"} <= set(both.columns):
        return []
    both["staged / resident"] = both["staged"] / both["resident"]
    return ["", f"## {Q_STAGED}, {machine}: staged against resident", "", f"Source: {source(path)}. Staged "
            "(the seeds' path) against resident (data on the GPU, NCCL), ms per batch.", "",
            fmt(both.reset_index().round(3))]


def predictor_section() -> list[str]:
    """The bottom-up predictor against every committed point and every blind check (perflab.report.predictions)."""
    out = ["", "## The bottom-up predictor (perflab.analysis.predictor, from ceilings alone)", ""]
    if (RESULTS_ROOT / "figures" / f"{predictions.VALIDATION_FIGURE}.png").exists():
        out += [f"![predicted against measured, every committed folder](figures/{predictions.VALIDATION_FIGURE}.png)", ""]
    return out + predictions.predictor_sections(part=claims.section("predictor"))


def scaling_section() -> list[str]:
    """Every peer's epoch over GPUs from the committed scaling harness runs, and the note on an earlier harness."""
    from perflab.analysis import roofline
    scaling = roofline.scaling_rows()
    if not len(scaling):
        return []
    out = ["", "## Scaling over GPUs (60000 samples an epoch, b per GPU per step)", "",
           "Every peer in one harness (`perflab.measure.peers_multi`), the median of 7 epochs after 3. "
           "Efficiency T1 / (p Tp), each against its own one-GPU epoch. perflab's model parallel splits H over "
           "the GPUs and gives each the whole batch of p x b: the same samples per step as data parallel.", ""]
    out += scaling_story(scaling)
    for name in claims.section("scaling")["notes"]:
        note = claims.note(name)
        if note:
            out += ["", note]
    return out


def eight_gpu_sections() -> list[str]:
    """The eight-GPU predictions (perflab predict), each written before its run, with the run that calibrated it."""
    import json

    import pandas as pd

    from perflab.analysis.projection import CALIBRATIONS
    out = []
    for name, scaling in CALIBRATIONS.items():
        prediction = RESULTS_ROOT / claims.section("eight_gpus")["made"].format(name=name)
        if not prediction.exists():
            continue
        made = json.loads(prediction.read_text())
        pred = pd.DataFrame(made["rows"])
        wide = pred.pivot_table(index=["parallel", "H", "b"], columns="p", values="epoch_ms")
        wide.columns = [f"p={p} (ms)" for p in wide.columns]
        wide["efficiency p=8"] = pred[pred.p == 8].set_index(["parallel", "H", "b"])["efficiency"]
        calibrated = next(RESULTS_ROOT.glob(f"*/{scaling}"), RESULTS_ROOT / scaling)  # the machine folder holding it
        out += ["", f"## Prediction for eight H200, written before the run (`{prediction.name}`)", "",
                f"Source: `{prediction.relative_to(RESULTS_ROOT.parent)}` (method inside; `perflab predict`), "
                f"calibrated on `{calibrated.relative_to(RESULTS_ROOT.parent)}` (per-step cost on several GPUs beyond compute and all-reduce: "
                f"{made['t_eager_us']:.0f} us). N = 60000, b samples per GPU per step.", "", fmt(wide.reset_index().round(3))]
    return out


# ------------------------------------------------------------------ REPORT.md: the PDF's outline, from one run
REPORT_FIGURES = "figures/report"  # its figures, under the results root (committed), as REPORT.md links them
APPENDIX = "Appendix: other machines' and other experiments' campaigns"


def plain(text: str) -> str:
    """An answer's text (written for ReportLab's markup) as Markdown."""
    for tag, mark in (("b", "**"), ("i", "*")):
        text = text.replace(f"<{tag}>", mark).replace(f"</{tag}>", mark)
    return text.replace("<br/>", "  \n")


def answer_table(frame) -> str:
    """An answer's table as Markdown, its numbers as the PDF prints them (perflab.report.pdf.number)."""
    from perflab.report.pdf import number
    cell = lambda v: str(int(v)) if isinstance(v, float) and v.is_integer() and abs(v) < 1e9 else number(v)  # noqa: E731
    rows = [list(map(str, frame.columns))] + [[cell(v) for v in row] for row in frame.itertuples(index=False)]
    lines = ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in rows]
    return "\n".join([lines[0], "|" + "---|" * len(frame.columns), *lines[1:]])


def outline_markdown(folder: Path | None = None, figures: Path | None = None, campaigns: str | None = None) -> str:
    """REPORT.md: the seeds' questions in the outline of a run's report.pdf (perflab.report.questions),
    answered from one committed run folder; the answers draw their figures into `figures` (by default
    figures/report/, where the links point). Its appendix links each section of `campaigns`
    (CAMPAIGNS.md, analysis_markdown)."""
    from perflab.report import pdf, questions
    from perflab.report.answer import Missing
    figures = Path(figures or RESULTS_ROOT / REPORT_FIGURES)
    folder = Path(folder or RESULTS_ROOT / claims.setting("report_run"))  # "this run": the claims file names it
    run = questions.Run.load(folder, pdf.report_sweeps(folder), figures)
    answered = questions.answer_all(run)
    t, where = run.table, f"results/{Path(folder).relative_to(RESULTS_ROOT).as_posix()}"
    out = ["# perflab report: the seeds' questions, answered from one run", "",
           f"Generated by `perflab report --markdown` from the committed main job in `{where}/` (\"this run\"), in the "
           "outline of its `report.pdf`: each question of the seeds quoted, then answered from this run's files (or "
           "from the committed campaign file it names, or by the command that would answer it).", ""]
    out += [f"**{line}**\n" for line in pdf.first_lines(Path(folder))]
    out += [f"**What was run:** data-parallel training of the MLPs {', '.join(questions.net(h) for h in t.H.unique())} "
            f"(sigmoid, softmax + cross-entropy, L2, SGD) in {run.dtype} on "
            f"{'the GPU (CuPy)' if run.on_gpu else 'the CPU (NumPy)'}, p = {', '.join(map(str, run.ranks))} MPI rank(s), "
            f"B {pdf.listed(t.B)}, data paths {pdf.listed(t['mode'])}: {len(t)} measured points in "
            f"{', '.join(f'`{where}/{p.name}`' for p in run.sweeps)}.", "",
            f"**Machine:** {pdf.machine_line(run.meta)}.", "", f"**Conclusion:** {questions.conclusion(run)}", "",
            "**The seeds** are the five course documents this report answers: "
            + "; ".join(f"**{k}**: {v}" for k, v in questions.SEEDS.items()) + ". Rates come from one reference point"
            + (f", {run.rates['reference']}" if run.rates else "") + ", named where they are used.", "",
            "**Words used:** " + "; ".join(f"*{k}*: {v}" for k, v in questions.GLOSSARY.items()) + ".", "",
            "## Contents", ""]
    documents = [(k, [(q, a) for q, a in answered if q.id.split()[0] == k]) for k in questions.SEEDS]
    for key, inside in documents:
        if inside:
            out.append(f"- [{questions.SEEDS[key]}](#{anchor(questions.SEEDS[key])})")
            out += [f"  - [{q.id}: {q.title}](#{anchor(f'{q.id}: {q.title}')})" for q, _ in inside]
    out.append(f"- [{APPENDIX}](#{anchor(APPENDIX)})")
    number = 0
    for key, inside in documents:
        if inside:
            out += ["", f"## {questions.SEEDS[key]}"]
        for q, a in inside:
            out += ["", f"### {q.id}: {q.title}", "", (f"*Topic: {q.quote}*" if q.topic else f"> {q.quote}"), ""]
            if isinstance(a, Missing):
                out.append(f"This run cannot answer: {a.why}. What would: `{a.command}`.")
                continue
            refs = [str(number + i) for i in range(1, len(a.figures) + 1)]
            out.append(plain(a.text) + (f" (Figure{'s' if len(refs) > 1 else ''} {', '.join(refs)}.)" if refs else ""))
            for frame, caption in a.tables:
                out += ["", answer_table(frame), "", f"*{caption}*"]
            for png in a.figures:
                number += 1
                out += ["", f"![Figure {number}]({REPORT_FIGURES}/{png.name})", "", f"*Figure {number}.* {pdf.caption(png)}"]
            if a.sources:
                out += ["", "Source: " + ", ".join(f"`{s if s.startswith('results/') else f'{where}/{s}'}`"
                                                   for s in a.sources) + "."]
    sections = re.findall(r"^## (.+)$", analysis_markdown() if campaigns is None else campaigns, flags=re.M)
    out += ["", f"## {APPENDIX}", "", "The long tables of the committed campaigns (other machines, other experiments) "
            "are in [CAMPAIGNS.md](CAMPAIGNS.md), by question:", ""]
    out += [f"- [{s}](CAMPAIGNS.md#{anchor(s)})" for s in sections if s != "Contents"]
    from perflab.results import relative_text
    return relative_text("\n".join(out)) + "\n"  # paths from the clone's root, as on any clone


def write_reports() -> list[Path]:
    """`perflab report --markdown`: the figures the campaigns draw, CAMPAIGNS.md (analysis_markdown) and
    REPORT.md (outline_markdown, its figures under figures/report/)."""
    predictions.validation_figure()
    predictions.checks_figure()
    tensor_core_figures()
    graphs_figures()
    usc_figures()
    campaigns = analysis_markdown()
    paths = [RESULTS_ROOT / "REPORT.md", RESULTS_ROOT / "CAMPAIGNS.md"]
    paths[0].write_text(outline_markdown(campaigns=campaigns))
    paths[1].write_text(campaigns)
    return paths


CAMPAIGN_SECTIONS = {  # campaigns.json's names of CAMPAIGNS.md's sections -> the function that draws each
    "roofline": roofline_sections, "predictor": predictor_section, "usc": usc_section, "step": step_section,
    "launch": launch_section, "parallel": parallel_section, "deep_model": deep_model_section,
    "allreduce": allreduce_section, "wfbp": wfbp_section, "half_floor": half_floor_section,
    "half_roof": half_roof_section, "half_accuracy": half_accuracy_section, "half_step": half_step_section,
    "half_gemm": half_gemm_section, "half_exchange": half_exchange_section, "precision": precision_section,
    "pipelined": pipelined_section, "held": held_section, "prediction_check": predictions.prediction_check_section,
    "scaling": scaling_section, "eight_gpus": eight_gpu_sections,
}


README_SECTIONS = {  # campaigns.json's names of the results root's README.md sections -> the function that draws each
    "bench_train": train_parts, "bench_gemm": gemm_parts, "tensor_cores": tensor_core_parts, "scaling": scaling_parts,
    "predictor": lambda: predictions.predictor_sections(full=False, part=claims.section("predictor")),
    "reference_mnist": reference_parts,
}
