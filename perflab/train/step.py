"""The training step as data: the kernels perflab's fused GPU step launches, in order, for any depth,
GEMM, precision and fusion, each with an id, the perflab.kernels function it calls, its FLOPs, the
bytes it must move at least and the trainer's phase it runs in.

One list, so the step is written once: perflab.train.gpu.FusedGPU labels its phases from it,
`perflab bench step` and `perflab ceilings` bind a call to each kernel and time it
(perflab.measure.bench.step_kernels), the predictor sums it by id (perflab.analysis.predictor), and
every display name ("forward GEMM 1 (cuBLAS)", the ceilings' and bench files' `impl`/`kernel`)
derives from an id here (display_name). A kernel renamed or added here is renamed or added
everywhere. No CuPy: the description runs on any machine; the GPU calls are bound by the bench.

Ids: a kind, the number its name carries (a layer, or the seeds' GEMM number: forward GEMM l;
backward GEMM 1 is dW_L, then each layer's input gradient and the weight gradient below it, 2L - 1
the last) and, for a GEMM, its variant: "fwd_gemm1_cublas", "fused_fwd2", "bwd_gemm3_x3tf32", "update".
"""
from __future__ import annotations

import numbers
import re
from collections import Counter
from dataclasses import dataclass

from perflab.kernels.dispatch import CUBLAS_VARIANTS, GEMM_VARIANTS
from perflab.kernels.wgmma import WGMMA_VARIANTS

D, C = 784, 10  # MNIST's images and classes: the sizes the ceilings time the step at
ITEMSIZE = {"float64": 8, "float32": 4, "bfloat16": 2, "float16": 2}  # a dtype's bytes an element
HALF = ("bfloat16", "float16")
GEMM_LABELS = {"cublas": "cuBLAS"}  # how a display name spells a GEMM variant (else as --gemm does)

# the display name of each kind: {n} its number, {m} one less, {G} its GEMM variant, {label} its phase
NAMES = {
    "fwd_gemm": "{label} ({G})",
    "bias_sigmoid": "bias + sigmoid {n}",
    "fused_fwd": "fused forward: sigmoid, GEMM {n}, softmax",
    "row_sum_db": "db{n} row sums",
    "fused_bwd": "fused backward: dz{m}, dW{n}, db{m}",
    "fused_bwd_split": "fused backward with dz1's split ({G})",
    "bwd_gemm": "{label} ({G})",
    "sigmoid_bwd_db": "sigmoid' + db{n}",
    "update": "SGD + L2 update",
    # the output layer unfused: as the profiled step and model parallel's split output layer run it, and
    # (unfused_sigmoid_bwd, unfused_row_sum_db) the two passes the bench times beside the fused ones
    "unfused_bias_sigmoid": "unfused: bias + sigmoid",
    "unfused_fwd_gemm": "unfused: {label} ({G})",
    "unfused_softmax": "unfused: softmax + CE gradient",
    "unfused_bwd_gemm": "unfused: {label} ({G})",
    "unfused_sigmoid_bwd": "unfused: sigmoid'",
    "unfused_row_sum_db": "unfused: db{n} row sums",
}
GEMM_KINDS = ("fwd_gemm", "bwd_gemm", "unfused_fwd_gemm", "unfused_bwd_gemm")
TAIL = re.compile(r"^(?P<n>\d*)(?:_(?P<gemm>[a-z][a-z0-9-]*))?$")  # an id past its kind


def forward_gemm(n: int) -> str:
    """The seeds' phase name of forward GEMM n (their NVTX range; the trainers' profile label)."""
    return f"forward GEMM {n}"


def backward_gemm(n: int) -> str:
    """The seeds' phase name of backward GEMM n (1: dW_L, then each input gradient and the weight gradient below it)."""
    return f"backward GEMM {n}"


def kernel_id(kind: str, n: int = 0, gemm: str = "") -> str:
    """A kernel's id from its kind, the number its name carries (0: none) and a GEMM's variant."""
    if kind not in NAMES:
        raise ValueError(f"no kernel kind {kind!r}: the kinds are {', '.join(NAMES)}")
    return f"{kind}{n or ''}" + (f"_{gemm}" if gemm else "")


