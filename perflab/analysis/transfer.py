"""One GPU kind's ceilings carried to another kind of the same architecture by datasheet ratios, so a
sweep on a kind never measured can be predicted (and committed) before it runs (`perflab whatif --gpu-kind`).

What carries over, what scales and what cannot be known:
- each GPU kernel the ceilings timed (`step_kernel`) scales by the ratio of its roofline time on the two
  datasheets, max(FLOPs / peak, bytes / memory bandwidth), summed over the kernels the row times
  (perflab.train.step): a compute-bound GEMM at equal SMs and clocks carries over, a memory-bound pass
  scales by the bandwidth ratio, a step in between by its mix. What a kernel loses to its roofline
  (launch gaps, tails) is assumed to scale with it.
- the GEMM rates (`gemm_flops`) scale by the peaks' ratio, the device copy by the bandwidths'.
- the host (launches, the eager floor, pageable and pinned copies over PCIe) and the exchanges (NVLink,
  the host MPI) are carried over as measured: the datasheets say the links are alike and say nothing of the
  host. Their bands are the source machine's boots (perflab.analysis.predictor's envelope), and a host
  unlike the source's can fall outside them.
"""
from __future__ import annotations

import functools
import re
from dataclasses import replace

import pandas as pd

from perflab.analysis.datasheets import KINDS, SHEETS
from perflab.analysis.predictor import Ceilings, PredictionError
from perflab.kernels.dispatch import TF32_VARIANTS
from perflab.train import step

SECONDS = ("seconds", "min_seconds", "max_seconds")  # the step_kernel columns a kernel's time is in
COMPOSITE = re.compile(r"^(?P<what>step in sequence|hidden layer)(?P<eager>, launched one by one)? \((?P<key>[^)]+)\)$")
CARRIED = ("step_floor", "h2d", "d2h", "staged_images", "staged_overlap", "staged_allreduce", "nccl_allreduce",
           "p2p_exchange_update", "p2p_exchange_update_bf16")  # host- and link-paced: as measured


class TransferError(PredictionError):
    """A transfer perflab cannot make (an unknown kind, another architecture, no GPU in the file)."""


SHEET_FIELDS = ("gpu_names", "architecture", "fp32_tflops", "tf32_tflops", "bf16_tflops", "memory_tb_s")  # it reads


def sheet(kind: str) -> dict:
    """A kind's datasheet, refused where it lacks a field a transfer reads (a sheet added by hand, say)."""
    if kind not in KINDS:
        raise TransferError(f"--gpu-kind {kind}: no datasheet for it; the kinds are {', '.join(KINDS)}")
    missing = [field for field in SHEET_FIELDS if field not in SHEETS[kind]]
    if missing:
        raise TransferError(f"the datasheet of {kind} (perflab/analysis/datasheets.json) lacks {', '.join(missing)}: "
                            f"a transfer reads {', '.join(SHEET_FIELDS)}")
    return SHEETS[kind]


def measured_on(gpu_name: str | None, kind: str) -> bool:
    """Whether a GPU as machine metadata names it ('NVIDIA H200') is of a datasheet kind ('nvidia-h200'). Only the
    kind's names are read: a sheet is checked whole where a transfer reads it (sheet), so that one kind's incomplete
    sheet does not stop another kind from being named."""
    return gpu_name in SHEETS.get(kind, {}).get("gpu_names", ())


def kind_of(gpu_name: str | None) -> str:
    """The datasheet kind of a GPU as machine metadata names it ('NVIDIA H200' -> 'nvidia-h200')."""
    for kind in KINDS:
        if measured_on(gpu_name, kind):
            return kind
    raise TransferError(f"the ceilings were measured on {gpu_name or 'no GPU'}: a transfer starts from a GPU kind "
                        f"with a datasheet ({', '.join(KINDS)})")


def gemm_and_dtype(key: str) -> tuple[str, str]:
    """A ceilings GEMM key ('cublas', 'cublas-bf16', 'wgmma') as (--gemm, --dtype)."""
    for suffix, dtype in (("-bf16", "bfloat16"), ("-fp16", "float16")):
        if key.endswith(suffix):
            return key.removesuffix(suffix), dtype
    return key, "float32"


def peak(s: dict, kernel: step.Kernel, dtype: str) -> float:
    """FLOP/s a kernel's products can reach on a datasheet: tensor cores for half and TF32 GEMMs (x3tf32's
    three passes), the FP32 cores otherwise."""
    if kernel.kind in step.GEMM_KINDS and dtype in step.HALF:
        return 1e12 * s["bf16_tflops"]
    if kernel.gemm in TF32_VARIANTS:
        return 1e12 * s["tf32_tflops"] / (3 if "x3" in kernel.gemm else 1)
    return 1e12 * s["fp32_tflops"]


def roofline_seconds(s: dict, kernels, dtype: str) -> float:
    return sum(max(k.flops / peak(s, k, dtype), k.nbytes / (1e12 * s["memory_tb_s"])) for k in kernels)


