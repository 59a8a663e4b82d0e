"""The relevance vector machine as one PyMC model.

:func:`build_model` is the only place in the package that declares a PyMC
model. It performs no inference: the fitting methods take the model it
returns (or, for the closed-form methods, the same hyperprior parameters).

The hierarchical model of Tipping (2001), §2.1::

    alpha_m ~ Gamma(a, b)                    weight precisions, m = 0..M-1
    beta    ~ Gamma(c, d)                    noise precision (regression)
    w_m | alpha_m ~ Normal(0, alpha_m^{-1})  eq. (5)
    t_n | w, beta ~ Normal(phi(x_n)^T w, beta^{-1})   eq. (3)

Three parameterisations describe the same joint distribution:

``"marginal"``
    One level of the hierarchy integrated out in closed form, the other
    drawn exactly afterwards: the geometry NUTS and ADVI handle best.

    *Regression*: ``w`` integrated out,
    ``t ~ N(0, beta^{-1} I + Phi A^{-1} Phi^T)`` (Tipping 2001, eq. 7);
    ``w`` is drawn afterwards from its Gaussian conditional (eqs. 12-13).
    The likelihood is evaluated in the M x M form with an analytic gradient
    (:func:`_marginal_loglike`), not as an N x N ``MvNormal``.

    *Classification*: ``alpha`` integrated out, so that every weight has
    the Student-t prior of Tipping (2001), eq. (32),
    ``w_m ~ t_{2a}(0, sqrt(b / a))``, sampled on the scale
    ``v_m = asinh(w_m / sqrt(2 b))`` (the ``ScaledAsinh`` transform); ``alpha`` is
    drawn afterwards from its conditional
    ``alpha_m | w_m ~ Gamma(a + 1/2, b + w_m^2 / 2)``
    (:func:`alpha_given_weights`).
``"centered"``
    ``w`` sampled directly.
``"noncentered"``
    ``w = w_raw / sqrt(alpha)`` with ``w_raw ~ N(0, 1)``.

Hyperpriors of the classifier
-----------------------------
With a Bernoulli likelihood and ``a -> 0`` the posterior is improper in
practice. A kernel basis centred on ``N`` distinct points can separate any
labelling, so as every ``alpha_m -> 0`` together the evidence
``P(t | alpha)`` tends to the positive probability that a very wide
Gaussian weight vector separates the data, instead of vanishing as it does
for the Gaussian likelihood; the Gamma prior's density ``alpha^{a-1}`` then
puts almost all the posterior mass at ``alpha -> 0`` and unbounded weights.
NUTS on Ripley's data (100 points, RBF gamma = 4, a = b = 1e-6) drifted
there: 2301 divergent transitions of 4000, r-hat 3.5 and 16% test error in
the marginal form, 1365, 2.8 and 16% in the non-centred one. The PyMC model
of the classifier therefore defaults to the proper hyperprior
:data:`BERNOULLI_PRIORS`, ``a = 3, b = 2``: each weight has a Student-t
prior with 6 degrees of freedom and variance ``b / (a - 1) = 1`` (logit
units per unit of basis output). On 10 subsets of 100 of Ripley's points
(``benchmarks/bench_classification.py --part nuts``, 4 chains) NUTS gave 0
divergences in every run, r-hat <= 1.004 for every ``log alpha`` and
<= 1.008 for every weight, 9.6% mean test error and a log loss of
0.252. Tighter priors sample as well or better but give over-cautious
probabilities (``a = 3, b = 0.2``: log loss 0.340 against 0.269 on the
first subset); ``a = 2, b = 0.1`` gave divergences. The closed-form methods keep Tipping's limit: type-II
maximum likelihood needs no hyperprior and the variational classifier of
Bishop & Tipping uses :data:`DEFAULT_PRIORS`.
"""

from __future__ import annotations

import functools
from typing import Literal

import numpy as np

