"""Type-II maximum likelihood for the multinomial (softmax) RVM.

Oracles: scipy's optimiser for the posterior mode; Gauss-Hermite quadrature
of the exact evidence in the space of class contrasts; the closed-form
Gaussian integral of the frozen-``B`` (quadratic) likelihood for every
predicted gain; the Bernoulli fitter for ``K = 2``; known class
probabilities for calibration. Run with ``-s`` to see the figures.
"""

import numpy as np
import pytest
from reference import (
    laplace_log_evidence,
    laplace_log_evidence_multinomial,
    posterior_mode_multinomial,
)
from scipy import optimize
from scipy.special import logsumexp, roots_hermite, softmax

from rvm_ppl.closed_form.bernoulli import (
    fit_evidence_bernoulli,
    predict_proba_moderated,
)
from rvm_ppl.closed_form.categorical import (
    _Laplace,
    _maximise_group,
    fit_evidence_multinomial,
    group_gain,
    group_out_factors,
    predict_proba_multinomial,
)
from rvm_ppl.closed_form.evidence import out_factors
from rvm_ppl.datasets.loaders import make_three_class, three_class_proba
from rvm_ppl.kernels.basis import DenseBasis, KernelBasis
from rvm_ppl.kernels.kernel import RBF, design_matrix


def _softmax_problem(rng, N, M, K):
    X = rng.normal(size=(N, M - 1))
    Phi = np.column_stack([np.ones(N), X])
    W = rng.normal(size=(K, M))
    P = softmax(Phi @ W.T, axis=1)
    y = (rng.random(N)[:, None] > np.cumsum(P, axis=1)).sum(axis=1)
    return Phi, y


def _neg_log_post(v, Phi, y, alpha):
    """Negative log posterior of eq. (28) with the ARD prior, written independently."""
    K, M = alpha.shape
    W = v.reshape(K, M)
    A = Phi @ W.T
    return -(A[np.arange(len(y)), y].sum() - logsumexp(A, axis=1).sum()) + 0.5 * np.sum(
        alpha * W**2
    )


# -- posterior mode ------------------------------------------------------------


def test_posterior_mode_matches_scipy():
    rng = np.random.default_rng(1)
    K, M = 3, 5
    Phi, y = _softmax_problem(rng, 90, M, K)
    alpha = rng.uniform(0.1, 5, size=(K, M))
    W, _, grad_max = posterior_mode_multinomial(Phi, y, alpha)

    def grad(v, *_):
        Wv = v.reshape(K, M)
        P = softmax(Phi @ Wv.T, axis=1)
        T = np.eye(K)[y]
        return (-(T - P).T @ Phi + alpha * Wv).ravel()

    ref = optimize.minimize(
        _neg_log_post,
        np.zeros(K * M),
        args=(Phi, y, alpha),
        jac=grad,
        method="BFGS",
        options={"gtol": 1e-10},
    )
    assert grad_max < 1e-6
    np.testing.assert_allclose(W.ravel(), ref.x, atol=1e-6)
    assert _neg_log_post(W.ravel(), Phi, y, alpha) <= ref.fun + 1e-10


def test_shared_alpha_mode_sums_to_zero():
    # With one alpha per basis shared by the classes, summing the stationarity
    # condition Phi^T (T - Y) = W A over k gives sum_k w_k = 0 (module docstring).
    rng = np.random.default_rng(2)
    Phi, y = _softmax_problem(rng, 60, 4, 4)
    W, _, _ = posterior_mode_multinomial(Phi, y, rng.uniform(0.5, 2, 4))
    np.testing.assert_allclose(W.sum(axis=0), 0.0, atol=1e-8)
    assert np.abs(W).max() > 0.1


# -- Laplace log evidence against quadrature -------------------------------------


