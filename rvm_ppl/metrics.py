"""Losses for probabilistic regression.

Losses of the predictive mean alone (squared, absolute error) are in
:mod:`sklearn.metrics` (``mean_squared_error``, ``mean_absolute_error``);
this module adds the loss of the whole Gaussian predictive distribution used
by Rasmussen & Quiñonero-Candela (2005, section 3), the negative log test
density, and a scorer for model selection with it.
"""

from __future__ import annotations

import numpy as np

__all__ = ["negative_log_predictive_density", "nlpd_score"]

_LOG_2PI = float(np.log(2.0 * np.pi))


def negative_log_predictive_density(y_true, mean, std):
    """Mean negative log density of the targets under Gaussian predictions.

    ``NLPD = (1/n) sum_i -log N(y_i | mean_i, std_i^2)``, the "negative log
    test density loss" of Rasmussen & Quiñonero-Candela (2005, Table 1).

    Parameters
    ----------
    y_true : array-like of shape (n_samples,)
    mean : array-like of shape (n_samples,)
        Predictive means.
    std : array-like of shape (n_samples,)
        Predictive standard deviations (noise included), all positive.

    Returns
    -------
    float

    Examples
    --------
    >>> round(negative_log_predictive_density([0.0], [0.0], [1.0]), 6)  # log(2 pi) / 2
    0.918939
    """
    y_true = np.asarray(y_true, dtype=float).ravel()
    mean = np.asarray(mean, dtype=float).ravel()
    std = np.asarray(std, dtype=float).ravel()
    if not (y_true.shape == mean.shape == std.shape):
        raise ValueError(
            f"y_true, mean and std must have the same length; got {y_true.size}, "
            f"{mean.size} and {std.size}."
        )
    if y_true.size == 0:
        raise ValueError("negative_log_predictive_density needs at least one target.")
    if not np.all(std > 0):
        raise ValueError("Every predictive standard deviation must be positive.")
    z = (y_true - mean) / std
    return float(np.mean(0.5 * _LOG_2PI + np.log(std) + 0.5 * z**2))


def nlpd_score(estimator, X, y, **predict_params):
    """Minus the NLPD of a fitted regressor: a scorer, greater is better.

    Usable as ``scoring=nlpd_score`` in :func:`sklearn.model_selection.cross_val_score`
    or ``GridSearchCV``. It calls ``estimator.predict(X, return_std=True,
    **predict_params)``; bind options with :func:`functools.partial`, e.g.
    ``partial(nlpd_score, augment=True)`` for RVM* predictions.

    Parameters
    ----------
    estimator : regressor
        Fitted, with ``predict(X, return_std=True)`` returning ``(mean, std)``
        (:class:`~rvm_ppl.RVR`, :class:`sklearn.gaussian_process.GaussianProcessRegressor`,
        :class:`sklearn.linear_model.BayesianRidge`, ...).
    X : array-like of shape (n_samples, n_features)
    y : array-like of shape (n_samples,)
    **predict_params
        Extra keyword arguments for ``predict``.

    Returns
    -------
    float
        ``-negative_log_predictive_density(y, mean, std)``.
    """
    mean, std = estimator.predict(X, return_std=True, **predict_params)
    return -negative_log_predictive_density(y, mean, std)
