"""Gamma hyperpriors of the RVM: defaults, completion and change of units."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

import numpy as np

# Gamma(a, b) on every alpha_m and Gamma(c, d) on beta (shape, rate). Tipping
# (2001) takes a = b = c = d -> 0, uniform priors on log alpha and log beta,
# which type-II maximum likelihood reproduces exactly; PyMC needs proper
# priors, so the default is small but positive. The estimators apply them to
# targets of unit standard deviation (scale_priors), so the model is scale-free.
# Read-only (MappingProxyType): a module default that one caller changed would
# change every later fit in the process.
DEFAULT_PRIORS = MappingProxyType({"a": 1e-6, "b": 1e-6, "c": 1e-6, "d": 1e-6})

# The hyperprior on alpha of the Bernoulli PyMC model (NUTS and ADVI); see the
# module docstring, "Hyperpriors of the classifier".
BERNOULLI_PRIORS = MappingProxyType({"a": 3.0, "b": 2.0})

# The estimators' parameter for each hyperprior key, in Tipping's (2001) order
# a, b, c, d: Gamma(a, b) on every alpha_m, Gamma(c, d) on beta (shape, rate).
PRIOR_PARAMS = MappingProxyType(
    {"alpha_shape": "a", "alpha_rate": "b", "beta_shape": "c", "beta_rate": "d"}
)

# Plain type-II maximum likelihood (the evidence method without hyperpriors): the
# limit a = b = c = d -> 0, flat in log alpha and log beta (Tipping 2001, section 2.2).
FLAT_PRIORS = MappingProxyType({"a": 0.0, "b": 0.0, "c": 0.0, "d": 0.0})

TARGET_SCALE_RANGE = (1e-150, 1e150)  # std(y) whose square and inverse square are normal floats


def resolve_priors(priors=None, defaults=None):
    """Complete and check a dict of Gamma hyperprior parameters.

    Parameters
    ----------
    priors : mapping, optional
        Any of ``"a", "b", "c", "d"``.
    defaults : mapping, optional
        Values for the missing ones, completed by :data:`DEFAULT_PRIORS`
        (e.g. :data:`BERNOULLI_PRIORS`).

    Returns
    -------
    dict
        A new dict: neither ``priors`` nor the module defaults are changed
        or shared.
    """
    out = {**DEFAULT_PRIORS, **(defaults or {})}
    if priors is not None:
        if not isinstance(priors, Mapping):
            raise TypeError(f"priors must be a dict with keys a, b, c, d; got {type(priors).__name__}.")
        unknown = set(priors) - set(out)
        if unknown:
            raise ValueError(f"Unknown prior parameter(s) {sorted(unknown)}; expected a subset of ['a', 'b', 'c', 'd'].")
        out.update(priors)
    for k, v in out.items():
        if not np.isfinite(v) or v < 0:
            raise ValueError(f"Prior parameter {k} must be finite and non-negative; got {v!r}.")
    return out


def priors_from_params(params):
    """Build the fitters' hyperprior dict from the estimators' flat parameters.

    Parameters
    ----------
    params : mapping
        Any of the keys of :data:`PRIOR_PARAMS` (``alpha_shape``, ``alpha_rate``,
        ``beta_shape``, ``beta_rate``); a value of None means "the method's default".

    Returns
    -------
    dict or None
        ``{"a": ..., "b": ..., "c": ..., "d": ...}`` with the parameters that
        are set, or None when none is (each method's documented default).
    """
    out = {key: params[name] for name, key in PRIOR_PARAMS.items()
           if params.get(name) is not None}
    return out or None


def scale_priors(priors, scale):
    """Hyperpriors for targets ``y`` equivalent to ``priors`` on ``y / scale``.

    With ``w' = w / s`` the precisions scale as ``alpha' = alpha s^2`` and
    ``beta' = beta s^2``; ``alpha' ~ Gamma(a, b)`` is ``alpha ~ Gamma(a, b s^2)``.
    So multiplying the rates ``b`` and ``d`` by ``s^2`` fits the model in the
    units of ``y`` with no conversion of its results.
    """
    p = resolve_priors(priors)
    return {**p, "b": p["b"] * scale**2, "d": p["d"] * scale**2}


def target_scale(y):
    """The standard deviation of the targets (1 when they are constant).

    The methods fit ``y / std(y)`` and report ``alpha``, ``beta`` and the
    covariances in ``y``'s units, which carry ``std(y)^2`` or its inverse:
    outside :data:`TARGET_SCALE_RANGE` they would overflow or underflow, so
    such targets are refused with a ``ValueError``.
    """
    with np.errstate(over="ignore", under="ignore"):
        s = float(np.std(y))
    lo, hi = TARGET_SCALE_RANGE
    if lo <= s <= hi:
        return s
    # np.std squares y: recompute it on y / max|y| before judging it.
    peak = float(np.max(np.abs(y), initial=0.0))
    s = peak * float(np.std(y / peak)) if peak > 0 else 0.0
    if s == 0:
        return 1.0
    raise ValueError(
        f"The targets' standard deviation is {s:.3g}, outside [{lo:g}, {hi:g}]: their "
        "precisions and noise variance in y's units would overflow or underflow float64. "
        "Rescale y (for example y / y.std()) and scale the predictions back."
    )


def model_priors(priors, likelihood):
    """The hyperpriors of the PyMC model: ``priors`` completed for ``likelihood``.

    The classifiers and the Poisson likelihood take :data:`BERNOULLI_PRIORS`
    for ``a, b`` (:mod:`rvm_ppl.model.build`, "Hyperpriors of the classifier
    and of counts").
    """
    proper = likelihood in ("bernoulli", "categorical", "poisson")
    return resolve_priors(priors, BERNOULLI_PRIORS if proper else None)


def fit_priors(given, likelihood, method, y):
    """The hyperprior a fit by ``method`` used, in the units of ``y``.

    Parameters
    ----------
    given : mapping or None
        The estimator's hyperprior parameters (:func:`priors_from_params`).
    likelihood : {"gaussian", "bernoulli", "categorical", "poisson"}
    method : {"evidence", "vb", "advi", "nuts"}
    y : ndarray
        The targets (regression): the rates ``b`` and ``d`` are scaled by
        ``var(y)`` (:func:`scale_priors`).

    Returns
    -------
    dict
        Regression: ``given`` completed by :data:`DEFAULT_PRIORS` and scaled.
        Classification: the PyMC model's (:func:`model_priors`) for advi and
        nuts, the package default completed by ``given`` for vb and evidence.
    """
    if likelihood == "gaussian":
        return scale_priors(given, target_scale(y))
    if method in ("advi", "nuts"):
        return model_priors(given, likelihood)
    return resolve_priors(given)


def fit_hyperprior(given, likelihood, method, y):
    """Return the hyperprior of the model a fit by ``method`` approximates, in its units.

    As :func:`fit_priors`, except that the evidence method without
    hyperpriors (``given`` None) fits the flat limit :data:`FLAT_PRIORS`,
    a different model from any Gamma hyperprior: under ``b > 0`` no alpha is
    infinite (Tipping 2001, App. A). Without a Gaussian likelihood only
    ``a, b`` apply.

    Returns
    -------
    dict
    """
    if method == "evidence" and given is None:
        p = dict(FLAT_PRIORS)
    else:
        p = fit_priors(given, likelihood, method, y)
    return p if likelihood == "gaussian" else {"a": p["a"], "b": p["b"]}
