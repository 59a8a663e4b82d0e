"""Which alpha the data decide: power-scaling sensitivity, one verdict per basis function.

Power-scaling (Kallioinen, Paananen, Bürkner & Vehtari 2023) raises the prior,
or the likelihood, to a power ``c`` near 1 and measures how far each
posterior marginal moves: the cumulative Jensen-Shannon distance between the
posterior and its power-scaled version, differentiated in ``log2 c`` at
``c = 1`` by finite differences (``c = 1 / 1.01`` and ``1.01``). The
power-scaled posterior is the fit's own draws, importance-weighted by
``p^(c - 1)`` and smoothed by PSIS, so nothing is refitted. This module
computes what ArviZ's :func:`arviz.psens` computes, for every basis at once
(:func:`power_scaling`), on the draws of ``log alpha_m``
(the scale on which the package reads alpha), with the prior of the
InferenceData's ``log_prior`` group (the joint log hyperprior density of
every ``log alpha_m`` and ``log beta``) and the joint log-likelihood of its
``log_likelihood`` group.

A sensitivity of at least :data:`PSENS_THRESHOLD` (0.05, Kallioinen et al.'s
and ArviZ's conventional threshold) counts as sensitive. The two answers give
one of four verdicts per basis function (:func:`verdicts`):

``"data-driven"``
    insensitive to the prior, sensitive to the likelihood: the data decide
    ``alpha_m``;
``"prior-driven"``
    sensitive to the prior, insensitive to the likelihood: the hyperprior
    decides it;
``"conflict"``
    sensitive to both: prior and data pull it different ways;
``"undetermined"``
    sensitive to neither: the likelihood is flat over the posterior of
    ``alpha_m``, and so is the prior's shape (a vague Gamma is flat in
    ``log alpha`` up to its cut-off near ``1 / b``, which power-scaling
    hardly moves). The data do not decide ``alpha_m``; the prior's range
    bounds it.

Where the verdict does not apply it is :data:`NOT_APPLICABLE` (``"n/a"``)
and both sensitivities are NaN: the evidence method (its ``alpha`` is a
point estimate repeated in every draw: there is no posterior to power-scale),
a basis function outside the method's model (a point mass at
``alpha = inf``), a fit without ``log_prior`` or ``log_likelihood`` group.

Computed on the draws, power-scaling sees the prior and the likelihood only
through the joint draws. The likelihood depends on ``alpha`` only through
``w``, so under vb's factorised ``Q(w) Q(alpha) Q(beta)`` (``alpha`` drawn
independently of ``w``) reweighting by the likelihood cannot move ``alpha``:
vb's likelihood sensitivities are zero up to Monte Carlo noise, and its
verdicts are ``"prior-driven"`` or ``"undetermined"``, a property of the
factorisation rather than of the data. advi (``w`` drawn from its
conditional given ``alpha`` and ``beta``) and nuts keep the dependence.
"""

from __future__ import annotations

import numpy as np

__all__ = ["NOT_APPLICABLE", "PSENS_THRESHOLD", "VERDICTS", "power_scaling", "verdicts"]

# Kallioinen et al. (2023), section 3.3; the threshold ArviZ's psens docstring states.
PSENS_THRESHOLD = 0.05

# (prior sensitive, likelihood sensitive) -> verdict.
VERDICTS = {
    (False, True): "data-driven",
    (True, False): "prior-driven",
    (True, True): "conflict",
    (False, False): "undetermined",
}
NOT_APPLICABLE = "n/a"


def verdicts(prior, likelihood, threshold=PSENS_THRESHOLD):
    """Return the verdict per entry from the prior and likelihood sensitivities.

    Parameters
    ----------
    prior, likelihood : array-like of float
        Power-scaling sensitivities (the same shape); NaN where none applies.
    threshold : float
        A sensitivity ``>= threshold`` is sensitive.

    Returns
    -------
    ndarray of str
        One of :data:`VERDICTS`' values, or :data:`NOT_APPLICABLE` where
        either sensitivity is NaN.

    Examples
    --------
    >>> verdicts([0.01, 0.2, 0.2, 0.01, np.nan], [0.3, 0.01, 0.3, 0.01, np.nan]).tolist()
    ['data-driven', 'prior-driven', 'conflict', 'undetermined', 'n/a']
    """
    prior = np.asarray(prior, dtype=float)
    likelihood = np.asarray(likelihood, dtype=float)
    if prior.shape != likelihood.shape:
        raise ValueError(f"prior and likelihood sensitivities differ in shape: {prior.shape} "
                         f"and {likelihood.shape}.")
    out = np.full(prior.shape, NOT_APPLICABLE, dtype=object)
    known = np.isfinite(prior) & np.isfinite(likelihood)
    for (p, lik), name in VERDICTS.items():
        out[known & ((prior >= threshold) == p) & ((likelihood >= threshold) == lik)] = name
    return out.astype(str)


