"""Tables that compare what several fits say about the relevance hyperparameters.

Every function takes fitted estimators or their InferenceData
(:func:`rvm_ppl.core.fits.as_idata`).
"""

from __future__ import annotations

import numpy as np

from rvm_ppl.core.fits import as_idata
from rvm_ppl.output.identity import check_one_model
from rvm_ppl.output.sensitivity import NOT_APPLICABLE

__all__ = ["alpha_summary", "alpha_table", "named_fits", "select_class"]


def alpha_table(idatas, *, model_names=None, hdi_prob=0.94, basis=None, class_=None):
    """Per-basis summaries of log10 alpha across fits.

    Parameters
    ----------
    idatas : fitted estimator or InferenceData, or a dict or list of them
    model_names : list of str, optional
        Defaults to the dict keys or to each fit's ``inference_method``.
    hdi_prob : float
    basis : list of str, optional
        Rows to keep; default: bases relevant in at least one fit.
    class_ : optional
        For fits with a ``class`` dimension (more than two classes, or
        ``multi_class="multinomial"``): the class whose ``alpha`` are
        tabulated (a value of ``classes_``).

    Returns
    -------
    pandas.DataFrame
        Index ``basis``; for each fit the median, HDI bounds of log10 alpha
        (``inf`` where pruned; a point estimate has equal bounds), the
        relevance decision and the power-scaling ``verdict``
        (:mod:`rvm_ppl.output.sensitivity`: ``"data-driven"``,
        ``"prior-driven"``, ``"conflict"``, ``"undetermined"`` or ``"n/a"``);
        a final column ``agree`` that is true where all fits make the same
        relevance decision. Fits of different hyperpriors are named with
        theirs (:func:`named_fits`).

    Raises
    ------
    TypeError
        If a fit is neither a fitted estimator nor an rvm_ppl InferenceData.
    ValueError
        If the fits were fitted to different data.

    Warns
    -----
    ModelMismatchWarning
        If the fits approximate different models
        (:func:`rvm_ppl.output.identity.check_one_model`).
    """
    import pandas as pd

    model_names, idatas = named_fits(idatas, model_names=model_names, class_=class_)
    labels = [str(b) for b in idatas[0].relevance["basis"].values]
    columns = {}
    rel_all = []
    for name, idata in zip(model_names, idatas):
        med, lo, hi, pruned, _ = alpha_summary(idata, hdi_prob)
        med, lo, hi = (np.where(pruned, np.inf, v) for v in (med, lo, hi))
        rel = idata.relevance["relevant"].values
        rel_all.append(rel)
        columns[(name, "median log10 α")] = med
        columns[(name, "hdi low")] = lo
        columns[(name, "hdi high")] = hi
        columns[(name, "relevant")] = rel
        columns[(name, "verdict")] = (idata.relevance["verdict"].values
                                      if "verdict" in idata.relevance
                                      else np.full(len(labels), NOT_APPLICABLE))
    rel_all = np.array(rel_all)
    columns[("all", "agree")] = (rel_all == rel_all[0]).all(axis=0)
    df = pd.DataFrame(columns, index=pd.Index(labels, name="basis"))
    if basis is None:
        df = df[rel_all.any(axis=0)]
    else:
        df = df.loc[list(basis)]
    return df


