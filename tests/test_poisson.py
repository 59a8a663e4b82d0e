"""The Poisson (counts) RVM: type-II maximum likelihood by Laplace, its predictive, its PyMC model.

Oracles: scipy's optimiser for the posterior mode, the Laplace formula written
out here and numerical integration for the evidence, quadrature over the log
rate for the predictive pmf, scipy's Poisson, Student-t, Gamma and normal
densities for the PyMC model's log density, and a grid over the weights for
the posterior NUTS samples.
"""

import numpy as np
import pytest
from scipy import integrate, optimize, stats
from sklearn.exceptions import ConvergenceWarning

from rvm_ppl.closed_form import laplace
from rvm_ppl.closed_form.bernoulli import _Laplace
from rvm_ppl.closed_form.poisson import (
    GH_NODES,
    fit_evidence_poisson,
    log_rate_moments,
    posterior_mode,
    predict_count_mean,
    predict_count_pmf,
    predict_count_quantiles,
)
from rvm_ppl.core.linalg import cho_covariance
from rvm_ppl.kernels.basis import DenseBasis, KernelBasis
from rvm_ppl.kernels.kernel import RBF, design_matrix


def _neg_log_post(w, Phi, y, alpha, offset):
    """Negative log posterior of the weights from scipy's Poisson pmf (not the module's)."""
    return -np.sum(stats.poisson.logpmf(y, np.exp(Phi @ w + offset))) + 0.5 * np.sum(alpha * w**2)


def _tiny_problem(seed):
    """N = 8 counts of a few to about 25, two bases (bias and slope), a random offset."""
    rng = np.random.default_rng(seed)
    x = np.linspace(-1, 1, 8)
    Phi = np.column_stack([np.ones(8), x])
    offset = rng.normal(scale=0.2, size=8)
    y = rng.poisson(np.exp(2 + 0.8 * x + offset))
    return Phi, y, offset


def _sinc_counts(seed, n=200):
    """Counts with the log intensity 1 + 2 sinc(x) (Tipping's sin(x) / x) on [-10, 10]."""
    rng = np.random.default_rng(seed)
    x = np.sort(rng.uniform(-10, 10, n))
    return x, rng.poisson(np.exp(_log_rate(x)))


def _log_rate(x):
    return 1 + 2 * np.sinc(x / np.pi)


