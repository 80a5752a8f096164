"""The training step as data (perflab.train.step): the trainer, the bench and the predictor run one list,
and no other module spells a kernel's name."""
import ast
import contextlib
import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import perflab
from perflab.analysis import predictor
from perflab.measure import bench
from perflab.train import step

DEPTHS = ((48,), (48, 40), (48, 40, 24))
GEMMS = ("cublas", "wgmma", "x3tf32", "best")


def test_display_names_derive_from_ids_and_back():
    assert step.display_name("fwd_gemm1_cublas") == "forward GEMM 1 (cuBLAS)"
    assert step.display_name("fused_bwd2") == "fused backward: dz1, dW2, db1"
    assert step.display_name("fused_bwd_split_x3tf32") == "fused backward with dz1's split (x3tf32)"
    for hidden in DEPTHS:
        for gemm in GEMMS:
            for fusion in ({}, {"fuse_output": False}, {"fuse_output": False, "fuse_backward": False}):
                kernels = step.step(hidden, 64, gemm=gemm, **fusion)
                assert len({k.id for k in kernels}) == len(kernels), "an id names one kernel of a step"
                assert all(step.display_name(k.id) == k.name for k in kernels)
    with pytest.raises(ValueError, match="fwd_gemm, bias_sigmoid"):
        step.display_name("forward_gemm1")
    with pytest.raises(ValueError, match="--gemm fast .* cublas"):
        step.step((64,), gemm="fast")
    assert step.step(np.int64(64)) == step.step((64,))  # a width as NumPy writes it


def test_a_step_counts_its_flops_and_bytes():
    """784-512-10 at B = 100: the GEMMs' 2 x multiply-adds, each kernel's bytes at the dtype's size."""
    H, B, D, C = 512, 100, 784, 10
    kernels = {k.id: k for k in step.step((H,), B)}
    assert kernels["fwd_gemm1_cublas"].flops == kernels["bwd_gemm3_cublas"].flops == 2 * H * D * B
    assert kernels["fused_bwd2"].flops == 4 * C * H * B and kernels["update"].flops == 0
    assert kernels["fwd_gemm1_cublas"].nbytes == 4 * (H * D + D * B + H * B)
    assert kernels["update"].nbytes == 3 * 4 * (H * (D + 1) + C * (H + 1))
    doubled = {k.id: k.nbytes for k in step.step((H,), B, dtype="float64")}
    assert all(doubled[i] == 2 * k.nbytes for i, k in kernels.items())
    params = H * (D + 1) + C * (H + 1)  # a half step's update also writes P's rounded copy
    assert {dtype: step.step((H,), B, dtype=dtype)[-1].nbytes for dtype in step.HALF} == {
        "bfloat16": (3 * 4 + 2) * params, "float16": (3 * 4 + 2) * params}
    # float16's reads G once more to find an overflow where the fused backward passes do not flag it (D72)
    assert step.step((H,), B, dtype="float16", fuse_backward=False)[-1].nbytes == (4 * 4 + 2) * params


@pytest.mark.parametrize("dtype", ("float32",) + step.HALF)
@pytest.mark.parametrize("hidden", DEPTHS)
def test_the_bench_times_the_step_the_builder_lists(hidden, dtype):
    """`perflab bench step`'s kernels (listed without CuPy): the builder's step, then the unfused ones beside it; in
    half precision without the two unfused passes (sigmoid', row sums) that no half step runs."""
    H = "-".join(map(str, hidden))
    listed = bench.step_description(H, 64, dtype)
    whole = step.step(hidden, 64, dtype=dtype)
    fused, beside = listed[:len(whole)], listed[len(whole):]
    assert fused == whole
    assert beside and all(k.name.startswith("unfused: ") for k in beside)
    assert ({"unfused_sigmoid_bwd", "unfused_row_sum_db"} <= {k.kind for k in beside}) == (dtype == "float32")


