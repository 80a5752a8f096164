"""GPU kernels and GPU training against the float64 NumPy reference (run with `make gpu-test`
on a machine with an NVIDIA GPU; skipped with a message elsewhere). Fresh random non-zero
inputs of odd sizes; outputs poisoned with NaN first so an unwritten element fails."""
import functools
import itertools

import numpy as np
import pytest

from perflab.backend import cupy_or_none
from perflab.train import model

cp = cupy_or_none()
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(cp is None, reason="no CUDA GPU with CuPy here: run `make gpu-test` on a GPU machine")]
if cp is not None:
    from perflab import kernels

TOL = {"float32": 1e-5, "float64": 1e-12}
LAUNCH = {True: "graph", False: "eager"}  # a test's `graphs` as RunSpec's --launch
SHAPES = [(1, 1, 1), (17, 33, 65), (511, 785, 3199), (512, 784, 3200), (10, 512, 3200), (512, 3200, 784),
          (10, 3200, 512), (512, 10, 3200), (130, 7, 259)]


def rel(a, b):
    a = np.asarray(a, np.float64)
    assert np.isfinite(a).all(), "non-finite output: an element was not written"
    return np.linalg.norm(a - b) / np.linalg.norm(b)


def operand(rng, rows, cols, transposed, dtype):
    """A rows x cols matrix stored row-major, or as the transpose of a row-major matrix."""
    host = rng.uniform(-1, 1, (cols, rows) if transposed else (rows, cols)) + 0.1
    dev = cp.asarray(host.astype(dtype))
    return (dev.T, host.T) if transposed else (dev, host)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("variant", ["naive", "tiled", "regblock", "best", "cublas"])
@pytest.mark.parametrize("M, K, N", SHAPES)
def test_gemm_all_transposes(rng, variant, dtype, M, K, N):
    if variant == "naive" and M * N * K > 2e8:
        pytest.skip("naive at this size takes seconds and adds nothing the small sizes do not test")
    for ta in (False, True):
        for tb in (False, True):
            a, ha = operand(rng, M, K, ta, dtype)
            b, hb = operand(rng, K, N, tb, dtype)
            out = cp.full((M, N), np.nan, dtype=dtype)
            kernels.gemm(a, b, out=out, variant=variant)
            cp.cuda.runtime.deviceSynchronize()
            err = rel(out.get(), ha @ hb)
            assert err <= TOL[dtype], f"{variant} {dtype} {M}x{K}x{N} ta={ta} tb={tb}: {err:.2e}"


@pytest.mark.parametrize("M, K, N", SHAPES)
def test_cublas_x3tf32_is_near_sgemm_accuracy_in_every_storage_order(rng, M, K, N):
    """The 3xTF32 reference (three cuBLAS TF32 products of split operands) within FP32 training's
    tolerance against float64, and ten times closer than one TF32 product (perflab's tf32 kernel).
    Not within 2x of SGEMM: on an H100 its error grows with K past SGEMM's (6.8e-6 against 2.8e-7
    at K = 3200, the same whether the small parts are rounded first or not: the tensor cores'
    accumulation). Square operands (1 x 1 here) once shared one split buffer: a and b keep their own."""
    for ta in (False, True):
        for tb in (False, True):
            a, ha = operand(rng, M, K, ta, "float32")
            b, hb = operand(rng, K, N, tb, "float32")
            exact = ha.astype(np.float32).astype(np.float64) @ hb.astype(np.float32).astype(np.float64)
            errors = {}
            for variant in ("cublas", "cublas-x3tf32", "tf32"):
                out = cp.full((M, N), np.nan, dtype="float32")
                kernels.gemm(a, b, out=out, variant=variant)
                errors[variant] = rel(out.get(), exact)
            assert errors["cublas-x3tf32"] <= 1e-5 and errors["cublas-x3tf32"] <= max(errors["tf32"] / 10, 1e-6), \
                (M, K, N, ta, tb, errors)


def test_cublas_x3tf32_takes_float32_only_and_leaves_cublas_in_fp32(rng):
    a, _ = operand(rng, 33, 17, False, "float64")
    with pytest.raises(kernels.KernelError, match="float32"):
        kernels.gemm(a, a.T, variant="cublas-x3tf32")
    x, hx = operand(rng, 257, 511, False, "float32")
    kernels.gemm(x, x.T, variant="cublas-x3tf32")
    out = (x @ x.T).get()  # CuPy's own matmul on the shared handle: still FP32 afterwards
    exact = hx.astype(np.float32).astype(np.float64) @ hx.astype(np.float32).astype(np.float64).T
    assert rel(out, exact) <= 1e-6


def test_training_with_cublas_x3tf32_matches_the_reference_at_fp32_tolerance():
    from perflab.config import Config
    from perflab.train.comm import Serial
    from perflab.train.runner import check
    from perflab.train.spec import RunSpec
    cfg = Config(dataset="synthetic", input_size=97, hidden_sizes=(61,), num_classes=7, train_size=517,
                 batch_size=100, num_epochs=2, learning_rate=0.5, test_size=50, dtype="float32")
    result = check(cfg, "data", Serial(), RunSpec(backend="cupy", gemm="cublas-x3tf32", exchange="mpi"))
    assert result["max_rel_error"] <= TOL["float32"], result["errors"]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("variant", ["naive", "tiled", "regblock", "best"])
def test_gemm_alpha_beta_and_epilogue(rng, variant, dtype):
    M, K, N = 67, 45, 131
    a, ha = operand(rng, M, K, False, dtype)
    b, hb = operand(rng, K, N, True, dtype)
    c_host = rng.uniform(-1, 1, (M, N))
    out = cp.asarray(c_host.astype(dtype))
    kernels.gemm(a, b, out=out, alpha=0.5, beta=-2.0, variant=variant)
    assert rel(out.get(), 0.5 * ha @ hb - 2.0 * c_host) <= TOL[dtype]
    bias = rng.uniform(-1, 1, M)
    out = cp.full((M, N), np.nan, dtype=dtype)
    kernels.gemm(a, b, out=out, bias=cp.asarray(bias.astype(dtype)), variant=variant)
    assert rel(out.get(), 1 / (1 + np.exp(-(ha @ hb + bias[:, None])))) <= TOL[dtype]


def blocks_for(config, M, N, K, dtype, schedule, variant="best"):
    """The block count of a schedule: "tile" one a tile, ("split", s) s a tile, ("stream", f) a
    fraction f of the tiles (each block then spans tiles and parts of tiles)."""
    tiles, steps = kernels.tile_grid(variant, kernels.ctype(dtype), config, M, N, K)
    if schedule == "tile":
        return tiles
    kind, x = schedule
    return tiles * x if kind == "split" else max(1, min(tiles * steps, round(tiles * x)))


@pytest.mark.parametrize("schedule", [("split", 2), ("split", 5), ("stream", 0.37), ("stream", 2.6)])
def test_best_shared_tiles(rng, schedule):
    """Blocks sharing tiles (split-K, stream-K with fewer or more blocks than tiles) add up their
    parts to the float64 product."""
    M, K, N = 100, 1000, 70
    a, ha = operand(rng, M, K, False, "float64")
    b, hb = operand(rng, K, N, True, "float64")
    out = cp.full((M, N), np.nan)
    config = next(iter(kernels.tile_configs("best", "double")))
    kernels.gemm(a, b, out=out, variant="best", config=config, blocks=blocks_for(config, M, N, K, "float64", schedule))
    assert rel(out.get(), ha @ hb) <= 1e-12


@pytest.mark.parametrize("schedule", [("split", 5), ("stream", 1.7)])
def test_shared_tiles_are_deterministic_and_replay_in_a_graph(rng, schedule):
    """The parts of a tile are added in a fixed order whichever block finishes last, so the
    result is bitwise the same every time, also replayed from a CUDA graph (as the trainer runs
    it), which also shows the tile counters are left at zero after each launch."""
    M, K, N = 131, 2000, 97
    a, ha = operand(rng, M, K, False, "float32")
    b, hb = operand(rng, K, N, True, "float32")
    out, work = cp.full((M, N), np.nan, cp.float32), kernels.workspace(M, N, "float32")
    config = next(iter(kernels.tile_configs("best", "float")))
    blocks = blocks_for(config, M, N, K, "float32", schedule)
    run = functools.partial(kernels.gemm, a, b, out=out, variant="best", config=config, blocks=blocks, work=work)
    run()
    first = out.get()
    assert rel(first, ha @ hb) <= TOL["float32"]
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        stream.begin_capture()
        run()
        graph = stream.end_capture()
        for _ in range(5):
            out.fill(np.nan)
            graph.launch(stream)
            stream.synchronize()
            assert np.array_equal(out.get(), first)
    flags = work[:kernels.FLAG_SLOTS].view(cp.int32)
    assert int(cp.count_nonzero(flags)) == 0


@pytest.mark.parametrize("variant, dtype", [("best", "float64"), ("best", "float32"), ("tf32", "float32")])
def test_back_to_back_gemms_each_wait_for_the_one_before(rng, variant, dtype):
    """A chain of GEMMs, each reading what the one before wrote, launched back to back with no
    sync (on sm_90 the next may start early; gemm_best.cu makes its blocks wait), eagerly and
    from a CUDA graph; stream-K and a tile a block alternate on one workspace. Every output
    starts as NaN, so a read before the write shows."""
    M, K, n = 257, 301, 6
    x, hx = operand(rng, M, K, False, dtype)
    weights = [operand(rng, K, K, i % 2 == 1, dtype) for i in range(n)]
    outs = [cp.empty((M, K), dtype) for _ in range(n)]
    work = kernels.workspace(M, K, dtype)
    config = next(iter(kernels.tile_configs(variant, kernels.ctype(dtype))))
    stream_k = blocks_for(config, M, K, K, dtype, ("stream", 1.7), variant)
    want = hx
    for _, hw in weights:
        want = (want @ hw) / K

    def chain():
        src = x
        for i, ((w, _), out) in enumerate(zip(weights, outs)):
            kernels.gemm(src, w, out=out, alpha=1 / K, variant=variant, config=config,
                         blocks=stream_k if i % 2 == 0 else None, work=work)
            src = out

    tol = 5e-3 if variant == "tf32" else 10 * TOL[dtype]
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        for out in outs:
            out.fill(np.nan)
        chain()
        assert rel(outs[-1].get(), want) <= tol
        stream.begin_capture()
        chain()
        graph = stream.end_capture()
        for _ in range(3):
            for out in outs:
                out.fill(np.nan)
            graph.launch(stream)
            assert rel(outs[-1].get(), want) <= tol


