"""What scikit-learn's Bayesian linear models give their users: scores_, float32, n_iter_.

``scores_`` is the objective trace of the ``fit`` group (as
``ARDRegression(compute_score=True).scores_``), ``n_iter_`` what the fit ran,
and float32 inputs give float32 weights and predictions
(``sklearn/linear_model/tests/test_bayes.py``, ``test_dtype_match``).
"""

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning

from rvm_ppl import RVC, RVR, PoissonRVR
from rvm_ppl.closed_form.categorical import fit_evidence_multinomial
from rvm_ppl.closed_form.evidence import fit_evidence_regression
from rvm_ppl.datasets.loaders import load_ripley, make_sinc, make_three_class
from rvm_ppl.kernels.kernel import RBF, design_matrix


@pytest.fixture(scope="module")
def sinc():
    return make_sinc(60, random_state=3)


@pytest.fixture(scope="module")
def ripley():
    X, y, _, _ = load_ripley()
    return X[::5], y[::5]


@pytest.fixture(scope="module")
def counts():
    rng = np.random.default_rng(sum(map(ord, "counts")))
    X = rng.uniform(-10, 10, (50, 1))
    return X, rng.poisson(np.exp(1 + 2 * np.sinc(X[:, 0] / np.pi))).astype(float)


def _fit_trace(m, name):
    return m.idata_.fit[name].values


def _never_decreases(trace):
    """No step down beyond rounding error (1e-12 relative)."""
    return np.all(np.diff(trace) >= -1e-12 * np.abs(trace[1:]))


# -- scores_ ---------------------------------------------------------------------------
@pytest.mark.parametrize("solver", ["fast", "full"])
def test_evidence_scores_are_the_log_evidence_trace_ending_at_log_evidence(sinc, solver):
    X, y = sinc
    m = RVR(gamma=1 / 9, solver=solver, draws=10, random_state=0).fit(X, y)
    assert m.scores_ is not None and m.scores_.ndim == 1
    np.testing.assert_array_equal(m.scores_, _fit_trace(m, "log_evidence"))
    assert m.scores_[-1] == m.log_evidence_
    if solver == "fast":  # every accepted step raises the exact evidence (docs/numerics.md)
        assert _never_decreases(m.scores_)
    else:  # Tipping's full re-estimation: the start and one value after each iteration
        assert len(m.scores_) == m.n_iter_ + 1


def test_map_evidence_scores_are_the_penalised_objective(sinc):
    """Under a hyperprior the fit maximises the log evidence plus the log hyperprior."""
    X, y = sinc
    m = RVR(gamma=1 / 9, alpha_shape=1e-3, alpha_rate=1e-3, draws=10).fit(X, y)
    np.testing.assert_array_equal(m.scores_, _fit_trace(m, "objective"))
    assert m.scores_[-1] == m.result_.stats["objective"]
    assert _never_decreases(m.scores_)
    # The log evidence alone is not what rose: it falls somewhere on this fit.
    assert not _never_decreases(_fit_trace(m, "log_evidence"))


def test_vb_scores_are_the_bound_one_per_sweep(sinc, ripley):
    for est, (X, y) in ((RVR(gamma=1 / 9), sinc), (RVC(gamma=4.0), ripley)):
        m = est.set_params(draws=10).fit(X, y, method="vb")
        np.testing.assert_array_equal(m.scores_, _fit_trace(m, "elbo"))
        result = m.results_[0] if isinstance(m, RVC) else m.result_
        assert m.scores_[-1] == result.stats["elbo"] == m.idata_.attrs["elbo"]
        assert _never_decreases(m.scores_)  # coordinate ascent on the bound
        assert len(m.scores_) == np.sum(m.n_iter_)  # one bound per sweep


def test_vb_n_iter_stops_at_max_iter(sinc):
    X, y = sinc
    with pytest.warns(ConvergenceWarning):
        m = RVR(gamma=1 / 9, max_iter=7).fit(X, y, method="vb")
    assert m.n_iter_ == 7 and len(m.scores_) == 7


