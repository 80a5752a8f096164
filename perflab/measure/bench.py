"""Benchmarks: perflab beside its peers in one run (warm-up, CUDA events, medians).

`perflab bench gemm`: every GEMM variant and cuBLAS at the training shapes.
`perflab bench train`: perflab's training epoch beside PyTorch, JAX and the cuBLAS floor
(perflab.measure.peers).
"""
from __future__ import annotations

import math
import statistics
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from perflab.analysis.perfmodel import gradient_buffer_bytes
from perflab.measure.gemm_inputs import TOLERANCE, C, D, gemm_shapes, named_gemm_shapes, operand_sets, rel_error, rotating
from perflab.timing import graph_replays_ms, time_graph_ms, time_ms
from perflab.train.runner import ONE_TF32_PRODUCT


def device_peak_flops(cp) -> tuple[float, dict]:
    """FP32 FMA peak: SMs x 128 lanes x 2 FLOPs x clock (the clock read off the device)."""
    dev = cp.cuda.Device()
    props = cp.cuda.runtime.getDeviceProperties(dev.id)
    sms, clock_khz = props["multiProcessorCount"], props["clockRate"]
    return sms * 128 * 2 * clock_khz * 1e3, {"sms": sms, "clock_mhz": clock_khz / 1e3, "gpu": props["name"].decode()}