def _exact_log_evidence(Phi, y, alpha, n_nodes):
    """``log P(y | alpha)`` by Gauss-Hermite quadrature over the class contrasts.

    The likelihood depends on ``W`` only through ``d_k = w_k - w_K``
    (k < K); their prior is Gaussian with covariance
    ``diag(1/alpha_k) + 1/alpha_K`` per basis, so the evidence is an
    integral over ``(K - 1) M`` dimensions. The tensor grid is centred and
    scaled at the mode and Hessian of the integrand (found here with scipy),
    so the integrand ratio to its Gaussian is smooth.
    """
    K, M = alpha.shape
    C = np.stack([np.diag(1 / alpha[:-1, m]) + 1 / alpha[-1, m] for m in range(M)])
    P = np.linalg.inv(C)  # (K-1) x (K-1) blocks of a test oracle
    log_norm = -0.5 * np.sum(np.linalg.slogdet(C)[1]) - 0.5 * M * (K - 1) * np.log(2 * np.pi)

    def logf(D):  # D: (..., K - 1, M)
        A = np.einsum("nm,...km->...nk", Phi, D)
        A = np.concatenate([A, np.zeros(A.shape[:-1] + (1,))], axis=-1)
        ll = np.take_along_axis(A, np.broadcast_to(y[:, None], A.shape[:-1] + (1,)), -1)
        ll = np.sum(ll[..., 0] - logsumexp(A, axis=-1), axis=-1)
        return ll - 0.5 * np.einsum("...km,mkl,...lm->...", D, P, D) + log_norm

    dim = (K - 1) * M
    res = optimize.minimize(
        lambda v: -logf(v.reshape(K - 1, M)),
        np.zeros(dim),
        method="BFGS",
        options={"gtol": 1e-10},
    )
    Dm = res.x.reshape(K - 1, M)
    A = np.column_stack([Phi @ Dm.T, np.zeros(len(y))])
    Y = softmax(A, axis=1)[:, :-1]
    H = np.zeros((K - 1, M, K - 1, M))
    for k in range(K - 1):
        for j in range(K - 1):
            b = Y[:, k] * ((k == j) - Y[:, j])
            H[k, :, j, :] = (Phi * b[:, None]).T @ Phi
    for m in range(M):
        H[:, m, :, m] += P[m]
    R = np.linalg.cholesky(np.linalg.inv(H.reshape(dim, dim)))
    u, w = roots_hermite(n_nodes)
    U = np.stack(np.meshgrid(*([u] * dim), indexing="ij")).reshape(dim, -1).T
    logW = np.sum(np.log(np.stack(np.meshgrid(*([w] * dim), indexing="ij")).reshape(dim, -1)), 0)
    D = Dm.ravel() + np.sqrt(2) * U @ R.T
    vals = logf(D.reshape(-1, K - 1, M)) + np.sum(U**2, axis=1) + logW
    return logsumexp(vals) + 0.5 * dim * np.log(2) + np.sum(np.log(np.diag(R)))


def test_laplace_evidence_matches_quadrature():
    # Two basis functions, three classes, per-class alpha: a 4-D integral. The
    # quadrature is checked against a coarser grid (10 vs 12 nodes per
    # dimension agree to ~1e-6 at N = 10, 40 and 160). Laplace's error is of order 1/N
    # (measured, seeds 0-2: 0.08-0.12 nats at N = 10, 0.037-0.052 at N = 40,
    # 0.019-0.020 at N = 160).
    rng = np.random.default_rng(0)
    N = 160
    x = rng.normal(size=N)
    P = softmax(np.column_stack([1.5 * x, -0.5 - x, np.zeros(N)]), axis=1)
    y = (rng.random(N)[:, None] > np.cumsum(P, axis=1)).sum(axis=1)
    Phi = np.column_stack([np.ones(N), x])
    alpha = np.array([[1.0, 2.0], [0.5, 1.0], [1.0, 3.0]])
    diffs = {}
    for n in (10, 40, 160):
        exact = _exact_log_evidence(Phi[:n], y[:n], alpha, 12)
        if n == 40:  # (the grid is more accurate the larger N: closer to Gaussian)
            assert abs(exact - _exact_log_evidence(Phi[:n], y[:n], alpha, 10)) < 1e-4
        diffs[n] = laplace_log_evidence_multinomial(Phi[:n], y[:n], alpha, n_classes=3) - exact
        print(f"\nN={n:3d}: quadrature {exact:.6f}, Laplace - quadrature {diffs[n]:+.2e}")
    assert abs(diffs[10]) < 0.15
    assert abs(diffs[160]) < 0.03
    assert abs(diffs[160]) < abs(diffs[40]) / 1.5


# -- K = 2 is the Bernoulli RVM ---------------------------------------------------------


def _two_class_problem():
    rng = np.random.default_rng(1)
    X = rng.uniform(-3, 3, (120, 2))
    p = 1 / (1 + np.exp(-(2 * np.sin(X[:, 0]) + X[:, 1])))
    y = (rng.random(120) < p).astype(int)
    return X, y, design_matrix(X, X, RBF(gamma=0.5))


