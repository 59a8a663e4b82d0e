"""The sequential driver: the decisions of Tipping & Faul's (2003) fast evidence maximisation.

Every likelihood (Gaussian, Bernoulli, categorical) is fitted by the same
loop: compute every candidate's change in the objective for its only
possible action (add, re-estimate or delete), take the best with
SparseBayes's preferences (a pending deletion wins), keep candidates that
duplicate a basis in the model out (the alignment test), undo an addition
the exact objective does not confirm, and stop when nothing gains. The
likelihood is seen only through a small statistics interface (the class
docstring of :func:`ascend`).

The loop itself (:func:`climb`) and the decision functions it calls (the
gains :func:`relevant`, :func:`add_gain`, :func:`add_alpha`,
:func:`left_out`, :func:`reestimate_alpha`, :func:`reestimate_gain`,
:func:`delete_gain`, :func:`member_gains`; under Gamma hyperpriors
:func:`prior_gain` with :func:`penalised_alpha`, and the bound :func:`gain_bound` that
spares the candidates that cannot win (:func:`beaten`); the choice :func:`prefer`; the
noise schedule :func:`noise_due`; the alignment test :func:`block_aligned`,
:func:`release`, :func:`reblock`, :func:`unblock`, :func:`release_refused`)
are plain NumPy functions written so that Numba compiles them unchanged. The
Python loop (:func:`ascend`) calls them directly; the compiled Gaussian
backend (:mod:`rvm_ppl.closed_form.engine`) runs ``numba.njit`` versions of
the same functions (:func:`compiled`), in which the operations :func:`climb`
asks of the likelihood are the engine's compiled ones. So both backends take
their decisions, and run their loop, from one source. The element-wise
formulas take scalars or arrays: the Python loop applies them to the arrays
of all candidates at once, the compiled one in a single pass over the
candidates.
"""

from __future__ import annotations

import types
from dataclasses import dataclass

import numpy as np

from rvm_ppl.closed_form.constants import (
    ADD,
    ADD_ORDER,
    ALIGNMENT_MAX,
    BETA_UPDATE_FREQUENCY,
    BETA_UPDATE_START,
    DELETE,
    REESTIMATE,
    ZERO_FACTOR,
)

# Action codes of the array functions (compiled code has no strings).
ADD_CODE, REESTIMATE_CODE, DELETE_CODE = 0, 1, 2
ACTIONS = (ADD, REESTIMATE, DELETE)
_TINY = np.finfo(float).tiny
_EPS = np.finfo(float).eps
_INF = np.inf
BOUND_SLACK = 1e-9  # relative margin of beaten(): far above the rounding of a gain


# -- the decision, written once -------------------------------------------------------


def relevant(S, Q):
    """Whether a candidate outside the model would raise the evidence: ``q^2 > s`` (eq. 20).

    Outside the model ``s = S`` and ``q = Q`` (Tipping & Faul 2003, eqs.
    23-24). ``S <= 0`` (rounding in a nearly singular model) marks a
    column that adds nothing. Element-wise: scalars or arrays.
    """
    return (Q * Q - S > ZERO_FACTOR) & (S > 0)


def add_gain(S, Q):
    """Gain of adding a relevant candidate at its best ``alpha``: eq. (27), halved. Element-wise."""
    quot = Q * Q / S
    return 0.5 * (quot - 1.0 - np.log(quot))


def add_alpha(S, Q):
    """Return the ``alpha = s^2 / (q^2 - s)`` a relevant candidate enters with (eq. 20).

    Element-wise.
    """
    return S * S / (Q * Q - S)


def left_out(S, Q, alpha):
    """Faul & Tipping's ``s, q`` of a basis in the model (Tipping & Faul 2003, eqs. 23-24).

    ``s = alpha S / (alpha - S)``, ``q = alpha Q / (alpha - S)``. Element-wise.
    """
    denom = alpha - S
    return alpha * S / denom, alpha * Q / denom


def reestimate_alpha(s, f):
    """The re-estimated ``alpha~ = s^2 / (q^2 - s)`` (eq. 20), ``f = q^2 - s > 0``. Element-wise."""
    return np.maximum(s * s / f, _TINY)


def reestimate_gain(S, Q, alpha, new):
    """Gain of moving a basis's precision from ``alpha`` to ``new``: eq. (32), halved. Element-wise."""
    delta = 1.0 / new - 1.0 / alpha
    return 0.5 * (delta * Q * Q / (S * delta + 1.0) - np.log1p(S * delta))


def delete_gain(s, q, alpha):
    """Gain of deleting a basis from the model: eq. (37), halved. Element-wise."""
    return -0.5 * (q * q / (s + alpha) - np.log1p(s / alpha))


def member_gains(S, Q, alpha):
    """Gain, new ``alpha`` and deletion flag of every basis in the model.

    With the left-out factors (:func:`left_out`), a basis still relevant
    (``q^2 > s``) is *re-estimated* (:func:`reestimate_alpha`,
    :func:`reestimate_gain`); otherwise it is *deleted*
    (:func:`delete_gain`). ``S, Q, alpha`` are arrays over the model.
    """
    sa, qa = left_out(S, Q, alpha)
    fa = qa * qa - sa
    delete = ~(fa > ZERO_FACTOR)
    gain = np.empty(alpha.size)
    new = np.empty(alpha.size)
    re = ~delete
    if delete.any():
        new[delete] = _INF
        gain[delete] = delete_gain(sa[delete], qa[delete], alpha[delete])
        sa, fa, S, Q, alpha = sa[re], fa[re], S[re], Q[re], alpha[re]
    nr = reestimate_alpha(sa, fa)
    new[re] = nr
    gain[re] = reestimate_gain(S, Q, alpha, nr)
    return gain, new, delete


