"""Simulation-based calibration of the reference and of the approximations.

:func:`sbc` draws ``(alpha, beta, w)`` from a proper hyperprior and data
``y`` from the RVM on a fixed design matrix, fits every method, and records
where the true value falls:

``nuts``
    SBC (Talts, Betancourt, Simpson, Vehtari & Gelman 2018, Alg. 1): the
    rank of the true ``log beta`` and ``log alpha_m`` among ``L`` thinned
    posterior draws. If the sampler is exact the rank is uniform on
    ``0..L``.
``vb``, ``advi``
    Variational SBC (Yao, Vehtari, Simpson & Gelman 2018, §4): the
    approximation's marginal CDF at the true value,
    ``p = Q(theta < theta_true)``. For an unbiased approximation ``p`` is
    symmetric about 1/2 over the replications; its mean minus 1/2 shows the
    direction of the bias.
``evidence``
    The point estimate has no CDF; ``p`` is ``1`` when the estimate is below
    the true value, ``0`` above (and for a pruned basis, whose estimate is
    ``+inf``). Its mean over replications is 1/2 for a median-unbiased
    estimate.

The loop is the package's own: simuk, the SBC package of the PyMC
ecosystem, needs ``arviz_base`` (the ArviZ 1 stack) from version 0.2 and
bambi before it, and runs NUTS only, not the variational SBC of the
closed-form methods.

:func:`sbc_tests` gives the uniformity test of the ranks (chi-square on
equal bins) and the symmetry test of ``p`` (Kolmogorov-Smirnov of ``p``
against ``1 - p``, Yao et al. 2018), and :func:`plot_sbc_ecdf` the ECDF
difference plot of Säilynoja, Bürkner & Vehtari (2022), with pointwise 95 %
binomial bands.

What SBC found for the four methods (NUTS calibrated; vb and the evidence
method overestimating the noise, the evidence method's ``alpha`` above the
truth) is in the documentation's Benchmarks page, section "Did the
approximations work?" (``docs/benchmarks.md``).

The fits use the hyperprior in the units of ``y`` exactly: the sampling
methods take it as given (:func:`rvm_ppl.model.build.build_model`) and the
closed-form methods, which run on ``y / std(y)``, get it converted to those
units, so that every method fits the model the data were drawn from.
"""

from __future__ import annotations

import warnings

import numpy as np
from scipy import stats

__all__ = ["plot_sbc_ecdf", "sbc", "sbc_tests", "simulate_rvm"]

METHODS = ("nuts", "vb", "advi", "evidence")


def simulate_rvm(Phi, priors, rng):
    """One draw from the RVM's prior predictive (Tipping 2001, eqs. 4-6).

    Returns
    -------
    alpha : ndarray of shape (M,)
    beta : float
    w : ndarray of shape (M,)
    y : ndarray of shape (N,)
    """
    N, M = Phi.shape
    alpha = rng.gamma(priors["a"], 1.0 / priors["b"], size=M)
    beta = rng.gamma(priors["c"], 1.0 / priors["d"])
    w = rng.standard_normal(M) / np.sqrt(alpha)
    y = Phi @ w + rng.standard_normal(N) / np.sqrt(beta)
    return alpha, float(beta), w, y


def _standardised_priors(priors, scale):
    """Hyperpriors on ``y / scale`` equivalent to ``priors`` on ``y`` (rates over ``scale^2``)."""
    return {**priors, "b": priors["b"] / scale**2, "d": priors["d"] / scale**2}


def _fit_closed_form(method, Phi, y, priors, labels):
    from rvm_ppl.core.priors import target_scale
    from rvm_ppl.inference.methods import fit_evidence, fit_vb

    p = _standardised_priors(priors, target_scale(y))
    if method == "vb":
        return fit_vb(Phi, y, labels=labels, likelihood="gaussian", priors=p, max_iter=5000,
                      tol=1e-7)
    return fit_evidence(Phi, y, labels=labels, likelihood="gaussian", priors=p, max_iter=10_000,
                        tol=1e-3, solver="fast", alignment_test=True, start=0, beta=None,
                        fit_beta=True)