def power_scaling(log_alpha, log_prior, log_likelihood, delta=0.01):
    """Prior and likelihood power-scaling sensitivity of every ``log alpha`` marginal.

    The computation of ArviZ's :func:`arviz.psens` with ``component="prior"``
    and ``"likelihood"`` (Kallioinen et al. 2023), vectorised over the bases,
    which ArviZ loops over in Python (the cost of both is in the user guide,
    "Which alpha the data decide"). The tests check the two against each
    other.

    Parameters
    ----------
    log_alpha : ndarray of shape (chain, draw, ...)
        Posterior draws of ``log alpha``; every entry finite.
    log_prior, log_likelihood : ndarray of shape (chain, draw)
        The joint log prior density and joint log-likelihood at each draw
        (the sums of the ``log_prior`` and ``log_likelihood`` groups).
    delta : float
        The power is ``1 / (1 + delta)`` and ``1 + delta``.

    Returns
    -------
    prior, likelihood : ndarray of shape ``log_alpha.shape[2:]``

    Raises
    ------
    ValueError
        If a draw is not finite or the shapes do not match.
    """
    import arviz as az

    log_alpha = np.asarray(log_alpha, dtype=float)
    sample = log_alpha.shape[:2]
    parts = {"log_prior": np.asarray(log_prior, dtype=float),
             "log_likelihood": np.asarray(log_likelihood, dtype=float)}
    for name, value in {"log_alpha": log_alpha, **parts}.items():
        if value.shape[:2] != sample or (name != "log_alpha" and value.ndim != 2):
            raise ValueError(f"{name} has shape {value.shape}; expected (chain, draw) = {sample}"
                             f"{' + the basis dims' if name == 'log_alpha' else ''}.")
        if not np.isfinite(value).all():
            raise ValueError(f"{name} holds values that are not finite; power-scaling needs "
                             "finite draws.")
    n = sample[0] * sample[1]
    draws = log_alpha.reshape(n, -1).T  # (basis, sample): (chain, draw) chain-major, as ArviZ
    order = np.argsort(draws, axis=1)
    width = np.diff(np.take_along_axis(draws, order, axis=1), axis=1)  # sorted theta's bins
    cdf_p = np.linspace(1 / n, 1 - 1 / n, n - 1)  # the draws' own ECDF, as ArviZ takes it
    out = []
    for component in parts.values():
        total = 0.0
        for power in (1 / (1 + delta), 1 + delta):
            # Kallioinen et al. (2023), eq. (6): importance weights p^(power - 1), by PSIS.
            lw = az.psislw((power - 1) * component.reshape(n))[0]
            w = np.exp(lw - lw.max())
            cdf_q = np.cumsum((w / w.sum())[order], axis=1)[:, :-1]
            # The distance on theta and on -theta, the larger: sorted -theta is theta
            # reversed, with the reversed bins and the weights' upper tail sums.
            total = total + np.maximum(_cjs(width, cdf_p, cdf_q),
                                       _cjs(width[:, ::-1], cdf_p, 1.0 - cdf_q[:, ::-1]))
        out.append((total / (2 * np.log2(1 + delta))).reshape(log_alpha.shape[2:]))
    return out[0], out[1]


def _cjs(width, cdf_p, cdf_q):
    """Cumulative Jensen-Shannon distance of two ECDFs on the same sorted draws, per row.

    ``width`` (K, S - 1): the gaps between the sorted draws; ``cdf_p``
    (S - 1): the draws' ECDF; ``cdf_q`` (K, S - 1): the weighted one. Nguyen
    & Vreeken (2015), normalised by the integrals of the two ECDFs
    (Kallioinen et al. 2023, section 3.2), as ArviZ 0.23's ``_cjs_dist``.
    """
    wp, wq = width * cdf_p, width * cdf_q
    p_int, q_int = wp.sum(axis=1), wq.sum(axis=1)
    mid = np.log2(0.5 * (cdf_p + cdf_q))
    log_q = np.log2(np.where(cdf_q > 0, cdf_q, 1.0))  # 0 log 0 = 0
    cjs_pq = (wp * (np.log2(cdf_p) - mid)).sum(axis=1) + (q_int - p_int) / (2 * np.log(2))
    cjs_qp = (wq * (log_q - mid)).sum(axis=1) + (p_int - q_int) / (2 * np.log(2))
    return np.sqrt((np.maximum(cjs_pq, 0) + np.maximum(cjs_qp, 0)) / (p_int + q_int))