# -- the gains under Gamma hyperpriors (Tipping 2001, Appendix A) ----------------------

ROOT_STEPS = 200  # at most: Newton converges in a few; each bisection halves the bracket
ROOT_TOL = 1e-15  # a Newton step this small (relative, in log x): the root to rounding
NEWTON_FIRST = 8  # plain Newton steps falling_root tries before its guarded loop


def pick(c, x, y):
    """``x`` where ``c``, else ``y``: :func:`numpy.where`; compiled, a branch on scalars.

    Numba's ``np.where`` on scalars returns a 0-d array, so :func:`compiled`
    binds this name to :func:`_pick_scalar` instead.
    """
    return np.where(c, x, y)


def _pick_scalar(c, x, y):
    """:func:`pick` on scalars, for the compiled functions."""
    return x if c else y


def gamma_log_prior(x, shape, rate):
    """``shape log x - rate x``: a Gamma(shape, rate) log density in ``log x``, up to a constant.

    The Jacobian of the log transform turns ``(shape - 1) log x`` into
    ``shape log x`` (Tipping 2001, eq. 36). Element-wise.
    """
    return shape * np.log(x) - rate * x


def gamma_log_prior_terms(x, shape, rate):
    """First and second derivative of :func:`gamma_log_prior` in ``log x``. Element-wise."""
    return shape - rate * x, -rate * x


def cubic(x, c3, c2, c1, c0):
    """``((c3 x + c2) x + c1) x + c0``. Element-wise."""
    return ((c3 * x + c2) * x + c1) * x + c0


def rounding(x, c3, c2, c1, c0):
    """The rounding error of :func:`cubic` at ``x``: a value below it is zero to working precision.

    ``4 eps`` times the sum of the terms' magnitudes (Horner's scheme's bound). Element-wise.
    """
    return 4.0 * _EPS * (((np.abs(c3) * x + np.abs(c2)) * x + np.abs(c1)) * x + np.abs(c0))


def falling_root(lo, hi, c3, c2, c1, c0):
    """Return the root of :func:`cubic` in ``[lo, hi]`` where it falls through zero.

    ``cubic(lo) > 0 > cubic(hi)``. Newton's method in ``u = log x``. An
    element has its root when its Newton step is at most ``ROOT_TOL (1 +
    |u|)`` or the cubic is zero to :func:`rounding` (it takes that step:
    Newton's error is then about the step squared), and is not moved again,
    so an element's root does not depend on the others'. First up to
    ``NEWTON_FIRST`` plain steps from the root of the cubic's linear part
    (where it lies in the bracket, which holds one root); an element that
    has not converged in the bracket by then starts again in a loop kept in
    the bracket as in Press et al.'s ``rtsafe``: a step that would leave the
    bracket, or that is not half the one before, is a bisection instead, each
    evaluation narrows the bracket, and a bracket narrower than the tolerance
    ends it. Element-wise.
    """
    lo, hi = np.log(lo), np.log(hi)
    # Start at the root of the cubic's linear part, -c0 / c1, where it is in the bracket
    # (the root near 0 is close to it; under a vague prior, within about a of it), else
    # at the bracket's middle.
    linear = np.log(pick(c0 * c1 < 0.0, -c0 / pick(c1 != 0.0, c1, 1.0), 1.0))
    inner = (c0 * c1 < 0.0) & (linear > lo) & (linear < hi)
    u = pick(inner, linear, 0.5 * (lo + hi))
    # Plain Newton steps first, clipped to the bracket: an element that reaches its
    # root within NEWTON_FIRST of them is done; the others take the guarded loop.
    v = u
    moving = inner & (hi > lo)
    found = u != u  # all False, of u's shape
    for _ in range(NEWTON_FIRST):
        x = np.exp(v)
        f = cubic(x, c3, c2, c1, c0)
        df = ((3.0 * c3 * x + 2.0 * c2) * x + c1) * x  # d cubic / d log x
        step = f / pick(df != 0.0, df, 1.0)
        at = (df != 0.0) & ((np.abs(step) <= ROOT_TOL * (1.0 + np.abs(v)))
                            | (np.abs(f) <= rounding(x, c3, c2, c1, c0)))
        v = pick(moving, np.minimum(np.maximum(v - step, lo), hi), v)
        found = found | (moving & at)
        moving = moving & ~at
        if not np.any(moving):
            break
    done = (found & (v > lo) & (v < hi)) | (hi <= lo)  # hi <= lo: a placeholder's empty bracket
    u = pick(done, v, u)
    last = hi - lo
    for _ in range(ROOT_STEPS if not np.all(done) else 0):
        x = np.exp(u)
        f = cubic(x, c3, c2, c1, c0)
        up = f > 0
        lo = pick(up, u, lo)
        hi = pick(up, hi, u)
        df = ((3.0 * c3 * x + 2.0 * c2) * x + c1) * x  # d cubic / d log x
        newton = u - f / pick(df != 0.0, df, 1.0)
        tol = ROOT_TOL * (1.0 + np.abs(u))
        flat = np.abs(f) <= rounding(x, c3, c2, c1, c0)
        found = (df != 0.0) & ((np.abs(newton - u) <= tol) | flat)
        fast = found | ((df != 0.0) & (newton > lo) & (newton < hi)
                        & (2.0 * np.abs(newton - u) <= last))
        step = pick(fast, newton, 0.5 * (lo + hi))
        moved = np.abs(step - u)
        u = pick(done, u, step)
        last = pick(done, last, moved)
        done = done | found | (hi - lo <= tol)
        if np.all(done):
            break
    return np.exp(u)


