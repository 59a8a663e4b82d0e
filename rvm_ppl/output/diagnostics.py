"""Did the approximation work? Each fit judged against the NUTS reference.

Four questions, four tools:

``compare_to_reference``
    How far is each method's posterior of ``log10 alpha_m`` and ``log10 beta``
    from the reference's (NUTS), per basis function: the 1-Wasserstein
    distance (:func:`wasserstein_1`, in log10 units), the shift of the median
    in units of the reference's posterior sd, and the share of the
    reference's draws inside the method's 94 % HDI (:func:`hdi_coverage`).
    :func:`compare_predictive` does the same for the predictive mean and sd
    at test inputs, and :func:`plot_distance` draws the table.
``pareto_khat``
    Can the variational fit (vb, advi) be trusted on these data? Importance
    ratios of the model's exact density over draws from the approximation,
    smoothed by Pareto (PSIS; Yao, Vehtari, Simpson & Gelman 2018): of
    ``theta = (log alpha, log beta)`` with the weights integrated out for
    regression, of the weights with ``alpha`` integrated out for the
    classifier. ``k_hat < 0.5``:
    good; ``0.5-0.7``: usable; ``> 0.7``: unreliable, and an
    :class:`ApproximationWarning` says so.
``loo_table``
    ``az.compare`` on PSIS-LOO over the methods, with the count of LOO's own
    Pareto ``k > 0.7`` per method and, given test data, the held-out log
    predictive density.
``summary_table``
    One row per method with all of it, for users.

Pruned bases
------------
The evidence method and vb remove basis functions from their model: their
``alpha_m`` is a point mass at infinity. Its 1-Wasserstein distance to any
distribution on finite values is infinite, it covers none of the
reference's draws (coverage 0) and its median shift is infinite; the tables
mark such rows ``status = "pruned"`` and the summaries count them
(``n_pruned``) and summarise the distances over the bases the method keeps.

What these tools found on noisy sinc and Ripley's data (k-hat far above 0.7 for
every variational fit, while advi's marginals are close to NUTS's) is in the
documentation's Benchmarks page, section "Did the approximations work?"
(``docs/benchmarks.md``): read k-hat as the verdict on the joint posterior, and
the distances as the verdict on the marginals.

A point estimate (the evidence method's ``alpha`` and ``beta``) is a
sample of one value: its HDI is that value, which covers a continuous
reference with probability 0, so its coverage is 0 by definition. Its
``ref_quantile`` (the share of reference draws below the method's median,
0.5 for a median-unbiased summary) says where in the reference it lies.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
from scipy import special

from rvm_ppl.core.fits import as_idata
from rvm_ppl.core.gaussian import log_evidence_gram
from rvm_ppl.core.linalg import cholesky_jittered
from rvm_ppl.output.identity import (
    ModelMismatchWarning,
    check_one_model,
    hyperprior_label,
    hyperpriors_differ,
)
from rvm_ppl.output.sensitivity import VERDICTS

__all__ = [
    "ApproximationWarning",
    "KHAT_GOOD",
    "KHAT_OK",
    "PSISResult",
    "compare_predictive",
    "compare_to_reference",
    "hdi_coverage",
    "heldout_lpd",
    "khat_diagnosis",
    "log_joint_hyper",
    "log_joint_weights",
    "loo_table",
    "pareto_khat",
    "plot_distance",
    "psis_khat",
    "summary_table",
    "wasserstein_1",
]

# Pareto k-hat thresholds (Yao et al. 2018, §2.2; Vehtari et al. 2024, §3).
KHAT_GOOD = 0.5
KHAT_OK = 0.7
LOO_K_MAX = 0.7


class ApproximationWarning(UserWarning):
    """Pareto k-hat says a variational approximation is unreliable (k-hat > 0.7)."""


# --------------------------------------------------------------------------
# 1. Distances between samples
# --------------------------------------------------------------------------
def _sample(x, name):
    x = np.asarray(x, dtype=float).ravel()
    if x.size == 0:
        raise ValueError(f"{name} is empty; a sample needs at least one value.")
    if np.isnan(x).any():
        raise ValueError(f"{name} contains NaN.")
    return x


def wasserstein_1(x, y):
    """Compute the 1-Wasserstein distance between the empirical distributions of two samples.

    ``W1 = integral |F(t) - G(t)| dt`` with ``F`` and ``G`` the empirical
    CDFs, which equals ``integral_0^1 |F^{-1}(u) - G^{-1}(u)| du``; it is
    exact for empirical distributions of any sizes (for equal sizes it is
    the mean absolute difference of the sorted samples). A point mass is a
    sample of one value.

    Parameters
    ----------
    x, y : array-like
        Samples (flattened). ``+inf`` values are allowed: two samples that
        are both entirely ``+inf`` are at distance 0; otherwise a sample
        with any ``+inf`` puts mass at infinity and the distance is ``inf``
        unless the other has the same share there.

    Returns
    -------
    float

    Examples
    --------
    >>> wasserstein_1([0.0, 1.0], [0.5])
    0.5
    """
    x, y = _sample(x, "x"), _sample(y, "y")
    inf_x, inf_y = np.isinf(x), np.isinf(y)
    if inf_x.any() or inf_y.any():
        if (x[inf_x] < 0).any() or (y[inf_y] < 0).any():
            raise ValueError("Samples may hold +inf (a pruned basis) but not -inf.")
        if inf_x.all() and inf_y.all():
            return 0.0
        if inf_x.mean() != inf_y.mean():
            return np.inf
        x, y = x[~inf_x], y[~inf_y]  # equal mass at infinity costs nothing to move
        scale = 1.0 - inf_x.mean()
    else:
        scale = 1.0
    x, y = np.sort(x), np.sort(y)
    t = np.sort(np.concatenate([x, y]))
    dt = np.diff(t)
    F = np.searchsorted(x, t[:-1], side="right") / x.size
    G = np.searchsorted(y, t[:-1], side="right") / y.size
    return float(scale * np.sum(np.abs(F - G) * dt))


def _hdi(draws, hdi_prob):
    """Return the narrowest interval holding ``hdi_prob`` of the draws (ArviZ's ``hdi``)."""
    import arviz as az

    if np.ptp(draws) == 0:
        return float(draws[0]), float(draws[0])
    lo, hi = az.hdi(draws, hdi_prob=hdi_prob)
    return float(lo), float(hi)


def hdi_coverage(reference_draws, draws, hdi_prob=0.94):
    """Share of the reference's draws inside the HDI of ``draws``.

    A well-calibrated approximation covers ``hdi_prob`` of the reference; a
    too narrow one less, a too wide one more.

    Parameters
    ----------
    reference_draws, draws : array-like
        Samples (flattened). ``draws`` may be a point estimate (one value,
        or all values equal): its HDI is that value, which holds no draw of
        a continuous reference, so the coverage is the share of reference
        draws equal to it (0 in practice). A pruned basis (``draws`` all
        ``+inf``) covers nothing finite.
    hdi_prob : float in (0, 1)

    Returns
    -------
    float in [0, 1]

    Examples
    --------
    >>> hdi_coverage([0.0, 1.0, 2.0, 3.0], [1.0, 1.5, 2.0])
    0.5
    """
    if not 0 < hdi_prob < 1:
        raise ValueError(f"hdi_prob must be in (0, 1); got {hdi_prob!r}.")
    ref, d = _sample(reference_draws, "reference_draws"), _sample(draws, "draws")
    if np.isinf(d).all():
        return float(np.mean(np.isinf(ref)))
    lo, hi = _hdi(d[np.isfinite(d)], hdi_prob)
    return float(np.mean((ref >= lo) & (ref <= hi)))


def _draws_by_basis(idata):
    """``{label: log10 alpha draws}`` for the bases in the posterior, ``{label: kept?}`` for all."""
    labels = [str(b) for b in idata.relevance["basis"].values]
    alpha = idata.posterior["alpha"]
    post = {str(b): np.log10(alpha.sel(basis=b).values.ravel()) for b in alpha["basis"].values}
    in_model = dict(zip(labels, np.asarray(idata.relevance["in_model"].values, dtype=bool),
                        strict=True))
    return labels, post, in_model


def _is_point(idata):
    return idata.attrs.get("inference_method") == "evidence"


def _row(method, parameter, basis, ref, draws, hdi_prob, point):
    """Distances of ``draws`` (or ``None`` for pruned) to ``ref``."""
    sd = float(np.std(ref))
    if draws is None:
        return dict(method=method, parameter=parameter, basis=basis, w1=np.inf,
                    median_shift_sd=np.inf, coverage=0.0, ref_quantile=1.0,
                    ref_median=float(np.median(ref)), status="pruned")
    med = float(np.median(draws))
    shift = (med - float(np.median(ref))) / sd if sd > 0 else np.nan
    return dict(method=method, parameter=parameter, basis=basis, w1=wasserstein_1(ref, draws),
                median_shift_sd=shift, coverage=hdi_coverage(ref, draws, hdi_prob),
                ref_quantile=float(np.mean(ref < med)), ref_median=float(np.median(ref)),
                status="point estimate" if point else "ok")


def _idatas(fits):
    """InferenceData of each fit (an estimator's ``idata_``, or the InferenceData itself).

    Checked to be fits of one model (:func:`rvm_ppl.output.identity.check_one_model`):
    fits of other data raise a ``ValueError``, of another model warn.
    """
    if not isinstance(fits, dict) or not fits:
        raise TypeError("Give the fits as a non-empty dict {name: estimator or InferenceData}.")
    idatas = {name: as_idata(f, f"Fit {name!r}") for name, f in fits.items()}
    check_one_model(list(idatas), list(idatas.values()))
    return idatas


def _hyperprior_column(idatas):
    """``{name: hyperprior label}`` when the fits' hyperpriors differ, else None."""
    if not hyperpriors_differ(list(idatas.values())):
        return None
    return {name: hyperprior_label(i) for name, i in idatas.items()}


def compare_to_reference(fits, reference="nuts", hdi_prob=0.94):
    """Per method and basis, the distance of ``log10 alpha`` and ``log10 beta`` to the reference.

    Parameters
    ----------
    fits : dict
        ``name -> fitted RVR or InferenceData`` of the package, fits of the
        same data and basis.
    reference : str
        The key of the reference fit (NUTS).
    hdi_prob : float

    Returns
    -------
    pandas.DataFrame
        One row per method (other than the reference), parameter
        (``"log10_alpha"`` or ``"log10_beta"``) and basis (``"-"`` for beta),
        with columns ``w1`` (1-Wasserstein distance, log10 units),
        ``median_shift_sd`` (method's median minus the reference's, over the
        reference's posterior sd), ``coverage`` (share of reference draws in
        the method's HDI), ``ref_quantile`` (share of reference draws below
        the method's median), ``ref_median`` and ``status``: ``"ok"``, ``"point estimate"``
        (coverage 0 by definition) or ``"pruned"`` (``alpha = inf``: W1 and
        shift ``inf``, coverage 0). Bases that the reference itself prunes
        are left out (nothing to compare with). Where the fits' hyperpriors
        differ, a column ``hyperprior`` labels each row with its method's.

    Raises
    ------
    ValueError
        If the fits were fitted to different data, or have other candidate
        bases than the reference.

    Warns
    -----
    ModelMismatchWarning
        If the fits approximate different models
        (:func:`rvm_ppl.output.identity.check_one_model`).
    """
    import pandas as pd

    idatas = _idatas(fits)
    if reference not in idatas:
        raise ValueError(f"No fit named {reference!r} in {sorted(idatas)}.")
    ref = idatas[reference]
    labels, ref_post, _ = _draws_by_basis(ref)
    rows = []
    for name, idata in idatas.items():
        if name == reference:
            continue
        m_labels, post, in_model = _draws_by_basis(idata)
        if m_labels != labels:
            raise ValueError(f"Fit {name!r} has other candidate bases than {reference!r}; "
                             "compare fits of the same data and basis.")
        point = _is_point(idata)
        for b in labels:
            if b not in ref_post:
                continue
            draws = post.get(b)
            if draws is None and in_model[b]:  # pragma: no cover - inconsistent InferenceData
                raise ValueError(f"Fit {name!r}: basis {b} is in the model but not in the "
                                 "posterior.")
            rows.append(_row(name, "log10_alpha", b, ref_post[b], draws, hdi_prob, point))
        if "beta" in ref.posterior and "beta" in idata.posterior:
            rows.append(_row(name, "log10_beta", "-",
                             np.log10(ref.posterior["beta"].values.ravel()),
                             np.log10(idata.posterior["beta"].values.ravel()), hdi_prob, point))
    table = pd.DataFrame(rows, columns=["method", "parameter", "basis", "w1", "median_shift_sd",
                                        "coverage", "ref_quantile", "ref_median", "status"])
    hyper = _hyperprior_column(idatas)
    if hyper is not None:
        table["hyperprior"] = table["method"].map(hyper)
    return table


def compare_predictive(estimators, X_test, reference="nuts"):
    """Predictive mean and sd of each method at ``X_test`` against the reference's.

    Parameters
    ----------
    estimators : dict
        ``name -> fitted RVR``.
    X_test : array-like of shape (n, D)
    reference : str

    Returns
    -------
    pandas.DataFrame
        Per method: ``mean_shift_sd`` and ``max_mean_shift_sd`` (mean and
        largest ``|mean - mean_ref| / sd_ref`` over the test inputs) and
        ``log_sd_ratio`` and ``max_abs_log_sd_ratio`` (mean and largest
        absolute ``log(sd / sd_ref)``).
    """
    import pandas as pd

    if not isinstance(estimators, dict) or reference not in estimators:
        raise ValueError(f"Give a dict of fitted RVR estimators that includes {reference!r}.")
    mean_r, sd_r = estimators[reference].predict(X_test, return_std=True)
    rows = {}
    for name, est in estimators.items():
        if name == reference:
            continue
        mean, sd = est.predict(X_test, return_std=True)
        shift = np.abs(mean - mean_r) / sd_r
        lr = np.log(sd / sd_r)
        rows[name] = dict(mean_shift_sd=float(shift.mean()),
                          max_mean_shift_sd=float(shift.max()), log_sd_ratio=float(lr.mean()),
                          max_abs_log_sd_ratio=float(np.abs(lr).max()))
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("method")


def plot_distance(table, ax=None):
    """W1 of each basis's ``log10 alpha`` to the reference, against the reference's median.

    Parameters
    ----------
    table : pandas.DataFrame
        From :func:`compare_to_reference`; without a ``ref_median`` column
        the bases are placed in table order.
    ax : matplotlib Axes, optional

    Returns
    -------
    matplotlib Axes
        One colour per method; pruned bases (W1 = inf) as triangles on a
        band above the finite values, and each method's ``log10 beta``
        distance in its legend entry.
    """
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4))
    alpha = table[table["parameter"] == "log10_alpha"]
    finite = alpha["w1"][np.isfinite(alpha["w1"])]
    top = (float(finite.max()) if len(finite) else 1.0) * 1.15 + 1e-3
    bases = list(dict.fromkeys(alpha["basis"]))
    for k, (name, part) in enumerate(alpha.groupby("method", sort=False)):
        x = (part["ref_median"].values if "ref_median" in part
             else np.array([bases.index(b) for b in part["basis"]], dtype=float))
        w = part["w1"].values
        ok = np.isfinite(w)
        beta = table[(table["method"] == name) & (table["parameter"] == "log10_beta")]["w1"]
        label = name + (f" (W1 log10 β = {beta.iloc[0]:.3g})" if len(beta) else "")
        line = ax.plot(x[ok], w[ok], "o", ms=4, alpha=0.7, label=label)[0]
        if (~ok).any():
            ax.plot(x[~ok], np.full((~ok).sum(), top * (1 + 0.03 * k)), "^", ms=5,
                    color=line.get_color(), alpha=0.7)
    if not np.isfinite(alpha["w1"]).all():
        ax.axhline(top * 0.97, color="0.7", lw=0.8, ls=":")
        ax.text(0.01, top, "pruned (W1 = ∞)", transform=ax.get_yaxis_transform(), fontsize=8,
                va="bottom")
    ax.set_xlabel("reference median log10 α" if "ref_median" in alpha else "basis")
    ax.set_ylabel("W1 to reference, log10 α")
    ax.legend(fontsize=8)
    return ax


