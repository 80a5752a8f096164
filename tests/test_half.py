"""Mixed precision emulated in FP32 (perflab.train.half): rounding, the half GEMM, the loss scale, training."""
import numpy as np
import pytest

from perflab.config import Config, ConfigError
from perflab.train import half, model
from perflab.train.comm import Serial


def test_bfloat16_rounds_to_nearest_even_and_keeps_eight_bits():
    one = np.float32(1)
    x = np.array([1 + 2 ** -8, 1 + 3 * 2 ** -9, 1 + 2 ** -7, -2.5, 3e38, 1e-30], np.float32)
    got = half.round_to(x, "bfloat16")
    assert got.dtype == np.float32 and got.shape == x.shape
    assert got[0] == one and got[1] == np.float32(1 + 2 ** -7) and got[2] == x[2] and got[3] == x[3]  # tie: even
    assert np.isfinite(got[4]) and got[5] != 0  # FP32's range
    r = np.random.default_rng(0).standard_normal((37, 29)).astype(np.float32)
    rounded = half.round_to(r, "bfloat16")
    assert (rounded.view(np.uint32) & 0xFFFF == 0).all()  # eight bits of mantissa left
    assert np.abs(rounded / r - 1).max() <= 2 ** -8
    assert np.array_equal(half.round_to(rounded, "bfloat16"), rounded)


def test_float16_overflows_and_underflows_where_bfloat16_does_not():
    x = np.array([7e4, 1e-8, 0.1], np.float32)
    f16, bf16 = half.round_to(x, "float16"), half.round_to(x, "bfloat16")
    assert np.isinf(f16[0]) and f16[1] == 0 and abs(f16[2] - 0.1) < 1e-4
    assert np.isfinite(bf16).all() and bf16[1] != 0


@pytest.mark.parametrize("kind, bound", [("bfloat16", 2 ** -7), ("float16", 2 ** -10)])
def test_a_half_gemm_is_fp32_accumulation_of_rounded_operands_rounded_once_more(kind, bound):
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((23, 61)).astype(np.float32), rng.standard_normal((61, 17)).astype(np.float32)
    got = half.half_product(kind)(a, b)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    assert np.array_equal(half.round_to(got, kind), got)  # every value one the format holds
    assert np.linalg.norm(got - exact) / np.linalg.norm(exact) < bound
    ref = half.round_to(half.round_to(a, kind) @ half.round_to(b, kind), kind)
    out = np.empty_like(got)
    assert half.half_product(kind)(a, b, out=out) is out and np.array_equal(out, ref)


def test_the_loss_scale_halves_on_overflow_grows_back_and_gives_up_with_a_message():
    s = half.LossScale("float16", growth_interval=3, most_skips=4)
    assert s.value == 2 ** 16 and not s.update(False, "step 1") and s.value == 2 ** 15
    assert all(s.update(True, "step") for _ in range(3)) and s.value == 2 ** 16  # three good steps: doubled
    for k in range(3):
        s.update(False, f"step {k}")
    with pytest.raises(half.LossScaleError, match=r"the float16 gradients overflowed 4 steps in a row \(step 9; loss scale "
                                                  r"down to 8192\): lower --learning-rate, or train in bfloat16"):
        s.update(False, "step 9")
    b = half.LossScale("bfloat16")
    assert b.value == 1 and b.update(True, "") and b.value == 1


def tiny(dtype, **kw):
    from perflab import data
    cfg = Config(dataset="synthetic", input_size=40, hidden_sizes=(24, 16), num_classes=5, train_size=300,
                 batch_size=50, num_epochs=2, learning_rate=0.5, test_size=100, dtype=dtype, **kw)
    train, test, _ = data.load(cfg)
    params = model.init_params(cfg.layer_sizes, cfg.storage_dtype, cfg.seed)
    return cfg, params, train, test


@pytest.mark.parametrize("kind", ["bfloat16", "float16"])
def test_mixed_precision_trains_near_the_float64_reference(kind):
    from perflab.train import loop
    cfg, params, train, test = tiny(kind)
    trainer = half.MixedPrecision(cfg, params, train.X, train.y, Serial())
    history = loop.fit(cfg, trainer, test, progress=False)
    cfg64, params64, train64, test64 = tiny("float64")
    reference = loop.fit(cfg64, loop.Sequential(cfg64, params64, train64.X, train64.y), test64, progress=False)
    assert all(p.dtype == np.float32 for p in history.params)  # FP32 masters
    worst = max(np.linalg.norm(p - r) / np.linalg.norm(r) for p, r in zip(history.params, reference.params)
                if np.linalg.norm(r) > 0)
    assert 0 < worst < {"bfloat16": 3e-2, "float16": 5e-3}[kind]  # not FP32's numbers, but near them
    assert abs(history.final_loss - reference.final_loss) < 0.02 and trainer.scale.skipped == 0