def penalised_x_value(x, r, s, a, bs):
    """One basis's penalised objective at ``alpha = s x``; ``r = q^2 / s``, ``bs = b s``.

    Element-wise.
    """
    e = 0.5 * (r / (1.0 + x) - np.log1p(1.0 / x))
    return e + a * np.log(s * x) - bs * x


def penalised_alpha(s, q2, a, b, solve=True):
    """Return the maximiser of one basis's penalised objective and its value, for ``b > 0``.

    The derivation is in :func:`rvm_ppl.closed_form.evidence.alpha_maximiser`:
    with ``x = alpha / s`` the stationary points are the roots of a cubic
    ``P``; the maximum is a root where ``P`` changes sign from ``+`` to
    ``-``, one in ``(0, x1)`` and one beyond ``max(x2, 0)`` (``x1 < x2``
    the roots of ``P'``), each bracketed and found (:func:`falling_root`); where both exist the
    larger value wins. ``s > 0``, ``q2 = q^2``. Element-wise: scalars or
    arrays (a root that does not exist costs nothing on scalars); elements
    where ``solve`` is False are placeholders, with no root sought
    (value ``-inf``).

    Returns
    -------
    alpha, value
    """
    r, bs = q2 / s, b * s
    c3, c2, c1, c0 = -2.0 * bs, 2.0 * a - 4.0 * bs, 1.0 - r + 4.0 * a - 2.0 * bs, 1.0 + 2.0 * a
    # Roots x1 <= x2 of P'(x) = 3 c3 x^2 + 2 c2 x + c1 (leading coefficient < 0).
    A2, A1, A0 = 3.0 * c3, 2.0 * c2, c1
    disc = A1 * A1 - 4.0 * A2 * A0
    two = disc > 0
    sq = np.sqrt(pick(two, disc, 0.0))
    # Numerically stable pair: x = (-A1 -+ sqrt(disc)) / (2 A2), product A0 / A2.
    qq = -0.5 * (A1 + np.copysign(sq, A1))
    nz = qq != 0
    ra = pick(nz, qq / A2, 0.0)
    rb = pick(nz, A0 / pick(nz, qq, 1.0), 0.0)
    x1 = pick(two, np.minimum(ra, rb), 0.0)
    x2 = pick(two, np.maximum(ra, rb), 0.0)
    # Cauchy bounds on the positive roots of P.
    big = np.maximum(np.maximum(np.abs(c3), np.abs(c2)), np.maximum(np.abs(c1), np.abs(c0)))
    x_lo = c0 / (c0 + big)
    x_hi = 1.0 + big / np.abs(c3)
    low = solve & two & (x1 > 0) & (cubic(pick(x1 > 0, x1, 1.0), c3, c2, c1, c0) < 0)
    start_high = pick(two, np.maximum(x2, 0.0), 0.0)
    high = solve & (pick(start_high > 0, cubic(start_high, c3, c2, c1, c0), 1.0) > 0)
    x_best = s * np.nan
    v_best = s * 0.0 - _INF
    if np.any(low):
        lo = np.minimum(x_lo, x1)
        # Elements without this root get the empty bracket [1, 1]: done at once.
        x = falling_root(pick(low, lo, 1.0), pick(low, x1, 1.0), c3, c2, c1, c0)
        v_best = pick(low, penalised_x_value(x, r, s, a, bs), -_INF)
        x_best = pick(low, x, x_best)
    if np.any(high):
        lo = pick(start_high > 0, start_high, x_lo)
        x = falling_root(pick(high, lo, 1.0), pick(high, np.maximum(x_hi, 2.0 * lo), 1.0),
                        c3, c2, c1, c0)
        v = pick(high, penalised_x_value(x, r, s, a, bs), -_INF)
        better = v > v_best
        x_best = pick(better, x, x_best)
        v_best = pick(better, v, v_best)
    return s * x_best, v_best


def prior_peak(a, b):
    """The largest value of the prior term ``a log alpha - b alpha``: ``a log(a / b) - a``.

    0 for ``a = 0``. Scalars.
    """
    return a * np.log(a / b) - a if a > 0 else 0.0


def gain_bound(s, q, a, b):
    """An upper bound on what a basis with left-out factors ``s, q`` adds to the objective.

    The objective is the penalised one (Tipping 2001, eq. 36). With ``r = q^2 / s``, its
    share of the objective is at most the largest
    evidence term, ``(r - 1 - log r) / 2`` where ``q^2 > s`` and 0 otherwise
    (the gain without a hyperprior, :func:`add_gain`), plus the largest prior
    term (:func:`prior_peak`). ``-inf`` where ``s <= 0``. Under a vague
    hyperprior the bound is within the prior term of the exact gain, so it
    orders the candidates as their gains do. ``a, b`` are scalars.
    Element-wise in ``s, q``.
    """
    grows = (s > 0) & (q * q > s)
    r = pick(grows, q * q / pick(grows, s, 1.0), 1.0)
    e = pick(grows, 0.5 * (r - 1.0 - np.log(r)), 0.0)
    return pick(s > 0, e + prior_peak(a, b), -_INF)


def gain_floor(s, q, a, b):
    """A lower bound on a basis's largest share of the penalised objective: two values of it.

    The share ``l`` (:func:`rvm_ppl.closed_form.evidence.alpha_objective`) at
    the ``alpha`` without a hyperprior, ``s^2 / (q^2 - s)`` where ``q^2 > s``
    (Faul & Tipping 2002), and at the hyperprior's mode ``a / b`` where
    ``a > 0``; the larger of the two (``-inf`` where neither applies).
    Under a vague hyperprior the first is within the prior term of the
    maximum, so with :func:`gain_bound` it brackets the exact gain closely.
    ``b > 0``; ``a, b`` are scalars. Element-wise in ``s, q``.
    """
    r, bs = q * q / s, b * s
    grows = (s > 0) & (r > 1.0)
    x = 1.0 / pick(grows, r - 1.0, 1.0)  # alpha / s at the plain maximum s^2 / (q^2 - s)
    floor = pick(grows, penalised_x_value(x, r, s, a, bs), -_INF)
    if a > 0:
        floor = np.maximum(floor, pick(s > 0, penalised_x_value(a / bs, r, s, a, bs), -_INF))
    return floor


