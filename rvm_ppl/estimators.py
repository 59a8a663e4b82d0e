"""scikit-learn estimators: relevance vector regression (RVR) and classification (RVC).

The path from ``RVR.fit`` to ``idata_``: :meth:`RVR.fit` validates the data
and builds the candidate basis (:meth:`_RVMBase._training_basis`), then
:func:`rvm_ppl.inference.fit` runs the method's fitter from its table and
returns a :class:`~rvm_ppl.inference.FitResult` in the units of ``y``; the
estimator stores it (``result_``) and its fitted attributes in one step.
``idata_`` is :func:`rvm_ppl._idata.to_idata` of that result, built on first
access. The estimator is the only stateful object in the package, and a
``fit`` that fails leaves it as it was.
"""

from __future__ import annotations

import functools
import json
from numbers import Integral, Real
from types import SimpleNamespace

import numpy as np
from scipy.special import expit, softmax
from sklearn import config_context, get_config
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin, clone
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from ._basis import DenseBasis, LowRankKernelBasis, kernel_basis
from ._idata import multinomial_idata, ovr_idata, to_idata
from ._linalg import blas_limit
from .augment import rvm_star_predict
from .evidence_laplace import predict_proba_moderated
from .evidence_multinomial import fit_evidence_multinomial, predict_proba_multinomial
from .inference import (
    _FIT_METHODS,
    DEFAULT_MAX_ITER,
    DEFAULT_TOL,
    FitResult,
    fit_evidence_scales,
    multinomial_evidence_results,
)
from .inference import fit as _fit
from .kernels import KERNEL_NAMES, RBF, Kernel, basis_labels, make_kernel
from .scales import (
    SCHEDULES,
    extended_basis_labels,
    extended_design_columns,
    extended_design_matrix,
    extra_columns,
)

