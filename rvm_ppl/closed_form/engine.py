"""One ascent of the fast sequential evidence maximisation, compiled (Numba).

The Gaussian statistics of :class:`rvm_ppl.closed_form.evidence._Model` (the
rank-one updates of Tipping & Faul 2003, Appendix A, the drift check, the
noise update and the Newton polish) on an explicit design matrix, for the
plain evidence and for the penalised objective of Gamma hyperpriors
(Tipping 2001, eq. 36: ``a, b, c, d`` are scalar arguments of the one
compiled :func:`ascent`, zero for none; the gains are the driver's
``prior_gain``, the noise update eq. (46)'s). Its loop and its decisions are the
sequential driver's: :func:`rvm_ppl.closed_form.driver.climb` (the choice,
the step, the alignment test, the refusal of an addition the exact evidence
does not confirm, the stopping rule) and the functions it calls are compiled
from the driver's own code (``driver.compiled``), not copied; what the
engine supplies are the operations ``climb`` asks of the likelihood,
compiled functions of the engine's state (``_OPS``), where the Python loop
has the methods of :class:`rvm_ppl.closed_form.evidence._Model`. What the
engine removes is the interpreter: the Python loop spends most of its time
per iteration on calls into NumPy for vectors of a few hundred entries,
which up to N = 1000 is most of a fit (the docs' Benchmarks, "Speed
(evidence method)", has the times).

The design matrix is materialised (``N x M``, C order; the engine divides
by the column norms itself), so the engine serves small and mid-sized
problems (``rvm_ppl.closed_form.evidence.ENGINE_MAX_ENTRIES``); the cross products
``Phi~^T phi~_j`` of unit-norm columns are computed as basis functions
enter. Matrices in the model are ``k x k`` for the ``k`` basis functions in
it (tens, or hundreds for wide kernels) and are factorised without jitter
(a plain loop for small ``k``, LAPACK from ``_LAPACK_MIN_N`` on); a
factorisation that fails (a numerically singular posterior precision)
returns :data:`FAILED` and the caller reruns the climb in Python, under the
jitter policy of :func:`rvm_ppl.core.linalg.cholesky_jittered`.

The first call on a machine compiles the engine and caches the machine code
on disk (``cache=True``), keyed on this module's, the driver's and the
constants' source files (``_EngineCacheLocator``: the machine code holds all
three). The locator is a subclass of Numba's private ``_CacheLocator``,
registered in ``CacheImpl._locator_classes``; with a Numba that has neither,
the engine is compiled in every process and nothing is kept on disk (the
same machine code, so the same numbers: ``tests/test_evidence_engine.py``),
rather than kept under a key of this file alone. The first call in a later
process loads it with
Numba's runtime, which costs more than a whole small fit in Python: that is
why problems of at most ``ENGINE_MIN_ENTRIES`` entries always run in Python
(:func:`rvm_ppl.closed_form.evidence.fit_evidence_regression`, ``compiled``;
the documentation's "Defaults and why" gives the times).
"""

from __future__ import annotations

import os
import types
from collections import namedtuple

import numpy as np
from numba import njit as _numba_njit

from rvm_ppl.closed_form import constants as _ev
from rvm_ppl.closed_form import driver as _driver

OK, FAILED = 0, 1
_ZERO_FACTOR = _ev.ZERO_FACTOR
ADD, REESTIMATE, DELETE = _driver.ADD_CODE, _driver.REESTIMATE_CODE, _driver.DELETE_CODE
COUNT_KEYS = (_ev.ADD, _ev.REESTIMATE, _ev.DELETE, "noise", "aligned", "refresh", "polish", "refused")

# The engine's machine code holds the driver's decision functions and the constants,
# compiled into its loop; Numba keys a cached function on its own source file only, so an
# edit to driver.py or constants.py alone would leave the cached loop of engine.py stale.
# Every function compiled from these files is keyed on all three.
_SOURCES = tuple(os.path.abspath(m.__file__) for m in (_driver, _ev)) + (os.path.abspath(__file__),)


def _engine_locator():
    """Numba's cache locator for the engine's functions, registered first; None without one.

    A subclass of Numba's private ``numba.core.caching._CacheLocator``, put
    at the head of ``CacheImpl._locator_classes``: None where Numba has
    neither (the engine is then compiled in each process, :func:`njit`).
    """
    try:
        from numba.core.caching import CacheImpl, _CacheLocator

        locators = CacheImpl._locator_classes
    except (ImportError, AttributeError):
        return None

    class _EngineCacheLocator(_CacheLocator):
        """Numba's own locator for a function of the engine's sources, stamped with all of them."""

        def __init__(self, base):
            self._base = base

        def ensure_cache_path(self):
            self._base.ensure_cache_path()

        def get_cache_path(self):
            return self._base.get_cache_path()

        def get_disambiguator(self):
            return self._base.get_disambiguator()

        def get_source_stamp(self):
            stats = [os.stat(path) for path in _SOURCES]
            return tuple((st.st_mtime, st.st_size) for st in stats)

        @classmethod
        def from_function(cls, py_func, py_file):
            if os.path.abspath(py_file) not in _SOURCES:
                return None
            for other in locators:
                base = None if other is cls else other.from_function(py_func, py_file)
                if base is not None:
                    return cls(base)
            return None

    locators.insert(0, _EngineCacheLocator)
    return _EngineCacheLocator


_EngineCacheLocator = _engine_locator()


def njit(**options):
    """``numba.njit(**options)``, with ``cache`` only where :data:`_EngineCacheLocator` keys it."""
    cache = options.pop("cache", False) and _EngineCacheLocator is not None
    return _numba_njit(cache=cache, **options)


