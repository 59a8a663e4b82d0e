"""The relevance vector machine as one PyMC model.

:func:`build_model` is the only place in the package that declares a PyMC
model. It performs no inference: the fitting methods take the model it
returns (or, for the closed-form methods, the same hyperprior parameters).

The hierarchical model of Tipping (2001), §2.1::

    alpha_m ~ Gamma(a, b)                    weight precisions, m = 0..M-1
    beta    ~ Gamma(c, d)                    noise precision (regression)
    w_m | alpha_m ~ Normal(0, alpha_m^{-1})  eq. (5)
    t_n | w, beta ~ Normal(phi(x_n)^T w, beta^{-1})   eq. (3)

Three parameterisations of the regression model describe the same joint
distribution of ``(alpha, beta, t)``:

``"marginal"``
    ``w`` integrated out: ``t ~ N(0, beta^{-1} I + Phi A^{-1} Phi^T)``
    (Tipping 2001, eq. 7). The geometry NUTS and ADVI handle best; ``w`` is
    drawn afterwards from its exact Gaussian conditional (eqs. 12-13).
``"centered"``
    ``w`` sampled directly.
``"noncentered"``
    ``w = w_raw / sqrt(alpha)`` with ``w_raw ~ N(0, 1)``.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

# Gamma(a, b) on every alpha_m and Gamma(c, d) on beta (shape, rate). Tipping
# (2001) takes a = b = c = d -> 0, uniform priors on log alpha and log beta,
# which type-II maximum likelihood reproduces exactly; PyMC needs proper
# priors, so the default is small but positive. The estimators apply them to
# targets divided by their standard deviation, so the model is scale-free.
DEFAULT_PRIORS = {"a": 1e-6, "b": 1e-6, "c": 1e-6, "d": 1e-6}

PARAMETERIZATIONS = ("marginal", "centered", "noncentered")


def resolve_priors(priors=None):
    """Complete and check a dict of Gamma hyperprior parameters.

    Parameters
    ----------
    priors : dict, optional
        Any of ``"a", "b", "c", "d"``; missing ones take :data:`DEFAULT_PRIORS`.

    Returns
    -------
    dict
    """
    out = dict(DEFAULT_PRIORS)
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
        ``beta``), shape and rate. They must be positive here.
    parameterization : {"marginal", "centered", "noncentered"}
        How the weights enter; see the module docstring. ``"marginal"`` is
        regression only.
    alpha, beta : array-like or float, optional
        Fix ``alpha`` (shape (M,)) or ``beta`` instead of giving them
        hyperpriors, e.g. to check a sampler against the exact conditional
        posterior of the weights.

    Returns
    -------
    pymc.Model
        With coords ``obs`` and ``basis``, free variables ``alpha`` (dims
        ``basis``) and ``beta`` (regression) unless fixed, ``w`` (dims
        ``basis``; a free or deterministic variable except in the marginal
        form), and the observed ``y`` (dims ``obs``).
    """
    import pymc as pm
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
    if likelihood == "bernoulli" and parameterization == "marginal":
        raise ValueError("The marginal parameterization exists for the gaussian likelihood only.")
    p = resolve_priors(priors)
    if min(p.values()) <= 0:
        raise ValueError("PyMC needs proper hyperpriors: a, b, c, d must be positive.")
    basis = list(basis) if basis is not None else [f"phi_{m}" for m in range(M)]
    coords = {"obs": np.arange(N), "basis": basis}

    with pm.Model(coords=coords) as model:
        Phi_d = pm.Data("Phi", Phi, dims=("obs", "basis"))
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
            # Tipping (2001) eq. (7): t ~ N(0, beta^{-1} I + Phi A^{-1} Phi^T).
            cov = (Phi_d / alpha_v) @ Phi_d.T + pt.eye(N) / beta_v
            pm.MvNormal("y", mu=pt.zeros(N), cov=cov, observed=y, dims="obs")
            return model

        if parameterization == "centered":
            w = pm.Normal("w", mu=0.0, sigma=alpha_v**-0.5, dims="basis")  # eq. (5)
        else:
            w_raw = pm.Normal("w_raw", mu=0.0, sigma=1.0, dims="basis")
            w = pm.Deterministic("w", w_raw * alpha_v**-0.5, dims="basis")
        f = Phi_d @ w
        if likelihood == "gaussian":
            pm.Normal("y", mu=f, sigma=beta_v**-0.5, observed=y, dims="obs")  # eq. (3)
        else:
            pm.Bernoulli("y", logit_p=f, observed=y, dims="obs")  # Tipping (2001) eq. (23)
    return model
