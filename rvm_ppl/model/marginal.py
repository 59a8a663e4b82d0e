"""The marginal likelihood of the RVM regression as PyTensor ops with analytic gradients.

``log N(t | 0, C)``, ``C = beta^{-1} I + Phi A^{-1} Phi^T`` (Tipping 2001,
eq. 15), in two exact forms:

:func:`dense_marginal_loglike`
    the M x M form of Tipping's Appendix A: one Cholesky factor of
    ``H = beta Phi^T Phi + A`` and its triangular inverse (LAPACK ``dtrtri``,
    :mod:`rvm_ppl.model.trtri`), ``(2/3) M^3`` flops per logp + gradient.
:func:`lowrank_marginal_loglike`
    for a design matrix of low rank, ``Phi = Q V`` with ``Q`` (N x k)
    orthonormal: one QR factor of an ``(M + k) x k`` matrix, ``O(k^2 M)`` per
    logp + gradient, exact also where many ``alpha_m`` are tiny.

:func:`low_rank_factor` finds ``Q`` and ``V`` (a column-pivoted Gram-Schmidt
stopped at a relative tolerance) and :func:`use_low_rank` states when the
second form pays. :func:`truncated_factor` is the one approximation: the
truncated SVD of a design matrix of full numerical rank, for a cheaper
gradient on a nearby design (``build_model(low_rank=<float>)``).
"""

from __future__ import annotations

import numpy as np

# Column-pivoted Gram-Schmidt: a column of Phi counts as reproduced when its
# residual norm is at most this fraction of the largest column norm of Phi.
LOW_RANK_TOL = 1e-12
# Downdated squared residual norms are recomputed once they fall below this
# fraction of their last exact maximum (they are accurate to ~eps of it).
_RECOMPUTE = 1e-6
# lowrank_conditional_moments: rows of W A^{-1/2} gathered per matrix product (k per draw).
_MOMENT_BLOCK_ROWS = 2048
# The low-rank form is used when its flop count, 4 k^2 (M + k) + 4 N k, is at
# most this fraction of the dense form's, (2/3) M^3 (Cholesky and triangular inverse).
LOW_RANK_MAX_COST = 1.0


def low_rank_factor(Phi, *, tol=LOW_RANK_TOL, max_rank=None):
    """``Phi = Q V`` with orthonormal ``Q``, to a relative tolerance, or ``None``.

    Column-pivoted Gram-Schmidt (each new direction orthogonalised twice):
    the column with the largest residual norm enters next, until no residual
    norm exceeds ``tol`` times the largest column norm of ``Phi``. The factor
    is then checked on all columns: ``||phi_m - Q Q^T phi_m|| <= tol *
    max_j ||phi_j||`` for every ``m``.

    Parameters
    ----------
    Phi : ndarray of shape (N, M)
    tol : float
        Relative tolerance on the residual column norms.
    max_rank : int, optional
        Give up (return ``None``) beyond this rank; default ``min(N, M)``.

    Returns
    -------
    (Q, V) or None
        ``Q`` of shape (N, k) with ``Q^T Q = I`` and ``V = Q^T Phi`` of shape
        (k, M); ``None`` if the rank exceeds ``max_rank`` or the check fails.
    """
    Phi = np.asarray(Phi, dtype=float)
    if Phi.ndim != 2:
        raise ValueError(f"Phi must be a 2-D design matrix; got shape {Phi.shape}.")
    N, M = Phi.shape
    cap = min(N, M) if max_rank is None else min(int(max_rank), N, M)
    norms2 = np.einsum("ij,ij->j", Phi, Phi)
    scale2 = float(norms2.max()) if M else 0.0
    if not np.isfinite(scale2) or scale2 <= 0:
        return None
    res2 = norms2.copy()  # squared residual column norms, downdated
    ref2 = scale2  # largest of them when last computed exactly
    Q = np.empty((N, cap))
    j = 0
    while True:
        p = int(np.argmax(res2))
        if res2[p] <= _RECOMPUTE * ref2:
            # Downdating loses the residuals below sqrt(eps) of ref2: recompute.
            res2 = _residual_norms2(Phi, Q[:, :j])
            ref2 = max(float(res2.max()), tol**2 * scale2)
            p = int(np.argmax(res2))
        if res2[p] <= tol**2 * scale2:
            return _checked_low_rank(Phi, Q[:, :j], tol, scale2)
        if j == cap:
            return None
        q = Phi[:, p].copy()
        for _ in range(2):  # "twice is enough" (Kahan-Parlett)
            q -= Q[:, :j] @ (Q[:, :j].T @ q)
        res2[p] = 0.0
        nq = np.linalg.norm(q)
        if nq > 0:
            Q[:, j] = q / nq
            res2 -= (Q[:, j] @ Phi) ** 2
            res2[p] = 0.0
            j += 1


