"""Type-II maximum likelihood for the Poisson (counts) RVM, and its predictive distribution.

The likelihood is ``P(t | w) = prod_n Poisson(t_n | lambda_n)`` with the log
link ``log lambda_n = phi_n^T w + o_n`` and a known offset ``o_n`` (log
exposure, 0 by default). As for the Bernoulli likelihood there is no closed
form, and each step of the fast sequential algorithm (Tipping & Faul 2003)
runs on the Laplace approximation (Tipping 2001, §3): the same code as the
Bernoulli fit (:mod:`rvm_ppl.closed_form.bernoulli`) with the likelihood
object :class:`rvm_ppl.closed_form.laplace.PoissonLog`, whose gradient is
``Phi^T (t - lambda)`` and whose curvature is ``B = diag(lambda_n)``
(SparseBayes's Poisson case). Only the initialisation differs
(SparseBayes's ``SB2_Initialisation``: linearised targets ``log(t + 1e-3)``).

Predictions: under the Laplace posterior ``w ~ N(mu, Sigma)`` the log rate
at a new input is ``N(m, s^2)`` with ``m = phi^T mu + o`` and ``s^2 =
phi^T Sigma phi`` (:func:`log_rate_moments`), so the rate is lognormal, the
predictive mean of the count is ``exp(m + s^2 / 2)`` exactly
(:func:`predict_count_mean`), and the count is Poisson-lognormal: its pmf is
computed by Gauss-Hermite quadrature over the log rate with
:data:`GH_NODES` nodes (:func:`predict_count_pmf`), and its quantiles from
the same quadrature (:func:`predict_count_quantiles`). The quadrature is a
mixture of Poisson distributions, as are the posterior draws of advi and
nuts: :func:`poisson_mixture_pmf` and :func:`poisson_mixture_quantiles`
compute any such mixture's pmf and quantiles exactly.

The counts may be non-negative reals, as scikit-learn's ``PoissonRegressor``
accepts them: the log likelihood ``t log lambda - lambda - log Gamma(t +
1)`` is the Poisson one at integers and its continuation between them.

References
----------
Tipping, M. E. (2001). Sparse Bayesian learning and the relevance vector
machine. JMLR 1, 211-244. Tipping, M. E. and Faul, A. C. (2003). Fast
marginal likelihood maximisation for sparse Bayesian models. AISTATS.
"""

from __future__ import annotations

import numpy as np
from scipy import stats
from scipy.special import logsumexp

from rvm_ppl.closed_form import laplace
from rvm_ppl.closed_form.bernoulli import PosteriorMode, alpha_priors, laplace_evidence_fit
from rvm_ppl.closed_form.evidence import MIN_DELTA_LOG_ALPHA
from rvm_ppl.closed_form.laplace import GRADIENT_MIN, MAX_POSTMODE_ITS, STEP_MIN
from rvm_ppl.core.counts import check_counts, check_offset
from rvm_ppl.kernels.basis import DenseBasis

# SparseBayes v2 (SB2_Initialisation): the linearised targets of the Poisson
# likelihood are log(t + POISSON_LOG_SHIFT).
POISSON_LOG_SHIFT = 1e-3
# Gauss-Hermite nodes of the predictive quadrature over the log rate. With 64
# nodes the quadrature of E[exp(s Z)] = exp(s^2 / 2) is exact to rounding for
# s <= 5, a log-rate standard deviation well beyond what a fit to data reports.
GH_NODES = 64


