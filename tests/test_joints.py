"""The layer between the fitters, the estimators, ArviZ and PyMC: one test per defect it had.

Each test names the item of the issue "The joints" that it reproduces; each
failed before the layer was rebuilt.
"""

import logging
import pickle

import arviz as az
import numpy as np
import pymc as pm
import pytensor
import pytest
from _compile_modes import SMALL
from _short_runs import ADVI_WINDOW, FAST, short
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import GridSearchCV

from rvm_ppl import RVC, RVR, build_model, fit_nuts
from rvm_ppl.datasets.loaders import load_ripley, make_sinc
from rvm_ppl.kernels.kernel import RBF, design_matrix
from rvm_ppl.output.idata import POINTWISE_MAX
from rvm_ppl.pymc_fitters.results import COMPILE_MODE

logging.getLogger("pymc").setLevel(logging.ERROR)
pytestmark = [
    pytest.mark.filterwarnings("ignore::rvm_ppl.pymc_fitters.nuts.SamplingWarning"),
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
]


@pytest.fixture(scope="module")
def sinc():
    return make_sinc(40, random_state=1)


# 1. sample_kwargs went everywhere; a key of the estimator's own raised a TypeError deep inside,
#    or (max_iter) silently truncated an evidence fit.
@pytest.mark.parametrize("key", ["chains", "draws", "tune", "priors", "random_seed", "max_iter"])
def test_sample_kwargs_that_duplicate_a_parameter_are_a_value_error(sinc, key):
    X, y = sinc
    with pytest.raises(ValueError, match="sets from its own parameters"):
        RVR(gamma=1 / 9, method="nuts", sample_kwargs={key: 2}).fit(X, y)


def test_sample_kwargs_leave_the_evidence_fit_alone(sinc):
    X, y = sinc
    plain = RVR(gamma=1 / 9).fit(X, y)
    with_kwargs = RVR(gamma=1 / 9, sample_kwargs={"target_accept": 0.9}).fit(X, y)
    assert with_kwargs.n_iter_ == plain.n_iter_
    assert with_kwargs.log_evidence_ == plain.log_evidence_


def test_max_iter_and_tol_reach_vb(sinc):
    X, y = sinc
    with pytest.warns(ConvergenceWarning, match="3 iterations"):
        short = RVR(gamma=1 / 9, max_iter=3).fit(X, y, method="vb")
    loose = RVR(gamma=1 / 9, tol=1e-2).fit(X, y, method="vb")
    full = RVR(gamma=1 / 9).fit(X, y, method="vb")
    assert short.n_iter_ == 3
    assert loose.n_iter_ < full.n_iter_


# 2. kernel_ was the very object passed as kernel.
def test_changing_the_kernel_after_fit_does_not_change_predictions(sinc):
    X, y = sinc
    m = RVR(kernel=RBF(gamma=1 / 9)).fit(X, y)
    before = m.predict(X[:5])
    m.set_params(kernel__gamma=10.0)
    np.testing.assert_array_equal(m.predict(X[:5]), before)
    assert m.kernel_.gamma == pytest.approx(1 / 9)


# 3. The attributes of the posterior group stayed in standardised units.
def test_every_group_carries_the_attributes_in_the_units_of_y(sinc):
    X, y = sinc
    m = RVR(gamma=1 / 9, draws=20).fit(X, 100 * y)
    idata = m.idata_
    for group in idata.groups():
        assert idata[group].attrs["log_evidence"] == pytest.approx(m.log_evidence_, rel=1e-12)
    m1 = RVR(gamma=1 / 9, draws=20).fit(X, y)
    assert m.log_evidence_ == pytest.approx(m1.log_evidence_ - len(y) * np.log(100), rel=1e-9)
    np.testing.assert_allclose(idata.fit["log_evidence"].values,
                               m1.idata_.fit["log_evidence"].values - len(y) * np.log(100))