def test_two_classes_evidence_equals_bernoulli_at_fixed_alpha():
    # Shared alpha: the binary model on w_2 - w_1 with precision alpha / 2.
    # Per-class alpha: precision 1 / (1 / alpha_1 + 1 / alpha_2). The sum
    # w_1 + w_2 integrates out exactly, also in the Laplace approximation.
    _, y, Phi = _two_class_problem()
    rng = np.random.default_rng(3)
    a = rng.uniform(0.5, 3, 6)
    assert laplace_log_evidence_multinomial(Phi[:, :6], y, a) == pytest.approx(
        laplace_log_evidence(Phi[:, :6], y, a / 2), abs=1e-8
    )
    a1, a2 = rng.uniform(0.5, 3, (2, 6))
    assert laplace_log_evidence_multinomial(Phi[:, :6], y, np.vstack([a1, a2])) == pytest.approx(
        laplace_log_evidence(Phi[:, :6], y, 1 / (1 / a1 + 1 / a2)), abs=1e-8
    )


def test_two_classes_shared_fit_reproduces_bernoulli_fit():
    # Newton's method is affine invariant and the start, the candidate
    # statistics and the decisions map one to one, so the whole path is the
    # binary fitter's: same actions, same trace, alpha twice the binary one.
    _, y, Phi = _two_class_problem()
    rb = fit_evidence_bernoulli(Phi, y.astype(float))
    rm = fit_evidence_multinomial(Phi, y, shared_alpha=True)
    np.testing.assert_array_equal(rm.active, rb.active)
    # Both take the same additions and deletions (re-estimation counts may differ: the
    # binary fitter re-estimates with the curvature frozen between modes).
    assert {k: rm.counts[k] for k in ("add", "delete")} == {k: rb.counts[k] for k in ("add", "delete")}
    # The traces differ in length (the binary fitter records fewer, frozen-curvature
    # steps) but end at the same evidence.
    # (the binary fitter stops when a step gains < 1e-8 of |log evidence|).
    assert rm.log_evidence_trace[-1] == pytest.approx(rb.log_evidence_trace[-1], abs=1e-3)
    np.testing.assert_allclose(rm.alpha[0, rm.active], 2 * rb.alpha[rb.active], rtol=1e-2)
    # Both stop within their tolerance of the same optimum: weights agree to 0.2 %.
    np.testing.assert_allclose(rm.mu[1] - rm.mu[0], rb.mu, rtol=2e-3, atol=1e-3)
    # Predictive probabilities: plug-in exactly; integrated ones agree with
    # MacKay's moderated sigmoid to its known accuracy (~0.01-0.02).
    Pm0 = predict_proba_multinomial(Phi[:, rm.active], rm, n_draws=0)[:, 1]
    np.testing.assert_allclose(Pm0, 1 / (1 + np.exp(-Phi[:, rb.active] @ rb.mu)), atol=1e-3)
    Pm = predict_proba_multinomial(Phi[:, rm.active], rm, n_draws=20000)[:, 1]
    Pb = predict_proba_moderated(Phi[:, rb.active], rb.mu, rb.Sigma)
    assert np.max(np.abs(Pm - Pb)) < 0.03


# -- the gains the sequential algorithm promises -----------------------------------------


def _surrogate_log_evidence(cols, cls, alpha, A0, T):
    """Log evidence with the log likelihood replaced by its quadratic expansion at ``A0``.

    ``l(a) ~ l(a0) + (T - Y)^T (a - a0) - (a - a0)^T B (a - a0) / 2`` with the
    dense ``NK x NK`` block matrix ``B``; the Gaussian integral over the
    weights in closed form (with dense solves: a test oracle).
    """
    N, K = T.shape
    Y = softmax(A0, axis=1)
    B = np.zeros((N * K, N * K))
    for n in range(N):
        sl = slice(n * K, (n + 1) * K)
        B[sl, sl] = np.diag(Y[n]) - np.outer(Y[n], Y[n])
    Psi = np.zeros((N * K, cols.shape[1]))
    for j in range(cols.shape[1]):
        Psi[cls[j] :: K, j] = cols[:, j]
    r, a0 = (T - Y).ravel(), A0.ravel()
    l0 = np.sum(T * A0) - logsumexp(A0, axis=1).sum()
    const = l0 - r @ a0 - 0.5 * a0 @ B @ a0
    Pm = Psi.T @ B @ Psi + np.diag(alpha)
    b = Psi.T @ (r + B @ a0)
    return (
        const
        + 0.5 * np.sum(np.log(alpha))
        - 0.5 * np.linalg.slogdet(Pm)[1]
        + 0.5 * b @ np.linalg.solve(Pm, b)
    )


