"""scikit-learn estimators: relevance vector regression (RVR).

The estimator validates the data, turns the kernel into a design matrix,
hands it to :func:`rvm_ppl.inference.fit` and stores what came back. It is
the only stateful object in the package.
"""

from __future__ import annotations

from numbers import Integral, Real

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin, _fit_context
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted, validate_data

from ._basis import DenseBasis, kernel_basis
from .inference import _FIT_METHODS
from .inference import fit as _fit
from .kernels import KERNEL_NAMES, Kernel, basis_labels, make_kernel

# Above this many design-matrix entries (N x M) the evidence method evaluates
# kernel columns on demand instead of storing the matrix (200 MB of float64).
DENSE_LIMIT = 25_000_000


class _RVMBase(BaseEstimator):
    """Shared parameters, design matrices and fitted attributes."""

    _parameter_constraints: dict = {
        "kernel": [StrOptions(set(KERNEL_NAMES)), Kernel, callable],
        "gamma": [StrOptions({"scale"}), Interval(Real, 0, None, closed="left"), "array-like"],
        "degree": [Interval(Integral, 0, None, closed="left")],
        "coef0": [Real],
        "method": [StrOptions(set(_FIT_METHODS))],
        "fit_intercept": ["boolean"],
        "priors": [dict, None],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "tol": [Interval(Real, 0, None, closed="neither")],
        "alignment_test": ["boolean"],
        "solver": [StrOptions({"fast", "full"})],
        "draws": [Interval(Integral, 1, None, closed="left")],
        "tune": [Interval(Integral, 0, None, closed="left")],
        "chains": [Interval(Integral, 1, None, closed="left")],
        "random_state": ["random_state"],
        "sample_kwargs": [dict, None],
    }

    # -- design matrices -------------------------------------------------
    def _make_kernel(self, X):
        gamma = self.gamma
        if isinstance(gamma, str):  # "scale", as in sklearn.svm.SVR
            var = X.var()
            gamma = 1.0 / (X.shape[1] * var) if var > 0 else 1.0
        elif np.any(np.asarray(gamma, dtype=float) < 0):
            raise ValueError(f"gamma must be non-negative; got {self.gamma!r}.")
        return make_kernel(self.kernel, gamma=gamma, degree=self.degree, coef0=self.coef0)

    def _training_basis(self, X, lazy_ok):
        """Candidate basis on the training inputs and its labels."""
        bias = self.fit_intercept
        if self.kernel_ is None:  # precomputed: X is the design matrix
            Phi = np.hstack([np.ones((X.shape[0], 1)), X]) if bias else X
            labels = (["bias"] if bias else []) + [f"phi_{j}" for j in range(X.shape[1])]
            return DenseBasis(Phi), labels
        labels = basis_labels(X.shape[0], bias=bias)
        if lazy_ok and X.shape[0] * (X.shape[0] + bias) > DENSE_LIMIT:
            return kernel_basis(self.kernel_, X, bias=bias), labels
        K = self.kernel_(X, X)
        Phi = np.hstack([np.ones((X.shape[0], 1)), K]) if bias else K
        return DenseBasis(Phi), labels

    def _design(self, X, support):
        """Columns ``support`` of the design matrix at new inputs ``X``."""
        support = np.asarray(support, dtype=int)
        Phi = np.empty((X.shape[0], support.size))
        bias = int(self.fit_intercept)
        is_bias = support < bias
        Phi[:, is_bias] = 1.0
        cols = support[~is_bias] - bias
        if cols.size:
            if self.kernel_ is None:
                Phi[:, ~is_bias] = X[:, cols]
            else:
                Phi[:, ~is_bias] = self.kernel_(X, self.X_fit_[cols])
        return Phi

    def _store(self, post, X):
        """Fitted attributes from a :class:`~rvm_ppl.inference.Posterior`."""
        M = len(post.alpha)
        self.posterior_ = post
        self.active_ = post.support
        self.coef_ = np.zeros(M)
        self.coef_[post.support] = post.mean
        self.sigma_ = post.cov
        self.alpha_ = post.alpha
        bias = int(self.fit_intercept)
        rel = np.flatnonzero(post.relevant)
        self.relevance_ = rel[rel >= bias] - bias
        self.relevance_vectors_ = None if self.kernel_ is None else X[self.relevance_]
        self.n_iter_ = post.info.get("n_iter")
        if "log_evidence" in post.info:
            self.log_evidence_ = post.info["log_evidence"]

    @property
    def idata_(self):
        """The fit as :class:`arviz.InferenceData` (built on first access)."""
        check_is_fitted(self, "posterior_")
        if getattr(self, "_idata", None) is None:
            self._idata = self.posterior_.idata_factory()
        return self._idata


