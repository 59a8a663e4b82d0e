"""PyMC's forward sampling from an estimator's idata_ in the model it fitted (``pymc_model``).

``pm.sample_posterior_predictive(m.idata_, predictions=True)`` in ``m.pymc_model()``
must draw only ``y`` (PyMC's log line "Sampling: [y]"), taking ``alpha``, ``beta``
and ``w`` from the posterior as it does from a trace of ``pm.sample``, at the
training inputs and after ``pm.set_data({"Phi": new_rows})``; its mean and
standard deviation are then those of ``predict(X_new, return_std=True)`` within
Monte Carlo error. Fits by evidence and vb keep only the bases in their model and
have no such model: a clear ValueError.
"""
import logging

import arviz as az
import numpy as np
import pytest
from _short_runs import short
from scipy.special import expit

from rvm_ppl import RVC, RVR, PoissonRVR, design_matrix
from rvm_ppl.datasets.loaders import make_sinc

pytestmark = pytest.mark.filterwarnings("ignore::rvm_ppl.pymc_fitters.nuts.SamplingWarning")

Z_MAX = 4.0  # differences allowed, in Monte Carlo standard errors
X_NEW = np.linspace(-9.0, 9.0, 11)[:, None]


def _forward(model, idata, caplog, Phi_new=None, seed=0):
    """``y`` forward-sampled from ``idata`` (chain, draw, obs) and PyMC's "Sampling" line."""
    import pymc as pm

    caplog.clear()
    with model, caplog.at_level(logging.INFO, logger="pymc"):
        if Phi_new is not None:
            pm.set_data({"Phi": Phi_new})
        pred = pm.sample_posterior_predictive(idata, predictions=True, random_seed=seed,
                                              progressbar=False)
    line = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Sampling:")]
    return pred.predictions, line


def _mcse_mean(draws):
    """Monte Carlo standard error of the mean of ``draws`` (chain, draw, obs), per point.

    ArviZ's (``az.mcse(method="mean")``: the sd over the square root of the
    effective sample size, which counts the chains' autocorrelation).
    """
    return az.mcse(az.convert_to_dataset({"y": np.asarray(draws, dtype=float)}),
                   method="mean")["y"].values


def _z(draws, mean, std):
    """|difference| of the draws' mean and sd from ``mean`` and ``std``, in MCSEs, per point.

    The sd's standard error by the delta method: that of the mean of
    ``(y - ybar)^2`` over ``2 sd``.
    """
    m, sd = draws.mean(axis=(0, 1)), draws.std(axis=(0, 1))
    z_mean = np.abs(m - mean) / _mcse_mean(draws)
    z_sd = np.abs(sd - std) / (_mcse_mean((draws - m) ** 2) / (2 * sd))
    return z_mean, z_sd


@pytest.fixture(scope="module")
def sinc():
    return make_sinc(40, random_state=3)


@pytest.fixture(scope="module", params=[
    pytest.param(("advi", None), id="advi"),
    pytest.param(("advi", 1e-3), id="advi-truncated"),
    pytest.param(("nuts", None), id="nuts"),
])
def rvr(request, sinc):
    method, low_rank = request.param
    X, y = sinc
    kw = {"low_rank": low_rank} if low_rank else {}
    return RVR(gamma=1 / 9, random_state=1, progressbar=False, **kw,
               **short(method, draws=300)).fit(X, y, method=method)


@pytest.mark.slow
def test_rvr_idata_serves_forward_sampling_as_a_trace(rvr, caplog):
    """Only y is drawn, at the training rows and at new ones, and the draws have predict's
    mean and sd within Z_MAX Monte Carlo standard errors."""
    X = rvr.X_fit_
    model = rvr.pymc_model()
    assert rvr.idata_.attrs["design_tol"] == model.rvm_spec.design_tol
    train, line = _forward(model, rvr.idata_, caplog)
    assert line == ["Sampling: [y]"] and list(train.data_vars) == ["y"]
    new, line = _forward(rvr.pymc_model(), rvr.idata_, caplog,
                         Phi_new=design_matrix(X_NEW, X, rvr.kernel_))
    assert line == ["Sampling: [y]"]
    for draws, Xq in ((train, X), (new, X_NEW)):
        z_mean, z_sd = _z(draws["y"].values, *rvr.predict(Xq, return_std=True))
        assert z_mean.max() < Z_MAX and z_sd.max() < Z_MAX