def test_float16_loses_small_gradients_that_the_loss_scale_keeps():
    """Small gradients (a loss 1e5 times smaller, as late in training): in float16 without a scale all of dW1
    flushes to zero; scaled by 2^16 (as a run starts) none does, and bfloat16 keeps them unscaled."""
    cfg, params, train, _ = tiny("float16")
    X, y = train.X[:, :50], train.y[:50]

    def zeros(kind, scale, smaller=1e5):
        matmul = half.half_product(kind)
        acts = model.forward(params, X, matmul=matmul)
        grads = model.backward(params, acts, y, 50 * smaller / scale, matmul=matmul)
        return float((grads[0] == 0).mean())
    assert zeros("float16", 1.0) == 1.0 and zeros("float16", 2.0 ** 16) == 0 and zeros("bfloat16", 1.0) == 0
    assert zeros("float16", 1.0, smaller=1.0) < 0.01  # at an ordinary loss float16 keeps them too


def test_a_run_whose_scale_overflows_every_step_ends_with_an_error():
    from perflab.train import loop
    cfg, params, train, _ = tiny("float16")
    trainer = half.MixedPrecision(cfg, params, train.X, train.y, Serial())
    trainer.scale = half.LossScale("float16", most_skips=3)
    trainer.scale.value = 2.0 ** 80  # overflows however far it is halved in three steps
    with pytest.raises(half.LossScaleError, match="overflowed 3 steps in a row"):
        loop.fit(cfg, trainer, None, progress=False)


@pytest.mark.parametrize("name", ["half_accuracy.jsonl", "half_accuracy_gpu.jsonl"])
def test_the_committed_mnist_runs_hold_fp32s_precision_within_three_tenths_of_a_point(name):
    """One H100, 15 epochs of MNIST: BF16 and FP16 (emulated; the fused step on the tensor cores) beside FP32, for
    784-1024-10 and 784-1024-1024-10 (issue 53's accuracy target: within 0.3 points of FP32)."""
    import json

    from perflab.results import RESULTS_ROOT
    rows = [json.loads(line) for line in (RESULTS_ROOT / "nvidia-h100-80gb-hbm3" / "half" / name).read_text().splitlines()]
    got = {(tuple(r["hidden_sizes"]), r["dtype"]): r["test_precision"] for r in rows}
    assert set(got) == {(net, dt) for net in ((1024,), (1024, 1024)) for dt in ("float32", "bfloat16", "float16")}
    assert all(r["num_epochs"] == 15 and r["dataset"] == "mnist" and r["machine"]["git_commit"] != "WORKTREE" for r in rows)
    for (net, dt), p in got.items():
        assert abs(p - got[(net, "float32")]) <= 0.003, (net, dt)


@pytest.mark.parametrize("kind", ["bfloat16", "float16"])
def test_storage_holds_the_rounded_values_in_two_bytes_each(kind):
    x = np.random.default_rng(2).standard_normal((13, 7)).astype(np.float32)
    held = half.to_storage(x, kind)
    assert held.dtype.itemsize == 2 and held.shape == x.shape
    assert np.array_equal(half.from_storage(held, kind), half.round_to(x, kind))
    assert half.to_storage(np.float32([1 + 3 * 2 ** -9]), "bfloat16")[0] == 0x3F81  # bfloat16's bits, tie to even


@pytest.mark.parametrize("args, message", [
    (("bfloat16", "data", "resident", "cublas", "nccl", "75"),
     r"--dtype bfloat16 needs a GPU of compute capability 8.0 or later .* this one is 7.5: use --dtype float16"),
    (("float16", "model", "resident", "cublas", "nccl", "90"), r"got --parallel model, --mode resident, --gemm cublas: "
                                                              r"use --parallel data --mode resident --gemm cublas"),
    (("bfloat16", "data", "staged", "cublas", "nccl", "90"), r"--mode staged"),
    (("bfloat16", "data", "resident", "x3tf32", "nccl", "90"), r"--gemm x3tf32: use .* --gemm cublas \(or wgmma on a Hopper\)"),
    (("float16", "data", "resident", "wgmma", "nccl", "80"), r"--gemm wgmma with --dtype float16 is Hopper's wgmma .* "
                                                             r"this GPU is 8.0: use --gemm cublas"),
    (("float16", "data", "resident", "cublas", "p2p", "90"), r"does not unscale float16's loss scale: use --comm nccl"),
])
def test_a_half_run_the_gpu_cannot_make_is_refused_before_any_gpu_work_naming_what_to_use(args, message):
    from perflab.train import gpu
    with pytest.raises(gpu.GPUError, match=message):
        gpu.check_half(*args)
    gpu.check_half("bfloat16", "data", "resident", "cublas", "p2p", "80")  # runnable: no error
    gpu.check_half("bfloat16", "data", "resident", "wgmma", "nccl", "90")
    gpu.check_half("float32", "model", "staged", "best", "p2p", "60")  # not half: none of its business


