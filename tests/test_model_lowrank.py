"""The low-rank form of the marginal regression likelihood against the M x M form and brute force."""

import numpy as np
import pytest

pm = pytest.importorskip("pymc")
pytensor = pytest.importorskip("pytensor")
pt = pytest.importorskip("pytensor.tensor")

from _compile_modes import SMALL  # noqa: E402

from rvm_ppl.datasets.loaders import make_sinc  # noqa: E402
from rvm_ppl.kernels.kernel import RBF, design_matrix  # noqa: E402
from rvm_ppl.model.build import build_model  # noqa: E402
from rvm_ppl.model.marginal import (  # noqa: E402
    dense_marginal_loglike,
    low_rank_factor,
    lowrank_marginal_loglike,
    truncated_factor,
    use_low_rank,
)


@pytest.fixture(scope="module")
def sinc_design():
    X, t = make_sinc(120, grid=False, random_state=0)
    return design_matrix(X, X, RBF(gamma=1 / 9)), t / np.std(t)


def _brute_logp(Phi, t, alpha, beta):
    """``log N(t | 0, beta^{-1} I + Phi A^{-1} Phi^T)`` with the N x N covariance."""
    C = np.eye(len(t)) / beta + (Phi / alpha) @ Phi.T
    _, logdet = np.linalg.slogdet(C)
    return -0.5 * (len(t) * np.log(2 * np.pi) + logdet + t @ np.linalg.solve(C, t))


def _value_and_grad(marginal, *data):
    t, a, b = pt.vector("t"), pt.vector("alpha"), pt.scalar("beta")
    out = marginal(t, a, b, *data)
    return pytensor.function([t, a, b], [out, *pytensor.grad(out, [t, a, b])], mode=SMALL)


def _points(M, rng):
    """(alpha, beta) pairs from small to large precisions."""
    return [(np.exp(rng.normal(np.log(s), 2.0, M)), b) for s, b in ((0.1, 3.0), (1.0, 20.0),
                                                                      (100.0, 0.5))]


def test_low_rank_factor_reproduces_the_design_matrix(sinc_design):
    Phi, _ = sinc_design
    Q, V = low_rank_factor(Phi)
    k = Q.shape[1]
    assert 10 < k < 50  # RBF r = 3 on [-10, 10]: numerical rank ~ 30 whatever N
    np.testing.assert_allclose(Q.T @ Q, np.eye(k), atol=1e-13)
    assert np.abs(Q @ V - Phi).max() <= 1e-11 * np.linalg.norm(Phi, axis=0).max()
    # The rank is the numerical rank at the tolerance: no fewer directions would do.
    s = np.linalg.svd(Phi, compute_uv=False)
    assert abs(k - np.sum(s > 1e-12 * s[0])) <= 3


def test_low_rank_factor_gives_up_and_checks_its_input():
    rng = np.random.default_rng(0)
    Phi = rng.normal(size=(40, 30))
    assert low_rank_factor(Phi, max_rank=10) is None  # full rank 30
    Q, V = low_rank_factor(Phi)  # full rank is still an exact factor
    assert Q.shape == (40, 30)
    np.testing.assert_allclose(Q @ V, Phi, atol=1e-12)
    assert low_rank_factor(np.zeros((5, 3))) is None
    with pytest.raises(ValueError, match="2-D"):
        low_rank_factor(np.ones(4))


def test_use_low_rank_rule():
    assert use_low_rank(1000, 1001, 30)
    assert use_low_rank(100, 101, 29)
    assert not use_low_rank(100, 101, 60)  # 4 k^2 (M + k) > 2 M^3 / 3
    assert not use_low_rank(40, 30, 30)  # full rank never pays
    ks = [k for k in range(1, 102) if use_low_rank(100, 101, k)]
    assert ks == list(range(1, len(ks) + 1))  # monotone in k


