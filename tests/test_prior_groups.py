"""The ``prior`` and ``log_prior`` groups: the hyperprior the fit used, drawn and evaluated."""

import matplotlib

matplotlib.use("Agg")

import arviz as az  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from _short_runs import short  # noqa: E402
from scipy import stats  # noqa: E402

from rvm_ppl import RVC, RVR  # noqa: E402
from rvm_ppl.datasets.loaders import make_sinc  # noqa: E402
from rvm_ppl.output.idata import PRIOR_DRAWS, log_gamma_draws, log_gamma_logpdf  # noqa: E402

# Each two-sided KS test below is one fixed-seed check at this level.
LEVEL = 1e-3
PRIORS = {"alpha_shape": 2.0, "alpha_rate": 3.0, "beta_shape": 2.5, "beta_rate": 0.5}


@pytest.fixture(scope="module")
def sinc():
    X, y = make_sinc(40, random_state=0)
    return X, 10.0 * y  # std(y) far from 1: the rates must carry var(y)


def _scaled(y):
    s2 = np.var(y)
    return {"a": 2.0, "b": 3.0 * s2, "c": 2.5, "d": 0.5 * s2}


def test_log_gamma_draws_follow_the_gamma():
    rng = np.random.default_rng(1)
    x = np.exp(log_gamma_draws(2.0, 3.0, 4000, rng))
    assert stats.kstest(x, stats.gamma(2.0, scale=1 / 3.0).cdf).pvalue > LEVEL


def test_log_gamma_draws_stay_finite_for_a_tiny_shape():
    # x ~ Gamma(a, b) with a -> 0: (b x)^a = Gamma(a + 1)^a U -> U, uniform on (0, 1);
    # numpy's own draws are all 0 here.
    a, b = 1e-6, 1e-6
    rng = np.random.default_rng(2)
    log_x = log_gamma_draws(a, b, 4000, rng)
    assert np.isfinite(log_x).all()
    assert (np.random.default_rng(2).gamma(a, 1 / b, 4000) == 0).mean() > 0.99
    assert stats.kstest(np.exp(a * (log_x + np.log(b))), "uniform").pvalue > LEVEL


def test_log_gamma_draws_refuse_an_improper_hyperprior():
    with pytest.raises(ValueError, match="positive shape and rate"):
        log_gamma_draws(0.0, 1.0, 3, np.random.default_rng(0))


def test_log_gamma_logpdf_is_the_density_of_log_alpha():
    x = np.array([1e-3, 0.4, 2.0, 30.0])
    # The Gamma density times the Jacobian d alpha / d log alpha = alpha.
    expected = stats.gamma(2.0, scale=1 / 3.0).logpdf(x) + np.log(x)
    np.testing.assert_allclose(log_gamma_logpdf(x, 2.0, 3.0), expected, rtol=1e-12)
    assert np.isneginf(log_gamma_logpdf(np.array([0.0, np.inf]), 2.0, 3.0)).all()
    # It integrates to one over log alpha.
    u = np.linspace(-30, 10, 40001)
    density = np.exp(log_gamma_logpdf(np.exp(u), 2.0, 3.0))
    assert np.trapezoid(density, u) == pytest.approx(1, abs=1e-8)


@pytest.mark.parametrize("method", ["evidence", "vb"])
def test_regression_groups_hold_the_scaled_hyperprior(sinc, method):
    X, y = sinc
    idata = RVR(gamma=1 / 9, method=method, random_state=0, draws=200, **PRIORS).fit(X, y).idata_
    p = _scaled(y)
    prior = idata.prior
    assert prior.sizes["draw"] == PRIOR_DRAWS
    assert list(prior["basis"].values) == list(idata.posterior["basis"].values)
    alpha = np.exp(prior["log_alpha"].values.ravel())
    beta = np.exp(prior["log_beta"].values.ravel())
    assert stats.kstest(alpha, stats.gamma(p["a"], scale=1 / p["b"]).cdf).pvalue > LEVEL
    assert stats.kstest(beta, stats.gamma(p["c"], scale=1 / p["d"]).cdf).pvalue > LEVEL
    np.testing.assert_allclose(prior["alpha"].values, np.exp(prior["log_alpha"].values))
    # w | alpha ~ N(0, 1/alpha) (Tipping 2001, eq. 5) with alpha ~ Gamma(a, b): marginally
    # the Student-t of eq. (32), 2a degrees of freedom, scale sqrt(b / a).
    t = stats.t(2 * p["a"], scale=np.sqrt(p["b"] / p["a"]))
    assert stats.kstest(prior["w"].values.ravel(), t.cdf).pvalue > LEVEL
    alpha, beta = idata.posterior["alpha"].values, idata.posterior["beta"].values
    np.testing.assert_allclose(
        idata.log_prior["alpha"].values,
        stats.gamma(p["a"], scale=1 / p["b"]).logpdf(alpha) + np.log(alpha), rtol=1e-10)
    np.testing.assert_allclose(
        idata.log_prior["beta"].values,
        stats.gamma(p["c"], scale=1 / p["d"]).logpdf(beta) + np.log(beta), rtol=1e-10)