def test_rvc_scores_one_vs_rest_and_binary(ripley):
    X, y = ripley
    binary = RVC(gamma=4.0, draws=10).fit(X, y)
    np.testing.assert_array_equal(binary.scores_, _fit_trace(binary, "log_evidence"))
    assert binary.scores_[-1] == binary.log_evidence_[0]
    assert binary.n_iter_.shape == (1,)

    X3, y3 = make_three_class(90, random_state=0)
    ovr = RVC(gamma=0.5, draws=10).fit(X3, y3)
    assert ovr.scores_.shape[0] == 3 and ovr.n_iter_.shape == (3,)
    # The fit group's (class, iteration) array, NaN after each model's last iteration.
    np.testing.assert_array_equal(ovr.scores_, _fit_trace(ovr, "log_evidence"))
    for k, r in enumerate(ovr.results_):
        row = ovr.scores_[k]
        n = len(r.fit["log_evidence"][1])
        assert np.isnan(row[n:]).all() and not np.isnan(row[:n]).any()
        assert row[n - 1] == ovr.log_evidence_[k]


def test_multinomial_scores_and_n_iter_are_the_one_models(ripley):
    X3, y3 = make_three_class(90, random_state=0)
    m = RVC(gamma=0.5, multi_class="multinomial", draws=10).fit(X3, y3)
    np.testing.assert_array_equal(m.scores_, _fit_trace(m, "log_evidence"))
    assert m.scores_.ndim == 1 and m.scores_[-1] == m.log_evidence_
    # The driver's own count, run on the dense design (the estimator's basis may be a
    # low-rank factor of it, equal to rounding).
    res = fit_evidence_multinomial(design_matrix(X3, X3, RBF(gamma=0.5)), y3, n_classes=3,
                                   shared_alpha=False, max_iter=10_000, tol=1e-3,
                                   alignment_test=True, progressbar=False, priors=None)
    assert m.n_iter_.tolist() == [res.n_iter]
    np.testing.assert_allclose(m.scores_, res.log_evidence_trace, rtol=1e-12)


def test_poisson_scores_end_at_the_laplace_log_evidence(counts):
    X, y = counts
    m = PoissonRVR(gamma=1 / 9, draws=10).fit(X, y)
    np.testing.assert_array_equal(m.scores_, _fit_trace(m, "log_evidence"))
    assert m.scores_[-1] == m.log_evidence_


# -- n_iter_ ---------------------------------------------------------------------------
def test_evidence_n_iter_is_the_drivers_count(sinc):
    X, y = sinc
    m = RVR(gamma=1 / 9).fit(X, y)
    s = y.std()
    res = fit_evidence_regression(design_matrix(X, X, RBF(gamma=1 / 9)), y / s, start=0,
                                  max_iter=10_000, tol=1e-3)
    assert m.n_iter_ == res.n_iter
    np.testing.assert_array_equal(m.scores_, res.log_evidence_trace - len(y) * np.log(s))


# -- float32 ---------------------------------------------------------------------------
def test_float32_matches_scikit_learns_dtype_test():
    """``test_dtype_match`` and ``test_dtype_correctness`` of scikit-learn's Bayesian regressors.

    On their data: float32 ``X`` with integer ``y`` (the dtype of ``X`` decides).
    """
    X = np.array([[1, 1], [3, 4], [5, 7], [4, 1], [2, 6], [3, 10], [3, 2]], dtype=np.float32)
    y = np.array([1, 2, 3, 2, 0, 4, 5])
    for method in ("evidence", "vb"):
        m = RVR(kernel="linear", draws=10).fit(X, y, method=method)
        assert m.coef_.dtype == m.sigma_.dtype == np.float32
        mean, std = m.predict(X, return_std=True)
        assert mean.dtype == std.dtype == np.float32
        m64 = RVR(kernel="linear", draws=10).fit(X.astype(np.float64), y, method=method)
        assert m64.coef_.dtype == m64.sigma_.dtype == np.float64
        # test_dtype_correctness asks rtol 1e-4; integer X is exact in float32, so equality.
        np.testing.assert_array_equal(m.coef_, m64.coef_.astype(np.float32))


