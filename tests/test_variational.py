"""Tests of the variational RVM (Bishop & Tipping 2000) in ``rvm_ppl.closed_form.vb``.

Run with ``-s`` to see the figures of the sinc experiment (paper, Table 1).
"""

import time
import warnings

import numpy as np
import pytest
from scipy import stats
from scipy.optimize import minimize, minimize_scalar
from scipy.special import expit, logsumexp
from sklearn.exceptions import ConvergenceWarning

from rvm_ppl.closed_form.evidence import fit_evidence_regression
from rvm_ppl.closed_form.vb import (
    _QW,
    VBResult,
    _classification_bound,
    _classification_sweep,
    _jj_lambda,
    _regression_bound,
    _regression_sweep,
    _update_q_alpha,
    _update_q_beta,
    _update_q_w,
    _update_xi,
    fit_vb_classification,
    fit_vb_classification_full,
    fit_vb_regression,
    fit_vb_regression_full,
)

# Relevance threshold: a basis function counts as a "kernel kept" when
# E[alpha_m] < 100, i.e. the prior sd of its weight exceeds 0.1 (the noise sd).
# Irrelevant weights saturate at E[alpha] ~ sqrt(s_m / 2b) ~ 1e3-1e4 with b = 1e-6.
RELEVANT_ALPHA = 100.0
MONOTONE_RTOL = 1e-9


# -- data ---------------------------------------------------------------------------


def _rbf_design(x, centres):
    """``[1, exp(-(x_i - x_j)^2 / 9)]``: Tipping's sinc basis (width r = 3) plus bias."""
    return np.column_stack([np.ones(len(x)), np.exp(-((x[:, None] - centres[None, :]) ** 2) / 9.0)])


def _sinc_data(seed, n=100):
    rng = np.random.default_rng(seed)
    x = np.linspace(-10.0, 10.0, n)
    t = np.sinc(x / np.pi) + 0.1 * rng.standard_normal(n)
    return x, t


def _linear_data(seed, n=40, m=8):
    rng = np.random.default_rng(seed)
    Phi = rng.standard_normal((n, m))
    w = np.zeros(m)
    w[:3] = [2.0, -1.0, 0.5]
    return Phi, Phi @ w + 0.3 * rng.standard_normal(n)


def _blobs(rng, n):
    y = np.arange(n) % 2
    X = rng.standard_normal((n, 2)) + np.where(y[:, None] == 1, 1.0, -1.0)
    return X, y.astype(float)


def _gauss_design(X, C, gamma=0.5):
    d2 = ((X[:, None, :] - C[None, :, :]) ** 2).sum(-1)
    return np.column_stack([np.ones(len(X)), np.exp(-gamma * d2)])


def _blob_problem(seed, n=100):
    rng = np.random.default_rng(seed)
    X, y = _blobs(rng, n)
    Xt, yt = _blobs(rng, 1000)
    return _gauss_design(X, X), y, _gauss_design(Xt, X), yt


def _assert_monotone(trace):
    steps = np.diff(trace)
    worst = np.min(steps / np.abs(trace[1:])) if len(steps) else 0.0
    assert worst >= -MONOTONE_RTOL, f"bound decreased by {worst:.2e} (relative)"


# -- the bound never decreases ----------------------------------------------------------


@pytest.mark.parametrize("fit", [fit_vb_regression, fit_vb_regression_full])
@pytest.mark.parametrize(
    "problem",
    ["sinc-0", "sinc-1", "linear-0", "linear-1", "linear-wide"],
)
def test_regression_bound_never_decreases(problem, fit):
    kind, seed = problem.split("-")
    if kind == "sinc":
        x, t = _sinc_data(int(seed))
        Phi = _rbf_design(x, x)
    elif seed == "wide":  # more basis functions than data
        Phi, t = _linear_data(7, n=15, m=30)
    else:
        Phi, t = _linear_data(int(seed))
    res = fit(Phi, t)
    assert res.converged
    assert res.n_iter == len(res.bound_trace) > 3
    _assert_monotone(res.bound_trace)
    assert res.bound_trace[-1] > res.bound_trace[0]


