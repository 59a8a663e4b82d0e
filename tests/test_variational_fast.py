"""Tests of the sequential (pruning) variational RVR, ``fit_vb_regression``.

The reference is the full coordinate ascent of Bishop & Tipping (2000),
``fit_vb_regression_full``, and the dense bound ``_regression_bound`` that
the tests of ``test_variational.py`` check against Monte Carlo.
"""

import numpy as np
import pytest
from scipy.optimize import minimize_scalar

from rvm_ppl.closed_form.vb import (
    PREFETCH,
    _argmax_f_in,
    _argmax_f_out,
    _f_in,
    _f_out,
    _FastVB,
    _QW,
    _regression_bound,
    _regression_sweep,
    fit_vb_classification,
    fit_vb_regression,
    fit_vb_regression_full,
)
from rvm_ppl.kernels.basis import DenseBasis, KernelBasis, kernel_basis
from rvm_ppl.kernels.kernel import make_kernel

MONOTONE_RTOL = 1e-9  # rounding slack of the bound trace, relative to |L|


def _assert_monotone(trace):
    steps = np.diff(trace)
    worst = np.min(steps / np.abs(trace[1:])) if len(steps) else 0.0
    assert worst >= -MONOTONE_RTOL, f"bound decreased by {worst:.2e} (relative)"


def _rbf_design(x, centres):
    """``[1, exp(-(x_i - c_j)^2 / 9)]``: Tipping's sinc basis (r = 3) plus bias."""
    return np.column_stack([np.ones(len(x)), np.exp(-((x[:, None] - centres[None, :]) ** 2) / 9.0)])


def _sinc(seed, n=100, grid=True):
    rng = np.random.default_rng(seed)
    x = np.linspace(-10.0, 10.0, n) if grid else rng.uniform(-10.0, 10.0, n)
    return x, np.sinc(x / np.pi) + 0.1 * rng.standard_normal(n)


def _linear(seed, n=40, m=8):
    rng = np.random.default_rng(seed)
    Phi = rng.standard_normal((n, m))
    w = np.zeros(m)
    w[:3] = [2.0, -1.0, 0.5]
    return Phi, Phi @ w + 0.3 * rng.standard_normal(n)


# -- the one-basis problems behind every action ------------------------------------------


@pytest.mark.parametrize("a, b", [(1e-6, 1e-6), (1e-3, 1e-2), (1.0, 1.0), (2.0, 1e-4)])
def test_alpha_fixed_point_is_the_global_maximiser(a, b):
    """``_argmax_f_in`` against a bounded scalar search on a log grid (brute force)."""
    rng = np.random.default_rng(0)
    s = 10 ** rng.uniform(-3, 4, 60)
    q2 = s * 10 ** rng.uniform(-2, 2, 60)
    x = _argmax_f_in(s, q2, a, b)
    for k in range(len(s)):
        grid = np.logspace(-8, 12, 4001)
        f = _f_in(grid, s[k], q2[k], a, b)
        i = int(np.argmax(f))
        lo, hi = np.log(grid[max(i - 1, 0)]), np.log(grid[min(i + 1, len(grid) - 1)])
        opt = minimize_scalar(
            lambda u, k=k: -_f_in(np.exp(u), s[k], q2[k], a, b), bounds=(lo, hi),
            method="bounded", options={"xatol": 1e-12},
        )
        best = max(-opt.fun, f[i])
        assert _f_in(x[k], s[k], q2[k], a, b) >= best - 1e-9 * max(1.0, abs(best))


def test_alpha_fixed_point_tends_to_faul_tipping():
    """For ``a = b -> 0`` the fixed point is ``s^2 / (q^2 - s)`` (Faul & Tipping 2002, eq. 8)."""
    s = np.array([0.5, 3.0, 40.0, 1e3])
    q2 = np.array([2.0, 10.0, 41.0, 5e4])
    x = _argmax_f_in(s, q2, 1e-14, 1e-14)
    np.testing.assert_allclose(x, s**2 / (q2 - s), rtol=1e-6)
    # irrelevant (q^2 < s): the fixed point runs off to the hyperprior's scale
    assert _argmax_f_in(np.array([3.0]), np.array([1.0]), 1e-14, 1e-14)[0] > 1e6