# --------------------------------------------------------------------------
# 2. Pareto k-hat of the variational fits
# --------------------------------------------------------------------------
@dataclass(frozen=True)
class PSISResult:
    """Pareto-smoothed importance sampling of an approximation against the exact density.

    Attributes
    ----------
    khat : float
        Pareto shape of the largest importance ratios (Yao et al. 2018).
    diagnosis : str
        ``"good"`` (< 0.5), ``"usable"`` (0.5-0.7) or ``"unreliable"`` (> 0.7).
    n_draws : int
    ess : float
        Effective sample size of the smoothed weights, ``1 / sum w^2``.
    q_mean, psis_mean : dict
        ``name -> array``: the mean of each parameter over the draws from
        ``q`` and the PSIS-corrected (importance-weighted) mean.
    log_ratios : ndarray of shape (n_draws,)
        ``log p(theta, y) - log q(theta)`` at the draws.
    """

    khat: float
    diagnosis: str
    n_draws: int
    ess: float
    q_mean: dict
    psis_mean: dict
    log_ratios: np.ndarray


def khat_diagnosis(khat):
    """``"good"``, ``"usable"`` or ``"unreliable"`` for a Pareto k-hat (thresholds 0.5, 0.7)."""
    if not np.isfinite(khat) or khat > KHAT_OK:
        return "unreliable"
    return "good" if khat < KHAT_GOOD else "usable"