def test_lowrank_op_equals_dense_op_and_brute_force(sinc_design):
    Phi, t = sinc_design
    Q, V = low_rank_factor(Phi)
    dense = _value_and_grad(dense_marginal_loglike(), Phi, Phi.T @ Phi)
    low = _value_and_grad(lowrank_marginal_loglike(), Q, V)
    rng = np.random.default_rng(1)
    for alpha, beta in _points(Phi.shape[1], rng):
        d, lo = dense(t, alpha, beta), low(t, alpha, beta)
        np.testing.assert_allclose(lo[0], _brute_logp(Phi, t, alpha, beta), rtol=1e-8)
        np.testing.assert_allclose(lo[0], d[0], rtol=1e-10)
        for gd, gl in zip(d[1:], lo[1:]):
            np.testing.assert_allclose(gl, gd, rtol=1e-8, atol=1e-8 * np.max(np.abs(gd)))


def test_lowrank_gradient_by_central_differences(sinc_design):
    Phi, t = sinc_design
    Phi, t = Phi[:40, :25], t[:40]
    Q, V = low_rank_factor(Phi)
    f = _value_and_grad(lowrank_marginal_loglike(), Q, V)
    rng = np.random.default_rng(2)
    alpha, beta = np.exp(rng.normal(0.0, 1.0, 25)), 4.0
    _, g_t, g_a, g_b = f(t, alpha, beta)
    h = 1e-6
    for m in (0, 7, 24):  # d/d log alpha_m
        e = np.zeros(25)
        e[m] = h
        fd = (f(t, alpha * np.exp(e), beta)[0] - f(t, alpha * np.exp(-e), beta)[0]) / (2 * h)
        np.testing.assert_allclose(fd, alpha[m] * g_a[m], rtol=1e-5, atol=1e-8)
    fd = (f(t, alpha, beta * np.exp(h))[0] - f(t, alpha, beta * np.exp(-h))[0]) / (2 * h)
    np.testing.assert_allclose(fd, beta * g_b, rtol=1e-6)
    e = np.zeros(40)
    e[3] = h
    fd = (f(t + e, alpha, beta)[0] - f(t - e, alpha, beta)[0]) / (2 * h)
    np.testing.assert_allclose(fd, g_t[3], rtol=1e-6)


def test_build_model_uses_the_low_rank_form_with_the_same_density(sinc_design):
    Phi, t = sinc_design
    auto = build_model(Phi, t, low_rank=None)
    dense = build_model(Phi, t, low_rank=False)
    assert {"lowrank_Q", "lowrank_V"} <= set(auto.named_vars)
    assert "lowrank_Q" not in dense.named_vars
    lp_a, dlp_a = auto.compile_logp(mode=SMALL), auto.compile_dlogp(mode=SMALL)
    lp_d, dlp_d = dense.compile_logp(mode=SMALL), dense.compile_dlogp(mode=SMALL)
    rng = np.random.default_rng(3)
    for _ in range(3):
        point = {k: v + rng.normal(0.0, 2.0, np.shape(v)) for k, v in auto.initial_point().items()}
        np.testing.assert_allclose(lp_a(point), lp_d(point), rtol=1e-10)
        g_d = dlp_d(point)
        np.testing.assert_allclose(dlp_a(point), g_d, rtol=1e-8, atol=1e-8 * np.abs(g_d).max())


def test_build_model_low_rank_choices_and_errors(sinc_design):
    Phi, t = sinc_design
    rng = np.random.default_rng(4)
    full = rng.normal(size=(30, 20))
    y = rng.normal(size=30)
    assert "lowrank_Q" not in build_model(full, y, low_rank=None).named_vars  # rank 20 of 20 does not pay
    assert "lowrank_Q" in build_model(Phi, t).named_vars  # automatic by default: rank 29 pays
    assert "lowrank_Q" not in build_model(Phi, t, low_rank=False).named_vars
    assert "lowrank_Q" in build_model(full, y, low_rank=True).named_vars  # exact all the same
    with pytest.raises(ValueError, match="no low-rank factor"):
        build_model(np.zeros((30, 20)), y, low_rank=True)
    with pytest.raises(ValueError, match="marginal regression only"):
        build_model(Phi, (t > 0).astype(float), likelihood="bernoulli", low_rank=True)
    with pytest.raises(ValueError, match="marginal regression only"):
        build_model(Phi, t, parameterization="centered", low_rank=True)
    with pytest.raises(TypeError, match="low_rank"):
        build_model(Phi, t, low_rank="yes")
    for bad in (0.0, 1.0, 2, -1e-6, float("nan")):
        with pytest.raises(TypeError, match=r"float in \(0, 1\)"):
            build_model(Phi, t, low_rank=bad)
    with pytest.raises(ValueError, match="marginal regression only"):
        build_model(Phi, (t > 0).astype(float), likelihood="bernoulli", low_rank=1e-6)