@pytest.mark.parametrize("b", [1e-12, 1e-6, 1.0])
def test_pruned_factor_optimum(b):
    """``_argmax_f_out`` is the stationary point of ``_f_out`` (quadratic in closed form)."""
    a = 1e-6
    S = np.array([0.0, 1e-3, 1.0, 1e2, 1e5])
    x = _argmax_f_out(S, a, b)
    for k in range(len(S)):
        opt = minimize_scalar(lambda u, k=k: -_f_out(np.exp(u), S[k], a, b), bounds=(-30, 60),
                              method="bounded", options={"xatol": 1e-12})
        assert _f_out(x[k], S[k], a, b) >= -opt.fun - 1e-9 * max(1.0, abs(opt.fun))


# -- the state's bound is the bound -------------------------------------------------------


def _state_after(Phi, t, n_actions, seed=0):
    st = _FastVB(DenseBasis(Phi), t, 1e-6, 1e-6, 1e-6, 1e-6)
    rng = np.random.default_rng(seed)
    for _ in range(n_actions):
        gain, new_x = st.gains()
        j = int(np.argmax(gain))
        if st.out[j]:
            st.add(j, new_x[j])
        else:
            st.reestimate(j, new_x[j] * np.exp(rng.normal()))  # off the optimum on purpose
        st.update_beta()
    return st


def test_state_bound_equals_the_dense_bound():
    """The bound from cached cross products only equals eqs. (39)-(46) on the dense design."""
    x, t = _sinc(2, n=60)
    Phi = _rbf_design(x, x)
    st = _state_after(Phi, t, 12)
    assert 0 < len(st.active) < Phi.shape[1]
    shape, rate = st.q_alpha()
    dense = _regression_bound(Phi, t, st.qw, shape, rate, st.beta_shape, st.beta_rate,
                              1e-6, 1e-6, 1e-6, 1e-6)
    assert st.bound == pytest.approx(dense, rel=1e-11)


def _step_change(old, new, j, kind, a=1e-6, b=1e-6):
    """The bound's change by one step on ``j``, from the one-basis terms (module Notes).

    The bound is the Gaussian block's part plus ``F_out(x_m, s_m)`` of every
    pruned ``m``: ``j``'s own term moves from ``F_out`` (add) or ``F_in`` at
    its old ``x`` to ``F_in`` at its new one, and every other pruned ``m``
    moves with its projected ``s_m``.
    """
    s, q2 = old.s[j], old.q[j] ** 2
    start = _f_out(old.x[j], s, a, b) if kind == "add" else _f_in(old.x[j], s, q2, a, b)
    own = _f_in(new.x[j], s, q2, a, b) - start
    m = new.out
    return own + float(np.sum(_f_out(new.x[m], new.s[m], a, b) - _f_out(old.x[m], old.s[m], a, b)))


def _copy_state(st, cls=_FastVB):
    trial = cls.__new__(cls)
    trial.__dict__ = {k: (v.copy() if isinstance(v, (np.ndarray, list, dict)) else v)
                      for k, v in st.__dict__.items()}
    return trial


def test_predicted_gains_are_the_bound_changes():
    """Every add and re-estimate changes the bound by exactly its one-basis terms.

    An addition's predicted gain is a lower bound of its change (the other
    pruned weights' ``s_m`` can only fall); a re-estimation's prediction
    holds the pruned ``s_m`` fixed, and the step never lowers the bound.
    """
    x, t = _sinc(4, n=60)
    st = _state_after(_rbf_design(x, x), t, 6, seed=1)
    checked = {"add": 0, "reestimate": 0}
    for _ in range(25):
        gain, new_x = st.gains()
        # the best add and the best re-estimate, each from the same state
        for kind in ("add", "reestimate"):
            mask = st.out if kind == "add" else ~st.out
            g = np.where(mask, gain, -np.inf)
            j = int(np.argmax(g))
            if not np.isfinite(g[j]):
                continue
            trial = _copy_state(st)
            before = trial.bound
            (trial.add if kind == "add" else trial.reestimate)(j, new_x[j])
            change = trial.bound - before
            assert change == pytest.approx(_step_change(st, trial, j, kind), rel=1e-6, abs=1e-8)
            assert g[j] >= 0 and change >= -1e-9 * abs(before)
            if kind == "add":
                assert change >= g[j] - 1e-8 * abs(before)
            checked[kind] += 1
        j = int(np.argmax(gain))
        (st.add if st.out[j] else st.reestimate)(j, new_x[j])
        st.update_beta()
    assert checked["add"] >= 3 and checked["reestimate"] >= 10


