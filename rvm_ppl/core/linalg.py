"""Guarded dense linear algebra shared by every fitting method.

Jitter policy
-------------
:func:`cholesky_jittered` first tries a plain Cholesky factorisation. If that
fails it adds ``JITTER * mean(diag(A))`` to the diagonal and multiplies the
jitter by ten on each further failure, at most ``MAX_TRIES`` times (so the
largest jitter is ``1e-4 * mean(diag(A))``). If every attempt fails it raises
:class:`NotPositiveDefiniteError`, a ``ValueError`` with an actionable
message, never a bare ``LinAlgError``. No function here forms an explicit
inverse.
"""

from __future__ import annotations

import contextlib
import functools

import numpy as np
from scipy import linalg
from scipy.linalg import blas, lapack

JITTER = 1e-10
MAX_TRIES = 7


class NotPositiveDefiniteError(ValueError):
    """A matrix that must be positive definite is not, even with jitter."""


def cholesky_or_none(A):
    """Lower Cholesky factor of ``A`` by LAPACK's ``potrf``, without jitter; None if that fails.

    For callers with their own remedy (e.g. a Levenberg shift). A NaN
    anywhere in ``A`` reaches the last diagonal entry of the factor.
    """
    c, info = lapack.dpotrf(A, lower=1, clean=1)
    if info == 0 and np.isfinite(c[-1, -1]):
        return c
    return None


def cholesky_jittered(A, *, what="matrix"):
    """Lower Cholesky factor of a symmetric positive definite matrix.

    Parameters
    ----------
    A : ndarray of shape (m, m)
        Symmetric matrix that should be positive definite.
    what : str
        Name of the matrix, used in the error message.

    Returns
    -------
    L : ndarray of shape (m, m)
        Lower triangular with ``L @ L.T == A + jitter * I``.

    Raises
    ------
    NotPositiveDefiniteError
        If ``A`` is not positive definite even after ``MAX_TRIES`` jitters.
    """
    A = np.asarray(A, dtype=float)
    if A.shape[0] == 0:
        return np.zeros((0, 0))
    # LAPACK's potrf directly: scipy's argument checks cost more than the
    # factorisation of the small matrices the sequential fits factorise at
    # every step.
    c = cholesky_or_none(A)
    if c is not None:
        return c
    if not np.all(np.isfinite(A)):
        raise NotPositiveDefiniteError(f"The {what} contains NaN or inf entries.")
    scale = float(np.mean(np.abs(np.diag(A)))) or 1.0
    jitter = JITTER * scale
    for _ in range(MAX_TRIES):
        try:
            return linalg.cholesky(
                A + jitter * np.eye(A.shape[0]), lower=True, check_finite=False
            )
        except linalg.LinAlgError:
            jitter *= 10.0
    raise NotPositiveDefiniteError(
        f"The {what} is not positive definite, even with a jitter of "
        f"{jitter / 10:.1e} on its diagonal. The basis is probably degenerate "
        "(nearly collinear columns): try a narrower kernel (larger gamma), remove "
        "duplicated columns, or standardise the inputs."
    )


def cho_logdet(L):
    """Log-determinant ``log|A|`` from the lower Cholesky factor ``L`` of ``A``."""
    return 2.0 * float(np.sum(np.log(np.diag(L))))


def cho_solve(L, B):
    """Solve ``A X = B`` given the lower Cholesky factor ``L`` of ``A`` (LAPACK ``potrs``)."""
    X, _ = lapack.dpotrs(L, B, lower=1)
    return X


def solve_lower(L, B):
    """Solve ``L X = B`` for lower triangular ``L``."""
    return linalg.solve_triangular(L, B, lower=True, check_finite=False)


def solve_lower_t(L, B):
    """Solve ``L^T X = B`` for lower triangular ``L``."""
    return linalg.solve_triangular(L, B, lower=True, trans="T", check_finite=False)


def cho_covariance(L):
    """``A^{-1}`` from the lower Cholesky factor of ``A``, as ``L^{-T} L^{-1}`` (LAPACK ``trtri``).

    Used where the full posterior covariance is the output (its entries are
    stored and reported, or updated by rank-one steps), never to solve a system.
    """
    if L.shape[0] == 0:
        return np.zeros((0, 0))
    Linv, _ = lapack.dtrtri(L, lower=1)
    return Linv.T @ Linv


def solve_lower_t_right(L, B):
    """Solve ``X L^T = B`` for lower triangular ``L``: ``X = B L^{-T}``.

    The rows of ``X`` are ``L^{-1} b_i``, i.e. ``solve_lower(L, B.T).T``,
    computed by one BLAS ``trsm`` on ``B`` as it is stored: for a tall
    column-major ``B`` (``M x k`` with ``M >> k``) this avoids the
    transposed copy that :func:`solve_lower` would make.
    """
    B = np.asarray(B, dtype=float)
    if B.shape[1] == 0:
        return np.empty_like(B)
    return blas.dtrsm(1.0, L, B, side=1, lower=1, trans_a=1)


@functools.cache
def _thread_controller():
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()  # inspecting the loaded libraries costs 25-40 ms: once


def blas_limit(threads):
    """A context limiting BLAS to ``threads`` threads, or doing nothing when it is None.

    One thread is the package's default: several threads were slower for
    these matrix sizes (the documentation's Benchmarks page, section "Speed
    (evidence method)").
    """
    if threads is None:
        return contextlib.nullcontext()
    return _thread_controller().limit(limits=threads, user_api="blas")