@pytest.mark.parametrize("fit", [fit_vb_classification, fit_vb_classification_full])
@pytest.mark.parametrize("seed", [0, 1])
def test_classification_bound_never_decreases(seed, fit):
    Phi, y, _, _ = _blob_problem(seed, n=60)
    res = fit(Phi, y)
    assert res.converged
    _assert_monotone(res.bound_trace)
    # a linear design, too
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((80, 4))
    t = (rng.random(80) < expit(X @ [2.0, -1.0, 0.0, 0.0])).astype(float)
    res = fit(X, t)
    assert res.converged
    _assert_monotone(res.bound_trace)


# -- each closed-form update is the exact maximiser of the bound in its factor ----------


def _regression_state(n_sweeps=5, seed=3):
    """A mid-run state of the sinc problem (far from convergence)."""
    x, t = _sinc_data(seed, n=40)
    Phi = _rbf_design(x, x)
    a = b = c = d = 1e-6
    M = Phi.shape[1]
    state = (np.full(M, 0.5), np.full(M, 0.5), c + 20.0, (c + 20.0) / 50.0)
    col_sq = (Phi**2).sum(0)
    for _ in range(n_sweeps):
        qw, state, _ = _regression_sweep(Phi, t, col_sq, state, np.arange(M), (a, b, c, d))
    return Phi, t, qw, state, (a, b, c, d)


def _perturbations(value, rel=(1e-2, -1e-2, 0.2, -0.2)):
    return [value * (1.0 + r) for r in rel]


def test_regression_q_alpha_update_is_the_maximiser():
    Phi, t, qw, (sa, ra, sb, rb), priors = _regression_state()
    bound = _regression_bound(Phi, t, qw, sa, ra, sb, rb, *priors)
    shape, rate = _update_q_alpha(qw, priors[0], priors[1])
    np.testing.assert_allclose(rate, ra)  # the sweep ended with this update
    for m in [0, 3, 17, 40]:
        for field in ("shape", "rate"):
            for value in _perturbations((sa if field == "shape" else ra)[m]):
                s2, r2 = sa.copy(), ra.copy()
                (s2 if field == "shape" else r2)[m] = value
                assert _regression_bound(Phi, t, qw, s2, r2, sb, rb, *priors) < bound

        # numerical 1-D maximisation over log(rate_m), shape fixed
        def neg(log_r, m=m):
            r2 = ra.copy()
            r2[m] = np.exp(log_r)
            return -_regression_bound(Phi, t, qw, sa, r2, sb, rb, *priors)

        opt = minimize_scalar(neg, bracket=(np.log(ra[m]) - 1, np.log(ra[m]) + 1), tol=1e-12)
        np.testing.assert_allclose(np.exp(opt.x), ra[m], rtol=1e-5)


def test_regression_q_beta_update_is_the_maximiser():
    Phi, t, qw, (sa, ra, sb, rb), priors = _regression_state()
    a, b, c, d = priors
    bound = _regression_bound(Phi, t, qw, sa, ra, sb, rb, *priors)
    assert (sb, rb) == pytest.approx(_update_q_beta(Phi, t, qw, c, d))
    for s2, r2 in [(v, rb) for v in _perturbations(sb)] + [(sb, v) for v in _perturbations(rb)]:
        assert _regression_bound(Phi, t, qw, sa, ra, s2, r2, *priors) < bound
    # Bishop & Tipping (2000) eq. (26) as printed, c + (N + 1)/2, is not the maximiser
    printed = c + (len(t) + 1) / 2
    assert sb == pytest.approx(c + len(t) / 2)
    assert _regression_bound(Phi, t, qw, sa, ra, printed, rb, *priors) < bound

    # numerical 2-D maximisation over (log shape, log rate)
    def neg(p):
        return -_regression_bound(Phi, t, qw, sa, ra, np.exp(p[0]), np.exp(p[1]), *priors)

    opt = minimize(
        neg,
        [np.log(sb) + 0.3, np.log(rb) - 0.3],
        method="Nelder-Mead",
        options={"xatol": 1e-9, "fatol": 1e-12, "maxiter": 4000},
    )
    np.testing.assert_allclose(np.exp(opt.x), [sb, rb], rtol=1e-4)
    assert -opt.fun <= bound + 1e-9 * abs(bound)