@pytest.mark.slow
def test_truncated_fit_gives_the_truncated_model(rvr):
    """The model whose posterior idata_ holds is the one fitted: the truncated design's factor
    where low_rank is a tolerance, the exact design otherwise."""
    model = rvr.pymc_model()
    tol = rvr.low_rank if isinstance(rvr.low_rank, float) else 0.0
    assert model.rvm_spec.design_tol == tol
    if tol:
        Q = model["lowrank_Q"].get_value()
        assert Q.shape[1] == rvr.idata_.attrs["design_rank"] < Q.shape[0]
    held = rvr.idata_.constant_data
    for name in ("alpha_rate", "beta_rate"):  # the rates in y's units: b' var(y)
        np.testing.assert_array_equal(held[name].values, model[name].get_value())
    np.testing.assert_allclose(float(held["alpha_rate"]), 1e-6 * np.var(rvr.y_fit_), rtol=1e-12)


@pytest.fixture(scope="module", params=["advi", "nuts"])
def rvc(request):
    rng = np.random.default_rng(4)
    X = rng.uniform(-2.0, 2.0, (50, 1))
    y = np.where(np.sin(2 * X[:, 0]) + 0.4 * rng.standard_normal(50) > 0, "b", "a")
    return RVC(gamma=2.0, random_state=2, progressbar=False,
               **short(request.param, draws=300)).fit(X, y, method=request.param)


@pytest.mark.slow
def test_rvc_idata_serves_forward_sampling_as_a_trace(rvc, caplog):
    """Only y is drawn, at the training rows and at new ones; the share of 1s is
    predict_proba's P(classes_[1]) within Z_MAX standard errors of the Bernoulli draws given
    the same posterior draws of w."""
    X = rvc.X_fit_
    W = rvc.idata_.posterior["w"].values
    W = W.reshape(-1, W.shape[-1])
    for Xq, Phi_new in ((X, None), (X_NEW / 4.5, design_matrix(X_NEW / 4.5, X, rvc.kernel_))):
        pred, line = _forward(rvc.pymc_model(), rvc.idata_, caplog, Phi_new=Phi_new)
        assert line == ["Sampling: [y]"] and list(pred.data_vars) == ["y"]
        y = pred["y"].values.reshape(len(W), len(Xq))
        # Given the draws w_s each y_s is Bernoulli(p_s): the share's variance is
        # sum_s p_s (1 - p_s) / S^2.
        p = expit(W @ design_matrix(Xq, X, rvc.kernel_).T)
        se = np.sqrt((p * (1 - p)).sum(axis=0)) / len(W)
        np.testing.assert_allclose(p.mean(axis=0), rvc.predict_proba(Xq)[:, 1], rtol=1e-10)
        assert (np.abs(y.mean(axis=0) - p.mean(axis=0)) <= Z_MAX * se).all()


