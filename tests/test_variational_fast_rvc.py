"""Tests of the sequential (pruning) variational RVC, ``fit_vb_classification``.

References: the full sweeps of Bishop & Tipping (2000),
``fit_vb_classification_full``, and the dense Jaakkola-Jordan bound
``_classification_bound`` that ``test_variational.py`` checks against Monte Carlo.
"""

import numpy as np
import pytest
from scipy.special import expit

from rvm_ppl.closed_form.vb import (
    _classification_bound,
    _FastVBC,
    _squared_design_times,
    fit_vb_classification,
    fit_vb_classification_full,
)
from rvm_ppl.kernels.basis import DenseBasis, KernelBasis, kernel_basis
from rvm_ppl.kernels.kernel import make_kernel
from test_variational_fast import _copy_state, _joint_qw, _step_change

MONOTONE_RTOL = 1e-9


def _assert_monotone(trace):
    steps = np.diff(trace)
    worst = np.min(steps / np.abs(trace[1:])) if len(steps) else 0.0
    assert worst >= -MONOTONE_RTOL, f"bound decreased by {worst:.2e} (relative)"


def _blobs(rng, n):
    y = np.arange(n) % 2
    X = rng.standard_normal((n, 2)) + np.where(y[:, None] == 1, 1.0, -1.0)
    return X, y.astype(float)


KERNEL = make_kernel("rbf", gamma=0.5)


def _design(X, C):
    return np.column_stack([np.ones(len(X)), KERNEL(X, C)])


def _problem(seed, n=60):
    rng = np.random.default_rng(seed)
    X, y = _blobs(rng, n)
    Xt, yt = _blobs(rng, 1000)
    return X, y, Xt, yt


def _state(seed=0, n_actions=8):
    X, y, _, _ = _problem(seed)
    Phi = _design(X, X)
    st = _FastVBC(DenseBasis(Phi), y, 1e-6, 1e-6)
    for _ in range(n_actions):
        gain, new_x = st.gains()
        j = int(np.argmax(gain))
        (st.add if st.out[j] else st.reestimate)(j, new_x[j])
        st.update_xi()
    return Phi, y, st


def test_state_bound_equals_the_dense_bound():
    Phi, y, st = _state()
    assert 0 < len(st.active) < Phi.shape[1]
    shape, rate = st.q_alpha()
    dense = _classification_bound(Phi, y, st.qw, shape, rate, st.xi, 1e-6, 1e-6)
    assert st.bound == pytest.approx(dense, rel=1e-11)


def test_xi_update_is_the_maximiser():
    """eq. (58) maximises the dense bound over xi, pruned weights' variance included."""
    Phi, y, st = _state(seed=1)
    qw, (shape, rate) = st.qw, st.q_alpha()  # the factors the update sees
    before = st.bound
    st.update_xi()
    assert st.bound >= before
    best = _classification_bound(Phi, y, qw, shape, rate, st.xi, 1e-6, 1e-6)
    rng = np.random.default_rng(0)
    for scale in (1e-3, 1e-2, 0.1):
        xi = st.xi * np.exp(scale * rng.standard_normal(len(y)))
        assert _classification_bound(Phi, y, qw, shape, rate, xi, 1e-6, 1e-6) < best


def test_squared_design_times_every_basis_kind():
    rng = np.random.default_rng(3)
    X = rng.uniform(-3, 3, (90, 1))
    kern = make_kernel("rbf", gamma=1.0)
    Phi = np.column_stack([np.ones(90), kern(X, X)])
    v = rng.random(91) * (rng.random(91) < 0.7)
    ref = (Phi**2) @ v
    low = kernel_basis(kern, X)
    assert type(low).__name__ == "LowRankKernelBasis"
    W = rng.standard_normal((91, 3))
    for basis in (DenseBasis(Phi), KernelBasis(kern, X), low):
        np.testing.assert_allclose(_squared_design_times(basis, v), ref, rtol=1e-9, atol=1e-12)
        sq, PW = _squared_design_times(basis, v, W)
        np.testing.assert_allclose(sq, ref, rtol=1e-9, atol=1e-12)
        # the low-rank basis is Phi up to its factor's tolerance
        np.testing.assert_allclose(PW, Phi @ W, rtol=1e-6, atol=1e-6 * np.abs(Phi @ W).max())


def test_predicted_gains_are_the_bound_changes():
    """Each step changes the bound by exactly its one-basis terms (as for the regression)."""
    _, _, st = _state(seed=2, n_actions=3)
    for _ in range(10):
        gain, new_x = st.gains()
        j = int(np.argmax(gain))
        if gain[j] <= 0:
            break
        kind = "add" if st.out[j] else "reestimate"
        old = _copy_state(st, _FastVBC)
        before = st.bound
        (st.add if kind == "add" else st.reestimate)(j, new_x[j])
        assert st.bound - before == pytest.approx(_step_change(old, st, j, kind), rel=1e-6,
                                                  abs=1e-8)
        if kind == "add":
            assert st.bound - before >= gain[j] - 1e-8 * abs(before)
        st.update_xi()