def test_regression_q_w_update_is_the_maximiser():
    Phi, t, _, (sa, ra, sb, rb), priors = _regression_state()
    M = Phi.shape[1]
    Ea, Eb = sa / ra, sb / rb
    qw = _update_q_w(
        Phi, Ea, np.full(len(t), Eb), Eb * Phi.T @ t, np.arange(M), Eb * (Phi**2).sum(0)
    )
    bound = _regression_bound(Phi, t, qw, sa, ra, sb, rb, *priors)
    rng = np.random.default_rng(0)
    sd = np.sqrt(np.diag(qw.cov))
    for _ in range(5):
        u = rng.standard_normal(M) * sd
        for eps in (1e-2, -1e-2, 0.3):
            q2 = _QW.full(qw.mean + eps * u, qw.cov)
            assert _regression_bound(Phi, t, q2, sa, ra, sb, rb, *priors) < bound
    # covariance: scale it, and add / remove a rank-one term
    v = qw.cov @ rng.standard_normal(M)
    v /= np.sqrt(v @ np.linalg.solve(qw.cov, v))  # unit length in the metric of Sigma^{-1}
    for cov in (
        qw.cov * 1.01,
        qw.cov * 0.99,
        qw.cov + 0.05 * np.outer(v, v),
        qw.cov - 0.05 * np.outer(v, v),
    ):
        q2 = _QW.full(qw.mean, cov)
        assert _regression_bound(Phi, t, q2, sa, ra, sb, rb, *priors) < bound
    # the mean is a stationary point: central differences vanish
    h = 1e-4
    for m in (0, 5, 20):
        e = np.zeros(M)
        e[m] = h * sd[m]
        up = _regression_bound(Phi, t, _QW.full(qw.mean + e, qw.cov), sa, ra, sb, rb, *priors)
        down = _regression_bound(Phi, t, _QW.full(qw.mean - e, qw.cov), sa, ra, sb, rb, *priors)
        assert abs(up - down) / (2 * h) < 1e-5


def _classification_state(n_sweeps=4):
    Phi, y, _, _ = _blob_problem(5, n=40)
    a = b = 1e-6
    M, N = Phi.shape[1], len(y)
    state = (np.full(M, 0.5), np.full(M, 0.5), np.zeros(N))
    for _ in range(n_sweeps):
        qw, state, _ = _classification_sweep(Phi, y, state, np.arange(M), (a, b))
    return Phi, y, qw, state, (a, b)


def test_classification_updates_are_the_maximisers():
    Phi, y, qw, (sa, ra, xi), (a, b) = _classification_state()
    bound = _classification_bound(Phi, y, qw, sa, ra, xi, a, b)
    np.testing.assert_allclose(xi, _update_xi(Phi, qw))
    np.testing.assert_allclose(ra, _update_q_alpha(qw, a, b)[1])
    rng = np.random.default_rng(1)
    # xi: eq. (58) maximises each term of eq. (60)
    for n in (0, 7, 33):
        for value in _perturbations(xi[n]):
            xi2 = xi.copy()
            xi2[n] = value
            assert _classification_bound(Phi, y, qw, sa, ra, xi2, a, b) < bound
    xi2 = xi * np.exp(0.05 * rng.standard_normal(len(xi)))
    assert _classification_bound(Phi, y, qw, sa, ra, xi2, a, b) < bound
    # Q(alpha): eq. (57)
    for m in (0, 10, 30):
        for arr_id in (0, 1):
            for value in _perturbations((sa, ra)[arr_id][m]):
                pair = [sa.copy(), ra.copy()]
                pair[arr_id][m] = value
                assert _classification_bound(Phi, y, qw, *pair, xi, a, b) < bound
    # Q(w): eqs. (54)-(55), given the current alpha and xi
    lam = _jj_lambda(xi)
    M = Phi.shape[1]
    qw = _update_q_w(
        Phi, sa / ra, 2 * lam, 0.5 * Phi.T @ (2 * y - 1), np.arange(M), 2 * lam @ Phi**2
    )
    bound = _classification_bound(Phi, y, qw, sa, ra, xi, a, b)
    sd = np.sqrt(np.diag(qw.cov))
    for _ in range(5):
        u = rng.standard_normal(M) * sd
        for eps in (1e-2, -1e-2, 0.3):
            q2 = _QW.full(qw.mean + eps * u, qw.cov)
            assert _classification_bound(Phi, y, q2, sa, ra, xi, a, b) < bound
    for scale in (1.01, 0.99):
        q2 = _QW.full(qw.mean, qw.cov * scale)
        assert _classification_bound(Phi, y, q2, sa, ra, xi, a, b) < bound