# Constants are frozen into the compiled code.
_MIN_DELTA_LOG_BETA = _ev.MIN_DELTA_LOG_BETA
_INIT_ALPHA_MAX = _ev.INIT_ALPHA_MAX
_NOISE_WARMUP_MAX = _ev.NOISE_WARMUP_MAX
_DRIFT_TOL = _ev.DRIFT_TOL
_DRIFT_SAMPLE = _ev.DRIFT_SAMPLE
_POLISH_AFTER = _ev.POLISH_AFTER
_POLISH_STEPS = _ev.POLISH_STEPS
_POLISH_MAX_STEP = _ev.POLISH_MAX_STEP
_POLISH_GAIN = _ev.POLISH_GAIN
_ALIGNMENT_MAX = _ev.ALIGNMENT_MAX
# The decisions and the loop, compiled from the sequential driver's source
# (rvm_ppl.closed_form.driver); the loop calls the operations of _OPS, filled in below.
_OPS = types.ModuleType("rvm_ppl.closed_form.engine.ops")
_decisions = _driver.compiled(njit(cache=True, error_model="numpy"), ops=_OPS)
_relevant = _decisions["relevant"]
_add_gain = _decisions["add_gain"]
_add_alpha = _decisions["add_alpha"]
_left_out = _decisions["left_out"]
_reestimate_alpha = _decisions["reestimate_alpha"]
_reestimate_gain = _decisions["reestimate_gain"]
_delete_gain = _decisions["delete_gain"]
_prefer = _decisions["prefer"]
_noise_due = _decisions["noise_due"]
_gamma_log_prior = _decisions["gamma_log_prior"]
_gamma_log_prior_terms = _decisions["gamma_log_prior_terms"]
_penalised_alpha = _decisions["penalised_alpha"]
_prior_gain = _decisions["prior_gain"]
_gain_bound = _decisions["gain_bound"]
_beaten = _decisions["beaten"]
_climb = _decisions["climb"]
_LAPACK_MIN_N = 32  # model size from which factors and products come from LAPACK and BLAS
_TINY = np.finfo(float).tiny
_LOG_2PI = np.log(2 * np.pi)


@njit(cache=True, error_model="numpy")
def _cross(Phi, scale, j, out):
    """``out = Phi~^T phi~_j`` on unit-norm columns ``phi~ = phi / scale``, ``Phi`` in C order.

    Row by row (``out += Phi[n] Phi[n, j]``): contiguous, and no reduction
    the compiler would have to reorder to vectorise.
    """
    N, M = Phi.shape
    out[:] = 0.0
    for n in range(N):
        a = Phi[n, j]
        for m in range(M):
            out[m] += a * Phi[n, m]
    for m in range(M):
        out[m] /= scale[m] * scale[j]


@njit(cache=True, error_model="numpy")
def _cholesky(H):
    """Lower Cholesky factor of a symmetric ``H``, ok flag (False if not positive definite).

    LAPACK's ``potrf`` (through Numba) from ``_LAPACK_MIN_N`` rows on, where
    it is faster than the loop; below, the call's overhead dominates and the
    loop is as fast or faster ("Defaults and why").
    """
    n = H.shape[0]
    if n >= _LAPACK_MIN_N:
        try:
            L = np.linalg.cholesky(H)
        except Exception:  # not positive definite
            return np.zeros((n, n)), False
        for i in range(n):  # potrf passes NaN through; a NaN in H reaches the diagonal
            if not np.isfinite(L[i, i]):
                return L, False
        return L, True
    # Cholesky-Banachiewicz, row by row.
    L = np.zeros((n, n))
    for i in range(n):
        for j in range(i + 1):
            s = H[i, j]
            for p in range(j):
                s -= L[i, p] * L[j, p]
            if i == j:
                if not s > 0.0 or not np.isfinite(s):
                    return L, False
                L[i, i] = np.sqrt(s)
            else:
                L[i, j] = s / L[j, j]
    return L, True


@njit(cache=True, error_model="numpy")
def _cho_solve(L, b):
    """Solve ``(L L^T) x = b`` by forward and back substitution."""
    n = L.shape[0]
    z = np.empty(n)
    for i in range(n):
        s = b[i]
        for p in range(i):
            s -= L[i, p] * z[p]
        z[i] = s / L[i, i]
    x = np.empty(n)
    for i in range(n - 1, -1, -1):
        s = z[i]
        for p in range(i + 1, n):
            s -= L[p, i] * x[p]
        x[i] = s / L[i, i]
    return x


@njit(cache=True, error_model="numpy")
def _factor(GT, act, k, alpha, beta):
    """Lower Cholesky factor of ``beta Phi_A^T Phi_A + A`` (Tipping 2001, eq. 12), ok flag."""
    H = np.empty((k, k))
    for i in range(k):
        for j in range(k):
            H[i, j] = beta * GT[j, act[i]]
        H[i, i] += alpha[i]
    return _cholesky(H)


@njit(cache=True, error_model="numpy")
def _covariance(L, Sigma):
    """``Sigma = L^{-T} L^{-1}`` into the leading block of ``Sigma``; returns ``log|H|``.

    ``L^{-1}`` by forward substitution on the identity, a row at a time
    (contiguous row updates), and the product by BLAS from
    ``_LAPACK_MIN_N`` rows on.
    """
    k = L.shape[0]
    Linv = np.zeros((k, k))
    logdet = 0.0
    for i in range(k):  # row i of L^{-1}: (e_i - sum_{p<i} L[i, p] Linv[p]) / L[i, i]
        logdet += 2.0 * np.log(L[i, i])
        row = Linv[i]
        for p in range(i):
            lip, prow = L[i, p], Linv[p]
            for j in range(p + 1):
                row[j] -= lip * prow[j]
        row[i] += 1.0
        inv = 1.0 / L[i, i]
        for j in range(i + 1):
            row[j] *= inv
    if k >= _LAPACK_MIN_N:
        Sigma[:k, :k] = np.dot(Linv.T, Linv)
        return logdet
    for i in range(k):  # below it a BLAS call costs more than the loop
        for j in range(i, k):
            s = 0.0
            for p in range(j, k):
                s += Linv[p, i] * Linv[p, j]
            Sigma[i, j] = s
            Sigma[j, i] = s
    return logdet


@njit(cache=True, error_model="numpy")
def _whiten(L, B, mu, sq, gm):
    """``B <- L^{-1} B`` for the ``k x n`` cross products ``B = Phi_A^T Phi_idx``.

    Forward substitution a row at a time, so that the inner loops run over
    contiguous columns; adds each column's ``||L^{-1} g||^2`` to ``sq`` and
    ``g^T mu`` to ``gm`` (Tipping & Faul 2003, eqs. 22-23).
    """
    k, n = B.shape
    for i in range(k):
        Bi, lii, mi = B[i], L[i, i], mu[i]
        for c in range(n):  # B[i] still holds g_i
            gm[c] += Bi[c] * mi
        for p in range(i):
            lip, Bp = L[i, p], B[p]
            for c in range(n):
                Bi[c] -= lip * Bp[c]
        for c in range(n):
            Bi[c] /= lii
            sq[c] += Bi[c] * Bi[c]