def device_copy_rate(cp, nbytes: int = 1 << 30) -> float:
    """Bytes per second of a large device-to-device copy, counting read + write."""
    a = cp.empty(nbytes // 4, cp.float32)
    b = cp.empty_like(a)
    a.fill(1)
    ms = time_ms(cp, lambda: b.__setitem__(Ellipsis, a), repeats=10)
    return 2 * nbytes / (ms * 1e-3)


def bench_gemm(variants=("naive", "tiled", "regblock", "best", "tf32", "cublas"), dtype="float32", hidden=(512, 1024, 2048),
               batches=(800, 3200, 12000), repeats=20, progress=True, peers=("pytorch", "jax"), log=print,
               on_shape=None):
    """Rows: one per (shape, variant) with ms, TFLOP/s, % of cuBLAS, % of the fastest SGEMM peer
    (cuBLAS, PyTorch, JAX: perflab.measure.gemm_peers, float32 only), % of cuBLAS TF32 (pytorch-tf32)
    and of JAX's 3xTF32 (jax-x3), % of peak, GB/s. on_shape(rows so far) runs after each shape, so a
    run cut short keeps what it finished."""
    import cupy as cp
    from tqdm.auto import tqdm

    from perflab import kernels
    peak, dev = device_peak_flops(cp)
    copy_rate = device_copy_rate(cp)
    from perflab.kernels.wgmma import hopper
    from perflab.measure.gemm_peers import run_gemm_peers
    if not hopper() and any(v in kernels.WGMMA_VARIANTS for v in variants):
        log(f"skipped: {', '.join(kernels.WGMMA_VARIANTS)} (Hopper's wgmma; this GPU is not one)")
        variants = [v for v in variants if v not in kernels.WGMMA_VARIANTS]
    peer_times = run_gemm_peers(peers, hidden, batches, repeats, log) if dtype == "float32" and peers else {}
    rows = []
    shapes = list(gemm_shapes(hidden, batches))
    for name, M, K, N, ta, tb in tqdm(shapes, disable=not progress, desc="gemm shapes"):
        inputs = operand_sets(cp, M, K, N, ta, tb, dtype)
        base = time_variants(cp, variants, inputs, M, K, N, dtype, repeats)
        for peer, times in peer_times.items():
            base[peer] = (*times[name], "", None, "")
        rows += gemm_rows(base, peer_times, name, M, K, N, dtype, peak, dev, copy_rate)
        if on_shape is not None:
            on_shape(rows)
    return rows


def time_variants(cp, variants, inputs, M: int, K: int, N: int, dtype: str, repeats: int) -> dict:
    """{variant: (ms, error against float64, config, blocks, schedule)} at one shape, each variant tuned
    first where it takes a choice; naive is left out where it would take too long, the TF32 ones
    where the inputs are not float32."""
    from perflab import kernels
    out = cp.empty((M, N), dtype)
    work = kernels.workspace(M, N, dtype)  # allocated outside the graph
    flops = 2.0 * M * N * K
    reference = None
    base = {}
    for variant in variants:
        if (variant == "naive" and flops > 2e10) or (variant in kernels.TF32_VARIANTS and dtype != "float32"):
            continue
        choice = (kernels.tune(*inputs[0], out, variant=variant, work=work)
                  if variant in kernels.TUNABLE_VARIANTS else ("", None))
        call = rotating(inputs, lambda a, b: kernels.gemm(a, b, out=out, variant=variant, work=work))
        call()
        if reference is None:
            a0, b0 = inputs[0]
            reference = cp.asnumpy(a0).astype(np.float64) @ cp.asnumpy(b0).astype(np.float64)
        a0, b0 = inputs[0]
        kernels.gemm(a0, b0, out=out, variant=variant)
        err = rel_error(out.get(), reference)
        ms = time_graph_ms(cp, call, calls=2 * len(inputs), repeats=repeats)
        schedule = (kernels.schedule_name(variant, kernels.ctype(dtype), choice[0], M, N, K, choice[1])
                    if variant in kernels.TILED_VARIANTS
                    else f"split-K {choice[1]}" if variant in kernels.WGMMA_VARIANTS else "")
        base[variant] = (ms, err, choice[0], choice[1], schedule)
    return base


def gemm_rows(base: dict, peer_times: dict, name: str, M: int, K: int, N: int, dtype: str, peak: float, dev: dict,
              copy_rate: float) -> list[dict]:
    """bench_gemm's rows of one shape: each timed variant and peer against the device's peak and copy
    rate, cuBLAS, the fastest FP32 peer and the tensor-core peers."""
    from perflab.measure.gemm_peers import HALF_PEERS, TENSOR_CORE_PEERS
    flops = 2.0 * M * N * K
    nbytes = (M * K + K * N + M * N) * np.dtype(dtype).itemsize
    fastest_peer = min((base[p][0] for p in ("cublas", *peer_times)
                        if p in base and p not in TENSOR_CORE_PEERS and p not in HALF_PEERS), default=float("nan"))
    rows = []
    for variant, (ms, err, config, blocks, schedule) in base.items():
        half, half_tolerance = HALF_PEERS.get(variant, (None, None))
        stored_bytes = nbytes // np.dtype(dtype).itemsize * 2 if half else nbytes
        rows.append({"shape": name, "M": M, "K": K, "N": N, "variant": variant, "dtype": half or dtype, "ms": ms,
                     "tflops": flops / ms / 1e9, "pct_peak": 100 * flops / (ms * 1e-3) / peak,
                     "gbps": stored_bytes / ms / 1e6, "pct_copy_rate": 100 * stored_bytes / (ms * 1e-3) / copy_rate,
                     "rel_error": err, "gpu": dev["gpu"], "peak_tflops": peak / 1e12,
                     "copy_rate_gbps": copy_rate / 1e9, "config": config, "blocks": blocks, "schedule": schedule,
                     "checked": bool(err <= (half_tolerance or TOLERANCE["tf32" if variant in ONE_TF32_PRODUCT
                                                                        else dtype])),
                     "pct_cublas": 100 * base["cublas"][0] / ms if "cublas" in base else float("nan"),
                     "pct_fastest_peer": 100 * fastest_peer / ms,
                     **{f"pct_{p.replace('-', '_')}": 100 * base[p][0] / ms if p in base else float("nan")
                        for p in TENSOR_CORE_PEERS}})
    return rows


def bench_half_gemm(kind: str = "bfloat16", hidden=(512, 1024, 2048), batches=(3200, 12000), repeats=20,
                    progress=True, on_shape=None) -> list[dict]:
    """Rows: perflab's half-precision wgmma GEMM (tuned per shape) beside cuBLAS's (cublasGemmEx, as the
    half step calls it) at the half step's GEMMs (gemm_inputs.half_gemm_shapes), one per (shape,
    variant): ms (device time of graph replays, inputs rotated past L2, median), TFLOP/s, % of cuBLAS's
    speed, and the error against float64 on the half values each reads (checked: FP32 accumulation's,
    growing as the root of K, or one rounding for a half product)."""
    import cupy as cp
    from tqdm.auto import tqdm

    from perflab import kernels
    from perflab.measure.gemm_inputs import half_gemm_shapes, weight_gradient
    from perflab.train import half
    store = kernels.HALF_STORAGE[kind]
    dev = {"gpu": cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)["name"].decode()}
    rows = []
    for name, M, K, N, ta, tb in tqdm(list(half_gemm_shapes(hidden, batches)), disable=not progress,
                                      desc="half gemm shapes"):
        inputs = [tuple(kernels.narrow_copy(x, cp.empty_like(x, dtype=store)) for x in pair)
                  for pair in operand_sets(cp, M, K, N, ta, tb)]
        out = cp.empty((M, N), np.float32 if weight_gradient(name) else store)
        a0, b0 = (half.from_storage(x.get(), kind).astype(np.float64) for x in inputs[0])
        reference = a0 @ b0
        base = {}
        for variant in kernels.HALF_GEMMS:
            choice = kernels.tune(*inputs[0], out, variant) if variant == "wgmma" else ("", None)
            kernels.half_gemm(*inputs[0], out, variant=variant)
            got = out.get()
            err = rel_error(got.astype(np.float64) if got.dtype == np.float32
                            else half.from_storage(got, kind).astype(np.float64), reference)
            call = rotating(inputs, lambda a, b: kernels.half_gemm(a, b, out, variant=variant))
            base[variant] = (time_graph_ms(cp, call, calls=2 * len(inputs), repeats=repeats), err, choice)
        flops = 2.0 * M * N * K
        bound = half_gemm_bound(kind, K, out.dtype == np.float32)
        for variant, (ms, err, (config, splits)) in base.items():
            rows.append({"shape": name, "M": M, "K": K, "N": N, "variant": variant, "dtype": kind, "ms": ms,
                         "tflops": flops / ms / 1e9, "out": out.dtype.name if out.dtype == np.float32 else kind,
                         "rel_error": err, "checked": bool(err <= bound),
                         "config": config, "splits": splits, "pct_cublas": 100 * base["cublas"][0] / ms, **dev})
        if on_shape is not None:
            on_shape(rows)
    return rows