# -- posterior mode and Laplace evidence -------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1])
def test_posterior_mode_matches_scipy(seed):
    rng = np.random.default_rng(seed)
    N, M = 60, 5
    Phi = np.column_stack([np.ones(N), rng.normal(scale=0.5, size=(N, M - 1))])
    offset = rng.normal(scale=0.3, size=N)
    y = rng.poisson(np.exp(Phi @ rng.normal(scale=0.5, size=M) + offset))
    alpha = rng.uniform(0.1, 10, size=M)
    mode = posterior_mode(Phi, y, alpha, offset)

    def grad(w, *_):
        return -(Phi.T @ (y - np.exp(Phi @ w + offset))) + alpha * w

    def hess(w, *_):
        return (Phi * np.exp(Phi @ w + offset)[:, None]).T @ Phi + np.diag(alpha)

    ref = optimize.minimize(_neg_log_post, np.zeros(M), args=(Phi, y, alpha, offset), jac=grad,
                            hess=hess, method="Newton-CG", options={"xtol": 1e-12})
    assert ref.success
    np.testing.assert_allclose(mode.mu, ref.x, atol=1e-7)
    assert mode.grad_max < 1e-6 and not mode.ill_conditioned
    # The factor is that of H = Phi^T diag(exp(eta)) Phi + A at the mode.
    np.testing.assert_allclose(mode.L @ mode.L.T, hess(mode.mu), rtol=1e-10)
    assert mode.log_likelihood == pytest.approx(
        np.sum(stats.poisson.logpmf(y, np.exp(Phi @ mode.mu + offset))), rel=1e-12)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_laplace_evidence_formula_and_integral(seed):
    Phi, y, offset = _tiny_problem(seed)
    alpha = np.array([0.1, 0.5])
    # A tight gradient tolerance: log|H| is not stationary at the mode, so the default
    # 1e-6 leaves ~1e-8 nats between the two formulas.
    mode = posterior_mode(Phi, y, alpha, offset, grad_tol=1e-11)
    lap = laplace.log_evidence(mode.log_likelihood, mode.mu, alpha, mode.L)
    # The Laplace formula, written out from scipy's optimiser and a dense Hessian:
    # log P(t | w*) + log N(w* | 0, A^{-1}) + (M / 2) log 2 pi - log|H| / 2.
    def hess(w, *_):
        return (Phi * np.exp(Phi @ w + offset)[:, None]).T @ Phi + np.diag(alpha)

    w = optimize.minimize(
        _neg_log_post, np.zeros(2), args=(Phi, y, alpha, offset), method="trust-exact",
        jac=lambda w, *_: alpha * w - Phi.T @ (y - np.exp(Phi @ w + offset)), hess=hess,
        options={"gtol": 1e-11}).x
    H = hess(w)
    formula = (np.sum(stats.poisson.logpmf(y, np.exp(Phi @ w + offset)))
               + stats.multivariate_normal(np.zeros(2), np.diag(1 / alpha)).logpdf(w)
               + np.log(2 * np.pi) - 0.5 * np.linalg.slogdet(H)[1])
    assert lap == pytest.approx(formula, abs=1e-9)
    # The driver's statistics object computes the same value on unit-norm columns
    # (the weights scale with the column norm, alpha with its inverse square).
    scale = np.linalg.norm(Phi, axis=0)
    state = _Laplace(DenseBasis(Phi), scale, y, Phi / scale, alpha / scale**2, None,
                     grad_tol=1e-11, lik=laplace.PoissonLog(y, offset))
    assert state.logml == pytest.approx(lap, abs=1e-9)
    # The exact log marginal likelihood by adaptive quadrature over w (accurate to
    # ~1e-9 relative). With counts of 1 to 26 the Laplace error measured 0.003-0.004
    # nats on seeds 0-3; we allow 0.01.
    sd = np.sqrt(np.diag(cho_covariance(mode.L)))
    c = -_neg_log_post(mode.mu, Phi, y, alpha, offset)
    lo, hi = mode.mu - 12 * sd, mode.mu + 12 * sd
    val, err = integrate.dblquad(
        lambda w1, w0: np.exp(-_neg_log_post(np.array([w0, w1]), Phi, y, alpha, offset) - c),
        lo[0], hi[0], lo[1], hi[1], epsabs=0, epsrel=1e-9)
    assert err < 1e-7 * val
    exact = np.log(val) + c + 0.5 * np.sum(np.log(alpha / (2 * np.pi)))
    assert abs(lap - exact) < 0.01


