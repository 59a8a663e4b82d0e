"""PoissonRVR: the count regressor, shaped like scikit-learn's PoissonRegressor.

Oracles: the Laplace fit of the closed-form module on counts and their log
exposure, the Poisson deviance written out, scipy's Poisson and normal densities
integrated numerically for the Poisson-lognormal cdf, the mixture cdf summed from
scipy's Poisson pmf, and scikit-learn's estimator checks.
"""

import numpy as np
import pytest
from scipy import integrate, stats
from sklearn.utils.estimator_checks import _get_check_estimator_ids as _ids
from sklearn.utils.estimator_checks import estimator_checks_generator

from rvm_ppl import RBF, PoissonRVR, design_matrix
from rvm_ppl.closed_form.poisson import fit_evidence_poisson, poisson_mixture_quantiles
from rvm_ppl.output import idata as idata_module


def _log_rate(x):
    return 1 + 2 * np.sinc(x / np.pi)  # Tipping's sinc, sin(x) / x


def _counts(seed=0, n=40):
    """Counts over exposures in [0.5, 3] with the log rate 1 + 2 sinc(x) on [-10, 10]."""
    rng = np.random.default_rng(seed)
    X = np.sort(rng.uniform(-10, 10, n))[:, None]
    s = rng.uniform(0.5, 3.0, n)
    c = rng.poisson(s * np.exp(_log_rate(X[:, 0])))
    return X, c, s


@pytest.fixture(scope="module")
def data():
    return _counts()


@pytest.fixture(scope="module")
def fitted(data):
    """The evidence fit of rates c / s with exposures s."""
    X, c, s = data
    return PoissonRVR(gamma=1 / 9, draws=50, random_state=0).fit(X, c / s, sample_weight=s)


def _check_name(check):
    return getattr(check, "func", check).__name__


def _unfitted_state(est):
    return {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in vars(est).items()}


# -- exposure -------------------------------------------------------------------------------


