"""Type-II maximum likelihood for the Bernoulli (classification) RVM.

The likelihood is ``P(t | w) = prod_n y_n^t_n (1 - y_n)^(1 - t_n)`` with
``y_n = sigma(phi_n^T w)`` (Tipping 2001, eq. 23), so neither the weight
posterior nor the evidence has a closed form. Following Tipping (2001), §3
and SparseBayes v2, each step of the fast sequential algorithm of
:mod:`rvm_ppl.closed_form.evidence` runs on the Laplace approximation:

1. find the posterior mode ``mu`` of the weights for the current ``alpha``
   by Newton's method (iteratively re-weighted least squares), warm-started
   from the previous mode (:func:`posterior_mode`);
2. at the mode, ``H = Phi^T B Phi + A`` with ``B = diag(y_n (1 - y_n))`` is
   the negated Hessian of the log posterior (eq. 25) and ``Sigma = H^{-1}``;
   the classification problem then looks like a regression with
   heteroscedastic noise precisions ``b_n`` (eqs. 26-27), which gives the
   factors ``S, Q`` of every candidate;
3. :func:`rvm_ppl.closed_form.evidence.choose_action` picks the add, re-estimate or
   delete step that the Gaussian formulas say raises the evidence most.

On large problems (``N x M`` above :data:`EXACT_SCHEDULE_MAX`, or
``frozen_steps=True``) re-estimations, deletions and additions
run with ``B`` frozen at the last mode: the problem is then the Gaussian one
with noise precisions ``b_n`` and the IRLS targets, and Tipping & Faul's
(2003, App. A) rank-one updates apply. The mode is re-found (warm-started at
the linearised mode) and the statistics recomputed in full before the next
addition and before stopping, where the decision is taken again on fresh
statistics. On smaller problems (or ``frozen_steps=False``) the mode is
re-found after every action (SparseBayes's ``PosteriorModeFrequency = 1``):
there it costs little, and the frozen schedule, though not lower on average,
can end at a lower local maximum of the evidence.

Unlike the Gaussian case, the recorded Laplace log evidence
(Tipping 2001, §3) is **not** guaranteed to increase at every
step: the action is chosen with ``B`` frozen at the old mode, and the mode
(and with it ``B`` and the Laplace correction) moves after the action. The
decreases are small and are recorded in ``log_evidence_trace`` as they
happen, not hidden. For the same reason the steps can cycle: a kernel is
added because the frozen-``B`` formulas promise a gain, the evidence at the
new mode is lower, the kernel is deleted, and so on (seen on Pima with
narrow kernels). When the evidence has not risen by more than
``STALL_GAIN`` in ``STALL_ITERATIONS`` steps the fit stops at the best
model it has seen (``counts["cycling"] = 1``); SparseBayes has no such
guard and runs to its iteration limit.

Everything after the initialisation is written for any likelihood with one
latent output (:class:`_Laplace`, :class:`_LaplaceModel`,
:func:`laplace_evidence_fit`, with a likelihood object of
:mod:`rvm_ppl.closed_form.laplace`): the Poisson fit
(:mod:`rvm_ppl.closed_form.poisson`) runs the same code.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from scipy.special import expit

from rvm_ppl.closed_form import laplace
from rvm_ppl.closed_form.driver import ascend, scalar_gains
from rvm_ppl.closed_form.evidence import (
    ADD,
    DELETE,
    INIT_ALPHA_MAX,
    MIN_DELTA_LOG_ALPHA,
    REESTIMATE,
    EvidenceResult,
    out_factors,
    warn_not_converged,
)
from rvm_ppl.closed_form.laplace import (  # noqa: F401
    GRADIENT_MIN,
    MAX_POSTMODE_ITS,
    STEP_MIN,
    warn_ill_conditioned,
)
from rvm_ppl.core.linalg import cho_covariance, solve_lower_t_right
from rvm_ppl.core.progress import FitProgress
from rvm_ppl.kernels.basis import DenseBasis

# SparseBayes v2 constants for the non-Gaussian path (SB2_Initialisation,
# SB2_PosteriorMode).
INIT_ALPHA_MIN = 1e-3  # lower clip of the initial alpha = 1 / mu^2
LOGIT_TARGET_SHRINK = 0.9  # initial least-squares targets: logit(0.05) and logit(0.95)
# Stop, at the best model seen, when the Laplace evidence has not risen by
# more than STALL_GAIN nats in STALL_ITERATIONS steps (add/delete cycles).
STALL_ITERATIONS = 100
STALL_GAIN = 1e-6
FROZEN_MAX = 50  # longest run of steps with B frozen before the mode is re-found
# frozen_steps=None (the default) re-finds the mode after every action while the
# candidate design matrix has at most this many entries (N x M: a kernel on each of
# N <= 300 points plus a bias), where that adds at most about a tenth of a second to a
# fit and reaches the maxima SparseBayes's schedule reaches; beyond it B is frozen
# between mode searches, several times faster and, on average, no lower (one-vs-rest on
# the 898 digits took four times as long with the exact schedule). See the docs'
# "Defaults and why".
EXACT_SCHEDULE_MAX = 300 * 301
POLISH_GRADIENT = 1e-9  # gradient tolerance of the final mode search
# A re-estimation predicted to gain less than this fraction of |log evidence|
# counts as converged: the gains of a nearly unregularised weight (alpha ~ 1e-8
# on a unit-norm column) are rounding noise, and its alpha then flips between
# two values 1% apart, each step "gaining" 2e-5 nats of 4267 (seen at
# N = 20 000 on Ripley's distribution, until the stall guard stopped it).
MIN_REESTIMATE_GAIN = 1e-8


class PosteriorMode(NamedTuple):
    """Outcome of :func:`posterior_mode`.

    Attributes
    ----------
    mu : ndarray of shape (M,)
        The posterior mode ``w_MP`` of the weights.
    L : ndarray of shape (M, M)
        Lower Cholesky factor of ``H = Phi^T B Phi + A`` at the mode
        (Tipping 2001, eq. 25); ``Sigma = H^{-1}`` (eq. 26).
    log_likelihood : float
        ``log P(t | mu)`` (eq. 23).
    n_iter : int
        Newton steps taken.
    grad_max : float
        ``max |g|`` of the gradient of the log posterior at ``mu``.
    ill_conditioned : bool
        ``H`` needed jitter to be factorised, or its reciprocal condition
        number is below machine precision (SparseBayes's "ill-conditioned
        Hessian" warning: usually a kernel width that is too large).
    """

    mu: np.ndarray
    L: np.ndarray
    log_likelihood: float
    n_iter: int
    grad_max: float
    ill_conditioned: bool


def posterior_mode(
    Phi, t, alpha, w0=None, *, max_iter=MAX_POSTMODE_ITS, grad_tol=GRADIENT_MIN, step_min=STEP_MIN
):
    """Posterior mode of the weights of a logistic model with an ARD prior.

    Maximises the penalised log likelihood (Tipping 2001, eq. 24)
    ``log P(t | w) - w^T A w / 2`` by Newton's method (iteratively
    re-weighted least squares), as SparseBayes's ``SB2_PosteriorMode``:
    full steps ``H^{-1} g`` solved through the Cholesky factor of
    ``H = Phi^T B Phi + A``, halved while the objective does not improve.

    Parameters
    ----------
    Phi : ndarray of shape (N, M)
        Design matrix of the basis functions in the model.
    t : ndarray of shape (N,)
        Targets in {0, 1}.
    alpha : ndarray of shape (M,)
        Prior precisions of the weights (all positive and finite).
    w0 : ndarray of shape (M,), optional
        Warm start; zeros by default. The iteration is deterministic.
    max_iter : int
        Largest number of Newton steps.
    grad_tol : float
        Stop when every component of the gradient is below this in
        absolute value.
    step_min : float
        Smallest step length the line search tries; if no step down to it
        improves the objective, the current point is taken as the mode.

    Returns
    -------
    PosteriorMode
        The mode, the Cholesky factor of ``H`` at the mode, the data log
        likelihood there and diagnostics.

    Examples
    --------
    >>> import numpy as np
    >>> Phi = np.array([[1.0, -2.0], [1.0, -0.5], [1.0, 0.5], [1.0, 2.0]])
    >>> mode = posterior_mode(Phi, np.array([0.0, 1.0, 0.0, 1.0]), np.ones(2))
    >>> bool(mode.grad_max < 1e-6)
    True
    """
    Phi = np.asarray(Phi, dtype=float)
    alpha = np.asarray(alpha, dtype=float)
    w, L, log_lik, _, n_iter, grad_max, ill = laplace.posterior_mode(
        Phi, np.zeros(Phi.shape[1], dtype=int), laplace.BernoulliLogit(t), alpha, w0,
        max_iter=max_iter, grad_tol=grad_tol, step_min=step_min)
    return PosteriorMode(w, L, log_lik, n_iter, grad_max, ill)


class _Laplace:
    """The Laplace approximation at the mode for the current model, on unit-norm columns.

    ``lik`` is the likelihood (:mod:`rvm_ppl.closed_form.laplace`, one latent
    output): :class:`~rvm_ppl.closed_form.laplace.BernoulliLogit` of ``t`` by
    default, or e.g. :class:`~rvm_ppl.closed_form.laplace.PoissonLog`.
    """

    def __init__(self, basis, scale, t, cols, alpha, w0, grad_tol=GRADIENT_MIN, lik=None):
        lik = laplace.BernoulliLogit(t) if lik is None else lik
        k = cols.shape[1]
        self.mu, self.L, log_lik, F, _, self.grad_max, self.ill = laplace.posterior_mode(
            cols, np.zeros(k, dtype=int), lik, np.asarray(alpha, dtype=float), w0,
            grad_tol=grad_tol)
        R, d, _ = lik.derivatives(F)
        # Tipping (2001) eq. (25): B = diag(b_n), the negated second derivative
        # of log P(t | f) (Bernoulli: y_n (1 - y_n); Poisson: lambda_n).
        b = d[:, 0]
        V = np.empty((cols.shape[0], k + 1), order="F")
        np.multiply(cols, b[:, None], out=V[:, :k])
        V[:, k] = R[:, 0]
        cross, wn2 = basis.cross(V), basis.weighted_norms2(b)
        cross /= scale[:, None]
        BG = cross[:, :k]  # Phi~^T B Phi~_A
        Z = solve_lower_t_right(self.L, BG).T if k else np.zeros((0, cross.shape[0]))
        # §2.2: S_m = sum_n b_n phi_nm^2 - ||(B phi_m)^T Phi_A U^{-1}||^2, the
        # regression S with heteroscedastic noise precisions b_n.
        self.S = wn2 / scale**2 - np.einsum("ij,ij->j", Z, Z)
        # Q_m = phi_m^T (t - y), the gradient d log P / d f projected: at the mode
        # this equals phi_m^T C^{-1} t_hat with the IRLS targets
        # t_hat = Phi mu + B^{-1} (t - y) (eq. 27).
        self.Q = cross[:, k]
        self.logml = laplace.log_evidence(log_lik, self.mu, alpha, self.L)
        self.BG = np.array(BG, order="F")
        self.b = b
        self.alpha = np.array(alpha, dtype=float)
        self._Sigma = None

    @property
    def Sigma(self):
        """``H^{-1}`` at the mode, then as the frozen-``B`` updates leave it."""
        if self._Sigma is None:
            self._Sigma = cho_covariance(self.L) if self.L.shape[0] else np.zeros((0, 0))
        return self._Sigma

    # -- steps with B frozen at the last mode -------------------------------
    # With B = diag(b_n) held at the mode, the problem is the Gaussian one with
    # noise precisions b_n and IRLS targets t_hat (Tipping 2001, eqs. 26-27),
    # and Tipping & Faul's (2003, App. A) rank-one updates apply with
    # beta Phi^T Phi replaced by Phi^T B Phi.
    def frozen_reestimate(self, active, pos, new_alpha):
        Sigma = self.Sigma
        Sj = Sigma[:, pos].copy()
        kappa = 1.0 / (Sj[pos] + 1.0 / (new_alpha - self.alpha[pos]))
        comm = self.BG @ Sj
        mu_j = self.mu[pos]
        self.S += kappa * comm**2
        self.Q += kappa * mu_j * comm
        self._Sigma = Sigma - kappa * np.outer(Sj, Sj)
        self.mu = self.mu - kappa * mu_j * Sj
        self.alpha = self.alpha.copy()
        self.alpha[pos] = new_alpha
        self._pin(active)

    def frozen_add(self, basis, scale, active, i, col, new_alpha):
        """Add basis ``i`` (unit-norm column ``col``) at ``new_alpha`` with ``B`` frozen.

        Needs ``Phi~^T B phi~_i``, one cross product (``O(N r)`` on a
        low-rank basis); then T&F (2003), App. A: ``Sigma_ii = 1 / (alpha_i
        + S_i)``, ``mu_i = Sigma_ii Q_i``, ``v = Sigma Phi_A^T B phi_i``,
        ``e_m = phi_m^T B phi_i - phi_m^T B Phi_A v``, ``S -= Sigma_ii e^2``,
        ``Q -= mu_i e``.
        """
        bg = basis.cross((self.b * col)[:, None])[:, 0] / scale
        Sigma = self.Sigma
        Sii = 1.0 / (new_alpha + self.S[i])
        mu_i = Sii * self.Q[i]
        if len(active):
            v = Sigma @ bg[np.asarray(active)]
            e = bg - self.BG @ v
            off = -Sii * v
            self._Sigma = np.block([[Sigma + Sii * np.outer(v, v), off[:, None]], [off[None, :], Sii]])
            self.mu = np.append(self.mu - mu_i * v, mu_i)
        else:
            e = bg
            self._Sigma = np.array([[Sii]])
            self.mu = np.array([mu_i])
        self.S -= Sii * e**2
        self.Q -= mu_i * e
        self.alpha = np.append(self.alpha, new_alpha)
        self.BG = np.column_stack([self.BG, bg])
        self._pin([*active, i])

    def frozen_delete(self, active, pos):
        Sigma = self.Sigma
        Sj = Sigma[:, pos].copy()
        Sjj = Sj[pos]
        comm = self.BG @ Sj
        mu_j = self.mu[pos]
        self.S += comm**2 / Sjj
        self.Q += mu_j * comm / Sjj
        keep = np.arange(len(self.mu)) != pos
        self._Sigma = (Sigma - np.outer(Sj, Sj) / Sjj)[np.ix_(keep, keep)]
        self.mu = (self.mu - mu_j * Sj / Sjj)[keep]
        self.alpha = self.alpha[keep]
        self.BG = self.BG[:, keep]
        self._pin([j for i, j in enumerate(active) if keep[i]])

    def _pin(self, active):
        """``S_m = alpha_m - alpha_m^2 Sigma_mm``, ``Q_m = alpha_m mu_m`` for the basis in the model."""
        if len(active):
            a = np.asarray(active)
            self.S[a] = self.alpha - self.alpha**2 * self._Sigma.diagonal()
            self.Q[a] = self.alpha * self.mu


class _LaplaceModel:
    """A one-output Laplace likelihood's statistics for the sequential driver.

    The statistics interface of :func:`rvm_ppl.closed_form.driver.ascend`, for

    the Bernoulli (:func:`fit_evidence_bernoulli`) and Poisson
    (:func:`rvm_ppl.closed_form.poisson.fit_evidence_poisson`) alike: the
    likelihood enters through ``lik`` only.

    Holds the model (basis indices ``active``, their ``alpha`` and unit-norm
    columns) and the Laplace approximation at its mode (:class:`_Laplace`).
    With ``frozen`` steps, re-estimations, deletions and additions are the
    Gaussian rank-one updates with ``B`` frozen at the last mode, and the
    mode is re-found before an addition, before stopping and after
    ``FROZEN_MAX`` such steps; otherwise after every action.
    """

    tracks_gain = False  # the known evidence is that of the last mode

    def __init__(self, basis, scale, lik, frozen):
        self.basis, self.scale, self.lik, self.frozen = basis, scale, lik, frozen
        self.M = basis.n_basis
        self.in_model = np.zeros(self.M, dtype=bool)
        self.stale = 0  # steps taken with B frozen since the last mode search
        self.modes = 0
        self.n_exact = 0
        self.ill = False
        self.trace = []
        self._cos = {}  # basis -> cosines of every candidate with it

    def start(self, j, col, alpha0, mu0):
        self.active, self.cols = [j], col
        self.in_model[j] = True
        self.alpha = np.array([alpha0])
        self.new_mode(np.array([mu0]))

    @property
    def act_idx(self):
        return np.asarray(self.active, dtype=int)

    @property
    def logml(self):
        return self.state.logml

    def new_mode(self, mu_start, *, grad_tol=GRADIENT_MIN, record=True):
        """Find the mode of the current model from ``mu_start`` and record its evidence."""
        self.state = _Laplace(self.basis, self.scale, self.lik.t, self.cols, self.alpha, mu_start,
                              grad_tol=grad_tol, lik=self.lik)
        self.modes += 1
        self.ill |= self.state.ill
        self.stale = 0
        if record:
            self.trace.append(self.state.logml)
            self.n_exact += 1
        else:
            self.trace[-1] = self.state.logml

    # -- the statistics interface ------------------------------------------------
    def gains(self, blocked):
        return scalar_gains(self.state.S, self.state.Q, self.act_idx, self.alpha, blocked)

    def cosine(self, j):
        if j not in self._cos:
            col = self.basis.columns([j])[:, 0] / self.scale[j]
            self._cos[j] = self.basis.cross(col[:, None])[:, 0] / self.scale
        return self._cos[j]

    def cosines(self, idx):
        cols = self.basis.columns(idx) / self.scale[idx]
        return cols.T @ self.cols

    def penalty(self):
        return 0.0

    def objective(self):
        return None  # additions are not checked: the Laplace evidence may fall (module docstring)

    def refresh_before(self, d):
        return bool(self.stale) and (d.terminate or d.action == ADD or self.stale >= FROZEN_MAX)

    def refresh(self):
        # The mode has moved under the frozen steps: re-find it (warm started
        # at the linearised mode).
        self.new_mode(self.state.mu)

    def after_step(self, it, d):
        return False

    def add(self, j, new_alpha, order=()):
        new_col = self.basis.columns([j]) / self.scale[j]
        if self.frozen:
            self.state.frozen_add(self.basis, self.scale, self.active, j, new_col[:, 0], new_alpha)
            self.alpha = self.state.alpha
            self.stale += 1
        else:
            self.alpha = np.append(self.alpha, new_alpha)
        self.cols = np.hstack([self.cols, new_col])
        self.active.append(j)
        self.in_model[j] = True
        if not self.frozen:
            # Warm start at the previous mode with a zero weight for the new basis:
            # its objective is no worse than before, unlike T&F's App. A update
            # mu_i = Q_i / (alpha_i + S_i), from which Newton's method can stall
            # where the sigmoid saturates.
            self.new_mode(np.append(self.state.mu, 0.0))
        return self.cosine(j)

    def reestimate(self, j, new_alpha):
        pos = self.active.index(j)
        if self.frozen:
            self.state.frozen_reestimate(self.active, pos, new_alpha)
            self.alpha = self.state.alpha
            self.stale += 1
            return
        self.alpha = self.alpha.copy()
        self.alpha[pos] = new_alpha
        self.new_mode(self.state.mu)

    def delete(self, j):
        pos = self.active.index(j)
        keep = np.arange(len(self.active)) != pos
        if self.frozen and len(self.active) > 1:
            self.state.frozen_delete(self.active, pos)
            self.alpha = self.state.alpha
            self.stale += 1
            mu = None
        else:
            mu, self.alpha = self.state.mu[keep], self.alpha[keep]
        self.cols = self.cols[:, keep]
        self.active.remove(j)
        self.in_model[j] = False
        if mu is not None:
            self.new_mode(mu)

    # -- the best model seen, by value: the frozen steps update a state in place
    def snapshot(self):
        return list(self.active), self.alpha.copy(), self.cols, self.state.mu.copy()

    def restore(self, snap):
        active, self.alpha, self.cols, mu = snap
        self.active = list(active)
        self.in_model[:] = False
        self.in_model[self.active] = True
        self.new_mode(mu)


def fit_evidence_bernoulli(
    basis,
    t,
    *,
    start=None,
    max_iter=10_000,
    tol=MIN_DELTA_LOG_ALPHA,
    alignment_test=True,
    callback=None,
    frozen_steps=None,
    progressbar=False,
):
    """Maximise the Laplace-approximated evidence of a Bernoulli RVM.

    The fast sequential algorithm of Tipping & Faul (2003) on the Laplace
    approximation of Tipping (2001), §3, as SparseBayes v2 runs it for the
    Bernoulli likelihood: after every action the posterior mode is re-found
    (warm-started) and the factors ``S, Q`` of every candidate are
    recomputed from the mode; the action is then chosen by
    :func:`rvm_ppl.closed_form.evidence.choose_action`.

    Parameters
    ----------
    basis : ndarray of shape (N, M), DenseBasis or KernelBasis
        Candidate basis functions (columns).
    t : ndarray of shape (N,)
        Targets in {0, 1}.
    start : int, optional
        Index of the basis function to start from. Default: the one with
        the largest normalised projection on ``2 t - 1`` (SparseBayes),
        which is where :class:`~rvm_ppl.RVC` starts.
    max_iter : int
        Iteration cap; reaching it emits a ``ConvergenceWarning``.
    tol : float
        Stop when the best action is a re-estimation changing ``log alpha``
        by less than this.
    alignment_test : bool
        Skip candidates whose cosine with a basis in the model exceeds
        ``ALIGNMENT_MAX = 1 - 1e-4`` (SparseBayes's redundancy test, which
        uses ``1 - 1e-3``; see :data:`rvm_ppl.closed_form.evidence.ALIGNMENT_MAX`).
    callback : callable, optional
        Called as ``callback(iteration, action, index, log_evidence)``
        after every action that changed the model (for a step with ``B``
        frozen, ``log_evidence`` is the value at the last mode).
    frozen_steps : bool or None
        Re-estimate and delete with ``B`` frozen at the last mode (the
        Gaussian rank-one updates of Tipping & Faul 2003, App. A, on the
        IRLS-linearised problem), and re-find the mode only before an
        addition or before stopping, where the decision is then taken again
        on fresh statistics. ``False`` re-finds the mode after every action
        (SparseBayes's ``PosteriorModeFrequency = 1``). ``None`` (default):
        ``False`` while the candidate design matrix has at most
        :data:`EXACT_SCHEDULE_MAX` entries (``N x M``), where re-finding the
        mode after every action costs little, ``True`` beyond.
        ``counts["modes"]`` reports the number of mode searches.
    progressbar : bool
        Show a live line (iteration, basis functions, log evidence) on
        standard error once the fit has run two seconds.

    Returns
    -------
    EvidenceResult
        On the original column scale, with ``beta = None``. ``mu`` is the
        posterior mode and ``Sigma = (Phi^T B Phi + A)^{-1}`` at the mode;
        ``log_evidence`` is the Laplace approximation; ``log_evidence_trace``
        holds it after the initial mode search and after every action that
        changed the model. The trace may decrease slightly (see the module
        docstring); the model may end empty (``P(t = 1 | x) = 1/2``).

    Warns
    -----
    ConvergenceWarning
        If ``max_iter`` is reached.
    RuntimeWarning
        If a Hessian ``Phi^T B Phi + A`` was ill-conditioned (often a kernel
        width that is too large).

    Notes
    -----
    Steps (SparseBayes's ``SB2_Initialisation`` and main loop):

    1. Normalise the columns to unit length; ``alpha`` and the weights are
       returned on the original scale (``alpha * scale^2``, ``mu / scale``).
    2. Start from one basis function with weight ``mu`` fitted by least
       squares to ``logit`` targets 0.05/0.95 and ``alpha = 1 / mu^2``,
       clipped to ``[1e-3, 1e3]``.
    3. Repeat: choose the best action from ``S, Q``; add (unless the
       candidate nearly duplicates a basis in the model), re-estimate or
       delete; re-find the mode and recompute ``S, Q``.
    4. Stop when the best action is a re-estimation smaller than ``tol``,
       or, at the best model seen, when the steps cycle without raising
       the evidence (module docstring).

    References
    ----------
    .. [1] Tipping, M. E. (2001). Sparse Bayesian learning and the relevance
       vector machine. JMLR 1, 211-244.
    .. [2] Tipping, M. E. and Faul, A. C. (2003). Fast marginal likelihood
       maximisation for sparse Bayesian models. AISTATS.

    Examples
    --------
    >>> import numpy as np
    >>> x = np.linspace(-3, 3, 40)
    >>> t = (x + np.sin(3 * x) > 0).astype(float)
    >>> Phi = np.hstack([np.ones((40, 1)), np.exp(-((x[:, None] - x[None, :]) ** 2))])
    >>> res = fit_evidence_bernoulli(Phi, t, start=0)
    >>> res.beta is None and res.converged
    True
    """
    if isinstance(basis, np.ndarray):
        basis = DenseBasis(basis)
    t = np.asarray(t, dtype=float)
    if not np.all((t == 0) | (t == 1)):
        raise ValueError("Bernoulli targets must be 0 or 1.")
    t_lin = 2 * t - 1  # §2.8: linearised targets
    norms2, proj = basis.norms2_and_project(t_lin)
    scale = np.sqrt(norms2)
    scale[scale == 0] = 1.0
    if start is None:
        start = int(np.argmax(np.abs(proj / scale)))

    # §2.8: least squares of phi~ mu onto logit((0.9 t_lin + 1) / 2); phi~ has unit norm.
    col = basis.columns([start]) / scale[start]
    p = (LOGIT_TARGET_SHRINK * t_lin + 1) / 2
    mu0 = float(col[:, 0] @ np.log(p / (1 - p)))
    return laplace_evidence_fit(
        basis, scale, laplace.BernoulliLogit(t), start, mu0, max_iter=max_iter, tol=tol,
        alignment_test=alignment_test, callback=callback, frozen_steps=frozen_steps,
        progressbar=progressbar)


def laplace_evidence_fit(basis, scale, lik, start, mu0, *, max_iter, tol, alignment_test,
                         callback, frozen_steps, progressbar):
    """Run the fast sequential algorithm on the Laplace evidence of a one-output likelihood.

    The part of :func:`fit_evidence_bernoulli` after the initialisation,
    shared with :func:`rvm_ppl.closed_form.poisson.fit_evidence_poisson`:
    :func:`rvm_ppl.closed_form.driver.ascend` over a :class:`_LaplaceModel`
    of ``lik`` started from basis ``start`` with weight ``mu0`` and
    ``alpha = 1 / mu0^2`` clipped to ``[INIT_ALPHA_MIN, INIT_ALPHA_MAX]``
    (SparseBayes's ``SB2_Initialisation``).

    Parameters
    ----------
    basis : DenseBasis or KernelBasis
    scale : ndarray of shape (M,)
        Column norms; the fit runs on unit-norm columns.
    lik : likelihood object of :mod:`rvm_ppl.closed_form.laplace` (``K = 1``)
    start : int
    mu0 : float
        Initial weight of the unit-norm column ``start``.
    max_iter, tol, alignment_test, callback, progressbar
        As in :func:`fit_evidence_bernoulli`.
    frozen_steps : bool or None
        As in :func:`fit_evidence_bernoulli`.

    Returns
    -------
    EvidenceResult
        On the original column scale, with ``beta = None``.
    """
    M = basis.n_basis
    if frozen_steps is None:
        frozen_steps = len(lik.t) * M > EXACT_SCHEDULE_MAX
    col = basis.columns([start]) / scale[start]
    alpha0 = 1.0 / mu0**2 if mu0 != 0 else np.inf
    model = _LaplaceModel(basis, scale, lik, frozen_steps)
    model.start(start, col, np.clip(alpha0, INIT_ALPHA_MIN, INIT_ALPHA_MAX), mu0)
    line = FitProgress("evidence (Laplace)", "log evidence", show=progressbar)
    run = ascend(
        model, max_iter=max_iter, tol=tol, alignment_test=alignment_test, callback=callback,
        progress=line.update,
        min_gain=lambda m: MIN_REESTIMATE_GAIN * max(1.0, abs(m.logml)),
        stall=(STALL_ITERATIONS, STALL_GAIN), warn_not_converged=warn_not_converged)
    cycling = run["counts"].get("cycling", 0)
    if model.stale and not cycling:  # stopped by max_iter after steps with B frozen
        model.refresh()
    if frozen_steps and not cycling and model.state.grad_max > POLISH_GRADIENT:
        # A mode search warm-started at the linearised mode may stop at once
        # (max |g| below GRADIENT_MIN) a little away from the mode; polish the
        # final one so that the reported evidence is that of the mode.
        model.new_mode(model.state.mu, grad_tol=POLISH_GRADIENT, record=False)
    state, active, alpha, trace = model.state, model.active, model.alpha, model.trace
    converged, it = run["converged"], run["n_iter"]
    counts = {k: run["counts"][k] for k in (ADD, REESTIMATE, DELETE, "aligned")}
    counts.update(cycling=cycling, modes=model.modes)
    line.finish(it, len(active), state.logml, converged)
    if model.ill:
        warn_ill_conditioned()

    s, q = out_factors(state.S, state.Q, active, alpha)
    order = np.argsort(active)
    active_sorted = np.asarray(active, dtype=int)[order]
    sc = scale[active_sorted]
    # Sigma = H^{-1} at the mode (eq. 26); the reordering permutes rows and columns.
    Sigma = cho_covariance(state.L)[np.ix_(order, order)] if len(active) else np.zeros((0, 0))
    alpha_full = np.full(M, np.inf)
    alpha_full[active_sorted] = alpha[order] * sc**2
    return EvidenceResult(
        active=active_sorted,
        mu=state.mu[order] / sc,
        Sigma=Sigma / np.outer(sc, sc),
        alpha=alpha_full,
        beta=None,
        log_evidence=state.logml,
        log_evidence_trace=np.asarray(trace),
        s=s * scale**2,
        q=q * scale,
        n_iter=it,
        converged=converged,
        aligned=run["aligned"],
        counts=counts,
    )


def decision_function(Phi_test_active, mu):
    """Latent function ``a = phi^T mu`` at test points (its sign classifies).

    Parameters
    ----------
    Phi_test_active : ndarray of shape (n, n_active)
        Basis functions in the model evaluated at the test points.
    mu : ndarray of shape (n_active,)

    Returns
    -------
    ndarray of shape (n,)
    """
    return np.asarray(Phi_test_active, dtype=float) @ mu


def predict_proba_moderated(Phi_test_active, mu, Sigma, extra_var=0.0):
    """``P(t = 1 | x)`` under the Laplace posterior, with MacKay's moderation.

    ``P(t = 1 | x) ~ sigma(kappa a)`` with ``a = phi^T mu``,
    ``sigma_a^2 = phi^T Sigma phi`` and ``kappa = (1 + pi sigma_a^2 / 8)^{-1/2}``
    (MacKay 1992). ``sigma_a^2`` is computed row by row, never as an
    ``n x n`` matrix. An empty model predicts 1/2.

    Parameters
    ----------
    Phi_test_active : ndarray of shape (n, n_active)
        Basis functions in the model evaluated at the test points.
    mu : ndarray of shape (n_active,)
        Posterior mode of their weights.
    Sigma : ndarray of shape (n_active, n_active)
        Laplace covariance of their weights.
    extra_var : float or ndarray of shape (n,)
        Variance of the latent from weights outside the model (independent
        factors of a pruned variational fit), added to ``sigma_a^2``.

    Returns
    -------
    ndarray of shape (n,)
        Probabilities in [0, 1], closer to 1/2 than the plug-in
        ``sigma(a)`` wherever ``sigma_a^2 > 0``.

    Examples
    --------
    >>> import numpy as np
    >>> p = predict_proba_moderated(np.array([[2.0], [0.0]]), np.array([1.5]), np.array([[1.0]]))
    >>> bool(0.5 < p[0] < 1 / (1 + np.exp(-3.0))) and bool(p[1] == 0.5)
    True
    """
    Phi_test_active = np.asarray(Phi_test_active, dtype=float)
    a = Phi_test_active @ mu
    var_a = np.einsum("ij,jk,ik->i", Phi_test_active, Sigma, Phi_test_active) + extra_var
    kappa = 1.0 / np.sqrt(1.0 + np.pi * np.maximum(var_a, 0.0) / 8.0)
    return expit(kappa * a)
