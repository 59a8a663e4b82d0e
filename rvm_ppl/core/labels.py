"""Integer class labels and their one-of-K coding."""

from __future__ import annotations

import numpy as np


def one_hot(y, n_classes=None):
    """Validate integer labels and return ``(T, K)`` with ``T`` the one-of-K coding."""
    y = np.asarray(y)
    if y.ndim != 1:
        raise ValueError(f"Labels must be a 1-D array, got shape {y.shape}.")
    if y.size == 0:
        raise ValueError("No labels given.")
    if not np.issubdtype(y.dtype, np.number) or not np.all(np.isfinite(y)):
        raise ValueError("Labels must be finite integers 0, ..., K - 1.")
    if np.any(y != np.round(y)):
        raise ValueError("Labels must be integers 0, ..., K - 1.")
    y = y.astype(int)
    if y.min() < 0:
        raise ValueError(f"Labels must lie in 0, ..., K - 1; got a negative label {y.min()}.")
    K = int(y.max()) + 1 if n_classes is None else int(n_classes)
    if K < 2:
        raise ValueError(f"Multinomial classification needs at least 2 classes, got {K}.")
    if y.min() < 0 or y.max() >= K:
        raise ValueError(f"Labels must lie in 0, ..., {K - 1}; got range [{y.min()}, {y.max()}].")
    if np.unique(y).size < 2:
        raise ValueError("The labels contain a single class; at least two are needed.")
    T = np.zeros((y.size, K))
    T[np.arange(y.size), y] = 1.0
    return T, K