def psis_khat(log_p, log_q, draws=None, *, warn=True, what="the approximation"):
    """Pareto k-hat and PSIS-corrected means from log densities at draws of ``q``.

    Parameters
    ----------
    log_p : array-like of shape (S,)
        Log of the target density, up to a constant, at ``S`` draws from ``q``.
    log_q : array-like of shape (S,)
        Log density of ``q`` at the same draws.
    draws : dict, optional
        ``name -> array of shape (S, ...)``: parameters whose corrected means
        to report.
    warn : bool
        Issue an :class:`ApproximationWarning` when ``k_hat > 0.7``.
    what : str
        Name of the approximation in the warning.

    Returns
    -------
    PSISResult

    Notes
    -----
    Read ``k_hat`` together with ``ess``. When ``q`` is almost exact but a
    little lighter-tailed than the target, the log ratios are nearly
    constant with a few slightly larger values; the Pareto fit to that tail
    can then return a large ``k_hat`` while ``ess`` is close to the number
    of draws, and a slightly wider ``q`` gives ``k_hat < 0`` (an example in
    the documentation's Benchmarks page, section "Did the approximations
    work?").
    """
    import arviz as az

    log_p = np.asarray(log_p, dtype=float).ravel()
    log_q = np.asarray(log_q, dtype=float).ravel()
    if log_p.shape != log_q.shape or log_p.size < 10:
        raise ValueError("log_p and log_q must have the same length, at least 10 draws.")
    lr = log_p - log_q
    if np.isnan(lr).any():
        raise ValueError("The log ratios contain NaN.")
    if np.ptp(lr) <= 1e-12 * max(1.0, float(np.abs(lr).max())):
        # q equals the target up to its normalising constant: the weights are
        # exact and equal. The Pareto fit is undefined (ArviZ returns inf);
        # the tail is no heavier than any, so k-hat is reported as 0.
        lw, khat = np.full(lr.size, -np.log(lr.size)), 0.0
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # ArviZ warns on large k; ours is below
            lw, khat = az.psislw(lr - lr.max(), reff=1.0)
    lw = np.asarray(lw, dtype=float)
    khat = float(khat)
    w = np.exp(lw - special.logsumexp(lw))
    draws = draws or {}
    q_mean, psis_mean = {}, {}
    for k, v in draws.items():
        v = np.asarray(v, dtype=float)
        q_mean[k] = v.mean(axis=0)
        psis_mean[k] = np.tensordot(w, v, axes=(0, 0))
    diag = khat_diagnosis(khat)
    if warn and diag == "unreliable":
        warnings.warn(
            f"Pareto k-hat of {what} is {khat:.2f} > {KHAT_OK}: the approximation is unreliable "
            "here (Yao et al. 2018); prefer method='nuts' or read its results with care.",
            ApproximationWarning, stacklevel=3,
        )
    return PSISResult(khat=khat, diagnosis=diag, n_draws=lr.size, ess=float(1.0 / np.sum(w**2)),
                      q_mean=q_mean, psis_mean=psis_mean, log_ratios=lr)


