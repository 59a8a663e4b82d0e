"""The evidence fit's start: the empty model as a local maximum, and the cap on the noise precision.

The empty model (or the bias alone) is a local maximum of the evidence whenever every
candidate's ``cos^2`` with the targets is below ``1 / N``; an ascent started from a large
noise stops there although a few columns fit the targets exactly. Each problem below is
checked to be of that kind (``_empty_is_a_local_maximum``) before the fit is asked to
leave it. The cap ``beta <= 1 / (min_noise_var_ratio var(y))`` is SparseBayes's
``BetaMaxFactor``; on noise-free targets it sets the fitted noise.
"""

import json
import warnings
from types import SimpleNamespace

import h5netcdf
import numpy as np
import pytest
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV

from rvm_ppl import RVR
from rvm_ppl.closed_form.constants import BETA_MAX_FACTOR, MIN_NOISE_VAR_RATIO, noise_precision_cap
from rvm_ppl.closed_form.evidence import escape_noise, fit_evidence_regression
from rvm_ppl.datasets.loaders import make_sinc
from rvm_ppl.estimators import persistence
from rvm_ppl.kernels.basis import DenseBasis


def _empty_is_a_local_maximum(Phi, t):
    """At the empty model's best noise ``beta = N / ||t||^2`` no column has ``q^2 > s``."""
    cos2 = (Phi.T @ t) ** 2 / (np.sum(Phi**2, axis=0) * (t @ t))
    return bool(np.max(cos2) < 1.0 / len(t))


def _empty_log_evidence(t):
    """``log N(t | 0, ||t||^2 / N I)``: the empty model at its best noise."""
    n = len(t)
    return -0.5 * n * (np.log(2 * np.pi * (t @ t) / n) + 1.0)


def _r2(Phi, t, res):
    r = t - Phi[:, res.active] @ res.mu
    return 1.0 - (r @ r) / (len(t) * np.var(t))


def _gram_polynomial(n, degree):
    """The degree-``degree`` polynomial on ``n`` equispaced points orthogonal to all lower ones."""
    x = np.linspace(0.0, 1.0, n)
    V = np.vander(x, degree + 1, increasing=True)
    q, _ = np.linalg.qr(V)
    return V, q[:, degree] * np.sqrt(n)


def _near_duplicates(n, eps, n_other, seed):
    """Columns ``a + eps b`` and ``a - eps b`` and others orthogonal to ``b``; target ``b``."""
    rng = np.random.default_rng(seed)
    a = rng.normal(size=n)
    b = np.linalg.qr(np.column_stack([np.ones(n), a, rng.normal(size=n)]))[0][:, 2] * np.sqrt(n)
    other = rng.normal(size=(n, n_other))
    other -= np.outer(b, b @ other) / (b @ b)
    return np.column_stack([np.ones(n), a + eps * b, a - eps * b, other]), b


# -- point: a large initial noise does not decide the fit ----------------------------------

SKLEARN_X = np.vander(np.linspace(0, 4, 5), 4)
SKLEARN_Y = np.array([0.0, 1.0, 0.0, -1.0, 0.0])  # (x^3 - 6x^2 + 8x) / 3 (test_bayes.py)


@pytest.mark.parametrize("fit_intercept", [True, False])
@pytest.mark.parametrize("noise", [1.0, 3.0, 0.3])
def test_scikit_learns_initial_parameter_cubic_is_fitted_from_a_large_noise(noise, fit_intercept):
    X, y = SKLEARN_X, SKLEARN_Y
    assert _empty_is_a_local_maximum(np.column_stack([np.ones(5), X]), y)
    default = RVR(kernel="precomputed", fit_intercept=fit_intercept).fit(X, y)
    m = RVR(kernel="precomputed", noise_std=noise * np.std(y), fit_intercept=fit_intercept).fit(X, y)
    assert m.score(X, y) > 1 - 1e-9
    assert m.log_evidence_ == pytest.approx(default.log_evidence_, rel=1e-6)
    assert m.log_evidence_ > _empty_log_evidence(y) + 8.0


@pytest.mark.parametrize("n, degree, offset", [(7, 4, 0.0), (9, 5, 0.0), (12, 4, 3.0), (20, 6, -2.0)])
def test_an_orthogonal_polynomial_leaves_the_empty_or_bias_only_model(n, degree, offset):
    """The bias-only model is the trap when the targets have a mean (``offset``)."""
    V, p = _gram_polynomial(n, degree)
    t = p + offset
    assert _empty_is_a_local_maximum(V[:, 1:], p)  # the columns besides the bias against p
    for beta in (1.0 / np.var(t), None):
        for multistart in (False, True):
            res = fit_evidence_regression(V, t, beta=beta, start=0, multistart=multistart,
                                          warn=False)
            assert degree in res.active
            assert _r2(V, t, res) > 1 - 1e-9


