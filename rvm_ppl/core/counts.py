"""Count targets and their log exposure: the checks the Poisson fit and the PyMC model share."""

from __future__ import annotations

import numpy as np


def check_counts(y, name="y", *, integer=True):
    """Return ``y`` as floats, after checking that it holds non-negative counts.

    Parameters
    ----------
    y : array-like of shape (N,)
    name : str
        How the messages name ``y``.
    integer : bool
        Require whole numbers (the Poisson density, which PyMC's model
        evaluates, is defined at integers only). With False any non-negative
        real is accepted, as scikit-learn's ``PoissonRegressor`` accepts it:
        the Laplace fit's log likelihood ``t log lambda - lambda - log Gamma(t +
        1)`` is the Poisson one at integers and its continuation between them.

    Raises
    ------
    ValueError
        If ``y`` is not 1-D, not finite, negative or (``integer``) not whole numbers.
    """
    y = np.asarray(y, dtype=float)
    if y.ndim != 1:
        raise ValueError(f"{name} must be a 1-D array of counts; got shape {y.shape}.")
    if not np.isfinite(y).all():
        raise ValueError(f"{name} must be finite counts (no NaN or inf).")
    if (y < 0).any():
        kind = "integer counts" if integer else "counts"
        raise ValueError(f"The Poisson likelihood needs non-negative {kind} in {name}; "
                         f"got a negative value {y.min():g}.")
    if integer and (y != np.round(y)).any():
        bad = y[y != np.round(y)][0]
        raise ValueError(
            f"The Poisson likelihood needs non-negative integer counts in {name}; got {bad:g}. "
            "Unlike scikit-learn's PoissonRegressor, which accepts non-negative reals, the "
            "Poisson density is defined at integers only: for rates, pass the counts and their "
            "log exposure as the offset.")
    return y


def check_offset(offset, n):
    """Return the offset as an array of shape ``(n,)`` (zeros for None), checked to be finite."""
    if offset is None:
        return np.zeros(n)
    o = np.asarray(offset, dtype=float)
    if o.shape != (n,):
        raise ValueError(f"offset has shape {o.shape}; expected ({n},), one log exposure per row.")
    if not np.isfinite(o).all():
        raise ValueError("offset (the log exposure) must be finite.")
    return o


# A count y * exposure within this relative distance of a whole number is that number:
# rates given as counts / exposure come back to their counts to a few units of rounding.
COUNT_ROUNDING = 1e-9


def pool_counts(X, rate, exposure):
    """Counts ``rate * exposure``, pooled over identical rows of ``X``; zero exposure dropped.

    Counts observed at the same input with the same rate per unit exposure
    are independent Poisson counts with one rate, and their sum is Poisson
    with the summed exposure: the likelihood of the rate is that of the
    pooled count, up to a constant. A row of zero exposure observes nothing.
    So every distinct input with positive exposure becomes one observation:
    repeating a row and giving it an integer weight (exposure) are the same
    fit, as scikit-learn asks of ``sample_weight``.

    Parameters
    ----------
    X : ndarray of shape (N, D)
    rate : ndarray of shape (N,)
        Non-negative rates per unit exposure.
    exposure : ndarray of shape (N,)
        Non-negative exposures, one of them positive.

    Returns
    -------
    X_pooled : ndarray of shape (n, D)
        The distinct rows of positive exposure, in the order of their first
        appearance.
    counts, exposure : ndarray of shape (n,)
        Summed counts and exposures; a count within :data:`COUNT_ROUNDING`
        (relative) of a whole number is rounded to it.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.array([[1.0], [0.0], [1.0], [2.0]])
    >>> Xp, c, s = pool_counts(X, np.array([2.0, 1.0, 3.0, 5.0]), np.array([1.0, 2.0, 1.0, 0.0]))
    >>> Xp.ravel().tolist(), c.tolist(), s.tolist()
    ([1.0, 0.0], [5.0, 2.0], [2.0, 2.0])
    """
    keep = exposure > 0
    X, counts, exposure = X[keep], rate[keep] * exposure[keep], exposure[keep]
    _, first, inverse = np.unique(X, axis=0, return_index=True, return_inverse=True)
    if len(first) < len(X):
        order = np.argsort(first)  # the groups in the order of their first row
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        group = rank[np.ravel(inverse)]
        X = X[first[order]]
        counts = np.bincount(group, weights=counts)
        exposure = np.bincount(group, weights=exposure)
    whole = np.round(counts)
    near = np.abs(counts - whole) <= COUNT_ROUNDING * np.maximum(whole, 1.0)
    return X, np.where(near, whole, counts), exposure
