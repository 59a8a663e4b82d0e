"""Every method behind one estimator: the same layout, predictions, reproducibility."""

import logging

import numpy as np
import pytest
from _short_runs import SAMPLED, short

from rvm_ppl import RVC, RVR
from rvm_ppl.datasets.loaders import load_ripley, make_sinc, sinc
from rvm_ppl.inference.methods import FIT_METHODS
from rvm_ppl.output.idata import PRIOR_DRAWS

logging.getLogger("pymc").setLevel(logging.ERROR)
# Chains this short cannot pass r-hat <= 1.01 / ESS >= 100 per chain; the
# warning is tested in test_sampling.py, the plumbing here.
pytestmark = pytest.mark.filterwarnings("ignore::rvm_ppl.pymc_fitters.nuts.SamplingWarning")


@pytest.fixture(scope="module")
def data():
    return make_sinc(30, random_state=4)


@pytest.fixture(scope="module")
def fits(data):
    X, y = data
    return {m: RVR(gamma=1 / 9, random_state=0, **short(m)).fit(X, y, method=m) for m in FIT_METHODS}


@pytest.mark.slow
def test_every_method_returns_the_same_layout(fits):
    for method, m in fits.items():
        idata = m.idata_
        post = idata.posterior
        assert idata.attrs["inference_method"] == method
        assert post["w"].dims == ("chain", "draw", "basis")
        assert post["alpha"].dims == ("chain", "draw", "basis")
        assert post["beta"].dims == ("chain", "draw")
        assert list(idata.relevance.basis.values[:2]) == ["bias", "x_0"]
        assert list(post.basis.values) == [f"x_{i - 1}" if i else "bias" for i in m.active_]
        assert set(idata.relevance.data_vars) == {"relevant", "gamma", "alpha", "in_model",
                                                  "prior_sensitivity",
                                                  "likelihood_sensitivity", "verdict"}
        # Which alpha the data decide: a verdict on every basis in the model, none for the
        # evidence method's point estimate.
        verdict = idata.relevance["verdict"].values[idata.relevance["in_model"].values]
        assert (verdict == "n/a").all() if method == "evidence" else (verdict != "n/a").all()
        np.testing.assert_array_equal(np.flatnonzero(idata.relevance.relevant.values[1:]), m.relevance_)
        for group in ("log_likelihood", "posterior_predictive"):
            assert idata[group]["y"].dims == ("chain", "draw", "obs"), (method, group)
        np.testing.assert_array_equal(idata.observed_data["y"].values, m.y_fit_)
        np.testing.assert_array_equal(idata.constant_data["X"].values, m.X_fit_)
        # The hyperprior: drawn, and its log density at every posterior draw.
        assert idata.log_prior["alpha"].dims == post["alpha"].dims
        assert idata.log_prior["beta"].dims == post["beta"].dims
        assert np.isfinite(idata.log_prior["alpha"].values).all()
        assert idata.prior["log_alpha"].sizes["draw"] == PRIOR_DRAWS
        for group in idata.groups():  # the same attributes, in the units of y, everywhere
            assert idata[group].attrs["inference_method"] == method
            assert "rvm_ppl_version" in idata[group].attrs
    assert "log_evidence" in fits["evidence"].idata_.fit
    for method in ("vb", "advi"):
        assert fits[method].idata_.fit["elbo"].dims == ("iteration",)
    assert fits["nuts"].idata_.sample_stats["diverging"].dims == ("chain", "draw")


@pytest.mark.slow
def test_every_method_predicts_sinc(fits):
    Xt = np.linspace(-10, 10, 200)[:, None]
    for method, m in fits.items():
        mean, std = m.predict(Xt, return_std=True)
        rms = np.sqrt(np.mean((mean - sinc(Xt[:, 0])) ** 2))
        assert rms < 0.1, method
        assert np.all(std >= np.sqrt(1 / m.beta_) * (1 - 1e-9)), method