def timed_kernels(impl: str, H: int, B: int) -> tuple[tuple, tuple, str] | None:
    """(the kernels a GPU step_kernel row times, the kernels subtracted from them, their dtype): a step in
    sequence is the whole step, a hidden layer the step of two hidden layers less that of one, any other row
    the one kernel of that name; None for a row perflab.train.step does not describe."""
    m = COMPOSITE.match(impl)
    if m:
        gemm, dtype = gemm_and_dtype(m["key"])
        one = step.step((H,), B, gemm, dtype)
        return (one, (), dtype) if m["what"] == "step in sequence" else (step.step((H, H), B, gemm, dtype), one, dtype)
    for gemm in ("cublas", "wgmma", "x3tf32"):
        for k in step.step((H,), B, gemm) + step.unfused_output((H,), B):
            if k.name == impl:
                return (k,), (), "float32"
    return None


@functools.lru_cache(maxsize=None)
def kernel_factor(impl: str, H: int, B: int, source: str, target: str) -> float | None:
    """How much longer one step_kernel row takes on kind `target` than on `source` (None: not described)."""
    timed = timed_kernels(impl, int(H), int(B))
    if timed is None:
        return None
    plus, minus, dtype = timed
    on = lambda s: roofline_seconds(s, plus, dtype) - roofline_seconds(s, minus, dtype)  # noqa: E731
    return on(sheet(target)) / on(sheet(source))


def scaled_table(table: pd.DataFrame, source: str, target: str) -> tuple[pd.DataFrame, list[str]]:
    """The ceilings table (measured on kind `source`) as kind `target` would measure it, and the GPU kernel rows
    it carried over unscaled (rows perflab.train.step does not describe)."""
    t = table.copy()
    kernels = (t.ceiling == "step_kernel") & (t.device == "gpu")
    unscaled = scale_kernels(t, kernels, source, target) if kernels.any() else []
    memory = sheet(target)["memory_tb_s"] / sheet(source)["memory_tb_s"]
    copy = (t.ceiling == "device_copy") & (t.device == "gpu")
    t.loc[copy, "value"] *= memory
    if "seconds" in t:
        t.loc[copy, "seconds"] /= memory
    for i in t.index[(t.ceiling == "gemm_flops") & (t.device == "gpu")]:
        gemm, dtype = gemm_and_dtype(str(t.at[i, "impl"]))
        one = step.Kernel("fwd_gemm", 1, gemm, 1, "forward", "", "gemm", 1.0, 0)
        t.at[i, "value"] *= peak(sheet(target), one, dtype) / peak(sheet(source), one, dtype)
    return t, unscaled


def scale_kernels(t: pd.DataFrame, kernels: pd.Series, source: str, target: str) -> list[str]:
    """Scale the rows `kernels` of t in place by kernel_factor; the names of those it could not scale."""
    keys = list(zip(t.impl[kernels], t.H[kernels], t.B[kernels]))
    factors = pd.Series([kernel_factor(impl, H, B, source, target) for impl, H, B in keys], index=t.index[kernels],
                        dtype=float)
    unscaled = sorted({impl for (impl, _, _), f in zip(keys, factors) if pd.isna(f)})
    for col in SECONDS:
        if col in t:
            t.loc[kernels, col] = t.loc[kernels, col] * factors.fillna(1.0)
    t.loc[kernels, "value"] = t.loc[kernels, "seconds"]
    return unscaled


def to_kind(c: Ceilings, gpu_name: str | None, kind: str) -> tuple[Ceilings, dict]:
    """Ceilings `c` (measured on `gpu_name`), with its machine's other boots, as `kind` would measure them;
    and what was done, for the prediction's file."""
    source_kind, target = kind_of(gpu_name), sheet(kind)
    if measured_on(gpu_name, kind):
        raise TransferError(f"--gpu-kind {kind}: the ceilings were measured on {gpu_name}, that kind itself; a blind "
                            "prediction starts from another kind's ceilings (leave --gpu-kind out to predict from these)")
    source = sheet(source_kind)
    if source["architecture"] != target["architecture"]:
        raise TransferError(f"--gpu-kind {kind}: a {target['architecture']} GPU, and the ceilings' {gpu_name} is "
                            f"{source['architecture']}; datasheet ratios carry over only within one architecture")
    table, unscaled = scaled_table(c.table, source_kind, kind)
    boots = [replace(b, table=scaled_table(b.table, source_kind, kind)[0], envelopes={}, grid_misses={}) for b in c.boots]
    moved = replace(c, table=table, boots=boots, envelopes={}, grid_misses={},
                    source=f"{c.source} as {kind} (datasheet ratios from {source_kind})")
    made = {"from_kind": source_kind, "to_kind": kind, "datasheets": {source_kind: source, kind: target},
            "scaled": "GPU step kernels by their roofline time's ratio; GEMM rates by the peaks'; the device copy by "
                      "the memory bandwidths'",
            "carried_as_measured": list(CARRIED), "unscaled_kernels": unscaled}
    return moved, made
