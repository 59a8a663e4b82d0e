"""General Gamma hyperpriors in the evidence method (Tipping 2001, Appendix A)."""

import numpy as np
import pytest
from scipy.optimize import minimize_scalar

from rvm_ppl.closed_form.evidence import (
    alpha_maximiser,
    alpha_objective,
    fit_evidence_regression,
    log_evidence_dense,
    prior_penalty,
    resolve_evidence_priors,
)
from rvm_ppl.datasets.loaders import make_sinc
from rvm_ppl.kernels.kernel import RBF, Polynomial, design_matrix


def _problems():
    rng = np.random.default_rng(11)
    X, y = make_sinc(60, random_state=3)
    yield "sinc-rbf", design_matrix(X, X, RBF(1 / 9)), y / np.std(y)
    A = rng.standard_normal((50, 12))
    y = A[:, :3] @ np.array([1.0, -2.0, 0.5]) + 0.3 * rng.standard_normal(50)
    yield "linear", A, y / np.std(y)
    Xp = rng.uniform(-1, 1, (40, 2))
    y = Xp[:, 0] ** 2 + 0.1 * rng.standard_normal(40)
    yield "poly", design_matrix(Xp, Xp, Polynomial(2)), y / np.std(y)


PROBLEMS = list(_problems())
IDS = [p[0] for p in PROBLEMS]


def _penalised(Phi, y, res, i, log_a, a, b):
    """Dense penalised objective as a function of alpha_i alone (eq. 36, other terms fixed)."""
    alpha = res.alpha.copy()
    alpha[i] = np.exp(log_a)
    return log_evidence_dense(Phi, y, alpha, res.beta) + a * log_a - b * np.exp(log_a)


@pytest.mark.parametrize("name,Phi,y", PROBLEMS, ids=IDS)
def test_tiny_priors_reproduce_plain_type2_ml(name, Phi, y):
    plain = fit_evidence_regression(Phi, y)
    tiny = fit_evidence_regression(Phi, y, priors=dict(a=1e-12, b=1e-12, c=1e-12, d=1e-12))
    np.testing.assert_array_equal(tiny.active, plain.active)
    assert tiny.log_evidence == pytest.approx(plain.log_evidence, rel=1e-6)
    assert tiny.objective == pytest.approx(plain.log_evidence, rel=1e-6)


@pytest.mark.parametrize("name,Phi,y", PROBLEMS, ids=IDS)
def test_zero_priors_are_bit_for_bit_plain(name, Phi, y):
    plain = fit_evidence_regression(Phi, y)
    zero = fit_evidence_regression(Phi, y, priors=dict(a=0.0, b=0.0, c=0.0, d=0.0))
    assert zero.priors is None
    np.testing.assert_array_equal(zero.mu, plain.mu)
    np.testing.assert_array_equal(zero.alpha, plain.alpha)
    np.testing.assert_array_equal(zero.log_evidence_trace, plain.log_evidence_trace)
    assert zero.beta == plain.beta


@pytest.mark.parametrize("priors", [
    dict(a=1e-3, b=1e-3, c=1e-3, d=1e-3),
    dict(a=0.1, b=0.1, c=0.5, d=0.5),
    dict(a=2.0, b=1e-2),
    dict(b=1e-2, d=1.0),
], ids=["small", "moderate", "informative-alpha", "rates-only"])
@pytest.mark.parametrize("name,Phi,y", PROBLEMS, ids=IDS)
def test_penalised_objective_never_decreases_and_is_exact(name, Phi, y, priors):
    res = fit_evidence_regression(Phi, y, priors=priors)
    assert res.converged
    tr = res.objective_trace
    assert np.diff(tr).min() >= -1e-9 * np.abs(tr).max()
    dense = log_evidence_dense(Phi, y, res.alpha, res.beta)
    assert res.log_evidence == pytest.approx(dense, rel=1e-8)
    full_priors = resolve_evidence_priors(priors)
    penalty = prior_penalty(res.alpha, res.beta, full_priors)
    assert res.objective == pytest.approx(dense + penalty, rel=1e-8)
    assert tr[-1] == pytest.approx(res.objective, rel=1e-8)