@pytest.mark.parametrize("method", ["evidence", "vb"])
def test_float32_fit_is_the_float64_fit_cast(sinc, method):
    X, y = (a.astype(np.float32) for a in sinc)
    m32 = RVR(gamma=1 / 9, draws=10).fit(X, y, method=method)
    m64 = RVR(gamma=1 / 9, draws=10).fit(X.astype(np.float64), y.astype(np.float64),
                                         method=method)
    # Computed in float64 from the same numbers: the float64 results, rounded once.
    np.testing.assert_array_equal(m32.coef_, m64.coef_.astype(np.float32))
    np.testing.assert_array_equal(m32.sigma_, m64.sigma_.astype(np.float32))
    Xt = np.linspace(-10, 10, 7, dtype=np.float32)[:, None]
    for a, b in zip(m32.predict(Xt, return_std=True), m64.predict(Xt.astype(np.float64),
                                                                   return_std=True),
                    strict=True):
        assert a.dtype == np.float32 and b.dtype == np.float64
        np.testing.assert_array_equal(a, b.astype(np.float32))
    # What is not a weight stays float64: hyperparameters and objectives.
    assert m32.alpha_.dtype == m32.scores_.dtype == np.float64
    np.testing.assert_array_equal(m32.scores_, m64.scores_)
    # float32 X on a float64 fit: numpy's promotion, float64.
    assert m64.predict(Xt).dtype == np.float64
    assert m32.predict(Xt.astype(np.float64)).dtype == np.float64


@pytest.mark.parametrize("multi_class", ["ovr", "multinomial"])
def test_float32_classifier_probabilities(multi_class):
    X, y = make_three_class(60, random_state=1)
    X32 = X.astype(np.float32)
    c32 = RVC(gamma=0.5, multi_class=multi_class, random_state=0).fit(X32, y)
    c64 = RVC(gamma=0.5, multi_class=multi_class, random_state=0).fit(
        X32.astype(np.float64), y)
    assert c32.coef_.dtype == np.float32 and c64.coef_.dtype == np.float64
    assert all(s.dtype == np.float32 for s in c32.sigma_)
    P32, P64 = c32.predict_proba(X32), c64.predict_proba(X32.astype(np.float64))
    assert P32.dtype == np.float32 and P64.dtype == np.float64
    np.testing.assert_array_equal(P32, P64.astype(np.float32))
    np.testing.assert_array_equal(c32.decision_function(X32),
                                  c64.decision_function(X32.astype(np.float64)).astype(np.float32))
    np.testing.assert_array_equal(c32.predict(X32), c64.predict(X32.astype(np.float64)))


def test_float32_poisson(counts):
    X, y = counts
    X32 = X.astype(np.float32)
    m32 = PoissonRVR(gamma=1 / 9).fit(X32, y.astype(np.float32))
    m64 = PoissonRVR(gamma=1 / 9).fit(X32.astype(np.float64), y)
    assert m32.coef_.dtype == m32.sigma_.dtype == np.float32
    P32, P64 = m32.predict(X32), m64.predict(X32.astype(np.float64))
    assert P32.dtype == np.float32 and P64.dtype == np.float64
    np.testing.assert_array_equal(P32, P64.astype(np.float32))


def test_float64_is_unchanged_by_the_float32_path(sinc):
    """float64 inputs: no cast anywhere, the arrays the fit computed."""
    X, y = sinc
    m = RVR(gamma=1 / 9).fit(X, y)
    assert m.coef_.dtype == np.float64 and m.sigma_ is m.result_.cov


def test_a_failed_float32_fit_leaves_the_float64_fit(sinc):
    X, y = sinc
    m = RVR(gamma=1 / 9).fit(X, y).set_params(learn_scales=True)
    params, scores = m.get_params(), m.scores_
    with pytest.raises(ValueError, match="learn_scales"):
        m.fit(X.astype(np.float32), y, method="vb")
    assert m.coef_.dtype == np.float64 and m.scores_ is scores and m.get_params() == params
    m.set_params(learn_scales=False).fit(X.astype(np.float32), y)
    assert m.coef_.dtype == np.float32
    m.fit(X, y)  # a float64 refit gives float64 again
    assert m.coef_.dtype == np.float64


