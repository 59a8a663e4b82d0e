"""The scikit-learn contract of RVR, RVC and PoissonRVR.

Each test reproduces one defect that the estimators' parameters had:
``fit(X, y, method=...)`` changed the fit but not ``get_params()``, the
hyperprior was one dict that ``GridSearchCV`` could not search, and the
parameters came in no order.
"""

import inspect
import json

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV, KFold

import rvm_ppl.core.priors as priors_mod
import rvm_ppl.inference.methods as methods
import rvm_ppl.model.build as build_mod
from rvm_ppl import RVC, RVR, PoissonRVR
from rvm_ppl.datasets.loaders import load_ripley, make_sinc
from rvm_ppl.kernels.kernel import RBF, design_matrix

pytestmark = [
    pytest.mark.filterwarnings("ignore::rvm_ppl.pymc_fitters.nuts.SamplingWarning"),
    pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning"),
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
]

# Tiny settings: these tests check the plumbing, not the approximations.
TINY = {
    "evidence": {},
    "vb": {},
    "advi": {"max_iter": 300, "draws": 20, "sample_kwargs": {"window": 100}},
    "nuts": {"draws": 20, "tune": 20, "chains": 1},
}
OTHER = {"evidence": "vb", "vb": "evidence", "advi": "evidence", "nuts": "vb"}


@pytest.fixture(scope="module")
def sinc():
    return make_sinc(20, random_state=3)


@pytest.fixture(scope="module")
def ripley():
    X, y, _, _ = load_ripley()
    return X[::5], y[::5]


def _same_fit(a, b, X):
    assert a.method_ == b.method_
    np.testing.assert_array_equal(a.coef_, b.coef_)
    np.testing.assert_array_equal(a.alpha_, b.alpha_)
    out_a = a.predict_proba(X) if hasattr(a, "predict_proba") else a.predict(X, return_std=True)
    out_b = b.predict_proba(X) if hasattr(b, "predict_proba") else b.predict(X, return_std=True)
    np.testing.assert_array_equal(out_a, out_b)


# 1. fit(X, y, method=m) fitted m, but get_params() kept the constructor's method,
#    so clone(est).fit(X, y) fitted another model.
@pytest.mark.parametrize("method", [
    "evidence", "vb",
    pytest.param("advi", marks=pytest.mark.slow),
    pytest.param("nuts", marks=pytest.mark.slow),
])
def test_fit_method_becomes_the_parameter_and_clone_reproduces_the_fit(sinc, method):
    X, y = sinc
    m = RVR(gamma=1 / 9, method=OTHER[method], random_state=0, **TINY[method])
    before = m.get_params()
    m.fit(X, y, method=method)
    after = m.get_params()
    assert after["method"] == m.method_ == method
    # fit changes no other constructor parameter
    assert {k: v for k, v in after.items() if k != "method"} == \
        {k: v for k, v in before.items() if k != "method"}
    _same_fit(clone(m).fit(X, y), m, X)


@pytest.mark.parametrize("method", ["evidence", "vb"])
def test_the_classifier_records_its_method_too(ripley, method):
    X, y = ripley
    m = RVC(gamma=4.0, method=OTHER[method]).fit(X, y, method=method)
    assert m.get_params()["method"] == method
    _same_fit(clone(m).fit(X, y), m, X)


def test_a_failed_fit_leaves_the_method_and_the_fit_as_they_were(sinc):
    X, y = sinc
    fresh = RVR(learn_scales=True)
    with pytest.raises(ValueError, match="learn_scales=True needs"):
        fresh.fit(X, y, method="vb")  # fails after validate_data, inside fit
    assert fresh.method == "evidence" and not hasattr(fresh, "method_")

    m = RVR(gamma=1 / 9, method="vb").fit(X, y, method="evidence")
    coef = m.coef_.copy()
    with pytest.raises(ValueError, match="sets from its own parameters"):
        m.set_params(sample_kwargs={"draws": 3}).fit(X, y, method="nuts")
    assert m.method == m.method_ == "evidence"
    np.testing.assert_array_equal(m.coef_, coef)


# 2. The hyperprior was one dict parameter, `priors`, that GridSearchCV could not search.
def test_grid_search_over_alpha_rate_reaches_the_fit():
    X, y = make_sinc(60, random_state=2)
    cv = KFold(3, shuffle=True, random_state=0)  # the inputs are sorted
    grid = [1e-6, 10.0, 1e3]
    search = GridSearchCV(RVR(gamma=1 / 9), {"alpha_rate": grid}, cv=cv).fit(X, y)
    best = search.best_params_["alpha_rate"]
    assert search.best_estimator_.alpha_rate == best
    # Each value reached the fit. A rate of 1e3 on alpha_m (for y / std(y);
    # Gamma(1e-6, 1e3) has mean 1e-9) holds every alpha_m near zero, i.e. the
    # weights nearly unshrunk: measured 0.664 against 0.807 cross-validated R^2.
    scores = search.cv_results_["mean_test_score"]
    assert scores[2] < scores[0] - 0.05 and best != 1e3
    loose = RVR(gamma=1 / 9, alpha_rate=1e3).fit(X, y)
    tipping = RVR(gamma=1 / 9, alpha_rate=1e-6).fit(X, y)
    assert loose.alpha_[loose.active_].max() < tipping.alpha_[tipping.active_].min() / 100
    np.testing.assert_array_equal(search.best_estimator_.coef_,
                                  RVR(gamma=1 / 9, alpha_rate=best).fit(X, y).coef_)