# -- the fit -------------------------------------------------------------------------------


@pytest.mark.parametrize("warmup", [False, True])
@pytest.mark.parametrize("seed", range(4))
def test_bound_never_decreases(seed, warmup):
    x, t = _sinc(seed, n=150, grid=False)
    t = t / t.std()
    basis = kernel_basis(make_kernel("rbf", gamma=1 / 9), x[:, None])
    res = fit_vb_regression(basis, t, noise_warmup=warmup)
    assert res.converged and len(res.bound_trace) == res.n_iter
    _assert_monotone(res.bound_trace)
    assert res.bound_trace[-1] > res.bound_trace[0]


@pytest.mark.parametrize("priors", [dict(a=1.0, b=1.0, c=1.0, d=1.0), dict(a=1e-10, b=1e-10),
                                    dict(a=1e-3, b=10.0)])
def test_bound_never_decreases_other_priors(priors):
    x, t = _sinc(5, n=80)
    res = fit_vb_regression(_rbf_design(x, x), t, **priors)
    assert res.converged
    _assert_monotone(res.bound_trace)
    np.testing.assert_allclose(res.alpha_shape, priors["a"] + 0.5)


def test_result_contract():
    x, t = _sinc(0, n=80)
    Phi = _rbf_design(x, x)
    res = fit_vb_regression(Phi, t)
    M = Phi.shape[1]
    k = len(res.active)
    assert 0 < k < M and np.all(np.diff(res.active) > 0)
    assert res.mean.shape == res.weight_var.shape == res.alpha_shape.shape == (M,)
    assert res.alpha_rate.shape == res.pruned.shape == (M,) and res.cov.shape == (k, k)
    np.testing.assert_array_equal(np.flatnonzero(~res.pruned), res.active)
    np.testing.assert_array_equal(res.mean[res.pruned], 0.0)
    np.testing.assert_allclose(res.cov, res.cov.T)
    np.testing.assert_allclose(res.weight_var[res.active], np.diag(res.cov))
    np.linalg.cholesky(res.cov)
    # pruned: Q(alpha_m) = Gamma(a + 1/2, b + v_m / 2), v_m = 1 / (E[alpha_m] + s_m) with the
    # projected s_m = E[beta] ||phi_m||^2 - E[beta]^2 c_m^T Sigma c_m, c_m = Phi_A^T phi_m, and
    # coupling K = -E[beta] Sigma Phi_A^T Phi_P
    p = res.pruned
    np.testing.assert_allclose(res.alpha_rate[p], 1e-6 + 0.5 * res.weight_var[p], rtol=1e-10)
    Eb = res.beta_shape / res.beta_rate
    C = Phi[:, res.active].T @ Phi[:, p]
    s = Eb * (Phi[:, p] ** 2).sum(0) - Eb**2 * np.einsum("km,km->m", C, res.cov @ C)
    np.testing.assert_allclose(res.weight_var[p], 1.0 / (res.alpha_mean[p] + s), rtol=1e-8)
    np.testing.assert_allclose(res.coupling[:, p], -Eb * res.cov @ C, rtol=1e-8, atol=1e-14)
    np.testing.assert_array_equal(res.coupling[:, res.active], 0.0)
    assert res.beta_shape == pytest.approx(1e-6 + len(t) / 2) and res.xi is None
    # deterministic
    again = fit_vb_regression(Phi, t)
    np.testing.assert_array_equal(again.bound_trace, res.bound_trace)


