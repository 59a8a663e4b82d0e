"""Reference implementations that only the tests use.

Closed forms and brute-force computations the fits are checked against; the
package itself never calls them.
"""

import numpy as np

from rvm_ppl.closed_form import laplace
from rvm_ppl.closed_form.bernoulli import posterior_mode
from rvm_ppl.closed_form.scales import _compiled_log_evidence, _sq_diffs
from rvm_ppl.core.labels import one_hot


def laplace_log_evidence(Phi, t, alpha):
    """Laplace approximation to the log evidence of a Bernoulli RVM at fixed ``alpha``.

    Finds the posterior mode with :func:`posterior_mode` and returns
    ``log P(t | mu) - mu^T A mu / 2 + sum log(alpha) / 2 - log|H| / 2``, the
    log of the Gaussian integral of ``P(t | w) p(w | alpha)`` around the mode.
    ``alpha = inf`` drops the column. A reference, like
    :func:`rvm_ppl.closed_form.evidence.log_evidence_dense`.

    Parameters
    ----------
    Phi : ndarray of shape (N, M)
    t : ndarray of shape (N,)
        Targets in {0, 1}.
    alpha : ndarray of shape (M,)

    Returns
    -------
    float
    """
    alpha = np.asarray(alpha, dtype=float)
    keep = np.isfinite(alpha)
    mode = posterior_mode(np.asarray(Phi, dtype=float)[:, keep], t, alpha[keep])
    return laplace.log_evidence(mode.log_likelihood, mode.mu, alpha[keep], mode.L)


def _dense_alpha(alpha, K, M):
    alpha = np.asarray(alpha, dtype=float)
    if alpha.ndim == 1:
        alpha = np.broadcast_to(alpha, (K, M))
    if alpha.shape != (K, M):
        raise ValueError(f"alpha must have shape ({M},) or ({K}, {M}), got {alpha.shape}.")
    if np.any(~(alpha > 0)):
        raise ValueError("alpha must be positive (inf drops a weight).")
    return alpha


def posterior_mode_multinomial(
    Phi,
    y,
    alpha,
    *,
    n_classes=None,
    max_iter=laplace.MAX_POSTMODE_ITS,
    grad_tol=laplace.GRADIENT_MIN,
    step_min=laplace.STEP_MIN,
):
    """Posterior mode of the ``K`` weight vectors of a softmax model with an ARD prior.

    Maximises ``log P(T | W) - sum_k w_k^T A_k w_k / 2`` (Tipping 2001, eqs.
    24 and 28) by Newton's method with the block Hessian (SparseBayes's
    ``SB2_PosteriorMode`` generalised to ``K`` outputs).

    Parameters
    ----------
    Phi : ndarray of shape (N, M)
    y : ndarray of shape (N,)
        Integer labels in ``0, ..., K - 1``.
    alpha : ndarray of shape (M,) or (K, M)
        Prior precisions; ``inf`` fixes the weight at 0.
    n_classes : int, optional
        ``K``; default ``max(y) + 1``.
    max_iter, grad_tol, step_min
        As :func:`rvm_ppl.closed_form.laplace.posterior_mode`.

    Returns
    -------
    W : ndarray of shape (K, M)
        The mode (0 where ``alpha`` is infinite).
    log_evidence : float
        The Laplace approximation to ``log P(T | alpha)`` at the mode.
    grad_max : float
        Largest absolute gradient component at the returned point.
    """
    Phi = np.asarray(Phi, dtype=float)
    T, K = one_hot(y, n_classes)
    M = Phi.shape[1]
    alpha = _dense_alpha(alpha, K, M)
    kk, mm = np.nonzero(np.isfinite(alpha))
    cols = Phi[:, mm]
    w, L, log_lik, _, _, grad_max, _ = laplace.posterior_mode(
        cols, kk, laplace.Softmax(T), alpha[kk, mm], None, max_iter=max_iter, grad_tol=grad_tol,
        step_min=step_min)
    W = np.zeros((K, M))
    W[kk, mm] = w
    return W, laplace.log_evidence(log_lik, w, alpha[kk, mm], L), grad_max


