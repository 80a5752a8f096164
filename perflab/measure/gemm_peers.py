"""The training shapes' GEMMs in PyTorch and JAX, for `perflab bench gemm`: `best` has to beat
the fastest SGEMM a practitioner would reach for, not only CuPy's cuBLAS call; the tensor-core
GEMMs (wgmma, x3tf32) the fastest TF32 (`pytorch-tf32`: cuBLAS TF32) and 3xTF32 (`jax-x3`: XLA's
TF32_TF32_F32_X3 dot algorithm) ones; and cuBLAS's BF16 and FP16 GEMMs (`pytorch-bf16`, `pytorch-fp16`)
mark the floor of a half-precision step's GEMMs.

They run float32 (`pytorch` and `jax` with TF32 off) on the bench's inputs (the same seed, storage
and rotation past L2), checked against the float64 product. Each peer runs in a process of its own
(`python -m perflab.measure.gemm_peers '[peer, hidden, batches, repeats]'`): JAX's and PyTorch's memory
pools stay out of CuPy's way and out of each other's numbers.
"""
from __future__ import annotations

import functools
import json
import os
import statistics
import sys
import time

import numpy as np

from perflab.measure.gemm_inputs import gemm_shapes, operand_sets, rel_error
from perflab.measure.peers import PeerMissing, fp32_jax, fp32_torch, run_peer_process

GEMM_PEERS = ("pytorch", "jax", "pytorch-tf32", "jax-x3", "pytorch-bf16", "pytorch-fp16")
TENSOR_CORE_PEERS = ("pytorch-tf32", "jax-x3")  # not SGEMM: compared with wgmma and x3tf32 only
# cuBLAS's half-precision GEMMs (operands and product in BF16 or FP16, FP32 accumulation): the floor a
# half-precision step's GEMMs cannot beat (issue 53), checked against the float64 product at the
# precision their operands keep (8 and 11 bits of mantissa, the product rounded once more)
HALF_PEERS = {"pytorch-bf16": ("bfloat16", 1.5e-2), "pytorch-fp16": ("float16", 2e-3)}


def stored(x) -> tuple[np.ndarray, bool]:
    """(the array as memory holds it, transposed?): a transposed view goes over as its base."""
    return (x, False) if x.flags.c_contiguous else (np.ascontiguousarray(x.T), True)


def shape_inputs(M, K, N, ta, tb):
    """The bench's operand sets and the float64 product of the first (bench_gemm's own draw)."""
    inputs = operand_sets(np, M, K, N, ta, tb)
    a0, b0 = inputs[0]
    return inputs, a0.astype(np.float64) @ b0.astype(np.float64)


def pytorch_gemm(shapes, repeats: int, tf32: bool = False, half: str | None = None) -> dict:
    """{shape: (ms, rel_error)}: torch.matmul(a, b, out=...) over the rotated inputs, captured in
    a CUDA graph and replayed between CUDA events, median of `repeats` (`tf32`: on TF32 tensor cores;
    `half`: operands and product in bfloat16 or float16, the bench's float32 inputs rounded to it)."""
    torch = fp32_torch()
    torch.backends.cuda.matmul.allow_tf32 = tf32
    dtype = getattr(torch, half) if half else torch.float32
    got = {}
    for name, M, K, N, ta, tb in shapes:
        inputs, reference = shape_inputs(M, K, N, ta, tb)

        def put(x):
            base, transposed = stored(x)
            t = torch.from_numpy(base).cuda().to(dtype)
            return t.T if transposed else t
        pairs = [(put(a), put(b)) for a, b in inputs]
        out = torch.empty((M, N), device="cuda", dtype=dtype)
        torch.matmul(*pairs[0], out=out)
        err = rel_error(out.float().cpu().numpy(), reference)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up off the default stream, as capture wants
            for a, b in pairs:
                torch.matmul(a, b, out=out)
        torch.cuda.current_stream().wait_stream(side)
        graph, calls = torch.cuda.CUDAGraph(), 2 * len(pairs)
        with torch.cuda.graph(graph):
            for i in range(calls):
                torch.matmul(*pairs[i % len(pairs)], out=out)
        graph.replay()
        times = []
        for _ in range(repeats):
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            graph.replay()
            stop.record()
            stop.synchronize()
            times.append(start.elapsed_time(stop) / calls)
        got[name] = (statistics.median(times), err)
    return got


def jax_gemm(shapes, repeats: int, queued: int = 10, x3: bool = False) -> dict:
    """{shape: (ms, rel_error)}: one jitted function multiplies every input set (precision
    highest; `x3`: the TF32_TF32_F32_X3 dot algorithm). JAX gives no device events, so the clock is
    the host's around `queued` calls queued back to back, the device kept busy; the host's one
    dispatch latency is shared by queued x sets products (its share is largest at the smallest
    shape, and it counts against JAX)."""
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    jax, jnp = fp32_jax()
    precision = jax.lax.DotAlgorithmPreset.TF32_TF32_F32_X3 if x3 else None
    got = {}
    for name, M, K, N, ta, tb in shapes:
        inputs, reference = shape_inputs(M, K, N, ta, tb)
        pairs = [tuple(jnp.asarray(stored(x)[0]) for x in pair) for pair in inputs]
        products = jax.jit(lambda ps: [jnp.matmul(a.T if ta else a, b.T if tb else b, precision=precision)
                                        for a, b in ps])
        first = jax.block_until_ready(products(pairs))[0]  # compiles and autotunes
        err = rel_error(np.asarray(first), reference)
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            for _ in range(queued):
                outs = products(pairs)
            jax.block_until_ready(outs)
            times.append(1e3 * (time.perf_counter() - t0) / (queued * len(pairs)))
        got[name] = (statistics.median(times), err)
    return got


def run_gemm_peers(peers, hidden, batches, repeats: int, log=print, timeout: int = 900) -> dict:
    """{peer: {shape: (ms, rel_error)}} for the peers that ran; a missing or failing one is
    skipped with a message, as bench train does."""
    got = {}
    for peer in peers:
        t0 = time.perf_counter()
        result, why = run_peer_process("perflab.measure.gemm_peers", [peer, list(hidden), list(batches), repeats], timeout)
        if result is None:
            log(f"peer skipped: {peer} ({why})")
            continue
        got[peer] = {shape: tuple(v) for shape, v in result.items()}
        log(f"peer {peer}: {len(result)} shapes timed in {time.perf_counter() - t0:.0f} s")
    return got


if __name__ == "__main__":
    peer, hidden, batches, repeats = json.loads(sys.argv[1])
    if peer not in GEMM_PEERS:
        raise SystemExit(f"unknown GEMM peer {peer!r}: the peers are {GEMM_PEERS}")
    try:
        run = {"pytorch": pytorch_gemm, "jax": jax_gemm, "pytorch-tf32": functools.partial(pytorch_gemm, tf32=True),
               "jax-x3": functools.partial(jax_gemm, x3=True),
               **{name: functools.partial(pytorch_gemm, half=half) for name, (half, _) in HALF_PEERS.items()}}[peer]
        print(json.dumps(run(list(gemm_shapes(hidden, batches)), repeats)))
    except PeerMissing as exc:
        print(json.dumps({"missing": str(exc)}))