def test_jj_lambda_is_continuous_at_zero():
    xi = np.array([0.0, 1e-6, 9.9e-5, 1.01e-4, 1e-2, 3.0])
    expected = np.where(xi == 0, 0.125, np.tanh(xi / 2) / (4 * np.where(xi == 0, 1, xi)))
    np.testing.assert_allclose(_jj_lambda(xi), expected, rtol=1e-10)


# -- the closed-form bound against a Monte Carlo estimate of its definition (eq. 12) ----


def _random_q(rng, M):
    A = rng.standard_normal((M, M))
    cov = 0.1 * (A @ A.T + M * np.eye(M)) / M
    return _QW.full(rng.standard_normal(M), cov), 2.0 + rng.random(M), 1.0 + rng.random(M)


def _mc(values):
    return values.mean(), values.std() / np.sqrt(len(values))


def test_regression_bound_matches_monte_carlo():
    rng = np.random.default_rng(11)
    N, M, S = 12, 3, 200_000
    Phi = rng.standard_normal((N, M))
    t = rng.standard_normal(N)
    a, b, c, d = 2.0, 1.5, 3.0, 0.5
    qw, sa, ra = _random_q(rng, M)
    sb, rb = 8.0, 4.0
    L = _regression_bound(Phi, t, qw, sa, ra, sb, rb, a, b, c, d)
    w = rng.multivariate_normal(qw.mean, qw.cov, size=S)
    alpha = rng.gamma(sa, 1 / ra, size=(S, M))
    beta = rng.gamma(sb, 1 / rb, size=S)
    log_joint = (
        stats.norm.logpdf(t, w @ Phi.T, 1 / np.sqrt(beta)[:, None]).sum(1)
        + stats.norm.logpdf(w, 0, 1 / np.sqrt(alpha)).sum(1)
        + stats.gamma.logpdf(alpha, a, scale=1 / b).sum(1)
        + stats.gamma.logpdf(beta, c, scale=1 / d)
    )
    log_q = (
        stats.multivariate_normal(qw.mean, qw.cov).logpdf(w)
        + stats.gamma.logpdf(alpha, sa, scale=1 / ra).sum(1)
        + stats.gamma.logpdf(beta, sb, scale=1 / rb)
    )
    est, se = _mc(log_joint - log_q)
    assert abs(est - L) < 5 * se, (est, se, L)


def test_classification_bound_matches_monte_carlo():
    rng = np.random.default_rng(12)
    N, M, S = 15, 3, 200_000
    Phi = rng.standard_normal((N, M))
    y = (rng.random(N) < 0.5).astype(float)
    a, b = 2.0, 1.5
    qw, sa, ra = _random_q(rng, M)
    xi = 0.5 + rng.random(N)
    L = _classification_bound(Phi, y, qw, sa, ra, xi, a, b)
    w = rng.multivariate_normal(qw.mean, qw.cov, size=S)
    alpha = rng.gamma(sa, 1 / ra, size=(S, M))
    z = (w @ Phi.T) * (2 * y - 1)
    lam = np.tanh(xi / 2) / (4 * xi)
    log_F = (np.log(expit(xi)) + (z - xi) / 2 - lam * (z**2 - xi**2)).sum(1)  # eq. (51)
    rest = (
        stats.norm.logpdf(w, 0, 1 / np.sqrt(alpha)).sum(1)
        + stats.gamma.logpdf(alpha, a, scale=1 / b).sum(1)
        - stats.multivariate_normal(qw.mean, qw.cov).logpdf(w)
        - stats.gamma.logpdf(alpha, sa, scale=1 / ra).sum(1)
    )
    est, se = _mc(log_F + rest)
    assert abs(est - L) < 5 * se, (est, se, L)
    # with the exact likelihood the integrand is larger: L is a bound on a bound (eq. 52)
    exact, se2 = _mc(np.log(expit(z)).sum(1) + rest)
    assert L < exact - 3 * se2


# -- the sinc experiment (Bishop & Tipping 2000, Table 1) --------------------------------


