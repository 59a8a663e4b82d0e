"""Type-II maximum likelihood: the fast sequential evidence maximiser.

This is the algorithm of Tipping & Faul (2003), as implemented in SparseBayes
v2, for the Gaussian likelihood. It maximises the log evidence
``L(alpha, beta) = log N(t | 0, C)`` with ``C = beta^{-1} I + Phi A^{-1} Phi^T``
one basis function at a time: every iteration computes the change in ``L``
that adding, re-estimating or deleting each candidate would bring (Faul &
Tipping 2002) and takes the best. Basis functions outside the model have
``alpha = inf`` and are never carried in the matrices.

Notation follows Tipping (2001): ``Phi`` design matrix, ``alpha`` weight
precisions, ``beta`` noise precision, ``Sigma`` and ``mu`` the posterior of the
weights in the model, ``S, Q`` the sparsity and quality factors with the
basis function in the model, ``s, q`` with it left out.

The decisions (which candidate to add, re-estimate or delete, the noise
schedule, the alignment test, the refusal of additions the exact evidence
does not confirm, when to stop) are those of the sequential driver
(:mod:`rvm_ppl.closed_form.driver`), which runs the climb over
:class:`_Model`, the Gaussian statistics with Tipping & Faul's rank-one
updates. Large problems run in a compiled loop
(:mod:`rvm_ppl.closed_form.engine`) when the basis fits in memory as a dense
matrix and the fit uses no callback or progress logging, with or without
hyperpriors; it calls the driver's decision functions compiled by Numba.

Every action is chosen because it raises ``L``; the noise update is a
MacKay fixed-point step that is accepted only if it raises ``L`` too (with
step halving in ``log beta`` otherwise), so the recorded log evidence never
decreases. One ``alpha`` at a time converges slowly where the weights of
two basis functions, or a weight and the noise, trade off: the algorithm
then re-estimates the same few precisions hundreds of times, each step
gaining micro-nats. After ``POLISH_AFTER`` re-estimations in a row a
Newton ascent on all ``log alpha`` of the model (and ``log beta``) at once
(:func:`evidence_newton_terms`, :func:`_polish`) finishes that climb in a
few steps; it too accepts only steps that raise ``L`` (the penalised
objective below, with hyperpriors).

With Gamma hyperpriors (``priors``; Tipping 2001, Appendix A) the same
algorithm maximises the log posterior density of ``(log alpha, log beta)``,
eq. (36): ``L + sum_(m in model) (a log alpha_m - b alpha_m) + c log beta -
d beta`` (the Jacobian of the log transform turns ``(a - 1) log alpha`` into
``a log alpha``). One ``alpha``'s maximiser is then the root of a cubic
(:func:`alpha_maximiser`), the gains are computed by
:func:`choose_action_prior` (one candidate's gain is the driver's
:func:`~rvm_ppl.closed_form.driver.prior_gain`, which the compiled engine
runs too), and a basis function is left out exactly when no finite
``alpha`` makes its term of the objective positive.
"""

from __future__ import annotations

import logging
import time
import warnings
from dataclasses import dataclass, field

import numpy as np
from sklearn.exceptions import ConvergenceWarning

from rvm_ppl.closed_form.constants import (  # noqa: F401  (re-exported)
    ADD,
    ADD_ORDER,
    ALIGNMENT_MAX,
    BETA_MAX_FACTOR,
    BETA_UPDATE_FREQUENCY,
    BETA_UPDATE_START,
    DELETE,
    DRIFT_SAMPLE,
    DRIFT_TOL,
    ENGINE_MAX_ENTRIES,
    ENGINE_MIN_ENTRIES,
    FIRST_EXACT,
    GAUSSIAN_SNR_INIT,
    INIT_ALPHA_MAX,
    MIN_DELTA_LOG_ALPHA,
    MIN_DELTA_LOG_BETA,
    MIN_NOISE_VAR_RATIO,
    MULTISTART_MAX_N,
    NOISE_WARMUP_MAX,
    POLISH_AFTER,
    POLISH_GAIN,
    POLISH_MAX_STEP,
    POLISH_STEPS,
    PREFETCH,
    PREFETCH_CHEAP,
    REESTIMATE,
    SCALAR_MAX,
    TRIVIAL_NOISE_SHARE,
    ZERO_FACTOR,
    check_noise_var_ratio,
    initial_noise_precision,
    noise_precision_cap,
)
from rvm_ppl.closed_form.driver import (  # noqa: F401  (re-exported)
    BOUND_SLACK,
    SCALAR_NUMPY,
    Decision,
    as_mask,
    ascend,
    beaten,
    compiled as compiled_decisions,
    decide,
    delete_gain,
    gain_bound,
    gain_floor,
    gamma_log_prior,
    gamma_log_prior_terms,
    left_out,
    noise_due,
    penalised_alpha,
    prior_gain,
    prior_peak,
    scalar_gains,
    top_candidates,
)
from rvm_ppl.core.gaussian import log_evidence as gaussian_log_evidence
from rvm_ppl.core.linalg import (
    cho_covariance,
    cho_logdet,
    cho_solve,
    cholesky_jittered,
    cholesky_or_none,
    solve_lower,
    solve_lower_t_right,
)
from rvm_ppl.core.progress import FitProgress
from rvm_ppl.kernels.basis import DenseBasis, KernelBasis

logger = logging.getLogger(__name__)


@dataclass
class EvidenceResult:
    """Outcome of the evidence maximisation, on the original basis scale.

    For the Bernoulli likelihood (:func:`rvm_ppl.closed_form.bernoulli.fit_evidence_bernoulli`)
    ``mu`` and ``Sigma`` are the posterior mode and the Laplace covariance
    (Tipping 2001, eqs. 26-27), ``log_evidence`` is the Laplace
    approximation, and ``beta`` is ``None``.

    Attributes
    ----------
    active : ndarray of int
        Sorted indices of the basis functions in the final model.
    mu : ndarray of shape (n_active,)
        Posterior mean of their weights (Tipping 2001, eq. 13).
    Sigma : ndarray of shape (n_active, n_active)
        Posterior covariance of their weights (Tipping 2001, eq. 12).
    alpha : ndarray of shape (n_basis,)
        Weight precisions; ``inf`` for pruned basis functions.
    beta : float or None
        Noise precision (``None`` for classification).
    log_evidence : float
        ``log N(t | 0, C)`` at the final ``alpha, beta``, recomputed from scratch.
    log_evidence_trace : ndarray
        Log evidence after every iteration that changed the model or the noise.
    s, q : ndarray of shape (n_basis,)
        Faul & Tipping's sparsity and quality factors of every basis
        function with itself left out of the model.
    n_iter : int
    converged : bool
    aligned : ndarray of int
        Candidates blocked at the end because they (nearly) duplicate a
        basis in the model.
    counts : dict
        How many additions, re-estimations, deletions and noise updates
        ran; ``"aligned"``: how many times a candidate was blocked;
        ``"refresh"``: full recomputations outside the noise updates
        (Gaussian); ``"refused"``: additions undone because the exact
        objective after them was lower (Gaussian; see
        :func:`fit_evidence_regression`); ``"modes"``: posterior-mode
        searches (Bernoulli).
    priors : dict or None
        Gamma hyperprior parameters ``a, b, c, d`` when they were used.
    objective : float or None
        The penalised objective ``log_evidence + prior_penalty`` (Tipping
        2001, eq. 36) that the fit maximised; equals ``log_evidence``
        without hyperpriors.
    objective_trace : ndarray or None
        The objective after every iteration; it never decreases.
    """

    active: np.ndarray
    mu: np.ndarray
    Sigma: np.ndarray
    alpha: np.ndarray
    beta: float | None
    log_evidence: float
    log_evidence_trace: np.ndarray
    s: np.ndarray
    q: np.ndarray
    n_iter: int
    converged: bool
    aligned: np.ndarray
    counts: dict = field(default_factory=dict)
    priors: dict | None = None
    objective: float | None = None
    objective_trace: np.ndarray | None = None

    @property
    def relevance_factor(self):
        """``q^2 - s`` per basis function: positive means it belongs in the model."""
        return self.q**2 - self.s

    @property
    def pruned_gradient_ok(self):
        """Tipping (2001) App. B.1 check for every pruned basis function.

        As ``alpha_i -> inf`` the gradient of the log evidence is
        ``(s_i - q_i^2) / (2 alpha_i^2)``; it is non-negative (so re-admitting
        the basis would not help) exactly when ``q_i^2 <= s_i``. Returns one
        boolean per pruned basis function, in index order; candidates blocked
        by the alignment test are reported as ``True``.
        """
        pruned = np.isinf(self.alpha)
        ok = self.relevance_factor[pruned] <= ZERO_FACTOR * np.maximum(1.0, self.s[pruned])
        ok |= np.isin(np.flatnonzero(pruned), self.aligned)
        return ok


def log_evidence_dense(Phi, t, alpha, beta):
    """Closed-form ``log N(t | 0, beta^{-1} I + Phi A^{-1} Phi^T)`` (Tipping 2001, eq. 15).

    A reference implementation with the ``N x N`` covariance; ``alpha = inf``
    drops the column.
    """
    alpha = np.asarray(alpha, dtype=float)
    keep = np.isfinite(alpha)
    P = Phi[:, keep]
    C = np.eye(len(t)) / beta + (P / alpha[keep]) @ P.T
    L = cholesky_jittered(C, what="marginal covariance")
    z = solve_lower(L, t)
    return -0.5 * (len(t) * np.log(2 * np.pi) + cho_logdet(L) + z @ z)