def test_fit_is_a_fixed_point_of_the_full_updates_in_its_family():
    """Bishop & Tipping's sweeps, restricted to the fit's active set, barely move it.

    ``_regression_sweep`` is the full coordinate ascent with the pruned weights
    held as ``N(0, v_m)``; started from the sequential fit it must stay put
    (that fit is a stationary point of the same bound in the same family).
    """
    x, t = _sinc(1)
    Phi = _rbf_design(x, x)
    res = fit_vb_regression(Phi, t, tol=1e-10)
    state = (res.alpha_shape, res.alpha_rate, res.beta_shape, res.beta_rate)
    col_sq = (Phi**2).sum(0)
    bounds = []
    for _ in range(50):
        qw, state, bound = _regression_sweep(Phi, t, col_sq, state, res.active, (1e-6,) * 4)
        bounds.append(bound)
    _assert_monotone([res.bound] + bounds)
    assert bounds[-1] - res.bound <= 1e-7 * abs(res.bound)
    # neighbouring kernels (10 and 11 here) trade weight along a nearly flat
    # ridge of the bound; the function they represent does not move
    np.testing.assert_allclose(Phi @ qw.mean, Phi @ res.mean, atol=2e-4)
    np.testing.assert_allclose(qw.mean, res.mean, atol=2e-3)
    np.testing.assert_allclose(state[1], res.alpha_rate, rtol=1e-2)


@pytest.mark.parametrize("seed", [0, 1])
def test_agrees_with_the_full_fit_on_a_small_linear_problem(seed):
    """Few, weakly coupled columns: the restriction costs almost nothing."""
    Phi, t = _linear(seed)
    fast = fit_vb_regression(Phi, t)
    full = fit_vb_regression_full(Phi, t, tol=1e-9)
    assert fast.bound <= full.bound + 1e-9 * abs(full.bound)
    assert full.bound - fast.bound < 0.05
    kept = np.flatnonzero(full.alpha_mean < 100)
    assert set(kept) <= set(fast.active)
    np.testing.assert_allclose(fast.mean[kept], full.mean[kept], atol=5e-3)
    np.testing.assert_allclose(fast.alpha_mean[kept], full.alpha_mean[kept], rtol=0.02)
    np.testing.assert_allclose(Phi @ fast.mean, Phi @ full.mean, atol=1e-2)
    assert fast.beta_shape / fast.beta_rate == pytest.approx(full.beta_shape / full.beta_rate,
                                                             rel=0.01)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_agrees_with_the_full_fit_on_sinc(seed):
    """Noisy sinc, N = 100: bound, predictions and noise of both fits.

    Neighbouring kernels are nearly collinear, so the two fits may spread the
    same function over different kernels: they are compared on what they
    predict, and the bound of the restricted family is below the full one by
    the (measured, 3.8-4.5 nats of about 1 300) price of the restriction.
    """
    x, t = _sinc(seed)
    Phi = _rbf_design(x, x)
    fast = fit_vb_regression(Phi, t)
    full = fit_vb_regression_full(Phi, t, tol=1e-9, max_iter=20000)
    gap = full.bound - fast.bound
    print(f"\nseed {seed}: {len(fast.active)} active, bound gap {gap:.3f} nats")
    assert -1e-9 * abs(full.bound) <= gap < 6.0
    xt = np.linspace(-10.0, 10.0, 500)
    P = _rbf_design(xt, x)
    diff = P @ (fast.mean - full.mean)
    assert np.sqrt(np.mean(diff**2)) < 0.01 and np.max(np.abs(diff)) < 0.03  # noise sd 0.1
    noise_fast = np.sqrt(fast.beta_rate / fast.beta_shape)
    noise_full = np.sqrt(full.beta_rate / full.beta_shape)
    assert noise_fast == pytest.approx(noise_full, rel=0.05)


def test_dense_and_lazy_bases_give_the_same_fit():
    x, t = _sinc(3, n=120, grid=False)
    kern = make_kernel("rbf", gamma=1 / 9)
    Phi = np.column_stack([np.ones(len(x)), kern(x[:, None], x[:, None])])
    dense = fit_vb_regression(Phi, t)
    lazy = fit_vb_regression(KernelBasis(kern, x[:, None]), t)
    np.testing.assert_array_equal(dense.active, lazy.active)
    np.testing.assert_allclose(dense.bound_trace, lazy.bound_trace, rtol=1e-9)
    np.testing.assert_allclose(dense.mean, lazy.mean, atol=1e-7)


class _CountingBasis(KernelBasis):
    """A lazy kernel basis that records how many columns are materialised at once."""

    widest = 0
    columns_built = 0

    def columns(self, idx):
        idx = np.atleast_1d(idx)
        type(self).widest = max(type(self).widest, idx.size)
        type(self).columns_built += idx.size
        return super().columns(idx)


