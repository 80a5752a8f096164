"""The seeds' MLP math, written once against an array module (NumPy or CuPy).

Column-major as in the seeds: X is D x B, W_l is H_l x H_{l-1}, b_l has H_l entries.
    z_l = W_l a_{l-1} + b_l,   a_l = sigmoid(z_l) (hidden),   yhat = softmax(z_L)
    J = mean_i CE(y_i, yhat_i) + reg/2 * sum_l ||W_l||_F^2      (weights only, not biases)
Backward (seeds' appendix): dz_L = (yhat - Y) / B;  dW_l = dz_l a_{l-1}^T;  db_l = sum_cols dz_l;
    dz_{l-1} = (W_l^T dz_l) o a_{l-1} o (1 - a_{l-1}).
Parameters are a flat list [W1, b1, W2, b2, ...]; `param_names` names them.
"""
from __future__ import annotations

import numpy as np

from perflab.backend import xp_of
from perflab.train.profile import phase
from perflab.train.step import backward_gemm, forward_gemm


def param_names(num_layers: int) -> list[str]:
    return [f"{kind}{l}" for l in range(1, num_layers + 1) for kind in ("W", "b")]


def init_params(layer_sizes, dtype, seed: int, xp=np) -> list:
    """W_l ~ N(0, 1/fan_in) (LeCun normal: keeps z_l of order 1 so sigmoid does not saturate),
    b_l = 0. Drawn in float64 on the host from `seed`, then cast and moved: every backend,
    dtype and rank starts from the same numbers."""
    rng = np.random.default_rng(seed)
    params = []
    for fan_in, fan_out in zip(layer_sizes[:-1], layer_sizes[1:]):
        params.append(rng.standard_normal((fan_out, fan_in)) / np.sqrt(fan_in))
        params.append(np.zeros(fan_out))
    return [xp.asarray(p, dtype=dtype) for p in params]


def sigmoid(z, out=None):
    """1 / (1 + exp(-z)), in place when out is z; exp overflow gives the right limit, 0."""
    xp = xp_of(z)
    with np.errstate(over="ignore"):
        out = xp.negative(z, out=out)
        xp.exp(out, out=out)
    out += 1
    return xp.reciprocal(out, out=out)


def softmax(z, out=None):
    """Column-wise softmax (over the C classes), shifted by the column max for stability."""
    xp = xp_of(z)
    out = xp.subtract(z, z.max(axis=0, keepdims=True), out=out)
    xp.exp(out, out=out)
    out /= out.sum(axis=0, keepdims=True)
    return out


def product(a, b, out=None):
    """a @ b: every GEMM of the step (a mixed-precision run passes its own: perflab.train.half)."""
    return xp_of(a).matmul(a, b, out=out)


def forward(params, X, matmul=product) -> list:
    """Activations [X, a1, ..., yhat] of a batch (the backward pass needs every one)."""
    acts = [X]
    last = len(params) // 2 - 1
    for l in range(last + 1):
        with phase(forward_gemm(l + 1)):
            z = matmul(params[2 * l], acts[-1])
        z += params[2 * l + 1][:, None]
        acts.append(softmax(z, out=z) if l == last else sigmoid(z, out=z))
    return acts


def output_delta(yhat, y, norm):
    """dJ/dz_L = (yhat - Y) / norm, Y one-hot of the labels y; norm is the global batch size
    (a data-parallel rank divides by B, not by its share, so the all-reduced sum is exact)."""
    xp = xp_of(yhat)
    delta = yhat.copy()
    delta[y, xp.arange(y.shape[0])] -= 1
    delta /= norm
    return delta


def backward(params, acts, y, norm, out=None, matmul=product) -> list:
    """Data-term gradients [dW1, db1, ...] of a batch, written into `out` when given (views
    of one fused buffer, ready for a single all-reduce). Regularization is added separately,
    once, by `add_regularization`."""
    xp = xp_of(acts[-1])
    grads = out if out is not None else [None] * len(params)
    delta = output_delta(acts[-1], y, norm)
    gemm = 1  # the seeds' numbering: GEMMs counted in execution order
    for l in range(len(params) // 2 - 1, -1, -1):
        a_prev = acts[l]
        with phase(backward_gemm(gemm)):
            grads[2 * l] = matmul(delta, a_prev.T, out=grads[2 * l])
        grads[2 * l + 1] = xp.sum(delta, axis=1, out=grads[2 * l + 1])
        if l > 0:
            with phase(backward_gemm(gemm + 1)):
                delta = matmul(params[2 * l].T, delta)
            delta *= a_prev * (1 - a_prev)
        gemm += 2
    return grads


def add_regularization(grads, params, reg) -> None:
    """dJ/dW_l += reg * W_l (weights only)."""
    for g, p in zip(grads[0::2], params[0::2]):
        g += reg * p


def sgd_step(params, grads, learning_rate) -> None:
    """p <- p - lr * grad, in place, for every parameter."""
    for p, g in zip(params, grads):
        p -= learning_rate * g


def cross_entropy_sum(yhat, y) -> float:
    """sum_i -log(yhat[y_i, i]) (divide by the global batch size for the mean)."""
    xp = xp_of(yhat)
    return float(-xp.log(yhat[y, xp.arange(y.shape[0])]).sum())


def l2_penalty(params, reg) -> float:
    """reg/2 * sum_l ||W_l||_F^2."""
    xp = xp_of(params[0])
    return float(0.5 * reg * sum(xp.vdot(W, W) for W in params[0::2]))


def loss(params, X, y, reg) -> float:
    """J for one batch, the seeds' equation (1)."""
    return cross_entropy_sum(forward(params, X)[-1], y) / y.shape[0] + l2_penalty(params, reg)


def predict(params, X, chunk: int = 8192, matmul=product):
    """Predicted labels argmax(yhat), in chunks so a large test set fits in memory."""
    xp = xp_of(X)
    return xp.concatenate([forward(params, X[:, i:i + chunk], matmul)[-1].argmax(axis=0)
                           for i in range(0, X.shape[1], chunk)])
