"""Tables that compare what several fits say about the relevance hyperparameters."""

from __future__ import annotations

import numpy as np

__all__ = ["alpha_table"]


def alpha_table(idatas, *, model_names=None, hdi_prob=0.94, basis=None, class_=None):
    """Per-basis summaries of log10 alpha across fits.

    Parameters
    ----------
    idatas : dict or list of InferenceData
    model_names : list of str, optional
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
        (``inf`` where pruned; a point estimate has equal bounds) and the
        relevance decision; a final column ``agree`` that is true where all
        fits make the same relevance decision.
    """
    import pandas as pd

    from .plotting import _alpha_summary, _select_class

    if isinstance(idatas, dict):
        model_names = model_names or list(idatas)
        idatas = list(idatas.values())
    idatas = [_select_class(i, class_) for i in idatas]
    model_names = model_names or [i.attrs.get("inference_method", f"fit {k}") for k, i in enumerate(idatas)]
    labels = [str(b) for b in idatas[0].relevance["basis"].values]
    columns = {}
    rel_all = []
    for name, idata in zip(model_names, idatas):
        med, lo, hi, pruned, _ = _alpha_summary(idata, hdi_prob)
        med, lo, hi = (np.where(pruned, np.inf, v) for v in (med, lo, hi))
        rel = idata.relevance["relevant"].values
        rel_all.append(rel)
        columns[(name, "median log10 α")] = med
        columns[(name, "hdi low")] = lo
        columns[(name, "hdi high")] = hi
        columns[(name, "relevant")] = rel
    rel_all = np.array(rel_all)
    columns[("all", "agree")] = (rel_all == rel_all[0]).all(axis=0)
    df = pd.DataFrame(columns, index=pd.Index(labels, name="basis"))
    if basis is None:
        df = df[rel_all.any(axis=0)]
    else:
        df = df.loc[list(basis)]
    return df