def test_truncated_factor_is_the_nearest_lower_rank_design(sinc_design):
    # Eckart-Young: Q V is the truncated SVD, its error in the spectral norm the first
    # singular value dropped; the likelihood on it is the brute-force one of that design.
    Phi, t = sinc_design
    sv = np.linalg.svd(Phi, compute_uv=False)
    for tol in (1e-3, 1e-6):
        Q, V = truncated_factor(Phi, tol)
        k = Q.shape[1]
        assert k == np.count_nonzero(sv > tol * sv[0]) and k < Phi.shape[1]
        np.testing.assert_allclose(Q.T @ Q, np.eye(k), atol=1e-12)
        err = np.linalg.norm(Phi - Q @ V, 2)
        assert err <= tol * sv[0]
        np.testing.assert_allclose(err, sv[k], rtol=1e-6, atol=1e-12 * sv[0])
        low = _value_and_grad(lowrank_marginal_loglike(), Q, V)
        for alpha, beta in _points(Phi.shape[1], np.random.default_rng(6)):
            np.testing.assert_allclose(low(t, alpha, beta)[0], _brute_logp(Q @ V, t, alpha, beta),
                                       rtol=1e-8)
    model = build_model(Phi, t, low_rank=1e-3)
    np.testing.assert_array_equal(model["lowrank_Q"].get_value(), truncated_factor(Phi, 1e-3)[0])
    assert model.rvm_spec.design_tol == 1e-3 and build_model(Phi, t).rvm_spec.design_tol == 0.0


def test_low_rank_model_predicts_at_new_rows(sinc_design):
    Phi, t = sinc_design
    model = build_model(Phi, t, low_rank=None)
    assert "lowrank_Q" in model.named_vars
    X, _ = make_sinc(120, grid=False, random_state=0)
    Xt = np.array([[-4.0], [0.0], [2.5]])
    with model:
        pm.set_data({"Phi": design_matrix(Xt, X, RBF(gamma=1 / 9))})
    w = np.linspace(-1.0, 1.0, Phi.shape[1])
    draws = pm.draw(model["y"], draws=4000, givens={model["w"]: w, model["beta"]: 100.0},
                    random_seed=0, mode=SMALL)
    assert draws.shape == (4000, 3)
    f = design_matrix(Xt, X, RBF(gamma=1 / 9)) @ w
    np.testing.assert_allclose(draws.mean(axis=0), f, atol=4 * 0.1 / np.sqrt(4000))
    np.testing.assert_allclose(draws.std(axis=0), 0.1, rtol=0.05)


@pytest.mark.parametrize("mode", [SMALL, "NUMBA"])
def test_lower_triangular_inverse_op(mode):
    from rvm_ppl.model.trtri import lower_triangular_inverse

    rng = np.random.default_rng(5)
    A = rng.normal(size=(30, 30))
    L = np.linalg.cholesky(A @ A.T + 30 * np.eye(30))
    x = pt.matrix("L")
    with pytensor.config.change_flags(numba__fastmath=False):  # as the fits compile it
        f = pytensor.function([x], lower_triangular_inverse(x), mode=mode)
    for L_in in (L, np.asfortranarray(L), L + np.triu(np.ones((30, 30)), 1)):  # upper ignored
        kept = L_in.copy()
        np.testing.assert_allclose(f(L_in), np.linalg.inv(L), rtol=1e-12, atol=1e-15)
        np.testing.assert_array_equal(L_in, kept)  # the input is not overwritten
    assert np.isnan(f(np.zeros((3, 3)))).all()  # singular
    with pytest.raises(TypeError, match="float64 matrix"):
        lower_triangular_inverse(pt.vector())


