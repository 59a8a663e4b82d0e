"""Extra basis functions and learned input scales (Tipping 2001, §4.3 and Appendix C)."""

import numpy as np
import pytest
from reference import log_evidence_eta

from rvm_ppl.closed_form.evidence import log_evidence_dense
from rvm_ppl.closed_form.scales import (
    extended_basis_labels,
    extended_design_columns,
    extended_design_matrix,
    fit_eta_rvm,
)
from rvm_ppl.datasets.loaders import sinc
from rvm_ppl.kernels.kernel import RBF


def _quadratic(X):
    x1, x2 = X[:, 0], X[:, 1]
    return np.column_stack([x1, x2, x1**2, x2**2, x1 * x2])


@pytest.fixture
def model_2d():
    rng = np.random.default_rng(5)
    X = rng.uniform(-2, 2, (40, 3))
    t = np.sin(2 * X[:, 0]) + 0.3 * X[:, 1] + 0.1 * rng.standard_normal(40)
    centres = X[[1, 5, 9, 20, 33]]
    fixed = np.column_stack([np.ones(40), X[:, 1]])
    alpha = np.array([0.5, 2.0, 1.0, 3.0, 0.7, 4.0, 0.2])
    return X, t, centres, fixed, alpha, 30.0


def test_log_evidence_eta_equals_dense_closed_form(model_2d):
    X, t, centres, fixed, alpha, beta = model_2d
    log_eta = np.log([0.7, 0.2, 0.05])
    value, _ = log_evidence_eta(X, t, log_eta, centres=centres, fixed=fixed, alpha=alpha, beta=beta)
    Phi = np.hstack([fixed, RBF(np.exp(log_eta))(X, centres)])
    assert value == pytest.approx(log_evidence_dense(Phi, t, alpha, beta), rel=1e-10)


@pytest.mark.parametrize("log_eta", [np.log([0.7, 0.2, 0.05]), np.log([3.0, 1e-3, 1e-6])])
def test_pytensor_gradient_matches_central_differences(model_2d, log_eta):
    X, t, centres, fixed, alpha, beta = model_2d
    kw = dict(centres=centres, fixed=fixed, alpha=alpha, beta=beta)
    _, grad = log_evidence_eta(X, t, log_eta, **kw)

    def central(h):
        fd = np.empty(3)
        for k in range(3):
            e = np.zeros(3)
            e[k] = h
            up = log_evidence_eta(X, t, log_eta + e, **kw)[0]
            down = log_evidence_eta(X, t, log_eta - e, **kw)[0]
            fd[k] = (up - down) / (2 * h)
        return fd

    # Richardson's extrapolation of two central differences: an error of order h^4
    # (about 1e-12 here) at a step whose rounding (the evidence's terms are ~1e3, their
    # rounding ~1e-13, over 2h) stays near 1e-10, well inside the tolerance. A single
    # difference at h = 1e-5 rounds to ~5e-9, the size of the tolerance itself.
    h = 1e-3
    fd = (4.0 * central(h / 2) - central(h)) / 3.0
    np.testing.assert_allclose(grad, fd, rtol=1e-6, atol=1e-9 * np.abs(grad).max())


def test_extended_design_layout_labels_and_columns():
    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, (12, 2))
    Xn = rng.uniform(-1, 1, (7, 2))
    k = RBF([0.5, 2.0])
    Phi = extended_design_matrix(X, X, k, extra_basis=_quadratic)
    assert Phi.shape == (12, 1 + 5 + 12)
    np.testing.assert_array_equal(Phi[:, 0], 1.0)
    np.testing.assert_array_equal(Phi[:, 1:6], _quadratic(X))
    np.testing.assert_allclose(Phi[:, 6:], k(X, X))
    labels = extended_basis_labels(12, extra_names=["x1", "x2", "x1^2", "x2^2", "x1x2"])
    assert labels[:3] == ["bias", "extra_x1", "extra_x2"]
    assert labels[6] == "x_0" and len(labels) == 18
    assert extended_basis_labels(2, bias=False, extra_names=1) == ["extra_0", "x_0", "x_1"]
    full = extended_design_matrix(Xn, X, k, extra_basis=_quadratic)
    support = np.array([0, 2, 5, 6, 11, 17])
    cols = extended_design_columns(
        Xn, support, centres=X, kernel=k, n_extra=5, extra_basis=_quadratic
    )
    np.testing.assert_allclose(cols, full[:, support])
    with pytest.raises(ValueError, match="expected \\(12, n_extra\\)"):
        extended_design_matrix(X, X, k, extra_basis=lambda Z: np.ones((3, 2)))


def test_eta_rvm_suppresses_an_irrelevant_input_and_keeps_the_linear_term():
    """A small version of Tipping's (2001) §4.3 example: sinc(x1) + 0.1 x2."""
    rng = np.random.default_rng(0)
    X = rng.uniform(-10, 10, (100, 2))
    y = sinc(X[:, 0]) + 0.1 * X[:, 1] + 0.1 * rng.standard_normal(100)
    res, eta, history = fit_eta_rvm(X, y, eta0=1 / 9, extra_basis=_quadratic, schedule="grow")
    assert res.converged
    # The input scale of x2 collapses; the kernel columns depend on x1 alone.
    assert eta[1] < 0.02 * eta[0]
    # The weight on the linear x2 column is close to 0.1; x1, x1^2, x1 x2 are pruned.
    weights = dict(zip(res.active.tolist(), res.mu))
    assert weights[2] == pytest.approx(0.1, abs=0.02)
    assert not {1, 3, 5} & set(weights)
    objective = [h["objective"] for h in history]
    assert np.diff(objective).min() >= -1e-8 * np.abs(objective).max()
    assert history[-1]["objective"] >= history[0]["objective"] + 10
    Phi = extended_design_matrix(X, X, RBF(eta), extra_basis=_quadratic)
    dense = log_evidence_dense(Phi, y, res.alpha, res.beta)
    assert res.log_evidence == pytest.approx(dense, rel=1e-8)


@pytest.mark.parametrize("schedule", ["refine", "grow"])
def test_eta_rvm_linear_target_keeps_the_raw_input(schedule):
    rng = np.random.default_rng(1)
    X = rng.uniform(-1, 1, (30, 2))
    y = 2.0 * X[:, 0] + 0.05 * rng.standard_normal(30)
    res, eta, history = fit_eta_rvm(X, y, eta0=1.0, extra_basis=lambda Z: Z, schedule=schedule)
    assert res.converged and eta.shape == (2,)
    weights = dict(zip(res.active.tolist(), res.mu))
    assert weights[1] == pytest.approx(2.0, abs=0.05)
    assert 2 not in weights
    with pytest.raises(ValueError, match="Unknown schedule"):
        fit_eta_rvm(X, y, eta0=1.0, schedule="anneal")
