"""The bottom-up predictor: time per batch and per epoch of any sweep point, composed from the
step perflab actually executes, every term read from a ceilings file (`perflab ceilings`) and
nothing fitted to training runs.

Terms (seconds per batch, one rank):
  kernels   the step's kernels over an (H, B') grid, interpolated log-log (GPU: the fused step
            timed whole, its kernels one after another, where the file has it, else each kernel
            timed alone and summed; the unfused one profiled; CPU: the reference's forward,
            backward and update, timed with p ranks sharing the cores)
  host      the host's floor of a step: perflab's trainer itself, alone, at H = 16 and 16 samples,
            where the GPU's work is negligible, launched as the point's step was (a graph replay,
            or kernel by kernel: floor_name; resident plus two eager launches on several GPUs;
            staged); and its fixed cost per epoch (synchronizations, the loss), from epochs of
            two lengths, or, for an epoch run as one graph, its epoch over its graph at real sizes
  images    staged: the batch's columns and labels copied host -> device from pageable memory;
            pipelined: from pinned memory, on a stream of its own under the step before
  exchange  p > 1: NCCL all-reduce (resident), device -> host, MPI all-reduce, host -> device
            (staged), MPI alone (numpy); each from a latency-bandwidth fit t = a + S / b to the
            measured times of that very call against size at p ranks; --comm p2p's one kernel
            (the update in it); --overlap's backward GEMM 3 with its chunks' all-reduces, timed
            running at once over the (H, B') grid (in place of GEMM 3 in the kernels' sum)
Deeper nets (H1-H2-...): the one-layer step at H1, plus what each hidden layer past the first adds
(timed by the ceilings for H over H: gpu_deeper, cpu_deeper), the output layer and the update at the
net's own sizes (on a GPU the update never faster than its bytes at the device copy rate: gpu_update), and the
net's whole gradient exchanged.
Composition follows the code: where the host enqueues work the GPU runs later, the two overlap
(max); on one GPU the staged copy of the next batch (the host's memcpy into the driver's staging)
runs while the GPU replays the step's graph (max); a host all-reduce, and the copy behind a step
the host launches kernel by kernel, run in series (sum), as in the seeds' serial model; the pipelined mode's
streams overlap, so its terms compose by max over a little pipeline of gradient pieces (`pipelined_mpi`).
Each (backend, parallel, mode, exchange) covered has its composer in COMPOSERS; any other is refused, naming
those covered. Each prediction names the ceilings file it used.
"""
from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field
from functools import cache, cached_property, partial, wraps
from pathlib import Path

import numpy as np
import pandas as pd

from perflab.analysis import perfmodel
from perflab.config import GPU_EXCHANGES, HALF_IMPLS, HOST_STAGED, OVERLAP_CHUNKS, PIPELINED_CHUNKS, TWO_SHOT_FROM, TWO_SHOT_IMPL
from perflab.kernels import WGMMA_VARIANTS
from perflab.train import step as trainstep
from perflab.train.spec import RunSpec


def one_layer(gemm: str = "cublas", **fusion) -> tuple:
    """The kernels of 784-H-10's step (perflab.train.step), as the ceilings time them, by name: the one
    hidden layer every GPU prediction starts from (deeper nets add `hidden layer` a layer)."""
    return trainstep.step((1,), gemm=gemm, **fusion)


UPDATE = trainstep.display_name("update")
FUSED_STEP = tuple(k.name for k in one_layer() if k.kind != "update")
DW1_GEMM = trainstep.display_name("bwd_gemm3_cublas")  # dW_1 = dz_1 X^T, the step's last GEMM (cuBLAS)
# the fused step's kernels with Hopper's tensor-core GEMMs (`perflab ceilings` times them on a Hopper):
# x3tf32's backward pass also writes dz1's TF32 split, which its GEMM 3 reads
TENSOR_CORE_STEPS = {gemm: tuple(k.name for k in one_layer(gemm) if k.kind != "update") for gemm in WGMMA_VARIANTS}


def on_grid(t: pd.DataFrame, H: float, B: float) -> float:
    """Seconds at (H, B') from rows timed over an (H, B') grid: log-log in B at each grid H, then in H."""
    return on_lines(grid_lines(t), H, B)


def grid_lines(t: pd.DataFrame) -> list[tuple]:
    """An (H, B') grid's rows as its lines at each grid H, in order of H: (H, loglog_line(B', seconds))."""
    H, B, seconds = np.asarray(t.H), np.asarray(t.B), np.asarray(t.seconds)
    return [(h, loglog_line(B[H == h], seconds[H == h])) for h in np.unique(H[pd.notna(H)])]


def on_lines(lines: list[tuple], H: float, B: float) -> float:
    """on_grid from the grid's lines (grid_lines): log-log in B at each grid H, then in H."""
    at_h = {h: loglog_at(line, B) for h, line in lines}
    return loglog(list(at_h), list(at_h.values()), H)


def fused_step(gemm: str) -> tuple:
    """The kernels of the fused data-parallel step with this GEMM."""
    return FUSED_STEP if gemm == "cublas" else TENSOR_CORE_STEPS[gemm]


def sequence_name(gemm: str, eager: bool = False) -> str:
    """The ceilings' name for the fused step's kernels (with the update) timed one after another, in
    a CUDA graph or (eager) launched one by one."""
    return f"step in sequence, launched one by one ({gemm})" if eager else f"step in sequence ({gemm})"


def overlap_name(chunks: int) -> str:
    """The ceilings' name of --overlap's backward GEMM 3 with its exchanges, in `chunks` chunks."""
    return f"{DW1_GEMM} in {chunks} chunks, each all-reduced by NCCL under the next"


CPU_STEP = ("forward", "backward", "step")  # the NumPy reference's step as the ceilings time it
CPU_DEEP_SUFFIX = ", two hidden layers"  # the reference's parts of 784-H-H-10: a hidden layer adds their excess


def hidden_layer_name(gemm: str, eager: bool = False) -> str:
    """The ceilings' name for what one more hidden layer of H units over one of H adds to a GPU step."""
    return f"hidden layer, launched one by one ({gemm})" if eager else f"hidden layer ({gemm})"


def step_kernels(backend: str, gemm: str = "cublas") -> tuple:
    """The kernels a data-parallel step sums on this backend (the GPU's with its update)."""
    return CPU_STEP if backend == "numpy" else fused_step(gemm) + (UPDATE,)


CEILINGS_COLUMNS = ("ceiling",)
CEILINGS_FILE = "a ceilings file is the table `perflab ceilings` writes (ceilings_p<P>.csv, a row per measurement)"


class PredictionError(ValueError):
    pass


def floor_name(mode: str, graphs: bool, gemm: str = "cublas") -> str:
    """The ceilings' name for the trainer's host floor: `trainer <mode>` as each mode ran first
    (resident a graph a step, staged kernel by kernel, cuBLAS), then what differs: ` graph`
    (staged), ` eager` (resident), and a GEMM other than cuBLAS launched kernel by kernel (its
    wrapper's host work is in every eager step; a graph replays any GEMM at one cost)."""
    how = {("staged", True): " graph", ("resident", False): " eager"}.get((mode, graphs), "")
    return f"trainer {mode}{how}" + (f" {gemm}" if not graphs and gemm != "cublas" else "")


def loglog(xs, ys, x: float) -> float:
    """Interpolate y(x) linearly in log-log; extrapolate from the two nearest points."""
    return loglog_at(loglog_line(xs, ys), x)


def loglog_line(xs, ys) -> tuple[np.ndarray, np.ndarray]:
    """The points of a log-log line, logged and in order of x (what loglog_at reads, once for any x)."""
    xs, ys = np.log(np.asarray(xs, float)), np.log(np.maximum(np.asarray(ys, float), 1e-12))
    order = np.argsort(xs)
    return xs[order], ys[order]


def loglog_at(line: tuple[np.ndarray, np.ndarray], x: float) -> float:
    """loglog at x from its line (loglog_line)."""
    xs, ys = line
    if len(xs) == 1:
        return float(np.exp(ys[0]))
    lx = math.log(x)
    i = min(max(int(np.searchsorted(xs, lx)) - 1, 0), len(xs) - 2)
    slope = (ys[i + 1] - ys[i]) / (xs[i + 1] - xs[i])
    return float(np.exp(ys[i] + slope * (lx - xs[i])))


def alpha_beta(sizes, seconds) -> tuple[float, float]:
    """Least-squares t = alpha + S / beta over the measured sizes (alpha >= 0)."""
    S, t = np.asarray(sizes, float), np.asarray(seconds, float)
    A = np.vstack([np.ones_like(S), S]).T
    (alpha, inv_beta), *_ = np.linalg.lstsq(A / t[:, None], np.ones_like(t), rcond=None)  # relative error
    return max(float(alpha), 0.0), 1 / max(float(inv_beta), 1e-30)


def once_per_table(method):
    """A look-up made once per arguments for the table that asks it (Lookups.cache, a kind per method); what raises
    is asked again. Only for what the table alone says, not the machine's other boots."""
    @wraps(method)
    def looked_up(self, *args, **kwargs):
        found = self.cache(method.__name__)
        key = (*args, *kwargs.items())
        if key not in found:
            found[key] = method(self, *args, **kwargs)
        return found[key]
    return looked_up


class Lookups:
    """The look-ups in a ceilings table (Ceilings, which this is mixed into, holds it as `table`, and `memo`), each
    made once: a validation asks the same of a file hundreds of times."""

    def cache(self, kind: str) -> dict:
        """This table's memo of one kind of look-up. The table is only read once a Ceilings holds it (changed tables
        are new Ceilings: probed, with_exchange); one put in its place starts the memo afresh."""
        if self.memo.get("table") is not self.table:
            self.memo.clear()
            self.memo["table"] = self.table
        return self.memo.setdefault(kind, {})

    def rows(self, ceiling: str, **match) -> pd.DataFrame:
        """The table's rows of one ceiling, matching each column given (none where the table lacks the column);
        read-only: the frame is shared by every caller that asks the same."""
        found = self.cache("rows")
        key = (ceiling, *match.items())
        if not found:  # every ceiling's rows, split in one pass (a mask over the whole table costs as much, per ceiling)
            found.update(((name,), t) for name, t in self.table.groupby("ceiling", sort=False))
        if key not in found and not match:  # a ceiling the table lacks
            found[key] = self.table.iloc[:0]
        elif key not in found:  # the rows matching all but the last column given, then the last
            *first, (k, v) = match.items()
            t = self.rows(ceiling, **dict(first))
            found[key] = t[t[k] == v] if k in t else t.iloc[:0]
        return found[key]