def test_lower_triangular_inverse_without_pytensors_lapack_helpers(monkeypatch):
    # PyTensor's private LAPACK helpers hidden (as in releases that lay them out otherwise):
    # the Numba backend's op is forward substitution, the inverse dtrtri computes to
    # rounding (another order of the same sums: rtol 1e-12 on a well-conditioned factor).
    import sys

    import numba

    from rvm_ppl.model import trtri

    rng = np.random.default_rng(5)
    A = rng.normal(size=(30, 30))
    L = np.linalg.cholesky(A @ A.T + 30 * np.eye(30))
    x = pt.matrix("L")
    with pytensor.config.change_flags(numba__fastmath=False):
        node = trtri.lower_triangular_inverse(x).owner
        fast = pytensor.function([x], node.outputs[0], mode="NUMBA")
    monkeypatch.setitem(sys.modules, "pytensor.link.numba.dispatch.linalg._LAPACK", None)
    funcify, register = trtri._numba_funcify()
    assert funcify.__qualname__.startswith("_substitution_funcify")
    inner = funcify(node.op, node)  # compiled to be called from compiled code only
    fallback = numba.njit(lambda L: inner(L))
    for L_in in (L, L + np.triu(np.ones((30, 30)), 1)):  # upper triangle ignored
        np.testing.assert_allclose(fallback(L_in), fast(L_in), rtol=1e-12, atol=1e-15)
    np.testing.assert_array_equal(np.triu(fallback(L), 1), 0.0)
    assert np.isnan(fallback(np.zeros((3, 3)))).all()  # singular, as dtrtri's info > 0
    assert fallback(np.zeros((0, 0))).shape == (0, 0)


def test_dense_op_inverse_forms_agree(sinc_design):
    Phi, t = sinc_design
    trtri = _value_and_grad(dense_marginal_loglike(), Phi, Phi.T @ Phi)
    solve = _value_and_grad(dense_marginal_loglike(inverse="solve"), Phi, Phi.T @ Phi)
    alpha, beta = np.exp(np.random.default_rng(6).normal(0.0, 2.0, Phi.shape[1])), 10.0
    for a, b in zip(trtri(t, alpha, beta), solve(t, alpha, beta)):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
    with pytest.raises(ValueError, match="inverse"):
        dense_marginal_loglike(inverse="lu")


def test_lowrank_weights_have_the_exact_conditional_law(sinc_design):
    from rvm_ppl.model.marginal import lowrank_conditional_moments, lowrank_conditional_weights

    Phi, t = sinc_design
    Q, V = low_rank_factor(Phi)
    M = Phi.shape[1]
    alpha, beta = np.exp(np.random.default_rng(7).normal(0.0, 2.0, M)), 10.0
    Sigma = np.linalg.inv(beta * Phi.T @ Phi + np.diag(alpha))  # eq. (12)
    mu = beta * Sigma @ Phi.T @ t  # eq. (13)
    # z = e_1, ..., e_M for one (alpha, beta): the draws are mu + R e_m.
    a, b = np.tile(alpha, (M, 1)), np.full(M, beta)
    mean, cov, gamma, w, _ = lowrank_conditional_moments(V, Q.T @ t, a, b, np.eye(M))
    R = (w - mu).T
    scale = np.abs(Sigma).max()
    np.testing.assert_allclose(R @ R.T, Sigma, atol=1e-8 * scale)
    np.testing.assert_allclose(mean, mu, atol=1e-8 * np.abs(mu).max())
    np.testing.assert_allclose(cov, Sigma, atol=1e-8 * scale)
    np.testing.assert_allclose(gamma, 1.0 - alpha * np.diag(Sigma), atol=1e-8)
    # The PyTensor form draws the same weights from the same z.
    av, bv, zv = pt.vector("alpha"), pt.scalar("beta"), pt.vector("z")
    f = pytensor.function([av, bv, zv], lowrank_conditional_weights(av, bv, V, Q.T @ t, zv),
                          mode=SMALL)
    for m in (0, 5, M - 1):
        np.testing.assert_allclose(f(alpha, beta, np.eye(M)[m]), w[m], rtol=1e-10,
                                   atol=1e-10 * np.abs(w).max())


