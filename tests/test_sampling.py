"""NUTS and ADVI (rvm_ppl.pymc_fitters) against exact references, on tiny problems.

Sizes are chosen so that the compiled functions are shared between tests
(PyTensor caches them by the data's shapes) and the file runs in about a
minute and a half on two cores with a warm compile cache (nutpie compiles each
model anew, 5-8 s).
"""

import warnings

import arviz as az
import numpy as np
import pytest
from _compile_modes import SMALL
from scipy import stats
from scipy.integrate import quad
from scipy.special import digamma, expit

import rvm_ppl.pymc_fitters.nuts as nuts_mod
from rvm_ppl.closed_form.evidence import posterior_given
from rvm_ppl.datasets.loaders import make_sinc
from rvm_ppl.kernels.kernel import RBF, design_matrix
from rvm_ppl.model.build import build_model
from rvm_ppl.pymc_fitters.advi import fit_advi as _fit_advi
from rvm_ppl.pymc_fitters.nuts import (
    ESS_MIN_PER_CHAIN,
    NUTS_SAMPLERS,
    SamplingWarning,
    _warn_diagnostics,
)
from rvm_ppl.pymc_fitters.nuts import fit_nuts as _fit_nuts
from rvm_ppl.pymc_fitters.results import softplus_precisions

_MODEL_KEYS = ("basis", "likelihood", "priors", "parameterization", "alpha", "beta")


def _on_model(fitter, Phi, y, **kw):
    """``fitter`` on the model that build_model declares from the model keywords in ``kw``."""
    model_kw = {k: kw.pop(k) for k in _MODEL_KEYS if k in kw}
    return fitter(build_model(Phi, y, **model_kw), **kw)


def fit_nuts(Phi, y, **kw):
    return _on_model(_fit_nuts, Phi, y, **kw)


def fit_advi(Phi, y, **kw):
    return _on_model(_fit_advi, Phi, y, **kw)

pytestmark = [
    # PyMC's forkserver workers and numba may leave sockets/files to the GC.
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
]