def half_gemm_bound(kind: str, K: int, float_out: bool) -> float:
    """The relative error a half GEMM's product may have against float64 on the half values it read: FP32
    accumulation's, growing as the root of K (cuBLAS's own was 1.3e-5 at K = 12000), or for a product
    rounded to half half a unit in its last place."""
    return max(1e-5, 2e-7 * math.sqrt(K)) if float_out else 2.0 ** -8 if kind == "bfloat16" else 2.0 ** -11


def half_gemm_ratio(rows) -> str:
    """perflab's half wgmma GEMM against cuBLAS's: the geometric mean of its speed ratio, worst and best."""
    ratio = {r["shape"]: r["pct_cublas"] / 100 for r in rows if r["variant"] == "wgmma"}
    if not ratio:
        return "no wgmma rows"
    worst, best = min(ratio, key=ratio.get), max(ratio, key=ratio.get)
    return (f"wgmma against cuBLAS ({rows[0]['dtype']}) at {len(ratio)} shapes: geometric mean "
            f"{math.exp(np.mean(np.log(list(ratio.values())))):.3f}, worst {ratio[worst]:.3f} ({worst}), "
            f"best {ratio[best]:.3f} ({best})")


HOLD_SHAPES = ("bwd3 H=2048 B=12000", "fwd1 H=2048 B=12000", "fwd1 H=512 B=3200")


