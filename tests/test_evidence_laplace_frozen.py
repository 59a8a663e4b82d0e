"""Steps with B frozen at the mode, and the squared-kernel weighted norms of the low-rank basis."""

import numpy as np
import pytest
from reference import laplace_log_evidence
from scipy.special import expit

from rvm_ppl.closed_form.bernoulli import _Laplace, fit_evidence_bernoulli
from rvm_ppl.datasets.loaders import load_ripley, make_ripley
from rvm_ppl.kernels.basis import DenseBasis, LowRankKernelBasis, kernel_basis
from rvm_ppl.kernels.kernel import RBF, design_matrix


def _linearised_factors(Phi, t, active, alpha, mu0):
    """S, Q of every column for the Gaussian problem linearised at mu0 (B frozen), brute force.

    B = diag(y (1 - y)) and IRLS targets t_hat = Phi_A mu0 + B^{-1} (t - y) at
    mu0 (Tipping 2001, eqs. 25-27); H = Phi_A^T B Phi_A + A, mu = H^{-1}
    Phi_A^T B t_hat; S_m = phi_m^T B phi_m - phi_m^T B Phi_A H^{-1} Phi_A^T B
    phi_m, Q_m = phi_m^T B (t_hat - Phi_A mu).
    """
    PA = Phi[:, active]
    y = expit(PA @ mu0)
    b = y * (1 - y)
    t_hat = PA @ mu0 + (t - y) / b
    H = PA.T @ (b[:, None] * PA) + np.diag(alpha)
    mu = np.linalg.solve(H, PA.T @ (b * t_hat))
    BP = (b[:, None] * Phi).T @ PA
    S = np.einsum("ij,ij->j", Phi, b[:, None] * Phi) - np.einsum("ij,ij->i", BP, np.linalg.solve(H, BP.T).T)
    Q = (b[:, None] * Phi).T @ (t_hat - PA @ mu)
    return S, Q, mu


def _state():
    X, y, _, _ = load_ripley()
    idx = np.random.default_rng(3).choice(len(y), 80, replace=False)
    X, t = X[idx], y[idx].astype(float)
    Phi = design_matrix(X, X, RBF(4.0))
    Phi /= np.linalg.norm(Phi, axis=0)
    active = [0, 5, 17, 40]
    alpha = np.array([0.5, 2.0, 1.0, 3.0])
    state = _Laplace(DenseBasis(Phi), np.ones(Phi.shape[1]), t, Phi[:, active], alpha, np.zeros(4))
    return Phi, t, active, alpha, state


