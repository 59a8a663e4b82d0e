"""RVR: the scikit-learn contract, predictions against closed forms, bad input."""

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.exceptions import NotFittedError

import rvm_ppl.estimators.base as est_mod
from rvm_ppl import RVR
from rvm_ppl.datasets.loaders import make_sinc
from rvm_ppl.kernels.kernel import RBF, design_matrix


@pytest.fixture(scope="module")
def sinc():
    return make_sinc(80, random_state=7)


@pytest.fixture(scope="module")
def fitted(sinc):
    X, y = sinc
    return RVR(gamma=1 / 9, random_state=0, draws=400).fit(X, y)


def test_fit_returns_self_and_leaves_parameters_alone(sinc):
    X, y = sinc
    m = RVR(gamma=1 / 9, alpha_shape=1e-6)
    before = m.get_params()
    assert m.fit(X, y) is m
    assert m.get_params() == before
    assert clone(m).get_params() == before


def test_predictive_variance_is_tipping_eq22_with_bias(fitted, sinc):
    X, y = sinc
    Xt = np.linspace(-12, 12, 7)[:, None]
    mean, std = fitted.predict(Xt, return_std=True)
    Phi_t = design_matrix(Xt, X, RBF(1 / 9))[:, fitted.active_]
    assert 0 in fitted.active_ or fitted.coef_[0] == 0
    np.testing.assert_allclose(mean, Phi_t @ fitted.coef_[fitted.active_], rtol=1e-12)
    var = 1 / fitted.beta_ + np.array([p @ fitted.sigma_ @ p for p in Phi_t])
    np.testing.assert_allclose(std**2, var, rtol=1e-12)


def test_analytic_predictive_matches_posterior_draws(fitted, sinc):
    X, _ = sinc
    Xt = np.array([[-3.0], [0.0], [4.5]])
    mean, std = fitted.predict(Xt, return_std=True)
    post = fitted.idata_.posterior
    Phi_all = design_matrix(Xt, X, RBF(1 / 9))[:, fitted.active_]
    f = np.einsum("cdm,nm->cdn", post["w"].values, Phi_all).reshape(-1, 3)
    se = f.std(0) / np.sqrt(f.shape[0])
    assert np.all(np.abs(f.mean(0) - mean) < 4 * se)
    np.testing.assert_allclose(f.var(0) + 1 / fitted.beta_, std**2, rtol=0.15)


def test_idata_layout(fitted):
    idata = fitted.idata_
    post = idata.posterior
    assert post["w"].dims == ("chain", "draw", "basis")
    assert post["alpha"].dims == ("chain", "draw", "basis")
    assert post["beta"].dims == ("chain", "draw")
    # The posterior covers the bases in the model; the pruned ones are point
    # masses (w = 0, alpha = inf), listed once in `relevance` over all 81.
    labels = list(idata.relevance.basis.values)
    assert labels[0] == "bias" and labels[1] == "x_0" and len(labels) == 81
    assert list(post.basis.values) == [labels[j] for j in fitted.active_]
    pruned = ~idata.relevance["in_model"].values
    assert pruned.sum() == 81 - len(fitted.active_)
    assert np.isinf(idata.relevance["alpha"].values[pruned]).all()
    np.testing.assert_allclose(post["alpha"].values[0, 0], fitted.alpha_[fitted.active_])
    trace = idata.fit["log_evidence"].values
    assert trace[-1] == pytest.approx(fitted.log_evidence_, rel=1e-8)
    assert np.diff(trace).min() >= -1e-9 * abs(trace[-1])
    assert idata.attrs["inference_method"] == "evidence"
    relevant = [f"x_{i}" for i in fitted.relevance_]
    assert set(relevant) <= set(idata.posterior.basis.values)


def test_idata_is_reproducible(sinc):
    X, y = sinc
    a = RVR(gamma=1 / 9, random_state=3, draws=50).fit(X, y).idata_.posterior["w"].values
    b = RVR(gamma=1 / 9, random_state=3, draws=50).fit(X, y).idata_.posterior["w"].values
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("factor", [1e-140, 1e-6, 1e6, 1e140])
def test_scale_invariance(fitted, sinc, factor):
    X, y = sinc
    m = RVR(gamma=1 / 9).fit(X, y * factor)
    np.testing.assert_array_equal(m.relevance_, fitted.relevance_)
    Xt = np.linspace(-10, 10, 9)[:, None]
    mean, std = m.predict(Xt, return_std=True)
    m0, s0 = fitted.predict(Xt, return_std=True)
    np.testing.assert_allclose(mean / factor, m0, rtol=1e-8, atol=1e-12)
    np.testing.assert_allclose(std / factor, s0, rtol=1e-8)
    assert m.alpha_[m.active_] * factor**2 == pytest.approx(fitted.alpha_[fitted.active_], rel=1e-8)


