"""NUTS and ADVI (rvm_ppl.sampling) against exact references, on tiny problems.

Sizes are chosen so that the compiled functions are shared between tests
(PyTensor caches them by the data's shapes) and the file runs in about a
minute on two cores with a warm compile cache.
"""

import numpy as np
import pytest
from scipy import stats

from rvm_ppl.datasets import make_sinc
from rvm_ppl.evidence import posterior_given
from rvm_ppl.kernels import RBF, design_matrix
from rvm_ppl.sampling import (
    ESS_MIN_PER_CHAIN,
    NUTS_SAMPLERS,
    SamplingWarning,
    _warn_diagnostics,
    fit_advi,
    fit_nuts,
)

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


def test_marginal_logp_and_gradient_match_dense_mvnormal(rng):
    """The M x M form of build_model's marginal likelihood (Tipping 2001, eq. 7)."""
    from rvm_ppl.model import build_model

    N, M = 15, 6
    Phi = rng.normal(size=(N, M))
    y = rng.normal(size=N)
    alpha, beta = rng.gamma(2.0, 1.0, M), 3.0
    model = build_model(Phi, y)
    point = {"alpha_log__": np.log(alpha), "beta_log__": np.log(beta)}
    logp = model.compile_logp(vars=[model["y"]])(point)
    C = Phi @ np.diag(1 / alpha) @ Phi.T + np.eye(N) / beta
    dense = stats.multivariate_normal(np.zeros(N), C).logpdf(y)
    np.testing.assert_allclose(logp, dense, rtol=1e-12)

    f = model.compile_logp()
    grad = model.compile_dlogp()(point)
    x0 = np.r_[np.log(alpha), np.log(beta)]
    h = 1e-6
    fd = [
        (f({"alpha_log__": (x0 + h * e)[:M], "beta_log__": (x0 + h * e)[M]})
         - f({"alpha_log__": (x0 - h * e)[:M], "beta_log__": (x0 - h * e)[M]})) / (2 * h)
        for e in np.eye(M + 1)
    ]
    np.testing.assert_allclose(grad, fd, rtol=1e-6, atol=1e-6)


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


@pytest.mark.parametrize("parameterization", ["centered", "noncentered"])
def test_nuts_with_fixed_hyperparameters_matches_exact_posterior(parameterization):
    """alpha, beta fixed: the posterior of w is N(mu, Sigma) (Tipping 2001, eqs. 12-13)."""
    import arviz as az

    _, y, _, Phi, basis = _sinc_problem(20, seed=5, n_centres=5)
    M = Phi.shape[1]
    alpha = np.full(M, 0.5)
    beta = 20.0
    idata = fit_nuts(Phi, y, basis=basis, parameterization=parameterization, alpha=alpha,
                     beta=beta, draws=1000, tune=500, random_state=11)
    mu, Sigma, _ = posterior_given(Phi, y, alpha, beta)
    w = idata.posterior["w"]
    mcse = az.mcse(idata.posterior, var_names=["w"], method="mean")["w"].values
    est = w.mean(("chain", "draw")).values
    assert np.all(np.abs(est - mu) < 3 * mcse), (est - mu) / mcse
    sd = w.std(("chain", "draw")).values
    np.testing.assert_allclose(sd, np.sqrt(np.diag(Sigma)), rtol=0.15)
    np.testing.assert_allclose(idata.posterior["alpha"].values[0, 0], alpha)
    np.testing.assert_allclose(idata.posterior["beta"].values, beta)


def test_nuts_marginal_layout_and_exact_conditional_draws(tiny):
    _, y, _, Phi, basis = tiny
    draws, chains = 150, 2
    with pytest.warns(SamplingWarning, match="ESS"):  # 150 draws cannot reach ESS 200
        idata = fit_nuts(Phi, y, basis=basis, draws=draws, tune=150, chains=chains,
                         random_state=3)
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
    assert np.all((idata.fit["gamma"].values > 0) & (idata.fit["gamma"].values < 1))


def test_nuts_is_reproducible(tiny):
    _, y, _, Phi, basis = tiny
    kw = dict(basis=basis, draws=30, tune=30, chains=1, random_state=7)
    with pytest.warns(SamplingWarning):
        a = fit_nuts(Phi, y, **kw)
    with pytest.warns(SamplingWarning):
        b = fit_nuts(Phi, y, **kw)
    np.testing.assert_array_equal(a.posterior["w"].values, b.posterior["w"].values)


def test_advi_layout_elbo_and_noise_estimate():
    """Marginal mean-field ADVI on 50 noisy sinc points: noise sd within 30% of 0.1."""
    _, y, scale, Phi, basis = _sinc_problem(50, seed=0)
    idata = fit_advi(Phi, y, basis=basis, draws=300, random_state=0)
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
    assert idata.fit["q_sd_log_alpha"].dims == ("basis",)
    noise_sd = scale * float((1 / np.sqrt(post["beta"])).mean())
    assert abs(noise_sd - 0.1) < 0.03


def test_advi_warns_when_not_converged(tiny):
    from sklearn.exceptions import ConvergenceWarning

    _, y, _, Phi, basis = tiny
    with pytest.warns(ConvergenceWarning, match="did not converge"):
        idata = fit_advi(Phi, y, basis=basis, n_iter=300, window=100, tol=1e-9, draws=50,
                         random_state=0)
    assert idata.attrs["converged"] == 0
    assert idata.fit["elbo"].size == 300


def test_advi_rejects_unknown_method(tiny):
    _, y, _, Phi, basis = tiny
    with pytest.raises(ValueError, match="fullrank_advi"):
        fit_advi(Phi, y, basis=basis, method="svgd")


@pytest.mark.slow
def test_nutpie_backend_runs(tiny):
    pytest.importorskip("nutpie")
    _, y, _, Phi, basis = tiny
    with pytest.warns(SamplingWarning):
        idata = fit_nuts(Phi, y, basis=basis, nuts_sampler="nutpie", draws=100, tune=100,
                         random_state=0)
    assert idata.posterior["w"].shape == (2, 100, len(basis))
    assert idata.attrs["nuts_sampler"] == "nutpie"


@pytest.mark.slow
def test_bernoulli_nuts_and_advi_layout():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(30, 2))
    labels = (X[:, 0] + 0.5 * rng.normal(size=30) > 0).astype(float)
    Phi = design_matrix(X, X, RBF(gamma=0.5))
    basis = ["bias"] + [f"x_{i}" for i in range(30)]
    with pytest.warns(SamplingWarning):
        idata = fit_nuts(Phi, labels, basis=basis, likelihood="bernoulli", draws=100,
                         tune=100, random_state=0)
    assert "beta" not in idata.posterior
    assert idata.attrs["parameterization"] == "noncentered"
    assert idata.posterior["w"].shape == (2, 100, 31)
    va = fit_advi(Phi, labels, basis=basis, likelihood="bernoulli", draws=100, random_state=0)
    assert "beta" not in va.posterior
    assert va.fit["elbo"].dims == ("iteration",)