@pytest.mark.slow
def test_predictive_moments_match_posterior_draws(fits, data):
    X, _ = data
    Xt = np.array([[-2.0], [1.0]])
    for method in ("vb", "advi", "nuts"):
        m = fits[method]
        mean, std = m.predict(Xt, return_std=True)
        w = m.idata_.posterior["w"].values.reshape(-1, len(m.active_))
        f = w @ m._design(Xt, m.active_).T
        np.testing.assert_allclose(f.mean(0), mean, atol=4 * f.std(0).max() / np.sqrt(len(f)))


@pytest.mark.parametrize("method", [pytest.param(m, marks=pytest.mark.slow) if m in SAMPLED else m
                                    for m in sorted(FIT_METHODS)])
def test_same_random_state_same_result(data, method):
    X, y = data
    a = RVR(gamma=1 / 9, random_state=7, **short(method)).fit(X, y, method=method)
    b = RVR(gamma=1 / 9, random_state=7, **short(method)).fit(X, y, method=method)
    np.testing.assert_array_equal(a.idata_.posterior["w"].values, b.idata_.posterior["w"].values)
    np.testing.assert_array_equal(a.predict(X, return_std=True), b.predict(X, return_std=True))


@pytest.mark.slow
@pytest.mark.parametrize("method", ["advi", "nuts"])
def test_classifier_sampling_methods(method):
    X, y, Xt, yt = load_ripley()
    c = RVC(gamma=4.0, random_state=0, **short(method)).fit(X[::5], y[::5], method=method)
    P = c.predict_proba(Xt)
    assert c.score(Xt, yt) > 0.8
    assert "beta" not in c.idata_.posterior


# ArviZ computes r-hat and an HDI of the evidence fit's constant alpha draws
# (a point estimate) and of its inf (pruned) entries, which numpy warns about;
# arviz 0.23's plot_trace trips a matplotlib deprecation.
@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.filterwarnings("ignore:Your data appears to have a single value:UserWarning")
@pytest.mark.filterwarnings("ignore::matplotlib.MatplotlibDeprecationWarning")
def test_plain_arviz_calls_work_on_every_result(fits):
    import arviz as az
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    for method, m in fits.items():
        idata = m.idata_
        a, b = (str(v) for v in idata.posterior.basis.values[[0, -1]])
        summary = az.summary(idata, var_names=["w", "beta"], coords={"basis": [a, b]})
        assert list(summary.index) == [f"w[{a}]", f"w[{b}]", "beta"], method
        np.testing.assert_allclose(summary.loc[f"w[{a}]", "mean"], m.coef_[m.active_[0]], atol=0.05)
        az.plot_forest(idata, var_names=["alpha"], coords={"basis": [a, b]})
        az.plot_trace(idata, var_names=["beta"])
        plt.close("all")


@pytest.mark.slow
def test_advi_is_in_the_units_of_y(data):
    """A fit to ``f y`` is the fit to ``y`` re-expressed: alpha ~ f^-2, w ~ f, log alpha - 2 log f.

    The hyperprior rates are scaled by ``var(y)`` instead of the results, so
    the two optimisations take the same steps, shifted.
    """
    X, y = data
    f = 1e3
    kw = dict(gamma=1 / 9, random_state=0, **short("advi", draws=50))
    a = RVR(**kw).fit(X, y, method="advi").idata_
    b = RVR(**kw).fit(X, f * y, method="advi").idata_
    np.testing.assert_allclose(b.posterior["alpha"], a.posterior["alpha"] / f**2, rtol=1e-6)
    np.testing.assert_allclose(b.posterior["w"], a.posterior["w"] * f, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(b.fit["q_mean_log_alpha"], a.fit["q_mean_log_alpha"] - 2 * np.log(f),
                               rtol=1e-6)
    np.testing.assert_allclose(b.fit["q_sd_log_alpha"], a.fit["q_sd_log_alpha"], rtol=1e-6)
    assert b.attrs["elbo"] == pytest.approx(a.attrs["elbo"] - len(y) * np.log(f), rel=1e-6)
