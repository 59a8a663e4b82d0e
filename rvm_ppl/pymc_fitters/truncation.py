"""NUTS on a nearby design, checked against the exact one on its own draws.

A gradient of the marginal regression's log density costs a Cholesky factor
of an ``M x M`` (or ``N x N``) matrix on the exact design, about ``k^2 M`` on
a design of rank ``k``. ``build_model(low_rank=tol)`` fits the RVM on the
truncated SVD of the design (:func:`rvm_ppl.model.marginal.truncated_factor`):
another model, near the exact one when the directions dropped carry no
weight. This module measures how near, on the draws NUTS took:

* at each draw ``theta = (alpha, beta)`` the log density of the exact model
  minus that of the truncated one is the log importance ratio of the exact
  posterior to the one sampled (``w`` is integrated out of both: the marginal
  regression's whitened weights are standard normal in either model, and are
  set to zero in both);
* the Pareto k-hat of those ratios (:func:`rvm_ppl.output.diagnostics.psis_khat`;
  Vehtari et al. 2024) says whether the sampled posterior is close enough to
  the exact one for them to be usable importance weights: ``k_hat <= 0.7``
  (``KHAT_OK``). A truncation that drops directions the posterior uses gives
  heavy-tailed ratios and a large k-hat.

:func:`auto_tolerance` is the rule of ``RVR(low_rank="auto")``, the
estimator's default: a large design whose exact form is the M x M one, and
whose truncation at ``AUTO_TOL`` makes the low-rank form pay, is sampled
truncated, checked, and sampled again on the exact design when the check
fails (:func:`rvm_ppl.inference.methods.fit_nuts`). The documentation's
Benchmarks page, "On a nearby design", has the measurements behind the
constants.
"""

from __future__ import annotations

import numpy as np

from rvm_ppl.model.marginal import automatic_factor, use_low_rank
from rvm_ppl.output.diagnostics import KHAT_OK, psis_khat
from rvm_ppl.pymc_fitters.advi import compiled_log_density

__all__ = ["AUTO_MIN_ENTRIES", "AUTO_TOL", "CHECK_DRAWS", "auto_tolerance", "check_truncation",
           "log_density_at", "truncation_stats"]

AUTO_TOL = 1e-6  # relative singular value below which "auto" drops a direction of the design
AUTO_MIN_ENTRIES = 100_000  # N x M from which "auto" truncates: below, a gradient costs < 1 ms
CHECK_DRAWS = 2000  # draws the check evaluates, evenly spaced: two log densities per draw


def auto_tolerance(Phi):
    """The truncation ``RVR(low_rank="auto")`` samples ``Phi`` at: ``AUTO_TOL``, or None (exact).

    ``AUTO_TOL`` where the truncation replaces the exact design's M x M form
    by a cheaper one: ``Phi`` has at least ``AUTO_MIN_ENTRIES`` entries, no
    exact factor that the exact model would use
    (:func:`~rvm_ppl.model.marginal.automatic_factor`: where it has one, its
    gradient is already cheap and exact), and a rank at ``AUTO_TOL`` for
    which the low-rank form pays (:func:`~rvm_ppl.model.marginal.use_low_rank`).
    The choice depends on ``Phi`` alone.
    """
    Phi = np.asarray(Phi, dtype=float)
    N, M = Phi.shape
    if N * M < AUTO_MIN_ENTRIES or automatic_factor(Phi) is not None:
        return None
    s = np.linalg.svd(Phi, compute_uv=False)
    rank = int(np.count_nonzero(s > AUTO_TOL * s[0]))
    return AUTO_TOL if use_low_rank(N, M, rank) else None


def log_density_at(model, alpha, beta):
    """The marginal regression's log density of ``(alpha, beta)`` at each draw, ``w`` integrated out.

    Evaluated by the model's compiled log density and gradient (ADVI's,
    :func:`rvm_ppl.pymc_fitters.advi.compiled_log_density`, kept for models
    of one structure), which costs one gradient per draw.

    Parameters
    ----------
    model : pymc.Model
        A marginal regression of :func:`rvm_ppl.model.build.build_model`,
        whose ``alpha`` and ``beta`` are sampled on the log scale.
    alpha : ndarray of shape (S, M)
    beta : ndarray of shape (S,)

    Returns
    -------
    ndarray of shape (S,)
        The log posterior density of ``(log alpha, log beta)`` up to its
        normaliser: ``log p(y | alpha, beta) + log p(alpha) + log p(beta) +
        sum log alpha + log beta``, plus a constant that depends on ``M``
        only. It is the model's log density with the Jacobians of its
        transforms at the whitened weights zero: theirs cancels the
        normaliser of ``w | alpha, beta, y``.
    """
    from pymc.logprob.transforms import LogTransform

    values = {}
    for rv in model.free_RVs:
        if rv.name in ("alpha", "beta"):
            if not isinstance(model.rvs_to_transforms.get(rv), LogTransform):
                raise ValueError(f"log_density_at needs {rv.name} sampled on the log scale.")
            values[model.rvs_to_values[rv].name] = np.log(alpha if rv.name == "alpha" else beta)
    logp, layout = compiled_log_density(model)
    x = np.zeros((len(beta), layout[-1][2].stop))
    for name, _, where in layout:
        if name in values:
            x[:, where] = np.reshape(values[name], (len(beta), -1))
    return logp(x)


def check_truncation(exact, truncated, alpha, beta):
    """Pareto k-hat of the exact model's posterior against the truncated one, at draws of the latter.

    Parameters
    ----------
    exact, truncated : pymc.Model
        The marginal regression on the exact design and on its truncation.
    alpha : ndarray of shape (..., M)
    beta : ndarray of shape (...)
        Draws of ``truncated``'s posterior (NUTS: chain, draw); every draw,
        or every second, third, ... to at most ``CHECK_DRAWS`` of them
        (Pareto k-hat needs no more: its tail is the largest
        ``min(S / 5, 3 sqrt(S))`` ratios).

    Returns
    -------
    PSISResult
        ``khat`` above ``KHAT_OK`` says that the truncation moved the
        posterior: the draws are not those of the exact model.
    """
    alpha = np.asarray(alpha, dtype=float)
    alpha = alpha.reshape(-1, alpha.shape[-1])
    beta = np.asarray(beta, dtype=float).ravel()
    step = -(-beta.size // CHECK_DRAWS)  # every step-th draw: at most CHECK_DRAWS
    alpha, beta = alpha[::step], beta[::step]
    return psis_khat(log_density_at(exact, alpha, beta), log_density_at(truncated, alpha, beta),
                     warn=False)


def truncation_stats(check):
    """The scalars a fit records about its check: k-hat and the importance weights' ESS."""
    return {"design_khat": float(check.khat), "design_ess": float(check.ess),
            "design_check": "passed" if check.khat <= KHAT_OK else "failed"}
