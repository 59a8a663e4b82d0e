"""Relevance vector regression: :class:`RVR`."""
from __future__ import annotations

from numbers import Real

import numpy as np
from sklearn.base import RegressorMixin
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted, validate_data

from rvm_ppl.closed_form.constants import MIN_NOISE_VAR_RATIO
from rvm_ppl.closed_form.scales import (
    SCHEDULES,
)
from rvm_ppl.core.priors import fit_priors
from rvm_ppl.estimators.base import INPUT_DTYPES, _atomic, _RVMBase, _seed
from rvm_ppl.estimators.rvm_star import rvm_star_predict
from rvm_ppl.inference.methods import (
    DEFAULT_MAX_ITER,
    DEFAULT_TOL,
    FitResult,
    fit_evidence_scales,
)
from rvm_ppl.kernels.kernel import RBF, basis_labels
from rvm_ppl.output.idata import to_idata

# Largest N at which RVR's fast evidence fit uses the dense kernel matrix, run by
# the compiled engine, even when a low-rank factor exists: warm fits on noisy sinc
# (median of 3 seeds, ms) dense/low-rank: N = 1000 15.0/29.1, 1500 27.7/20.7,
# 2000 68.5/31.1 (one BLAS thread, fastest of 3 fits in one process).
COMPILED_DENSE_MAX_N = 1000