@pytest.mark.parametrize("seed", range(3))
def test_bound_never_decreases(seed):
    X, y, _, _ = _problem(seed, n=80)
    res = fit_vb_classification(_design(X, X), y)
    assert res.converged and len(res.bound_trace) == res.n_iter
    _assert_monotone(res.bound_trace)
    res = fit_vb_classification(kernel_basis(KERNEL, X), y)
    assert res.converged
    _assert_monotone(res.bound_trace)
    # a linear design
    rng = np.random.default_rng(seed)
    Z = rng.standard_normal((80, 4))
    t = (rng.random(80) < expit(Z @ [2.0, -1.0, 0.0, 0.0])).astype(float)
    res = fit_vb_classification(Z, t)
    assert res.converged
    _assert_monotone(res.bound_trace)


def test_result_contract():
    X, y, _, _ = _problem(0)
    Phi = _design(X, X)
    res = fit_vb_classification(Phi, y)
    M, k = Phi.shape[1], len(res.active)
    assert 0 < k < M and np.all(np.diff(res.active) > 0)
    assert res.cov.shape == (k, k) and res.mean.shape == res.weight_var.shape == (M,)
    assert res.beta_shape is None and res.beta_rate is None and res.xi.shape == y.shape
    np.testing.assert_array_equal(np.flatnonzero(~res.pruned), res.active)
    np.testing.assert_array_equal(res.mean[res.pruned], 0.0)
    np.testing.assert_allclose(res.weight_var[res.active], np.diag(res.cov))
    np.testing.assert_allclose(res.alpha_rate[res.pruned], 1e-6 + 0.5 * res.weight_var[res.pruned])


@pytest.mark.parametrize("seed", range(3))
def test_agrees_with_the_full_fit(seed):
    """Bound, test error and probabilities of the sequential and the full fit.

    Measured (seeds 0-2, N = 60): bounds within 0.45 nats of about 770, test
    errors within 0.015, mean |p_fast - p_full| 0.03-0.06 on 1 000 test points.
    """
    X, y, Xt, yt = _problem(seed)
    Phi, Pt = _design(X, X), _design(Xt, X)
    fast = fit_vb_classification(Phi, y)
    full = fit_vb_classification_full(Phi, y)
    assert abs(full.bound - fast.bound) < 1.0
    pf, pF = expit(Pt @ fast.mean), expit(Pt @ full.mean)
    err_fast, err_full = np.mean((pf > 0.5) != yt), np.mean((pF > 0.5) != yt)
    assert abs(err_fast - err_full) < 0.03 and err_fast < 0.13  # Bayes error 0.079
    assert np.mean(np.abs(pf - pF)) < 0.08


def test_dense_and_lazy_bases_give_the_same_fit():
    X, y, _, _ = _problem(4, n=70)
    dense = fit_vb_classification(_design(X, X), y)
    lazy = fit_vb_classification(KernelBasis(KERNEL, X), y)
    np.testing.assert_array_equal(dense.active, lazy.active)
    np.testing.assert_allclose(dense.bound_trace, lazy.bound_trace, rtol=1e-9)
    np.testing.assert_allclose(dense.mean, lazy.mean, atol=1e-6)


def test_coupled_family_bound_is_eq59_with_full_matrices():
    """The state's bound equals the Jaakkola-Jordan bound on the joint covariance of w,
    and its xi update sees the pruned weights' coupling: it maximises that bound."""
    Phi, y, st = _state(seed=3)
    shape, rate = st.q_alpha()
    qw = _joint_qw(st)
    assert st.bound == pytest.approx(_classification_bound(Phi, y, qw, shape, rate, st.xi,
                                                           1e-6, 1e-6), rel=1e-10)
    f = Phi @ qw.mean
    xi = np.sqrt(f**2 + np.einsum("nj,jk,nk->n", Phi, qw.cov, Phi))
    st.update_xi()
    np.testing.assert_allclose(st.xi, xi, rtol=1e-8)


def test_khat_proposal_is_the_coupled_family():
    """pareto_khat's draws for a vb classifier come from its Q(w): on the model's bases alone
    N(mean, cov + K V K^T), and jointly with the bases outside, mean + K w_out + N(0, cov)."""
    from scipy import stats

    from rvm_ppl import RVC
    from rvm_ppl.datasets.loaders import make_ripley
    from rvm_ppl.model.build import resolve_priors
    from rvm_ppl.output.diagnostics import _q_vb_weights

    X, y = make_ripley(60, random_state=1)
    vb = RVC(gamma=4, draws=20, progressbar=False).fit(X, y, method="vb")
    r, fit = vb.results_[0], vb.idata_.fit
    in_model = np.zeros(len(r.alpha), dtype=bool)
    in_model[r.support] = True
    out = np.flatnonzero(~in_model)
    K, v = r.outside_coupling[:, out], r.outside_var[out]
    assert np.abs(K).max() > 0
    marginal = r.cov + (K * v) @ K.T
    priors = resolve_priors(None)
    w, logq = _q_vb_weights(fit, np.random.default_rng(0), 400, in_model, in_model, priors)
    np.testing.assert_allclose(logq, stats.multivariate_normal(r.mean, marginal).logpdf(w),
                               rtol=1e-8)
    w, logq = _q_vb_weights(fit, np.random.default_rng(1), 20000, np.ones_like(in_model),
                            in_model, priors)
    np.testing.assert_allclose(np.cov(w[:, in_model].T), marginal,
                               atol=0.05 * np.abs(marginal).max())
    resid = w[:, in_model] - r.mean - w[:, out] @ K.T  # eps, independent of w_out
    np.testing.assert_allclose(np.cov(resid.T), r.cov, atol=0.05 * np.abs(r.cov).max())