@pytest.mark.parametrize("shared", [True, False])
def test_predicted_gains_are_exact_for_frozen_B(shared):
    # The sequential algorithm chooses each step by the change it brings to
    # the evidence with B frozen at the current mode. Check that change,
    # for adding, re-estimating and deleting, against the closed-form
    # evidence of the quadratic likelihood, for arbitrary new alphas.
    rng = np.random.default_rng(4)
    K, N = 3, 30
    Phi, y = _softmax_problem(rng, N, 6, K)
    T = np.eye(K)[y]
    M = Phi.shape[1]
    in_model = [0, 2, 3]
    if shared:
        cls = np.tile(np.arange(K), len(in_model))
        pos = np.repeat(in_model, K)
        alpha = np.repeat(rng.uniform(0.3, 3, len(in_model)), K)
    else:  # class 0 uses 0 and 2, class 1 uses 3, class 2 uses 0
        cls, pos = np.array([0, 0, 1, 2]), np.array([0, 2, 3, 0])
        alpha = rng.uniform(0.3, 3, 4)
    cols = Phi[:, pos]
    # start at the mode found to 1e-12 so that the gains are exact to rounding
    alpha_km = np.full((K, M), np.inf)
    alpha_km[cls, pos] = alpha
    W, _, _ = posterior_mode_multinomial(Phi, y, alpha_km, max_iter=100, grad_tol=1e-12)
    st = _Laplace(DenseBasis(Phi), np.ones(M), T, cols, cls, pos, alpha, W[cls, pos], shared)
    A0 = np.zeros((N, K))
    np.add.at(A0.T, cls, (cols * st.w).T)
    base = _surrogate_log_evidence(cols, cls, alpha, A0, T)
    assert base == pytest.approx(st.logml, abs=1e-9)  # Laplace = surrogate at the mode

    checked = 0
    for new in (0.05, 1.0, 20.0):
        if shared:
            group_alpha = np.full(M, np.inf)
            group_alpha[in_model] = alpha[::K]
            lam, qt2 = group_out_factors(st.S, st.Q, group_alpha)
            for m in range(M):
                a2 = alpha.copy()
                if m in in_model:
                    g = in_model.index(m)
                    a2[K * g : K * g + K] = new
                    c2, k2 = cols, cls
                    pred = (
                        group_gain(np.array([new]), lam[m : m + 1], qt2[m : m + 1])[0]
                        - group_gain(group_alpha[m : m + 1], lam[m : m + 1], qt2[m : m + 1])[0]
                    )
                else:
                    a2 = np.append(alpha, np.full(K, new))
                    c2 = np.hstack([cols, np.tile(Phi[:, [m]], (1, K))])
                    k2 = np.append(cls, np.arange(K))
                    pred = group_gain(np.array([new]), lam[m : m + 1], qt2[m : m + 1])[0]
                actual = _surrogate_log_evidence(c2, k2, a2, A0, T) - base
                assert pred == pytest.approx(actual, abs=1e-8)
                checked += 1
        else:
            cand = list(cls * M + pos)
            s, q = out_factors(st.S.T.ravel(), st.Q.T.ravel(), cand, alpha)
            for k in range(K):
                for m in range(M):
                    c = k * M + m

                    def ell(a, c=c, s=s, q=q):
                        return 0.5 * (np.log(a) - np.log(a + s[c]) + q[c] ** 2 / (a + s[c]))

                    if c in cand:
                        a2 = alpha.copy()
                        a2[cand.index(c)] = new
                        c2, k2 = cols, cls
                        pred = ell(new) - ell(alpha[cand.index(c)])
                    else:
                        a2 = np.append(alpha, new)
                        c2, k2 = np.hstack([cols, Phi[:, [m]]]), np.append(cls, k)
                        pred = ell(new)
                    actual = _surrogate_log_evidence(c2, k2, a2, A0, T) - base
                    assert pred == pytest.approx(actual, abs=1e-8)
                    checked += 1
    # deletion of a whole group / weight: the gain is -l(alpha)
    if shared:
        g = 1
        keep = np.ones(len(alpha), bool)
        keep[K * g : K * g + K] = False
        m = in_model[g]
        pred = -group_gain(group_alpha[m : m + 1], lam[m : m + 1], qt2[m : m + 1])[0]
    else:
        keep = np.array([True, False, True, True])
        c = cand[1]
        pred = -0.5 * (np.log(alpha[1]) - np.log(alpha[1] + s[c]) + q[c] ** 2 / (alpha[1] + s[c]))
    actual = _surrogate_log_evidence(cols[:, keep], cls[keep], alpha[keep], A0, T) - base
    assert pred == pytest.approx(actual, abs=1e-8)
    assert checked == 3 * (M if shared else K * M)