@njit(cache=True, error_model="numpy")
def _statistics(Phi, scale, t, proj, GT, act, k, alpha, beta, Sigma, mu, S, Q, factors):
    """Recompute ``Sigma, mu`` (and ``S, Q`` with ``factors``) from scratch.

    Returns ``(ok, ED, log evidence)``; Tipping (2001), eqs. (12), (13) and
    (15) through the Cholesky factor; ``S_m = beta - beta^2 g_m^T Sigma g_m``
    and ``Q_m = beta (phi_m^T t - g_m^T mu)`` with ``g_m = Phi_A^T phi_m``
    (Tipping & Faul 2003, eqs. 22-23).
    """
    N, M = Phi.shape
    logdet = 0.0
    L = np.empty((0, 0))
    if k:
        L, ok = _factor(GT, act, k, alpha, beta)
        if not ok:
            return False, 0.0, 0.0
        logdet = _covariance(L, Sigma)
        for i in range(k):
            s = 0.0
            for j in range(k):
                s += Sigma[i, j] * proj[act[j]]
            mu[i] = beta * s
    ED = 0.0
    for n in range(N):
        r = t[n]
        for j in range(k):
            r -= Phi[n, act[j]] * (mu[j] / scale[act[j]])
        ED += r * r
    if factors:
        if k:
            # ||L^{-1} g_m||^2 rather than g_m^T Sigma g_m: the explicit
            # covariance loses digits to the conditioning of H.
            sq, gm = np.zeros(M), np.zeros(M)
            _whiten(L, GT[:k].copy(), mu, sq, gm)
            for m in range(M):
                S[m] = beta - beta * beta * sq[m]
                Q[m] = beta * (proj[m] - gm[m])
        else:
            S[:] = beta
            Q[:] = beta * proj
    logml = N * np.log(beta) - beta * ED - logdet - N * _LOG_2PI
    for i in range(k):
        logml += np.log(alpha[i]) - alpha[i] * mu[i] * mu[i]
    return True, ED, 0.5 * logml


@njit(cache=True, error_model="numpy")
def _pin(act, k, alpha, Sigma, mu, S, Q):
    """``S, Q`` of the basis functions in the model from ``Sigma, mu`` (see ``_Model.pin_active``)."""
    for i in range(k):
        S[act[i]] = alpha[i] - alpha[i] * alpha[i] * Sigma[i, i]
        Q[act[i]] = alpha[i] * mu[i]


@njit(cache=True, error_model="numpy")
def _best_exact(S, Q, scale, a, b, m, best_add, best_gain, best_alpha):
    """The best addition so far, with candidate ``m``'s exact gain under the hyperprior.

    Ties go to the lower index, as :func:`rvm_ppl.closed_form.driver.decide`'s.
    """
    g, new, keep = _prior_gain(S[m], Q[m], np.inf, scale[m], a, b)
    if keep and (best_add < 0 or g > best_gain or (g == best_gain and m < best_add)):
        return m, g, new
    return best_add, best_gain, best_alpha


@njit(cache=True, error_model="numpy")
def _choose(S, Q, act, alpha, in_model, blocker, tol, top, ints, scale, floats):
    """The driver's decision (:func:`rvm_ppl.closed_form.driver.decide`) in one pass over candidates.

    The formulas and the preferences are the driver's functions, compiled;
    the pass finds the best addable candidate without building the arrays
    of every candidate's gain, and the gains of the model one basis at a time
    (the driver's element-wise formulas on scalars; ``driver.member_gains``
    and ``rvm_ppl.closed_form.evidence.prior_gains`` apply them to arrays).
    With a Gamma hyperprior on ``alpha`` (``a`` or ``b`` in ``floats``) the
    gains are the penalised objective's (``driver.prior_gain``), found for
    the candidates outside the model only until the best one's is certain
    (``driver.gain_bound``, ``driver.beaten``; the Python loop's
    ``rvm_ppl.closed_form.evidence.prior_gains`` also bounds the model's
    gains from below, ``driver.gain_floor``, since each exact gain costs it
    more than the bounds). ``top`` receives the best
    addable candidates, best first (ties: lower index), by gain (by the
    bound under a hyperprior), for the drift check, and their number goes to ``ints``. Returns
    ``(action, index, new alpha, gain, terminate)``
    (:func:`rvm_ppl.closed_form.driver.prefer`).
    """
    M = S.shape[0]
    k = ints[_K]
    act, alpha = act[:k], alpha[:k]
    a, b = floats[_A], floats[_B]
    prior = a > 0.0 or b > 0.0
    n_top = 0
    top_gain = np.empty(top.size)
    best_add, best_gain, best_alpha = -1, 0.0, 0.0
    for m in range(M):
        if in_model[m] or blocker[m] >= 0:
            continue
        if prior:
            # The bound orders the candidates; exact gains follow below.
            g = _gain_bound(S[m] * (scale[m] * scale[m]), Q[m] * scale[m], a, b)
            if not g > 0.0:
                continue
        else:
            if not _relevant(S[m], Q[m]):
                continue
            g = _add_gain(S[m], Q[m])
            if best_add < 0 or g > best_gain:
                best_add, best_gain, best_alpha = m, g, _add_alpha(S[m], Q[m])
        # Insert into the short list of the best candidates (stable for ties).
        pos = n_top
        while pos > 0 and top_gain[pos - 1] < g:
            pos -= 1
        if pos < top.size:
            for p in range(min(n_top, top.size - 1), pos, -1):
                top[p] = top[p - 1]
                top_gain[p] = top_gain[p - 1]
            top[pos] = m
            top_gain[pos] = g
            n_top = min(n_top + 1, top.size)
    if prior:
        # Exact gains in descending order of the bound, until the best so far
        # beats the next bound; past a full list, every candidate it does not beat.
        done = False
        for p in range(n_top):
            if best_add >= 0 and _beaten(top_gain[p], best_gain):
                done = True
                break
            best_add, best_gain, best_alpha = _best_exact(S, Q, scale, a, b, top[p], best_add,
                                                          best_gain, best_alpha)
        if not done and n_top == top.size:
            for m in range(M):
                if in_model[m] or blocker[m] >= 0:
                    continue
                g = _gain_bound(S[m] * (scale[m] * scale[m]), Q[m] * scale[m], a, b)
                if g > 0.0 and not (best_add >= 0 and _beaten(g, best_gain)):
                    best_add, best_gain, best_alpha = _best_exact(S, Q, scale, a, b, m, best_add,
                                                                  best_gain, best_alpha)
    gain_a, new_a, delete = np.empty(k), np.empty(k), np.zeros(k, dtype=np.bool_)
    for i in range(k):  # driver.member_gains, one basis at a time
        Sa, Qa, al = S[act[i]], Q[act[i]], alpha[i]
        if prior:
            gain_a[i], new_a[i], keep = _prior_gain(Sa, Qa, al, scale[act[i]], a, b)
            delete[i] = not keep
            continue
        sa, qa = _left_out(Sa, Qa, al)
        fa = qa * qa - sa
        if fa > _ZERO_FACTOR:
            new_a[i] = _reestimate_alpha(sa, fa)
            gain_a[i] = _reestimate_gain(Sa, Qa, al, new_a[i])
        else:
            new_a[i] = np.inf
            gain_a[i] = _delete_gain(sa, qa, al)
            delete[i] = True
    ints[_N_TOP] = n_top
    return _prefer(act, alpha, gain_a, new_a, delete, best_add, best_gain, best_alpha, tol, 0.0)