def test_saved_float32_fit_keeps_dtype_and_scores(tmp_path, ripley):
    X, y = ripley
    for est in (RVR(gamma=1 / 9, draws=10), RVC(gamma=4.0, draws=10)):
        m = est.fit(X.astype(np.float32), y if isinstance(est, RVC) else X[:, 0] ** 2)
        path = tmp_path / f"{type(est).__name__}.nc"
        m.to_netcdf(path)
        m2 = type(est).from_netcdf(path)
        assert m2.coef_.dtype == np.float32
        np.testing.assert_array_equal(m2.scores_, m.scores_)
        np.testing.assert_array_equal(m2.n_iter_, m.n_iter_)
        Xt = X[:5].astype(np.float32)
        out, out2 = ((m.predict_proba(Xt), m2.predict_proba(Xt)) if isinstance(est, RVC)
                     else (m.predict(Xt), m2.predict(Xt)))
        assert out2.dtype == np.float32
        np.testing.assert_array_equal(out, out2)


# -- advi and nuts ---------------------------------------------------------------------
@pytest.mark.slow
def test_advi_scores_are_the_elbo_history_and_n_iter_its_length(sinc):
    X, y = sinc
    with pytest.warns(ConvergenceWarning):
        m = RVR(gamma=1 / 9, max_iter=60, draws=20, random_state=0,
                progressbar=False).fit(X, y, method="advi")
    # The ELBO (not PyMC's loss = -ELBO) of every iteration run, a one-sample estimate each.
    np.testing.assert_array_equal(m.scores_, _fit_trace(m, "elbo"))
    assert m.n_iter_ == len(m.scores_) == 60


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::rvm_ppl.pymc_fitters.nuts.SamplingWarning")  # few draws
def test_nuts_has_no_scores_and_counts_iterations_per_chain(sinc):
    X, y = sinc
    m = RVR(gamma=1 / 9, draws=30, tune=40, chains=2, random_state=0,
            progressbar=False).fit(X[::2], y[::2], method="nuts")
    assert m.scores_ is None and "iteration" not in m.idata_.fit.dims
    assert m.idata_.posterior.sizes["draw"] == 30
    assert m.n_iter_ == 40 + 30 == m.idata_.attrs["n_iter"]


@pytest.mark.slow
def test_rvc_advi_scores_and_n_iter(ripley):
    X, y = ripley
    with pytest.warns(ConvergenceWarning):
        m = RVC(gamma=4.0, max_iter=50, draws=20, random_state=0,
                progressbar=False).fit(X, y, method="advi")
    np.testing.assert_array_equal(m.scores_, _fit_trace(m, "elbo"))
    assert m.n_iter_.tolist() == [50] and len(m.scores_) == 50


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::rvm_ppl.pymc_fitters.nuts.SamplingWarning")  # few draws
def test_nuts_n_iter_of_the_multinomial_and_counts_models(counts):
    X3, y3 = make_three_class(45, random_state=0)
    kw = dict(draws=20, tune=30, chains=2, random_state=0, progressbar=False)
    c = RVC(gamma=0.5, multi_class="multinomial", **kw).fit(X3, y3, method="nuts")
    assert c.scores_ is None and c.n_iter_.tolist() == [50]
    assert c.idata_.posterior.sizes["draw"] == 20
    X, y = counts
    p = PoissonRVR(gamma=1 / 9, **kw).fit(X[::2], y[::2], method="nuts")
    assert p.scores_ is None and p.n_iter_ == 50


@pytest.mark.slow
def test_advi_scores_of_the_multinomial_and_counts_models(counts):
    X3, y3 = make_three_class(45, random_state=0)
    kw = dict(max_iter=40, draws=20, random_state=0, progressbar=False)
    X, y = counts
    for m, data in ((RVC(gamma=0.5, multi_class="multinomial", **kw), (X3, y3)),
                    (PoissonRVR(gamma=1 / 9, **kw), (X[::2], y[::2]))):
        with pytest.warns(ConvergenceWarning):
            m.fit(*data, method="advi")
        np.testing.assert_array_equal(m.scores_, _fit_trace(m, "elbo"))
        assert len(m.scores_) == 40 and np.atleast_1d(m.n_iter_).tolist() == [40]