def posterior_mode(Phi, t, alpha, offset=None, w0=None, *, max_iter=MAX_POSTMODE_ITS,
                   grad_tol=GRADIENT_MIN, step_min=STEP_MIN):
    """Posterior mode of the weights of a Poisson model with a log link and an ARD prior.

    Maximises ``log P(t | w) - w^T A w / 2`` (Tipping 2001, eq. 24 with the
    Poisson likelihood) by Newton's method with step halving
    (:func:`rvm_ppl.closed_form.laplace.posterior_mode`): gradient ``Phi^T
    (t - lambda) - A w`` and negated Hessian ``H = Phi^T B Phi + A`` with
    ``B = diag(lambda_n)``, ``lambda = exp(Phi w + offset)``.

    Parameters
    ----------
    Phi : ndarray of shape (N, M)
    t : ndarray of shape (N,)
        Non-negative counts (reals are accepted: see :func:`fit_evidence_poisson`).
    alpha : ndarray of shape (M,)
        Prior precisions (positive and finite).
    offset : ndarray of shape (N,), optional
        Log exposure; 0 by default.
    w0 : ndarray of shape (M,), optional
        Warm start; zeros by default.
    max_iter, grad_tol, step_min
        As in :func:`rvm_ppl.closed_form.bernoulli.posterior_mode`.

    Returns
    -------
    PosteriorMode

    Examples
    --------
    >>> import numpy as np
    >>> Phi = np.column_stack([np.ones(4), [-1.0, -0.5, 0.5, 1.0]])
    >>> mode = posterior_mode(Phi, np.array([0.0, 1.0, 3.0, 5.0]), np.ones(2))
    >>> bool(mode.grad_max < 1e-6) and bool(mode.mu[1] > 0)
    True
    """
    Phi = np.asarray(Phi, dtype=float)
    t = check_counts(t, "t", integer=False)
    lik = laplace.PoissonLog(t, check_offset(offset, len(t)))
    w, L, log_lik, _, n_iter, grad_max, ill = laplace.posterior_mode(
        Phi, np.zeros(Phi.shape[1], dtype=int), lik, np.asarray(alpha, dtype=float), w0,
        max_iter=max_iter, grad_tol=grad_tol, step_min=step_min)
    return PosteriorMode(w, L, log_lik, n_iter, grad_max, ill)


