"""Sampling scales and axes for the model's precisions and Student-t weights (PyMC transforms).

Each transform class is defined on first use, so importing this module needs no PyMC.
"""

from __future__ import annotations

import functools

import numpy as np


@functools.cache
def scaled_asinh_class():
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


@functools.cache
def softplus_rate_class():
    """The ``SoftplusRate`` transform, defined on first use: importing this module needs no PyMC."""
    import pytensor.tensor as pt
    from pymc.logprob.transforms import Transform

    class SoftplusRate(Transform):
        """``alpha = softplus(v) / b``: the sampling scale of a ``Gamma(a, b)`` precision.

        On PyMC's default scale ``u = log alpha`` the Gamma density is
        ``exp(a u - b e^u)``: flat for ``alpha << 1/b`` and a wall beyond,
        whose curvature ``b e^u`` grows e-fold per unit of ``u``. The
        posterior of a pruned basis function's ``alpha`` is that prior (the
        likelihood no longer depends on it), so NUTS spends its trajectories
        against the wall with a step size the wall sets. On ``v`` the same
        density is ``softplus(v)^(a - 1) e^(-softplus(v)) sigmoid(v)``: the
        same flat region (``softplus(v) = e^v`` for ``v << 0``, so ``v = log
        (b alpha)`` there) and an exponential tail ``e^(-v)`` whose curvature
        stays below 1. The map is exact; only the sampler's coordinates change.

        The rate ``b`` is read from the Gamma variable itself (its last input,
        the scale ``1 / b``), so the rate may be data (``pm.Data``) as well as
        a constant.
        """

        name = "softplus_rate"

        def forward(self, value, *inputs):
            x = value / inputs[-1]  # b alpha
            return x + pt.log1mexp(-x)  # log(expm1(x)), without overflow

        def backward(self, value, *inputs):
            return pt.softplus(value) * inputs[-1]

        def log_jac_det(self, value, *inputs):
            return -pt.softplus(-value) + pt.log(inputs[-1])  # log(sigmoid(v) / b)

    return SoftplusRate


@functools.cache
def radial_asinh_class():
    """Define the ``RadialAsinh`` transform on first use (no PyMC import at module load)."""
    import pytensor.tensor as pt
    from pymc.logprob.transforms import Transform

    small = 1e-8  # below this r^2, the series sinh(r) / r = 1 + r^2 / 6

    def _sinhc_and_log(r2):
        """``sinh(r) / r`` and ``log(sinh(r) / r)`` for ``r^2 = r2``, safe at 0."""
        big = r2 >= small
        r = pt.sqrt(pt.switch(big, r2, 1.0))
        sinhc = pt.switch(big, pt.sinh(r) / r, 1.0 + r2 / 6.0)
        log_sinhc = pt.switch(
            big, r + pt.log(-pt.expm1(-2.0 * r)) - np.log(2.0) - pt.log(r), r2 / 6.0
        )
        return sinhc, log_sinhc, r

    class RadialAsinh(Transform):
        """``v = w asinh(||w|| / c) / ||w||`` on the last axis (length ``K``).

        Inverse: ``w = c sinh(r) v / r`` with ``r = ||v||``; its Jacobian
        determinant is ``c^K cosh(r) (sinh(r) / r)^{K-1}``. A multivariate
        Student-t ``(1 + ||w||^2 / c^2)^{-(a + K/2)}`` becomes
        ``cosh(r)^{-(2a + K - 1)} (sinh(r) / r)^{K-1}``: smooth at 0 and
        ``~ exp(-2 a r)`` in the tails. For ``K = 1`` it is ``ScaledAsinh``.
        """

        name = "radial_asinh"
        ndim_supp = 1

        def __init__(self, c):
            self.c = float(c)

        def forward(self, value, *inputs):
            r2 = pt.sum((value / self.c) ** 2, axis=-1, keepdims=True)
            big = r2 >= small
            rw = pt.sqrt(pt.switch(big, r2, 1.0))
            # asinh(x) / x, with its series 1 - x^2 / 6 near 0
            ratio = pt.switch(big, pt.arcsinh(rw) / rw, 1.0 - r2 / 6.0)
            return value / self.c * ratio

        def backward(self, value, *inputs):
            r2 = pt.sum(value**2, axis=-1, keepdims=True)
            sinhc, _, _ = _sinhc_and_log(r2)
            return self.c * value * sinhc

        def log_jac_det(self, value, *inputs):
            K = value.shape[-1]
            r2 = pt.sum(value**2, axis=-1)
            _, log_sinhc, r = _sinhc_and_log(r2)
            log_cosh = pt.switch(r2 >= small, r + pt.log1p(pt.exp(-2.0 * r)) - np.log(2.0), r2 / 2)
            return K * np.log(self.c) + log_cosh + (K - 1) * log_sinhc

    return RadialAsinh


@functools.cache
def rotation_class():
    """Define the ``Rotation`` transform on first use (no PyMC import at module load)."""
    import pytensor.tensor as pt
    from pymc.logprob.transforms import Transform

    class Rotation(Transform):
        """``u = V^T w`` on the last axis, ``V`` orthogonal: the weights on other axes.

        With ``V`` the right singular vectors of the design matrix, ``Phi w =
        U S u``: the likelihood's curvature in ``u`` is ``S U^T B U S``, nearly
        diagonal, with the scale of each direction set by one singular value,
        which a diagonal mass matrix learns; in ``w`` the same curvature is a
        dense matrix whose few large eigenvalues lie along sums of nearly
        collinear kernel columns. The map is exact and its Jacobian is 1;
        only the sampler's coordinates change. ``V`` is a constant of the
        graph (a ``pm.Data`` inside a transform breaks PyMC's graph rewrites).
        """

        name = "rotation"

        def __init__(self, V):
            self.V = pt.as_tensor_variable(V)

        def forward(self, value, *inputs):
            return pt.dot(value, self.V)

        def backward(self, value, *inputs):
            return pt.dot(value, self.V.T)

        def log_jac_det(self, value, *inputs):
            return pt.zeros_like(value)

    return Rotation