PRIORS = {"a": 1e-3, "b": 1e-2, "c": 0.5, "d": 1e-3}
FLAT = {"alpha_shape": 1e-3, "alpha_rate": 1e-2, "beta_shape": 0.5, "beta_rate": 1e-3}


@pytest.mark.parametrize("method", ["evidence", "vb"])
def test_flat_hyperprior_parameters_fit_what_the_dict_fitted(sinc, method):
    X, y = sinc
    Phi = design_matrix(X, X, RBF(1 / 9))
    labels = [str(j) for j in range(Phi.shape[1])]
    kw = dict(labels=labels, likelihood="gaussian", max_iter=methods.DEFAULT_MAX_ITER[method],
              tol=methods.DEFAULT_TOL[method])
    if method == "evidence":
        kw.update(solver="fast", alignment_test=True, start=0, beta=None, fit_beta=True)
    expected = methods.FIT_METHODS[method](Phi, y, priors=dict(PRIORS), **kw)
    # kernel="precomputed" with the bias: the estimator's design matrix is Phi itself.
    m = RVR(kernel="precomputed", method=method, **FLAT).fit(Phi[:, 1:], y)
    np.testing.assert_array_equal(m.alpha_, expected.alpha)
    np.testing.assert_array_equal(m.coef_[expected.support], expected.mean)
    # and it is not the default model
    default = RVR(kernel="precomputed", method=method).fit(Phi[:, 1:], y)
    assert not np.array_equal(default.alpha_, m.alpha_)


def test_flat_hyperprior_of_the_classifier_fits_what_the_dict_fitted(ripley):
    X, y = ripley
    Phi = design_matrix(X, X, RBF(4.0))
    labels = [str(j) for j in range(Phi.shape[1])]
    expected = methods.fit_vb(Phi, y.astype(float), labels=labels, likelihood="bernoulli",
                              priors={"a": 2.0, "b": 0.5}, max_iter=5000, tol=1e-7)
    m = RVC(kernel="precomputed", method="vb", alpha_shape=2.0, alpha_rate=0.5)
    m.fit(Phi[:, 1:], y)
    np.testing.assert_array_equal(m.alpha_[0], expected.alpha)
    # The evidence fit (type-II MAP under the hyperprior) likewise.
    expected = methods.fit_evidence(Phi, y.astype(float), labels=labels, likelihood="bernoulli",
                                    priors={"a": 2.0, "b": 0.5},
                                    max_iter=methods.DEFAULT_MAX_ITER["evidence"],
                                    tol=methods.DEFAULT_TOL["evidence"], solver="fast",
                                    alignment_test=True, start=None, beta=None, fit_beta=True)
    m = RVC(kernel="precomputed", alpha_shape=2.0, alpha_rate=0.5).fit(Phi[:, 1:], y)
    np.testing.assert_array_equal(m.alpha_[0], expected.alpha)
    assert not np.array_equal(m.alpha_[0], RVC(kernel="precomputed").fit(Phi[:, 1:], y).alpha_[0])


class _Built(Exception):
    """Raised by a stand-in for build_model, carrying the hyperpriors it got."""


@pytest.mark.parametrize("method", ["advi", "nuts"])
def test_flat_hyperprior_reaches_the_pymc_model_as_the_dict_did(sinc, monkeypatch, method):
    def spy(*args, **kwargs):
        raise _Built(kwargs["priors"])

    monkeypatch.setattr(build_mod, "build_model", spy)
    X, y = sinc
    Phi = design_matrix(X, X, RBF(1 / 9))
    labels = [str(j) for j in range(Phi.shape[1])]
    with pytest.raises(_Built) as internal:  # the dict path of methods.fit_advi/fit_nuts
        methods._sampling_model(Phi, 5 * y, labels, "gaussian", dict(PRIORS))
    with pytest.raises(_Built) as estimator:
        RVR(kernel="precomputed", method=method, **FLAT).fit(Phi[:, 1:], 5 * y)
    assert estimator.value.args[0] == internal.value.args[0]
    # in the units of y (Tipping's hyperprior on y / std(y))
    s2 = np.var(5 * y)
    assert internal.value.args[0] == pytest.approx(
        {"a": 1e-3, "b": 1e-2 * s2, "c": 0.5, "d": 1e-3 * s2}, rel=1e-12)


@pytest.mark.parametrize("name, bad", [("alpha_shape", -1.0), ("beta_rate", "1")])
def test_hyperprior_parameters_are_validated(sinc, name, bad):
    X, y = sinc
    with pytest.raises(ValueError, match=f"'{name}' parameter of RVR must be"):
        RVR(**{name: bad}).fit(X, y)


