"""Type-II maximum likelihood for the multinomial (softmax) RVM.

Tipping (2001), §3, eq. (28) generalises the Bernoulli likelihood to ``K``
classes: ``P(t | W) = prod_n prod_k y_nk^t_nk`` with the softmax link
``y_nk = exp(a_nk) / sum_l exp(a_nl)``, ``a_nk = phi_n^T w_k``, one weight
vector ``w_k`` per class, each with its own ARD precisions ``alpha_k``
(``shared_alpha=False``) or with one ``alpha`` per basis function shared by
the ``K`` classes (``shared_alpha=True``; "the hyperparameters could be
shared amongst outputs if desired").

Identifiability
---------------
All ``K`` weight vectors are kept, as in eq. (28). The softmax is unchanged
when the same vector is added to every ``w_k``, so the likelihood alone has a
flat direction; the Gaussian prior removes it: the log posterior is strictly
concave (its negated Hessian ``Psi^T B Psi + A`` is positive definite), so the
mode is unique and the Laplace approximation proper. With shared ``alpha``
the stationarity condition ``Phi^T (T - Y) = W A`` summed over the classes
gives ``sum_k w_k = 0`` at the mode: the prior picks the sum-to-zero
representative. A reference class (``w_K = 0``) would make the prior, and
so the evidence and the predictions, depend on which class is the
reference; keeping ``K`` vectors keeps the model symmetric in the classes.
For ``K = 2`` the model with shared ``alpha`` *is* the Bernoulli RVM on the
difference ``w_1 - w_2`` with precision ``alpha / 2``: the sum
``w_1 + w_2`` does not enter the likelihood and integrates out exactly, so
both the exact and the Laplace log evidences coincide with the binary ones
at ``alpha_binary = alpha / 2``, and the fit takes the path of the binary
fitter that re-finds the mode after every action
(``fit_evidence_bernoulli(..., frozen_steps=False)``) step for step (tested;
on 100 of Ripley's points both keep the same 4 bases, log evidence -32.292).
The binary fitter's frozen schedule (``frozen_steps=True``, its default
only on large problems) re-estimates with the curvature frozen between modes
and may end at another local maximum (there 5 bases, -32.545). With per-class ``alpha`` and ``K = 2`` only
``1 / alpha_1 + 1 / alpha_2`` (the prior variance of ``w_1 - w_2``) enters
the evidence, which equals the binary one at
``alpha_binary = 1 / (1 / alpha_1 + 1 / alpha_2)``; the per-class pair is
not identifiable, and the fit's path differs from the binary one.

The algorithm
-------------
As :mod:`rvm_ppl.closed_form.bernoulli` does for two classes, every step runs on
the Laplace approximation at the posterior mode (Newton's method with the
block Hessian of the ``K`` weight vectors, ``B_n = diag(y_n) - y_n y_n^T``;
Nabney 1999), and the action is chosen from the statistics of a regression
with the (singular, positive semi-definite) noise precision matrix ``B``
frozen at the mode. A *group* of weights shares one ``alpha``: with
per-class ``alpha`` a group is one weight ``w_km`` and the scalar formulas
of Tipping & Faul (2003) apply unchanged (:func:`rvm_ppl.closed_form.evidence.choose_action`
on ``K M`` candidates); with shared ``alpha`` a group is the ``K`` weights
of one basis function, its factors are a ``K x K`` matrix ``s_m`` and a
``K``-vector ``q_m``, and its contribution to the log evidence is
``l(alpha) = 1/2 sum_j [log alpha - log(alpha + lambda_j) + qt_j^2 / (alpha + lambda_j)]``
with ``lambda_j`` the eigenvalues of ``s_m`` and ``qt = U^T q_m`` (the
multi-output generalisation of Faul & Tipping 2002, eq. 13). It has no
closed-form maximiser; :func:`_maximise_group` finds it by a grid in
``log alpha`` refined by golden-section search. A basis function is
deleted when no finite ``alpha`` makes ``l`` positive.

As for two classes the recorded Laplace log evidence can decrease slightly
after an action (``B`` moves with the mode); what the algorithm promises is
that every action raises the frozen-``B`` evidence by the predicted gain
(tested exactly), and the run stops at the best model seen when steps cycle.

Hyperpriors (type-II MAP)
-------------------------
With ``priors`` (Gamma(a, b), Tipping 2001, Appendix A) the hyperprior
applies to every ``alpha`` as the PyMC model declares it
(:mod:`rvm_ppl.model.categorical`): with shared ``alpha`` once per basis
function, the one ``alpha_m`` its ``K`` weights share; with per-class
``alpha`` once per class and basis function. The fit maximises the
penalised objective of the Bernoulli and regression fits,
``log_evidence + sum (a log alpha - b alpha)`` over the ``alpha`` in the
model on the original columns (:func:`rvm_ppl.closed_form.evidence.prior_penalty`),
a candidate outside the model contributing zero: per-class candidates by
:func:`rvm_ppl.closed_form.evidence.prior_gains` unchanged, shared groups by
adding the same term to :func:`group_gain`. For ``K = 2`` with shared
``alpha ~ Gamma(a, b)``, the binary RVM's ``alpha / 2`` is Gamma(a, 2b);
the two penalised objectives then differ by the constant ``a log 2`` per
basis function in the model, so at a fixed set of basis functions they have
the same stationary ``alpha`` (tested), while the choice of that set, which
compares a basis's share with the zero of a basis left out, differs by
``a log 2`` nats per basis.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy.special import softmax

from rvm_ppl.closed_form import laplace
from rvm_ppl.closed_form.bernoulli import (
    INIT_ALPHA_MIN,
    LOGIT_TARGET_SHRINK,
    POLISH_GRADIENT,
    STALL_GAIN,
    STALL_ITERATIONS,
    _Confirmed,
    alpha_priors,
    polish_map,
)
from rvm_ppl.closed_form.driver import ascend, scalar_gains
from rvm_ppl.closed_form.evidence import (
    ADD,
    DELETE,
    INIT_ALPHA_MAX,
    MIN_DELTA_LOG_ALPHA,
    REESTIMATE,
    prior_gains,
    prior_penalty,
    warn_not_converged,
)
from rvm_ppl.closed_form.laplace import (
    GRADIENT_MIN,
    MAX_POSTMODE_ITS,
    STEP_MIN,
    warn_ill_conditioned,
)
from rvm_ppl.core.labels import one_hot
from rvm_ppl.core.linalg import (
    cho_covariance,
    cholesky_jittered,
    solve_lower,
)
from rvm_ppl.core.progress import FitProgress
from rvm_ppl.kernels.basis import DenseBasis, KernelBasis, LowRankKernelBasis

# Shared-alpha groups: the maximiser of l(alpha) is searched on a grid of
# log(alpha / lambda_max) in [-GRID_HALF_WIDTH, GRID_HALF_WIDTH] with unit
# spacing, then refined by GOLDEN_STEPS golden-section steps (bracket 2 ->
# 2 * 0.618^40 ~ 1e-8 in log alpha).
GRID_HALF_WIDTH = 30
GOLDEN_STEPS = 40
# A group is relevant when its best l(alpha) exceeds this (nats); the scalar
# path uses ZERO_FACTOR on q^2 - s instead.
GROUP_ZERO_GAIN = 1e-12
# Monte Carlo draws of the weights for the predictive probabilities.
N_DRAWS = 2000


# -- the model on columns ----------------------------------------------------------
#
# A "column" j is one weight: basis column cols[:, j] entering the latent value
# of class cls[j]. With shared alpha every basis in the model contributes K
# columns, one per class; with per-class alpha each class has its own set.


def neg_hessian(cols, cls, Y, alpha):
    """``H = Psi^T B Psi + A`` with ``B_n = diag(y_n) - y_n y_n^T`` (Nabney 1999).

    The softmax case of :func:`rvm_ppl.closed_form.laplace.neg_hessian`, for
    class probabilities ``Y`` of shape (N, K).
    """
    return laplace.neg_hessian(cols, cls, Y, Y, alpha)


def _mode(cols, cls, T, alpha, w0, *, max_iter, grad_tol, step_min):
    """The mode of the softmax model (:func:`rvm_ppl.closed_form.laplace.posterior_mode`)."""
    w, L, log_lik, F, n_iter, grad_max, ill = laplace.posterior_mode(
        cols, cls, laplace.Softmax(T), alpha, w0, max_iter=max_iter, grad_tol=grad_tol,
        step_min=step_min)
    return w, L, log_lik, softmax(F, axis=1), n_iter, grad_max, ill


# -- the shared-alpha group objective ------------------------------------------------


def group_gain(alpha, lam, qt2, prior=None):
    """``l(alpha)``: a group's contribution to the (frozen-``B``) log evidence.

    ``1/2 sum_j [log alpha - log(alpha + lambda_j) + qt_j^2 / (alpha + lambda_j)]``,
    Faul & Tipping (2002), eq. (13), for ``K`` weights sharing one ``alpha``,
    written in the eigenbasis of the group's ``K x K`` factor ``s``
    (``lambda_j`` its eigenvalues, ``qt = U^T q``). ``l(inf) = 0``. With a
    Gamma(a, b) hyperprior the group's ``alpha`` adds ``a log alpha' - b
    alpha'`` (Tipping 2001, eq. 36) with ``alpha' = alpha scale^2`` on the
    original column.

    Parameters
    ----------
    alpha : ndarray of shape (G,) or (G, P)
    lam, qt2 : ndarray of shape (G, K)
    prior : tuple (a, b, scale2) of ndarray of shape (G,), optional
        The hyperprior's shape and rate and each group's squared column norm.

    Returns
    -------
    ndarray of the shape of ``alpha``
    """
    alpha = np.asarray(alpha, dtype=float)
    a = alpha[..., None]
    lam_ = lam if alpha.ndim == 1 else lam[:, None, :]
    q_ = qt2 if alpha.ndim == 1 else qt2[:, None, :]
    with np.errstate(divide="ignore", invalid="ignore"):
        out = 0.5 * np.sum(-np.log1p(lam_ / a) + q_ / (a + lam_), axis=-1)
        if prior is not None:
            shape, rate, sc2 = (np.asarray(v, dtype=float) for v in prior)
            if alpha.ndim == 2:
                shape, rate, sc2 = shape[:, None], rate[:, None], sc2[:, None]
            out = out + shape * np.log(alpha * sc2) - rate * alpha * sc2
    return np.where(np.isinf(alpha), 0.0, out)


def _maximise_group(lam, qt2, prior=None):
    """Maximiser ``alpha*`` of :func:`group_gain` for every group, and ``l(alpha*)``.

    ``l -> -inf`` as ``alpha -> 0`` (when some ``lambda_j > 0``) and ``l -> 0``
    as ``alpha -> inf`` (``-inf`` with a hyperprior of rate ``b > 0``);
    ``alpha* = inf`` when no finite ``alpha`` makes ``l`` positive. Grid over
    ``log(alpha / lambda_max)`` then golden-section search in the bracket
    around the best grid point. ``prior`` as in :func:`group_gain`.
    """
    G = lam.shape[0]
    lmax = np.maximum(lam.max(axis=1), np.finfo(float).tiny)
    offsets = np.arange(-GRID_HALF_WIDTH, GRID_HALF_WIDTH + 1, dtype=float)
    X = np.log(lmax)[:, None] + offsets[None, :]
    F = group_gain(np.exp(X), lam, qt2, prior)
    i = np.argmax(F, axis=1)
    r = np.arange(G)
    lo = X[r, np.maximum(i - 1, 0)]
    hi = X[r, np.minimum(i + 1, X.shape[1] - 1)]
    g = (np.sqrt(5) - 1) / 2
    x1, x2 = hi - g * (hi - lo), lo + g * (hi - lo)
    f1 = group_gain(np.exp(x1), lam, qt2, prior)
    f2 = group_gain(np.exp(x2), lam, qt2, prior)
    for _ in range(GOLDEN_STEPS):
        left = f1 > f2  # the maximum lies in [lo, x2]; else in [x1, hi]
        hi = np.where(left, x2, hi)
        lo = np.where(left, lo, x1)
        xn = np.where(left, hi - g * (hi - lo), lo + g * (hi - lo))
        fn = group_gain(np.exp(xn), lam, qt2, prior)
        x1, x2, f1, f2 = (
            np.where(left, xn, x2),
            np.where(left, x1, xn),
            np.where(left, fn, f2),
            np.where(left, f1, fn),
        )
    x = np.where(f1 > f2, x1, x2)
    best = np.maximum(f1, f2)
    grid_best = F[r, i]
    x = np.where(grid_best > best, X[r, i], x)
    best = np.maximum(best, grid_best)
    alpha = np.where(best > GROUP_ZERO_GAIN, np.exp(x), np.inf)
    return alpha, np.where(np.isfinite(alpha), best, 0.0)


def group_out_factors(S, Q, alpha):
    """Eigen-decomposed out factors of groups in the model (``alpha`` finite) or out of it.

    For a group in the model with in-model factors ``S`` (``K x K``) and
    ``Q``, ``s = alpha (alpha I - S)^{-1} S`` and ``q = alpha (alpha I - S)^{-1} Q``
    (Tipping & Faul 2003, eqs. 23-24 in matrix form); out of the model
    ``s = S, q = Q``. Returns ``lambda`` (eigenvalues of ``s``, clipped at 0)
    and ``qt^2`` (squared coordinates of ``q`` in its eigenbasis), each (G, K).
    """
    lamS, U = np.linalg.eigh(S)
    lamS = np.maximum(lamS, 0.0)
    QU = np.einsum("gkj,gk->gj", U, Q)
    a = np.asarray(alpha, dtype=float)[:, None]
    inm = np.isfinite(a)
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = np.where(inm, a / (a - lamS), 1.0)
    return lamS * ratio, (QU * ratio) ** 2


def group_gains(S, Q, act, alpha, blocked, prior=None):
    """:func:`rvm_ppl.closed_form.driver.scalar_gains` for groups sharing one ``alpha``.

    The gains are those of :func:`group_gain`; ``prior``: a Gamma hyperprior
    as :func:`group_gain` takes it, for all ``M`` groups.
    """
    M = S.shape[0]
    in_model = np.zeros(M, dtype=bool)
    in_model[act] = True
    alpha_of = np.full(M, np.inf)
    alpha_of[act] = alpha
    lam, qt2 = group_out_factors(S, Q, alpha_of)
    new_alpha, lmax = _maximise_group(lam, qt2, prior)
    relevant = np.isfinite(new_alpha)
    delete = ~relevant[act]
    cur = group_gain(alpha_of[act], lam[act], qt2[act],
                     None if prior is None else tuple(v[act] for v in prior))
    gain_a = np.where(delete, -cur, lmax[act] - cur)
    new_a = np.where(delete, np.inf, new_alpha[act])
    ad = np.flatnonzero(~in_model & relevant & ~blocked)
    return ad, lmax[ad], new_alpha[ad], gain_a, new_a, delete


# -- the statistics of every candidate at the current mode ----------------------------


def _weighted_norms2_many(basis, Wts):
    """``sum_n w_np phi_nm^2`` for every column ``m`` and weight vector ``p``: (M, P)."""
    if isinstance(basis, DenseBasis):
        return (basis.Phi**2).T @ Wts
    if isinstance(basis, KernelBasis) and not isinstance(basis, LowRankKernelBasis):
        out = np.empty((basis.n_basis, Wts.shape[1]))
        for sl, B in basis._kernel_blocks():
            out[sl] = (B**2).T @ Wts
        return out
    return np.column_stack([basis.weighted_norms2(Wts[:, p]) for p in range(Wts.shape[1])])


class _Laplace:
    """Laplace approximation at the mode and every candidate's factors (unit-norm columns)."""

    def __init__(self, basis, scale, T, cols, cls, pos, alpha, w0, shared, grad_tol=GRADIENT_MIN):
        K = T.shape[1]
        M = basis.n_basis
        J = cols.shape[1]
        self.w, self.L, log_lik, Y, _, _, self.ill = _mode(
            cols,
            cls,
            T,
            alpha,
            w0,
            max_iter=MAX_POSTMODE_ITS,
            grad_tol=grad_tol,
            step_min=STEP_MIN,
        )
        self.logml = laplace.log_evidence(log_lik, self.w, alpha, self.L)
        N = len(Y)
        iu, ju = np.triu_indices(K)
        YY = Y[:, iu] * Y[:, ju]  # y_k y_l for k <= l
        # G[m, k, j] = psi_{mk}^T B psi_j
        #            = [k = cls_j] phi~_m^T (y_{cls_j} c_j) - phi~_m^T (y_k y_{cls_j} c_j)
        if shared:
            # Columns come in groups of K (one basis, classes 0..K-1): the
            # second term is symmetric in (k, cls_j), so only k <= l is needed.
            nb = J // K
            Ub = cols[:, ::K]
            pair = np.zeros((K, K), dtype=int)
            pair[iu, ju] = pair[ju, iu] = np.arange(iu.size)
            V = np.hstack(
                [
                    (Ub[:, :, None] * Y[:, None, :]).reshape(N, nb * K),
                    (Ub[:, :, None] * YY[:, None, :]).reshape(N, nb * iu.size),
                    T - Y,
                    Ub,
                ]
            )
            cross = basis.cross(V) / scale[:, None]
            C1 = cross[:, : nb * K].reshape(M, nb, K)
            C2 = cross[:, nb * K : nb * (K + iu.size)].reshape(M, nb, iu.size)
            G = -C2[:, :, pair].transpose(0, 2, 1, 3).reshape(M, K, J)  # [m, k, g K + c]
            G[:, cls, np.arange(J)] += C1.reshape(M, J)
            rest = cross[:, nb * (K + iu.size) :]
            self.cos_basis = pos[::K]
        else:
            self.cos_basis = np.unique(pos)  # basis functions in the model
            ucols = cols[:, [np.flatnonzero(pos == b)[0] for b in self.cos_basis]]
            D = cols * Y[:, cls]
            YD = (Y[:, :, None] * D[:, None, :]).reshape(N, K * J)
            cross = basis.cross(np.hstack([D, YD, T - Y, ucols])) / scale[:, None]
            G = -cross[:, J : J + K * J].reshape(M, K, J)
            G[:, cls, np.arange(J)] += cross[:, :J]
            rest = cross[:, J + K * J :]
        self.Q = rest[:, :K]  # Q_mk = phi~_m^T (t_k - y_k)
        self.cos = rest[:, K:]
        Z = (
            solve_lower(self.L, G.reshape(M * K, J).T).reshape(J, M, K)
            if J
            else np.zeros((0, M, K))
        )
        sc2 = scale**2
        if shared:
            S1 = np.zeros((M, K, K))
            vals = _weighted_norms2_many(basis, np.hstack([Y, YY])) / sc2[:, None]
            S1[:, iu, ju] = -vals[:, K:]
            S1[:, ju, iu] = -vals[:, K:]
            S1[:, np.arange(K), np.arange(K)] += vals[:, :K]
            # S_m = Psi_m^T B Psi_m - Psi_m^T B Psi Sigma Psi^T B Psi_m (K x K)
            self.S = S1 - np.einsum("jmk,jml->mkl", Z, Z)
        else:
            S1 = _weighted_norms2_many(basis, Y * (1 - Y)) / sc2[:, None]
            self.S = S1 - np.einsum("jmk,jmk->mk", Z, Z)