def sbc(Phi, priors, *, n_sims=200, methods=METHODS, bases=(0, 1, 2), n_ranks=99, draws=500,
        tune=500, chains=2, nuts_sampler="pymc", random_state=None, progress=False):
    """Simulation-based calibration of NUTS and variational SBC of vb, advi, evidence.

    Parameters
    ----------
    Phi : ndarray of shape (N, M)
        The fixed design matrix (small: e.g. N = 20, M <= 6).
    priors : dict
        Proper Gamma hyperpriors ``a, b, c, d`` (shape, rate) in the units
        of ``y``, from which the truths are drawn and which every fit uses.
    n_sims : int
    methods : sequence of str
        Any of ``"nuts", "vb", "advi", "evidence"``.
    bases : sequence of int
        The ``alpha_m`` to record (with ``beta``).
    n_ranks : int
        ``L``: NUTS's draws are thinned to ``L`` evenly spaced ones, so that
        the rank is on ``0..L``.
    draws, tune, chains : int
        NUTS per replication (``chains * draws >= n_ranks``).
    nuts_sampler : str
        PyMC's sampler by default, not the package's (nutpie): nutpie
        compiles a new Numba callback for each replication's model, where
        PyMC reuses the functions PyTensor has cached (timed in the
        documentation's Defaults and why page, section "Simulation-based
        calibration").
    random_state : int or None
    progress : bool
        Print one line per replication.

    Returns
    -------
    pandas.DataFrame
        Columns ``sim``, ``method``, ``parameter`` (``"log_beta"``,
        ``"log_alpha[m]"``), ``truth`` (natural log), ``value`` (NUTS: the
        rank, an integer in ``0..L``; the others: ``p``), ``n_divergences``
        (NUTS). ``attrs["n_ranks"]`` holds ``L``.
    """
    import pandas as pd

    from rvm_ppl.model.build import build_model
    from rvm_ppl.pymc_fitters.advi import advi_result
    from rvm_ppl.pymc_fitters.nuts import nuts_result

    Phi = np.asarray(Phi, dtype=float)
    N, M = Phi.shape
    if min(priors[k] for k in "abcd") <= 0:
        raise ValueError("SBC needs a proper hyperprior: a, b, c, d > 0.")
    unknown = set(methods) - set(METHODS)
    if unknown:
        raise ValueError(f"Unknown method(s) {sorted(unknown)}; expected some of {METHODS}.")
    bases = [int(m) for m in bases]
    if any(not 0 <= m < M for m in bases):
        raise ValueError(f"bases must be column indices of Phi (0..{M - 1}).")
    if chains * draws < n_ranks:
        raise ValueError("chains * draws must be at least n_ranks.")
    labels = [f"phi_{m}" for m in range(M)]
    names = ["log_beta"] + [f"log_alpha[{m}]" for m in bases]
    rng = np.random.default_rng(random_state)
    rows = []
    for s in range(n_sims):
        alpha, beta, _, y = simulate_rvm(Phi, priors, rng)
        truth = np.log(np.concatenate([[beta], alpha[bases]]))
        seed = int(rng.integers(2**31 - 1))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # diagnostics are recorded, not printed
            model = (build_model(Phi, y, basis=labels, priors=priors)
                     if {"nuts", "advi"} & set(methods) else None)
            for method in methods:
                div = np.nan
                if method == "nuts":
                    r = nuts_result(model, draws=draws, tune=tune, chains=chains,
                                    nuts_sampler=nuts_sampler, random_seed=seed)
                    post = np.column_stack([np.log(r.draws["beta"]).ravel(),
                                            np.log(r.draws["alpha"]).reshape(-1, M)[:, bases]])
                    keep = np.linspace(0, post.shape[0] - 1, n_ranks).round().astype(int)
                    value = (post[keep] < truth).sum(axis=0).astype(float)
                    div = r.stats.get("n_divergences", np.nan)
                elif method == "advi":
                    r = advi_result(model, n=20_000, tol=1e-2, draws=10, random_seed=seed)
                    f = {k: np.asarray(v) for k, (_, v) in r.fit.items()}
                    mean = np.concatenate([[f["q_mean_log_beta"]], f["q_mean_log_alpha"][bases]])
                    sd = np.concatenate([[f["q_sd_log_beta"]], f["q_sd_log_alpha"][bases]])
                    value = stats.norm.cdf(truth, mean, sd)
                elif method == "vb":
                    r = _fit_closed_form("vb", Phi, y, priors, labels)
                    (sh_a, rt_a), (sh_b, rt_b) = r.alpha_gamma, r.beta_gamma
                    value = np.concatenate([
                        [stats.gamma.cdf(beta, sh_b, scale=1.0 / rt_b)],
                        stats.gamma.cdf(alpha[bases], sh_a[bases], scale=1.0 / rt_a[bases])])
                else:
                    r = _fit_closed_form("evidence", Phi, y, priors, labels)
                    est = np.log(np.concatenate([[r.beta], r.alpha[bases]]))
                    value = (est < truth).astype(float)
                for name, t, v in zip(names, truth, value, strict=True):
                    rows.append(dict(sim=s, method=method, parameter=name, truth=t, value=v,
                                     n_divergences=div))
        if progress:
            print(f"sbc {s + 1}/{n_sims}", flush=True)
    out = pd.DataFrame(rows)
    out.attrs["n_ranks"] = n_ranks
    return out