def _sinc_problem(n, seed, n_centres=None):
    X, t = make_sinc(n, grid=False, random_state=seed)
    centres = X if n_centres is None else X[:: max(1, n // n_centres)]
    Phi = design_matrix(X, centres, RBF(gamma=1 / 9))
    basis = ["bias"] + [f"x_{i}" for i in range(Phi.shape[1] - 1)]
    scale = float(np.std(t))
    return X, t / scale, scale, Phi, basis


@pytest.fixture(scope="module")
def tiny():
    """Noisy sinc, 20 points, bias + 20 kernels, targets standardised."""
    return _sinc_problem(20, seed=5)


@pytest.fixture(scope="module")
def sinc50():
    """Noisy sinc, 50 points, bias + 50 kernels: ADVI's problem (its functions compiled once)."""
    return _sinc_problem(50, seed=0)


def test_bad_sampler_name_lists_the_valid_ones(tiny):
    _, y, _, Phi, basis = tiny
    with pytest.raises(ValueError, match="stan") as err:
        fit_nuts(Phi, y, basis=basis, nuts_sampler="stan")
    for name in NUTS_SAMPLERS:
        assert name in str(err.value)


def test_missing_sampler_package_is_an_import_error(tiny, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "numpyro" else real(name, *a)
    )
    _, y, _, Phi, basis = tiny
    with pytest.raises(ImportError, match="pip install numpyro"):
        fit_nuts(Phi, y, basis=basis, nuts_sampler="numpyro")


class _Sampled(Exception):
    """Raised by a stand-in for pm.sample, carrying the keyword arguments it got."""


@pytest.mark.parametrize("user, expected", [
    ({}, {"cores": 2, "use_grad_based_mass_matrix": False}),
    (None, {"cores": 2, "use_grad_based_mass_matrix": False}),  # pm.sample's own default
    ({"use_grad_based_mass_matrix": True, "maxdepth": 8},
     {"cores": 2, "use_grad_based_mass_matrix": True, "maxdepth": 8}),
])
def test_nutpie_gets_cores_and_the_mass_matrix_setting_and_the_user_has_the_last_word(
        tiny, monkeypatch, user, expected):
    import pymc as pm

    def fake_sample(**kwargs):
        raise _Sampled(kwargs)

    monkeypatch.setattr(pm, "sample", fake_sample)
    # nutpie's fits go through the compiled-model store with what pm.sample would get.
    monkeypatch.setattr(nuts_mod, "_sample_nutpie", lambda model, kwargs: fake_sample(**kwargs))
    _, y, _, Phi, basis = tiny
    with pytest.raises(_Sampled) as got:
        fit_nuts(Phi, y, basis=basis, chains=2, cores=2, nuts_sampler_kwargs=user)
    kwargs = got.value.args[0]
    assert kwargs["nuts_sampler"] == "nutpie"
    assert kwargs["nuts_sampler_kwargs"] == expected
    assert "w" not in kwargs["var_names"]  # drawn afterwards from the factor, not compiled


def test_marginal_logp_and_gradient_match_dense_mvnormal(rng):
    """The M x M form of build_model's marginal likelihood (Tipping 2001, eq. 15)."""
    from rvm_ppl.model.build import build_model

    N, M = 15, 6
    Phi = rng.normal(size=(N, M))
    y = rng.normal(size=N)
    alpha, beta = rng.gamma(2.0, 1.0, M), 3.0
    model = build_model(Phi, y)
    point = {"alpha_log__": np.log(alpha), "beta_log__": np.log(beta), "w_whitened__": np.zeros(M)}
    logp = model.compile_logp(vars=[model["y"]], mode=SMALL)(point)
    C = Phi @ np.diag(1 / alpha) @ Phi.T + np.eye(N) / beta
    dense = stats.multivariate_normal(np.zeros(N), C).logpdf(y)
    np.testing.assert_allclose(logp, dense, rtol=1e-12)

    f = model.compile_logp(mode=SMALL)
    grad = model.compile_dlogp(mode=SMALL)(point)
    x0 = np.r_[np.log(alpha), np.log(beta)]
    h = 1e-6
    fd = [
        (f({"alpha_log__": (x0 + h * e)[:M], "beta_log__": (x0 + h * e)[M], "w_whitened__": np.zeros(M)})
         - f({"alpha_log__": (x0 - h * e)[:M], "beta_log__": (x0 - h * e)[M],
              "w_whitened__": np.zeros(M)})) / (2 * h)
        for e in np.eye(M + 1)
    ]
    np.testing.assert_allclose(grad[: M + 1], fd, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(grad[M + 1:], 0.0)  # d/dz of the whitened weights' N(0, I) at 0


BAD_MODELS = [
    ("no rows", lambda P, y: (P[:0], y[:0]), {}, "at least one row"),
    ("no columns", lambda P, y: (P[:, :0], y), {}, "at least one row and one basis"),
    ("1-D Phi", lambda P, y: (P[:, 0], y), {}, "2-D design matrix"),
    ("short y", lambda P, y: (P, y[:-1]), {}, "to match Phi"),
    ("NaN in Phi", lambda P, y: (np.where(P > 0.99, np.nan, P), y), {}, "finite"),
    ("alpha of the wrong length", lambda P, y: (P, y), {"alpha": np.ones(2)}, r"alpha has shape \(2,\)"),
    ("alpha of zero", lambda P, y: (P, y), {"alpha": 0.0}, "positive and finite"),
    ("infinite alpha", lambda P, y: (P, y), {"alpha": np.inf}, "positive and finite"),
    ("negative beta", lambda P, y: (P, y), {"beta": -1.0}, "positive and finite"),
    ("beta of shape (3,)", lambda P, y: (P, y), {"beta": np.ones(3)}, r"beta has shape \(3,\)"),
]


@pytest.mark.parametrize("make,kw,match", [b[1:] for b in BAD_MODELS], ids=[b[0] for b in BAD_MODELS])
def test_build_model_refuses_what_defines_no_model(tiny, make, kw, match):
    _, y, _, Phi, _ = tiny
    Phi, y = make(Phi, y)
    with pytest.raises(ValueError, match=match):
        build_model(Phi, y, parameterization="centered", **kw)


def test_warning_thresholds():
    ok = dict(n_divergences=0, max_rhat=1.005, max_rhat_at="log_beta",
              min_ess_bulk=2 * ESS_MIN_PER_CHAIN, min_ess_bulk_at="log_beta")
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _warn_diagnostics(ok, chains=2)
    for bad, match in ((dict(n_divergences=3), "3 divergent"),
                       (dict(max_rhat=1.05), "r_hat 1.050"),
                       (dict(max_rhat=np.nan), "r_hat nan"),
                       (dict(min_ess_bulk=150.0), "ESS 150 < 200")):
        with pytest.warns(SamplingWarning, match=match):
            _warn_diagnostics({**ok, **bad}, chains=2)


@pytest.mark.slow
@pytest.mark.parametrize("parameterization", ["centered", "noncentered"])
def test_nuts_with_fixed_hyperparameters_matches_exact_posterior(parameterization):
    """alpha, beta fixed: the posterior of w is N(mu, Sigma) (Tipping 2001, eqs. 12-13)."""
    import arviz as az

    _, y, _, Phi, basis = _sinc_problem(20, seed=5, n_centres=5)
    M = Phi.shape[1]
    alpha = np.full(M, 0.5)
    beta = 20.0
    idata = fit_nuts(Phi, y, basis=basis, parameterization=parameterization, alpha=alpha,
                     beta=beta, draws=1000, tune=500, random_seed=11)
    mu, Sigma, _ = posterior_given(Phi, y, alpha, beta)
    w = idata.posterior["w"]
    mcse = az.mcse(idata.posterior, var_names=["w"], method="mean")["w"].values
    est = w.mean(("chain", "draw")).values
    assert np.all(np.abs(est - mu) < 3 * mcse), (est - mu) / mcse
    sd = w.std(("chain", "draw")).values
    np.testing.assert_allclose(sd, np.sqrt(np.diag(Sigma)), rtol=0.15)
    np.testing.assert_allclose(idata.posterior["alpha"].values[0, 0], alpha)
    np.testing.assert_allclose(idata.posterior["beta"].values, beta)


def test_softplus_precisions_changes_the_scale_not_the_density():
    """log p(v) = log p(u = log alpha(v)) + log|d alpha / d v| - log|d alpha / d u|."""
    _, y, _, Phi, basis = _sinc_problem(20, seed=5, n_centres=5)
    model = build_model(Phi, y, basis=basis)
    soft = softplus_precisions(model)
    assert {soft.rvs_to_values[rv].name for rv in soft.free_RVs} == {
        "alpha_softplus_rate__", "beta_softplus_rate__", "w_whitened__"}
    b = d = 1e-6  # DEFAULT_PRIORS
    v = np.linspace(-40.0, 30.0, Phi.shape[1])  # from alpha = 4e-12 to 3e7, past the wall at 1/b
    v_beta = 2.0
    alpha, beta = np.logaddexp(0.0, v) / b, np.logaddexp(0.0, v_beta) / d
    z = np.linspace(-1.0, 1.0, Phi.shape[1])
    got = soft.compile_logp(mode=SMALL)({"alpha_softplus_rate__": v,
                                         "beta_softplus_rate__": v_beta, "w_whitened__": z})
    on_log = model.compile_logp(mode=SMALL)({"alpha_log__": np.log(alpha),
                                             "beta_log__": np.log(beta), "w_whitened__": z})
    jacobians = (np.sum(-np.logaddexp(0.0, -v) - np.log(b) - np.log(alpha))
                 - np.logaddexp(0.0, -v_beta) - np.log(d) - np.log(beta))
    assert got == pytest.approx(on_log + jacobians, rel=1e-12)
    # forward inverts backward across the range, far past the wall included
    transform, inputs = soft.rvs_to_transforms[soft["alpha"]], soft["alpha"].owner.inputs
    far = np.linspace(-40.0, 800.0, 50)
    np.testing.assert_allclose(transform.forward(transform.backward(far, *inputs), *inputs)
                               .eval(mode=SMALL),
                               far,
                               rtol=1e-12, atol=1e-12)
    # a transform other than PyMC's log (here: the softplus scale itself) is left alone,
    # and a model with no free precision comes back as it is
    assert softplus_precisions(soft) is soft
    centred = build_model(Phi, y, basis=basis, parameterization="centered", alpha=1.0, beta=10.0)
    assert softplus_precisions(centred) is centred
    fixed = softplus_precisions(build_model(Phi, y, basis=basis, beta=10.0))
    assert {fixed.rvs_to_values[rv].name for rv in fixed.free_RVs} == {
        "alpha_softplus_rate__", "w_whitened__"}


def _log_alpha_posterior_on_grid(Phi, y, beta, priors, u):
    """log p(log alpha_1, log alpha_2 | y) on the grid ``u`` x ``u``, beta fixed (M = 2).

    Brute force in the N x N form: ``y ~ N(0, beta^{-1} I + Phi A^{-1} Phi^T)``
    (Tipping 2001, eq. 15) and the Gamma prior on the log scale.
    """
    a, b = priors["a"], priors["b"]
    u1, u2 = np.meshgrid(u, u, indexing="ij")
    inv_alpha = np.exp(-np.stack([u1.ravel(), u2.ravel()], axis=1))  # (G, 2)
    C = np.eye(len(y)) / beta + np.einsum("nm,gm,km->gnk", Phi, inv_alpha, Phi)
    _, logdet = np.linalg.slogdet(C)
    solved = np.linalg.solve(C, np.broadcast_to(y[:, None], (len(C), len(y), 1)))[..., 0]
    quad = solved @ y
    loglike = -0.5 * (logdet + quad)
    log_prior = a * (u1 + u2) - b * (np.exp(u1) + np.exp(u2))
    return loglike.reshape(u1.shape) + log_prior


def _cdf(density, u):
    """The CDF at the grid points of a density on the grid ``u`` (trapezoid rule)."""
    cells = 0.5 * (density[1:] + density[:-1]) * np.diff(u)
    cdf = np.concatenate([[0.0], np.cumsum(cells)])
    return cdf / cdf[-1]


@pytest.mark.slow
def test_nuts_log_alpha_matches_brute_force_for_a_relevant_and_a_pruned_basis():
    """The posterior NUTS samples (on the softplus scale) is the exact one.

    Basis 1 carries the signal; basis 2 is noise, so its alpha follows the
    prior up to the wall at 1/b (the case the softplus scale is for).
    """
    rng = np.random.default_rng(4)
    N, beta = 15, 25.0
    Phi = rng.normal(size=(N, 2))
    y = 0.8 * Phi[:, 0] + rng.normal(scale=beta**-0.5, size=N)
    priors = {"a": 1e-6, "b": 1e-6}
    u = np.linspace(-25.0, 20.0, 451)
    logp = _log_alpha_posterior_on_grid(Phi, y, beta, priors, u)
    p = np.exp(logp - logp.max())
    idata = fit_nuts(Phi, y, beta=beta, draws=1000, tune=1000, chains=4, random_seed=2)
    log_alpha = np.log(idata.posterior["alpha"].values)  # (chain, draw, 2)
    for m, marginal in enumerate((p.sum(axis=1), p.sum(axis=0))):
        cdf = _cdf(marginal, u)
        for q in (0.1, 0.5, 0.9):
            cut = np.interp(q, cdf, u)
            below = (log_alpha[..., m] <= cut).astype(float)
            se = np.sqrt(q * (1 - q) / az.ess(below))
            assert abs(below.mean() - q) < 4 * se, (m, q, below.mean(), se)
    assert idata.attrs["n_divergences"] == 0


@pytest.mark.slow
def test_nuts_marginal_layout_and_exact_conditional_draws(tiny):
    _, y, _, Phi, basis = tiny
    draws, chains = 150, 2
    with pytest.warns(SamplingWarning, match="ESS"):  # 150 draws cannot reach ESS 200
        idata = fit_nuts(Phi, y, basis=basis, draws=draws, tune=150, chains=chains,
                         random_seed=3)
    post = idata.posterior
    assert {"posterior", "sample_stats", "observed_data", "fit"} <= set(idata.groups())
    assert post["w"].dims == ("chain", "draw", "basis")
    assert post["alpha"].dims == ("chain", "draw", "basis")
    assert post["beta"].dims == ("chain", "draw")
    assert post["w"].shape == (chains, draws, len(basis))
    assert list(post["basis"].values) == basis
    assert list(idata.fit["basis"].values) == basis
    np.testing.assert_array_equal(idata.observed_data["y"].values, y)
    assert "diverging" in idata.sample_stats
    for key in ("n_divergences", "max_rhat", "min_ess_bulk_log_alpha", "wall_time_s",
                "sampling_time_s", "ess_per_s"):
        assert np.isfinite(idata.attrs[key])
    assert idata.attrs["inference_method"] == "nuts"

    # Every w is a draw from N(mu, Sigma) at its own (alpha, beta): the mean of the
    # draws differs from the average of the exact conditional means by Monte Carlo
    # noise whose variance is the average Sigma_mm over the number of draws.
    alpha = post["alpha"].values.reshape(-1, len(basis))
    beta = post["beta"].values.ravel()
    mus, var = [], []
    for a, b in zip(alpha, beta, strict=True):
        mu, Sigma, _ = posterior_given(Phi, y, a, b)
        mus.append(mu)
        var.append(np.diag(Sigma))
    mus = np.array(mus)
    se = np.sqrt(np.mean(var, axis=0) / len(beta))
    w_mean = post["w"].values.reshape(-1, len(basis)).mean(axis=0)
    assert np.all(np.abs(w_mean - mus.mean(axis=0)) < 4 * se)
    # The stored Rao-Blackwellised mean is exactly that average.
    np.testing.assert_allclose(idata.fit["mean"].values, mus.mean(axis=0), rtol=1e-6, atol=1e-9)
    gamma = idata.relevance["gamma"].values
    assert np.all((gamma > 0) & (gamma < 1))


@pytest.mark.slow
def test_nuts_is_reproducible(tiny):
    _, y, _, Phi, basis = tiny
    kw = dict(basis=basis, draws=30, tune=30, chains=2, random_seed=7)  # nutpie: threads
    with pytest.warns(SamplingWarning):
        a = fit_nuts(Phi, y, **kw)
    with pytest.warns(SamplingWarning):
        b = fit_nuts(Phi, y, **kw)
    np.testing.assert_array_equal(a.posterior["w"].values, b.posterior["w"].values)


@pytest.mark.slow
def test_advi_layout_elbo_and_noise_estimate(sinc50):
    """Marginal mean-field ADVI on 50 noisy sinc points: noise sd within 30% of 0.1."""
    _, y, scale, Phi, basis = sinc50
    idata = fit_advi(Phi, y, basis=basis, draws=300, random_seed=0)
    post = idata.posterior
    assert {"posterior", "observed_data", "fit"} <= set(idata.groups())
    assert post["w"].shape == (1, 300, len(basis))
    assert post["alpha"].dims == ("chain", "draw", "basis")
    assert list(post["basis"].values) == basis
    elbo = idata.fit["elbo"]
    assert elbo.dims == ("iteration",)
    assert elbo.size == idata.attrs["n_iter"]
    assert idata.attrs["converged"] == 1
    # The ELBO rose from its start (medians of the first and last 500 iterations).
    assert np.median(elbo.values[-500:]) > np.median(elbo.values[:500])
    assert idata.fit["q_sd_log_alpha"].dims == ("candidate",)
    noise_sd = scale * float((1 / np.sqrt(post["beta"])).mean())
    assert abs(noise_sd - 0.1) < 0.03


@pytest.mark.slow
def test_advi_warns_when_not_converged(sinc50):
    from sklearn.exceptions import ConvergenceWarning

    _, y, _, Phi, basis = sinc50
    with pytest.warns(ConvergenceWarning, match="did not converge"):
        idata = fit_advi(Phi, y, basis=basis, n=300, window=100, tol=1e-9, draws=50,
                         random_seed=0)
    assert idata.attrs["converged"] == 0
    assert idata.fit["elbo"].size == 300


@pytest.mark.parametrize("likelihood", ["gaussian", "bernoulli", "poisson", "categorical"])
def test_advi_starts_at_pymcs_initial_point(tiny, likelihood):
    # ADVI's start is PyMC's initial point, found without PyMC's virtual machine. The Gamma
    # rates are data (pm.Data), and a regression's alpha starts at its mean a / b.
    from rvm_ppl.pymc_fitters.advi import initial_point

    _, y, _, Phi, _ = tiny
    t = {"gaussian": y, "bernoulli": y > 0, "poisson": np.round(np.exp(y)),
         "categorical": np.digitize(y, [-0.5, 0.5])}[likelihood]
    for b in (2.0, 0.3):
        model = build_model(Phi, t, likelihood=likelihood,
                            priors=dict(a=2.0, b=b, c=2.0, d=b / 10))
        ours, pymcs = initial_point(model), model.initial_point()
        assert list(ours) == list(pymcs)
        for name in pymcs:
            np.testing.assert_array_equal(ours[name], pymcs[name])
        if likelihood == "gaussian":  # the other likelihoods' models integrate alpha out
            np.testing.assert_allclose(ours["alpha_log__"], np.log(2.0 / b))


def test_advi_rejects_unknown_method(tiny):
    _, y, _, Phi, basis = tiny
    with pytest.raises(ValueError, match="fullrank_advi"):
        fit_advi(Phi, y, basis=basis, method="svgd")


@pytest.mark.slow
def test_pymc_sampler_agrees_with_the_default_nutpie(tiny):
    """PyMC's NUTS, one argument away, finds the same posterior mean of log beta."""
    _, y, _, Phi, basis = tiny
    kw = dict(basis=basis, draws=400, tune=400, chains=2, random_seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SamplingWarning)
        a = fit_nuts(Phi, y, **kw)
        # PyMC's chains one after the other in this process: the draws of two worker
        # processes, without each worker compiling the model again.
        b = fit_nuts(Phi, y, nuts_sampler="pymc", cores=1, **kw)
    assert (a.attrs["nuts_sampler"], b.attrs["nuts_sampler"]) == ("nutpie", "pymc")
    assert b.attrs["compile_mode"] == "NUMBA"
    log_beta = [np.log(i.posterior["beta"]) for i in (a, b)]
    se = np.hypot(*[float(az.mcse(v)["beta"]) for v in log_beta])
    assert abs(float(log_beta[0].mean() - log_beta[1].mean())) < 4 * se


def _logistic_problem():
    """30 labels from a logistic model on [1, x]: two weights, so quadrature is exact."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=30)
    Phi = np.column_stack([np.ones(30), x])
    t = (rng.random(30) < expit(0.3 + 1.5 * x)).astype(float)
    return Phi, t


def _quadrature_posterior(Phi, t, priors):
    """Posterior of w on a 2-D grid: Student-t priors (Tipping 2001, eq. 32) times the likelihood."""
    g = np.linspace(-4, 6, 1001)
    W0, W1 = np.meshgrid(g, g, indexing="ij")
    W = np.stack([W0.ravel(), W1.ravel()], axis=1)
    prior = stats.t(df=2 * priors["a"], scale=np.sqrt(priors["b"] / priors["a"]))
    A = W @ Phi.T
    log_post = prior.logpdf(W).sum(axis=1) + (t * A - np.logaddexp(0, A)).sum(axis=1)
    p = np.exp(log_post - log_post.max())
    return W, p / p.sum()


def test_bernoulli_marginal_model_density_and_alpha_draws():
    from rvm_ppl.model.build import BERNOULLI_PRIORS, alpha_given_weights, build_model

    Phi, t = _logistic_problem()
    model = build_model(Phi, t, likelihood="bernoulli")
    assert [rv.name for rv in model.free_RVs] == ["w"]  # alpha integrated out
    logp = model.compile_logp(jacobian=False, mode=SMALL)
    a, b = BERNOULLI_PRIORS["a"], BERNOULLI_PRIORS["b"]
    for w in ([0.3, -1.2], [2.0, 0.01], [-40.0, 3.0]):
        w = np.array(w)
        # p(w_m) = int N(w_m | 0, 1/alpha) Gamma(alpha | a, b) d alpha, by quadrature
        mix = [quad(lambda al, wm=wm: stats.norm.pdf(wm, scale=al**-0.5)
                    * stats.gamma.pdf(al, a, scale=1 / b), 0, np.inf, epsabs=0, epsrel=1e-12,
                    limit=200)[0] for wm in w]
        f = Phi @ w
        ref = np.sum(np.log(mix)) + np.sum(t * f - np.logaddexp(0, f))
        value = {"w_scaled_asinh__": np.arcsinh(w / np.sqrt(2 * b))}
        assert logp(value) == pytest.approx(ref, rel=1e-8)
    # alpha | w ~ Gamma(a + 1/2, b + w^2 / 2): mean and variance of 200 000 draws
    w = np.array([0.0, 0.5, 3.0])
    draws = alpha_given_weights(np.broadcast_to(w, (200_000, 3)), BERNOULLI_PRIORS,
                                np.random.default_rng(0))
    shape, rate = a + 0.5, b + 0.5 * w**2
    np.testing.assert_allclose(draws.mean(axis=0), shape / rate, rtol=0.01)
    np.testing.assert_allclose(draws.var(axis=0), shape / rate**2, rtol=0.02)
    with pytest.raises(ValueError, match="integrates alpha out"):
        build_model(Phi, t, likelihood="bernoulli", alpha=np.ones(2))


@pytest.mark.slow
def test_bernoulli_nuts_matches_quadrature_and_advi_is_close():
    from rvm_ppl.model.build import BERNOULLI_PRIORS

    Phi, t = _logistic_problem()
    W, p = _quadrature_posterior(Phi, t, BERNOULLI_PRIORS)
    mean = p @ W
    # E[log alpha_m] = E[ psi(a + 1/2) - log(b + w_m^2 / 2) ] (alpha | w is Gamma)
    a, b = BERNOULLI_PRIORS["a"], BERNOULLI_PRIORS["b"]
    mean_log_alpha = p @ (digamma(a + 0.5) - np.log(b + 0.5 * W**2))

    idata = fit_nuts(Phi, t, basis=["bias", "x"], likelihood="bernoulli",
                     random_seed=0)
    assert idata.attrs["parameterization"] == "marginal"
    assert "beta" not in idata.posterior
    assert idata.attrs["n_divergences"] == 0 and idata.attrs["max_rhat"] <= 1.01
    mcse = az.mcse(idata, var_names=["w"])["w"].values
    np.testing.assert_array_less(np.abs(idata.posterior["w"].mean(("chain", "draw")) - mean),
                                 4 * mcse)
    log_alpha = np.log(idata.posterior["alpha"].values)
    se = log_alpha.std(axis=(0, 1)) / np.sqrt(idata.attrs["min_ess_bulk_log_alpha"])
    np.testing.assert_array_less(np.abs(log_alpha.mean(axis=(0, 1)) - mean_log_alpha), 4 * se)

    va = fit_advi(Phi, t, basis=["bias", "x"], likelihood="bernoulli", draws=2000,
                  random_seed=0)
    assert va.attrs["parameterization"] == "marginal" and va.attrs["converged"]
    # mean field on asinh(w / c): a Gaussian in that scale, close to the exact mean
    np.testing.assert_allclose(va.fit["mean"].values, mean, atol=0.15)


def test_advi_progress_bar_ends_full_when_the_fit_stops_early():
    """PyMC's own bar counts towards the iteration cap and stays at, e.g., 14 %."""
    from rvm_ppl.pymc_fitters.advi import _AdviProgress

    bar = _AdviProgress(False, 50_000, 1000)
    with bar:
        for i in range(1, 2501):
            bar(None, np.full(i, 3.0), i)
        assert bar.progress.tasks[0].completed == 2500
        assert bar.progress.tasks[0].fields["loss"] == "median loss 3"
        bar.finish(2500, converged=True)
    task = bar.progress.tasks[0]
    assert task.total == task.completed == 2500 and task.fields["loss"] == "converged"


def test_weights_drawn_outside_the_trace_are_the_exact_conditional_draws():
    """The marginal regression's w is left out of PyMC's trace and drawn from the
    factor of H = beta Phi'Phi + A: w = mu + L^{-T} z, so L^T (w - mu) = z, with
    mu = beta H^{-1} Phi't (Tipping 2001, eqs. 12-13)."""
    from scipy import linalg

    from rvm_ppl.pymc_fitters.nuts import _trace_var_names
    from rvm_ppl.pymc_fitters.results import _conditional_moments

    X, y = make_sinc(30, random_state=3)
    Phi = design_matrix(X, X, RBF(gamma=1 / 9))
    rng = np.random.default_rng(0)
    alpha = np.exp(rng.normal(0.0, 2.0, size=(2, 3, Phi.shape[1])))
    beta = np.exp(rng.normal(4.0, 0.5, size=(2, 3)))
    z = rng.standard_normal(alpha.shape)
    PtP, Pty = Phi.T @ Phi, Phi.T @ y
    *_, w = _conditional_moments(PtP, Pty, alpha, beta, z)
    for idx in np.ndindex(2, 3):
        H = beta[idx] * PtP + np.diag(alpha[idx])
        mu = linalg.solve(H, beta[idx] * Pty, assume_a="pos")
        L = linalg.cholesky(H, lower=True)
        np.testing.assert_allclose(L.T @ (w[idx] - mu), z[idx], atol=1e-8)
    model = build_model(Phi, y)
    assert _trace_var_names(model, model.rvm_spec) == ["alpha", "beta", "w_whitened__"]
    # Models where w is sampled (or the likelihood is not Gaussian) keep every variable.
    centred = build_model(Phi, y, parameterization="centered")
    assert _trace_var_names(centred, centred.rvm_spec) is None