# Gamma(a, b) on every alpha_m and Gamma(c, d) on beta (shape, rate). Tipping
# (2001) takes a = b = c = d -> 0, uniform priors on log alpha and log beta,
# which type-II maximum likelihood reproduces exactly; PyMC needs proper
# priors, so the default is small but positive. The estimators apply them to
# targets divided by their standard deviation, so the model is scale-free.
DEFAULT_PRIORS = {"a": 1e-6, "b": 1e-6, "c": 1e-6, "d": 1e-6}

# The hyperprior on alpha of the Bernoulli PyMC model (NUTS and ADVI); see the
# module docstring, "Hyperpriors of the classifier".
BERNOULLI_PRIORS = {"a": 3.0, "b": 2.0}

PARAMETERIZATIONS = ("marginal", "centered", "noncentered")


def resolve_priors(priors=None, defaults=None):
    """Complete and check a dict of Gamma hyperprior parameters.

    Parameters
    ----------
    priors : dict, optional
        Any of ``"a", "b", "c", "d"``.
    defaults : dict, optional
        Values for the missing ones, completed by :data:`DEFAULT_PRIORS`
        (e.g. :data:`BERNOULLI_PRIORS`).

    Returns
    -------
    dict
    """
    out = {**DEFAULT_PRIORS, **(defaults or {})}
    if priors is not None:
        if not isinstance(priors, dict):
            raise TypeError(f"priors must be a dict with keys a, b, c, d; got {type(priors).__name__}.")
        unknown = set(priors) - set(out)
        if unknown:
            raise ValueError(f"Unknown prior parameter(s) {sorted(unknown)}; expected a subset of ['a', 'b', 'c', 'd'].")
        out.update(priors)
    for k, v in out.items():
        if not np.isfinite(v) or v < 0:
            raise ValueError(f"Prior parameter {k} must be finite and non-negative; got {v!r}.")
    return out


def model_priors(priors, likelihood):
    """The hyperpriors of the PyMC model: ``priors`` completed for ``likelihood``."""
    return resolve_priors(priors, BERNOULLI_PRIORS if likelihood == "bernoulli" else None)