def test_the_precision_table_puts_each_run_against_the_float64_reference():
    from perflab.workbook import precision
    cfg, _, _, _ = tiny("float32")
    rows = precision.weights_against_float64(cfg, {"FP32": ("float32", "cublas"), "BF16": ("bfloat16", "cublas")},
                                             backend="numpy", log=lambda *a: None)
    fp32, bf16 = (r["max_rel_error"] for r in rows)
    assert [r["precision"] for r in rows] == ["FP32", "BF16"] and set(rows[0]["errors"]) == {"W1", "b1", "W2", "b2", "W3", "b3"}
    assert 0 < fp32 < 1e-5 < bf16 < 3e-2  # FP32 near float64; BF16 (emulated on NumPy) about its 8 bits off


def test_the_committed_precision_table_orders_the_precisions_as_their_bits_do():
    """One H100, MNIST, two epochs against float64: FP32 and 3xTF32 alike and nearest, FP16 (11 bits) next, TF32
    and BF16 (8 and 11-bit operands, BF16 storing its activations in 8) furthest; FP16's gradient unscaled
    flushes far more of dz1 than scaled."""
    import json

    from perflab.results import RESULTS_ROOT
    rows = [json.loads(line) for line in
            (RESULTS_ROOT / "nvidia-h100-80gb-hbm3" / "half" / "precision.jsonl").read_text().splitlines()]
    worst = {r["precision"]: r["max_rel_error"] for r in rows if r["table"] == "weights against float64"}
    assert worst["FP32"] == pytest.approx(worst["3xTF32"], rel=0.1) and worst["FP32"] < 1e-4
    assert worst["FP32"] < worst["FP16"] < worst["TF32"] < worst["BF16"] < 3e-2
    flushed = {r["loss_scale"]: r["dz1_flushed_to_zero"] for r in rows if r["table"] == "float16 gradient"}
    assert flushed[1.0] > 10 * flushed[2.0 ** 16]
    assert all(r["machine"]["git_commit"] != "WORKTREE" and r["dataset"] == "mnist" for r in rows)


def test_the_committed_half_step_beats_fp32_and_the_half_peers_and_says_how_far_from_its_floor():
    """One H100 (bench train): perflab's BF16 epoch at most 0.8 of the fastest half peer and at most 1.5x its
    BF16 GEMM floor in all four configs (issue 53's epoch targets), 4x and more faster than its FP32 epoch;
    REPORT.md says by how much, and whether issue 68's floor targets (BF16 1.10x, FP16 1.15x) are met."""
    import pandas as pd

    from perflab.report import markdown
    from perflab.results import RESULTS_ROOT
    t = pd.read_csv(RESULTS_ROOT / "nvidia-h100-80gb-hbm3" / "half" / "bench_train_half.csv")
    ms = t.pivot_table(index=["H", "B"], columns="peer", values="epoch_ms")
    peers = ms[["jax scan epoch (bf16)", "pytorch cuda graph (bf16 autocast)"]].min(axis=1)
    ratio = ms["perflab (bf16)"] / peers
    assert (ratio <= 0.8).all()
    assert (ms["perflab"] / ms["perflab (bf16)"] > 4).all()
    floor = ms["perflab (bf16)"] / ms["cublas floor (bf16)"]
    assert (floor <= 1.5).all()
    fp16_floor = ms["perflab (fp16)"] / ms["cublas floor (fp16)"]
    text = "\n".join(markdown.half_step_section())
    assert f"The BF16 floor target is {'met' if floor.max() <= 1.10 else 'missed'} (at worst {floor.max():.2f}x)" in text
    assert (f"the FP16 one (1.15x) is {'met' if fp16_floor.max() <= 1.15 else 'missed'} (at worst {fp16_floor.max():.2f}x)"
            in text)
    assert "target 1.10" in text and "target 0.7)" in text and f"{fp16_floor.iloc[0]:.2f}x the FP16 GEMM floor" in text
    assert f"{ratio.iloc[0]:.2f} of the fastest half peer" in text


