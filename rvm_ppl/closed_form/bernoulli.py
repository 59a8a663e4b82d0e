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

Hyperpriors (type-II MAP)
-------------------------
With a Gamma(a, b) hyperprior on every ``alpha_m`` (``priors``; Tipping 2001,
Appendix A) the fit maximises the penalised objective of the regression fit,
eq. (36) with the Laplace log evidence in place of the Gaussian one:
``log_evidence + sum_(m in model) (a log alpha_m - b alpha_m)`` on the
original columns (:func:`rvm_ppl.closed_form.evidence.prior_penalty`), a
basis outside the model contributing zero. The gains are those of the
regression fit (:func:`rvm_ppl.closed_form.evidence.prior_gains`) on the
Laplace factors ``S, Q``: a basis is in the model exactly when its best
finite ``alpha`` raises the penalised objective, and its ``alpha`` is then
the maximiser of its share (no ``alpha`` the fit keeps is infinite, and none
is pruned by growing without bound). With ``a log(a / b) - a < 0`` (e.g. the
classifier's Gamma(3, 2): ``-1.78`` nats) the hyperprior's term is negative
for every ``alpha``, so a basis must raise the Laplace evidence by more than
that to enter.

The steps' statistics are those of the Gaussian problem with ``B`` frozen at
the mode, whose fixed point in ``alpha`` (Tipping 2001, eq. 16) is not the
stationary point of the Laplace evidence: that also moves with ``B`` (third
derivatives of the log likelihood; how far apart the two lie is in the
docs' benchmarks, "Type-II MAP on the Laplace evidence"). So a MAP fit ends
with :func:`polish_map`: Newton steps on the exact gradient
(:func:`rvm_ppl.closed_form.laplace.log_evidence_gradient`) of the penalised
objective in every ``log alpha`` of the final model, each accepted only if
it raises the objective, so the returned ``alpha`` are its stationary point
at that set of basis functions. Where the mode is re-found after every
action (``frozen_steps=False``, the default on small problems) a MAP fit
also keeps its objective from falling: a step the exact objective does not
confirm is undone (:class:`_Confirmed`, ``counts["refused"]``), so its
``objective_trace`` never decreases; with ``B`` frozen between mode searches
it is recorded at the mode searches and may dip as the plain fit's does.
The plain fit keeps the fixed point and its steps as they were, as
SparseBayes does; as ``a, b -> 0`` the MAP fit therefore tends to the
stationary point of the Laplace evidence, which can hold other basis
functions than the plain fit.
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
    evidence_newton_terms,
    newton_direction,
    out_factors,
    prior_gains,
    prior_penalty,
    resolve_evidence_priors,
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
# The type-II MAP polish (polish_map): Newton steps on the exact penalised Laplace
# objective in log alpha until its gradient is below MAP_GRADIENT (a point within
# about 1e-7 of the stationary log alpha for a curvature of order one), at most
# MAP_STEPS of them.
MAP_GRADIENT = 1e-7
MAP_STEPS = 30
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


class _Confirmed:
    """Steps of a type-II MAP fit that its exact objective confirms, for the Laplace models.

    The steps are chosen from statistics with ``B`` frozen at the mode, and
    the Laplace evidence at the new mode can be lower than before (module
    docstring). Where the mode is re-found after every action (``checked``),
    a MAP fit keeps its penalised objective from falling: a re-estimation or
    deletion the exact objective does not confirm is undone at once and the
    basis is left alone (``refused``) until a basis enters or leaves the
    model (re-estimations of others leave the refusals standing: the final
    polish, :func:`polish_map`, moves every ``alpha`` on the exact
    gradient); an addition is checked by the driver (:meth:`objective`),
    which undoes it with :meth:`delete` and keeps the candidate out until the
    next deletion.
    A step is recorded in the traces once confirmed (:meth:`after_step`).
    A subclass provides ``_copy()`` and ``_paste(copy)`` (the model by
    reference: the actions replace arrays and states, never change them),
    ``state.logml``, ``penalty()``, ``logml``, ``alpha``, ``act_idx``, the
    traces ``trace`` and ``objective_trace`` and the count ``n_exact``.
    """

    def note_mode(self, record):
        """Trace a new mode: append it (``record`` True), replace the last entry (False) or not."""
        if record:
            self.record_point()
        elif record is not None:
            self.trace[-1] = self.state.logml
            self.objective_trace[-1] = self.state.logml + self.penalty()

    def record_point(self):
        """Append the current evidence and objective to the traces."""
        self.trace.append(self.state.logml)
        self.objective_trace.append(self.state.logml + self.penalty())
        self.n_exact += 1

    def _init_checks(self, checked):
        self.checked = checked
        self.refused = set()  # bases in the model whose step the objective refused
        self.n_refused = 0
        self.pending = False  # a confirmed step not yet recorded
        self.undoing = False  # the driver is about to undo a refused addition
        self.before = None

    @property
    def mark(self):
        """``record`` for the mode search after an action: not before it is confirmed."""
        return None if self.checked else True

    def _begin(self):
        if self.checked:
            self.before = self._copy()

    def _confirm(self, j, deletion):
        """After a re-estimation or deletion of ``j``: keep it if the objective did not fall."""
        if not self.checked:
            return
        if self.logml + self.penalty() < self.objective_trace[-1]:
            self._paste(self.before)
            self.refused.add(j)
            self.n_refused += 1
        else:
            self.pending = True
            if deletion:
                self.refused.clear()

    def _undo(self):
        """Undo a refused addition for the driver: back to the model before it."""
        self._paste(self.before)
        self.undoing = self.pending = False
        self.n_refused += 1

    def refused_mask(self):
        """The bases of the model whose step was refused (mask over ``act_idx``), or None."""
        return np.isin(self.act_idx, list(self.refused)) if self.refused else None

    def exclude_refused(self, gains):
        """Drop the refused steps from ``gains``, the tuple of ``driver.scalar_gains``."""
        if not self.refused:
            return gains
        ad, gain_ad, alpha_ad, gain_a, new_a, delete, *order = gains
        r = self.refused_mask()
        return (ad, gain_ad, alpha_ad, np.where(r, -np.inf, gain_a), np.where(r, self.alpha, new_a),
                delete & ~r, *order)

    def objective(self):
        """Return the exact objective after an addition (MAP fits, mode after every step), or None.

        Without ``checked`` additions are not checked: the plain Laplace
        evidence may fall (module docstring).
        """
        if not self.checked:
            return None
        value = self.logml + self.penalty()
        if value < self.objective_trace[-1]:
            self.undoing = True
        else:
            self.pending = True
            self.refused.clear()
        return value

    def reload(self):
        pass

    def after_step(self, it, d):
        if self.pending:
            self.record_point()
            self.pending = False
        return False


class _LaplaceModel(_Confirmed):
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

    def __init__(self, basis, scale, lik, frozen, priors=None):
        self.basis, self.scale, self.lik, self.frozen = basis, scale, lik, frozen
        # Gamma hyperprior on alpha (resolve_evidence_priors, original columns), or None.
        self.priors = priors
        self.M = basis.n_basis
        self.in_model = np.zeros(self.M, dtype=bool)
        self.stale = 0  # steps taken with B frozen since the last mode search
        self.modes = 0
        self.n_exact = 0
        self.ill = False
        self.trace = []
        self.objective_trace = []  # the trace plus the hyperprior terms
        self._cos = {}  # basis -> cosines of every candidate with it
        self._init_checks(priors is not None and not frozen)

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
        """Find the mode of the current model from ``mu_start`` and record its evidence.

        ``record``: append to the traces (True), replace their last entry
        (False), or leave them (None: a trial point of :func:`polish_map`).
        """
        self.state = _Laplace(self.basis, self.scale, self.lik.t, self.cols, self.alpha, mu_start,
                              grad_tol=grad_tol, lik=self.lik)
        self.modes += 1
        self.ill |= self.state.ill
        self.stale = 0
        self.note_mode(record)

    # -- the statistics interface ------------------------------------------------
    def gains(self, blocked):
        if self.priors is not None:
            # prior_gains leaves the refused steps out before it compares bounds.
            return prior_gains(self.state.S, self.state.Q, self.act_idx, self.alpha, self.scale,
                               self.priors, blocked, self.refused_mask())
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
        """Return the hyperprior terms of the objective (original columns; 0 without ``priors``)."""
        if self.priors is None:
            return 0.0
        return prior_penalty(self.alpha * self.scale[self.act_idx] ** 2, None, self.priors)

    def refresh_before(self, d):
        return bool(self.stale) and (d.terminate or d.action == ADD or self.stale >= FROZEN_MAX)

    def refresh(self):
        # The mode has moved under the frozen steps: re-find it (warm started
        # at the linearised mode).
        self.new_mode(self.state.mu)

    def _copy(self):
        return list(self.active), self.alpha, self.cols, self.state, self.in_model.copy()

    def _paste(self, c):
        active, self.alpha, self.cols, self.state, self.in_model = c
        self.active = list(active)

    def add(self, j, new_alpha, order=()):
        self._begin()
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
            self.new_mode(np.append(self.state.mu, 0.0), record=self.mark)
        return self.cosine(j)

    def reestimate(self, j, new_alpha):
        pos = self.active.index(j)
        if self.frozen:
            self.state.frozen_reestimate(self.active, pos, new_alpha)
            self.alpha = self.state.alpha
            self.stale += 1
            return
        self._begin()
        self.alpha = self.alpha.copy()
        self.alpha[pos] = new_alpha
        self.new_mode(self.state.mu, record=self.mark)
        self._confirm(j, deletion=False)

    def delete(self, j):
        if self.undoing:
            self._undo()
            return
        self._begin()
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
            self.new_mode(mu, record=self.mark)
            self._confirm(j, deletion=True)

    # -- the exact penalised objective (polish_map) ----------------------------------
    def laplace_terms(self):
        """Return the weights in the model at the mode, one ``alpha`` each (:func:`polish_map`)."""
        k = len(self.active)
        return dict(cols=self.cols, cls=np.zeros(k, dtype=int), lik=self.lik, walpha=self.alpha,
                    w=self.state.mu, L=self.state.L, group=np.arange(k), alpha=self.alpha,
                    scale2=self.scale[self.act_idx] ** 2)

    def set_alpha(self, alpha, record=None):
        """Move the ``alpha`` of the model (model order); find the mode to ``POLISH_GRADIENT``.

        ``record`` as in :meth:`new_mode`.
        """
        self.alpha = np.asarray(alpha, dtype=float).copy()
        self.new_mode(self.state.mu, grad_tol=POLISH_GRADIENT, record=record)

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
    priors=None,
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
    priors : dict, optional
        Gamma hyperprior ``a, b`` (shape, rate) on every ``alpha_m`` of the
        original columns (Tipping 2001, Appendix A); a missing key is 0.
        ``None`` or both zero is plain type-II maximum likelihood; otherwise
        the fit is type-II MAP: it maximises the penalised objective of
        :func:`rvm_ppl.closed_form.evidence.fit_evidence_regression` with the
        Laplace log evidence (module docstring, "Hyperpriors").

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

    Raises
    ------
    ValueError
        For targets other than 0 and 1, or ``priors`` that
        :func:`rvm_ppl.closed_form.evidence.resolve_evidence_priors` refuses
        or that set ``c, d`` (the Bernoulli likelihood has no noise precision).

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
    priors = alpha_priors(priors, "Bernoulli")
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
        progressbar=progressbar, priors=priors)


def alpha_priors(priors, likelihood):
    """Check a Gamma hyperprior on ``alpha`` for a likelihood without a noise precision.

    Parameters
    ----------
    priors : dict or None
        ``a, b`` (shape, rate) on every ``alpha_m``; missing keys are 0.
    likelihood : str
        Named in the error.

    Returns
    -------
    dict or None
        :func:`rvm_ppl.closed_form.evidence.resolve_evidence_priors`'s dict
        (``c = d = 0``), or ``None`` for plain type-II maximum likelihood.

    Raises
    ------
    ValueError
        Where ``resolve_evidence_priors`` raises, and for ``c`` or ``d``
        other than 0: the hyperprior of a noise precision the likelihood
        does not have.
    """
    p = resolve_evidence_priors(priors)
    if p is not None and (p["c"] or p["d"]):
        raise ValueError(f"The {likelihood} likelihood has no noise precision: priors may set "
                         f"a and b only; got c={p['c']!r}, d={p['d']!r}.")
    return p


def polish_map(model, priors):
    """Raise the penalised Laplace objective by Newton steps in every ``log alpha`` of the model.

    The gradient is exact (:func:`rvm_ppl.closed_form.laplace.log_evidence_gradient`
    plus the hyperprior's ``a - b alpha``, Tipping 2001, eq. 42); the
    Hessian is that of the re-estimation's fixed point
    (:func:`rvm_ppl.closed_form.evidence.evidence_newton_terms` summed over
    each group of weights sharing an ``alpha``, minus ``b alpha``), and the
    step that of :func:`~rvm_ppl.closed_form.evidence.newton_direction`,
    halved until the exact objective rises (at most 20 times). Stops when the
    gradient is below ``MAP_GRADIENT``, after ``MAP_STEPS`` steps, or when no
    step is accepted. ``model`` (:class:`_LaplaceModel` or the softmax
    model) provides ``laplace_terms()``, ``set_alpha(alpha, record)``,
    ``record_point()``, ``penalty()`` and ``logml``; it is left at the best
    point found, its mode found to ``POLISH_GRADIENT``, and every accepted
    step is recorded in its traces. Returns the number of steps taken.
    """
    a, b = priors["a"], priors["b"]
    # The mode to POLISH_GRADIENT: the last entry of the traces, found more precisely.
    model.set_alpha(model.laplace_terms()["alpha"], record=False)
    steps = 0
    for _ in range(MAP_STEPS):
        terms = model.laplace_terms()
        alpha, group, sc2 = terms["alpha"], terms["group"], terms["scale2"]
        if alpha.size == 0:
            break
        grad = laplace.log_evidence_gradient(terms["cols"], terms["cls"], terms["lik"],
                                             terms["walpha"], terms["w"], terms["L"], group)
        orig = alpha * sc2
        grad += a - b * orig  # eq. (42): the hyperprior in log alpha
        if np.max(np.abs(grad)) < MAP_GRADIENT:
            break
        Sigma = cho_covariance(terms["L"])
        _, Hw = evidence_newton_terms(terms["walpha"], None, Sigma, terms["w"], 0.0, 0, False)
        E = np.zeros((group.size, alpha.size))
        E[np.arange(group.size), group] = 1.0
        H = E.T @ Hw @ E
        H.flat[:: alpha.size + 1] -= b * orig
        step = newton_direction(grad, H)
        if step is None:
            break
        before = model.logml + model.penalty()
        kept = model._copy()
        for _ in range(20):
            model.set_alpha(alpha * np.exp(step))
            if model.logml + model.penalty() > before:
                model.record_point()
                break
            step = step / 2
        else:
            # Back to the point itself: its mode found again from the last trial's
            # weights may differ in the last digits from the one its traces recorded.
            model._paste(kept)
            break
        steps += 1
    return steps


def laplace_evidence_fit(basis, scale, lik, start, mu0, *, max_iter, tol, alignment_test,
                         callback, frozen_steps, progressbar, priors=None):
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
    priors : dict or None
        Gamma hyperprior on every ``alpha_m``, as :func:`alpha_priors` returns it.

    Returns
    -------
    EvidenceResult
        On the original column scale, with ``beta = None``; ``priors``,
        ``objective`` and ``objective_trace`` (the Laplace log evidence plus
        the hyperprior terms) as for the regression fit.
    """
    M = basis.n_basis
    if frozen_steps is None:
        frozen_steps = len(lik.t) * M > EXACT_SCHEDULE_MAX
    col = basis.columns([start]) / scale[start]
    alpha0 = 1.0 / mu0**2 if mu0 != 0 else np.inf
    model = _LaplaceModel(basis, scale, lik, frozen_steps, priors)
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
    if priors is not None:
        # Type-II MAP: from the re-estimation's fixed point to the stationary
        # point of the penalised Laplace objective (module docstring).
        model.polish_steps = polish_map(model, priors)
    elif frozen_steps and not cycling and model.state.grad_max > POLISH_GRADIENT:
        # A mode search warm-started at the linearised mode may stop at once
        # (max |g| below GRADIENT_MIN) a little away from the mode; polish the
        # final one so that the reported evidence is that of the mode.
        model.new_mode(model.state.mu, grad_tol=POLISH_GRADIENT, record=False)
    state, active, alpha, trace = model.state, model.active, model.alpha, model.trace
    converged, it = run["converged"], run["n_iter"]
    counts = {k: run["counts"][k] for k in (ADD, REESTIMATE, DELETE, "aligned")}
    counts.update(cycling=cycling, modes=model.modes)
    if priors is not None:
        counts.update(polish=model.polish_steps, refused=model.n_refused)
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
        priors=None if priors is None else dict(priors),
        objective=state.logml + prior_penalty(alpha_full, None, priors),
        objective_trace=np.asarray(model.objective_trace),
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
