"""Mixed precision on the GPU (--dtype bfloat16 | float16 on FusedGPU): the half-precision GEMMs and
kernels against float64 on the values the half format holds, and the trainer against the emulated step
(perflab.train.half) it implements. Random non-zero inputs of odd sizes, outputs poisoned first."""
import re

import numpy as np
import pytest

from perflab.backend import cupy_or_none
from perflab.train import half, model

cp = cupy_or_none()
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(cp is None, reason="no CUDA GPU with CuPy here: run `make gpu-test` on a GPU machine")]
if cp is not None:
    from perflab import kernels

KINDS = ["bfloat16", "float16"]
ULP = {"bfloat16": 2.0 ** -8, "float16": 2.0 ** -11}  # half a unit in the last place, relative


def rel(a, b):
    a = np.asarray(a, np.float64)
    assert np.isfinite(a).all(), "non-finite output: an element was not written"
    return np.linalg.norm(a - b) / np.linalg.norm(b)


def held(rng, shape, kind, transposed=False, scale=1.0):
    """(device array in kind's storage, its float64 values): a row-major matrix or a transposed view of one."""
    x = (scale * (rng.uniform(-1, 1, shape[::-1] if transposed else shape) + 0.1)).astype(np.float32)
    dev = cp.asarray(half.to_storage(x, kind))
    values = half.from_storage(half.to_storage(x, kind), kind).astype(np.float64)
    return (dev.T, values.T) if transposed else (dev, values)


def poisoned(shape, dtype):
    return cp.full(shape, np.nan if np.dtype(dtype).kind == "f" else 0xFFFF, dtype)


def values(x, kind):
    x = x.get()
    return x.astype(np.float64) if x.dtype == np.float32 else half.from_storage(x, kind).astype(np.float64)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("M, K, N", [(1, 1, 1), (17, 33, 65), (511, 785, 3199), (10, 1024, 3200), (130, 7, 259)])
def test_half_gemm_in_every_storage_order_is_fp32_accumulation_of_what_it_reads(rng, kind, M, K, N):
    """Against float64 on the operands' half values: a float32 product within FP32 accumulation's error, a
    half one within one rounding; a wrong type or shape is named."""
    storage = kernels.HALF_STORAGE[kind]
    for ta in (False, True):
        for tb in (False, True):
            (a, ha), (b, hb) = held(rng, (M, K), kind, ta), held(rng, (K, N), kind, tb)
            for out_dtype, bound in ((np.float32, 1e-5), (storage, ULP[kind])):
                out = poisoned((M, N), out_dtype)
                kernels.half_gemm(a, b, out)
                err = rel(values(out, kind), ha @ hb)
                assert err <= bound, f"{kind} {M}x{K}x{N} ta={ta} tb={tb} -> {np.dtype(out_dtype)}: {err:.2e}"
    with pytest.raises(kernels.KernelError, match="one half precision"):
        kernels.half_gemm(cp.zeros((3, 4), np.float32), cp.zeros((4, 5), np.float32), cp.zeros((3, 5), np.float32))
    with pytest.raises(kernels.KernelError, match=r"out must be a C-contiguous .* of shape \(3, 5\)"):
        kernels.half_gemm(cp.zeros((3, 4), storage), cp.zeros((4, 5), storage), cp.zeros((3, 4), np.float32))


@pytest.mark.parametrize("kind", KINDS)
def test_cublas_makes_a_half_product_in_a_graph_without_a_memset_and_a_weight_gradient_after_it_right(rng, kind):
    """A half product is made with no workspace (D76): its captured graph holds the GEMM and no memset, where
    cuBLAS's default workspace gave the step's H = 2048 forward GEMMs one each. The float weight gradient
    captured after it, with the default workspace back, still matches float64."""
    storage = kernels.HALF_STORAGE[kind]
    (w, hw), (x, hx) = held(rng, (2048, 784), kind), held(rng, (784, 3200), kind)
    (dz, hdz), (xt, hxt) = held(rng, (2047, 3199), kind), held(rng, (3199, 785), kind, transposed=True)
    a, g = poisoned((2048, 3200), storage), poisoned((2047, 785), np.float32)
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        kernels.half_gemm(w, x, a)   # outside the capture first, as the trainers warm up
        kernels.half_gemm(dz, xt, g)
        a[...], g[...] = poisoned(a.shape, storage), poisoned(g.shape, np.float32)
        stream.begin_capture()
        kernels.half_gemm(w, x, a)
        product = stream.end_capture()
        stream.begin_capture()
        kernels.half_gemm(w, x, a)
        kernels.half_gemm(dz, xt, g)
        both = stream.end_capture()
    dot = product.debug_dot_str()
    assert len(re.findall(r'_node_\d+"\[', dot, re.I)) == 1 and "memset" not in dot.lower(), dot  # the GEMM alone
    both.launch(stream)
    stream.synchronize()
    assert rel(values(a, kind), hw @ hx) <= ULP[kind]
    assert rel(values(g, kind), hdz @ hxt) <= 1e-5