@pytest.mark.parametrize("eps", [1e-1, 1e-3])
def test_near_duplicate_columns_whose_difference_is_the_target_are_found(eps):
    Phi, t = _near_duplicates(40, eps, 10, seed=0)
    assert _empty_is_a_local_maximum(Phi, t)
    for beta in (None, 1.0 / np.var(t), 0.1 / np.var(t)):
        for multistart in (False, True):
            res = fit_evidence_regression(Phi, t, beta=beta, start=0, multistart=multistart,
                                          warn=False)
            assert {1, 2} <= set(res.active.tolist())
            assert _r2(Phi, t, res) > 1 - 1e-9
            assert res.log_evidence > _empty_log_evidence(t) + 100.0


def test_the_escape_runs_above_the_multistart_size_and_in_both_loops():
    """N = 600 > MULTISTART_MAX_N: no multistart, the escape still; Python and engine agree."""
    Phi, t = _near_duplicates(600, 1e-2, 20, seed=1)
    assert _empty_is_a_local_maximum(Phi, t)
    runs = [fit_evidence_regression(Phi, t, beta=1.0 / np.var(t), start=0, compiled=c, warn=False)
            for c in (False, True)]
    for res in runs:
        assert {1, 2} <= set(res.active.tolist())
        assert _r2(Phi, t, res) > 1 - 1e-9
        assert res.counts["starts"] == 2
    py, engine = runs
    np.testing.assert_array_equal(py.active, engine.active)
    assert py.log_evidence == pytest.approx(engine.log_evidence, rel=1e-9)
    assert py.beta == pytest.approx(engine.beta, rel=1e-7)


def test_pure_noise_keeps_a_trivial_fit_and_a_real_fit_runs_one_ascent():
    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, size=(60, 1))
    noise = rng.normal(size=60)
    Phi = np.column_stack([np.ones(60), X, X**2, np.sin(3 * X)])
    res = fit_evidence_regression(Phi, noise, start=0, multistart=False, warn=False)
    assert res.counts["starts"] == 2  # the first ascent was trivial; so is the kept one
    assert res.active.size == 0
    assert 1.0 / res.beta == pytest.approx(np.mean(noise**2), rel=1e-6)  # N / ||t||^2
    X, y = make_sinc(100, random_state=0)
    Phi = np.column_stack([np.ones(100), np.exp(-((X - X.T) ** 2) / 9)])
    fit = fit_evidence_regression(Phi, y, start=0, multistart=False)
    assert "starts" not in fit.counts  # explains most of var(y): one ascent
    assert escape_noise(DenseBasis(Phi), y, fit, 1.0, np.inf) is None


def test_escape_noise_is_the_snr_start_on_what_the_best_column_explains():
    """For the empty model the start is ``100 / (max cos^2 mean(t^2))``, SparseBayes's SNR;
    with the bias in, the same on the centred columns and targets."""
    y = SKLEARN_Y + 2.0
    X = SKLEARN_X[:, :3]  # x^3, x^2, x
    Phi = np.column_stack([np.ones(5), X])
    basis = DenseBasis(Phi)

    def trivial(active, noise_var):
        return SimpleNamespace(beta=1.0 / noise_var, active=np.array(active, dtype=int))

    cos2 = (Phi.T @ y) ** 2 / (np.sum(Phi**2, axis=0) * (y @ y))
    expected = 100.0 / (np.max(cos2) * np.mean(y**2))
    empty = trivial([], np.mean(y**2))
    assert escape_noise(basis, y, empty, 1.0 / np.var(y), np.inf) == pytest.approx(expected, rel=1e-9)
    assert escape_noise(basis, y, empty, 2 * expected, np.inf) is None  # not a smaller noise
    assert escape_noise(basis, y, empty, 1.0, 5.0) == 5.0  # capped
    assert escape_noise(basis, y, trivial([], 0.9 * np.var(y)), 1.0, np.inf) is None  # not trivial
    Xc, yc = X - X.mean(0), y - y.mean()
    cos2 = (Xc.T @ yc) ** 2 / (np.sum(Xc**2, axis=0) * (yc @ yc))
    expected = 100.0 / (np.max(cos2) * np.mean(yc**2))
    bias = trivial([0], np.var(y))
    assert escape_noise(basis, y, bias, 1.0, np.inf) == pytest.approx(expected, rel=1e-9)


# -- point: the noise-precision cap as a setting --------------------------------------------

@pytest.fixture(scope="module")
def noise_free():
    X, y = make_sinc(100, noise=None)
    fits = {r: RVR(gamma=1 / 9, min_noise_var_ratio=r, progressbar=False).fit(X, y)
            for r in (MIN_NOISE_VAR_RATIO, 1e-9, 0.0)}
    return X, y, fits


def _mean_predictive_variance(m, X):
    return float(np.mean(m.predict(X, return_std=True)[1] ** 2))


def test_the_default_cap_is_sparsebayes_and_sets_the_noise_free_fit(noise_free):
    X, y, fits = noise_free
    m = fits[MIN_NOISE_VAR_RATIO]
    assert 1.0 / m.beta_ == pytest.approx(1e-6 * np.var(y), rel=1e-12)
    # The fit before the cap became a setting (same code path): these exact numbers.
    assert m.beta_ == 8089861.844480288
    assert m.log_evidence_ == 615.6626569853914
    again = RVR(gamma=1 / 9, progressbar=False).fit(X, y)
    assert again.beta_ == m.beta_ and np.array_equal(again.coef_, m.coef_)


