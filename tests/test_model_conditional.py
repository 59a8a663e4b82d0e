"""The marginal regression's weights (rvm_ppl.model.conditional): prior draws, conditional density.

``w`` is drawn forward from its prior ``N(0, 1/alpha)`` (Tipping 2001, eq. 5), scored by
its conditional ``N(mu, Sigma)`` given ``alpha, beta, t`` (eqs. 12-13) and sampled on the
whitened scale ``z``; in both forms of the likelihood (M x M and low-rank).
"""

from collections import Counter

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
import pytest
from _compile_modes import SMALL
from scipy import stats

from rvm_ppl.datasets.loaders import make_sinc
from rvm_ppl.kernels.kernel import RBF, design_matrix
from rvm_ppl.model.build import build_model

PRIORS = {"a": 2.0, "b": 2.0, "c": 2.0, "d": 0.02}
FORMS = {"dense": False, "lowrank": True}


@pytest.fixture(scope="module")
def sinc():
    X, y = make_sinc(20, random_state=3)
    return design_matrix(X, X, RBF(gamma=1 / 9)), y


@pytest.fixture(scope="module", params=list(FORMS))
def marginal(request, sinc):
    Phi, y = sinc
    model = build_model(Phi, y, priors=PRIORS, low_rank=FORMS[request.param])
    assert ("lowrank_V" in model.named_vars) == (request.param == "lowrank")
    return model


def _point(model, seed):
    rng = np.random.default_rng(seed)
    M = model["w"].type.shape[0] or len(model.coords["basis"])
    return {"alpha_log__": rng.normal(0.0, 1.5, M), "beta_log__": np.array(rng.normal(3.0, 0.5)),
            "w_whitened__": rng.standard_normal(M)}


def _weights(model, point):
    """``w = mu + R z`` at ``point``, as the model computes it."""
    (w,) = [v for v in model.unobserved_value_vars if v.name == "w"]  # backward(z)
    return pytensor.function(model.value_vars, w, on_unused_input="ignore", mode=SMALL)(**point)


def _moments(Phi, y, alpha, beta):
    """``(mu, Sigma)`` of ``w | alpha, beta, t`` (Tipping 2001, eqs. 12-13), by brute force."""
    Sigma = np.linalg.inv(beta * Phi.T @ Phi + np.diag(alpha))
    return beta * Sigma @ Phi.T @ y, Sigma


def test_marginal_density_is_the_centred_joint(marginal, sinc):
    """p(alpha) p(beta) p(t | alpha, beta) p(w | alpha, beta, t) = the centred joint.

    The centred joint: p(alpha) p(beta) p(w | alpha) p(t | w, beta) (Tipping 2001, eqs. 3-6).
    """
    Phi, y = sinc
    centred = build_model(Phi, y, priors=PRIORS, parameterization="centered")
    f_marginal = marginal.compile_logp(jacobian=False, mode=SMALL)
    f_centred = centred.compile_logp(jacobian=False, mode=SMALL)
    for seed in range(3):
        point = _point(marginal, seed)
        w = _weights(marginal, point)
        got = f_marginal(point)
        want = f_centred({"alpha_log__": point["alpha_log__"], "beta_log__": point["beta_log__"],
                          "w": w})
        assert got == pytest.approx(want, rel=1e-9, abs=1e-7)


def test_conditional_density_and_jacobian(marginal, sinc):
    """The w term is log N(w; mu, Sigma); with its Jacobian, log N(z; 0, I)."""
    Phi, y = sinc
    point = _point(marginal, 4)
    alpha, beta = np.exp(point["alpha_log__"]), float(np.exp(point["beta_log__"]))
    w = _weights(marginal, point)
    mu, Sigma = _moments(Phi, y, alpha, beta)
    without = marginal.compile_logp(vars=[marginal["w"]], jacobian=False, mode=SMALL)(point)
    assert without == pytest.approx(stats.multivariate_normal(mu, Sigma).logpdf(w), rel=1e-9)
    with_jacobian = marginal.compile_logp(vars=[marginal["w"]], jacobian=True, mode=SMALL)(point)
    z = point["w_whitened__"]
    assert with_jacobian == pytest.approx(stats.norm.logpdf(z).sum(), rel=1e-12)
    # w = mu + R z with R R^T = Sigma: the whitening is exact
    assert with_jacobian - without == pytest.approx(0.5 * np.linalg.slogdet(Sigma)[1], rel=1e-9)


