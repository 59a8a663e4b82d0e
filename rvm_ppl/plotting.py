"""Plots of fits and of alpha posteriors.

Every function computes first and then draws on the given Axes (or the
current ones), sets its style defaults with ``setdefault`` so the caller
wins, imports matplotlib inside the function, and returns the Axes.
"""

from __future__ import annotations

import numpy as np

__all__ = ["plot_predictive"]


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