# 6. Missing hyperprior keys: one rule everywhere (DEFAULT_PRIORS).
def test_missing_prior_keys_take_the_defaults_on_every_path(sinc):
    from rvm_ppl.inference.methods import fit_evidence

    X, y = sinc
    Phi = design_matrix(X, X, RBF(gamma=1 / 9))
    labels = [str(j) for j in range(Phi.shape[1])]
    kw = dict(labels=labels, likelihood="gaussian", max_iter=10_000, tol=1e-3, solver="fast",
              alignment_test=True, start=0, beta=None, fit_beta=True)
    partial = fit_evidence(Phi, y, priors={"a": 1e-3, "b": 1e-3}, **kw)
    full = fit_evidence(Phi, y, priors={"a": 1e-3, "b": 1e-3, "c": 1e-6, "d": 1e-6}, **kw)
    np.testing.assert_array_equal(partial.alpha, full.alpha)
    est = RVR(gamma=1 / 9, alpha_shape=1e-3, alpha_rate=1e-3).fit(X, y)
    np.testing.assert_allclose(est.alpha_, full.alpha)


# 7. An evidence fit stored 4 x 1000 draws over every basis function.
def test_large_fits_store_point_masses_once_and_say_what_they_left_out():
    X, y = make_sinc(3000, grid=False, random_state=0)
    m = RVR(gamma=1 / 9, draws=3000, chains=4).fit(X, y)
    idata = m.idata_
    assert idata.posterior.sizes["basis"] == len(m.active_) < 20
    assert idata.relevance.sizes["basis"] == 3001
    assert np.isinf(idata.relevance["alpha"].values).sum() == 3001 - len(m.active_)
    assert 4 * 3000 * 3000 > POINTWISE_MAX
    assert "log_likelihood" not in idata.groups()
    assert idata.attrs["pointwise"].startswith("omitted")


# 8. The advi/nuts builder converted units twice when called twice.
@pytest.mark.slow
def test_building_the_inference_data_twice_gives_the_same_numbers(sinc):
    from rvm_ppl.output.idata import to_idata

    X, y = sinc
    m = RVR(gamma=1 / 9, random_state=0, **short("advi")).fit(X, 50 * y, method="advi")
    r = m.result_
    Phi = m._design(X, r.support)
    a = to_idata(r, y=m.y_fit_, Phi=Phi, random_state=0)
    b = to_idata(r, y=m.y_fit_, Phi=Phi, random_state=0)
    for group in a.groups():
        for name in a[group].data_vars:
            np.testing.assert_array_equal(a[group][name].values, b[group][name].values)
    np.testing.assert_array_equal(a.posterior["alpha"].values, r.draws["alpha"])


# 9. A fit that failed after validation left new inputs beside the old posterior.
def test_a_failed_fit_leaves_the_estimator_as_it_was(sinc, monkeypatch):
    import rvm_ppl.estimators.base as est_mod

    X, y = sinc
    m = RVR(gamma=1 / 9).fit(X, y)
    before = dict(m.__dict__)
    pred = m.predict(X[:5])

    def broken(*args, **kwargs):
        raise RuntimeError("the fitter failed")

    monkeypatch.setattr(est_mod, "_fit", broken)
    with pytest.raises(RuntimeError, match="the fitter failed"):
        m.fit(X[:20] + 1.0, y[:20])
    assert m.__dict__.keys() == before.keys()
    assert m.X_fit_ is before["X_fit_"] and m.result_ is before["result_"]
    np.testing.assert_array_equal(m.predict(X[:5]), pred)


# 10. Constant targets were refused.
def test_constant_targets_fit_and_predict_the_constant(sinc):
    X, _ = sinc
    m = RVR(gamma=1 / 9).fit(X, np.full(len(X), 2.5))
    np.testing.assert_allclose(m.predict(X[:3]), 2.5)
    y = np.r_[np.full(20, 1.0), np.linspace(0, 1, 20)]
    search = GridSearchCV(RVR(), {"gamma": [0.1, 1.0]}, cv=2).fit(X, y)  # one fold is constant
    assert np.isfinite(search.cv_results_["mean_test_score"]).all()