def test_posterior_draws_do_not_depend_on_the_prior_group(sinc):
    # The prior draws come after the posterior's from the same seed: adding them
    # left the posterior as it was, and two hyperpriors give the same w draws of evidence.
    X, y = sinc
    a = RVR(gamma=1 / 9, random_state=0, draws=50).fit(X, y).idata_
    b = RVR(gamma=1 / 9, random_state=0, draws=50).fit(X, y).idata_
    np.testing.assert_array_equal(a.posterior["w"].values, b.posterior["w"].values)
    np.testing.assert_array_equal(a.prior["log_alpha"].values, b.prior["log_alpha"].values)


def test_default_hyperprior_is_usable_through_log_alpha(sinc):
    X, y = sinc
    idata = RVR(gamma=1 / 9, random_state=0, draws=50).fit(X, y).idata_
    log_alpha = idata.prior["log_alpha"].values
    assert np.isfinite(log_alpha).all()
    assert (idata.prior["alpha"].values == 0).mean() > 0.99  # what exp(log alpha) gives
    # a (log alpha + log b) = log U + a log Gamma(a + 1): uniform on the log scale.
    b = 1e-6 * np.var(y)
    assert stats.kstest(np.exp(1e-6 * (log_alpha.ravel() + np.log(b))), "uniform").pvalue > LEVEL


def test_classifier_groups_have_no_beta_and_one_per_class():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((60, 2))
    y3 = np.digitize(X[:, 0], [-0.5, 0.5])
    idata = RVC(gamma=0.5, method="vb", random_state=0, draws=50, alpha_shape=2.0,
                alpha_rate=1.0).fit(X, y3).idata_
    assert set(idata.prior.data_vars) == {"alpha", "log_alpha", "w"}
    assert set(idata.log_prior.data_vars) == {"alpha"}
    assert idata.prior["log_alpha"].dims == ("chain", "draw", "class", "basis")
    # A basis that one class's model pruned has alpha = inf there: log prior density -inf.
    pruned = np.isinf(idata.posterior["alpha"].values)
    assert pruned.any()
    assert np.all(np.isneginf(idata.log_prior["alpha"].values[pruned]))
    kept = ~pruned
    np.testing.assert_allclose(idata.log_prior["alpha"].values[kept],
                               log_gamma_logpdf(idata.posterior["alpha"].values[kept], 2.0, 1.0))
    # Each class's model has its power-scaling verdicts; a basis outside it has none.
    rel = idata.relevance
    assert rel["verdict"].dims == ("class", "basis")
    in_model = rel["in_model"].values
    assert (rel["verdict"].values[~in_model] == "n/a").all()
    assert np.isin(rel["verdict"].values[in_model],
                   ["data-driven", "prior-driven", "conflict", "undetermined"]).all()


def test_multinomial_groups_have_the_class_dimension():
    # Type-II ML takes no hyperprior: its groups hold the nearest proper one, a = b = 1e-6.
    rng = np.random.default_rng(1)
    X = rng.standard_normal((60, 2))
    y3 = np.digitize(X[:, 0], [-0.5, 0.5])
    idata = RVC(gamma=0.5, multi_class="multinomial", random_state=0,
                draws=50).fit(X, y3).idata_
    assert idata.prior["log_alpha"].dims == ("chain", "draw", "class", "basis")
    assert idata.log_prior["alpha"].dims == idata.posterior["alpha"].dims
    alpha = idata.posterior["alpha"].values
    with np.errstate(invalid="ignore"):
        expected = np.where(np.isinf(alpha), -np.inf,
                            stats.gamma(1e-6, scale=1e6).logpdf(alpha) + np.log(alpha))
    np.testing.assert_allclose(idata.log_prior["alpha"].values, expected)
    u = np.exp(1e-6 * (idata.prior["log_alpha"].values.ravel() + np.log(1e-6)))
    assert stats.kstest(u, "uniform").pvalue > LEVEL