@njit(cache=True, error_model="numpy")
def _column(slot, Gc, n_cols, Phi, scale, j):
    """The slot of ``Phi~^T phi~_j`` in ``Gc``, computing it on first use."""
    if slot[j] < 0:
        _cross(Phi, scale, j, Gc[n_cols[0]])
        slot[j] = n_cols[0]
        n_cols[0] += 1
    return slot[j]


@njit(cache=True, error_model="numpy")
def _drift(GT, act, k, alpha, beta, proj, S, Q, idx):
    """Largest relative error of the updated ``S, Q`` at ``idx`` (``_Model.drift``); -1 if no factor."""
    L, ok = _factor(GT, act, k, alpha, beta)
    if not ok:
        return -1.0
    # mu = beta H^{-1} Phi_A^T t by two triangular solves.
    mu = _cho_solve(L, proj[act[:k]])
    n = idx.size
    B = np.empty((k, n))
    for i in range(k):
        for c in range(n):
            B[i, c] = GT[i, idx[c]]
    sq, gm = np.zeros(n), np.zeros(n)
    _whiten(L, B, mu, sq, gm)
    worst = 0.0
    for c in range(n):
        m = idx[c]
        Se = beta - beta * beta * sq[c]
        Qe = beta * (proj[m] - beta * gm[c])
        aS = max(abs(Se), _TINY)
        worst = max(worst, abs(S[m] - Se) / aS, abs(Q[m] - Qe) / max(abs(Qe), np.sqrt(aS)))
    return worst


@njit(cache=True, error_model="numpy")
def _add(Gi, i, new, act, k, alpha, Sigma, mu, GT, S, Q, beta):
    """Add basis ``i`` with precision ``new`` (Tipping & Faul 2003, Appendix A.2)."""
    M = S.shape[0]
    Sii = 1.0 / (new + S[i])
    mu_i = Sii * Q[i]
    e = np.empty(M)
    e[:] = Gi
    if k:
        v = np.empty(k)
        for a in range(k):
            s = 0.0
            for b in range(k):
                s += Sigma[a, b] * Gi[act[b]]
            v[a] = beta * s
        for a in range(k):
            va, Gr = v[a], GT[a]
            for m in range(M):
                e[m] -= va * Gr[m]
        for a in range(k):
            for b in range(k):
                Sigma[a, b] += Sii * v[a] * v[b]
            Sigma[a, k] = -Sii * v[a]
            Sigma[k, a] = -Sii * v[a]
            mu[a] -= mu_i * v[a]
    Sigma[k, k] = Sii
    mu[k] = mu_i
    for m in range(M):
        em = beta * e[m]
        S[m] -= Sii * em * em
        Q[m] -= mu_i * em
    alpha[k] = new
    act[k] = i
    GT[k] = Gi


@njit(cache=True, error_model="numpy")
def _change(j, new, delete, act, k, alpha, Sigma, mu, GT, S, Q, beta):
    """Re-estimate basis ``j``'s precision as ``new``, or delete it (Appendix A.3-A.4).

    Returns the new model size.
    """
    M = S.shape[0]
    pos = 0
    while act[pos] != j:
        pos += 1
    Sj = Sigma[:k, pos].copy()
    mu_j = mu[pos]
    if delete:
        c1, c2 = 1.0 / Sj[pos], mu_j / Sj[pos]
    else:
        kappa = 1.0 / (Sj[pos] + 1.0 / (new - alpha[pos]))
        c1, c2 = kappa, kappa * mu_j
    comm = np.zeros(M)
    for a in range(k):
        sa, Gr = Sj[a], GT[a]
        for m in range(M):
            comm[m] += sa * Gr[m]
    for m in range(M):
        cm = beta * comm[m]
        S[m] += c1 * cm * cm
        Q[m] += c2 * cm
    for a in range(k):
        for b in range(k):
            Sigma[a, b] -= c1 * Sj[a] * Sj[b]
        mu[a] -= c2 * Sj[a]
    if not delete:
        alpha[pos] = new
        return k
    for a in range(pos, k - 1):  # close the gap in every array
        act[a] = act[a + 1]
        alpha[a] = alpha[a + 1]
        mu[a] = mu[a + 1]
        GT[a] = GT[a + 1]
    for a in range(k):
        for b in range(pos, k - 1):
            Sigma[a, b] = Sigma[a, b + 1]
    for a in range(pos, k - 1):
        for b in range(k - 1):
            Sigma[a, b] = Sigma[a + 1, b]
    return k - 1