# 11. A kernel returning NaN pruned everything and predicted 0.
def test_a_kernel_that_returns_nan_is_a_clear_value_error(sinc):
    X, y = sinc

    def bad_kernel(A, B):
        K = np.exp(-((A[:, None, 0] - B[None, :, 0]) ** 2))
        K[0, 0] = np.nan
        return K

    with pytest.raises(ValueError, match="kernel.*NaN"):
        RVR(kernel=bad_kernel).fit(X, y)
    with pytest.raises(ValueError, match="NaN"):
        RVC(kernel=bad_kernel).fit(X, y > 0)


# 12. build_model as a PyMC user expects: set_data + posterior predictive, w in the
#     posterior of the marginal form, graphviz, fit_nuts on a changed model.
@pytest.fixture(scope="module")
def marginal_fit(sinc):
    X, y = sinc
    m = RVR(gamma=1 / 9, random_state=0, **FAST).fit(X, y, method="nuts")
    return X, y, m


@pytest.mark.slow
def test_set_data_and_posterior_predictive_match_predict(marginal_fit):
    X, y, m = marginal_fit
    Phi = design_matrix(X, X, RBF(gamma=1 / 9))
    model = build_model(Phi, y, basis=list(m.idata_.relevance.basis.values),
                        priors={"b": 1e-6 * np.var(y), "d": 1e-6 * np.var(y)})
    # Not compiled to C (PyTensor's default mode), which with an empty compile cache costs half
    # a minute here and nothing else uses: NUTS compiles as the package's fits do (NUMBA, no
    # fast-math), the forward draws, whose likelihood draws in Python, in FAST_COMPILE. The
    # chains run in this process (the draws of two worker processes, which would each compile
    # the model again).
    with pytensor.config.change_flags(numba__fastmath=False):
        idata = pm.sample(draws=150, tune=150, chains=2, cores=1, model=model, random_seed=1,
                          progressbar=False, compute_convergence_checks=False,
                          compile_kwargs={"mode": COMPILE_MODE})
    assert "w" in idata.posterior  # drawn exactly, also in the marginal form
    Xt = np.array([[-4.0], [0.0], [2.5]])
    with model:
        pm.set_data({"Phi": design_matrix(Xt, X, RBF(gamma=1 / 9))})
        pred = pm.sample_posterior_predictive(idata, predictions=True, random_seed=2,
                                              progressbar=False, compile_kwargs={"mode": SMALL})
    draws = pred.predictions["y"].values.reshape(-1, 3)
    mean, std = m.predict(Xt, return_std=True)
    se = draws.std(axis=0) / np.sqrt(len(draws) / 10)  # generous: autocorrelated draws
    assert np.all(np.abs(draws.mean(axis=0) - mean) < 4 * se + 0.02)
    np.testing.assert_allclose(draws.std(axis=0), std, rtol=0.2)
    # From the prior the spread would be that of y itself, several times larger.
    assert draws.std(axis=0).max() < 0.5 * np.std(y)


@pytest.mark.slow
def test_model_graph_and_a_changed_model_through_fit_nuts(sinc):
    X, y = sinc
    Phi = design_matrix(X[:15], X[:15], RBF(gamma=1 / 9))
    from pymc.model_graph import ModelGraph

    parents = ModelGraph(build_model(Phi, y[:15])).make_compute_graph()  # model_to_graphviz's
    assert {"alpha", "beta", "w", "y", "Phi", "PhiT_Phi"} <= set(parents)
    assert {"alpha", "beta", "PhiT_Phi", "PhiT_y"} <= parents["w"]
    assert "w" in {p for node, ps in parents.items() for p in ps if node == "y"}
    # A user's own likelihood in the centred form: Student-t noise.
    with pm.Model(coords={"basis": [f"b{j}" for j in range(Phi.shape[1])]}) as custom:
        Phi_d = pm.Data("Phi", Phi)
        y_d = pm.Data("y_obs", y[:15])
        alpha = pm.Gamma("alpha", 1e-2, 1e-2, dims="basis")
        beta = pm.Gamma("beta", 1e-2, 1e-2)
        w = pm.Normal("w", 0.0, alpha**-0.5, dims="basis")
        pm.StudentT("y", nu=4, mu=Phi_d @ w, sigma=beta**-0.5, observed=y_d)
    idata = fit_nuts(custom, random_seed=0, **FAST)
    assert {"posterior", "log_likelihood", "posterior_predictive", "sample_stats",
            "relevance"} <= set(idata.groups())
    assert idata.log_likelihood["y"].shape == (2, 150, 15)
    assert np.isfinite(idata.attrs["max_rhat"])


