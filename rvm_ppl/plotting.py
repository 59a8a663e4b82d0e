"""Plots of fits and of alpha posteriors.

Every function computes first and then draws on the given Axes (or the
current ones), sets its style defaults with ``setdefault`` so the caller
wins, imports matplotlib inside the function, and returns the Axes.
"""

from __future__ import annotations

import numpy as np

__all__ = ["plot_predictive", "plot_alpha"]


def plot_predictive(
    x,
    mean,
    std=None,
    *,
    X=None,
    y=None,
    relevance=None,
    truth=None,
    label="predictive mean",
    ax=None,
    line_kwargs=None,
    band_kwargs=None,
    data_kwargs=None,
    relevance_kwargs=None,
):
    """Predictive mean with a ±2 sd band, the data and the relevance vectors.

    Parameters
    ----------
    x : ndarray of shape (n,)
        Test inputs (one-dimensional problems).
    mean, std : ndarray of shape (n,)
        Predictive mean and standard deviation at ``x``.
    X, y : ndarray, optional
        Training inputs (shape (N,) or (N, 1)) and targets, drawn as points.
    relevance : ndarray of int, optional
        Indices of the relevance vectors in ``X``; circled.
    truth : ndarray of shape (n,), optional
        The true function at ``x``, drawn dashed.
    label : str
    ax : matplotlib Axes, optional
    line_kwargs, band_kwargs, data_kwargs, relevance_kwargs : dict, optional
        Passed to ``plot``, ``fill_between`` and ``scatter``.

    Returns
    -------
    matplotlib.axes.Axes
    """
    import matplotlib.pyplot as plt

    x = np.ravel(x)
    order = np.argsort(x)
    ax = plt.gca() if ax is None else ax
    line_kwargs = dict(line_kwargs or {})
    line_kwargs.setdefault("color", "C0")
    line_kwargs.setdefault("label", label)
    if std is not None:
        band_kwargs = dict(band_kwargs or {})
        band_kwargs.setdefault("color", line_kwargs["color"])
        band_kwargs.setdefault("alpha", 0.2)
        band_kwargs.setdefault("linewidth", 0)
        ax.fill_between(
            x[order], (mean - 2 * std)[order], (mean + 2 * std)[order], **band_kwargs
        )
    if truth is not None:
        ax.plot(x[order], np.ravel(truth)[order], "k--", lw=1, label="truth")
    ax.plot(x[order], np.ravel(mean)[order], **line_kwargs)
    if X is not None and y is not None:
        Xr = np.ravel(X)
        data_kwargs = dict(data_kwargs or {})
        data_kwargs.setdefault("s", 8)
        data_kwargs.setdefault("color", "0.4")
        data_kwargs.setdefault("label", "data")
        ax.scatter(Xr, y, **data_kwargs)
        if relevance is not None and len(relevance):
            relevance_kwargs = dict(relevance_kwargs or {})
            relevance_kwargs.setdefault("s", 90)
            relevance_kwargs.setdefault("facecolors", "none")
            relevance_kwargs.setdefault("edgecolors", "C3")
            relevance_kwargs.setdefault("linewidths", 1.5)
            relevance_kwargs.setdefault("label", f"relevance vectors ({len(relevance)})")
            ax.scatter(Xr[relevance], np.asarray(y)[relevance], **relevance_kwargs)
    ax.legend(loc="best", fontsize="small")
    return ax


def _alpha_summary(idata, hdi_prob):
    """Per basis: median and HDI of log10 alpha, whether it is a point, pruned flags."""
    import arviz as az

    a = idata.posterior["alpha"]
    pruned = np.isinf(a).all(dim=("chain", "draw")).values
    la = np.log10(a.where(np.isfinite(a)))
    point = bool(idata.attrs.get("inference_method") == "evidence")
    med = la.median(dim=("chain", "draw")).values
    if point:
        lo = hi = med
    else:
        hdi = az.hdi(la.fillna(0.0), hdi_prob=hdi_prob)["alpha"].values
        lo, hi = hdi[:, 0], hdi[:, 1]
    return med, lo, hi, pruned, point