@njit(cache=True, error_model="numpy")
def _noise(Phi, scale, t, proj, GT, act, k, alpha, beta, beta_max, Sigma, mu, Sig2, mu2, S, Q, c,
           d):
    """MacKay's noise update (Tipping 2001, eq. 18), accepted only if it raises the objective.

    With a Gamma(c, d) hyperprior on ``beta`` the fixed point is eq. (46)'s and
    the objective has ``c log beta - d beta``. The step in ``log beta`` is
    halved until it rises (at most 20 times), as in
    ``rvm_ppl.closed_form.evidence._update_noise``. Returns ``(ok, moved, beta, log evidence)``.
    """
    N = t.shape[0]
    ok, ED, logml = _statistics(Phi, scale, t, proj, GT, act, k, alpha, beta, Sigma, mu, S, Q, False)
    if not ok:
        return False, False, beta, logml
    _pin(act, k, alpha, Sigma, mu, S, Q)
    gsum = 0.0
    for a in range(k):
        gsum += 1.0 - alpha[a] * Sigma[a, a]
    noise_prior = c > 0.0 or d > 0.0
    current = logml
    if noise_prior:
        current += _gamma_log_prior(beta, c, d)
        target = (N - gsum + 2.0 * c) / max(ED + 2.0 * d, _TINY)  # eq. (46)
    else:
        target = (N - gsum) / max(ED, _TINY)
    target = min(max(target, _TINY), beta_max)
    step = np.log(target) - np.log(beta)
    for _ in range(20):
        if abs(step) <= _MIN_DELTA_LOG_BETA:
            break
        nb = beta * np.exp(step)
        ok, _, value = _statistics(Phi, scale, t, proj, GT, act, k, alpha, nb, Sig2, mu2, S, Q, False)
        if not ok:
            return False, False, beta, logml
        if noise_prior:
            value += _gamma_log_prior(nb, c, d)
        if value >= current:
            ok, _, logml = _statistics(Phi, scale, t, proj, GT, act, k, alpha, nb, Sigma, mu, S, Q, True)
            if ok:
                _pin(act, k, alpha, Sigma, mu, S, Q)
            return ok, True, nb, logml
        step /= 2
    return True, False, beta, logml


@njit(cache=True, error_model="numpy")
def _newton_terms(alpha, beta, Sigma, mu, ED, N, k, free_beta):
    """:func:`rvm_ppl.closed_form.evidence.evidence_newton_terms` on the leading ``k`` entries."""
    n = k + 1 if free_beta else k
    g = np.empty(n)
    H = np.empty((n, n))
    for i in range(k):
        m2 = mu[i] * mu[i] + Sigma[i, i]
        g[i] = 0.5 * (1.0 - alpha[i] * m2)
        for j in range(k):
            sij = Sigma[i, j]
            H[i, j] = 0.5 * alpha[i] * alpha[j] * (2.0 * mu[i] * mu[j] * sij + sij * sij)
        H[i, i] -= 0.5 * alpha[i] * m2
    if free_beta:
        gb, hbb = 0.5 * (N - k - beta * ED), 0.5 * (-beta * ED)
        for i in range(k):
            s_am, dS = 0.0, -Sigma[i, i]
            for j in range(k):
                s_am += Sigma[i, j] * alpha[j] * mu[j]
                dS += Sigma[i, j] * alpha[j] * Sigma[j, i]
            H[i, k] = H[k, i] = -0.5 * alpha[i] * (2.0 * mu[i] * s_am + dS)
            hbb += 0.5 * (alpha[i] * dS + 2.0 * alpha[i] * mu[i] * s_am)
            gb += 0.5 * alpha[i] * Sigma[i, i]
        g[k], H[k, k] = gb, hbb
    return g, H


@njit(cache=True, error_model="numpy")
def _direction(g, H):
    """:func:`rvm_ppl.closed_form.evidence.newton_direction`: ``(found, step)``."""
    n = g.size
    top = 1.0
    for i in range(n):
        top = max(top, abs(H[i, i]))
    lam = 0.0
    while lam <= 1e8 * top:
        P = -H
        for i in range(n):
            P[i, i] += lam
        L, ok = _cholesky(P)
        if ok:
            x = _cho_solve(L, g)
            big = _TINY
            for i in range(n):
                big = max(big, abs(x[i]))
            x *= min(1.0, _POLISH_MAX_STEP / big)
            return True, x
        lam = 1e-8 * top if lam == 0.0 else 10.0 * lam
    return False, g


@njit(cache=True, error_model="numpy")
def _polish(Phi, scale, t, proj, GT, act, k, alpha, beta, beta_max, free_beta, Sigma, mu, Sig2, mu2,
            S, Q, floats):
    """:func:`rvm_ppl.closed_form.evidence._polish`: ``(ok, moved, beta, log evidence)``.

    With the hyperpriors of ``floats`` it climbs the penalised objective.
    """
    N = t.shape[0]
    a, b, c, d = floats[_A], floats[_B], floats[_C], floats[_D]
    ok, ED, current = _statistics(Phi, scale, t, proj, GT, act, k, alpha, beta, Sigma, mu, S, Q,
                                  False)
    if not ok:
        return False, False, beta, current
    _pin(act, k, alpha, Sigma, mu, S, Q)
    objective = current + _penalty(act, k, alpha, scale, beta, floats)
    start = objective
    base = alpha[:k].copy()
    for _ in range(_POLISH_STEPS):
        g, H = _newton_terms(base, beta, Sigma, mu, ED, N, k, free_beta)
        if a > 0.0 or b > 0.0:
            for i in range(k):
                sc = scale[act[i]]
                gi, hi = _gamma_log_prior_terms(base[i] * (sc * sc), a, b)
                g[i] += gi
                H[i, i] += hi
        if free_beta and (c > 0.0 or d > 0.0):
            gi, hi = _gamma_log_prior_terms(beta, c, d)
            g[k] += gi
            H[k, k] += hi
        found, step = _direction(g, H)
        gain = 0.0
        for i in range(g.size):
            gain += 0.5 * g[i] * step[i]
        if not found or gain <= _POLISH_GAIN:
            break
        accepted = False
        trial_beta, trial_ED, value, trial_objective = beta, ED, current, objective
        for _ in range(20):
            for i in range(k):
                alpha[i] = base[i] * np.exp(step[i])
            trial_beta = min(beta * np.exp(step[k]), beta_max) if free_beta else beta
            ok, trial_ED, value = _statistics(Phi, scale, t, proj, GT, act, k, alpha, trial_beta,
                                              Sig2, mu2, S, Q, False)
            if not ok:
                return False, False, beta, current
            trial_objective = value + _penalty(act, k, alpha, scale, trial_beta, floats)
            if trial_objective > objective:
                accepted = True
                break
            step /= 2
        if not accepted:
            break
        base[:] = alpha[:k]
        beta, ED, current, objective = trial_beta, trial_ED, value, trial_objective
        Sigma[:k, :k] = Sig2[:k, :k]
        mu[:k] = mu2[:k]
    alpha[:k] = base
    if objective == start:
        return True, False, beta, current
    ok, ED, current = _statistics(Phi, scale, t, proj, GT, act, k, alpha, beta, Sigma, mu, S, Q,
                                  True)
    if ok:
        _pin(act, k, alpha, Sigma, mu, S, Q)
    return ok, True, beta, current