def test_never_materialises_the_design():
    """N = 1 500: at most PREFETCH columns at a time, and a minority of the N + 1 in all.

    Every column built is one whose cross products ``Phi^T phi_j`` were
    wanted (an added basis function or a prefetched candidate).
    """
    rng = np.random.default_rng(0)
    x = rng.uniform(-10, 10, 1500)
    t = np.sinc(x / np.pi) + 0.1 * rng.standard_normal(1500)
    basis = _CountingBasis(make_kernel("rbf", gamma=1 / 9), x[:, None])
    res = fit_vb_regression(basis, t / t.std())
    assert res.converged
    assert _CountingBasis.widest <= PREFETCH
    assert _CountingBasis.columns_built < 0.5 * basis.n_basis
    _assert_monotone(res.bound_trace)


def test_nothing_to_explain():
    """Targets orthogonal to every column: no basis function is added."""
    rng = np.random.default_rng(2)
    Q, _ = np.linalg.qr(rng.standard_normal((30, 4)))
    t = rng.standard_normal(30)
    t -= Q @ (Q.T @ t)
    res = fit_vb_regression(Q, t)
    assert res.converged and res.active.size == 0 and res.cov.shape == (0, 0)
    np.testing.assert_array_equal(res.mean, 0.0)
    _assert_monotone(res.bound_trace)
    # the noise explains everything: E[1/beta] ~ ||t||^2 / N
    assert res.beta_rate / res.beta_shape == pytest.approx(t @ t / 30, rel=0.05)


def test_bad_inputs():
    x, t = _sinc(0, n=20)
    basis = KernelBasis(make_kernel("rbf", gamma=1 / 9), x[:, None])
    with pytest.raises(ValueError, match="match the basis"):
        fit_vb_regression(basis, t[:-1])
    with pytest.raises(ValueError, match="finite"):
        fit_vb_regression(basis, np.where(np.arange(20) == 3, np.inf, t))
    with pytest.raises(ValueError, match="tol"):
        fit_vb_regression(basis, t, tol=-1.0)
    with pytest.raises(ValueError, match="d must be positive"):
        fit_vb_regression(basis, t, d=-1.0)
    with pytest.raises(ValueError, match="0 or 1"):
        fit_vb_classification(basis, (t > 0).astype(float) * 2)


# -- the coupled family: w_A = mu_A + K w_P + eps, w_P ~ prod N(0, v_m) ------------------


def _joint_qw(st, K=None, v=None):
    """The state's ``Q(w)`` as one full Gaussian over every weight (brute force).

    ``Cov[w_A] = Sigma_A + K V K^T``, ``Cov[w_A, w_P] = K V``, ``Cov[w_P] = V``;
    ``K`` and ``v`` default to the state's.
    """
    act, out = np.asarray(st.active, dtype=int), np.flatnonzero(st.out)
    K = -st.U[:, out] if K is None else K
    v = st.qw.var[out] if v is None else v
    cov = np.zeros((st.M, st.M))
    cov[np.ix_(act, act)] = st.Sigma + (K * v) @ K.T
    cov[np.ix_(act, out)] = K * v
    cov[np.ix_(out, act)] = (K * v).T
    cov[out, out] = v
    return _QW.full(st.qw.mean, cov)


def _dense_bound(Phi, t, st, qw):
    shape, rate = st.q_alpha()
    return _regression_bound(Phi, t, qw, shape, rate, st.beta_shape, st.beta_rate,
                             1e-6, 1e-6, 1e-6, 1e-6)


@pytest.mark.parametrize("seed", [0, 3])
def test_coupled_family_bound_is_eq39_with_full_matrices(seed):
    """The state's bound equals Bishop & Tipping's eq. (39) on the joint covariance of w."""
    x, t = _sinc(seed, n=50)
    Phi = _rbf_design(x, x)
    st = _state_after(Phi, t, 10, seed=seed)
    assert 0 < len(st.active) < Phi.shape[1]
    assert st.bound == pytest.approx(_dense_bound(Phi, t, st, _joint_qw(st)), rel=1e-10)


