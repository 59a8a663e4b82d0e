"""Data sets of the papers: Tipping's sinc, Friedman #1, Ripley, Pima, Boston.

The real data sets are shipped with the package (see
``rvm_ppl/datasets/data/README.md`` for their origin); the synthetic ones are
generated from their definitions in Tipping (2001), Appendix E.
"""

from __future__ import annotations

from importlib.resources import files

import numpy as np
from scipy.special import expit

__all__ = [
    "sinc", "make_sinc", "make_friedman1", "make_ripley", "ripley_proba", "load_ripley",
    "load_pima", "load_boston",
]

# Ripley (1994): each class an equal mixture of two Gaussians with covariance
# 0.03 I (class labels as in the shipped files synth.tr and synth.te).
_RIPLEY_MEANS = np.array([[[-0.7, 0.3], [0.3, 0.3]], [[-0.3, 0.7], [0.4, 0.7]]])
_RIPLEY_VAR = 0.03


def sinc(x):
    """Tipping's ``sinc(x) = sin(x) / x`` (``numpy.sinc`` is ``sin(pi x)/(pi x)``)."""
    return np.sinc(np.asarray(x, dtype=float) / np.pi)


def make_sinc(n_samples=100, *, noise="gaussian", noise_level=0.1, grid=True, random_state=None):
    """Tipping's sinc regression problem (Tipping 2001, §4.1 and Appendix E).

    Parameters
    ----------
    n_samples : int
    noise : {"gaussian", "uniform", None}
        Gaussian noise with standard deviation ``noise_level``, or uniform
        noise on ``[-noise_level, noise_level]``, or none.
    noise_level : float
    grid : bool
        Equally spaced inputs on ``[-10, 10]`` (the paper's design);
        otherwise uniform random inputs.
    random_state : int, Generator or None

    Returns
    -------
    X : ndarray of shape (n_samples, 1)
    y : ndarray of shape (n_samples,)

    Examples
    --------
    >>> X, y = make_sinc(5, noise=None)
    >>> X[:, 0].tolist()
    [-10.0, -5.0, 0.0, 5.0, 10.0]
    >>> round(float(y[2]), 6)
    1.0
    """
    rng = np.random.default_rng(random_state)
    if grid:
        x = np.linspace(-10, 10, n_samples)
    else:
        x = np.sort(rng.uniform(-10, 10, n_samples))
    y = sinc(x)
    if noise == "gaussian":
        y = y + noise_level * rng.standard_normal(n_samples)
    elif noise == "uniform":
        y = y + rng.uniform(-noise_level, noise_level, n_samples)
    elif noise is not None:
        raise ValueError(f"Unknown noise {noise!r}; expected 'gaussian', 'uniform' or None.")
    return x[:, None], y


def make_friedman1(n_samples=240, *, noise=1.0, random_state=None):
    """Friedman #1 with ten inputs, five of them irrelevant (Tipping 2001, eq. 62).

    ``y = 10 sin(pi x1 x2) + 20 (x3 - 1/2)^2 + 10 x4 + 5 x5 + noise`` with
    inputs uniform on the unit hypercube.

    Returns
    -------
    X : ndarray of shape (n_samples, 10)
    y : ndarray of shape (n_samples,)
    """
    rng = np.random.default_rng(random_state)
    X = rng.uniform(size=(n_samples, 10))
    f = (
        10 * np.sin(np.pi * X[:, 0] * X[:, 1])
        + 20 * (X[:, 2] - 0.5) ** 2
        + 10 * X[:, 3]
        + 5 * X[:, 4]
    )
    return X, f + noise * rng.standard_normal(n_samples)


def make_ripley(n_samples=250, *, random_state=None):
    """Draw from the distribution of Ripley's synthetic data.

    Classes 0 and 1 are equally likely; each is an equal mixture of two
    Gaussians with covariance ``0.03 I``, centred at (-0.7, 0.3) and
    (0.3, 0.3) for class 0 and at (-0.3, 0.7) and (0.4, 0.7) for class 1
    (Ripley 1994; the labels of :func:`load_ripley`). The Bayes rule
    (:func:`ripley_proba` > 1/2) errs on 8.0% of the shipped test set.

    Returns
    -------
    X : ndarray of shape (n_samples, 2)
    y : ndarray of shape (n_samples,), int in {0, 1}
    """
    rng = np.random.default_rng(random_state)
    y = rng.integers(0, 2, n_samples)
    component = rng.integers(0, 2, n_samples)
    noise = rng.standard_normal((n_samples, 2)) * np.sqrt(_RIPLEY_VAR)
    return _RIPLEY_MEANS[y, component] + noise, y