def fit_evidence_poisson(basis, y, offset=None, *, start=None, max_iter=10_000,
                         tol=MIN_DELTA_LOG_ALPHA, alignment_test=True, callback=None,
                         frozen_steps=None, progressbar=False, priors=None):
    """Maximise the Laplace-approximated evidence of a Poisson RVM (log link).

    Runs :func:`rvm_ppl.closed_form.bernoulli.fit_evidence_bernoulli`'s code
    (Tipping & Faul's 2003 sequential algorithm in the one driver, on the
    Laplace approximation of Tipping 2001, §3) with the Poisson likelihood
    :class:`rvm_ppl.closed_form.laplace.PoissonLog`.

    Parameters
    ----------
    basis : ndarray of shape (N, M), DenseBasis or KernelBasis
        The candidate basis functions as columns.
    y : ndarray of shape (N,)
        Non-negative counts. Non-negative reals are accepted, as scikit-learn's
        ``PoissonRegressor`` accepts them: the log likelihood ``y log lambda -
        lambda - log Gamma(y + 1)`` is the Poisson one at integers and its
        continuation between them, and its gradient and curvature in the log
        rate are the same.
    offset : ndarray of shape (N,), optional
        Known log exposure added to the log rate: ``log lambda_n = phi_n^T w
        + offset_n``. Default 0.
    start : int, optional
        Index of the basis function to start from. Default: the one with the
        largest normalised projection on the linearised targets
        ``log(y + 1e-3) - offset`` (SparseBayes).
    max_iter, tol, alignment_test, callback, frozen_steps, progressbar, priors
        As in :func:`~rvm_ppl.closed_form.bernoulli.fit_evidence_bernoulli`:
        ``priors`` (Gamma ``a, b`` on every ``alpha_m``) makes the fit type-II MAP.

    Returns
    -------
    EvidenceResult
        On the original column scale, with ``beta = None``. ``mu`` is the
        posterior mode, ``Sigma = (Phi^T B Phi + A)^{-1}`` at the mode with
        ``B = diag(lambda_n)``, ``log_evidence`` the Laplace approximation
        (the trace may decrease slightly, as for the Bernoulli likelihood).
        An empty model predicts the rate ``exp(offset)``.

    Warns
    -----
    ConvergenceWarning
        If ``max_iter`` is reached.
    RuntimeWarning
        If a Hessian was ill-conditioned.

    Notes
    -----
    Initialisation (SparseBayes's ``SB2_Initialisation`` for the Poisson
    likelihood): the weight of the unit-norm start column is the least
    squares fit of ``phi~ mu`` to ``log(y + 1e-3) - offset``, and ``alpha =
    1 / mu^2`` clipped to ``[1e-3, 1e3]``. The steps, the preferences, the
    cycling guard and the return value are those of the Bernoulli fit. The
    papers are in the module docstring's References.

    Examples
    --------
    >>> import numpy as np
    >>> x = np.linspace(-3, 3, 40)
    >>> y = np.random.default_rng(0).poisson(np.exp(1 + np.sin(x)))
    >>> Phi = np.hstack([np.ones((40, 1)), np.exp(-((x[:, None] - x[None, :]) ** 2))])
    >>> res = fit_evidence_poisson(Phi, y)
    >>> res.beta is None and res.converged and res.active.size < 10
    True
    """
    if isinstance(basis, np.ndarray):
        basis = DenseBasis(basis)
    y = check_counts(y, integer=False)
    if len(y) != basis.n_samples:
        raise ValueError(f"y has {len(y)} counts for the {basis.n_samples} rows of the basis.")
    offset = check_offset(offset, len(y))
    priors = alpha_priors(priors, "Poisson")
    t_lin = np.log(y + POISSON_LOG_SHIFT) - offset  # §2.8: linearised targets
    norms2, proj = basis.norms2_and_project(t_lin)
    scale = np.sqrt(norms2)
    scale[scale == 0] = 1.0
    if start is None:
        start = int(np.argmax(np.abs(proj / scale)))
    # §2.8: least squares of phi~ mu onto the linearised targets; phi~ has unit norm.
    mu0 = float(proj[start] / scale[start])
    return laplace_evidence_fit(
        basis, scale, laplace.PoissonLog(y, offset), start, mu0, max_iter=max_iter, tol=tol,
        alignment_test=alignment_test, callback=callback, frozen_steps=frozen_steps,
        progressbar=progressbar, priors=priors)


def log_rate_moments(Phi_test_active, mu, Sigma, offset=None):
    """Mean and variance of the log rate at test points under the Laplace posterior.

    ``m = phi^T mu + offset`` and ``s^2 = phi^T Sigma phi``, row by row
    (never an ``n x n`` matrix).

    Parameters
    ----------
    Phi_test_active : ndarray of shape (n, n_active)
        Basis functions in the model at the test points.
    mu : ndarray of shape (n_active,)
    Sigma : ndarray of shape (n_active, n_active)
    offset : ndarray of shape (n,), optional
        Log exposure at the test points.

    Returns
    -------
    m, s2 : ndarray of shape (n,)
    """
    P = np.asarray(Phi_test_active, dtype=float)
    m = P @ mu + check_offset(offset, P.shape[0])
    s2 = np.maximum(np.einsum("ij,jk,ik->i", P, Sigma, P), 0.0)
    return m, s2


def predict_count_mean(Phi_test_active, mu, Sigma, offset=None):
    """Predictive mean of the count: ``E[lambda] = exp(m + s^2 / 2)``, exact for the lognormal rate.

    Parameters and shapes as in :func:`log_rate_moments`.

    Returns
    -------
    ndarray of shape (n,)
    """
    m, s2 = log_rate_moments(Phi_test_active, mu, Sigma, offset)
    return np.exp(m + 0.5 * s2)