def _lowrank_40_digits(V, s, alpha, beta):
    """``gamma_m = b_m^T P^{-1} b_m`` and ``b_m^T P^{-1} s`` in 40-digit arithmetic.

    The quantities of :func:`lowrank_marginal_loglike` (Tipping 2001,
    Appendix A, in the low-rank form): ``P = I + B B^T`` formed and
    factorised exactly (mpmath), so the reference loses nothing to tiny
    ``alpha``.
    """
    mp = pytest.importorskip("mpmath")
    with mp.workdps(40):
        k, M = V.shape
        B = mp.matrix(k, M)
        for m in range(M):
            f = mp.sqrt(mp.mpf(beta) / mp.mpf(alpha[m]))
            for j in range(k):
                B[j, m] = mp.mpf(V[j, m]) * f
        P = B * B.T + mp.eye(k)
        L = mp.cholesky(P)
        g = mp.cholesky_solve(P, mp.matrix([mp.mpf(v) for v in s]))
        gamma, bg = np.empty(M), np.empty(M)
        for m in range(M):
            w = []  # L^{-1} b_m by forward substitution
            for i in range(k):
                w.append((B[i, m] - mp.fsum(L[i, j] * w[j] for j in range(i))) / L[i, i])
            gamma[m] = float(mp.fsum(v**2 for v in w))
            bg[m] = float(mp.fsum(B[j, m] * g[j] for j in range(k)))
    return gamma, bg


def _tiny_alphas(M, seed):
    """40 neighbouring (near-collinear) columns with alpha ~ e^-30, the rest in [1, e^10]."""
    rng = np.random.default_rng(seed)
    alpha = np.exp(rng.uniform(0.0, 10.0, M))
    alpha[40:80] = np.exp(-30.0 + rng.uniform(-1.0, 1.0, 40))
    return alpha


def test_lowrank_gradient_stays_exact_where_many_alphas_are_tiny(sinc_design):
    """The posterior's tail reaches alpha ~ e^-30 for many near-collinear columns at once: there
    H = beta Phi^T Phi + A has no Cholesky factor and I + B B^T loses I in float64; the QR form
    must still give the gradient in log alpha to 1e-9."""
    Phi, t = sinc_design
    Q, V = low_rank_factor(Phi)
    alpha, beta = _tiny_alphas(Phi.shape[1], 9), 100.0
    f = _value_and_grad(lowrank_marginal_loglike(), Q, V)
    logp, _, g_alpha, _ = f(t, alpha, beta)
    gamma, bg = _lowrank_40_digits(V, Q.T @ t, alpha, beta)
    np.testing.assert_allclose(alpha * g_alpha, (gamma - beta * bg**2) / 2, rtol=0, atol=1e-9)
    assert np.isfinite(logp)
    with pytest.raises(np.linalg.LinAlgError):  # why the M x M form is not used here
        np.linalg.cholesky(beta * Phi.T @ Phi + np.diag(alpha))


def test_lowrank_moments_stay_exact_where_many_alphas_are_tiny(sinc_design):
    """mu, gamma and the draws of w at the same point, against 40 digits (eqs. 13, 17)."""
    from rvm_ppl.model.marginal import lowrank_conditional_moments, lowrank_conditional_weights

    Phi, t = sinc_design
    Q, V = low_rank_factor(Phi)
    M = Phi.shape[1]
    alpha, beta = _tiny_alphas(M, 10), 100.0
    gamma_ref, bg = _lowrank_40_digits(V, Q.T @ t, alpha, beta)
    mu_ref = np.sqrt(beta / alpha) * bg  # eq. (13) through the Woodbury identity
    z = np.random.default_rng(11).normal(size=(1, M))
    mean, _, gamma, w, _ = lowrank_conditional_moments(V, Q.T @ t, alpha[None], np.array([beta]), z)
    np.testing.assert_allclose(gamma, gamma_ref, rtol=0, atol=1e-9)
    # mu_m carries alpha_m^{-1/2} ~ e^15: judge it against the posterior sd of w_m (eq. 12).
    sd = np.sqrt((1.0 - gamma_ref) / alpha)
    assert np.all(np.abs(mean - mu_ref) <= 1e-6 * sd)
    av, bv, zv = pt.vector("alpha"), pt.scalar("beta"), pt.vector("z")
    f = pytensor.function([av, bv, zv], lowrank_conditional_weights(av, bv, V, Q.T @ t, zv),
                          mode=SMALL)
    np.testing.assert_allclose(f(alpha, beta, z[0]), w[0], rtol=1e-9,
                               atol=1e-9 * np.abs(w).max())


