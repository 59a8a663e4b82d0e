"""The compiled ascent (rvm_ppl.closed_form.engine) against the Python loop it replaces."""

import numpy as np
import pytest

from rvm_ppl.closed_form import driver, evidence
from rvm_ppl.closed_form import engine as _evidence_engine
from rvm_ppl.closed_form.evidence import (
    alpha_maximiser,
    fit_evidence_regression,
    log_evidence_dense,
    prior_gains,
    prior_penalty,
    resolve_evidence_priors,
)
from rvm_ppl.datasets.loaders import make_sinc
from rvm_ppl.kernels.basis import KernelBasis
from rvm_ppl.kernels.kernel import RBF, LinearSpline, design_matrix


def _problem(n, seed):
    X, y = make_sinc(n, grid=False, random_state=seed)
    return design_matrix(X, X, RBF(1 / 9)), (y - y.mean()) / y.std()


@pytest.mark.parametrize("n, seed", [(40, 0), (100, 1), (100, 3), (300, 2)])
@pytest.mark.parametrize("kw", [{}, dict(multistart=False, noise_warmup=False, alignment_test=False),
                                dict(beta=100.0, fixed_beta=True)])
def test_compiled_ascent_takes_the_python_loops_decisions(n, seed, kw):
    Phi, t = _problem(n, seed)
    a = fit_evidence_regression(Phi, t, start=0, **kw, compiled=True)
    b = fit_evidence_regression(Phi, t, start=0, compiled=False, **kw)
    assert a.log_evidence == pytest.approx(b.log_evidence, rel=1e-9, abs=1e-9)
    assert a.n_iter == b.n_iter
    assert a.beta == pytest.approx(b.beta, rel=1e-7)
    np.testing.assert_allclose(a.log_evidence_trace, b.log_evidence_trace, rtol=1e-8, atol=1e-8)
    # The evidence it reports is the closed form at its own alpha, beta.
    assert a.log_evidence == pytest.approx(log_evidence_dense(Phi, t, a.alpha, a.beta), rel=1e-9)
    assert np.diff(a.log_evidence_trace).min() >= -1e-9 * abs(a.log_evidence)


PRIORS = {
    "vague": dict(a=1e-6, b=1e-6, c=1e-6, d=1e-6),
    "alpha": dict(a=2.0, b=2.0),
    "noise": dict(c=2.0, d=1.0),
    "both": dict(a=0.1, b=0.1, c=0.5, d=0.5),
    "rate-only": dict(b=1e-2),
}


@pytest.mark.parametrize("n, seed", [(40, 0), (100, 1), (300, 2)])
@pytest.mark.parametrize("priors", PRIORS.values(), ids=PRIORS.keys())
def test_compiled_ascent_takes_the_python_loops_decisions_under_hyperpriors(n, seed, priors,
                                                                              monkeypatch):
    # Type-II MAP (Tipping 2001, eq. 36) on the engine: the same steps as the Python loop
    # (the Newton polish of the penalised objective included: counts), to rounding error,
    # and the penalised objective it reports is the closed form's.
    calls = []
    run = _evidence_engine.run
    monkeypatch.setattr(_evidence_engine, "run", lambda *a, **k: calls.append(1) or run(*a, **k))
    Phi, t = _problem(n, seed)
    a = fit_evidence_regression(Phi, t, start=0, priors=priors, compiled=True)
    assert len(calls) == a.counts.get("starts", 1)  # every ascent on the engine
    b = fit_evidence_regression(Phi, t, start=0, priors=priors, compiled=False)
    assert len(calls) == a.counts.get("starts", 1)  # and none of the Python loop's
    assert a.n_iter == b.n_iter and a.counts == b.counts
    np.testing.assert_array_equal(a.active, b.active)
    np.testing.assert_allclose(a.alpha[a.active], b.alpha[b.active], rtol=1e-7)
    assert a.beta == pytest.approx(b.beta, rel=1e-7)
    assert a.objective == pytest.approx(b.objective, rel=1e-9, abs=1e-9)
    np.testing.assert_allclose(a.objective_trace, b.objective_trace, rtol=1e-8, atol=1e-8)
    np.testing.assert_allclose(a.log_evidence_trace, b.log_evidence_trace, rtol=1e-8, atol=1e-8)
    dense = log_evidence_dense(Phi, t, a.alpha, a.beta)
    penalty = prior_penalty(a.alpha, a.beta, resolve_evidence_priors(priors))
    assert a.log_evidence == pytest.approx(dense, rel=1e-9)
    assert a.objective == pytest.approx(dense + penalty, rel=1e-9)
    assert a.objective_trace[-1] == pytest.approx(a.objective, rel=1e-9)
    assert np.diff(a.objective_trace).min() >= -1e-9 * abs(a.objective)