def display_name(kernel: str) -> str:
    """The display name of a kernel id (as the ceilings' and bench files name it): 'fwd_gemm1_cublas' ->
    'forward GEMM 1 (cuBLAS)'."""
    kind = max((k for k in NAMES if kernel.startswith(k)), key=len, default=None)
    parts = TAIL.match(kernel[len(kind):]) if kind else None
    if parts is None:
        raise ValueError(f"no kernel id {kernel!r}: an id is a kind ({', '.join(NAMES)}), its number and a GEMM's variant")
    n, gemm = int(parts["n"] or 0), parts["gemm"] or ""
    label = (forward_gemm if "fwd" in kind else backward_gemm)(n) if kind in GEMM_KINDS else ""
    return NAMES[kind].format(n=n, m=n - 1, G=GEMM_LABELS.get(gemm, gemm), label=label)


@dataclass(frozen=True)
class Kernel:
    """One kernel of the step. `layer`: the layer l (1-based, W_l) it works on, 0 for the update;
    `label`: the innermost profile phase the trainer runs it in (a GEMM's, its bias pass's too, else
    `phase`); `call`: the perflab.kernels function it launches; `flops`: its products' FLOPs (2 a
    multiply-add; elementwise work uncounted, as the seeds' P_flops counts); `nbytes`: what it must
    move at least."""
    kind: str
    n: int
    gemm: str
    layer: int
    phase: str
    label: str
    call: str
    flops: float
    nbytes: int

    @property
    def id(self) -> str:
        return kernel_id(self.kind, self.n, self.gemm)

    @property
    def name(self) -> str:
        return display_name(self.id)

    @property
    def weight_gradient(self) -> bool:
        """A backward GEMM making dW (the seeds' odd numbers), not an input gradient."""
        return self.kind in ("bwd_gemm", "unfused_bwd_gemm") and self.n % 2 == 1


def net(hidden) -> tuple[int, ...]:
    """The hidden widths as a tuple (one width, or a deeper net's), each a whole number >= 1."""
    widths = (hidden,) if isinstance(hidden, numbers.Integral) else tuple(hidden)
    if not widths or not all(isinstance(h, numbers.Integral) and h >= 1 for h in widths):
        raise ValueError(f"hidden widths {hidden!r}: expected one width like 512 or several like (1024, 1024)")
    return tuple(int(h) for h in widths)


def bias_pass(gemm: str, dtype: str = "float32") -> bool:
    """Whether a GEMM with a bias adds it (and the sigmoid) in a pass of its own: cuBLAS's and the FP32
    wgmma GEMMs do; the tile kernels, and the half-precision wgmma GEMM, in their epilogue."""
    return gemm == "cublas" if dtype in HALF else gemm in CUBLAS_VARIANTS + WGMMA_VARIANTS