def plot_alpha(
    idatas,
    *,
    model_names=None,
    basis=None,
    hdi_prob=0.94,
    ax=None,
    colors=None,
):
    """Side-by-side posteriors of log10 alpha, one row per basis function.

    Sampling and variational fits are drawn as a median with an HDI bar;
    type-II ML's point estimate as a diamond with no bar (it has no
    posterior), and a basis it pruned (alpha = inf) as an open triangle at
    the right edge, labelled "pruned". Filled markers are bases the method
    counts as relevant (``idata.relevance.relevant``).

    Parameters
    ----------
    idatas : InferenceData, or a list or dict of them
    model_names : list of str, optional
        Defaults to the dict keys or to each fit's ``inference_method``.
    basis : list of str or "all", optional
        Basis labels to show; default: those relevant in at least one fit.
    hdi_prob : float
    ax : matplotlib Axes, optional
    colors : list, optional

    Returns
    -------
    matplotlib.axes.Axes
    """
    import matplotlib.pyplot as plt

    if isinstance(idatas, dict):
        model_names = model_names or list(idatas)
        idatas = list(idatas.values())
    elif not isinstance(idatas, (list, tuple)):
        idatas = [idatas]
    model_names = model_names or [i.attrs.get("inference_method", f"fit {k}") for k, i in enumerate(idatas)]
    labels = [str(b) for b in idatas[0].posterior["basis"].values]
    relevant = np.array([
        i.relevance["relevant"].values if "relevance" in i.groups() else np.ones(len(labels), bool)
        for i in idatas
    ])
    if basis is None:
        show = np.flatnonzero(relevant.any(axis=0))
    elif isinstance(basis, str) and basis == "all":
        show = np.arange(len(labels))
    else:
        show = np.array([labels.index(b) for b in basis])
    summaries = [_alpha_summary(i, hdi_prob) for i in idatas]
    finite = np.concatenate([np.r_[s[1][show], s[2][show]] for s in summaries])
    finite = finite[np.isfinite(finite)]
    right = (finite.max() if finite.size else 1.0) + 1.0

    ax = plt.gca() if ax is None else ax
    colors = colors or [f"C{k}" for k in range(len(idatas))]
    n = len(idatas)
    offsets = (np.arange(n) - (n - 1) / 2) * (0.7 / max(n, 1))
    for k, ((med, lo, hi, pruned, point), name) in enumerate(zip(summaries, model_names)):
        ypos = np.arange(len(show)) + offsets[k]
        c = colors[k]
        rel = relevant[k, show]
        pr = pruned[show]
        keep = ~pr
        if not point:
            ax.hlines(ypos[keep], lo[show][keep], hi[show][keep], color=c, lw=1.5)
        marker = "D" if point else "o"
        ax.scatter(med[show][keep & rel], ypos[keep & rel], marker=marker, color=c, zorder=3,
                   label=f"{name}" + (" (point estimate)" if point else f" (median, {hdi_prob:.0%} HDI)"))
        ax.scatter(med[show][keep & ~rel], ypos[keep & ~rel], marker=marker, facecolors="white",
                   edgecolors=c, zorder=3)
        if pr.any():
            ax.scatter(np.full(pr.sum(), right), ypos[pr], marker=">", facecolors="white",
                       edgecolors=c, zorder=3)
    ax.axvline(right - 0.5, color="0.7", lw=0.8, ls=":")
    ax.text(right, len(show) - 0.4, "pruned\n(α = ∞)", ha="center", va="bottom", fontsize="small")
    ax.set_yticks(np.arange(len(show)), [labels[j] for j in show])
    ax.invert_yaxis()
    ax.set_xlabel("log10 α (weight precision)")
    ax.legend(loc="best", fontsize="small")
    return ax
