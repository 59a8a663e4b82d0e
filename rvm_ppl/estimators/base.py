"""What the two estimators share: parameters, design matrices, fitted attributes, persistence.

The path from ``RVR.fit`` to ``idata_``: :meth:`RVR.fit` validates the data
and builds the candidate basis (:meth:`_RVMBase._training_basis`), then
:func:`rvm_ppl.inference.methods.fit` runs the method's fitter from its table and
returns a :class:`~rvm_ppl.core.result.FitResult` in the units of ``y``; the
estimator stores it (``result_``) and its fitted attributes in one step.
``idata_`` is :func:`rvm_ppl.output.idata.to_idata` of that result, built on first
access. The estimator is the only stateful object in the package, and a
``fit`` that fails leaves it as it was.
"""
from __future__ import annotations

import functools
from numbers import Integral, Real

import numpy as np
from sklearn import config_context, get_config
from sklearn.base import BaseEstimator, clone
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted, validate_data

from rvm_ppl.closed_form.scales import (
    extended_basis_labels,
    extended_design_columns,
    extended_design_matrix,
    extra_columns,
)
from rvm_ppl.core.linalg import blas_limit
from rvm_ppl.core.priors import fit_hyperprior, priors_from_params, target_scale
from rvm_ppl.inference.methods import (
    DEFAULT_MAX_ITER,
    DEFAULT_TOL,
    FIT_METHODS,
    check_model_fit,
    fitted_model,
)
from rvm_ppl.inference.methods import fit as _fit
from rvm_ppl.kernels.basis import DenseBasis, LowRankKernelBasis, kernel_basis
from rvm_ppl.kernels.kernel import KERNEL_NAMES, Kernel, basis_labels, make_kernel

# The input dtypes kept by the fitted weights and the predictions (scikit-learn's
# Bayesian regressors keep float32); any other is converted to the first.
INPUT_DTYPES = (np.float64, np.float32)

# The fit group's objective traces, by precedence: the penalised objective a
# type-II MAP evidence fit maximises, the log evidence, the variational bound.
OBJECTIVE_TRACES = ("objective", "log_evidence", "elbo")

# Above this many design-matrix entries (N x M) the evidence method evaluates
# kernel columns on demand instead of storing the matrix (200 MB of float64).
DENSE_LIMIT = 25_000_000


