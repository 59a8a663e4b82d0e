r"""Variational relevance vector machines (Bishop & Tipping 2000).

Model
-----
The hierarchical RVM of Tipping (2001) with Gamma hyperpriors (shape/rate):

* ``w_m | alpha_m ~ N(0, 1/alpha_m)``, ``alpha_m ~ Gamma(a, b)``, ``m = 1..M``;
* regression: ``t | w, beta ~ N(Phi w, beta^{-1} I)`` with ``beta ~ Gamma(c, d)``
  (the paper's ``tau``);
* classification: ``t_n | w ~ Bernoulli(sigma(phi_n^T w))``, ``t_n in {0, 1}``.

Factorisation
-------------
``Q(w, alpha, beta) = Q(w) Q(alpha) Q(beta)`` with ``Q(w) = N(mu, Sigma)``,
``Q(alpha) = prod_m Gamma(alpha_m | a~_m, b~_m)`` and ``Q(beta) = Gamma(c~, d~)``
(Bishop & Tipping 2000, eqs. 20-22; eqs. 53 and 56 for classification, which
has no ``beta``). Each factor is updated in closed form as the exact maximiser
of the lower bound with the others held fixed (coordinate ascent), so the
bound never decreases; it is computed after every sweep.

Lower bound
-----------
``L = <ln p(t|w,beta)> + <ln p(w|alpha)> + <ln p(alpha)> + <ln p(beta)>
- <ln Q(w)> - <ln Q(alpha)> - <ln Q(beta)>`` (eq. 39). The terms are

* eq. (40): ``N/2 (<ln beta> - ln 2 pi) - <beta>/2 <||t - Phi w||^2>``;
* eq. (41): ``sum_m [<ln alpha_m>/2 - ln(2 pi)/2 - <alpha_m><w_m^2>/2]``;
* eq. (42): ``sum_m [a ln b - ln Gamma(a) + (a-1)<ln alpha_m> - b<alpha_m>]``;
* eq. (43): ``c ln d - ln Gamma(c) + (c-1)<ln beta> - d<beta>``;
* eq. (44): ``M/2 (1 + ln 2 pi) + ln|Sigma| / 2`` (entropy of ``Q(w)``);
* eqs. (45)-(46), negated (as eq. 64): the Gamma entropies
  ``H[Gamma(s, r)] = s - ln r + ln Gamma(s) + (1 - s) psi(s)``.

For classification the likelihood term is replaced by the Jaakkola-Jordan bound
``<ln F>`` of eq. (60), with ``lambda(xi) = tanh(xi/2) / (4 xi)`` (eq. 50), and
the variational parameters are re-estimated by ``xi_n^2 = <(phi_n^T w)^2>``
(eq. 58).

Corrections to the published equations
--------------------------------------
Each update below was derived from the bound and checked to be its exact
maximiser (``tests/test_variational.py``); three printed equations disagree:

* eq. (26) prints ``c~ = c + (N + 1)/2``; the maximiser is ``c + N/2``
  (there are ``N`` observations; ``N + 1`` is the number of weights);
* eq. (41) prints ``- 1/2 sum <ln alpha_m>``; ``ln N(w|0, 1/alpha)`` carries
  ``+ 1/2 ln alpha`` (eq. 61 has the right sign);
* eqs. (45) and (46) print ``+<ln Q>`` under the label ``-<ln Q>``; the
  entropy is their negative, which is eq. (64).

Two fitters
-----------
:func:`fit_vb_regression` (the default) grows the model one basis function at
a time and never needs the ``N x M`` design; :func:`fit_vb_regression_full`
and :func:`fit_vb_classification_full` run the sweeps above over all ``M``
basis functions, ``O(M^3)`` each (a pruned weight there is independent of the
others, ``K = 0`` below). The sequential fits use the family:

Restricted family (pruning)
---------------------------
``Q(w)`` keeps every "pruned" weight independent with zero mean,
``Q(w_P) = prod_m N(0, v_m)``, and lets the weights of an active set ``A``
depend linearly on them: ``w_A = mu_A + K w_P + eps``,
``eps ~ N(0, Sigma_A)``. Every term stays in the bound, so the bound is that
of this family. With ``<alpha>, <beta>`` fixed its optimum is

* ``Sigma_A = (A_A + <beta> Phi_A^T Phi_A)^{-1}`` and ``mu_A`` as for the
  active model alone (eqs. 23-24);
* ``K = -<beta> Sigma_A Phi_A^T Phi_P``: the ``K``-dependent part of the
  bound, ``-tr(V [K^T (A_A + <beta> Phi_A^T Phi_A) K + 2 <beta> K^T
  Phi_A^T Phi_P + <beta> Phi_P^T Phi_P]) / 2``, is minimised column by
  column, leaving ``-sum_m v_m s_m / 2``;
* ``v_m = 1 / (<alpha_m> + s_m)`` with the *projected* sparsity factor
  ``s_m = S_m - <beta>^2 c_m^T Sigma_A c_m``, ``S_m = <beta> ||phi_m||^2``,
  ``c_m = Phi_A^T phi_m`` (Faul & Tipping 2002, eq. 16).

The entropy is ``ln|2 pi e Sigma_A| / 2 + sum_m ln(2 pi e v_m) / 2``;
``<||t - Phi w||^2>`` carries ``sum_m v_m ||phi_m - <beta> Phi_A u_m||^2``
and ``<w_j^2>`` of an active ``j`` carries ``sum_m v_m (<beta> u_jm)^2``,
``u_m = Sigma_A c_m`` (all from the cached ``Phi^T Phi_A``: ``O(M k^2)``).
``K = 0`` is the family with independent pruned weights
(``v_m = 1 / (<alpha_m> + S_m)``), so this one's bound is never lower; there,
each pruned weight spent ``S_m / (<alpha_m> + S_m)`` effective parameters
that fitted nothing and the noise absorbed them (up to one per column when
the columns have large norms: a linear kernel on ``x = 1..100`` gave a noise
sd of 21.7 for 0.098). Here a pruned weight only adds the part of its column
that the active ones cannot represent. For classification ``<beta> Phi^T Phi``
becomes ``Phi^T (2 Lambda) Phi`` and the ``xi`` update (eq. 58) includes
``sum_m v_m (phi_nm - (Phi_A u_m)_n)^2``. The full fits prune into the family
with ``K = 0`` (module Notes, Full fit).

Sequential fit (fit_vb_regression)
----------------------------------
With ``Q(alpha)`` and ``Q(beta)`` fixed and ``Q(w)`` at its optimum, the
bound is the log marginal likelihood of Tipping (2001) of the active model at
``alpha = <alpha>, beta = <beta>`` plus ``sum_m (<ln alpha_m> - ln <alpha_m>) / 2``,
the hyperprior terms and, for every pruned ``m``, ``F_out`` below. As a
function of one ``x = <alpha_m>`` (with
``Q(alpha_m) = Gamma(a + 1/2, (a + 1/2) / x)``, the form every update
gives) it is, up to terms free of ``x``,

* ``F_in(x) = (a + 1/2) ln x - b x - ln(x + s_m)/2 + q_m^2 / (2 (x + s_m))``
  if ``m`` is in the Gaussian block (Faul & Tipping 2002, eq. 11, with
  Bishop & Tipping 2000, eqs. 41-42 and 64), where ``s_m, q_m`` are the
  sparsity and quality factors of ``m`` computed without it;
* ``F_out(x) = (a + 1/2) ln x - b x - ln(x + s_m)/2`` if it is pruned, with
  the same ``s_m`` and ``v_m`` at its optimum.

The maximiser of ``F_in`` is the fixed point of alternating the ``Q(w)`` and
``Q(alpha_m)`` updates with everything else fixed (Shutin, Buchgraber,
Kulkarni & Poor 2011): a root of a cubic, ``s^2 / (q^2 - s)`` when
``a = b = 0`` and ``q^2 > s`` (Faul & Tipping 2002, eq. 17) and infinite
(prune) otherwise. That of ``F_out`` is a root of a quadratic. Each
iteration takes the best of: re-estimating an active ``Q(alpha_m)`` (gain
predicted by ``F_in`` with ``b`` raised by half the pruned weights' share of
``<w_m^2>``), or adding a pruned ``m`` that passes Shutin's test
``q_m^2 > s_m`` (gain ``max F_in - F_out(x_m)``), and then updates
``Q(beta)`` (eq. 27), ``Q(w)`` and every pruned ``(v_m, Q(alpha_m))``
jointly. An addition raises the bound by at least its predicted gain: the
other pruned ``s_m`` can only fall, which raises their ``F_out``. A
re-estimation moves the pruned ``s_m`` too (``ds_m / dx_j = (<beta>
u_jm)^2``), so its step is checked: if the bound fell, the exact
coordinate update ``<alpha_j> = (a + 1/2) / (b + <w_j^2>/2)`` (eq. 25) is
taken instead. The bound never decreases (tests).

Since ``F_in(x) - F_out(x) = q_m^2/(2(x + s_m)) >= 0``, removing a basis
function from the block never raises the bound (Tipping's gain of an
addition): the sequential fit only adds (the evidence method also deletes).
Its bound is below that of the full fit by what the restriction still costs,
the means and mutual correlations of the pruned weights: well under 1 nat of
about 1 300 on noisy sinc (N = 100), with predictions within 0.01 RMS (noise
sd 0.1) of the full fit's (``tests/test_variational_fast.py`` checks both
bounds).

The loop is the sequential driver's (:func:`rvm_ppl.closed_form.driver.ascend`,
the one that also runs the evidence method), over the statistics class
:class:`_Sequential`. Its alignment test keeps out candidates whose cosine
with a basis function in the model exceeds ``alignment_max`` (not taking a
step that would raise the bound keeps it monotone).

Each iteration costs ``O(M k^2 + k^3)`` for ``k`` active basis functions
(one triangular solve against the cached cross products ``Phi^T phi_j`` of
the active ``j``) plus, when a basis function is added, one product
``Phi^T phi_j`` (one pass over a lazy basis, shared by up to ``PREFETCH``
candidates).

Full fit (fit_vb_regression_full, fit_vb_classification_full)
-------------------------------------------------------------
A basis function whose ``<alpha_m>`` exceeds ``prune_alpha`` may be moved
to the restricted part, as an independent weight (``K = 0``). Dropping the
cross-covariances and the (tiny) mean of ``w_m`` lowers the bound once, by ``O(c_m / <alpha_m>)`` where
``c_m <= <beta> ||phi_m||^2`` is the coupling of ``phi_m`` to the other
basis functions; a sweep that would prune is therefore kept only if its
bound is not below the previous one (relative slack ``PRUNE_RTOL``), and
is otherwise redone with the candidates kept, the next attempt waiting
twice as long. Pruned bases are never re-admitted. In practice pruning is
taken only for (nearly) decoupled columns or astronomically large
``<alpha_m>``: under these updates an irrelevant ``<alpha_m>`` grows only
linearly, by about ``s_m - q_m^2`` per sweep, and it never exceeds
``(a + 1/2) / b``, so with the default ``b = 1e-6`` and
``prune_alpha = 1e12`` nothing is pruned; irrelevant weights instead settle
at ``<alpha_m> ~ sqrt(s_m / 2b)`` (about ``1e3``-``1e4`` on the sinc example).

References
----------
.. [1] C. M. Bishop and M. E. Tipping, "Variational relevance vector
   machines", UAI 2000.
.. [2] M. E. Tipping, "Sparse Bayesian learning and the relevance vector
   machine", JMLR 1, 2001.
.. [3] A. C. Faul and M. E. Tipping, "Analysis of sparse Bayesian
   learning", NIPS 14, 2002.
.. [4] T. Jaakkola and M. I. Jordan, "Bayesian parameter estimation via
   variational methods", Statistics and Computing 10, 2000.
.. [5] M. E. Tipping and A. C. Faul, "Fast marginal likelihood maximisation
   for sparse Bayesian models", AISTATS 2003.
.. [6] D. Shutin, T. Buchgraber, S. R. Kulkarni and H. V. Poor, "Fast
   variational sparse Bayesian learning with automatic relevance
   determination for superimposed signals", IEEE Trans. Signal Processing
   59(12), 2011.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
from scipy.special import digamma, gammaln
from sklearn.exceptions import ConvergenceWarning

from rvm_ppl.closed_form.constants import ALIGNMENT_MAX, PREFETCH, initial_noise_precision
from rvm_ppl.closed_form.driver import ascend
from rvm_ppl.core.linalg import (
    cho_covariance,
    cho_logdet,
    cho_solve,
    cholesky_jittered,
    solve_lower,
    solve_lower_t,
)
from rvm_ppl.core.progress import FitProgress
from rvm_ppl.kernels.basis import DenseBasis, LowRankKernelBasis

LN_2PI = float(np.log(2.0 * np.pi))
ALPHA_INIT = 1.0  # initial <alpha_m> (unit prior variance of the weights)
XI_SMALL = 1e-4  # below this, lambda(xi) uses its Taylor series
PRUNE_RTOL = 1e-12  # a pruning sweep may not lower the bound by more than this, relatively


@dataclass
class VBResult:
    """Outcome of a variational RVM fit.

    Returned by :func:`fit_vb_regression`, :func:`fit_vb_regression_full` and
    :func:`fit_vb_classification`.

    ``Q(w)`` is, for every pruned basis function, an independent
    ``N(0, weight_var[m])`` and, on the basis functions in ``active``, the
    Gaussian ``w_A = mean[active] + coupling w + eps``, ``eps ~ N(0, cov)``
    (module Notes, Restricted family).

    Attributes
    ----------
    mean : ndarray of shape (M,)
        ``E[w]`` under ``Q(w)``; zero for pruned basis functions.
    active : ndarray of int, shape (n_active,)
        Sorted indices of the basis functions kept in the full Gaussian block.
    cov : ndarray of shape (n_active, n_active)
        ``Cov[w[active] | pruned weights]`` under ``Q(w)``, rows and columns in
        ``active`` order (``Cov[w[active]]`` adds ``coupling V coupling^T``,
        ``V = diag(weight_var)`` on the pruned ones).
    weight_var : ndarray of shape (M,)
        The diagonal of ``cov`` on ``active`` and the variance ``v_m`` of the
        independent factor ``N(0, v_m)`` elsewhere.
    alpha_shape, alpha_rate : ndarray of shape (M,)
        ``Q(alpha_m) = Gamma(alpha_shape[m], alpha_rate[m])`` (shape, rate). For
        a pruned basis function this is the ``Q(alpha_m)`` of the fit's
        restricted family, ``Gamma(a + 1/2, b + weight_var[m] / 2)``: the
        joint optimum of ``Q(w_m) = N(0, v_m)`` and ``Q(alpha_m)`` given the
        other factors (for :func:`fit_vb_regression`; the full fit's last
        coordinate step for the others).
    beta_shape, beta_rate : float or None
        ``Q(beta) = Gamma(beta_shape, beta_rate)``; ``None`` for classification.
    bound_trace : ndarray
        The lower bound after every iteration.
    n_iter : int
        Number of iterations run.
    converged : bool
        Whether the stopping rule of the fitter was met.
    pruned : ndarray of bool, shape (M,)
        ``True`` for basis functions not in ``active``.
    xi : ndarray of shape (N,) or None
        Jaakkola-Jordan variational parameters (classification only).
    coupling : ndarray of shape (n_active, M) or None
        ``K``: how the active weights depend on the pruned ones (zero on the
        ``active`` columns; rows in ``active`` order). The predictive
        variance at ``phi`` is ``phi_A^T cov phi_A + sum_m weight_var[m]
        (phi_m + phi_A^T K_m)^2`` over the pruned ``m``. ``None`` for the
        full fits (their pruned weights are independent).
    """

    mean: np.ndarray
    active: np.ndarray
    cov: np.ndarray
    weight_var: np.ndarray
    alpha_shape: np.ndarray
    alpha_rate: np.ndarray
    beta_shape: float | None
    beta_rate: float | None
    bound_trace: np.ndarray
    n_iter: int
    converged: bool
    pruned: np.ndarray
    xi: np.ndarray | None = None
    coupling: np.ndarray | None = None

    @property
    def alpha_mean(self):
        """``E[alpha_m] = shape / rate`` (Bishop & Tipping 2000, eq. 30)."""
        return self.alpha_shape / self.alpha_rate

    @property
    def bound(self):
        """The final lower bound on the log marginal likelihood."""
        return float(self.bound_trace[-1])


@dataclass
class _QW:
    """``Q(w)`` of the restricted family (module Notes).

    ``w_P ~ prod_m N(0, var[m])`` on the pruned basis functions and
    ``w_A = mean[A] + coupling[:, P] w_P + eps``, ``eps ~ N(0, cov)``, on the
    ``active`` block (rows of ``coupling`` in ``active`` order; ``None``: no
    coupling). ``var`` holds every marginal variance (on the active block the
    diagonal of ``cov + K V K^T``); ``logdet`` is ``ln |Cov[w]|``.
    """

    mean: np.ndarray
    cov: np.ndarray
    active: np.ndarray
    var: np.ndarray
    logdet: float
    coupling: np.ndarray | None = None

    @classmethod
    def full(cls, mean, cov):
        """Build a ``Q(w)`` with every basis function active (used by the tests)."""
        mean = np.asarray(mean, dtype=float)
        cov = np.asarray(cov, dtype=float)
        L = cholesky_jittered(cov, what="weight covariance")
        return cls(mean, cov, np.arange(len(mean)), np.diag(cov).copy(), cho_logdet(L))

    @property
    def second_moment(self):
        """``E[w_m^2] = mu_m^2 + Sigma_mm`` (eqs. 28-29)."""
        return self.mean**2 + self.var

    def sorted_cov(self):
        """``Cov[w[active]]`` with rows and columns in increasing basis order."""
        order = np.argsort(self.active)
        return self.cov[np.ix_(order, order)]


# -- moments and entropies of the Gamma factors ---------------------------------


def _gamma_moments(shape, rate):
    """``E[x]`` and ``E[ln x]`` under ``Gamma(shape, rate)`` (eqs. 30-33)."""
    return shape / rate, digamma(shape) - np.log(rate)


def _gamma_entropy(shape, rate):
    """``-E[ln Gamma(x | shape, rate)]``, the entropy (eq. 64; eqs. 45-46 negated)."""
    return shape - np.log(rate) + gammaln(shape) + (1.0 - shape) * digamma(shape)


def _gamma_cross(shape0, rate0, mean, logmean):
    """``E[ln Gamma(x | shape0, rate0)]`` given ``E[x]`` and ``E[ln x]`` (eqs. 42-43)."""
    return shape0 * np.log(rate0) - gammaln(shape0) + (shape0 - 1.0) * logmean - rate0 * mean


def _check_inputs(Phi, t):
    """Return ``Phi`` (N, M) and ``t`` (N,) as float arrays, or raise ``ValueError``."""
    Phi = np.asarray(Phi, dtype=float)
    t = np.asarray(t, dtype=float)
    if Phi.ndim != 2 or t.ndim != 1 or Phi.shape[0] != t.shape[0]:
        raise ValueError(f"Phi must be (N, M) and t (N,); got shapes {Phi.shape} and {t.shape}.")
    if not (np.all(np.isfinite(Phi)) and np.all(np.isfinite(t))):
        raise ValueError("Phi and t must be finite.")
    return Phi, t


# -- shared pieces of the bound --------------------------------------------------


def _latent_moments(Phi, qw):
    """``E[phi_n^T w]`` and ``Var[phi_n^T w]`` for every row of ``Phi``."""
    f = Phi @ qw.mean
    PA = Phi[:, qw.active]
    v = np.einsum("nj,nj->n", PA @ qw.cov, PA)
    pruned = np.ones(len(qw.mean), dtype=bool)
    pruned[qw.active] = False
    if pruned.any():
        G = Phi[:, pruned]  # phi_n^T w = phi_A^T (mu_A + eps) + sum_P (phi_m + phi_A^T K_m) w_m
        if qw.coupling is not None and len(qw.active):
            G = G + PA @ qw.coupling[:, pruned]
        v = v + G**2 @ qw.var[pruned]
    return f, v


def _weight_terms(qw, alpha_shape, alpha_rate, a, b):
    """Terms of the bound that involve only ``Q(w)`` and ``Q(alpha)``.

    ``<ln p(w|alpha)> + <ln p(alpha)> - <ln Q(w)> - <ln Q(alpha)>``:
    eqs. (41) (with the sign of ``<ln alpha>`` corrected, as in eq. 61),
    (42), (44) and (64).
    """
    M = len(qw.mean)
    Ea, Elna = _gamma_moments(alpha_shape, alpha_rate)
    # Bishop & Tipping (2000) eq. (41)/(61): <ln N(w_m | 0, 1/alpha_m)>
    log_prior_w = 0.5 * np.sum(Elna - LN_2PI - Ea * qw.second_moment)
    # eq. (42)/(62): <ln Gamma(alpha_m | a, b)>
    log_prior_alpha = np.sum(_gamma_cross(a, b, Ea, Elna))
    # eq. (44)/(63): entropy of Q(w)
    entropy_w = 0.5 * M * (1.0 + LN_2PI) + 0.5 * qw.logdet
    # eq. (64) (= -eq. 45): entropy of Q(alpha)
    entropy_alpha = np.sum(_gamma_entropy(alpha_shape, alpha_rate))
    return float(log_prior_w + log_prior_alpha + entropy_w + entropy_alpha)


def _update_q_alpha(qw, a, b):
    """``a~_m = a + 1/2``, ``b~_m = b + <w_m^2>/2`` (eqs. 25 and 57)."""
    shape = np.full(len(qw.mean), a + 0.5)
    return shape, b + 0.5 * qw.second_moment


def _update_q_w(Phi, alpha_mean, curvature, rhs, active, pruned_curv, coupled=True):
    """Closed-form ``Q(w)`` for a bound quadratic in ``w``.

    Maximises ``-w^T (A + H) w / 2 + w^T r`` over Gaussians that are full on
    ``active`` and ``N(0, v_m)`` elsewhere: ``Sigma = (A + H)^{-1}``,
    ``mu = Sigma r`` on the active block (eqs. 23-24, 54-55) and, for pruned
    ``m``, the coupling ``K_m = -Sigma H_Am`` of the block to ``w_m`` and
    ``v_m = 1 / (alpha_m + s_m)`` with the projected ``s_m`` (module Notes,
    Restricted family); ``coupled=False``: ``K = 0`` and ``v_m = 1 / (alpha_m
    + H_mm)``, the independent family the full fits prune into.

    Parameters
    ----------
    Phi : ndarray of shape (N, M)
    alpha_mean : ndarray of shape (M,)
        ``<alpha_m>``.
    curvature : ndarray of shape (N,)
        Per-observation weights ``h_n`` with ``H = Phi^T diag(h) Phi``.
    rhs : ndarray of shape (M,)
        The linear coefficient ``r``.
    active : ndarray of int
    pruned_curv : ndarray of shape (M,)
        ``H_mm = sum_n h_n phi_nm^2``.
    coupled : bool
        Whether the block depends linearly on the pruned weights.

    Returns
    -------
    _QW
        The updated ``Q(w)``.
    """
    M = Phi.shape[1]
    mean = np.zeros(M)
    var = 1.0 / (alpha_mean + pruned_curv)
    PA = Phi[:, active]
    prec = (PA.T * curvature) @ PA
    prec[np.diag_indices_from(prec)] += alpha_mean[active]
    pruned = np.ones(M, dtype=bool)
    pruned[active] = False
    cov, coupling = np.zeros((0, 0)), None
    logdet = 0.0
    if len(active):
        L = cholesky_jittered(prec, what="weight posterior precision")
        cov = cho_covariance(L)
        mean[active] = cho_solve(L, rhs[active])
        var[active] = np.diag(cov)
        logdet -= cho_logdet(L)
        if coupled and pruned.any():
            C = (Phi[:, pruned].T * curvature) @ PA  # H_PA
            U, s, _ = _coupled_pruned(L, C, pruned_curv[pruned], alpha_mean[active])
            var[pruned] = 1.0 / (alpha_mean[pruned] + s)
            coupling = np.zeros((len(active), M))
            coupling[:, pruned] = -U
            var[active] += U**2 @ var[pruned]
    logdet += float(np.sum(np.log(var[pruned])))
    return _QW(mean, cov, np.asarray(active), var, logdet, coupling)


SPAN = 1e-12  # S_m - c_m^T u_m below SPAN * S_m is rounding: phi_m is in the block's span


def _coupled_pruned(L, C, S, x_active):
    """The pruned weights' coupling to the Gaussian block and their projected factors.

    With ``H = A_A + Phi_A^T B Phi_A`` (lower Cholesky factor ``L``) the
    precision of the block, ``c_m`` (rows of ``C``) the curvature's cross
    products ``Phi_A^T B phi_m`` and ``S_m = phi_m^T B phi_m``, the optimal
    ``w_A = mu_A + K w_P + eps`` has columns ``K_m = -u_m``, ``u_m = H^{-1} c_m``.

    Returns
    -------
    U : ndarray of shape (k, n)
        The ``u_m``.
    s : ndarray of shape (n,)
        ``s_m = S_m - c_m^T u_m``, the sparsity factor of ``m`` with respect
        to the block (Faul & Tipping 2002, eq. 16). Since ``s_m = ||g_m||_B^2
        + u_m^T A_A u_m`` with ``g_m = phi_m - Phi_A u_m``, it is at least
        ``sum_j x_j u_jm^2`` (equal when ``phi_m`` lies in the span of the
        block), which is taken where the difference is below ``SPAN * S_m``
        and lost to rounding.
    g2 : ndarray of shape (n,)
        ``||g_m||_B^2 = s_m - sum_j x_j u_jm^2``, the pruned weight's share
        of the expected weighted residual per unit variance.
    """
    B = solve_lower(L, C.T)
    U = solve_lower_t(L, B)
    floor = x_active @ U**2
    s = S - np.einsum("km,km->m", B, B)
    s = np.where(s > SPAN * S, np.maximum(s, floor), floor)
    return U, s, s - floor


# -- regression -------------------------------------------------------------------


def _regression_bound(Phi, t, qw, alpha_shape, alpha_rate, beta_shape, beta_rate, a, b, c, d):
    """Lower bound of the variational RVR (Bishop & Tipping 2000, eqs. 39-46)."""
    N = len(t)
    f, v = _latent_moments(Phi, qw)
    Eb, Elnb = _gamma_moments(beta_shape, beta_rate)
    sq = float(np.sum((t - f) ** 2) + np.sum(v))  # <||t - Phi w||^2>
    # Bishop & Tipping (2000) eq. (40)
    loglik = 0.5 * N * (Elnb - LN_2PI) - 0.5 * Eb * sq
    # eq. (43) and eq. (46) negated
    beta_terms = _gamma_cross(c, d, Eb, Elnb) + _gamma_entropy(beta_shape, beta_rate)
    return float(loglik + beta_terms) + _weight_terms(qw, alpha_shape, alpha_rate, a, b)


def _update_q_beta(Phi, t, qw, c, d):
    """``c~ = c + N/2`` (eq. 26 corrected), ``d~ = d + <||t - Phi w||^2>/2`` (eq. 27)."""
    f, v = _latent_moments(Phi, qw)
    return c + 0.5 * len(t), d + 0.5 * float(np.sum((t - f) ** 2) + np.sum(v))


def _regression_sweep(Phi, t, col_sq, state, active, priors, coupled=True):
    """One coordinate-ascent sweep: ``Q(w)``, then ``Q(alpha)``, then ``Q(beta)``.

    ``coupled``: the family of the pruned weights (:func:`_update_q_w`).
    """
    a, b, c, d = priors
    alpha_shape, alpha_rate, beta_shape, beta_rate = state
    Ea = alpha_shape / alpha_rate
    Eb = beta_shape / beta_rate
    # Bishop & Tipping (2000) eqs. (23)-(24)
    qw = _update_q_w(Phi, Ea, np.full(len(t), Eb), Eb * (Phi.T @ t), active, Eb * col_sq,
                     coupled)
    alpha_shape, alpha_rate = _update_q_alpha(qw, a, b)  # eq. (25)
    beta_shape, beta_rate = _update_q_beta(Phi, t, qw, c, d)  # eqs. (26)-(27)
    state = (alpha_shape, alpha_rate, beta_shape, beta_rate)
    bound = _regression_bound(Phi, t, qw, *state, a, b, c, d)
    return qw, state, bound


def fit_vb_regression_full(
    Phi,
    t,
    *,
    a=1e-6,
    b=1e-6,
    c=1e-6,
    d=1e-6,
    max_iter=5000,
    tol=1e-7,
    prune_alpha=1e12,
):
    """Fit the variational relevance vector regression by full sweeps (Bishop & Tipping 2000).

    Every sweep updates ``Q(w)`` over all ``M`` basis functions (``O(M^3)``),
    then ``Q(alpha)`` and ``Q(beta)``. This is the paper's algorithm, kept as
    the reference :func:`fit_vb_regression` is checked against; use that one
    for more than a few hundred basis functions.

    Parameters
    ----------
    Phi : ndarray of shape (N, M)
        Design matrix (one column per basis function, bias included if wanted).
    t : ndarray of shape (N,)
        Real targets.
    a, b : float
        Shape and rate of the Gamma hyperprior on every weight precision.
    c, d : float
        Shape and rate of the Gamma prior on the noise precision ``beta``.
    max_iter : int
        Maximum number of sweeps; reaching it emits a ``ConvergenceWarning``.
    tol : float
        Stop when ``|L_k - L_{k-1}| <= tol * |L_k|``.
    prune_alpha : float
        ``<alpha_m>`` above which a basis function leaves the linear algebra
        (see the module Notes for how its bound terms are kept).

    Returns
    -------
    VBResult
        With ``beta_shape`` and ``beta_rate`` set; ``xi`` is ``None``;
        ``active`` holds every basis function not pruned (all of them with
        the default ``prune_alpha``).

    Notes
    -----
    Initialisation is deterministic: ``<alpha_m> = 1`` and
    ``<beta> = 1 / (0.1 std(t))^2``, each with the shape of its update. The
    noise standard deviation can be estimated as ``sqrt(beta_rate / beta_shape)``
    (that is, ``1 / sqrt(E[beta])``).

    Examples
    --------
    >>> import numpy as np
    >>> from rvm_ppl.closed_form.vb import fit_vb_regression_full
    >>> x = np.linspace(-1, 1, 20)
    >>> Phi = np.column_stack([np.ones_like(x), x])
    >>> res = fit_vb_regression_full(Phi, 1.0 + 2.0 * x)
    >>> np.round(res.mean, 3)
    array([1., 2.])
    """
    Phi, t = _check_inputs(Phi, t)
    N, M = Phi.shape
    priors = (a, b, c, d)
    col_sq = np.einsum("nm,nm->m", Phi, Phi)
    beta0 = initial_noise_precision(np.var(t))
    beta_shape = c + 0.5 * N
    state = (
        np.full(M, a + 0.5),
        np.full(M, (a + 0.5) / ALPHA_INIT),
        beta_shape,
        beta_shape / beta0,
    )

    def sweep(state, active):
        return _regression_sweep(Phi, t, col_sq, state, active, priors, coupled=False)

    qw, state, trace, n_iter, converged, pruned = _coordinate_ascent(
        sweep, state, M, max_iter, tol, prune_alpha
    )
    return VBResult(
        mean=qw.mean,
        active=np.sort(np.asarray(qw.active, dtype=int)),
        cov=qw.sorted_cov(),
        weight_var=qw.var,
        alpha_shape=state[0],
        alpha_rate=state[1],
        beta_shape=float(state[2]),
        beta_rate=float(state[3]),
        bound_trace=trace,
        n_iter=n_iter,
        converged=converged,
        pruned=pruned,
    )


# -- regression that adds basis functions one at a time (fast variational SBL) -------

ALIGNED = 1e-8  # a candidate with s_m <= ALIGNED * S_m lies in the span of the model


def _check_priors(**priors):
    """Raise ``ValueError`` unless every hyperprior parameter is positive and finite."""
    for name, value in priors.items():
        if not (np.isfinite(value) and value > 0):
            raise ValueError(f"{name} must be positive and finite; got {value!r}.")


def _as_basis(basis, t):
    """Return ``(basis, t)`` with ``basis`` an object of the ``DenseBasis`` protocol."""
    t = np.asarray(t, dtype=float)
    protocol = ("n_basis", "n_samples", "norms2_and_project", "columns", "cross")
    if isinstance(basis, (np.ndarray, list, tuple)) or not any(hasattr(basis, p) for p in protocol):
        try:
            Phi = np.asarray(basis, dtype=float)
        except (TypeError, ValueError):
            raise TypeError(
                "basis must be an ndarray or have the DenseBasis/KernelBasis protocol "
                f"{protocol}; got {type(basis).__name__}."
            ) from None
        Phi, t = _check_inputs(Phi, t)
        return DenseBasis(Phi), t
    for attr in protocol:
        if not hasattr(basis, attr):
            raise TypeError(
                "basis must be an ndarray or have the DenseBasis/KernelBasis protocol "
                f"(n_basis, n_samples, norms2_and_project, columns, cross); missing {attr!r}."
            )
    if t.ndim != 1 or basis.n_samples != t.shape[0]:
        raise ValueError(
            f"t must have shape ({basis.n_samples},) to match the basis; got {t.shape}."
        )
    if not np.all(np.isfinite(t)):
        raise ValueError("t must be finite.")
    return basis, t


def _f_in(x, s, q2, a, b):
    """Return the bound as a function of ``<alpha_m> = x`` for ``m`` in the Gaussian block.

    With the other factors fixed and ``Q(w)`` at its optimum, the bound depends
    on ``Q(alpha_m) = Gamma(a + 1/2, (a + 1/2) / x)`` through
    ``(a + 1/2) ln x - b x - ln(x + s)/2 + q^2 / (2 (x + s))`` plus terms free
    of ``x`` (Faul & Tipping 2002, eq. 11, with Bishop & Tipping 2000, eqs.
    41-42 and 64 for the ``Q(alpha_m)`` terms). ``s, q`` are the sparsity and
    quality factors of ``m`` computed without it (Faul & Tipping 2002, eq. 16)
    at ``<alpha>, <beta>``.
    """
    return (a + 0.5) * np.log(x) - b * x - 0.5 * np.log(x + s) + 0.5 * q2 / (x + s)


def _f_out(x, S, a, b):
    """Return the terms of :func:`_f_in` for a pruned ``m``.

    ``Q(w_m) = N(0, 1/(x + S))`` at its optimum, ``S = <beta> ||phi_m||^2``.
    """
    return (a + 0.5) * np.log(x) - b * x - 0.5 * np.log(x + S)


def _argmax_f_out(S, a, b):
    """``argmax_x`` of :func:`_f_out`: the root of ``b x^2 + (b S - a) x - (a + 1/2) S``."""
    B = a - b * S
    D = np.sqrt(B * B + 4.0 * b * (a + 0.5) * S)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(B >= 0, (B + D) / (2.0 * b), 2.0 * (a + 0.5) * S / (D - B))


def _argmax_f_in(s, q2, a, b):
    """``argmax_x`` of :func:`_f_in` for each ``(s, q^2)``: the fixed point of Q(alpha_m).

    This is the limit of alternating the updates of ``Q(w)`` and ``Q(alpha_m)``
    with everything else fixed (Shutin et al. 2011, Sec. III; for ``a = b = 0``
    it is ``s^2 / (q^2 - s)`` when ``q^2 > s`` and infinite otherwise, Faul &
    Tipping 2002, eq. 17). With ``y = x / s``, ``rho = q^2 / s``,
    ``h = b s``, the stationary points solve the cubic
    ``-2h y^3 + (2a - 4h) y^2 + (4a + 1 - 2h - rho) y + (2a + 1) = 0``, which
    has a positive root since its value is positive at 0 and it tends to
    ``-inf``; the best positive root is returned.
    """
    s = np.asarray(s, dtype=float)
    q2 = np.asarray(q2, dtype=float)
    b = np.broadcast_to(np.asarray(b, dtype=float), s.shape)  # a rate per basis function
    h, rho = b * s, q2 / s
    c0, c1, c2, c3 = 2 * a + 1, 4 * a + 1 - 2 * h - rho, 2 * a - 4 * h, -2 * h
    # roots z = 1/y of c0 z^3 + c1 z^2 + c2 z + c3 (well scaled when h is tiny)
    comp = np.zeros(s.shape + (3, 3))
    comp[..., 0, :] = -np.stack([c1, c2, c3], axis=-1) / c0
    comp[..., 1, 0] = comp[..., 2, 1] = 1.0
    z = np.linalg.eigvals(comp) if s.size else np.zeros(s.shape + (3,))
    ok = (np.abs(z.imag) <= 1e-6 * np.abs(z)) & (z.real > 0)
    y = np.where(ok, 1.0 / np.where(ok, z.real, 1.0), np.nan)
    for _ in range(3):  # Newton polish of the cubic in y
        p = ((c3[..., None] * y + c2[..., None]) * y + c1[..., None]) * y + c0
        dp = (3 * c3[..., None] * y + 2 * c2[..., None]) * y + c1[..., None]
        with np.errstate(divide="ignore", invalid="ignore"):
            step = np.where(dp != 0, p / dp, 0.0)
        y_new = y - step
        y = np.where(np.isfinite(y_new) & (y_new > 0), y_new, y)
    x = y * s[..., None]
    with np.errstate(invalid="ignore"):
        f = _f_in(x, s[..., None], q2[..., None], a, b[..., None])
        f = np.where(np.isfinite(x), f, -np.inf)
    best = np.argmax(f, axis=-1)
    x_best = np.take_along_axis(x, best[..., None], axis=-1)[..., 0]
    bad = ~np.isfinite(x_best)
    if np.any(bad):  # pragma: no cover - a positive root always exists
        raise FloatingPointError("No positive stationary point of the Q(alpha) bound was found.")
    return x_best


class _FastVB:
    """State of the sequential variational RVR.

    ``Q(w)`` is a full Gaussian on ``active`` (the ``Sigma``, ``mu`` of Tipping
    2001, eqs. 12-13, at ``<alpha>, <beta>``: Bishop & Tipping 2000, eqs.
    23-24) and ``N(0, v_m)`` for every other ``m``; ``Q(alpha_m) = Gamma(a +
    1/2, (a + 1/2) / x_m)`` for all ``m``; ``Q(beta) = Gamma(c + N/2, rate)``.
    ``GA`` caches ``Phi^T phi_j`` for the active ``j``; nothing of size
    ``N x M`` is ever formed.
    """

    alignment_max = 1.0

    def __init__(self, basis, t, a, b, c, d):
        self.basis, self.t = basis, t
        self.N, self.M = len(t), basis.n_basis
        self.a, self.b, self.c, self.d = a, b, c, d
        self.norms2, self.proj = basis.norms2_and_project(t)
        self.tt = float(t @ t)
        self.active = []
        self.x = np.ones(self.M)  # <alpha_m>
        self.G = {}
        self.GA = np.empty((self.M, 0))
        beta0 = initial_noise_precision(np.var(t))
        self.beta_shape = c + 0.5 * self.N  # eq. (26), corrected
        self.beta_rate = self.beta_shape / beta0
        self.refresh()

    # -- statistics and the bound ---------------------------------------------
    def refresh(self):
        """Recompute ``Q(w)``, the pruned factors, ``s, q`` of every basis and the bound."""
        a, b = self.a, self.b
        Eb = self.beta_shape / self.beta_rate
        act = np.asarray(self.active, dtype=int)
        S = Eb * self.norms2
        out = np.ones(self.M, dtype=bool)
        out[act] = False
        mean = np.zeros(self.M)
        U = np.zeros((act.size, self.M))
        g2 = S.copy()  # <beta> ||phi_m - Phi_A u_m||^2 of the pruned m
        if act.size:
            GAA = self.GA[act]
            H = Eb * GAA + np.diag(self.x[act])  # Bishop & Tipping (2000) eq. (23)
            L = cholesky_jittered(H, what="weight posterior precision")
            Sigma = cho_covariance(L)
            mu = Eb * (Sigma @ self.proj[act])  # eq. (24)
            # s_m = S_m - <beta>^2 c_m^T Sigma c_m (Faul & Tipping 2002, eq. 16)
            U, Sm, g2 = _coupled_pruned(L, Eb * self.GA, S, self.x[act])
            Qm = Eb * (self.proj - self.GA @ mu)
            d = np.diag(Sigma)
            Sm[act] = 1.0 / d - self.x[act]  # "out" factors of the active ones, exactly
            Qm[act] = mu / d
            mean[act] = mu
            ED = self.tt - 2.0 * mu @ self.proj[act] + mu @ GAA @ mu
            trace = float(np.sum(GAA * Sigma))
            logdet = -cho_logdet(L)
        else:
            Sigma, Sm, Qm = np.zeros((0, 0)), S.copy(), Eb * self.proj
            ED, trace, logdet = self.tt, 0.0, 0.0
        # pruned factors: joint optimum of Q(w_m) = N(0, v_m), its coupling
        # K_m = -u_m to the block and Q(alpha_m), given the rest (module Notes)
        self.x[out] = _argmax_f_out(Sm[out], a, b)
        var = np.zeros(self.M)
        var[out] = 1.0 / (self.x[out] + Sm[out])
        U[:, act] = 0.0
        var[act] = np.diag(Sigma) + U**2 @ var  # Var[w_j] = Sigma_jj + (K V K^T)_jj
        self.Eb, self.S, self.s, self.q = Eb, S, Sm, Qm
        self.Sigma, self.out, self.U = Sigma, out, U
        # <||t - Phi w||^2> (eq. 27's bracket): pruned m give v_m ||phi_m - Phi_A u_m||^2
        self.sq = max(ED, 0.0) + trace + float(var[out] @ g2[out]) / Eb
        self.qw = _QW(mean, Sigma, act, var, logdet + float(np.sum(np.log(var[out]))), -U)
        Elnb = digamma(self.beta_shape) - np.log(self.beta_rate)
        loglik = 0.5 * self.N * (Elnb - LN_2PI) - 0.5 * Eb * self.sq  # eq. (40)
        beta_terms = _gamma_cross(self.c, self.d, Eb, Elnb) + _gamma_entropy(
            self.beta_shape, self.beta_rate
        )  # eqs. (43) and (64)
        shape, rate = self.q_alpha()
        self.bound = float(loglik + beta_terms) + _weight_terms(self.qw, shape, rate, a, b)

    def q_alpha(self):
        shape = np.full(self.M, self.a + 0.5)
        return shape, shape / self.x

    # -- candidate actions ------------------------------------------------------
    def gains(self, blocked=None):
        """Bound gains of re-estimating each active ``Q(alpha_m)`` and of adding each candidate.

        Returns ``(gain, new_x)`` of shape (M,); ``gain`` is ``-inf`` for
        candidates that fail ``q_m^2 > s_m`` (Shutin et al. 2011; Faul &
        Tipping 2002, eq. 17: the fixed point is finite when ``a = b = 0``),
        lie in the span of the model (``s_m <= ALIGNED * S_m``) or are
        ``blocked`` (a boolean mask: the driver's alignment test).
        """
        a, b = self.a, self.b
        gain = np.full(self.M, -np.inf)
        new_x = self.x.copy()
        act = np.asarray(self.active, dtype=int)
        q2 = self.q**2
        keep = self.s[act] > 0  # s_m = 1/Sigma_mm - x_m > 0 unless lost to rounding
        if act.size:
            # the pruned weights' share of <w_j^2> acts as an extra rate (first order in x_j)
            extra = (self.U**2 @ self.qw.var)[np.flatnonzero(keep)] if self.U.size else 0.0
            act = act[keep]
            s, q2a, be = self.s[act], q2[act], b + 0.5 * extra
            xa = _argmax_f_in(s, q2a, a, be)
            gain[act] = _f_in(xa, s, q2a, a, be) - _f_in(self.x[act], s, q2a, a, be)
            new_x[act] = xa
        ok = self.out & (q2 > self.s) & (self.s > ALIGNED * self.S)
        if blocked is not None:
            ok &= ~blocked
        cand = np.flatnonzero(ok)
        if cand.size:
            s, q2c = self.s[cand], q2[cand]
            xc = _argmax_f_in(s, q2c, a, b)
            gain[cand] = _f_in(xc, s, q2c, a, b) - _f_out(self.x[cand], s, a, b)
            new_x[cand] = xc
        return gain, new_x

    def _cross_active(self):
        """``Phi^T Phi[:, active]`` (unweighted), columns in ``active`` order."""
        return self.GA

    def cosine(self, j):
        """Cosines of every basis function with ``j``, in the model (for the alignment test)."""
        norms = np.sqrt(self.norms2)
        with np.errstate(divide="ignore", invalid="ignore"):
            return self._cross_active()[:, self.active.index(j)] / (norms * norms[j])

    def cosines(self, idx):
        """Cosines of candidates ``idx`` with the basis functions in the model, (idx.size, k)."""
        norms = np.sqrt(self.norms2)
        with np.errstate(divide="ignore", invalid="ignore"):
            return self._cross_active()[idx] / np.outer(norms[idx], norms[self.active])

    def ensure_cross(self, j, candidates=()):
        """Make ``Phi^T phi_j`` available, prefetching likely next candidates."""
        if j in self.G:
            return
        want = [j] + [int(c) for c in candidates if c not in self.G and c != j][: PREFETCH - 1]
        if isinstance(self.basis, DenseBasis):
            want = want[:1]  # a dense product costs the same one column at a time
        C = self.basis.cross(self.basis.columns(want))
        for k, c in enumerate(want):
            self.G[c] = C[:, k].copy()

    def add(self, j, x, candidates=()):
        self.ensure_cross(j, candidates)
        self.active.append(int(j))
        self.GA = np.column_stack([self.GA, self.G[j]])
        self.x[j] = x
        self.refresh()

    def reestimate(self, j, x):
        """Set ``<alpha_j> = x``; if the bound falls, take the coordinate step instead.

        ``x`` maximises the bound with the pruned weights' ``s_m`` held fixed,
        but they depend on ``<alpha_j>``. The fallback is the exact update of
        ``Q(alpha_j)`` given ``Q(w)`` (eq. 25), ``<alpha_j> = (a + 1/2) / (b +
        <w_j^2>/2)``, after which :meth:`refresh` maximises over the other
        factors: the bound cannot fall.
        """
        before, w2 = self.bound, self.qw.second_moment[j]
        self.x[j] = x
        self.refresh()
        if self.bound < before:
            self.x[j] = (self.a + 0.5) / (self.b + 0.5 * w2)
            self.refresh()

    def update_beta(self):
        """``d~ = d + <||t - Phi w||^2> / 2`` (eq. 27), then ``Q(w)`` and the pruned factors."""
        self.beta_rate = self.d + 0.5 * self.sq
        self.refresh()

    def result(self, trace, n_iter, converged):
        order = np.argsort(self.active)
        shape, rate = self.q_alpha()
        pruned = self.out.copy()
        weight_var = self.qw.var.copy()
        weight_var[self.active] = np.diag(self.Sigma)
        return VBResult(
            mean=self.qw.mean.copy(),
            active=np.asarray(self.active, dtype=int)[order],
            cov=self.Sigma[np.ix_(order, order)],
            weight_var=weight_var,
            alpha_shape=shape,
            alpha_rate=rate,
            beta_shape=None if self.beta_shape is None else float(self.beta_shape),
            beta_rate=None if self.beta_rate is None else float(self.beta_rate),
            bound_trace=np.asarray(trace),
            n_iter=n_iter,
            converged=converged,
            pruned=pruned,
            coupling=-self.U[order],
        )


def fit_vb_regression(
    basis,
    t,
    *,
    a=1e-6,
    b=1e-6,
    c=1e-6,
    d=1e-6,
    max_iter=5000,
    tol=1e-7,
    noise_warmup=False,
    alignment_max=ALIGNMENT_MAX,
    progressbar=False,
):
    """Variational relevance vector regression by sequential addition of basis functions.

    Maximises the lower bound of Bishop & Tipping (2000) over the family in
    which every other weight than those of an active set is an independent
    ``N(0, v_m)`` and the active weights are Gaussian given them, linear in
    them (module Notes, Restricted family), the active set growing
    one basis function at a time as in the fast marginal-likelihood method of
    Tipping & Faul (2003), with the fixed-point ``Q(alpha_m)`` updates of the
    fast variational SBL of Shutin et al. (2011). Each iteration takes the
    action that raises the bound most (module Notes, Fast fit) and costs
    ``O(M k^2)`` for ``k`` active basis functions; the ``N x M`` design is
    never formed when ``basis`` is lazy.

    Parameters
    ----------
    basis : ndarray of shape (N, M), DenseBasis or KernelBasis
        Candidate basis functions (columns), as for
        :func:`rvm_ppl.closed_form.evidence.fit_evidence_regression`.
    t : ndarray of shape (N,)
        Real targets.
    a, b : float
        Shape and rate of the Gamma hyperprior on every weight precision.
    c, d : float
        Shape and rate of the Gamma prior on the noise precision ``beta``.
    max_iter : int
        Maximum number of iterations; reaching it emits a ``ConvergenceWarning``.
    tol : float
        Stop when no action raises the bound by more than ``tol * max(1, |L|)``.
    noise_warmup : bool
        Hold ``Q(beta)`` at its initial value until no basis action is worth
        taking, then update it after every action, as the evidence method
        does. By default ``Q(beta)`` is updated after every action from the
        first iteration: with the warm-up the high initial ``<beta>`` admits
        more basis functions (noisy sinc N = 100, seed 1: 44 instead of 18)
        and neither schedule reaches the higher bound consistently.
    alignment_max : float
        Skip a candidate whose cosine with a basis function in the model
        exceeds this (SparseBayes's redundancy test; ``1`` turns it off).
        Default: the evidence fits' threshold ``ALIGNMENT_MAX = 1 - 1e-4``
        (:mod:`rvm_ppl.closed_form.constants`). Adding such a
        near-duplicate raises the bound a little and costs ``O(M k)`` per
        later iteration; the test roughly halves ``k`` and the time on
        kernels of low numerical rank ("Defaults and why").
    progressbar : bool
        Show a live line (iteration, basis functions, bound) on standard
        error once the fit has run two seconds.

    Returns
    -------
    VBResult
        ``beta_shape`` and ``beta_rate`` set; ``xi`` is ``None``.

    Notes
    -----
    Initialisation: ``<beta> = 1 / (0.1 std(t))^2`` and no active basis
    function. A basis function once added stays in: under a proper
    hyperprior (``b > 0``) removing one from the Gaussian block never raises
    the bound (module Notes), so this fit only adds, and never decreases the
    bound. Compared with :func:`fit_vb_regression_full` (every basis in the
    block) its bound is lower by what the restriction costs: the means and
    mutual correlations of the never-added weights.
    """
    _check_priors(a=a, b=b, c=c, d=d)
    if max_iter < 1:
        raise ValueError(f"max_iter must be at least 1; got {max_iter}.")
    if not (tol >= 0):
        raise ValueError(f"tol must be non-negative; got {tol!r}.")
    basis, t = _as_basis(basis, t)
    st = _FastVB(basis, t, a, b, c, d)
    st.alignment_max = float(alignment_max)
    noise_on = not noise_warmup

    def update_noise(acted):
        # Q(beta) from the start, or (noise_warmup) once no basis action is left.
        nonlocal noise_on
        if not (noise_on or not acted):
            return 0.0
        before = st.bound
        st.update_beta()
        noise_on = True
        return st.bound - before

    return _ascend(st, max_iter, tol, update_noise, progressbar)


# -- classification ---------------------------------------------------------------


def _jj_lambda(xi):
    """``lambda(xi) = tanh(xi/2) / (4 xi)`` (eq. 50), ``1/8`` at ``xi = 0``."""
    xi = np.abs(np.asarray(xi, dtype=float))
    small = xi < XI_SMALL
    safe = np.where(small, 1.0, xi)
    return np.where(small, 0.125 - xi**2 / 96.0, np.tanh(safe / 2.0) / (4.0 * safe))


def _classification_bound(Phi, t, qw, alpha_shape, alpha_rate, xi, a, b):
    """Lower bound of the variational RVC (Bishop & Tipping 2000, eqs. 59-64)."""
    f, v = _latent_moments(Phi, qw)
    s = 2.0 * t - 1.0
    # Bishop & Tipping (2000) eq. (60); ln sigma(xi) = -log(1 + exp(-xi))
    log_f = np.sum(
        -np.logaddexp(0.0, -xi) + 0.5 * s * f - 0.5 * xi - _jj_lambda(xi) * (f**2 + v - xi**2)
    )
    return float(log_f) + _weight_terms(qw, alpha_shape, alpha_rate, a, b)


def _update_xi(Phi, qw):
    """``xi_n = sqrt(phi_n^T <w w^T> phi_n)`` (eq. 58)."""
    f, v = _latent_moments(Phi, qw)
    return np.sqrt(f**2 + v)


def _classification_sweep(Phi, t, state, active, priors):
    """One sweep: ``Q(w)``, then ``xi``, then ``Q(alpha)``."""
    a, b = priors
    alpha_shape, alpha_rate, xi = state
    lam = _jj_lambda(xi)
    # Bishop & Tipping (2000) eqs. (54)-(55)
    qw = _update_q_w(
        Phi,
        alpha_shape / alpha_rate,
        2.0 * lam,
        0.5 * (Phi.T @ (2.0 * t - 1.0)),
        active,
        2.0 * (lam @ Phi**2),
        coupled=False,
    )
    xi = _update_xi(Phi, qw)  # eq. (58)
    alpha_shape, alpha_rate = _update_q_alpha(qw, a, b)  # eq. (57)
    state = (alpha_shape, alpha_rate, xi)
    return qw, state, _classification_bound(Phi, t, qw, *state, a, b)


def fit_vb_classification_full(
    Phi,
    t,
    *,
    a=1e-6,
    b=1e-6,
    max_iter=5000,
    tol=1e-7,
    prune_alpha=1e12,
):
    """Fit the variational relevance vector classifier by full sweeps (Bishop & Tipping 2000).

    Parameters
    ----------
    Phi : ndarray of shape (N, M)
        Design matrix.
    t : ndarray of shape (N,)
        Binary targets in ``{0, 1}``.
    a, b : float
        Shape and rate of the Gamma hyperprior on every weight precision.
    max_iter : int
        Maximum number of sweeps; reaching it emits a ``ConvergenceWarning``.
    tol : float
        Stop when ``|L_k - L_{k-1}| <= tol * |L_k|``.
    prune_alpha : float
        ``<alpha_m>`` above which a basis function leaves the linear algebra.

    Returns
    -------
    VBResult
        With ``xi`` set; ``beta_shape`` and ``beta_rate`` are ``None``.

    Notes
    -----
    Initialisation is deterministic: ``<alpha_m> = 1`` and ``xi_n = 0``
    (``lambda = 1/8``). Predictive probabilities can be approximated by
    ``sigma(Phi @ mean)`` (eq. 65).
    """
    Phi, t = _check_inputs(Phi, t)
    if not np.all((t == 0) | (t == 1)):
        raise ValueError("Targets must be 0 or 1.")
    N, M = Phi.shape
    state = (np.full(M, a + 0.5), np.full(M, (a + 0.5) / ALPHA_INIT), np.zeros(N))

    def sweep(state, active):
        return _classification_sweep(Phi, t, state, active, (a, b))

    qw, state, trace, n_iter, converged, pruned = _coordinate_ascent(
        sweep, state, M, max_iter, tol, prune_alpha
    )
    return VBResult(
        mean=qw.mean,
        active=np.sort(np.asarray(qw.active, dtype=int)),
        cov=qw.sorted_cov(),
        weight_var=qw.var,
        alpha_shape=state[0],
        alpha_rate=state[1],
        beta_shape=None,
        beta_rate=None,
        bound_trace=trace,
        n_iter=n_iter,
        converged=converged,
        pruned=pruned,
        xi=state[2],
    )


# -- classification that adds basis functions one at a time ----------------------


def _squared_design_times(basis, v, W=None):
    """``sum_m phi_nm^2 v_m`` (and ``Phi W`` if ``W`` is given) for every row ``n``.

    The ``N x M`` design is never held. Dense: products. Low rank
    (``[1, L L^T]``): ``l_n^T (L^T diag(v) L) l_n`` and ``W_0 + L (L^T W_1:)``.
    Otherwise kernel columns in blocks of at most ``PREFETCH``, one pass for both.
    """
    products = W is not None
    W = np.zeros((len(v), 0)) if W is None else W
    rows = (v != 0) | np.any(W != 0, axis=1)
    if isinstance(basis, DenseBasis):
        out, PW = (basis.Phi**2) @ v, basis.Phi @ W
    elif isinstance(basis, LowRankKernelBasis):
        off = int(basis.bias)
        M2 = basis.L.T @ (v[off:, None] * basis.L)
        out = np.einsum("ij,ij->i", basis.L @ M2, basis.L)
        PW = basis.L @ (basis.L.T @ W[off:])
        if off:
            out, PW = out + v[0], PW + W[0]
    else:
        out = np.zeros(basis.n_samples)
        PW = np.zeros((basis.n_samples, W.shape[1]))
        nz = np.flatnonzero(rows)
        for start in range(0, nz.size, PREFETCH):
            idx = nz[start : start + PREFETCH]
            cols = basis.columns(idx)
            out += cols**2 @ v[idx]
            PW += cols @ W[idx]
    return (out, PW) if products else out


class _FastVBC(_FastVB):
    """State of the sequential variational RVC (Jaakkola-Jordan bound).

    Given ``xi``, the bound is quadratic in ``w`` with curvature
    ``Phi^T H Phi``, ``H = diag(2 lambda(xi_n))``, and linear term
    ``Phi^T (t - 1/2)`` (Bishop & Tipping 2000, eqs. 54-55), so ``s, q`` and
    the two one-basis problems are those of the regression with ``<beta>
    phi^T phi`` replaced by ``phi^T H phi``. ``GA`` caches ``Phi^T H phi_j``
    and is rebuilt (one pass over the basis) whenever ``xi`` changes.
    """

    beta_shape = beta_rate = None

    def __init__(self, basis, t, a, b):
        self.basis, self.t = basis, t
        self.N, self.M = len(t), basis.n_basis
        self.a, self.b = a, b
        self.r = t - 0.5  # (2t - 1) / 2
        self.norms2, self.proj = basis.norms2_and_project(self.r)
        self.active = []
        self.cols = np.empty((self.N, 0))
        self.GU = np.empty((self.M, 0))  # unweighted Phi^T Phi[:, active], for the alignment test
        self.x = np.ones(self.M)
        self.set_xi(np.zeros(self.N))
        self.refresh()

    def set_xi(self, xi):
        self.xi = xi
        self.lam = _jj_lambda(xi)
        h = 2.0 * self.lam
        self.S = self.basis.weighted_norms2(h)
        if self.active:
            self.GA = self.basis.cross(h[:, None] * self.cols)
        else:
            self.GA = np.empty((self.M, 0))

    def refresh(self):
        """Recompute ``Q(w)``, the pruned factors, ``s, q`` and the bound (eqs. 54-55, 59-64)."""
        a, b = self.a, self.b
        act = np.asarray(self.active, dtype=int)
        S = self.S
        out = np.ones(self.M, dtype=bool)
        out[act] = False
        mean = np.zeros(self.M)
        U = np.zeros((act.size, self.M))
        g2 = S.copy()  # ||phi_m - Phi_A u_m||_H^2 of the pruned m
        if act.size:
            GAA = self.GA[act]
            L = cholesky_jittered(GAA + np.diag(self.x[act]), what="weight posterior precision")
            Sigma = cho_covariance(L)
            mu = Sigma @ self.proj[act]  # eq. (55)
            U, Sm, g2 = _coupled_pruned(L, self.GA, S, self.x[act])
            Qm = self.proj - self.GA @ mu
            d = np.diag(Sigma)
            Sm[act] = 1.0 / d - self.x[act]
            Qm[act] = mu / d
            mean[act] = mu
            quad = float(mu @ GAA @ mu + np.sum(GAA * Sigma))
            linear = float(mu @ self.proj[act])
            logdet = -cho_logdet(L)
        else:
            Sigma, Sm, Qm = np.zeros((0, 0)), S.copy(), self.proj.copy()
            quad, linear, logdet = 0.0, 0.0, 0.0
        self.x[out] = _argmax_f_out(Sm[out], a, b)
        var = np.zeros(self.M)
        var[out] = 1.0 / (self.x[out] + Sm[out])
        U[:, act] = 0.0
        var[act] = np.diag(Sigma) + U**2 @ var
        self.s, self.q, self.Sigma, self.out, self.U = Sm, Qm, Sigma, out, U
        quad += float(var[out] @ g2[out])  # sum_n 2 lambda_n <f_n^2>
        self.qw = _QW(mean, Sigma, act, var, logdet + float(np.sum(np.log(var[out]))), -U)
        xi = self.xi
        # Bishop & Tipping (2000) eq. (60); ln sigma(xi) = -log(1 + exp(-xi))
        log_f = float(np.sum(-np.logaddexp(0.0, -xi) - 0.5 * xi + self.lam * xi**2))
        log_f += linear - 0.5 * quad
        shape, rate = self.q_alpha()
        self.bound = log_f + _weight_terms(self.qw, shape, rate, a, b)

    def add(self, j, x, candidates=()):
        col = self.basis.columns([j])
        both = self.basis.cross(np.column_stack([2.0 * self.lam[:, None] * col, col]))
        self.G = {j: both[:, 0]}
        self.GU = np.column_stack([self.GU, both[:, 1]])
        self.cols = np.column_stack([self.cols, col])
        super().add(j, x)

    def _cross_active(self):
        return self.GU

    def ensure_cross(self, j, candidates=()):
        """``Phi^T H phi_j`` is built in :meth:`add` (it changes with ``xi``)."""

    def update_xi(self):
        """``xi_n^2 = <(phi_n^T w)^2>`` (eq. 58), then ``Q(w)`` and the pruned factors."""
        act = np.asarray(self.active, dtype=int)
        mu = self.qw.mean[act]
        f = self.cols @ mu
        v = np.einsum("nj,nj->n", self.cols @ self.Sigma, self.cols) if act.size else 0.0
        vout = np.where(self.out, self.qw.var, 0.0)
        # sum_P v_m (phi_nm - (Phi_A u_m)_n)^2 = sum_P v_m phi_nm^2
        #   - 2 (Phi_A o Phi_P V U^T) 1 + (Phi_A (U V U^T) o Phi_A) 1
        VU = vout[:, None] * self.U.T
        e, PVU = _squared_design_times(self.basis, vout, VU)
        if act.size:
            e = e - 2.0 * np.einsum("nj,nj->n", self.cols, PVU)
            e = e + np.einsum("nj,nj->n", self.cols @ (self.U @ VU), self.cols)
        self.set_xi(np.sqrt(np.maximum(f**2 + v + e, 0.0)))
        self.refresh()

    def result(self, trace, n_iter, converged):
        res = super().result(trace, n_iter, converged)
        res.xi = self.xi.copy()
        return res


def fit_vb_classification(
    basis, t, *, a=1e-6, b=1e-6, max_iter=5000, tol=1e-7, alignment_max=ALIGNMENT_MAX,
    progressbar=False,
):
    """Variational relevance vector classification by sequential addition of basis functions.

    The classifier of Bishop & Tipping (2000, Sec. 4: Jaakkola-Jordan bound)
    fitted as :func:`fit_vb_regression` fits the regression: ``Q(w)`` a full
    Gaussian on an active set grown one basis function at a time (the add
    and re-estimate steps of the module Notes, with ``phi^T H phi``,
    ``H = diag(2 lambda(xi))``, in place of ``<beta> phi^T phi``) and
    ``N(0, v_m)`` on the others; ``xi`` is re-estimated (eq. 58) after every
    action. The bound never decreases.

    Parameters
    ----------
    basis : ndarray of shape (N, M), DenseBasis or KernelBasis
        Candidate basis functions (columns).
    t : ndarray of shape (N,)
        Binary targets in ``{0, 1}``.
    a, b : float
        Shape and rate of the Gamma hyperprior on every weight precision.
    max_iter : int
        Maximum number of iterations; reaching it emits a ``ConvergenceWarning``.
    tol : float
        Stop when no action raises the bound by more than ``tol * max(1, |L|)``.
    alignment_max, progressbar
        As for :func:`fit_vb_regression`.

    Returns
    -------
    VBResult
        With ``xi`` set; ``beta_shape`` and ``beta_rate`` are ``None``.

    Notes
    -----
    Initialisation: ``xi_n = 0`` (``lambda = 1/8``) and no active basis
    function. Each ``xi`` update costs a few passes over a lazy basis (the
    weighted norms, the products ``Phi^T H phi_j`` of the active ``j`` and
    the pruned weights' share of ``<(phi_n^T w)^2>``). Predictive
    probabilities can be approximated by ``sigma(Phi @ mean)`` (eq. 65).
    """
    _check_priors(a=a, b=b)
    if max_iter < 1:
        raise ValueError(f"max_iter must be at least 1; got {max_iter}.")
    if not (tol >= 0):
        raise ValueError(f"tol must be non-negative; got {tol!r}.")
    basis, t = _as_basis(basis, t)
    if not np.all((t == 0) | (t == 1)):
        raise ValueError("Targets must be 0 or 1.")
    st = _FastVBC(basis, t, a, b)
    st.alignment_max = float(alignment_max)

    def update_xi(acted):
        # xi after every action: re-estimating it only when no action is left
        # admits more basis functions and needs more iterations (blobs,
        # N = 1 000: 41-45 instead of 10-12 basis functions, 3-5 times slower)
        before = st.bound
        st.update_xi()
        return st.bound - before

    return _ascend(st, max_iter, tol, update_xi, progressbar)


# -- the sequential fit on the driver ------------------------------------------------


class _Sequential:
    """The sequential fit's statistics for the driver (:func:`rvm_ppl.closed_form.driver.ascend`).

    The driver takes, in each iteration, the action with the largest gain in
    the bound (add one basis function or re-estimate one ``Q(alpha_m)``:
    :meth:`_FastVB.gains`, module Notes) and keeps candidates aligned with a
    basis function in the model out (``alignment_max``); ``after_step``
    then updates ``Q(beta)`` or ``xi`` through ``update_hyper(acted)``, which
    returns its own gain. The fit stops when neither raises the bound by more
    than ``tol * max(1, |L|)``. The bound is recomputed exactly after every
    step (it is not tracked by predicted gains), and no addition is checked
    or undone: each step maximises the bound over the factors it changes, so
    the bound never decreases, and a basis function once added stays in.
    """

    tracks_gain = False
    n_exact = 0

    def __init__(self, st, tol, update_hyper):
        self.st, self.tol, self.update_hyper = st, tol, update_hyper
        self.M = st.M
        self.trace = []
        self.gain = None  # the gains of the last decision, every basis function
        self.gtol = 0.0  # the least gain of an action in this iteration

    @property
    def act_idx(self):
        return np.asarray(self.st.active, dtype=int)

    @property
    def alpha(self):
        return self.st.x[self.act_idx]

    @property
    def in_model(self):
        return ~self.st.out

    @property
    def logml(self):
        return self.st.bound

    def gains(self, blocked):
        """Return the driver's tuple of gains (as ``driver.scalar_gains``) from the bound.

        An addition must gain more than ``tol * max(1, |L|)``; a
        re-estimation gaining no more stops the fit (:meth:`min_gain`).
        """
        st = self.st
        self.gtol = self.tol * max(1.0, abs(st.bound))
        gain, new_x = st.gains(blocked)
        self.gain = gain
        act = self.act_idx
        ad = np.flatnonzero(st.out & (gain > self.gtol))
        return ad, gain[ad], new_x[ad], gain[act], new_x[act], np.zeros(act.size, dtype=bool)

    def min_gain(self):
        """Return the least gain of a re-estimation: ``gain < min_gain`` is ``gain <= gtol``."""
        return np.nextafter(self.gtol, np.inf)

    def cosine(self, j):
        return self.st.cosine(j)

    def cosines(self, idx):
        return self.st.cosines(idx)

    def add(self, j, alpha, add_order=()):
        gain = self.gain
        order = np.argsort(-gain)  # prefetch the likely next additions
        self.st.add(j, alpha, candidates=order[np.isfinite(gain[order])][1:])
        return self.cosine(j)

    def reestimate(self, j, alpha):
        self.st.reestimate(j, alpha)

    def delete(self, j):  # pragma: no cover - the fit only adds (module Notes)
        raise AssertionError("The sequential variational fit never deletes a basis function.")

    def penalty(self):
        return 0.0

    def objective(self):
        return None  # every step maximises the bound: nothing to check

    def refresh_before(self, d):
        return False

    def snapshot(self):
        return None

    def after_step(self, it, d):
        """Update ``Q(beta)`` or ``xi``; whether that raised the bound by more than ``gtol``."""
        hyper_gain = self.update_hyper(not d.terminate)
        self.trace.append(self.st.bound)
        return hyper_gain > self.gtol


def _ascend(st, max_iter, tol, update_hyper, progressbar=False):
    """Run the sequential fit of regression and classification alike (:class:`_Sequential`).

    ``progressbar`` shows a live line once the fit has run two seconds
    (:class:`rvm_ppl.core.progress.FitProgress`).
    """
    model = _Sequential(st, tol, update_hyper)
    line = FitProgress("vb", "bound", show=progressbar)
    run = ascend(
        model, max_iter=max_iter, tol=0.0, alignment_test=st.alignment_max < 1,
        alignment_max=st.alignment_max, min_gain=_Sequential.min_gain,
        progress=lambda it, n_active, bound: line.update(it - 1, n_active, bound),
        warn_not_converged=_warn_not_converged)
    converged = run["converged"]
    line.finish(len(model.trace), int(np.sum(~st.out)), st.bound, converged)
    return st.result(model.trace, len(model.trace), converged)


def _warn_not_converged(max_iter):
    warnings.warn(
        f"The variational RVM did not converge in {max_iter} iterations; "
        "increase max_iter or tol.",
        ConvergenceWarning,
        stacklevel=5,
    )


def _coordinate_ascent(sweep, state, M, max_iter, tol, prune_alpha):
    """Run ``sweep`` until the relative change of the bound is below ``tol``.

    ``sweep(state, active)`` returns ``(qw, state, bound)``; ``state[0:2]``
    are the shapes and rates of ``Q(alpha)``. A sweep that would prune new
    basis functions is kept only if it does not lower the bound; otherwise it
    is redone with them still active (module Notes, Pruning), and pruning is
    next tried after a wait that doubles with every refusal.
    """
    if max_iter < 1:
        raise ValueError(f"max_iter must be at least 1; got {max_iter}.")
    pruned = np.zeros(M, dtype=bool)
    trace = []
    converged = False
    qw = None
    retry_at, wait = 1, 1
    for it in range(max_iter):
        candidates = pruned.copy()
        if it >= retry_at:
            candidates |= state[0] / state[1] > prune_alpha
        new = sweep(state, np.flatnonzero(~candidates))
        if (candidates != pruned).any():
            prev = trace[-1]
            if new[2] < prev - PRUNE_RTOL * abs(prev):
                # the restricted family lost more than the sweep gained: keep them
                new = sweep(state, np.flatnonzero(~pruned))
                retry_at, wait = it + wait, 2 * wait
            else:
                pruned = candidates
        qw, state, bound = new
        trace.append(bound)
        if len(trace) > 1 and abs(trace[-1] - trace[-2]) <= tol * abs(trace[-1]):
            converged = True
            break
    if not converged:
        warnings.warn(
            f"The variational RVM did not converge in {max_iter} iterations; "
            "increase max_iter or tol.",
            ConvergenceWarning,
            stacklevel=3,
        )
    return qw, state, np.asarray(trace), len(trace), converged, pruned