def _nodes(m, s2, n_nodes):
    """Log rates at the Gauss-Hermite nodes, ``(n, n_nodes)``, and the log weights (sum to 0)."""
    z, wts = np.polynomial.hermite_e.hermegauss(n_nodes)  # weight exp(-z^2 / 2)
    log_w = np.log(wts) - 0.5 * np.log(2 * np.pi)
    return m[:, None] + np.sqrt(s2)[:, None] * z[None, :], log_w


def predict_count_pmf(Phi_test_active, mu, Sigma, counts, offset=None, *, n_nodes=GH_NODES):
    """Predictive pmf of the count: the Poisson-lognormal mixture, by Gauss-Hermite quadrature.

    ``P(k | x) = E[Poisson(k | exp(eta))]`` over ``eta ~ N(m, s^2)``
    (:func:`log_rate_moments`), approximated by ``sum_i w_i Poisson(k |
    exp(m + s z_i))`` with the ``n_nodes`` probabilists' Gauss-Hermite nodes
    ``z_i`` and weights ``w_i`` (summing to 1), in log space.

    Parameters
    ----------
    Phi_test_active, mu, Sigma, offset
        As in :func:`log_rate_moments`.
    counts : array-like of int, shape (K,)
        The counts at which to evaluate the pmf.
    n_nodes : int
        Gauss-Hermite nodes (default :data:`GH_NODES`).

    Returns
    -------
    ndarray of shape (n, K)

    Examples
    --------
    >>> import numpy as np
    >>> pmf = predict_count_pmf(np.ones((1, 1)), np.array([1.0]), np.array([[0.1]]),
    ...                         np.arange(200))
    >>> bool(abs(pmf.sum() - 1) < 1e-12)
    True
    """
    m, s2 = log_rate_moments(Phi_test_active, mu, Sigma, offset)
    eta, log_w = _nodes(m, s2, n_nodes)
    return poisson_mixture_pmf(np.exp(eta), np.exp(log_w), counts)


def predict_count_quantiles(Phi_test_active, mu, Sigma, q=(0.05, 0.95), offset=None, *,
                            n_nodes=GH_NODES):
    """Quantiles of the predictive count (Poisson-lognormal, Gauss-Hermite quadrature).

    The ``q``-quantile is the smallest count ``k`` with ``F(k) >= q``, where
    ``F(k) = sum_i w_i PoissonCDF(k | exp(m + s z_i))`` is the quadrature
    of :func:`predict_count_pmf`. It lies between the smallest and the
    largest of the nodes' Poisson quantiles, and is found by bisection
    there. The default ``q`` gives the central 90 % interval.

    Parameters
    ----------
    Phi_test_active, mu, Sigma, offset
        As in :func:`log_rate_moments`.
    q : float or sequence of float in (0, 1)
    n_nodes : int

    Returns
    -------
    ndarray of int, shape (n, len(q)) (or (n,) for a scalar ``q``)

    Examples
    --------
    >>> import numpy as np
    >>> lo, hi = predict_count_quantiles(np.ones((1, 1)), np.array([2.0]), np.zeros((1, 1)))[0]
    >>> from scipy.stats import poisson
    >>> (int(lo), int(hi)) == tuple(int(v) for v in poisson.ppf([0.05, 0.95], np.exp(2.0)))
    True
    """
    m, s2 = log_rate_moments(Phi_test_active, mu, Sigma, offset)
    eta, log_w = _nodes(m, s2, n_nodes)
    return poisson_mixture_quantiles(np.exp(eta), np.exp(log_w), q)


def _check_mixture(lam, weights):
    lam = np.atleast_2d(np.asarray(lam, dtype=float))
    weights = np.asarray(weights, dtype=float)
    if weights.shape != lam.shape[1:] or (weights < 0).any() \
            or abs(weights.sum() - 1.0) > 1e-10:
        raise ValueError(f"weights must be {lam.shape[1]} non-negative numbers summing to 1, "
                         f"one per component (column of lam); got shape {weights.shape}.")
    return lam, weights