class AllReduces(Lookups):
    """The exchange look-ups of a ceilings table (Ceilings, which this is mixed into, holds the rows): all-reduces at
    a size, their spread over repeats and boots, and each exchange path's."""

    def exchange_envelope(self, p: int, nbytes: float, own: tuple[float, float]) -> tuple[float, float]:
        """The staged exchange's ends over the machine's boots: this file's own at nbytes, scaled by each boot's
        time over this file's at the grid size nearest nbytes that both timed (older files have no row at a net's
        own size, and their fits across sizes miss it: docs/DECISIONS.md, D22)."""
        sizes = self.rows("staged_allreduce", ranks=p).size_bytes
        grid = [s for s in sizes if int(s) & (int(s) - 1) == 0]  # the powers of two every file times
        if not grid:
            return own
        ref = min(grid, key=lambda s: abs(math.log(s / nbytes)))
        mine = self.at_size("staged_allreduce", p, ref)
        if mine is None:
            return own
        here = self.staged_exchange(p, nbytes) / float(mine.seconds)  # this file's at nbytes, per second at ref

        def scaled(b):
            theirs = b.at_size("staged_allreduce", p, ref)
            if theirs is None:
                raise KeyError(ref)  # that boot did not time this size at p ranks
            return here * float(theirs.seconds)
        return self.envelope(("exchange", p, nbytes), scaled, own)

    @once_per_table
    def allreduce(self, ceiling: str, p: int, nbytes: float) -> float:
        """As measured at S where the ceilings timed that size (`perflab ceilings --hidden NET` times each
        net's gradient and pipelined pieces), else from t = a + S / b fitted to the measured sizes within
        a factor 16 of S (the path's protocol changes with size, so one line through every size misses the
        gradient's: docs/DECISIONS.md, D22)."""
        t = self.rows(ceiling, ranks=p)
        if not len(t):
            raise PredictionError(f"{self.source} has no {ceiling} rows at p={p}: run `mpiexec -n {p} perflab ceilings`")
        exact = self.at_size(ceiling, p, nbytes)
        if exact is not None:
            return float(exact.seconds)
        near = t[(t.size_bytes >= nbytes / 16) & (t.size_bytes <= nbytes * 16)]
        t = near if len(near) >= 2 else t
        seconds = t.seconds if "seconds" in t and t.seconds.notna().all() else t.size_bytes / t.value
        alpha, beta = alpha_beta(t.size_bytes, seconds)
        return alpha + nbytes / beta

    @once_per_table
    def at_size(self, ceiling: str, p: int, nbytes: float):
        """The row of the ceiling's at p ranks timed at nbytes (to rtol 0.01: docs/DECISIONS.md, D22), or None; rows
        that predate the seconds column have none."""
        t = self.rows(ceiling, ranks=p)
        if "seconds" not in t:
            return None
        exact = t[np.isclose(t.size_bytes, nbytes, rtol=0.01) & t.seconds.notna()]
        return exact.iloc[0] if len(exact) else None

    def allreduce_spread(self, ceiling: str, p: int, nbytes: float) -> tuple[float, float] | None:
        """The fastest and slowest repeat of the all-reduce at nbytes, where the ceilings timed that size
        and kept its repeats' spread (a host-paced prediction's band); else None."""
        exact = self.at_size(ceiling, p, nbytes)
        if exact is None or pd.isna(exact.get("min_seconds", np.nan)):
            return None
        return float(exact.min_seconds), float(exact.max_seconds)

    def nccl_exchange(self, p: int, nbytes: float, in_graph: bool) -> tuple[float, str]:
        """(seconds, what it is) of NCCL's all-reduce: replayed inside a CUDA graph where the step's
        graph holds it and the ceilings measured that (nccl_allreduce_graph, faster than launched:
        docs/DECISIONS.md, D25), else launched one by one."""
        if in_graph and len(self.rows("nccl_allreduce_graph", ranks=p)):
            return self.allreduce("nccl_allreduce_graph", p, nbytes), "NCCL all-reduce in a graph"
        return self.allreduce("nccl_allreduce", p, nbytes), "NCCL all-reduce"

    def p2p_exchange(self, p: int, nbytes: float, bf16: bool = False) -> float:
        """--comm p2p: the peers' gradients read, summed and applied in one kernel (p2p_exchange_update),
        the update included; `bf16` (a bfloat16 run): read from their BF16 copies (p2p_exchange_update_bf16,
        timed at the FP32 gradient's size)."""
        name = "p2p_exchange_update_bf16" if bf16 else "p2p_exchange_update"
        rows = self.rows(name, ranks=p)
        if not len(rows):
            raise PredictionError(f"{self.source} has no {name} rows at p={p}: run `mpiexec -n {p} "
                                  "perflab ceilings` on GPUs of one node with peer access")
        timed = rows["impl"].astype(str) if "impl" in rows else pd.Series("", index=rows.index)
        if p >= TWO_SHOT_FROM and not timed.str.startswith(TWO_SHOT_IMPL).all():
            raise PredictionError(f"{self.source} timed --comm p2p at p={p} with the one-shot kernel of before a50f69c, "
                                  f"where p2p now runs two-shot (2 (p - 1) / p of a gradient read, not p - 1): run "
                                  f"`mpiexec -n {p} perflab ceilings` again")
        return self.allreduce(name, p, nbytes)

    def overlap_exchange(self, p: int, H: float, B: float, chunks: int) -> float:
        """--overlap: backward GEMM 3 in row chunks with each chunk's NCCL all-reduce under the next,
        as timed at once (overlap_exchange rows at p ranks), interpolated in (H, B') as a kernel."""
        t = self.rows("overlap_exchange", ranks=p, impl=overlap_name(chunks))
        if not len(t):
            raise PredictionError(f"{self.source} has no overlap_exchange rows at p={p} in {chunks} chunks: run "
                                  f"`mpiexec -n {p} perflab ceilings` (it times --overlap's default of 2 chunks)")
        return on_grid(t, H, B)

    def piece_allreduce(self, p: int, nbytes: float) -> float:
        """The pipelined trainer's host all-reduce of one gradient piece: as timed beside a computing
        GPU in the trainer's own chain (pipelined_allreduce), else the idle one (mpi_allreduce)."""
        if len(self.rows("pipelined_allreduce", ranks=p)):
            return self.allreduce("pipelined_allreduce", p, nbytes)
        return self.allreduce("mpi_allreduce", p, nbytes)

    def staged_exchange(self, p: int, nbytes: float) -> float:
        """The staged path's exchange (device -> host, MPI_Allreduce, host -> device, pageable, in
        series) as timed whole, else composed from those three parts where a ceilings file has
        them but not the whole (a machine whose exchange alone was measured: with_exchange)."""
        if len(self.rows("staged_allreduce", ranks=p)):
            return self.allreduce("staged_allreduce", p, nbytes)
        return (self.copy("d2h", "pageable", nbytes) + self.allreduce("mpi_allreduce", p, nbytes)
                + self.copy("h2d", "pageable", nbytes))