def may_gain(s, q, a, b):
    """Whether a basis with left-out factors ``s, q`` can raise the penalised objective at all.

    Where :func:`gain_bound` is not positive no ``alpha`` makes the basis
    worth having, and :func:`penalised_alpha` need not run. Element-wise in ``s, q``.
    """
    return gain_bound(s, q, a, b) > 0


def beaten(bound, best):
    """Whether a candidate whose gain is at most ``bound`` cannot beat, nor tie, the gain ``best``.

    The bound is compared with a margin of ``BOUND_SLACK (1 + |bound|)``,
    above the rounding of the gains, so a candidate passed over is one the
    exact comparison would have passed over too. Element-wise.
    """
    return bound + BOUND_SLACK * (1.0 + np.abs(bound)) < best


def prior_gain(S, Q, alpha, scale, a, b):
    """One candidate's gain in the penalised objective (eq. 36) under Gamma(a, b) on ``alpha``.

    ``S, Q, alpha`` are on unit-norm columns (``alpha = inf``: outside the
    model), ``scale`` the column's norm: the prior refers to the original
    column, whose ``alpha`` is ``alpha * scale^2``. With ``l`` one basis's
    share of the objective (:func:`rvm_ppl.closed_form.evidence.alpha_objective`,
    at the left-out ``s, q``; ``l(inf) = 0``) and ``alpha*, l*`` its
    maximum (:func:`penalised_alpha`), a candidate outside the model is
    *added* at ``alpha*`` if ``l* > 0`` (gain ``l*``); a basis in the model
    is *re-estimated* to ``alpha*`` if ``l* > 0`` (gain ``l* - l(alpha)``),
    else *deleted* (gain ``-l(alpha)``). ``s <= 0`` (rounding in a nearly
    singular model) marks a basis that adds nothing. Element-wise.

    Returns
    -------
    gain : float or ndarray
    new : float or ndarray
        The new ``alpha`` on the unit-norm column (``inf``: delete, or do not add).
    keep : bool or ndarray
        ``l* > 0``: add or re-estimate.
    """
    inside = alpha < _INF
    sa, qa = left_out(S, Q, pick(inside, alpha, 2.0 * S + 1.0))
    sc2 = scale * scale
    s = pick(inside, sa, S) * sc2
    q = pick(inside, qa, Q) * scale
    go = may_gain(s, q, a, b)
    best, value = s * 0.0 + _INF, s * 0.0
    if np.any(go):
        x, v = penalised_alpha(pick(go, s, 1.0), pick(go, q * q, 0.0), a, b, go)
        best, value = pick(go, x, _INF), pick(go, v, 0.0)
    of = alpha * sc2
    current = pick(inside, gamma_log_prior(pick(inside, of, 1.0), a, b)
                   - delete_gain(s, q, pick(inside, of, 1.0)), 0.0)
    keep = value > 0
    return pick(keep, value - current, -current), pick(keep, best / sc2, _INF), keep


def scalar_gains(S, Q, act, alpha, blocked):
    """Every candidate's change in log evidence for its only possible action (Tipping & Faul 2003).

    A relevant candidate outside the model (:func:`relevant`) is *added*
    (:func:`add_gain`, :func:`add_alpha`); a basis in the model is
    *re-estimated* or *deleted* (:func:`member_gains`).

    Parameters
    ----------
    S, Q : ndarray of shape (M,)
        Sparsity and quality factors with the current model.
    act : ndarray of int, shape (k,)
        Candidates in the model, in the order of ``alpha``.
    alpha : ndarray of shape (k,)
    blocked : ndarray of bool, shape (M,)
        Candidates that may not be added.

    Returns
    -------
    ad : ndarray of int
        Addable candidates, ascending.
    gain_ad, alpha_ad : ndarray of shape (len(ad),)
    gain_a, new_a : ndarray of shape (k,)
        Gain and new ``alpha`` (``inf`` for a deletion) of each basis in the model.
    delete : ndarray of bool, shape (k,)
    """
    cand = relevant(S, Q)
    cand &= ~blocked
    cand[act] = False
    ad = cand.nonzero()[0]
    Sd, Qd = S[ad], Q[ad]
    gain_a, new_a, delete = member_gains(S[act], Q[act], alpha)
    return ad, add_gain(Sd, Qd), add_alpha(Sd, Qd), gain_a, new_a, delete


def top_candidates(idx, gains, n):
    """Return the ``n`` entries of ``idx`` with the largest ``gains``, best first.

    ``idx`` is ascending; equal gains are taken, and listed, in index order.
    """
    if idx.size > n:
        kth = np.partition(gains, idx.size - n)[idx.size - n]  # the n-th largest gain
        keep = gains > kth
        keep[(gains == kth).nonzero()[0][: n - np.count_nonzero(keep)]] = True
        idx, gains = idx[keep], gains[keep]
    return idx[np.argsort(-gains, kind="mergesort")]  # stable: idx stays ascending among ties