def out_factors(S, Q, active, alpha):
    """Faul & Tipping's ``s, q``: the factors with each basis left out of the model.

    Tipping & Faul (2003) eqs. (23)-(24): for a basis in the model,
    ``s = alpha S / (alpha - S)`` and ``q = alpha Q / (alpha - S)``; for one
    outside it, ``s = S`` and ``q = Q``.
    """
    s, q = S.copy(), Q.copy()
    if len(active):
        a = np.asarray(active)
        denom = alpha - S[a]
        s[a] = alpha * S[a] / denom
        q[a] = alpha * Q[a] / denom
    return s, q


def choose_action(S, Q, active, alpha, *, blocked=(), tol=MIN_DELTA_LOG_ALPHA):
    """Choose the action that increases the log evidence most.

    The decision of Tipping & Faul (2003), §4, with SparseBayes's
    preferences, as the sequential driver takes it
    (:func:`rvm_ppl.closed_form.driver.scalar_gains` and
    :func:`~rvm_ppl.closed_form.driver.prefer`): every candidate's change
    in log evidence is computed for its only possible action (add,
    re-estimate or delete), a pending deletion takes priority over
    everything else, and the loop should stop when nothing increases the
    evidence or the best action is a re-estimation changing ``log alpha``
    by less than ``tol``.

    Parameters
    ----------
    S, Q : ndarray of shape (M,)
        Sparsity and quality factors with the current model (``C``).
    active : sequence of int
        Basis indices in the model, in the order of ``alpha``.
    alpha : ndarray of shape (len(active),)
    blocked : collection of int or boolean mask of shape (M,)
        Candidates that may not be added (alignment test).
    tol : float

    Returns
    -------
    Decision
    """
    S, Q = np.asarray(S, dtype=float), np.asarray(Q, dtype=float)
    act = np.asarray(active, dtype=int)
    alpha = np.asarray(alpha, dtype=float)
    return decide(act, alpha, scalar_gains(S, Q, act, alpha, as_mask(blocked, S.size)), tol)


# -- general Gamma hyperpriors (Tipping 2001, Appendix A) -------------------

def resolve_evidence_priors(priors):
    """Check Gamma hyperprior parameters for the evidence method.

    Parameters
    ----------
    priors : dict or None
        Any of ``"a", "b"`` (shape and rate of the Gamma prior on every
        ``alpha_m``) and ``"c", "d"`` (on ``beta``); missing keys are 0.

    Returns
    -------
    dict or None
        ``None`` when every parameter is zero (plain type-II maximum
        likelihood), else the completed dict.

    Raises
    ------
    ValueError
        On unknown keys, negative or non-finite values, or ``a > 0`` with
        ``b = 0``: then ``a log alpha`` grows without bound and so does the
        objective.
    """
    if priors is None:
        return None
    if not isinstance(priors, dict):
        raise TypeError(f"priors must be a dict with keys a, b, c, d; got {type(priors).__name__}.")
    unknown = set(priors) - {"a", "b", "c", "d"}
    if unknown:
        raise ValueError(
            f"Unknown prior parameter(s) {sorted(unknown)}; "
            "expected a subset of ['a', 'b', 'c', 'd']."
        )
    p = {k: float(priors.get(k, 0.0)) for k in "abcd"}
    for k, v in p.items():
        if not np.isfinite(v) or v < 0:
            raise ValueError(f"Prior parameter {k} must be finite and non-negative; got {v!r}.")
    if p["a"] > 0 and p["b"] == 0:
        raise ValueError(
            "priors: a > 0 needs b > 0; with b = 0 the term a log(alpha) makes the "
            "objective unbounded as alpha grows."
        )
    if not any(p.values()):
        return None
    return p


def alpha_objective(alpha, s, q, a=0.0, b=0.0):
    """One basis function's share of the penalised objective, as a function of its ``alpha``.

    ``l(alpha) = 1/2 [log alpha - log(alpha + s) + q^2 / (alpha + s)] + a log alpha - b alpha``

    The bracket is Faul & Tipping's (2002) decomposition of the log evidence
    (the evidence with the basis function left out is the zero); the rest is
    its Gamma(a, b) hyperprior in ``log alpha`` (Tipping 2001, eq. 36).
    ``alpha = inf`` gives 0 when ``a = b = 0``.
    """
    alpha, s, q = np.broadcast_arrays(*(np.asarray(v, dtype=float) for v in (alpha, s, q)))
    with np.errstate(divide="ignore", invalid="ignore"):
        e = 0.5 * (q**2 / (alpha + s) - np.log1p(s / alpha))
        pen = gamma_log_prior(alpha, a, b) if (a or b) else 0.0
    out = np.where(np.isinf(alpha), 0.0, e + pen)
    return out if out.ndim else float(out)


def alpha_maximiser(s, q, a=0.0, b=0.0):
    """Maximise :func:`alpha_objective` over ``alpha in (0, inf]``, element-wise.

    Without hyperpriors (``a = b = 0``) the maximiser is Faul & Tipping's
    ``s^2 / (q^2 - s)`` when ``q^2 > s`` and ``inf`` otherwise. With
    ``b > 0`` write ``x = alpha / s``, ``r = q^2 / s`` and ``beta' = b s``;
    ``d l / d alpha = 0`` multiplied by ``2 alpha (alpha + s)^2 / s^2`` is the cubic

        ``P(x) = -2 beta' x^3 + (2a - 4 beta') x^2 + (1 - r + 4a - 2 beta') x + (1 + 2a)``

    and ``d l / d alpha`` has the sign of ``P``. ``P(0) = 1 + 2a > 0`` and
    ``P -> -inf``, so ``l`` rises from ``-inf`` at ``alpha -> 0`` and falls
    to ``-inf`` as ``alpha -> inf``: its maximum is a root where ``P``
    changes sign from ``+`` to ``-``. ``P'`` has at most two roots
    ``x1 < x2``, and ``P`` falls on ``(0, x1)``, rises on ``(x1, x2)`` and
    falls after ``x2``; so there are at most two such roots, one in
    ``(0, x1)`` (when ``x1 > 0`` and ``P(x1) < 0``) and one beyond
    ``max(x2, 0)`` (when ``P`` is positive there). Each is bracketed and
    found by Newton's method in ``log x``, kept in its bracket; where both exist the larger ``l`` wins.

    Parameters
    ----------
    s, q : array-like
        Sparsity and quality factors with the basis function left out.
    a, b : float or array-like
        Gamma hyperprior shape and rate on ``alpha``.

    Returns
    -------
    alpha : ndarray
        The maximiser (``inf`` possible only when ``a = b = 0``).
    value : ndarray
        ``l(alpha)``; the gain of adding the basis function to the model.
    """
    s, q = np.broadcast_arrays(np.asarray(s, dtype=float), np.asarray(q, dtype=float))
    a_ = np.broadcast_to(np.asarray(a, dtype=float), s.shape)
    b_ = np.broadcast_to(np.asarray(b, dtype=float), s.shape)
    q2 = q**2
    alpha = np.full(s.shape, np.inf)
    value = np.zeros(s.shape)
    plain = b_ == 0
    if np.any(plain & (a_ > 0)):
        raise ValueError("alpha_maximiser: a > 0 needs b > 0.")
    # Faul & Tipping (2002): alpha = s^2 / (q^2 - s) for relevant basis functions.
    rel = plain & (q2 > s)
    if np.any(rel):
        alpha[rel] = s[rel] ** 2 / (q2[rel] - s[rel])
        quot = q2[rel] / s[rel]
        value[rel] = 0.5 * (quot - 1 - np.log(quot))
    gen = ~plain
    if np.any(gen):
        with np.errstate(divide="ignore", invalid="ignore"):
            alpha[gen], value[gen] = penalised_alpha(s[gen], q2[gen], a_[gen], b_[gen])
    return alpha, value


def prior_penalty(alpha, beta, priors):
    """``sum_m (a log alpha_m - b alpha_m) + c log beta - d beta`` (Tipping 2001, eq. 36).

    The sum runs over the finite ``alpha`` (the basis functions in the model).
    """
    if priors is None:
        return 0.0
    alpha = np.asarray(alpha, dtype=float)
    alpha = alpha[np.isfinite(alpha)]
    a, b, c, d = (priors[k] for k in "abcd")
    out = float(np.sum(gamma_log_prior(alpha, a, b))) if (a or b) else 0.0
    if beta is not None and (c or d):
        out += gamma_log_prior(beta, c, d)
    return out


def choose_action_prior(S, Q, active, alpha, *, scale, priors, blocked=(), tol=MIN_DELTA_LOG_ALPHA):
    """:func:`choose_action` for the penalised objective with Gamma(a, b) priors on ``alpha``.

    The objective is the log evidence plus ``a log alpha_m - b alpha_m`` for
    every basis function in the model (Tipping 2001, eq. 36; a basis
    function outside the model contributes zero). Its change when basis
    function ``m`` moves from ``alpha_old`` to ``alpha_new`` is
    ``l_m(alpha_new) - l_m(alpha_old)`` with ``l_m`` :func:`alpha_objective`
    at the left-out factors ``s_m, q_m`` and ``l_m(inf) = 0``. So, with
    ``alpha*`` and ``l*`` from :func:`alpha_maximiser`:

    - a candidate outside the model is *added* at ``alpha*`` if ``l* > 0``
      (gain ``l*``);
    - a basis function in the model is *re-estimated* to ``alpha*`` if
      ``l* > 0`` (gain ``l* - l(alpha)``), else *deleted* (gain
      ``-l(alpha) >= -l* >= 0``).

    That is the pruning rule: with ``b > 0`` no ``alpha`` is infinite, and a
    basis function is left out exactly when its best finite ``alpha`` adds
    nothing to the penalised objective. Deletions take priority and the
    stopping rule is that of :func:`choose_action`.

    Parameters
    ----------
    S, Q, active, alpha, blocked, tol
        As in :func:`choose_action`, on unit-norm columns.
    scale : ndarray of shape (M,)
        Column norms; the priors refer to the original columns, whose
        ``alpha`` is ``alpha_unit * scale^2``.
    priors : dict
        From :func:`resolve_evidence_priors`.

    Returns
    -------
    Decision
    """
    act = np.asarray(active, dtype=int)
    alpha = np.asarray(alpha, dtype=float)
    gains = prior_gains(S, Q, act, alpha, scale, priors, as_mask(blocked, len(S)))
    return decide(act, alpha, gains, tol)


