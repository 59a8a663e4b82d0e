"""RVM* (Rasmussen & Quiñonero-Candela 2005): rank-one augmentation vs the dense GP of eq. (9)."""


import numpy as np
import pytest
from reference_predict import augmented_predict_dense
from scipy import stats
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.model_selection import cross_val_score

from rvm_ppl import RVR
from rvm_ppl.closed_form.evidence import posterior_given
from rvm_ppl.datasets.loaders import make_sinc
from rvm_ppl.estimators.rvm_star import (
    augmented_predict,
    default_alpha_star,
    rvm_star_predict,
)
from rvm_ppl.kernels.kernel import RBF, FunctionKernel
from rvm_ppl.metrics import negative_log_predictive_density, nlpd_score


def _rvm_moments(m, X):
    """Plain RVM predictive mean and variance, Tipping (2001) eqs. (21)-(22)."""
    post = m.result_
    P = m._design(np.asarray(X, dtype=float), post.support)
    return P @ post.mean, post.noise_var + np.einsum("ij,jk,ik->i", P, post.cov, P)


def _dense_for(m, X):
    """Eq. (9) reference for a fitted RVR, from its alpha and beta."""
    post = m.result_
    Xf = m.X_fit_
    X = np.asarray(X, dtype=float)
    return augmented_predict_dense(
        m._design(Xf, post.support), m.y_fit_, post.alpha[post.support], post.beta,
        m.kernel_(Xf, X), m.kernel_.diag(X), m._design(X, post.support),
        default_alpha_star(m.y_fit_),
    )


@pytest.fixture(scope="module")
def sinc_fit():
    X, y = make_sinc(60, random_state=3)
    m = RVR(gamma=1 / 9).fit(X, y)
    return m, X, y


# Test inputs inside, at the edge of and far outside the data range [-10, 10].
X_TEST = np.concatenate([np.linspace(-25, 25, 41), [0.0, 3.3, -9.9]])[:, None]


def test_variance_never_below_rvm(sinc_fit):
    m, X, _ = sinc_fit
    Xt = np.vstack([X_TEST, X])  # training inputs (incl. relevance vectors) too
    _, v = _rvm_moments(m, Xt)
    _, std_star = rvm_star_predict(m, Xt)
    assert np.all(std_star**2 >= v * (1 - 1e-12))
    assert np.any(std_star**2 > 2 * v)  # and it does grow somewhere


def test_matches_dense_augmented_gp(sinc_fit):
    m, _, _ = sinc_fit
    mean, std = rvm_star_predict(m, X_TEST)
    mean_d, var_d = _dense_for(m, X_TEST)
    np.testing.assert_allclose(mean, mean_d, rtol=1e-8, atol=1e-8 * np.abs(mean_d).max())
    np.testing.assert_allclose(std**2, var_d, rtol=1e-8)


