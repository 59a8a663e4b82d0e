"""Plots of fits and of alpha posteriors.

Every function computes first and then draws on the given Axes (or the
current ones), sets its style defaults with ``setdefault`` so the caller
wins, imports matplotlib inside the function, and returns the Axes. A plot
of fits takes fitted estimators or their InferenceData
(:func:`rvm_ppl.core.fits.as_idata`).
"""

from __future__ import annotations

import numpy as np

from rvm_ppl.output.tables import alpha_summary, named_fits

__all__ = ["plot_predictive", "plot_decision", "plot_alpha"]


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
        _circle_relevance(ax, Xr, y, relevance, relevance_kwargs)
    ax.legend(loc="best", fontsize="small")
    return ax


def _circle_relevance(ax, x, y, relevance, relevance_kwargs):
    """Circle the points ``(x, y)[relevance]``, if there are any."""
    if relevance is None or not len(relevance):
        return
    relevance_kwargs = dict(relevance_kwargs or {})
    relevance_kwargs.setdefault("s", 90)
    relevance_kwargs.setdefault("facecolors", "none")
    relevance_kwargs.setdefault("edgecolors", "C3")
    relevance_kwargs.setdefault("linewidths", 1.5)
    relevance_kwargs.setdefault("label", f"relevance vectors ({len(relevance)})")
    ax.scatter(np.asarray(x)[relevance], np.asarray(y)[relevance], **relevance_kwargs)


def plot_decision(
    clf,
    X=None,
    y=None,
    *,
    relevance=None,
    levels=(0.25, 0.5, 0.75),
    grid=200,
    xlim=None,
    ylim=None,
    ax=None,
    contour_kwargs=None,
    data_kwargs=None,
    relevance_kwargs=None,
):
    """Contours of a binary classifier's probability over two input features.

    Draws lines of constant ``P(classes_[1] | x)`` at ``levels`` (the 0.5
    line, the decision boundary, dashed and darker), the training points
    coloured by class and the relevance vectors circled.

    Parameters
    ----------
    clf : fitted binary classifier
        Anything with ``predict_proba`` and ``classes_`` that takes two
        input features, e.g. :class:`~rvm_ppl.RVC`.
    X : ndarray of shape (N, 2), optional
        Training inputs; they set the plotted range unless ``xlim`` and
        ``ylim`` are given.
    y : ndarray of shape (N,), optional
        Training labels (values of ``clf.classes_``); with ``X``, the points
        are drawn coloured by class.
    relevance : ndarray of int, optional
        Indices of the relevance vectors in ``X``; circled.
    levels : sequence of float
        Probabilities at which contour lines are drawn.
    grid : int
        Grid points per axis at which ``predict_proba`` is evaluated.
    xlim, ylim : (float, float), optional
        Plotted range; default: the range of ``X`` padded by 5 %.
    ax : matplotlib Axes, optional
    contour_kwargs, data_kwargs, relevance_kwargs : dict, optional
        Passed to ``contour`` and ``scatter``.

    Returns
    -------
    matplotlib.axes.Axes

    Raises
    ------
    ValueError
        If ``X`` does not have two columns, if neither ``X`` nor both
        ``xlim`` and ``ylim`` are given, or if ``clf`` has more than two
        classes.

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> import matplotlib.pyplot as plt
    >>> from rvm_ppl import RVC
    >>> from rvm_ppl.datasets.loaders import load_ripley
    >>> X, y, _, _ = load_ripley()
    >>> clf = RVC(gamma=4.0).fit(X[::5], y[::5])
    >>> fig, ax = plt.subplots()
    >>> ax = plot_decision(clf, X[::5], y[::5], relevance=clf.relevance_, grid=50, ax=ax)
    >>> ax.collections[0].levels.tolist()
    [0.25, 0.5, 0.75]
    >>> plt.close(fig)
    """
    import matplotlib.pyplot as plt

    classes = np.asarray(clf.classes_)
    if len(classes) != 2:
        raise ValueError(
            f"plot_decision draws P(classes_[1]) of a binary classifier; clf has {len(classes)} "
            "classes. Fit one binary classifier per class (one-vs-rest) and plot each."
        )
    if X is not None:
        X = np.asarray(X, dtype=float)
        if X.ndim != 2 or X.shape[1] != 2:
            raise ValueError(f"plot_decision needs X with two columns (features); got shape {X.shape}.")
    if X is None and (xlim is None or ylim is None):
        raise ValueError("plot_decision needs X, or both xlim and ylim, to set the plotted range.")

    def _limits(lim, col):
        if lim is not None:
            return lim
        lo, hi = X[:, col].min(), X[:, col].max()
        pad = 0.05 * (hi - lo) if hi > lo else 0.5
        return lo - pad, hi + pad

    xlim, ylim = _limits(xlim, 0), _limits(ylim, 1)
    gx, gy = np.meshgrid(np.linspace(*xlim, grid), np.linspace(*ylim, grid))
    P = clf.predict_proba(np.column_stack([gx.ravel(), gy.ravel()]))[:, 1].reshape(gx.shape)
    levels = np.sort(np.asarray(levels, dtype=float))
    boundary = np.isclose(levels, 0.5)

    ax = plt.gca() if ax is None else ax
    contour_kwargs = dict(contour_kwargs or {})
    contour_kwargs.setdefault("colors", ["k" if b else "0.55" for b in boundary])
    contour_kwargs.setdefault("linestyles", ["--" if b else "-" for b in boundary])
    contour_kwargs.setdefault("linewidths", [1.6 if b else 1.0 for b in boundary])
    cs = ax.contour(gx, gy, P, levels=levels, **contour_kwargs)
    ax.clabel(cs, fmt="%g", fontsize="small")
    if X is not None and y is not None:
        y = np.asarray(y)
        data_kwargs = dict(data_kwargs or {})
        data_kwargs.setdefault("s", 12)
        for k, cls in enumerate(classes):
            kw = dict(data_kwargs)
            kw.setdefault("color", f"C{k}")
            kw.setdefault("marker", "os"[k])
            kw.setdefault("label", f"class {cls}")
            ax.scatter(X[y == cls, 0], X[y == cls, 1], **kw)
    if X is not None:
        _circle_relevance(ax, X[:, 0], X[:, 1], relevance, relevance_kwargs)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="best", fontsize="small")
    return ax