def truncated_factor(Phi, tol):
    """``Q V``, the truncated SVD of ``Phi``: the singular values above ``tol`` times the largest.

    Unlike :func:`low_rank_factor` this is an approximation: a model on it is
    the RVM on the design ``Phi_k = Q V`` (Eckart-Young: the nearest rank-k
    matrix to ``Phi`` in the spectral norm), whose columns differ from those
    of ``Phi`` by at most ``s_{k+1} <= tol * s_1`` in norm.

    Parameters
    ----------
    Phi : ndarray of shape (N, M)
    tol : float
        In (0, 1): the relative singular value below which directions are dropped.

    Returns
    -------
    (Q, V)
        ``Q`` of shape (N, k), the left singular vectors, and ``V = S_k V_k^T`` of
        shape (k, M).
    """
    U, s, Vt = np.linalg.svd(np.asarray(Phi, dtype=float), full_matrices=False)
    k = max(1, int(np.count_nonzero(s > tol * s[0])))
    return np.ascontiguousarray(U[:, :k]), s[:k, None] * Vt[:k]


def _residual_norms2(Phi, Q):
    """``||phi_m - Q Q^T phi_m||^2`` for every column of ``Phi``."""
    E = Phi - Q @ (Q.T @ Phi)
    return np.einsum("ij,ij->j", E, E)


def _checked_low_rank(Phi, Q, tol, scale2):
    """``(Q, Q^T Phi)`` if every residual column norm is within tolerance, else ``None``."""
    if Q.shape[1] == 0:
        return None
    Q = np.ascontiguousarray(Q)
    V = Q.T @ Phi
    if np.all(_residual_norms2(Phi, Q) <= tol**2 * scale2):
        return Q, V
    return None


def automatic_factor(Phi):
    """The exact factor ``Q V`` of ``Phi`` that ``build_model(low_rank=None)`` uses, or None.

    :func:`low_rank_factor` sought up to the largest rank that
    :func:`use_low_rank` accepts (so a full-rank ``Phi`` costs at most
    ``O(N M^2 / 3)`` once); None where there is no such rank or factor: the
    M x M form is then the cheaper exact one.
    """
    N, M = Phi.shape
    max_rank = max((k for k in range(1, min(N, M) + 1) if use_low_rank(N, M, k)), default=0)
    return low_rank_factor(Phi, max_rank=max_rank) if max_rank else None


def use_low_rank(N, M, k):
    """Whether the low-rank form of rank ``k`` pays for an N x M design matrix.

    Flop counts per logp + gradient: ``4 k^2 (M + k) + 4 N k`` (the
    Householder QR factor of the ``(M + k) x k`` matrix and its orthonormal
    factor, the projections of the targets) against ``(2/3) M^3`` (the
    M x M Cholesky factor and triangular inverse); the low-rank form is used
    when its count is at most :data:`LOW_RANK_MAX_COST` times the dense one:
    for ``N ~ M``, ``k`` up to about ``M / 2.5``. The cost of both forms per
    gradient is in the documentation's Benchmarks page, section "Cost per
    gradient" (``docs/benchmarks.md``).
    """
    return 4.0 * k * k * (M + k) + 4.0 * N * k <= LOW_RANK_MAX_COST * (2.0 / 3.0) * M**3