def prefer(act, alpha, gain_a, new_a, delete, best_add, add_gain_, add_alpha_, tol, min_gain):
    """Choose the best action, with SparseBayes's preferences, from every candidate's gain.

    A pending deletion wins over everything (the best deletion); otherwise
    the best re-estimation, unless the best addition (``best_add``, ``-1``
    for none, with its gain and ``alpha``) gains strictly more. The loop
    should stop when nothing gains, when the best action is a
    re-estimation changing ``log alpha`` by less than ``tol`` (and no
    deletion is pending), or when it is a re-estimation gaining less than
    ``min_gain``.

    Returns
    -------
    action : int
        ``ADD_CODE``, ``REESTIMATE_CODE`` or ``DELETE_CODE``.
    index : int
        The candidate (0 when there is nothing to do).
    new_alpha, gain : float
    terminate : bool
    """
    best, action, gain, new, old = -1, ADD_CODE, 0.0, _INF, _INF
    if delete.any():
        dk = delete.nonzero()[0]
        i = dk[gain_a[dk].argmax()]
        best, action, gain = act[i], DELETE_CODE, gain_a[i]
    else:
        if act.size:
            i = gain_a.argmax()
            best, action, gain, new, old = act[i], REESTIMATE_CODE, gain_a[i], new_a[i], alpha[i]
        if best_add >= 0 and (add_gain_ > gain or best < 0):
            best, action, gain, new = best_add, ADD_CODE, add_gain_, add_alpha_
    if best < 0:  # nothing in the model and nothing to add
        best = 0
    terminate = gain <= 0.0
    if action == REESTIMATE_CODE and (abs(np.log(new) - np.log(old)) < tol or gain < min_gain):
        terminate = True
    return action, best, new, gain, terminate


def noise_due(it, noise_from, terminate, warmup_max):
    """Whether iteration ``it`` re-estimates the noise, and when the schedule started.

    ``noise_from < 0`` is the warm-up: ``beta`` is held until the basis has
    converged (``terminate``) or for ``warmup_max`` iterations, then
    re-estimated on SparseBayes's schedule, counted from ``noise_from``:
    every iteration for ``BETA_UPDATE_START`` iterations, then every
    ``BETA_UPDATE_FREQUENCY``, and whenever the basis has converged.
    """
    if noise_from < 0:
        if terminate or it >= warmup_max:
            return True, it
        return False, noise_from
    k = it - noise_from
    return terminate or k <= BETA_UPDATE_START or k % BETA_UPDATE_FREQUENCY == 0, noise_from


def block_aligned(cos, j, blocker, in_model, limit=ALIGNMENT_MAX):
    """Block the candidates whose cosine ``cos`` with basis ``j`` exceeds ``limit``.

    SparseBayes's redundancy test (Tipping & Faul 2003; SparseBayes manual
    §5.4) skips a candidate that nearly duplicates a basis in the model.
    Blocking every such candidate as soon as ``j`` enters gives the same
    decisions (a blocked candidate can never be proposed) without spending
    an iteration on each skip. ``blocker[m]`` is the basis that blocks
    ``m`` (``-1``: none); returns the number of newly blocked candidates.
    ``limit`` is ``ALIGNMENT_MAX`` for the evidence fits.
    """
    new = np.flatnonzero(cos > limit)
    new = new[(blocker[new] < 0) & ~in_model[new]]
    blocker[new] = j
    return new.size


def release(j, blocker):
    """Release the candidates basis ``j`` blocked; returns them and ``j`` (to be re-checked)."""
    freed = np.flatnonzero(blocker == j)
    blocker[freed] = -1
    return np.append(freed, j)


def reblock(freed, cos, act, blocker, limit=ALIGNMENT_MAX):
    """Block each of ``freed`` again by the basis in the model it is most aligned with, if any.

    ``cos`` is ``(len(freed), k)``: cosines of the freed candidates with the
    ``k`` bases of the model ``act``.
    """
    for r in range(freed.size):
        if act.size == 0:
            break
        i = np.argmax(cos[r])
        if cos[r, i] > limit:
            blocker[freed[r]] = act[i]


def release_refused(blocker):
    """Candidates refused by :func:`climb` (``blocker == M``) become eligible again."""
    blocker[blocker == blocker.size] = -1


def unblock(model, j, blocker, limit):
    """Release the candidates ``j`` blocked, re-blocking those aligned with another basis."""
    freed = release(j, blocker)
    act = ops.active(model)
    if act.size:
        reblock(freed, ops.cosines(model, freed), act, blocker, limit)


# -- the loop, written once -------------------------------------------------------------

# Entries of the loop's counts (an int array): the three action codes, then these.
ALIGNED_COUNT, REFUSED_COUNT, CYCLING_COUNT = 3, 4, 5
N_COUNTS = 6