# The ArviZ functions the layout exists for, on the demo's two problems.
# LOO warns where Pareto k is high and ArviZ 0.23's plot_ppc trips a matplotlib deprecation.
@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.filterwarnings("ignore::matplotlib.MatplotlibDeprecationWarning")
@pytest.mark.filterwarnings("ignore:The inplace keyword:DeprecationWarning")
@pytest.mark.filterwarnings("ignore:The inplace keyword")
def test_loo_compare_and_plot_ppc_across_the_four_methods():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    X, y = make_sinc(40, random_state=0)
    Xr, yr, _, _ = load_ripley()
    problems = {
        "sinc": (RVR(gamma=1 / 9, random_state=0, **FAST), X, y),
        "ripley": (RVC(gamma=4.0, random_state=0, **FAST), Xr[::5], yr[::5]),
    }
    for name, (est, Xp, yp) in problems.items():
        fits = {m: est.set_params(**short(m)).fit(Xp, yp, method=m).idata_
                for m in ("evidence", "vb", "advi", "nuts")}
        for method, idata in fits.items():
            loo = az.loo(idata)
            assert np.isfinite(loo.elpd_loo), (name, method)
            az.plot_ppc(idata, num_pp_samples=20)
            plt.close("all")
        table = az.compare(fits)
        assert set(table.index) == set(fits)
        assert np.isfinite(table["elpd_loo"]).all()


@pytest.mark.filterwarnings("ignore:The inplace keyword")  # ArviZ 0.23 under pandas 3
def test_compare_ranks_a_clearly_worse_fit_last(sinc):
    X, y = sinc
    good = RVR(gamma=1 / 9, random_state=0).fit(X, y).idata_
    bad = RVR(gamma=1e-4, random_state=0).fit(X, y).idata_  # far too wide a kernel
    table = az.compare({"good": good, "bad": bad})
    assert list(table.index) == ["good", "bad"]
    assert table.loc["bad", "elpd_diff"] > 4 * table.loc["bad", "dse"]


# 5. Persistence with a format version: exact round trips, clear refusals.
@pytest.mark.parametrize("method", ["evidence", "vb"])
def test_netcdf_and_pickle_round_trip_exactly(sinc, tmp_path, method):
    X, y = sinc
    m = RVR(gamma=1 / 9, draws=30, random_state=0).fit(X, y, method=method)
    path = tmp_path / "m.nc"
    m.to_netcdf(path)
    for loaded in (RVR.from_netcdf(path), pickle.loads(pickle.dumps(m))):
        np.testing.assert_array_equal(loaded.predict(X, return_std=True),
                                      m.predict(X, return_std=True))
        for group in m.idata_.groups():
            for name in m.idata_[group].data_vars:
                np.testing.assert_array_equal(loaded.idata_[group][name].values,
                                              m.idata_[group][name].values)
        assert loaded.get_params()["gamma"] == m.get_params()["gamma"]


def test_loading_another_format_or_estimator_is_refused(sinc, tmp_path):
    import xarray as xr

    X, y = sinc
    path = tmp_path / "m.nc"
    RVR(gamma=1 / 9, draws=10).fit(X, y).to_netcdf(path)
    with pytest.raises(ValueError, match="holds a RVR, not a RVC"):
        RVC.from_netcdf(path)
    idata = az.from_netcdf(path)
    state = idata["estimator_state"].to_dataset() if hasattr(idata["estimator_state"], "to_dataset") \
        else idata["estimator_state"]
    state = xr.Dataset(state.data_vars, attrs={**state.attrs, "format_version": 1})
    del idata["estimator_state"]
    idata.add_groups({"estimator_state": state})
    old = tmp_path / "old.nc"
    idata.to_netcdf(old)
    with pytest.raises(ValueError, match="file format 1"):
        RVR.from_netcdf(old)


