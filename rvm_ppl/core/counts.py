"""Count targets and their log exposure: the checks the Poisson fit and the PyMC model share."""

from __future__ import annotations

import numpy as np


def check_counts(y, name="y"):
    """Return ``y`` as floats, after checking that it holds non-negative integer counts.

    Raises
    ------
    ValueError
        If ``y`` is not 1-D, not finite, negative or not whole numbers.
    """
    y = np.asarray(y, dtype=float)
    if y.ndim != 1:
        raise ValueError(f"{name} must be a 1-D array of counts; got shape {y.shape}.")
    if not np.isfinite(y).all():
        raise ValueError(f"{name} must be finite counts (no NaN or inf).")
    if (y < 0).any():
        raise ValueError(f"The Poisson likelihood needs non-negative integer counts in {name}; "
                         f"got a negative value {y.min():g}.")
    if (y != np.round(y)).any():
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