# The driver's decision functions on scalars, from its own source (driver.compiled
# with no compiler): one basis's exact gain costs a few dozen operations on NumPy
# scalars, where the array version costs as many calls on arrays.
_SCALAR_PRIOR_GAIN = compiled_decisions(lambda f: f, numpy=SCALAR_NUMPY)["prior_gain"]


def _exact_gains(S, Q, alpha, scale, a, b):
    """:func:`rvm_ppl.closed_form.driver.prior_gain` of the steps a decision solves.

    Up to ``SCALAR_MAX`` of them one at a time on NumPy scalars, more on
    arrays: the same operations, in the same order, on each element, so the
    same numbers either way (tested). One element costs a fraction of one
    array call of the root search; most decisions solve one or two.
    """
    n = S.size
    if n > SCALAR_MAX:
        return prior_gain(S, Q, alpha, scale, a, b)
    gain, new, keep = np.empty(n), np.empty(n), np.empty(n, dtype=bool)
    for i in range(n):
        gain[i], new[i], keep[i] = _SCALAR_PRIOR_GAIN(S[i], Q[i], alpha[i], scale[i], a, b)
    return gain, new, keep


def prior_gains(S, Q, act, alpha, scale, priors, blocked, refused=None):
    """:func:`rvm_ppl.closed_form.driver.scalar_gains` for the penalised objective (:func:`choose_action_prior`).

    The decision needs the exact gain (a cubic's root,
    :func:`~rvm_ppl.closed_form.driver.prior_gain`) only of the steps that
    could be the best one. Every basis's largest share of the objective lies
    between a lower bound (for a basis in the model, its share now and
    :func:`~rvm_ppl.closed_form.driver.gain_floor`; for the ``FIRST_EXACT``
    candidates of largest upper bound, their floor) and
    :func:`~rvm_ppl.closed_form.driver.gain_bound`, all closed forms; a step
    whose upper bound the best lower bound has
    :func:`~rvm_ppl.closed_form.driver.beaten` cannot win and is not solved.
    A basis in the model is deleted when its best share is not positive:
    certain where the upper bound is not positive, and solved where neither
    bound decides. A pending deletion wins (:func:`rvm_ppl.closed_form.driver.prefer`),
    so the additions are then left out.

    The exact gains are the driver's, element by element, so the decision
    is the one every candidate's exact gain would give (tested). Steps not
    solved get gain ``-inf`` and keep their ``alpha``; the add order (the
    tuple's seventh entry) is the candidates' by their bound. The new
    ``alpha`` are on the unit-norm columns of ``S, Q`` and ``alpha``.
    ``refused``: bases of the model (boolean mask over ``act``) whose step
    may not be taken; they get gain ``-inf`` and are neither re-estimated
    nor deleted.
    """
    a, b = priors["a"], priors["b"]
    k = act.size
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        s, q = S * (scale * scale), Q * scale
        # Without a prior term to gain, only q^2 > s can have a positive bound.
        cand = ~blocked & ((q * q > s) if prior_peak(a, b) <= 0 else (s > 0))
        cand[act] = False
        out = np.flatnonzero(cand)
        # The model's bases, then the candidates: the upper bounds in one pass.
        sc = scale[act]
        sa, qa = left_out(S[act], Q[act], alpha)
        s = np.concatenate([sa * (sc * sc), s[out]])
        q = np.concatenate([qa * sc, q[out]])
        upper = gain_bound(s, q, a, b)
        up = upper[k:] > 0
        out, bound = out[up], upper[k:][up]
        ranked = top_candidates(np.arange(out.size), bound, ADD_ORDER)  # FIRST_EXACT <= ADD_ORDER
        order = out[ranked]
        # Lower bounds: of the model's bases and of the best candidates by their bound.
        look = np.concatenate([np.arange(k), k + np.flatnonzero(up)[ranked[:FIRST_EXACT]]])
        floor = gain_floor(s[look], q[look], a, b)
        sa, qa, upper, now = s[:k], q[:k], upper[:k], alpha * (sc * sc)
        current = gamma_log_prior(now, a, b) - delete_gain(sa, qa, now)
        lower = np.maximum(current, floor[:k])
        slack = BOUND_SLACK * (1.0 + np.abs(upper) + np.abs(current))
        gone = ~(upper > 0)  # deleted: no alpha makes the basis worth having
        free = ~gone  # kept, or to be solved
        if refused is not None:
            gone &= ~refused
            free &= ~refused
        gain_a, new_a = np.full(k, -np.inf), alpha.copy()
        gain_a[gone], new_a[gone] = -current[gone], np.inf
        delete = gone
        solve = free & ~(lower > slack)  # kept or deleted: the exact share decides
        if solve.any():
            g, n, kp = _exact_gains(S[act[solve]], Q[act[solve]], alpha[solve], sc[solve], a, b)
            gain_a[solve], new_a[solve], delete[solve] = g, n, ~kp
        if delete.any():
            return (*_NO_ADDITION, gain_a, new_a, delete, order)
        # No deletion: the best step is the re-estimation or addition of largest gain.
        free &= ~solve
        best = max(np.max(np.where(free, lower - current, gain_a), initial=-np.inf),
                   np.max(floor[k:], initial=-np.inf))
        rest = free & ~beaten(upper - current + slack, best)
        if rest.any():
            g, n, _ = _exact_gains(S[act[rest]], Q[act[rest]], alpha[rest], sc[rest], a, b)
            gain_a[rest], new_a[rest] = g, n
        add = ~beaten(bound, best)
        n_add = np.count_nonzero(add)
        if not n_add:
            return (*_NO_ADDITION, gain_a, new_a, delete, order)
        if n_add > SCALAR_MAX:
            # The floors leave many candidates (a strong hyperprior, an empty model): the
            # exact gains of the best few by their bound raise the bar first, as the engine's.
            first = np.sort(ranked[:FIRST_EXACT])
            g, n, kp = _exact_gains(S[out[first]], Q[out[first]], np.full(first.size, np.inf),
                                    scale[out[first]], a, b)
            add = ~beaten(bound, max(best, np.max(g[kp], initial=-np.inf)))
            add[first] = False
            idx = out[add]
            g2, n2, kp2 = _exact_gains(S[idx], Q[idx], np.full(idx.size, np.inf), scale[idx], a, b)
            idx = np.concatenate([out[first], idx])
            gain, new, keep = (np.concatenate(z) for z in ((g, g2), (n, n2), (kp, kp2)))
            by = np.argsort(idx, kind="stable")  # ascending: ties go to the lower index
            idx, gain, new, keep = idx[by], gain[by], new[by], keep[by]
        else:
            idx = out[add]  # ascending: ties go to the lower index
            gain, new, keep = _exact_gains(S[idx], Q[idx], np.full(idx.size, np.inf), scale[idx],
                                           a, b)
    return idx[keep], gain[keep], new[keep], gain_a, new_a, delete, order


_NO_ADDITION = np.empty(0, dtype=int), np.empty(0), np.empty(0)  # shared by every decision
for _empty in _NO_ADDITION:
    _empty.flags.writeable = False


class _Columns:
    """A growable column-major buffer: appending or deleting a column moves ``O(rows)`` data.

    ``view`` is the ``rows x k`` matrix of the columns held; ``np.hstack``
    and fancy indexing would copy all of it on every change.
    """

    def __init__(self, rows):
        self.buf = np.empty((rows, 8), order="F")
        self.k = 0

    @property
    def view(self):
        return self.buf[:, : self.k]

    def set(self, A):
        A = np.asarray(A, dtype=float)
        self.buf = np.empty((A.shape[0], max(8, 2 * A.shape[1])), order="F")
        self.buf[:, : A.shape[1]] = A
        self.k = A.shape[1]

    def append(self, col):
        if self.k == self.buf.shape[1]:
            grown = np.empty((self.buf.shape[0], 2 * self.k), order="F")
            grown[:, : self.k] = self.buf[:, : self.k]
            self.buf = grown
        self.buf[:, self.k] = col
        self.k += 1

    def delete(self, pos):
        self.buf[:, pos : self.k - 1] = self.buf[:, pos + 1 : self.k]
        self.k -= 1