def test_fixed_noise(sinc):
    X, y = sinc
    m = RVR(gamma=1 / 9, noise_std=0.2, fit_noise=False).fit(X, y)
    assert m.beta_ == pytest.approx(25.0)


def test_precomputed_design_matrix_equals_kernel(sinc, fitted):
    X, y = sinc
    K = RBF(1 / 9)(X, X)
    m = RVR(kernel="precomputed").fit(K, y)
    np.testing.assert_array_equal(m.relevance_, fitted.relevance_)
    Xt = np.linspace(-10, 10, 5)[:, None]
    np.testing.assert_allclose(m.predict(RBF(1 / 9)(Xt, X)), fitted.predict(Xt), rtol=1e-10)


def test_lazy_kernel_path_equals_dense(monkeypatch, sinc, fitted):
    X, y = sinc
    monkeypatch.setattr(est_mod, "DENSE_LIMIT", 10)
    m = RVR(gamma=1 / 9).fit(X, y)
    np.testing.assert_array_equal(m.active_, fitted.active_)
    assert m.log_evidence_ == pytest.approx(fitted.log_evidence_, rel=1e-10)


def test_full_solver(sinc, fitted):
    X, y = sinc
    m = RVR(gamma=1 / 9, solver="full").fit(X, y)
    assert abs(m.log_evidence_ - fitted.log_evidence_) < 3.0


def test_predict_before_fit_and_feature_mismatch(fitted):
    with pytest.raises(NotFittedError):
        RVR().predict(np.zeros((2, 1)))
    with pytest.raises(ValueError, match="features"):
        fitted.predict(np.zeros((2, 3)))


BAD_INPUTS = [
    ("nan in X", lambda X, y: (np.where(np.arange(len(X))[:, None] == 3, np.nan, X), y), "NaN"),
    ("inf in y", lambda X, y: (X, np.where(np.arange(len(y)) == 3, np.inf, y)), "infinity"),
    ("mismatched lengths", lambda X, y: (X, y[:-1]), "inconsistent numbers of samples"),
    ("1-D X", lambda X, y: (X[:, 0], y), "Expected 2D array"),
    ("one sample", lambda X, y: (X[:1], y[:1]), "minimum of 2 is required"),
    ("non-numeric", lambda X, y: (np.full(X.shape, "a"), y), "could not convert"),
    # std(y) squared would leave float64's range (y ** 2 overflows, or underflows to 0).
    ("targets of sd 1e199", lambda X, y: (X, y * 1e200), "standard deviation is .*e\\+199"),
    ("targets of sd 1e-201", lambda X, y: (X, y * 1e-200), "standard deviation is .*e-201"),
]


@pytest.mark.parametrize("name,make,message", BAD_INPUTS, ids=[b[0] for b in BAD_INPUTS])
def test_bad_input_gets_a_clear_value_error(sinc, name, make, message):
    X, y = make(*sinc)
    with pytest.raises(ValueError, match=message):
        RVR(gamma=0.1).fit(X, y)


def test_boolean_and_integer_targets_fit_as_their_float_values(sinc):
    X, y = sinc
    b = y > 0
    as_float = RVR(gamma=1 / 9).fit(X, b.astype(float))
    for targets in (b, b.astype(int)):
        m = RVR(gamma=1 / 9).fit(X, targets)
        np.testing.assert_array_equal(m.relevance_, as_float.relevance_)
        assert m.log_evidence_ == as_float.log_evidence_


def test_scale_gamma_refuses_x_whose_variance_overflows(sinc):
    X, y = sinc
    with pytest.raises(ValueError, match="variance of X"):
        RVR().fit(X * 1e300, y)