def log_joint_hyper(Phi, y, log_alpha, log_beta, priors):
    """``log p(theta, y)`` for ``theta = (log alpha, log beta)``, with ``w`` integrated out.

    ``log N(y | 0, C) + sum_m log Gamma(alpha_m | a, b) + log Gamma(beta | c, d)
    + sum_m log alpha_m + log beta``: Tipping (2001) eq. (15) in its M x M
    form (:func:`rvm_ppl.core.gaussian.log_evidence_gram`), the Gamma
    hyperpriors (eq. 6, shape and rate) and the Jacobian of ``log``.

    Parameters
    ----------
    Phi : ndarray of shape (N, M)
    y : ndarray of shape (N,)
    log_alpha : ndarray of shape (S, M)
    log_beta : ndarray of shape (S,)
    priors : dict
        ``a, b, c, d`` in the units of ``y``.

    Returns
    -------
    ndarray of shape (S,)
    """
    Phi = np.asarray(Phi, dtype=float)
    y = np.asarray(y, dtype=float)
    la = np.atleast_2d(np.asarray(log_alpha, dtype=float))
    lb = np.atleast_1d(np.asarray(log_beta, dtype=float))
    N, M = Phi.shape
    if la.shape != (lb.size, M) or y.shape != (N,):
        raise ValueError(f"Shapes disagree: Phi {Phi.shape}, y {y.shape}, log_alpha {la.shape}, "
                         f"log_beta {lb.shape}.")
    PtP, Pty, yty = Phi.T @ Phi, Phi.T @ y, float(y @ y)
    out = np.array([log_evidence_gram(PtP, Pty, yty, N, np.exp(la[s]), np.exp(lb[s]))
                    for s in range(lb.size)])
    a, b, c, d = (priors[k] for k in "abcd")
    # log Gamma(x | shape k, rate r) + log x = k log r - lgamma(k) + k log x - r x
    prior = (M * (a * np.log(b) - special.gammaln(a)) + (a * la - b * np.exp(la)).sum(axis=1)
             + c * np.log(d) - special.gammaln(c) + c * lb - d * np.exp(lb))
    return out + prior


def _log_gamma_in_log_space(x, shape, rate):
    """Log density of ``log X`` for ``X ~ Gamma(shape, rate)`` at ``x = log X``."""
    return shape * np.log(rate) - special.gammaln(shape) + shape * x - rate * np.exp(x)