# 3. 23 parameters in no order.
GROUPS = {
    RVR: [
        ["kernel", "gamma", "degree", "coef0", "fit_intercept", "extra_basis", "learn_scales",
         "scale_schedule"],
        ["alpha_shape", "alpha_rate", "beta_shape", "beta_rate", "noise_std", "fit_noise",
         "min_noise_var_ratio", "low_rank"],
        ["method", "max_iter", "tol", "alignment_test", "solver"],
        ["draws", "tune", "chains", "sample_kwargs"],
        ["random_state", "compiled", "blas_threads", "progressbar"],
    ],
    RVC: [
        ["kernel", "gamma", "degree", "coef0", "fit_intercept"],
        ["alpha_shape", "alpha_rate", "multi_class", "shared_alpha"],
        ["method", "max_iter", "tol", "alignment_test"],
        ["draws", "tune", "chains", "sample_kwargs"],
        ["random_state", "blas_threads", "progressbar"],
    ],
    PoissonRVR: [
        ["kernel", "gamma", "degree", "coef0", "fit_intercept"],
        ["alpha_shape", "alpha_rate"],
        ["method", "max_iter", "tol", "alignment_test"],
        ["draws", "tune", "chains", "sample_kwargs"],
        ["random_state", "blas_threads", "progressbar"],
    ],
}


def _documented_groups(cls):
    """The Parameters section: a heading line (no " : ") opens each group."""
    doc = inspect.cleandoc(cls.__doc__)
    section = doc.split("Parameters\n----------\n", 1)[1].split("\n\n", 1)[0]
    groups = []
    for line in section.splitlines():
        if not line or line[0].isspace():
            continue
        if " : " in line:
            groups[-1] += line.split(" : ")[0].split(", ")
        else:
            groups.append([])
    return groups


@pytest.mark.parametrize("cls", [RVR, RVC, PoissonRVR])
def test_parameters_come_in_groups_in_the_signature_and_the_docstring(cls):
    params = inspect.signature(cls).parameters
    flat = [name for group in GROUPS[cls] for name in group]
    assert list(params) == flat
    assert [p.kind for p in params.values()][1:] == [inspect.Parameter.KEYWORD_ONLY] * (
        len(flat) - 1)
    assert _documented_groups(cls) == GROUPS[cls]
    assert set(cls._parameter_constraints) == set(flat)


# Persistence: the new parameters round-trip; a file with the old `priors` loads.
def test_netcdf_round_trips_the_hyperprior_and_the_method(tmp_path, sinc):
    X, y = sinc
    m = RVR(gamma=1 / 9, draws=10, **FLAT).fit(X, y, method="vb")
    m.to_netcdf(tmp_path / "m.nc")
    m2 = RVR.from_netcdf(tmp_path / "m.nc")
    assert m2.get_params() == m.get_params()
    assert m2.method == "vb"
    np.testing.assert_array_equal(m2.predict(X, return_std=True), m.predict(X, return_std=True))


def _as_format_3(est, path, priors, params_method=None):
    """Write ``est`` as rvm_ppl wrote it in file format 3: one ``priors`` dict."""
    from rvm_ppl.estimators import persistence

    idata = persistence._with_state(est)
    state = idata[persistence.STATE_GROUP]
    params = json.loads(state.attrs["params"])
    for name in priors_mod.PRIOR_PARAMS:
        params.pop(name, None)
    params["priors"] = priors
    if params_method is not None:  # format 3 kept the constructor's method
        params["method"] = params_method
    text = json.dumps(params)
    state.attrs.update(format_version=3, params=text,
                       model_id=persistence.model_id(type(est).__name__, text,
                                                     state.attrs["method"], 3))
    idata.to_netcdf(str(path))


def test_a_format_3_file_with_priors_loads_with_the_four_parameters(tmp_path, sinc, ripley):
    X, y = sinc
    m = RVR(gamma=1 / 9, draws=10, **FLAT).fit(X, y, method="vb")
    _as_format_3(m, tmp_path / "old.nc", PRIORS, params_method="evidence")
    old = RVR.from_netcdf(tmp_path / "old.nc")
    assert {k: old.get_params()[k] for k in FLAT} == FLAT
    assert old.method == old.method_ == "vb"
    np.testing.assert_array_equal(old.predict(X, return_std=True), m.predict(X, return_std=True))
    _as_format_3(m, tmp_path / "bad.nc", {"a": 1.0, "e": 2.0})
    with pytest.raises(ValueError, match="cannot be mapped to"):
        RVR.from_netcdf(tmp_path / "bad.nc")
    # On RVC, c and d had no effect: they are dropped.
    Xc, yc = ripley
    c = RVC(gamma=4.0, draws=10, alpha_shape=2.0, alpha_rate=0.5).fit(Xc, yc, method="vb")
    _as_format_3(c, tmp_path / "rvc.nc", {"a": 2.0, "b": 0.5, "c": 1.0, "d": 1.0})
    c2 = RVC.from_netcdf(tmp_path / "rvc.nc")
    assert (c2.alpha_shape, c2.alpha_rate) == (2.0, 0.5)
    np.testing.assert_array_equal(c2.predict_proba(Xc), c.predict_proba(Xc))


