import numpy as np
import pytest

from perflab.train import model


def numeric_gradient(f, p, eps=1e-6):
    g = np.zeros_like(p)
    it = np.nditer(p, flags=["multi_index"])
    for _ in it:
        i = it.multi_index
        old = p[i]
        p[i] = old + eps
        up = f()
        p[i] = old - eps
        down = f()
        p[i] = old
        g[i] = (up - down) / (2 * eps)
    return g


@pytest.mark.parametrize("sizes", [(7, 5, 3), (6, 5, 4, 3)], ids=["one-hidden", "two-hidden"])
def test_gradients_match_finite_differences(rng, sizes):
    params = model.init_params(sizes, "float64", seed=2)
    for p in params[1::2]:
        p[:] = rng.standard_normal(p.shape) * 0.3  # non-zero biases so their gradient is tested
    X = rng.random((sizes[0], 9))
    y = rng.integers(0, sizes[-1], 9)
    reg = 0.05
    grads = model.backward(params, model.forward(params, X), y, norm=9)
    model.add_regularization(grads, params, reg)
    for name, p, g in zip(model.param_names(len(sizes) - 1), params, grads):
        expected = numeric_gradient(lambda: model.loss(params, X, y, reg), p)
        err = np.linalg.norm(g - expected) / np.linalg.norm(expected)
        assert err < 1e-6, f"{name}: relative error {err:.2e}"


def test_forward_shapes_and_softmax(rng):
    params = model.init_params((8, 6, 4), "float32", seed=0)
    acts = model.forward(params, rng.random((8, 5)).astype(np.float32))
    assert [a.shape for a in acts] == [(8, 5), (6, 5), (4, 5)]
    assert acts[-1].dtype == np.float32
    np.testing.assert_allclose(acts[-1].sum(axis=0), 1, rtol=1e-6)


def test_sigmoid_saturates_without_nan():
    z = np.array([-1000.0, 0.0, 1000.0])
    np.testing.assert_array_equal(model.sigmoid(z.copy()), [0.0, 0.5, 1.0])


def test_init_is_seeded_and_same_across_dtypes():
    a = model.init_params((5, 4, 3), "float64", seed=7)
    b = model.init_params((5, 4, 3), "float32", seed=7)
    c = model.init_params((5, 4, 3), "float64", seed=8)
    assert all(np.allclose(x, y, rtol=1e-6) for x, y in zip(a, b))
    assert not np.allclose(a[0], c[0])
    assert model.param_names(2) == ["W1", "b1", "W2", "b2"]


def test_sgd_step_moves_against_gradient(rng):
    params = model.init_params((5, 4, 3), "float64", seed=1)
    X, y = rng.random((5, 20)), rng.integers(0, 3, 20)
    before = model.loss(params, X, y, 0.01)
    grads = model.backward(params, model.forward(params, X), y, 20)
    model.add_regularization(grads, params, 0.01)
    model.sgd_step(params, grads, 0.1)
    assert model.loss(params, X, y, 0.01) < before
