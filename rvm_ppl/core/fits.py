"""What the output side accepts as a fit: a fitted estimator or its InferenceData.

The plots, tables and diagnostics take either; they import no estimator, so
an estimator is recognised by duck typing, as anything with an ``idata_``.
"""

from __future__ import annotations

EXPECTED_FIT = "a fitted rvm_ppl estimator (RVR, RVC) or the InferenceData of one"


def as_idata(fit, what="The fit"):
    """Return the InferenceData of ``fit``: a fitted estimator's ``idata_``, or ``fit`` itself.

    Parameters
    ----------
    fit : estimator or arviz.InferenceData
        Anything with an ``idata_`` attribute (a fitted :class:`~rvm_ppl.RVR`
        or :class:`~rvm_ppl.RVC`), or an InferenceData with the package's
        ``posterior`` and ``relevance`` groups.
    what : str
        How error messages name ``fit`` (e.g. ``"Fit 'vb'"``).

    Returns
    -------
    arviz.InferenceData

    Raises
    ------
    TypeError
        If ``fit`` is an estimator that is not fitted, or neither an
        estimator nor such an InferenceData.

    Examples
    --------
    >>> from rvm_ppl import RVR
    >>> from rvm_ppl.datasets.loaders import make_sinc
    >>> X, y = make_sinc(30, random_state=0)
    >>> m = RVR(gamma=0.1).fit(X, y)
    >>> as_idata(m) is m.idata_ and as_idata(m.idata_) is m.idata_
    True
    >>> as_idata(RVR())  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    TypeError: The fit is not fitted (RVR); expected a fitted rvm_ppl estimator ... Call fit first.
    """
    try:
        idata = fit.idata_
    except AttributeError:  # scikit-learn's NotFittedError is one too
        if hasattr(type(fit), "idata_"):
            raise TypeError(f"{what} is not fitted ({type(fit).__name__}); expected "
                            f"{EXPECTED_FIT}. Call fit first.") from None
        idata = fit
    if not (hasattr(idata, "posterior") and hasattr(idata, "relevance")):
        raise TypeError(f"{what} is of type {type(fit).__name__}; expected {EXPECTED_FIT}.")
    return idata