# -- the operations of the driver's loop (rvm_ppl.closed_form.driver.climb) on the state -------

# The state of one ascent. ``ints`` and ``floats`` hold its scalars (entries below),
# ``counts`` what only the engine counts (noise updates, refreshes, polishes).
_State = namedtuple("_State", "Phi scale t proj GT Gc slot n_cols act alpha Sigma Sig2 mu "
                              "mu2 in_model S Q top idx trace otrace counts ints floats")
_K, _NOISE_FROM, _STREAK, _N_TRACE, _N_TOP, _STATUS, _FIXED_BETA = range(7)
# The Gamma hyperpriors a, b (on alpha) and c, d (on beta), zero for none, and the
# hyperprior terms of the objective before a step.
_BETA, _LOGML, _BETA_MAX, _A, _B, _C, _D, _PEN0 = range(8)
_NOISE, _REFRESH, _POLISH = range(3)
# Each operation is one call whose arguments are the arrays of the state it
# needs: were ``st`` live across a call, Numba would count a reference to
# every array in it. The operations are compiled once and called, not inlined
# into the loop: inlining them (LLVM's alwaysinline) made the loop's first
# compilation take three to four minutes instead of one.
_op = njit(cache=True, error_model="numpy")


@_op
def _active(st):
    return st.act[:st.ints[_K]]


@_op
def _in_model(st):
    return st.in_model


@_op
def _cosine(st, j):
    return st.Gc[st.slot[j]]


@_op
def _cosines(st, idx):
    return _cosines_of(idx, st.GT, st.ints[_K])


@_op
def _begin(st, it):
    pass


@_op
def _choose_step(st, blocker, tol):
    return _choose(st.S, st.Q, st.act, st.alpha, st.in_model, blocker, tol, st.top, st.ints,
                   st.scale, st.floats)


@_op
def _no(st):
    return False


@_op
def _known(st):
    st.floats[_PEN0] = _penalty(st.act, st.ints[_K], st.alpha, st.scale, st.floats[_BETA],
                                st.floats)
    return st.floats[_LOGML] + st.floats[_PEN0]


@_op
def _track(st, gain):
    # Rank-one updates: the objective moves by the predicted gain; keep its evidence part.
    st.floats[_LOGML] += gain - (_penalty(st.act, st.ints[_K], st.alpha, st.scale,
                                          st.floats[_BETA], st.floats) - st.floats[_PEN0])


@_op
def _add_step(st, j, new):
    return _enter(j, new, st.Phi, st.scale, st.slot, st.n_cols, st.Gc, st.GT, st.act, st.alpha,
                  st.Sigma, st.mu, st.S, st.Q, st.in_model, st.ints, st.floats)


@_op
def _reestimate_step(st, j, new):
    _leave(j, new, False, st.GT, st.act, st.alpha, st.Sigma, st.mu, st.S, st.Q, st.in_model,
           st.ints, st.floats)


@_op
def _delete_step(st, j):
    _leave(j, 0.0, True, st.GT, st.act, st.alpha, st.Sigma, st.mu, st.S, st.Q, st.in_model,
           st.ints, st.floats)


@_op
def _refuses(st, before):
    return _below(before, st.Phi, st.scale, st.t, st.proj, st.GT, st.act, st.alpha, st.Sig2,
                  st.mu2, st.S, st.Q, st.ints, st.floats)


@_op
def _reload(st):
    _exact(st.Phi, st.scale, st.t, st.proj, st.GT, st.act, st.alpha, st.Sigma, st.mu, st.S, st.Q,
           st.ints, st.floats)


@_op
def _after_step(st, it, action, terminate):
    return _after(it, action, terminate, st.Phi, st.scale, st.t, st.proj, st.GT, st.act, st.alpha,
                  st.Sigma, st.mu, st.Sig2, st.mu2, st.S, st.Q, st.top, st.idx, st.trace,
                  st.otrace, st.counts, st.ints, st.floats)


@_op
def _failed(st):
    return st.ints[_STATUS] != OK


# -- what the operations do, on the state's arrays ---------------------------------------


@_op
def _penalty(act, k, alpha, scale, beta, floats):
    """Return the hyperprior terms of the objective (original column units; ``_Model.penalty``).

    Of the ``k`` bases ``act`` with precisions ``alpha`` and noise precision ``beta``.
    """
    a, b, c, d = floats[_A], floats[_B], floats[_C], floats[_D]
    out = 0.0
    if a > 0.0 or b > 0.0:
        for i in range(k):
            sc = scale[act[i]]
            out += _gamma_log_prior(alpha[i] * (sc * sc), a, b)
    if c > 0.0 or d > 0.0:
        out += _gamma_log_prior(beta, c, d)
    return out


@_op
def _cosines_of(idx, GT, k):
    """Cosines of candidates ``idx`` with the ``k`` bases of the model, ``(len(idx), k)``."""
    cos = np.empty((idx.size, k))
    for r in range(idx.size):
        for i in range(k):
            cos[r, i] = GT[i, idx[r]]
    return cos


@_op
def _enter(j, new, Phi, scale, slot, n_cols, Gc, GT, act, alpha, Sigma, mu, S, Q, in_model, ints,
           floats):
    """Add basis ``j`` at precision ``new``; its cosines with every candidate."""
    k = ints[_K]
    r = _column(slot, Gc, n_cols, Phi, scale, j)
    _add(Gc[r], j, new, act, k, alpha, Sigma, mu, GT, S, Q, floats[_BETA])
    in_model[j] = True
    ints[_K] = k + 1
    _pin(act, k + 1, alpha, Sigma, mu, S, Q)
    return Gc[r]