# -- the sequential fit --------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sinc_counts_sparse_and_accurate(seed):
    # Measured (seeds 0-2): 4-5 of the 201 candidates kept, RMS of the log rate to
    # the truth on a 1001-point grid 0.07-0.10. We ask for at most 10 and below 0.2.
    x, y = _sinc_counts(seed)
    kernel = RBF(gamma=1 / 9)
    Phi = design_matrix(x[:, None], x[:, None], kernel)  # bias + one kernel per point
    res = fit_evidence_poisson(Phi, y)
    assert res.converged and res.beta is None
    assert res.active.size <= 10
    xt = np.linspace(-10, 10, 1001)
    m, _ = log_rate_moments(design_matrix(xt[:, None], x[:, None], kernel)[:, res.active],
                            res.mu, res.Sigma)
    assert np.sqrt(np.mean((m - _log_rate(xt)) ** 2)) < 0.2
    # The reported evidence is the Laplace evidence of the returned model, and mu its mode.
    A = res.active
    mode = posterior_mode(Phi[:, A], y, res.alpha[A])
    np.testing.assert_allclose(res.mu, mode.mu, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(res.Sigma, cho_covariance(mode.L), rtol=1e-6, atol=1e-10)
    assert laplace.log_evidence(mode.log_likelihood, mode.mu, res.alpha[A], mode.L) == \
        pytest.approx(res.log_evidence, abs=1e-6)
    # Every pruned candidate would lower the evidence (Tipping 2001, App. B.1).
    assert np.all(res.pruned_gradient_ok)


@pytest.mark.parametrize("frozen_steps", [False, True])
@pytest.mark.parametrize("seed", [0, 6])
def test_evidence_trace_does_not_decrease(seed, frozen_steps):
    # Every step is taken for a positive predicted gain. With the mode re-found
    # after each step the Laplace evidence can dip while the mode moves (as for
    # the Bernoulli likelihood); the dips measured at most 1.2e-5 nats of ~410
    # (seeds 0-7): we allow 1e-6 of |log evidence|. With B frozen between mode
    # searches the trace (one entry per search) rose on every seed.
    x, y = _sinc_counts(seed)
    Phi = design_matrix(x[:, None], x[:, None], RBF(gamma=1 / 9))
    calls = []
    res = fit_evidence_poisson(Phi, y, frozen_steps=frozen_steps,
                               callback=lambda *a: calls.append(a))
    trace = res.log_evidence_trace
    assert np.diff(trace).min() >= -1e-6 * abs(res.log_evidence)
    assert trace[-1] > trace[0]
    assert res.log_evidence == trace[-1]
    assert len(calls) == res.counts["add"] + res.counts["reestimate"] + res.counts["delete"]


def test_fit_is_scale_invariant_and_lazy_basis_agrees():
    x, y = _sinc_counts(3, n=80)
    Phi = design_matrix(x[:, None], x[:, None], RBF(gamma=1 / 9))
    res = fit_evidence_poisson(Phi, y)
    c = np.random.default_rng(0).uniform(0.1, 10, size=Phi.shape[1])
    res2 = fit_evidence_poisson(Phi * c, y)
    np.testing.assert_array_equal(res2.active, res.active)
    np.testing.assert_allclose(res2.mu, res.mu / c[res.active], rtol=1e-6)
    assert res2.log_evidence == pytest.approx(res.log_evidence, abs=1e-8)
    lazy = fit_evidence_poisson(KernelBasis(RBF(gamma=1 / 9), x[:, None], bias=True), y)
    np.testing.assert_array_equal(lazy.active, res.active)
    np.testing.assert_allclose(lazy.mu, res.mu, rtol=1e-6)


def test_offset_is_the_log_exposure():
    # Counts over exposures E_n: with offset log E the fit recovers the rate per unit
    # exposure; the same counts without the offset put the exposure into the weights.
    rng = np.random.default_rng(4)
    x = np.sort(rng.uniform(-10, 10, 150))
    E = rng.uniform(0.5, 5, size=150)
    y = rng.poisson(E * np.exp(_log_rate(x)))
    Phi = design_matrix(x[:, None], x[:, None], RBF(gamma=1 / 9))
    res = fit_evidence_poisson(Phi, y, offset=np.log(E))
    m, _ = log_rate_moments(Phi[:, res.active], res.mu, res.Sigma)  # no offset: per unit exposure
    assert np.sqrt(np.mean((m - _log_rate(x)) ** 2)) < 0.2
    m_off, _ = log_rate_moments(Phi[:, res.active], res.mu, res.Sigma, np.log(E))
    np.testing.assert_allclose(m_off, m + np.log(E))


def test_empty_model_predicts_the_exposure():
    # No basis can explain counts that match the offset's rate better than the offset.
    y = np.array([1, 0, 2, 1, 0, 1, 3, 0, 1, 1])
    res = fit_evidence_poisson(np.ones((10, 1)), y, offset=np.full(10, np.log(y.mean())))
    assert res.converged and res.active.size == 0 and np.isinf(res.alpha).all()
    assert res.log_evidence == pytest.approx(np.sum(stats.poisson.logpmf(y, y.mean())))


def test_max_iter_warns():
    x, y = _sinc_counts(0, n=60)
    with pytest.warns(ConvergenceWarning, match="did not converge"):
        res = fit_evidence_poisson(design_matrix(x[:, None], x[:, None], RBF(gamma=1 / 9)), y,
                                   max_iter=2)
    assert not res.converged


@pytest.mark.parametrize("y, match", [
    (np.array([0.0, -1.0, 2.0]), "non-negative counts"),
    (np.array([0.0, np.nan, 2.0]), "finite"),
])
def test_rejects_bad_counts(y, match):
    with pytest.raises(ValueError, match=match):
        fit_evidence_poisson(np.ones((3, 1)), y)


def test_real_counts_fit_the_continued_likelihood():
    # Non-negative reals, as scikit-learn's PoissonRegressor takes them: the mode is
    # that of sum t eta - exp(eta) (the Poisson log pmf without its constant) plus the
    # prior, found here by scipy.
    rng = np.random.default_rng(5)
    Phi = np.column_stack([np.ones(30), rng.normal(size=30)])
    t = rng.gamma(2.0, 1.5, size=30)
    alpha = np.array([0.5, 2.0])

    def neg(w):
        eta = Phi @ w
        return -np.sum(t * eta - np.exp(eta)) + 0.5 * np.sum(alpha * w**2)

    ref = optimize.minimize(neg, np.zeros(2), method="BFGS", options={"gtol": 1e-10}).x
    np.testing.assert_allclose(posterior_mode(Phi, t, alpha).mu, ref, atol=1e-6)
    res = fit_evidence_poisson(Phi, t)
    assert res.converged and np.isfinite(res.log_evidence)


def test_rejects_bad_offset():
    with pytest.raises(ValueError, match="offset has shape"):
        fit_evidence_poisson(np.ones((3, 1)), np.array([0, 1, 2]), offset=np.zeros(2))


# -- the predictive distribution ---------------------------------------------------------


def _predictive_case():
    x, y = _sinc_counts(1, n=100)
    kernel = RBF(gamma=1 / 9)
    res = fit_evidence_poisson(design_matrix(x[:, None], x[:, None], kernel), y)
    xt = np.array([-12.0, -3.0, 0.0, 4.5, 11.0])  # two points outside the data
    P = design_matrix(xt[:, None], x[:, None], kernel)[:, res.active]
    # A wider posterior too (Sigma x 25: s up to ~0.6), where the mixture is far from Poisson.
    return P, res.mu, res.Sigma


@pytest.mark.parametrize("widen", [1.0, 25.0])
def test_predictive_pmf_sums_to_one_and_has_the_lognormal_mean(widen):
    P, mu, Sigma = _predictive_case()
    Sigma = widen * Sigma
    m, s2 = log_rate_moments(P, mu, Sigma)
    k = np.arange(400)  # the largest mean is ~ 25: the tail beyond 400 is below 1e-100
    pmf = predict_count_pmf(P, mu, Sigma, k)
    np.testing.assert_allclose(pmf.sum(axis=1), 1.0, rtol=1e-12)
    # E[count] = E[lambda] = exp(m + s^2 / 2) exactly; the quadrature with GH_NODES = 64
    # nodes reproduces it to rounding.
    mean = predict_count_mean(P, mu, Sigma)
    np.testing.assert_allclose(mean, np.exp(m + s2 / 2), rtol=1e-14)
    np.testing.assert_allclose(pmf @ k, mean, rtol=1e-10)
    # Var[count] = E[lambda] + Var[lambda] (law of total variance, lognormal lambda).
    var = mean + (np.exp(s2) - 1) * np.exp(2 * m + s2)
    np.testing.assert_allclose(pmf @ k**2 - (pmf @ k) ** 2, var, rtol=1e-9)
    # The pmf at a few counts against adaptive quadrature over the log rate.
    for i in (0, 2):
        for kk in (0, 3, int(mean[i])):
            mi, si = m[i], np.sqrt(s2[i])
            ref, _ = integrate.quad(
                lambda e, mi=mi, si=si, kk=kk: stats.norm.pdf(e, mi, si)
                * stats.poisson.pmf(kk, np.exp(e)),
                mi - 12 * si, mi + 12 * si, epsabs=0, epsrel=1e-12)
            assert pmf[i, kk] == pytest.approx(ref, rel=1e-9, abs=1e-300)
    # The central 90% interval read off the same mixture: the smallest k with CDF >= q.
    q = predict_count_quantiles(P, mu, Sigma, (0.05, 0.5, 0.95))
    cdf = np.cumsum(pmf, axis=1)
    for j, qj in enumerate((0.05, 0.5, 0.95)):
        np.testing.assert_array_equal(q[:, j], np.argmax(cdf >= qj - 1e-12, axis=1))
    assert GH_NODES == 64


def test_quantiles_of_a_point_mass_rate_are_poisson():
    lam = np.array([0.3, 4.0, 60.0])
    P = np.log(lam)[:, None]
    q = predict_count_quantiles(P, np.array([1.0]), np.zeros((1, 1)))
    np.testing.assert_array_equal(q, stats.poisson.ppf([[0.05, 0.95]], lam[:, None]))
    with pytest.raises(ValueError, match="probabilities"):
        predict_count_quantiles(P, np.array([1.0]), np.zeros((1, 1)), q=1.5)


# -- the PyMC model ------------------------------------------------------------------------


def _count_data(seed=0, n=12):
    rng = np.random.default_rng(seed)
    x = np.linspace(-1, 1, n)
    Phi = np.column_stack([np.ones(n), x, np.exp(-4 * x**2)])
    offset = rng.normal(scale=0.3, size=n)
    return Phi, rng.poisson(np.exp(1 + 0.7 * x + offset)), offset


def _logp_at(model, point):
    return float(model.compile_logp()(point))


@pytest.mark.parametrize("with_offset", [False, True])
def test_marginal_model_log_density_matches_scipy(with_offset):
    import pymc  # noqa: F401  (the model needs it)

    from rvm_ppl import build_model

    Phi, y, offset = _count_data()
    o = offset if with_offset else np.zeros(len(y))
    model = build_model(Phi, y, likelihood="poisson", offset=offset if with_offset else None)
    assert [v.name for v in model.free_RVs] == ["w"]
    assert ("offset" in model.named_vars) == with_offset
    a, b = model.rvm_spec.priors["a"], model.rvm_spec.priors["b"]
    assert (a, b) == (3.0, 2.0)  # the classifier's hyperprior
    # The sampler's coordinates u = V^T w on Phi's right singular vectors V (numpy's SVD
    # here): an orthogonal map, Jacobian 1.
    u = np.array([0.4, -1.3, 0.7])
    V = np.linalg.svd(Phi)[2].T
    w = V @ u
    # Tipping (2001) eq. (32): w_m ~ t_{2a}(0, sqrt(b / a)).
    ref = (np.sum(stats.poisson.logpmf(y, np.exp(Phi @ w + o)))
           + np.sum(stats.t.logpdf(w, df=2 * a, scale=np.sqrt(b / a))))
    (value_var,) = model.value_vars
    # PyTensor's gammaln differs from scipy's by up to 3e-8 (gammaln(3.5): 2.8e-8;
    # scipy agrees with a 40-digit evaluation to 1e-16); it enters the normalisers of
    # the Student-t, Gamma and Poisson densities, so we compare to 1e-7.
    assert _logp_at(model, {value_var.name: u}) == pytest.approx(ref, abs=1e-7)
    # The axes make Phi's columns orthogonal: Phi V = U S.
    PV = Phi @ V
    np.testing.assert_allclose(PV.T @ PV, np.diag(np.linalg.svd(Phi)[1] ** 2), atol=1e-12)


@pytest.mark.parametrize("parameterization", ["centered", "noncentered"])
def test_centred_and_noncentred_log_density_match_scipy(parameterization):
    from rvm_ppl import build_model

    Phi, y, offset = _count_data(1)
    model = build_model(Phi, y, likelihood="poisson", parameterization=parameterization,
                        offset=offset)
    a, b = 3.0, 2.0
    log_alpha = np.array([0.3, -1.0, 1.5])
    alpha = np.exp(log_alpha)
    u = np.array([0.5, -0.2, 1.1])
    # Gamma(a, rate b) on alpha with the log transform's Jacobian log(alpha).
    ref = np.sum(stats.gamma.logpdf(alpha, a, scale=1 / b) + log_alpha)
    if parameterization == "centered":
        w = u
        ref += np.sum(stats.norm.logpdf(w, 0, alpha**-0.5))
        point = {"alpha_log__": log_alpha, "w": w}
    else:
        w = u * alpha**-0.5
        ref += np.sum(stats.norm.logpdf(u))
        point = {"alpha_log__": log_alpha, "w_raw": u}
    ref += np.sum(stats.poisson.logpmf(y, np.exp(Phi @ w + offset)))
    assert _logp_at(model, point) == pytest.approx(ref, abs=1e-7)  # PyTensor's gammaln


def test_offset_and_rows_change_with_set_data():
    import pymc as pm

    from rvm_ppl import build_model

    Phi, y, offset = _count_data(2)
    model = build_model(Phi, y, likelihood="poisson", offset=offset)
    u = np.array([0.1, 0.2, -0.3])
    w = np.linalg.svd(Phi)[2].T @ u  # the training rows' axes stay: any orthogonal map is exact
    Phi2, y2, offset2 = _count_data(3, n=5)
    with model:
        pm.set_data({"Phi": Phi2, "offset": offset2, "y_obs": y2})
    lp = _logp_at(model, {model.value_vars[0].name: u})
    prior = np.sum(stats.t.logpdf(w, df=6, scale=np.sqrt(2 / 3)))
    new = np.sum(stats.poisson.logpmf(y2, np.exp(Phi2 @ w + offset2)))
    assert lp - prior == pytest.approx(new, abs=1e-7)  # PyTensor's gammaln: see above


@pytest.mark.parametrize("y, kw, match", [
    (np.array([0, 1.5, 2, 3]), {}, "integer counts.*PoissonRegressor"),
    (np.array([0, -1, 2, 3]), {}, "negative"),
    (np.array([0, 1, 2, 3]), {"offset": np.zeros(3)}, "offset has shape"),
    (np.array([0, 1, 2, 3]), {"alpha": 1.0}, "integrates alpha out"),
])
def test_model_rejects_bad_input(y, kw, match):
    from rvm_ppl import build_model

    with pytest.raises(ValueError, match=match):
        build_model(np.ones((4, 1)), y, likelihood="poisson", **kw)


def test_offset_belongs_to_poisson():
    from rvm_ppl import build_model

    with pytest.raises(ValueError, match="belongs to the 'poisson' likelihood"):
        build_model(np.ones((3, 1)), np.zeros(3), offset=np.zeros(3))


def test_result_draws_alpha_and_uses_the_poisson_curvature():
    # alpha | w ~ Gamma(a + 1/2, b + w^2 / 2) after the fact, and E[gamma] from
    # Sigma = (Phi^T diag(exp(Phi w + offset)) Phi + A)^{-1} at each draw.
    import xarray as xr

    from rvm_ppl import build_model
    from rvm_ppl.model import alpha_given_weights, model_spec
    from rvm_ppl.pymc_fitters.results import _result

    Phi, y, offset = _count_data(4)
    model = build_model(Phi, y, likelihood="poisson", offset=offset, basis=["b", "x", "g"])
    w = np.random.default_rng(0).normal(scale=0.5, size=(2, 6, 3))
    post = xr.Dataset({"w": (("chain", "draw", "basis"), w)}, coords={"basis": ["b", "x", "g"]})
    res = _result("nuts", model, model_spec(model), post, np.random.default_rng(7), stats={})
    alpha = alpha_given_weights(w, {"a": 3.0, "b": 2.0}, np.random.default_rng(7))
    np.testing.assert_array_equal(res.draws["alpha"], alpha)
    gamma = np.mean([
        1 - a * np.diag(np.linalg.inv((Phi.T * np.exp(Phi @ wi + offset)) @ Phi + np.diag(a)))
        for wi, a in zip(w.reshape(-1, 3), alpha.reshape(-1, 3), strict=True)], axis=0)
    np.testing.assert_allclose(res.gamma, gamma, rtol=1e-10)
    np.testing.assert_allclose(res.mean, w.reshape(-1, 3).mean(axis=0))
    assert res.likelihood == "poisson" and res.beta is None


@pytest.mark.slow
def test_nuts_matches_the_posterior_by_quadrature():
    # N = 30 counts, two bases (bias, slope) with an offset, the default marginal form.
    # The exact posterior mean of the weights is a 2-D integral over w of the Poisson
    # likelihood times the Student-t prior, done on a fine grid (error ~1e-6). NUTS
    # must agree within 4 Monte Carlo standard errors, sd / sqrt(ESS) per weight.
    import arviz as az

    from rvm_ppl import build_model, fit_nuts

    rng = np.random.default_rng(11)
    x = np.linspace(-1, 1, 30)
    Phi = np.column_stack([np.ones(30), x])
    offset = np.log(rng.uniform(0.5, 2, size=30))
    y = rng.poisson(np.exp(1.2 + 0.8 * x + offset))
    model = build_model(Phi, y, likelihood="poisson", offset=offset)
    idata = fit_nuts(model, draws=500, tune=500, chains=2, random_seed=3, progressbar=False)
    assert idata.attrs["n_divergences"] == 0
    mode = posterior_mode(Phi, y, np.array([0.5, 0.5]), offset)
    sd = np.sqrt(np.diag(cho_covariance(mode.L)))
    g0 = np.linspace(mode.mu[0] - 8 * sd[0], mode.mu[0] + 8 * sd[0], 401)
    g1 = np.linspace(mode.mu[1] - 8 * sd[1], mode.mu[1] + 8 * sd[1], 401)
    W0, W1 = np.meshgrid(g0, g1, indexing="ij")
    eta = W0[..., None] * Phi[:, 0] + W1[..., None] * Phi[:, 1] + offset
    logp = (np.sum(stats.poisson.logpmf(y, np.exp(eta)), axis=-1)
            + stats.t.logpdf(W0, df=6, scale=np.sqrt(2 / 3))
            + stats.t.logpdf(W1, df=6, scale=np.sqrt(2 / 3)))
    p = np.exp(logp - logp.max())
    p /= p.sum()
    exact = np.array([np.sum(p * W0), np.sum(p * W1)])
    draws = idata.posterior["w"].values.reshape(-1, 2)
    ess = az.ess(idata, var_names=["w"])["w"].values
    mcse = draws.std(axis=0) / np.sqrt(ess)
    assert np.all(np.abs(draws.mean(axis=0) - exact) < 4 * mcse)
    # The true weights (1.2, 0.8) lie within 4 posterior standard deviations of the
    # posterior mean (this draw of the counts puts them 2.9 and 2.3 away).
    post_sd = np.sqrt([np.sum(p * (W0 - exact[0]) ** 2), np.sum(p * (W1 - exact[1]) ** 2)])
    assert np.all(np.abs(exact - [1.2, 0.8]) < 4 * post_sd)