@pytest.mark.parametrize("gemm", ("cublas", "wgmma", "x3tf32"))
@pytest.mark.parametrize("hidden", DEPTHS)
def test_the_predictor_sums_the_step_the_builder_lists(hidden, gemm):
    """At one hidden layer the predictor sums the builder's kernels by name; a deeper net's step is the one-layer
    step plus `hidden layer` a layer, which must launch what each layer adds to the builder's step."""
    one = step.step(hidden[:1], 64, gemm=gemm)
    assert predictor.step_kernels("cupy", gemm) == step.names(one)
    adds = step.a_layer_adds(gemm)
    layers = len(hidden) - 1
    deep = step.launches(one) + step.Counter({call: n * layers for call, n in adds.items()})
    assert step.launches(step.step(hidden, 64, gemm=gemm)) == deep
    assert predictor.HIDDEN_LAYER_LAUNCHES == sum(adds.values()) == 5


def test_the_predictors_profiled_and_model_parallel_steps_are_the_builders():
    unfused = step.step((64,), fuse_output=False, fuse_backward=False)
    assert [name for names in predictor.GPU_PHASES.values() for name in names] == [
        k.name for k in unfused if k.label not in ("forward", "backward")]
    assert predictor.MODEL_PARALLEL_STEP == step.names(step.step((64,), fuse_output=False))
    assert [k for k, _ in predictor.model_parallel_kernels((64,), 2)[0]] == list(predictor.MODEL_PARALLEL_STEP)


def traced(monkeypatch, hidden, gemm, fuse_output, fuse_backward, dtype="float32", ranks=1,
           keywords=None, whole_step=False) -> list[tuple[str, str]]:
    """(perflab.kernels function, the innermost phase it ran in) of each kernel FusedGPU.gradients and update
    launch for one step (no loss; whole_step: through FusedGPU.step, one rank), run on NumPy stand-ins with every
    kernel recorded, not run (each returns "<name> made"); in a half
    precision, with the rounded weights' and float16's loss scale's stand-ins; `keywords` (a list) gets each
    launch's (function, its keyword arguments), `ranks` the trainer's comm.size."""
    from perflab.kernels.dispatch import CUBLAS_VARIANTS, WGMMA_VARIANTS
    from perflab.train import fused_step, gpu
    from perflab.train.half_gpu import DeviceLossScale
    from perflab.train.tf32_split import TF32Split
    trace, phases = [], []

    @contextlib.contextmanager
    def phase(name):
        phases.append(name)
        yield
        phases.pop()

    def record(name):
        def launch(*args, bias=None, variant=None, **kw):
            bias = args[3] if name == "half_gemm" and len(args) > 3 else bias  # the trainer passes it by position
            trace.append((name, phases[-1]))
            if keywords is not None:
                keywords.append((name, kw))
            if name == "gemm" and bias is not None and variant in CUBLAS_VARIANTS + WGMMA_VARIANTS:
                trace.append(("bias_sigmoid", phases[-1]))  # as kernels.gemm adds it: a pass of its own
            if name == "half_gemm" and bias is not None and variant == "cublas":
                trace.append(("bias_sigmoid", phases[-1]))  # as kernels.half_gemm adds it (wgmma: its epilogue)
            return f"{name} made"
        return launch
    for module in (gpu, fused_step):  # the passes' phases, and the update's
        monkeypatch.setattr(module, "phase", phase)
    for name in ("gemm", "bias_sigmoid", "output_layer", "softmax_xent_grad", "row_sum", "output_backward",
                 "sigmoid_backward_rows", "sgd_update", "half_gemm", "sgd_update_scaled"):
        monkeypatch.setattr(gpu.kernels, name, record(name))
    D, C, n = 7, 3, 5
    layers = (D, *hidden, C)
    params = [x for a, b in zip(layers, layers[1:]) for x in (np.zeros((b, a), np.float32), np.zeros(b, np.float32))]

    class Split(TF32Split):  # on NumPy: the recorded GEMMs read no small parts
        def __init__(self, size):
            self.small, self.made = np.zeros(size, np.float32), False

        def small_part(self, a):
            return None
    half = SimpleNamespace(weights=lambda: params[0::2], rounded_delta=lambda delta: delta, P_half=None)
    loss_scale = object.__new__(DeviceLossScale)  # float16's, its device state left out
    loss_scale.__dict__.update(scale=None, overflow="float16's overflow flag", counts=None)
    trainer = object.__new__(gpu.FusedGPU)
    trainer.__dict__.update(
        params=params, grads=[np.zeros_like(p) for p in params], half=half if dtype in step.HALF else None,
        scaled=dtype == "float16", loss_scale=loss_scale, scale=None, variant=gemm,
        work=None,
        acts=[np.zeros(h * n, np.float32) for h in hidden], dz=[np.zeros(h * n, np.float32) for h in hidden],
        z_out=np.zeros(C * n, np.float32), delta=np.zeros(C * n, np.float32), ce=np.zeros(n, np.float32),
        fuse_output=fuse_output, fuse_backward=fuse_backward, part=None, part_forward=None, peer_exchange=False,
        tf32_split=Split(hidden[0] * n) if gemm == "x3tf32" else None,
        G=np.zeros(sum(p.size for p in params) + 1, np.float32), side_gemms=False, side_pending=False, overlap=None,
        P=None, ends=None, regs=None, cfg=SimpleNamespace(learning_rate=0.1, dtype=dtype), comm=SimpleNamespace(size=ranks),
        tuned=type("Tuned", (), {"__contains__": lambda self, shape: True})())  # every shape tuned: no tune() runs
    if whole_step:
        trainer.step(np.zeros((D, n), np.float32), np.zeros(n, np.int64), n, want_loss=False)
    else:
        trainer.gradients(np.zeros((D, n), np.float32), np.zeros(n, np.int64), n, want_loss=False)
        trainer.update()
    return trace