def climb(model, max_iter, tol, alignment_max, blocker, counts):
    """Run the loop of the fast sequential algorithm (Tipping & Faul 2003), on any backend.

    Each iteration takes the best action (``ops.choose``: every
    candidate's gain and :func:`prefer`), carries it out, keeps the
    candidates aligned with a basis in the model out (the alignment test),
    undoes an addition the exact objective does not confirm, and stops when
    nothing gains and the likelihood's own work after the step
    (``ops.after_step``) has not moved the model either.

    The likelihood is seen through ``ops``, as ``ops.name(model, ...)``.
    In Python, ``ops`` is :class:`_Ascent` and ``model`` an :class:`_Ascent`
    around a statistics object (:func:`ascend`); in the compiled engine,
    ``ops`` is the engine's namespace of compiled functions and ``model``
    its state (:func:`compiled`). The operations are

    - ``active(model)``, ``in_model(model)``: the candidates in the model
      (array, model order) and the boolean mask of them;
    - ``cosine(model, j)``: cosines of every candidate with basis ``j`` in
      the model; ``cosines(model, idx)``: of candidates ``idx`` with every
      basis in the model, ``(len(idx), k)``;
    - ``begin(model, it)``: the start of iteration ``it``;
    - ``choose(model, blocker, tol)``: ``(action, index, new alpha, gain,
      terminate)`` of :func:`prefer`, candidates with ``blocker >= 0``
      left out;
    - ``refreshed(model)``: whether the statistics had gone stale for the
      decision just taken and were re-found (it is then taken again);
    - ``stalled(model)``: whether the steps have stopped raising the
      objective (the model is then back at the best one seen);
    - ``known(model)``: the objective as known before a step;
      ``track(model, gain)``: the step's predicted gain is taken;
    - ``add(model, j, alpha)`` (returning ``cosine(model, j)``),
      ``reestimate(model, j, alpha)``, ``delete(model, j)``;
    - ``refuses(model, before)``: whether the exact objective after an
      addition is below ``before``; ``reload(model)`` after the addition
      is undone;
    - ``after_step(model, it, action, terminate)``: the likelihood's work
      once the step is taken; whether it moved the model;
    - ``failed(model)``: whether an operation failed (the compiled engine's
      factorisations), which ends the loop.

    Parameters
    ----------
    model : object
    max_iter : int
    tol : float
        Stop when the best action is a re-estimation changing ``log alpha`` by less than this.
    alignment_max : float
        Keep out candidates whose cosine with a basis in the model exceeds
        this (``ALIGNMENT_MAX`` for the evidence fits); ``inf``: no
        alignment test.
    blocker : ndarray of int, shape (M,)
        Candidate -> the basis that blocks it (``-1``: none; ``M``: a
        refused addition, until the next deletion); updated in place.
    counts : ndarray of int, shape (N_COUNTS,)
        Additions, re-estimations, deletions (by action code), newly
        blocked candidates, refused additions, and 1 if the loop stalled;
        updated in place.

    Returns
    -------
    n_iter : int
    converged : bool
    """
    M = blocker.size
    alignment_test = alignment_max < _INF
    if alignment_test:
        act = ops.active(model)
        for i in range(act.size):
            counts[ALIGNED_COUNT] += block_aligned(ops.cosine(model, act[i]), act[i], blocker,
                                                   ops.in_model(model), alignment_max)
    converged = False
    it = 0
    for it in range(1, max_iter + 1):
        ops.begin(model, it)
        action, j, new, gain, terminate = ops.choose(model, blocker, tol)
        if ops.refreshed(model):
            # The statistics had gone stale (Laplace with B frozen) and are
            # re-found: decide again.
            action, j, new, gain, terminate = ops.choose(model, blocker, tol)
        if not terminate and ops.stalled(model):
            # The steps cycle without raising the objective: stop at the best model seen.
            counts[CYCLING_COUNT] = 1
            converged = True
            break
        if not terminate:
            before = ops.known(model)
            if action == ADD_CODE:
                cos = ops.add(model, j, new)
                counts[ADD_CODE] += 1
                if alignment_test:
                    counts[ALIGNED_COUNT] += block_aligned(cos, j, blocker, ops.in_model(model),
                                                           alignment_max)
            elif action == REESTIMATE_CODE:
                ops.reestimate(model, j, new)
                counts[REESTIMATE_CODE] += 1
            else:
                ops.delete(model, j)
                counts[DELETE_CODE] += 1
                # Candidates blocked by the deleted basis become eligible again,
                # and so do refused ones: the span of the model has shrunk.
                if alignment_test:
                    unblock(model, j, blocker, alignment_max)
                release_refused(blocker)
            ops.track(model, gain)
            if action == ADD_CODE and ops.refuses(model, before):
                # An addition is chosen for the gain its statistics predict
                # (Tipping & Faul 2003, eq. 27); where the candidate nearly
                # lies in the span of the model the exact objective can
                # disagree. Undo it and keep the candidate out until the
                # next deletion, which shrinks the span.
                ops.delete(model, j)
                if alignment_test:
                    unblock(model, j, blocker, alignment_max)
                blocker[j] = M
                ops.reload(model)
                counts[REFUSED_COUNT] += 1
        moved = ops.after_step(model, it, action, terminate)
        if ops.failed(model):
            break
        if terminate and not moved:
            converged = True
            break
    return it, converged


_SHARED = ("relevant", "add_gain", "add_alpha", "left_out", "reestimate_alpha", "reestimate_gain",
           "delete_gain", "member_gains", "gamma_log_prior", "gamma_log_prior_terms", "cubic",
           "rounding", "falling_root", "penalised_x_value", "penalised_alpha", "prior_peak",
           "gain_bound", "may_gain", "beaten", "prior_gain",
           "prefer", "noise_due", "block_aligned", "release", "reblock", "release_refused")
_LOOP = ("unblock", "climb")  # what calls ``ops``


def compiled(jit, ops=None, numpy=np):
    """Compile the decision functions with ``jit`` (e.g. ``numba.njit(cache=True)``), by name.

    Each is compiled from this module's code object, with globals in which
    the shared names are the compiled versions: the compiled backend runs
    the same source as the Python loop, not a copy. The compiled functions
    take scalars where the Python loop passes arrays; :func:`pick`, the one
    element-wise choice, becomes a branch. With ``ops`` (a module
    whose attributes are the compiled operations of :func:`climb` on one
    backend's state), :func:`unblock` and :func:`climb` are compiled too,
    calling them; Numba resolves the names when a function is first
    compiled, so ``ops`` may be filled in after this call. ``numpy`` is the
    namespace the functions see as ``np`` (:data:`SCALAR_NUMPY` for the
    Python loop's versions on scalars, with ``jit`` the identity).
    """
    g = dict(globals())
    g["np"] = numpy
    g["pick"] = jit(_pick_scalar)
    if ops is not None:
        g["ops"] = ops
    out = {}
    for name in _SHARED + (_LOOP if ops is not None else ()):
        f = globals()[name]
        clone = types.FunctionType(f.__code__, g, name, f.__defaults__, f.__closure__)
        clone.__qualname__ = f.__qualname__
        clone.__module__ = f.__module__
        clone.__doc__ = f.__doc__
        out[name] = jit(clone)
        g[name] = out[name]
    return out


