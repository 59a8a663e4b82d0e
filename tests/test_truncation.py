"""NUTS on a truncated design, checked against the exact one (rvm_ppl.pymc_fitters.truncation)."""

import warnings

import numpy as np
import pytest

pm = pytest.importorskip("pymc")

from rvm_ppl.datasets.loaders import make_sinc  # noqa: E402
from rvm_ppl.kernels.kernel import RBF, design_matrix  # noqa: E402
from rvm_ppl.model.build import build_model  # noqa: E402
from rvm_ppl.model.marginal import truncated_factor  # noqa: E402
from rvm_ppl.pymc_fitters import truncation  # noqa: E402


def _brute_logp(Phi, t, alpha, beta):
    """``log N(t | 0, beta^{-1} I + Phi A^{-1} Phi^T)`` with the N x N covariance."""
    C = np.eye(len(t)) / beta + (Phi / alpha) @ Phi.T
    _, logdet = np.linalg.slogdet(C)
    return -0.5 * (len(t) * np.log(2 * np.pi) + logdet + t @ np.linalg.solve(C, t))


def _gamma_logpdf(x, shape, rate):
    from scipy import stats

    return stats.gamma.logpdf(x, shape, scale=1.0 / rate)


def test_log_density_is_the_marginal_posterior_up_to_one_constant():
    # At each (alpha, beta): the exact Gaussian marginal likelihood on the model's design
    # (N x N, brute force) plus the Gamma hyperpriors, on the log scale of the precisions,
    # up to a constant that does not
    # depend on the draw (the whitened weights at zero). So the difference of two models'
    # densities is the log ratio of their posteriors of (alpha, beta).
    X, t = make_sinc(40, grid=False, random_state=1)
    Phi = design_matrix(X, X, RBF(gamma=1 / 9))
    priors = {"a": 2.0, "b": 0.5, "c": 1.5, "d": 0.05}
    Q, V = truncated_factor(Phi, 1e-3)
    rng = np.random.default_rng(3)
    S, M = 6, Phi.shape[1]
    alpha = np.exp(rng.normal(0.0, 2.0, (S, M)))
    beta = np.exp(rng.normal(3.0, 1.0, S))
    for model, design in ((build_model(Phi, t, priors=priors), Phi),
                          (build_model(Phi, t, priors=priors, low_rank=1e-3), Q @ V)):
        brute = np.array([
            _brute_logp(design, t, a, b) + _gamma_logpdf(a, 2.0, 0.5).sum() + _gamma_logpdf(b, 1.5, 0.05)
            + np.log(a).sum() + np.log(b)  # the density of (log alpha, log beta)
            for a, b in zip(alpha, beta)])
        offset = truncation.log_density_at(model, alpha, beta) - brute
        np.testing.assert_allclose(offset, offset[0], atol=1e-7 * np.abs(brute).max())


def test_auto_tolerance_truncates_only_where_it_replaces_the_dense_form():
    from rvm_ppl.datasets.loaders import load_boston
    from rvm_ppl.model.marginal import automatic_factor, use_low_rank

    # Boston at gamma = 0.01 (standardised inputs): full rank, so the exact model takes
    # the M x M form, but only 145 singular values above 1e-6 of the largest.
    X, _ = load_boston()
    X = (X - X.mean(axis=0)) / X.std(axis=0)
    boston = design_matrix(X, X, RBF(gamma=0.01))
    sv = np.linalg.svd(boston, compute_uv=False)
    rank = np.count_nonzero(sv > 1e-6 * sv[0])
    assert automatic_factor(boston) is None and use_low_rank(*boston.shape, rank)
    assert truncation.auto_tolerance(boston) == truncation.AUTO_TOL == 1e-6
    # The same kernel on fewer rows: below AUTO_MIN_ENTRIES, the exact design.
    assert truncation.auto_tolerance(boston[:200, :200]) is None
    # Noisy sinc at N = 1000 has an exact factor of rank 25 (cheap, exact): no truncation.
    Xs, _ = make_sinc(1000, grid=False, random_state=0)
    sinc = design_matrix(Xs, Xs, RBF(gamma=1 / 9))
    assert automatic_factor(sinc) is not None and truncation.auto_tolerance(sinc) is None
    # A design whose spectrum does not fall: the truncation would not pay.
    assert truncation.auto_tolerance(np.random.default_rng(0).normal(size=(400, 400))) is None


def _sinc_fit(monkeypatch, tol, **kw):
    from rvm_ppl import RVR

    monkeypatch.setattr(truncation, "auto_tolerance", lambda Phi: tol)
    X, y = make_sinc(40, random_state=0)
    return RVR(gamma=1 / 9, draws=300, tune=300, chains=2, random_state=0, progressbar=False,
               **kw).fit(X, y, method="nuts")


@pytest.mark.slow
def test_auto_keeps_a_truncation_the_check_accepts(monkeypatch):
    # On 40 sinc points the directions below 1e-6 of the largest carry almost no weight:
    # the importance weights of the exact posterior are nearly even (k-hat about 0.2 over
    # seeds, far below 0.7), and the fit keeps the truncated draws and says so.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # short-run sampling diagnostics
        fit = _sinc_fit(monkeypatch, 1e-6)
    X, _ = make_sinc(40, random_state=0)
    rank = truncated_factor(design_matrix(X, X, RBF(gamma=1 / 9)), 1e-6)[0].shape[1]
    attrs = fit.idata_.attrs
    assert attrs["design_tol"] == 1e-6 and attrs["design_rank"] == rank < 41
    assert attrs["design_check"] == "passed" and attrs["design_khat"] <= 0.7
    assert attrs["design_ess"] > 0.5 * 600  # 2 chains x 300 draws


@pytest.mark.slow
def test_auto_samples_the_exact_design_when_the_check_fails(monkeypatch):
    # Rank 2 is another model (k-hat about 4 over seeds): the check fails, the warning
    # names the k-hat, and the draws kept are of the exact design.
    from rvm_ppl.output.diagnostics import ApproximationWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        warnings.simplefilter("always", ApproximationWarning)
        with pytest.warns(ApproximationWarning,
                          match=r"k-hat .* is \d+\.\d\d > 0.7; sampling the exact"):
            fit = _sinc_fit(monkeypatch, 0.5)
    attrs = fit.idata_.attrs
    assert attrs["design_tol"] == 0.0 and "design_rank" not in attrs
    assert attrs["design_check"].startswith("rejected low_rank=0.5 (k-hat ")