def _q_vb(fit, rng, S, keep):
    """Draws of ``(log alpha, log beta)`` from vb's ``Q(alpha) Q(beta)`` and their log density.

    Every candidate's ``Q(alpha_m)`` is used, pruned or not: vb keeps a
    Gamma factor (and an independent ``N(0, v_m)`` weight) for the bases it
    leaves out of its active set, and that is its approximation of the
    same model NUTS samples, with all ``M`` bases.
    """
    shape = np.asarray(fit["alpha_shape"].values, dtype=float)[keep]
    rate = np.asarray(fit["alpha_rate"].values, dtype=float)[keep]
    c, d = float(fit["beta_shape"]), float(fit["beta_rate"])
    la = np.log(rng.gamma(shape, 1.0 / rate, size=(S, shape.size)))
    lb = np.log(rng.gamma(c, 1.0 / d, size=S))
    logq = _log_gamma_in_log_space(la, shape, rate).sum(axis=1) + _log_gamma_in_log_space(lb, c, d)
    return la, lb, logq


def _q_advi(fit, rng, S, keep):
    """Draws of ``(log alpha, log beta)`` from ADVI's mean-field Gaussian and their log density.

    ADVI's Gaussian also has a factor for the whitened weights ``z``
    (``w = mu + R z``), but in the marginal model their exact posterior is
    ``N(0, I)`` independently of ``theta`` (:mod:`rvm_ppl.model.conditional`).
    With a factorised ``q`` the importance ratio of the joint is the ratio
    for ``theta`` times ``N(z | 0, I) / q(z)``; integrating ``z`` out of both
    leaves the ratio for ``theta`` exactly, which is what judges the
    hyperparameter posterior.
    """
    from scipy import stats

    m, s = (np.asarray(fit[k].values, dtype=float)[keep]
            for k in ("q_mean_log_alpha", "q_sd_log_alpha"))
    mb, sb = float(fit["q_mean_log_beta"]), float(fit["q_sd_log_beta"])
    la = m + s * rng.standard_normal((S, m.size))
    lb = mb + sb * rng.standard_normal(S)
    logq = stats.norm.logpdf(la, m, s).sum(axis=1) + stats.norm.logpdf(lb, mb, sb)
    return la, lb, logq


def log_joint_weights(Phi, y, w, priors):
    """``log p(w, y)`` of the classifier, with ``alpha`` integrated out.

    ``sum_n log Bernoulli(y_n | sigma(phi_n^T w))`` (Tipping 2001, eq. 23)
    plus ``sum_m log t_{2a}(w_m | 0, sqrt(b / a))``, the Student-t prior of
    each weight once ``alpha_m ~ Gamma(a, b)`` is integrated out (eq. 32):
    ``Gamma(a + 1/2) / (Gamma(a) sqrt(2 pi b)) (1 + w^2 / (2 b))^{-(a + 1/2)}``.

    Parameters
    ----------
    Phi : ndarray of shape (N, M)
    y : ndarray of shape (N,)
        0/1 labels.
    w : ndarray of shape (S, M)
    priors : dict
        ``a, b``.

    Returns
    -------
    ndarray of shape (S,)
    """
    Phi = np.asarray(Phi, dtype=float)
    y = np.asarray(y, dtype=float)
    w = np.atleast_2d(np.asarray(w, dtype=float))
    if w.shape[1] != Phi.shape[1] or y.shape != (Phi.shape[0],):
        raise ValueError(f"Shapes disagree: Phi {Phi.shape}, y {y.shape}, w {w.shape}.")
    a, b = priors["a"], priors["b"]
    F = w @ Phi.T
    log_lik = (F * y - np.logaddexp(0.0, F)).sum(axis=1)
    log_prior = (w.shape[1] * (special.gammaln(a + 0.5) - special.gammaln(a)
                               - 0.5 * np.log(2 * np.pi * b))
                 - (a + 0.5) * np.log1p(w**2 / (2 * b)).sum(axis=1))
    return log_lik + log_prior


def _log_alpha_given_weights(w, priors):
    """``E[log alpha_m | w]`` under ``alpha_m | w ~ Gamma(a + 1/2, b + w_m^2 / 2)``."""
    a, b = priors["a"], priors["b"]
    return special.digamma(a + 0.5) - np.log(b + 0.5 * w**2)


def _q_vb_weights(fit, rng, S, keep, in_model, priors):
    """Draws of ``w`` from vb's ``Q(w)`` and their log density (classifier).

    ``Q(w)`` is an independent ``N(0, v_m)`` on each basis outside the model,
    where ``Q(alpha_m) = Gamma(a + 1/2, b + v_m / 2)`` gives
    ``v_m = 2 (rate - b)``, and ``mean + K w_out + N(0, cov)`` on the bases in
    the model (``K``: the fit's ``coupling``, zero if it has none;
    :class:`rvm_ppl.closed_form.vb.VBResult`). On the model's bases alone
    (``keep``) that is ``N(mean, cov + K V K^T)``.
    """
    from scipy import stats

    M = keep.size
    w = np.zeros((S, M))
    logq = np.zeros(S)
    idx = np.flatnonzero(in_model)
    mean = np.asarray(fit["mean"].values, dtype=float)
    cov = np.asarray(fit["cov"].values, dtype=float)
    out = np.flatnonzero(~in_model)
    v = 2.0 * (np.asarray(fit["alpha_rate"].values, dtype=float)[out] - priors["b"])
    sd = np.sqrt(np.maximum(v, np.finfo(float).tiny))
    K = np.asarray(fit["coupling"].values, dtype=float)[:, out] if "coupling" in fit else None
    joint = bool(keep[out].all())  # every weight outside is kept: draw them, then the model's
    if K is not None and not joint:  # the model's weights alone: their marginal
        cov = cov + (K * sd**2) @ K.T
    L = cholesky_jittered(cov, what="vb's weight covariance")
    z = rng.standard_normal((S, idx.size))
    w[:, idx] = mean + z @ L.T
    logq += (-0.5 * (z**2).sum(axis=1) - np.log(np.diag(L)).sum()
             - 0.5 * idx.size * np.log(2 * np.pi))
    if out.size and joint:
        w[:, out] = sd * rng.standard_normal((S, out.size))
        logq += stats.norm.logpdf(w[:, out], 0.0, sd).sum(axis=1)
        if K is not None:
            w[:, idx] += w[:, out] @ K.T
    elif out.size and keep[out].any():  # pragma: no cover - keep is all or the model
        raise ValueError("keep must be every basis or the model's bases.")
    return w[:, keep], logq