def _minimum(x, y):
    """:func:`numpy.minimum` of two scalars, in Python where the order is plain."""
    return x if x < y else (y if (y < x or y != y) else np.minimum(x, y))


def _maximum(x, y):
    """:func:`numpy.maximum` of two scalars, in Python where the order is plain."""
    return x if x > y else (y if (y > x or y != y) else np.maximum(x, y))


# NumPy for the decision functions on one value in Python: ``any`` and ``all``
# of one truth value are that value, and ``abs``, ``minimum``, ``maximum`` of
# scalars need no array machinery. Each gives what NumPy gives, bit for bit
# (NaN included); everything else is NumPy's.
SCALAR_NUMPY = types.SimpleNamespace(**vars(np))
SCALAR_NUMPY.any = SCALAR_NUMPY.all = bool
SCALAR_NUMPY.abs, SCALAR_NUMPY.minimum, SCALAR_NUMPY.maximum = abs, _minimum, _maximum


# -- the Python loop ------------------------------------------------------------------


@dataclass
class Decision:
    """One step of the fast sequential algorithm: what to do to which basis."""

    action: str  # ADD, REESTIMATE or DELETE
    index: int  # basis index
    new_alpha: float  # its new alpha (inf for a deletion)
    gain: float  # predicted change in the log evidence
    terminate: bool  # no step is worth taking
    add_order: np.ndarray  # addable candidates, best first (for prefetching)


def decision(action, index, new_alpha, gain, terminate, add_order):
    """Return a :class:`Decision` from the tuple of :func:`prefer`."""
    return Decision(ACTIONS[int(action)], int(index), float(new_alpha), float(gain),
                    bool(terminate), add_order)


def as_mask(blocked, M):
    """Return a boolean mask of shape (M,) from a mask or a collection of indices."""
    if isinstance(blocked, np.ndarray) and blocked.dtype == bool:
        return blocked
    mask = np.zeros(M, dtype=bool)
    if len(blocked):
        mask[list(blocked)] = True
    return mask


def ascend(model, *, max_iter, tol, alignment_test, alignment_max=ALIGNMENT_MAX, callback=None,
           report=None, it0=0, min_gain=None, stall=None, warn_not_converged=None,
           progress=None):
    """One ascent of the fast sequential algorithm over a statistics object.

    :func:`climb` owns the decisions; ``model`` (one class per likelihood)
    provides the statistics and carries out the actions. It has

    - ``M`` (number of candidates), ``act_idx`` (candidates in the model,
      an array in model order), ``alpha`` (their precisions), ``in_model``
      (boolean mask), ``logml`` (the objective as known) and ``n_exact``
      (how many times the objective has been evaluated exactly);
    - ``gains(blocked)``: the tuple of :func:`scalar_gains`, every
      candidate's change in the objective for its only possible action,
      from the model's statistics ``S, Q`` (or a group's ``s, q``);
    - ``add(m, alpha_m, add_order)`` (returning the cosines of every
      candidate with ``m``, for the alignment test), ``reestimate(m,
      alpha_m)``, ``delete(m)``, and ``cosine(j)`` / ``cosines(idx)`` for
      a basis already in the model;
    - ``tracks_gain``: whether the known objective moves by each step's
      predicted gain (exact rank-one updates) or only when re-found;
      ``penalty()``: the hyperprior terms of the objective;
    - ``objective()``: the exact objective after an addition, against which
      the addition is checked (None: additions are not checked), and
      ``reload()`` after an addition is undone;
    - ``refresh_before(d)`` / ``refresh()``: whether the statistics must be
      re-found before decision ``d`` is taken (Laplace with ``B`` frozen),
      and re-finding them;
    - ``after_step(it, d)``: what the likelihood does once the step is
      taken (Gaussian: the noise schedule, drift checks and the polish;
      Laplace: a new mode); returns whether the model moved when ``d``
      would stop the loop;
    - ``snapshot()`` / ``restore(s)`` with ``stall``.

    Parameters
    ----------
    max_iter : int
    tol : float
        Stop when the best action is a re-estimation changing ``log alpha`` by less than this.
    alignment_test : bool
        Keep out candidates whose cosine with a basis in the model exceeds ``alignment_max``.
    alignment_max : float
        The alignment test's threshold: ``ALIGNMENT_MAX`` for the evidence fits.
    callback : callable, optional
        ``callback(iteration, action, index, objective)`` after every step that changed the model.
    report : callable, optional
        ``report(iteration, n_active, objective)`` at the end of every iteration.
    progress : callable, optional
        The same at the start of every iteration (the state the step starts from).
    it0 : int
        Iterations of earlier ascents (for ``report``).
    min_gain : callable, optional
        ``min_gain(model)``: a re-estimation gaining less counts as convergence.
    stall : tuple (iterations, gain), optional
        Stop at the best model seen when the exact objective has not risen
        by more than ``gain`` in ``iterations`` evaluations (the Laplace
        steps can cycle: module docstring of :mod:`rvm_ppl.closed_form.bernoulli`).
    warn_not_converged : callable, optional
        Called with ``max_iter`` when it is reached.

    Returns
    -------
    dict
        ``n_iter``, ``converged``, ``counts`` (actions, ``"aligned"``: newly
        blocked candidates, ``"refused"``, ``"cycling"``), ``blocker``
        (candidate -> blocking basis; ``M``: refused; ``-1``: none) and
        ``aligned`` (the blocked candidates at the end), ``gains`` (the
        predicted gain of every step taken).
    """
    M = model.M
    blocker = np.full(M, -1)
    counts = np.zeros(N_COUNTS, dtype=int)
    run = _Ascent(model, callback=callback, report=report, progress=progress, it0=it0,
                 min_gain=min_gain, stall=stall)
    it, converged = climb(run, max_iter, tol, alignment_max if alignment_test else _INF, blocker,
                          counts)
    if not converged and warn_not_converged is not None:
        warn_not_converged(max_iter)
    named = {ADD: counts[ADD_CODE], REESTIMATE: counts[REESTIMATE_CODE],
             DELETE: counts[DELETE_CODE], "aligned": counts[ALIGNED_COUNT],
             "refused": counts[REFUSED_COUNT]}
    if counts[CYCLING_COUNT]:
        named["cycling"] = 1
    aligned = np.flatnonzero((blocker >= 0) & (blocker < M))
    return dict(n_iter=it, converged=converged, counts={k: int(v) for k, v in named.items()},
                blocker=blocker, aligned=aligned, gains=np.asarray(run.gains))


