"""The sequential driver: the decisions of Tipping & Faul's (2003) fast evidence maximisation.

Every likelihood (Gaussian, Bernoulli, categorical) is fitted by the same
loop: compute every candidate's change in the objective for its only
possible action (add, re-estimate or delete), take the best with
SparseBayes's preferences (a pending deletion wins), keep candidates that
duplicate a basis in the model out (the alignment test), undo an addition
the exact objective does not confirm, and stop when nothing gains. The
likelihood is seen only through a small statistics interface (the class
docstring of :func:`ascend`).

The decision functions below (the gains :func:`relevant`,
:func:`add_gain`, :func:`add_alpha`, :func:`left_out`,
:func:`reestimate_alpha`, :func:`reestimate_gain`, :func:`delete_gain`,
:func:`member_gains`; the choice
:func:`prefer`; the noise schedule :func:`noise_due`; the alignment test
:func:`block_aligned`, :func:`release`, :func:`reblock`,
:func:`release_refused`) are plain NumPy functions written so that Numba
compiles them unchanged: the Python loop calls them directly and the
compiled Gaussian backend (:mod:`rvm_ppl.closed_form.engine`) calls
``numba.njit`` versions of the same functions (:func:`compiled`), so both
backends take their decisions from one source. The element-wise formulas
take scalars or arrays: the Python loop applies them to the arrays of all
candidates at once, the compiled one in a single pass over the candidates.
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
_INF = np.inf


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


def block_aligned(cos, j, blocker, in_model):
    """Block the candidates whose cosine ``cos`` with basis ``j`` exceeds ``ALIGNMENT_MAX``.

    SparseBayes's redundancy test (Tipping & Faul 2003; SparseBayes manual
    §5.4) skips a candidate that nearly duplicates a basis in the model.
    Blocking every such candidate as soon as ``j`` enters gives the same
    decisions (a blocked candidate can never be proposed) without spending
    an iteration on each skip. ``blocker[m]`` is the basis that blocks
    ``m`` (``-1``: none); returns the number of newly blocked candidates.
    """
    new = np.flatnonzero(cos > ALIGNMENT_MAX)
    new = new[(blocker[new] < 0) & ~in_model[new]]
    blocker[new] = j
    return new.size


def release(j, blocker):
    """Release the candidates basis ``j`` blocked; returns them and ``j`` (to be re-checked)."""
    freed = np.flatnonzero(blocker == j)
    blocker[freed] = -1
    return np.append(freed, j)


def reblock(freed, cos, act, blocker):
    """Block each of ``freed`` again by the basis in the model it is most aligned with, if any.

    ``cos`` is ``(len(freed), k)``: cosines of the freed candidates with the
    ``k`` bases of the model ``act``.
    """
    for r in range(freed.size):
        if act.size == 0:
            break
        i = np.argmax(cos[r])
        if cos[r, i] > ALIGNMENT_MAX:
            blocker[freed[r]] = act[i]


def release_refused(blocker):
    """Candidates refused by :func:`ascend` (``blocker == M``) become eligible again."""
    blocker[blocker == blocker.size] = -1


_SHARED = ("relevant", "add_gain", "add_alpha", "left_out", "reestimate_alpha", "reestimate_gain",
           "delete_gain", "member_gains", "prefer", "noise_due", "block_aligned", "release",
           "reblock", "release_refused")


def compiled(jit):
    """Compile the decision functions with ``jit`` (e.g. ``numba.njit(cache=True)``), by name.

    Each is compiled from this module's code object, with globals in which
    the shared names are the compiled versions: the compiled backend runs
    the same source as the Python loop, not a copy.
    """
    g = dict(globals())
    out = {}
    for name in _SHARED:
        f = globals()[name]
        clone = types.FunctionType(f.__code__, g, name, f.__defaults__, f.__closure__)
        clone.__qualname__ = f.__qualname__
        clone.__module__ = f.__module__
        clone.__doc__ = f.__doc__
        out[name] = jit(clone)
        g[name] = out[name]
    return out


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


def ascend(model, *, max_iter, tol, alignment_test, callback=None, report=None, it0=0,
           min_gain=None, stall=None, warn_not_converged=None, progress=None):
    """One ascent of the fast sequential algorithm over a statistics object.

    The loop owns the decisions; ``model`` (one class per likelihood)
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
        Keep out candidates whose cosine with a basis in the model exceeds ``ALIGNMENT_MAX``.
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
    counts = {ADD: 0, REESTIMATE: 0, DELETE: 0, "aligned": 0, "refused": 0}
    if alignment_test:
        for j in model.act_idx.tolist():
            counts["aligned"] += block_aligned(model.cosine(j), j, blocker, model.in_model)
    seen = {"best": model.logml, "state": model.snapshot() if stall else None, "since": 0,
            "n": model.n_exact}

    def note():
        """Stall bookkeeping on every new exact value of the objective."""
        if stall is None or model.n_exact == seen["n"]:
            return
        seen["n"] = model.n_exact
        if model.logml > seen["best"] + stall[1]:
            seen.update(best=model.logml, state=model.snapshot(), since=0)
        else:
            seen["since"] += 1

    gains = []  # the predicted gain of every step taken
    converged, it = False, 0
    for it in range(1, max_iter + 1):
        if progress is not None:
            progress(it0 + it, model.act_idx.size, model.logml)
        d = _decide(model, blocker >= 0, tol, min_gain)
        if model.refresh_before(d):
            # The statistics have gone stale (Laplace with B frozen): re-find
            # them and decide again.
            model.refresh()
            note()
            d = _decide(model, blocker >= 0, tol, min_gain)
        if stall is not None and not d.terminate and seen["since"] >= stall[0]:
            # The steps cycle without raising the objective: stop at the best model seen.
            model.restore(seen["state"])
            counts["cycling"] = 1
            converged = True
            break
        if not d.terminate:
            j = d.index
            gains.append(d.gain)
            pen0 = model.penalty()
            before = model.logml + pen0
            if d.action == ADD:
                cos = model.add(j, d.new_alpha, d.add_order)
                counts[ADD] += 1
                if alignment_test:
                    counts["aligned"] += block_aligned(cos, j, blocker, model.in_model)
            elif d.action == REESTIMATE:
                model.reestimate(j, d.new_alpha)
                counts[REESTIMATE] += 1
            else:
                model.delete(j)
                counts[DELETE] += 1
                # Candidates blocked by the deleted basis become eligible again,
                # and so do refused ones: the span of the model has shrunk.
                if alignment_test:
                    _unblock(model, j, blocker)
                release_refused(blocker)
            if model.tracks_gain:
                # The gain is the change in the objective; keep only its evidence part.
                model.logml += d.gain - (model.penalty() - pen0)
            if d.action == ADD:
                exact = model.objective()
                if exact is not None and exact < before:
                    # An addition is chosen for the gain its statistics predict
                    # (Tipping & Faul 2003, eq. 27); where the candidate nearly
                    # lies in the span of the model the exact objective can
                    # disagree. Undo it and keep the candidate out until the
                    # next deletion, which shrinks the span.
                    model.delete(j)
                    if alignment_test:
                        _unblock(model, j, blocker)
                    blocker[j] = M
                    model.reload()
                    counts["refused"] += 1
        moved = model.after_step(it, d)
        note()
        if (not d.terminate or moved) and callback is not None:
            callback(it, d.action if not d.terminate else "noise", d.index, model.logml)
        if report is not None:
            report(it0 + it, model.act_idx.size, model.logml)
        if d.terminate and not moved:
            converged = True
            break
    else:
        if warn_not_converged is not None:
            warn_not_converged(max_iter)
    aligned = np.flatnonzero((blocker >= 0) & (blocker < M))
    return dict(n_iter=it, converged=converged, counts=counts, blocker=blocker, aligned=aligned,
                gains=np.asarray(gains))


def _decide(model, blocked, tol, min_gain):
    return decide(model.act_idx, model.alpha, model.gains(blocked), tol,
                  0.0 if min_gain is None else min_gain(model))


def decide(act, alpha, gains, tol, min_gain=0.0):
    """Return a :class:`Decision` from :func:`scalar_gains` (or a likelihood's equivalent)."""
    ad, gain_ad, alpha_ad, gain_a, new_a, delete = gains
    p = int(gain_ad.argmax()) if ad.size else -1  # the first best: the lowest index among ties
    d = prefer(act, alpha, gain_a, new_a, delete, ad[p] if ad.size else -1,
               gain_ad[p] if ad.size else 0.0, alpha_ad[p] if ad.size else 0.0, tol, min_gain)
    return decision(*d, top_candidates(ad, gain_ad, ADD_ORDER))


def _unblock(model, j, blocker):
    """Release the candidates ``j`` blocked, re-blocking those aligned with another basis."""
    freed = release(j, blocker)
    if model.act_idx.size:
        reblock(freed, model.cosines(freed), model.act_idx, blocker)