def _q_advi_weights(fit, rng, S, keep, priors):
    """Draws of ``w`` from ADVI's Gaussian on ``u = asinh(w / c)`` and their log density.

    ``c = sqrt(2 b)`` (the marginal classifier's ``ScaledAsinh`` transform);
    ``log q(w) = log N(u | m, s) - log(c cosh u)``.
    """
    from scipy import stats

    m, s = (np.asarray(fit[k].values, dtype=float)[keep]
            for k in ("q_mean_scaled_asinh_w", "q_sd_scaled_asinh_w"))
    c = np.sqrt(2.0 * priors["b"])
    u = m + s * rng.standard_normal((S, m.size))
    log_jac = np.log(c) + np.abs(u) + np.log1p(np.exp(-2.0 * np.abs(u))) - np.log(2.0)
    return c * np.sinh(u), (stats.norm.logpdf(u, m, s) - log_jac).sum(axis=1)


def _khat_inputs(fit, Phi, y, priors):
    """Return the InferenceData, design matrix, targets and hyperpriors of a fit."""
    from rvm_ppl.core.priors import fit_priors, priors_from_params

    idata = as_idata(fit, "pareto_khat's fit")
    likelihood = idata.attrs.get("likelihood")
    if likelihood not in ("gaussian", "bernoulli"):
        raise ValueError(f"pareto_khat supports the Gaussian and Bernoulli likelihoods; the fit's "
                         f"is {likelihood!r}.")
    if hasattr(fit, "idata_"):
        if likelihood == "bernoulli" and len(fit.classes_) != 2:
            raise ValueError("pareto_khat judges one binary classifier; this RVC fitted "
                             f"{len(fit.classes_)} one-vs-rest classifiers. Pass one of them's "
                             "InferenceData with its Phi, y and priors.")
        result = fit.result_ if likelihood == "gaussian" else fit.results_[0]
        if Phi is None:
            Phi = fit._design(fit.X_fit_, np.arange(len(result.basis)))
        if y is None:
            y = fit.y_fit_ if likelihood == "gaussian" else (fit.y_codes_ == 1).astype(float)
        if priors is None:
            given = priors_from_params(fit.get_params(deep=False))  # alpha_shape, ...
            priors = fit_priors(given, likelihood, idata.attrs["inference_method"], y)
    elif Phi is None or y is None or priors is None:
        raise ValueError("With an InferenceData, give Phi (all candidate columns), y and the "
                         "priors the fit used (for regression in the units of y: "
                         "rvm_ppl.model.build.scale_priors).")
    return idata, np.asarray(Phi, dtype=float), np.asarray(y, dtype=float), priors


def pareto_khat(fit, *, Phi=None, y=None, priors=None, bases="all", n_draws=4000,
                random_state=None, warn=True):
    """Pareto k-hat of a vb or advi fit (Yao, Vehtari, Simpson & Gelman 2018).

    Draws from the approximation ``q``, computes the log ratios
    ``log p - log q`` with the model's exact density, smooths them with
    ArviZ's PSIS (``az.psislw``) and reports the Pareto shape of their tail.

    Regression (RVR): over ``theta = (log alpha, log beta)``, with ``w``
    integrated out (:func:`log_joint_hyper`). ``q`` is vb's
    ``Q(alpha) Q(beta)`` (Gamma factors, moved to log space) over every
    candidate basis, pruned ones included; or ADVI's mean-field Gaussian on
    ``(log alpha, log beta)`` (its factor of the whitened weights drops out exactly; see
    :func:`_q_advi`).

    Classification (binary RVC): over ``w``, with ``alpha`` integrated out
    (:func:`log_joint_weights`; ``w`` has no closed-form integral under the
    Bernoulli likelihood, ``alpha`` does). ``q(w)`` is vb's ``Q(w)`` (the
    Gaussian on its model and ``N(0, v_m)`` on the other bases), or ADVI's
    Gaussian on the marginal model's ``asinh`` scale of ``w``. Both ratios
    are exact: a factorised ``q(w) q(alpha)`` integrated over ``alpha`` is
    ``q(w)``, as ``p(w, alpha, y)`` is ``p(w, y)``.

    Parameters
    ----------
    fit : RVR, RVC or InferenceData
        A fit by ``"vb"`` or ``"advi"``. From an estimator, the design
        matrix, targets and hyperpriors are its own.
    Phi : ndarray of shape (N, M), optional
        All candidate columns at the training inputs (InferenceData only).
    y : ndarray of shape (N,), optional
        Targets (regression) or 0/1 labels (classification).
    priors : dict, optional
        ``a, b, c, d`` of the fit: for regression in the units of ``y``; by
        default the estimator's, scaled as the fit used them
        (:func:`rvm_ppl.model.build.scale_priors`). The classifier's vb uses the
        package default, its advi the PyMC model's
        (:data:`rvm_ppl.BERNOULLI_PRIORS` unless set).
    bases : {"all", "kept"}
        ``"all"`` (default) judges ``q`` as an approximation of the model
        with every candidate basis, the one NUTS samples; for vb, ``q``
        then includes its factors of the bases it pruned. ``"kept"`` judges
        ``q`` on the bases the fit keeps, against the model in which the
        pruned ones are removed (``alpha = inf``): whether vb is good on the
        model it chose, not whether the choice was right. Both are the same
        for advi.
    n_draws : int
    random_state : int, Generator or None
    warn : bool

    Returns
    -------
    PSISResult
        ``q_mean`` and ``psis_mean`` hold ``log_alpha`` (one per basis
        judged, in candidate order; natural logs) and, for regression,
        ``log_beta``; for classification also ``w``, and ``log_alpha`` is
        the Rao-Blackwellised ``E[log alpha_m | w]`` of the model's
        conditional ``Gamma(a + 1/2, b + w_m^2 / 2)``.

    Raises
    ------
    ValueError
        For a method without a variational ``q`` (evidence, nuts), or a
        one-vs-rest classifier of more than two classes.

    Warns
    -----
    ApproximationWarning
        When k-hat > 0.7.
    """
    idata, Phi, y, priors = _khat_inputs(fit, Phi, y, priors)
    method = idata.attrs.get("inference_method")
    if method not in ("vb", "advi"):
        raise ValueError(f"pareto_khat judges a variational fit (vb, advi); got {method!r}. "
                         "The evidence method's point estimate has no density to weight.")
    if isinstance(n_draws, bool) or not isinstance(n_draws, (int, np.integer)) or n_draws < 100:
        raise ValueError(f"n_draws must be an integer >= 100; got {n_draws!r}.")
    if Phi.shape[1] != idata.relevance.sizes["basis"]:
        raise ValueError(f"Phi has {Phi.shape[1]} columns; the fit has "
                         f"{idata.relevance.sizes['basis']} candidate bases.")
    if bases not in ("all", "kept"):
        raise ValueError(f"bases must be 'all' or 'kept'; got {bases!r}.")
    in_model = np.asarray(idata.relevance["in_model"].values, dtype=bool)
    keep = in_model if bases == "kept" else np.ones(Phi.shape[1], dtype=bool)
    Phi = Phi[:, keep]
    rng = np.random.default_rng(random_state)
    what = f"the {method} fit"
    if idata.attrs["likelihood"] == "bernoulli":
        if method == "vb":
            w, logq = _q_vb_weights(idata.fit, rng, n_draws, keep, in_model, priors)
        else:
            w, logq = _q_advi_weights(idata.fit, rng, n_draws, keep, priors)
        logp = log_joint_weights(Phi, y, w, priors)
        draws = {"log_alpha": _log_alpha_given_weights(w, priors), "w": w}
        return psis_khat(logp, logq, draws, warn=warn, what=what)
    la, lb, logq = (_q_vb if method == "vb" else _q_advi)(idata.fit, rng, n_draws, keep)
    logp = log_joint_hyper(Phi, y, la, lb, priors)
    return psis_khat(logp, logq, {"log_alpha": la, "log_beta": lb}, warn=warn, what=what)