def test_frozen_steps_equal_the_linearised_problem():
    Phi, t, active, alpha, state = _state()
    mu0 = state.mu.copy()
    # At the mode the frozen factors are the Laplace ones.
    S, Q, mu = _linearised_factors(Phi, t, active, alpha, mu0)
    np.testing.assert_allclose(state.S, S, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(state.Q, Q, rtol=1e-8, atol=1e-8)
    # Re-estimate, delete, add: each matches the linearised problem with the new alpha.
    state.frozen_reestimate(active, 1, 7.0)
    alpha = np.array([0.5, 7.0, 1.0, 3.0])
    S, Q, mu = _linearised_factors(Phi, t, active, alpha, mu0)
    np.testing.assert_allclose(state.S, S, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(state.Q, Q, rtol=1e-8, atol=1e-8)
    np.testing.assert_allclose(state.mu, mu, rtol=1e-8, atol=1e-10)
    state.frozen_delete(active, 2)
    active2, alpha2 = [0, 5, 40], np.array([0.5, 7.0, 3.0])
    # The linearisation point keeps the deleted weight's contribution to t_hat:
    # compare against the same t_hat built from mu0 over the old active set.
    PA = Phi[:, active]
    y = expit(PA @ mu0)
    b = y * (1 - y)
    t_hat = PA @ mu0 + (t - y) / b
    P2 = Phi[:, active2]
    H = P2.T @ (b[:, None] * P2) + np.diag(alpha2)
    mu = np.linalg.solve(H, P2.T @ (b * t_hat))
    np.testing.assert_allclose(state.mu, mu, rtol=1e-8, atol=1e-10)
    Q = (b[:, None] * Phi).T @ (t_hat - P2 @ mu)
    np.testing.assert_allclose(state.Q, Q, rtol=1e-8, atol=1e-8)
    state.frozen_add(DenseBasis(Phi), np.ones(Phi.shape[1]), active2, 60, Phi[:, 60], 4.0)
    active3, alpha3 = [0, 5, 40, 60], np.array([0.5, 7.0, 3.0, 4.0])
    P3 = Phi[:, active3]
    H = P3.T @ (b[:, None] * P3) + np.diag(alpha3)
    mu = np.linalg.solve(H, P3.T @ (b * t_hat))
    np.testing.assert_allclose(state.mu, mu, rtol=1e-8, atol=1e-10)
    BP = (b[:, None] * Phi).T @ P3
    S = np.einsum("ij,ij->j", Phi, b[:, None] * Phi) - np.einsum("ij,ij->i", BP, np.linalg.solve(H, BP.T).T)
    np.testing.assert_allclose(state.S, S, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(state.Sigma, np.linalg.inv(H), rtol=1e-8, atol=1e-12)


@pytest.mark.parametrize("n", [100, 1500])
def test_frozen_steps_reach_the_evidence_of_a_mode_after_every_step(n):
    X, t = make_ripley(n, random_state=n)
    basis = kernel_basis(RBF(4.0), X) if n > 500 else DenseBasis(design_matrix(X, X, RBF(4.0)))
    every = fit_evidence_bernoulli(basis, t, start=0, frozen_steps=False)
    frozen = fit_evidence_bernoulli(basis, t, start=0, frozen_steps=True)
    assert frozen.converged and every.converged
    assert frozen.log_evidence >= every.log_evidence - 0.05
    assert frozen.counts["modes"] < every.counts["modes"] / 2
    if n <= 500:
        Phi = basis.Phi
        assert laplace_log_evidence(Phi, t, frozen.alpha) == pytest.approx(frozen.log_evidence, abs=1e-6)


def test_low_rank_weighted_norms_through_the_squared_kernel():
    X, _ = make_ripley(700, random_state=9)
    basis = kernel_basis(RBF(4.0), X)
    assert isinstance(basis, LowRankKernelBasis) and basis.squared_factor() is not None
    b = np.random.default_rng(0).uniform(0, 0.25, 700)
    K = RBF(4.0)(X, X)
    Phi = np.hstack([np.ones((700, 1)), K])
    np.testing.assert_allclose(basis.weighted_norms2(b), DenseBasis(Phi).weighted_norms2(b), rtol=1e-9)


def test_a_fit_that_stops_cycling_returns_the_best_model_it_saw():
    """Digit 0 against the rest (scikit-learn's digits, 898 training images): the
    frozen steps cycle and the fit falls back to the best model seen. That model
    must be restored by value: the frozen steps had since changed the state it
    was found in (here, deleting a basis from it)."""
    from scipy.spatial.distance import pdist
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    X, y = load_digits(return_X_y=True)
    X, _, y, _ = train_test_split(X / 16, y, test_size=0.5, random_state=0)
    Phi = design_matrix(X, X, RBF(gamma=1 / np.median(pdist(X, "sqeuclidean"))))
    res = fit_evidence_bernoulli(Phi, (y == 0).astype(float), frozen_steps=True)
    assert res.counts["cycling"] == 1 and res.converged
    assert res.mu.shape == (res.active.size,) and res.Sigma.shape == (res.active.size,) * 2
    # The reported evidence is the Laplace evidence of the model returned, at its mode,
    # and the best of the trace.
    exact = laplace_log_evidence(Phi[:, res.active], (y == 0).astype(float),
                                 res.alpha[res.active])
    assert res.log_evidence == pytest.approx(exact, abs=1e-6)
    assert res.log_evidence >= max(res.log_evidence_trace) - 1e-6


def test_default_schedule_is_exact_on_small_problems_and_frozen_beyond(monkeypatch):
    """frozen_steps=None re-finds the mode after every action while N x M is at most
    EXACT_SCHEDULE_MAX (there it costs milliseconds and reaches SparseBayes's maxima)."""
    import rvm_ppl.closed_form.bernoulli as el

    X, t = make_ripley(100, random_state=3)
    Phi = design_matrix(X, X, RBF(4.0))
    assert Phi.size <= el.EXACT_SCHEDULE_MAX
    default = fit_evidence_bernoulli(Phi, t)
    exact = fit_evidence_bernoulli(Phi, t, frozen_steps=False)
    assert default.counts == exact.counts and default.log_evidence == exact.log_evidence
    monkeypatch.setattr(el, "EXACT_SCHEDULE_MAX", Phi.size - 1)
    default = fit_evidence_bernoulli(Phi, t)
    frozen = fit_evidence_bernoulli(Phi, t, frozen_steps=True)
    assert default.counts == frozen.counts and default.log_evidence == frozen.log_evidence