def laplace_log_evidence_multinomial(Phi, y, alpha, *, n_classes=None):
    """Laplace approximation to the log evidence of the softmax RVM at fixed ``alpha``.

    A reference, like :func:`laplace_log_evidence`.

    Parameters
    ----------
    Phi : ndarray of shape (N, M)
    y : ndarray of shape (N,)
        Integer labels in ``0, ..., K - 1``.
    alpha : ndarray of shape (M,) (shared) or (K, M)
    n_classes : int, optional

    Returns
    -------
    float
    """
    return posterior_mode_multinomial(
        Phi, y, alpha, n_classes=n_classes, max_iter=200, grad_tol=1e-10
    )[1]


def log_evidence_eta(X, t, log_eta, *, centres, fixed, alpha, beta):
    """Log evidence and its gradient with respect to ``log eta`` for a fixed model.

    Parameters
    ----------
    X : ndarray of shape (N, d)
    t : ndarray of shape (N,)
    log_eta : ndarray of shape (d,)
        Log input scales of the Gaussian kernel (Tipping 2001, eq. 31).
    centres : ndarray of shape (m, d)
        Centres of the kernel basis functions in the model.
    fixed : ndarray of shape (N, f)
        The other basis functions in the model (bias, extra columns).
    alpha : ndarray of shape (f + m,)
        Their precisions, ``fixed`` first.
    beta : float

    Returns
    -------
    value : float
        ``log N(t | 0, beta^{-1} I + Phi A^{-1} Phi^T)``.
    grad : ndarray of shape (d,)
        ``dL / dlog eta``, by automatic differentiation (the quantity of
        Tipping 2001, eqs. 53-57, times ``eta``); ``nan`` where the
        Cholesky factorisation fails.
    """
    f = _compiled_log_evidence()  # the fit's own compiled function
    X = np.asarray(X, dtype=float)
    centres = np.asarray(centres, dtype=float).reshape(-1, X.shape[1])
    value, grad = f(
        np.asarray(log_eta, dtype=float),
        _sq_diffs(X, centres),
        np.asarray(fixed, dtype=float).reshape(X.shape[0], -1),
        np.asarray(alpha, dtype=float),
        float(beta),
        np.asarray(t, dtype=float),
    )
    return float(value), np.asarray(grad, dtype=float)


def laplace_log_evidence_tight(Phi, t, alpha):
    """Laplace log evidence of the Bernoulli RVM, the mode by Newton's method to ``|g| < 1e-12``.

    Written without the package's code, to the precision a stationary point in
    ``log alpha`` needs (the package's mode search stops at ``|g| < 1e-6``).
    """
    from scipy.special import expit

    w = np.zeros(Phi.shape[1])
    for _ in range(100):
        y = expit(Phi @ w)
        g = Phi.T @ (t - y) - alpha * w
        H = (Phi * (y * (1 - y))[:, None]).T @ Phi + np.diag(alpha)
        if np.max(np.abs(g)) < 1e-12:
            break
        w = w + np.linalg.solve(H, g)
    a = Phi @ w
    log_lik = np.sum(t * a - np.logaddexp(0.0, a))
    return (log_lik - 0.5 * np.sum(alpha * w**2) + 0.5 * np.sum(np.log(alpha))
            - 0.5 * np.linalg.slogdet(H)[1])


def penalised_laplace_map(Phi, t, log_alpha0, a, b):
    """Maximise the Laplace evidence plus ``sum (a log alpha - b alpha)`` over ``log alpha`` (BFGS).

    Tipping (2001), eq. (36) with :func:`laplace_log_evidence_tight`; every
    column of ``Phi`` is in the model. Returns the maximiser and the maximum.
    """
    from scipy import optimize

    def neg(la):
        return -(laplace_log_evidence_tight(Phi, t, np.exp(la)) + np.sum(a * la - b * np.exp(la)))

    opt = optimize.minimize(neg, log_alpha0, method="BFGS", options={"gtol": 1e-10})
    return opt.x, -opt.fun