# --------------------------------------------------------------------------
# 3. Predictive comparison
# --------------------------------------------------------------------------
def heldout_lpd(estimator, X_test, y_test):
    """Held-out log predictive density ``sum_n log p(y_n | data)``.

    Regression (RVR): from the posterior draws of ``w`` and ``beta`` in
    ``idata_``, ``log mean_s N(y_n | phi_n^T w_s, 1/beta_s + v_n)``, where
    ``v_n`` is the variance of the weights a vb fit left out of its model (0
    otherwise). Classification (RVC): ``log`` of the estimator's
    ``predict_proba`` at the true class (moderated for evidence and vb,
    averaged over the draws for advi and nuts).
    """
    if hasattr(estimator, "predict_proba"):
        P = estimator.predict_proba(X_test)
        idx = np.searchsorted(estimator.classes_, np.asarray(y_test))
        if (idx >= len(estimator.classes_)).any() or \
                (estimator.classes_[np.minimum(idx, len(estimator.classes_) - 1)]
                 != np.asarray(y_test)).any():
            raise ValueError("y_test holds labels the classifier was not fitted on.")
        return float(np.sum(np.log(P[np.arange(len(idx)), idx])))
    idata = estimator.idata_
    r = estimator.result_
    X_test = np.asarray(X_test, dtype=float)
    y_test = np.asarray(y_test, dtype=float)
    Phi = estimator._design(X_test, r.support)
    w = idata.posterior["w"].values.reshape(-1, len(r.support))
    beta = idata.posterior["beta"].values.ravel()
    var = 1.0 / beta[:, None] + np.asarray(estimator._outside_var(r, X_test))
    f = w @ Phi.T
    ll = -0.5 * (np.log(2 * np.pi * var) + (y_test - f) ** 2 / var)
    return float(np.sum(special.logsumexp(ll, axis=0) - np.log(ll.shape[0])))


def loo_table(fits, X_test=None, y_test=None):
    """``az.compare`` on PSIS-LOO over the fits, with LOO's Pareto k flagged.

    Parameters
    ----------
    fits : dict
        ``name -> fitted RVR or InferenceData`` (with ``log_likelihood``).
    X_test, y_test : array-like, optional
        Held-out data; needs estimators (not InferenceData) to predict.

    Returns
    -------
    pandas.DataFrame
        ``az.compare``'s table (ranked by ``elpd_loo``) plus ``n_k_gt_0.7``,
        the number of observations whose LOO Pareto ``k > 0.7`` (LOO is
        unreliable for them), ``max_k``, ``test_lpd`` (sum over the test
        points) when test data are given, and ``hyperprior`` where the fits'
        hyperpriors differ. LOO ranks models, so fits of different
        hyperpriors are compared, with a :class:`ModelMismatchWarning`; fits
        of other data are refused (``ValueError``): their LOO are not on one
        scale.
    """
    import arviz as az

    if (X_test is None) != (y_test is None):
        raise ValueError("Give both X_test and y_test.")
    if X_test is not None and not all(hasattr(f, "predict") for f in fits.values()):
        raise TypeError("The held-out density needs the fitted estimators, not InferenceData.")
    idatas = _idatas(fits)
    missing = [k for k, v in idatas.items() if "log_likelihood" not in v.groups()]
    if missing:
        raise ValueError(f"Fits {missing} have no log_likelihood group (fit with fewer draws).")
    with warnings.catch_warnings():
        # LOO's high-k warning is flagged in the table instead; ArviZ 0.23's
        # compare also triggers a pandas deprecation warning of its own.
        warnings.simplefilter("ignore")
        table = az.compare(idatas, ic="loo")
        ks = {k: np.asarray(az.loo(v, pointwise=True).pareto_k).ravel() for k, v in idatas.items()}
    table["n_k_gt_0.7"] = [int((ks[k] > LOO_K_MAX).sum()) for k in table.index]
    table["max_k"] = [float(ks[k].max()) for k in table.index]
    if X_test is not None or y_test is not None:
        table["test_lpd"] = [heldout_lpd(fits[k], X_test, y_test) for k in table.index]
    hyper = _hyperprior_column(idatas)
    if hyper is not None:
        table["hyperprior"] = [hyper[k] for k in table.index]
    return table


