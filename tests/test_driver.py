"""The sequential driver's decisions and the Laplace approximation written once for K >= 1."""

import numpy as np
import pytest
from scipy.special import expit, softmax

from rvm_ppl.closed_form import driver, laplace


def test_the_compiled_engine_runs_the_drivers_code():
    # Compiled from the driver's own code objects, not from a copy kept in step:
    # the decisions and the loop that takes them.
    from rvm_ppl.closed_form import engine

    for name in ("relevant", "add_gain", "add_alpha", "left_out", "reestimate_alpha",
                 "reestimate_gain", "delete_gain", "prefer", "noise_due", "block_aligned",
                 "release", "reblock", "release_refused", "unblock", "climb"):
        assert engine._decisions[name].py_func.__code__ is getattr(driver, name).__code__
    # The loop calls the engine's operations there and the statistics interface here.
    assert engine._decisions["climb"].py_func.__globals__["ops"] is engine._OPS
    assert driver.ops is driver._Ascent
    assert set(vars(engine._OPS)) >= {n for n in vars(driver._Ascent) if not n.startswith("_")
                                       and n != "note"}


def _gains_brute_force(S, Q, act, alpha, blocked):
    """Every candidate's gain from Faul & Tipping's l(alpha), by evaluating it (no closed form)."""
    def ell(a, s, q):  # one basis's share of the log evidence; l(inf) = 0
        return 0.0 if np.isinf(a) else 0.5 * (np.log(a / (a + s)) + q * q / (a + s))

    out = {}
    for m in range(S.size):
        if m in act:
            i = list(act).index(m)
            s = alpha[i] * S[m] / (alpha[i] - S[m])
            q = alpha[i] * Q[m] / (alpha[i] - S[m])
        else:
            s, q = S[m], Q[m]
        best = s * s / (q * q - s) if q * q > s else np.inf
        cur = alpha[list(act).index(m)] if m in act else np.inf
        if m in act or (not blocked[m] and np.isfinite(best)):
            out[m] = (ell(best, s, q) - ell(cur, s, q), best)
    return out


@pytest.mark.parametrize("seed", range(5))
def test_gains_equal_the_change_of_the_evidence_term(seed):
    rng = np.random.default_rng(seed)
    M = 30
    S = rng.uniform(0.5, 3.0, M)
    Q = rng.normal(0.0, 2.0, M)
    act = np.array([2, 7, 11, 20])
    alpha = rng.uniform(0.5, 5.0, act.size)
    S[act] = alpha * rng.uniform(0.1, 0.9, act.size)  # in the model: S < alpha
    blocked = np.zeros(M, dtype=bool)
    blocked[[3, 4]] = True
    ad, g_ad, a_ad, g_a, new_a, delete = driver.scalar_gains(S, Q, act, alpha, blocked)
    ref = _gains_brute_force(S, Q, act, alpha, blocked)
    got = {int(m): (g, a) for m, g, a in zip(ad, g_ad, a_ad, strict=True)}
    got.update({int(m): (g, a) for m, g, a in zip(act, g_a, new_a, strict=True)})
    assert set(got) == set(ref)
    for m, (g, a) in got.items():
        assert g == pytest.approx(ref[m][0], rel=1e-9, abs=1e-12)
        assert a == pytest.approx(ref[m][1], rel=1e-9)
    np.testing.assert_array_equal(delete, np.isinf(new_a))


def test_a_pending_deletion_wins_and_small_reestimates_stop():
    act, alpha = np.array([0, 1]), np.array([1.0, 2.0])
    gain_a = np.array([0.3, 0.01])
    # A deletion gaining 0.01 beats an addition gaining 5 (SparseBayes's preference).
    a, best, new, gain, stop = driver.prefer(act, alpha, gain_a, np.array([1.5, np.inf]),
                                             np.array([False, True]), 7, 5.0, 0.5, 1e-3, 0.0)
    assert (a, best, gain, stop) == (driver.DELETE_CODE, 1, 0.01, False) and np.isinf(new)
    # No deletion: the addition wins only when it gains strictly more.
    a, best, *_ = driver.prefer(act, alpha, gain_a, np.array([1.5, 2.5]), np.zeros(2, bool), 7, 0.3,
                                0.5, 1e-3, 0.0)
    assert (a, best) == (driver.REESTIMATE_CODE, 0)
    # A re-estimation moving log alpha by less than tol, or gaining less than min_gain, stops.
    *_, stop = driver.prefer(act, alpha, gain_a, np.array([1.0005, 2.5]), np.zeros(2, bool), -1,
                             0.0, 0.0, 1e-3, 0.0)
    assert stop
    *_, stop = driver.prefer(act, alpha, gain_a, np.array([1.5, 2.5]), np.zeros(2, bool), -1, 0.0,
                             0.0, 1e-3, 0.5)
    assert stop