def build_model(
    Phi,
    y,
    *,
    likelihood: Literal["gaussian", "bernoulli"] = "gaussian",
    basis=None,
    priors=None,
    parameterization: Literal["marginal", "centered", "noncentered"] = "marginal",
    alpha=None,
    beta=None,
):
    """Declare the RVM as a PyMC model.

    Parameters
    ----------
    Phi : ndarray of shape (N, M)
        Design matrix; column ``m`` is basis function ``m`` at the inputs.
    y : ndarray of shape (N,)
        Targets (regression) or 0/1 labels (classification).
    likelihood : {"gaussian", "bernoulli"}
    basis : list of str, optional
        Labels of the basis functions (coordinate ``basis``); default
        ``"phi_0", "phi_1", ...``.
    priors : dict, optional
        Gamma hyperprior parameters ``a, b`` (on ``alpha``) and ``c, d`` (on
        ``beta``), shape and rate. They must be positive here. Missing ones
        take :data:`DEFAULT_PRIORS`, or for ``a, b`` with the Bernoulli
        likelihood :data:`BERNOULLI_PRIORS`.
    parameterization : {"marginal", "centered", "noncentered"}
        How the weights enter; see the module docstring.
    alpha, beta : array-like or float, optional
        Fix ``alpha`` (shape (M,)) or ``beta`` instead of giving them
        hyperpriors, e.g. to check a sampler against the exact conditional
        posterior of the weights. The marginal classifier has no ``alpha``
        to fix.

    Returns
    -------
    pymc.Model
        With coords ``obs`` and ``basis``, data ``Phi`` and ``y_obs``, free
        variables ``alpha`` (dims ``basis``; except in the marginal
        classifier) and ``beta`` (regression) unless fixed, ``w`` (dims
        ``basis``; a free or deterministic variable except in the marginal
        regression), and the observed ``y`` (dims ``obs``).
    """
    import pymc as pm
    import pytensor
    import pytensor.tensor as pt

    Phi = np.asarray(Phi, dtype=float)
    y = np.asarray(y, dtype=float)
    N, M = Phi.shape
    if y.shape != (N,):
        raise ValueError(f"y has shape {y.shape}; expected ({N},) to match Phi.")
    if likelihood not in ("gaussian", "bernoulli"):
        raise ValueError(f"Unknown likelihood {likelihood!r}; expected 'gaussian' or 'bernoulli'.")
    if parameterization not in PARAMETERIZATIONS:
        raise ValueError(f"Unknown parameterization {parameterization!r}; expected one of {list(PARAMETERIZATIONS)}.")
    bernoulli = likelihood == "bernoulli"
    if bernoulli and parameterization == "marginal" and alpha is not None:
        raise ValueError(
            "The marginal classifier integrates alpha out; fix alpha with the 'centered' or "
            "'noncentered' parameterization."
        )
    p = model_priors(priors, likelihood)
    if min(p.values()) <= 0:
        raise ValueError("PyMC needs proper hyperpriors: a, b, c, d must be positive.")
    basis = list(basis) if basis is not None else [f"phi_{m}" for m in range(M)]
    coords = {"obs": np.arange(N), "basis": basis}

    with pm.Model(coords=coords) as model:
        Phi_d = pm.Data("Phi", Phi, dims=("obs", "basis"))
        # The targets enter as data too, so that compiled functions (and
        # PyTensor's on-disk cache of them) depend on shapes, not on values.
        y_d = pm.Data("y_obs", y if likelihood == "gaussian" else y.astype(np.int64), dims="obs")
        if bernoulli and parameterization == "marginal":
            # Tipping (2001) eq. (32): alpha_m ~ Gamma(a, b) integrated out.
            w = pm.StudentT(
                "w", nu=2 * p["a"], mu=0.0, sigma=np.sqrt(p["b"] / p["a"]), dims="basis",
                transform=_scaled_asinh_class()(np.sqrt(2 * p["b"])),
            )
            pm.Bernoulli("y", logit_p=Phi_d @ w, observed=y_d, dims="obs")  # eq. (23)
            return model
        if alpha is None:
            alpha_v = pm.Gamma("alpha", alpha=p["a"], beta=p["b"], dims="basis")  # eq. (6)
        else:
            alpha_v = pt.as_tensor_variable(np.broadcast_to(np.asarray(alpha, dtype=float), (M,)))
        if likelihood == "gaussian":
            if beta is None:
                beta_v = pm.Gamma("beta", alpha=p["c"], beta=p["d"])  # §2.1, noise precision
            else:
                beta_v = pt.as_tensor_variable(float(beta))

        if parameterization == "marginal":
            # Tipping (2001) eq. (7): t ~ N(0, beta^{-1} I + Phi A^{-1} Phi^T),
            # evaluated in the M x M form with its analytic gradient.
            PtP = pytensor.shared(Phi.T @ Phi, name="PhiT_Phi")  # fixed, not model data
            marginal = _marginal_loglike(Phi_d, PtP)
            pm.CustomDist(
                "y",
                pt.zeros(N),  # the mean; its length fixes the support shape
                alpha_v,
                beta_v,
                logp=lambda value, mu, a, b: marginal(value - mu, a, b),
                random=_marginal_random(Phi),
                signature="(n),(m),()->(n)",
                observed=y_d,
                dims="obs",
            )
            return model

        if parameterization == "centered":
            w = pm.Normal("w", mu=0.0, sigma=alpha_v**-0.5, dims="basis")  # eq. (5)
        else:
            w_raw = pm.Normal("w_raw", mu=0.0, sigma=1.0, dims="basis")
            w = pm.Deterministic("w", w_raw * alpha_v**-0.5, dims="basis")
        f = Phi_d @ w
        if likelihood == "gaussian":
            pm.Normal("y", mu=f, sigma=beta_v**-0.5, observed=y_d, dims="obs")  # eq. (3)
        else:
            pm.Bernoulli("y", logit_p=f, observed=y_d, dims="obs")  # Tipping (2001) eq. (23)
    return model