@_op
def _leave(j, new, delete, GT, act, alpha, Sigma, mu, S, Q, in_model, ints, floats):
    """Re-estimate basis ``j``'s precision as ``new``, or delete it."""
    k = _change(j, new, delete, act, ints[_K], alpha, Sigma, mu, GT, S, Q, floats[_BETA])
    ints[_K] = k
    if delete:
        in_model[j] = False
    _pin(act, k, alpha, Sigma, mu, S, Q)


@_op
def _below(before, Phi, scale, t, proj, GT, act, alpha, Sig2, mu2, S, Q, ints, floats):
    """Whether the exact objective after an addition is below ``before`` (``_Model.objective``)."""
    ok, _, exact = _statistics(Phi, scale, t, proj, GT, act, ints[_K], alpha, floats[_BETA], Sig2,
                               mu2, S, Q, False)
    if not ok:
        ints[_STATUS] = FAILED
        return False
    return exact + _penalty(act, ints[_K], alpha, scale, floats[_BETA], floats) < before


@_op
def _exact(Phi, scale, t, proj, GT, act, alpha, Sigma, mu, S, Q, ints, floats):
    """Exact ``Sigma, mu, S, Q`` and log evidence at the current model (``_Model.reload``)."""
    k = ints[_K]
    ok, _, logml = _statistics(Phi, scale, t, proj, GT, act, k, alpha, floats[_BETA], Sigma, mu, S,
                               Q, True)
    if not ok:
        ints[_STATUS] = FAILED
        return
    _pin(act, k, alpha, Sigma, mu, S, Q)
    floats[_LOGML] = logml


@_op
def _after(it, action, terminate, Phi, scale, t, proj, GT, act, alpha, Sigma, mu, Sig2, mu2, S, Q,
           top, idx, trace, otrace, counts, ints, floats):
    """Run the noise schedule, the drift check and the polish (``_Model.after_step``).

    Returns whether the noise moved.
    """
    if ints[_STATUS] != OK:
        return False
    k, beta, beta_max = ints[_K], floats[_BETA], floats[_BETA_MAX]
    fixed_beta = ints[_FIXED_BETA] != 0
    update_noise = False
    if not fixed_beta:
        update_noise, ints[_NOISE_FROM] = _noise_due(it, ints[_NOISE_FROM], terminate,
                                                     _NOISE_WARMUP_MAX)
    ok = True
    noise_moved = False
    if update_noise:
        ok, noise_moved, beta, logml = _noise(Phi, scale, t, proj, GT, act, k, alpha, beta,
                                              beta_max, Sigma, mu, Sig2, mu2, S, Q, floats[_C],
                                              floats[_D])
        floats[_BETA], floats[_LOGML] = beta, logml
        counts[_NOISE] += noise_moved
    elif not terminate and k:
        # Keep the rank-one updates honest: exact S, Q on the model, the
        # best candidates to add and a random sample.
        n_idx = 0
        for i in range(k):
            idx[n_idx] = act[i]
            n_idx += 1
        for i in range(ints[_N_TOP]):
            idx[n_idx] = top[i]
            n_idx += 1
        for _ in range(_DRIFT_SAMPLE):
            idx[n_idx] = np.random.randint(0, S.size)
            n_idx += 1
        d = _drift(GT, act, k, alpha, beta, proj, S, Q, idx[:n_idx])
        ok = d >= 0
        if ok and d > _DRIFT_TOL:
            _exact(Phi, scale, t, proj, GT, act, alpha, Sigma, mu, S, Q, ints, floats)
            ok = ints[_STATUS] == OK
            counts[_REFRESH] += 1
    if ok and not terminate:
        ints[_STREAK] = ints[_STREAK] + 1 if action == REESTIMATE else 0
    if ok and ints[_STREAK] >= _POLISH_AFTER:
        ints[_STREAK] = 0
        free_beta = not fixed_beta and ints[_NOISE_FROM] >= 0
        ok, moved, beta, logml = _polish(Phi, scale, t, proj, GT, act, k, alpha, floats[_BETA],
                                         beta_max, free_beta, Sigma, mu, Sig2, mu2, S, Q, floats)
        floats[_BETA], floats[_LOGML] = beta, logml
        counts[_POLISH] += moved
    if not ok:
        ints[_STATUS] = FAILED
        return False
    if not terminate or noise_moved:
        trace[ints[_N_TRACE]] = floats[_LOGML]
        otrace[ints[_N_TRACE]] = floats[_LOGML] + _penalty(act, ints[_K], alpha, scale,
                                                           floats[_BETA], floats)
        ints[_N_TRACE] += 1
    return noise_moved


# The namespace the driver's loop calls as ``ops`` (rvm_ppl.closed_form.driver.climb).
_OPS.__dict__.update(
    active=_active, in_model=_in_model, cosine=_cosine, cosines=_cosines, begin=_begin,
    choose=_choose_step, refreshed=_no, stalled=_no, known=_known, track=_track, add=_add_step,
    reestimate=_reestimate_step, delete=_delete_step, refuses=_refuses, reload=_reload,
    after_step=_after_step, failed=_failed,
)