def ripley_proba(X):
    """True ``P(y = 1 | x)`` of Ripley's synthetic data (:func:`make_ripley`).

    Examples
    --------
    >>> X, y, Xt, yt = load_ripley()
    >>> float(np.mean((ripley_proba(Xt) > 0.5) != yt))
    0.08
    """
    X = np.asarray(X, dtype=float)
    # log of each class's mixture density, up to the same constant
    d2 = ((X[:, None, None, :] - _RIPLEY_MEANS[None]) ** 2).sum(axis=-1)
    log_dens = np.logaddexp(*np.moveaxis(-0.5 * d2 / _RIPLEY_VAR, -1, 0))
    return expit(log_dens[:, 1] - log_dens[:, 0])


def _load(name, skiprows=0):
    with files("rvm_ppl.datasets").joinpath("data").joinpath(name).open("r") as fh:
        return np.loadtxt(fh, skiprows=skiprows)


def load_ripley():
    """Ripley's synthetic two-class data: 250 training and 1000 test points.

    Returns
    -------
    X_train : ndarray of shape (250, 2)
    y_train : ndarray of shape (250,), int in {0, 1}
    X_test : ndarray of shape (1000, 2)
    y_test : ndarray of shape (1000,)

    Examples
    --------
    >>> X, y, Xt, yt = load_ripley()
    >>> X.shape, Xt.shape, int(y.sum()), int(yt.sum())
    ((250, 2), (1000, 2), 125, 500)
    """
    tr, te = _load("synth.tr", 1), _load("synth.te", 1)
    return tr[:, :2], tr[:, 2].astype(int), te[:, :2], te[:, 2].astype(int)


def load_pima():
    """Ripley's Pima Indians diabetes split: 200 training and 332 test cases.

    Inputs are ``npreg glu bp skin bmi ped age`` (unstandardised); labels are
    1 for diabetic and 0 otherwise.

    Examples
    --------
    >>> X, y, Xt, yt = load_pima()
    >>> X.shape, Xt.shape, int(y.sum()), int(yt.sum())
    ((200, 7), (332, 7), 68, 109)
    """
    tr, te = _load("pima.tr"), _load("pima.te")
    # The shipped files code 0 = diabetic; return 1 = diabetic.
    return tr[:, :7], 1 - tr[:, 7].astype(int), te[:, :7], 1 - te[:, 7].astype(int)


def load_boston():
    """Boston housing: 506 cases, 13 inputs, median house value (``MEDV``).

    Examples
    --------
    >>> X, y = load_boston()
    >>> X.shape, round(float(y.mean()), 3)
    ((506, 13), 22.533)
    """
    d = _load("housing.data")
    return d[:, :13], d[:, 13]



# Three classes, each an equal mixture of two isotropic Gaussians (a
# three-class relative of Ripley's data), for calibration checks.
_THREE_CLASS_MEANS = np.array(
    [
        [[-1.0, 0.6], [0.6, 1.4]],
        [[1.0, -0.6], [-0.6, -1.4]],
        [[0.1, 0.0], [1.6, 0.9]],
    ]
)
_THREE_CLASS_VAR = 0.3


def make_three_class(n_samples=300, *, random_state=None):
    """Draw a three-class problem whose class probabilities are known.

    Classes 0, 1, 2 are equally likely; each is an equal mixture of two
    Gaussians with covariance ``0.3 I`` (means in ``_THREE_CLASS_MEANS``).
    :func:`three_class_proba` gives the true ``P(y = k | x)``.

    Returns
    -------
    X : ndarray of shape (n_samples, 2)
    y : ndarray of shape (n_samples,), int in {0, 1, 2}
    """
    rng = np.random.default_rng(random_state)
    y = rng.integers(0, 3, n_samples)
    component = rng.integers(0, 2, n_samples)
    noise = rng.standard_normal((n_samples, 2)) * np.sqrt(_THREE_CLASS_VAR)
    return _THREE_CLASS_MEANS[y, component] + noise, y


def three_class_proba(X):
    """True ``P(y = k | x)`` of :func:`make_three_class`, shape (n, 3).

    Examples
    --------
    >>> p = three_class_proba(np.zeros((1, 2)))
    >>> p.shape, bool(np.isclose(p.sum(), 1.0))
    ((1, 3), True)
    """
    X = np.asarray(X, dtype=float)
    d2 = ((X[:, None, None, :] - _THREE_CLASS_MEANS[None]) ** 2).sum(axis=-1)
    log_dens = np.logaddexp(*np.moveaxis(-0.5 * d2 / _THREE_CLASS_VAR, -1, 0))
    log_dens -= log_dens.max(axis=1, keepdims=True)
    p = np.exp(log_dens)
    return p / p.sum(axis=1, keepdims=True)