@pytest.mark.parametrize("bias", [True, False])
def test_matches_dense_for_given_posterior(rng, bias):
    """Oracle on a non-sparse posterior at arbitrary fixed alpha, beta (eq. 3)."""
    X = rng.uniform(-2, 2, size=(40, 2))
    t = np.sin(X[:, 0]) * X[:, 1] + 0.1 * rng.standard_normal(40)
    k = RBF(gamma=[0.7, 1.3])
    centres = X[::3]
    Phi = k(X, centres)
    Xs = rng.uniform(-4, 4, size=(15, 2))
    Phi_s = k(Xs, centres)
    if bias:
        Phi = np.hstack([np.ones((40, 1)), Phi])
        Phi_s = np.hstack([np.ones((15, 1)), Phi_s])
    alpha = rng.uniform(0.1, 5.0, Phi.shape[1])
    beta = 30.0
    mu, Sigma, _ = posterior_given(Phi, t, alpha, beta)
    args = (k(X, Xs), k.diag(Xs), Phi_s, 0.8)
    mean, var = augmented_predict(Phi, t, mu, Sigma, beta, *args)
    mean_d, var_d = augmented_predict_dense(Phi, t, alpha, beta, *args)
    np.testing.assert_allclose(mean, mean_d, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(var, var_d, rtol=1e-8)


def test_non_localised_basis_matches_dense():
    """The paper's Fig. 1 (right): phi_j(x) = log(1 + ||x - x_j||^2), zero at its centre."""
    k = FunctionKernel(lambda A, B: np.log1p(((A[:, None, :] - B[None, :, :]) ** 2).sum(-1)))
    X = np.linspace(-3, 3, 12)[:, None]
    t = np.cos(X[:, 0])
    Phi = k(X, X)
    alpha, beta = np.ones(12), 10.0  # the figure's setting: all alpha = 1, sigma^2 = 0.1
    mu, Sigma, _ = posterior_given(Phi, t, alpha, beta)
    Xs = np.linspace(-8, 8, 9)[:, None]
    args = (k(X, Xs), np.zeros(9), k(Xs, X), default_alpha_star(t))
    mean, var = augmented_predict(Phi, t, mu, Sigma, beta, *args)
    mean_d, var_d = augmented_predict_dense(Phi, t, alpha, beta, *args)
    np.testing.assert_allclose(mean, mean_d, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(var, var_d, rtol=1e-8)
    v = 1 / beta + np.einsum("ij,jk,ik->i", k(Xs, X), Sigma, k(Xs, X))
    assert np.all(var >= v)


@pytest.mark.parametrize("fit_intercept", [False, True])
def test_far_from_data(fit_intercept):
    """RBF: the RVM falls to the noise (plus bias) variance, RVM* rises by 1/alpha*."""
    X, y = make_sinc(50, random_state=1)
    m = RVR(gamma=1 / 9, fit_intercept=fit_intercept).fit(X, y)
    post = m.result_
    floor = post.noise_var
    if fit_intercept and post.support[0] == 0:
        floor += post.cov[0, 0]  # the constant bias is still uncertain far away
    Xfar = np.array([[60.0], [-80.0], [1e3]])
    _, v = _rvm_moments(m, Xfar)
    _, std_star = rvm_star_predict(m, Xfar)
    np.testing.assert_allclose(v, floor, rtol=1e-10)
    np.testing.assert_allclose(std_star**2, floor + np.var(y), rtol=1e-10)
    # The RVM is most certain far away; RVM* is least certain there.
    _, v_in = _rvm_moments(m, X)
    _, std_in = rvm_star_predict(m, X)
    assert v.max() <= v_in.min() * (1 + 1e-12)
    assert (std_star**2).min() > (std_in**2).max()


def test_batching_equals_one_at_a_time(sinc_fit):
    m, _, _ = sinc_fit
    mean, std = rvm_star_predict(m, X_TEST)
    for chunk in (1, 7):
        mean_c, std_c = rvm_star_predict(m, X_TEST, chunk_size=chunk)
        np.testing.assert_allclose(mean_c, mean, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(std_c, std, rtol=1e-12)
    singles = np.array([rvm_star_predict(m, x[None]) for x in X_TEST])[:, :, 0]
    np.testing.assert_allclose(singles[:, 0], mean, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(singles[:, 1], std, rtol=1e-12)


def test_vb_posterior_smoke():
    """Other methods plug in their posterior moments and point summary of beta."""
    X, y = make_sinc(60, random_state=3)
    m = RVR(gamma=1 / 9, method="vb").fit(X, y)
    _, v = _rvm_moments(m, X_TEST)
    mean, std = rvm_star_predict(m, X_TEST)
    assert np.all(np.isfinite(mean)) and np.all(std**2 >= v * (1 - 1e-12))
    np.testing.assert_allclose(std[0] ** 2, v[0] + np.var(y), rtol=1e-6)  # x = -25, far away


def test_alpha_star_limits(sinc_fit):
    """alpha* -> infinity removes the new basis function: RVM* -> RVM."""
    m, _, _ = sinc_fit
    mean_rvm, v_rvm = _rvm_moments(m, X_TEST)
    mean, std = rvm_star_predict(m, X_TEST, alpha_star=1e14)
    np.testing.assert_allclose(mean, mean_rvm, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(std**2, v_rvm, rtol=1e-9)


def test_rvm_star_needs_a_kernel(sinc_fit):
    m, X, y = sinc_fit
    np.testing.assert_array_equal(m.y_fit_, y)
    mean, std = m.predict(X[:3], return_std=True, augment=True)
    np.testing.assert_array_equal(np.c_[mean, std], np.c_[rvm_star_predict(m, X[:3])])
    pre = RVR(kernel="precomputed").fit(RBF(gamma=1 / 9)(X, X[::4]), y)
    with pytest.raises(ValueError, match="precomputed"):
        rvm_star_predict(pre, RBF(gamma=1 / 9)(X[:2], X[::4]))


def test_shape_errors():
    with pytest.raises(ValueError, match="Inconsistent shapes"):
        augmented_predict(np.ones((5, 2)), np.ones(5), np.ones(2), np.eye(2), 1.0,
                          np.ones((5, 3)), np.ones(3), np.ones((4, 2)), 1.0)
    with pytest.raises(ValueError, match="alpha_star"):
        augmented_predict(np.ones((5, 2)), np.ones(5), np.ones(2), np.eye(2), 1.0,
                          np.ones((5, 3)), np.ones(3), np.ones((3, 2)), 0.0)


# -- metrics ---------------------------------------------------------------------


def test_nlpd_matches_scipy(rng):
    y, mean = rng.standard_normal(30), rng.standard_normal(30)
    std = rng.uniform(0.1, 3.0, 30)
    expected = -np.mean(stats.norm.logpdf(y, loc=mean, scale=std))
    assert negative_log_predictive_density(y, mean, std) == pytest.approx(expected, rel=1e-13)


def test_nlpd_rejects_bad_input():
    with pytest.raises(ValueError, match="same length"):
        negative_log_predictive_density([1.0, 2.0], [1.0], [1.0])
    with pytest.raises(ValueError, match="positive"):
        negative_log_predictive_density([1.0], [1.0], [0.0])


def test_nlpd_score_as_sklearn_scorer(rng):
    X = rng.uniform(-3, 3, (40, 1))
    y = np.sin(X[:, 0]) + 0.1 * rng.standard_normal(40)
    gp = GaussianProcessRegressor(alpha=0.01).fit(X, y)
    mean, std = gp.predict(X, return_std=True)
    assert nlpd_score(gp, X, y) == pytest.approx(-negative_log_predictive_density(y, mean, std))
    scores = cross_val_score(RVR(gamma=1.0), X, y, cv=3, scoring=nlpd_score)
    assert scores.shape == (3,) and np.all(np.isfinite(scores))


def test_rvm_star_refuses_a_covariance_beyond_float64(sinc_fit):
    """A sampled fit whose alpha draws reach e^-80 (noisy sinc, N = 1000) has a weight
    covariance whose quadratic forms are rounding noise; RVM* must say so, not return NaN."""
    import copy
    import dataclasses

    m, X, _ = sinc_fit
    broken = copy.deepcopy(m)
    n = len(broken.result_.support)
    broken.result_ = dataclasses.replace(broken.result_, cov=-1e17 * np.eye(n))
    with pytest.raises(ValueError, match="beyond float64"):
        broken.predict(X[:3], return_std=True, augment=True)
    np.testing.assert_array_equal(m.predict(X[:3], augment=True),  # the fit itself untouched
                                  rvm_star_predict(m, X[:3])[0])