def hopper_or_skip():
    if int(cp.cuda.Device().compute_capability) != 90:
        pytest.skip("the wgmma GEMMs are sm_90a code: this GPU is not a Hopper")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("M, K, N", [(1, 1, 1), (17, 33, 65), (511, 785, 3199), (10, 1024, 3200), (130, 7, 259),
                                     (1024, 784, 3200), (136, 3200, 784), (264, 72, 1000)])
def test_half_wgmma_in_every_storage_order_is_fp32_accumulation_of_what_it_reads(rng, kind, M, K, N):
    """perflab's BF16/FP16 wgmma GEMM, each operand K-major or MN-major (read in place where its rows are
    16-byte aligned, copied where not), into float32 or half, with and without the bias + sigmoid
    epilogue: against float64 on the half values it reads, within FP32 accumulation's error (one
    rounding more for a half product); the choice tune() makes for the shape, then the untuned one."""
    hopper_or_skip()
    storage = kernels.HALF_STORAGE[kind]
    bias = rng.uniform(-1, 1, M)
    for ta in (False, True):
        for tb in (False, True):
            (a, ha), (b, hb) = held(rng, (M, K), kind, ta), held(rng, (K, N), kind, tb)
            for out_dtype, bound in ((np.float32, 1e-5), (storage, ULP[kind])):
                out = poisoned((M, N), out_dtype)
                kernels.half_gemm(a, b, out, variant="wgmma", config="wg2-n256-s4", splits=1)
                err = rel(values(out, kind), ha @ hb)
                assert err <= bound, f"{kind} {M}x{K}x{N} ta={ta} tb={tb} -> {np.dtype(out_dtype)}: {err:.2e}"
                out = poisoned((M, N), out_dtype)
                kernels.half_gemm(a, b, out, cp.asarray(bias, np.float32), variant="wgmma")
                want = 1 / (1 + np.exp(-(ha @ hb + bias[:, None])))
                assert rel(values(out, kind), want) <= bound, f"bias: {kind} {M}x{K}x{N} ta={ta} tb={tb}"
    out = poisoned((M, N), np.float32)
    kernels.tune(a, b, out, "wgmma")
    kernels.half_gemm(a, b, out, variant="wgmma")
    assert rel(values(out, kind), ha @ hb) <= 1e-5
    with pytest.raises(kernels.KernelError, match="the half-precision GEMMs are .* got 'best'"):
        kernels.half_gemm(a, b, out, variant="best")


@pytest.mark.parametrize("kind", KINDS)
def test_every_half_wgmma_config_and_split_in_the_layouts_a_step_reads(rng, kind):
    """Every (config, splits) tune() may pick, in each layout the half step reads in place (W X with X
    N-contiguous; dz a^T; W^T dz), into half (bias + sigmoid after the split-K sum too) and float32;
    a config that is not the half kernel's is refused naming those that are."""
    hopper_or_skip()
    from perflab.kernels.wgmma import choices
    M, K, N = 200, 1096, 392
    storage = kernels.HALF_STORAGE[kind]
    bias = rng.uniform(-1, 1, M)
    for ta, tb in ((False, False), (False, True), (True, False)):
        (a, ha), (b, hb) = held(rng, (M, K), kind, ta), held(rng, (K, N), kind, tb)
        want = 1 / (1 + np.exp(-(ha @ hb + bias[:, None])))
        for config, splits in choices(M, N, K, "half"):
            out = poisoned((M, N), storage)
            kernels.half_gemm(a, b, out, cp.asarray(bias, np.float32), variant="wgmma", config=config, splits=splits)
            assert rel(values(out, kind), want) <= ULP[kind], (ta, tb, config, splits)
            out = poisoned((M, N), np.float32)
            kernels.half_gemm(a, b, out, variant="wgmma", config=config, splits=splits)
            assert rel(values(out, kind), ha @ hb) <= 1e-5, (ta, tb, config, splits)
    with pytest.raises(kernels.KernelError, match="half has no tile config 'wg2-n192-s5'"):
        kernels.half_gemm(a, b, out, variant="wgmma", config="wg2-n192-s5", splits=1)


@pytest.mark.parametrize("kind", KINDS)
def test_two_ways_with_as_few_k_stages_as_ways_or_fewer(rng, kind):
    """A two-way config (warpgroups taking a tile's k-stages in turn) where a way has one stage or none
    (K of 1 or 2 stages, odd), a column half wholly past N, with and without splits, and over several tiles
    a CTA (1100 x 3000: 18 blocks of 64 rows by 24-47 column blocks, 16-bit C staged between them): the sums
    match, and no way hangs."""
    hopper_or_skip()
    from perflab.kernels.wgmma import CONFIGS, config_name
    storage = kernels.HALF_STORAGE[kind]
    two_ways = [config_name(c) for c in CONFIGS["half"] if c[5] == 2]
    assert two_ways
    for M, K, N in ((70, 33, 300), (130, 100, 56), (65, 1000, 129), (1100, 200, 3000), (1100, 1000, 3000)):
        (a, ha), (b, hb) = held(rng, (M, K), kind, False), held(rng, (K, N), kind, False)
        bias = rng.uniform(-1, 1, M)
        for config in two_ways:
            for splits in (1, 2):
                out = poisoned((M, N), np.float32)
                kernels.half_gemm(a, b, out, variant="wgmma", config=config, splits=splits)
                assert rel(values(out, kind), ha @ hb) <= 1e-5, (M, K, N, config, splits)
            out = poisoned((M, N), storage)
            kernels.half_gemm(a, b, out, cp.asarray(bias, np.float32), variant="wgmma", config=config, splits=1)
            want = 1 / (1 + np.exp(-(ha @ hb + bias[:, None])))
            assert rel(values(out, kind), want) <= ULP[kind], (M, K, N, config)