def test_coupled_family_is_the_optimum_of_its_family():
    """At the same Q(alpha), Q(beta): the independent family (K = 0) is lower, and no
    perturbation of K or of the v_m raises the bound."""
    x, t = _sinc(1, n=50)
    Phi = _rbf_design(x, x)
    st = _state_after(Phi, t, 10, seed=2)
    out = np.flatnonzero(st.out)
    K, v = -st.U[:, out], st.qw.var[out]
    k = K.shape[0]
    S = st.Eb * st.norms2[out]
    independent = _dense_bound(Phi, t, st, _joint_qw(st, np.zeros((k, out.size)),
                                                     1.0 / (st.x[out] + S)))
    assert independent < st.bound - 1e-3
    rng = np.random.default_rng(0)
    for eps in (1e-1, 1e-2, 1e-3):
        R = rng.standard_normal(K.shape)
        for sign in (1.0, -1.0):
            moved = K + sign * eps * R * np.abs(K).max()
            assert _dense_bound(Phi, t, st, _joint_qw(st, moved, v)) < st.bound
            scaled = v * np.exp(sign * eps * rng.standard_normal(v.size))
            assert _dense_bound(Phi, t, st, _joint_qw(st, K, scaled)) < st.bound


def test_reestimation_never_lowers_the_bound():
    """A re-estimation far from the optimum falls back to the coordinate step of Q(alpha_j)."""
    x, t = _sinc(2, n=60)
    st = _state_after(_rbf_design(x, x), t, 10, seed=3)
    fallbacks = 0
    for j in st.active:
        for factor in (1e-4, 1e4):
            trial = _copy_state(st)
            trial.reestimate(j, st.x[j] * factor)
            assert trial.bound >= st.bound
            fallbacks += trial.x[j] != st.x[j] * factor
    assert fallbacks >= len(st.active)


@pytest.mark.parametrize("scale", [1e-3, 1.0])
def test_collinear_kernel_columns_do_not_feed_the_noise(scale):
    """y = x + 5 + 0.1 e on x = 1..100 under a linear kernel (rank one).

    Every column but one lies in the span of the block; the noise sd is the
    full sweep's (0.0982 at both scales) and the bound within 1e-3 of its.
    """
    rng = np.random.default_rng(0)
    x = np.arange(1.0, 101.0)
    y = x + 5.0 + 0.1 * rng.standard_normal(100)
    Phi = np.column_stack([np.ones(100), np.outer(scale * x, scale * x)])
    t = y / y.std()
    seq = fit_vb_regression(Phi, t)
    full = fit_vb_regression_full(Phi, t)
    noise = [y.std() * np.sqrt(r.beta_rate / r.beta_shape) for r in (seq, full)]
    assert noise[0] == pytest.approx(noise[1], rel=0.1)
    assert 0.09 < noise[0] < 0.11
    assert seq.bound >= full.bound - 1e-3 * abs(full.bound)


def test_estimator_predictive_variance_is_the_familys():
    """RVR(method="vb").predict's sd: Var[phi(x)^T w] under the joint Gaussian of every weight
    (support and outside, with their coupling), plus the noise."""
    from rvm_ppl import RVR

    rng = np.random.default_rng(0)
    X = rng.uniform(-10, 10, (300, 1))
    y = np.sinc(X[:, 0] / np.pi) + 0.1 * rng.standard_normal(300)
    m = RVR(gamma=1 / 9, method="vb").fit(X, y)
    r = m.result_
    M = len(r.alpha)
    S, out = np.asarray(r.support), np.flatnonzero(r.outside_var > 0)
    assert out.size > 0 and np.abs(r.outside_coupling).max() > 0
    K, v = r.outside_coupling[:, out], r.outside_var[out]
    cov = np.zeros((M, M))
    cov[np.ix_(S, S)] = r.cov + (K * v) @ K.T
    cov[np.ix_(S, out)] = K * v
    cov[np.ix_(out, S)] = (K * v).T
    cov[out, out] = v
    Xt = np.linspace(-12, 12, 50)[:, None]
    P = m._design(Xt, np.arange(M))
    _, sd = m.predict(Xt, return_std=True)
    np.testing.assert_allclose(sd**2, r.noise_var + np.einsum("nj,jk,nk->n", P, cov, P),
                               rtol=1e-8)