def plot_alpha(
    idatas,
    *,
    model_names=None,
    basis=None,
    hdi_prob=0.94,
    ax=None,
    colors=None,
    class_=None,
):
    """Side-by-side posteriors of log10 alpha, one row per basis function.

    Sampling and variational fits are drawn as a median with an HDI bar;
    type-II ML's point estimate as a diamond with no bar (it has no
    posterior), and a basis it pruned (alpha = inf) as an open triangle at
    the right edge, labelled "pruned". Filled markers are bases the method
    counts as relevant (``idata.relevance.relevant``). Behind them, for
    every fit whose InferenceData has a ``prior`` group, a shaded vertical
    band, labelled "hyperprior", spans the central ``hdi_prob`` interval of
    the hyperprior's log10 alpha (from its ``log_alpha`` draws); the x-range
    stays that of the posteriors, and the band of a vague hyperprior
    (``a = 1e-6``, whose central interval lies thousands of decades below)
    is left out, legend entry included.

    Parameters
    ----------
    idatas : fitted estimator or InferenceData, or a list or dict of them
    model_names : list of str, optional
        Defaults to the dict keys or to each fit's ``inference_method``.
    basis : list of str or "all", optional
        Basis labels to show; default: those relevant in at least one fit.
    hdi_prob : float
    ax : matplotlib Axes, optional
    colors : list, optional
    class_ : optional
        For fits with a ``class`` dimension (more than two classes, or
        ``multi_class="multinomial"``): the class whose ``alpha`` are shown
        (a value of ``classes_``); fits without one are shown as they are.

    Returns
    -------
    matplotlib.axes.Axes

    Raises
    ------
    TypeError
        If a fit is neither a fitted estimator nor an rvm_ppl InferenceData.
    """
    import matplotlib.pyplot as plt

    model_names, idatas = named_fits(idatas, model_names=model_names, class_=class_)
    labels = [str(b) for b in idatas[0].relevance["basis"].values]
    relevant = np.array([i.relevance["relevant"].values for i in idatas])
    if basis is None:
        show = np.flatnonzero(relevant.any(axis=0))
    elif isinstance(basis, str) and basis == "all":
        show = np.arange(len(labels))
    else:
        show = np.array([labels.index(b) for b in basis])
    summaries = [alpha_summary(i, hdi_prob) for i in idatas]
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
    _hyperprior_bands(ax, idatas, model_names, colors, hdi_prob)
    ax.axvline(right - 0.5, color="0.7", lw=0.8, ls=":")
    ax.text(right, len(show) - 0.4, "pruned\n(α = ∞)", ha="center", va="bottom", fontsize="small")
    ax.set_yticks(np.arange(len(show)), [labels[j] for j in show])
    ax.invert_yaxis()
    ax.set_xlabel("log10 α (weight precision)")
    ax.legend(loc="best", fontsize="small")
    return ax


def _hyperprior_bands(ax, idatas, model_names, colors, hdi_prob):
    """Shade the central ``hdi_prob`` interval of each fit's hyperprior on log10 alpha.

    The bands are drawn behind everything (``zorder=0``) and do not change
    the x-range the posteriors set; a band wholly outside that range (a vague
    hyperprior's) is left out, legend entry included.
    """
    with_prior = [k for k, i in enumerate(idatas) if "prior" in i.groups()]
    if not with_prior:
        return
    ax.autoscale_view()
    xlim = ax.get_xlim()
    tail = (1.0 - hdi_prob) / 2
    # Fits of one hyperprior (the model's identity, rvm_ppl.output.idata) share one band.
    groups = {}
    for k in with_prior:
        groups.setdefault(idatas[k].attrs.get("hyperprior", k), []).append(k)
    for members in groups.values():
        k = members[0]
        log10 = np.asarray(idatas[k].prior["log_alpha"].values, dtype=float) / np.log(10.0)
        lo, hi = np.nanquantile(log10, [tail, 1.0 - tail])
        if hi <= xlim[0] or lo >= xlim[1]:
            continue
        if len(groups) == 1:
            label, color = "hyperprior", "0.5"
        else:
            label = f"hyperprior ({', '.join(model_names[j] for j in members)})"
            color = colors[k]
        ax.axvspan(lo, hi, color=color, alpha=0.12, lw=0, zorder=0, label=label)
    ax.set_xlim(xlim)
