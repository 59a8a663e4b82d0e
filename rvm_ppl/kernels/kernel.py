"""Kernels and design matrices.

A kernel is a small object with one job: ``k(X, Y)`` returns the matrix of
``k(x_i, y_j)``. Kernels are scikit-learn estimators only in the sense that
they expose ``get_params``/``set_params``, so ``clone`` works and
``GridSearchCV(RVR(), {"kernel__gamma": [...]})`` can tune them. They are
numpy-only: the design matrix is computed once and handed to every fitting
method, PyMC included, as data.

The relevance vector machine does not need Mercer kernels: any function of
two inputs defines basis functions ``phi_m(x) = k(x, x_m)``, and any matrix of
basis functions can be used instead (``kernel="precomputed"``).
"""

from __future__ import annotations

from numbers import Real

import numpy as np
from scipy.spatial.distance import cdist
from sklearn.base import BaseEstimator

__all__ = [
    "Kernel",
    "RBF",
    "LinearSpline",
    "Polynomial",
    "Linear",
    "FunctionKernel",
    "Sum",
    "Product",
    "make_kernel",
    "design_matrix",
    "basis_labels",
]


def _as_2d(X, name):
    X = np.asarray(X, dtype=float)
    if X.ndim != 2:
        raise ValueError(f"{name} must be a 2-D array of shape (n_samples, n_features); got {X.ndim}-D.")
    return X


class Kernel(BaseEstimator):
    """Base class: subclasses implement ``_k(X, Y)`` on 2-D float arrays."""

    def __call__(self, X, Y=None):
        """Return the kernel matrix ``K[i, j] = k(X[i], Y[j])``.

        Parameters
        ----------
        X : array-like of shape (n, d)
        Y : array-like of shape (m, d), optional
            Defaults to ``X``.

        Returns
        -------
        K : ndarray of shape (n, m)
        """
        X = _as_2d(X, "X")
        Y = X if Y is None else _as_2d(Y, "Y")
        if X.shape[1] != Y.shape[1]:
            raise ValueError(
                f"X has {X.shape[1]} features but Y has {Y.shape[1]}; a kernel needs the same number."
            )
        return self._k(X, Y)

    def diag(self, X):
        """Return ``k(x_i, x_i)`` for every row of ``X``."""
        X = _as_2d(X, "X")
        return np.array([self._k(x[None, :], x[None, :])[0, 0] for x in X])

    def _k(self, X, Y):  # pragma: no cover - abstract
        raise NotImplementedError

    def __add__(self, other):
        return Sum(self, _as_kernel(other))

    def __radd__(self, other):
        if isinstance(other, Real) and other == 0:  # so that sum(kernels) works
            return self
        return Sum(_as_kernel(other), self)

    def __mul__(self, other):
        return Product(self, _as_kernel(other))

    def __rmul__(self, other):
        return Product(_as_kernel(other), self)


class Constant(Kernel):
    """``k(x, y) = value``."""

    def __init__(self, value=1.0):
        self.value = value

    def _k(self, X, Y):
        return np.full((X.shape[0], Y.shape[0]), float(self.value))

    def diag(self, X):  # noqa: D102
        return np.full(_as_2d(X, "X").shape[0], float(self.value))


def _as_kernel(k):
    if isinstance(k, Kernel):
        return k
    if isinstance(k, Real):
        return Constant(float(k))
    raise TypeError(f"Cannot combine a kernel with {type(k).__name__}.")


class RBF(Kernel):
    r"""Gaussian kernel ``k(x, y) = exp(-sum_k gamma_k (x_k - y_k)^2)``.

    Parameters
    ----------
    gamma : float or array-like of shape (n_features,)
        Inverse squared length scale. Tipping (2001) writes the Gaussian
        kernel as ``exp(-r^{-2} ||x - y||^2)``, so ``gamma = 1 / r**2``. An
        array gives one scale per input (the ``eta`` of Tipping 2001, §4.3).
    """

    def __init__(self, gamma=1.0):
        self.gamma = gamma

    def _scales(self, d):
        g = np.asarray(self.gamma, dtype=float)
        if g.ndim == 0:
            g = np.full(d, float(g))
        if g.shape != (d,):
            raise ValueError(f"gamma has {g.size} entries but the inputs have {d} features.")
        if np.any(g < 0) or not np.all(np.isfinite(g)):
            raise ValueError(f"gamma must be finite and non-negative; got {self.gamma!r}.")
        return np.sqrt(g)

    def _k(self, X, Y):
        s = self._scales(X.shape[1])
        D = cdist(X * s, Y * s, "sqeuclidean")
        return np.exp(-D, out=D)

    def diag(self, X):  # noqa: D102
        return np.ones(_as_2d(X, "X").shape[0])