@pytest.mark.parametrize("a, b", [(1e-6, 1e-6), (2.0, 2.0), (0.0, 0.01),
                                  (0.08, 2e-4), (4.26, 2e-4)])  # the last two: bimodal
def test_compiled_prior_gain_is_the_driver_function_on_scalars(a, b, rng, monkeypatch):
    # The engine runs driver.prior_gain on one candidate at a time; the Python loop on
    # arrays, and on the few steps that could win one at a time, with the driver's
    # functions built for scalars (driver.compiled, driver.SCALAR_NUMPY). All must give
    # the same gain, new alpha and choice for every candidate, in the model (finite
    # alpha) or not, relevant or not; the Python loop's two to the last bit (degenerate
    # statistics included), so its decisions do not depend on how many steps it solves.
    n = 400
    S = rng.uniform(0.05, 5.0, n)
    Q = rng.normal(0.0, 3.0, n)
    scale = rng.uniform(0.2, 8.0, n)
    alpha = np.where(rng.random(n) < 0.5, np.inf, rng.uniform(0.01, 50.0, n))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        gain, new, keep = driver.prior_gain(S, Q, alpha, scale, a, b)
        odd = np.array([0.0, 0.0, 0.0, 0.0, 1.0]), np.array([0.0, 1.0, -1.0, 1e-300, np.nan])
        odd = [np.r_[x, y] for x, y in zip(odd, (S, Q))] + [np.r_[alpha[:5], alpha],
                                                             np.r_[scale[:5], scale]]
        monkeypatch.setattr(evidence, "SCALAR_MAX", odd[0].size)  # all one at a time
        for x, y in zip(evidence._exact_gains(*odd, a, b), driver.prior_gain(*odd, a, b)):
            np.testing.assert_array_equal(x, y)
    one = [_evidence_engine._prior_gain(S[m], Q[m], alpha[m], scale[m], a, b) for m in range(n)]
    np.testing.assert_array_equal(np.array([o[2] for o in one]), keep)
    assert 0 < keep.sum() < n
    np.testing.assert_allclose([o[0] for o in one], gain, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose([o[1] for o in one], new, rtol=1e-12)
    # The maximiser on scalars is alpha_maximiser's, which test_priors checks by brute force.
    s, q = S * scale**2, Q * scale
    ref, value = alpha_maximiser(s, q, a, b)
    for m in range(0, n, 7):
        x, v = _evidence_engine._penalised_alpha(s[m], q[m] ** 2, a, b)
        assert x == pytest.approx(ref[m], rel=1e-12) and v == pytest.approx(value[m], rel=1e-12)


def test_scalar_numpy_minimum_and_maximum_are_numpys():
    # SCALAR_NUMPY's minimum and maximum on every pair of signed zeros, infinities, NaN
    # and ordinary values: the same value and sign as NumPy's.
    values = [0.0, -0.0, 1.5, -2.0, np.inf, -np.inf, np.nan, 5e-324]
    for x in map(np.float64, values):
        for y in map(np.float64, values):
            for mine, theirs in ((driver.SCALAR_NUMPY.minimum, np.minimum),
                                 (driver.SCALAR_NUMPY.maximum, np.maximum)):
                got, want = mine(x, y), theirs(x, y)
                assert np.array_equal(got, want, equal_nan=True)
                assert np.signbit(got) == np.signbit(want)


@pytest.mark.parametrize("a, b", [(1e-6, 1e-6), (2.0, 2.0), (0.0, 0.01), (0.08, 2e-4),
                                  (4.26, 2e-4)])
def test_gain_floor_and_bound_bracket_the_exact_share(a, b, rng):
    # gain_floor <= the largest share of the penalised objective <= gain_bound, with the
    # largest share found independently on a grid of log alpha around the maximiser.
    n = 300
    s = rng.uniform(0.05, 5.0, n) * rng.uniform(0.04, 64.0, n)
    q = rng.normal(0.0, 3.0, n) * rng.uniform(0.2, 8.0, n)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        floor, bound = driver.gain_floor(s, q, a, b), driver.gain_bound(s, q, a, b)
        best, value = alpha_maximiser(s, q, a, b)
    grid = np.exp(np.linspace(-30.0, 30.0, 6001))
    brute = np.array([evidence.alpha_objective(grid, s[m], q[m], a, b).max() for m in range(n)])
    assert np.all(floor <= value + 1e-12 * (1 + np.abs(value)))
    assert np.all(value <= bound + 1e-12 * (1 + np.abs(bound)))
    assert np.all(brute <= value + 1e-9 * (1 + np.abs(value)))
    # The floor is the share at the maximiser without a hyperprior, or at the prior's mode.
    with np.errstate(divide="ignore", invalid="ignore"):
        plain = np.where(q * q > s, evidence.alpha_objective(s * s / (q * q - s), s, q, a, b),
                         -np.inf)
        mode = evidence.alpha_objective(np.full(n, a / b), s, q, a, b) if a > 0 else -np.inf
    np.testing.assert_allclose(floor, np.maximum(plain, mode), rtol=1e-10, atol=1e-12)


def test_compiled_ascent_on_an_ill_conditioned_spline_basis():
    # Neighbouring linear-spline columns have cosines within 1e-6 of 1: the
    # drift check must keep the rank-one updates exact, as in the Python loop.
    X, y = make_sinc(100, noise=None)
    Phi = design_matrix(X, X, LinearSpline())
    a = fit_evidence_regression(Phi, y, beta=1e4, fixed_beta=True, compiled=True)
    b = fit_evidence_regression(Phi, y, beta=1e4, fixed_beta=True, compiled=False)
    assert a.converged and a.counts["refresh"] > 0
    assert a.log_evidence == pytest.approx(b.log_evidence, rel=1e-8)
    assert a.log_evidence == pytest.approx(log_evidence_dense(Phi, y, a.alpha, a.beta), rel=1e-8)


def test_compiled_ascent_materialises_a_lazy_kernel_basis():
    X, y = make_sinc(80, grid=False, random_state=4)
    t = (y - y.mean()) / y.std()
    lazy = fit_evidence_regression(KernelBasis(RBF(1 / 9), X), t, start=0)
    dense = fit_evidence_regression(_problem(80, 4)[0], t, start=0, compiled=False)
    np.testing.assert_array_equal(lazy.active, dense.active)
    assert lazy.log_evidence == pytest.approx(dense.log_evidence, rel=1e-9)


def test_failed_factorisation_returns_none_for_the_python_fallback():
    Phi, t = _problem(30, 0)
    scale = np.sqrt((Phi**2).sum(0))
    # A negative precision makes the posterior precision indefinite.
    res = _evidence_engine.run(
        Phi, t, Phi.T @ t / scale, scale, beta=100.0, beta_max=1e6, fixed_beta=True,
        noise_warmup=False, alignment_test=False, tol=1e-3, max_iter=100, start=None,
        warm_start=([0], [-1e6]))
    assert res is None


def test_compiled_ascent_with_a_model_of_hundreds_of_bases():
    # Boston with a narrow kernel keeps about 90 of 385 bases: the engine's
    # factors and products come from LAPACK and BLAS from _LAPACK_MIN_N on.
    from rvm_ppl.datasets.loaders import load_boston

    X, y = load_boston()
    X = (X - X.mean(0)) / X.std(0)
    Phi, t = design_matrix(X[:385], X[:385], RBF(0.3)), (y[:385] - y[:385].mean()) / y[:385].std()
    a = fit_evidence_regression(Phi, t, compiled=True)
    b = fit_evidence_regression(Phi, t, compiled=False)
    assert a.active.size > 2 * _evidence_engine._LAPACK_MIN_N
    assert a.n_iter == b.n_iter and a.counts == b.counts
    np.testing.assert_array_equal(a.active, b.active)
    assert a.log_evidence == pytest.approx(b.log_evidence, rel=1e-9)
    assert a.log_evidence == pytest.approx(log_evidence_dense(Phi, t, a.alpha, a.beta), rel=1e-9)


@pytest.mark.parametrize("n", [5, 40])  # the loop and LAPACK
def test_cholesky_flags_what_is_not_positive_definite(n, rng):
    A = rng.normal(size=(n, n))
    H = A @ A.T + n * np.eye(n)
    L, ok = _evidence_engine._cholesky(H)
    assert ok
    np.testing.assert_allclose(L, np.linalg.cholesky(H), rtol=1e-12, atol=1e-12)
    Sigma = np.zeros((n + 2, n + 2))
    logdet = _evidence_engine._covariance(L, Sigma)
    np.testing.assert_allclose(Sigma[:n, :n], np.linalg.inv(H), rtol=1e-9, atol=1e-12)
    assert logdet == pytest.approx(np.linalg.slogdet(H)[1], rel=1e-12)
    off = H.copy()
    off[n - 1, 1] = off[1, n - 1] = np.nan
    indefinite = H - 2 * np.linalg.eigvalsh(H)[-1] * np.eye(n)
    for bad in (indefinite, np.where(np.eye(n) > 0, np.nan, H), off):
        assert not _evidence_engine._cholesky(bad)[1]


def test_a_callback_keeps_the_python_loop():
    Phi, t = _problem(40, 0)
    seen = []
    res = fit_evidence_regression(Phi, t, start=0, multistart=False,
                                  callback=lambda *a: seen.append(a[1]), compiled=True)
    assert len(seen) == len(res.log_evidence_trace) - 1 >= 10
    ref = fit_evidence_regression(Phi, t, start=0, multistart=False, compiled=True)
    assert res.log_evidence == pytest.approx(ref.log_evidence, rel=1e-9)


def test_a_wide_kernel_on_a_dense_grid_converges_to_one_maximum():
    # Some candidates nearly lie in the span of the model; before additions were
    # checked against the exact evidence, the ascent added and deleted them until
    # max_iter (10 000 iterations, a ConvergenceWarning). How many additions are
    # refused on the way depends on rounding (tests/test_evidence_refusal.py forces
    # one by construction); that both loops converge to the same maximum does not.
    X, y = make_sinc(500, random_state=1)
    Phi = np.column_stack([np.ones(500), design_matrix(X, X, RBF(1 / X.var()))])
    t = y / y.std()
    a = fit_evidence_regression(Phi, t, start=0, compiled=True)
    b = fit_evidence_regression(Phi, t, start=0, compiled=False)
    for r in (a, b):
        assert r.converged and r.n_iter < 5000
    np.testing.assert_array_equal(a.active, b.active)
    assert a.log_evidence == pytest.approx(b.log_evidence, rel=1e-9)
    assert a.log_evidence == pytest.approx(log_evidence_dense(Phi, t, a.alpha, a.beta), rel=1e-7)
    assert np.diff(a.log_evidence_trace).min() >= -1e-9 * abs(a.log_evidence)


def test_the_estimators_compiled_parameter_chooses_the_engine_at_any_size(monkeypatch):
    """RVR(compiled=True) runs the engine on a small problem, "auto" runs Python there; both
    keep the same relevance vectors and predict alike to rounding error."""
    from rvm_ppl import RVR

    calls = []
    run = _evidence_engine.run
    monkeypatch.setattr(_evidence_engine, "run", lambda *a, **k: calls.append(1) or run(*a, **k))
    X, y = make_sinc(60, random_state=4)
    fits = {}
    for compiled in ("auto", True, False):
        before = len(calls)
        fits[compiled] = RVR(gamma=1 / 9, compiled=compiled, progressbar=False).fit(X, y)
        assert (len(calls) > before) == (compiled is True)
    for other in ("auto", False):
        np.testing.assert_array_equal(fits[True].relevance_, fits[other].relevance_)
        np.testing.assert_allclose(fits[True].predict(X), fits[other].predict(X), rtol=0,
                                   atol=1e-10)
    with pytest.raises(ValueError, match="compiled"):
        RVR(compiled="yes").fit(X, y)


def _gain_state(rng, n, k, priors=None):
    """Random statistics of a model of ``k`` bases among ``n`` candidates, some blocked.

    With ``priors``, most bases in the model sit near the maximum of their
    penalised objective (``alpha`` within a few per cent of it), as they do
    once a fit has re-estimated them: their gains are then small and close.
    """
    S = rng.uniform(0.05, 5.0, n)
    Q = rng.normal(0.0, 3.0, n)
    scale = rng.uniform(0.2, 8.0, n)
    act = rng.choice(n, k, replace=False)
    alpha = S[act] * rng.uniform(1.05, 30.0, k)  # in the model S < alpha (left-out s > 0)
    if priors is not None and k:
        # Left-out s, q on the unit-norm column; alpha near the maximiser; S, Q with it in.
        s, q = S[act], Q[act] + np.sign(Q[act]) * 2.0 * np.sqrt(S[act])  # q^2 > s: it stays
        sc2 = scale[act] ** 2
        best, _ = driver.penalised_alpha(s * sc2, q * q * sc2, priors["a"], priors["b"])
        near = np.isfinite(best) & (rng.random(k) < 0.8)
        alpha = np.where(near, best / sc2 * np.exp(rng.normal(0.0, 0.03, k)), alpha)
        S[act] = np.where(near, alpha * s / (alpha + s), S[act])
        Q[act] = np.where(near, alpha * q / (alpha + s), Q[act])
    blocked = rng.random(n) < 0.1
    blocked[act] = False
    return S, Q, scale, act, alpha, blocked


@pytest.mark.parametrize("a, b", [(1e-6, 1e-6), (2.0, 2.0), (0.0, 0.01), (0.08, 2e-4),
                                  (4.26, 2e-4), (3.0, 0.1)])
@pytest.mark.parametrize("with_refused", [False, True])
def test_hyperprior_gains_skip_only_steps_that_cannot_win(a, b, with_refused, rng):
    # prior_gains finds exact gains only for the steps whose upper bound (gain_bound) the
    # best lower bound (gain_floor, or a basis's share now) has not beaten: its decision
    # must be the one every step's exact gain (driver.prior_gain on all of them) gives,
    # refused steps left out, and the engine's single pass the same. Two thirds of the
    # states have up to 30 bases in the model, most of them near their maximum, where the
    # re-estimations' gains are small and close to the additions'.
    priors = dict(a=a, b=b)
    for trial in range(60):
        n = int(rng.integers(30, 400))
        S, Q, scale, act, alpha, blocked = _gain_state(
            rng, n, int(rng.integers(0, 8 if trial < 20 else 30)), None if trial < 20 else priors)
        refused = (rng.random(act.size) < 0.3) if with_refused else np.zeros(act.size, bool)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            inf = np.full(n, np.inf)
            inf[act] = alpha
            gain, new, keep = driver.prior_gain(S, Q, inf, scale, a, b)
            # The bound is above every exact gain it stands for.
            out = np.setdiff1d(np.flatnonzero(keep), act)
            bound = driver.gain_bound(S * scale**2, Q * scale, a, b)
            assert np.all(gain[out] <= bound[out] + 1e-12 * (1 + np.abs(bound[out])))
        cand = np.setdiff1d(out, np.flatnonzero(blocked))
        every = (cand, gain[cand], new[cand], np.where(refused, -np.inf, gain[act]),
                 np.where(refused, alpha, new[act]), ~keep[act] & ~refused)
        full = driver.decide(act, alpha, every, tol=1e-6)
        gains = prior_gains(S, Q, act, alpha, scale, priors, blocked,
                            refused if with_refused else None)
        pruned = driver.decide(act, alpha, gains, tol=1e-6)
        assert (pruned.action, pruned.index, pruned.terminate) == (full.action, full.index,
                                                                   full.terminate)
        assert pruned.new_alpha == full.new_alpha and pruned.gain == full.gain
        if with_refused:
            continue  # the engine has no refused steps (the Gaussian fit refuses none)
        # The engine: the same decision, and the same drift list (the first of the add order).
        in_model = np.zeros(n, dtype=bool)
        in_model[act] = True
        top = np.empty(_evidence_engine._DRIFT_SAMPLE, dtype=np.int64)
        ints = np.zeros(7, dtype=np.int64)
        ints[_evidence_engine._K] = act.size
        floats = np.zeros(8)
        floats[_evidence_engine._A], floats[_evidence_engine._B] = a, b
        action, index, new_alpha, g, terminate = _evidence_engine._choose(
            S, Q, act.astype(np.int64), alpha, in_model, np.where(blocked, 0, -1), 1e-6, top,
            ints, scale, floats)
        assert driver.ACTIONS[action] == full.action and index == full.index
        assert bool(terminate) == full.terminate
        assert new_alpha == pytest.approx(full.new_alpha, rel=1e-12)
        assert g == pytest.approx(full.gain, rel=1e-12, abs=1e-14)
        n_top = ints[_evidence_engine._N_TOP]
        np.testing.assert_array_equal(top[:n_top], pruned.add_order[:top.size])


def test_engine_cache_is_keyed_on_the_driver_and_the_constants(tmp_path, monkeypatch):
    # The engine's compiled loop holds the driver's decision functions and the constants:
    # its cached machine code must go stale when any of the three files changes, not only
    # engine.py, for the functions compiled from each of them.
    import os
    import shutil

    from rvm_ppl.closed_form import constants

    sources = {os.path.abspath(m.__file__) for m in (driver, constants, _evidence_engine)}
    assert set(_evidence_engine._SOURCES) == sources
    for jitted in (_evidence_engine._choose, _evidence_engine._prior_gain):  # engine.py, driver.py
        locator = jitted._cache._impl._locator
        assert isinstance(locator, _evidence_engine._EngineCacheLocator)
    copies = []
    for path in sorted(sources):
        copy = tmp_path / os.path.basename(path)
        shutil.copy2(path, copy)
        copies.append(str(copy))
    monkeypatch.setattr(_evidence_engine, "_SOURCES", tuple(copies))
    before = locator.get_source_stamp()
    for copy in copies:
        stamp = os.stat(copy)
        os.utime(copy, ns=(stamp.st_atime_ns, stamp.st_mtime_ns + 10**9))
        after = locator.get_source_stamp()
        assert after != before
        before = after


def test_engine_without_numbas_private_locator_is_compiled_the_same_and_not_kept(
        tmp_path, monkeypatch, rng):
    # A Numba without the private _CacheLocator: no locator is registered, the engine's
    # functions are compiled with cache=False (nothing on disk, not even under Numba's
    # own key of engine.py alone) from the same source, so they return the same numbers,
    # to the last bit, as the cached ones.
    import numba
    import numba.core.caching as caching
    from numba.core import config

    n_locators = len(caching.CacheImpl._locator_classes)
    monkeypatch.delattr(caching, "_CacheLocator")
    assert _evidence_engine._engine_locator() is None
    assert len(caching.CacheImpl._locator_classes) == n_locators
    monkeypatch.setattr(_evidence_engine, "_EngineCacheLocator", None)
    monkeypatch.setattr(config, "CACHE_DIR", str(tmp_path))
    cached = _evidence_engine._prior_gain
    compiled = _evidence_engine.njit(cache=True, error_model="numpy")(cached.py_func)
    S, Q, scale = rng.uniform(0.05, 5.0, 50), rng.normal(0.0, 3.0, 50), rng.uniform(0.2, 8.0, 50)
    alpha = np.where(rng.random(50) < 0.5, np.inf, rng.uniform(0.01, 50.0, 50))
    for m in range(50):
        args = (S[m], Q[m], alpha[m], scale[m], 0.1, 0.1)
        np.testing.assert_array_equal(compiled(*args), cached(*args))  # NaN where it is NaN
    assert not list(tmp_path.iterdir())
    # Where the cache is asked for, this folder is where Numba keeps it.
    numba.njit(cache=True, error_model="numpy")(cached.py_func)(*args)
    assert any(p.suffix == ".nbi" for p in tmp_path.rglob("*"))
