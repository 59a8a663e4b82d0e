"""The fast solver's bookkeeping: drift-checked rank-one updates, alignment blocking, helpers."""

import logging

import numpy as np
import pytest

from rvm_ppl.closed_form.evidence import (
    ALIGNMENT_MAX,
    _Model,
    fit_evidence_regression,
    log_evidence_dense,
)
from rvm_ppl.core.linalg import solve_lower, solve_lower_t_right
from rvm_ppl.datasets.loaders import make_friedman1, make_sinc
from rvm_ppl.kernels.basis import DenseBasis, LowRankKernelBasis, kernel_basis, pivoted_cholesky
from rvm_ppl.kernels.kernel import RBF, LinearSpline, design_matrix


def _problems():
    X, y = make_sinc(150, random_state=3)
    yield "sinc-rbf", DenseBasis(design_matrix(X, X, RBF(1 / 9))), y
    Xf, yf = make_friedman1(120, random_state=4)
    yield "friedman-rbf", DenseBasis(design_matrix(Xf, Xf, RBF(0.5))), yf
    Xs, ys = make_sinc(2000, grid=False, random_state=5)
    yield "sinc-low-rank", kernel_basis(RBF(1 / 9), Xs), ys


PROBLEMS = list(_problems())


@pytest.mark.parametrize("name,basis,y", PROBLEMS, ids=[p[0] for p in PROBLEMS])
def test_drift_check_reaches_the_fit_of_recomputing_every_iteration(name, basis, y):
    every = fit_evidence_regression(basis, y, start=0, refresh=1)
    drift = fit_evidence_regression(basis, y, start=0)
    np.testing.assert_array_equal(drift.active, every.active)
    assert drift.log_evidence == pytest.approx(every.log_evidence, rel=1e-9)
    np.testing.assert_allclose(drift.mu, every.mu, rtol=1e-6, atol=1e-9)
    # The check recomputes far less often than every iteration.
    assert every.counts["refresh"] > drift.n_iter / 2
    assert drift.counts["refresh"] < drift.n_iter / 4


def test_ill_conditioned_spline_refreshes_and_stays_exact():
    # Noise-free linear-spline sinc at beta = 1e4: neighbouring columns have
    # cosines within 1e-6 of 1 and the rank-one updates drift quickly.
    X, y = make_sinc(100, noise=None)
    Phi = design_matrix(X, X, LinearSpline())
    res = fit_evidence_regression(Phi, y, beta=1e4, fixed_beta=True)
    assert res.counts["refresh"] > 0
    assert np.diff(res.log_evidence_trace).min() >= -1e-6 * abs(res.log_evidence)
    assert res.log_evidence == pytest.approx(log_evidence_dense(Phi, y, res.alpha, res.beta), rel=1e-6)


def test_drift_measures_a_perturbation():
    X, y = make_sinc(80, random_state=1)
    Phi = design_matrix(X, X, RBF(1 / 9))
    res = fit_evidence_regression(Phi, y, start=0)
    scale = np.linalg.norm(Phi, axis=0)
    model = _Model(DenseBasis(Phi), y, scale, Phi.T @ y, res.beta)
    model.warm_start(res.active, res.alpha[res.active])
    model.load(model.full_statistics())
    idx = np.arange(Phi.shape[1])
    assert model.drift(idx) < 1e-10
    j = int(np.setdiff1d(idx, res.active)[0])
    model.S[j] *= 1 + 1e-5
    assert model.drift(idx) == pytest.approx(1e-5, rel=1e-3)


def test_alignment_blocking_is_exact():
    # Dense sampling: many candidates nearly duplicate the basis functions in the model.
    X, y = make_sinc(3000, grid=False, random_state=2)
    basis = kernel_basis(RBF(1 / 9), X)
    res = fit_evidence_regression(basis, y, start=0)
    assert res.aligned.size > 0
    cols = basis.columns(res.active)
    cols /= np.linalg.norm(cols, axis=0)
    # No two basis functions in the model are aligned ...
    cos = cols.T @ cols
    assert cos[~np.eye(len(res.active), dtype=bool)].max() <= ALIGNMENT_MAX
    # ... and every blocked candidate is aligned with one of them.
    B = basis.columns(res.aligned)
    B /= np.linalg.norm(B, axis=0)
    assert (B.T @ cols).max(axis=1).min() > ALIGNMENT_MAX
    assert not np.isin(res.aligned, res.active).any()


def test_progress_logs_through_logging(caplog):
    X, y = make_sinc(60, random_state=0)
    Phi = design_matrix(X, X, RBF(1 / 9))
    with caplog.at_level(logging.INFO, logger="rvm_ppl.closed_form.evidence"):
        res = fit_evidence_regression(Phi, y, progress=0)
    msgs = [r.getMessage() for r in caplog.records if r.name == "rvm_ppl.closed_form.evidence"]
    assert len(msgs) == res.n_iter + 1 and msgs[-1].startswith("done after iteration")
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="rvm_ppl.closed_form.evidence"):
        fit_evidence_regression(Phi, y)
    assert not [r for r in caplog.records if r.name == "rvm_ppl.closed_form.evidence"]


@pytest.mark.parametrize("kw", [dict(refresh=0), dict(refresh="always"), dict(refresh=True),
                                dict(progress=-1.0), dict(progress="yes")])
def test_bad_refresh_or_progress_raises(kw):
    X, y = make_sinc(30, random_state=0)
    with pytest.raises((ValueError, TypeError)):
        fit_evidence_regression(design_matrix(X, X, RBF(1 / 9)), y, **kw)


def test_right_triangular_solve_matches_left_solve(rng):
    A = rng.standard_normal((6, 6))
    L = np.linalg.cholesky(A @ A.T + 6 * np.eye(6))
    B = np.asfortranarray(rng.standard_normal((500, 6)))
    np.testing.assert_allclose(solve_lower_t_right(L, B), solve_lower(L, B.T).T, rtol=1e-12, atol=1e-12)
    assert solve_lower_t_right(L[:0, :0], np.empty((5, 0))).shape == (5, 0)


@pytest.mark.parametrize("bias", [True, False])
def test_low_rank_gram_columns_match_dense(bias):
    X, _ = make_sinc(500, grid=False, random_state=6)
    basis = kernel_basis(RBF(1 / 9), X, bias=bias)
    assert isinstance(basis, LowRankKernelBasis)
    K = RBF(1 / 9)(X, X)
    Phi = np.hstack([np.ones((500, 1)), K]) if bias else K
    idx = [0, 3, 250, 499]
    np.testing.assert_allclose(basis.gram(idx), Phi.T @ Phi[:, idx], rtol=1e-9, atol=1e-8)
    np.testing.assert_allclose(DenseBasis(Phi).gram(idx), Phi.T @ Phi[:, idx], rtol=1e-12)


def test_pivoted_cholesky_grows_past_its_first_block():
    # A narrower kernel needs more than 64 pivots: the factor is grown in place.
    X, _ = make_sinc(400, grid=False, random_state=7)
    k = RBF(4.0)
    L = pivoted_cholesky(k, X, tol=1e-10)
    assert L is not None and L.shape[1] > 64
    K = k(X, X)
    assert np.abs(K - L @ L.T).max() <= 1e-10 * 1.0 + 1e-12
