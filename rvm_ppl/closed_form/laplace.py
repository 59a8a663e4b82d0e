"""Laplace's approximation for the RVM with ``K >= 1`` latent outputs, written once.

The weights in the model are "columns": weight ``j`` multiplies the unit-norm
basis column ``cols[:, j]`` in the latent value of output ``cls[j]``, so
``f_nk = sum_{j: cls_j = k} cols_nj w_j`` (Tipping 2001, eq. 28 for ``K``
classes; ``K = 1`` is the binary logit, eq. 23). Everything here is generic
over the likelihood, an object with

- ``K``: the number of latent outputs;
- ``log_likelihood(F)``: ``log P(t | f)`` for the ``(N, K)`` latent values;
- ``residual(F)``: its gradient ``d log P / d f``, ``(N, K)``;
- ``weights(F)``: the negated Hessian in ``f_n`` as ``W_n = diag(d_n) -
  u_n u_n^T``: ``(d, u)`` of shape ``(N, K)`` each, ``u = None`` for a
  diagonal ``W`` (Bernoulli: ``d = y (1 - y)``; softmax: ``d = u = y``,
  Nabney 1999; Poisson with a log link: ``d = exp(f)``);
- ``derivatives(F)``: ``(residual(F), *weights(F))`` from one evaluation
  of the link, which the Newton iterations use;
- ``weights_slope(F, dF)``: the derivative of ``(d, u)`` along ``dF``
  (third derivatives of the log likelihood), which the exact gradient of the
  Laplace evidence in ``alpha`` needs (:func:`log_evidence_gradient`).

:func:`posterior_mode` finds the mode of ``log P(t | w) - w^T A w / 2``
(eq. 24) by Newton's method (iteratively re-weighted least squares, as
SparseBayes's ``SB2_PosteriorMode``), :func:`neg_hessian` is ``H = Psi^T W
Psi + A`` (eq. 25) and :func:`log_evidence` the Laplace approximation to
``log P(t | alpha)``, :func:`log_evidence_gradient` its exact gradient in
``log alpha``. Hyperprior terms of a later objective enter through
``alpha`` only.
"""

from __future__ import annotations

import warnings

import numpy as np
from scipy import linalg
from scipy.special import expit, gammaln, logsumexp, softmax

from rvm_ppl.core.linalg import cho_covariance, cho_logdet, cho_solve, cholesky_jittered

# SparseBayes v2 constants of the mode search (SB2_PosteriorMode).
MAX_POSTMODE_ITS = 25  # Newton iterations per mode search
GRADIENT_MIN = 1e-6  # stop the Newton iterations when max |g| is below this
STEP_MIN = 1 / 256  # smallest step tried by the backtracking line search


class _Likelihood:
    """The gradient and the curvature of a likelihood, from its ``derivatives(F)``."""

    def residual(self, F):
        """``d log P / d f``, shape (N, K)."""
        return self.derivatives(F)[0]

    def weights(self, F):
        """``(d, u)`` of the negated Hessian ``W_n = diag(d_n) - u_n u_n^T`` in ``f_n``."""
        return self.derivatives(F)[1:]


class BernoulliLogit(_Likelihood):
    """``t_n ~ Bernoulli(sigma(f_n))`` with one latent output (Tipping 2001, eq. 23)."""

    K = 1

    def __init__(self, t):
        self.t = np.asarray(t, dtype=float)

    def log_likelihood(self, F):
        """``sum_n t_n f_n - log(1 + e^{f_n})``, with ``logaddexp`` so that no ``log 0`` occurs."""
        a = F[:, 0]
        return float(np.sum(self.t * a - np.logaddexp(0.0, a)))

    def derivatives(self, F):
        """``(t - y, y (1 - y), None)``: ``B = diag(y_n (1 - y_n))``, eq. (25)."""
        y = expit(F[:, 0])
        return (self.t - y)[:, None], (y * (1 - y))[:, None], None

    def weights_slope(self, F, dF):
        """``(y (1 - y) (1 - 2 y) dF, None)``: the change of ``B`` along ``dF``."""
        y = expit(F[:, 0])
        return (y * (1 - y) * (1 - 2 * y) * dF[:, 0])[:, None], None