def _gradient_op_class():
    """``RVMMarginalLogp``, an OpFromGraph whose gradient is its outputs 1, 2, ...

    Made once, on first use (the module imports PyTensor lazily), and bound
    to this module's name ``RVMMarginalLogp`` (module ``__getattr__``), so
    that compiled functions holding it can be pickled and unpickled
    (:mod:`rvm_ppl.pymc_fitters.compiled` keeps them across processes).
    """
    if "RVMMarginalLogp" in globals():
        return globals()["RVMMarginalLogp"]
    from pytensor.compile.builders import OpFromGraph
    from pytensor.gradient import DisconnectedType, grad_not_implemented

    class RVMMarginalLogp(OpFromGraph):
        """Outputs ``(logp, d logp / d t, d logp / d alpha, d logp / d beta)``."""

        n_data = 2  # trailing inputs that are data, not differentiated (set per instance)

        def L_op(self, inputs, outputs, output_grads):
            g = output_grads[0]
            if not all(isinstance(og.type, DisconnectedType) for og in output_grads[1:]):
                return [grad_not_implemented(self, k, x, "second derivatives")
                        for k, x in enumerate(inputs)]
            n_par = len(inputs) - self.n_data
            data = [grad_not_implemented(self, k, inputs[k], "the basis is data")
                    for k in range(n_par, len(inputs))]
            return [g * outputs[1 + k] for k in range(n_par)] + data

    RVMMarginalLogp.__module__ = __name__
    RVMMarginalLogp.__qualname__ = "RVMMarginalLogp"
    globals()["RVMMarginalLogp"] = RVMMarginalLogp
    return RVMMarginalLogp


def _gradient_op(value_and_gradient, inputs, n_data):
    """An inlined OpFromGraph of ``value_and_gradient`` whose gradient is its outputs 1, 2, ...

    ``value_and_gradient(*inputs)`` returns ``[logp, d logp / d inputs[0],
    ...]`` for all inputs but the last ``n_data`` (data, not differentiated).
    Once inlined, the value and the gradient share their intermediate results
    (one factorisation); the gradient outputs have no derivatives of their own.
    """
    op = _gradient_op_class()(inputs, value_and_gradient(*inputs), inline=True)
    op.n_data = n_data
    return op


def _as_float64(*args):
    import pytensor.tensor as pt

    return [pt.cast(pt.as_tensor_variable(v), "float64") for v in args]