@pytest.mark.parametrize("fit", [fit_vb_regression, fit_vb_regression_full])
def test_sinc_matches_the_paper(fit):
    x_test = np.linspace(-10.0, 10.0, 1000)
    f_test = np.sinc(x_test / np.pi)
    rms, kept, noise, iters, secs = [], [], [], [], []
    for seed in range(5):
        x, t = _sinc_data(seed)
        Phi = _rbf_design(x, x)
        start = time.perf_counter()
        res = fit(Phi, t)
        secs.append(time.perf_counter() - start)
        assert res.converged
        rms.append(np.sqrt(np.mean((_rbf_design(x_test, x) @ res.mean - f_test) ** 2)))
        kept.append(int(np.sum(res.alpha_mean < RELEVANT_ALPHA)))
        noise.append(np.sqrt(res.beta_rate / res.beta_shape))  # 1 / sqrt(E[beta])
        iters.append(res.n_iter)
        print(
            f"\n{fit.__name__}, sinc seed {seed}: RMS {rms[-1]:.4f}, "
            f"kernels (E[alpha] < 100) {kept[-1]}, "
            f"noise sd 1/sqrt(E[beta]) {noise[-1]:.4f}, {iters[-1]} iterations, "
            f"{secs[-1]:.2f} s"
        )
    print(
        f"sinc mean over 5 seeds: RMS {np.mean(rms):.4f} (paper 0.0494), kernels "
        f"{np.mean(kept):.1f} (paper 7.4), noise {np.mean(noise):.4f} (paper 0.0950, true 0.1), "
        f"iterations {np.mean(iters):.0f}, {np.mean(secs):.2f} s per fit"
    )
    assert np.mean(rms) <= 0.06
    assert max(rms) <= 0.08
    np.testing.assert_allclose(noise, 0.1, rtol=0.2)
    assert 3 <= np.mean(kept) <= 12


@pytest.mark.parametrize("fit", [fit_vb_regression, fit_vb_regression_full])
@pytest.mark.parametrize("seed", [0, 3])
def test_tiny_hyperpriors_agree_with_type_ii_ml(seed, fit):
    x, t = _sinc_data(seed)
    Phi = _rbf_design(x, x)
    Phi_test = _rbf_design(np.linspace(-10.0, 10.0, 1000), x)
    vb = fit(Phi, t, a=1e-10, b=1e-10, c=1e-10, d=1e-10)
    ev = fit_evidence_regression(Phi, t)
    diff = Phi_test @ vb.mean - Phi_test[:, ev.active] @ ev.mu
    rms = np.sqrt(np.mean(diff**2))
    print(f"\nseed {seed}: RMS(VB - type-II ML predictions) = {rms:.4f}")
    assert rms < 0.02
    assert np.sqrt(vb.beta_rate / vb.beta_shape) == pytest.approx(ev.beta**-0.5, rel=0.1)


# -- classification -----------------------------------------------------------------


@pytest.mark.parametrize("fit", [fit_vb_classification, fit_vb_classification_full])
def test_classification_blobs(fit):
    Phi, y, Phi_test, y_test = _blob_problem(0)
    res = fit(Phi, y)
    assert res.converged and res.beta_shape is None and res.beta_rate is None
    assert res.xi.shape == y.shape
    _assert_monotone(res.bound_trace)
    error = np.mean((Phi_test @ res.mean > 0) != y_test)
    print(
        f"\nblobs: test error {error:.3f} (Bayes 0.079), "
        f"{np.sum(res.alpha_mean < RELEVANT_ALPHA)} kernels, {res.n_iter} iterations"
    )
    assert error < 0.12  # Bayes error Phi(-sqrt 2) = 0.079


def _single_basis_problem():
    rng = np.random.default_rng(4)
    x = rng.standard_normal(40)
    y = (rng.random(40) < expit(1.5 * x)).astype(float)
    return x[:, None], y