def step(hidden, batch: int = 1, gemm: str = "cublas", dtype: str = "float32", fuse_output: bool = True,
         fuse_backward: bool = True) -> tuple[Kernel, ...]:
    """Every kernel of one training step of 784-hidden-10 on `batch` samples, in the order
    perflab.train.gpu.FusedGPU launches them without the loss: forward, backward, the update (not
    the exchange). fuse_output / fuse_backward as FusedGPU's: the profiled step runs both unfused,
    model parallel's split output layer its forward. x3tf32's pass making dz1 writes its TF32 split
    too (at one hidden layer the fused backward pass, named for it)."""
    if gemm not in GEMM_VARIANTS or dtype not in ITEMSIZE:
        raise ValueError(f"--gemm {gemm} --dtype {dtype}: the step's GEMMs are {', '.join(GEMM_VARIANTS)}, its dtypes "
                         f"{', '.join(ITEMSIZE)}")
    hidden, B, size = net(hidden), int(batch), ITEMSIZE[dtype]
    L, top = len(hidden) + 1, hidden[-1]
    fan_in = (D,) + hidden[:-1]
    call = "half_gemm" if dtype in HALF else "gemm"
    master = ITEMSIZE["float32" if dtype in HALF else dtype]  # the parameters, their gradient: FP32 in a half step

    def product(kind, n, layer, M, K, N, label, phase="forward"):  # a GEMM reads both operands, writes one
        out_size = master if kind == "bwd_gemm" and n % 2 == 1 else size  # a weight gradient, into G
        return Kernel(kind, n, gemm, layer, phase, label, call, 2.0 * M * K * N, (M * K + K * N) * size + M * N * out_size)

    def pass_(kind, n, layer, phase, label, fn, nbytes, flops=0.0):
        return Kernel(kind, n, "", layer, phase, label, fn, flops, nbytes)
    out = []
    for l in range(1, L):  # the hidden layers; the last one's bias + sigmoid waits for the fused pass
        h, k = hidden[l - 1], fan_in[l - 1]
        out.append(product("fwd_gemm", l, l, h, k, B, forward_gemm(l)))
        if l < L - 1 and bias_pass(gemm, dtype):
            out.append(pass_("bias_sigmoid", l, l, "forward", forward_gemm(l), "bias_sigmoid", 2 * h * B * size))
    out += output_layer(hidden, B, gemm, dtype, fuse_output, fuse_backward)
    for l in range(L - 2, 0, -1):  # hidden layer l + 1 over hidden layer l (1-based), as FusedGPU numbers them
        g, h, k = 2 * (L - l) - 1, hidden[l], hidden[l - 1]
        out.append(product("bwd_gemm", g, l + 1, h, B, k, backward_gemm(g), "backward"))
        out.append(product("bwd_gemm", g + 1, l + 1, k, h, B, backward_gemm(g + 1), "backward"))
        out.append(pass_("sigmoid_bwd_db", l, l, "backward", "backward", "sigmoid_backward_rows", 3 * k * B * size))
    out.append(product("bwd_gemm", 2 * L - 1, 1, hidden[0], B, D, backward_gemm(2 * L - 1), "backward"))
    params = sum(h * k + h for h, k in zip(hidden, fan_in)) + C * top + C
    update = "sgd_update_scaled" if dtype == "float16" else "sgd_update"  # float16's under its loss scale
    out.append(pass_("update", 0, 0, "step", "step", update, params * update_bytes(dtype, fuse_backward)))
    return tuple(out)


def update_bytes(dtype: str, fuse_backward: bool = True, ranks: int = 1) -> int:
    """Bytes the update moves a parameter: P read and written and G read, in the master precision (FP32 in a half
    step); a half step writes P's rounded copy too, and float16 reads G once more for overflow where its backward
    passes do not flag it (unfused, or on several ranks: backward_flags_overflow)."""
    master = ITEMSIZE["float32" if dtype in HALF else dtype]
    scan = dtype == "float16" and not backward_flags_overflow(dtype, fuse_backward, ranks)
    return 3 * master + (ITEMSIZE[dtype] if dtype in HALF else 0) + (master if scan else 0)


def backward_flags_overflow(dtype: str, fuse_backward: bool, ranks: int = 1) -> bool:
    """Whether a float16 step's backward passes set its overflow flag, so that the update need not look through G
    (docs/DECISIONS.md, D72): with the output layer fused, on one GPU. Unfused, its GEMMs write G from delta rounded
    to FP16; over ranks, another rank's overflow arrives only in the summed G. The builder (step) and the trainer
    (FusedStep.overflow_flag) ask here."""
    return dtype == "float16" and fuse_backward and ranks == 1


def update_adds_output_sums(fuse_backward: bool, ranks: int = 1) -> bool:
    """Whether the update's launch adds up the fused output layer's partial sums (dW_L, db_{L-1}, db_L) where the
    backward pass leaves them, rather than a reduction launch of the pass's own (docs/DECISIONS.md, D77): on one GPU,
    whose update follows the backward (float16's too: the passes' overflow flag covers the sums, D78). The trainer
    (FusedStep.sums_in_update) and the bench's step (step_calls) ask here."""
    return fuse_backward and ranks == 1


def fused_backward_makes_db_out(dtype: str, fuse_backward: bool) -> bool:
    """Whether the output layer's fused backward pass makes db_L too, in place of a row_sum pass of its own: a half
    step's does (docs/DECISIONS.md, D67). The builder (output_layer) and the trainer (FusedStep.backward) ask here."""
    return fuse_backward and dtype in HALF