def _check_psens_and_plots(idata):
    for component in ("prior", "likelihood"):
        sens = az.psens(idata, component=component)
        assert np.isfinite(sens["alpha"].values).all()
        assert sens["alpha"].shape == (idata.posterior.sizes["basis"],)
    shown = {"basis": list(idata.posterior["basis"].values[:2])}
    axes = az.plot_dist_comparison(idata, var_names=["alpha"], coords=shown)
    assert np.asarray(axes).shape == (2, 3)  # prior, posterior and both, per basis
    plt.close("all")


# ArviZ 0.23's plot_dist_comparison calls a matplotlib helper deprecated in 3.11.
@pytest.mark.filterwarnings("ignore::matplotlib.MatplotlibDeprecationWarning")
def test_psens_and_dist_comparison_run_on_vb(sinc):
    X, y = sinc
    _check_psens_and_plots(RVR(gamma=1 / 9, method="vb", random_state=0, draws=200,
                               **PRIORS).fit(X, y).idata_)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::matplotlib.MatplotlibDeprecationWarning")
def test_psens_and_dist_comparison_run_on_advi(sinc):
    X, y = sinc
    idata = RVR(gamma=1 / 9, method="advi", random_state=0, **PRIORS,
                **short("advi")).fit(X, y).idata_
    p = _scaled(y)
    np.testing.assert_allclose(idata.log_prior["alpha"].values,
                               log_gamma_logpdf(idata.posterior["alpha"].values, p["a"], p["b"]))
    _check_psens_and_plots(idata)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::rvm_ppl.pymc_fitters.nuts.SamplingWarning")  # 100 draws
@pytest.mark.parametrize("method", ["advi", "nuts"])
def test_pymc_entry_point_records_the_model_hyperprior(sinc, method):
    import rvm_ppl
    from rvm_ppl.kernels.kernel import RBF, design_matrix

    X, y = sinc
    Phi = design_matrix(X, X, RBF(gamma=1 / 9))
    model = rvm_ppl.build_model(Phi, y, priors={"a": 2.0, "b": 3.0, "c": 2.5, "d": 0.5})
    if method == "advi":
        idata = rvm_ppl.fit_advi(model, random_seed=0, window=250)
    else:
        idata = rvm_ppl.fit_nuts(model, random_seed=0, draws=100, tune=100, chains=1)
    log_alpha = idata.prior["log_alpha"].values.ravel()
    assert stats.kstest(np.exp(log_alpha), stats.gamma(2.0, scale=1 / 3.0).cdf).pvalue > LEVEL
    np.testing.assert_allclose(idata.log_prior["beta"].values,
                               log_gamma_logpdf(idata.posterior["beta"].values, 2.5, 0.5))


@pytest.mark.slow
def test_pymc_model_groups_follow_its_data_and_need_both_hyperpriors(sinc):
    import pymc as pm

    import rvm_ppl
    from rvm_ppl.kernels.kernel import RBF, design_matrix

    X, y = sinc
    Phi = design_matrix(X, X, RBF(gamma=1 / 9))
    model = rvm_ppl.build_model(Phi, y, priors={"a": 2.0, "b": 3.0, "c": 2.5, "d": 0.5})
    with model:
        pm.set_data({"alpha_rate": 7.0})  # the rate the fit then uses
    idata = rvm_ppl.fit_advi(model, random_seed=0, window=250)
    np.testing.assert_allclose(idata.log_prior["alpha"].values,
                               log_gamma_logpdf(idata.posterior["alpha"].values, 2.0, 7.0))
    fixed = rvm_ppl.build_model(Phi, y, priors={"a": 2.0, "b": 3.0}, beta=1.0)
    idata = rvm_ppl.fit_advi(fixed, random_seed=0, window=250)
    assert "prior" not in idata.groups() and "log_prior" not in idata.groups()