@pytest.mark.parametrize("kind", KINDS)
def test_narrow_copy_rounds_as_the_reference_does_in_any_layout(rng, kind):
    x = cp.asarray(np.asfortranarray(rng.standard_normal((37, 101)).astype(np.float32) * 3))
    out = kernels.narrow_copy(x, cp.empty_like(x, dtype=kernels.HALF_STORAGE[kind]))
    assert out.flags.f_contiguous
    assert np.array_equal(out.get(), half.to_storage(x.get(), kind))
    with pytest.raises(kernels.KernelError, match="shape and layout"):
        kernels.narrow_copy(x, cp.empty(x.shape, kernels.HALF_STORAGE[kind]))  # C order: not x's layout


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("C, H, n", [(10, 512, 3200), (7, 61, 37), (3, 1001, 4097), (16, 200, 1000)])
def test_the_step_kernels_read_and_write_half_and_compute_in_fp32(rng, kind, C, H, n):
    """bias + sigmoid, the fused output layer forward and backward, and sigmoid' with row sums, each
    against float64 on the half values it reads, its half output within one rounding."""
    f32 = lambda x: cp.asarray(x.astype(np.float32))  # noqa: E731
    W2, b1, b2 = rng.normal(size=(C, H)) * 0.2, rng.normal(size=H), rng.normal(size=C)
    z, hz = held(rng, (H, n), kind, scale=2.0)
    kernels.bias_sigmoid(z, f32(b1))
    a_ref = model.sigmoid(hz + b1.astype(np.float32)[:, None])
    assert rel(values(z, kind), a_ref) <= ULP[kind]
    z, hz = held(rng, (H, n), kind, scale=2.0)
    y = rng.integers(0, C, n)
    delta, ce = poisoned((C, n), np.float32), poisoned(n, np.float32)
    forward = poisoned(kernels.output_layer_partials(H, n, C), np.float32)
    scale = cp.asarray([4.0], np.float32)
    kernels.output_layer(f32(W2), f32(b1), f32(b2), z, cp.asarray(y), delta, 3 * n, forward, ce, scale)
    a1 = values(z, kind)  # the activation as stored: what the output GEMM read
    assert rel(a1, model.sigmoid(hz + b1.astype(np.float32)[:, None])) <= ULP[kind]
    W2_32 = W2.astype(np.float32).astype(np.float64)
    assert rel(logits(forward, C, n), W2_32 @ a1) <= 3e-5  # the row blocks' sums, added by the softmax
    yhat = model.softmax(W2_32 @ a1 + b2.astype(np.float32)[:, None])
    assert rel(delta.get(), 4.0 * model.output_delta(yhat, y, 3 * n)) <= 1e-5  # times the loss scale
    assert rel(ce.get(), -np.log(yhat[y, np.arange(n)])) <= 1e-5
    d = rng.normal(size=(C, n)).astype(np.float32) / n
    a, ha = held(rng, (H, n), kind)
    dz, dW2, db1 = poisoned((H, n), a.dtype), poisoned((C, H), np.float32), poisoned(H, np.float32)
    part = poisoned(kernels.output_backward_partials(H, n, C), np.float32)
    db2 = poisoned(C, np.float32)
    kernels.output_backward(f32(W2), cp.asarray(d), a, dz, dW2, db1, part, db2=db2)  # db2 in the same pass
    ref_dz = (W2_32.T @ d) * ha * (1 - ha)
    assert rel(values(dz, kind), ref_dz) <= ULP[kind]
    assert rel(dW2.get(), d @ ha.T) <= 1e-5 and rel(db1.get(), ref_dz.sum(axis=1)) <= 1e-5
    assert rel(db2.get(), d.astype(np.float64).sum(axis=1)) <= 1e-5
    with pytest.raises(kernels.KernelError, match="workspace"):
        kernels.output_backward(f32(W2), cp.asarray(d), a, dz, dW2, db1, part[:part.size - 1], db2=db2)
    da, hda = held(rng, (H, n), kind)
    db = poisoned(H, np.float32)
    kernels.sigmoid_backward_rows(da, a, db)
    ref = hda * ha * (1 - ha)
    assert rel(values(da, kind), ref) <= ULP[kind] and rel(db.get(), ref.sum(axis=1)) <= 1e-5


def logits(part, C, n):
    """W_L a_{L-1} from output_layer's workspace, where the softmax leaves the sum of its row blocks' partial sums."""
    return part.get()[:C * n].astype(np.float64).reshape(C, n)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("C, H, n, size", [(10, 300, 999, 0.2), (7, 61, 37, 0.2), (10, 300, 999, 1e-4),
                                           (7, 61, 37, 1e-5)])
