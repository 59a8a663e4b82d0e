"""The weights of the marginal regression: drawn from their prior, scored by their conditional.

In the marginal regression of :func:`rvm_ppl.model.build.build_model`, ``t``
is observed through its marginal likelihood ``p(t | alpha, beta)`` (Tipping
2001, eq. 15), and ``w`` is a random variable upstream of ``t`` whose

- *random draws* are its prior ``N(0, A^{-1})`` (eq. 5), so forward
  sampling goes ``alpha, beta -> w -> t`` and draws the prior predictive;
- *log density* is its conditional ``log N(w; mu, Sigma)`` given ``alpha,
  beta`` and the training targets (eqs. 12-13).

The model density ``p(alpha) p(beta) p(t | alpha, beta) p(w | alpha, beta,
t)`` is then the joint ``p(alpha, beta, w, t)`` of the centred model.

``w`` is sampled on its whitened scale ``z`` (the ``Whitened`` transform),
``w = mu + R z`` with ``R R^T = Sigma``: ``R = L^{-T}``, ``L L^T = beta
Phi^T Phi + A`` (eq. 12) in the M x M form, and ``R = A^{-1/2} (I + B^T
B)^{-1/2}`` through the thin singular value decomposition of ``B = beta^{1/2}
V A^{-1/2}`` in the low-rank form ``Phi = Q V``
(:func:`rvm_ppl.model.marginal.lowrank_conditional_weights`). The density
on ``z`` is ``log N(w(z); mu, Sigma) + log|dw/dz| = log N(z; 0, I)``
exactly, and the graph is built so that the compiled log density and its
gradient hold no factorisation of their own (they cost what the marginal
likelihood costs, also with PyMC's gradient, taken before any rewrite):

- when its value is the transform's ``w(z)`` on the same inputs, the
  conditional density takes ``z`` as it is (:func:`conditional_logp`):
  ``whiten(unwhiten(z))`` is never built;
- ``h = log|dw/dz|`` enters the density as ``-h`` and the Jacobian as
  ``+h``: one variable (:func:`log_abs_det`), one opaque term, which
  PyTensor's canonical rewrites cancel, and whose gradient is an output
  of its own op times its output gradient, ``-g + g``, rewritten to zero.
"""

from __future__ import annotations

import functools

import numpy as np

from rvm_ppl.model.marginal import (
    _as_float64,
    _gradient_op,
    lowrank_conditional_weights,
    lowrank_svd,
)

# The marginal regression's two forms: the M x M Cholesky factor, or the
# low-rank factor Phi = Q V.
FORMS = ("dense", "lowrank")


def _precision_factor(alpha, beta, PtP):
    """``L`` with ``L L^T = beta Phi^T Phi + A = Sigma^{-1}`` (Tipping 2001, eq. 12)."""
    import pytensor.tensor as pt

    return pt.linalg.cholesky(beta * PtP + pt.diag(alpha), lower=True)


def _dense_root(alpha, beta, PtP, Pty):
    """``(L, v)`` with ``v = L^{-1} beta Phi^T t``: ``mu = L^{-T} v`` (eq. 13), ``L^T mu = v``."""
    from pytensor.tensor.slinalg import solve_triangular

    L = _precision_factor(alpha, beta, PtP)
    return L, solve_triangular(L, beta * Pty, lower=True)


def unwhiten(form, z, alpha, beta, data1, data2):
    """``w = mu + R z``: the weights at whitened coordinates ``z`` (a graph, not an op)."""
    from pytensor.tensor.slinalg import solve_triangular

    if form == "dense":  # data: Phi^T Phi, Phi^T t
        L, v = _dense_root(alpha, beta, data1, data2)
        return solve_triangular(L.T, v + z, lower=False)
    return lowrank_conditional_weights(alpha, beta, data1, data2, z)  # data: V, s = Q^T t


