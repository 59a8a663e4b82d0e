"""The one result type every fitter returns, and the relevance rule of the posterior methods."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

RELEVANCE_GAMMA = 0.5


@dataclass(frozen=True)
class FitResult:
    """What every fitter returns, in the units of the targets.

    Attributes
    ----------
    method, likelihood : str
    basis : tuple of str
        Labels of every candidate basis function (``M`` of them).
    support : ndarray of int
        The bases in the method's model; every other weight is exactly 0.
    mean, cov : ndarray
        ``E[w]`` and ``Cov[w]`` on ``support``.
    alpha : ndarray of shape (M,)
        Point summary of each ``alpha_m`` (evidence: the estimate; vb: the
        mean of ``Q``; advi, nuts: the posterior median); ``inf`` where pruned.
    beta : float or None
        Point summary of ``beta`` (regression): ``1 / E[1/beta]``.
    noise_var : float or None
        ``E[1/beta]``.
    gamma : ndarray of shape (M,)
        ``E[gamma_m]`` (Tipping 2001, eq. 17); 0 where pruned.
    relevant : ndarray of bool, shape (M,)
        The method's relevance decision (module docstring).
    stats : dict
        Scalars: ``log_evidence`` or ``elbo``, ``n_iter``, ``converged``,
        sampler diagnostics, times.
    fit : dict
        ``name -> (dims, values)``: the method's own quantities for the
        ``fit`` group (objective trace on ``iteration``, per-candidate
        quantities on ``candidate``).
    draws : dict or None
        Posterior draws on ``support`` (``w``, ``alpha`` of shape
        (chain, draw, len(support)), ``beta`` (chain, draw)) for the
        sampling methods; None for the closed-form ones, which are drawn
        when the InferenceData is built.
    alpha_gamma, beta_gamma : tuple or None
        ``(shape, rate)`` of a Gamma posterior of ``alpha`` (arrays of
        shape (M,)) or ``beta`` (vb); None for a point estimate.
    sample_stats : xarray.Dataset or None
        The sampler's statistics (nuts).
    outside_var : ndarray of shape (M,) or None
        Variance of each weight outside ``support`` where it is not a point
        mass: a pruned vb fit keeps an independent ``N(0, v_m)`` factor for
        every basis function it leaves out (0 on ``support``). It adds
        ``sum_m (phi_m(x) + phi_S(x)^T K_m)^2 v_m`` to the predictive
        variance of the latent (``K``: ``outside_coupling``, or 0).
    outside_coupling : ndarray of shape (len(support), M) or None
        ``K`` of a vb fit: the weights on ``support`` are ``mean + K w_out +
        eps``, ``eps ~ N(0, cov)``, linear in the weights outside (zero
        columns on ``support``); None when they are independent.
    latent : dict or None
        The marginal regression in its low-rank form (``build_model``'s
        ``Phi = Q V``): ``V_pinv`` (``V^+``, len(support) x k), ``mean`` and
        ``cov`` of ``g = V w`` (``E[g]``, ``E[Cov(g | alpha, beta)] +
        Cov[E(g | alpha, beta)]``) and ``draws`` of ``g`` (chain, draw, k;
        None once saved and loaded). Predictions go through ``f = C g``,
        ``C = Phi V^+`` (:func:`rvm_ppl.model.marginal.lowrank_latent`), which
        stays exact where the draws of ``w`` are too large for ``Phi w`` in
        float64.
    """

    method: str
    likelihood: str
    basis: tuple
    support: np.ndarray
    mean: np.ndarray
    cov: np.ndarray
    alpha: np.ndarray
    beta: float | None
    noise_var: float | None
    gamma: np.ndarray
    relevant: np.ndarray
    stats: dict = field(default_factory=dict)
    fit: dict = field(default_factory=dict)
    draws: dict | None = None
    alpha_gamma: tuple | None = None
    beta_gamma: tuple | None = None
    sample_stats: Any = None
    outside_var: np.ndarray | None = None
    latent: dict | None = None
    outside_coupling: np.ndarray | None = None

    def latent_moments(self, Phi):
        """Mean and variance of the latent ``f = Phi w`` at design rows ``Phi`` (on ``support``).

        Tipping (2001) eqs. (21)-(22) without the noise: ``Phi E[w]`` and
        ``diag(Phi Cov[w] Phi^T)``, or through ``g = V w`` for a low-rank fit
        (:attr:`latent`).
        """
        Phi = np.asarray(Phi, dtype=float)
        if self.latent is not None:
            C = Phi @ self.latent["V_pinv"]
            return C @ self.latent["mean"], np.einsum("ij,jk,ik->i", C, self.latent["cov"], C)
        return Phi @ self.mean, np.einsum("ij,jk,ik->i", Phi, self.cov, Phi)

    def latent_draws(self, Phi, w):
        """Draws of ``f = Phi w``, shape ``w.shape[:-1] + (len(Phi),)``; through ``g`` if low-rank."""
        Phi = np.asarray(Phi, dtype=float)
        if self.latent is not None and self.latent["draws"] is not None:
            return self.latent["draws"] @ (Phi @ self.latent["V_pinv"]).T
        return w @ Phi.T

    @property
    def w_draws(self):
        """Posterior draws of the weights on ``support``, flattened to (S, len(support)), or None."""
        if self.draws is None:
            return None
        return self.draws["w"].reshape(-1, len(self.support))


def gamma_relevance(gamma):
    """The relevance rule of vb, advi and nuts: ``E[gamma_m] > 1/2``."""
    return np.asarray(gamma) > RELEVANCE_GAMMA
