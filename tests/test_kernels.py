import numpy as np
import pytest
from sklearn.base import clone

from rvm_ppl.kernels.kernel import (
    RBF,
    FunctionKernel,
    Linear,
    LinearSpline,
    Polynomial,
    basis_labels,
    design_matrix,
    make_kernel,
)

KERNELS = [
    RBF(gamma=0.7),
    RBF(gamma=[0.5, 2.0]),
    LinearSpline(),
    Polynomial(degree=2, gamma=0.5, coef0=1.0),
    Linear(),
    RBF(0.3) + Linear(),
    RBF(0.3) * Polynomial(degree=1),
]


@pytest.fixture
def X(rng):
    return rng.uniform(0, 2, size=(15, 2))


@pytest.mark.parametrize("k", KERNELS, ids=repr)
def test_symmetric_psd_and_consistent(k, X):
    K = k(X)
    np.testing.assert_allclose(K, K.T, atol=1e-12)
    np.testing.assert_allclose(K, k(X, X))
    np.testing.assert_allclose(np.diag(K), k.diag(X), rtol=1e-12)
    assert np.linalg.eigvalsh(K).min() > -1e-8 * np.abs(K).max()
    assert clone(k)(X).tolist() == K.tolist()


def test_rbf_closed_form(X):
    g = np.array([0.5, 2.0])
    K = RBF(g)(X[:3], X[3:5])
    ref = np.exp(-(((X[:3, None, :] - X[None, 3:5, :]) ** 2) * g).sum(-1))
    np.testing.assert_allclose(K, ref, rtol=1e-13)


def test_linear_spline_matches_tipping_eq29():
    x = np.array([[-3.0], [0.5], [2.0]])
    K = LinearSpline()(x)
    for i, a in enumerate(x[:, 0]):
        for j, b in enumerate(x[:, 0]):
            m = min(a, b)
            ref = 1 + a * b + a * b * m - (a + b) / 2 * m**2 + m**3 / 3
            assert K[i, j] == pytest.approx(ref, rel=1e-14)


def test_kernel_algebra(X):
    a, b = RBF(0.3), Linear()
    np.testing.assert_allclose((a + b)(X), a(X) + b(X))
    np.testing.assert_allclose((a * b)(X), a(X) * b(X))
    np.testing.assert_allclose((2.0 * a)(X), 2 * a(X))
    np.testing.assert_allclose(sum([a, b])(X), a(X) + b(X))


def test_function_kernel_may_be_non_mercer(X):
    k = make_kernel(lambda A, B: np.tanh(A @ B.T - 1.0))
    assert isinstance(k, FunctionKernel)
    np.testing.assert_allclose(k(X), np.tanh(X @ X.T - 1.0))


def test_design_matrix_and_labels(X):
    Phi = design_matrix(X, X[:4], RBF(1.0))
    assert Phi.shape == (15, 5)
    np.testing.assert_array_equal(Phi[:, 0], 1.0)
    np.testing.assert_allclose(Phi[:, 1:], RBF(1.0)(X, X[:4]))
    assert basis_labels(3) == ["bias", "x_0", "x_1", "x_2"]
    assert basis_labels(2, bias=False) == ["x_0", "x_1"]


def test_bad_kernel_inputs(X):
    with pytest.raises(ValueError, match="Unknown kernel 'cubic'"):
        make_kernel("cubic")
    with pytest.raises(TypeError, match="kernel must be"):
        make_kernel(3)
    with pytest.raises(ValueError, match="same number"):
        RBF()(X, X[:, :1])
    with pytest.raises(ValueError, match="non-negative"):
        RBF(-1.0)(X)
    with pytest.raises(ValueError, match="2 features"):
        RBF([1.0, 2.0, 3.0])(X)