def test_group_maximiser():
    rng = np.random.default_rng(5)
    # K = 1: Faul & Tipping's closed form alpha = s^2 / (q^2 - s), inf if q^2 <= s.
    s = rng.uniform(0.01, 1, 200)
    q2 = rng.uniform(0, 3, 200) * s
    a, _ = _maximise_group(s[:, None], q2[:, None])
    ref = np.where(q2 > s, s**2 / np.maximum(q2 - s, 1e-300), np.inf)
    assert np.array_equal(np.isinf(a), np.isinf(ref))
    fin = np.isfinite(ref)
    np.testing.assert_allclose(np.log(a[fin]), np.log(ref[fin]), atol=1e-6)
    # K = 4: against a fine grid in log alpha.
    lam = rng.uniform(0, 1, (100, 4)) ** 2
    qt2 = rng.uniform(0, 2, (100, 4)) * lam
    a, best = _maximise_group(lam, qt2)
    grid = np.exp(np.linspace(-25, 25, 20001))
    F = group_gain(np.broadcast_to(grid, (100, grid.size)), lam, qt2)
    fmax = np.maximum(F.max(axis=1), 0.0)
    assert np.all(best >= fmax - 1e-9)
    np.testing.assert_allclose(best, fmax, atol=1e-5)
    assert np.array_equal(np.isinf(a), fmax <= 1e-12)


# -- the fitted model --------------------------------------------------------------------------


def _three_class(seed, n=300):
    X, y = make_three_class(n, random_state=seed)
    Xt, yt = make_three_class(3000, random_state=100 + seed)
    k = RBF(gamma=0.5)
    return design_matrix(X, X, k), y, design_matrix(Xt, X, k), yt, three_class_proba(Xt)


@pytest.mark.parametrize("shared", [True, False])
def test_fit_trace_gains_and_calibration(shared):
    # Log loss on 3000 test points against the log loss of the true class
    # probabilities (measured excess, seeds 0-2: shared 0.016-0.027 nats,
    # per class 0.013-0.050, one-vs-rest Bernoulli 0.017-0.037).
    Phi, y, Phit, yt, Pt = _three_class(0)
    res = fit_evidence_multinomial(Phi, y, shared_alpha=shared)
    assert res.converged
    assert np.all(res.gain_trace > 0)  # every action promised a gain
    tr = res.log_evidence_trace
    # The Laplace evidence itself may dip when B moves (module docstring):
    # small dips, and the end well above the start.
    assert np.min(np.diff(tr)) > -0.5
    assert tr[-1] > tr[0] + 10
    assert res.log_evidence == tr[-1]
    # the recorded evidence is the Laplace evidence of the returned model
    assert res.log_evidence == pytest.approx(
        laplace_log_evidence_multinomial(Phi, y, res.alpha), abs=1e-6
    )
    if shared:
        assert np.all(res.alpha == res.alpha[0])
        assert res.Sigma.shape == (3 * res.n_relevance,) * 2
    P = predict_proba_multinomial(Phit[:, res.active], res)
    np.testing.assert_allclose(P.sum(axis=1), 1.0)
    idx = np.arange(len(yt))
    excess = -np.mean(np.log(P[idx, yt])) + np.mean(np.log(Pt[idx, yt]))
    print(f"\nshared={shared}: {res.n_relevance} basis functions, excess log loss {excess:.4f}")
    assert 0 < excess < 0.06
    assert np.mean(P.argmax(axis=1) != yt) < np.mean(Pt.argmax(axis=1) != yt) + 0.03
    assert res.n_relevance < 20


def test_monte_carlo_probabilities_within_stated_error():
    Phi, y, Phit, _, _ = _three_class(1, n=150)
    res = fit_evidence_multinomial(Phi, y)
    Pt = Phit[:200, res.active]
    P = predict_proba_multinomial(Pt, res)
    ref = predict_proba_multinomial(Pt, res, n_draws=200_000, seed=7)
    assert np.max(np.abs(P - ref)) < 0.5 / np.sqrt(2000)
    P0 = predict_proba_multinomial(Pt, res, n_draws=0)
    np.testing.assert_allclose(P0, softmax(Pt @ res.mu.T, axis=1))
    # integrating over the weights moves probabilities away from the plug-in
    assert np.max(np.abs(ref - P0)) > 0.01
    with pytest.raises(ValueError, match="shape"):
        predict_proba_multinomial(Phit[:5], res)
    with pytest.raises(ValueError, match="even"):
        predict_proba_multinomial(Pt, res, n_draws=3)