class RVR(RegressorMixin, _RVMBase):
    """Relevance vector regression (Tipping 2001).

    The model is ``t = Phi w + noise`` with one Gaussian prior precision
    ``alpha_m`` per weight, Gamma hyperpriors on every ``alpha_m`` and on
    the noise precision ``beta``, and, by default, one Gaussian basis
    function centred on each training input plus a bias.

    Parameters
    ----------
    kernel : {"rbf", "linear_spline", "poly", "linear", "precomputed"}, Kernel or callable
        Basis functions ``phi_m(x) = k(x, x_m)``. With ``"precomputed"``,
        ``X`` is the design matrix itself (any basis set, one column per
        basis function) in both ``fit`` and ``predict``.
    gamma : float, array-like or "scale"
        RBF/polynomial scale; ``k(x, y) = exp(-gamma ||x - y||^2)``, i.e.
        ``gamma = 1 / r^2`` for Tipping's width ``r``. ``"scale"`` uses
        ``1 / (n_features * X.var())`` as :class:`sklearn.svm.SVR` does.
    degree, coef0 : int, float
        Polynomial kernel ``(gamma x.y + coef0)^degree``.
    method : {"evidence", "vb", "advi", "nuts"}
        Fitting method; the ``method`` argument of :meth:`fit` wins.
    fit_intercept : bool
        Add a bias basis function (with its own ``alpha``, as in the paper).
    noise_std : float, optional
        Initial noise standard deviation for the evidence method, or the
        fixed one when ``fit_noise=False``. Default ``0.1 * std(y)``.
    fit_noise : bool
        Re-estimate the noise (evidence method).
    priors : dict, optional
        Gamma hyperprior parameters ``a, b`` (weight precisions) and ``c, d``
        (noise precision), shape and rate, for targets divided by their
        standard deviation. Default :data:`rvm_ppl.model.DEFAULT_PRIORS`.
        The evidence method maximises the evidence (``a = b = c = d = 0``).
    max_iter, tol : int, float
        Iteration cap and convergence tolerance of the evidence method
        (change in ``log alpha``).
    alignment_test : bool
        Skip candidate basis functions that nearly duplicate one already in
        the model (evidence method, fast solver).
    solver : {"fast", "full"}
        Evidence method only: the fast sequential algorithm of Tipping & Faul
        (2003), which starts from the bias and adds, re-estimates or deletes
        one basis function at a time and never forms the ``N x N`` kernel
        matrix for large ``N``; or Tipping's (2001) original algorithm, which
        re-estimates every ``alpha`` at once from the full model at
        ``O(N^3)`` per iteration. Both maximise the same evidence and may
        stop at different local maxima.
    draws, tune, chains : int
        Posterior draws kept (all methods), tuning steps and chains (nuts).
    random_state : int, RandomState or None
        Seeds every random draw.
    sample_kwargs : dict, optional
        Extra keyword arguments for the sampler or optimiser.

    Attributes
    ----------
    kernel_ : Kernel or None
        The kernel used (``None`` when precomputed).
    X_fit_ : ndarray of shape (n_samples, n_features)
        Training inputs (the centres of the basis functions).
    coef_ : ndarray of shape (n_basis,)
        Posterior mean of every weight (``mu`` of Tipping 2001, eq. 13);
        exactly 0 for pruned basis functions. Index 0 is the bias.
    sigma_ : ndarray of shape (n_active, n_active)
        Posterior covariance of the weights in ``active_``.
    active_ : ndarray of int
        Basis indices with non-zero weight.
    alpha_ : ndarray of shape (n_basis,)
        Tipping's weight precisions (``inf`` where pruned). Note:
        :class:`sklearn.linear_model.ARDRegression` calls the noise
        precision ``alpha_`` and the weight precisions ``lambda_``; here
        ``alpha_`` is Tipping's alpha and ``beta_`` the noise precision.
    beta_ : float
        Noise precision ``1 / sigma^2``.
    relevance_ : ndarray of int
        Indices of the training points whose basis function is relevant.
    relevance_vectors_ : ndarray
        ``X[relevance_]``.
    log_evidence_ : float
        Log marginal likelihood at the optimum (evidence method).
    idata_ : arviz.InferenceData
        Posterior of ``w``, ``alpha``, ``beta`` on dimension ``basis``.
    n_iter_ : int

    Notes
    -----
    ===========================  ==================================
    Tipping (2001)               rvm_ppl
    ===========================  ==================================
    Phi (N x M design matrix)    design matrix, ``basis`` dimension
    alpha_i (weight precision)   ``alpha_``, PyMC ``alpha``
    beta = sigma^-2              ``beta_``, PyMC ``beta``
    mu, Sigma                    ``coef_``, ``sigma_``
    gamma_i = 1 - alpha_i S_ii   relevance rule of vb/advi/nuts
    a, b, c, d                   ``priors``
    ===========================  ==================================

    References
    ----------
    M. E. Tipping. Sparse Bayesian learning and the relevance vector
    machine. JMLR 1:211-244, 2001.
    M. E. Tipping and A. C. Faul. Fast marginal likelihood maximisation for
    sparse Bayesian models. AISTATS 2003.

    Examples
    --------
    >>> from rvm_ppl import RVR
    >>> from rvm_ppl.datasets import make_sinc
    >>> X, y = make_sinc(100, random_state=0)
    >>> m = RVR(gamma=1 / 9).fit(X, y)
    >>> len(m.relevance_) < 12
    True
    >>> mean, std = m.predict(X[:3], return_std=True)
    >>> bool((std > 0).all())
    True
    """

    _parameter_constraints: dict = {
        **_RVMBase._parameter_constraints,
        "noise_std": [Interval(Real, 0, None, closed="neither"), None],
        "fit_noise": ["boolean"],
    }

    def __init__(
        self,
        kernel="rbf",
        *,
        gamma="scale",
        degree=3,
        coef0=1.0,
        method="evidence",
        fit_intercept=True,
        noise_std=None,
        fit_noise=True,
        priors=None,
        max_iter=10_000,
        tol=1e-3,
        alignment_test=True,
        solver="fast",
        draws=1000,
        tune=1000,
        chains=2,
        random_state=None,
        sample_kwargs=None,
    ):
        self.kernel = kernel
        self.gamma = gamma
        self.degree = degree
        self.coef0 = coef0
        self.method = method
        self.fit_intercept = fit_intercept
        self.noise_std = noise_std
        self.fit_noise = fit_noise
        self.priors = priors
        self.max_iter = max_iter
        self.tol = tol
        self.alignment_test = alignment_test
        self.solver = solver
        self.draws = draws
        self.tune = tune
        self.chains = chains
        self.random_state = random_state
        self.sample_kwargs = sample_kwargs

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y, method=None):
        """Fit the relevance vector machine.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,)
        method : {"evidence", "vb", "advi", "nuts"}, optional
            Overrides the constructor's ``method``.

        Returns
        -------
        self : RVR
        """
        method = self.method if method is None else method
        if method not in _FIT_METHODS:
            raise ValueError(f"Unknown method {method!r}; expected one of {sorted(_FIT_METHODS)}.")
        X, y = validate_data(self, X, y, dtype=np.float64, y_numeric=True, ensure_min_samples=2)
        if np.ptp(y) == 0:
            raise ValueError("y is constant; a regression model needs targets that vary.")
        self.kernel_ = self._make_kernel(X)
        self.X_fit_ = X
        self._idata = None
        basis, labels = self._training_basis(
            X, lazy_ok=(method == "evidence" and self.solver == "fast")
        )
        options = {
            "max_iter": self.max_iter,
            "tol": self.tol,
            "alignment_test": self.alignment_test,
            "solver": self.solver,
            "draws": self.draws,
            "tune": self.tune,
            "chains": self.chains,
            "priors": self.priors,
            "fixed_beta": not self.fit_noise,
            "beta": None if self.noise_std is None else 1.0 / self.noise_std**2,
            "start": 0 if self.fit_intercept else None,
            **(self.sample_kwargs or {}),
        }
        post = _fit(
            basis, y, method=method, labels=labels, likelihood="gaussian",
            options=options, random_state=self.random_state,
            attrs={"kernel": repr(self.kernel_), "estimator": type(self).__name__},
        )
        self._store(post, X)
        self.beta_ = post.beta
        self.method_ = method
        return self

    def predict(self, X, return_std=False):
        """Predictive mean (and standard deviation) at ``X``.

        Tipping (2001) eqs. (21)-(22): mean ``phi(x)^T mu`` and variance
        ``1/beta + phi(x)^T Sigma phi(x)``, with the bias inside ``Sigma``.
        For vb, advi and nuts the same formula holds with the posterior
        moments of ``w`` and ``E[1/beta]``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        return_std : bool

        Returns
        -------
        mean : ndarray of shape (n_samples,)
        std : ndarray of shape (n_samples,), if ``return_std``
        """
        check_is_fitted(self, "posterior_")
        X = validate_data(self, X, dtype=np.float64, reset=False)
        post = self.posterior_
        Phi = self._design(X, post.support)
        mean = Phi @ post.mean
        if not return_std:
            return mean
        var = post.noise_var + np.einsum("ij,jk,ik->i", Phi, post.cov, Phi)
        return mean, np.sqrt(var)