def test_the_transform_inverts_itself_on_values(marginal):
    """forward(backward(z)) = z through the full whitening (a value, not the transform's graph)."""
    point = _point(marginal, 5)
    w = _weights(marginal, point)
    rv = marginal["w"]
    transform = marginal.rvs_to_transforms[rv]
    z = transform.forward(pt.as_tensor_variable(w), *rv.owner.inputs)
    z = marginal.replace_rvs_by_values([z])[0]
    f = pytensor.function(marginal.value_vars, z, on_unused_input="ignore", mode=SMALL)
    np.testing.assert_allclose(f(**point), point["w_whitened__"], atol=1e-8)


def test_gradient_matches_finite_differences(marginal):
    """The analytic gradient of log|dw/dz| (eq. 17's gamma) inside the jacobian-free density."""
    point = _point(marginal, 6)
    names = [v.name for v in marginal.value_vars]  # compile_dlogp's order
    sizes = [np.size(point[n]) for n in names]
    f = marginal.compile_logp(jacobian=False, mode=SMALL)
    grad = marginal.compile_dlogp(jacobian=False, mode=SMALL)(point)
    x0 = np.concatenate([np.ravel(point[n]) for n in names])

    def at(x):
        parts = np.split(x, np.cumsum(sizes)[:-1])
        return {n: p.reshape(np.shape(point[n])) for n, p in zip(names, parts, strict=True)}

    h = 1e-6
    fd = np.array([(f(at(x0 + h * e)) - f(at(x0 - h * e))) / (2 * h) for e in np.eye(x0.size)])
    np.testing.assert_allclose(grad, fd, rtol=1e-5, atol=1e-5)


def test_log_density_and_gradient_hold_only_the_likelihood_factorisation(marginal):
    """PyMC's gradient (taken before any rewrite) of the whole model: w adds no factorisation.

    The M x M form's marginal likelihood costs one Cholesky factor, one
    triangular solve and one triangular inverse; the low-rank form's one QR
    factor (the package's economic QR op) and two triangular solves. The whitened weights' density is
    ``N(z; 0, I)``: no singular value decomposition, no further factor.
    """
    logp = marginal.logp()
    fn = pytensor.function(marginal.value_vars, [logp, *pt.grad(logp, marginal.value_vars)],
                           mode="NUMBA")
    ops = Counter(type(getattr(n.op, "core_op", n.op)).__name__ for n in fn.maker.fgraph.toposort())
    kinds = ("Cholesky", "SolveTriangular", "LowerTriangularInverse", "EconomicQR", "SVD")
    got = {k: ops[k] for k in kinds}
    if "lowrank_V" in marginal.named_vars:
        assert got == {"Cholesky": 0, "SolveTriangular": 2, "LowerTriangularInverse": 0,
                       "EconomicQR": 1, "SVD": 0}
    else:
        assert got == {"Cholesky": 1, "SolveTriangular": 1, "LowerTriangularInverse": 1,
                       "EconomicQR": 0, "SVD": 0}
    assert not any("OpFromGraph" in k for k in ops)


def test_forward_draws_of_w_are_its_prior(sinc):
    """w ~ N(0, 1/alpha) (eq. 5) when drawn forward, whatever the training targets."""
    Phi, y = sinc
    alpha = np.linspace(0.5, 4.0, Phi.shape[1])
    model = build_model(Phi, y, alpha=alpha, priors=PRIORS)
    draws = pm.draw(model["w"], draws=2000, random_seed=1, mode=SMALL)
    assert draws.shape == (2000, Phi.shape[1])
    standardised = (draws * np.sqrt(alpha)).ravel()
    assert stats.kstest(standardised, "norm").pvalue > 0.01
    # The same draws from a model of other targets: nothing of t enters.
    other = pm.draw(build_model(Phi, -3 * y, alpha=alpha, priors=PRIORS)["w"], draws=2000,
                    random_seed=1, mode=SMALL)
    np.testing.assert_array_equal(draws, other)


def test_the_sampler_starts_at_the_conditional_mean(marginal):
    """The support point is mu (eq. 13): z = 0 exactly."""
    np.testing.assert_array_equal(marginal.initial_point()["w_whitened__"], 0.0)