class _Model:
    """The state of the fast sequential algorithm on unit-norm columns.

    Holds the active set, its ``alpha``, ``Sigma``, ``mu``, and the statistics
    ``S, Q`` of every candidate. ``G`` caches ``Phi^T phi_j`` for basis
    functions that have been in the model (or were prefetched).
    """

    def __init__(self, basis, t, scale, proj, beta):
        self.basis = basis
        self.t = t
        self.N = len(t)
        self.scale = scale  # column norms
        self.proj = proj / scale  # Phi~^T t
        self.beta = beta
        self.active = []  # basis indices, in the order added
        self.act_idx = np.empty(0, dtype=int)  # the same as an array
        self.in_model = np.zeros(basis.n_basis, dtype=bool)
        self.alpha = np.empty(0)
        self._cols = _Columns(self.N)  # Phi~[:, active]
        self.G = {}  # j -> Phi~^T phi~_j, shape (M,)
        self._GA = _Columns(basis.n_basis)  # Phi~^T Phi~[:, active]
        self.priors = None  # Gamma hyperpriors (resolve_evidence_priors), original column units
        self.alpha_prior = False
        self._sc2 = None, None  # (act_idx, its columns' squared norms), for penalty()

    # -- the statistics interface of rvm_ppl.closed_form.driver.ascend -------
    tracks_gain = True  # rank-one updates: the log evidence moves by the predicted gain
    n_exact = 0  # no stall guard: the objective never decreases

    @property
    def M(self):
        return self.basis.n_basis

    def gains(self, blocked):
        """Every candidate's change in the objective (:func:`rvm_ppl.closed_form.driver.scalar_gains`)."""
        if self.alpha_prior:
            return prior_gains(self.S, self.Q, self.act_idx, self.alpha, self.scale, self.priors, blocked)
        return scalar_gains(self.S, self.Q, self.act_idx, self.alpha, blocked)

    def cosine(self, j):
        """Cosines of every candidate with basis ``j`` (unit-norm columns)."""
        return self.G[j]

    def cosines(self, idx):
        """Cosines of candidates ``idx`` with every basis in the model, ``(len(idx), k)``."""
        return self.GA[idx]

    def objective(self):
        """The exact objective (log evidence plus hyperprior terms) at the current model."""
        return self.full_statistics(factors=False)["logml"] + self.penalty()

    def reload(self):
        self.load(self.full_statistics())

    def refresh_before(self, d):
        return False

    def snapshot(self):
        return None

    def schedule(self, *, fixed_beta, noise_warmup, beta_max, c_d, refresh):
        """Set the noise schedule and the checks of the rank-one updates; start the traces."""
        self.fixed_beta, self.beta_max, self.c_d, self.refresh_every = fixed_beta, beta_max, c_d, refresh
        self.noise_from = -1 if noise_warmup else 0  # -1: the noise warm-up
        self.streak = 0  # re-estimations in a row
        self.rng = np.random.default_rng(0)  # drift-check sample
        self.counts = {"noise": 0, "refresh": 0, "polish": 0}
        self.trace = [self.logml]
        self.objective_trace = [self.logml + self.penalty()]

    def after_step(self, it, d):
        """The noise schedule, the checks of the rank-one updates and the polish after step ``d``.

        Returns whether the noise moved (which continues an ascent ``d`` would stop).
        """
        terminate = d.terminate
        update_noise = False
        if not self.fixed_beta:
            update_noise, self.noise_from = noise_due(it, self.noise_from, terminate, NOISE_WARMUP_MAX)
        noise_moved = False
        if update_noise:
            noise_moved = _update_noise(self, self.beta_max, *self.c_d)
            self.counts["noise"] += noise_moved
        elif not terminate and self.active and self.refresh_every != "drift":
            if it % self.refresh_every == 0:
                self.load(self.full_statistics())
                self.counts["refresh"] += 1
        elif not terminate and self.active:
            # Keep the rank-one updates honest: compare them with exact values
            # on the model, the best candidates to add and a random sample,
            # and recompute everything when they have drifted.
            idx = np.concatenate([
                self.act_idx, d.add_order[:DRIFT_SAMPLE], self.rng.integers(0, self.M, DRIFT_SAMPLE)
            ])
            if self.drift(idx) > DRIFT_TOL:
                self.load(self.full_statistics())
                self.counts["refresh"] += 1
        if not terminate:
            self.streak = self.streak + 1 if d.action == REESTIMATE else 0
        if self.streak >= POLISH_AFTER:
            self.streak = 0
            self.counts["polish"] += _polish(self, self.beta_max,
                                             not self.fixed_beta and self.noise_from >= 0)
        if not terminate or noise_moved:
            self.trace.append(self.logml)
            self.objective_trace.append(self.logml + self.penalty())
        return noise_moved

    @property
    def cols(self):
        return self._cols.view

    @cols.setter
    def cols(self, A):
        self._cols.set(A)

    @property
    def GA(self):
        return self._GA.view

    @GA.setter
    def GA(self, A):
        self._GA.set(A)

    # -- cached cross products -------------------------------------------
    def ensure_cross(self, j, candidates=()):
        """Make ``G[j]`` available, prefetching for likely next candidates."""
        if j in self.G:
            return
        n = PREFETCH if type(self.basis) is KernelBasis else PREFETCH_CHEAP
        want = [j] + [c for c in candidates if c not in self.G and c != j][: n - 1]
        C = np.ascontiguousarray(_gram(self.basis, want).T)
        C /= self.scale
        C /= self.scale[want][:, None]
        for k, c in enumerate(want):
            self.G[c] = C[k]

    # -- drift of the rank-one updates -------------------------------------
    def drift(self, idx):
        """Largest relative error of the updated ``S, Q`` at candidates ``idx``.

        The exact values come from the Cholesky factor of the ``k x k``
        posterior precision, ``O(k^3 + k^2 |idx|)`` instead of the
        ``O(M k^2)`` of :meth:`full_statistics`: ``S_m = beta - beta^2
        ||L^{-1} Phi_A^T phi_m||^2`` and ``Q_m = beta phi_m^T (t - Phi_A
        mu)`` (Tipping & Faul 2003, eqs. 22-23 through Woodbury). The error
        in ``S`` is taken relative to ``S``, the error in ``Q`` relative
        to ``max(|Q|, sqrt(S))``: the decisions depend on ``Q^2 / S``.
        """
        if not self.active:
            return 0.0
        beta = self.beta
        L = cholesky_jittered(self.precision(beta), what="posterior precision of the weights")
        mu = beta * cho_solve(L, self.proj[self.act_idx])
        Gi = self.GA[idx]
        B = solve_lower_t_right(L, Gi)  # rows L^{-1} Phi_A^T phi_m
        S = beta - beta**2 * np.einsum("ij,ij->i", B, B)
        Q = beta * (self.proj[idx] - Gi @ mu)
        aS = np.maximum(np.abs(S), np.finfo(float).tiny)
        dS = np.abs(self.S[idx] - S) / aS
        dQ = np.abs(self.Q[idx] - Q) / np.maximum(np.abs(Q), np.sqrt(aS))
        return float(max(dS.max(), dQ.max()))

    def precision(self, beta):
        """``beta Phi_A^T Phi_A + A`` on unit-norm columns (Tipping 2001, eq. 12)."""
        H = beta * self.GA[self.act_idx]
        H.flat[:: H.shape[0] + 1] += self.alpha
        return H

    # -- full statistics ---------------------------------------------------
    def full_statistics(self, beta=None, *, factors=True):
        """Recompute Sigma, mu, S, Q and the log evidence from scratch.

        With ``factors=False`` only the ``O(k^3 + N k)`` part (``Sigma, mu``,
        the residual and the log evidence) is computed and ``S, Q`` are
        ``None``; the ``O(M k^2)`` factors of every candidate are skipped.
        """
        beta = self.beta if beta is None else beta
        M = len(self.active)
        if M:
            L = cholesky_jittered(self.precision(beta), what="posterior precision of the weights")  # Tipping (2001) eq. (12)
            Sigma = cho_covariance(L)
            mu = beta * Sigma @ self.proj[self.act_idx]  # eq. (13)
            resid = self.t - self.cols @ mu
            if factors:
                B = solve_lower_t_right(L, self.GA)  # rows L^{-1} Phi_A^T phi_m
                S = beta - beta**2 * np.einsum("ij,ij->i", B, B)
                Q = beta * (self.proj - self.GA @ mu)
            else:
                S = Q = None
            logdet_H = cho_logdet(L)
        else:
            Sigma, mu, resid = np.zeros((0, 0)), np.zeros(0), self.t
            S = np.full(self.basis.n_basis, beta)
            Q = beta * self.proj
            logdet_H = 0.0
        ED = float(resid @ resid)
        # Tipping (2001) eq. (15) written through the M x M Cholesky factor.
        logml = gaussian_log_evidence(self.N, beta, self.alpha, mu, ED, logdet_H)
        return dict(beta=beta, Sigma=Sigma, mu=mu, S=S, Q=Q, ED=ED, logml=logml)

    def result(self, trace, n_iter, converged, *, aligned=(), counts=None, priors=None,
               objective_trace=None):
        """The current state as an :class:`EvidenceResult` on the original column scale."""
        return _state_result(
            self.scale, self.active, self.alpha, self.mu, self.Sigma, self.S, self.Q, self.beta,
            self.logml, trace, n_iter, converged, aligned=aligned, counts=counts, priors=priors,
            objective_trace=objective_trace,
        )

    def load_core(self):
        """Exact ``Sigma, mu``, residual and log evidence at the current ``alpha, beta``.

        ``S, Q`` keep their (drift-checked) rank-one updates except on the
        model, where they follow from ``Sigma, mu``; returns the statistics.
        """
        core = self.full_statistics(factors=False)
        self.Sigma, self.mu, self.ED = core["Sigma"], core["mu"], core["ED"]
        self.logml = core["logml"]
        self.pin_active()
        return core

    def load(self, stats):
        self.beta = stats["beta"]
        self.Sigma, self.mu = stats["Sigma"], stats["mu"]
        self.S, self.Q = stats["S"], stats["Q"]
        self.ED, self.logml = stats["ED"], stats["logml"]
        self.pin_active()

    def pin_active(self):
        """Recompute ``S, Q`` of the basis functions in the model from ``Sigma, mu``.

        For ``m`` in the model, ``S_m = alpha_m - alpha_m^2 Sigma_mm`` and
        ``Q_m = alpha_m mu_m`` (from ``beta Phi^T Phi = Sigma^{-1} - A``), so
        ``alpha_m - S_m = alpha_m^2 Sigma_mm > 0`` and the "out" factors
        ``s_m = 1/Sigma_mm - alpha_m``, ``q_m = mu_m / Sigma_mm`` keep their
        signs. The general formula loses them to cancellation when
        ``alpha_m`` is small next to ``beta ||phi_m||^2``.
        """
        if self.active:
            a = self.act_idx
            d = self.Sigma.diagonal()
            self.S[a] = self.alpha - self.alpha**2 * d
            self.Q[a] = self.alpha * self.mu

    def penalty(self):
        """Hyperprior terms of the objective at the current state (original column units).

        :func:`prior_penalty`'s sums, term for term; the ``alpha`` of the model are finite.
        """
        p = self.priors
        if p is None:
            return 0.0
        out = 0.0
        if self.alpha_prior:
            if self._sc2[0] is not self.act_idx:  # the squared norms of the model's columns
                self._sc2 = self.act_idx, self.scale[self.act_idx] ** 2
            out = float(gamma_log_prior(self.alpha * self._sc2[1], p["a"], p["b"]).sum())
        if p["c"] or p["d"]:
            out += gamma_log_prior(self.beta, p["c"], p["d"])
        return out

    def warm_start(self, active, alpha):
        """Load basis functions ``active`` with precisions ``alpha`` (original column units)."""
        active = [int(j) for j in active]
        for j in active:
            self.ensure_cross(j)
        self.active = active
        self.act_idx = np.asarray(active, dtype=int)
        self.in_model[:] = False
        self.in_model[self.act_idx] = True
        self.alpha = np.asarray(alpha, dtype=float) / self.scale[active] ** 2
        if active:
            self.cols = self.basis.columns(active) / self.scale[active]
            self.GA = np.column_stack([self.G[j] for j in active])
        else:
            self.cols = np.empty((self.N, 0))
            self.GA = np.empty((self.basis.n_basis, 0))

    # -- "out" statistics and the change in log evidence ----------------
    def factors(self):
        return out_factors(self.S, self.Q, self.active, self.alpha)

    # -- rank-one updates (Tipping & Faul 2003, Appendix A) -----------------
    def reestimate(self, j, new_alpha):
        pos = self.active.index(j)
        Sj = self.Sigma[:, pos].copy()
        kappa = 1.0 / (Sj[pos] + 1.0 / (new_alpha - self.alpha[pos]))
        comm = self.beta * (self.GA @ Sj)
        mu_j = self.mu[pos]
        self.Sigma -= kappa * np.outer(Sj, Sj)
        self.mu -= kappa * mu_j * Sj
        self.S += kappa * comm**2
        self.Q += kappa * mu_j * comm
        self.alpha[pos] = new_alpha
        self.pin_active()

    def delete(self, j):
        pos = self.active.index(j)
        Sj = self.Sigma[:, pos].copy()
        Sjj = Sj[pos]
        comm = self.beta * (self.GA @ Sj)
        mu_j = self.mu[pos]
        self.S += comm**2 / Sjj
        self.Q += mu_j * comm / Sjj
        self.Sigma -= np.outer(Sj, Sj) / Sjj
        self.mu -= mu_j * Sj / Sjj
        keep = np.arange(len(self.active)) != pos
        self.Sigma = self.Sigma[np.ix_(keep, keep)]
        self.mu = self.mu[keep]
        self.alpha = self.alpha[keep]
        self._cols.delete(pos)
        self._GA.delete(pos)
        self.in_model[self.active[pos]] = False
        del self.active[pos]
        self.act_idx = np.asarray(self.active, dtype=int)
        self.pin_active()

    def add(self, i, new_alpha, order=()):
        """Add basis ``i`` at ``new_alpha``; returns its cosines with every candidate.

        ``order``: the next likely additions, whose cross products are prefetched.
        """
        self.ensure_cross(i, candidates=[int(c) for c in order])
        Gi = self.G[i]
        Sii = 1.0 / (new_alpha + self.S[i])
        mu_i = Sii * self.Q[i]
        if self.active:
            v = self.beta * (self.Sigma @ Gi[self.act_idx])
            e = self.beta * (Gi - self.GA @ v)
            off = -Sii * v
            self.Sigma = np.block([[self.Sigma + Sii * np.outer(v, v), off[:, None]], [off[None, :], Sii]])
            self.mu = np.append(self.mu - mu_i * v, mu_i)
        else:
            e = self.beta * Gi
            self.Sigma = np.array([[Sii]])
            self.mu = np.array([mu_i])
        self.S -= Sii * e**2
        self.Q -= mu_i * e
        self.alpha = np.append(self.alpha, new_alpha)
        self._cols.append(self.basis.columns([i])[:, 0] / self.scale[i])
        self._GA.append(Gi)
        self.active.append(i)
        self.act_idx = np.asarray(self.active, dtype=int)
        self.in_model[i] = True
        self.pin_active()
        return Gi