def test_single_alpha_maximiser_matches_brute_force(sinc_data):
    _, y, Phi = sinc_data
    a, b = 0.05, 0.02
    res = fit_evidence_regression(Phi, y, priors=dict(a=a, b=b, c=0.01, d=0.01))
    alpha_star, value = alpha_maximiser(res.s, res.q, a, b)
    assert np.all(np.isfinite(alpha_star))
    out = np.flatnonzero(np.isinf(res.alpha))
    # In the model: its own alpha is the maximiser; outside: no finite alpha helps.
    assert np.all(value[res.active] > 0) and np.all(value[out] <= 0)
    np.testing.assert_allclose(res.alpha[res.active], alpha_star[res.active], rtol=1e-2)
    for i in [res.active[0], res.active[-1], out[0], out[len(out) // 2]]:
        opt = minimize_scalar(
            lambda la, i=i: -_penalised(Phi, y, res, i, la, a, b),
            bounds=(np.log(alpha_star[i]) - 10, np.log(alpha_star[i]) + 10),
            method="bounded",
            options={"xatol": 1e-8},
        )
        assert opt.x == pytest.approx(np.log(alpha_star[i]), abs=1e-4)
        # l(alpha*) is the change from leaving basis i out (Faul & Tipping's decomposition).
        ref = res.alpha.copy()
        ref[i] = np.inf
        left_out = log_evidence_dense(Phi, y, ref, res.beta)
        assert -opt.fun - left_out == pytest.approx(value[i], rel=1e-6, abs=1e-9)


@pytest.mark.parametrize("s,r,a,b,winner", [
    (0.1, 37.7, 0.08, 2e-4, 0),   # three stationary points, the small root wins
    (3.68, 52.8, 4.26, 2e-4, 2),  # three stationary points, the large root wins
])
def test_maximiser_picks_the_global_maximum_of_a_bimodal_objective(s, r, a, b, winner):
    q = np.sqrt(r * s)
    roots = np.roots([-2 * b * s, 2 * a - 4 * b * s, 1 - r + 4 * a - 2 * b * s, 1 + 2 * a])
    stationary = np.sort(roots.real[(np.abs(roots.imag) < 1e-12) & (roots.real > 0)]) * s
    assert stationary.size == 3
    alpha, value = alpha_maximiser(s, q, a, b)
    assert alpha[()] == pytest.approx(stationary[winner], rel=1e-10)
    grid = np.exp(np.linspace(-12, 16, 200_001))
    vals = alpha_objective(grid, s, q, a, b)
    assert value[()] >= vals.max() - 1e-12
    assert value[()] == pytest.approx(alpha_objective(alpha[()], s, q, a, b), rel=1e-12)


def test_maximiser_limits():
    s = np.array([2.0, 2.0, 5.0])
    q = np.array([3.0, 1.0, 0.5])
    plain_alpha, plain_value = alpha_maximiser(s, q)
    assert plain_alpha[0] == pytest.approx(4.0 / (9.0 - 2.0))
    assert np.isinf(plain_alpha[1:]).all() and (plain_value[1:] == 0).all()
    alpha, value = alpha_maximiser(s, q, 1e-12, 1e-12)
    assert alpha[0] == pytest.approx(plain_alpha[0], rel=1e-9)
    assert value[0] == pytest.approx(plain_value[0], rel=1e-9)
    # Irrelevant: finite but huge alpha ~ sqrt((s - q^2) / (2 b)), worth about nothing.
    assert alpha[1] == pytest.approx(np.sqrt((2.0 - 1.0) / 2e-12), rel=1e-3)
    assert -1e-4 < value[1] < 0


def test_noise_satisfies_the_prior_fixed_point(sinc_data):
    _, y, Phi = sinc_data
    c, d = 3.0, 0.05
    res = fit_evidence_regression(Phi, y, priors=dict(a=1e-3, b=1e-3, c=c, d=d))
    P = Phi[:, res.active]
    gamma = 1 - res.alpha[res.active] * np.diag(res.Sigma)
    ED = np.sum((y - P @ res.mu) ** 2)
    # Tipping (2001) eq. (46): sigma^2 = (||t - Phi mu||^2 + 2d) / (N - sum gamma + 2c).
    assert 1 / res.beta == pytest.approx((ED + 2 * d) / (len(y) - gamma.sum() + 2 * c), rel=1e-4)


def test_warm_start_from_a_converged_fit_stays_put(sinc_data):
    _, y, Phi = sinc_data
    priors = dict(a=0.01, b=0.01)
    res = fit_evidence_regression(Phi, y, priors=priors)
    again = fit_evidence_regression(Phi, y, priors=priors, beta=res.beta, warm_start=res)
    np.testing.assert_array_equal(again.active, res.active)
    assert again.objective == pytest.approx(res.objective, rel=1e-8)
    assert again.n_iter <= 15


@pytest.mark.parametrize("priors,match", [
    (dict(a=1.0, b=0.0), "needs b > 0"),
    (dict(a=-1.0, b=1.0), "non-negative"),
    (dict(e=1.0), "Unknown prior"),
])
def test_invalid_priors_are_refused(sinc_data, priors, match):
    _, y, Phi = sinc_data
    with pytest.raises(ValueError, match=match):
        fit_evidence_regression(Phi, y, priors=priors)


def test_falling_root_is_the_brackets_root_and_each_elements_own(rng):
    # driver.falling_root on the maximiser's cubics (Tipping 2001, eq. 36 with x = alpha / s):
    # the root a polynomial solver gives, to rounding, whether an element converges in the
    # plain Newton steps (a vague prior) or needs the guarded loop (a proper prior, a start
    # far from the root), and the same bits alone as in a batch.
    from rvm_ppl.closed_form import driver

    n = 300
    s = rng.uniform(0.05, 20.0, n)
    r = np.exp(rng.uniform(np.log(1.001), np.log(500.0), n))
    a = np.where(rng.random(n) < 0.5, 1e-6, rng.uniform(0.01, 5.0, n))
    b = np.where(a == 1e-6, 1e-6, rng.uniform(1e-4, 5.0, n))
    bs = b * s
    c3, c2, c1, c0 = -2.0 * bs, 2.0 * a - 4.0 * bs, 1.0 - r + 4.0 * a - 2.0 * bs, 1.0 + 2.0 * a
    # A bracket from near 0 to the Cauchy bound on the roots, where it holds one positive root.
    big = np.max(np.abs([c3, c2, c1, c0]), axis=0)
    hi = 1.0 + big / np.abs(c3)
    roots = [np.roots([c3[i], c2[i], c1[i], c0[i]]) for i in range(n)]
    pos = [rt.real[(np.abs(rt.imag) <= 1e-9 * np.abs(rt)) & (rt.real > 0)] for rt in roots]
    ok = np.array([p.size == 1 for p in pos])
    assert 0.3 * n < ok.sum() < n
    lo = np.full(n, 1e-12)
    got = driver.falling_root(lo[ok], hi[ok], c3[ok], c2[ok], c1[ok], c0[ok])
    for i, x in zip(np.flatnonzero(ok), got):
        assert x == pytest.approx(pos[i][0], rel=1e-10)
        alone = driver.falling_root(lo[i], hi[i], c3[i], c2[i], c1[i], c0[i])
        assert float(alone) == x  # bit for bit