def test_latent_g_matches_the_weights_and_the_dense_moments(sinc_design):
    """g = V w: its draws are V times the draws of w, Q g is Phi w, and the predictive moments
    through g equal those of the weights (Tipping 2001, eqs. 21-22) at ordinary alphas."""
    from rvm_ppl.core.result import FitResult
    from rvm_ppl.model.marginal import lowrank_conditional_moments, lowrank_latent

    Phi, t = sinc_design
    Q, V = low_rank_factor(Phi)
    M = Phi.shape[1]
    rng = np.random.default_rng(12)
    alpha = np.exp(rng.normal(0.0, 2.0, (2, 3, M)))
    beta = np.exp(rng.normal(2.0, 0.3, (2, 3)))
    z = rng.normal(size=(2, 3, M))
    mean, cov, gamma, w, (g_mean, g_cov, g) = lowrank_conditional_moments(V, Q.T @ t, alpha,
                                                                          beta, z)
    np.testing.assert_allclose(g, w @ V.T, rtol=1e-8, atol=1e-8 * np.abs(g).max())
    # On the training rows C g is Q g = Phi w (C itself differs from Q only along directions of
    # g that V barely sees, by |Phi - Q V| / s_min(V)).
    np.testing.assert_allclose(g @ (Phi @ lowrank_latent(V)).T, w @ Phi.T, rtol=1e-7, atol=1e-9)
    X, _ = make_sinc(120, grid=False, random_state=0)
    rows = design_matrix(np.linspace(-9.0, 9.0, 7)[:, None], X, RBF(gamma=1 / 9))
    result = FitResult(method="nuts", likelihood="gaussian", basis=tuple(map(str, range(M))),
                       support=np.arange(M), mean=mean, cov=cov, alpha=alpha[0, 0], beta=1.0,
                       noise_var=1.0, gamma=gamma, relevant=gamma > 0.5,
                       latent={"V_pinv": lowrank_latent(V), "mean": g_mean, "cov": g_cov,
                               "draws": g})
    f_mean, f_var = result.latent_moments(rows)
    np.testing.assert_allclose(f_mean, rows @ mean, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(f_var, np.einsum("ij,jk,ik->i", rows, cov, rows), rtol=1e-6)
    np.testing.assert_allclose(result.latent_draws(rows, w), w @ rows.T, rtol=1e-7, atol=1e-9)


def test_latent_g_stays_exact_where_many_alphas_are_tiny(sinc_design):
    """E[g | alpha, beta] = s - P^{-1} s and Cov[g | alpha, beta] = (I - P^{-1}) / beta against
    40 digits at alpha ~ e^-30, where the moments of w lose every digit of Phi Cov[w] Phi^T."""
    from rvm_ppl.model.marginal import lowrank_conditional_moments

    mp = pytest.importorskip("mpmath")
    Phi, t = sinc_design
    Q, V = low_rank_factor(Phi)
    M, k = Phi.shape[1], V.shape[0]
    alpha, beta = _tiny_alphas(M, 13), 100.0
    s = Q.T @ t
    _, cov, _, _, (g_mean, g_cov, _) = lowrank_conditional_moments(V, s, alpha[None],
                                                                   np.array([beta]))
    with mp.workdps(40):
        B = mp.matrix([[mp.mpf(V[j, m]) * mp.sqrt(mp.mpf(beta) / mp.mpf(alpha[m]))
                        for m in range(M)] for j in range(k)])
        P_inv = (mp.eye(k) + B * B.T) ** -1
        sv = mp.matrix([mp.mpf(v) for v in s])
        mean_ref = np.array([float(x) for x in (sv - P_inv * sv)])
        cov_ref = np.array([[float((mp.eye(k)[i, j] - P_inv[i, j]) / beta) for j in range(k)]
                            for i in range(k)])
    np.testing.assert_allclose(g_mean, mean_ref, rtol=0, atol=1e-10)
    np.testing.assert_allclose(g_cov, cov_ref, rtol=0, atol=1e-12)
    f_var_g = np.einsum("ij,jk,ik->i", Q, g_cov, Q)
    assert np.all(f_var_g > 0) and f_var_g.max() <= 1.0 / beta
    f_var_w = np.einsum("ij,jk,ik->i", Phi, cov, Phi)  # the same variance through Cov[w]
    assert np.abs(f_var_w - f_var_g).max() > 1.0 / beta  # ... lost to rounding


@pytest.mark.slow
def test_low_rank_fit_predicts_through_g_and_round_trips(tmp_path):
    """An advi fit of RVR on noisy sinc takes the low-rank form; predictions go through g = V w
    and survive netCDF and pickle exactly."""
    import pickle

    from sklearn.exceptions import ConvergenceWarning

    from rvm_ppl import RVR

    X, y = make_sinc(100, grid=False, random_state=3)
    m = RVR(gamma=1 / 9, draws=50, max_iter=3000, random_state=0, progressbar=False)
    with pytest.warns(ConvergenceWarning):  # a short run is enough here
        m.fit(X, y, method="advi")
    latent = m.result_.latent
    assert latent is not None and latent["V_pinv"].shape[0] == 101 and latent["V_pinv"].shape[1] < 40
    assert latent["draws"].shape == (1, 50, latent["V_pinv"].shape[1])  # for the pointwise log-lik
    Xt = np.linspace(-9.5, 9.5, 40)[:, None]
    mean, std = m.predict(Xt, return_std=True)
    Phi = m._design(Xt, m.result_.support)
    np.testing.assert_allclose(mean, Phi @ m.result_.mean, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(std**2, m.result_.noise_var
                               + np.einsum("ij,jk,ik->i", Phi, m.result_.cov, Phi), rtol=1e-6)
    path = tmp_path / "m.nc"
    m.to_netcdf(path)
    for loaded in (RVR.from_netcdf(path), pickle.loads(pickle.dumps(m))):
        np.testing.assert_array_equal(loaded.predict(Xt, return_std=True), (mean, std))


def test_the_economic_qr_op_gives_pytensors_factors_bit_for_bit():
    # rvm_ppl.model.qr replaces pt.linalg.qr(mode="economic") in the low-rank marginal for
    # its compile time; every backend must give the same factors, here on matrices whose
    # columns span 1e-9 to 1e9 as B's do where some alpha is tiny, and NaN for NaN. The
    # (627, 145) matrix is the shape of Boston's [I; B^T]: wider than LAPACK's block, where
    # dgeqrf runs its blocked code.
    import pytensor
    import pytensor.tensor as pt

    from rvm_ppl.model.qr import economic_qr

    x = pt.matrix("x")
    rng = np.random.default_rng(0)
    matrices = [rng.normal(size=shape) * np.exp(rng.normal(0.0, 7.0, size=shape[1]))
                for shape in ((60, 12), (13, 13), (4, 7), (627, 145))]
    for mode in ("NUMBA", "FAST_COMPILE"):
        ours = pytensor.function([x], list(economic_qr(x)), mode=mode)
        theirs = pytensor.function([x], list(pt.linalg.qr(x, mode="economic")), mode=mode)
        for A in matrices:
            Q, R = ours(A)
            for got, want in zip((Q, R), theirs(A)):
                np.testing.assert_array_equal(got, want)
            np.testing.assert_allclose(Q @ R, A, rtol=1e-12, atol=1e-12 * np.abs(A).max())
        A = matrices[0].copy()
        A[3, 2] = np.nan
        assert all(np.isnan(f).any() for f in ours(A))