def _state_result(scale, active, alpha, mu, Sigma, S, Q, beta, logml, trace, n_iter, converged, *,
                  aligned=(), counts=None, priors=None, objective_trace=None):
    """An ascent's final state (unit-norm columns, model order) as an :class:`EvidenceResult`.

    Unit-norm columns ``phi / scale`` carry weights ``w * scale`` and
    precisions ``alpha / scale^2``; ``s`` scales like ``scale^2``, ``q``
    like ``scale``.
    """
    s, q = out_factors(S, Q, active, alpha)
    order = np.argsort(active)
    active = np.asarray(active, dtype=int)[order]
    sc = scale[active]
    alpha_all = np.full(scale.size, np.inf)
    alpha_all[active] = alpha[order] * sc**2
    return EvidenceResult(
        active=active,
        mu=mu[order] / sc,
        Sigma=Sigma[np.ix_(order, order)] / np.outer(sc, sc),
        alpha=alpha_all,
        beta=beta,
        log_evidence=logml,
        log_evidence_trace=np.asarray(trace),
        s=s * scale**2,
        q=q * scale,
        n_iter=n_iter,
        converged=converged,
        aligned=np.asarray(aligned, dtype=int),
        counts=dict(counts or {}),
        priors=None if priors is None else dict(priors),
        objective=logml + prior_penalty(alpha_all, beta, priors),
        objective_trace=np.asarray(trace if objective_trace is None else objective_trace),
    )


def _gram(basis, idx):
    """``Phi^T Phi[:, idx]`` on the basis's own column scale."""
    if hasattr(basis, "gram"):
        return basis.gram(idx)
    return basis.cross(basis.columns(idx))


class _Progress:
    """Throttled progress messages through ``logging`` (``progress`` of the fitters) and
    a live line for long fits (``progressbar``; :class:`rvm_ppl.core.progress.FitProgress`)."""

    def __init__(self, progress, progressbar=False, label="evidence"):
        if isinstance(progress, bool) or progress is None:
            self.every = 2.0 if progress else None
        else:
            self.every = float(progress)
            if not np.isfinite(self.every) or self.every < 0:
                raise ValueError(f"progress must be a bool or a non-negative number of seconds; got {progress!r}.")
        self.start = self.last = time.perf_counter()
        self.logged = False
        self.line = FitProgress(label, "log evidence", show=progressbar)

    def __call__(self, it, n_active, logml, *, final=False, converged=True):
        if final:
            self.line.finish(it, n_active, logml, converged)
        else:
            self.line.update(it, n_active, logml)
        if self.every is None:
            return
        now = time.perf_counter()
        if final and not self.logged:
            return
        if final or now - self.last >= self.every:
            self.last, self.logged = now, True
            logger.info(
                "%s %d: %d basis functions, log evidence %.6g, %.1f s",
                "done after iteration" if final else "iteration", it, n_active, logml,
                now - self.start,
            )


def warn_not_converged(max_iter):
    """Warn that the evidence maximisation hit its iteration cap."""
    warnings.warn(
        f"The evidence maximisation did not converge in {max_iter} iterations; "
        "increase max_iter or loosen tol.",
        ConvergenceWarning,
        stacklevel=3,
    )