def test_bad_parameters(sinc):
    X, y = sinc
    with pytest.raises(ValueError, match="method"):
        RVR(gamma=0.1).fit(X, y, method="mcmc")
    with pytest.raises(ValueError, match="'evidence'"):
        RVR(gamma=0.1).fit(X, y, method="mcmc")
    with pytest.raises(ValueError, match="gamma"):
        RVR(gamma=-1.0).fit(X, y)
    with pytest.raises(ValueError, match="kernel"):
        RVR(kernel="cubic").fit(X, y)


def test_estimator_with_no_basis_left_still_predicts(rng):
    y = rng.standard_normal(30)
    y -= y.mean()  # orthogonal to the only candidate basis function
    m = RVR(kernel="precomputed", fit_intercept=False).fit(np.ones((30, 1)), y)
    assert m.active_.size == 0 and m.relevance_.size == 0
    mean, std = m.predict(np.ones((4, 1)), return_std=True)
    np.testing.assert_array_equal(mean, 0.0)
    np.testing.assert_allclose(std, 1 / np.sqrt(m.beta_))
    assert m.beta_ == pytest.approx(30 / (y @ y), rel=1e-5)
    assert m.idata_.posterior.sizes["basis"] == 0
    assert not m.idata_.relevance["in_model"].values.any()


def _extras(X):
    return np.column_stack([X[:, 0], X[:, 1], X[:, 0] ** 2, X[:, 1] ** 2, X[:, 0] * X[:, 1]])


@pytest.mark.slow
def test_extra_basis_and_learned_scales_tipping_section_4_3(tmp_path):
    rng = np.random.default_rng(0)
    X = rng.uniform(-10, 10, (100, 2))

    def f(X):
        return np.sinc(X[:, 0] / np.pi) + 0.1 * X[:, 1]

    y = f(X) + 0.1 * rng.standard_normal(100)
    m = RVR(gamma=1 / 9, extra_basis=_extras, learn_scales=True).fit(X, y)
    labels = list(m.idata_.relevance.basis.values)
    assert labels[:6] == ["bias", "extra_0", "extra_1", "extra_2", "extra_3", "extra_4"]
    # The InferenceData records the learned kernel, not the starting one.
    assert m.idata_.attrs["kernel"] == repr(RBF(gamma=m.eta_)) != repr(RBF(gamma=1 / 9))
    # Paper: weight 0.102 on x2, the other four extra bases pruned, eta_2 -> 0.
    assert m.coef_[2] == pytest.approx(0.1, abs=0.02)
    assert np.count_nonzero(m.coef_[[1, 3, 4, 5]]) <= 1
    assert m.eta_[1] < 0.1 * m.eta_[0]
    assert np.all(m.relevance_ < 100) and m.relevance_vectors_.shape[1] == 2
    fixed = RVR(gamma=1 / 9).fit(X, y)
    grid = rng.uniform(-10, 10, (2000, 2))
    rms = np.sqrt(np.mean((m.predict(grid) - f(grid)) ** 2))
    rms_fixed = np.sqrt(np.mean((fixed.predict(grid) - f(grid)) ** 2))
    assert rms < 0.8 * rms_fixed
    with pytest.raises(TypeError, match="use pickle"):
        m.to_netcdf(tmp_path / "m.nc")
    scales_only = RVR(gamma=1 / 9, learn_scales=True).fit(X, y)
    scales_only.to_netcdf(tmp_path / "s.nc")
    back = RVR.from_netcdf(tmp_path / "s.nc")
    np.testing.assert_array_equal(back.eta_, scales_only.eta_)
    np.testing.assert_array_equal(back.predict(grid), scales_only.predict(grid))


def test_learn_scales_needs_rbf_and_evidence(sinc):
    X, y = sinc
    with pytest.raises(ValueError, match="learn_scales=True needs"):
        RVR(kernel="linear_spline", learn_scales=True).fit(X, y)
    with pytest.raises(ValueError, match="learn_scales=True needs"):
        RVR(learn_scales=True).fit(X, y, method="vb")


def test_evidence_with_priors_reproduces_plain_evidence_in_the_limit(sinc, fitted):
    X, y = sinc
    m = RVR(gamma=1 / 9, alpha_shape=1e-12, alpha_rate=1e-12, beta_shape=1e-12,
            beta_rate=1e-12).fit(X, y)
    np.testing.assert_array_equal(m.active_, fitted.active_)
    assert m.log_evidence_ == pytest.approx(fitted.log_evidence_, rel=1e-6)