def dense_marginal_loglike(*, inverse="trtri"):
    """``log N(t | 0, C)``, ``C = beta^{-1} I + Phi A^{-1} Phi^T``, as a PyTensor op.

    Tipping (2001) eq. (15) in the M x M form of his Appendix A: with
    ``H = beta Phi^T Phi + A = Sigma^{-1}`` (eq. 12) and
    ``mu = beta Sigma Phi^T t`` (eq. 13),

        log|C| = -N log beta - sum_m log alpha_m + log|H|
        t^T C^{-1} t = beta t^T t - beta^2 (Phi^T t)^T H^{-1} (Phi^T t)

    One Cholesky factor of ``H`` gives both, and the gradient is analytic
    (Tipping 2001, Appendix A; MacKay's re-estimation quantities):

        d/d alpha_m = (1/alpha_m - Sigma_mm - mu_m^2) / 2
        d/d beta    = (N/beta - ||t - Phi mu||^2 - tr(Sigma Phi^T Phi)) / 2
        d/d t       = -C^{-1} t = -beta (t - Phi mu)

    with ``tr(Sigma Phi^T Phi) = (M - sum_m alpha_m Sigma_mm) / beta``. This
    costs one M x M Cholesky and one triangular inverse per evaluation, about
    a third of what automatic differentiation of ``MvNormal`` with the N x N
    covariance costs, and it stays accurate where ``C`` is too ill-conditioned
    for a Cholesky factor (some ``alpha_m`` tiny), which NUTS otherwise
    reports as divergences.

    Parameters
    ----------
    inverse : {"trtri", "solve"}
        How ``L^{-1}`` is formed: LAPACK's triangular inverse
        (:mod:`rvm_ppl.model.trtri`, ``M^3 / 3`` flops) or a triangular solve
        against the identity (``M^3`` flops; the form before ``dtrtri``,
        which ``benchmarks/bench_bayes.py --part gradient`` compares).

    Returns
    -------
    callable
        ``f(value, alpha, beta, Phi, PhiT_Phi) -> scalar`` on PyTensor
        variables; ``PhiT_Phi`` is ``Phi^T Phi`` of the training data, kept
        as data so that it is not recomputed at every evaluation.
    """
    import pytensor.tensor as pt
    from pytensor.tensor.slinalg import solve_triangular

    if inverse not in ("trtri", "solve"):
        raise ValueError(f"inverse must be 'trtri' or 'solve'; got {inverse!r}.")
    if inverse == "trtri":
        from rvm_ppl.model.trtri import lower_triangular_inverse
    else:
        def lower_triangular_inverse(L):
            return solve_triangular(L, pt.eye(L.shape[0]), lower=True)

    def value_and_gradient(t, alpha, beta, Phi, PtP):
        N, M = t.shape[0], alpha.shape[0]
        H = beta * PtP + pt.diag(alpha)  # Sigma^{-1}, eq. (12)
        L = pt.linalg.cholesky(H, lower=True)
        z = solve_triangular(L, beta * (Phi.T @ t), lower=True)  # L^{-1} beta Phi^T t
        logdet_H = 2.0 * pt.sum(pt.log(pt.diagonal(L)))
        quad = beta * (t @ t) - z @ z  # t^T C^{-1} t
        logp = -0.5 * (
            N * np.log(2 * np.pi) - N * pt.log(beta) - pt.sum(pt.log(alpha)) + logdet_H + quad
        )
        Linv = lower_triangular_inverse(L)
        Sigma_diag = pt.sum(Linv**2, axis=0)
        mu = Linv.T @ z  # eq. (13)
        resid = t - Phi @ mu
        d_t = -beta * resid
        d_alpha = 0.5 * (1.0 / alpha - Sigma_diag - mu**2)
        d_beta = 0.5 * (N / beta - resid @ resid - (M - pt.sum(alpha * Sigma_diag)) / beta)
        return [logp, d_t, d_alpha, d_beta]

    ins = [pt.vector("t"), pt.vector("alpha"), pt.scalar("beta"), pt.matrix("Phi"),
           pt.matrix("PtP")]
    op = _gradient_op(value_and_gradient, ins, n_data=2)

    def marginal(value, alpha, beta, Phi, PhiT_Phi):
        return op(*_as_float64(value, alpha, beta, Phi, PhiT_Phi))[0]

    return marginal