def test_exposure_is_the_offset_of_the_counts(data, fitted):
    X, c, s = data
    # scikit-learn's weighted objective sum s (y log mu - mu) and the Poisson log
    # likelihood of the counts c = y s with means s mu differ by a constant in mu.
    y = c / s
    rng = np.random.default_rng(1)
    diffs = []
    for _ in range(3):
        mu = np.exp(rng.normal(size=len(c)))
        diffs.append(np.sum(s * (y * np.log(mu) - mu))
                     - np.sum(stats.poisson.logpmf(c, s * mu)))
    assert np.ptp(diffs) < 1e-9 * np.abs(diffs).max()
    # The estimator's fit is the Laplace fit of the counts with offset log s.
    Phi = design_matrix(X, X, RBF(gamma=1 / 9))
    ref = fit_evidence_poisson(Phi, c, offset=np.log(s))
    np.testing.assert_array_equal(fitted.active_, ref.active)
    np.testing.assert_allclose(fitted.coef_[ref.active], ref.mu, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(fitted.sigma_, ref.Sigma, rtol=1e-6, atol=1e-10)
    assert fitted.log_evidence_ == pytest.approx(ref.log_evidence, abs=1e-6)
    np.testing.assert_array_equal(fitted.counts_fit_, c)
    np.testing.assert_array_equal(fitted.exposure_fit_, s)


def test_evidence_under_a_hyperprior_is_the_map_fit_with_the_gamma_relevance_rule(data):
    # alpha_shape / alpha_rate make the evidence fit type-II MAP: the same fit as the
    # Laplace code given the hyperprior, and relevance by E[gamma] > 1/2.
    X, c, s = data
    est = PoissonRVR(gamma=1 / 9, alpha_shape=3.0, alpha_rate=2.0, draws=50,
                     random_state=0).fit(X, c / s, sample_weight=s)
    Phi = design_matrix(X, X, RBF(gamma=1 / 9))
    ref = fit_evidence_poisson(Phi, c, offset=np.log(s), priors={"a": 3.0, "b": 2.0})
    np.testing.assert_array_equal(est.active_, ref.active)
    np.testing.assert_allclose(est.alpha_, ref.alpha, rtol=1e-6)
    gamma = 1 - ref.alpha[ref.active] * np.diag(ref.Sigma)
    np.testing.assert_allclose(est.idata_.relevance["gamma"].values[ref.active], gamma, rtol=1e-6)
    in_model = ref.active[gamma > 0.5]
    assert sorted(est.relevance_) == sorted(int(m) - 1 for m in in_model if m > 0)


def test_repeated_rows_are_integer_exposures():
    # Three rows repeated (twice, three times) and one row of zero exposure: the same
    # data as integer weights, so the same fit and the same predictions.
    X, c, _ = _counts(2, n=25)
    w = np.ones(25)
    w[[3, 10, 17]] = [2, 3, 2]
    w[5] = 0
    Xr, cr = np.repeat(X, w.astype(int), axis=0), np.repeat(c, w.astype(int))
    a = PoissonRVR(gamma=1 / 9).fit(Xr, cr)
    b = PoissonRVR(gamma=1 / 9).fit(X, c, sample_weight=w)
    np.testing.assert_array_equal(a.X_fit_, b.X_fit_)
    assert len(b.X_fit_) == 24 and not np.isin(X[5], b.X_fit_).all()
    np.testing.assert_array_equal(b.exposure_fit_, np.delete(w, 5))
    np.testing.assert_array_equal(b.counts_fit_, np.delete(c * w, 5))
    np.testing.assert_allclose(a.predict(X), b.predict(X), rtol=1e-9)


# -- predictions and score ------------------------------------------------------------------


def _log_rate_moments(m, X):
    """Mean and variance of the log rate at X from the fitted attributes, by hand."""
    P = design_matrix(X, m.X_fit_, RBF(gamma=1 / 9))[:, m.active_]
    return P @ m.coef_[m.active_], np.array([p @ m.sigma_ @ p for p in P])


def test_predict_is_the_lognormal_mean(fitted):
    Xt = np.linspace(-11, 11, 7)[:, None]
    mean, var = _log_rate_moments(fitted, Xt)
    np.testing.assert_allclose(fitted.predict(Xt), np.exp(mean + var / 2), rtol=1e-12)
    # The pmf over exposure 2 has the mean 2 predict(x) and sums to one.
    k = np.arange(300)
    pmf = fitted.predict_pmf(Xt, k, exposure=2.0)
    np.testing.assert_allclose(pmf.sum(axis=1), 1.0, rtol=1e-10)
    np.testing.assert_allclose(pmf @ k, 2 * fitted.predict(Xt), rtol=1e-9)


def _poisson_lognormal_cdf(k, m, sd, e):
    """P(count <= k) for count ~ Poisson(e exp(eta)), eta ~ N(m, sd^2), by quadrature."""
    def integrand(t):
        return stats.norm.pdf(t, m, sd) * stats.poisson.cdf(k, e * np.exp(t))

    val, _ = integrate.quad(integrand, m - 12 * sd, m + 12 * sd, epsabs=0, epsrel=1e-11,
                            limit=200)
    return val


def test_predict_interval_against_numerical_integration(fitted):
    Xt = np.array([[-10.5], [-2.0], [0.3], [6.0]])
    e = np.array([2.5, 1.0, 0.7, 4.0])
    lower, upper = fitted.predict_interval(Xt, coverage=0.8, exposure=e)
    mean, var = _log_rate_moments(fitted, Xt)
    for i in range(len(Xt)):
        sd = np.sqrt(var[i])
        for q, k in ((0.1, lower[i]), (0.9, upper[i])):
            # k is the smallest count whose cdf reaches q, by a margin no rounding decides.
            assert _poisson_lognormal_cdf(k, mean[i], sd, e[i]) >= q + 1e-6
            assert k == 0 or _poisson_lognormal_cdf(k - 1, mean[i], sd, e[i]) < q - 1e-6


def test_mixture_quantiles_against_the_summed_pmf():
    rng = np.random.default_rng(3)
    lam = np.exp(rng.normal(1.5, 0.8, size=(5, 300)))
    w = np.full(300, 1 / 300)
    k = np.arange(400)
    cdf = np.cumsum(stats.poisson.pmf(k[None, None, :], lam[:, :, None]).mean(axis=1), axis=1)
    for q in (0.05, 0.5, 0.95):
        got = poisson_mixture_quantiles(lam, w, q)
        ref = np.argmax(cdf >= q, axis=1)
        assert np.min(np.abs(cdf[np.arange(5), ref] - q)) > 1e-9  # no tie for rounding to decide
        np.testing.assert_array_equal(got, ref)


def test_score_is_d2_of_the_poisson_deviance(data, fitted):
    X, c, s = data
    y = c / s
    mu = fitted.predict(X)

    def deviance(mu):
        with np.errstate(divide="ignore", invalid="ignore"):
            ylogy = np.where(y > 0, y * np.log(y / mu), 0.0)
        return 2 * np.sum(s * (ylogy - y + mu))

    null = np.sum(s * y) / np.sum(s)
    assert fitted.score(X, y, sample_weight=s) == pytest.approx(
        1 - deviance(mu) / deviance(np.full_like(y, null)), rel=1e-12)
    assert fitted.score(X, y, sample_weight=s) > 0.5  # measured 0.83


# -- InferenceData ------------------------------------------------------------------------


def test_idata_pointwise_groups_are_poisson_with_the_offset(data, fitted):
    X, c, s = data
    idata = fitted.idata_
    assert {"posterior", "log_likelihood", "posterior_predictive", "observed_data",
            "constant_data", "fit", "relevance", "prior", "log_prior"} <= set(idata.groups())
    np.testing.assert_array_equal(idata.observed_data["y"].values, c)
    np.testing.assert_array_equal(idata.constant_data["offset"].values, np.log(s))
    w = idata.posterior["w"].values  # (chain, draw, active)
    P = design_matrix(X, X, RBF(gamma=1 / 9))[:, fitted.active_]
    eta = w @ P.T + np.log(s)
    np.testing.assert_allclose(idata.log_likelihood["y"].values,
                               stats.poisson.logpmf(c, np.exp(eta)), rtol=1e-10)
    assert idata.posterior_predictive["y"].dtype.kind == "i"


def test_pointwise_groups_follow_the_size_rule(data, monkeypatch):
    X, c, s = data
    monkeypatch.setattr(idata_module, "POINTWISE_MAX", 40 * 4 * 50 - 1)
    idata = PoissonRVR(gamma=1 / 9, draws=50).fit(X, c / s, sample_weight=s).idata_
    assert "log_likelihood" not in idata.groups()
    assert idata.attrs["pointwise"].startswith("omitted")


# -- methods and bad input ------------------------------------------------------------------


def test_vb_is_refused_and_the_estimator_kept(data, fitted):
    X, c, s = data
    before = _unfitted_state(fitted)
    with pytest.raises(ValueError, match="'evidence', 'advi' or 'nuts'"):
        fitted.fit(X, c / s, sample_weight=s, method="vb")
    assert fitted.method == "evidence"
    assert set(vars(fitted)) == set(before)
    np.testing.assert_array_equal(fitted.coef_, before["coef_"])


@pytest.mark.parametrize("kwargs, match", [
    ({"y": -1.0}, "non-negative targets"),
    ({"y": np.nan}, "NaN"),
    ({"sample_weight": np.ones(39)}, r"sample_weight.shape"),
    ({"sample_weight": -1.0}, "Negative values"),
    ({"sample_weight": 0.0}, "non-zero"),
    ({"method": "nuts", "sample_weight": 0.5}, "integer counts only"),
    ({"alpha_shape": -2.0}, "alpha_shape"),
])
def test_bad_input_is_refused(data, kwargs, match):
    X, c, _ = data
    y = c.astype(float)
    if "y" in kwargs:
        y[3] = kwargs["y"]
    if isinstance(kwargs.get("sample_weight"), float):
        kwargs["sample_weight"] = np.r_[np.full(39, 1.0), kwargs["sample_weight"]] \
            if kwargs["sample_weight"] < 0 else np.full(40, kwargs["sample_weight"])
    if "alpha_shape" in kwargs:
        est = PoissonRVR(alpha_shape=kwargs["alpha_shape"])
    else:
        est = PoissonRVR()
    before = _unfitted_state(est)
    with pytest.raises(ValueError, match=match):
        est.fit(X, y, sample_weight=kwargs.get("sample_weight"), method=kwargs.get("method"))
    assert vars(est).keys() == before.keys()


def test_prediction_arguments_are_checked(fitted):
    with pytest.raises(ValueError, match="coverage"):
        fitted.predict_interval(np.zeros((2, 1)), coverage=1.0)
    with pytest.raises(ValueError, match="exposure has shape"):
        fitted.predict_interval(np.zeros((2, 1)), exposure=np.ones(3))
    with pytest.raises(ValueError, match="positive"):
        fitted.predict_pmf(np.zeros((2, 1)), [0, 1], exposure=0.0)


# -- persistence and scikit-learn ---------------------------------------------------------------


def test_netcdf_round_trip_keeps_predictions_and_feature_names(tmp_path, data):
    pd = pytest.importorskip("pandas")
    X, c, s = data
    Xdf = pd.DataFrame(X, columns=["x"])
    m = PoissonRVR(gamma=1 / 9, draws=20, random_state=0).fit(Xdf, c / s, sample_weight=s)
    m.to_netcdf(tmp_path / "p.nc")
    m2 = PoissonRVR.from_netcdf(tmp_path / "p.nc")
    assert list(m2.feature_names_in_) == ["x"]
    Xt = pd.DataFrame(np.linspace(-10, 10, 9)[:, None], columns=["x"])
    np.testing.assert_array_equal(m.predict(Xt), m2.predict(Xt))
    np.testing.assert_array_equal(m.predict_interval(Xt, exposure=3.0),
                                  m2.predict_interval(Xt, exposure=3.0))
    np.testing.assert_array_equal(m.exposure_fit_, m2.exposure_fit_)
    np.testing.assert_array_equal(m.idata_.log_likelihood["y"].values,
                                  m2.idata_.log_likelihood["y"].values)


# Fits ten-feature targets of 1 to 271 four times, 600 evidence iterations each.
SLOW_CHECKS = ("check_regressor_data_not_an_array",)


@pytest.mark.parametrize("estimator, check", [
    pytest.param(est, check, id=f"{_ids(est)}-{_ids(check)}",
                 marks=pytest.mark.slow if _check_name(check) in SLOW_CHECKS else ())
    for est, check in estimator_checks_generator(PoissonRVR(), mark="skip")])
def test_sklearn_estimator_checks(estimator, check):
    check(estimator)


# -- the sampling methods ---------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::rvm_ppl.pymc_fitters.nuts.SamplingWarning")  # few draws
@pytest.mark.parametrize("method", ["advi", "nuts"])
def test_sampled_predictions_are_the_mixture_over_draws(tmp_path, method):
    X, c, s = _counts(5, n=25)
    m = PoissonRVR(gamma=1 / 9, method=method, draws=100, tune=200, chains=2,
                   random_state=1, progressbar=False)
    m.fit(X, np.round(c * 2) / 2, sample_weight=np.full(25, 2.0))
    if method == "nuts":
        assert m.idata_.attrs["n_divergences"] == 0
    else:  # ADVI's Gaussian is on the sampling axes u = V^T w, not on the bases
        assert m.idata_.fit["q_mean_rotation_w"].dims == ("axis",)
    Xt = np.array([[-3.0], [0.5], [8.0]])
    P = design_matrix(Xt, m.X_fit_, RBF(gamma=1 / 9))
    lam = np.exp(m.result_.w_draws @ P.T)  # (draws, test points)
    np.testing.assert_allclose(m.predict(Xt), lam.mean(axis=0), rtol=1e-12)
    k = np.arange(200)
    cdf = np.cumsum(stats.poisson.pmf(k[None, None, :], 1.5 * lam.T[:, :, None]).mean(axis=1),
                    axis=1)
    lower, upper = m.predict_interval(Xt, coverage=0.9, exposure=1.5)
    np.testing.assert_array_equal(lower, np.argmax(cdf >= 0.05, axis=1))
    np.testing.assert_array_equal(upper, np.argmax(cdf >= 0.95, axis=1))
    m.to_netcdf(tmp_path / "n.nc")
    np.testing.assert_array_equal(PoissonRVR.from_netcdf(tmp_path / "n.nc").predict(Xt),
                                  m.predict(Xt))
