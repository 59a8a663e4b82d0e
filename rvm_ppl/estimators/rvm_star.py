"""RVM*: predictions of a relevance vector machine augmented at the test input.

Rasmussen & Quiñonero-Candela (2005) add, for each test input ``x*``, one
basis function ``phi*(x) = k(x, x*)`` centred on it, with weight prior
``w* ~ N(0, 1/alpha*)``, to a trained RVM whose ``alpha`` and ``beta`` stay
fixed. The predictive variance then grows, instead of shrinking to the noise
level, away from the relevance vectors.

Derivation (their eqs. 5-7)
---------------------------
With ``Sigma, mu`` the RVM posterior (their eq. 3) and ``phi*`` the new basis
function at the ``N`` training inputs, the augmented posterior precision is
the bordered matrix of eq. (5)::

    [ Sigma^{-1}          beta Phi^T phi*          ]
    [ beta phi*^T Phi     alpha* + beta phi*^T phi* ]

Its Schur complement on the new weight is ``alpha* + s*`` with::

    u  = beta Sigma Phi^T phi*                  (the RVM's fit to phi*)
    s* = phi*^T C^{-1} phi*                     eq. (7), C = beta^{-1} I + Phi A^{-1} Phi^T
       = beta phi*^T phi* - beta phi*^T Phi u   (Woodbury: C^{-1} = beta I - beta^2 Phi Sigma Phi^T)
    q* = beta phi*^T (t - Phi mu)               eq. (7)
    e* = phi*(x*) - phi(x*) u                   eq. (7)

and the block inverse gives eq. (6)::

    m*(x*) = m(x*) + e* q* / (alpha* + s*)
    v*(x*) = v(x*) + e*^2 / (alpha* + s*)

Everything is a product with ``Phi^T phi*`` (``O(N M)``) followed by
``O(M^2)`` work, so a test point costs ``O(N M + M^2)`` instead of the
``O(N^3)`` of the equivalent Gaussian process (their eq. 9), against which
the tests check it. The update needs
only ``mu``, ``Sigma``, ``beta`` and the training data, not ``A``: it is the
exact conditioning of the Gaussian posterior ``N(mu, Sigma)`` on the extra
weight. For the evidence method (``Sigma, mu`` from eq. 3 at fixed
``alpha, beta``) it is exactly RVM*; for vb, advi and nuts it plugs in their
posterior moments and the point summary of ``beta``.

``alpha*`` is not learnt: ``1/alpha*`` is the empirical variance of the
training targets (their section 2), the prior variance of the function far
from the data.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "augmented_predict",
    "default_alpha_star",
    "rvm_star_predict",
]

# Test points per chunk: the kernel block k(X_train, X_chunk) holds at most
# this many entries (32 MB of float64).
CHUNK_ENTRIES = 4_000_000


def default_alpha_star(t):
    """``alpha* = 1 / var(t)``, the paper's choice (section 2).

    Parameters
    ----------
    t : array-like of shape (n_samples,)
        Training targets.

    Returns
    -------
    float
    """
    var = float(np.var(np.asarray(t, dtype=float)))
    return 1.0 / (var + np.finfo(float).tiny)


def augmented_predict(
    Phi, t, mean, cov, beta, K_new, k_new_diag, Phi_test, alpha_star, *, noise_var=None
):
    """RVM* predictive mean and variance at a batch of test inputs.

    Test point ``j`` gets its own new basis function, whose values at the
    training inputs are column ``j`` of ``K_new`` and whose value at the test
    input itself is ``k_new_diag[j]``. The cost is ``O(N M T + M^2 T)``
    for ``T`` test points.

    Parameters
    ----------
    Phi : ndarray of shape (N, M)
        Design matrix of the retained basis functions (relevance vectors and
        bias) at the training inputs.
    t : ndarray of shape (N,)
        Training targets.
    mean, cov : ndarray of shape (M,), (M, M)
        RVM weight posterior ``mu``, ``Sigma`` (Rasmussen & Quiñonero-Candela
        2005, eq. 3; Tipping 2001, eqs. 12-13).
    beta : float
        Noise precision ``sigma^{-2}``.
    K_new : ndarray of shape (N, T)
        ``K_new[i, j] = k(x_i, x*_j)``: the new basis functions at the
        training inputs.
    k_new_diag : ndarray of shape (T,)
        ``k(x*_j, x*_j)``: each new basis function at its own centre.
    Phi_test : ndarray of shape (T, M)
        Retained basis functions at the test inputs.
    alpha_star : float
        Prior precision of each new weight (see :func:`default_alpha_star`).
    noise_var : float, optional
        Noise variance added to the predictive variance; default ``1/beta``
        (pass ``E[1/beta]`` for a posterior over ``beta``).

    Returns
    -------
    mean : ndarray of shape (T,)
        ``m*(x*)``, eq. (6).
    var : ndarray of shape (T,)
        ``v*(x*)``, eq. (6), noise included.

    Examples
    --------
    >>> import numpy as np
    >>> from rvm_ppl.core.linalg import cho_covariance, cholesky_jittered
    >>> from rvm_ppl.kernels.kernel import RBF
    >>> X = np.linspace(-3, 3, 20)[:, None]; t = np.sin(X[:, 0])
    >>> k = RBF(gamma=1.0); Phi = k(X, X[::5]); beta = 100.0
    >>> # The posterior at alpha = 1 (Tipping 2001, eqs. 12-13).
    >>> Sigma = cho_covariance(cholesky_jittered(beta * Phi.T @ Phi + np.eye(4)))
    >>> mu = beta * Sigma @ Phi.T @ t
    >>> Xs = np.array([[0.3], [10.0]])
    >>> m, v = augmented_predict(Phi, t, mu, Sigma, beta, k(X, Xs), np.ones(2),
    ...                          k(Xs, X[::5]), alpha_star=2.0)
    >>> bool(abs(v[1] - (1 / beta + 1 / 2.0)) < 1e-12)  # far away: noise + 1/alpha*
    True
    """
    Phi = np.asarray(Phi, dtype=float)
    t = np.asarray(t, dtype=float)
    mean = np.asarray(mean, dtype=float)
    cov = np.asarray(cov, dtype=float)
    K_new = np.asarray(K_new, dtype=float)
    k_new_diag = np.asarray(k_new_diag, dtype=float)
    Phi_test = np.asarray(Phi_test, dtype=float)
    N, M = Phi.shape
    T = K_new.shape[1] if K_new.ndim == 2 else -1
    if K_new.shape != (N, T) or k_new_diag.shape != (T,) or Phi_test.shape != (T, M):
        raise ValueError(
            f"Inconsistent shapes: Phi {Phi.shape}, K_new {K_new.shape} (expected (N, T)), "
            f"k_new_diag {k_new_diag.shape} (expected (T,)), Phi_test {Phi_test.shape} "
            "(expected (T, M))."
        )
    if t.shape != (N,) or mean.shape != (M,) or cov.shape != (M, M):
        raise ValueError(
            f"Inconsistent shapes: t {t.shape}, mean {mean.shape}, cov {cov.shape} for "
            f"Phi of shape {Phi.shape}."
        )
    if not alpha_star > 0:
        raise ValueError(f"alpha_star must be positive; got {alpha_star!r}.")
    noise_var = 1.0 / beta if noise_var is None else float(noise_var)

    # RVM predictive moments, eq. (4).
    m = Phi_test @ mean
    SPt = cov @ Phi_test.T  # (M, T)
    v = noise_var + np.einsum("tm,mt->t", Phi_test, SPt)

    B = Phi.T @ K_new  # (M, T): Phi^T phi*, the only O(N M) product
    U = beta * (cov @ B)  # u = beta Sigma Phi^T phi*
    # eq. (7): q* = phi*^T (t - Phi mu) / sigma^2
    q = beta * (K_new.T @ (t - Phi @ mean))
    # eq. (7): s* = phi*^T C^{-1} phi* with C^{-1} = beta I - beta^2 Phi Sigma Phi^T
    s = beta * np.einsum("nt,nt->t", K_new, K_new) - beta * np.einsum("mt,mt->t", B, U)
    s = np.maximum(s, 0.0)  # s* >= 0; rounding can push it just below
    # eq. (7): e* = phi*(x*) - sigma^{-2} phi(x*) Sigma Phi^T phi*
    e = k_new_diag - np.einsum("tm,mt->t", Phi_test, U)
    d = alpha_star + s
    # eq. (6)
    return m + e * q / d, v + e**2 / d


def rvm_star_predict(estimator, X, *, alpha_star=None, chunk_size=None):
    """RVM* predictive mean and standard deviation of a fitted regressor.

    Parameters
    ----------
    estimator : RVR
        Fitted, with a kernel (not ``"precomputed"``) and the attribute
        ``y_fit_`` holding the training targets. Uses ``result_``,
        ``kernel_``, ``X_fit_`` and ``_design``.
    X : array-like of shape (n_samples, n_features)
        Test inputs, already validated.
    alpha_star : float, optional
        Prior precision of the new weight; default ``1 / var(y_fit_)``.
    chunk_size : int, optional
        Test points processed together; by default as many as keep the
        ``N x chunk_size`` kernel block under ``CHUNK_ENTRIES`` entries.

    Returns
    -------
    mean, std : ndarray of shape (n_samples,)

    Examples
    --------
    >>> from rvm_ppl import RVR
    >>> from rvm_ppl.datasets.loaders import make_sinc
    >>> X, y = make_sinc(50, random_state=0)
    >>> m = RVR(gamma=1 / 9).fit(X, y)
    >>> mean, std = rvm_star_predict(m, [[0.0], [40.0]])
    >>> bool(std[1] > m.predict([[40.0]], return_std=True)[1][0])
    True
    """
    kernel = estimator.kernel_
    if kernel is None:
        raise ValueError(
            "RVM* centres a new basis function k(., x*) on each test input, so it needs a "
            "kernel; it is undefined for kernel='precomputed'."
        )
    y_fit = getattr(estimator, "y_fit_", None)
    if y_fit is None:
        raise AttributeError("RVM* needs the training targets in the estimator's `y_fit_`.")
    post = estimator.result_
    X_fit = estimator.X_fit_
    t = np.asarray(y_fit, dtype=float)
    X = np.asarray(X, dtype=float)
    if alpha_star is None:
        alpha_star = default_alpha_star(t)
    N = X_fit.shape[0]
    if chunk_size is None:
        chunk_size = max(1, CHUNK_ENTRIES // max(N, 1))
    Phi = estimator._design(X_fit, post.support)
    diag = getattr(kernel, "diag", None)
    mean, var = np.empty(X.shape[0]), np.empty(X.shape[0])
    for start in range(0, X.shape[0], chunk_size):
        sl = slice(start, start + chunk_size)
        Xc = X[sl]
        if diag is not None:
            k_diag = diag(Xc)
        else:  # a plain callable: k(x, x) one point at a time
            k_diag = np.array([kernel(x[None], x[None])[0, 0] for x in Xc])
        mean[sl], var[sl] = augmented_predict(
            Phi, t, post.mean, post.cov, post.beta, kernel(X_fit, Xc), k_diag,
            estimator._design(Xc, post.support), alpha_star, noise_var=post.noise_var,
        )
    if not (np.all(np.isfinite(mean)) and np.all(var > 0)):
        raise ValueError(
            "RVM* needs the posterior covariance of the weights, and this fit's is beyond "
            "float64 (a sampled posterior whose alpha draws reach far below e^-30, as on a "
            "smooth kernel with many points): the RVM* variance is not a number. Predict "
            "without augment, which goes through g = V w, or fit with method='evidence' or 'vb'."
        )
    return mean, np.sqrt(var)
