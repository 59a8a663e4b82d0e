"""The Gaussian RVM's log marginal likelihood, in NumPy, written once.

``log N(t | 0, C)`` with ``C = beta^{-1} I + Phi A^{-1} Phi^T`` (Tipping 2001,
eq. 15) through the ``M x M`` posterior precision ``H = beta Phi^T Phi + A``
(eq. 12) and its Cholesky factor: with ``mu = beta H^{-1} Phi^T t`` (eq. 13)
and ``E_D = ||t - Phi mu||^2``,

``L = 1/2 [N log beta - beta E_D - mu^T A mu + sum log alpha - log|H| - N log 2 pi]``

(eqs. 38-40 of the same paper rearranged). The evidence fits
(:mod:`rvm_ppl.closed_form.evidence`) and the diagnostics
(:mod:`rvm_ppl.output.diagnostics`) use it; the compiled engine and the
PyTensor model have their own, one per backend.
"""

from __future__ import annotations

import numpy as np

from rvm_ppl.core.linalg import cho_logdet, cho_solve, cholesky_jittered

LOG_2PI = float(np.log(2 * np.pi))


def log_evidence(N, beta, alpha, mu, ED, logdet_H):
    """``log N(t | 0, C)`` from the posterior of the weights (module docstring).

    Parameters
    ----------
    N : int
        Number of targets.
    beta : float
        Noise precision.
    alpha : ndarray of shape (M,)
        Precisions of the weights in the model.
    mu : ndarray of shape (M,)
        Posterior mean ``beta H^{-1} Phi^T t``.
    ED : float
        ``||t - Phi mu||^2``.
    logdet_H : float
        ``log|beta Phi^T Phi + A|``.
    """
    return 0.5 * (
        N * np.log(beta)
        - beta * ED
        - float(np.sum(alpha * mu**2))
        + float(np.sum(np.log(alpha)))
        - logdet_H
        - N * np.log(2 * np.pi)
    )


def log_evidence_gram(PtP, Pty, tty, N, alpha, beta):
    """``log N(t | 0, C)`` from the cross products ``Phi^T Phi``, ``Phi^T t`` and ``t^T t``.

    Factorises ``H = beta Phi^T Phi + A`` under the jitter policy of
    :func:`rvm_ppl.core.linalg.cholesky_jittered`; ``alpha`` must be finite
    (drop the columns of pruned weights).
    """
    L = cholesky_jittered(beta * PtP + np.diag(alpha), what="posterior precision of the weights")
    mu = beta * cho_solve(L, Pty)
    ED = max(tty - 2.0 * float(mu @ Pty) + float(mu @ PtP @ mu), 0.0)
    return log_evidence(N, beta, alpha, mu, ED, cho_logdet(L))