class _RVMBase(BaseEstimator):
    """Shared parameters, design matrices and fitted attributes."""

    # The shared ones by group, as in the signatures: the basis, the model, the
    # method, PyMC's sampler, the process.
    _parameter_constraints: dict = {
        "kernel": [StrOptions(set(KERNEL_NAMES)), Kernel, callable],
        "gamma": [StrOptions({"scale"}), Interval(Real, 0, None, closed="left"), "array-like"],
        "degree": [Interval(Integral, 0, None, closed="left")],
        "coef0": [Real],
        "fit_intercept": ["boolean"],
        "alpha_shape": [Interval(Real, 0, None, closed="left"), None],
        "alpha_rate": [Interval(Real, 0, None, closed="left"), None],
        "method": [StrOptions(set(FIT_METHODS))],
        "max_iter": [Interval(Integral, 1, None, closed="left"), None],
        "tol": [Interval(Real, 0, None, closed="neither"), None],
        "alignment_test": ["boolean"],
        "draws": [Interval(Integral, 1, None, closed="left")],
        "tune": [Interval(Integral, 0, None, closed="left")],
        "chains": [Interval(Integral, 1, None, closed="left")],
        "sample_kwargs": [dict, None],
        "random_state": ["random_state"],
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
        if method not in FIT_METHODS:
            raise ValueError(f"Unknown method {method!r}; expected one of {sorted(FIT_METHODS)}.")
        return method

    def _fit_result(self, method, basis, y, *, labels, likelihood, start=None, beta=None,
                    fit_beta=True, model_kw=None, offset=None):
        """Run ``method``'s fitter with this estimator's parameters.

        ``model_kw`` goes to :func:`rvm_ppl.model.build.build_model` (advi, nuts);
        ``offset`` is the Poisson likelihood's log exposure (evidence, advi, nuts).
        """
        kwargs = dict(labels=labels, likelihood=likelihood, priors=self._priors())
        max_iter = self.max_iter or DEFAULT_MAX_ITER.get(method)
        tol = self.tol or DEFAULT_TOL.get(method)
        if method in ("advi", "nuts"):
            model_kw = _with_offset(model_kw, offset)
        if method == "evidence":
            kwargs.update(max_iter=max_iter, tol=tol, solver=getattr(self, "solver", "fast"),
                          alignment_test=self.alignment_test, start=start, beta=beta,
                          fit_beta=fit_beta, progressbar=self.progressbar, offset=offset)
            if likelihood == "gaussian":
                kwargs["compiled"] = getattr(self, "compiled", "auto")
                kwargs["min_noise_var_ratio"] = self.min_noise_var_ratio
        elif method == "vb":
            kwargs.update(max_iter=max_iter, tol=tol, progressbar=self.progressbar)
        else:
            # scikit-learn's random_state becomes PyMC's random_seed here, and only here.
            kwargs.update(draws=self.draws, random_seed=_seed(self.random_state),
                          sample_kwargs={"progressbar": self.progressbar, **self._sample_kwargs()},
                          model_kw=model_kw)
            if method == "advi":
                kwargs.update(max_iter=max_iter, tol=tol)
            else:
                kwargs.update(tune=self.tune, chains=self.chains)
        return _fit(method, basis, y, blas_threads=self.blas_threads, **kwargs)

    def _priors(self):
        """Return the fitters' hyperprior dict from ``alpha_shape``, ... (None: the defaults)."""
        return priors_from_params(self.get_params(deep=False))

    def _sample_kwargs(self):
        """``sample_kwargs`` for PyMC, refusing keys that the estimator sets itself."""
        extra = dict(self.sample_kwargs or {})
        # random_seed is random_state; n and n_iter are max_iter; priors are
        # alpha_shape, alpha_rate, beta_shape and beta_rate.
        taken = set(self.get_params(deep=False)) | {"random_seed", "n", "n_iter", "model",
                                                     "priors"}
        clash = sorted(set(extra) & taken)
        if clash:
            raise ValueError(
                f"sample_kwargs sets {clash}, which the estimator sets from its own parameters; "
                "set them on the estimator instead (random_seed is random_state, n and n_iter "
                "are max_iter, priors are alpha_shape, alpha_rate, beta_shape and beta_rate)."
            )
        return extra

    def _set_fitted(self, *, X, kernel, n_extra, method, results):
        """Fitted attributes shared by RVR and RVC, all set together.

        ``method`` becomes the method this fit used, so that ``get_params()``
        and ``clone(self).fit(X, y)`` reproduce it after ``fit(X, y, method=...)``;
        no other constructor parameter changes (a failed fit restores them all).
        """
        self.method = method
        self.kernel_ = kernel
        self.X_fit_ = X
        self.n_extra_ = n_extra
        self.method_ = method
        self._idata = None
        offset = int(self.fit_intercept) + n_extra
        rel = np.flatnonzero(np.any([r.relevant for r in results], axis=0))
        self.relevance_ = rel[rel >= offset] - offset
        self.relevance_vectors_ = None if kernel is None else X[self.relevance_]

    def _store_result(self, result):
        """The fitted attributes of one result: ``result_``, ``coef_``, ``alpha_``, ...

        RVR and PoissonRVR, which fit one model, store them so.
        """
        self.result_ = result
        self.active_ = result.support
        self.coef_ = np.zeros(len(result.alpha))
        self.coef_[result.support] = result.mean
        self.sigma_ = result.cov
        self.alpha_ = result.alpha
        self.n_iter_ = result.stats.get("n_iter")
        self.scores_ = objective_trace(result)
        if "log_evidence" in result.stats:
            self.log_evidence_ = result.stats["log_evidence"]
        elif hasattr(self, "log_evidence_"):
            del self.log_evidence_

    def _cast_weights(self, dtype):
        """``coef_`` and ``sigma_`` in ``dtype``, the training inputs' (float32 or float64).

        The fit runs in float64 whatever the inputs; float32 inputs get their
        weights back in float32, as scikit-learn's Bayesian regressors keep them.
        """
        self.coef_ = self.coef_.astype(dtype, copy=False)
        self.sigma_ = ([s.astype(dtype, copy=False) for s in self.sigma_]
                       if isinstance(self.sigma_, list) else self.sigma_.astype(dtype, copy=False))

    def _test_inputs(self, X):
        """Validated test inputs in float64 and the dtype of what is predicted from them.

        float32 when ``X`` and the fitted ``coef_`` are float32 (numpy's promotion
        of the two, as in scikit-learn's linear models), float64 otherwise.
        """
        X = validate_data(self, X, dtype=INPUT_DTYPES, reset=False)
        return X.astype(np.float64, copy=False), np.result_type(X.dtype, self.coef_.dtype)

    def _outside_var(self, result, X):
        """``sum_m (phi_m(x) + phi_S(x)^T K_m)^2 v_m`` over the weights outside the model.

        ``v_m``: ``result.outside_var`` (0 for point masses); ``K``: how the
        weights on the support depend on them (``result.outside_coupling``).
        """
        if result.outside_var is None:
            return 0.0
        K = result.outside_coupling
        PS = self._design(X, result.support) if K is not None and K.size else None
        idx = np.flatnonzero(result.outside_var > 0)
        out = np.zeros(X.shape[0])
        for cols in np.array_split(idx, max(1, idx.size // 2048)):  # bounded memory
            if cols.size:
                G = self._design(X, cols)
                if PS is not None:
                    G = G + PS @ K[:, cols]
                out += G**2 @ result.outside_var[cols]
        return out

    def pymc_model(self):
        """The PyMC model whose posterior ``idata_`` holds, for a fit by advi or nuts.

        :func:`rvm_ppl.build_model` on the training design matrix and targets
        with the hyperprior in the units the fit used (for :class:`RVR` the
        rates scaled by ``var(y)``) and the fit's form of the marginal
        likelihood (a design truncated by ``low_rank``, as
        ``idata_.attrs["design_tol"]`` records). ``idata_`` serves PyMC's
        forward sampling in it as a trace of ``pm.sample`` does: its
        ``constant_data`` holds the data the posterior's variables depend
        on, so ``pm.sample_posterior_predictive`` draws only ``y``, at the
        training inputs or at new ones::

            model = m.pymc_model()
            with model:
                pm.set_data({"Phi": Phi_new})   # the design at X_new, all basis functions
                pred = pm.sample_posterior_predictive(m.idata_, predictions=True)

        and ``pred.predictions["y"]`` has the mean and standard deviation of
        ``predict(X_new, return_std=True)`` within Monte Carlo error.

        Returns
        -------
        pymc.Model
            A new model at every call.

        Raises
        ------
        ValueError
            For a fit by evidence or vb, whose ``idata_`` keeps only the basis
            functions in its model (PyMC would draw the others' weights, and
            the evidence method's point estimates, from their priors); for
            constant targets; for a one-vs-rest classifier of more than two
            classes (one model per class).
        """
        check_is_fitted(self, "X_fit_")
        y, likelihood, model_kw, offset, result = self._model_inputs()
        check_model_fit(result)
        basis, labels, _ = self._training_basis(self.X_fit_, self.kernel_, lazy_ok=False)
        with blas_limit(self.blas_threads):  # as the fit built it
            return fitted_model(result, basis, y, labels=labels, likelihood=likelihood,
                                priors=self._priors(), model_kw=_with_offset(model_kw, offset))

    def _model_constants(self):
        """The fitted PyMC model's data for ``idata_.constant_data`` (advi, nuts), else None."""
        from rvm_ppl.pymc_fitters.results import model_constants

        result = self._model_inputs()[-1]
        first = result[0] if isinstance(result, list) else result
        if first.draws is None:  # evidence, vb, constant targets: no model sampled
            return None
        return model_constants(self.pymc_model())

    def _model_inputs(self):
        """``(y, likelihood, model_kw, offset, result)`` of the fit of the PyMC model."""
        raise NotImplementedError

    def _idata_attrs(self):
        return {"kernel": repr(self.kernel_), "estimator": type(self).__name__}

    def _identity(self, likelihood, y=None):
        """Return what identifies the fitted model beyond its result.

        See :func:`rvm_ppl.output.idata.model_identity`.

        The hyperprior in the units the fit used (flat for the evidence
        method without one), the scale of the regression targets and the
        training inputs, which with the basis labels and the kernel fix the
        design matrix.
        """
        gaussian = likelihood == "gaussian"
        return {"hyperprior": fit_hyperprior(self._priors(), likelihood, self.method_, y),
                "target_scale": target_scale(y) if gaussian else 1.0, "inputs": self.X_fit_}

    def to_netcdf(self, path):
        """Save the fitted estimator: its InferenceData plus what prediction needs.

        Parameters
        ----------
        path : str or path-like

        Examples
        --------
        >>> import tempfile, os
        >>> from rvm_ppl import RVR
        >>> from rvm_ppl.datasets.loaders import make_sinc
        >>> X, y = make_sinc(30, random_state=0)
        >>> m = RVR(gamma=0.1, draws=10).fit(X, y)
        >>> path = os.path.join(tempfile.mkdtemp(), "rvr.nc")
        >>> m.to_netcdf(path)
        >>> bool((RVR.from_netcdf(path).predict(X) == m.predict(X)).all())
        True
        """
        from rvm_ppl.estimators.persistence import save

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
        from rvm_ppl.estimators.persistence import load

        return load(cls, path)


def objective_trace(result):
    """The trace of the objective ``result``'s method maximised, or None (nuts, a constant fit).

    The first of :data:`OBJECTIVE_TRACES` in ``result.fit`` on ``iteration``;
    the same array that :func:`rvm_ppl.output.idata.to_idata` puts in the
    ``fit`` group.
    """
    for name in OBJECTIVE_TRACES:
        dims, values = result.fit.get(name, ((), None))
        if dims == ("iteration",):
            return np.asarray(values, dtype=float)
    return None


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


def _with_offset(model_kw, offset):
    """``build_model``'s keywords with the Poisson likelihood's log exposure, if there is one."""
    return model_kw if offset is None else {**(model_kw or {}), "offset": offset}


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
    importing the callback machinery, which a process's first fit would pay for.
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