def lowrank_marginal_loglike():
    """``log N(t | 0, C)`` for ``Phi = Q V`` with ``Q^T Q = I_k``, as a PyTensor op.

    Tipping (2001) eq. (15) split along ``range(Q)`` and its orthogonal
    complement, on which ``C = beta^{-1} I``. With ``s = Q^T t``,
    ``t_perp = t - Q s``, ``B = beta^{1/2} V A^{-1/2}`` (k x M) and
    ``P = I_k + B B^T``, so that ``Q^T C Q = P / beta``:

        log|C| = -N log beta + log|P|
        t^T C^{-1} t = beta (s^T P^{-1} s + ||t_perp||^2)

    With ``g = P^{-1} s``, ``gamma_m = b_m^T P^{-1} b_m = 1 - alpha_m
    Sigma_mm`` and ``alpha_m mu_m^2 = beta (b_m^T g)^2`` (eqs. 12-13 through
    the Woodbury identity), the gradient of Tipping's Appendix A reads

        d/d alpha_m = (gamma_m - beta (b_m^T g)^2) / (2 alpha_m)
        d/d beta    = ((N - sum_m gamma_m) / beta - ||g||^2 - ||t_perp||^2) / 2
        d/d t       = -C^{-1} t = -beta (Q g + t_perp)

    (``||t - Phi mu||^2 = ||g||^2 + ||t_perp||^2``).

    ``P`` is never formed: ``P = G^T G`` for ``G = [I_k; B^T]``, and the
    Householder QR factor ``G = [U_1; U_2] R`` gives ``log|P| = 2 sum_j
    log|R_jj|``, ``gamma_m = ||(U_2)_m||^2`` (``U_2 = B^T R^{-1}``, a sum of
    squares) and ``b_m^T g = (U_2 y)_m`` with ``y = R^{-T} s``. Where some
    ``alpha_m`` is tiny, ``B`` has huge columns; forming ``B B^T`` would
    square them and lose ``I_k`` next to them (at ``beta ||v_m||^2 /
    alpha_m`` about ``1e16``), and ``H = beta Phi^T Phi + A`` of the M x M
    form is then as ill-conditioned as ``1 / alpha_m``. The QR factor loses
    nothing until ``||b_m||`` itself reaches about ``1e16``: on noisy sinc,
    N = 500, with 100 ``alpha`` of neighbouring columns near ``e^{-30}``,
    the gradient in ``log alpha`` agrees with a 50-digit computation to
    ``1e-11``, where the M x M form has no Cholesky factor
    (``tests/test_model_lowrank.py``). ``O(k^2 (M + k) + N k)`` per evaluation.
    The factor is :mod:`rvm_ppl.model.qr`'s op, PyTensor's economic QR with a
    Numba backend that compiles in a sixth of the time.

    Returns
    -------
    callable
        ``f(value, alpha, beta, Q, V) -> scalar`` on PyTensor variables;
        ``Q`` (N x k, orthonormal columns) and ``V = Q^T Phi`` (k x M) of
        the training data, as from :func:`low_rank_factor`.
    """
    import pytensor.tensor as pt
    from pytensor.tensor.slinalg import solve_triangular

    from rvm_ppl.model.qr import economic_qr

    def value_and_gradient(t, alpha, beta, Q, V):
        N, k = t.shape[0], Q.shape[1]
        s = Q.T @ t
        t_perp = t - Q @ s
        B = pt.sqrt(beta) * V / pt.sqrt(alpha)[None, :]
        U, R = economic_qr(pt.concatenate([pt.eye(k), B.T], axis=0))
        U2 = U[k:]  # B^T R^{-1}
        y = solve_triangular(R.T, s, lower=True)  # R^{-T} s
        g = solve_triangular(R, y, lower=False)  # P^{-1} s
        gamma = pt.sum(U2**2, axis=1)  # 1 - alpha_m Sigma_mm
        perp2 = t_perp @ t_perp
        logp = -0.5 * (N * np.log(2 * np.pi) - N * pt.log(beta)
                       + 2.0 * pt.sum(pt.log(pt.abs(pt.diagonal(R)))) + beta * (y @ y + perp2))
        d_alpha = 0.5 * (gamma - beta * (U2 @ y) ** 2) / alpha
        d_beta = 0.5 * ((N - pt.sum(gamma)) / beta - g @ g - perp2)
        d_t = -beta * (Q @ g + t_perp)
        return [logp, d_t, d_alpha, d_beta]

    ins = [pt.vector("t"), pt.vector("alpha"), pt.scalar("beta"), pt.matrix("Q"),
           pt.matrix("V")]
    op = _gradient_op(value_and_gradient, ins, n_data=2)

    def marginal(value, alpha, beta, Q, V):
        return op(*_as_float64(value, alpha, beta, Q, V))[0]

    return marginal