def named_fits(fits, *, model_names=None, class_=None):
    """Return the names and InferenceData of the fits that a plot or table of alpha compares.

    Parameters
    ----------
    fits : fitted estimator or InferenceData, or a dict or list of them
    model_names : list of str, optional
        Defaults to the dict keys or to each fit's ``inference_method``.
    class_ : optional
        See :func:`select_class`.

    Returns
    -------
    names : list of str
        Each followed by its hyperprior in brackets where the fits'
        hyperpriors differ (:func:`rvm_ppl.output.identity.check_one_model`).
    idatas : list of arviz.InferenceData
        Each reduced to ``class_`` by :func:`select_class`.

    Raises
    ------
    TypeError
        If a fit is neither a fitted estimator nor an rvm_ppl InferenceData.
    ValueError
        If the fits were fitted to different data.

    Warns
    -----
    ModelMismatchWarning
        If the fits approximate different models.
    """
    if isinstance(fits, dict):
        model_names = model_names or list(fits)
        fits = {f"Fit {name!r}": f for name, f in fits.items()}
    else:
        fits = {f"Fit {k}": f for k, f in enumerate(fits if isinstance(fits, (list, tuple))
                                                    else [fits])}
    if not fits:
        raise TypeError("No fits given; expected one, or a dict or list of them.")
    idatas = [select_class(as_idata(f, what), class_) for what, f in fits.items()]
    model_names = model_names or [i.attrs.get("inference_method", f"fit {k}")
                                  for k, i in enumerate(idatas)]
    return check_one_model(model_names, idatas), idatas


def select_class(idata, class_):
    """``idata`` with its ``class`` dimension (multi-class fits) reduced to ``class_``.

    One-vs-rest and multinomial fits of ``K > 2`` classes have a ``class``
    dimension in ``posterior``, ``relevance`` and ``fit``; the alpha plots and
    tables show one class at a time. A fit without the dimension is returned
    as it is (``class_`` is then ignored). ``idata`` may also be a fitted
    estimator.
    """
    idata = as_idata(idata)
    if "class" not in idata.relevance.dims:
        return idata
    labels = [str(c) for c in idata.relevance["class"].values]
    if class_ is None:
        raise ValueError(
            f"The fit has a 'class' dimension; choose one with class_=, one of {labels}."
        )
    if str(class_) not in labels:
        raise ValueError(f"class_={class_!r} is not a class of the fit; expected one of {labels}.")
    return idata.sel(**{"class": idata.relevance["class"].values[labels.index(str(class_))]})


def alpha_summary(idata, hdi_prob):
    """Per candidate basis: median and HDI of log10 alpha, whether it is a point, pruned flags.

    The posterior covers the bases in the method's model. Of the others, a
    basis with ``alpha = inf`` in ``idata.relevance`` is pruned (a point
    mass); one with a Gamma ``Q(alpha)`` in ``idata.fit`` (``alpha_shape``,
    ``alpha_rate`` on ``candidate``: a vb fit's weights outside its model) is
    summarised by that Gamma's median and central interval. ``idata`` may also
    be a fitted estimator.
    """
    import arviz as az
    from scipy import stats

    idata = as_idata(idata)
    labels = [str(b) for b in idata.relevance["basis"].values]
    a = idata.posterior["alpha"]
    # A class of a multi-class fit leaves out some bases the others use: alpha = inf there.
    a = a.isel(basis=np.flatnonzero(np.isfinite(a.values).all(axis=(0, 1))))
    kept = [labels.index(str(b)) for b in a["basis"].values]
    point = bool(idata.attrs.get("inference_method") == "evidence")
    med, lo, hi = (np.full(len(labels), np.inf) for _ in range(3))
    la = np.log10(a)
    med[kept] = la.median(dim=("chain", "draw")).values
    if point:
        lo[kept] = hi[kept] = med[kept]
    elif kept:
        hdi = az.hdi(la, hdi_prob=hdi_prob)["alpha"].values
        lo[kept], hi[kept] = hdi[:, 0], hdi[:, 1]
    pruned = np.isinf(idata.relevance["alpha"].values)
    outside = np.setdiff1d(np.flatnonzero(~pruned), kept)
    if outside.size and "fit" in idata.groups() and "alpha_shape" in idata.fit:
        shape = idata.fit["alpha_shape"].values[outside]
        rate = idata.fit["alpha_rate"].values[outside]
        q = stats.gamma.ppf([[0.5], [(1 - hdi_prob) / 2], [(1 + hdi_prob) / 2]], shape, scale=1 / rate)
        med[outside], lo[outside], hi[outside] = np.log10(q)
    elif outside.size:
        med[outside] = lo[outside] = hi[outside] = np.log10(idata.relevance["alpha"].values[outside])
    return med, lo, hi, pruned, point