class RVR(RegressorMixin, _RVMBase):
    """Relevance vector regression (Tipping 2001).

    The model is ``t = Phi w + noise`` with one Gaussian prior precision
    ``alpha_m`` per weight, Gamma hyperpriors on every ``alpha_m`` and on
    the noise precision ``beta``, and, by default, one Gaussian basis
    function centred on each training input plus a bias.

    Parameters
    ----------
    Basis: the functions of x that form the design matrix
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
    fit_intercept : bool
        Add a bias basis function (with its own ``alpha``, as in the paper).
    extra_basis : callable, optional
        ``extra_basis(X) -> (n, p)`` array of further basis functions placed
        next to the kernel columns, each with its own ``alpha`` (Tipping
        2001, §4.3: e.g. the raw inputs and their squares). Their labels are
        ``"extra_0"``, ... in ``idata_``.
    learn_scales : bool
        Learn one Gaussian-kernel scale per input (``eta``, Tipping 2001,
        App. C) by maximising the evidence, interleaved with the ``alpha``
        updates (:func:`rvm_ppl.closed_form.scales.fit_eta_rvm`); needs
        ``kernel="rbf"`` and ``method="evidence"``. ``gamma`` is the start.
    scale_schedule : {"refine", "grow"}
        How the scale learning starts: from the converged fixed-width fit
        (``"refine"``) or from the bias alone (``"grow"``).
    Model: the hyperpriors and the noise
    alpha_shape, alpha_rate : float or None
        Shape ``a`` and rate ``b`` of the Gamma hyperprior on every weight
        precision ``alpha_m`` (Tipping 2001, eq. 6), for targets divided by
        their standard deviation.
    beta_shape, beta_rate : float or None
        Shape ``c`` and rate ``d`` of the Gamma hyperprior on the noise
        precision ``beta`` (same equation), in the same units. None, for any of the
        four, is the method's default: vb, advi and nuts take
        :data:`rvm_ppl.DEFAULT_PRIORS` (all 1e-6). The evidence method with
        all four None maximises the evidence itself, the limit
        ``a = b = c = d -> 0`` of the same model (with 1e-6 it finds the same
        basis set, more slowly: the documentation's Benchmarks page, "Speed
        (evidence method)", has the times); with any of
        them set, it maximises the posterior of ``log alpha`` and
        ``log beta`` (Tipping 2001, App. A), the others at 1e-6.
    noise_std : float, optional
        Initial noise standard deviation for the evidence method, or the
        fixed one when ``fit_noise=False``. Default ``0.1 * std(y)``.
    fit_noise : bool
        Re-estimate the noise (evidence method).
    min_noise_var_ratio : float in [0, 1)
        Smallest noise variance the evidence method may fit, relative to
        ``var(y)``: the noise precision is capped at ``beta_ <= 1 /
        (min_noise_var_ratio * var(y))``. The default ``1e-6`` is SparseBayes's
        cap (``BetaMaxFactor = 1e6``); on noise-free targets the fit reaches
        it, and it then sets the predictive variance. ``0`` lifts the cap.
        Not applied to a noise held fixed (``fit_noise=False``); vb, advi
        and nuts have no cap.
    low_rank : "auto", bool, float or None
        advi and nuts: the form of the marginal likelihood,
        :func:`rvm_ppl.model.build.build_model`'s ``low_rank``. None and
        True/False choose between two exact forms; a float ``tol`` in (0, 1)
        fits the RVM on the design's truncated SVD (the singular values above
        ``tol`` times the largest), an approximation for a cheaper gradient
        where the kernel matrix has full rank and a fast-falling spectrum,
        recorded in ``idata_.attrs["design_tol"]``. NUTS on a truncated design
        is checked on its draws against the exact one (Pareto k-hat,
        ``idata_.attrs["design_khat"]``; :mod:`rvm_ppl.pymc_fitters.truncation`).
        "auto" (default): advi, and nuts on small designs, as None; nuts on
        large designs of fast-falling spectrum truncated at ``1e-6``
        (:func:`~rvm_ppl.pymc_fitters.truncation.auto_tolerance`), and on the
        exact design again, with a warning, if the check fails.
    Method: how the posterior is found
    method : {"evidence", "vb", "advi", "nuts"}
        Fitting method. ``fit(X, y, method=...)`` fits by another one and
        makes it this parameter, so that ``get_params()`` and
        ``clone(m).fit(X, y)`` reproduce the fit.
    max_iter, tol : int, float or None
        Iteration cap and convergence tolerance of the method; None takes
        the method's own (:data:`rvm_ppl.inference.methods.DEFAULT_MAX_ITER`,
        :data:`~rvm_ppl.inference.methods.DEFAULT_TOL`): evidence 10 000 and 1e-3
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
    Sampler: PyMC's settings, by PyMC's names
    draws, tune, chains : int
        Posterior draws kept per chain (all methods), tuning steps and
        chains (nuts). Four chains by default: r-hat <= 1.01 (Vehtari et
        al. 2021) presumes them; with two, one of 202 r-hats on a Ripley
        classifier exceeded 1.01 by chance in 2 of 10 runs.
    sample_kwargs : dict, optional
        Keyword arguments for PyMC: :func:`rvm_ppl.pymc_fitters.nuts.fit_nuts` and
        :func:`pymc.sample` (nuts; e.g. ``target_accept``, or
        ``nuts_sampler="pymc"`` instead of nutpie) and
        :func:`rvm_ppl.pymc_fitters.advi.fit_advi` (advi; e.g. ``learning_rate``,
        ``window``). Unused by evidence
        and vb. A key the estimator sets from its own parameters (``draws``,
        ``chains``, ``random_seed``, ``n``, ...) is a ``ValueError``.
    Process: randomness, threads and output
    random_state : int, RandomState or None
        Seeds every random draw (PyMC's ``random_seed`` for advi and nuts).
    compiled : {"auto", True, False}
        Where the evidence method's fast solver runs
        (:func:`rvm_ppl.closed_form.evidence.fit_evidence_regression`,
        ``compiled``): ``"auto"`` runs problems of up to 1001 x 1001 basis
        entries in Python and larger ones in the compiled engine, by size
        alone; ``True`` runs the engine at every size: the first fit of a
        process then pays for loading the engine (about half a second), and
        every later fit is several times faster than in Python, the choice for
        cross-validation, grid searches and other repeated small fits;
        ``False`` always runs Python. Both take the same decisions and agree
        to rounding error; the choice depends on this parameter and the
        problem's size, never on what the process ran before. The
        documentation's Benchmarks page, "Speed (evidence method)", has both
        times.
    blas_threads : int or None
        BLAS threads during ``fit`` (default 1; see
        :func:`rvm_ppl.core.linalg.blas_limit`; ``None`` leaves the BLAS
        library's default).
    progressbar : bool
        Show the sampler's progress bars while nuts runs (as :func:`pymc.sample`
        does), a bar for advi that ends when its convergence test stops it,
        and for evidence and vb a line (iteration, basis functions,
        objective) on standard error once a fit has run two seconds; they
        take under a second up to tens of thousands of points.

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
        exactly 0 for pruned basis functions. Index 0 is the bias. float32
        when ``X`` was float32 (computed in float64 and rounded once, as
        scikit-learn's Bayesian regressors keep float32), else float64.
    sigma_ : ndarray of shape (n_active, n_active)
        Posterior covariance of the weights in ``active_``, in the dtype of
        ``coef_``.
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
        Posterior of ``w``, ``alpha``, ``beta`` on dimension ``basis``. For
        advi and nuts a posterior of the PyMC model :meth:`pymc_model` gives,
        which ``pm.sample_posterior_predictive`` accepts as a trace.
    scores_ : ndarray of shape (n_scores,) or None
        The objective the method maximised, as it rose (as
        :class:`~sklearn.linear_model.ARDRegression`'s ``scores_`` with
        ``compute_score=True``): the very array of the trace in ``idata_.fit``,
        float64. evidence: the log evidence (``fit.log_evidence``) or, with
        a hyperprior (type-II MAP), the penalised objective that fit
        maximises (``fit.objective``), at the start and after every
        iteration that changed the model or the noise (the fast solver's
        second ascent and re-check keep the trace of the ascents that led to
        the result; :func:`rvm_ppl.closed_form.evidence.fit_evidence_regression`);
        it ends at ``log_evidence_`` (MAP: ``idata_.attrs["objective"]``) and
        never decreases for the fast solver. vb: the variational bound
        after every sweep (``fit.elbo``), never decreasing, ending at
        ``idata_.attrs["elbo"]``. advi: the ELBO of every iteration
        (``fit.elbo``), each a one-sample Monte Carlo estimate, so it is
        noisy; PyMC's loss is its negative, and ``idata_.attrs["elbo"]`` is
        minus the median loss of the last convergence window. nuts: None, as
        a sampler maximises nothing (the log density of each draw is in
        ``idata_.sample_stats``); None too for constant targets, fitted
        without iterating.
    n_iter_ : int
        Iterations run. evidence: the sequential driver's iterations, of
        every ascent the fast solver ran (Tipping's re-estimations of all
        ``alpha`` for ``solver="full"``); vb: sweeps of the coordinate
        ascent, one ``scores_`` entry each; advi: Adam iterations, one
        ``scores_`` entry each, at most ``max_iter``; nuts: the NUTS
        iterations of each chain, ``tune + draws``.

    Notes
    -----
    ===========================  ==========================================
    Tipping (2001)               rvm_ppl
    ===========================  ==========================================
    Phi (N x M design matrix)    design matrix, ``basis`` dimension
    alpha_i (weight precision)   ``alpha_``, PyMC ``alpha``
    beta = sigma^-2              ``beta_``, PyMC ``beta``
    mu, Sigma                    ``coef_``, ``sigma_``
    gamma_i = 1 - alpha_i S_ii   relevance rule of vb/advi/nuts, MAP evidence
    a, b (Gamma on alpha_i)      ``alpha_shape``, ``alpha_rate``
    c, d (Gamma on beta)         ``beta_shape``, ``beta_rate``
    ===========================  ==========================================

    References
    ----------
    M. E. Tipping. Sparse Bayesian learning and the relevance vector
    machine. JMLR 1:211-244, 2001.
    M. E. Tipping and A. C. Faul. Fast marginal likelihood maximisation for
    sparse Bayesian models. AISTATS 2003.

    Examples
    --------
    >>> from rvm_ppl import RVR
    >>> from rvm_ppl.datasets.loaders import make_sinc
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
        "extra_basis": [callable, None],
        "learn_scales": ["boolean"],
        "scale_schedule": [StrOptions(set(SCHEDULES))],
        "beta_shape": [Interval(Real, 0, None, closed="left"), None],
        "beta_rate": [Interval(Real, 0, None, closed="left"), None],
        "noise_std": [Interval(Real, 0, None, closed="neither"), None],
        "fit_noise": ["boolean"],
        "min_noise_var_ratio": [Interval(Real, 0, 1, closed="left")],
        "solver": [StrOptions({"fast", "full"})],
        "compiled": [StrOptions({"auto"}), "boolean"],
        "low_rank": [StrOptions({"auto"}), "boolean", Interval(Real, 0, 1, closed="neither"), None],
    }

    def __init__(
        self,
        kernel="rbf",
        *,
        # the basis
        gamma="scale",
        degree=3,
        coef0=1.0,
        fit_intercept=True,
        extra_basis=None,
        learn_scales=False,
        scale_schedule="refine",
        # the model
        alpha_shape=None,
        alpha_rate=None,
        beta_shape=None,
        beta_rate=None,
        noise_std=None,
        fit_noise=True,
        min_noise_var_ratio=MIN_NOISE_VAR_RATIO,
        low_rank="auto",
        # the method
        method="evidence",
        max_iter=None,
        tol=None,
        alignment_test=True,
        solver="fast",
        # PyMC's sampler
        draws=1000,
        tune=1000,
        chains=4,
        sample_kwargs=None,
        # the process
        random_state=None,
        compiled="auto",
        blas_threads=1,
        progressbar=True,
    ):
        self.kernel = kernel
        self.gamma = gamma
        self.degree = degree
        self.coef0 = coef0
        self.fit_intercept = fit_intercept
        self.extra_basis = extra_basis
        self.learn_scales = learn_scales
        self.scale_schedule = scale_schedule
        self.alpha_shape = alpha_shape
        self.alpha_rate = alpha_rate
        self.beta_shape = beta_shape
        self.beta_rate = beta_rate
        self.noise_std = noise_std
        self.fit_noise = fit_noise
        self.min_noise_var_ratio = min_noise_var_ratio
        self.low_rank = low_rank
        self.method = method
        self.max_iter = max_iter
        self.tol = tol
        self.alignment_test = alignment_test
        self.solver = solver
        self.draws = draws
        self.tune = tune
        self.chains = chains
        self.sample_kwargs = sample_kwargs
        self.random_state = random_state
        self.compiled = compiled
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
            Fit by this method instead of ``self.method``. After the fit
            ``self.method`` is the method used, so that ``get_params()`` and
            ``clone(self).fit(X, y)`` reproduce the fit; a fit that fails
            leaves the estimator as it was.

        Returns
        -------
        self : RVR
        """
        method = self._check_method(method)
        X, y = validate_data(self, X, y, dtype=INPUT_DTYPES, y_numeric=True,
                             ensure_min_samples=2)
        dtype, X = X.dtype, X.astype(np.float64, copy=False)  # computed in float64
        y = y.astype(np.float64, copy=False)  # y_numeric keeps integer and boolean targets
        if np.ptp(y) == 0:
            return self._fit_constant(X, y, method, dtype)
        kernel = self._make_kernel(X)
        if self.learn_scales and (method != "evidence" or not isinstance(kernel, RBF)):
            raise ValueError("learn_scales=True needs method='evidence' and the 'rbf' kernel.")
        fast = method == "evidence" and self.solver == "fast"
        # Up to COMPILED_DENSE_MAX_N the compiled engine on the exact dense
        # matrix is fastest; above it a low-rank factor, where one exists.
        priors = self._priors()
        dense = fast and X.shape[0] <= COMPILED_DENSE_MAX_N
        basis, labels, n_extra = self._training_basis(
            X, kernel, lazy_ok=method == "vb" or (fast and not dense))
        beta = None if self.noise_std is None else 1.0 / self.noise_std**2
        if self.learn_scales:
            eta0 = np.broadcast_to(np.asarray(kernel.gamma, dtype=float), (X.shape[1],)).copy()
            result, eta, history = fit_evidence_scales(
                X, y, labels=labels, priors=priors,
                max_iter=self.max_iter or DEFAULT_MAX_ITER["evidence"],
                tol=self.tol or DEFAULT_TOL["evidence"], alignment_test=self.alignment_test,
                beta=beta, eta0=eta0, bias=self.fit_intercept, extra_basis=self.extra_basis,
                schedule=self.scale_schedule, progressbar=self.progressbar,
                min_noise_var_ratio=self.min_noise_var_ratio,
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
                model_kw=self._model_kw(),
            )
        self._store(X, y, kernel, n_extra, method, result, dtype=dtype)
        return self

    def _fit_constant(self, X, y, method, dtype):
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
        self._store(X, y, kernel, 0, method, result, dtype=dtype)
        return self

    def _store(self, X, y, kernel, n_extra, method, result, *, dtype=np.float64):
        self._set_fitted(X=X, kernel=kernel, n_extra=n_extra, method=method, results=[result])
        self.y_fit_ = y
        self._store_result(result)
        self._cast_weights(dtype)
        self.beta_ = result.beta

    def _identity(self, likelihood, y=None):
        """Return the base's identity, with a noise precision held fixed (``fit_noise=False``)."""
        identity = super()._identity(likelihood, y)
        if self.method_ == "evidence" and not self.fit_noise:
            identity["hyperprior"]["beta_fixed"] = float(self.result_.beta)
        return identity

    def _model_kw(self):
        return None if self.low_rank is None else {"low_rank": self.low_rank}

    def _model_inputs(self):
        return self.y_fit_, "gaussian", self._model_kw(), None, self.result_

    @property
    def idata_(self):
        """The fit as :class:`arviz.InferenceData` (:mod:`rvm_ppl.output.idata`; built on first access)."""
        check_is_fitted(self, "result_")
        if getattr(self, "_idata", None) is None:
            r = self.result_
            self._idata = to_idata(
                r, y=self.y_fit_, Phi=self._design(self.X_fit_, r.support),
                X=self.X_fit_ if self.kernel_ is not None else None, chains=self.chains,
                draws=self.draws, random_state=_seed(self.random_state),
                attrs=self._idata_attrs(),
                priors=fit_priors(self._priors(), "gaussian", self.method_, self.y_fit_),
                identity=self._identity("gaussian", self.y_fit_),
                constants=self._model_constants(),
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
            Both float32 when ``X`` and the fit's inputs were float32, else
            float64 (computed in float64; numpy's promotion of ``X`` and ``coef_``).
        """
        check_is_fitted(self, "result_")
        X, dtype = self._test_inputs(X)
        if augment:
            mean, std = rvm_star_predict(self, X)
        else:
            post = self.result_
            mean, var = post.latent_moments(self._design(X, post.support))
            if not return_std:
                return mean.astype(dtype, copy=False)
            std = np.sqrt(post.noise_var + var + self._outside_var(post, X))
        mean, std = mean.astype(dtype, copy=False), std.astype(dtype, copy=False)
        return (mean, std) if return_std else mean