def lowrank_svd(alpha, beta, V):
    """``(A^{-1/2}, U, d, W^T)`` of the thin SVD ``B = beta^{1/2} V A^{-1/2} = U diag(d) W^T``."""
    import pytensor.tensor as pt

    a_isqrt = 1.0 / pt.sqrt(alpha)
    U, d, Wt = pt.linalg.svd(pt.sqrt(beta) * V * a_isqrt[None, :], full_matrices=False)
    return a_isqrt, U, d, Wt


def lowrank_conditional_weights(alpha, beta, V, s, z):
    """``w = mu + R z``, ``R R^T = Sigma``: an exact draw of ``w | alpha, beta, t`` given ``z ~ N(0, I)``.

    For ``Phi = Q V`` (Tipping 2001, eqs. 12-13 through the Woodbury
    identity), with ``B = beta^{1/2} V A^{-1/2}``, ``P = I_k + B B^T`` and
    ``s = Q^T t``:

        Sigma = A^{-1/2} (I_M + B^T B)^{-1} A^{-1/2}
        mu    = beta^{1/2} A^{-1/2} B^T P^{-1} s

    and ``R = A^{-1/2} (I_M + B^T B)^{-1/2}``, both through the thin singular
    value decomposition ``B = U diag(d) W^T`` (k x M), which never squares
    ``B`` (see :func:`lowrank_marginal_loglike` on tiny ``alpha``):
    ``B^T P^{-1} s = W diag(d / (1 + d^2)) U^T s`` and ``(I_M + B^T B)^{-1/2}
    = I_M + W diag(c) W^T``, ``c = (1 + d^2)^{-1/2} - 1``.
    ``O(k^2 M)``, PyTensor.
    """
    import pytensor.tensor as pt

    a_isqrt, U, d, Wt = lowrank_svd(alpha, beta, V)
    mean_part = Wt.T @ (d / (1.0 + d**2) * (U.T @ s))
    root_z = z + Wt.T @ ((1.0 / pt.sqrt(1.0 + d**2) - 1.0) * (Wt @ z))
    return a_isqrt * (pt.sqrt(beta) * mean_part + root_z)