@dataclass
class Ceilings(AllReduces):
    """A ceilings table (one file) and the look-ups the predictor makes in it."""
    table: pd.DataFrame
    source: str = ""
    grid_misses: dict = field(default_factory=dict, repr=False)  # grid_error per step, once (kernel_spread)
    boots: list = field(default_factory=list, repr=False)  # the machine's other ceilings files: other boots (envelope)
    envelopes: dict = field(default_factory=dict, repr=False)
    memo: dict = field(default_factory=dict, repr=False, compare=False)  # look-ups in this table, once each (cache)

    @classmethod
    def load(cls, path, boots: bool = True) -> "Ceilings":
        """The ceilings file at path; one that is empty, no CSV or no ceilings table is named with what it lacks.
        With `boots`, the other ceilings files of its machine's folder come along (envelope)."""
        from perflab.results import ResultFileError, read_table, relative
        try:
            table = read_table(path, CEILINGS_COLUMNS, CEILINGS_FILE)
        except ResultFileError as exc:
            raise PredictionError(str(exc)) from None
        c = cls(table, source=relative(path))  # as validation's skip reasons name it
        if boots:
            machine = machine_ceilings(Path(path))
            c.boots = [b for b in machine if b.source != c.source]
            for b in machine:  # the machine's copy of this very file, as it reads now: one table, one memo of look-ups
                if b.source == c.source and b.table.equals(table):
                    c.table, c.memo = b.table, b.memo
        return c

    def envelope(self, key: tuple, term, own: tuple[float, float]) -> tuple[float, float]:
        """A host-paced term's fastest and slowest: over this file's own spread (`own`) and term(b) of every other
        ceilings file of the machine (each a boot of its own: the pageable copy, the host's launches and the host
        exchange move between boots: docs/DECISIONS.md, D21), where that file measured it, over BOOT_PERCENTILES;
        once per key."""
        if key not in self.envelopes:
            values = [(own[0] + own[1]) / 2]
            for b in self.boots:
                with contextlib.suppress(PredictionError, KeyError, ValueError, IndexError):
                    values.append(float(term(b)))
            # a band for most runs, not stretched by one odd boot (docs/DECISIONS.md, D21)
            low, high = np.percentile(values, BOOT_PERCENTILES)
            self.envelopes[key] = min(own[0], float(low)), max(own[1], float(high))
        return self.envelopes[key]

    @once_per_table
    def kernel(self, device: str, name: str, H: float, B: float) -> float:
        """Seconds of one kernel at (H, B'): log-log in B at the two grid H around H, then in H."""
        return on_lines(self.grid(device, name), H, B)

    @once_per_table
    def grid(self, device: str, name: str) -> list[tuple]:
        """One kernel's (H, B') grid as its lines (grid_lines)."""
        t = self.rows("step_kernel", device=device, impl=name)
        if not len(t):
            other = "cpu" if device == "gpu" else "gpu"
            raise PredictionError(f"{self.source} has no {device} step_kernel rows for {name!r}: " + (
                f"it is a {other.upper()}'s file (--backend {'numpy' if other == 'cpu' else 'cupy'} predicts from it)"
                if len(self.rows("step_kernel", device=other)) else
                "measure them with `perflab ceilings` (perflab 0.1 + the predictor)"))
        return grid_lines(t)

    @once_per_table
    def step_names(self, backend: str, gemm: str = "cublas", eager: bool = False) -> tuple:
        """The step_kernel rows a data-parallel step sums: on a GPU its kernels timed one after another
        (`step in sequence`; launched one by one where the step is and the file timed that: each
        launch leaves the GPU a gap a graph does not), where the file has them; else each kernel
        timed alone."""
        if backend != "numpy":
            for name in ((sequence_name(gemm, eager=True),) if eager else ()) + (sequence_name(gemm),):
                if len(self.rows("step_kernel", device="gpu", impl=name)):
                    return (name,)
        if gemm in HALF_IMPLS.values():
            raise PredictionError(f"{self.source} has no `{sequence_name(gemm)}` rows: its ceilings predate the "
                                  "half-precision step, or its GPU lacks it (BF16 from compute capability 8.0): run "
                                  "`perflab ceilings` on the GPU to predict")
        return step_kernels(backend, gemm)

    def grid_error(self, names: tuple, device: str = "gpu") -> dict | None:
        """How far the log-log interpolation of a step (the sum of `names`) misses the grid's own
        measurements: each interior grid point predicted without it, once without its B (from the
        B's beside it at its H), once without its whole H (from the H's beside it). A what-if at
        shapes off the grid carries about this error in its kernels (tensor-core GEMMs, whose
        times step with their tiles, miss more than cuBLAS's). None: a grid too small to tell."""
        t = self.rows("step_kernel", device=device)
        t = t[t.impl.isin(names)]
        Hs, Bs = sorted(t.H.unique()), sorted(t.B.unique())
        if len(Hs) < 3 or len(Bs) < 3 or set(t.impl) != set(names):
            return None
        errors = []
        # each kernel's grid as arrays and as its lines at each H, in the table's order (as groupby("impl") gives them)
        kernels = [(np.asarray(g.H), np.asarray(g.B), np.asarray(g.seconds), grid_lines(g)) for _, g in t.groupby("impl")]
        step_H, step_B, step_seconds = np.asarray(t.H), np.asarray(t.B), np.asarray(t.seconds)
        for H in Hs[1:-1]:
            for B in Bs[1:-1]:
                true = float(np.nansum(step_seconds[(step_H == H) & (step_B == B)]))  # as pandas sums: NaN left out
                without_b = without_h = 0.0
                for gH, gB, gs, lines in kernels:
                    at_h = (gH == H) & (gB != B)
                    without_b += loglog(gB[at_h], gs[at_h], B)
                    others = {h: loglog_at(line, B) for h, line in lines if h != H}
                    without_h += loglog(list(others), list(others.values()), H)
                errors += [without_b / true - 1, without_h / true - 1]
        absolute = np.abs(errors)
        return {"median_abs": float(np.median(absolute)), "worst": float(errors[int(np.argmax(absolute))]),
                "points": len(errors) // 2}

    def kernel_spread(self, kernels: float, gemm: str, eager: bool) -> tuple[float, float]:
        """A host-paced step's kernels at the two ends of its band: +- the median by which this file's
        kernel grid misses its own points interpolated from their neighbours (grid_error, the ceilings'
        own measure of how far a kernel term off the grid may be); the kernels alone where it cannot tell."""
        names = self.step_names("cupy", gemm, eager=eager)
        if names not in self.grid_misses:
            self.grid_misses[names] = self.grid_error(names)
        miss = (self.grid_misses[names] or {}).get("median_abs", 0.0)
        return kernels * (1 - miss), kernels * (1 + miss)

    @once_per_table
    def one_rank_floor(self, name: str) -> pd.DataFrame:
        """The step_floor rows of this name measured on one rank."""
        t = self.rows("step_floor", impl=name)
        return t[t.ranks == 1]

    @once_per_table
    def floor(self, name: str) -> float:
        """A step floor measured on one rank (ceilings under mpiexec also time the resident
        trainer on all ranks: at H = 16 that took longer per step than real points at H = 512 on
        two H200, so it is recorded, not used)."""
        t = self.one_rank_floor(name)
        if not len(t):
            raise PredictionError(f"{self.source} has no step_floor row {name!r}: measure it with `perflab ceilings`")
        return float(t.seconds.iloc[0])

    def trainer_floor(self, mode: str, graphs: bool, gemm: str = "cublas") -> float:
        """The trainer's host floor a step at H = 16, as the step was launched (floor_name), charged
        at every size: a graph replay costs the same at any; a step launched kernel by kernel is as
        steady as the host's speed, which moves it too far between points of one run for a finer
        model to hold (docs/DECISIONS.md, D23). A file
        from before the staged step was graphed lacks `trainer staged graph`: there a graphed staged
        step is charged the resident trainer's floor (the same replay, without the copy's call). A
        file from before the eager floors per GEMM charges every GEMM cuBLAS's."""
        return self.floor(self.trainer_floor_name(mode, graphs, gemm))

    @once_per_table
    def trainer_floor_name(self, mode: str, graphs: bool, gemm: str) -> str:
        if mode == "staged" and graphs and not len(self.rows("step_floor", impl=floor_name(mode, graphs))):
            return "trainer resident"
        if not len(self.rows("step_floor", impl=floor_name(mode, graphs, gemm))):
            gemm = "cublas"
        return floor_name(mode, graphs, gemm)

    @once_per_table
    def trainer_floor_spread(self, mode: str, graphs: bool, gemm: str = "cublas") -> tuple[float, float] | None:
        """The fastest and slowest of the trainer_floor's repeats (the host's spread, timed for the
        floors of steps launched kernel by kernel), where the ceilings file has them."""
        t = self.one_rank_floor(self.trainer_floor_name(mode, graphs, gemm))
        if not len(t) or "min_seconds" not in t or t.min_seconds.isna().any():
            return None
        return float(t.min_seconds.iloc[0]), float(t.max_seconds.iloc[0])

    @once_per_table
    def optional_floor(self, name: str) -> float:
        """A floor that older ceilings files lack: 0 there."""
        t = self.one_rank_floor(name)
        return float(t.seconds.iloc[0]) if len(t) else 0.0

    @once_per_table
    def epoch_stretch(self) -> float | None:
        """How much longer fit's epoch run as one CUDA graph takes than that graph replayed between
        events: the median of epoch / graph over the real sizes where the file measured both
        (epoch_overhead); None in files from before. A ratio, not a fixed cost: the trainer's epochs
        ran over their kernels by one share at every size (docs/DECISIONS.md, D24)."""
        t = self.rows("step_floor", impl="trainer resident epoch graph")
        if not len(t) or "graph_seconds" not in t:
            return None
        return float((t.epoch_seconds / t.graph_seconds).median())

    @once_per_table
    def launch(self) -> float:
        """Host seconds to launch one kernel eagerly: the eager step's floor over its kernels."""
        t = self.rows("step_floor", impl="eager launch")
        if not len(t):
            raise PredictionError(f"{self.source} has no step_floor row 'eager launch': measure it with `perflab ceilings`")
        return float(t.seconds.iloc[0] / t.kernels.iloc[0])

    @once_per_table
    def copy(self, direction: str, kind: str, nbytes: float) -> float:
        t = self.rows(direction, impl=kind)
        if not len(t):
            raise PredictionError(f"{self.source} has no {kind} {direction} rows: measure them with `perflab ceilings`")
        return loglog(t.size_bytes, t.size_bytes / t.value, nbytes) if nbytes > 0 else 0.0

    @once_per_table
    def staged_images(self, B: float) -> float:
        t = self.rows("staged_images")
        if not len(t):
            raise PredictionError(f"{self.source} has no staged_images rows: measure them with `perflab ceilings`")
        return loglog_at(self.copy_line("seconds"), B)

    @once_per_table
    def staged_images_spread(self, B: float) -> tuple[float, float] | None:
        """The fastest and the slowest walk's copy of a batch (the ceiling's own spread: the pageable
        copy drifts over seconds), where the ceilings file has them."""
        t = self.rows("staged_images")
        if not len(t) or "min_seconds" not in t or t.min_seconds.isna().any():
            return None
        return loglog_at(self.copy_line("min_seconds"), B), loglog_at(self.copy_line("max_seconds"), B)

    @once_per_table
    def copy_line(self, column: str) -> tuple[np.ndarray, np.ndarray]:
        """The staged copy's log-log line over B (loglog_line) of one column: read at any B."""
        t = self.rows("staged_images")
        return loglog_line(t.B, t[column])

    def staged_hidden(self, B: float, kernels: float) -> float | None:
        """Seconds of the staged copy of B samples that run under a step of `kernels` seconds on the GPU
        (`perflab ceilings`' staged_overlap: linear in the kernel's time at each measured B, then in
        log B; held at the ends), at most the kernels' own time; None where the file has no such rows."""
        lines = self.overlap_lines()
        if lines is None:
            return None
        at_b = {b: float(np.interp(kernels, *line)) for b, line in lines.items()}
        Bs = sorted(at_b)
        hidden = float(np.interp(math.log(B), np.log(Bs), [at_b[b] for b in Bs]))
        return min(hidden, kernels)

    @once_per_table
    def overlap_lines(self) -> dict | None:
        """The staged_overlap rows at each measured B, in order of the kernel's time: (kernel, hidden seconds)."""
        t = self.rows("staged_overlap")
        if not len(t):
            return None
        return {b: (g.sort_values("kernel_seconds").kernel_seconds.to_numpy(),
                    g.sort_values("kernel_seconds").hidden_seconds.to_numpy()) for b, g in t.groupby("B")}

    def probed(self, B: float, seconds: float, low: float, high: float) -> "Ceilings":
        """This file with its staged copy rescaled to a probe taken beside a run (the sweep's
        copy_probe_s, min, max: walks at the rank's batch B): the copy's shape over B from the
        file, its level from the moment of the run. Only the copy changes."""
        table, scales = self.table, {"seconds": seconds / self.staged_images(B)}
        spread = self.staged_images_spread(B)
        if spread:
            scales |= {"min_seconds": low / spread[0], "max_seconds": high / spread[1]}
        rows = (table.ceiling == "staged_images").to_numpy()
        t = table.assign(**{column: np.where(rows, table[column].to_numpy() * scale, table[column].to_numpy())
                            for column, scale in scales.items()})  # a new table, the copy's rows scaled
        c = Ceilings(t, source=f"{self.source} with the staged copy probed beside the run", grid_misses=self.grid_misses)
        # only the copy changed: every other look-up is this file's, shared (the memo's every kind but the copy's; its
        # rows, split by ceiling when staged_images read them, all but the copy's)
        kept = {key: v for key, v in self.cache("rows").items() if key[0] != "staged_images"}
        c.cache("rows").update(kept | {("staged_images",): t[rows]})
        c.memo.update({kind: found for kind, found in self.memo.items() if kind not in ("table", "rows", *COPY_MEMOS)})
        return c



# the memo's kinds that hold the staged copy (which probed replaces)
COPY_MEMOS = ("staged_images", "staged_images_spread", "copy_line")
EXCHANGES = ("nccl_allreduce", "nccl_allreduce_graph", "mpi_allreduce", "staged_allreduce", "shm_allreduce",
             "pipelined_allreduce", "p2p_exchange_update", "p2p_exchange_update_bf16")


def exchange_files(made: dict) -> list[str]:
    """The exchange ceilings a committed prediction names (one path in those made before several were
    allowed, a list since)."""
    files = made.get("exchange_ceilings", [])
    return [files] if isinstance(files, str) else list(files)


def with_exchange(base: Ceilings, exchange: Ceilings) -> Ceilings:
    """base's kernels, floors and copies, with the all-reduces of `exchange` at the ranks it
    measured (base's own at those ranks dropped): a machine with more of the same GPUs, whose
    all-reduces were measured but not its step (the four-H200 run, before the step's kernels
    were in `perflab ceilings`)."""
    ex = exchange.table[exchange.table.ceiling.isin(EXCHANGES)]
    if not len(ex):
        raise PredictionError(f"{exchange.source} has no all-reduce rows ({', '.join(EXCHANGES)})")
    replaced = base.table.ceiling.isin(EXCHANGES) & base.table.ranks.isin(set(ex.ranks))
    return Ceilings(pd.concat([base.table[~replaced], ex], ignore_index=True),
                    source=f"{base.source} with the all-reduces of {exchange.source}")


# a hidden layer's launches, kernel by kernel (perflab.train.step.a_layer_adds): its forward GEMM and the bias +
# sigmoid pass after it (every GEMM the predictor composes, cuBLAS's and wgmma's, adds the bias in a pass of its
# own), the dW and input-gradient GEMMs, sigmoid_backward_rows
HIDDEN_LAYER_LAUNCHES = sum(trainstep.a_layer_adds().values())


def update_width(hidden: tuple, D: int = 784, C: int = 10) -> float:
    """The one-hidden-layer width with as many parameters as the net: the update, one pass over the
    parameters and the gradient, is read from the grid there (the net's own width for one layer)."""
    return width_with_params(perfmodel.Workload(layers=(D, *hidden, C)).num_params, D, C)


def width_with_params(params: float, D: int = 784, C: int = 10) -> float:
    """The width H of the 784-H-10 net with `params` parameters: H (D + 1 + C) + C of them."""
    return (params - C) / (D + 1 + C)


def params_of_width(H: float, D: int = 784, C: int = 10) -> float:
    """The parameters of the 784-H-10 net (width_with_params' inverse), counted as the workload counts them."""
    return perfmodel.Workload(layers=(D, H, C)).num_params


def gpu_update(c: Ceilings, width: float, B: float, dtype: str = "float32", ranks: int = 1) -> float:
    """Seconds of the GPU update over the parameters of 784-width-10 (update_width: a net's as many): the
    ceilings' `SGD + L2 update` there, but never less than its bytes take at the device's copy rate
    (trainstep.update_bytes, for the step's precision `dtype`: a half step's update also writes P's 16-bit copy). Timed
    alone, an update of tens of MB runs again from the L2, which in a step the other kernels' data holds; past the
    grid's widest net, the log-log line carries that on (docs/DECISIONS.md, D84). The time alone where the file has
    no device copy rate."""
    seconds = c.kernel("gpu", UPDATE, width, B)
    copy = c.rows("device_copy", device="gpu")
    if not len(copy):
        return seconds
    nbytes = trainstep.update_bytes(dtype, ranks=ranks) * params_of_width(width)
    return max(seconds, nbytes / float(copy.value.iloc[0]))


def gpu_deeper(c: Ceilings, hidden: tuple, Bl: float, gemm: str, eager: bool, dtype: str = "float32",
               ranks: int = 1) -> float:
    """Seconds a deeper net's step adds on the GPU to the one-hidden-layer step at its first width:
    each hidden layer past the first (`hidden layer (<gemm>)`, timed for H over H, read at the
    geometric mean of its two widths: a GEMM's work is their product), the output layer's kernels at
    the last width instead of the first, and the update over all parameters instead of one layer's.
    0 for one hidden layer."""
    if len(hidden) == 1:
        return 0.0
    name = hidden_layer_name(gemm, eager=True)
    name = name if eager and len(c.rows("step_kernel", device="gpu", impl=name)) else hidden_layer_name(gemm)
    added = sum(c.kernel("gpu", name, math.sqrt(a * b), Bl) for a, b in zip(hidden, hidden[1:]))
    first, top = hidden[0], hidden[-1]
    if gemm in HALF_IMPLS.values() and top != first:
        raise PredictionError(f"the predictor composes half-precision nets whose hidden layers are one width (its step "
                              f"is timed whole, not kernel by kernel), so far; got {'-'.join(map(str, hidden))}")
    if gemm not in HALF_IMPLS.values():
        output = [k.name for k in one_layer(gemm) if k.layer == 2]  # the output layer's kernels
        added += sum(c.kernel("gpu", k, top, Bl) - c.kernel("gpu", k, first, Bl) for k in output)
    return added + gpu_update(c, update_width(hidden), Bl, dtype, ranks) - gpu_update(c, first, Bl, dtype, ranks)


def wfbp_sends(hidden: tuple, C: int = perfmodel.C_MNIST) -> list[int]:
    """Bytes of each all-reduce --overlap sends before dW1's chunks on a deeper net, in order: once the
    top hidden layer's dW is done its W and b with the output layer's and the loss slot, then each
    layer below it (down to the second) with its own (FusedGPU.send_layer)."""
    sizes = [4 * (a * b + a) for b, a in zip(hidden, hidden[1:])]  # W_l (H_l x H_l-1) and b_l, l = 2..L
    sizes[-1] += 4 * (C * hidden[-1] + C + 1)
    return sizes[::-1]


def wfbp_exposed(c: Ceilings, hidden: tuple, Bl: float, p: int, in_graph: bool) -> float:
    """Seconds --overlap's layer-by-layer exchange (WFBP) adds on a deeper net over one hidden layer's
    overlap_exchange: the upper layers' all-reduces (wfbp_sends, NCCL's, in_graph where the step's graph
    holds them, one after another on the side stream) run under the backward pass below the first of them: the top layer's input
    gradient and sigmoid' (a third of its `hidden layer` time, one of its three equal GEMMs) and each
    lower layer's weight and input gradients (two thirds). What they do not cover delays the chunked
    dW1 exchange that follows them on that stream."""
    comm = sum(c.nccl_exchange(p, nbytes, in_graph)[0] for nbytes in wfbp_sends(hidden))
    layers = [c.kernel("gpu", hidden_layer_name("cublas"), math.sqrt(a * b), Bl) for a, b in zip(hidden, hidden[1:])]
    return max(0.0, comm - layers[-1] / 3 - sum(2 * t / 3 for t in layers[:-1]))


def cpu_deeper(c: Ceilings, hidden: tuple, Bl: float) -> float:
    """Seconds a deeper net's step adds on the CPU to the one-hidden-layer step at its first width:
    for each hidden layer past the first, what the reference's 784-H-H-10 took over its 784-H-10 (the
    ceilings' `<part>, two hidden layers`), at the geometric mean of the layer's two widths."""
    return sum(max(c.kernel("cpu", k + CPU_DEEP_SUFFIX, H, Bl) - c.kernel("cpu", k, H, Bl), 0.0)
               for H in (math.sqrt(a * b) for a, b in zip(hidden, hidden[1:])) for k in CPU_STEP)


def launch_name(point: dict) -> str:
    """How the point's step launched, as sweeps name it (`graph`, `eager`; the CPU's always eager)."""
    return "graph" if point.get("backend") != "numpy" and launched_as_graph(point) else "eager"


def ran_epoch_graphs(point: dict) -> bool:
    """Whether fit ran (or runs) the point's epochs as one CUDA graph each (FusedGPU.graphs_an_epoch):
    the sweep row's epoch_graph, else what the trainer does now: on GPUs, data resident, steps
    graphed (a sweep's batches come in order; resident exchanges through NCCL, which a graph holds).
    Rows from before the column go through as_measured, which says what the trainer then did."""
    ran = point.get("epoch_graph")
    if ran is not None and not (isinstance(ran, float) and math.isnan(ran)):
        return bool(ran)
    return point["backend"] != "numpy" and point.get("mode") == "resident" and launched_as_graph(point)


def launched_as_graph(point: dict) -> bool:
    """Whether the point's step was a CUDA graph replay (a row without the column: the default, a graph)."""
    graphs = point.get("graphs", True)
    return True if graphs is None or (isinstance(graphs, float) and math.isnan(graphs)) else bool(graphs)


# the fused model-parallel step on several GPUs: the output layer unfused around the logits' all-reduce
MODEL_PARALLEL_STEP = trainstep.names(one_layer(fuse_output=False))


def model_parallel_kernels(hidden: tuple, p: int) -> tuple[list[tuple[str, float]], list[int]]:
    """A rank's kernels in perflab.train.gpu.FusedModelParallel's step on p GPUs, each (ceilings name, the
    width it is read at), and the elements of each all-reduce (times the whole batch): the layers split
    as parallel.layer_splits says. The first layer's GEMMs and bias + sigmoid on its H1/p rows; each
    hidden layer past the first as `hidden layer (cublas)` at the width whose square is its GEMMs' share
    (h_l h_l-1 / p); the output layer unfused on the top layer's shard where it is split (by columns,
    its C logits all-reduced), else fused and whole; the update over the rank's parameters. A column-split
    hidden layer all-reduces its output before its bias, a row-split one (past the first) its input
    gradient. At one hidden layer: MODEL_PARALLEL_STEP at H/p and the logits."""
    from perflab.train.parallel import layer_splits
    splits, top, C = layer_splits(len(hidden) + 1), hidden[-1], perfmodel.C_MNIST
    split_output, fused = one_layer(fuse_output=False), one_layer()
    kernels = [(k.name, hidden[0] / p) for k in split_output if k.layer == 1 and k.phase == "forward"]
    exchanged = []
    for l in range(1, len(hidden)):
        kernels.append((hidden_layer_name("cublas"), math.sqrt(hidden[l] * hidden[l - 1] / p)))
        exchanged.append(hidden[l] if splits[l] == "columns" else hidden[l - 1])
    if splits[-1] == "columns":
        kernels += [(k.name, top / p) for k in split_output if k.layer == 2]
        exchanged.append(C)
    else:
        kernels += [(k.name, top) for k in fused if k.layer == 2]
    layers = (perfmodel.D_MNIST, *hidden, C)
    shards = [a * b / p + (a / p if kind == "rows" else a) if kind != "whole" else a * b + a
              for b, a, kind in zip(layers, layers[1:], splits)]  # W_l (a x b) and b_l, the rank's part of each
    return kernels + [(DW1_GEMM, hidden[0] / p), (UPDATE, width_with_params(sum(shards)))], exchanged


def model_parallel_batch(hidden: tuple, B: int, p: int, c: Ceilings, terms: dict, graph: bool) -> dict:
    """perflab.train.gpu.FusedModelParallel's step on several GPUs, any depth (model_parallel_kernels):
    every rank the whole batch, its all-reduces by NCCL inside the step; the whole step one CUDA graph
    (`graph`, the sweep's step_graph), or every kernel launched by the host one by one (points measured
    before NCCL was captured)."""
    kernels, exchanged = model_parallel_kernels(hidden, p)
    terms["kernels"] = sum(gpu_update(c, width, B) if k == UPDATE else c.kernel("gpu", k, width, B) for k, width in kernels)
    terms["exchange"] = 0.0
    for n in exchanged:
        seconds, nccl = c.nccl_exchange(p, n * B * 4, graph)
        terms["exchange"] += seconds
    what = "the logits" if len(hidden) == 1 else f"{len(exchanged)} activations and gradients"
    if graph:
        terms["host"] = c.floor("trainer resident")
        how = "the host floor of a graph replay"
    else:  # a launch a kernel (a hidden layer's HIDDEN_LAYER_LAUNCHES) and one an all-reduce
        hidden_layers = len(hidden) - 1
        launches = len(kernels) + (HIDDEN_LAYER_LAUNCHES - 1) * hidden_layers + len(exchanged)
        terms["host"] = c.floor("trainer resident") + launches * c.launch()
        how = "host floor + eager launches"
    batch = max(terms["kernels"] + terms["exchange"], terms["host"])
    return {"batch_s": batch, "composition": f"max(kernels + {nccl} of {what}, {how})",
            **{f"t_{k}": v for k, v in terms.items()}}


def pipeline_end(ready: list[float], stages: list[list[float]], free: list[float] | None = None) -> float:
    """When the last piece leaves the last stage of a pipeline: piece j enters at ready[j]; stage s
    takes stages[s][j], serves one piece at a time, in order (a stream, or the host's MPI), and is
    free from free[s] on (default 0)."""
    done = list(free or [0.0] * len(stages))
    for j, start in enumerate(ready):
        for s, times in enumerate(stages):
            start = done[s] = max(start, done[s]) + times[j]
    return start


def batch_result(batch: float, composition: str, terms: dict, band: dict | None = None) -> dict:
    """A composer's answer: the batch's seconds, how its terms composed, its band (where it has one), each term."""
    return {"batch_s": batch, "composition": composition, **(band or {}), **{f"t_{k}": v for k, v in terms.items()}}


@dataclass
class Step:
    """One batch a composer puts together: the point, its net, batch and ranks, the GEMM its kernels are timed
    with (a half-precision step's own), the ceilings read, and the terms as they are composed."""
    point: dict
    c: Ceilings
    B: int
    hidden: tuple
    p: int
    gemm: str
    terms: dict = field(default_factory=dict)

    @property
    def H(self) -> int:
        return self.hidden[0]

    @property
    def Bl(self) -> float:
        return self.B / self.p

    @property
    def gradient(self) -> int:
        return perfmodel.gradient_buffer_bytes(self.hidden)

    @cached_property
    def dtype(self) -> str:
        """The step's precision (a half step's gradient and update stay FP32, but its update also rounds P); the
        point's spec parsed once a step, not at each of the update's reads."""
        return spec_of(self.point).dtype

    @property
    def graphed(self) -> bool:
        return launched_as_graph(self.point)


def cpu_data(s: Step) -> dict:
    """The NumPy reference data parallel: each rank's step on its B/p samples, then the gradient's MPI all-reduce."""
    c, terms = s.c, s.terms
    terms["kernels"] = sum(c.kernel("cpu", k, s.H, s.Bl) for k in CPU_STEP) + cpu_deeper(c, s.hidden, s.Bl)
    terms["exchange"] = c.allreduce("mpi_allreduce", s.p, s.gradient) if s.p > 1 else 0.0
    return batch_result(terms["kernels"] + terms["exchange"], "kernels + MPI all-reduce (serial)", terms)


def cpu_model(s: Step) -> dict:
    """The NumPy reference model parallel: a rank holds H/p hidden units of the whole batch; the C x B logits
    all-reduced by MPI."""
    c, terms = s.c, s.terms
    terms["kernels"] = sum(c.kernel("cpu", k, s.H / s.p, s.B) for k in CPU_STEP)
    terms["exchange"] = c.allreduce("mpi_allreduce", s.p, perfmodel.C_MNIST * s.B * 4)
    return batch_result(terms["kernels"] + terms["exchange"], "kernels + MPI all-reduce (serial)", terms)


def gpu_kernels(s: Step) -> tuple[float, float, tuple | None]:
    """The data-parallel GPU step's kernels term (s.terms["kernels"]: the one-layer step, timed in sequence where
    the file has it, plus what a deeper net adds), and (the update's seconds, the host's launches of the hidden
    layers past the first where the step is launched kernel by kernel, the host floor's spread or None)."""
    c, terms, eager = s.c, s.terms, not s.graphed
    # where the step's kernels are timed alone, its update too is read as gpu_update reads a deeper net's
    terms["kernels"] = sum(gpu_update(c, s.H, s.Bl, s.dtype, s.p) if k == UPDATE else c.kernel("gpu", k, s.H, s.Bl)
                           for k in c.step_names("cupy", s.gemm, eager=eager))
    terms["kernels"] += gpu_deeper(c, s.hidden, s.Bl, s.gemm, eager=eager, dtype=s.dtype, ranks=s.p)
    update = gpu_update(c, update_width(s.hidden), s.Bl, s.dtype, s.p)
    # a step launched kernel by kernel: each hidden layer past the first launches its four kernels
    deeper_launches = HIDDEN_LAYER_LAUNCHES * (len(s.hidden) - 1) * c.launch() if eager else 0.0
    mode = s.point["mode"]
    floor_spread = c.trainer_floor_spread(mode, s.graphed, s.gemm) if mode != "pipelined" else None
    return update, deeper_launches, floor_spread


def resident(s: Step, exchange) -> dict:
    """The data-resident step on GPUs: the kernels and the exchange against the trainer's host floor and launches
    (max). `exchange(s, update)` sets s.terms["exchange"] and names it (None: nothing exchanged). A step launched
    kernel by kernel has a band at the host floor's and the kernels' two ends."""
    c, terms, gemm = s.c, s.terms, s.gemm
    update, deeper_launches, floor_spread = gpu_kernels(s)
    # on several GPUs, a graph a step: the all-reduce and the update launch one by one after it
    launches = (2 * c.launch() if s.p > 1 and not ran_epoch_graphs(s.point) else 0.0) + deeper_launches
    terms["host"] = c.trainer_floor("resident", s.graphed, gemm) + launches
    name = exchange(s, update)
    batch = max(terms["kernels"] + terms["exchange"], terms["host"])
    composition = (f"max(kernels + {name}, the trainer's host floor + launches)" if name
                   else "max(kernels, the trainer's host floor)")
    band = {}
    if not s.graphed:  # launched kernel by kernel: the batch at the host floor's and the kernels' two ends
        floors = floor_spread or (terms["host"] - launches,) * 2
        floors = c.envelope(("host", "resident", gemm, floors), lambda b: b.trainer_floor("resident", False, gemm),
                            floors)
        kernels = c.kernel_spread(terms["kernels"], gemm, eager=True)
        band = {f"batch_{end}_s": max(k + terms["exchange"], floor + launches)
                for end, floor, k in zip(("low", "high"), floors, kernels)}
    return batch_result(batch, composition, terms, band)


def no_exchange(s: Step, update: float) -> None:
    """One GPU exchanges nothing."""
    s.terms["exchange"] = 0.0


def nccl_exchange(s: Step, update: float) -> str:
    """NCCL's all-reduce of the gradient, inside the epoch's graph where fit runs an epoch as one."""
    s.terms["exchange"], name = s.c.nccl_exchange(s.p, s.gradient, ran_epoch_graphs(s.point))
    return name


def p2p_exchange(s: Step, update: float) -> str:
    """--comm p2p: the update is the exchange's kernel, so it leaves the kernels' sum."""
    s.terms["kernels"] -= update
    s.terms["exchange"] = s.c.p2p_exchange(s.p, s.gradient, bf16=s.point.get("dtype") == "bfloat16")
    return "p2p exchange + update"


def overlap_exchange(s: Step, update: float) -> str:
    """--overlap: GEMM 3 and the exchange timed at once, so GEMM 3 leaves the kernels' sum; on a deeper net the
    layers above the first are sent as their dW is done (WFBP), and what the backward pass leaves of them shows."""
    if s.gemm != "cublas":
        raise PredictionError(f"--overlap is timed with cuBLAS's GEMM 3 (overlap_exchange); got --gemm {s.gemm}")
    terms = s.terms
    terms["kernels"] -= s.c.kernel("gpu", DW1_GEMM, s.H, s.Bl)
    terms["exchange"] = s.c.overlap_exchange(s.p, s.H, s.Bl, OVERLAP_CHUNKS)  # what sweeps and the harness run
    name = "backward GEMM 3 in chunks, each all-reduced under the next (overlap_exchange)"
    if len(s.hidden) > 1:
        terms["wfbp_exposed"] = wfbp_exposed(s.c, s.hidden, s.Bl, s.p, s.graphed)
        terms["exchange"] += terms["wfbp_exposed"]
        name += " + what of the upper layers' all-reduces the backward below them leaves out"
    return name


def copy_under_graph(c: Ceilings, Bl: float, images: float, host: float, exchange: float, kernels: float) -> float:
    """One GPU, graphed: the host copies batch k+1 into the driver's staging while the GPU replays batch k's graph,
    until the staging fills: the part measured to run so (staged_overlap) is off the sum."""
    return images + kernels - min(c.staged_hidden(Bl, kernels), images) + host


def whole_copy_under_graph(c: Ceilings, Bl: float, images: float, host: float, exchange: float, kernels: float) -> float:
    """One GPU, graphed, a ceilings file without staged_overlap: the whole copy under the graph."""
    return max(images, kernels) + host


def copy_behind_launches(c: Ceilings, Bl: float, images: float, host: float, exchange: float, kernels: float) -> float:
    """One GPU, launched kernel by kernel: once the host has launched the step, it copies batch k+1 into the
    driver's staging while the GPU runs what is left of step k (kernels - host floor)."""
    return images + max(kernels, host) - min(c.staged_hidden(Bl, max(kernels - host, 0.0)), images)


def in_series(c: Ceilings, Bl: float, images: float, host: float, exchange: float, kernels: float) -> float:
    """The copy, the step (kernels or the host's floor) and the exchange one after another."""
    return images + max(kernels, host) + exchange


SERIAL = "images + max(kernels, the trainer's host floor) + exchange (serial)"


def staged_alone(s: Step) -> dict:
    """The staged step on one GPU: the next batch's copy runs under the step where the ceilings measured it so."""
    c, terms, Bl = s.c, s.terms, s.Bl
    spreads = staged_terms(s)
    under = c.staged_hidden(Bl, terms["kernels"]) if s.graphed else None
    if under is not None:
        terms["hidden"] = under
        return staged_batch(s, spreads, copy_under_graph, "images + kernels - the copy under the graph "
                            "(staged_overlap) + the trainer's host floor")
    if s.graphed:
        return staged_batch(s, spreads, whole_copy_under_graph,
                            "max(images, kernels) + the trainer's host floor (the next copy under the graph)")
    if len(c.rows("staged_overlap")):
        terms["hidden"] = c.staged_hidden(Bl, max(terms["kernels"] - terms["host"], 0.0))
        # the band's top credits none of the copy under the kernels: it moved between boots (docs/DECISIONS.md, D26)
        return staged_batch(s, spreads, copy_behind_launches, "images + max(kernels, the trainer's host floor) - the "
                            "copy under the kernels left after the launches (staged_overlap)", compose_high=in_series)
    return staged_batch(s, spreads, in_series, SERIAL)


def staged_mpi(s: Step) -> dict:
    """The staged step on several GPUs: the exchange through the host keeps the copy out of the step (serial)."""
    return staged_batch(s, staged_terms(s), in_series, SERIAL)


def staged_terms(s: Step) -> tuple:
    """The staged step's terms but its copy's overlap: kernels, the trainer's host floor (and a deeper net's eager
    launches), the pageable copy of the batch, the exchange through the host; (deeper launches, the floor's spread)."""
    c, terms = s.c, s.terms
    _, deeper_launches, floor_spread = gpu_kernels(s)
    terms["host"] = c.trainer_floor("staged", s.graphed, s.gemm) + deeper_launches
    terms["images"] = c.staged_images(s.Bl)
    terms["exchange"] = c.staged_exchange(s.p, s.gradient) if s.p > 1 else 0.0
    return deeper_launches, floor_spread


def staged_batch(s: Step, spreads: tuple, compose, composition: str, compose_high=None) -> dict:
    """The staged batch composed by compose(c, B', images, host, exchange, kernels), and its band: the same at the
    two ends of the copy's, the host floor's, the exchange's and the kernels' spreads (each over the machine's
    boots), where any has one; compose_high for the top where it differs."""
    c, terms, Bl, p, gemm, graphed = s.c, s.terms, s.Bl, s.p, s.gemm, s.graphed
    deeper_launches, floor_spread = spreads
    batch = compose(c, Bl, terms["images"], terms["host"], terms["exchange"], terms["kernels"])
    copies = c.envelope(("images", Bl), lambda b: b.staged_images(Bl), c.staged_images_spread(Bl) or (terms["images"],) * 2)
    hosts = c.envelope(("host", "staged", graphed, gemm, deeper_launches),
                       lambda b: b.trainer_floor("staged", graphed, gemm) + deeper_launches,
                       tuple(h + deeper_launches for h in floor_spread) if floor_spread else (terms["host"],) * 2)
    exchanges = (c.allreduce_spread("staged_allreduce", p, s.gradient) if p > 1 else None) or (terms["exchange"],) * 2
    if p > 1:
        exchanges = c.exchange_envelope(p, s.gradient, exchanges)
    ends = (copies, hosts, exchanges, c.kernel_spread(terms["kernels"], gemm, not graphed))
    band = {}
    if any(len({*pair}) > 1 for pair in ends):  # the batch at the spreads' two ends
        low, high = zip(*ends)
        band = {"batch_low_s": compose(c, Bl, *low), "batch_high_s": (compose_high or compose)(c, Bl, *high)}
    return batch_result(batch, composition, terms, band)


def model_parallel(s: Step) -> dict:
    """perflab.train.gpu.FusedModelParallel on several GPUs (model_parallel_batch)."""
    return model_parallel_batch(s.hidden, s.B, s.p, s.c, s.terms, graph=bool(s.point.get("step_graph", False)))


def pipelined_alone(s: Step) -> dict:
    """perflab.train.pipelined on one GPU: the whole step a graph (or eager), as resident, its input (pinned) copied
    on a stream of its own under the step before."""
    gpu_kernels(s)
    c, terms = s.c, s.terms
    terms["images"] = pinned_images(c, s.Bl)
    terms["host"] = c.trainer_floor("resident", s.graphed)
    batch = max(terms["kernels"], terms["images"], terms["host"])
    return batch_result(batch, "max(kernels, pinned images under the step, the host floor)", terms)


def pipelined_mpi(s: Step) -> dict:
    """perflab.train.pipelined's step on several GPUs: the next batch's images (pinned) copy on their own stream
    under compute; G's tail, then each of `chunks` dW1 row blocks as backward GEMM 3 makes it, flows device -> host
    -> MPI -> host -> device (pinned copies, host MPI, each one piece at a time; the host reaches its MPI loop only
    once it has launched the step: one graph replay up to the pieces' copies down, or, in rows from before that
    (graphs False), the whole step kernel by kernel) and the update waits for the last. The step is the longest of:
    that chain, the host -> device link's load (images + gradients up), and the device -> host link's."""
    update = gpu_kernels(s)[0]
    c, terms, Bl, D = s.c, s.terms, s.Bl, perfmodel.D_MNIST
    chunks = int(s.point.get("chunks", PIPELINED_CHUNKS))
    terms["images"] = pinned_images(c, Bl)
    sizes = perfmodel.gradient_pieces(s.hidden, chunks, D)
    chunk_gemm = [c.kernel("gpu", DW1_GEMM, n / (4 * D), Bl) for n in sizes[1:]]
    before = terms["kernels"] - c.kernel("gpu", DW1_GEMM, s.H, Bl) - update
    ready = [before] + [before + float(t) for t in np.cumsum(chunk_gemm)]
    down = [c.copy("d2h", "pinned", n) for n in sizes]
    mpi = [c.piece_allreduce(s.p, n) for n in sizes]
    up = [c.copy("h2d", "pinned", n) for n in sizes]
    if s.graphed:  # the step up to the pieces' copies down one graph: the host replays it and polls the pieces
        terms["host"] = c.trainer_floor("resident", True)
    else:  # an eager step, GEMM 3 in chunks
        terms["host"] = c.trainer_floor("staged", False) + (chunks - 1) * c.launch()
    terms["kernels"] = ready[-1] + update
    terms["exchange"] = pipeline_end(ready, [down, mpi, up], free=[0.0, terms["host"], 0.0]) - ready[-1]
    terms["mpi"] = sum(mpi)
    batch = max(terms["kernels"] + terms["exchange"], terms["images"] + sum(up), sum(down))
    return batch_result(batch, "max(compute, then the exposed tail of the down/MPI/up pipeline of gradient pieces; "
                               "host->device load; device->host load)", terms)


def pinned_images(c: Ceilings, Bl: float) -> float:
    """A rank's batch of images and labels copied host -> device from pinned memory."""
    return c.copy("h2d", "pinned", (perfmodel.D_MNIST * 4 + 8) * Bl)


# the composer of each (backend, parallel, mode, exchange) the predictor covers (route: a point's key; one rank,
# or a model-parallel point on one, runs the data-parallel step and exchanges nothing)
COMPOSERS = {
    ("numpy", "data", "resident", "none"): cpu_data,
    ("numpy", "data", "resident", "mpi"): cpu_data,
    ("numpy", "model", "resident", "mpi"): cpu_model,
    ("cupy", "data", "resident", "none"): partial(resident, exchange=no_exchange),
    ("cupy", "data", "resident", "nccl"): partial(resident, exchange=nccl_exchange),
    ("cupy", "data", "resident", "p2p"): partial(resident, exchange=p2p_exchange),
    ("cupy", "data", "resident", "overlap"): partial(resident, exchange=overlap_exchange),
    ("cupy", "data", "staged", "none"): staged_alone,
    ("cupy", "data", "staged", "mpi"): staged_mpi,
    ("cupy", "data", "pipelined", "none"): pipelined_alone,
    ("cupy", "data", "pipelined", "mpi"): pipelined_mpi,
    ("cupy", "model", "resident", "nccl"): model_parallel,
}


def spec_of(point: dict) -> RunSpec:
    """The point as a run spec (RunSpec.from_point), what an older row leaves blank at its default."""
    given = {k: v for k, v in point.items() if v is not None and not (isinstance(v, float) and math.isnan(v))}
    return RunSpec.from_point({"parallel": "data", "mode": "resident", "gemm": "cublas", "dtype": "float32", **given})


def route(spec: RunSpec, p: int) -> tuple:
    """The point's key in COMPOSERS: (backend, parallel, mode, exchange). One rank runs the data-parallel step and
    exchanges nothing (`none`); on the CPU and in the staged modes the exchange is the host's MPI, whatever the row
    names (the scaling harness names its staged rows' NCCL)."""
    parallel = "model" if spec.parallel == "model" and p > 1 else "data"
    if not spec.gpu:
        return "numpy", parallel, "resident", "mpi" if p > 1 else "none"
    exchange = "none" if p == 1 else "mpi" if spec.mode in HOST_STAGED else spec.exchange
    return "cupy", parallel, spec.mode, exchange


def uncovered(key: tuple) -> str:
    """Why a key has no composer: the exchanges the predictor composes for its backend, parallel and mode."""
    backend, parallel, mode, exchange = key
    known = [k[3] for k in COMPOSERS if k[:3] == key[:3] and k[3] != "none"]
    return (f"the predictor composes --backend {backend} --parallel {parallel} --mode {mode} on several ranks with "
            f"--comm {' or '.join(known) or 'none'} so far; got --comm {exchange}")


def covered_gemm(point: dict, spec: RunSpec, hidden: tuple) -> str:
    """The GEMM whose ceilings time the point's step (a half-precision step's own); a point whose net, precision,
    GEMM or path the predictor does not compose is refused, naming what it composes."""
    backend, parallel, gemm, dtype, mode = spec.backend, spec.parallel, spec.gemm, spec.dtype, spec.mode
    if len(hidden) > 1 and parallel == "model" and backend == "numpy":
        raise PredictionError(f"the predictor composes deeper nets ({point['H']}) model parallel on GPUs, so far; got "
                              "NumPy")
    tensor_cores = gemm in TENSOR_CORE_STEPS and backend == "cupy" and parallel == "data" and mode in ("resident", "staged")
    if dtype in HALF_IMPLS:  # mixed precision: the fused step on cuBLAS's half GEMMs, resident data parallel on GPUs
        if (backend, mode, parallel, gemm) != ("cupy", "resident", "data", "cublas") \
                or spec.exchange in ("nccl-half", "overlap") or (dtype == "float16" and spec.exchange == "p2p"):
            raise PredictionError(f"the predictor composes {dtype} steps on GPUs, resident data parallel with cuBLAS's "
                                  f"GEMMs and NCCL's FP32 exchange or p2p's (BF16 copies in a bfloat16 run), "
                                  f"so far; got {parallel} {gemm} on {backend} {mode} {spec.exchange}")
        gemm, dtype = HALF_IMPLS[dtype], "float32"  # its gradient and update are FP32's (p2p_exchange says its exchange)
    if dtype != "float32" or (gemm != "cublas" and not tensor_cores and gemm not in HALF_IMPLS.values()) \
            or (parallel == "model" and backend != "numpy" and mode != "resident"):
        raise PredictionError("the predictor covers float32 points with cuBLAS GEMMs, data parallel (and model parallel "
                              "on NumPy, or resident on GPUs), and the wgmma and x3tf32 GEMMs data parallel, resident "
                              f"or staged, so far; got {parallel} {spec.dtype} {gemm} on {backend} {mode}")
    return gemm


def predict_batch(point: dict, B: int, c: Ceilings) -> dict:
    """Seconds of one batch of B samples (over the point's ranks) and its terms, from ceilings alone: composed by
    the composer of the point's key (route) in COMPOSERS; a key not there is refused, naming what is covered."""
    spec, hidden, p = spec_of(point), perfmodel.widths(point["H"]), int(point["p"])
    gemm = covered_gemm(point, spec, hidden)
    key = route(spec, p)
    if key not in COMPOSERS:
        raise PredictionError(uncovered(key))
    return COMPOSERS[key](Step(point, c, B, hidden, p, gemm))


def predict_point(point: dict, c: Ceilings) -> dict:
    """Seconds per epoch of one sweep point and per batch averaged over the epoch (its last batch
    holds N mod B samples when B does not divide N), with the full batch's terms; under --comm auto, the
    exchange the trainer would keep (predict_auto)."""
    if spec_of(point).exchange == "auto":
        return predict_auto(point, c)[1]
    B, N = int(point["B"]), int(point["N"])
    full, rest = divmod(N, B)
    pred = predict_batch(point, B, c)
    last = predict_batch(point, rest, c) if rest else {}
    # the epoch's steps, and where the prediction has a band (the staged copy's and the host floor's spread), its two ends
    steps = {k: full * pred[k] + last.get(k, last.get("batch_s", 0.0))
             for k in ("batch_s", "batch_low_s", "batch_high_s") if k in pred}
    stretch = c.epoch_stretch() if ran_epoch_graphs(point) else None
    if stretch is not None:  # one CUDA graph an epoch: fit's epoch is its graph stretched, measured at real sizes
        epochs = {k: v * stretch for k, v in steps.items()}
        pred["t_epoch_fixed"] = epochs["batch_s"] - steps["batch_s"]
    else:
        fixed = 0.0
        if point["backend"] != "numpy":  # the trainer's cost per epoch (its synchronizations, the loss), where
            # measured: the same code ends both modes' epochs; the staged difference of two epoch lengths is too
            # noisy to use (docs/DECISIONS.md, D24)
            fixed = pred["t_epoch_fixed"] = c.optional_floor("trainer resident epoch")
        epochs = {k: v + fixed for k, v in steps.items()}
    per_batch = {k: v / (full + bool(rest)) for k, v in epochs.items()}
    return {**pred, "full_batch_s": pred["batch_s"], **per_batch, "epoch_s": epochs["batch_s"]}


def predict_auto(point: dict, c: Ceilings) -> tuple[str, dict]:
    """--comm auto as the trainer runs it (perflab.train.runner.fastest_exchange): where several GPUs
    run resident data parallel, the fastest of GPU_EXCHANGES, each with predict_point (NCCL always;
    the overlap and p2p where the ceilings can predict them: timed at p ranks, and the overlap with
    cuBLAS's GEMM 3); elsewhere the one exchange there is. (the exchange kept, its prediction)"""
    spec = spec_of(point)
    gpu_resident = spec.gpu and spec.mode == "resident"
    if not (gpu_resident and spec.parallel == "data" and int(point["p"]) > 1):
        only = "nccl" if gpu_resident else "mpi"
        return only, predict_point({**point, "comm": only}, c)
    preds = {"nccl": predict_point({**point, "comm": "nccl"}, c)}
    for x in GPU_EXCHANGES:
        if x not in preds:
            with contextlib.suppress(PredictionError):
                preds[x] = predict_point({**point, "comm": x}, c)
    kept = min(preds, key=lambda x: preds[x]["epoch_s"])
    return kept, preds[kept]


def band_ms(pred: dict) -> dict:
    """A prediction's band in ms per batch (the staged copy's and the eager host floor's spreads),
    where it has one."""
    return {f"{end}_ms": 1e3 * pred[f"batch_{end}_s"] for end in ("low", "high") if f"batch_{end}_s" in pred}


def measured_batch_seconds(row) -> float:
    """The unprofiled epoch's median over its batches: what a user's epoch costs per batch."""
    return float(row["epoch_seconds"]) / int(row["batches"])


def ceilings_for(folder: Path, p: int) -> Path | None:
    """The ceilings file of a machine folder that covers p ranks: ceilings_p<p>, else the
    smallest larger one (its single-GPU rows are the same; its all-reduce is at its own p)."""
    files = sorted(Path(folder).glob("ceilings_p*.csv"), key=lambda f: int(f.stem.split("_p")[1]))
    exact = [f for f in files if int(f.stem.split("_p")[1]) == p]
    larger = [f for f in files if int(f.stem.split("_p")[1]) >= p]
    return (exact or larger or [None])[0]


BOOTS: dict = {}  # (machine folder, its ceilings files) -> those files loaded, once a process
BOOT_PERCENTILES = (5, 95)  # a host-paced band spans these of the machine's boots (docs/DECISIONS.md, D21)


def machine_ceilings(path: Path) -> list[Ceilings]:
    """Every readable ceilings file of the machine folder holding path (a committed machine's folder, or a run's
    under runs/, with its sub-folders; elsewhere path's own folder), each without boots of its own."""
    folder = next((f for f in path.resolve().parents if f.parent.name in ("results", "runs")), path.resolve().parent)
    key = (folder, tuple(sorted(folder.rglob("ceilings_p*.csv"))))  # a file measured since is read too
    if key not in BOOTS:
        BOOTS[key] = []
        for f in key[1]:
            with contextlib.suppress(PredictionError):
                BOOTS[key].append(Ceilings.load(f, boots=False))
    return BOOTS[key]


def loader():
    """Ceilings.load that reads each file once per call site (a sweep has one or two files; validate_folder
    shares one over the folder's sweeps, so each file's look-ups are made once)."""
    loaded = {}
    return lambda path: loaded.get(path) or loaded.setdefault(path, Ceilings.load(path))


def as_measured(row) -> dict:
    """A sweep row as a point, saying how its step launched where the row predates the column: a
    staged row from before the staged step was graphed (bd32702) ran kernel by kernel, and so did a
    pipelined one on several GPUs; a row from before epoch_graph ran an epoch as one graph on one GPU
    only (resident, graphed)."""
    point = row.to_dict()
    several = int(point["p"]) > 1
    if (point.get("mode") == "staged" or (point.get("mode") == "pipelined" and several)) \
            and pd.isna(point.get("graphs", np.nan)):
        point["graphs"] = False
    if pd.isna(point.get("epoch_graph", np.nan)):
        point["epoch_graph"] = point["backend"] != "numpy" and point.get("mode") == "resident" \
            and launched_as_graph(point) and not several
    return point


def validate(points: pd.DataFrame, folder: Path, choose=None, load=None) -> pd.DataFrame:
    """Predicted against measured per point, each with the ceilings file it used (`choose(folder, p)`,
    default ceilings_for: a file, or files in order of preference, the first that can predict the
    point used); points the predictor does not cover, or whose ceilings are missing, say why in
    `skipped` (the first file's reason). `load`: a loader() shared with other sweeps of the folder."""
    rows, load = [], load or loader()
    choose = cache(choose or ceilings_for)  # each rank count's files found once a call
    for _, r in points.iterrows():
        point = as_measured(r)
        base = {k: point[k] for k in ("H", "B", "p", "backend", "mode", "parallel", "gemm", "dtype", "graphs") if k in point}
        measured = measured_batch_seconds(point)
        chosen = choose(folder, int(point["p"]))
        paths = [chosen] if isinstance(chosen, Path) else list(chosen or [])
        if not paths:
            rows.append({**base, "measured_ms": 1e3 * measured, "skipped": f"no ceilings file in {folder}"})
            continue
        pred, refusals = None, []
        for path in paths:
            try:
                if point["backend"] == "cupy" and point.get("parallel") == "model" \
                        and point.get("trainer") != "FusedModelParallel":
                    raise PredictionError("a GPU model-parallel point measured by the generic trainer (before the fused "
                                          "one, perflab.train.gpu.FusedModelParallel): not the step the predictor composes")
                pred = predict_point(point, load(path))
                break
            except PredictionError as exc:
                refusals.append(str(exc))
        name = str(Path(path if pred is not None else paths[0]).relative_to(folder))  # a subfolder's file: from the folder
        if pred is None:
            rows.append({**base, "measured_ms": 1e3 * measured, "skipped": refusals[0], "ceilings": name})
            continue
        band = {f"predicted_{k}": v for k, v in band_ms(pred).items()}
        if band:  # whether the point lies in the prediction's band
            band["inside_band"] = pred["batch_low_s"] <= measured <= pred["batch_high_s"]
        band |= probed_prediction(point, load(path), measured)
        own = {"epoch_spread": float(point["epoch_spread"])} if pd.notna(point.get("epoch_spread", np.nan)) else {}
        rows.append({**base, "measured_ms": 1e3 * measured, "predicted_ms": 1e3 * pred["batch_s"],
                     "error": pred["batch_s"] / measured - 1, "composition": pred["composition"], **band, **own,
                     **{k: 1e3 * v for k, v in pred.items() if k.startswith("t_")}, "ceilings": name})
    return pd.DataFrame(rows)


def probed_prediction(point: dict, c: Ceilings, measured: float) -> dict:
    """A staged point measured with its copy probed beside it (the sweep's copy_probe_s): predicted
    again with the ceilings' copy at the probe's level, to say how much of the error is the copy's
    drift. Empty for other points."""
    probe = point.get("copy_probe_s")
    if probe is None or not np.isfinite(probe):
        return {}
    Bl = int(point["B"]) / int(point["p"])
    pred = predict_point(point, c.probed(Bl, probe, point["copy_probe_min_s"], point["copy_probe_max_s"]))
    out = {"probed_copy_ms": 1e3 * probe, "predicted_probed_ms": 1e3 * pred["batch_s"],
           "error_probed": pred["batch_s"] / measured - 1}
    if "batch_low_s" in pred:
        out["inside_probed_band"] = pred["batch_low_s"] <= measured <= pred["batch_high_s"]
    return out


def profiled_phases() -> dict:
    """{phase: the kernels of the ceilings that run inside it} of the profiled run's step (the seeds' NVTX
    names; unfused kernels, the device synchronized at each edge): each GEMM's (cuBLAS's with its bias
    pass) and the update's; the passes the trainer runs under its plain forward and backward are not timed alone."""
    out = {}
    for k in one_layer(fuse_output=False, fuse_backward=False):
        if k.label not in ("forward", "backward"):
            out[k.label] = out.get(k.label, ()) + (k.name,)
    return out


GPU_PHASES = profiled_phases()
CPU_PHASES = {"forward": ("forward",), "step": ("step",)}


def predict_phases(point: dict, c: Ceilings) -> dict:
    """Seconds of each profiled phase of one batch that the ceilings time directly. On the GPU the
    profiler synchronizes the device at each phase edge, so a phase's kernels start only as the
    host launches them: each adds its eager launch cost (the ceilings' eager step over its kernels)."""
    hidden, p, B = perfmodel.widths(point["H"]), int(point["p"]), int(point["B"])
    H = hidden[0]
    if len(hidden) > 1:
        raise PredictionError(f"the profiled phases are composed for one hidden layer, not {point['H']}")
    if point.get("gemm", "cublas") != "cublas":
        raise PredictionError(f"the profiled phases are timed for cuBLAS's GEMMs, not {point['gemm']}'s")
    if point["backend"] == "numpy":
        Hl, Bl = (H / p, B) if point.get("parallel") == "model" else (H, B / p)
        return {phase: sum(c.kernel("cpu", k, Hl, Bl) for k in kernels) for phase, kernels in CPU_PHASES.items()}
    launch = c.launch()
    out = {phase: sum(c.kernel("gpu", k, H, B / p) + launch for k in kernels) for phase, kernels in GPU_PHASES.items()}
    if point["mode"] == "staged":
        out["copying images host -> device"] = c.staged_images(B / p)
    elif point["mode"] == "pipelined":
        out["copying images host -> device"] = c.copy("h2d", "pinned", (784 * 4 + 8) * B / p)
    return out


def validate_phases(points: pd.DataFrame, folder: Path, load=None) -> pd.DataFrame:
    """Predicted against the profiled medians (`t_<phase>`) of every phase the ceilings time,
    tidy: one row per point and phase. `load`: a loader() shared with other sweeps of the folder."""
    rows, load, choose = [], load or loader(), cache(ceilings_for)  # each rank count's file found once a call
    for _, r in points.iterrows():
        point = as_measured(r)
        path = choose(folder, int(point["p"]))
        if path is None:
            continue
        try:
            phases = predict_phases(point, load(path))
        except PredictionError:
            continue
        for phase, seconds in phases.items():
            measured = point.get(f"t_{phase}")
            if measured is not None and np.isfinite(measured) and measured > 0:
                rows.append({k: point[k] for k in ("H", "B", "p", "backend", "mode", "parallel") if k in point}
                            | {"gemm": point.get("gemm", "cublas"), "launch": launch_name(point), "phase": phase, "measured_ms": 1e3 * measured, "predicted_ms": 1e3 * seconds,
                               "error": seconds / measured - 1, "ceilings": path.name})
    return pd.DataFrame(rows)


def ceilings_from_rates(P_flops: float, P_pci: float, P_mpi: float, p: int, hidden, batches) -> pd.DataFrame:
    """A ceilings table for a machine known only by the seeds' three effective rates (a what-if):
    each GEMM of the step at P_flops (the elementwise work, which the rates do not describe, at
    zero), the staged copies at P_pci, the all-reduce at P_mpi, host floors at zero. The seeds'
    formulas count the gradient's bytes twice on each link, so the exchange of S bytes takes
    2S / P_pci (down and up) + 2S / P_mpi."""
    D = 784

    def flops(H, B) -> dict:  # each kernel's, and what a hidden layer adds (forward, dW, input gradient)
        step = {k.name: k.flops for k in trainstep.step((H,), B)}
        return step | {hidden_layer_name("cublas"): sum(k.flops for k in trainstep.step((H, H), B)) - sum(step.values())}
    rows = [{"ceiling": "step_kernel", "device": "gpu", "impl": name, "H": H, "B": B, "ranks": 1,
             "seconds": (f / P_flops) if f else 1e-12}
            for H in hidden for B in batches for name, f in flops(H, B).items()]
    rows += [{"ceiling": "staged_images", "B": B, "ranks": 1, "seconds": (D * 4 + 8) * B / P_pci} for B in batches]
    sizes = [2.0 ** k for k in range(16, 27)]
    rows += [{"ceiling": "staged_allreduce", "ranks": p, "size_bytes": S, "seconds": 2 * S / P_pci + 2 * S / P_mpi,
              "value": S / (2 * S / P_pci + 2 * S / P_mpi)} for S in sizes]
    rows += [{"ceiling": "step_floor", "impl": name, "ranks": 1, "seconds": 0.0, "kernels": 6}
             for name in ("trainer resident", "trainer staged", "eager launch")]
    return pd.DataFrame(rows)
