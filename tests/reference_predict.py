"""Reference predictions the tests (and benchmarks/bench_rvm_star.py) check the package against.

Written for clarity, not speed: each one computes by brute force what a fast
routine of :mod:`rvm_ppl` computes by an update.
"""

import numpy as np

from rvm_ppl.core.linalg import cho_solve, cholesky_jittered


def augmented_predict_dense(Phi, t, alpha, beta, K_new, k_new_diag, Phi_test, alpha_star):
    """Compute RVM* predictions densely from the augmented Gaussian process, eq. (9).

    For each test point the covariance ``k*(x, x') = sum_m phi_m(x)
    phi_m(x') / alpha_m + phi*(x) phi*(x') / alpha*`` (eq. 8 plus the new
    basis function) gives the standard GP predictive moments with an
    ``N x N`` Cholesky factorisation: ``O(N^3)`` per test point, the
    reference :func:`rvm_ppl.estimators.rvm_star.augmented_predict` is
    checked against on small problems.

    Parameters
    ----------
    Phi : ndarray of shape (N, M)
    t : ndarray of shape (N,)
    alpha : ndarray of shape (M,)
        Weight precisions of the retained basis functions.
    beta : float
        Noise precision.
    K_new, k_new_diag, Phi_test, alpha_star
        As in :func:`rvm_ppl.estimators.rvm_star.augmented_predict`.

    Returns
    -------
    mean, var : ndarray of shape (T,)
    """
    Phi = np.asarray(Phi, dtype=float)
    alpha = np.asarray(alpha, dtype=float)
    K_new = np.asarray(K_new, dtype=float)
    Phi_test = np.asarray(Phi_test, dtype=float)
    N = Phi.shape[0]
    K_rvm = (Phi / alpha) @ Phi.T  # eq. (8) at the training inputs
    T = K_new.shape[1]
    mean, var = np.empty(T), np.empty(T)
    for j in range(T):
        phi = K_new[:, j]
        # eq. (9): k*(X, X) + sigma^2 I
        C = K_rvm + np.outer(phi, phi) / alpha_star + np.eye(N) / beta
        L = cholesky_jittered(C, what="augmented GP covariance")
        k_cross = (Phi / alpha) @ Phi_test[j] + phi * k_new_diag[j] / alpha_star
        k_self = Phi_test[j] @ (Phi_test[j] / alpha) + k_new_diag[j] ** 2 / alpha_star
        mean[j] = k_cross @ cho_solve(L, t)
        var[j] = 1.0 / beta + k_self - k_cross @ cho_solve(L, k_cross)
    return mean, var