@pytest.mark.slow
def test_multinomial_idata_serves_forward_sampling_as_a_trace(caplog):
    """The softmax RVM with one alpha per basis: only y is drawn (w is a Deterministic of the
    model's w_basis, which idata_ holds too; the model with one alpha per weight has w itself,
    as the binary one). idata_ is first built inside the model's context, as a user may write
    it, and builds its own model apart from that one. Each class's share is predict_proba's
    within Z_MAX standard errors of the draws given the same weights."""
    import pymc as pm
    from scipy.special import softmax

    rng = np.random.default_rng(6)
    k = rng.integers(0, 3, 45)
    X = np.array([[0.0, 0.0], [3.0, 0.0], [0.0, 3.0]])[k] + rng.normal(scale=0.8, size=(45, 2))
    c = RVC(gamma=0.5, multi_class="multinomial", shared_alpha=True, random_state=0,
            progressbar=False, **short("advi", draws=400))
    c.fit(X, np.array(["a", "b", "c"])[k], method="advi")
    with c.pymc_model(), caplog.at_level(logging.INFO, logger="pymc"):
        pred = pm.sample_posterior_predictive(c.idata_, predictions=True, random_seed=0,
                                              progressbar=False)
    assert "Sampling: [y]" in caplog.text and "w_basis" not in caplog.text
    y = pred.predictions["y"].values.reshape(-1, len(X))
    W = c.idata_.posterior["w"].values.reshape(len(y), 3, -1)
    p = softmax(np.einsum("nm,skm->snk", design_matrix(X, X, c.kernel_), W), axis=-1)
    np.testing.assert_allclose(p.mean(axis=0), c.predict_proba(X), rtol=1e-10)
    share = np.stack([(y == j).mean(axis=0) for j in range(3)], axis=1)
    se = np.sqrt((p * (1 - p)).sum(axis=0)) / len(y)
    assert (np.abs(share - p.mean(axis=0)) <= Z_MAX * se).all()


@pytest.mark.slow
def test_a_loaded_estimator_gives_the_same_model(rvr, caplog, tmp_path):
    """to_netcdf keeps idata_'s constant_data: the loaded estimator's pymc_model() takes its
    posterior as the fitted one did."""
    path = tmp_path / "rvr.nc"
    rvr.to_netcdf(path)
    loaded = RVR.from_netcdf(path)
    pred, line = _forward(loaded.pymc_model(), loaded.idata_, caplog)
    assert line == ["Sampling: [y]"]
    again, _ = _forward(rvr.pymc_model(), rvr.idata_, caplog)
    np.testing.assert_array_equal(pred["y"].values, again["y"].values)


@pytest.mark.slow
def test_poisson_idata_serves_forward_sampling_as_a_trace(caplog):
    """Counts: only y is drawn, with the exposure's offset; the counts' mean at the training
    rows is predict (the rate) times the exposure within Z_MAX Monte Carlo standard errors."""
    rng = np.random.default_rng(5)
    X = rng.uniform(-3.0, 3.0, (40, 1))
    exposure = rng.uniform(1.0, 3.0, 40)
    counts = rng.poisson(exposure * np.exp(1.0 + np.sin(X[:, 0])))
    m = PoissonRVR(gamma=0.5, random_state=3, progressbar=False, **short("advi", draws=300))
    m.fit(X, counts / exposure, sample_weight=exposure, method="advi")
    train, line = _forward(m.pymc_model(), m.idata_, caplog)
    assert line == ["Sampling: [y]"]
    z = np.abs(train["y"].values.mean(axis=(0, 1)) - m.predict(X) * exposure) \
        / _mcse_mean(train["y"].values)
    assert z.max() < Z_MAX


@pytest.mark.parametrize("method", ["evidence", "vb"])
def test_closed_form_fits_refuse_a_model(method):
    """evidence and vb keep only the bases in their model (and evidence point estimates of
    alpha and beta): no PyMC model has their idata_ as its trace, and the error says so."""
    X, y = make_sinc(30, random_state=0)
    m = RVR(gamma=1 / 9, progressbar=False).fit(X, y, method=method)
    with pytest.raises(ValueError, match=f"method='{method}' is no trace of a PyMC model.*"
                                         "predict\\(X, return_std=True\\)"):
        m.pymc_model()
    assert set(m.idata_.constant_data) == {"X"}  # nothing of a PyMC model claimed


def test_constant_targets_and_one_vs_rest_refuse_a_model():
    """Constant targets are fitted by the bias alone in closed form; a one-vs-rest classifier
    of three classes is three models: neither has one PyMC model to give."""
    X = np.arange(6.0)[:, None]
    m = RVR(gamma=1.0, progressbar=False)
    m.fit(X, np.full(6, 2.0), method="advi")
    with pytest.raises(ValueError, match="constant"):
        m.pymc_model()
    c = RVC(gamma=1.0, progressbar=False).fit(X, np.array([0, 1, 2, 0, 1, 2]), method="vb")
    with pytest.raises(ValueError, match="3 binary models, not one PyMC model"):
        c.pymc_model()