@njit(cache=True, error_model="numpy")
def ascent(Phi, scale, t, proj, beta, beta_max, fixed_beta, noise_warmup, alignment_test, tol,
           max_iter, start, warm_act, warm_alpha, a, b, c, d):
    """One ascent of the fast sequential algorithm on the unit-norm columns ``Phi / scale``.

    ``Phi`` is in C order; ``proj = Phi^T t / scale``. The loop is the
    driver's (:func:`rvm_ppl.closed_form.driver.climb`), compiled.
    ``a, b, c, d`` are the Gamma hyperpriors on every ``alpha`` (original
    columns) and on ``beta``, zero for none: the ascent then maximises the
    penalised objective (Tipping 2001, eq. 36), as the Python loop does.

    Starts from basis ``start`` (closed-form ``alpha``) or, when
    ``warm_act`` is not empty, from those basis functions with precisions
    ``warm_alpha``. Returns ``(status, act, alpha, Sigma, mu, S, Q, beta,
    log evidence, trace, objective trace, n_iter, converged, blocker,
    counts)``, ``counts`` in the order of ``COUNT_KEYS``.
    """
    N, M = Phi.shape
    cap = M
    st = _State(
        Phi, scale, t, proj,
        np.empty((cap, M)),  # GT, row i: Phi^T phi_a for the i-th basis function a in the model
        np.empty((cap, M)),  # Gc, row r: Phi^T phi_j for the j with slot[j] = r
        np.full(M, -1, dtype=np.int64),  # slot
        np.zeros(1, dtype=np.int64),  # n_cols
        np.empty(cap, dtype=np.int64), np.empty(cap),  # act, alpha
        np.empty((cap, cap)), np.empty((cap, cap)),  # Sigma, Sig2
        np.empty(cap), np.empty(cap),  # mu, mu2
        np.zeros(M, dtype=np.bool_), np.empty(M), np.empty(M),  # in_model, S, Q
        np.empty(_DRIFT_SAMPLE, dtype=np.int64),  # top
        np.empty(cap + 2 * _DRIFT_SAMPLE, dtype=np.int64),  # idx
        np.empty(max_iter + 2), np.empty(max_iter + 2),  # trace, otrace
        np.zeros(3, dtype=np.int64),  # counts
        np.zeros(7, dtype=np.int64),  # ints
        np.array([beta, 0.0, beta_max, a, b, c, d, 0.0]),  # floats
    )
    st.ints[_FIXED_BETA] = fixed_beta
    st.ints[_NOISE_FROM] = 0 if not noise_warmup else -1
    blocker = np.full(M, -1, dtype=np.int64)
    counts = np.zeros(8, dtype=np.int64)
    np.random.seed(0)  # drift-check sample
    failed = (FAILED, st.act[:0].copy(), st.alpha[:0].copy(), st.Sigma[:0, :0].copy(),
              st.mu[:0].copy(), st.S, st.Q, beta, 0.0, st.trace[:0].copy(), st.otrace[:0].copy(), 0,
              False, blocker, counts)

    if warm_act.size:
        for i in range(warm_act.size):
            j = warm_act[i]
            r = _column(st.slot, st.Gc, st.n_cols, Phi, scale, j)
            st.GT[i] = st.Gc[r]
            st.act[i] = j
            st.alpha[i] = warm_alpha[i]
            st.in_model[j] = True
        st.ints[_K] = warm_act.size
    else:
        # Closed-form alpha of a single basis: p^2 / (q^2 - p).
        p, q = beta, beta * proj[start]
        r = _column(st.slot, st.Gc, st.n_cols, Phi, scale, start)
        st.GT[0] = st.Gc[r]
        st.act[0] = start
        if a > 0.0 or b > 0.0:
            # The same single-basis problem with the hyperprior (original units).
            sc = scale[start]
            qs = q * sc
            st.alpha[0] = _penalised_alpha(p * sc**2, qs * qs, a, b)[0] / sc**2
        else:
            st.alpha[0] = p * p / (q * q - p) if q * q > p else _INIT_ALPHA_MAX
        st.in_model[start] = True
        st.ints[_K] = 1
    _reload(st)
    if st.ints[_STATUS] != OK:
        return failed
    st.trace[0] = st.floats[_LOGML]
    st.otrace[0] = st.floats[_LOGML] + _penalty(st.act, st.ints[_K], st.alpha, st.scale,
                                                st.floats[_BETA], st.floats)
    st.ints[_N_TRACE] = 1

    loop = np.zeros(_driver.N_COUNTS, dtype=np.int64)
    limit = _ALIGNMENT_MAX if alignment_test else np.inf  # np.inf: no alignment test
    it, converged = _climb(st, max_iter, tol, limit, blocker, loop)
    if st.ints[_STATUS] != OK:
        return failed
    _reload(st)
    if st.ints[_STATUS] != OK:
        return failed
    # In the order of COUNT_KEYS.
    counts[0], counts[1], counts[2] = loop[ADD], loop[REESTIMATE], loop[DELETE]
    counts[3], counts[4] = st.counts[_NOISE], loop[_driver.ALIGNED_COUNT]
    counts[5], counts[6] = st.counts[_REFRESH], st.counts[_POLISH]
    counts[7] = loop[_driver.REFUSED_COUNT]
    k = st.ints[_K]
    n = st.ints[_N_TRACE]
    return (OK, st.act[:k].copy(), st.alpha[:k].copy(), st.Sigma[:k, :k].copy(), st.mu[:k].copy(),
            st.S, st.Q, st.floats[_BETA], st.floats[_LOGML], st.trace[:n].copy(),
            st.otrace[:n].copy(), it, converged, blocker, counts)


def run(Phi, t, proj_unit, scale, *, beta, beta_max, fixed_beta, noise_warmup, alignment_test,
        tol, max_iter, start, warm_start, priors=None):
    """One compiled ascent: its state (a dict of arrays and scalars), or None if it failed.

    ``Phi`` is the design matrix (copied only if not in C order),
    ``proj_unit = Phi^T t / scale``, ``warm_start`` is ``(active, alpha)`` in original
    column units or None, ``priors`` the Gamma hyperpriors ``a, b, c, d``
    (:func:`rvm_ppl.closed_form.evidence.resolve_evidence_priors`) or None.
    """
    if warm_start is not None and len(warm_start[0]):
        act0 = np.asarray(warm_start[0], dtype=np.int64)
        alpha0 = np.asarray(warm_start[1], dtype=float) / scale[act0] ** 2
    else:
        act0, alpha0 = np.empty(0, dtype=np.int64), np.empty(0)
        if start is None:
            start = int(np.argmax(np.abs(proj_unit)))
    f64 = lambda a: np.ascontiguousarray(a, dtype=float)  # noqa: E731
    hyper = [0.0] * 4 if priors is None else [float(priors[k]) for k in "abcd"]
    (status, act, alpha, Sigma, mu, S, Q, beta, logml, trace, otrace, n_iter, converged, blocker,
     counts) = ascent(f64(Phi), f64(scale), f64(t), f64(proj_unit), float(beta), float(beta_max),
                      bool(fixed_beta), bool(noise_warmup), bool(alignment_test), float(tol),
                      int(max_iter), int(start or 0), act0, alpha0, *hyper)
    if status != OK:
        return None
    return dict(
        scale=scale, active=act, alpha=alpha, mu=mu, Sigma=Sigma, S=S, Q=Q, beta=float(beta),
        logml=float(logml), trace=trace, objective_trace=otrace, n_iter=int(n_iter),
        converged=bool(converged),
        aligned=np.flatnonzero((blocker >= 0) & (blocker < blocker.size)),
        counts=dict(zip(COUNT_KEYS, counts.tolist())),
    )