class _MultinomialModel(_Confirmed):
    """The softmax likelihood's statistics for the sequential driver (:func:`rvm_ppl.closed_form.driver.ascend`).

    A candidate is a basis function (shared ``alpha``: a group of ``K``
    weights) or a class's weight on one (per-class ``alpha``: candidate
    ``k M + m``). The weights in the model are columns ``cols`` of classes
    ``cls`` on bases ``pos`` with precisions ``walpha``; the mode is
    re-found after every action.
    """

    tracks_gain = False

    def __init__(self, basis, scale, T, shared, priors=None):
        self.basis, self.scale, self.T, self.shared = basis, scale, T, shared
        self.K = T.shape[1]
        self.n_basis = basis.n_basis
        self.M = self.n_basis if shared else self.K * self.n_basis
        # Column norm of every candidate; the Gamma hyperprior (alpha_priors) on
        # its alpha refers to the original column.
        self.cand_scale = scale if shared else np.tile(scale, self.K)
        self.priors = priors
        if priors is not None and shared:
            self.group_prior = (np.full(self.M, priors["a"]), np.full(self.M, priors["b"]),
                                scale**2)
        self.in_model = np.zeros(self.M, dtype=bool)
        self.n_exact = 0
        self.ill = False
        self.trace = []
        self.objective_trace = []  # the trace plus the hyperprior terms
        self._init_checks(priors is not None)

    def start(self, j, cols, cls, pos, walpha, w0):
        self.active = [j] if self.shared else [k * self.n_basis + j for k in range(self.K)]
        self.in_model[self.active] = True
        self.cols, self.cls, self.pos, self.walpha = cols, cls, pos, walpha
        self.new_mode(w0)

    def new_mode(self, w0, *, grad_tol=GRADIENT_MIN, record=True):
        """Find the mode from ``w0``; ``record`` as :meth:`_Confirmed.note_mode` takes it."""
        self.state = _Laplace(self.basis, self.scale, self.T, self.cols, self.cls, self.pos,
                              self.walpha, w0, self.shared, grad_tol=grad_tol)
        self.ill |= self.state.ill
        self.note_mode(record)

    # -- the exact penalised objective (polish_map) ----------------------------------
    def laplace_terms(self):
        """Return the weights in the model at the mode, grouped by the ``alpha`` they share."""
        k = len(self.active)
        group = np.repeat(np.arange(k), self.K) if self.shared else np.arange(k)
        return dict(cols=self.cols, cls=self.cls, lik=laplace.Softmax(self.T), walpha=self.walpha,
                    w=self.state.w, L=self.state.L, group=group, alpha=self.alpha,
                    scale2=self.cand_scale[self.act_idx] ** 2)

    def set_alpha(self, alpha, record=None):
        """Move the ``alpha`` of the model (model order); find the mode to ``POLISH_GRADIENT``."""
        alpha = np.asarray(alpha, dtype=float)
        self.walpha = np.repeat(alpha, self.K) if self.shared else alpha.copy()
        self.new_mode(self.state.w, grad_tol=POLISH_GRADIENT, record=record)

    @property
    def act_idx(self):
        return np.asarray(self.active, dtype=int)

    @property
    def alpha(self):
        """One ``alpha`` per candidate in the model."""
        return self.walpha[:: self.K] if self.shared else self.walpha

    @property
    def logml(self):
        return self.state.logml

    # -- the statistics interface ------------------------------------------------
    def gains(self, blocked):
        st = self.state
        if self.shared:
            return self.exclude_refused(group_gains(
                st.S, st.Q, self.act_idx, self.alpha, blocked,
                None if self.priors is None else self.group_prior))
        S, Q = st.S.T.ravel(), st.Q.T.ravel()  # candidate k M + m
        if self.priors is not None:
            return prior_gains(S, Q, self.act_idx, self.alpha, self.cand_scale, self.priors,
                               blocked, self.refused_mask())
        return scalar_gains(S, Q, self.act_idx, self.alpha, blocked)

    def _cos_column(self, m):
        """Cosines of every basis function with basis ``m`` of the model, from the mode's statistics."""
        st = self.state
        return st.cos[:, int(np.flatnonzero(st.cos_basis == m)[0])]

    def cosine(self, j):
        if self.shared:
            return self._cos_column(j)
        k, m = divmod(j, self.n_basis)
        out = np.zeros(self.M)  # only weights of the same class can be aligned
        out[k * self.n_basis:(k + 1) * self.n_basis] = self._cos_column(m)
        return out

    def cosines(self, idx):
        if self.shared:
            return np.column_stack([self._cos_column(m) for m in self.active])[idx]
        out = np.zeros((len(idx), len(self.active)))
        for c, a in enumerate(self.active):
            k, m = divmod(a, self.n_basis)
            same = idx // self.n_basis == k
            out[same, c] = self._cos_column(m)[idx[same] % self.n_basis]
        return out

    def penalty(self):
        """Return the hyperprior terms of the objective, once per ``alpha`` (0 without priors)."""
        if self.priors is None:
            return 0.0
        return prior_penalty(self.alpha * self.cand_scale[self.act_idx] ** 2, None, self.priors)

    def refresh_before(self, d):
        return False

    def _copy(self):
        return (list(self.active), self.cols, self.cls, self.pos, self.walpha, self.state,
                self.in_model.copy())

    def _paste(self, c):
        active, self.cols, self.cls, self.pos, self.walpha, self.state, self.in_model = c
        self.active = list(active)

    def _members(self, j):
        if self.shared:
            return np.arange(self.K) + self.K * self.active.index(j)
        return np.array([self.active.index(j)])

    def add(self, j, new_alpha, order=()):
        self._begin()
        K = self.K
        m, k = (j, None) if self.shared else (j % self.n_basis, j // self.n_basis)
        new = self.basis.columns([m])[:, 0] / self.scale[m]
        kk = np.arange(K) if self.shared else np.array([k])
        w = np.append(self.state.w, np.zeros(kk.size))
        self.walpha = np.append(self.walpha, np.full(kk.size, new_alpha))
        self.cols = np.hstack([self.cols, np.tile(new[:, None], (1, kk.size))])
        self.cls = np.append(self.cls, kk)
        self.pos = np.append(self.pos, np.full(kk.size, m))
        self.active.append(j)
        self.in_model[j] = True
        self.new_mode(w, record=self.mark)
        return self.cosine(j)

    def reestimate(self, j, new_alpha):
        self._begin()
        self.walpha = self.walpha.copy()
        self.walpha[self._members(j)] = new_alpha
        self.new_mode(self.state.w, record=self.mark)
        self._confirm(j, deletion=False)

    def delete(self, j):
        if self.undoing:
            self._undo()
            return
        self._begin()
        keep = np.ones(len(self.walpha), dtype=bool)
        keep[self._members(j)] = False
        w = self.state.w[keep]
        self.walpha, self.cols = self.walpha[keep], self.cols[:, keep]
        self.cls, self.pos = self.cls[keep], self.pos[keep]
        self.active.remove(j)
        self.in_model[j] = False
        self.new_mode(w, record=self.mark)
        self._confirm(j, deletion=True)

    def snapshot(self):
        return self.state, list(self.active), self.cols, self.cls, self.pos, self.walpha

    def restore(self, snap):
        self.state, active, self.cols, self.cls, self.pos, self.walpha = snap
        self.active = list(active)
        self.in_model[:] = False
        self.in_model[self.active] = True
        self.record_point()


@dataclass
class MultinomialEvidenceResult:
    """Outcome of :func:`fit_evidence_multinomial`, on the original basis scale.

    Attributes
    ----------
    active : ndarray of int, shape (n_active,)
        Sorted indices of the basis functions in the model of at least one class.
    mu : ndarray of shape (K, n_active)
        Posterior mode of the weights; 0 where a class does not use a basis.
    Sigma : ndarray of shape (J, J)
        Laplace covariance ``H^{-1}`` of the ``J`` weights in the model, in
        the order of ``coef_index``.
    coef_index : ndarray of int, shape (J, 2)
        ``(class, position in active)`` of each weight in ``Sigma``; class-major.
        With shared ``alpha`` ``J = K n_active`` and ``Sigma`` reshapes to
        ``(K, n_active, K, n_active)`` (:attr:`Sigma_blocks`).
    alpha : ndarray of shape (K, n_basis)
        Weight precisions; ``inf`` where pruned. Equal rows with shared ``alpha``.
    log_evidence : float
        Laplace approximation to ``log P(T | alpha)`` at the final model.
    log_evidence_trace : ndarray
        The same after the initial mode search and every action that changed the model.
    gain_trace : ndarray
        The gain each of those actions was predicted to bring (frozen ``B``); all positive.
    n_iter : int
    converged : bool
    shared_alpha : bool
    n_classes : int
    aligned : ndarray of int
        Candidates skipped by the alignment test (basis indices, or ``k * n_basis + m``
        with per-class ``alpha``).
    counts : dict
    priors : dict or None
        The Gamma hyperprior ``a, b`` on ``alpha`` when one was used (type-II MAP).
    objective : float or None
        The penalised objective that the fit maximised: ``log_evidence``
        plus ``a log alpha - b alpha`` for every finite ``alpha`` (once per
        basis function with shared ``alpha``); ``log_evidence`` without
        hyperpriors.
    objective_trace : ndarray or None
        The same after the initial mode search and every action.
    """

    active: np.ndarray
    mu: np.ndarray
    Sigma: np.ndarray
    coef_index: np.ndarray
    alpha: np.ndarray
    log_evidence: float
    log_evidence_trace: np.ndarray
    gain_trace: np.ndarray
    n_iter: int
    converged: bool
    shared_alpha: bool
    n_classes: int
    aligned: np.ndarray
    counts: dict = field(default_factory=dict)
    priors: dict | None = None
    objective: float | None = None
    objective_trace: np.ndarray | None = None

    @property
    def Sigma_blocks(self):
        """Covariance as ``(K, n_active, K, n_active)``, zero for weights not in the model."""
        K, n = self.mu.shape
        out = np.zeros((K, n, K, n))
        k, p = self.coef_index[:, 0], self.coef_index[:, 1]
        out[k[:, None], p[:, None], k[None, :], p[None, :]] = self.Sigma
        return out

    @property
    def n_relevance(self):
        """Number of basis functions used by at least one class."""
        return int(self.active.size)


def fit_evidence_multinomial(
    basis,
    y,
    *,
    n_classes=None,
    shared_alpha=True,
    start=None,
    max_iter=10_000,
    tol=MIN_DELTA_LOG_ALPHA,
    alignment_test=True,
    callback=None,
    progressbar=False,
    priors=None,
):
    """Maximise the Laplace-approximated evidence of the softmax RVM (Tipping 2001, eq. 28).

    The fast sequential algorithm of Tipping & Faul (2003) on the Laplace
    approximation with the block Hessian of the ``K`` weight vectors: after
    every action the posterior mode is re-found (warm-started) and the
    factors of every candidate are recomputed there (module docstring).

    Parameters
    ----------
    basis : ndarray of shape (N, M), DenseBasis or KernelBasis
        Candidate basis functions (columns).
    y : ndarray of shape (N,)
        Integer labels in ``0, ..., K - 1``.
    n_classes : int, optional
        ``K``; default ``max(y) + 1``.
    shared_alpha : bool
        One ``alpha`` per basis function for all classes (a basis enters or
        leaves the model of every class at once), or one per class and
        basis function.
    start : int, optional
        Basis function to start from; default the one with the largest
        normalised projection ``||phi~_m^T (T - 1/K)||``.
    max_iter : int
        Iteration cap; reaching it emits a ``ConvergenceWarning``.
    tol : float
        Stop when the best action is a re-estimation changing ``log alpha``
        by less than this.
    alignment_test : bool
        Skip candidates whose cosine with a basis in the model (of the same
        class with per-class ``alpha``) exceeds ``1 - 1e-4``.
    callback : callable, optional
        ``callback(iteration, action, index, log_evidence)`` after every
        action that changed the model.
    progressbar : bool
        Show a live line (iteration, weights in the model, log evidence) on
        standard error once the fit has run two seconds.
    priors : dict, optional
        Gamma hyperprior ``a, b`` (shape, rate) on every ``alpha`` of the
        original columns: one per basis function with shared ``alpha``, one
        per class and basis function otherwise, as the PyMC model declares
        it. ``None`` or both zero is plain type-II maximum likelihood;
        otherwise the fit is type-II MAP (module docstring, "Hyperpriors").

    Returns
    -------
    MultinomialEvidenceResult

    Raises
    ------
    ValueError
        For labels that are not integers in ``0, ..., K - 1``, a single
        class, or ``priors`` that
        :func:`rvm_ppl.closed_form.bernoulli.alpha_priors` refuses.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> x = rng.uniform(-3, 3, 60)
    >>> y = np.digitize(x, [-1, 1])
    >>> Phi = np.hstack([np.ones((60, 1)), np.exp(-((x[:, None] - x[None, ::3]) ** 2))])
    >>> res = fit_evidence_multinomial(Phi, y)
    >>> res.mu.shape[0], res.converged
    (3, True)
    """
    if isinstance(basis, np.ndarray):
        basis = DenseBasis(basis)
    priors = alpha_priors(priors, "categorical")
    T, K = one_hot(y, n_classes)
    if basis.n_samples != T.shape[0]:
        raise ValueError(f"basis has {basis.n_samples} rows but y has {T.shape[0]} labels.")
    M = basis.n_basis
    T_lin = T - 1.0 / K
    norms2, _ = basis.norms2_and_project(T_lin[:, 0])
    scale = np.sqrt(norms2)
    scale[scale == 0] = 1.0
    proj = basis.cross(T_lin) / scale[:, None]
    if start is None:
        start = int(np.argmax(np.sum(proj**2, axis=1)))

    # Initial weights (§2.8 for K outputs): least squares of phi~ w_k onto the
    # centred log of the shrunk targets 0.9 t + 0.1 / K.
    col = basis.columns([start])[:, 0] / scale[start]
    P = LOGIT_TARGET_SHRINK * T + (1 - LOGIT_TARGET_SHRINK) / K
    clr = np.log(P) - np.log(P).mean(axis=1, keepdims=True)
    w0 = col @ clr
    # alpha = 1 / mu^2 (SparseBayes) with mu^2 = ||w0||^2 when shared: for
    # K = 2 that is twice the binary alpha, its equivalent (module docstring).
    if shared_alpha:
        a0 = 1.0 / np.sum(w0**2) if np.any(w0) else INIT_ALPHA_MAX
        alpha_g = np.array([np.clip(a0, INIT_ALPHA_MIN, INIT_ALPHA_MAX)])
    cls = np.arange(K)
    pos = np.full(K, start)
    cols = np.tile(col[:, None], (1, K))
    with np.errstate(divide="ignore"):
        alpha = (
            np.full(K, alpha_g[0])
            if shared_alpha
            else np.clip(1 / w0**2, INIT_ALPHA_MIN, INIT_ALPHA_MAX)
        )
    model = _MultinomialModel(basis, scale, T, shared_alpha, priors)
    model.start(start, cols, cls, pos, alpha, w0)
    line = FitProgress("evidence (multinomial)", "log evidence", show=progressbar,
                       unit="basis functions" if shared_alpha else "class weights")
    run = ascend(model, max_iter=max_iter, tol=tol, alignment_test=alignment_test, callback=callback,
                 progress=line.update,
                 stall=(STALL_ITERATIONS, STALL_GAIN), warn_not_converged=warn_not_converged)
    counts = {k: run["counts"][k] for k in (ADD, REESTIMATE, DELETE, "aligned")}
    counts["cycling"] = run["counts"].get("cycling", 0)
    if priors is not None:
        # Type-II MAP: to the stationary point of the penalised Laplace objective
        # (the module docstring of rvm_ppl.closed_form.bernoulli, "Hyperpriors").
        counts.update(polish=polish_map(model, priors), refused=model.n_refused)
    state, active, cls, pos, alpha = model.state, model.active, model.cls, model.pos, model.walpha
    converged, it, trace, gains = run["converged"], run["n_iter"], model.trace, run["gains"]
    line.finish(it, len(active), state.logml, converged)
    if model.ill:
        warn_ill_conditioned()

    act_basis = np.unique(pos)
    p_of = np.searchsorted(act_basis, pos)
    order = np.lexsort((p_of, cls))  # class-major, then basis index
    sc = scale[pos[order]]
    mu = np.zeros((K, act_basis.size))
    mu[cls[order], p_of[order]] = state.w[order] / sc
    Sigma = cho_covariance(state.L)[np.ix_(order, order)] / np.outer(sc, sc)
    alpha_full = np.full((K, M), np.inf)
    alpha_full[cls, pos] = alpha * scale[pos] ** 2
    return MultinomialEvidenceResult(
        active=act_basis,
        mu=mu,
        Sigma=Sigma,
        coef_index=np.column_stack([cls[order], p_of[order]]),
        alpha=alpha_full,
        log_evidence=state.logml,
        log_evidence_trace=np.asarray(trace),
        gain_trace=np.asarray(gains),
        n_iter=it,
        converged=converged,
        shared_alpha=bool(shared_alpha),
        n_classes=K,
        aligned=run["aligned"],
        counts=counts,
        priors=None if priors is None else dict(priors),
        objective=model.objective_trace[-1],
        objective_trace=np.asarray(model.objective_trace),
    )


# -- predictions ---------------------------------------------------------------------


def decision_function_multinomial(Phi_test_active, result):
    """Latent values ``a_k = phi^T mu_k`` at test points, shape (n, K); argmax classifies."""
    return np.asarray(Phi_test_active, dtype=float) @ result.mu.T


def predict_proba_multinomial(Phi_test_active, result, *, n_draws=N_DRAWS, seed=0):
    """Class probabilities integrated over the Laplace posterior of the weights.

    ``P(t = k | x) = E[softmax(a)_k]`` with ``a = (phi^T w_1, ..., phi^T w_K)``
    and ``w ~ N(mu, Sigma)`` (the Laplace posterior), estimated by Monte Carlo:
    ``n_draws`` weight vectors (antithetic pairs ``mu +- L z`` with
    ``L L^T = Sigma``, fixed ``seed``), shared by all test points. The
    antithetic pairs cancel the odd-order terms of the error. A probability
    has variance at most 1/4 under the posterior and a pair's average at
    most that, so the standard error is at most ``0.5 sqrt(2 / n_draws)``
    (0.016 at the default 2000 draws), and the tests check it against
    200 000 draws on every test point. ``n_draws = 0`` returns the
    plug-in ``softmax(phi^T mu)``.

    Parameters
    ----------
    Phi_test_active : ndarray of shape (n, n_active)
        Basis functions ``result.active`` evaluated at the test points.
    result : MultinomialEvidenceResult
    n_draws : int
        Even number of posterior draws (0 for the plug-in).
    seed : int

    Returns
    -------
    ndarray of shape (n, K)
        Rows sum to 1.
    """
    Phi_test_active = np.asarray(Phi_test_active, dtype=float)
    if Phi_test_active.ndim != 2 or Phi_test_active.shape[1] != result.mu.shape[1]:
        raise ValueError(
            f"Phi_test_active must have shape (n, {result.mu.shape[1]}), "
            f"got {Phi_test_active.shape}."
        )
    A = decision_function_multinomial(Phi_test_active, result)
    if n_draws == 0 or result.Sigma.shape[0] == 0:
        return softmax(A, axis=1)
    if n_draws < 0 or n_draws % 2:
        raise ValueError(f"n_draws must be a non-negative even number, got {n_draws}.")
    K = result.n_classes
    cls, p = result.coef_index[:, 0], result.coef_index[:, 1]
    L = cholesky_jittered(result.Sigma, what="posterior covariance of the weights")
    z = np.random.default_rng(seed).standard_normal((L.shape[0], n_draws // 2))
    E = L @ np.hstack([z, -z])  # deviations from mu, (J, S)
    n = Phi_test_active.shape[0]
    out = np.empty((n, K))
    chunk = max(1, 2_000_000 // (K * n_draws))
    for a in range(0, n, chunk):
        b = min(a + chunk, n)
        lat = np.repeat(A[a:b, :, None], n_draws, axis=2)
        for k in range(K):
            j = cls == k
            if np.any(j):
                lat[:, k, :] += Phi_test_active[a:b, p[j]] @ E[j]
        out[a:b] = softmax(lat, axis=1).mean(axis=2)
    return out
