"""The GEMMs a training step calls, and the operands every GEMM benchmark draws for them (perflab's
bench and the peers' processes alike, so all of them multiply the same numbers)."""
from __future__ import annotations

import itertools
import math

import numpy as np

D, C = 784, 10
TOLERANCE = {"float32": 1e-5, "float64": 1e-12, "tf32": 5e-3}  # relative error vs the float64 product


def gemm_shapes(hidden=(512, 1024, 2048), batches=(800, 3200, 12000)):
    """(name, M, K, N, a_transposed, b_transposed) as the training step calls them:
    forward W1 X (X is F-ordered), backward dz1 X^T, da1 = W2^T delta, dW2 = delta a1^T, z2 = W2 a1."""
    for h in hidden:
        for b in batches:
            yield f"fwd1 H={h} B={b}", h, D, b, False, True
            yield f"bwd3 H={h} B={b}", h, b, D, False, False
            yield f"fwd2 H={h} B={b}", C, h, b, False, False
            yield f"bwd1 H={h} B={b}", C, b, h, False, True
            yield f"bwd2 H={h} B={b}", h, C, b, True, False


def half_gemm_shapes(hidden=(512, 1024, 2048), batches=(3200, 12000)):
    """(name, M, K, N, a_transposed, b_transposed) of the half-precision step's GEMMs in its layouts
    (images C-ordered, D x N; activations and their gradients H x B, row-major): forward W1 X and
    dW1 = dz1 X^T, and past the first hidden layer W a, dW = dz a^T and dz_below = W^T dz. The output
    layer's are fused kernels, not GEMMs. Weight gradients come out in float32, the rest in half."""
    for h in hidden:
        for b in batches:
            yield f"fwd1 H={h} B={b}", h, D, b, False, False
            yield f"bwd3 H={h} B={b}", h, b, D, False, True
            yield f"fwd H={h}x{h} B={b}", h, h, b, False, False
            yield f"bwd dW H={h}x{h} B={b}", h, b, h, False, True
            yield f"bwd dz H={h}x{h} B={b}", h, h, b, True, False


def weight_gradient(shape_name: str) -> bool:
    """Whether a half_gemm_shapes GEMM makes a weight gradient (float32 out)."""
    return shape_name.startswith(("bwd3", "bwd dW"))


def named_gemm_shapes(names) -> list:
    """The gemm_shapes names asked for, each checked (the device scripts' argument): an unknown one
    is named with the ones there are, before anything needs a GPU."""
    known = [s[0] for s in gemm_shapes()]
    if unknown := [n for n in names if n not in known]:
        raise SystemExit(f"unknown shape(s) {unknown}: the shapes are {known}")
    return list(names)


def gemm_operands(cp, rng, M: int, K: int, N: int, ta: bool, tb: bool, dtype="float32"):
    """Random a (M x K) and b (K x N) in [-1, 1), stored as the training step stores them
    (transposed views where gemm_shapes says so), as cp's arrays (CuPy; NumPy in the tests)."""
    a = cp.asarray(rng.uniform(-1, 1, (K, M) if ta else (M, K)).astype(dtype))
    b = cp.asarray(rng.uniform(-1, 1, (N, K) if tb else (K, N)).astype(dtype))
    return (a.T if ta else a), (b.T if tb else b)


def input_sets(M: int, K: int, N: int, itemsize: int = 4) -> int:
    """Operand sets the GEMM bench rotates among: enough that together they overflow L2 (50 MB,
    three times over), so repeats do not run from cache."""
    return min(8, max(2, math.ceil(3 * 50e6 / ((M * K + K * N) * itemsize))))


def operand_sets(xp, M: int, K: int, N: int, ta: bool, tb: bool, dtype="float32") -> list:
    """The (a, b) sets a GEMM bench rotates among, each shape its own draw (seed 0), so that the
    peers' processes (perflab.measure.gemm_peers) draw the same ones."""
    rng = np.random.default_rng(0)
    return [gemm_operands(xp, rng, M, K, N, ta, tb, dtype) for _ in range(input_sets(M, K, N))]


def rotating(inputs, gemm):
    """A call that runs gemm(a, b) on the next operand set each time, so replays do not run from L2."""
    turn = itertools.cycle(inputs)
    return lambda: gemm(*next(turn))


def rel_error(out, reference) -> float:
    """Relative Frobenius error of a product against its float64 reference (NumPy arrays)."""
    return float(np.linalg.norm(out - reference) / np.linalg.norm(reference))