@pytest.mark.parametrize("fusion", ((True, True), (False, True), (False, False)))
@pytest.mark.parametrize("gemm", GEMMS)
@pytest.mark.parametrize("hidden", DEPTHS)
def test_the_trainer_runs_the_step_the_builder_lists(monkeypatch, hidden, gemm, fusion):
    """FusedGPU's step, kernel by kernel and phase by phase (the profiled run's labels), is the builder's."""
    kernels = step.step(hidden, gemm=gemm, fuse_output=fusion[0], fuse_backward=fusion[1])
    assert traced(monkeypatch, hidden, gemm, *fusion) == [(k.call, k.label) for k in kernels]


@pytest.mark.parametrize("fusion", ((True, True), (False, True), (False, False)))
@pytest.mark.parametrize("gemm", ("cublas", "wgmma"))
@pytest.mark.parametrize("hidden", DEPTHS)
@pytest.mark.parametrize("dtype", step.HALF)
def test_a_half_precision_trainer_runs_the_step_the_builder_lists(monkeypatch, dtype, hidden, gemm, fusion):
    """In BF16 and FP16 too, FusedGPU's step is the builder's, kernel by kernel and phase by phase: the half GEMMs,
    the bias passes cuBLAS's need and wgmma's epilogue does not, db_L in the fused backward pass, float16's update."""
    kernels = step.step(hidden, gemm=gemm, dtype=dtype, fuse_output=fusion[0], fuse_backward=fusion[1])
    assert traced(monkeypatch, hidden, gemm, *fusion, dtype=dtype) == [(k.call, k.label) for k in kernels]


@pytest.mark.parametrize("hidden", DEPTHS)
def test_float16s_backward_passes_flag_an_overflow_only_where_g_can_hold_no_other(monkeypatch, hidden):
    """Fused, on one GPU, the passes that store float16's gradients set the overflow flag, and the update does not
    look through G (D72); with the output layer unfused (its GEMMs write G from delta rounded to FP16), as a profiled
    step runs it, or G summed over ranks, no pass sets it and the update looks."""
    from perflab.train import profile
    for fuse_backward, ranks, profiled, flagged in ((True, 1, False, True), (False, 1, False, False),
                                                    (True, 2, False, False), (True, 1, True, False)):
        calls = []
        monkeypatch.setattr(profile, "ACTIVE", profiled)
        traced(monkeypatch, hidden, "cublas", True, fuse_backward, "float16", ranks, calls)
        passes = [kw for name, kw in calls if name in ("output_backward", "sigmoid_backward_rows")]
        assert passes and all((kw.get("overflow") is not None) == flagged for kw in passes)
        assert [kw["find"] for name, kw in calls if name == "sgd_update_scaled"] == [not flagged]
        assert step.backward_flags_overflow("float16", fuse_backward and not profiled, ranks) == flagged