# Above this many design-matrix entries (N x M) the evidence method evaluates
# kernel columns on demand instead of storing the matrix (200 MB of float64).
DENSE_LIMIT = 25_000_000
# Largest N at which RVR's fast evidence fit uses the dense kernel matrix, run by
# the compiled engine, even when a low-rank factor exists: warm fits on noisy sinc
# (median of 3 seeds, ms) dense/low-rank: N = 1000 15.0/29.1, 1500 27.7/20.7,
# 2000 68.5/31.1 (one BLAS thread, fastest of 3 fits in one process).
COMPILED_DENSE_MAX_N = 1000


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
        "max_iter": [Interval(Integral, 1, None, closed="left"), None],
        "tol": [Interval(Real, 0, None, closed="neither"), None],
        "alignment_test": ["boolean"],
        "solver": [StrOptions({"fast", "full"})],
        "draws": [Interval(Integral, 1, None, closed="left")],
        "tune": [Interval(Integral, 0, None, closed="left")],
        "chains": [Interval(Integral, 1, None, closed="left")],
        "random_state": ["random_state"],
        "sample_kwargs": [dict, None],
        "blas_threads": [Interval(Integral, 1, None, closed="left"), None],
        "progressbar": ["boolean"],
    }

    # -- design matrices -------------------------------------------------
    def _make_kernel(self, X):
        """A fresh kernel for this fit: changing ``kernel`` later leaves ``kernel_`` alone."""
        gamma = self.gamma
        if isinstance(gamma, str):  # "scale", as in sklearn.svm.SVR
            with np.errstate(over="ignore"):
                var = X.var()
            if not np.isfinite(var):
                raise ValueError("gamma='scale' needs the variance of X, which overflows float64; "
                                 "rescale X (for example with StandardScaler).")
            gamma = 1.0 / (X.shape[1] * var) if var > 0 else 1.0
        elif np.any(np.asarray(gamma, dtype=float) < 0):
            raise ValueError(f"gamma must be non-negative; got {self.gamma!r}.")
        kernel = make_kernel(self.kernel, gamma=gamma, degree=self.degree, coef0=self.coef0)
        # Only the user's own Kernel instance needs a copy; a named kernel is new.
        return clone(kernel, safe=False) if kernel is self.kernel and kernel is not None else kernel

    def _training_basis(self, X, kernel, lazy_ok):
        """Candidate basis on the training inputs, its labels and the number of extra columns."""
        bias = self.fit_intercept
        extra = getattr(self, "extra_basis", None)
        if kernel is None:  # precomputed: X is the design matrix
            if extra is not None:
                raise ValueError("extra_basis cannot be combined with kernel='precomputed'; "
                                 "add the columns to X.")
            Phi = np.hstack([np.ones((X.shape[0], 1)), X]) if bias else X
            labels = (["bias"] if bias else []) + [f"phi_{j}" for j in range(X.shape[1])]
            return DenseBasis(Phi), labels, 0
        if extra is not None:
            n_extra = extra_columns(extra, X).shape[1]
            Phi = _finite(extended_design_matrix(X, X, kernel, bias=bias, extra_basis=extra),
                          "extra_basis and the kernel")
            return DenseBasis(Phi), extended_basis_labels(X.shape[0], bias=bias,
                                                          extra_names=n_extra), n_extra
        labels = basis_labels(X.shape[0], bias=bias)
        if lazy_ok:
            # Columns are computed on demand; check a block of them here. A
            # low-rank factor is used at any N where it reproduces the kernel
            # (2-3x faster than the dense matrix at N = 1 000-2 000); blocked
            # exact columns only where the dense matrix would be too large.
            _finite(kernel(X[:64], X), kernel)
            lazy = kernel_basis(kernel, X, bias=bias)
            if isinstance(lazy, LowRankKernelBasis) or X.shape[0] * (X.shape[0] + bias) > DENSE_LIMIT:
                return lazy, labels, 0
        K = _finite(kernel(X, X), kernel)
        Phi = np.hstack([np.ones((X.shape[0], 1)), K]) if bias else K
        return DenseBasis(Phi), labels, 0

    def _design(self, X, support):
        """Columns ``support`` of the design matrix at new inputs ``X``."""
        support = np.asarray(support, dtype=int)
        if self.n_extra_:
            return extended_design_columns(
                X, support, centres=self.X_fit_, kernel=self.kernel_, n_extra=self.n_extra_,
                bias=self.fit_intercept, extra_basis=self.extra_basis,
            )
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

    def _check_method(self, method):
        method = self.method if method is None else method
        if method not in _FIT_METHODS:
            raise ValueError(f"Unknown method {method!r}; expected one of {sorted(_FIT_METHODS)}.")
        return method

    def _fit_result(self, method, basis, y, *, labels, likelihood, start=None, beta=None,
                    fit_beta=True, model_kw=None):
        """Run ``method``'s fitter with this estimator's parameters.

        ``model_kw`` goes to :func:`rvm_ppl.model.build_model` (advi, nuts).
        """
        kwargs = dict(labels=labels, likelihood=likelihood, priors=self.priors)
        max_iter = self.max_iter or DEFAULT_MAX_ITER.get(method)
        tol = self.tol or DEFAULT_TOL.get(method)
        if method == "evidence":
            kwargs.update(max_iter=max_iter, tol=tol, solver=getattr(self, "solver", "fast"),
                          alignment_test=self.alignment_test, start=start, beta=beta,
                          fit_beta=fit_beta, progressbar=self.progressbar)
        elif method == "vb":
            kwargs.update(max_iter=max_iter, tol=tol, progressbar=self.progressbar)
        else:
            kwargs.update(draws=self.draws, random_state=_seed(self.random_state),
                          sample_kwargs={"progressbar": self.progressbar, **self._sample_kwargs()},
                          model_kw=model_kw)
            if method == "advi":
                kwargs.update(max_iter=max_iter, tol=tol)
            else:
                kwargs.update(tune=self.tune, chains=self.chains)
        return _fit(method, basis, y, blas_threads=self.blas_threads, **kwargs)

    def _sample_kwargs(self):
        """``sample_kwargs`` for PyMC, refusing keys that the estimator sets itself."""
        extra = dict(self.sample_kwargs or {})
        # random_seed is random_state; n and n_iter are max_iter.
        taken = set(self.get_params(deep=False)) | {"random_seed", "n", "n_iter", "model"}
        clash = sorted(set(extra) & taken)
        if clash:
            raise ValueError(
                f"sample_kwargs sets {clash}, which the estimator sets from its own parameters; "
                "set them on the estimator instead (random_seed is random_state, n and n_iter "
                "are max_iter)."
            )
        return extra

    def _set_fitted(self, *, X, kernel, n_extra, method, results):
        """Fitted attributes shared by RVR and RVC, all set together."""
        self.kernel_ = kernel
        self.X_fit_ = X
        self.n_extra_ = n_extra
        self.method_ = method
        self._idata = None
        offset = int(self.fit_intercept) + n_extra
        rel = np.flatnonzero(np.any([r.relevant for r in results], axis=0))
        self.relevance_ = rel[rel >= offset] - offset
        self.relevance_vectors_ = None if kernel is None else X[self.relevance_]

    def _outside_var(self, result, X):
        """``sum_m phi_m(x)^2 v_m`` over the weights outside the model that are not point masses."""
        if result.outside_var is None:
            return 0.0
        idx = np.flatnonzero(result.outside_var > 0)
        out = np.zeros(X.shape[0])
        for cols in np.array_split(idx, max(1, idx.size // 2048)):  # bounded memory
            if cols.size:
                out += self._design(X, cols) ** 2 @ result.outside_var[cols]
        return out

    def _idata_attrs(self):
        return {"kernel": repr(self.kernel_), "estimator": type(self).__name__}

    def to_netcdf(self, path):
        """Save the fitted estimator: its InferenceData plus what prediction needs.

        Parameters
        ----------
        path : str or path-like

        Examples
        --------
        >>> import tempfile, os
        >>> from rvm_ppl import RVR
        >>> from rvm_ppl.datasets import make_sinc
        >>> X, y = make_sinc(30, random_state=0)
        >>> m = RVR(gamma=0.1, draws=10).fit(X, y)
        >>> path = os.path.join(tempfile.mkdtemp(), "rvr.nc")
        >>> m.to_netcdf(path)
        >>> bool((RVR.from_netcdf(path).predict(X) == m.predict(X)).all())
        True
        """
        from ._persist import save

        check_is_fitted(self, "X_fit_")
        save(self, path)

    @classmethod
    def from_netcdf(cls, path):
        """Load an estimator written by :meth:`to_netcdf`.

        Parameters
        ----------
        path : str or path-like

        Returns
        -------
        estimator
        """
        from ._persist import load

        return load(cls, path)


def _finite(Phi, what):
    """``Phi`` if it is finite, else a ValueError that names where it came from.

    ``what`` is a string, or a kernel (named as "the kernel <repr>" only when the check
    fails: a scikit-learn ``repr`` costs a tenth of a millisecond).
    """
    if not np.isfinite(Phi).all():
        if not isinstance(what, str):
            what = f"the kernel {what!r}"
        raise ValueError(f"The design matrix from {what} has NaN or infinite entries; "
                         "check the kernel and its parameters.")
    return Phi


def _seed(random_state):
    """An int seed (or None) from scikit-learn's ``random_state`` conventions."""
    if random_state is None or isinstance(random_state, Integral):
        return random_state
    return int(check_random_state(random_state).randint(2**31 - 1))


def _atomic(fit):
    """Make ``fit`` all or nothing: on any error the estimator is restored as it was.

    The constructor parameters are checked against ``_parameter_constraints``
    first (unless scikit-learn's ``skip_parameter_validation`` is set), and the
    fit runs with nested validation skipped: what ``sklearn.base._fit_context``
    does for an estimator that takes no scikit-learn callbacks, without
    importing the callback machinery (40-50 ms on a process's first fit).
    """

    @functools.wraps(fit)
    def wrapper(self, *args, **kwargs):
        saved = dict(self.__dict__)
        try:
            if not get_config()["skip_parameter_validation"]:
                self._validate_params()
            with config_context(skip_parameter_validation=True):
                return fit(self, *args, **kwargs)
        except BaseException:
            self.__dict__.clear()
            self.__dict__.update(saved)
            raise

    return wrapper


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
        standard deviation. vb, advi and nuts default to
        :data:`rvm_ppl.model.DEFAULT_PRIORS` (all 1e-6). The evidence method
        without ``priors`` maximises the evidence itself, the limit
        ``a = b = c = d -> 0`` of the same model (with the default 1e-6 it
        finds the same basis set, about ten times more slowly for large N);
        given ``priors``, it maximises the posterior of ``log alpha`` and
        ``log beta`` (Tipping 2001, App. A).
    max_iter, tol : int, float or None
        Iteration cap and convergence tolerance of the method; None takes
        the method's own (:data:`rvm_ppl.inference.DEFAULT_MAX_ITER`,
        :data:`~rvm_ppl.inference.DEFAULT_TOL`): evidence 10 000 and 1e-3
        (change in ``log alpha``), vb 5 000 and 1e-7 (relative change of the
        bound), advi 50 000 and 1e-2 (change of the windowed median loss in
        nats per observation). nuts takes ``draws`` and ``tune`` instead.
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
        Posterior draws kept per chain (all methods), tuning steps and
        chains (nuts). Four chains by default: r-hat <= 1.01 (Vehtari et
        al. 2021) presumes them; with two, one of 202 r-hats on a Ripley
        classifier exceeded 1.01 by chance in 2 of 10 runs.
    random_state : int, RandomState or None
        Seeds every random draw.
    sample_kwargs : dict, optional
        Keyword arguments for PyMC: :func:`rvm_ppl.sampling.fit_nuts` and
        :func:`pymc.sample` (nuts; e.g. ``target_accept``, or
        ``nuts_sampler="pymc"`` instead of nutpie), :func:`rvm_ppl.sampling.fit_advi` and
        :func:`pymc.fit` (advi; e.g. ``learning_rate``). Unused by evidence
        and vb. A key the estimator sets from its own parameters (``draws``,
        ``chains``, ``random_seed``, ``n``, ...) is a ``ValueError``.
    blas_threads : int or None
        BLAS threads during ``fit`` (default 1, the fastest setting measured
        on 2-core machines; ``None`` leaves the BLAS library's default).
    progressbar : bool
        Show the sampler's progress bars while nuts runs (as :func:`pymc.sample`
        does), a bar for advi that ends when its convergence test stops it,
        and for evidence and vb a line (iteration, basis functions,
        objective) on standard error once a fit has run two seconds; they
        take under a second up to tens of thousands of points.
    extra_basis : callable, optional
        ``extra_basis(X) -> (n, p)`` array of further basis functions placed
        next to the kernel columns, each with its own ``alpha`` (Tipping
        2001, §4.3: e.g. the raw inputs and their squares). Their labels are
        ``"extra_0"``, ... in ``idata_``.
    learn_scales : bool
        Learn one Gaussian-kernel scale per input (``eta``, Tipping 2001,
        App. C) by maximising the evidence, interleaved with the ``alpha``
        updates (:func:`rvm_ppl.scales.fit_eta_rvm`); needs
        ``kernel="rbf"`` and ``method="evidence"``. ``gamma`` is the start.
    scale_schedule : {"refine", "grow"}
        How the scale learning starts: from the converged fixed-width fit
        (``"refine"``) or from the bias alone (``"grow"``).

    Attributes
    ----------
    kernel_ : Kernel or None
        The kernel used (``None`` when precomputed).
    X_fit_ : ndarray of shape (n_samples, n_features)
        Training inputs (the centres of the basis functions).
    y_fit_ : ndarray of shape (n_samples,)
        Training targets (used by RVM* predictions).
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
    eta_ : ndarray of shape (n_features,)
        Learned input scales (``learn_scales=True``); ``kernel_`` is
        ``RBF(gamma=eta_)``.
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
        "extra_basis": [callable, None],
        "learn_scales": ["boolean"],
        "scale_schedule": [StrOptions(set(SCHEDULES))],
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
        max_iter=None,
        tol=None,
        alignment_test=True,
        solver="fast",
        draws=1000,
        tune=1000,
        chains=4,
        random_state=None,
        sample_kwargs=None,
        blas_threads=1,
        progressbar=True,
        extra_basis=None,
        learn_scales=False,
        scale_schedule="refine",
    ):
        self.kernel = kernel
        self.gamma = gamma
        self.degree = degree
        self.coef0 = coef0
        self.method = method
        self.fit_intercept = fit_intercept
        self.extra_basis = extra_basis
        self.learn_scales = learn_scales
        self.scale_schedule = scale_schedule
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
        self.blas_threads = blas_threads
        self.progressbar = progressbar

    @_atomic
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
        method = self._check_method(method)
        X, y = validate_data(self, X, y, dtype=np.float64, y_numeric=True, ensure_min_samples=2)
        y = y.astype(np.float64, copy=False)  # y_numeric keeps integer and boolean targets
        if np.ptp(y) == 0:
            return self._fit_constant(X, y, method)
        kernel = self._make_kernel(X)
        if self.learn_scales and (method != "evidence" or not isinstance(kernel, RBF)):
            raise ValueError("learn_scales=True needs method='evidence' and the 'rbf' kernel.")
        fast = method == "evidence" and self.solver == "fast"
        # Up to COMPILED_DENSE_MAX_N the compiled engine on the exact dense
        # matrix is fastest; above it a low-rank factor, where one exists.
        compiled = fast and self.priors is None and X.shape[0] <= COMPILED_DENSE_MAX_N
        basis, labels, n_extra = self._training_basis(
            X, kernel, lazy_ok=method == "vb" or (fast and not compiled))
        beta = None if self.noise_std is None else 1.0 / self.noise_std**2
        if self.learn_scales:
            eta0 = np.broadcast_to(np.asarray(kernel.gamma, dtype=float), (X.shape[1],)).copy()
            result, eta, history = fit_evidence_scales(
                X, y, labels=labels, priors=self.priors,
                max_iter=self.max_iter or DEFAULT_MAX_ITER["evidence"],
                tol=self.tol or DEFAULT_TOL["evidence"], alignment_test=self.alignment_test,
                beta=beta, eta0=eta0, bias=self.fit_intercept, extra_basis=self.extra_basis,
                schedule=self.scale_schedule, progressbar=self.progressbar,
            )
            kernel = RBF(gamma=eta)
            self.eta_, self.scale_history_ = eta, history
        else:
            for name in ("eta_", "scale_history_"):
                self.__dict__.pop(name, None)
            # Start from the bias; without one, from the best-aligned column.
            result = self._fit_result(
                method, basis, y, labels=labels, likelihood="gaussian",
                start=0 if self.fit_intercept else None, beta=beta, fit_beta=self.fit_noise,
            )
        self._store(X, y, kernel, n_extra, method, result)
        return self

    def _fit_constant(self, X, y, method):
        """Constant targets: the bias alone, predicting the constant with no noise left."""
        if not self.fit_intercept:
            raise ValueError("y is constant and fit_intercept=False: no basis can fit it.")
        kernel = self._make_kernel(X)
        labels = (basis_labels(X.shape[0], bias=True) if kernel is not None
                  else ["bias"] + [f"phi_{j}" for j in range(X.shape[1])])
        M = len(labels)
        alpha = np.full(M, np.inf)
        alpha[0] = 1.0 / y[0] ** 2 if y[0] != 0 else np.inf
        support = np.array([0]) if y[0] != 0 else np.array([], dtype=int)
        result = FitResult(
            method=method, likelihood="gaussian", basis=tuple(labels), support=support,
            mean=np.full(len(support), y[0]), cov=np.zeros((len(support), len(support))),
            alpha=alpha, beta=np.inf, noise_var=0.0, gamma=np.isfinite(alpha).astype(float),
            relevant=np.isfinite(alpha), stats={"n_iter": 0, "converged": 1},
        )
        self._store(X, y, kernel, 0, method, result)
        return self

    def _store(self, X, y, kernel, n_extra, method, result):
        self._set_fitted(X=X, kernel=kernel, n_extra=n_extra, method=method, results=[result])
        self.y_fit_ = y
        self.result_ = result
        self.active_ = result.support
        self.coef_ = np.zeros(len(result.alpha))
        self.coef_[result.support] = result.mean
        self.sigma_ = result.cov
        self.alpha_ = result.alpha
        self.beta_ = result.beta
        self.n_iter_ = result.stats.get("n_iter")
        if "log_evidence" in result.stats:
            self.log_evidence_ = result.stats["log_evidence"]
        elif hasattr(self, "log_evidence_"):
            del self.log_evidence_

    @property
    def idata_(self):
        """The fit as :class:`arviz.InferenceData` (:mod:`rvm_ppl._idata`; built on first access)."""
        check_is_fitted(self, "result_")
        if getattr(self, "_idata", None) is None:
            r = self.result_
            self._idata = to_idata(
                r, y=self.y_fit_, Phi=self._design(self.X_fit_, r.support),
                X=self.X_fit_ if self.kernel_ is not None else None, chains=self.chains,
                draws=self.draws, random_state=_seed(self.random_state),
                attrs=self._idata_attrs(),
            )
        return self._idata

    def predict(self, X, return_std=False, augment=False):
        """Predictive mean (and standard deviation) at ``X``.

        Tipping (2001) eqs. (21)-(22): mean ``phi(x)^T mu`` and variance
        ``1/beta + phi(x)^T Sigma phi(x)``, with the bias inside ``Sigma``.
        For vb, advi and nuts the same formula holds with the posterior
        moments of ``w`` and ``E[1/beta]``; vb adds ``sum_m phi_m(x)^2 v_m``
        for the independent ``N(0, v_m)`` factors of the weights it left out
        of its model.

        With ``augment=True``, the RVM* of Rasmussen & Quiñonero-Candela
        (2005): each test point gets a basis function of its own, centred on
        it, with prior variance ``var(y)`` (their eqs. 5-7), so that the
        predictive variance grows away from the data instead of shrinking to
        the noise level. It costs ``O(N M)`` per test point.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        return_std : bool
        augment : bool

        Returns
        -------
        mean : ndarray of shape (n_samples,)
        std : ndarray of shape (n_samples,), if ``return_std``
        """
        check_is_fitted(self, "result_")
        X = validate_data(self, X, dtype=np.float64, reset=False)
        if augment:
            mean, std = rvm_star_predict(self, X)
            return (mean, std) if return_std else mean
        post = self.result_
        mean, var = post.latent_moments(self._design(X, post.support))
        if not return_std:
            return mean
        return mean, np.sqrt(post.noise_var + var + self._outside_var(post, X))