def alpha_given_weights(w, priors, rng):
    """Exact draws of ``alpha`` given ``w``: ``Gamma(a + 1/2, b + w^2 / 2)``.

    The Gamma prior (Tipping 2001, eq. 6) is conjugate to the Gaussian
    ``w_m | alpha_m`` (eq. 5), and given ``w`` the data add nothing, so each
    ``alpha_m`` has this conditional (shape, rate).

    Parameters
    ----------
    w : ndarray of shape (..., M)
        Weight draws.
    priors : dict
        With ``a`` and ``b``.
    rng : numpy.random.Generator

    Returns
    -------
    ndarray of the shape of ``w``
    """
    w = np.asarray(w, dtype=float)
    return rng.gamma(priors["a"] + 0.5, 1.0 / (priors["b"] + 0.5 * w**2))


@functools.cache
def _scaled_asinh_class():
    """The ``ScaledAsinh`` transform, defined on first use: importing this module needs no PyMC."""
    import pytensor.tensor as pt
    from pymc.logprob.transforms import Transform

    class ScaledAsinh(Transform):
        """``v = asinh(w / c)``: the sampling scale of a Student-t weight.

        The Student-t density ``(1 + w^2 / (2 b))^{-(a + 1/2)}`` has a core of
        width ``c = sqrt(2 b)`` and power-law tails; on the scale ``v`` the
        density is ``cosh(v)^{-2a}``: smooth, log-concave, and with
        exponential tails, which NUTS traverses with one step size.
        """

        name = "scaled_asinh"

        def __init__(self, c):
            self.c = float(c)

        def forward(self, value, *inputs):
            return pt.arcsinh(value / self.c)

        def backward(self, value, *inputs):
            return self.c * pt.sinh(value)

        def log_jac_det(self, value, *inputs):
            # log(c cosh v), written so that it cannot overflow for large |v|
            v = pt.abs(value)
            return np.log(self.c) + v + pt.log1p(pt.exp(-2.0 * v)) - np.log(2.0)

    return ScaledAsinh