def bench_hold(shapes=HOLD_SHAPES, seconds: float = 2.0, rounds: int = 2, progress=True) -> tuple[list[dict], list[dict]]:
    """best (tuned) and cuBLAS each replayed on a shape for `seconds`, alternating, `rounds` times,
    while nvidia-smi samples the SM clock and power (perflab.measure.power). A burst after idle runs at the
    boost clock; held, a large GEMM runs at what the power cap leaves it, which depends on the
    kernel's energy a cycle. Rows: the first replays' and the held second half's ms, % of cuBLAS
    held in the same round, and clock and power over that half. Also returns the samples."""
    import cupy as cp
    from tqdm.auto import tqdm

    from perflab import kernels
    from perflab.measure import power
    known = {s[0]: s for s in gemm_shapes()}
    rows = []
    with tempfile.TemporaryDirectory() as scratch, power.Sampler(Path(scratch) / "smi.csv", cp.cuda.Device().pci_bus_id) \
            as sampler:
        for name in tqdm(named_gemm_shapes(shapes), disable=not progress, desc="held shapes"):
            _, M, K, N, ta, tb = known[name]
            inputs = operand_sets(cp, M, K, N, ta, tb)
            out, work = cp.empty((M, N), np.float32), kernels.workspace(M, N, "float32")
            config, blocks = kernels.tune(*inputs[0], out, variant="best", work=work)
            for turn_round in range(rounds):
                for variant in ("best", "cublas"):
                    call = rotating(inputs, lambda a, b: kernels.gemm(a, b, out=out, variant=variant, work=work))
                    t0 = time.time()
                    ms = graph_replays_ms(cp, call, 2 * len(inputs), lambda n: time.time() - t0 >= seconds)
                    t1, held = time.time(), statistics.median(ms[len(ms) // 2:])
                    rows.append({"shape": name, "M": M, "K": K, "N": N, "variant": variant, "round": turn_round,
                                 "config": config if variant == "best" else "",
                                 "schedule": kernels.schedule_name("best", "float", config, M, N, K, blocks)
                                 if variant == "best" else "", "seconds": seconds, "replays": len(ms),
                                 "ms_first": statistics.median(ms[:5]), "ms_held": held,
                                 "tflops_held": 2 * M * N * K / held / 1e9, "t0": t0, "t_mid": (t0 + t1) / 2,
                                 "t1": t1})
    for row in rows:
        row.update(power.summarize(sampler.samples, row["t_mid"], row["t1"], settle=0))
        cublas = next(r for r in rows if (r["shape"], r["round"], r["variant"]) == (row["shape"], row["round"], "cublas"))
        row["pct_cublas_held"] = 100 * cublas["ms_held"] / row["ms_held"]
    return rows, sampler.samples


def gemm_ratios(df) -> list[str]:
    """best's and tf32's ratio to cuBLAS, and best's to the fastest SGEMM peer at each shape, over
    the H x 784 shapes: geometric mean, worst and best, with their shapes."""
    big = df[df["shape"].str.startswith(("fwd1", "bwd3"))]
    peers = sorted(set(big["variant"]) & {"cublas", "pytorch", "jax"})
    asks = [(variant, "pct_cublas", "cuBLAS SGEMM") for variant in ("best", "tf32")]
    if len(peers) > 1 and "pct_fastest_peer" in big:
        asks.append(("best", "pct_fastest_peer", f"the fastest peer ({', '.join(peers[:-1])} or {peers[-1]})"))
    lines = []
    for variant, column, against in asks:
        ratio = big[big["variant"] == variant].set_index("shape")[column] / 100
        if len(ratio):
            lines.append(f"{variant} against {against} at the H x 784 shapes: geometric mean "
                         f"{math.exp(np.log(ratio).mean()):.3f}, worst {ratio.min():.3f} ({ratio.idxmin()}), "
                         f"best {ratio.max():.3f} ({ratio.idxmax()})")
    return lines


def summarize_gemm(rows) -> str:
    """A table of TFLOP/s, then gemm_ratios()."""
    import pandas as pd
    df = pd.DataFrame(rows)
    table = df.pivot_table(index="shape", columns="variant", values="tflops", sort=False).round(2).to_string()
    return "\n".join([table, *gemm_ratios(df)])


def step_kernels(H, B: int, dtype: str = "float32") -> list[tuple]:
    """(kernel, call, bytes it must move at least) for every kernel of one perflab training step
    of the net H (one width, or a deeper net's widths) at B samples on random operands (resident,
    cuBLAS GEMMs): perflab.train.step's kernels, named and in its order (FusedGPU's), each bound to
    its call here; then what the unfused step (a profiled run) runs instead of its fused kernels
    (step.unfused_output, "unfused: ")."""
    from perflab.analysis.perfmodel import widths
    calls = step_calls(widths(H), B, dtype)
    return [(k.name, calls[k.kind](k), k.nbytes) for k in step_description(H, B, dtype)]


def step_description(H, B: int, dtype: str = "float32") -> tuple:
    """The kernels step_kernels times, as perflab.train.step describes them (no CuPy: listed on any machine)."""
    from perflab.analysis.perfmodel import widths
    from perflab.train import step
    return step.step(widths(H), B, dtype=dtype) + step.unfused_output(widths(H), B, dtype)


def step_calls(hidden: tuple, B: int, dtype: str) -> dict:
    """{kernel kind: kernel -> a callable launching it} on random device operands of the net at B samples, as
    perflab.train.gpu.FusedGPU runs the step on one GPU. In a mixed-precision step (dtype bfloat16 or float16) the
    weights, images, activations and their gradients are half (cuBLAS's half GEMMs, weight gradients into FP32), the
    fused output layer reads W_L, delta and the biases in FP32 and makes db_L, the update rounds P into its half copy,
    float16's under its loss scale with the overflow flagged by the backward passes (D72); the unfused output layer's
    GEMMs read delta rounded to half, as the trainer's unfused step does (the rounding itself, its sigmoid' + db pass
    and db_L's row sums are not among the kernels listed: step.unfused_output)."""
    from perflab import kernels
    from perflab.train import step
    o = step_operands(hidden, B, dtype)
    half, W, b, dW, db, a, dz = o.half, o.W, o.b, o.dW, o.db, o.a, o.dz
    inputs = [o.X] + a[:-1]  # layer l's input (1-based: inputs[l - 1]), which its dW_l multiplies by
    flag = o.overflow if dtype == "float16" else None

    def gemm(x, w, out):
        if half:
            return lambda: kernels.half_gemm(x, w, out)
        return lambda: kernels.gemm(x, w, out=out, variant="cublas")

    def backward(k):  # the seeds' odd backward GEMMs make dW_l, the even ones W_l^T dz_l
        m = k.layer
        return gemm(dz[m - 1], inputs[m - 1].T, dW[m - 1]) if k.weight_gradient else gemm(W[m - 1].T, dz[m - 1], dz[m - 2])

    sums = step.update_adds_output_sums(True)  # the update adds the fused backward pass's sums (D77, D78)
    makes_db_out = step.fused_backward_makes_db_out(dtype, True)  # a half step's fused backward pass makes db_L (D67)
    partials = kernels.output_partials(o.part, o.W2.shape[0], a[-1].shape[0], B, half, makes_db_out) if sums else None

    def update():
        if dtype == "float16":
            return kernels.sgd_update_scaled(o.params, o.grads, 0.1, o.ends, o.regs, o.scale, o.overflow, o.counts, 2000,
                                             rounded=o.rounded, find=False, partials=partials)
        return kernels.sgd_update(o.params, o.grads, 0.1, o.ends, o.regs, rounded=o.rounded, partials=partials)
    a1, da1, b1, db1 = a[-1], dz[-1], b[-1], db[-1]  # the output layer's input, as the unfused path runs it
    db_out = dict(db2=o.db2) if makes_db_out else {}
    return {
        "fwd_gemm": lambda k: gemm(W[k.layer - 1], inputs[k.layer - 1], a[k.layer - 1]),
        "bias_sigmoid": lambda k: lambda: kernels.bias_sigmoid(a[k.layer - 1], b[k.layer - 1]),
        "fused_fwd": lambda k: lambda: kernels.output_layer(o.W2, b1, o.b2, a1, o.y, o.delta, B, o.part_forward),
        "row_sum_db": lambda k: lambda: kernels.row_sum(o.delta, o.db2),
        "fused_bwd": lambda k: lambda: kernels.output_backward(o.W2, o.delta, a1, da1, o.dW2, db1, o.part, overflow=flag,
                                                               reduce=not sums, **db_out),
        "bwd_gemm": backward,
        "sigmoid_bwd_db": lambda k: lambda: kernels.sigmoid_backward_rows(dz[k.layer - 1], a[k.layer - 1], db[k.layer - 1],
                                                                          overflow=flag),
        "update": lambda k: update,
        "unfused_bias_sigmoid": lambda k: lambda: kernels.bias_sigmoid(a1, b1),
        "unfused_fwd_gemm": lambda k: gemm(o.W2_gemm, a1, o.z2),
        "unfused_softmax": lambda k: lambda: kernels.softmax_xent_grad(o.z2, o.b2, o.y, o.delta, B),
        "unfused_bwd_gemm": lambda k: (gemm(o.delta_gemm, a1.T, o.dW2) if k.weight_gradient
                                       else gemm(o.W2_gemm.T, o.delta_gemm, da1)),
        "unfused_sigmoid_bwd": lambda k: lambda: kernels.sigmoid_backward(da1, a1),
        "unfused_row_sum_db": lambda k: lambda: kernels.row_sum(da1, db1)}


def step_operands(hidden: tuple, B: int, dtype: str):
    """step_calls' random device operands: what the GEMMs read in dtype (a half step's in half precision, the images
    C-ordered; FP32's F-ordered, D32), the parameters, their gradients, the logits and delta in FP32 (or float64);
    float16's loss scale and overflow flag; `half`, whether the step is a mixed-precision one."""
    import cupy as cp

    from perflab import kernels
    half = dtype in kernels.HALF_STORAGE
    master = np.float32 if half else dtype
    rng = np.random.default_rng(0)
    dev = lambda *shape: cp.asarray(rng.uniform(0.05, 0.95, shape).astype(master))  # noqa: E731
    if half:
        held = lambda *shape: kernels.narrow_copy(dev(*shape), cp.empty(shape, kernels.HALF_STORAGE[dtype]))  # noqa: E731
    else:
        held = dev
    L, last = len(hidden) + 1, hidden[-1]  # layers; the fused output layer's input width
    fan_in = (D,) + hidden[:-1]
    o = SimpleNamespace(W=[held(h, k) for h, k in zip(hidden, fan_in)], b=[dev(h) for h in hidden],
                        dW=[dev(h, k) for h, k in zip(hidden, fan_in)], db=[dev(h) for h in hidden],
                        X=held(D, B) if half else cp.asfortranarray(dev(D, B)),
                        a=[held(h, B) for h in hidden], dz=[held(h, B) for h in hidden],  # each hidden layer's output, its gradient
                        W2=dev(C, last), b2=dev(C), dW2=dev(C, last), db2=dev(C), y=cp.asarray(rng.integers(0, C, B)),
                        z2=dev(C, B), delta=dev(C, B),
                        part=cp.zeros(kernels.output_backward_partials(last, B, C), master),
                        part_forward=cp.zeros(kernels.output_layer_partials(last, B, C), master),
                        regs=cp.asarray([1e-4, 0.0] * L, dtype=master), half=half)
    if dtype == "float16":
        o.scale, o.overflow, o.counts = cp.ones(1, np.float32), cp.zeros(1, np.int32), cp.zeros(3, np.int64)
    o.W2_gemm, o.delta_gemm = (held(C, last), held(C, B)) if half else (o.W2, o.delta)  # what the unfused GEMMs read
    segments = [n for h, k in zip(hidden, fan_in) for n in (h * k, h)] + [C * last, C]  # each W and b in P
    o.params, o.grads = dev(sum(segments)), dev(sum(segments))
    o.rounded = cp.empty(sum(segments), kernels.HALF_STORAGE[dtype]) if half else None
    o.ends = cp.asarray(np.cumsum(segments), dtype=np.int64)
    return o


def tensor_core_step_kernels(H: int, B: int) -> list[tuple]:
    """(kernel, call, bytes) of the step's kernels that change with Hopper's tensor-core GEMMs, as
    the trainer runs them (tuned per shape; its images declared constant: their K-major forms made
    once; x3tf32's backward pass writing dz1's split), named and counted by perflab.train.step.
    The caller releases what they keep with kernels.wgmma.release() once no graph holds them."""
    import cupy as cp

    from perflab import kernels
    from perflab.train import step
    rng = np.random.default_rng(0)
    dev = lambda *shape: cp.asarray(rng.uniform(0.05, 0.95, shape).astype(np.float32))  # noqa: E731
    W1, W2, X = dev(H, D), dev(C, H), cp.asfortranarray(dev(D, B))
    a1, da1, da1_small, delta = dev(H, B), dev(H, B), dev(H, B), dev(C, B)
    dW1, dW2, db1 = dev(H, D), dev(C, H), dev(H)
    part = cp.empty(kernels.output_backward_partials(H, B, C), np.float32)
    kernels.wgmma.constant(X)
    rows, split_pass = [], None
    for variant in kernels.WGMMA_VARIANTS:
        split = da1_small if variant == "x3tf32" else None
        kernels.tune(W1, X, a1, variant)  # as the trainer's first step does, once per shape
        kernels.tune(da1, X.T, dW1, variant, a_small=split)
        calls = {"fwd_gemm": lambda v=variant: kernels.gemm(W1, X, out=a1, variant=v),
                 "bwd_gemm": lambda v=variant, s=split: kernels.gemm(da1, X.T, out=dW1, variant=v, a_small=s)}
        for k in step.step((H,), B, gemm=variant):
            if k.kind in calls:
                rows.append((k.name, calls[k.kind], k.nbytes))
            split_pass = k if k.kind == "fused_bwd_split" else split_pass
    rows.append((split_pass.name, lambda: kernels.output_backward(W2, delta, a1, da1, dW2, db1, part, da1_small),
                 split_pass.nbytes))
    return rows


def hidden_layer_kernels(H: int, B: int, gemm: str = "cublas", half: str | None = None) -> list:
    """The calls one more hidden layer (H x H weights, over a layer of H) adds to perflab's step at B
    samples, as perflab.train.gpu.FusedGPU runs them: its forward GEMM with bias + sigmoid, then
    backward its weight gradient dW = dz a^T, the input gradient W^T dz, and dz and db below in one
    pass (sigmoid_backward_rows). Tunable GEMMs are tuned per shape first, as the trainer's first step
    does (kernels.wgmma.release() frees what they keep once no graph holds them). `half` ("bfloat16" or
    "float16"): the mixed-precision step's, its weights, activations and their gradients in half, cuBLAS's
    half GEMMs, dW in FP32."""
    import cupy as cp

    from perflab import kernels
    rng = np.random.default_rng(1)
    dev = lambda *shape: cp.asarray(rng.uniform(0.05, 0.95, shape).astype(np.float32))  # noqa: E731
    if half is not None:
        store = kernels.HALF_STORAGE[half]
        held = lambda *shape: kernels.narrow_copy(dev(*shape), cp.empty(shape, store))  # noqa: E731
        W, b, dW, db = held(H, H), dev(H), dev(H, H), dev(H)
        below, a, dz, dz_below = held(H, B), held(H, B), held(H, B), held(H, B)
        return [lambda: kernels.half_gemm(W, below, a, bias=b), lambda: kernels.half_gemm(dz, below.T, dW),
                lambda: kernels.half_gemm(W.T, dz, dz_below), lambda: kernels.sigmoid_backward_rows(dz_below, below, db)]
    W, b, dW, db = dev(H, H), dev(H), dev(H, H), dev(H)
    below, a, dz, dz_below = dev(H, B), dev(H, B), dev(H, B), dev(H, B)
    work = kernels.workspace(H, max(H, B), np.float32) if gemm in kernels.TILED_VARIANTS else None
    gemms = ((W, below, a), (dz, below.T, dW), (W.T, dz, dz_below))
    if gemm in kernels.TUNABLE_VARIANTS:
        for x, y, out in gemms:
            kernels.tune(x, y, out, gemm, work)
    (fx, fy, fo), (wx, wy, wo), (ix, iy, io) = gemms
    return [lambda: kernels.gemm(fx, fy, out=fo, bias=b, variant=gemm, work=work),
            lambda: kernels.gemm(wx, wy, out=wo, variant=gemm, work=work),
            lambda: kernels.gemm(ix, iy, out=io, variant=gemm, work=work),
            lambda: kernels.sigmoid_backward_rows(dz_below, below, db)]


def half_step(H: int, B: int, half: str):
    """One mixed-precision step of perflab's fused trainer at 784-H-10 on B samples (resident, one GPU),
    without its loss: the calls its graph holds (the weights rounded, the half GEMMs, the fused passes,
    the update), as a callable on the current stream. The trainer itself, so the predictor's half rows
    time what training runs."""
    from perflab.config import Config
    from perflab.train.comm import Serial
    from perflab.train.gpu import FusedGPU
    rng = np.random.default_rng(0)
    X, y = np.asfortranarray(rng.random((D, B), dtype=np.float32)), rng.integers(0, C, B)
    cfg = Config(dataset="synthetic", input_size=D, hidden_sizes=(H,), num_classes=C, train_size=B, batch_size=B,
                 learning_rate=0.1, reg=1e-4, dtype=half, test_size=0)
    trainer = FusedGPU(cfg, X, y, Serial())

    Xb, yb, first = trainer.batch_images(slice(0, B))  # as training runs a batch (widened where half: D59)

    def step():
        trainer.gradients(Xb, yb, B, want_loss=False, first=first)
        trainer.update()
    step.trainer = trainer  # kept alive with the callable
    return step


def step_breakdown(H=2048, B: int = 12000, dtype: str = "float32", repeats: int = 20):
    """Device milliseconds of each kernel of one perflab training step of the net H (one width or a
    deeper net's widths) at B samples (resident, cuBLAS GEMMs), each timed alone in a replayed CUDA
    graph, with the bytes it must move and the rate that makes; the unfused output layer's kernels
    too, for comparison with the fused ones. Where the epoch's time over the cuBLAS floor goes."""
    import cupy as cp

    from perflab.analysis.perfmodel import net_name
    copy_rate = device_copy_rate(cp)
    rows = []
    for name, call, nbytes in step_kernels(H, B, dtype):
        ms = time_graph_ms(cp, call, calls=5, repeats=repeats)
        rows.append({"kernel": name, "H": net_name(H), "B": B, "dtype": dtype, "ms": ms, "bytes": nbytes,
                     "gbps": nbytes / ms / 1e6, "pct_copy_rate": 100 * nbytes / (ms * 1e-3) / copy_rate})
    return rows


ALLREDUCE_SIZES = (1 << 16, 1 << 20, gradient_buffer_bytes(512), gradient_buffer_bytes(2048), 1 << 24, 1 << 26)


def bench_allreduce(comm, sizes=ALLREDUCE_SIZES, calls: int = 10, repeats: int = 10) -> list[dict]:
    """The gradient all-reduce of one float32 device buffer, three ways side by side: perflab's
    NCCL and host-staged MPI (device -> host, MPI_Allreduce, host -> device), each the very call
    training makes (NCCLComm.allreduce, MPIComm.allreduce), and PyTorch's torch.distributed NCCL.
    NCCL paths: CUDA events around `calls` back-to-back all-reduces, median of `repeats`; the
    staged path blocks the host, so it is timed on the host. Rows on rank 0 only (every rank
    takes part)."""
    import functools

    import cupy as cp

    from perflab.train.comm import NCCLComm
    from perflab.train.gpu import select_device
    local = select_device(comm)
    nccl = NCCLComm(comm)
    stream = cp.cuda.Stream(non_blocking=True)
    events_ms = functools.partial(events_median_ms, comm, calls=calls, repeats=repeats)
    host_ms = functools.partial(host_median_ms, comm, repeats=repeats)
    record, elapsed = cupy_events(cp, stream)
    impls = {}
    for size in sizes:
        with stream:  # the comms work on the current stream
            buf = cp.ones(size // 4, cp.float32)

            def perflab_staged():
                comm.allreduce(buf)
                stream.synchronize()
            impls.setdefault(size, {})["perflab nccl"] = events_ms(lambda: nccl.allreduce(buf), record, elapsed)
            impls[size]["perflab staged mpi"] = host_ms(perflab_staged)
            impls[size].update(host_allreduces(comm, buf, stream, host_ms))
    impls_torch = torch_allreduce(comm, local, sizes, events_ms)
    return allreduce_rows(comm, sizes, impls, impls_torch) if comm.rank == 0 else []


def events_median_ms(comm, call, record, elapsed, calls: int, repeats: int) -> float:
    """ms of one call: `calls` back to back between two events (record(), elapsed(start, stop)), the
    median of `repeats`, every rank starting together, after two calls of warm-up."""
    for _ in range(2):
        call()
    times = []
    for _ in range(repeats):
        comm.barrier()
        start = record()
        for _ in range(calls):
            call()
        stop = record()
        times.append(elapsed(start, stop) / calls)
    return statistics.median(times)


def host_median_ms(comm, call, repeats: int) -> float:
    """ms of one call that blocks the host, on the host's clock: the median of `repeats`, every rank
    starting together, after one call of warm-up."""
    call()
    times = []
    for _ in range(repeats):
        comm.barrier()
        start = time.perf_counter()
        call()
        times.append(1e3 * (time.perf_counter() - start))
    return statistics.median(times)


def cupy_events(cp, stream) -> tuple:
    """(record, elapsed) for events_median_ms: CuPy events on `stream`."""
    def record():
        event = cp.cuda.Event()
        event.record(stream)
        return event

    def elapsed(start, stop):
        stop.synchronize()
        return cp.cuda.get_elapsed_time(start, stop)
    return record, elapsed


def allreduce_rows(comm, sizes, impls: dict, impls_torch: dict) -> list[dict]:
    """A row an (all-reduce, size): ms, bus bandwidth and the ratio to the fastest other library's."""
    rows = []
    for size in sizes:
        got = {**impls[size], **impls_torch.get(size, {})}
        best_peer = min(impls_torch.get(size, {}).values(), default=float("nan"))  # the peers: other libraries
        for name, ms in got.items():
            rows.append({"impl": name, "size_bytes": size, "ranks": comm.size, "ms": ms,
                         "bus_GBps": 2 * (comm.size - 1) / comm.size * size / (ms * 1e-3) / 1e9,
                         "ratio_to_best_peer": ms / best_peer})
    return rows


def host_allreduces(comm, buf, stream, host_ms) -> dict:
    """What the staged path's host all-reduce could be, beside what the host can do: a copy and a sum
    of the buffer in NumPy (every rank at once), MPI_Allreduce, reduce-scatter + all-gather, and the
    staged exchange with pinned copies in series (device -> host, MPI_Allreduce, host -> device)."""
    from perflab.train.comm import share
    from perflab.train.gpu import pinned_copy
    MPI, world = comm.MPI, comm.comm
    host = pinned_copy(np.ones(buf.size, np.float32))
    bounds = [share(buf.size, comm.size, r) for r in range(comm.size)]
    counts, starts = [hi - lo for lo, hi in bounds], [lo for lo, _ in bounds]
    mine = np.empty(counts[comm.rank], np.float32)

    def allreduce():
        world.Allreduce(MPI.IN_PLACE, host, op=MPI.SUM)

    def scatter_gather():
        world.Reduce_scatter(host, mine, counts, op=MPI.SUM)
        world.Allgatherv(mine, [host, counts, starts, MPI.FLOAT])

    def staged_pinned():
        buf.get(out=host, stream=stream)
        stream.synchronize()
        allreduce()
        buf.set(host, stream=stream)
        stream.synchronize()
    other = np.ones_like(host)
    return {"host memcpy (one rank's copy, numpy)": host_ms(lambda: np.copyto(other, host)),
            "host sum of two buffers (numpy)": host_ms(lambda: np.add(host, other, out=other)),
            "host MPI_Allreduce (pinned buffer)": host_ms(allreduce),
            "host reduce-scatter + all-gather (pinned buffer)": host_ms(scatter_gather),
            "staged, pinned copies, in series": host_ms(staged_pinned)}


def torch_allreduce(comm, local_rank: int, sizes, events_ms) -> dict:
    """{size: {"torch.distributed nccl": ms}}, or {} where PyTorch is missing (said on rank 0)."""
    try:
        import torch
        import torch.distributed as dist
    except ImportError as exc:
        if comm.rank == 0:
            print(f"peer skipped: torch.distributed ({exc})")
        return {}
    torch.cuda.set_device(local_rank)
    port = comm.comm.bcast(29600 + np.random.default_rng().integers(0, 300) if comm.rank == 0 else None, root=0)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=comm.rank, world_size=comm.size)
    stream = torch.cuda.Stream()

    def record():
        event = torch.cuda.Event(enable_timing=True)
        event.record(stream)
        return event

    def elapsed(start, stop):
        stop.synchronize()
        return start.elapsed_time(stop)
    out = {}
    for size in sizes:
        buf = torch.ones(size // 4, dtype=torch.float32, device="cuda")
        torch.cuda.synchronize()

        def call():
            with torch.cuda.stream(stream):
                dist.all_reduce(buf)
        out[size] = {"torch.distributed nccl": events_ms(call, record, elapsed)}
    dist.destroy_process_group()
    return out