def fit_evidence_regression(
    basis,
    t,
    *,
    beta=None,
    fixed_beta=False,
    start=None,
    max_iter=10_000,
    tol=MIN_DELTA_LOG_ALPHA,
    alignment_test=True,
    noise_warmup=True,
    priors=None,
    warm_start=None,
    warn=True,
    callback=None,
    refresh="drift",
    progress=False,
    progressbar=False,
    multistart="auto",
    compiled="auto",
    min_noise_var_ratio=MIN_NOISE_VAR_RATIO,
):
    """Maximise the log evidence of a Gaussian RVM by the fast sequential algorithm.

    The log evidence has many local maxima and the sequential algorithm
    climbs to one of them. With ``multistart`` a second ascent starts from
    the same basis function without the two heuristics of the first (the
    noise warm-up, or its absence, is swapped and the alignment test is
    off), the fit with the higher objective is kept, and if the alignment
    test blocked candidates in it, the ascent is continued from it with the
    test off, so that the evidence itself decides whether they enter.
    Every step of each ascent raises the objective, so the result is at
    least as good as the first ascent alone. On the five problems of part C
    of ``benchmarks/bench_evidence.py`` this reaches or exceeds the log
    evidence of Tipping's (2001) full re-estimation, which the first ascent
    alone missed by up to 13 nats (Boston housing, RBF ``gamma = 0.1``).

    The empty model (or the bias alone) is a local maximum whenever the
    noise explains the targets better than any single basis function, and
    an ascent started from a large noise (``beta`` small) can stop there
    although a few basis functions together fit the targets far better.
    So, at every ``N`` and after ``multistart`` if it runs, a fit (with the
    noise re-estimated and no ``warm_start``) that ends with a noise
    variance of at least ``TRIVIAL_NOISE_SHARE`` = 95 % of ``var(t)`` is
    climbed once more from a
    smaller noise chosen from what it left unexplained
    (:func:`escape_noise`), without the alignment test, and the fit of
    higher objective is kept (``counts["starts"]`` counts the ascent).
    Fits that end with a model explaining more than 5 % of the variance,
    which are nearly all, pay only the check.

    An addition is chosen for the gain its statistics predict (Tipping &
    Faul 2003, eq. 27), and then checked against the exact evidence with
    the basis in the model; where a candidate nearly lies in the span of
    the model (a wide kernel on a dense grid) the two can disagree, and an
    addition the exact evidence does not confirm is undone and the
    candidate left out until a basis is deleted (``counts["refused"]``).
    So no step lowers the evidence, and the ascent cannot cycle between
    adding and deleting such a candidate.

    Parameters
    ----------
    basis : ndarray of shape (N, M), DenseBasis or KernelBasis
        Candidate basis functions (columns).
    t : ndarray of shape (N,)
        Targets.
    beta : float, optional
        Initial (or, with ``fixed_beta``, fixed) noise precision. Default:
        ``1 / (0.1 std(t))^2``, SparseBayes's assumed signal-to-noise ratio.
    fixed_beta : bool
        Keep ``beta`` fixed instead of re-estimating it.
    start : int, optional
        Index of the basis function to start from. Default: the one with
        the largest normalised projection on the targets (Tipping & Faul
        2003); estimators start from the bias.
    max_iter : int
        Iteration cap; reaching it emits a ``ConvergenceWarning``.
    tol : float
        Stop when the best action is a re-estimation changing ``log alpha``
        by less than this and the noise has settled.
    alignment_test : bool
        Skip candidates whose cosine with a basis in the model exceeds
        ``ALIGNMENT_MAX = 1 - 1e-4`` (SparseBayes's redundancy test, which
        uses ``1 - 1e-3``; see :data:`rvm_ppl.closed_form.evidence.ALIGNMENT_MAX`).
    noise_warmup : bool
        Hold ``beta`` at its initial value until the basis functions have
        converged, and only then re-estimate it (every iteration for
        ``BETA_UPDATE_START`` iterations, then every ``BETA_UPDATE_FREQUENCY``).
        Re-estimating the noise from the first iteration, as SparseBayes
        does, lets a one-basis model explain the signal as noise; on a noisy
        linear-spline sinc that run stops at a log evidence 70 nats below
        the one reached with the warm-up.
    priors : dict, optional
        Gamma hyperpriors (Tipping 2001, Appendix A): ``a, b`` (shape, rate)
        on every ``alpha_m`` of the original columns and ``c, d`` on
        ``beta``; missing keys are 0. ``None`` or all zero is plain type-II
        maximum likelihood. Otherwise the fit maximises the penalised
        objective ``log_evidence + sum_(m in model) (a log alpha_m - b
        alpha_m) + c log beta - d beta`` (eq. 36, the log posterior density
        of ``log alpha, log beta``) by :func:`choose_action_prior` and the
        noise update of eq. (46).
    warm_start : tuple (active, alpha) or EvidenceResult, optional
        Start from these basis functions with these precisions (original
        column units) instead of from ``start``.
    warn : bool
        Emit the ``ConvergenceWarning`` when ``max_iter`` is reached.
    callback : callable, optional
        Called as ``callback(iteration, action, index, log_evidence)``.
    refresh : "drift" or int
        When to recompute ``Sigma, mu, S, Q`` from scratch instead of
        trusting the rank-one updates (Tipping & Faul 2003, App. A).
        ``"drift"`` (default): after every update, compare the updated
        ``S, Q`` with exact values on the model, the best candidates to add
        and ``DRIFT_SAMPLE`` random candidates (``O(k^3 + k^2 n)`` for
        ``k`` basis functions in the model), and recompute when the largest
        relative error exceeds ``DRIFT_TOL``. An integer ``n``: recompute
        every ``n`` iterations (``1`` recomputes after every update).
        ``counts["refresh"]`` reports how many recomputations ran outside
        the noise updates.
    progress : bool or float
        Log the iteration, model size and log evidence through the
        ``logging`` module (logger ``"rvm_ppl.closed_form.evidence"``, level INFO) at
        most every ``progress`` seconds (``True``: every two seconds), and once at
        the end if any message was logged.
    progressbar : bool
        Show a live line (iteration, basis functions, log evidence) on
        standard error once the fit has run two seconds.
    multistart : bool or "auto"
        Run the second ascent and the re-check described above. ``"auto"``
        (default): only for ``N <= MULTISTART_MAX_N`` targets and without
        ``warm_start``, where the extra ascents cost a fraction of a second
        (at most three times a single fit); a warm-started fit continues
        from its start alone. ``counts["starts"]`` is the number of ascents
        run; ``n_iter`` and ``counts`` add up every ascent, while the
        traces are those of the ascents that led to the result (the
        re-check continuing the kept one); ``callback`` and progress
        messages see every ascent.
    compiled : "auto", True or False
        Run each ascent in the compiled engine (:mod:`rvm_ppl.closed_form.engine`,
        the same algorithm without the interpreter's cost per iteration).
        The engine applies where the basis fits in ``ENGINE_MAX_ENTRIES``
        entries once materialised, there is no ``callback``, no
        ``progress`` logging and ``refresh="drift"`` (``priors`` run on
        either path); an ascent whose
        Cholesky factorisation fails is rerun in Python, where the jitter
        policy of :func:`rvm_ppl.core.linalg.cholesky_jittered` applies.
        ``"auto"`` (default): where it applies and the problem has more than
        ``ENGINE_MIN_ENTRIES`` = 1001 x 1001 entries; smaller problems run in
        Python, where a whole fit costs less than loading the engine into a
        process. The choice depends on the problem alone, never on what the
        process ran before. ``True``: the engine wherever it applies, at any
        size. ``False``: always the Python loop. Both take the same decisions.
    min_noise_var_ratio : float
        Smallest noise variance the fit may reach, as a share of
        ``var(t)``: ``beta <= 1 / (min_noise_var_ratio var(t))``. The default
        ``1e-6`` is SparseBayes's cap ``BetaMaxFactor / var(t)``
        (``BETA_MAX_FACTOR = 1e6``); on noise-free targets it sets the
        noise, and so the predictive variance. ``0`` lifts the cap. An
        initial ``beta`` above the cap starts at the cap; a ``fixed_beta``
        is not capped.

    Returns
    -------
    EvidenceResult
    """
    if multistart not in (True, False, "auto"):
        raise ValueError(f"multistart must be True, False or 'auto'; got {multistart!r}.")
    if not isinstance(basis, DenseBasis) and isinstance(basis, np.ndarray):
        basis = DenseBasis(basis)
    report = _Progress(progress, progressbar)
    kw = dict(beta=beta, fixed_beta=fixed_beta, start=start, max_iter=max_iter, tol=tol,
              alignment_test=alignment_test, noise_warmup=noise_warmup, priors=priors,
              warm_start=warm_start, warn=warn, callback=callback, refresh=refresh, report=report,
              min_noise_var_ratio=check_noise_var_ratio(min_noise_var_ratio))
    if compiled not in ("auto", True, False):
        raise ValueError(f"compiled must be 'auto', True or False; got {compiled!r}.")
    if compiled:
        compiled = _compiled_basis(basis, callback, refresh, report.every is not None,
                                   any_size=compiled is True)
    if compiled:
        basis = compiled
    kw["compiled"] = bool(compiled)
    best = _fit_sequential(basis, t, **kw)
    if multistart == "auto":
        multistart = warm_start is None and len(t) <= MULTISTART_MAX_N
    if multistart:
        best = _multistart(basis, t, best, kw)
    if not fixed_beta and warm_start is None:
        best = _escape_trivial(basis, t, best, kw)
    report(best.n_iter, best.active.size, best.log_evidence, final=True, converged=best.converged)
    return best


def _compiled_basis(basis, callback, refresh, progress, any_size=False):
    """The materialised basis the compiled engine runs on, or None where it does not apply.

    The choice depends on the problem only: its size (``ENGINE_MIN_ENTRIES <
    N x M <= ENGINE_MAX_ENTRIES``, or any size up to the maximum with
    ``any_size``) and the options that only the Python loop has.
    """
    entries = basis.n_samples * basis.n_basis
    smallest = 0 if any_size else ENGINE_MIN_ENTRIES
    if (callback is not None or refresh != "drift" or progress
            or type(basis) not in (DenseBasis, KernelBasis)
            or not smallest < entries <= ENGINE_MAX_ENTRIES):
        return None
    if type(basis) is DenseBasis:
        return basis
    return DenseBasis(basis.columns(np.arange(basis.n_basis)))


def _multistart(basis, t, first, kw):
    """The second ascent and the re-check of :func:`fit_evidence_regression`."""
    second = _fit_sequential(basis, t, **dict(
        kw, noise_warmup=not kw["noise_warmup"], alignment_test=False, it0=first.n_iter))
    runs = [first, second]
    best = first if first.objective >= second.objective else second
    if kw["alignment_test"] and best.aligned.size:
        again = _fit_sequential(basis, t, **dict(
            kw, beta=best.beta, noise_warmup=False, alignment_test=False, warm_start=best,
            it0=first.n_iter + second.n_iter))
        runs.append(again)
        # The re-check continues the kept ascent: its history is theirs together.
        again.log_evidence_trace = np.concatenate([best.log_evidence_trace, again.log_evidence_trace[1:]])
        again.objective_trace = np.concatenate([best.objective_trace, again.objective_trace[1:]])
        best = again
    best.n_iter = sum(r.n_iter for r in runs)
    best.counts = {k: sum(r.counts.get(k, 0) for r in runs) for k in first.counts}
    best.counts["starts"] = first.counts.get("starts", 1) + len(runs) - 1
    return best


def _start_noise(t, beta, fixed_beta, min_noise_var_ratio):
    """The noise precision an ascent starts from, and the cap on it (:func:`noise_precision_cap`)."""
    var_t = float(np.var(t))
    beta_max = noise_precision_cap(var_t, min_noise_var_ratio)
    if beta is None:
        beta = initial_noise_precision(var_t)
    beta = float(min(beta, beta_max)) if not fixed_beta else float(beta)
    return beta, beta_max