# --------------------------------------------------------------------------
# 4. One summary
# --------------------------------------------------------------------------
def summary_table(fits, reference="nuts", X_test=None, y_test=None, *, fit_times=None,
                  hdi_prob=0.94, n_draws=4000, random_state=0):
    """One row per method: time, k-hat, distance to the reference, LOO, sampler diagnostics.

    Parameters
    ----------
    fits : dict
        ``name -> fitted RVR or InferenceData`` (k-hat and ``test_lpd`` need
        estimators).
    reference : str
        Key of the reference fit (NUTS); if absent, the distance columns are NaN.
    X_test, y_test : array-like, optional
    fit_times : dict, optional
        ``name -> seconds``; default ``attrs["wall_time_s"]`` where the fit
        recorded it (advi, nuts), else NaN.
    hdi_prob : float
    n_draws, random_state
        For :func:`pareto_khat`.

    Returns
    -------
    pandas.DataFrame
        Index the method names; columns ``fit_time_s``, ``khat``,
        ``khat_diagnosis`` (vb/advi), ``w1_log10_alpha`` (median over the
        bases the method keeps), ``coverage_log10_alpha`` (mean over the same
        bases), ``n_pruned`` (bases the method pruned that the reference
        keeps: W1 = inf there), ``w1_log10_beta``, ``coverage_log10_beta``,
        ``elpd_loo``, ``elpd_loo_se``, ``n_loo_k_gt_0.7``, ``test_lpd`` (with
        test data), ``n_divergences``, ``max_rhat``,
        ``min_ess_bulk_log_alpha`` (nuts); which alpha the data decide
        (``idata.relevance.verdict``, :mod:`rvm_ppl.output.sensitivity`):
        ``n_data_driven``, ``n_prior_driven``, ``n_conflict``,
        ``n_undetermined``, counts over the candidate bases with a verdict
        (NaN for the evidence method's point estimate); and ``hyperprior``
        where the fits' hyperpriors differ.

    Raises
    ------
    ValueError
        If the fits were fitted to different data.

    Warns
    -----
    ModelMismatchWarning
        Once, if the fits approximate different models
        (:func:`rvm_ppl.output.identity.check_one_model`).
    """
    import pandas as pd

    idatas = _idatas(fits)
    fit_times = fit_times or {}
    with warnings.catch_warnings():  # _idatas has warned once for the table
        warnings.simplefilter("ignore", ModelMismatchWarning)
        dist = (compare_to_reference(fits, reference, hdi_prob) if reference in idatas
                else None)
        loo = loo_table(fits, X_test, y_test)
    rows = {}
    for name, idata in idatas.items():
        attrs = idata.attrs
        row = {"fit_time_s": float(fit_times.get(name, attrs.get("wall_time_s", np.nan)))}
        row["khat"], row["khat_diagnosis"] = np.nan, ""
        if attrs.get("inference_method") in ("vb", "advi") and hasattr(fits[name], "idata_") \
                and len(getattr(fits[name], "classes_", (0, 1))) == 2:
            res = pareto_khat(fits[name], n_draws=n_draws, random_state=random_state)
            row["khat"], row["khat_diagnosis"] = res.khat, res.diagnosis
        if dist is not None and name != reference:
            d = dist[dist["method"] == name]
            a = d[d["parameter"] == "log10_alpha"]
            kept = a[a["status"] != "pruned"]
            row["w1_log10_alpha"] = float(kept["w1"].median()) if len(kept) else np.nan
            row["coverage_log10_alpha"] = float(kept["coverage"].mean()) if len(kept) else np.nan
            row["n_pruned"] = int((a["status"] == "pruned").sum())
            b = d[d["parameter"] == "log10_beta"]
            row["w1_log10_beta"] = float(b["w1"].iloc[0]) if len(b) else np.nan
            row["coverage_log10_beta"] = float(b["coverage"].iloc[0]) if len(b) else np.nan
        else:
            is_ref = name == reference
            row.update(w1_log10_alpha=0.0 if is_ref else np.nan, coverage_log10_alpha=np.nan,
                       n_pruned=0, w1_log10_beta=0.0 if is_ref and "beta" in idata.posterior
                       else np.nan, coverage_log10_beta=np.nan)
        row["elpd_loo"] = float(loo.loc[name, "elpd_loo"])
        row["elpd_loo_se"] = float(loo.loc[name, "se"])
        row["n_loo_k_gt_0.7"] = int(loo.loc[name, "n_k_gt_0.7"])
        if "test_lpd" in loo:
            row["test_lpd"] = float(loo.loc[name, "test_lpd"])
        for k in ("n_divergences", "max_rhat", "min_ess_bulk_log_alpha"):
            row[k] = float(attrs[k]) if k in attrs else np.nan
        row.update(_verdict_counts(idata))
        rows[name] = row
    table = pd.DataFrame.from_dict(rows, orient="index").rename_axis("method")
    hyper = _hyperprior_column(idatas)
    if hyper is not None:
        table["hyperprior"] = [hyper[k] for k in table.index]
    return table


def _verdict_counts(idata):
    """``n_<verdict>`` per power-scaling verdict of the fit's bases; NaN where none applies."""
    verdict = (np.asarray(idata.relevance["verdict"].values).ravel()
               if "verdict" in idata.relevance else np.array([]))
    known = np.isin(verdict, list(VERDICTS.values()))
    return {f"n_{v.replace('-', '_')}": float((verdict == v).sum()) if known.any() else np.nan
            for v in VERDICTS.values()}