def lowrank_conditional_moments(V, s, alpha, beta, z=None):
    """:func:`rvm_ppl.pymc_fitters.results._conditional_moments` for ``Phi = Q V``, at ``O(k M^2)`` per draw.

    Returns ``E[mu]``, ``E[Sigma] + Cov[mu]`` and ``E[gamma]`` over the draws
    of ``(alpha, beta)`` (Tipping 2001, eqs. 12, 13, 17), given standard
    normal ``z`` the draws of :func:`lowrank_conditional_weights` (else
    None), and the same for ``g = V w`` (:func:`lowrank_latent`), all
    through the thin singular value decomposition ``B = beta^{1/2} V
    A^{-1/2} = U diag(d) W^T``: with ``X = diag(d (1 + d^2)^{-1/2}) W^T``,
    ``Sigma = A^{-1} - (X A^{-1/2})^T (X A^{-1/2})`` and ``gamma_m = ||X
    e_m||^2``. No draw fails: the decomposition exists for every finite
    ``B``, however small some ``alpha_m`` (see
    :func:`lowrank_marginal_loglike`).

    Returns
    -------
    mean, cov, gamma, w, latent
        ``latent = (E[g], Cov[g], draws of g or None)``.
    """
    M = alpha.shape[-1]
    k = V.shape[0]
    flat_a, flat_b = alpha.reshape(-1, M), beta.reshape(-1)
    n = len(flat_a)
    flat_z = None if z is None else z.reshape(-1, M)
    w = None if z is None else np.empty_like(flat_z)
    g = None if z is None else np.empty((n, k))
    mus, gamma_sum, inv_a_sum = np.empty((n, M)), np.zeros(M), np.zeros(M)
    g_means, g_cov = np.empty((n, k)), np.zeros((k, k))
    second = np.zeros((M, M))  # sum of the draws' Sigma, less their A^{-1} (inv_a_sum)
    step = max(1, _MOMENT_BLOCK_ROWS // k)  # draws per block: one stacked SVD, one product
    for lo in range(0, n, step):
        sl = slice(lo, min(lo + step, n))
        a, sb = flat_a[sl], np.sqrt(flat_b[sl])
        a_isqrt = 1.0 / np.sqrt(a)
        U, d, Wt = np.linalg.svd(sb[:, None, None] * V * a_isqrt[:, None, :], full_matrices=False)
        h = d**2 / (1.0 + d**2)
        X = np.sqrt(h)[:, :, None] * Wt
        us = _rows(U.transpose(0, 2, 1), s)
        mus[sl] = sb[:, None] * a_isqrt * _rows(Wt.transpose(0, 2, 1), d / (1.0 + d**2) * us)
        g_means[sl] = _rows(U, h * us)
        g_cov += np.einsum("nkr,nlr->kl", U * (h / flat_b[sl, None])[:, None, :], U)
        inv_a_sum += (1.0 / a).sum(axis=0)
        gamma_sum += np.einsum("nrm,nrm->m", X, X)
        G = (X * a_isqrt[:, None, :]).reshape(-1, M)  # the rows X A^{-1/2} of the block's draws
        second -= G.T @ G
        if w is not None:
            zi = flat_z[sl]
            wz = _rows(Wt, zi)
            w[sl] = mus[sl] + a_isqrt * (zi + _rows(Wt.transpose(0, 2, 1),
                                                    (1.0 / np.sqrt(1.0 + d**2) - 1.0) * wz))
            g[sl] = g_means[sl] + _rows(U, np.sqrt(h) * wz) / sb[:, None]
    mean = mus.mean(axis=0)
    second += mus.T @ mus
    second[np.diag_indices(M)] += inv_a_sum
    g_mean = g_means.mean(axis=0)
    g_cov = (g_cov + g_means.T @ g_means) / n - np.outer(g_mean, g_mean)
    latent = (g_mean, g_cov, None if g is None else g.reshape(*z.shape[:-1], k))
    return (mean, second / n - np.outer(mean, mean), gamma_sum / n,
            None if w is None else w.reshape(z.shape), latent)


def lowrank_latent(V):
    """``V^+`` (M x k): design rows ``Phi`` in the coordinates ``g = V w`` are ``C = Phi V^+``.

    A model built on ``Phi_train = Q V`` sees the weights only through ``g =
    V w`` (its likelihood depends on ``Q g``), so its latent function at
    inputs with design rows ``Phi`` is ``f = C g`` (least squares through
    the singular values of ``V``; on the training rows ``C g = Q g``). The
    part of each row outside the row space of ``V``, below ``1e-12`` of the
    largest column norm inside the training data's range
    (:func:`low_rank_factor`), is dropped, as the likelihood drops it for
    the training rows. Unlike ``Phi w``, ``C g`` does not cancel the huge
    weights that tiny ``alpha_m`` allow (``|w_m|`` up to ``1e18`` on noisy
    sinc at N = 1000): every draw of ``g`` is bounded by the data.
    """
    U, sv, Wt = np.linalg.svd(V, full_matrices=False)
    return (Wt.T / sv) @ U.T


def _rows(A, x):
    """``A[i] @ x[i]`` for every ``i`` of a stack of matrices ``A`` and of rows ``x``.

    ``x`` may be one vector, shared by every matrix.
    """
    return np.matmul(A, x[..., None])[..., 0] if x.ndim > 1 else A @ x


def __getattr__(name):
    # RVMMarginalLogp is made on first use (PyTensor is imported lazily); unpickling asks here.
    if name == "RVMMarginalLogp":
        return _gradient_op_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