def sbc_tests(table, n_bins=10):
    """Uniformity of NUTS's ranks and symmetry of the approximations' ``p``.

    Parameters
    ----------
    table : pandas.DataFrame
        From :func:`sbc`.
    n_bins : int
        Equal bins of the ranks ``0..L`` for the chi-square test (``L + 1``
        must be a multiple of ``n_bins``).

    Returns
    -------
    pandas.DataFrame
        Per method and parameter: ``n``; ``mean`` (NUTS: mean rank over
        ``L``; others: mean ``p``, 1/2 if unbiased; a mean below 1/2 means
        the approximation sits above the truth); ``p_value`` (NUTS: chi-square
        test of uniform ranks; vb, advi: two-sample Kolmogorov-Smirnov test of
        ``p`` against ``1 - p``; evidence: two-sided binomial test of
        ``P(estimate < truth) = 1/2``).
    """
    import pandas as pd

    L = int(table.attrs.get("n_ranks", 99))
    if (L + 1) % n_bins:
        raise ValueError(f"L + 1 = {L + 1} ranks do not split into {n_bins} equal bins.")
    rows = []
    for (method, name), part in table.groupby(["method", "parameter"], sort=False):
        v = part["value"].to_numpy(dtype=float)
        if method == "nuts":
            counts = np.bincount((v * n_bins // (L + 1)).astype(int), minlength=n_bins)
            p = stats.chisquare(counts).pvalue
            mean = float(v.mean() / L)
        elif method == "evidence":
            p = stats.binomtest(int(v.sum()), v.size, 0.5).pvalue
            mean = float(v.mean())
        else:
            p = stats.ks_2samp(v, 1.0 - v).pvalue
            mean = float(v.mean())
        rows.append(dict(method=method, parameter=name, n=v.size, mean=mean, p_value=float(p)))
    return pd.DataFrame(rows)


def plot_sbc_ecdf(table, method="nuts", ax=None):
    """ECDF difference of normalised ranks (or of ``p``) against the uniform, per parameter.

    The curve is ``ECDF(z) - z`` with ``z = rank / L`` (NUTS) or ``z = p``;
    the shaded band is the pointwise 95 % interval of that difference for
    uniform values, ``+-1.96 sqrt(z (1 - z) / n)``.

    Returns
    -------
    matplotlib Axes
    """
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(6, 3.5))
    part = table[table["method"] == method]
    if part.empty:
        raise ValueError(f"No replications of {method!r} in the table.")
    L = int(table.attrs.get("n_ranks", 99))
    z = np.linspace(0, 1, 201)
    n = part["sim"].nunique()
    band = 1.96 * np.sqrt(z * (1 - z) / n)
    ax.fill_between(z, -band, band, color="0.85", label="95 % (pointwise)")
    for name, g in part.groupby("parameter", sort=False):
        v = g["value"].to_numpy(dtype=float)
        u = v / L if method == "nuts" else v
        ecdf = np.searchsorted(np.sort(u), z, side="right") / u.size
        ax.plot(z, ecdf - z, lw=1.2, label=name)
    ax.axhline(0, color="0.4", lw=0.8)
    ax.set_xlabel("normalised rank" if method == "nuts" else "p = Q(θ < θ_true)")
    ax.set_ylabel("ECDF − uniform")
    ax.set_title(method)
    ax.legend(fontsize=8)
    return ax