def test_the_committed_half_exchange_runs_kept_the_fastest_and_refused_p2p_for_float16():
    """Two H100, --comm auto in BF16 and FP16: every exchange tried, nccl-half among them; the one kept the fastest
    of the trial epochs; p2p refused for float16, naming why."""
    import json

    from perflab.results import RESULTS_ROOT
    rows = [json.loads(line) for line in
            (RESULTS_ROOT / "nvidia-h100-80gb-hbm3" / "half" / "half_exchange_h100x2.jsonl").read_text().splitlines()]
    assert {r["dtype"] for r in rows} == {"bfloat16", "float16"} and all(r["ranks"] == 2 for r in rows)
    for r in rows:
        trial = r["exchange_trial_s"]
        timed = {k: v for k, v in trial.items() if isinstance(v, float)}
        kept = "overlap" if r["overlap"] else r["comm"]
        assert set(trial) == {"nccl", "overlap", "p2p", "nccl-half"} and kept == min(timed, key=timed.get)
        assert ("p2p" in timed) == (r["dtype"] == "bfloat16")
        assert r["machine"]["git_commit"] != "WORKTREE"


def test_the_half_precision_blind_check_lands_within_a_tenth_for_one_hidden_layer():
    """One H100, predicted before its run from that boot's ceilings (the mixed-precision step timed whole): the
    one-hidden-layer points within 10%, the deeper net's under-predicted (its hidden layer is timed as four
    kernels alone, not inside the step), all within 25%."""
    import json

    import pandas as pd

    from perflab.report.predictions import check_table
    from perflab.results import RESULTS_ROOT
    name = "h100_half_h1152_h2304_b1200_b2400"
    made = json.loads((RESULTS_ROOT / "predictions" / f"{name}.json").read_text())
    both, err, _ = check_table(pd.DataFrame(made["rows"]),
                               pd.read_csv(RESULTS_ROOT / "nvidia-h100-80gb-hbm3" / f"prediction_check_{name}.csv"))
    assert len(both) == 12 and set(both.dtype) == {"bfloat16", "float16"}
    deep = both.H.str.contains("-")
    assert (err[~deep].abs() <= 0.10).all() and (err[deep] < 0).all() and (err.abs() <= 0.25).all()


def test_each_machine_is_given_the_precisions_it_runs():
    from perflab.workbook import precision
    assert list(precision.precisions_here("numpy")) == ["FP32", "BF16 (emulated)", "FP16 (emulated)"]
    hopper = precision.precisions_here("cupy", "90")
    assert list(hopper) == ["FP32", "TF32", "3xTF32", "BF16", "FP16"] and hopper["TF32"] == ("float32", "wgmma")
    assert list(precision.precisions_here("cupy", "75")) == ["FP32", "FP16"]  # Turing: no TF32 or BF16 tensor cores
    ampere = precision.precisions_here("cupy", "80")
    assert ampere["TF32"][1] == "tf32" and ampere["3xTF32"][1] == "cublas-x3tf32" and "BF16" in ampere
    table = precision.table([{"precision": "FP32", "gemm": "cublas", "dtype": "float32", "errors": {"W1": 1e-6},
                              "max_rel_error": 1e-6}])
    assert list(table.columns) == ["precision", "GEMMs", "dtype", "W1 error", "max_rel_error"]


def test_the_precision_table_and_a_half_sweep_refuse_bad_values_naming_them(capsys):
    from perflab.cli import main
    from perflab.workbook import precision
    for args, message in ((["--hidden-size", "0"], "argument --hidden-size: expected a positive integer, got '0'"),
                          (["--num-epochs", "two"], "argument --num-epochs: expected a positive integer, got 'two'")):
        with pytest.raises(SystemExit) as info:
            precision.main(["--out", "/nonexistent", *args])
        assert info.value.code == 2 and message in capsys.readouterr().err
    with pytest.raises(SystemExit) as info:  # a half point the GPU step cannot make: refused before any point runs
        main(["sweep", "--backend", "cupy", "--mode", "staged", "--dtype", "bfloat16", "--name", "never"])
    assert info.value.code == 2 and "--dtype bfloat16 trains data parallel" in capsys.readouterr().err
    with pytest.raises(SystemExit) as info:
        main(["sweep", "--dtype", "bf16"])
    assert info.value.code == 2 and "argument --dtype: invalid choice: 'bf16'" in capsys.readouterr().err