def _marginal_loglike(Phi, PhiT_Phi):
    """``log N(t | 0, C)``, ``C = beta^{-1} I + Phi A^{-1} Phi^T``, as a PyTensor op.

    Tipping (2001) eq. (7) in the M x M form of his Appendix A: with
    ``H = beta Phi^T Phi + A = Sigma^{-1}`` (eq. 12) and
    ``mu = beta Sigma Phi^T t`` (eq. 13),

        log|C| = -N log beta - sum_m log alpha_m + log|H|
        t^T C^{-1} t = beta t^T t - beta^2 (Phi^T t)^T H^{-1} (Phi^T t)

    One Cholesky factor of ``H`` gives both, and the gradient is analytic
    (Tipping 2001, Appendix A; MacKay's re-estimation quantities):

        d/d alpha_m = (1/alpha_m - Sigma_mm - mu_m^2) / 2
        d/d beta    = (N/beta - ||t - Phi mu||^2 - tr(Sigma Phi^T Phi)) / 2
        d/d t       = -C^{-1} t = -beta (t - Phi mu)

    with ``tr(Sigma Phi^T Phi) = (M - sum_m alpha_m Sigma_mm) / beta``. This
    costs one M x M Cholesky and one triangular inverse per evaluation, about
    a third of what automatic differentiation of ``MvNormal`` with the N x N
    covariance costs, and it stays accurate where ``C`` is too ill-conditioned
    for a Cholesky factor (some ``alpha_m`` tiny), which NUTS otherwise
    reports as divergences.

    Parameters
    ----------
    Phi, PhiT_Phi : TensorVariable
        The design matrix and ``Phi^T Phi`` (shared variables, so that the
        compiled function does not depend on the data's values). ``PhiT_Phi``
        is fixed when the model is built: ``pymc.set_data`` on ``"Phi"`` is
        not supported in this form.

    Returns
    -------
    callable
        ``f(value, alpha, beta) -> scalar`` on PyTensor variables.
    """
    import pytensor.tensor as pt
    from pytensor.compile.builders import OpFromGraph
    from pytensor.gradient import DisconnectedType, grad_not_implemented
    from pytensor.tensor.slinalg import solve_triangular

    def value_and_gradient(t, alpha, beta, Phi, PtP):
        N, M = t.shape[0], alpha.shape[0]
        H = beta * PtP + pt.diag(alpha)  # Sigma^{-1}, eq. (12)
        L = pt.linalg.cholesky(H, lower=True)
        z = solve_triangular(L, beta * (Phi.T @ t), lower=True)  # L^{-1} beta Phi^T t
        logdet_H = 2.0 * pt.sum(pt.log(pt.diagonal(L)))
        quad = beta * (t @ t) - z @ z  # t^T C^{-1} t
        logp = -0.5 * (
            N * np.log(2 * np.pi) - N * pt.log(beta) - pt.sum(pt.log(alpha)) + logdet_H + quad
        )
        Linv = solve_triangular(L, pt.eye(M), lower=True)
        Sigma_diag = pt.sum(Linv**2, axis=0)
        mu = Linv.T @ z  # eq. (13)
        resid = t - Phi @ mu
        d_t = -beta * resid
        d_alpha = 0.5 * (1.0 / alpha - Sigma_diag - mu**2)
        d_beta = 0.5 * (N / beta - resid @ resid - (M - pt.sum(alpha * Sigma_diag)) / beta)
        return [logp, d_t, d_alpha, d_beta]

    class RVMMarginalLogp(OpFromGraph):
        """Outputs ``(logp, d logp/dt, d logp/d alpha, d logp/d beta)``.

        Its gradient reuses outputs 1-3, so that one Cholesky factor serves
        the value and the gradient once the op is inlined; those outputs are
        not differentiable in turn (no second derivatives).
        """

        def L_op(self, inputs, outputs, output_grads):
            g = output_grads[0]
            if not all(isinstance(og.type, DisconnectedType) for og in output_grads[1:]):
                return [grad_not_implemented(self, k, x, "second derivatives")
                        for k, x in enumerate(inputs)]
            basis = [grad_not_implemented(self, k, inputs[k], "the basis is data") for k in (3, 4)]
            return [g * outputs[1], g * outputs[2], g * outputs[3], *basis]

    ins = [pt.vector("t"), pt.vector("alpha"), pt.scalar("beta"), pt.matrix("Phi"),
           pt.matrix("PtP")]
    op = RVMMarginalLogp(ins, value_and_gradient(*ins), inline=True)

    def marginal(value, alpha, beta):
        args = (value, alpha, beta, Phi, PhiT_Phi)
        return op(*(pt.cast(pt.as_tensor_variable(v), "float64") for v in args))[0]

    return marginal


def _marginal_random(Phi):
    """Draws of ``t`` from the marginal model: ``Phi w + noise`` with ``w ~ N(0, A^{-1})``."""

    def random(mu, alpha, beta, rng=None, size=None):
        alpha = np.asarray(alpha, dtype=float)
        beta = np.asarray(beta, dtype=float)
        batch = (
            tuple(size)
            if size is not None
            else np.broadcast_shapes(np.shape(mu)[:-1], alpha.shape[:-1], beta.shape)
        )
        w = rng.standard_normal(batch + (Phi.shape[1],)) / np.sqrt(alpha)
        noise = rng.standard_normal(batch + (Phi.shape[0],)) / np.sqrt(beta)[..., None]
        return mu + w @ Phi.T + noise

    return random