@pytest.mark.parametrize("hidden", DEPTHS)
@pytest.mark.parametrize("dtype", ("float32", "bfloat16", "float16"))
def test_a_steps_update_adds_the_output_layers_sums_where_it_follows_the_backward_on_one_gpu(monkeypatch, hidden, dtype):
    """Through FusedGPU.step on one GPU the fused backward pass leaves dW_L's, db_{L-1}'s and db_L's sums to the update,
    which gets what the pass returned (D77), float16's too with the passes' overflow flag and no look through G (D78);
    not a bare gradients() (whose caller may read G before any update), nor a profiled step (unfused); over ranks the
    rule says no (G is exchanged first)."""
    from perflab.train import profile
    for whole_step, profiled in ((True, False), (False, False), (True, True)):
        calls = []
        monkeypatch.setattr(profile, "ACTIVE", profiled)
        traced(monkeypatch, hidden, "cublas", True, True, dtype, 1, calls, whole_step=whole_step)
        left = whole_step and not profiled
        assert [kw["reduce"] for name, kw in calls if name == "output_backward"] == ([] if profiled else [not left])
        update = [kw for name, kw in calls if name.startswith("sgd_update")]
        assert len(update) == 1 and update[0].get("partials") == ("output_backward made" if left else None)
        if dtype == "float16" and left:
            assert update[0]["find"] is False
    assert step.update_adds_output_sums(True) and not step.update_adds_output_sums(False)
    assert not step.update_adds_output_sums(True, ranks=2)


@pytest.mark.parametrize("hidden", DEPTHS)
def test_a_half_steps_fused_backward_pass_makes_db_L_in_place_of_a_row_sum(hidden):
    """In BF16 and FP16 the fused output backward pass makes db_L too (docs/DECISIONS.md, D67): the step lists no
    row_sum for it, one launch fewer than FP32's; unfused, or in FP32, db_L keeps its row_sum."""
    for dtype in step.HALF:
        half = step.step(hidden, dtype=dtype)
        assert "row_sum_db" not in {k.kind for k in half}
        fp32 = step.launches(step.step(hidden))
        fp32["half_gemm"], fp32["row_sum"] = fp32.pop("gemm"), fp32["row_sum"] - 1  # its GEMMs half's, a row_sum fewer
        if dtype == "float16":  # and its update under the loss scale
            fp32["sgd_update_scaled"] = fp32.pop("sgd_update")
        assert step.launches(half) == +fp32
        assert "row_sum_db" in {k.kind for k in step.step(hidden, dtype=dtype, fuse_backward=False)}
    assert "row_sum_db" in {k.kind for k in step.step(hidden)}


KINDS_SPELLED = {step.display_name(step.kernel_id(kind, n, gemm)) for kind in step.NAMES for n in range(1, 6)
                 for gemm in (("cublas", "wgmma", "x3tf32") if kind in step.GEMM_KINDS + ("fused_bwd_split",) else ("",))}
# modules that still spell the seeds' GEMM phases, owned elsewhere (issue 67 item 4: to derive them from
# perflab.train.step's forward_gemm and backward_gemm, and the report's kernel names from display_name)
NOT_YET: set = set()  # modules still spelling kernel names (empty: none may)


def spelled(path: Path) -> set[str]:
    """The kernel names a module's string literals spell (docstrings aside), and the seeds' GEMM phases it
    names: a literal that is one ("backward GEMM 3"), or an f-string making one (f"backward GEMM {k}");
    prose that mentions a GEMM is no look-up."""
    tree = ast.parse(path.read_text())
    docs = {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)) and node.body
            and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            found |= {name for name in KINDS_SPELLED if name in node.value}
            found |= set(re.findall(r"^((?:forward|backward) GEMM) \d+$", node.value))
        elif isinstance(node, ast.JoinedStr):
            found |= {part.value.strip() for part, after in zip(node.values, node.values[1:])
                      if isinstance(part, ast.Constant) and isinstance(after, ast.FormattedValue)
                      and re.search(r"(?:^|\W)(?:forward|backward) GEMM $", part.value)}
    return found


def test_no_module_but_the_builder_spells_a_kernel_name():
    root = Path(perflab.__file__).parent.parent
    assert spelled(root / "perflab/train/step.py") >= {"forward GEMM", "SGD + L2 update"}  # it finds them
    found = {str(f.relative_to(root)): spelled(f) for f in sorted((root / "perflab").rglob("*.py"))}
    found = {f: names for f, names in found.items() if names and f != "perflab/train/step.py"}
    assert set(found) <= NOT_YET, {f: sorted(names) for f, names in found.items() if f not in NOT_YET}