def test_classification_single_basis_brute_force():
    Phi, y = _single_basis_problem()
    a = b = 1e-6
    res = fit_vb_classification(Phi, y, a=a, b=b, tol=1e-12)
    m, S = res.mean[0], res.cov[0, 0]

    # (i) maximise the bound over (m, log S) with xi and Q(alpha) at their optima
    def neg_bound(p):
        qw = _QW(
            np.array([p[0]]),
            np.array([[np.exp(p[1])]]),
            np.array([0]),
            np.array([np.exp(p[1])]),
            p[1],
        )
        xi = _update_xi(Phi, qw)
        shape, rate = _update_q_alpha(qw, a, b)
        return -_classification_bound(Phi, y, qw, shape, rate, xi, a, b)

    opt = minimize(
        neg_bound,
        [0.0, 0.0],
        method="Nelder-Mead",
        options={"xatol": 1e-10, "fatol": 1e-13, "maxiter": 5000},
    )
    assert -opt.fun == pytest.approx(res.bound, abs=1e-7)
    np.testing.assert_allclose([opt.x[0], np.exp(opt.x[1])], [m, S], rtol=1e-4)

    # (ii) the exact posterior by quadrature, with alpha integrated out analytically:
    # p(w) = b^a Gamma(a + 1/2) / (Gamma(a) sqrt(2 pi)) (b + w^2/2)^-(a + 1/2)
    w = np.linspace(-15.0, 15.0, 600_001)
    dw = w[1] - w[0]
    log_prior = stats.t.logpdf(w, df=2 * a, scale=np.sqrt(b / a))  # the same density
    log_lik = -np.logaddexp(0.0, -np.outer(w, Phi[:, 0] * (2 * y - 1))).sum(1)
    log_joint = log_prior + log_lik
    log_evidence = logsumexp(log_joint) + np.log(dw)
    post = np.exp(log_joint - logsumexp(log_joint))
    post_mean = post @ w
    post_sd = np.sqrt(post @ (w - post_mean) ** 2)
    print(
        f"\nsingle basis: VB mean {m:.4f} sd {np.sqrt(S):.4f}; exact mean {post_mean:.4f} "
        f"sd {post_sd:.4f}; bound {res.bound:.4f} <= ln P(T) {log_evidence:.4f}"
    )
    assert res.bound <= log_evidence
    assert log_evidence - res.bound < 1.0
    assert abs(m - post_mean) < 0.25 * post_sd
    # mean-field VB with the Jaakkola-Jordan bound is overconfident, not wildly so
    assert 0.3 * post_sd < np.sqrt(S) < post_sd


def test_invalid_inputs_raise():
    for fit in (fit_vb_classification, fit_vb_classification_full):
        with pytest.raises(ValueError, match="0 or 1"):
            fit(np.ones((3, 1)), np.array([0.0, 1.0, 2.0]))
    for fit in (fit_vb_regression, fit_vb_regression_full):
        with pytest.raises(ValueError, match="shapes"):
            fit(np.ones((3, 2)), np.ones(4))
        with pytest.raises(ValueError, match="finite"):
            fit(np.ones((2, 1)), np.array([1.0, np.nan]))
    with pytest.raises(ValueError, match="b must be positive"):
        fit_vb_regression(np.ones((3, 2)), np.ones(3), b=0.0)
    with pytest.raises(ValueError, match="max_iter"):
        fit_vb_regression(np.ones((3, 2)), np.ones(3), max_iter=0)
    with pytest.raises(TypeError, match="protocol"):
        fit_vb_regression(object(), np.ones(3))


# -- pruning, convergence, determinism --------------------------------------------------


def _decoupled_problem():
    """Three useful columns, and one (large) column orthogonal to them and to ``t``.

    ``Q(w)`` then factorises exactly between the two groups, so restricting the
    fourth weight to ``N(0, v)`` loses nothing and pruning must be accepted.
    """
    rng = np.random.default_rng(8)
    N = 40
    Phi = np.zeros((N, 4))
    Phi[:30, :3] = rng.standard_normal((30, 3))
    t = Phi[:, :3] @ [1.0, -2.0, 0.5] + 0.2 * rng.standard_normal(N)
    v = rng.standard_normal(10)
    tb = t[30:]
    Phi[30:, 3] = 1e3 * (v - (v @ tb) / (tb @ tb) * tb)
    return Phi, t