def output_layer(hidden: tuple, B: int, gemm: str, dtype: str, fuse_output: bool, fuse_backward: bool) -> list[Kernel]:
    """The output layer's kernels in the step (step): forward its GEMM with the last hidden layer's bias +
    sigmoid and the softmax, fused or not, then db_L's row sums (in a half step's fused backward pass), then
    backward dW_L, the input gradient and sigmoid' with db_{L-1}, fused or not."""
    L, top, size = len(hidden) + 1, hidden[-1], ITEMSIZE[dtype]
    hb = top * B * size
    logit = ITEMSIZE["float32"] if dtype in HALF else size  # the logits and delta: FP32 in a half step
    kind = "gemm" if dtype not in HALF else "half_gemm"
    out = []
    if fuse_output:
        out.append(Kernel("fused_fwd", L, "", L, "forward", "forward", "output_layer", 2.0 * C * top * B, 2 * hb))
    else:
        if bias_pass(gemm, dtype):
            out.append(Kernel("unfused_bias_sigmoid", 0, "", L - 1, "forward", forward_gemm(L - 1), "bias_sigmoid", 0.0,
                              2 * hb))
        out += [Kernel("unfused_fwd_gemm", L, gemm, L, "forward", forward_gemm(L), kind, 2.0 * C * top * B, hb),
                Kernel("unfused_softmax", 0, "", L, "forward", "forward", "softmax_xent_grad", 0.0, 2 * C * B * logit)]
    if not fused_backward_makes_db_out(dtype, fuse_backward):
        out.append(Kernel("row_sum_db", L, "", L, "backward", "backward", "row_sum", 0.0, C * B * logit))
    split = gemm == "x3tf32" and dtype not in HALF and L == 2  # this pass writes dz1's TF32 split
    if fuse_backward:
        out.append(Kernel("fused_bwd_split", 0, gemm, L, "backward", "backward", "output_backward", 4.0 * C * top * B,
                          3 * hb) if split else
                   Kernel("fused_bwd", L, "", L, "backward", "backward", "output_backward", 4.0 * C * top * B, 2 * hb))
    else:
        out += [Kernel("unfused_bwd_gemm", 1, gemm, L, "backward", backward_gemm(1), kind, 2.0 * C * top * B, hb),
                Kernel("unfused_bwd_gemm", 2, gemm, L, "backward", backward_gemm(2), kind, 2.0 * C * top * B, hb),
                Kernel("sigmoid_bwd_db", L - 1, "", L - 1, "backward", "backward", "sigmoid_backward_rows", 0.0, 3 * hb)]
    return out


def unfused_output(hidden, batch: int, dtype: str = "float32") -> tuple[Kernel, ...]:
    """What `perflab bench step` times beside the fused step (cuBLAS): the kernels the unfused output
    layer runs instead of the fused ones, its sigmoid' and db_{L-1}'s row sums in two passes (where the
    trainer's unfused step now runs sigmoid_backward_rows, one; a half step has no such two passes)."""
    hidden, B = net(hidden), int(batch)
    L, hb = len(hidden) + 1, hidden[-1] * B * ITEMSIZE[dtype]
    kept = [k for k in output_layer(hidden, B, "cublas", dtype, False, False) if k.kind.startswith("unfused_")]
    if dtype in HALF:
        return tuple(kept)
    return tuple(kept + [
        Kernel("unfused_sigmoid_bwd", 0, "", L - 1, "backward", "backward", "sigmoid_backward", 0.0, 3 * hb),
        Kernel("unfused_row_sum_db", L - 1, "", L - 1, "backward", "backward", "row_sum", 0.0, hb)])


def names(kernels) -> tuple[str, ...]:
    return tuple(k.name for k in kernels)


def launches(kernels) -> Counter:
    """How many times the step launches each perflab.kernels function."""
    return Counter(k.call for k in kernels)


def a_layer_adds(gemm: str = "cublas", dtype: str = "float32") -> Counter:
    """The launches one more hidden layer adds to the step (its forward GEMM, its bias pass where the
    GEMM has one, its weight and input gradients, sigmoid' with db): what a deeper net's step has
    over one hidden layer's, which the predictor adds as `hidden layer (<gemm>)` a layer."""
    return launches(step((1, 1), gemm=gemm, dtype=dtype)) - launches(step((1,), gemm=gemm, dtype=dtype))