def test_the_cap_is_the_same_number_as_betamaxfactor_bit_for_bit():
    v = np.random.default_rng(0).uniform(1e-8, 1e8, 10_000)
    assert all(noise_precision_cap(x) == BETA_MAX_FACTOR / x for x in v)
    assert noise_precision_cap(2.0, 0.0) == np.inf


def test_lifting_the_cap_lets_the_noise_free_fit_reach_its_own_maximum(noise_free):
    X, y, fits = noise_free
    capped, lifted = fits[MIN_NOISE_VAR_RATIO], fits[0.0]
    assert 1.0 / lifted.beta_ < 1e-3 * (1.0 / capped.beta_)
    assert _mean_predictive_variance(lifted, X) < 1e-3 * _mean_predictive_variance(capped, X)
    assert lifted.log_evidence_ > capped.log_evidence_
    # The uncapped maximum: a cap below it changes nothing.
    loose = RVR(gamma=1 / 9, min_noise_var_ratio=1e-14, progressbar=False).fit(X, y)
    assert loose.beta_ == pytest.approx(lifted.beta_, rel=1e-9)
    assert _mean_predictive_variance(loose, X) == pytest.approx(_mean_predictive_variance(lifted, X),
                                                                rel=1e-9)


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("ratio", [1e-7, 1e-8])
def test_a_binding_cap_holds_in_both_loops(noise_free, compiled, ratio):
    X, y, _ = noise_free
    m = RVR(gamma=1 / 9, min_noise_var_ratio=ratio, compiled=compiled, progressbar=False).fit(X, y)
    assert 1.0 / m.beta_ == pytest.approx(ratio * np.var(y), rel=1e-12)


def test_the_full_solver_takes_the_cap_too(noise_free):
    X, y, _ = noise_free
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = RVR(gamma=1 / 9, solver="full", min_noise_var_ratio=1e-4, max_iter=200,
                progressbar=False).fit(X, y)
    assert 1.0 / m.beta_ == pytest.approx(1e-4 * np.var(y), rel=1e-12)


@pytest.mark.parametrize("bad", [-1e-3, 1.0, 2.0, np.nan, "small"])
def test_a_bad_ratio_is_a_value_error_naming_it(bad):
    X, y = make_sinc(20, random_state=0)
    m = RVR(min_noise_var_ratio=bad)
    with pytest.raises((ValueError, TypeError), match="min_noise_var_ratio"):
        m.fit(X, y)
    assert not hasattr(m, "result_")
    with pytest.raises((ValueError, TypeError), match="min_noise_var_ratio"):
        fit_evidence_regression(np.ones((5, 1)), np.arange(5.0), min_noise_var_ratio=bad)


def test_get_params_clone_and_grid_search_carry_the_ratio():
    X, y = make_sinc(40, random_state=1)
    m = RVR(gamma=1 / 9, min_noise_var_ratio=1e-3)
    assert m.get_params()["min_noise_var_ratio"] == 1e-3
    assert clone(m).min_noise_var_ratio == 1e-3
    grid = GridSearchCV(RVR(gamma=1 / 9, progressbar=False),
                        {"min_noise_var_ratio": [1e-6, 0.5]}, cv=2).fit(X, y)
    scores = grid.cv_results_["mean_test_score"]
    assert scores[0] != scores[1]  # the setting reached the fits
    assert grid.best_estimator_.min_noise_var_ratio == grid.best_params_["min_noise_var_ratio"]
    fitted = RVR(gamma=1 / 9, min_noise_var_ratio=0.5, progressbar=False).fit(X, y)
    assert 1.0 / fitted.beta_ == pytest.approx(0.5 * np.var(y), rel=1e-12)


def test_persistence_keeps_the_ratio_and_reads_files_written_without_it(tmp_path, noise_free):
    X, y, _ = noise_free
    small = dict(gamma=1 / 9, chains=1, draws=20, progressbar=False)  # a small idata to write
    m = RVR(min_noise_var_ratio=1e-9, **small).fit(X, y)
    path = tmp_path / "capped.nc"
    m.to_netcdf(path)
    back = RVR.from_netcdf(path)
    assert back.min_noise_var_ratio == 1e-9
    np.testing.assert_array_equal(back.predict(X), m.predict(X))
    # A file written before the setting existed: its parameters lack the key.
    old = RVR(**small).fit(X, y)
    path = tmp_path / "old.nc"
    old.to_netcdf(path)
    with h5netcdf.File(path, "r+") as f:
        attrs = f["estimator_state"].attrs
        params = json.loads(attrs["params"])
        del params["min_noise_var_ratio"]
        text = json.dumps(params)
        attrs["params"] = text
        attrs["model_id"] = persistence.model_id("RVR", text, attrs["method"])
    back = RVR.from_netcdf(path)
    assert back.min_noise_var_ratio == MIN_NOISE_VAR_RATIO
    np.testing.assert_array_equal(back.predict(X), old.predict(X))
    refit = clone(back).fit(X, y)
    assert refit.beta_ == old.beta_