def test_the_fused_forward_keeps_fp32s_accuracy_with_a_weight_past_fp16s_range(rng, kind, C, H, n, size):
    """A float16 pass splits W_L into FP16 high and low parts, which cannot hold a value past 65504: the warp that
    reads one takes BF16 parts instead, and its sums stay FP32-accurate (the other warps keep FP16's, as accurate
    for small weights, whose parts FP16's normal range holds only scaled)."""
    W2 = rng.normal(size=(C, H)) * size
    W2[C // 2, H // 3], W2[0, H - 1] = 7.0e4, -1.0e5
    b1 = rng.normal(size=H)
    z, hz = held(rng, (H, n), kind, scale=2.0)
    forward = poisoned(kernels.output_layer_partials(H, n, C), np.float32)
    delta = poisoned((C, n), np.float32)
    kernels.output_layer(cp.asarray(W2.astype(np.float32)), cp.asarray(b1.astype(np.float32)),
                         cp.zeros(C, np.float32), z, cp.asarray(rng.integers(0, C, n)), delta, n, forward)
    a1 = values(z, kind)
    assert rel(a1, model.sigmoid(hz + b1.astype(np.float32)[:, None])) <= ULP[kind]
    got, ref = logits(forward, C, n), W2.astype(np.float32).astype(np.float64) @ a1
    assert max(rel(got[c], ref[c]) for c in range(C)) <= 3e-5  # each class alone: the large ones would hide the rest


@pytest.mark.parametrize("C, H, n", [(7, 61, 37), (10, 512, 3200)])
def test_float16s_backward_passes_flag_a_gradient_they_make_that_is_not_finite(rng, C, H, n):
    """output_backward (its FP16 dz1, and its FP32 sums of dW2 and db2) and sigmoid_backward_rows (its FP16 dz) set
    float16's overflow flag where what they store is not finite, even one value in the last column, and leave it 0
    where all is finite: on one GPU the update then needs no pass over G to find an overflow (D72)."""
    f32 = lambda x: cp.asarray(np.asarray(x, np.float32))  # noqa: E731
    a, _ = held(rng, (H, n), "float16")
    W2, d = rng.normal(size=(C, H)) * 0.2, rng.normal(size=(C, n)) / n

    def flagged(W2, d):
        flag = cp.zeros(1, np.int32)
        kernels.output_backward(f32(W2), f32(d), a, cp.empty_like(a), cp.empty((C, H), np.float32),
                                cp.empty(H, np.float32), cp.zeros(kernels.output_backward_partials(H, n, C), np.float32),
                                db2=cp.empty(C, np.float32), overflow=flag)
        return int(flag.get()[0])
    assert flagged(W2, d) == 0
    assert flagged(W2, d * 1e9) == 1  # dz1 past 65504: inf in FP16
    last = d.copy()
    last[:, -1] *= 1e9
    assert flagged(W2, last) == 1  # the last column's alone (the last block, its last chunk)
    assert flagged(np.zeros((C, H)), np.full((C, n), 3e38)) == 1  # dz1 zero, dW2's and db2's sums past FP32's range
    for where in (None, (H // 2, n - 1)):
        da, hda = held(rng, (H, n), "float16")
        if where is not None:
            da[where] = np.float16(np.inf)
        flag = cp.zeros(1, np.int32)
        kernels.sigmoid_backward_rows(da, a, cp.empty(H, np.float32), overflow=flag)
        assert int(flag.get()[0]) == (where is not None)


@pytest.mark.parametrize("kind", KINDS)
def test_the_16_byte_elementwise_passes_fall_back_on_a_view_that_is_not_16_byte_aligned(rng, kind):
    """bias_sigmoid and sigmoid_backward_rows move 16 bytes a load only where z's rows are whole eights and
    16-byte aligned: the same rows one element into a buffer give the same values."""
    H, n = 37, 64
    f32 = cp.asarray(rng.normal(size=H).astype(np.float32))
    for shift in (0, 1):
        z, hz = held(rng, (H * n + 1,), kind, scale=2.0)
        view = z[shift:shift + H * n].reshape(H, n)
        kernels.bias_sigmoid(view, f32)
        assert rel(values(view, kind), model.sigmoid(hz[shift:shift + H * n].reshape(H, n) + f32.get()[:, None])) <= ULP[kind]
        a, ha = held(rng, (H * n + 1,), kind)
        da, hda = held(rng, (H * n + 1,), kind)
        db = poisoned(H, np.float32)
        kernels.sigmoid_backward_rows(da[shift:shift + H * n].reshape(H, n), a[shift:shift + H * n].reshape(H, n), db)
        ref = (hda * ha * (1 - ha))[shift:shift + H * n].reshape(H, n)
        assert rel(values(da[shift:shift + H * n].reshape(H, n), kind), ref) <= ULP[kind]
        assert rel(db.get(), ref.sum(axis=1)) <= 1e-5


@pytest.mark.parametrize("kind", KINDS)
def test_the_update_rounds_the_new_weights_for_the_gemms_in_the_same_pass_and_a_skipped_step_leaves_both(rng, kind):
    """sgd_update(rounded=) writes the FP32 masters and their half rounding; sgd_update_scaled skips both
    on a gradient that overflowed."""
    n = 70001
    p, g = rng.normal(size=n).astype(np.float32), rng.normal(size=n).astype(np.float32)
    ends, regs = cp.asarray([40001, 40103, n], np.int64), cp.asarray([0.1, 0.0, 0.1], np.float32)  # inside a thread's 4
    P, rounded = cp.asarray(p), poisoned(n, kernels.HALF_STORAGE[kind])
    kernels.sgd_update(P, cp.asarray(g), 0.3, ends, regs, rounded=rounded)
    seg = np.searchsorted(ends.get(), np.arange(n), side="right")
    assert rel(P.get(), p - np.float32(0.3) * (g + regs.get()[seg] * p)) <= 1e-7
    assert np.array_equal(rounded.get(), half.to_storage(P.get(), kind))
    shifted_p = cp.asarray(np.concatenate([[0], p]).astype(np.float32))[1:]  # not aligned: a value at a time
    shifted_rounded = poisoned(n + 1, kernels.HALF_STORAGE[kind])[1:]
    kernels.sgd_update(shifted_p, cp.asarray(g), 0.3, ends, regs, rounded=shifted_rounded)
    assert np.array_equal(shifted_p.get(), P.get()) and np.array_equal(shifted_rounded.get(), rounded.get())
    aligned_p, odd_rounded = cp.asarray(p), poisoned(n + 1, kernels.HALF_STORAGE[kind])[1:]  # P aligned, its copy not
    kernels.sgd_update(aligned_p, cp.asarray(g), 0.3, ends, regs, rounded=odd_rounded)
    assert np.array_equal(aligned_p.get(), P.get()) and np.array_equal(odd_rounded.get(), rounded.get())
    before, held_before = P.copy(), rounded.copy()
    g[7] = np.inf
    overflow, counts = cp.zeros(1, np.int32), cp.zeros(3, np.int64)
    kernels.sgd_update_scaled(P, cp.asarray(g), 0.3, ends, regs, cp.asarray([8.0], np.float32), overflow, counts, 100,
                              rounded=rounded)
    assert (P == before).all() and (rounded == held_before).all()
    assert counts.get().tolist() == [0, 1, 1] and int(overflow.get()[0]) == 0  # seen, and reset for the next step
    g[7] = 1.0
    kernels.sgd_update_scaled(P, cp.asarray(g), 0.3, ends, regs, cp.asarray([8.0], np.float32), overflow, counts, 100,
                              rounded=rounded)
    b = before.get()
    assert rel(P.get(), b - np.float32(0.3) * (g / np.float32(8.0) + regs.get()[seg] * b)) <= 1e-7
    assert np.array_equal(rounded.get(), half.to_storage(P.get(), kind))  # the finite step rounds its new weights too
    assert counts.get().tolist() == [1, 0, 1]  # the next step, finite, is made
    g[-1] = np.nan  # past the last whole four gradients: find_overflow's tail
    after = P.copy()
    kernels.sgd_update_scaled(P, cp.asarray(g), 0.3, ends, regs, cp.asarray([8.0], np.float32), overflow, counts, 100)
    assert (P == after).all() and counts.get().tolist() == [0, 1, 2]
    g[-1], g[70000 - 5] = 1.0, -np.inf
    shifted = cp.asarray(np.concatenate([[0], g]).astype(np.float32))[1:]  # not 16-byte aligned: a value a load
    kernels.sgd_update_scaled(P, shifted, 0.3, ends, regs, cp.asarray([8.0], np.float32), overflow, counts, 100)
    assert (P == after).all() and counts.get().tolist() == [0, 2, 3]


@pytest.mark.parametrize("kind", KINDS + ["float32"])
@pytest.mark.parametrize("C, H, n", [(7, 61, 37), (10, 1024, 3200), (3, 1001, 4097)])
def test_the_update_adds_the_output_layers_sums_bit_for_bit_as_the_backward_pass_does(rng, kind, C, H, n):
    """output_backward(reduce=False), then the update with partials=: G's last values (db_{L-1}, dW_L, db_L), P and
    its rounding the same bits as output_backward's own reduction and the update after it, in a half step (db_L among
    the partials) and an FP32 one (db_L from row_sum); float16's under its loss scale, the step made and skipped."""
    front = 70001  # W_1 and what precedes b_{L-1}: not a whole number of 16-byte vectors
    N, whole = front + (C + 1) * H + C, (C + 1) * H
    ends = cp.asarray([front, front + H, front + whole, N], np.int64)
    regs = cp.asarray([0.1, 0.0, 0.1, 0.0], np.float32)
    W2 = cp.asarray(rng.normal(size=(C, H)).astype(np.float32) * 0.2)
    d = cp.asarray(rng.normal(size=(C, n)).astype(np.float32) / n)
    if kind == "float32":
        a = cp.asarray(rng.uniform(0.05, 0.95, (H, n)).astype(np.float32))
    else:
        a, _ = held(rng, (H, n), kind)
    p, g = rng.normal(size=N).astype(np.float32), rng.normal(size=N).astype(np.float32)
    for skipped in ((False, True) if kind == "float16" else (None,)):
        made = {}
        for way in ("backward", "update"):
            P, G = cp.asarray(p), cp.asarray(g)
            G[front:] = np.nan  # every sum must be written
            db1, dW2, db2 = G[front:front + H], G[front + H:front + whole].reshape(C, H), G[front + whole:]
            rounded = None if kind == "float32" else poisoned(N, kernels.HALF_STORAGE[kind])
            dz = poisoned((H, n), a.dtype)
            part = poisoned(kernels.output_backward_partials(H, n, C), np.float32)
            flag = cp.full(1, int(bool(skipped)), np.int32) if kind == "float16" else None
            if kind == "float32":
                kernels.row_sum(d, db2)
            sums = kernels.output_backward(W2, d, a, dz, dW2, db1, part, db2=None if kind == "float32" else db2,
                                           overflow=flag, reduce=way == "backward")
            partials = sums if way == "update" else None
            if kind == "float16":
                scale, counts = cp.asarray([8.0], np.float32), cp.zeros(3, np.int64)
                kernels.sgd_update_scaled(P, G, 0.3, ends, regs, scale, flag, counts, 100, rounded=rounded, find=False,
                                          partials=partials)
                assert counts.get().tolist() == ([0, 1, 1] if skipped else [1, 0, 0])
            else:
                kernels.sgd_update(P, G, 0.3, ends, regs, rounded=rounded, partials=partials)
            made[way] = [x.get() for x in (P, dz, G) + ((rounded,) if rounded is not None else ())]
        for before, after in zip(made["backward"], made["update"]):
            assert np.array_equal(before.view(np.uint8), after.view(np.uint8))
        if skipped:
            assert np.array_equal(made["update"][0], p)  # a skipped step leaves P as it was
    if kind == "float16":
        with pytest.raises(kernels.KernelError, match="only with find=False"):
            kernels.sgd_update_scaled(P, G, 0.3, ends, regs, scale, flag, counts, 100, partials=sums)
    with pytest.raises(kernels.KernelError, match="partials float64"):
        kernels.sgd_update(P, G, 0.3, ends, regs, partials=sums._replace(part=part.astype(np.float64)))


def tiny(kind, hidden, **kw):
    from perflab.config import Config
    return Config(**{**dict(dataset="synthetic", input_size=97, hidden_sizes=hidden, num_classes=7, train_size=517,
                            batch_size=100, num_epochs=2, learning_rate=0.5, test_size=50, dtype=kind, print_every=2),
                     **kw})


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("hidden", [(61,), (61, 37), (61, 37, 23)])
@pytest.mark.parametrize("graphs", [True, False])
def test_the_fused_half_step_trains_as_the_emulated_one(kind, hidden, graphs):
    """perflab check on the GPU: the fused trainer against the emulated step of the same precision (FP32
    masters, losses batch by batch), at depths 1-3, graphed (an epoch a graph) and not."""
    from perflab import data
    from perflab.train import gpu, loop
    from perflab.train.comm import Serial
    from perflab.train.runner import TOLERANCE, check, make_gpu_trainer
    from perflab.train.spec import RunSpec
    cfg = tiny(kind, hidden)
    device = RunSpec(backend="cupy", launch="graph" if graphs else "eager", exchange="nccl")
    trainer = make_gpu_trainer(cfg, "data", Serial(), device, data.load(cfg)[0])
    assert isinstance(trainer, gpu.FusedGPU) and trainer.acts[0].itemsize == 2 and trainer.P.dtype == np.float32
    history = loop.fit(cfg, trainer, progress=False, sync=trainer.sync)
    trainer.close()
    train_set = data.load(cfg)[0]
    emulated = half.MixedPrecision(cfg, model.init_params(cfg.layer_sizes, "float32", cfg.seed), train_set.X,
                                   train_set.y, Serial())
    reference = loop.fit(cfg, emulated, progress=False)
    for got, want in zip(history.params, reference.params):
        assert rel(got, want) <= TOLERANCE[kind]
    assert rel([r["loss"] for r in history.losses], np.array([r["loss"] for r in reference.losses])) <= TOLERANCE[kind]
    result = check(cfg, "data", Serial(), device)
    assert result["passed"], result["errors"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("gemm", ["cublas", "wgmma"])
@pytest.mark.parametrize("sizes", [dict(), dict(input_size=104, hidden_sizes=(64, 40), batch_size=96, train_size=576)])
def test_the_half_step_on_each_gemm_trains_as_the_emulated_one(kind, gemm, sizes):
    """--gemm cublas | wgmma with --dtype bfloat16 | float16: perflab check against the emulated step, at
    its precision's tolerance, graphed and not, at odd sizes (wgmma's operands copied K-major) and at
    sizes whose rows are 16-byte aligned (every operand read in place, K-major or MN-major)."""
    if gemm == "wgmma":
        hopper_or_skip()
    from perflab.train.comm import Serial
    from perflab.train.runner import TOLERANCE, check
    from perflab.train.spec import RunSpec
    cfg = tiny(kind, (61, 37), **sizes)
    for graphs in (True, False):
        result = check(cfg, "data", Serial(),
                       RunSpec(backend="cupy", gemm=gemm, launch="graph" if graphs else "eager", exchange="nccl"))
        assert result["passed"] and result["tolerance"] == TOLERANCE[kind], (graphs, result["errors"])


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("fuse_output, fuse_backward", [(False, False), (True, False), (False, True)])
def test_the_unfused_half_step_trains_as_the_fused_one(kind, fuse_output, fuse_backward):
    from perflab import data
    from perflab.train import loop
    from perflab.train.comm import Serial
    from perflab.train.gpu import FusedGPU
    from perflab.train.runner import TOLERANCE
    cfg = tiny(kind, (61, 37))
    split = data.load(cfg)[0]
    runs = []
    for o, b in ((fuse_output, fuse_backward), (True, True)):
        trainer = FusedGPU(cfg, split.X, split.y, Serial(), fuse_output=o, fuse_backward=b)
        runs.append(loop.fit(cfg, trainer, progress=False, sync=trainer.sync).params)
    for a, b in zip(*runs):
        assert rel(a, b) <= TOLERANCE[kind] / 3


def test_float16_skips_a_step_that_overflowed_on_the_device_and_gives_up_with_a_message():
    """The loss scale lives on the device, inside the epoch's graph: a scale that overflows leaves the
    parameters as they were and halves; one that overflows step after step ends the run."""
    from perflab import data
    from perflab.train import loop
    from perflab.train.comm import Serial
    from perflab.train.gpu import FusedGPU
    cfg = tiny("float16", (61,))
    split = data.load(cfg)[0]
    trainer = FusedGPU(cfg, split.X, split.y, Serial())
    before = trainer.P.copy()
    with trainer.stream:  # (the trainer's stream does not wait for the default one)
        trainer.scale[...] = 2.0 ** 120  # delta times this overflows float16 at once
    trainer.batch(slice(0, 100))
    assert bool((trainer.P == before).all()) and float(trainer.scale.get()[0]) == 2.0 ** 119
    assert trainer.loss_scale.counts.get().tolist() == [0, 1, 1] and trainer.skipped == 1
    with trainer.stream:
        trainer.scale[...] = 2.0 ** 16
    trainer.batch(slice(100, 200))
    assert not bool((trainer.P == before).all()) and trainer.loss_scale.counts.get().tolist() == [1, 0, 1]
    with trainer.stream:
        trainer.scale[...] = 2.0 ** 126
    with pytest.raises(half.LossScaleError, match=r"float16 gradients overflowed 4\d steps in a row"):
        loop.fit(tiny("float16", (61,), num_epochs=10), trainer, progress=False, sync=trainer.sync)


@pytest.mark.parametrize("kwargs, message", [
    ({"gemm": "best"}, "--gemm best: use --parallel data --mode resident --gemm cublas"),
    ({"mode": "staged"}, "--mode staged"),
    ({"mode": "pipelined"}, "--mode pipelined"),
])
def test_a_half_run_the_gpu_step_cannot_make_is_refused_naming_what_to_use(kwargs, message):
    from perflab import data
    from perflab.train import gpu
    from perflab.train.comm import Serial
    from perflab.train.runner import make_gpu_trainer
    from perflab.train.spec import RunSpec, SpecError
    cfg = tiny("bfloat16", (61,))
    with pytest.raises(gpu.GPUError, match=message) as refused:  # each mode's own exchange (the staged ones: MPI's)
        make_gpu_trainer(cfg, "data", Serial(), RunSpec(backend="cupy", **kwargs), data.load(cfg)[0])
    assert isinstance(refused.value, SpecError)  # RunSpec.validate's refusal, the one the CLI prints
    with pytest.raises(gpu.GPUError, match="--parallel model"):
        make_gpu_trainer(cfg, "model", Serial(), RunSpec(backend="cupy", exchange="nccl"), data.load(cfg)[0])


def test_float16_without_a_loss_scale_loses_small_gradients_that_the_scale_keeps():
    """Gradients made small (a loss 10^4 times smaller, as late in training): the fused FP16 step unscaled
    flushes most of the first hidden layer's gradient to zero and its dW1 strays far from FP32's; loss-scaled
    by 2^16 it keeps them, and at the loss as it is both agree with FP32 (perflab.workbook.precision)."""
    from perflab.workbook import precision
    cfg = tiny("float16", (61,), batch_size=500, train_size=500, test_size=0)
    trained = precision.trained_params(cfg, epochs=30)
    unscaled, scaled = precision.fp16_gradient_loss(cfg, trained, smaller=1e4)
    assert unscaled["loss_scale"] == 1 and scaled["loss_scale"] == 2 ** 16
    flushed = (unscaled["dz1_flushed_to_zero"], scaled["dz1_flushed_to_zero"])
    assert flushed[0] > 0.5 and flushed[1] < 0.01, flushed
    errors = (unscaled["errors"]["W1"], scaled["errors"]["W1"])
    assert errors[0] > 0.1 and errors[1] < 1e-2, errors
    ordinary = precision.fp16_gradient_loss(cfg, trained)
    assert all(r["errors"]["W1"] < 1e-2 for r in ordinary), [r["errors"] for r in ordinary]


@pytest.mark.parametrize("kind", KINDS)
def test_the_half_precision_exchange_sums_the_gradient_rounded_to_the_runs_precision(rng, kind):
    """--comm nccl-half on one rank (an NCCL communicator of one): an FP32 buffer comes back as its values
    rounded to the half precision, in place, its slices too (WFBP's), and widen_copy is narrow_copy's inverse."""
    from perflab.train.comm import MPIComm, NCCLComm
    comm = NCCLComm(MPIComm(), half=kind)
    assert comm.strategy == "nccl-half"
    host = (rng.standard_normal(10007) * 3).astype(np.float32)
    buf = cp.asarray(host)
    assert comm.allreduce(buf) is buf
    assert np.array_equal(buf.get(), half.round_to(host, kind))
    part = cp.asarray(host)
    comm.allreduce(part[5:999])
    assert np.array_equal(part.get()[5:999], half.round_to(host[5:999], kind)) and np.array_equal(part.get()[:5], host[:5])
    held = kernels.narrow_copy(cp.asarray(host), cp.empty(host.size, kernels.HALF_STORAGE[kind]))
    assert np.array_equal(kernels.widen_copy(held, cp.empty(host.size, np.float32)).get(), half.round_to(host, kind))


@pytest.mark.parametrize("kind", KINDS)
def test_the_first_eager_step_waits_for_the_trainers_own_set_up(kind, monkeypatch):
    """The set-up's half copies (the weights and the images) are kernels on the caller's stream, which the trainer's
    non-blocking stream does not wait for by itself: with each copy held behind a busy kernel, the first eager steps
    still read them whole, and train as a set-up that was not held (docs/DECISIONS.md, D58)."""
    from perflab import data, kernels
    from perflab.train import loop
    from perflab.train.comm import Serial
    from perflab.train.runner import make_gpu_trainer
    from perflab.train.spec import RunSpec
    cfg = tiny(kind, (61,), num_epochs=1, print_every=1)
    spec = RunSpec(backend="cupy", launch="eager", exchange="nccl")

    def losses():
        trainer = make_gpu_trainer(cfg, "data", Serial(), spec, data.load(cfg)[0])
        history = loop.fit(cfg, trainer, progress=False, sync=trainer.sync)
        trainer.close()
        return [r["loss"] for r in history.losses]
    quiet = losses()
    copy, busy = kernels.narrow_copy, cp.ones((2048, 2048), np.float32)

    def held_copy(src, dst):  # the copy queued behind some milliseconds of other work on its stream
        for _ in range(20):
            cp.matmul(busy, busy)
        return copy(src, dst)
    monkeypatch.setattr(kernels, "narrow_copy", held_copy)
    assert losses() == quiet


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("classes", [7, 20])  # 20: past SOFTMAX_REGS and MAX_FUSED_CLASSES, the output layer unfused
def test_a_widened_batch_gives_the_gradient_of_its_samples_alone(kind, classes):
    """A half step widens its images to aligned columns (perflab.train.half_gpu.widened): the extra columns,
    real neighbouring images, must add nothing to the gradient or to the loss. The same samples as one exact,
    unwidened operand give the same G (to the last bits' summation order; an extra column adding in would
    move it by about a tenth)."""
    from perflab import data
    from perflab.train.comm import Serial
    from perflab.train.gpu import FusedGPU
    from perflab.train.half_gpu import ALIGN
    cfg = tiny(kind, (61, 37), num_classes=classes)
    split = data.load(cfg)[0]
    trainer = FusedGPU(cfg, split.X, split.y, Serial())
    assert trainer.fuse_output == (classes <= kernels.MAX_FUSED_CLASSES)
    # a batch, the second rank's part of one over two ranks (parallel.local_part), the last, a shuffled one
    for part in (slice(100, 200), slice(150, 200), slice(500, 517), np.array([3, 50, 77, 200, 201, 333, 516])):
        Xb, yb, first = trainer.batch_images(part)
        n = len(yb)
        assert Xb.shape[1] % ALIGN == 0 and Xb.data.ptr % (2 * ALIGN) == 0 and Xb.strides[0] % (2 * ALIGN) == 0
        assert Xb.shape[1] > n  # N = 517 and B = 100: every part here is widened
        grads = []
        for args in ((Xb, yb, n, True, first), (cp.ascontiguousarray(trainer.X[:, part]), yb, n, True, 0)):
            with trainer.stream:
                trainer.G[...] = np.nan
                trainer.gradients(*args)
            trainer.sync()
            grads.append(trainer.G.get().astype(np.float64))
        assert np.isfinite(grads[0]).all()
        assert rel(grads[0], grads[1]) <= 2e-3, part
    trainer.close()