class RVC(ClassifierMixin, _RVMBase):
    """Relevance vector classification (Tipping 2001, §3).

    A Bernoulli likelihood with a logistic link on ``Phi w`` and the same
    hierarchical prior as :class:`RVR`. Two classes are modelled directly;
    ``K > 2`` classes, by default, by ``K`` one-vs-rest binary models whose
    probabilities are normalised to sum to one (each binary model sees the
    same inputs and basis; a class's relevance vectors are those of its own
    model, and ``relevance_`` is their union), or with
    ``multi_class="multinomial"`` by one softmax model (Tipping 2001,
    eq. 28) with a weight vector per class. Either way the fitted attributes
    hold one entry per class (per model).

    Parameters
    ----------
    kernel, gamma, degree, coef0, method, fit_intercept, max_iter, tol, \
alignment_test, draws, tune, chains, random_state, sample_kwargs, blas_threads, \
progressbar
        As for :class:`RVR` (there is no noise precision).
    priors : dict, optional
        Gamma hyperprior ``a, b`` on the weight precisions. The evidence
        method supports none (type-II maximum likelihood); vb defaults to
        :data:`rvm_ppl.model.DEFAULT_PRIORS` (1e-6, Bishop & Tipping's
        limit); advi and nuts default to
        :data:`rvm_ppl.model.BERNOULLI_PRIORS` (``a = 3, b = 2``): as
        ``a -> 0`` the exact posterior of a classifier puts its mass on
        unbounded weights that separate the training data, which no sampler
        can explore (:mod:`rvm_ppl.model`, "Hyperpriors of the classifier").
        Pass the same ``priors`` to every method to compare them on one
        model.

    multi_class : {"ovr", "multinomial"}
        How ``K > 2`` classes are modelled. ``"ovr"``: ``K`` binary
        one-vs-rest models (as Tipping did for U.S.P.S.). ``"multinomial"``:
        one softmax model (Tipping 2001, eq. 28), ``K`` weight vectors with
        their own ``alpha`` (or shared ones), fitted by evidence (Laplace
        approximation with the block Hessian), advi or nuts; vb is
        one-vs-rest only. With two classes ``"multinomial"`` fits the
        softmax model with two weight vectors too. The default is
        ``"ovr"`` because it measured better and faster: on scikit-learn's
        digits (898 training / 899 test images, 10 classes, evidence) the
        test error was 4.00 % (log loss 0.178) in 1.5 s for one-vs-rest
        against 4.23 % (0.194) in 83 s with shared ``alpha`` and 5.01 %
        (0.186) in 38 s with per-class ``alpha`` for the multinomial model
        (``benchmarks/bench_multiclass.py``).
    shared_alpha : bool
        ``multi_class="multinomial"`` only: one ``alpha`` per basis function
        for all classes (a basis enters or leaves every class's model at
        once) instead of one per class and basis.

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
    coef_ : ndarray of shape (n_basis,) or (n_classes, n_basis)
        Posterior mean (evidence: mode) of the weights.
    alpha_ : ndarray of shape (n_basis,) or (n_classes, n_basis)
    relevance_ : ndarray of int
        Training points whose basis function is relevant (for any class).
    relevance_vectors_ : ndarray
    log_evidence_ : ndarray of shape (n_models,) or float
        Evidence method: one log evidence per binary model, or the
        multinomial model's Laplace log evidence.
    joint_cov_ : ndarray of shape (n_weights, n_weights) or None
        Multinomial evidence fit: the Laplace covariance of all weights in
        the model, class-major in the order of ``active_`` (the classes'
        weights are correlated a posteriori; ``sigma_`` holds the diagonal
        blocks). None otherwise.
    idata_ : arviz.InferenceData
        As for :class:`RVR`, without ``beta``; with more than two classes,
        or with ``multi_class="multinomial"``, the posterior variables have a
        ``class`` dimension after ``draw``.

    Notes
    -----
    Probabilities: for the evidence method (Laplace approximation) and vb,
    MacKay's moderated output ``sigma(kappa a)`` with ``a = phi^T mu``,
    ``kappa = (1 + pi s^2 / 8)^(-1/2)`` and ``s^2 = phi^T Sigma phi``; for
    advi and nuts, the average of ``sigma(phi^T w)`` over posterior draws.

    The evidence method starts, as SparseBayes does for the Bernoulli
    likelihood, from the one basis function best aligned with ``2 t - 1``
    (the bias competes with the kernels); on 100 subsets of Ripley's data
    the mean test error was the same as from the bias (9.62% and 9.64%).

    The multinomial model: evidence probabilities are
    ``E[softmax(phi^T W^T)]`` under the Laplace posterior, by Monte Carlo
    with antithetic draws and a seed fixed by ``random_state``
    (:func:`rvm_ppl.evidence_multinomial.predict_proba_multinomial`); advi
    and nuts average the softmax over their draws.

    advi and nuts sample the weights with every ``alpha_m`` integrated out
    (Student-t priors, Tipping 2001, eq. 32) and draw ``alpha`` exactly
    afterwards (:func:`rvm_ppl.model.build_model`, ``"marginal"``). Their
    posterior is not sparse: no weight is individually well determined, so
    ``E[gamma_m] > 1/2`` rarely marks any basis function relevant, while
    the posterior-predictive probabilities average over all of them.

    Examples
    --------
    >>> from rvm_ppl import RVC
    >>> from rvm_ppl.datasets import load_ripley
    >>> X, y, Xt, yt = load_ripley()
    >>> clf = RVC(gamma=4.0).fit(X[::2], y[::2])
    >>> bool(clf.score(Xt, yt) > 0.85), len(clf.relevance_) < 10
    (True, True)

    Three classes in one softmax model:

    >>> from rvm_ppl.datasets import make_three_class
    >>> X, y = make_three_class(150, random_state=0)
    >>> clf = RVC(gamma=0.5, multi_class="multinomial").fit(X, y)
    >>> clf.predict_proba(X[:2]).sum(axis=1).round(12).tolist()
    [1.0, 1.0]
    """

    _parameter_constraints: dict = {
        **_RVMBase._parameter_constraints,
        "multi_class": [StrOptions({"ovr", "multinomial"})],
        "shared_alpha": ["boolean"],
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
        priors=None,
        max_iter=None,
        tol=None,
        alignment_test=True,
        draws=1000,
        tune=1000,
        chains=4,
        random_state=None,
        sample_kwargs=None,
        blas_threads=1,
        progressbar=True,
        multi_class="ovr",
        shared_alpha=False,
    ):
        self.kernel = kernel
        self.gamma = gamma
        self.degree = degree
        self.coef0 = coef0
        self.method = method
        self.fit_intercept = fit_intercept
        self.multi_class = multi_class
        self.shared_alpha = shared_alpha
        self.priors = priors
        self.max_iter = max_iter
        self.tol = tol
        self.alignment_test = alignment_test
        self.draws = draws
        self.tune = tune
        self.chains = chains
        self.random_state = random_state
        self.sample_kwargs = sample_kwargs
        self.blas_threads = blas_threads
        self.progressbar = progressbar

    @_atomic
    def fit(self, X, y, method=None):
        """Fit the relevance vector classifier.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,)
            Class labels of any type.
        method : {"evidence", "vb", "advi", "nuts"}, optional
            Overrides the constructor's ``method``.

        Returns
        -------
        self : RVC
        """
        method = self._check_method(method)
        if self.multi_class == "multinomial" and method == "vb":
            raise ValueError("method='vb' is one-vs-rest only (Bishop & Tipping's bound is for "
                             "the Bernoulli likelihood); use multi_class='ovr' with vb, or "
                             "method 'evidence', 'advi' or 'nuts' with multi_class='multinomial'.")
        X, y = validate_data(self, X, y, dtype=None, ensure_min_samples=2)
        X = np.asarray(X, dtype=np.float64)
        check_classification_targets(y)
        classes, codes = np.unique(y, return_inverse=True)
        if len(classes) < 2:
            raise ValueError(
                f"RVC needs samples of at least 2 classes; y has only the class {classes[0]}."
            )
        kernel = self._make_kernel(X)
        basis, labels, n_extra = self._training_basis(X, kernel,
                                                      lazy_ok=method in ("evidence", "vb"))
        if self.multi_class == "multinomial":
            results, joint_cov = self._fit_multinomial(method, basis, codes, labels, classes)
            self._store(X, classes, codes, kernel, n_extra, method, results, joint_cov=joint_cov)
            return self
        # One binary model for two classes (t = 1 for classes[1]); one per class
        # against the rest otherwise. No start: the evidence fit starts, as
        # SparseBayes does for the Bernoulli likelihood, from the basis best
        # aligned with 2 t - 1 (notes/sparse_bayes_algorithm.md §2.8).
        targets = [codes == 1] if len(classes) == 2 else [codes == k for k in range(len(classes))]
        results = [self._fit_result(method, basis, t.astype(float), labels=labels,
                                    likelihood="bernoulli") for t in targets]
        self._store(X, classes, codes, kernel, n_extra, method, results)
        return self

    def _fit_multinomial(self, method, basis, codes, labels, classes):
        """The softmax RVM: one result per class and, for evidence, the joint covariance."""
        max_iter = self.max_iter or DEFAULT_MAX_ITER.get(method)
        tol = self.tol or DEFAULT_TOL.get(method)
        if method == "evidence":
            if self.priors is not None:
                raise ValueError("method='evidence' with multi_class='multinomial' supports no "
                                 "hyperpriors; leave priors=None.")
            with blas_limit(self.blas_threads):
                res = fit_evidence_multinomial(basis, codes, n_classes=len(classes),
                                               shared_alpha=self.shared_alpha,
                                               max_iter=max_iter, tol=tol,
                                               alignment_test=self.alignment_test,
                                               progressbar=self.progressbar)
            return multinomial_evidence_results(res, labels), res.Sigma
        model_kw = {"shared_alpha": self.shared_alpha, "classes": [str(c) for c in classes]}
        return self._fit_result(method, basis, codes, labels=labels, likelihood="categorical",
                                model_kw=model_kw), None

    def _store(self, X, classes, codes, kernel, n_extra, method, results, joint_cov=None):
        self._set_fitted(X=X, kernel=kernel, n_extra=n_extra, method=method, results=results)
        self.classes_ = classes
        self.y_codes_ = codes
        self.results_ = results
        # The multinomial evidence fit's Laplace covariance of all its weights
        # (class-major in the order of each class's support): the classes'
        # weights are correlated a posteriori, which the per-class sigma_ omits.
        self.joint_cov_ = joint_cov
        M = len(results[0].alpha)
        self.coef_ = np.zeros((len(results), M))
        for k, r in enumerate(results):
            self.coef_[k, r.support] = r.mean
        self.alpha_ = np.array([r.alpha for r in results])
        self.active_ = [r.support for r in results]
        self.sigma_ = [r.cov for r in results]
        self.n_iter_ = np.array([r.stats.get("n_iter", -1) for r in results])
        if method == "evidence":
            self.log_evidence_ = np.array([r.stats["log_evidence"] for r in results])
            if self._multinomial:  # one model, one evidence
                self.log_evidence_ = float(self.log_evidence_[0])
        else:
            self.__dict__.pop("log_evidence_", None)

    @property
    def _multinomial(self):
        return self.results_[0].likelihood == "categorical"

    def _multinomial_proba(self, X):
        """``E[softmax(phi^T W^T)]``: Laplace posterior (evidence) or draws (advi, nuts)."""
        support = np.unique(np.concatenate([r.support for r in self.results_])).astype(int)
        Phi = self._design(X, support)
        pos = [np.searchsorted(support, r.support) for r in self.results_]
        K = len(self.results_)
        if self.results_[0].draws is None:  # evidence
            laplace = SimpleNamespace(
                mu=np.zeros((K, support.size)), Sigma=self.joint_cov_, n_classes=K,
                coef_index=np.concatenate([np.column_stack([np.full(len(p), k), p])
                                           for k, p in enumerate(pos)]).astype(int))
            for k, r in enumerate(self.results_):
                laplace.mu[k, pos[k]] = r.mean
            seed = _seed(self.random_state)
            return predict_proba_multinomial(Phi, laplace, seed=0 if seed is None else seed)
        out = np.zeros((X.shape[0], K))
        draws = [r.w_draws for r in self.results_]  # (S, len(support_k)) each, same draws
        S = len(draws[0])
        for idx in np.array_split(np.arange(S), max(1, S // 256)):
            lat = np.stack([Phi[:, p] @ d[idx].T for p, d in zip(pos, draws, strict=True)], axis=1)
            out += softmax(lat, axis=1).sum(axis=2)  # Tipping (2001) eq. (28), (n, K, draws)
        return out / S

    def _binary_proba(self, result, X):
        """P(t = 1 | x) under one binary posterior."""
        Phi = self._design(X, result.support)
        if result.draws is not None:  # advi, nuts: average sigma(phi^T w) over draws
            w = result.w_draws
            out = np.zeros(X.shape[0])
            for chunk in np.array_split(w, max(1, len(w) // 256)):
                out += expit(Phi @ chunk.T).sum(axis=1)
            return out / len(w)
        return predict_proba_moderated(Phi, result.mean, result.cov,
                                       extra_var=self._outside_var(result, X))

    def _ovr_proba(self, X):
        check_is_fitted(self, "results_")
        X = validate_data(self, X, dtype=np.float64, reset=False)
        return np.column_stack([self._binary_proba(r, X) for r in self.results_])

    def decision_function(self, X):
        """Log-odds of the predictive probability of each one-vs-rest model.

        This is ``logit P(t = 1 | x)``, i.e. the moderated latent
        ``kappa phi(x)^T mu`` for evidence and vb, so that it ranks points
        exactly as :meth:`predict_proba` does (the posterior mean of the
        latent alone does not: moderation pulls uncertain points towards 1/2).

        Returns
        -------
        ndarray of shape (n_samples,) for two classes, else (n_samples, n_classes)
        """
        check_is_fitted(self, "results_")
        if self._multinomial:
            logP = np.log(np.clip(self.predict_proba(X), np.finfo(float).tiny, None))
            if logP.shape[1] == 2:
                return logP[:, 1] - logP[:, 0]
            return logP - logP.mean(axis=1, keepdims=True)
        P = np.clip(self._ovr_proba(X), np.finfo(float).tiny, 1 - np.finfo(float).epsneg)
        f = np.log(P) - np.log1p(-P)
        return f[:, 0] if f.shape[1] == 1 else f

    def predict_proba(self, X):
        """Class probabilities, columns in ``classes_`` order.

        Returns
        -------
        ndarray of shape (n_samples, n_classes)
        """
        check_is_fitted(self, "results_")
        if self._multinomial:
            X = validate_data(self, X, dtype=np.float64, reset=False)
            return self._multinomial_proba(X)
        P = self._ovr_proba(X)
        if P.shape[1] == 1:
            return np.column_stack([1.0 - P[:, 0], P[:, 0]])
        return P / P.sum(axis=1, keepdims=True)

    def predict_log_proba(self, X):
        """Logarithm of :meth:`predict_proba`."""
        return np.log(self.predict_proba(X))

    def predict(self, X):
        """Most probable class."""
        P = self.predict_proba(X)
        return self.classes_[np.argmax(P, axis=1)]

    @property
    def idata_(self):
        """The fit as :class:`arviz.InferenceData` (built on first access).

        Two classes: the binary model's InferenceData (:mod:`rvm_ppl._idata`),
        ``observed_data.y`` the 0/1 codes of ``classes_``. More: every group
        gains a ``class`` dimension (one one-vs-rest model each; a basis that
        one model pruned has ``w = 0`` and ``alpha = inf`` there), and
        ``observed_data.y``, ``log_likelihood.y`` and ``posterior_predictive.y``
        are those of the combined classifier: class codes into ``classes_``
        and ``log P(y_n | x_n)`` under the normalised probabilities.
        """
        check_is_fitted(self, "results_")
        if getattr(self, "_idata", None) is None and self._multinomial:
            support = np.unique(np.concatenate([r.support for r in self.results_])).astype(int)
            self._idata = multinomial_idata(
                self.results_, y=self.y_codes_, Phi=self._design(self.X_fit_, support),
                classes=self.classes_, X=self.X_fit_ if self.kernel_ is not None else None,
                chains=self.chains, draws=self.draws, random_state=_seed(self.random_state),
                joint_cov=self.joint_cov_, attrs=self._idata_attrs())
        if getattr(self, "_idata", None) is None:
            seed = _seed(self.random_state)
            parts = [
                to_idata(r, y=(self.y_codes_ == (k if len(self.results_) > 1 else 1)).astype(int),
                         Phi=self._design(self.X_fit_, r.support),
                         X=self.X_fit_ if self.kernel_ is not None else None,
                         chains=self.chains, draws=self.draws,
                         random_state=None if seed is None else seed + k,
                         attrs={**self._idata_attrs(), "classes": json.dumps(
                             [str(c) for c in self.classes_])})
                for k, r in enumerate(self.results_)
            ]
            self._idata = parts[0] if len(parts) == 1 else ovr_idata(
                parts, self.classes_, self.y_codes_, seed)
        return self._idata