class PoissonLog(_Likelihood):
    """``t_n ~ Poisson(exp(f_n + o_n))`` with one latent output: counts with a log link.

    ``o_n`` is a known offset (log exposure), 0 by default. The log
    likelihood is concave in ``f``, with ``d log P / d f = t - lambda`` and
    negated second derivative ``lambda = exp(f + o)`` (Tipping 2001, §3 with
    the Poisson likelihood; SparseBayes's ``B = diag(y_n)``). Where
    ``exp`` overflows (a Newton trial step far out) the log likelihood is
    ``-inf``, which the line search rejects.
    """

    K = 1

    def __init__(self, t, offset=None):
        self.t = np.asarray(t, dtype=float)
        self.offset = np.zeros_like(self.t) if offset is None else np.asarray(offset, dtype=float)
        self._log_t_factorial = float(np.sum(gammaln(self.t + 1.0)))

    def rate(self, F):
        """``lambda = exp(f + o)``, ``inf`` (without a warning) where it overflows."""
        with np.errstate(over="ignore"):
            return np.exp(F[:, 0] + self.offset)

    def log_likelihood(self, F):
        """``sum_n t_n (f_n + o_n) - exp(f_n + o_n) - log t_n!``."""
        eta = F[:, 0] + self.offset
        return float(np.sum(self.t * eta - self.rate(F))) - self._log_t_factorial

    def derivatives(self, F):
        """``(t - lambda, lambda, None)``: ``B = diag(lambda_n)``."""
        lam = self.rate(F)
        return (self.t - lam)[:, None], lam[:, None], None

    def weights_slope(self, F, dF):
        """``(lambda dF, None)``: the change of ``B`` along ``dF``."""
        return (self.rate(F) * dF[:, 0])[:, None], None


class Softmax(_Likelihood):
    """``t_n ~ Categorical(softmax(f_n))`` with ``K`` latent outputs (Tipping 2001, eq. 28).

    ``T`` is the one-hot ``(N, K)`` matrix of the labels.
    """

    def __init__(self, T):
        self.T = np.asarray(T, dtype=float)
        self.K = self.T.shape[1]

    def log_likelihood(self, F):
        """``sum_nk t_nk f_nk - sum_n log sum_k exp(f_nk)`` (eq. 28)."""
        return float(np.sum(self.T * F) - np.sum(logsumexp(F, axis=1)))

    def derivatives(self, F):
        """``(T - Y, Y, Y)``: ``B_n = diag(y_n) - y_n y_n^T`` (Nabney 1999)."""
        Y = softmax(F, axis=1)
        return self.T - Y, Y, Y

    def weights_slope(self, F, dF):
        """``(dY, dY)`` with ``dy_n = B_n df_n``: the change of ``d = u = y`` along ``dF``."""
        Y = softmax(F, axis=1)
        dY = Y * (dF - np.sum(Y * dF, axis=1, keepdims=True))
        return dY, dY


def latent(cols, cls, w, K):
    """Latent values ``f_nk = sum_{j: cls_j = k} cols_nj w_j``, shape (N, K)."""
    if K == 1:
        return (cols @ w)[:, None]
    E = np.zeros((cols.shape[1], K))
    E[np.arange(cols.shape[1]), cls] = w
    return cols @ E


def gradient(cols, cls, R, alpha, w):
    """Gradient of the log posterior (eq. 24): ``Psi^T r - A w`` with ``r = d log P / d f``."""
    if R.shape[1] == 1:
        return cols.T @ R[:, 0] - alpha * w
    return np.einsum("nj,nj->j", cols, R[:, cls]) - alpha * w


