"""Relevance vector regression for counts: :class:`PoissonRVR`."""
from __future__ import annotations

import numpy as np
from sklearn.base import RegressorMixin
from sklearn.utils.validation import _check_sample_weight, check_is_fitted, validate_data

from rvm_ppl.closed_form.poisson import (
    poisson_mixture_pmf,
    poisson_mixture_quantiles,
    predict_count_mean,
    predict_count_pmf,
    predict_count_quantiles,
)
from rvm_ppl.core.counts import pool_counts
from rvm_ppl.core.priors import fit_priors
from rvm_ppl.estimators.base import INPUT_DTYPES, _atomic, _RVMBase, _seed
from rvm_ppl.output.idata import to_idata

# Entries of the (test points x posterior draws) rate matrix that advi's and nuts's
# predictions hold at once.
_RATE_BLOCK = 1_000_000


class PoissonRVR(RegressorMixin, _RVMBase):
    """Relevance vector regression for counts: a Poisson likelihood with a log link.

    The model is ``c_n ~ Poisson(s_n exp(phi(x_n)^T w))`` for counts ``c_n``
    observed over exposures ``s_n``, with the hierarchical prior of
    :class:`RVR` on the weights (one precision ``alpha_m`` per weight, Gamma
    hyperpriors) and, by default, one Gaussian basis function centred on
    each training input plus a bias. It is shaped like scikit-learn's
    :class:`~sklearn.linear_model.PoissonRegressor`: ``y`` is the rate (count
    per unit exposure), ``sample_weight`` the exposure, :meth:`predict` the
    expected count per unit exposure, :meth:`score` the D² of the Poisson
    deviance.

    Parameters
    ----------
    Basis: the functions of x that form the design matrix
    kernel : {"rbf", "linear_spline", "poly", "linear", "precomputed"}, Kernel or callable
        Basis functions ``phi_m(x) = k(x, x_m)``, as in :class:`RVR`.
    gamma : float, array-like or "scale"
        RBF/polynomial scale, as in :class:`RVR`.
    degree, coef0 : int, float
        Polynomial kernel ``(gamma x.y + coef0)^degree``.
    fit_intercept : bool
        Add a bias basis function (with its own ``alpha``).
    Model: the hyperprior
    alpha_shape, alpha_rate : float or None
        Shape ``a`` and rate ``b`` of the Gamma hyperprior on every weight
        precision ``alpha_m`` (Tipping 2001, eq. 6), for weights in log-rate
        units per unit of basis output. None is the method's default: advi
        and nuts take :data:`rvm_ppl.BERNOULLI_PRIORS` (``a = 3, b = 2``:
        every weight a Student-t with 6 degrees of freedom and variance 1;
        :mod:`rvm_ppl.model.build`, "Hyperpriors of the classifier and of
        counts", says why a proper one); the evidence method without them
        maximises the evidence itself (type-II maximum likelihood). Setting
        one (the other then takes :data:`rvm_ppl.DEFAULT_PRIORS`'s 1e-6, as
        for :class:`RVC`) makes the evidence fit type-II MAP: it maximises
        the Laplace evidence plus the log hyperprior of every ``log alpha_m``
        (Tipping 2001, App. A), and its relevance rule is ``E[gamma_m] > 1/2``.
    Method: how the posterior is found
    method : {"evidence", "advi", "nuts"}
        Fitting method; ``"vb"`` is a ``ValueError`` (Bishop & Tipping's
        variational RVM has no bound for the Poisson likelihood).
        ``fit(X, y, method=...)`` fits by another one and makes it this
        parameter.
    max_iter, tol : int, float or None
        Iteration cap and tolerance of the method; None takes the method's
        own (:data:`rvm_ppl.inference.methods.DEFAULT_MAX_ITER`,
        :data:`~rvm_ppl.inference.methods.DEFAULT_TOL`).
    alignment_test : bool
        Skip candidate basis functions that nearly duplicate one already in
        the model (evidence method).
    Sampler: PyMC's settings, by PyMC's names
    draws, tune, chains : int
        Posterior draws kept per chain (all methods), tuning steps and
        chains (nuts).
    sample_kwargs : dict, optional
        Keyword arguments for :func:`rvm_ppl.pymc_fitters.nuts.fit_nuts` and
        :func:`pymc.sample` (nuts) or :func:`rvm_ppl.pymc_fitters.advi.fit_advi`
        (advi).
    Process: randomness, threads and output
    random_state : int, RandomState or None
        Seeds every random draw (PyMC's ``random_seed`` for advi and nuts).
    blas_threads : int or None
        BLAS threads during ``fit`` (default 1).
    progressbar : bool
        Progress output while fitting, as for :class:`RVR`.

    Attributes
    ----------
    kernel_ : Kernel or None
        The kernel used (``None`` when precomputed).
    X_fit_ : ndarray of shape (n_obs, n_features)
        The distinct training inputs of positive exposure, in the order of
        their first appearance (``X`` itself when its rows are distinct and
        every exposure positive): the centres of the basis functions.
    counts_fit_, exposure_fit_ : ndarray of shape (n_obs,)
        The counts ``y * sample_weight`` and the exposures the model
        observes at ``X_fit_``, summed over repeated rows.
    coef_ : ndarray of shape (n_basis,)
        Posterior mean of every weight (evidence: the Laplace mode); exactly
        0 for pruned basis functions. Index 0 is the bias. float32 when
        ``X`` was float32 (computed in float64 and rounded once), else float64.
    sigma_ : ndarray of shape (n_active, n_active)
        Posterior covariance of the weights in ``active_`` (evidence: the
        Laplace covariance ``(Phi^T B Phi + A)^{-1}``, ``B = diag(lambda_n)``),
        in the dtype of ``coef_``.
    active_ : ndarray of int
        Basis indices with non-zero weight.
    alpha_ : ndarray of shape (n_basis,)
        Tipping's weight precisions (``inf`` where pruned); not
        :class:`~sklearn.linear_model.PoissonRegressor`'s ``alpha``, the L2
        penalty.
    relevance_ : ndarray of int
        Indices into ``X_fit_`` of the inputs whose basis function is
        relevant (evidence: in the model; advi, nuts: ``E[gamma_m] > 1/2``).
    relevance_vectors_ : ndarray
        ``X_fit_[relevance_]``.
    log_evidence_ : float
        Laplace approximation of the log marginal likelihood of the counts
        (evidence method).
    idata_ : arviz.InferenceData
        The package's layout (:mod:`rvm_ppl.output.idata`): ``posterior``
        ``w``, ``alpha``; ``log_likelihood`` and ``posterior_predictive`` of
        the counts ``counts_fit_`` under the rule for large N;
        ``observed_data`` the counts; ``constant_data`` ``X`` and, when an
        exposure differs from 1, the log exposure ``offset``; ``fit``,
        ``relevance``, ``prior`` and ``log_prior``. For advi and nuts a
        posterior of the PyMC model :meth:`pymc_model` gives (whose data
        ``offset``, when it has one, is set with ``Phi`` at new inputs).
    scores_ : ndarray of shape (n_scores,) or None
        The objective trace of ``idata_.fit``, the very array, as for
        :class:`RVR`. evidence: the Laplace log evidence (with a hyperprior
        the penalised objective), recorded as for :class:`RVC` and ending at
        ``log_evidence_``; advi: the ELBO of every iteration; nuts: None.
    n_iter_ : int
        Iterations run. evidence: the sequential driver's iterations; advi:
        Adam iterations; nuts: the NUTS iterations of each chain,
        ``tune + draws``.

    Notes
    -----
    **Exposure, as scikit-learn has it.** ``PoissonRegressor`` with targets
    ``y_n`` and sample weights ``s_n`` maximises ``sum_n s_n (y_n log mu_n -
    mu_n)`` (half its weighted deviance, negated, up to a constant). The
    Poisson log likelihood of the counts ``c_n = y_n s_n`` with means ``s_n
    mu_n`` is ``c_n log(s_n mu_n) - s_n mu_n - log c_n! = s_n (y_n log mu_n
    - mu_n) + (c_n log s_n - log c_n!)``, the same function of ``mu`` up to a
    term free of it. So ``fit(X, y, sample_weight=s)`` fits the counts ``c
    = y s`` with the offset ``log s`` in the log rate, and ``mu(x) =
    exp(phi(x)^T w)`` is the rate per unit exposure. Without
    ``sample_weight`` every exposure is 1 and ``y`` holds the counts.
    Repeated inputs are pooled (their counts and exposures add, which leaves
    the likelihood unchanged up to a constant) and rows of zero exposure
    dropped, so that an integer ``sample_weight`` and repeated rows give
    the same fit (:func:`rvm_ppl.core.counts.pool_counts`).

    **Targets.** Non-negative reals, as ``PoissonRegressor`` accepts them.
    The evidence method fits real counts (its log likelihood ``c log
    lambda - lambda - log Gamma(c + 1)`` is Poisson at integers and its
    continuation between them); advi and nuts sample PyMC's Poisson
    density, defined at integer counts only, and raise a ``ValueError``
    when ``y * sample_weight`` is not whole (to ``1e-9`` relative).

    **Predictions.** The evidence method's Laplace posterior makes the log
    rate at ``x`` Gaussian, ``N(m, s^2)``, so the rate is lognormal, its
    mean ``exp(m + s^2 / 2)`` and the count Poisson-lognormal
    (:mod:`rvm_ppl.closed_form.poisson`, by Gauss-Hermite quadrature). For
    advi and nuts the rate's mean is the mean of ``exp(phi^T w)`` over the
    draws and the count a mixture of one Poisson per draw, whose quantiles
    and pmf are computed exactly from the mixture's cdf
    (:func:`rvm_ppl.closed_form.poisson.poisson_mixture_quantiles`).

    advi and nuts sample the weights with every ``alpha_m`` integrated out
    (Student-t priors, Tipping 2001, eq. 32), on the axes of the design
    matrix (its right singular vectors), and draw ``alpha`` exactly
    afterwards (:func:`rvm_ppl.model.build.build_model`, ``"marginal"``).

    References
    ----------
    M. E. Tipping. Sparse Bayesian learning and the relevance vector
    machine. JMLR 1:211-244, 2001.

    Examples
    --------
    >>> import numpy as np
    >>> from rvm_ppl import PoissonRVR
    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(-10, 10, (100, 1))
    >>> y = rng.poisson(np.exp(1 + 2 * np.sinc(X[:, 0] / np.pi)))
    >>> m = PoissonRVR(gamma=1 / 9).fit(X, y)
    >>> len(m.relevance_) < 10, bool(m.score(X, y) > 0.5)
    (True, True)
    >>> lower, upper = m.predict_interval(X[:3], coverage=0.9)
    >>> bool((lower <= upper).all())
    True
    """

    _parameter_constraints: dict = {**_RVMBase._parameter_constraints}

    def __init__(
        self,
        kernel="rbf",
        *,
        # the basis
        gamma="scale",
        degree=3,
        coef0=1.0,
        fit_intercept=True,
        # the model
        alpha_shape=None,
        alpha_rate=None,
        # the method
        method="evidence",
        max_iter=None,
        tol=None,
        alignment_test=True,
        # PyMC's sampler
        draws=1000,
        tune=1000,
        chains=4,
        sample_kwargs=None,
        # the process
        random_state=None,
        blas_threads=1,
        progressbar=True,
    ):
        self.kernel = kernel
        self.gamma = gamma
        self.degree = degree
        self.coef0 = coef0
        self.fit_intercept = fit_intercept
        self.alpha_shape = alpha_shape
        self.alpha_rate = alpha_rate
        self.method = method
        self.max_iter = max_iter
        self.tol = tol
        self.alignment_test = alignment_test
        self.draws = draws
        self.tune = tune
        self.chains = chains
        self.sample_kwargs = sample_kwargs
        self.random_state = random_state
        self.blas_threads = blas_threads
        self.progressbar = progressbar

    def __sklearn_tags__(self):
        """scikit-learn's tags: non-negative targets, as ``PoissonRegressor``'s."""
        tags = super().__sklearn_tags__()
        tags.target_tags.positive_only = True
        return tags

    @_atomic
    def fit(self, X, y, sample_weight=None, method=None):
        """Fit the Poisson relevance vector machine.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,)
            Non-negative rates: counts per unit exposure (the counts
            themselves without ``sample_weight``).
        sample_weight : array-like of shape (n_samples,), optional
            Non-negative exposures; the counts are ``y * sample_weight``
            (see the class's Notes). Default 1.
        method : {"evidence", "advi", "nuts"}, optional
            Fit by this method instead of ``self.method``; afterwards
            ``self.method`` is the method used. A fit that fails leaves the
            estimator as it was.

        Returns
        -------
        self : PoissonRVR
        """
        method = self._check_method(method)
        X, y = validate_data(self, X, y, dtype=INPUT_DTYPES, y_numeric=True,
                             ensure_min_samples=2)
        dtype, X = X.dtype, X.astype(np.float64, copy=False)  # computed in float64
        y = y.astype(np.float64, copy=False)
        if (y < 0).any():
            raise ValueError(f"PoissonRVR needs non-negative targets y (counts per unit "
                             f"exposure); got {y.min():g}.")
        exposure = _check_sample_weight(sample_weight, X, dtype=np.float64,
                                        ensure_non_negative=True)
        if not exposure.any():  # scikit-learn checks this itself from 1.9 on
            raise ValueError("Sample weights must contain at least one non-zero number.")
        X, counts, exposure = pool_counts(X, y, exposure)
        if method in ("advi", "nuts"):
            frac = counts != np.round(counts)
            if frac.any():
                raise ValueError(
                    f"method={method!r} samples PyMC's Poisson density, which is defined at "
                    f"integer counts only, and y * sample_weight has the non-integer count "
                    f"{counts[frac][0]:g}. method='evidence' fits non-negative real counts, as "
                    "PoissonRegressor does.")
        kernel = self._make_kernel(X)
        basis, labels, n_extra = self._training_basis(X, kernel, lazy_ok=method == "evidence")
        result = self._fit_result(method, basis, counts, labels=labels, likelihood="poisson",
                                  offset=_offset(exposure))
        self._store(X, counts, kernel, n_extra, method, result, exposure=exposure, dtype=dtype)
        return self

    def _store(self, X, counts, kernel, n_extra, method, result, *, exposure, dtype=np.float64):
        self._set_fitted(X=X, kernel=kernel, n_extra=n_extra, method=method, results=[result])
        self.counts_fit_ = counts
        self.exposure_fit_ = exposure
        self._store_result(result)
        self._cast_weights(dtype)

    def _model_inputs(self):
        return self.counts_fit_, "poisson", None, _offset(self.exposure_fit_), self.result_

    @property
    def idata_(self):
        """The fit as :class:`arviz.InferenceData` (built on first access).

        The layout of :mod:`rvm_ppl.output.idata` with the counts ``counts_fit_``
        as ``y`` and, when an exposure differs from 1, the log exposure as
        ``constant_data.offset``.
        """
        check_is_fitted(self, "result_")
        if getattr(self, "_idata", None) is None:
            r = self.result_
            self._idata = to_idata(
                r, y=self.counts_fit_, Phi=self._design(self.X_fit_, r.support),
                X=self.X_fit_ if self.kernel_ is not None else None, chains=self.chains,
                draws=self.draws, random_state=_seed(self.random_state),
                attrs=self._idata_attrs(), offset=_offset(self.exposure_fit_),
                priors=fit_priors(self._priors(), "poisson", self.method_, None),
                identity=self._identity("poisson"),
                constants=self._model_constants(),
            )
        return self._idata

    # -- predictions ---------------------------------------------------------------
    def _test_design(self, X, exposure):
        """Design rows of ``X`` on the support, the log exposure at each, the output dtype."""
        check_is_fitted(self, "result_")
        X, dtype = self._test_inputs(X)
        if exposure is None:
            log_s = np.zeros(X.shape[0])
        else:
            s = np.asarray(exposure, dtype=float)
            if s.ndim and s.shape != (X.shape[0],):
                raise ValueError(f"exposure has shape {s.shape}; expected a scalar or "
                                 f"({X.shape[0]},), one per row of X.")
            if not (np.isfinite(s).all() and (s > 0).all()):
                raise ValueError("exposure must be positive and finite.")
            log_s = np.broadcast_to(np.log(s), (X.shape[0],))
        return self._design(X, self.result_.support), log_s, dtype

    def _rate_blocks(self, Phi, log_s):
        """advi, nuts: ``(rows, lambda)`` with the rates of every draw, rows in blocks."""
        w = self.result_.w_draws  # (S, n_support)
        rows = max(1, _RATE_BLOCK // len(w))
        for start in range(0, Phi.shape[0], rows):
            sl = slice(start, start + rows)
            with np.errstate(over="ignore"):
                yield sl, np.exp(Phi[sl] @ w.T + log_s[sl, None])

    def predict(self, X):
        """Expected count per unit exposure: the posterior predictive mean of the rate.

        Evidence: ``exp(m + s^2 / 2)`` for the Laplace posterior's log rate
        ``N(m, s^2)``; advi and nuts: the mean of ``exp(phi^T w)`` over the draws.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)

        Returns
        -------
        ndarray of shape (n_samples,)
            float32 when ``X`` and the fit's inputs were float32, else float64.
        """
        Phi, log_s, dtype = self._test_design(X, None)
        r = self.result_
        if r.draws is None:
            out = predict_count_mean(Phi, r.mean, r.cov)
        else:
            out = np.empty(Phi.shape[0])
            for sl, lam in self._rate_blocks(Phi, log_s):
                out[sl] = lam.mean(axis=1)
        return out.astype(dtype, copy=False)

    def predict_interval(self, X, coverage=0.9, exposure=None):
        """Central interval of the predictive distribution of the count.

        The ``(1 - coverage) / 2`` and ``(1 + coverage) / 2`` quantiles of the
        count observed over ``exposure`` at each input: of the
        Poisson-lognormal (evidence, Gauss-Hermite quadrature;
        :func:`rvm_ppl.closed_form.poisson.predict_count_quantiles`) or of
        the mixture of one Poisson per posterior draw (advi, nuts; exactly,
        from the mixture's cdf). A quantile is the smallest count whose cdf
        reaches the level, so the interval holds at least ``coverage`` of
        the predictive mass.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        coverage : float in (0, 1)
        exposure : float or array-like of shape (n_samples,), optional
            The exposure over which the count is observed; default 1 (the
            count per unit exposure).

        Returns
        -------
        lower, upper : ndarray of int, shape (n_samples,)
        """
        if not 0 < coverage < 1:
            raise ValueError(f"coverage must be in (0, 1); got {coverage!r}.")
        q = ((1 - coverage) / 2, (1 + coverage) / 2)
        Phi, log_s, _ = self._test_design(X, exposure)
        r = self.result_
        if r.draws is None:
            out = predict_count_quantiles(Phi, r.mean, r.cov, q, offset=log_s)
        else:
            out = np.empty((Phi.shape[0], 2), dtype=np.int64)
            for sl, lam in self._rate_blocks(Phi, log_s):
                out[sl] = poisson_mixture_quantiles(lam, np.full(lam.shape[1], 1 / lam.shape[1]),
                                                    q)
        return out[:, 0], out[:, 1]

    def predict_pmf(self, X, counts, exposure=None):
        """Predictive probability of each count in ``counts`` over ``exposure`` at each input.

        The pmf of the distributions :meth:`predict_interval` reads its
        quantiles from.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        counts : array-like of int, shape (K,)
        exposure : float or array-like of shape (n_samples,), optional
            Default 1.

        Returns
        -------
        ndarray of shape (n_samples, K)
        """
        Phi, log_s, _ = self._test_design(X, exposure)
        r = self.result_
        if r.draws is None:
            return predict_count_pmf(Phi, r.mean, r.cov, counts, offset=log_s)
        out = np.empty((Phi.shape[0], np.size(counts)))
        for sl, lam in self._rate_blocks(Phi, log_s):
            out[sl] = poisson_mixture_pmf(lam, np.full(lam.shape[1], 1 / lam.shape[1]), counts)
        return out

    def score(self, X, y, sample_weight=None):
        """D², the fraction of the Poisson deviance explained, as ``PoissonRegressor.score``.

        ``1 - D(y, predict(X)) / D(y, ybar)`` with the Poisson deviance ``D``
        weighted by ``sample_weight`` and ``ybar`` its weighted mean of ``y``
        (:func:`sklearn.metrics.d2_tweedie_score` with ``power=1``).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,)
            Non-negative rates.
        sample_weight : array-like of shape (n_samples,), optional
            Exposures.

        Returns
        -------
        float
        """
        from sklearn.metrics import d2_tweedie_score  # its import loads sklearn's callbacks

        return float(d2_tweedie_score(y, self.predict(X), sample_weight=sample_weight, power=1))


def _offset(exposure):
    """The log exposure, or None when every exposure is 1."""
    return None if np.all(exposure == 1.0) else np.log(exposure)