def test_kernel_basis_gives_the_dense_result():
    X, y = make_three_class(120, random_state=3)
    k = RBF(gamma=0.5)
    for shared in (True, False):
        rd = fit_evidence_multinomial(design_matrix(X, X, k), y, shared_alpha=shared)
        rk = fit_evidence_multinomial(KernelBasis(k, X), y, shared_alpha=shared)
        np.testing.assert_array_equal(rd.active, rk.active)
        np.testing.assert_allclose(rd.mu, rk.mu, atol=1e-8)
        assert rd.log_evidence == pytest.approx(rk.log_evidence, abs=1e-8)


def test_sigma_blocks_match_the_hessian():
    Phi, y, _, _, _ = _three_class(2, n=100)
    for shared in (True, False):
        res = fit_evidence_multinomial(Phi, y, shared_alpha=shared)
        cls, p = res.coef_index.T
        cols = Phi[:, res.active[p]]
        Y = softmax(Phi[:, res.active] @ res.mu.T, axis=1)
        # H = Psi^T B Psi + A written entry by entry
        H = np.einsum(
            "ni,nj,ni,nij->ij",
            cols,
            cols,
            Y[:, cls],
            (cls[:, None] == cls[None, :])[None] - Y[:, cls][:, None, :],
        )
        H += np.diag(res.alpha[cls, res.active[p]])
        np.testing.assert_allclose(res.Sigma @ H, np.eye(len(H)), atol=1e-6)
        blocks = res.Sigma_blocks
        assert blocks.shape == (3, res.n_relevance, 3, res.n_relevance)
        assert blocks[cls[0], p[0], cls[-1], p[-1]] == res.Sigma[0, -1]


# -- bad input -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "labels, match",
    [
        (np.zeros(20, int), "at least|single class"),
        (np.r_[np.zeros(10, int), np.full(10, 3)], None),  # fine with n_classes=None
        (np.r_[np.zeros(10, int), np.full(10, -1)], "lie in"),
        (np.r_[np.zeros(10), np.full(10, 0.5)], "integers"),
        (np.r_[np.zeros(10), np.full(10, np.nan)], "finite"),
    ],
)
def test_bad_labels_raise(labels, match):
    Phi = np.random.default_rng(0).normal(size=(20, 4))
    if match is None:
        res = fit_evidence_multinomial(Phi, labels)
        assert res.n_classes == 4
        with pytest.raises(ValueError, match="lie in"):
            fit_evidence_multinomial(Phi, labels, n_classes=3)
        return
    with pytest.raises(ValueError, match=match):
        fit_evidence_multinomial(Phi, labels)


def test_bad_shapes_raise():
    Phi = np.random.default_rng(0).normal(size=(20, 4))
    y = np.arange(20) % 3
    with pytest.raises(ValueError, match="rows"):
        fit_evidence_multinomial(Phi[:10], y)
    with pytest.raises(ValueError, match="1-D"):
        fit_evidence_multinomial(Phi, y[:, None])
    with pytest.raises(ValueError, match="alpha must have shape"):
        laplace_log_evidence_multinomial(Phi, y, np.ones((2, 4)))
    with pytest.raises(ValueError, match="positive"):
        laplace_log_evidence_multinomial(Phi, y, -np.ones(4))


@pytest.mark.parametrize("shared", [True, False])
def test_alignment_test_blocks_duplicated_columns(shared):
    # Every kernel column twice: a duplicate of a basis in the model (of the
    # same class, with per-class alpha) must never enter it.
    X, y = make_three_class(90, random_state=4)
    Phi = design_matrix(X, X, RBF(gamma=0.5))
    M = Phi.shape[1]
    Phi2 = np.hstack([Phi, Phi[:, 1:]])
    res = fit_evidence_multinomial(Phi2, y, shared_alpha=shared)
    assert res.counts["aligned"] > 0
    used = np.isfinite(res.alpha)  # (K, 2M - 1)
    assert not np.any(used[:, 1:M] & used[:, M:])
    ref = fit_evidence_multinomial(Phi, y, shared_alpha=shared)
    assert res.log_evidence == pytest.approx(ref.log_evidence, abs=0.5)