class LinearSpline(Kernel):
    """Tipping's univariate linear-spline kernel, as a product over inputs.

    For scalar inputs, Tipping (2001) eq. (29)::

        k(x, y) = 1 + x y + x y min(x, y) - (x + y)/2 min(x, y)^2 + min(x, y)^3 / 3

    For several inputs the univariate kernels are multiplied.
    """

    def _k(self, X, Y):
        K = np.ones((X.shape[0], Y.shape[0]))
        for j in range(X.shape[1]):
            x = X[:, j][:, None]
            y = Y[:, j][None, :]
            m = np.minimum(x, y)
            K *= 1 + x * y + x * y * m - 0.5 * (x + y) * m**2 + m**3 / 3  # eq. (29)
        return K


class Polynomial(Kernel):
    """``k(x, y) = (gamma x.y + coef0)^degree``."""

    def __init__(self, degree=3, gamma=1.0, coef0=1.0):
        self.degree = degree
        self.gamma = gamma
        self.coef0 = coef0

    def _k(self, X, Y):
        return (self.gamma * (X @ Y.T) + self.coef0) ** self.degree


class Linear(Kernel):
    """``k(x, y) = x.y``."""

    def _k(self, X, Y):
        return X @ Y.T


class FunctionKernel(Kernel):
    """Any callable ``func(X, Y) -> (n, m) array`` as a kernel.

    The function need not be positive definite: relevance vector machines
    accept arbitrary basis functions.
    """

    def __init__(self, func=None):
        self.func = func

    def _k(self, X, Y):
        K = np.asarray(self.func(X, Y), dtype=float)
        if K.shape != (X.shape[0], Y.shape[0]):
            raise ValueError(
                f"The kernel function returned shape {K.shape}; expected {(X.shape[0], Y.shape[0])}."
            )
        return K


class Sum(Kernel):
    """``k1 + k2``."""

    def __init__(self, k1=None, k2=None):
        self.k1 = k1
        self.k2 = k2

    def _k(self, X, Y):
        return self.k1._k(X, Y) + self.k2._k(X, Y)


class Product(Kernel):
    """``k1 * k2`` (element-wise)."""

    def __init__(self, k1=None, k2=None):
        self.k1 = k1
        self.k2 = k2

    def _k(self, X, Y):
        return self.k1._k(X, Y) * self.k2._k(X, Y)


_KERNEL_NAMES = {
    "rbf": lambda gamma, degree, coef0: RBF(gamma=gamma),
    "linear_spline": lambda gamma, degree, coef0: LinearSpline(),
    "poly": lambda gamma, degree, coef0: Polynomial(degree=degree, gamma=gamma, coef0=coef0),
    "linear": lambda gamma, degree, coef0: Linear(),
}
KERNEL_NAMES = tuple(sorted(_KERNEL_NAMES)) + ("precomputed",)


def make_kernel(kernel, *, gamma=1.0, degree=3, coef0=1.0):
    """Turn an estimator's ``kernel`` parameter into a :class:`Kernel`.

    Parameters
    ----------
    kernel : str, Kernel or callable
        One of ``"rbf"``, ``"linear_spline"``, ``"poly"``, ``"linear"``; a
        :class:`Kernel` instance; or a callable ``k(X, Y)``. ``"precomputed"``
        is handled by the estimators (the inputs are the design matrix) and
        returns ``None`` here.
    gamma, degree, coef0 : float
        Parameters of the named kernels.

    Returns
    -------
    Kernel or None
    """
    if isinstance(kernel, Kernel):
        return kernel
    if isinstance(kernel, str):
        if kernel == "precomputed":
            return None
        try:
            return _KERNEL_NAMES[kernel](gamma, degree, coef0)
        except KeyError:
            raise ValueError(
                f"Unknown kernel {kernel!r}; expected one of {list(KERNEL_NAMES)}, "
                "a Kernel instance or a callable."
            ) from None
    if callable(kernel):
        return FunctionKernel(kernel)
    raise TypeError(f"kernel must be a string, a Kernel or a callable; got {type(kernel).__name__}.")


def basis_labels(n_centres, *, bias=True, prefix="x"):
    """Stable basis labels: ``"bias"`` then ``"x_0"``, ``"x_1"``, ...

    The label ``x_i`` ties a basis function to training point ``i``, so fits
    that pruned different bases can still be aligned with ``.sel(basis=...)``.
    """
    labels = [f"{prefix}_{i}" for i in range(n_centres)]
    return (["bias"] if bias else []) + labels


def design_matrix(X, centres, kernel, *, bias=True):
    """Design matrix ``Phi = [1, k(X, centres)]`` (Tipping 2001, eq. 2).

    Parameters
    ----------
    X : ndarray of shape (n, d)
        Points at which the basis functions are evaluated.
    centres : ndarray of shape (m, d)
        Centres of the basis functions (the training inputs).
    kernel : Kernel
    bias : bool
        Prepend a column of ones.

    Returns
    -------
    Phi : ndarray of shape (n, m + bias)
    """
    K = kernel(X, centres)
    if bias:
        return np.hstack([np.ones((K.shape[0], 1)), K])
    return K