# Entries of (rows, components, counts) that a mixture's pmf evaluates at once.
_MIXTURE_BLOCK = 2_000_000


def poisson_mixture_pmf(lam, weights, counts):
    """The pmf of a mixture of Poisson distributions, row by row, in log space.

    ``P_n(k) = sum_s w_s Poisson(k | lambda_ns)``: the predictive count of a
    posterior given by quadrature nodes (:func:`predict_count_pmf`) or by
    posterior draws of the rate (weights ``1 / S``).

    Parameters
    ----------
    lam : ndarray of shape (n, S)
        The components' rates.
    weights : ndarray of shape (S,)
        Non-negative, summing to 1.
    counts : array-like of int, shape (K,)

    Returns
    -------
    ndarray of shape (n, K)
    """
    lam, weights = _check_mixture(lam, weights)
    counts = np.asarray(counts)
    if counts.ndim != 1 or (counts < 0).any() or (counts != np.round(counts)).any():
        raise ValueError("counts must be a 1-D array of non-negative integers.")
    with np.errstate(divide="ignore"):  # a zero weight is log 0
        log_w = np.log(weights)
    out = np.empty((lam.shape[0], counts.size))
    rows = max(1, _MIXTURE_BLOCK // max(1, lam.shape[1] * counts.size))
    for start in range(0, lam.shape[0], rows):
        block = lam[start:start + rows, :, None]
        logpmf = stats.poisson.logpmf(counts[None, None, :], block)  # (rows, S, K)
        out[start:start + rows] = np.exp(logsumexp(logpmf + log_w[None, :, None], axis=1))
    return out


def poisson_mixture_quantiles(lam, weights, q):
    """Quantiles of a mixture of Poisson distributions, exactly from its cdf.

    The ``q``-quantile of row ``n`` is the smallest count ``k`` with
    ``F_n(k) = sum_s w_s PoissonCDF(k | lambda_ns) >= q``. It lies between
    the smallest and the largest of the components' ``q``-quantiles, and is
    found by bisection there.

    Parameters
    ----------
    lam : ndarray of shape (n, S)
    weights : ndarray of shape (S,)
        Non-negative, summing to 1.
    q : float or sequence of float in (0, 1)

    Returns
    -------
    ndarray of int, shape (n, len(q)) (or (n,) for a scalar ``q``)

    Examples
    --------
    Half the mass at rate 1 and half at rate 30: the lower quartile is the
    first component's median, the upper quartile the second's.

    >>> import numpy as np
    >>> lam = np.array([[1.0, 30.0]])
    >>> poisson_mixture_quantiles(lam, np.array([0.5, 0.5]), (0.25, 0.75)).tolist()
    [[1, 30]]
    """
    qs = np.atleast_1d(np.asarray(q, dtype=float))
    if qs.ndim != 1 or not ((qs > 0) & (qs < 1)).all():
        raise ValueError(f"q must be probabilities in (0, 1); got {q!r}.")
    lam, w = _check_mixture(lam, weights)
    out = np.empty((lam.shape[0], len(qs)), dtype=np.int64)
    for j, qj in enumerate(qs):
        node_q = stats.poisson.ppf(qj, lam)
        # Below every component's quantile each component's CDF is < q, so F is too; at
        # the largest, each is >= q. Bisection keeps F(lo) < q (or lo = -1) and F(hi) >= q.
        hi = node_q.max(axis=1)
        lo = node_q.min(axis=1) - 1
        while np.any(hi - lo > 1):
            mid = np.floor((lo + hi) / 2)
            F = stats.poisson.cdf(mid[:, None], lam) @ w
            up = F >= qj
            hi = np.where(up, mid, hi)
            lo = np.where(up, lo, mid)
        out[:, j] = hi
    return out if np.ndim(q) else out[:, 0]