class _Ascent:
    """The operations of :func:`climb` on a statistics object (:func:`ascend`), in Python.

    Besides the statistics, it holds what only the Python loop offers: the
    ``callback``, ``report`` and ``progress`` calls, ``min_gain``, the
    hyperprior terms of the objective (``penalty``), re-finding stale
    statistics (``refresh_before``) and the ``stall`` guard, with the same
    meaning as in :func:`ascend`. :func:`climb` calls the methods unbound,
    ``ops.name(model, ...)`` with ``ops = _Ascent``.
    """

    def __init__(self, model, *, callback=None, report=None, progress=None, it0=0, min_gain=None,
                 stall=None):
        self.model, self.callback, self.report, self.progress = model, callback, report, progress
        self.it0, self.min_gain, self.stall = it0, min_gain, stall
        self.d = None  # the decision being taken
        self.pen0 = 0.0  # the hyperprior terms before the step
        self.gains = []  # the predicted gain of every step taken
        self.seen = {"best": model.logml + model.penalty(),
                     "state": model.snapshot() if stall else None, "since": 0, "n": model.n_exact}

    def note(self):
        """Keep the stall guard's books on every new exact value of the penalised objective."""
        model, seen = self.model, self.seen
        if self.stall is None or model.n_exact == seen["n"]:
            return
        seen["n"] = model.n_exact
        value = model.logml + model.penalty()
        if value > seen["best"] + self.stall[1]:
            seen.update(best=value, state=model.snapshot(), since=0)
        else:
            seen["since"] += 1

    def active(self):
        return self.model.act_idx

    def in_model(self):
        return self.model.in_model

    def cosine(self, j):
        return self.model.cosine(j)

    def cosines(self, idx):
        return self.model.cosines(idx)

    def begin(self, it):
        if self.progress is not None:
            self.progress(self.it0 + it, self.model.act_idx.size, self.model.logml)

    def choose(self, blocker, tol):
        d = self.d = _decide(self.model, blocker >= 0, tol, self.min_gain)
        return ACTIONS.index(d.action), d.index, d.new_alpha, d.gain, d.terminate

    def refreshed(self):
        if not self.model.refresh_before(self.d):
            return False
        self.model.refresh()
        self.note()
        return True

    def stalled(self):
        if self.stall is None or self.seen["since"] < self.stall[0]:
            return False
        self.model.restore(self.seen["state"])
        return True

    def known(self):
        self.pen0 = self.model.penalty()
        return self.model.logml + self.pen0

    def track(self, gain):
        self.gains.append(gain)
        if self.model.tracks_gain:
            # The gain is the change in the objective; keep only its evidence part.
            self.model.logml += gain - (self.model.penalty() - self.pen0)

    def add(self, j, alpha):
        return self.model.add(j, alpha, self.d.add_order)

    def reestimate(self, j, alpha):
        self.model.reestimate(j, alpha)

    def delete(self, j):
        self.model.delete(j)

    def refuses(self, before):
        exact = self.model.objective()
        return exact is not None and exact < before

    def reload(self):
        self.model.reload()

    def after_step(self, it, action, terminate):
        moved = self.model.after_step(it, self.d)
        self.note()
        if (not terminate or moved) and self.callback is not None:
            action = self.d.action if not terminate else "noise"
            self.callback(it, action, self.d.index, self.model.logml)
        if self.report is not None:
            self.report(self.it0 + it, self.model.act_idx.size, self.model.logml)
        return moved

    def failed(self):
        return False


ops = _Ascent  # the operations climb calls; compiled() binds a backend's own


def _decide(model, blocked, tol, min_gain):
    return decide(model.act_idx, model.alpha, model.gains(blocked), tol,
                  0.0 if min_gain is None else min_gain(model))


def decide(act, alpha, gains, tol, min_gain=0.0):
    """Return a :class:`Decision` from :func:`scalar_gains` (or a likelihood's equivalent).

    ``gains`` may carry a seventh entry, the add order of the decision (the
    candidates best first, as :func:`top_candidates`); without it the order
    is that of the addable candidates' gains.
    """
    ad, gain_ad, alpha_ad, gain_a, new_a, delete = gains[:6]
    p = int(gain_ad.argmax()) if ad.size else -1  # the first best: the lowest index among ties
    d = prefer(act, alpha, gain_a, new_a, delete, ad[p] if ad.size else -1,
               gain_ad[p] if ad.size else 0.0, alpha_ad[p] if ad.size else 0.0, tol, min_gain)
    return decision(*d, gains[6] if len(gains) > 6 else top_candidates(ad, gain_ad, ADD_ORDER))