def test_tile_kernels_launch_dependent_on_sm90_and_name_a_failed_launch():
    if int(cp.cuda.Device().compute_capability) < 90:
        assert kernels.driver_launch() is None
        return
    assert kernels.driver_launch() is not None, "no programmatic dependent launch on an sm_90 GPU"
    config = next(iter(kernels.tile_configs("best", "float")))
    kernel = kernels.gemm_function("best", "float", False, False, 0, config)
    a, one = cp.ones((8, 8), cp.float32), kernels.i32(8)
    args = (one, one, one, np.float32(1), a, one, a, one, np.float32(0), a, one, a, one, a, a, kernels.i32(1))
    with pytest.raises(kernels.KernelError, match=r"cuLaunchKernelEx failed: CUDA_ERROR_INVALID_VALUE .*block \(4096,\)"):
        kernels.launch_tile(kernel, (1,), (4096,), args, 0)  # 4096 threads a block: more than there can be
    cp.cuda.Device().synchronize()  # and the context is still usable


def test_gemm_rejects_a_block_count_it_cannot_use():
    a, b = cp.ones((64, 32), cp.float32), cp.ones((32, 64), cp.float32)
    config = next(iter(kernels.tile_configs("best", "float")))
    tiles, steps = kernels.tile_grid("best", "float", config, 64, 64, 32)
    with pytest.raises(kernels.KernelError, match=f"blocks must be 1 to {tiles * steps} .* got 0"):
        kernels.gemm(a, b, variant="best", config=config, blocks=0)
    with pytest.raises(kernels.KernelError, match=f"got {tiles * steps + 1}"):
        kernels.gemm(a, b, variant="best", config=config, blocks=tiles * steps + 1)


@pytest.mark.parametrize("M, K, N", SHAPES)
def test_tf32_all_transposes_and_configs(rng, M, K, N):
    """The tensor-core option: within TF32's 5e-3 of the float64 product, every config, a tile
    a block and stream-K."""
    for config in kernels.tile_configs("tf32", "float"):
        for ta, tb, schedule in itertools.product((False, True), (False, True), ("tile", ("stream", 1.5))):
            a, ha = operand(rng, M, K, ta, "float32")
            b, hb = operand(rng, K, N, tb, "float32")
            out = cp.full((M, N), np.nan, dtype="float32")
            blocks = blocks_for(config, M, N, K, "float32", schedule, "tf32")
            kernels.gemm(a, b, out=out, variant="tf32", config=config, blocks=blocks)
            err = rel(out.get(), ha @ hb)
            assert err <= 5e-3, f"tf32 {config} {M}x{K}x{N} ta={ta} tb={tb} {schedule}: {err:.2e}"