def whiten(form, w, alpha, beta, data1, data2):
    """``z = R^{-1} (w - mu)``, the inverse of :func:`unwhiten`.

    M x M form: ``z = L^T w - v``. Low-rank form: ``R^{-1} = (I + W
    diag(e) W^T) A^{1/2}``, ``e = (1 + d^2)^{1/2} - 1``, and ``R^{-1} mu =
    beta^{1/2} W diag(d / (1 + d^2)^{1/2}) U^T s``.
    """
    import pytensor.tensor as pt

    if form == "dense":
        L, v = _dense_root(alpha, beta, data1, data2)
        return L.T @ w - v
    a_isqrt, U, d, Wt = lowrank_svd(alpha, beta, data1)
    root = pt.sqrt(1.0 + d**2)
    x = w / a_isqrt
    return x + Wt.T @ ((root - 1.0) * (Wt @ x) - pt.sqrt(beta) * d / root * (U.T @ data2))


def _log_abs_det_and_gradient(form):
    """``(alpha, beta, data1) -> [h, dh/dalpha, dh/dbeta]`` of ``h = log|dw/dz| = log|Sigma| / 2``.

    ``h = -sum log diag L`` (M x M form) or ``-(1/2) sum(log alpha + log(1 +
    d^2))`` (low-rank form): the same function, since ``R R^T = Sigma`` for
    both roots. With ``gamma_m = 1 - alpha_m Sigma_mm`` (Tipping 2001, eq.
    17) its gradient is ``dh/dalpha_m = -Sigma_mm / 2`` and ``dh/dbeta =
    -tr(Sigma Phi^T Phi) / 2 = -sum(gamma) / (2 beta)``.
    """
    import pytensor.tensor as pt

    def value_and_gradient(alpha, beta, data1):
        if form == "dense":
            from rvm_ppl.model.trtri import lower_triangular_inverse

            L = _precision_factor(alpha, beta, data1)
            h = -pt.sum(pt.log(pt.diagonal(L)))
            gamma = 1.0 - alpha * pt.sum(lower_triangular_inverse(L) ** 2, axis=0)
        else:
            _, _, d, Wt = lowrank_svd(alpha, beta, data1)
            h = -0.5 * (pt.sum(pt.log(alpha)) + pt.sum(pt.log1p(d**2)))
            gamma = pt.sum((d**2 / (1.0 + d**2))[:, None] * Wt**2, axis=0)
        return [h, -0.5 * (1.0 - gamma) / alpha, -0.5 * pt.sum(gamma) / beta]

    return value_and_gradient


@functools.cache
def _log_abs_det_op(form):
    """``h = log|dw/dz|`` as one inlined OpFromGraph with its analytic gradient.

    One opaque term, which the rewrites cancel whole; its gradient is its
    own outputs times the output gradient, so where that is zero (the
    conditional density's ``-h`` and the Jacobian's ``+h``) nothing of it
    is left either.
    """
    import pytensor.tensor as pt

    ins = [pt.vector("alpha"), pt.scalar("beta"), pt.matrix("data1")]
    return _gradient_op(_log_abs_det_and_gradient(form), ins, n_data=1)


@functools.lru_cache(maxsize=64)
def log_abs_det(form, alpha, beta, data1):
    """``log|dw/dz|``: one variable for given input variables.

    The conditional density holds ``-log|dw/dz|`` and the transform's
    Jacobian ``+log|dw/dz|``: built on the same inputs, they are one
    variable (this cache) and a single opaque term (an OpFromGraph), so
    that PyTensor's canonical rewrites cancel ``x - h + h`` to ``x``, and
    its gradient's ``-g + g`` to zero.
    """
    return _log_abs_det_op(form)(*_as_float64(alpha, beta, data1))[0]


@functools.cache
def _unwhiten_op(form):
    """:func:`unwhiten` as an inlined OpFromGraph, so that the log density can recognise it."""
    import pytensor.tensor as pt
    from pytensor.compile.builders import OpFromGraph

    class Unwhiten(OpFromGraph):
        """``w = mu + R z`` of the marginal regression's weights (inlined when compiled)."""

    ins = [pt.vector("z"), pt.vector("alpha"), pt.scalar("beta"),
           pt.matrix("data1"), pt.vector("data2")]
    return Unwhiten(ins, [unwhiten(form, *ins)], inline=True, name=f"unwhiten_{form}")