def neg_hessian(cols, cls, d, u, alpha):
    """``H = Psi^T W Psi + A`` with ``W_n = diag(d_n) - u_n u_n^T`` (eq. 25; Nabney 1999).

    Entry ``(i, j)`` is ``sum_n c_ni c_nj (d_{n,k_i} [k_i = k_j] - u_{n,k_i} u_{n,k_j})``.
    """
    if d.shape[1] == 1:
        H = (cols * d).T @ cols
    else:
        H = (cols * d[:, cls]).T @ cols
        H *= cls[:, None] == cls[None, :]
    if u is not None:
        E = cols * u[:, cls]
        H -= E.T @ E
    H[np.diag_indices_from(H)] += alpha
    return H


def factor(H):
    """Cholesky factor of ``H`` (package jitter policy) and an ill-conditioning flag.

    The flag is SparseBayes's "ill-conditioned Hessian" warning: jitter was
    needed, or ``rcond(L)^2`` is below machine precision (usually a kernel
    width that is too large).
    """
    if H.shape[0] == 0:
        return np.zeros((0, 0)), False
    try:
        L = linalg.cholesky(H, lower=True, check_finite=False)
        ill = False
    except linalg.LinAlgError:
        L = cholesky_jittered(H, what="Hessian of the log posterior")
        ill = True
    rcond, _ = linalg.lapack.dtrcon(L, norm="1", uplo="L")
    return L, ill or rcond**2 < np.finfo(float).eps


def posterior_mode(cols, cls, lik, alpha, w0=None, *, max_iter=MAX_POSTMODE_ITS,
                   grad_tol=GRADIENT_MIN, step_min=STEP_MIN):
    """Posterior mode of the weights in the model, by Newton's method with step halving.

    Maximises ``log P(t | w) - w^T A w / 2`` (Tipping 2001, eq. 24): full
    steps ``H^{-1} g`` through the Cholesky factor of ``H`` (eq. 25),
    halved while the objective does not improve, until ``max |g| <
    grad_tol``, ``max_iter`` steps, or no step down to ``step_min`` improves
    (the point is then the mode to working precision). The iteration is
    deterministic; ``w0`` warm-starts it (zeros by default).

    Returns
    -------
    w : ndarray of shape (J,)
    L : ndarray of shape (J, J)
        Lower Cholesky factor of ``H`` at ``w``; ``Sigma = H^{-1}`` (eq. 26).
    log_lik : float
        ``log P(t | w)``.
    F : ndarray of shape (N, K)
        Latent values at ``w``.
    n_iter : int
        Accepted Newton steps.
    grad_max : float
        ``max |g|`` at ``w``.
    ill : bool
        See :func:`factor`.
    """
    K = lik.K
    J = cols.shape[1]
    w = np.zeros(J) if w0 is None else np.array(w0, dtype=float)
    F = latent(cols, cls, w, K)
    # Negative of eq. (24): the error that the Newton steps decrease.
    error = -lik.log_likelihood(F) + 0.5 * float(np.sum(alpha * w**2))
    n_iter = 0
    for n_iter in range(max_iter + 1):  # n_iter counts the accepted steps
        R, d, u = lik.derivatives(F)
        g = gradient(cols, cls, R, alpha, w)
        if J == 0 or np.max(np.abs(g)) < grad_tol or n_iter == max_iter:
            break
        L, _ = factor(neg_hessian(cols, cls, d, u, alpha))
        delta = cho_solve(L, g)  # Newton direction H^{-1} g
        step = 1.0
        while step >= step_min:
            w_new = w + step * delta
            F_new = latent(cols, cls, w_new, K)
            error_new = -lik.log_likelihood(F_new) + 0.5 * float(np.sum(alpha * w_new**2))
            if error_new < error:
                w, F, error = w_new, F_new, error_new
                break
            step /= 2
        else:
            break  # no step improves: at the minimum to working precision
    R, d, u = lik.derivatives(F)
    g = gradient(cols, cls, R, alpha, w)
    L, ill = factor(neg_hessian(cols, cls, d, u, alpha))
    grad_max = float(np.max(np.abs(g))) if J else 0.0
    return w, L, lik.log_likelihood(F), F, n_iter, grad_max, ill