def escape_noise(basis, t, result, start_beta, beta_max):
    """The noise precision to climb again from when an ascent ended at a trivial maximum, or None.

    The empty model (or the bias alone) is a local maximum of the evidence
    whenever the noise explains the targets better than any one basis
    function: with the model empty, candidate ``m`` enters only if
    ``q_m^2 > s_m``, i.e. ``cos^2(phi_m, t) > 1 / (beta ||t||^2)`` (Faul &
    Tipping 2002, eq. 11 with ``s = beta ||phi||^2``, ``q = beta phi^T t``),
    which fails at ``beta = N / ||t||^2`` when every column is weakly
    correlated with ``t``, even if a few of them fit ``t`` exactly. An
    ascent started from a large noise then stops there.

    An ascent counts as trivial when its noise variance ``1 / beta`` is at
    least ``TRIVIAL_NOISE_SHARE`` (95 %) of ``var(t)``. What it left as
    noise is ``r``, the part of ``t`` outside the span of its basis
    functions, and the best single column outside the model explains the
    mean square ``e = max_m (phi~_m^T r)^2 / (N ||phi~_m||^2)`` of it
    (``phi~`` the columns with that span projected out). SparseBayes starts
    from a noise standard deviation ``0.1 std(t)`` (``GAUSSIAN_SNR_INIT``);
    the returned start applies that ratio to this part of the targets,
    ``beta' = 1 / (0.1^2 e)``, capped at ``beta_max``, so that the best
    column enters as decisively as in a fit of targets it explains alone.
    For the empty model ``e = cos^2 mean(t^2)`` of the best column. None
    when the ascent was not trivial, no column explains any of ``r``, or
    ``beta'`` is not a smaller noise than ``start_beta``. The projections
    cost one product ``Phi^T [r, Q]`` with ``Q`` an orthonormal basis of the
    model's few columns.
    """
    beta, var_t = result.beta, float(np.var(t))
    if beta is None or not var_t > 0 or beta * var_t > 1.0 / TRIVIAL_NOISE_SHARE:
        return None
    active = np.asarray(result.active, dtype=int)
    Q = np.linalg.qr(basis.columns(active))[0] if active.size else np.zeros((len(t), 0))
    r = t - Q @ (Q.T @ t)
    norms2, proj = basis.norms2_and_project(r)
    rest = norms2 - np.sum(basis.cross(Q) ** 2, axis=1) if active.size else norms2
    out = rest > 1e-12 * norms2  # outside the model's span (its own columns are not)
    e = float(np.max(proj[out] ** 2 / rest[out], initial=0.0)) / len(t)
    if not e > 0:
        return None
    new = min(1.0 / (GAUSSIAN_SNR_INIT**2 * e), beta_max)
    return new if new > start_beta else None


def _escape_trivial(basis, t, first, kw):
    """Climb again from a smaller noise when the fit ended trivial (:func:`escape_noise`).

    The ascent runs without the alignment test, so that near-duplicate
    columns whose difference is the signal can enter together. From a
    small noise on nearly collinear columns some left-out factors overflow
    (``alpha - S`` rounds to 0); such candidates get no finite gain and are
    not chosen, so the floating-point warnings are silenced for this ascent
    (the loops' own results on these columns are unaffected). Keeps the fit
    of higher objective (``first`` on a tie, or when the objective is not a
    number); ``n_iter`` and ``counts`` add up the ascents.
    """
    start_beta, beta_max = _start_noise(t, kw["beta"], False, kw["min_noise_var_ratio"])
    beta = escape_noise(basis, t, first, start_beta, beta_max)
    if beta is None:
        return first
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        second = _fit_sequential(basis, t, **dict(kw, beta=beta, alignment_test=False,
                                                  it0=first.n_iter))
    best = second if second.objective > first.objective else first
    runs = (first, second)
    best.n_iter = sum(r.n_iter for r in runs)
    best.counts = {k: sum(r.counts.get(k, 0) for r in runs) for k in first.counts}
    best.counts["starts"] = first.counts.get("starts", 1) + 1
    return best


def _fit_sequential(basis, t, *, beta, fixed_beta, start, max_iter, tol, alignment_test,
                    noise_warmup, priors, warm_start, warn, callback, refresh, report,
                    min_noise_var_ratio, it0=0, compiled=False):
    """One ascent of the fast sequential algorithm (:func:`fit_evidence_regression`).

    ``report`` is the fit's :class:`_Progress`; iterations are reported
    from ``it0 + 1`` on, after those of earlier ascents.
    """
    if not (refresh == "drift" or (isinstance(refresh, (int, np.integer)) and not isinstance(refresh, bool)
                                   and refresh >= 1)):
        raise ValueError(f"refresh must be 'drift' or a positive integer; got {refresh!r}.")
    priors = resolve_evidence_priors(priors)
    alpha_prior = priors is not None and (priors["a"] > 0 or priors["b"] > 0)
    c_d = (0.0, 0.0) if priors is None else (priors["c"], priors["d"])
    t = np.asarray(t, dtype=float)
    M = basis.n_basis
    norms2, proj = basis.norms2_and_project(t)
    scale = np.sqrt(norms2)
    scale[scale == 0] = 1.0

    beta, beta_max = _start_noise(t, beta, fixed_beta, min_noise_var_ratio)

    if isinstance(warm_start, EvidenceResult):
        warm_start = (warm_start.active, warm_start.alpha[warm_start.active])
    if compiled:
        from rvm_ppl.closed_form import engine as _evidence_engine

        state = _evidence_engine.run(
            basis.Phi, t, proj / scale, scale, beta=beta,
            beta_max=beta_max, fixed_beta=fixed_beta, noise_warmup=noise_warmup,
            alignment_test=alignment_test, tol=tol, max_iter=max_iter, start=start,
            warm_start=warm_start, priors=priors)
        res = None
        if state is not None:
            if not state["converged"] and warn:
                warn_not_converged(max_iter)
            res = _state_result(
                state["scale"], state["active"], state["alpha"], state["mu"], state["Sigma"],
                state["S"], state["Q"], state["beta"], state["logml"], state["trace"],
                state["n_iter"], state["converged"], aligned=state["aligned"],
                counts=state["counts"], priors=priors, objective_trace=state["objective_trace"])
        if res is not None:
            report(it0 + res.n_iter, res.active.size, res.log_evidence)
            return res
    model = _Model(basis, t, scale, proj, beta)
    if warm_start is not None and len(warm_start[0]):
        model.warm_start(*warm_start)
    else:
        if start is None:
            start = int(np.argmax(np.abs(model.proj)))
        # Closed-form alpha for a single basis (exact for M = 1): p^2 / (q^2 - p).
        p, q = beta, beta * model.proj[start]
        if alpha_prior:
            # The same single-basis problem with the hyperprior (original units).
            sc = scale[start]
            best, _ = alpha_maximiser(p * sc**2, q * sc, priors["a"], priors["b"])
            alpha0 = float(best[()]) / sc**2
        else:
            alpha0 = p**2 / (q**2 - p) if q**2 > p else INIT_ALPHA_MAX
        model.ensure_cross(start)
        model.S, model.Q = np.full(M, beta), beta * model.proj
        model.Sigma, model.mu = np.zeros((0, 0)), np.zeros(0)
        model.add(start, alpha0)
    model.load(model.full_statistics())
    model.priors, model.alpha_prior = priors, alpha_prior
    model.schedule(fixed_beta=fixed_beta, noise_warmup=noise_warmup, beta_max=beta_max, c_d=c_d,
                   refresh=refresh)
    run = ascend(model, max_iter=max_iter, tol=tol, alignment_test=alignment_test, callback=callback,
                 report=report, it0=it0, warn_not_converged=warn_not_converged if warn else None)
    model.load(model.full_statistics())
    c = run["counts"]
    counts = {k: c.get(k, model.counts.get(k, 0))
              for k in (ADD, REESTIMATE, DELETE, "noise", "aligned", "refresh", "polish", "refused")}
    return model.result(
        model.trace, run["n_iter"], run["converged"], aligned=run["aligned"], counts=counts,
        priors=priors, objective_trace=model.objective_trace,
    )


def fit_evidence_full(
    Phi, t, *, beta=None, fixed_beta=False, max_iter=10_000, tol=MIN_DELTA_LOG_ALPHA, alpha_prune=1e12,
    min_noise_var_ratio=MIN_NOISE_VAR_RATIO,
):
    """Maximise the log evidence by Tipping's (2001) original re-estimation.

    All ``M`` basis functions start in the model and every iteration
    applies MacKay's updates ``alpha_i = gamma_i / mu_i^2`` (eq. 16) and
    ``beta = (N - sum gamma) / ||t - Phi mu||^2`` (eq. 18) to all of them at
    once, pruning a basis function when its ``alpha`` (on unit-norm columns)
    exceeds ``alpha_prune`` (App. B.1). It costs ``O(M^3)`` per iteration
    and is kept as the reference the fast sequential algorithm is checked
    against; it is the algorithm behind the figures of the paper.

    Parameters
    ----------
    Phi : ndarray of shape (N, M)
    t : ndarray of shape (N,)
    beta, fixed_beta, min_noise_var_ratio : float, bool, float
        As in :func:`fit_evidence_regression`.
    max_iter : int
    tol : float
        Stop when no ``log alpha`` of a retained basis changes by more than this.
    alpha_prune : float

    Returns
    -------
    EvidenceResult
        Its ``log_evidence_trace`` holds the log evidence at the start and
        after every iteration (``n_iter + 1`` values), ending at ``log_evidence``.
    """
    Phi = np.asarray(Phi, dtype=float)
    t = np.asarray(t, dtype=float)
    N, M = Phi.shape
    scale = np.linalg.norm(Phi, axis=0)
    scale[scale == 0] = 1.0
    var_t = float(np.var(t))
    beta_max = noise_precision_cap(var_t, check_noise_var_ratio(min_noise_var_ratio))
    if beta is None:
        beta = initial_noise_precision(var_t)
    basis = DenseBasis(Phi / scale)
    model = _Model(basis, t, np.ones(M), basis.Phi.T @ t, float(beta))
    PtP = basis.Phi.T @ basis.Phi
    keep = np.arange(M)
    alpha = np.ones(M)
    trace, converged, it = [], False, 0

    def evaluate():
        model.active, model.alpha = list(keep), alpha[keep]
        model.act_idx = keep
        model.cols, model.GA = basis.Phi[:, keep], PtP[:, keep]
        model.load(model.full_statistics())

    for it in range(1, max_iter + 1):
        evaluate()
        trace.append(model.logml)
        gamma = 1.0 - model.alpha * np.diag(model.Sigma)  # eq. (17)
        # eq. (16); gamma <= 0 (rounding) means the prior alone fixes w_i: prune.
        new = np.full(len(keep), np.inf)
        ok = gamma > 0
        new[ok] = gamma[ok] / np.maximum(model.mu[ok] ** 2, np.finfo(float).tiny)
        change = np.max(np.abs(np.log(new[ok]) - np.log(model.alpha[ok])), initial=0.0)
        if not ok.all():
            change = np.inf
        alpha[keep] = new
        if not fixed_beta:
            beta = (N - gamma.sum()) / max(model.ED, np.finfo(float).tiny)  # eq. (18)
            model.beta = min(beta, beta_max)
        keep = keep[alpha[keep] < alpha_prune]
        if change < tol:
            converged = True
            break
    else:
        warn_not_converged(max_iter)
    evaluate()
    trace.append(model.logml)  # after the last update: the trace ends at the log evidence
    model.scale = scale  # report on the original column scale
    return model.result(trace, it, converged, counts={REESTIMATE: it})