def test_top_candidates_are_the_largest_gains_best_first():
    rng = np.random.default_rng(1)
    idx = np.arange(0, 400, 2)
    gains = np.round(rng.uniform(0, 1, idx.size), 2)  # many ties
    for n in (5, 16, 64):
        want = sorted(zip(-gains, idx, strict=True))[:n]
        got = driver.top_candidates(idx, gains, n)
        g = gains[np.searchsorted(idx, got)]
        np.testing.assert_array_equal(g, [-v for v, _ in want])  # the n largest, best first
        tie = g[1:] == g[:-1]
        assert np.all(got[1:][tie] > got[:-1][tie])  # equal gains in index order


def _brute_hessian(cols, cls, lik, w, eps=1e-5):
    """Negated Hessian of log P(t | w) by central differences of the analytic gradient."""
    J = w.size
    H = np.empty((J, J))
    for j in range(J):
        e = np.zeros(J)
        e[j] = eps
        rp = lik.residual(laplace.latent(cols, cls, w + e, lik.K))
        rm = lik.residual(laplace.latent(cols, cls, w - e, lik.K))
        gp, gm = laplace.gradient(cols, cls, rp, 0.0, w), laplace.gradient(cols, cls, rm, 0.0, w)
        H[:, j] = -(gp - gm) / (2 * eps)
    return H


@pytest.mark.parametrize("K", [1, 3])
def test_laplace_hessian_weights_give_the_hessian_of_the_log_likelihood(K):
    rng = np.random.default_rng(K)
    N, B = 40, 4
    Phi = rng.normal(size=(N, B))
    if K == 1:
        lik = laplace.BernoulliLogit((rng.random(N) < 0.5).astype(float))
        cols, cls = Phi, np.zeros(B, dtype=int)
    else:
        lik = laplace.Softmax(np.eye(K)[rng.integers(0, K, N)])
        cols, cls = np.repeat(Phi, K, axis=1), np.tile(np.arange(K), B)
    w = rng.normal(0, 0.5, cols.shape[1])
    F = laplace.latent(cols, cls, w, K)
    H = laplace.neg_hessian(cols, cls, *lik.weights(F), np.zeros(cols.shape[1]))
    np.testing.assert_allclose(H, _brute_hessian(cols, cls, lik, w), rtol=1e-6, atol=1e-8)
    # and the likelihoods are the Bernoulli / categorical ones
    P = expit(F[:, 0]) if K == 1 else softmax(F, axis=1)
    ref = (np.sum(lik.t * np.log(P) + (1 - lik.t) * np.log1p(-P)) if K == 1
           else np.sum(lik.T * np.log(P)))
    assert lik.log_likelihood(F) == pytest.approx(ref, rel=1e-12)


def test_two_class_softmax_mode_is_the_binary_mode_of_the_difference():
    # K = 2 softmax with shared alpha is the Bernoulli model on w_1 - w_2 with
    # precision alpha / 2 (categorical module docstring): the modes agree.
    rng = np.random.default_rng(0)
    N, B = 60, 5
    Phi = rng.normal(size=(N, B))
    t = (rng.random(N) < expit(Phi @ rng.normal(size=B))).astype(float)
    alpha = rng.uniform(0.5, 2.0, B)
    wb, Lb, llb, *_ = laplace.posterior_mode(Phi, np.zeros(B, int), laplace.BernoulliLogit(t),
                                             alpha / 2, grad_tol=1e-12, max_iter=100)
    cols, cls = np.repeat(Phi, 2, axis=1), np.tile([0, 1], B)
    T = np.column_stack([1 - t, t])
    ws, Ls, lls, *_ = laplace.posterior_mode(cols, cls, laplace.Softmax(T), np.repeat(alpha, 2),
                                             grad_tol=1e-12, max_iter=100)
    np.testing.assert_allclose(ws[1::2] - ws[0::2], wb, rtol=1e-8, atol=1e-10)
    assert lls == pytest.approx(llb, rel=1e-10)