def log_evidence(log_lik, w, alpha, L):
    """Laplace approximation to ``log P(t | alpha)`` at the mode ``w``.

    ``log P(t | w) - w^T A w / 2 + sum_j log(alpha_j) / 2 - log|H| / 2``
    (Tipping 2001, §3; MacKay 1992; SparseBayes's ``logML``): the
    ``(2 pi)^{J/2}`` of the Gaussian integral cancels the normaliser of the prior.
    """
    return (
        log_lik
        - 0.5 * float(np.sum(alpha * w**2))
        + 0.5 * float(np.sum(np.log(alpha)))
        - 0.5 * cho_logdet(L)
    )


def log_evidence_gradient(cols, cls, lik, alpha, w, L, group):
    """Exact gradient of :func:`log_evidence` at the mode ``w`` in ``log alpha`` of each group.

    The weights of group ``g`` (``group[j] == g``) share one precision.
    Differentiating ``log P(t | w) - w^T A w / 2 + sum log(alpha_j) / 2 -
    log|H| / 2`` with the mode moving (``dw / dlog alpha_g = -Sigma A E_g w``,
    ``E_g`` the group's weights; the mode's own terms are stationary) gives

        ``1/2 sum_(j in g) [1 - alpha_j (w_j^2 + Sigma_jj)] - 1/2 tr(Sigma dH_g)``

    with ``dH_g = Psi^T dW Psi`` the change of ``H`` (eq. 25) along the
    mode's movement, ``dW_n = diag(dd_n) - du_n u_n^T - u_n du_n^T``
    (``weights_slope``). The first term alone is the fixed point of Tipping's
    (2001) re-estimation with ``B`` frozen at the mode (eq. 16); the second
    is the curvature's change, which that fixed point leaves out.

    Parameters
    ----------
    cols, cls, lik, alpha
        As in :func:`posterior_mode`.
    w : ndarray of shape (J,)
        The mode.
    L : ndarray of shape (J, J)
        Cholesky factor of ``H`` at the mode.
    group : ndarray of int, shape (J,)
        Group of each weight, ``0 .. G - 1``.

    Returns
    -------
    ndarray of shape (G,)
    """
    K, J = lik.K, w.size
    G = int(group.max()) + 1 if J else 0
    if J == 0:
        return np.zeros(0)
    Sigma = cho_covariance(L)
    E = np.zeros((J, G))
    E[np.arange(J), group] = 1.0
    out = 0.5 * E.T @ (1.0 - alpha * (w**2 + np.diagonal(Sigma)))
    F = latent(cols, cls, w, K)
    _, _, u = lik.derivatives(F)
    # C_n = Psi_n Sigma Psi_n^T (K x K): the posterior covariance of the latent f_n.
    Psi = cols[:, :, None] * (cls[None, :, None] == np.arange(K)[None, None, :])
    C = np.einsum("njk,ji,nil->nkl", Psi, Sigma, Psi)
    diagC = np.einsum("nkk->nk", C)
    V = -Sigma @ (E * (alpha * w)[:, None])  # column g: dw / dlog alpha_g
    for g in range(G):
        dd, du = lik.weights_slope(F, latent(cols, cls, V[:, g], K))
        tr = np.sum(dd * diagC)
        if du is not None:
            tr -= 2.0 * np.einsum("nk,nkl,nl->", du, C, u)
        out[g] -= 0.5 * tr
    return out


def warn_ill_conditioned():
    """Warn that a Hessian of the log posterior needed jitter (an ill-conditioned Hessian)."""
    warnings.warn(
        "Ill-conditioned Hessian of the log posterior during the evidence "
        "maximisation; the kernel width may be too large (gamma too small).",
        RuntimeWarning,
        stacklevel=3,
    )