def test_the_committed_half_wgmma_gemm_is_checked_and_the_report_says_what_it_reached():
    """One H100, `bench gemm --dtype bfloat16|float16`: every product of perflab's half wgmma GEMM and cuBLAS's
    matched float64 on the half values; the report's verdict on the 0.9 target follows the file's geometric
    mean, and the epoch on it is compared with the epoch on cuBLAS's."""
    import math

    import pandas as pd

    from perflab.measure.bench import half_gemm_bound
    from perflab.report import markdown
    from perflab.results import RESULTS_ROOT
    folder = RESULTS_ROOT / "nvidia-h100-80gb-hbm3" / "half"
    for kind in ("bfloat16", "float16"):
        t = pd.read_csv(folder / f"bench_gemm_{kind}_wgmma.csv")
        bounds = [half_gemm_bound(kind, r.K, r.out == "float32") for r in t.itertuples()]
        assert (t.rel_error <= bounds).all() and set(t.variant) == {"cublas", "wgmma"} and len(t) == 60
        assert json_commit(folder / f"bench_gemm_{kind}_wgmma.json") != "WORKTREE"
    t = pd.read_csv(folder / "bench_gemm_bfloat16_wgmma.csv")
    mean = math.exp(t[t.variant == "wgmma"].pct_cublas.map(lambda p: math.log(p / 100)).mean())
    sections = "\n".join(markdown.half_gemm_section()).split("## The half-precision GEMM")  # one a machine
    text = next(s for s in sections if s.startswith(" of perflab's own against cuBLAS's, nvidia-h100-80gb-hbm3"))
    assert f"geometric mean {mean:.3f}" in text and ("Missed." in text) == (mean < 0.9)
    e = pd.read_csv(folder / "bench_train_half_wgmma.csv").pivot_table(index=["H", "B"], columns="peer",
                                                                         values="epoch_ms")
    slower = pd.concat([e[f"perflab ({k}, wgmma gemm)"] / e[f"perflab ({k})"] for k in ("bf16", "fp16")])
    assert f"faster at {(slower < 1).sum()} of {len(slower)} points" in text
    assert ("stays the half step's default" in text) == bool((slower >= 1).any())


def json_commit(path) -> str:
    import json
    return json.loads(path.read_text())["git_commit"]


@pytest.mark.parametrize("part", [slice(0, 100), slice(100, 200), slice(500, 517), slice(3, 4),
                                  np.array([0, 5, 77, 300, 516]), np.arange(9, 409, 3)])
def test_a_widened_batch_starts_and_ends_on_aligned_columns_and_holds_its_samples_from_first_on(part):
    """The half GPU step's images (perflab.train.half_gpu.widened, here on NumPy arrays): an aligned start and
    width, the samples in order from `first`, the labels the part's; an index array's extra columns zero."""
    from perflab.train.half_gpu import ALIGN, widened, widest
    N = 517
    wide = np.zeros((13, 520 + ALIGN), np.uint16)  # as HalfWeights.images lays them out: N rounded up, and ALIGN more
    wide[:, :N] = np.arange(1, N + 1)  # column j holds j + 1: a zero column is a padding one
    y = np.arange(N) * 7
    Xb, yb, first = widened(wide, y, part)
    samples = np.arange(N)[part]
    n = len(samples)
    assert Xb.shape[1] % ALIGN == 0 and Xb.shape[1] <= widest(n) and 0 <= first < ALIGN and first + n <= Xb.shape[1]
    assert np.array_equal(Xb[:, first:first + n], wide[:, samples]) and np.array_equal(yb, y[samples])
    if isinstance(part, slice):  # a view of the images whose first column is aligned
        assert np.shares_memory(Xb, wide) and (part.start - first) % ALIGN == 0
    else:
        assert first == 0 and not Xb[:, n:].any()


@pytest.mark.parametrize("kind, value, refused", [("float16", 65504.0, False), ("float16", 70000.0, True),
                                                  ("bfloat16", 70000.0, False), ("bfloat16", np.inf, True),
                                                  ("float16", np.nan, True)])
def test_images_a_half_step_cannot_hold_finite_are_refused_naming_the_value(kind, value, refused):
    """A GPU half step holds the images in its format; one it would make inf or NaN is refused before training (the
    overflow check on one GPU relies on finite images: D72)."""
    X = np.full((3, 4), 0.5, np.float32)
    X[1, 2] = value
    if not refused:
        half.check_images(X, kind)
        return
    with pytest.raises(ConfigError, match=f"--dtype {kind}: the images hold {float(abs(np.float32(value))):g}, past"):
        half.check_images(X, kind)