def padded_operand(rng, rows, cols, transposed, dtype, offset):
    """Like operand(), stored inside a larger array whose rows hold a multiple of 16 bytes,
    starting `offset` elements in: offset 0 takes the 16-byte copy paths, 1 the element-wise ones."""
    r, c = (cols, rows) if transposed else (rows, cols)
    big = rng.uniform(-1, 1, (r, 4 * (c // 4 + 2))) + 0.1  # a row: a multiple of 4 elements, c + 1 or more
    host = big[:, offset:offset + c]
    dev = cp.asarray(big.astype(dtype))[:, offset:offset + c]
    return (dev.T, host.T) if transposed else (dev, host)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_every_best_config_storage_order_and_split(rng, dtype):
    """Each tile config in all four storage orders, a tile a block, split-K or stream-K, at odd
    sizes, through the 16-byte copy paths (aligned rows) and the element-wise ones (rows
    starting off 16 bytes)."""
    M, K, N = 131, 203, 97
    for config in kernels.tile_configs("best", kernels.ctype(dtype)):
        for ta, tb, offset, schedule in itertools.product((False, True), (False, True), (0, 1),
                                                          ("tile", ("split", 3), ("stream", 0.6))):
            a, ha = padded_operand(rng, M, K, ta, dtype, offset)
            b, hb = padded_operand(rng, K, N, tb, dtype, offset)
            out = cp.full((M, N), np.nan, dtype=dtype)
            blocks = blocks_for(config, M, N, K, dtype, schedule)
            kernels.gemm(a, b, out=out, variant="best", config=config, blocks=blocks)
            err = rel(out.get(), ha @ hb)
            assert err <= TOL[dtype], f"{config} ta={ta} tb={tb} offset={offset} {schedule}: {err:.2e}"


@pytest.mark.parametrize("variant, dtype, M, K, N", [("best", "float32", 259, 9001, 785),
                                                     ("tf32", "float32", 259, 9001, 785),
                                                     ("best", "float64", 131, 15001, 97)])
def test_rotated_shares_where_the_operands_overflow_l2(rng, variant, dtype, M, K, N):
    """Operands past gemm_best.cu's L2_BYTES (25 MiB): shared tiles' blocks take their K steps
    rotated, the short last step of K falling mid-share, and still add up to the product."""
    assert (M + N) * K * np.dtype(dtype).itemsize > 25 << 20
    a, ha = operand(rng, M, K, False, dtype)
    b, hb = operand(rng, K, N, False, dtype)
    work = kernels.workspace(M, N, dtype)
    tol = 5e-3 if variant == "tf32" else TOL[dtype]
    for config in kernels.tile_configs(variant, kernels.ctype(dtype)):
        for schedule in (("split", 3), ("stream", 0.37), ("stream", 2.6)):
            out = cp.full((M, N), np.nan, dtype=dtype)
            blocks = blocks_for(config, M, N, K, dtype, schedule, variant)
            kernels.gemm(a, b, out=out, variant=variant, config=config, blocks=blocks, work=work)
            err = rel(out.get(), ha @ hb)
            assert err <= tol, f"{variant} {config} {schedule}: {err:.2e}"


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_tile_a_block_in_groups_of_rows(rng, dtype):
    """A block a tile walks the tiles in groups of 8 rows: row-tile counts below, at and past a
    group, not a multiple of it, each tile written once."""
    for M in (70, 8 * 64, 1100):
        a, ha = operand(rng, M, 37, False, dtype)
        b, hb = operand(rng, 37, 301, True, dtype)
        for config in kernels.tile_configs("best", kernels.ctype(dtype)):
            out = cp.full((M, 301), np.nan, dtype=dtype)
            kernels.gemm(a, b, out=out, variant="best", config=config, blocks=blocks_for(config, M, 301, 37, dtype, "tile"))
            err = rel(out.get(), ha @ hb)
            assert err <= TOL[dtype], f"M={M} {config}: {err:.2e}"


def test_tune_remembers_the_fastest_choice_and_stays_correct(rng):
    a, ha = operand(rng, 300, 784, False, "float32")
    b, hb = operand(rng, 784, 700, True, "float32")
    out, work = cp.empty((300, 700), cp.float32), kernels.workspace(300, 700, "float32")
    config, blocks = kernels.tune(a, b, out, "best", work)
    assert (config, blocks) in set(kernels.tile_choices("best", "float", 300, 700, 784, work, kernels.multiprocessors()))
    assert kernels.TUNED[("best", "float", 300, 700, 784, False, True, "float")] == (config, blocks)
    out[...] = np.nan
    kernels.gemm(a, b, out=out, variant="best", work=work)  # the tuned choice
    assert rel(out.get(), ha @ hb) <= TOL["float32"]


def test_gemm_rejects_bad_operands():
    a = cp.ones((3, 4), cp.float32)
    with pytest.raises(kernels.KernelError, match=r"inner dimensions differ: a is \(3, 4\), b is \(5, 2\)"):
        kernels.gemm(a, cp.ones((5, 2), cp.float32))
    with pytest.raises(kernels.KernelError, match="float32 or float64"):
        kernels.gemm(cp.ones((3, 4), cp.float16), cp.ones((4, 2), cp.float16))
    with pytest.raises(kernels.KernelError, match="variant must be one of"):
        kernels.gemm(a, cp.ones((4, 2), cp.float32), variant="magic")
    with pytest.raises(kernels.KernelError, match="one unit stride"):
        kernels.gemm(cp.ones((6, 8), cp.float32)[::2, ::2], cp.ones((4, 2), cp.float32))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_elementwise_kernels(rng, dtype):
    C, H, B = 10, 37, 301
    z = rng.normal(size=(C, B)) * 3
    b2 = rng.normal(size=C)
    y = rng.integers(0, C, B)
    delta, ce = cp.full((C, B), np.nan, dtype), cp.full(B, np.nan, dtype)
    kernels.softmax_xent_grad(cp.asarray(z.astype(dtype)), cp.asarray(b2.astype(dtype)), cp.asarray(y), delta, 1000, ce)
    yhat = model.softmax((z + b2[:, None]).copy())
    assert rel(delta.get(), model.output_delta(yhat, y, 1000)) <= TOL[dtype]
    assert rel(ce.get(), -np.log(yhat[y, np.arange(B)])) <= TOL[dtype]
    a, da = rng.uniform(0.05, 0.95, (H, B)), rng.normal(size=(H, B))
    dev = cp.asarray(da.astype(dtype))
    kernels.sigmoid_backward(dev, cp.asarray(a.astype(dtype)))
    assert rel(dev.get(), da * a * (1 - a)) <= TOL[dtype]
    out = cp.full(H, np.nan, dtype)
    kernels.row_sum(cp.asarray(da.astype(dtype)), out)
    assert rel(out.get(), da.sum(axis=1)) <= TOL[dtype]
    zz, bb = rng.normal(size=(H, B)), rng.normal(size=H)
    dev = cp.asarray(zz.astype(dtype))
    kernels.bias_sigmoid(dev, cp.asarray(bb.astype(dtype)))
    assert rel(dev.get(), 1 / (1 + np.exp(-(zz + bb[:, None])))) <= TOL[dtype]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("rows, cols", [(10, 12000), (3, 9001), (1, 1), (2, 4095), (5, 4097)])
def test_row_sums_match_the_reference_and_repeat_bit_for_bit(rng, dtype, rows, cols):
    """Each thread's several sums and their tree, over lengths that end inside and past a round of loads."""
    x = rng.normal(size=(rows, cols)) + 0.1
    dev, out = cp.asarray(x.astype(dtype)), cp.full(rows, np.nan, dtype)
    kernels.row_sum(dev, out)
    assert rel(out.get(), x.sum(axis=1)) <= TOL[dtype]
    again = cp.full(rows, np.nan, dtype)
    kernels.row_sum(dev, again)
    assert (again == out).all()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("H, n", [(37, 301), (1, 1), (130, 3203)])
def test_sigmoid_backward_rows_makes_dz_and_its_row_sums_in_one_pass(rng, dtype, H, n):
    """dz = da o a o (1 - a) in place and db = dz's row sums; with dz_small (float32), da keeps dz's
    TF32 big parts and dz_small the rest: their sum is dz to FP32's rounding."""
    a, da = rng.uniform(0.05, 0.95, (H, n)), rng.normal(size=(H, n)) + 0.1
    want = da * a * (1 - a)
    dev, db = cp.asarray(da.astype(dtype)), cp.full(H, np.nan, dtype)
    kernels.sigmoid_backward_rows(dev, cp.asarray(a.astype(dtype)), db)
    assert rel(dev.get(), want) <= TOL[dtype] and rel(db.get(), want.sum(axis=1)) <= TOL[dtype]
    if dtype == "float32":
        dev, small = cp.asarray(da.astype(dtype)), cp.full((H, n), np.nan, cp.float32)
        kernels.sigmoid_backward_rows(dev, cp.asarray(a.astype(dtype)), db, small)
        big = dev.get()
        assert np.array_equal(big.view(np.uint32) & 0x1FFF, np.zeros_like(big.view(np.uint32)))  # TF32: 13 low bits 0
        assert rel(big.astype(np.float64) + small.get(), want) <= TOL[dtype]
        with pytest.raises(kernels.KernelError, match="dz_small must be a C-contiguous float32 array"):
            kernels.sigmoid_backward_rows(dev, cp.asarray(a.astype(dtype)), db, small[:, :-1])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_sgd_update_one_launch(rng, dtype):
    """16 bytes a thread: segments that end inside a thread's values, and a last thread with fewer."""
    p, g = rng.normal(size=23).astype(dtype), rng.normal(size=23).astype(dtype)
    ends, regs = np.array([13, 15, 21, 23]), np.array([0.1, 0.0, 0.1, 0.0], dtype)
    dev = cp.asarray(p)
    kernels.sgd_update(dev, cp.asarray(g), 0.3, cp.asarray(ends), cp.asarray(regs))
    seg = np.searchsorted(ends, np.arange(23), side="right")
    assert rel(dev.get(), p - dev.dtype.type(0.3) * (g + regs[seg] * p)) <= (1e-12 if dtype == "float64" else 1e-6)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("n", [23, 70001])  # one pass of the grid, and several (264 x 256 threads)
def test_l2_penalty_on_the_device(rng, dtype, n):
    p = rng.normal(size=n)
    ends = np.array([n // 2, n // 2 + 3, n - 5, n])
    regs = np.array([0.1, 0.0, 0.3, 0.0])
    out, part = cp.full(1, np.nan, dtype), cp.full(kernels.L2_BLOCKS, np.nan, dtype)
    kernels.l2_penalty(cp.asarray(p.astype(dtype)), cp.asarray(ends), cp.asarray(regs.astype(dtype)), part,
                       out.reshape(()))
    seg = np.searchsorted(ends, np.arange(n), side="right")
    assert rel(out.get(), [0.5 * np.sum(regs[seg] * p * p)]) <= TOL[dtype]


@pytest.mark.parametrize("parallel, mode", [("data", "resident"), ("data", "staged"), ("data", "pipelined"),
                                            ("model", "resident")])
def test_gpu_losses_are_the_references_before_each_step(parallel, mode):
    """The L2 term the step makes on the device is the parameters' before its update, as the reference's J."""
    from perflab import data
    from perflab.config import Config
    from perflab.train import loop
    from perflab.train.comm import Serial
    from perflab.train.runner import train_on_ranks
    from perflab.train.spec import RunSpec
    cfg = Config(dataset="synthetic", input_size=97, hidden_sizes=(61,), num_classes=7, train_size=517,
                 batch_size=100, num_epochs=2, learning_rate=0.5, reg=0.05, test_size=0, dtype="float64", print_every=2)
    history, trainer = train_on_ranks(cfg, parallel, Serial(), RunSpec(backend="cupy", mode=mode, exchange="mpi"), log=None)
    trainer.close()
    train_set = data.load(cfg)[0]
    params = model.init_params(cfg.layer_sizes, cfg.dtype, cfg.seed)
    reference = loop.fit(cfg, loop.Sequential(cfg, params, train_set.X, train_set.y), progress=False)
    assert len(history.losses) == len(reference.losses) > 2
    got, want = ([r["loss"] for r in h.losses] for h in (history, reference))
    assert rel(got, np.array(want)) <= TOL["float64"]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("gemm", ["best", "cublas", "tiled"])
@pytest.mark.parametrize("mode, graphs", [("resident", True), ("resident", False), ("staged", True), ("staged", False),
                                         ("pipelined", True), ("pipelined", False)])
def test_gpu_training_matches_reference(dtype, gemm, mode, graphs):
    from perflab.config import Config
    from perflab.train.comm import Serial
    from perflab.train.runner import check
    from perflab.train.spec import RunSpec
    cfg = Config(dataset="synthetic", input_size=97, hidden_sizes=(61,), num_classes=7, train_size=517,
                 batch_size=100, num_epochs=2, learning_rate=0.5, test_size=50, dtype=dtype)
    result = check(cfg, "data", Serial(), RunSpec(backend="cupy", mode=mode, gemm=gemm, launch=LAUNCH[graphs], exchange="mpi"))
    assert result["max_rel_error"] <= TOL[dtype], result["errors"]


@pytest.mark.parametrize("shuffle", [False, True])
def test_staged_graphs_replay_one_graph_per_batch_size_and_train_as_the_eager_step(shuffle):
    """The staged step replays a graph captured per batch size (the copy lands in one buffer), and
    ends in the weights the step launched kernel by kernel reaches, shuffled or not."""
    from perflab.config import Config
    from perflab.train.comm import Serial
    from perflab.train.runner import train_on_ranks
    from perflab.train.spec import RunSpec
    cfg = Config(dataset="synthetic", input_size=97, hidden_sizes=(61,), num_classes=7, train_size=517,
                 batch_size=100, num_epochs=2, learning_rate=0.5, test_size=0, dtype="float32", shuffle=shuffle)
    weights = {}
    for graphs in (True, False):
        _, trainer = train_on_ranks(cfg, "data", Serial(), RunSpec(backend="cupy", mode="staged", launch=LAUNCH[graphs]), log=None)
        weights[graphs] = trainer.P.get()
        if graphs:
            assert trainer.graphs and {k[:2] for k in trainer.cache} == {("staged", 100), ("staged", 17)}
        else:
            assert not trainer.cache
    assert rel(weights[True], weights[False].astype(np.float64)) <= 1e-6


@pytest.mark.parametrize("gemm", ["cublas", "best"])
def test_a_resident_epoch_is_one_graph_and_trains_as_a_graph_a_batch(gemm):
    """With the loss only at the epoch's end, fit runs each epoch as one CUDA graph: the same kernels
    in the same order as a graph a batch (loss every 2 batches), so the same weights, bit for bit,
    and the same loss at each epoch's end."""
    from perflab.config import Config
    from perflab.train.comm import Serial
    from perflab.train.runner import train_on_ranks
    from perflab.train.spec import RunSpec
    runs = {}
    for every in (0, 2):
        cfg = Config(dataset="synthetic", input_size=97, hidden_sizes=(61,), num_classes=7, train_size=517,
                     batch_size=100, num_epochs=3, learning_rate=0.5, test_size=0, dtype="float32", print_every=every)
        history, trainer = train_on_ranks(cfg, "data", Serial(), RunSpec(backend="cupy", gemm=gemm, exchange="nccl"), log=None)
        runs[every] = history, trainer.P.get(), [k[0] for k in trainer.cache]
        trainer.close()
    (one, w_one, keys_one), (each, w_each, keys_each) = runs[0], runs[2]
    assert keys_one == ["epoch"] and "epoch" not in keys_each and len(keys_each) > 1
    assert np.array_equal(w_one, w_each) and np.isfinite(w_one).all()
    assert [r["step"] for r in one.losses] == [5, 11, 17]
    last = {r["epoch"]: r["loss"] for r in each.losses}
    assert [r["loss"] for r in one.losses] == [last[e] for e in range(3)]


@pytest.mark.parametrize("dtype, gemm", [("float32", "cublas"), ("float64", "best"), ("bfloat16", "cublas"),
                                         ("float16", "cublas")])
def test_a_captured_step_allocates_no_memory(dtype, gemm):
    """Nothing a step launches allocates while its CUDA graph is captured, loss wanted or not, at depth 2:
    a temporary freed after the capture is memory the graph goes on writing at every replay (a loss
    sum's temporary overwrote a wgmma tensor map made later in its place)."""
    from cupy.cuda.memory_hook import MemoryHook

    from perflab import data
    from perflab.config import Config
    from perflab.train.comm import Serial
    from perflab.train.gpu import FusedGPU

    class Allocations(MemoryHook):
        name = "allocations"

        def __init__(self):
            self.count = 0

        def malloc_preprocess(self, **kwargs):
            self.count += 1

    cfg = Config(dataset="synthetic", input_size=97, hidden_sizes=(61, 37), num_classes=7, train_size=517,
                 batch_size=100, num_epochs=1, learning_rate=0.5, test_size=0, dtype=dtype)
    split = data.load(cfg)[0]
    trainer = FusedGPU(cfg, split.X, split.y, Serial(), gemm=gemm)
    for want in (True, False):
        with trainer.stream:
            trainer.step(trainer.X[:, 0:100], trainer.y[0:100], 100, want)  # warm: tuned, kernels loaded
            trainer.stream.begin_capture()
            with Allocations() as hook:
                trainer.step(trainer.X[:, 0:100], trainer.y[0:100], 100, want)
            trainer.stream.end_capture()
        assert hook.count == 0, (dtype, gemm, want)
    trainer.close()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_pipelined_shuffled_batches_gather_on_the_host_and_match(dtype):
    from perflab.config import Config
    from perflab.train.comm import Serial
    from perflab.train.runner import check
    from perflab.train.spec import RunSpec
    cfg = Config(dataset="synthetic", input_size=97, hidden_sizes=(61,), num_classes=7, train_size=517, shuffle=True,
                 batch_size=100, num_epochs=3, learning_rate=0.5, test_size=50, dtype=dtype)
    result = check(cfg, "data", Serial(), RunSpec(backend="cupy", mode="pipelined", exchange="mpi"))
    assert result["max_rel_error"] <= TOL[dtype], result["errors"]


def test_timeline_puts_the_pipelined_copies_on_a_stream_of_their_own():
    from perflab.config import Config
    from perflab.measure import timeline
    from perflab.train.comm import Serial
    cfg = Config(dataset="synthetic", input_size=97, hidden_sizes=(61,), num_classes=7, train_size=500,
                 batch_size=100, learning_rate=0.5, test_size=0)
    t = timeline.record(cfg, Serial(), modes=("staged", "pipelined"))
    assert set(t["mode"]) == {"staged", "pipelined"} and set(t.batch) == set(range(5))  # the second epoch's steps
    assert set(t["dtype"]) == {cfg.dtype}
    assert (t.device_end >= t.device_start).all() and (t.host_end >= t.host_start).all()
    for mode, g in t.groupby("mode"):
        copies = set(g[g.phase == "copying images host -> device"].stream)
        compute = set(g[g.phase == "forward"].stream)
        assert copies and compute and (copies.isdisjoint(compute) if mode == "pipelined" else copies == compute)
    lanes = timeline.lanes(t)
    assert set(lanes.lane) >= {"compute", "images host -> device"}


def test_gpu_training_with_tf32_gemms_stays_within_tf32_tolerance():
    from perflab.config import Config
    from perflab.train.comm import Serial
    from perflab.train.runner import check
    from perflab.train.spec import RunSpec
    cfg = Config(dataset="synthetic", input_size=97, hidden_sizes=(61,), num_classes=7, train_size=517,
                 batch_size=100, num_epochs=2, learning_rate=0.5, test_size=50, dtype="float32")
    result = check(cfg, "data", Serial(), RunSpec(backend="cupy", gemm="tf32", exchange="nccl"))
    assert result["tolerance"] == 5e-3 and result["passed"], result["errors"]


def test_gpu_model_parallel_single_rank():
    from perflab.config import Config
    from perflab.train.comm import Serial
    from perflab.train.runner import check
    from perflab.train.spec import RunSpec
    cfg = Config(dataset="synthetic", input_size=50, hidden_sizes=(31,), num_classes=5, train_size=300,
                 batch_size=64, num_epochs=2, learning_rate=0.5, test_size=0)
    assert check(cfg, "model", Serial(), RunSpec(backend="cupy", exchange="nccl"))["passed"]
    for hidden in ((31, 17), (31, 17, 13)):  # deeper: the layers split by rows and columns in turn, on CuPy arrays
        result = check(cfg.replace(hidden_sizes=hidden, dtype="float64"), "model", Serial(), RunSpec(backend="cupy", exchange="nccl"))
        assert result["passed"] and len(result["errors"]) == 2 * len(hidden) + 2, result["errors"]


DEEP = [(61, 37), (61, 37, 23)]  # odd widths, each its own: depths 2 and 3


@pytest.mark.parametrize("hidden", DEEP)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("gemm, mode, graphs", [("cublas", "resident", True), ("cublas", "resident", False),
                                                ("best", "resident", True), ("tiled", "staged", True),
                                                ("cublas", "staged", False), ("cublas", "pipelined", True),
                                                ("best", "pipelined", False)])
def test_deep_nets_train_on_the_fused_trainer_as_the_reference(hidden, dtype, gemm, mode, graphs):
    """Any depth runs the fused trainer (no second path): every GEMM, data mode and graph choice ends
    in the float64 reference's weights, and the losses it reports are the reference's, batch by batch."""
    from perflab import data
    from perflab.config import Config
    from perflab.train import gpu, loop
    from perflab.train.comm import Serial
    from perflab.train.runner import check, make_gpu_trainer
    from perflab.train.spec import RunSpec
    cfg = Config(dataset="synthetic", input_size=97, hidden_sizes=hidden, num_classes=7, train_size=517,
                 batch_size=100, num_epochs=2, learning_rate=0.5, test_size=50, dtype=dtype, print_every=2)
    device = RunSpec(backend="cupy", mode=mode, gemm=gemm, launch=LAUNCH[graphs], exchange="mpi")
    trainer = make_gpu_trainer(cfg, "data", Serial(), device, data.load(cfg)[0])
    assert isinstance(trainer, gpu.FusedGPU) and len(trainer.params) == 2 * len(hidden) + 2
    assert trainer.side_gemms == (gemm == "cublas")  # the upper layers' dW_l on the side stream with cuBLAS
    history = loop.fit(cfg, trainer, progress=False, sync=trainer.sync)
    trainer.close()
    train_set = data.load(cfg)[0]
    reference = loop.fit(cfg, loop.Sequential(cfg, model.init_params(cfg.layer_sizes, "float64", cfg.seed),
                                              train_set.X, train_set.y), progress=False)
    for got, want in zip(history.params, reference.params):
        assert rel(got, want) <= TOL[dtype]
    assert len(history.losses) == len(reference.losses) > 4
    assert rel([r["loss"] for r in history.losses], np.array([r["loss"] for r in reference.losses])) <= TOL[dtype]
    assert check(cfg, "data", Serial(), device)["passed"]


@pytest.mark.parametrize("graphs", [True, False])
def test_the_upper_layers_weight_gradients_on_the_side_stream_are_those_of_the_serial_step(graphs):
    """dW_l on the side stream (cuBLAS's second handle) beside W_l^T dz_l: the same weights as all on one
    stream, step after step, graphed or launched one by one."""
    from perflab import data
    from perflab.config import Config
    from perflab.train import loop
    from perflab.train.comm import Serial
    from perflab.train.gpu import FusedGPU
    cfg = Config(dataset="synthetic", input_size=97, hidden_sizes=(61, 37, 23), num_classes=7, train_size=517,
                 batch_size=100, num_epochs=3, learning_rate=0.5, test_size=0, dtype="float32")
    split = data.load(cfg)[0]
    runs = []
    for side in (True, False):
        trainer = FusedGPU(cfg, split.X, split.y, Serial(), graphs=graphs)
        assert trainer.side_gemms
        trainer.side_gemms = side
        runs.append(loop.fit(cfg, trainer, progress=False, sync=trainer.sync).params)
        trainer.close()
    for a, b in zip(*runs):
        assert rel(a, b) <= 1e-6


@pytest.mark.parametrize("hidden", DEEP)
@pytest.mark.parametrize("fuse_output, fuse_backward", [(False, True), (False, False), (True, False)])
def test_deep_nets_with_the_output_layer_unfused_match_the_reference(hidden, fuse_output, fuse_backward):
    from perflab import data
    from perflab.config import Config
    from perflab.train import loop
    from perflab.train.comm import Serial
    from perflab.train.gpu import FusedGPU
    cfg = Config(dataset="synthetic", input_size=97, hidden_sizes=hidden, num_classes=7, train_size=517,
                 batch_size=100, num_epochs=2, learning_rate=0.5, test_size=0, dtype="float64")
    split = data.load(cfg)[0]
    trainer = FusedGPU(cfg, split.X, split.y, Serial(), fuse_output=fuse_output, fuse_backward=fuse_backward)
    got = loop.fit(cfg, trainer, progress=False, sync=trainer.sync).params
    reference = loop.fit(cfg, loop.Sequential(cfg, model.init_params(cfg.layer_sizes, "float64", cfg.seed), split.X,
                                              split.y), progress=False).params
    for a, b in zip(got, reference):
        assert rel(a, b) <= TOL["float64"]


def test_a_deep_profiled_run_names_every_layers_gemms():
    """Profiled, the step runs unfused and each GEMM is its own phase, numbered as the seeds number them."""
    from perflab.config import Config
    from perflab.train.comm import Serial
    from perflab.train.runner import train_on_ranks
    from perflab.train.spec import RunSpec
    cfg = Config(dataset="synthetic", input_size=97, hidden_sizes=(61, 37, 23), num_classes=7, train_size=500,
                 batch_size=100, learning_rate=0.5, test_size=0, dtype="float32")
    history, trainer = train_on_ranks(cfg, "data", Serial(), RunSpec(backend="cupy", exchange="nccl"), log=None, profiled=True)
    trainer.close()
    names = set(history.phases["phase"])
    assert {f"forward GEMM {k}" for k in (1, 2, 3, 4)} <= names
    assert {f"backward GEMM {k}" for k in range(1, 8)} <= names and "backward GEMM 8" not in names


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("graphs", [True, False])
@pytest.mark.parametrize("hidden", [(61,)] + DEEP)
def test_fused_model_parallel_on_one_rank_matches_reference(dtype, graphs, hidden):
    """Any depth: the model-parallel trainer's step on one rank (its splits' all-reduces none) is the reference's."""
    from perflab import data
    from perflab.config import Config
    from perflab.train.comm import Serial
    from perflab.train.model_parallel_gpu import FusedModelParallel
    from perflab.train.runner import check, make_gpu_trainer
    from perflab.train.spec import RunSpec
    cfg = Config(dataset="synthetic", input_size=97, hidden_sizes=hidden, num_classes=7, train_size=517,
                 batch_size=100, num_epochs=2, learning_rate=0.5, test_size=50, dtype=dtype)
    device = RunSpec(backend="cupy", launch=LAUNCH[graphs], exchange="nccl")
    trainer = make_gpu_trainer(cfg, "model", Serial(), device, data.load(cfg)[0])
    assert isinstance(trainer, FusedModelParallel) and trainer.graphs == graphs
    result = check(cfg, "model", Serial(), device)
    assert result["max_rel_error"] <= TOL[dtype], result["errors"]


def test_too_large_for_gpu_memory_is_named():
    from perflab.config import Config
    from perflab.train import gpu
    cfg = Config(dataset="synthetic", input_size=100000, hidden_sizes=(100000,), num_classes=10,
                 train_size=200000, batch_size=100000, test_size=0)
    with pytest.raises(gpu.GPUError, match=r"needs about .* GiB of GPU memory \(N=200000, B=100000"):
        gpu.check_memory(cfg, resident=True)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("C, groups", [(2, 1), (7, 3), (10, 8), (16, 2), (17, 3), (40, 1)])
def test_the_softmax_adds_its_partial_sums_and_leaves_the_columns_outside_the_batch_zero(rng, dtype, C, groups):
    """softmax_xent_grad at a thread a class (C <= 16) and a thread a column (more): the groups' partial sums
    added into the first, delta and ce of the samples (columns first .. first + len(y) - 1) against float64, the
    other columns zero."""
    B, first, n = 301, 5, 290
    parts, b2 = rng.normal(size=(groups, C, B)), rng.normal(size=C)
    y = rng.integers(0, C, n)
    z = cp.asarray(parts.reshape(groups * C, B).astype(dtype))
    delta, ce = cp.full((C, B), np.nan, dtype), cp.full(B, np.nan, dtype)
    kernels.softmax_xent_grad(z, cp.asarray(b2.astype(dtype)), cp.asarray(y), delta, 1000, ce, groups=groups,
                              first=first)
    logits = parts.sum(axis=0)
    assert rel(z.get()[:C], logits) <= TOL[dtype]
    inside = slice(first, first + n)
    yhat = model.softmax(logits[:, inside] + b2[:, None])
    assert rel(delta.get()[:, inside], model.output_delta(yhat, y, 1000)) <= TOL[dtype]
    assert rel(ce.get()[inside], -np.log(yhat[y, np.arange(n)])) <= TOL[dtype]
    outside = np.r_[0:first, first + n:B]
    assert not delta.get()[:, outside].any() and not ce.get()[outside].any()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("C, H, n", [(10, 512, 3200), (7, 61, 37), (16, 33, 1), (2, 1001, 9001), (3, 5, 4097),
                                     (10, 2048, 300)])
def test_fused_output_layer_and_backward(rng, dtype, C, H, n):
    W2, b1, b2 = rng.normal(size=(C, H)) * 0.2, rng.normal(size=H), rng.normal(size=C)
    z1 = rng.normal(size=(H, n)) * 2
    y = rng.integers(0, C, n)
    dev = lambda x: cp.asarray(x.astype(dtype))  # noqa: E731
    a1 = model.sigmoid(z1 + b1[:, None])
    delta, ce, given = cp.full((C, n), np.nan, dtype), cp.full(n, np.nan, dtype), dev(z1)
    forward = cp.full(kernels.output_layer_partials(H, n, C), np.nan, dtype)
    kernels.output_layer(dev(W2), dev(b1), dev(b2), given, cp.asarray(y), delta, 3 * n, forward, ce)
    assert rel(given.get(), a1) <= TOL[dtype]  # the activation, written over z1
    yhat = model.softmax(W2 @ a1 + b2[:, None])
    ref_delta = model.output_delta(yhat, y, 3 * n)
    assert rel(delta.get(), ref_delta) <= TOL[dtype]
    assert rel(ce.get(), -np.log(yhat[y, np.arange(n)])) <= TOL[dtype]
    with pytest.raises(kernels.KernelError, match="workspace of"):
        kernels.output_layer(dev(W2), dev(b1), dev(b2), dev(z1), cp.asarray(y), delta, 3 * n, forward[:1])
    dz1, db1, dW2 = cp.full((H, n), np.nan, dtype), cp.full(H, np.nan, dtype), cp.full((C, H), np.nan, dtype)
    part = cp.full(kernels.output_backward_partials(H, n, C), np.nan, dtype)
    kernels.output_backward(dev(W2), dev(ref_delta), dev(a1), dz1, dW2, db1, part)
    ref_dz1 = (W2.T @ ref_delta) * a1 * (1 - a1)
    assert rel(dz1.get(), ref_dz1) <= TOL[dtype]
    assert rel(dW2.get(), ref_delta @ a1.T) <= TOL[dtype]
    assert rel(db1.get(), ref_dz1.sum(axis=1)) <= TOL[dtype]
    first = (dz1.copy(), dW2.copy(), db1.copy())
    kernels.output_backward(dev(W2), dev(ref_delta), dev(a1), dz1, dW2, db1, part)
    for a, b in zip(first, (dz1, dW2, db1)):  # fixed-order sums: bit for bit the same
        assert bool((a == b).all())
    with pytest.raises(kernels.KernelError, match="workspace of"):
        kernels.output_backward(dev(W2), dev(ref_delta), dev(a1), dz1, dW2, db1, part[:1])


def test_profiled_gpu_run_takes_the_unfused_path_and_matches():
    from perflab.config import Config
    from perflab.train.comm import Serial
    from perflab.train.runner import train_on_ranks
    from perflab.train.spec import RunSpec
    cfg = Config(dataset="synthetic", input_size=50, hidden_sizes=(31,), num_classes=5, train_size=300,
                 batch_size=64, num_epochs=1, learning_rate=0.5, test_size=0)
    fused, _ = train_on_ranks(cfg, "data", Serial(), RunSpec(backend="cupy", exchange="nccl"), log=None)
    split, _ = train_on_ranks(cfg, "data", Serial(), RunSpec(backend="cupy", exchange="nccl"), log=None, profiled=True)
    assert "forward GEMM 2" in set(split.phases.phase)
    for a, b in zip(fused.params, split.params):
        assert rel(a, b) <= 1e-12


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("H", [37, (37, 29, 23)])
def test_step_breakdown_times_every_kernel(H, dtype):
    """Every kernel of the step once, named as the trainer's phases are (a deeper net: each hidden layer's
    bias + sigmoid, its two backward GEMMs and sigmoid' + db more); in half precision the mixed-precision step's
    (db_L in the fused backward pass, no unfused sigmoid' and row sums beside it)."""
    from perflab.measure import bench
    rows = bench.step_breakdown(H=H, B=101, dtype=dtype, repeats=3)
    depth = 1 if H == 37 else len(H)
    names = [r["kernel"] for r in rows]
    assert len(names) == (13 if dtype == "float32" else 10) + 5 * (depth - 1) and len(set(names)) == len(names)
    assert names == [k.name for k in bench.step_description(H, 101, dtype)] and {r["dtype"] for r in rows} == {dtype}
    assert all(r["ms"] > 0 and r["gbps"] > 0 for r in rows)
    L = depth + 1
    assert [n for n in names if n.startswith("forward GEMM")] == [f"forward GEMM {k} (cuBLAS)" for k in range(1, L)]
    assert [n for n in names if n.startswith("backward GEMM")] == [f"backward GEMM {k} (cuBLAS)" for k in range(3, 2 * L)]
    assert {f"bias + sigmoid {k}" for k in range(1, depth)} | {f"sigmoid' + db{k}" for k in range(1, depth)} <= set(names)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_gpu_training_with_the_forward_pass_unfused_matches_reference(dtype):
    from perflab import data
    from perflab.config import Config
    from perflab.train import loop
    from perflab.train.comm import Serial
    from perflab.train.gpu import FusedGPU
    cfg = Config(dataset="synthetic", input_size=97, hidden_sizes=(61,), num_classes=7, train_size=517,
                 batch_size=100, num_epochs=2, learning_rate=0.5, test_size=0, dtype=dtype)
    split = data.load(cfg)[0]
    unfused = FusedGPU(cfg, split.X, split.y, Serial(), fuse_output=False)  # the default fuses it
    assert not unfused.fuse_output and unfused.fuse_backward
    got = loop.fit(cfg, unfused, progress=False, sync=unfused.sync).params
    reference = loop.fit(cfg, loop.Sequential(cfg, model.init_params(cfg.layer_sizes, dtype, cfg.seed), split.X, split.y),
                          progress=False).params
    for a, b in zip(got, reference):
        assert rel(a, b) <= TOL[dtype]


def test_the_scaling_harness_times_every_perflab_path_on_one_gpu():
    """perflab.measure.peers_multi's paths (resident, serial staged, pipelined, model parallel) on
    one GPU: each runs its epochs and returns a time, the pipelined one prefetching each next batch."""
    from perflab.measure.peers import perflab_epoch
    rng = np.random.default_rng(5)
    X, y = rng.random((517, 784), dtype=np.float32), rng.integers(0, 10, 517)
    for mode, parallel in (("resident", "data"), ("staged", "data"), ("pipelined", "data"), ("resident", "model")):
        launched = {}
        ms = perflab_epoch(X, y, 61, 100, 0.1, 1e-4, warmup=1, repeats=2, mode=mode, parallel=parallel,
                           launched=launched)
        assert 0 < ms < 1e4, (mode, parallel, ms)
        assert launched == {"graphs": True, "epoch_graph": mode == "resident"}, (mode, parallel, launched)


def test_bench_gemm_sets_best_beside_every_installed_peer():
    """Every variant and peer checked against float64 at each shape; the fastest peer is the
    one pct_fastest_peer measures against."""
    import importlib.util

    from perflab.measure import bench
    said, so_far = [], []
    rows = bench.bench_gemm(variants=("best", "cublas"), hidden=(37,), batches=(101,), repeats=2, progress=False,
                            log=said.append, on_shape=lambda r: so_far.append(len(r)))
    peers = {"cublas"} | {p for p, module in (("pytorch", "torch"), ("jax", "jax"))
                          if importlib.util.find_spec(module)}
    assert len({r["shape"] for r in rows}) == 5, said
    assert so_far == [len(rows) * (i + 1) // 5 for i in range(5)]  # saved after each shape
    for shape in {r["shape"] for r in rows}:
        got = {r["variant"]: r for r in rows if r["shape"] == shape}
        assert set(got) == {"best"} | peers, said
        assert all(r["checked"] and r["ms"] > 0 for r in got.values()), got
        assert max(got[p]["pct_fastest_peer"] for p in peers) == pytest.approx(100)
        assert got["best"]["pct_fastest_peer"] <= got["best"]["pct_cublas"] + 1e-9


def test_compile_all_builds_every_module_in_parallel():
    """(make gpu-test runs `perflab compile` first, so here the modules come from CuPy's cache.)"""
    from perflab.kernels.wgmma import hopper
    wgmma_modules = sum(source == "gemm_wgmma.cu" for source, _ in kernels.modules())  # sm_90a: Hopper's only
    assert kernels.compile_all(processes=2, progress=False) == len(kernels.modules()) - (0 if hopper() else wgmma_modules)
    sources = {source for source, _ in kernels.modules()}
    assert sources == {"gemm_naive.cu", "gemm_tiled.cu", "gemm_regblock.cu", "gemm_best.cu", "elementwise.cu",
                       "gemm_wgmma.cu", "p2p.cu"}


def test_bench_hold_samples_the_clock_beside_best_and_cublas():
    """perflab bench hold: best and cuBLAS replayed in turn while nvidia-smi samples the GPU; each
    hold has its replays, its clock and power from samples inside it, and % of cuBLAS held."""
    from perflab.measure import bench
    rows, samples = bench.bench_hold(["fwd1 H=512 B=800"], seconds=0.6, rounds=1, progress=False)
    assert [r["variant"] for r in rows] == ["best", "cublas"]
    assert len(samples) >= 10 and all(300 < s["clock_mhz"] < 4000 and s["power_w"] > 0 for s in samples)
    for row in rows:
        assert row["replays"] >= 20 and 0 < row["ms_held"] < 1 and row["samples"] >= 2 and row["clock_mhz"] > 300
        assert row["t0"] < row["t_mid"] < row["t1"]
    assert rows[1]["pct_cublas_held"] == 100 and 50 < rows[0]["pct_cublas_held"] < 200


def test_device_timing_waits_for_the_callers_stream_first():
    """tune() and the benchmarks time on a stream of their own: its work must not overlap the
    caller's pending work, which may write what it reads or read what it writes."""
    from perflab.timing import time_graph_ms
    spin = cp.RawKernel(r'''extern "C" __global__ void spin(long long n) {
        long long t0 = clock64(); while (clock64() - t0 < n) {} }''', "spin")
    x = cp.zeros(16, cp.float32)
    with cp.cuda.Stream(non_blocking=True) as caller:
        spin((1,), (1,), (np.int64(400_000_000),))  # a fifth of a second at 2 GHz
        pending = caller.record()
        time_graph_ms(cp, lambda: x.fill(1.0), calls=2, repeats=3)
        assert pending.done


WGMMA = ("wgmma", "x3tf32")


def wgmma_or_skip():
    if int(cp.cuda.Device().compute_capability) != 90:
        pytest.skip("the wgmma GEMMs are sm_90a code: this GPU is not a Hopper")


@pytest.mark.parametrize("M, K, N", SHAPES + [(129, 3, 257), (64, 4, 128), (1000, 12001, 7)])
def test_wgmma_gemms_in_every_storage_order_against_float64(rng, M, K, N):
    """Both wgmma GEMMs at odd sizes, both operands row-major or transposed: wgmma within TF32's
    error, x3tf32 within 2x of SGEMM's or under 5e-7 (3xTF32 keeps 22 of the 24 bits: 2.4e-7 at
    any K, where SGEMM at tiny K is nearer 6e-8) and a hundred times below wgmma's."""
    wgmma_or_skip()
    for ta, tb in itertools.product((False, True), repeat=2):
        a, ha = operand(rng, M, K, ta, "float32")
        b, hb = operand(rng, K, N, tb, "float32")
        exact = ha.astype(np.float32).astype(np.float64) @ hb.astype(np.float32).astype(np.float64)
        errors = {}
        for variant in ("cublas",) + WGMMA:
            out = cp.full((M, N), np.nan, dtype="float32")
            kernels.gemm(a, b, out=out, variant=variant)
            errors[variant] = rel(out.get(), exact)
        assert errors["wgmma"] <= 2e-3, (M, K, N, ta, tb, errors)
        assert errors["x3tf32"] <= max(2 * errors["cublas"], 5e-7), (M, K, N, ta, tb, errors)
        assert errors["x3tf32"] <= errors["wgmma"] / 100 or K < 8, (M, K, N, ta, tb, errors)


@pytest.mark.parametrize("rows, K", [(1, 1), (33, 65), (257, 1001), (784, 3203)])
def test_copy_k_major_copies_and_splits_any_view_exactly(rng, rows, K):
    """The wgmma operands' tiled copy: a row-major, a transposed and a strided view, each copied
    and split into K-major parts (padded rows, poisoned) bit for bit as the elementwise copy and
    the cuBLAS-composed 3xTF32's split make them; its parts summing back to x within TF32's
    rounding; a float64 x refused by name."""
    wgmma_or_skip()
    from perflab.kernels.cublas import tf32_split_kernel
    from perflab.kernels.wgmma import copy_k_major
    n = max(rows, K)
    full = cp.asarray(rng.uniform(-1, 1, (2 * n + 1, 2 * n + 3)).astype(np.float32))
    views = {"row-major": full[:rows, :K], "transposed": cp.ascontiguousarray(full[:K, :rows]).T,
             "strided": full[1:2 * rows:2, 3:3 + 2 * K:2]}
    for name, x in views.items():
        padded = cp.full((rows, K + 5), np.nan, np.float32)
        big, small = padded[:, :K], cp.full((rows, K + 5), np.nan, np.float32)[:, :K]
        copy_k_major(x, big)
        assert cp.array_equal(big, x), name
        copy_k_major(x, big, small)
        want_big, want_small = cp.empty((rows, K), np.float32), cp.empty((rows, K), np.float32)
        tf32_split_kernel()(cp.ascontiguousarray(x), want_big, want_small)
        assert cp.array_equal(big, want_big) and cp.array_equal(small, want_small), name
        assert float(cp.abs(big + small - x).max()) <= 2.0 ** -21 * float(cp.abs(x).max()), name
        assert bool(cp.isnan(padded[:, K:]).all()), name  # the padding is left alone
    with pytest.raises(kernels.KernelError, match="float32"):
        copy_k_major(full.astype(cp.float64)[:rows, :K], big)


def tf32_rest_on_host(x):
    """round(x - trunc(x)) to TF32, in NumPy's bits: the small part of x whose big part is x itself."""
    keep = np.uint32(0xFFFFE000)
    rest = x - (x.view(np.uint32) & keep).view(np.float32)  # exact: the low 13 bits of x's mantissa
    return ((rest.view(np.uint32) + np.uint32(0x1000)) & keep).view(np.float32)


@pytest.mark.parametrize("rows, K", [(1, 4), (33, 1), (257, 1001), (130, 788)])
def test_small_part_of_an_operand_read_in_place_is_exact_and_leaves_the_padding(rng, rows, K):
    """x3tf32's split of an operand it reads in place: the small parts bit for bit as NumPy rounds
    them, into a poisoned padded buffer whose padding stays poisoned; trunc(x) + small within
    2^-21 of x; a view the kernel cannot read in place refused by name."""
    wgmma_or_skip()
    from perflab.kernels.wgmma import k_major_in_place, small_part
    pitch = -(-K // 4) * 4 + 4  # rows 16-byte aligned, wider than K
    full = cp.asarray(rng.uniform(-1, 1, (rows, pitch)).astype(np.float32) * np.float32(3.7))
    x = full[:, :K]
    assert k_major_in_place(x)
    padded = cp.full((rows, pitch), np.nan, np.float32)
    small = padded[:, :K]
    small_part(x, small)
    host = cp.asnumpy(x)
    assert np.array_equal(cp.asnumpy(small).view(np.uint32), tf32_rest_on_host(host).view(np.uint32))
    big = (host.view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32).astype(np.float64)
    assert np.abs(big + cp.asnumpy(small) - host).max() <= 2.0 ** -21 * np.abs(host).max()
    assert bool(cp.isnan(padded[:, K:]).all())
    if K > 1:
        with pytest.raises(kernels.KernelError, match="in place"):
            small_part(x.T, cp.empty((K, rows), np.float32))


@pytest.mark.parametrize("variant", WGMMA)
def test_every_wgmma_config_and_split_with_alpha_beta_and_the_epilogue(rng, variant):
    """Every (config, splits) tune() may pick, at an odd shape, with alpha and beta (out scaled in
    place, split-K too) and the bias + sigmoid epilogue; a float64 operand is refused by name."""
    wgmma_or_skip()
    from perflab.kernels.wgmma import choices
    M, K, N = 259, 1043, 389
    a, ha = operand(rng, M, K, False, "float32")
    b, hb = operand(rng, K, N, True, "float32")
    c0 = rng.uniform(-1, 1, (M, N))
    bias = rng.uniform(-1, 1, M)
    tol = 2e-3 if variant == "wgmma" else 1e-6
    for config, splits in choices(M, N, K, variant):
        out = cp.asarray(c0.astype(np.float32))
        kernels.gemm(a, b, out=out, alpha=0.5, beta=-2.0, variant=variant, config=config, blocks=splits)
        assert rel(out.get(), 0.5 * ha @ hb - 2.0 * c0) <= tol, (config, splits)
    out = cp.full((M, N), np.nan, dtype="float32")
    kernels.gemm(a, b, out=out, bias=cp.asarray(bias.astype(np.float32)), variant=variant)
    assert rel(out.get(), 1 / (1 + np.exp(-(ha @ hb + bias[:, None])))) <= tol
    with pytest.raises(kernels.KernelError, match="float32"):
        kernels.gemm(a.astype(cp.float64), b.astype(cp.float64), variant=variant)
    with pytest.raises(kernels.KernelError, match="tile config"):
        kernels.gemm(a, b, variant=variant, config="wg3-n96-s2")
    with pytest.raises(kernels.KernelError, match=r"splits K into one of \(1, 2, 4\) parts, got 3"):
        kernels.gemm(a, b, variant=variant, blocks=3)


@pytest.mark.parametrize("variant", WGMMA)
def test_wgmma_gemms_replay_in_a_graph_once_run_and_name_a_capture_before(rng, variant):
    """A first call makes the tensor maps and K-major buffers, which capture does not allow: a
    capture before it is refused by name; after it, replays compute the same product anew."""
    wgmma_or_skip()
    a, _ = operand(rng, 67, 301, False, "float32")
    b, _ = operand(rng, 301, 97, False, "float32")  # row-major b: a K-major copy each call
    out = cp.empty((67, 97), cp.float32)
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        stream.begin_capture()
        with pytest.raises(kernels.KernelError, match="capture"):
            kernels.gemm(a, b, out=out, variant=variant)
        stream.end_capture()
    kernels.gemm(a, b, out=out, variant=variant)
    first = out.get()
    with stream:
        stream.begin_capture()
        kernels.gemm(a, b, out=out, variant=variant)
        graph = stream.end_capture()
    out.fill(np.nan)
    a *= 2
    graph.launch(stream)
    stream.synchronize()
    assert np.allclose(out.get(), 2 * first, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("variant", WGMMA)
def test_a_wgmma_gemms_kept_launches_compute_its_operands_present_values(rng, variant):
    """A call's launches are worked out once per operands' addresses and layouts, scalars and
    stream, then only launched: they read what the operands hold at each call (row-major b: a
    K-major copy each call; transposed a, split-K), anew on another stream; a constant's slice
    reads its kept forms, and forgetting the constant drops the kept launches that read them."""
    wgmma_or_skip()
    from perflab.kernels import wgmma
    M, K, N = 67, 1043, 97
    a, ha = operand(rng, M, K, True, "float32")
    b, hb = operand(rng, K, N, False, "float32")
    tol = 2e-3 if variant == "wgmma" else 1e-6
    out = cp.full((M, N), np.nan, cp.float32)
    kept = len(wgmma.LAUNCHES)
    for call in range(3):
        kernels.gemm(a, b, out=out, alpha=0.5, beta=0.0, variant=variant, blocks=4)
        assert rel(out.get(), 0.5 * ha @ hb) <= tol, call
        assert len(wgmma.LAUNCHES) == kept + 1, call
        a *= 2
        ha = 2 * ha
    with cp.cuda.Stream(non_blocking=True):
        kernels.gemm(a, b, out=out, alpha=0.5, variant=variant, blocks=4)
        assert rel(out.get(), 0.5 * ha @ hb) <= tol and len(wgmma.LAUNCHES) == kept + 2
    images = cp.asarray(rng.uniform(-1, 1, (K, 2 * N)).astype(np.float32))
    wgmma.constant(images)
    assert not wgmma.LAUNCHES  # a kept launch might copy what a slice of images now reads from its kept forms
    kernels.gemm(a, images[:, 3:3 + N], out=out, variant=variant)
    assert rel(out.get(), ha @ cp.asnumpy(images[:, 3:3 + N]).astype(np.float64)) <= tol
    assert len(wgmma.LAUNCHES) == 1
    wgmma.forget(images)
    assert not wgmma.LAUNCHES


@pytest.mark.parametrize("gemm, tolerance", [("x3tf32", 1e-5), ("wgmma", 5e-3)])
def test_training_with_the_wgmma_gemms_matches_the_reference(gemm, tolerance):
    """x3tf32 trains at float32's tolerance against the float64 reference, wgmma at TF32's; in CUDA
    graphs (resident; staged, each batch copied into one buffer the graph reads) and launched one by
    one (staged, no graphs)."""
    wgmma_or_skip()
    from perflab.config import Config
    from perflab.train.comm import Serial
    from perflab.train.runner import check
    from perflab.train.spec import RunSpec
    cfg = Config(dataset="synthetic", input_size=97, hidden_sizes=(61,), num_classes=7, train_size=517,
                 batch_size=100, num_epochs=2, learning_rate=0.5, test_size=50, dtype="float32")
    for mode, graphs in (("resident", True), ("staged", True), ("staged", False)):
        result = check(cfg, "data", Serial(), RunSpec(backend="cupy", gemm=gemm, exchange="mpi", mode=mode, launch=LAUNCH[graphs]))
        assert result["tolerance"] == tolerance and result["passed"], (mode, graphs, result["errors"])
    for hidden in DEEP:  # deeper: dz_1 split by the pass under the second layer, the others whole
        for mode, graphs in (("resident", True), ("staged", False)):
            result = check(cfg.replace(hidden_sizes=hidden), "data", Serial(),
                           RunSpec(backend="cupy", gemm=gemm, exchange="mpi", mode=mode, launch=LAUNCH[graphs]))
            assert result["tolerance"] == tolerance and result["passed"], (hidden, mode, graphs, result["errors"])


def test_wgmma_reads_slices_of_a_constant_from_its_kept_forms(rng):
    """The trainer's images, declared constant: a slice in either orientation (forward GEMM 1's b
    and backward GEMM 3's b^T) multiplies right, from forms kept since the first use (changing the
    array afterwards changes nothing: that is what constant promises); forget() drops them."""
    wgmma_or_skip()
    from perflab.kernels import wgmma
    X = cp.asarray(np.asfortranarray(rng.uniform(-1, 1, (97, 1000)) + 0.1), np.float32)  # 97: kept rows padded
    hX = X.get().astype(np.float64)
    W, hW = operand(rng, 61, 97, False, "float32")
    G, hG = operand(rng, 61, 200, False, "float32")
    wgmma.constant(X)
    try:
        for variant, tol in (("wgmma", 2e-3), ("x3tf32", 1e-6)):
            for a, ha, b, hb in ((W, hW, X[:, 200:400], hX[:, 200:400]), (G, hG, X[:, 200:400].T, hX[:, 200:400].T)):
                out = cp.full((a.shape[0], b.shape[1]), np.nan, cp.float32)
                kernels.gemm(a, b, out=out, variant=variant)
                assert rel(out.get(), ha @ hb) <= tol, (variant, b.strides)
                assert wgmma.prepared(b.T, variant == "x3tf32") is not None
        X *= 2
        out = cp.empty((61, 200), cp.float32)
        kernels.gemm(W, X[:, 200:400], out=out, variant="x3tf32")
        assert rel(out.get(), hW @ hX[:, 200:400]) <= 1e-6  # the kept split, not the doubled images
    finally:
        wgmma.forget(X)
    assert wgmma.prepared(X[:, 200:400].T, True) is None


@pytest.mark.parametrize("C, H, n", [(10, 61, 333), (7, 130, 1025)])
def test_wgmma_x3tf32_reads_dz1_split_as_the_fused_backward_writes_it(rng, C, H, n):
    """With dz1_small the fused backward writes dz1's TF32 big part (rounded to nearest) and the
    small rest, dW2 and db1 unchanged bit for bit; x3tf32 reads that pair as backward GEMM 3's a
    (a_small) and multiplies within FP32's error; any other variant refuses a_small by name."""
    wgmma_or_skip()
    W2, a1 = cp.asarray(rng.normal(size=(C, H)) * 0.2, cp.float32), cp.asarray(rng.uniform(0.05, 0.95, (H, n)), cp.float32)
    delta = cp.asarray(rng.normal(size=(C, n)), cp.float32)
    part = cp.empty(kernels.output_backward_partials(H, n, C), cp.float32)
    whole, dW2, db1 = cp.empty((H, n), cp.float32), cp.empty((C, H), cp.float32), cp.empty(H, cp.float32)
    kernels.output_backward(W2, delta, a1, whole, dW2, db1, part)
    big, small = cp.full((H, n), np.nan, cp.float32), cp.full((H, n), np.nan, cp.float32)
    dW2s, db1s = cp.empty_like(dW2), cp.empty_like(db1)
    kernels.output_backward(W2, delta, a1, big, dW2s, db1s, part, small)
    assert bool((dW2 == dW2s).all()) and bool((db1 == db1s).all())
    v = whole.get()
    bits = v.view(np.uint32)
    assert np.array_equal(big.get(), ((bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32))
    assert rel(big.get().astype(np.float64) + small.get(), v.astype(np.float64)) <= 2 ** -21
    X = cp.asarray(np.asfortranarray(rng.uniform(-1, 1, (97, n)) + 0.1), cp.float32)
    out = cp.full((H, 97), np.nan, cp.float32)
    kernels.gemm(big, X.T, out=out, variant="x3tf32", a_small=small)
    assert rel(out.get(), v.astype(np.float64) @ X.get().T.astype(np.float64)) <= 1e-6
    with pytest.raises(kernels.KernelError, match="a_small"):
        kernels.gemm(big, X.T, out=out, variant="wgmma", a_small=small)
    with pytest.raises(kernels.KernelError, match="it must be shaped as a"):
        kernels.gemm(big, X.T, out=out, variant="x3tf32", a_small=small[:, :-1])


def test_staged_images_ceiling_walks_the_data_set_and_keeps_its_spread():
    from perflab.measure import ceilings
    rows = ceilings.staged_images(batches=(300, 1200), N=6000, walks=3)
    assert [r["B"] for r in rows] == [300, 1200]
    for r in rows:
        assert 0 < r["min_seconds"] <= r["seconds"] <= r["max_seconds"]
        assert r["size_bytes"] == r["B"] * (784 * 4 + 8)
    assert rows[1]["seconds"] > rows[0]["seconds"]  # four times the bytes a batch


def test_a_swept_staged_point_carries_its_copy_probed_beside_it_and_a_resident_one_none():
    from perflab.train.comm import Serial
    from perflab.workbook.sweep import measure_point
    base = {"H": 67, "B": 501, "p": 1, "parallel": "data", "backend": "cupy", "gemm": "cublas", "dtype": "float32",
            "N": 2003, "epochs": 1, "learning_rate": 0.1}
    staged = measure_point({**base, "mode": "staged"}, Serial())
    assert 0 < staged["copy_probe_min_s"] <= staged["copy_probe_s"] <= staged["copy_probe_max_s"]
    # a batch copies and computes: its fastest copy walk under a batch (at H = 67 the step is mostly the copy, and the
    # probe's median ran over the batch once on one H100: experiments/deep/gpu_tests_04a8e48.log)
    assert staged["copy_probe_min_s"] < staged["epoch_seconds"] / staged["batches"]
    assert "copy_probe_s" not in measure_point({**base, "mode": "resident"}, Serial())


def test_the_staged_trainers_floor_is_named_by_how_its_step_is_launched():
    from perflab.measure.ceilings import trainer_floor
    from perflab.train.comm import Serial
    graph, eager = (trainer_floor(Serial(), "staged", batches=(5, 40), graphs=g) for g in (True, False))
    assert [r["impl"] for r in graph] == ["trainer staged graph", "trainer staged graph epoch"]
    assert [r["impl"] for r in eager] == ["trainer staged", "trainer staged epoch"]
    assert graph[0]["seconds"] > 0 and eager[0]["seconds"] > 0
    resident = trainer_floor(Serial(), batches=(5, 40), graphs=False)
    assert [r["impl"] for r in resident] == ["trainer resident eager", "trainer resident eager epoch"]
    if int(cp.cuda.Device().compute_capability) == 90:
        tensor_cores = trainer_floor(Serial(), batches=(5, 40), graphs=False, gemm="x3tf32", repeats=3)
        assert [r["impl"] for r in tensor_cores] == ["trainer resident eager x3tf32", "trainer resident eager x3tf32 epoch"]
        step = tensor_cores[0]
        assert 0 < step["min_seconds"] <= step["seconds"] <= step["max_seconds"]


def test_staged_overlap_times_the_copy_behind_a_busy_gpu():
    from perflab.measure import ceilings
    rows = ceilings.staged_overlap(batches=(300, 1200), kernel_us=(50, 400), N=6000, walks=2)
    assert [(r["B"], i) for i, r in enumerate(rows)] == [(300, 0), (300, 1), (1200, 2), (1200, 3)]
    for r in rows:
        assert 0 <= r["hidden_seconds"] <= r["kernel_seconds"] + r["copy_seconds"] and r["seconds"] > 0
    assert 3e-5 < rows[0]["kernel_seconds"] < rows[1]["kernel_seconds"] < 8e-4  # the spin runs about as long as asked


def test_the_pipelined_pieces_all_reduce_is_timed_in_the_trainers_chain_beside_a_busy_gpu():
    """One rank (the MPI sum is a copy then): a row per piece size, the pieces round-tripped intact."""
    from perflab.measure import ceilings
    from perflab.train.comm import MPIComm
    rows = ceilings.pipelined_allreduce(MPIComm(), sizes=(2 ** 16, 2 ** 20), pieces=3, repeats=2)
    assert [(r["ceiling"], r["size_bytes"], r["ranks"]) for r in rows] == [("pipelined_allreduce", 2 ** 16, 1),
                                                                          ("pipelined_allreduce", 2 ** 20, 1)]
    assert all(0 < r["seconds"] < 0.1 and r["value"] == r["size_bytes"] / r["seconds"] for r in rows)


def test_step_floors_are_medians_and_a_graph_replay_costs_the_host_less_than_its_kernels_one_by_one():
    from perflab.measure import ceilings
    rows = {r["impl"]: r for r in ceilings.gpu_step_floors(steps=10, repeats=3)}
    assert set(rows) == {"graph replay", "eager launch"} and rows["eager launch"]["kernels"] >= 4
    assert 0 < rows["graph replay"]["seconds"] < rows["eager launch"]["seconds"]


def half_gemms_here() -> tuple:
    """The half-precision GEMMs' names in ceilings rows that this GPU runs (the ceilings time their steps too)."""
    from perflab.config import HALF_CAPABILITY, HALF_IMPLS
    capability = int(cp.cuda.Device().compute_capability)
    return tuple(g for kind, g in HALF_IMPLS.items() if capability >= HALF_CAPABILITY[kind])


def test_the_step_in_sequence_is_timed_per_gemm_and_takes_about_its_kernels_alone():
    """gpu_step_kernels' `step in sequence (<gemm>)` rows: one per GEMM at each (H, B'), their time
    within a band of the sum of the same kernels timed alone (the order costs a few percent, not
    a factor; a sequence missing a kernel, or timed twice, falls outside it)."""
    from perflab.analysis.predictor import UPDATE, fused_step, sequence_name
    from perflab.kernels import wgmma
    from perflab.measure import ceilings
    rows = ceilings.gpu_step_kernels(hidden=(300,), batches=(701,), repeats=5)
    seconds = {r["impl"]: r["seconds"] for r in rows}
    gemms = ("cublas",) + (wgmma.WGMMA_VARIANTS if wgmma.hopper() else ())
    halves = half_gemms_here()
    assert {n for n in seconds if n.startswith("step in sequence")} == {sequence_name(g, eager) for g in gemms + halves
                                                                        for eager in (False, True)}
    for gemm in gemms:
        alone = sum(seconds[n] for n in fused_step(gemm) + (UPDATE,))
        assert 0.7 * alone < seconds[sequence_name(gemm)] < 1.5 * alone, (gemm, alone, seconds[sequence_name(gemm)])
        # launched one by one it takes at least the graph's time (launch gaps, or the host's launches at this small size)
        assert 0.9 * seconds[sequence_name(gemm)] < seconds[sequence_name(gemm, eager=True)] < 20 * alone, gemm


def test_a_hidden_layer_is_timed_per_gemm_as_its_three_gemms_and_one_pass():
    """gpu_step_kernels' `hidden layer (<gemm>)` rows (what a deeper net adds a layer): one per GEMM, each
    at least its three H x H x B GEMMs' work at the GEMM's own rate alone and at most a few times it
    (a layer missing a GEMM, or timing one twice, falls outside); launched one by one no faster."""
    import cupy as cp

    from perflab import kernels
    from perflab.analysis.predictor import hidden_layer_name
    from perflab.kernels import wgmma
    from perflab.measure import ceilings
    from perflab.timing import time_graph_ms
    H, B = 512, 1001
    rows = ceilings.gpu_step_kernels(hidden=(H,), batches=(B,), repeats=5)
    seconds = {r["impl"]: r["seconds"] for r in rows}
    gemms = ("cublas",) + (wgmma.WGMMA_VARIANTS if wgmma.hopper() else ())
    halves = half_gemms_here()
    assert {n for n in seconds if n.startswith("hidden layer")} == {hidden_layer_name(g, e) for g in gemms + halves
                                                                    for e in (False, True)}
    W, a, out = (cp.asarray(np.random.default_rng(0).random(s, np.float32)) for s in ((H, H), (H, B), (H, B)))
    for gemm in gemms:
        if gemm in kernels.TUNABLE_VARIANTS:
            kernels.tune(W, a, out, gemm)
        one = time_graph_ms(cp, lambda g=gemm: kernels.gemm(W, a, out=out, variant=g), calls=5, repeats=5) * 1e-3
        layer = seconds[hidden_layer_name(gemm)]
        assert 2.5 * one < layer < 8 * one, (gemm, one, layer)
        assert seconds[hidden_layer_name(gemm, eager=True)] > 0.9 * layer, gemm
    wgmma.release()


def test_the_epoch_overhead_is_the_trainers_epoch_less_its_own_graph():
    from perflab.measure import ceilings
    rows = ceilings.epoch_overhead(shapes=((257, 301, 7),), epochs=4, repeats=3)
    (row,) = rows
    assert row["impl"] == "trainer resident epoch graph" and (row["H"], row["B"], row["batches"]) == (257, 301, 7)
    assert 0 < row["graph_seconds"] < row["epoch_seconds"] < 0.5
    assert row["seconds"] == pytest.approx(row["epoch_seconds"] - row["graph_seconds"])