def test_vb_predictive_variance_is_that_of_q_including_the_weights_left_out():
    """Monte Carlo from Q(w) against predict: N(0, v_m) outside the model, and on the model
    mean + K w_out + N(0, cov), K the weights' coupling (rvm_ppl.closed_form.vb, Notes)."""
    X, y = make_sinc(300, grid=False, random_state=3)
    m = RVR(gamma=1 / 9).fit(X, y, method="vb")
    r = m.result_
    outside = np.flatnonzero(r.outside_var > 0)
    assert outside.size > 0
    Xt = np.linspace(-9, 9, 7)[:, None]
    rng = np.random.default_rng(0)
    S = 40_000
    w_out = rng.standard_normal((S, outside.size)) * np.sqrt(r.outside_var[outside])
    w_in = rng.multivariate_normal(r.mean, r.cov, size=S) + w_out @ r.outside_coupling[:, outside].T
    f = w_in @ m._design(Xt, r.support).T + w_out @ m._design(Xt, outside).T
    _, std = m.predict(Xt, return_std=True)
    np.testing.assert_allclose(f.var(axis=0) + r.noise_var, std**2, rtol=0.03)
    # the weights left out add to the variance: their share, through the model's weights too
    coupled = m._design(Xt, r.support) @ r.outside_coupling[:, outside]
    left_out = w_out @ (m._design(Xt, outside) + coupled).T
    assert np.all(std**2 > r.noise_var + f.var(axis=0) - left_out.var(0) + 1e-6)


@pytest.mark.slow
def test_advi_reports_its_convergence(sinc, caplog):
    X, y = sinc
    with caplog.at_level(logging.INFO):
        RVR(gamma=1 / 9, random_state=0, **short("advi", draws=20)).fit(X, y, method="advi")
    messages = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("ADVI converged at iteration") for m in messages)
    assert not any(m.startswith("Interrupted at") for m in messages)


def test_alpha_of_vb_bases_outside_its_model_comes_from_q_alpha():
    from scipy import stats

    from rvm_ppl.output.tables import alpha_table

    X, y = make_sinc(60, random_state=0)
    idata = RVR(gamma=1 / 9, draws=50).fit(X, y, method="vb").idata_
    outside = [str(b) for b, k in zip(idata.relevance.basis.values, idata.relevance.in_model.values)
               if not k]
    assert outside
    table = alpha_table({"vb": idata}, basis=outside[:3])
    shape = idata.fit["alpha_shape"].sel(candidate=outside[:3]).values
    rate = idata.fit["alpha_rate"].sel(candidate=outside[:3]).values
    np.testing.assert_allclose(table[("vb", "median log10 α")].values,
                               np.log10(stats.gamma.median(shape, scale=1 / rate)))
    assert (table[("vb", "hdi low")] < table[("vb", "hdi high")]).all()


@pytest.mark.slow
def test_a_fresh_process_fits_advi_without_foreign_warnings():
    """PyTensor's BLAS warning concerns C-mode functions, not the NUMBA-compiled fits."""
    import subprocess
    import sys

    code = ("from rvm_ppl import RVR; from rvm_ppl.datasets.loaders import make_sinc; "
            "X, y = make_sinc(30, random_state=0); "
            f"RVR(gamma=1 / 9, draws=20, sample_kwargs={{'window': {ADVI_WINDOW}}})"
            ".fit(X, y, method='advi')")
    run = subprocess.run([sys.executable, "-W", "error::UserWarning", "-W",
                          "ignore::FutureWarning", "-c", code],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "BLAS" not in run.stderr