def test_pruning_keeps_all_basis_functions_and_the_bound():
    Phi, t = _decoupled_problem()
    kw = {"b": 1e-300, "tol": 1e-9}
    ref = fit_vb_regression_full(Phi, t, prune_alpha=np.inf, **kw)
    res = fit_vb_regression_full(Phi, t, prune_alpha=1e8, **kw)
    np.testing.assert_array_equal(res.pruned, [False, False, False, True])
    np.testing.assert_array_equal(res.active, [0, 1, 2])
    assert res.mean.shape == (4,) and res.cov.shape == (3, 3)
    assert res.alpha_shape.shape == res.alpha_rate.shape == res.weight_var.shape == (4,)
    assert res.mean[3] == 0.0
    np.testing.assert_allclose(res.cov, ref.cov[:3, :3], rtol=1e-8)
    assert res.alpha_mean[3] > 1e8
    _assert_monotone(res.bound_trace)
    # the restriction is exact here, so the run is the unpruned run
    assert res.n_iter == ref.n_iter
    np.testing.assert_allclose(res.bound_trace, ref.bound_trace, rtol=1e-10)
    np.testing.assert_allclose(res.mean, ref.mean, atol=1e-10)
    np.testing.assert_allclose(res.alpha_rate, ref.alpha_rate, rtol=1e-8)


def test_everything_pruned():
    rng = np.random.default_rng(2)
    Q, _ = np.linalg.qr(rng.standard_normal((20, 3)))
    t = rng.standard_normal(20)
    t -= Q @ (Q.T @ t)  # orthogonal to every (mutually orthogonal) column
    res = fit_vb_regression_full(1e3 * Q[:, :2], t, b=1e-300, prune_alpha=1e8, tol=1e-9)
    assert res.pruned.all() and res.active.size == 0
    np.testing.assert_array_equal(res.mean, 0.0)
    assert res.cov.shape == (0, 0)
    _assert_monotone(res.bound_trace)
    # the noise then explains everything: E[1/beta] ~ ||t||^2 / N
    assert res.beta_rate / res.beta_shape == pytest.approx(t @ t / 20, rel=0.05)


def test_pruning_that_would_lower_the_bound_is_refused():
    x, t = _sinc_data(0)
    Phi = _rbf_design(x, x)
    ref = fit_vb_regression_full(Phi, t)
    res = fit_vb_regression_full(Phi, t, prune_alpha=1e3)
    assert (ref.alpha_mean > 1e3).any()  # candidates existed
    _assert_monotone(res.bound_trace)
    np.testing.assert_allclose(res.bound_trace, ref.bound_trace[: len(res.bound_trace)])
    np.testing.assert_allclose(res.mean, ref.mean, atol=1e-12)


def test_max_iter_warns():
    x, t = _sinc_data(0, n=30)
    with pytest.warns(ConvergenceWarning):
        res = fit_vb_regression(_rbf_design(x, x), t, max_iter=3)
    assert not res.converged and res.n_iter == 3 and len(res.bound_trace) == 3
    with pytest.warns(ConvergenceWarning):
        res = fit_vb_regression_full(_rbf_design(x, x), t, max_iter=3)
    assert not res.converged and res.n_iter == 3 and len(res.bound_trace) == 3
    Phi, y, _, _ = _blob_problem(0, n=30)
    for fit in (fit_vb_classification, fit_vb_classification_full):
        with pytest.warns(ConvergenceWarning):
            res = fit(Phi, y, max_iter=2)
        assert not res.converged and res.n_iter == 2


def test_deterministic_and_result_fields():
    Phi, t = _linear_data(0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        r1 = fit_vb_regression_full(Phi, t)
        r2 = fit_vb_regression_full(Phi, t)
    assert isinstance(r1, VBResult)
    np.testing.assert_array_equal(r1.bound_trace, r2.bound_trace)
    np.testing.assert_array_equal(r1.mean, r2.mean)
    np.testing.assert_allclose(r1.alpha_mean, r1.alpha_shape / r1.alpha_rate)
    np.testing.assert_allclose(r1.alpha_shape, 1e-6 + 0.5)
    assert r1.beta_shape == pytest.approx(1e-6 + len(t) / 2)
    assert r1.xi is None and not r1.pruned.any()
    np.testing.assert_array_equal(r1.active, np.arange(Phi.shape[1]))
    np.testing.assert_allclose(r1.cov, r1.cov.T)
    np.testing.assert_allclose(r1.weight_var, np.diag(r1.cov))
    # the true weights [2, -1, 0.5, 0, ...] are recovered; the zero ones are shrunk
    np.testing.assert_allclose(r1.mean[:3], [2.0, -1.0, 0.5], atol=0.15)
    assert np.all(np.abs(r1.mean[3:]) < 0.05)