def evidence_newton_terms(alpha, beta, Sigma, mu, ED, N, free_beta):
    """Gradient and Hessian of the log evidence in ``(log alpha, log beta)``.

    ``Sigma, mu`` and ``ED = ||t - Phi mu||^2`` are the exact posterior
    quantities at ``alpha, beta`` (Tipping 2001, eqs. 12-13); the log
    transform makes the result the same on unit-norm and original columns.
    With ``A = diag(alpha)`` and ``L`` of eq. (15), the first derivatives
    are the fixed-point conditions behind eqs. (16) and (18),
    ``dL/dlog alpha_i = (1 - alpha_i (mu_i^2 + Sigma_ii)) / 2`` and
    ``dL/dlog beta = (N - sum_i gamma_i - beta ED) / 2``; the second follow
    from ``dmu/dlog alpha_j = -alpha_j mu_j Sigma e_j``, ``dSigma/dlog
    alpha_j = -alpha_j Sigma e_j e_j^T Sigma``, ``dmu/dlog beta = Sigma A
    mu``, ``dSigma/dlog beta = Sigma A Sigma - Sigma`` and ``dED/dlog beta =
    -2 (A mu)^T Sigma (A mu) / beta``.

    Returns
    -------
    g : ndarray of shape (k,) or (k + 1,)
    H : ndarray of shape (k, k) or (k + 1, k + 1)
        ``log beta`` last when ``free_beta``.
    """
    k = alpha.size
    d = np.diagonal(Sigma)
    m2 = mu**2 + d
    g = 0.5 * (1.0 - alpha * m2)
    H = 0.5 * np.outer(alpha, alpha) * (2.0 * np.outer(mu, mu) * Sigma + Sigma**2)
    H.flat[:: k + 1] -= 0.5 * alpha * m2
    if not free_beta:
        return g, H
    am = alpha * mu
    s_am = Sigma @ am
    dS = np.einsum("ij,j,ji->i", Sigma, alpha, Sigma) - d  # diagonal of dSigma/dlog beta
    Hb = np.empty((k + 1, k + 1))
    Hb[:k, :k] = H
    Hb[:k, k] = Hb[k, :k] = -0.5 * alpha * (2.0 * mu * s_am + dS)
    Hb[k, k] = 0.5 * (alpha @ dS - beta * ED + 2.0 * am @ s_am)
    gb = 0.5 * (N - k + alpha @ d - beta * ED)
    return np.append(g, gb), Hb


def newton_direction(g, H):
    """Ascent direction ``(lam I - H)^{-1} g`` with the smallest ``lam >= 0`` that makes it ascend.

    ``lam`` starts at 0 and grows from ``1e-8 max|H_ii|`` by factors of 10
    (Levenberg); the step is shortened so that no coordinate moves by more
    than ``POLISH_MAX_STEP``. None if no ``lam`` up to ``1e8 max|H_ii|``
    serves.
    """
    n = g.size
    top = max(float(np.max(np.abs(np.diagonal(H)))), 1.0)
    lam = 0.0
    while lam <= 1e8 * top:
        P = -H
        P.flat[:: n + 1] += lam
        c = cholesky_or_none(P)
        if c is not None:
            step = cho_solve(c, g)
            largest = max(float(np.max(np.abs(step))), np.finfo(float).tiny)
            return step * min(1.0, POLISH_MAX_STEP / largest)
        lam = 1e-8 * top if lam == 0.0 else 10.0 * lam
    return None


def _polish(model, beta_max, free_beta):
    """Newton ascent of the objective in all ``log alpha`` of the model (and ``log beta``).

    The objective is the log evidence, plus the hyperprior terms with
    ``model.priors`` (Tipping 2001, eq. 36; their derivatives in the log
    scale are :func:`rvm_ppl.closed_form.driver.gamma_log_prior_terms`).
    Steps of :func:`newton_direction` are halved (at most 20 times) until
    they raise the objective; the polish ends after ``POLISH_STEPS`` steps,
    a rejected step, or a predicted gain below ``POLISH_GAIN``. Leaves the
    model with exact ``Sigma, mu`` and log evidence (and exact ``S, Q`` if
    it moved); returns whether it moved.
    """
    priors = model.priors
    core = model.load_core()
    start = current = model.logml + model.penalty()
    alpha, beta = model.alpha.copy(), model.beta
    k = alpha.size
    sc2 = model.scale[model.act_idx] ** 2
    for _ in range(POLISH_STEPS):
        g, H = evidence_newton_terms(alpha, beta, core["Sigma"], core["mu"], core["ED"], model.N,
                                     free_beta)
        if priors is not None:
            ga, ha = gamma_log_prior_terms(alpha * sc2, priors["a"], priors["b"])
            g[:k] += ga
            H[np.arange(k), np.arange(k)] += ha
            if free_beta:
                gb, hb = gamma_log_prior_terms(beta, priors["c"], priors["d"])
                g[k] += gb
                H[k, k] += hb
        step = newton_direction(g, H)
        if step is None or 0.5 * float(g @ step) <= POLISH_GAIN:
            break
        for _ in range(20):
            model.alpha = alpha * np.exp(step[:k])
            trial_beta = min(beta * np.exp(step[k]), beta_max) if free_beta else beta
            trial = model.full_statistics(trial_beta, factors=False)
            value = trial["logml"] + prior_penalty(model.alpha * sc2, trial_beta, priors)
            if value > current:
                break
            step = step / 2
        else:
            break
        alpha, beta, core, current = model.alpha.copy(), trial_beta, trial, value
    model.alpha = alpha
    if current == start:
        return False
    model.load(model.full_statistics(beta))
    return True


def _update_noise(model, beta_max, c=0.0, d=0.0):
    """MacKay's noise update, accepted only if it raises the objective.

    ``beta = (N - sum_i gamma_i + 2c) / (||t - Phi mu||^2 + 2d)`` (Tipping
    2001, eq. 18; eq. 46 with a Gamma(c, d) hyperprior on ``beta``), with
    ``gamma_i = 1 - alpha_i Sigma_ii``. The fixed-point step is not
    guaranteed to increase the objective ``L + c log beta - d beta``, so it
    is halved in ``log beta`` until it does (at most 20 times). Returns
    whether ``log beta`` moved by more than ``MIN_DELTA_LOG_BETA``.
    """
    # Exact Sigma, mu and evidence at the current beta; S, Q keep their
    # (drift-checked) rank-one updates unless beta moves.
    model.load_core()
    current = model.logml
    gamma = 1.0 - model.alpha * np.diag(model.Sigma)
    if c or d:
        current += gamma_log_prior(model.beta, c, d)
        tiny = np.finfo(float).tiny
        target = (model.N - float(np.sum(gamma)) + 2 * c) / max(model.ED + 2 * d, tiny)
    else:
        target = (model.N - float(np.sum(gamma))) / max(model.ED, np.finfo(float).tiny)
    target = min(max(target, np.finfo(float).tiny), beta_max)
    step = np.log(target) - np.log(model.beta)
    for _ in range(20):
        if abs(step) <= MIN_DELTA_LOG_BETA:
            return False
        new_beta = model.beta * np.exp(step)
        stats = model.full_statistics(new_beta, factors=False)
        value = stats["logml"] + (gamma_log_prior(new_beta, c, d) if (c or d) else 0.0)
        if value >= current:
            model.load(model.full_statistics(new_beta))
            return True
        step /= 2
    return False


def posterior_given(Phi, t, alpha, beta):
    """Exact Gaussian posterior of the weights for fixed ``alpha, beta``.

    Tipping (2001) eqs. (12)-(13): ``Sigma = (beta Phi^T Phi + A)^{-1}``,
    ``mu = beta Sigma Phi^T t``. Returns ``(mu, Sigma, L)`` with ``L`` the
    lower Cholesky factor of ``Sigma^{-1}``.
    """
    H = beta * Phi.T @ Phi + np.diag(alpha)
    L = cholesky_jittered(H, what="posterior precision of the weights")
    Sigma = cho_covariance(L)
    mu = beta * Sigma @ (Phi.T @ t)
    return mu, Sigma, L