def _whitened_value(value, params):
    """``z`` if ``value`` is the transform's ``w(z)`` on ``params`` (maybe wrapped), else None."""
    from pymc.logprob.transform_value import TransformedValue

    node = value.owner
    if node is not None and isinstance(node.op, TransformedValue):
        node = node.inputs[0].owner  # (backward value, original value)
    if node is None or not any(node.op is _unwhiten_op(f) for f in FORMS):
        return None
    z, *inputs = node.inputs
    return z if len(inputs) == len(params) and all(
        a is b for a, b in zip(inputs, _as_float64(*params), strict=True)) else None


def conditional_logp(form):
    """The CustomDist logp: ``log N(w; mu, Sigma)`` of ``w | alpha, beta, t`` (eqs. 12-13).

    ``= log N(z; 0, I) - log|dw/dz|`` with ``z = R^{-1} (w - mu)``. When
    ``w`` is the ``Whitened`` transform's ``w(z)`` on the same inputs, ``z``
    is taken as it is: ``whiten(unwhiten(z)) = z`` is not computed.
    """
    import pytensor.tensor as pt

    def logp(value, alpha, beta, data1, data2):
        params = (alpha, beta, data1, data2)
        z = _whitened_value(value, params)
        if z is None:
            z = whiten(form, value, *params)
        return (-0.5 * (z @ z) - 0.5 * np.log(2 * np.pi) * pt.cast(z.shape[0], "float64")
                - log_abs_det(form, alpha, beta, data1))

    return logp


def conditional_mean(form):
    """The CustomDist support point: ``mu`` (eq. 13), ``w(z = 0)``, the sampler's start."""
    import pytensor.tensor as pt

    def support_point(rv, size, alpha, beta, data1, data2):
        zero = pt.zeros_like(alpha)
        return _unwhiten_op(form)(*_as_float64(zero, alpha, beta, data1, data2))

    return support_point


def prior_random(alpha, beta, data1, data2, rng=None, size=None):
    """Draws of ``w ~ N(0, A^{-1})``, the prior (Tipping 2001, eq. 5); the data are not used."""
    alpha = np.asarray(alpha, dtype=float)
    shape = alpha.shape if size is None else tuple(size) + alpha.shape[-1:]
    with np.errstate(divide="ignore"):  # a vague hyperprior's alpha underflows to 0
        return rng.standard_normal(shape) / np.sqrt(alpha)


@functools.cache
def whitened_class():
    """The ``Whitened`` transform, defined on first use: importing this module needs no PyMC."""
    from pymc.logprob.transforms import Transform

    class Whitened(Transform):
        """``z = R^{-1} (w - mu)``: the weights on the scale of their conditional ``N(mu, Sigma)``.

        The parameters are the random variable's own inputs ``(alpha,
        beta, data1, data2)``, its last four (``Phi^T Phi, Phi^T t``, or
        ``V, Q^T t`` in the low-rank form), so the map moves with ``alpha``
        and ``beta``; its Jacobian ``log|dw/dz| = log|R|`` makes the density
        of ``z`` standard normal.
        """

        name = "whitened"
        ndim_supp = 1

        def __init__(self, form):
            if form not in FORMS:
                raise ValueError(f"form must be one of {list(FORMS)}; got {form!r}.")
            self.form = form

        def forward(self, value, *inputs):
            params = inputs[-4:]
            z = _whitened_value(value, params)
            return z if z is not None else whiten(self.form, value, *params)

        def backward(self, value, *inputs):
            return _unwhiten_op(self.form)(*_as_float64(value, *inputs[-4:]))

        def log_jac_det(self, value, *inputs):
            alpha, beta, data1, _ = inputs[-4:]
            return log_abs_det(self.form, alpha, beta, data1)

    return Whitened
