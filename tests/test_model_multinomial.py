"""The PyMC declaration of the softmax RVM (alpha integrated out).

Oracles: scipy's Student-t densities and the likelihood written in numpy for
the model's log density; numerical integration over alpha for the marginal
prior; the numerical Jacobian for the radial transform.
"""

import numpy as np
import pytest
from scipy import integrate, stats
from scipy.special import logsumexp

pm = pytest.importorskip("pymc")
pt = pytest.importorskip("pytensor.tensor")
import pytensor  # noqa: E402
from _compile_modes import SMALL  # noqa: E402

from rvm_ppl.model.categorical import (  # noqa: E402
    alpha_given_weights_multinomial,
    build_multinomial_model,
    radial_asinh_class,
)


def _problem():
    rng = np.random.default_rng(0)
    Phi = np.column_stack([np.ones(25), rng.normal(size=(25, 3))])
    y = rng.integers(0, 3, 25)
    return Phi, y, rng


def _loglik(Phi, y, W):
    A = Phi @ W.T
    return float(np.sum(A[np.arange(len(y)), y] - logsumexp(A, axis=1)))


@pytest.mark.parametrize("K", [1, 3])
def test_radial_transform_inverse_and_jacobian(K):
    tr = radial_asinh_class()(1.7)
    v = pt.vector("v")
    w = tr.backward(v)
    jac = pytensor.gradient.jacobian(w, v, vectorize=True)  # no Scan, whose loop compiles to C
    f = pytensor.function(
        [v], [w, tr.log_jac_det(v), pt.log(pt.abs(pt.nlinalg.det(jac))), tr.forward(w)], mode=SMALL
    )
    rng = np.random.default_rng(K)
    for vv in [rng.normal(size=K), 4 * rng.normal(size=K), np.full(K, 1e-7), np.zeros(K)]:
        w_, ljd, ref, back = f(vv)
        assert ljd == pytest.approx(ref, abs=1e-9)
        np.testing.assert_allclose(back, vv, atol=1e-12)
    if K == 1:  # the scalar case is asinh(w / c)
        np.testing.assert_allclose(f(np.array([0.8]))[0], 1.7 * np.sinh(0.8))


def test_shared_prior_is_the_gamma_mixture():
    # p(w_m) = int Gamma(alpha; a, b) N(w_m; 0, I / alpha) d alpha, for K = 3
    a, b = 3.0, 2.0
    w = np.array([0.4, -1.3, 2.0])
    ref, _ = integrate.quad(
        lambda al: stats.gamma.pdf(al, a, scale=1 / b) * np.prod(stats.norm.pdf(w, scale=al**-0.5)),
        0,
        np.inf,
        epsabs=0,
        epsrel=1e-11,
    )
    mvt = stats.multivariate_t(loc=np.zeros(3), shape=(b / a) * np.eye(3), df=2 * a)
    assert mvt.logpdf(w) == pytest.approx(np.log(ref), abs=1e-8)


@pytest.mark.parametrize("shared", [False, True])
def test_model_log_density(shared):
    Phi, y, rng = _problem()
    model = build_multinomial_model(Phi, y, shared_alpha=shared)
    logp = model.compile_logp(jacobian=False, mode=SMALL)
    W = rng.normal(size=(3, 4))
    val = model.rvs_to_values[model.free_RVs[0]]
    tr = model.rvs_to_transforms[model.free_RVs[0]]
    w_in = W.T if shared else W
    point = {val.name: tr.forward(pt.as_tensor(w_in)).eval(mode=SMALL)}
    a, b = 3.0, 2.0
    if shared:
        prior = stats.multivariate_t(np.zeros(3), (b / a) * np.eye(3), df=2 * a).logpdf(W.T).sum()
    else:
        prior = stats.t.logpdf(W, df=2 * a, scale=np.sqrt(b / a)).sum()
    # PyMC's own StudentT log density differs from scipy's by ~3e-7 here (the
    # same for pm.logp(pm.StudentT.dist(...)) alone), hence the tolerance.
    assert logp(point) == pytest.approx(prior + _loglik(Phi, y, W), abs=1e-5)
    assert set(model.coords) >= {"obs", "basis", "class"}


def test_alpha_given_weights_moments():
    rng = np.random.default_rng(1)
    W = np.array([[0.5, -2.0], [1.0, 0.0], [0.0, 3.0]])
    pri = {"a": 3.0, "b": 2.0}
    d = alpha_given_weights_multinomial(
        np.broadcast_to(W, (40000, 3, 2)), pri, rng, shared_alpha=True
    )
    np.testing.assert_allclose(d.mean(0), (3 + 1.5) / (2 + 0.5 * (W**2).sum(0)), rtol=0.02)
    d = alpha_given_weights_multinomial(
        np.broadcast_to(W, (40000, 3, 2)), pri, rng, shared_alpha=False
    )
    np.testing.assert_allclose(d.mean(0), 3.5 / (2 + 0.5 * W**2), rtol=0.02)


def test_bad_input():
    Phi, y, _ = _problem()
    with pytest.raises(ValueError, match="shape"):
        build_multinomial_model(Phi[:10], y)
    with pytest.raises(ValueError, match="single class"):
        build_multinomial_model(Phi, np.zeros(25, int), n_classes=3)
    with pytest.raises(ValueError, match="classes has"):
        build_multinomial_model(Phi, y, classes=["a", "b"])
    with pytest.raises(ValueError, match="positive"):
        build_multinomial_model(Phi, y, priors={"a": 0.0})
