"""Relevance vector classification: :class:`RVC` (binary at its core; one-vs-rest or one softmax model for more classes)."""
from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
from scipy.special import expit, softmax
from sklearn.base import ClassifierMixin
from sklearn.utils._param_validation import StrOptions
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from rvm_ppl.closed_form.bernoulli import predict_proba_moderated
from rvm_ppl.closed_form.categorical import fit_evidence_multinomial, predict_proba_multinomial
from rvm_ppl.core.linalg import blas_limit
from rvm_ppl.core.priors import fit_priors
from rvm_ppl.estimators.base import INPUT_DTYPES, _atomic, _RVMBase, _seed, objective_trace
from rvm_ppl.inference.methods import (
    DEFAULT_MAX_ITER,
    DEFAULT_TOL,
    alpha_hyperprior,
    multinomial_evidence_results,
)
from rvm_ppl.output.idata import multinomial_idata, ovr_idata, to_idata


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
    Basis: the functions of x that form the design matrix
    kernel, gamma, degree, coef0, fit_intercept : as for RVR
        As for :class:`RVR`.
    Model: the hyperprior and the classes
    alpha_shape, alpha_rate : float or None
        Shape ``a`` and rate ``b`` of the Gamma hyperprior on every weight
        precision ``alpha_m`` (Tipping 2001, eq. 6), on the columns of the
        design matrix as they are; there is no noise precision. None, for
        both, is the method's default: the evidence method takes none
        (type-II maximum likelihood, the limit ``a = b -> 0``); vb takes
        :data:`rvm_ppl.DEFAULT_PRIORS` (1e-6, Bishop & Tipping's limit);
        advi and nuts take :data:`rvm_ppl.BERNOULLI_PRIORS` (``a = 3, b =
        2``): as ``a -> 0`` the exact posterior of a classifier puts its
        mass on unbounded weights that separate the training data, which no
        sampler can explore (:mod:`rvm_ppl.model.build`, "Hyperpriors of the
        classifier"). Setting one (the other then takes
        :data:`rvm_ppl.DEFAULT_PRIORS`'s 1e-6, as for :class:`RVR`) makes
        the evidence fit type-II MAP: it maximises the Laplace evidence plus
        the log hyperprior of the ``log alpha`` in the model (Tipping 2001,
        App. A; :func:`rvm_ppl.closed_form.bernoulli.fit_evidence_bernoulli`),
        and relevance is ``E[gamma_m] > 1/2`` as for the other methods. Set
        both to compare all four methods on one model.
    multi_class : {"ovr", "multinomial"}
        How ``K > 2`` classes are modelled. ``"ovr"``: ``K`` binary
        one-vs-rest models (as Tipping did for U.S.P.S.). ``"multinomial"``:
        one softmax model (Tipping 2001, eq. 28), ``K`` weight vectors with
        their own ``alpha`` (or shared ones), fitted by evidence (Laplace
        approximation with the block Hessian), advi or nuts; vb is
        one-vs-rest only. With two classes ``"multinomial"`` fits the
        softmax model with two weight vectors too. The default is
        ``"ovr"`` because on scikit-learn's digits one-vs-rest was both more
        accurate and much faster than either multinomial model (the
        user guide, "Multi-class: one-vs-rest or one softmax model";
        ``benchmarks/bench_multiclass.py``).
    shared_alpha : bool
        ``multi_class="multinomial"`` only: one ``alpha`` per basis function
        for all classes (a basis enters or leaves every class's model at
        once) instead of one per class and basis.
    Method: how the posterior is found
    method, max_iter, tol, alignment_test : as for RVR
        As for :class:`RVR` (the evidence method has the fast solver only).
    Sampler: PyMC's settings, by PyMC's names
    draws, tune, chains, sample_kwargs : as for RVR
        As for :class:`RVR`.
    Process: randomness, threads and output
    random_state, blas_threads, progressbar : as for RVR
        As for :class:`RVR`.

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
    coef_ : ndarray of shape (n_models, n_basis)
        Posterior mean (evidence: mode) of the weights, one row per binary
        model (one for two classes, one per class for one-vs-rest) or per
        class of the multinomial model. float32 when ``X`` was float32
        (computed in float64 and rounded once), else float64.
    sigma_ : list of ndarray
        Per row of ``coef_``, the posterior covariance of its weights in
        ``active_``, in the dtype of ``coef_``.
    alpha_ : ndarray of shape (n_models, n_basis)
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
        ``class`` dimension after ``draw``. For advi and nuts with two classes
        or ``multi_class="multinomial"``, a posterior of the PyMC model
        :meth:`pymc_model` gives.
    scores_ : ndarray of shape (n_scores,) or (n_classes, n_scores), or None
        The objective trace of ``idata_.fit``, the very array, as for
        :class:`RVR`: one model (two classes, or ``multi_class="multinomial"``)
        gives one trace; one-vs-rest with more classes one row per class,
        NaN after that model's last entry. evidence: the Laplace log
        evidence (``fit.log_evidence``; with a hyperprior the penalised
        objective, ``fit.objective``), after the first search of the posterior
        mode and after every step that changed the model, ending at
        ``log_evidence_``; it is recomputed at a moving mode and may dip
        (:mod:`rvm_ppl.closed_form.bernoulli`). vb: the Jaakkola-Jordan bound
        after every sweep, never decreasing. advi: the ELBO of every
        iteration. nuts: None.
    n_iter_ : ndarray of int, shape (n_models,) or (1,)
        Iterations run by each binary model (one entry for two classes, one
        per class for one-vs-rest) or by the one multinomial model (shape
        (1,), as :class:`~sklearn.linear_model.LogisticRegression` has it).
        evidence: the sequential driver's iterations; vb: sweeps; advi: Adam
        iterations; nuts: the NUTS iterations of each chain, ``tune + draws``.

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
    (:func:`rvm_ppl.closed_form.categorical.predict_proba_multinomial`); advi
    and nuts average the softmax over their draws.

    advi and nuts sample the weights with every ``alpha_m`` integrated out
    (Student-t priors, Tipping 2001, eq. 32) and draw ``alpha`` exactly
    afterwards (:func:`rvm_ppl.model.build.build_model`, ``"marginal"``). Their
    posterior is not sparse: no weight is individually well determined, so
    ``E[gamma_m] > 1/2`` rarely marks any basis function relevant, while
    the posterior-predictive probabilities average over all of them.

    Examples
    --------
    >>> from rvm_ppl import RVC
    >>> from rvm_ppl.datasets.loaders import load_ripley
    >>> X, y, Xt, yt = load_ripley()
    >>> clf = RVC(gamma=4.0).fit(X[::2], y[::2])
    >>> bool(clf.score(Xt, yt) > 0.85), len(clf.relevance_) < 10
    (True, True)

    Three classes in one softmax model:

    >>> from rvm_ppl.datasets.loaders import make_three_class
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
        # the basis
        gamma="scale",
        degree=3,
        coef0=1.0,
        fit_intercept=True,
        # the model
        alpha_shape=None,
        alpha_rate=None,
        multi_class="ovr",
        shared_alpha=False,
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
        self.multi_class = multi_class
        self.shared_alpha = shared_alpha
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

    @_atomic
    def fit(self, X, y, method=None):
        """Fit the relevance vector classifier.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,)
            Class labels of any type.
        method : {"evidence", "vb", "advi", "nuts"}, optional
            Fit by this method instead of ``self.method``. After the fit
            ``self.method`` is the method used, so that ``get_params()`` and
            ``clone(self).fit(X, y)`` reproduce the fit; a fit that fails
            leaves the estimator as it was.

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
        dtype = X.dtype if X.dtype in INPUT_DTYPES else np.dtype(np.float64)
        X = np.asarray(X, dtype=np.float64)  # computed in float64
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
            self._store(X, classes, codes, kernel, n_extra, method, results, joint_cov=joint_cov,
                        dtype=dtype)
            return self
        # One binary model for two classes (t = 1 for classes[1]); one per class
        # against the rest otherwise. No start: the evidence fit starts, as
        # SparseBayes does for the Bernoulli likelihood, from the basis best
        # aligned with 2 t - 1 (notes/sparse_bayes_algorithm.md §2.8).
        targets = [codes == 1] if len(classes) == 2 else [codes == k for k in range(len(classes))]
        results = [self._fit_result(method, basis, t.astype(float), labels=labels,
                                    likelihood="bernoulli") for t in targets]
        self._store(X, classes, codes, kernel, n_extra, method, results, dtype=dtype)
        return self

    def _fit_multinomial(self, method, basis, codes, labels, classes):
        """The softmax RVM: one result per class and, for evidence, the joint covariance."""
        max_iter = self.max_iter or DEFAULT_MAX_ITER.get(method)
        tol = self.tol or DEFAULT_TOL.get(method)
        if method == "evidence":
            with blas_limit(self.blas_threads):
                res = fit_evidence_multinomial(basis, codes, n_classes=len(classes),
                                               shared_alpha=self.shared_alpha,
                                               max_iter=max_iter, tol=tol,
                                               alignment_test=self.alignment_test,
                                               progressbar=self.progressbar,
                                               priors=alpha_hyperprior(self._priors()))
            return multinomial_evidence_results(res, labels), res.Sigma
        return self._fit_result(method, basis, codes, labels=labels, likelihood="categorical",
                                model_kw=self._multinomial_model_kw(classes)), None

    def _multinomial_model_kw(self, classes):
        return {"shared_alpha": self.shared_alpha, "classes": [str(c) for c in classes]}

    def _model_inputs(self):
        if self._multinomial:
            return (self.y_codes_, "categorical", self._multinomial_model_kw(self.classes_), None,
                    self.results_)
        if len(self.results_) > 1:
            raise ValueError(
                f"A one-vs-rest classifier of {len(self.results_)} classes is "
                f"{len(self.results_)} binary models, not one PyMC model; use "
                "multi_class='multinomial' for one model of all classes.")
        return (self.y_codes_ == 1).astype(float), "bernoulli", None, None, self.results_[0]

    def _store(self, X, classes, codes, kernel, n_extra, method, results, joint_cov=None, *,
               dtype=np.float64):
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
        models = results[:1] if self._multinomial else results  # one softmax model, or K
        # -1: not recorded (a nuts fit saved by a version before n_iter was)
        self.n_iter_ = np.array([r.stats.get("n_iter", -1) for r in models])
        traces = [objective_trace(r) for r in models]
        if traces[0] is None or len(traces) == 1:
            self.scores_ = traces[0]
        else:  # the fit group's (class, iteration) array: NaN after a model's last iteration
            self.scores_ = np.full((len(traces), max(map(len, traces))), np.nan)
            for k, trace in enumerate(traces):
                self.scores_[k, :len(trace)] = trace
        if method == "evidence":
            self.log_evidence_ = np.array([r.stats["log_evidence"] for r in results])
            if self._multinomial:  # one model, one evidence
                self.log_evidence_ = float(self.log_evidence_[0])
        else:
            self.__dict__.pop("log_evidence_", None)
        self._cast_weights(dtype)

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

    def _proba(self, X):
        """Class probabilities in float64 at validated float64 inputs ``X``."""
        if self._multinomial:
            return self._multinomial_proba(X)
        P = np.column_stack([self._binary_proba(r, X) for r in self.results_])
        if P.shape[1] == 1:
            return np.column_stack([1.0 - P[:, 0], P[:, 0]])
        return P / P.sum(axis=1, keepdims=True)

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
        X, dtype = self._test_inputs(X)
        if self._multinomial:
            logP = np.log(np.clip(self._multinomial_proba(X), np.finfo(float).tiny, None))
            if logP.shape[1] == 2:
                return (logP[:, 1] - logP[:, 0]).astype(dtype, copy=False)
            return (logP - logP.mean(axis=1, keepdims=True)).astype(dtype, copy=False)
        P = np.column_stack([self._binary_proba(r, X) for r in self.results_])
        P = np.clip(P, np.finfo(float).tiny, 1 - np.finfo(float).epsneg)
        f = np.log(P) - np.log1p(-P)
        return (f[:, 0] if f.shape[1] == 1 else f).astype(dtype, copy=False)

    def predict_proba(self, X):
        """Class probabilities, columns in ``classes_`` order.

        Returns
        -------
        ndarray of shape (n_samples, n_classes)
            float32 when ``X`` and the fit's inputs were float32, else float64
            (computed in float64, as :meth:`predict` and
            :meth:`decision_function`, which follow the same rule).
        """
        check_is_fitted(self, "results_")
        X, dtype = self._test_inputs(X)
        return self._proba(X).astype(dtype, copy=False)

    def predict_log_proba(self, X):
        """Logarithm of :meth:`predict_proba`."""
        check_is_fitted(self, "results_")
        X, dtype = self._test_inputs(X)
        return np.log(self._proba(X)).astype(dtype, copy=False)

    def predict(self, X):
        """Most probable class (by the float64 probabilities, whatever the dtype of ``X``)."""
        check_is_fitted(self, "results_")
        X, _ = self._test_inputs(X)
        return self.classes_[np.argmax(self._proba(X), axis=1)]

    @property
    def idata_(self):
        """The fit as :class:`arviz.InferenceData` (built on first access).

        Two classes: the binary model's InferenceData (:mod:`rvm_ppl.output.idata`),
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
                joint_cov=self.joint_cov_, attrs=self._idata_attrs(),
                priors=fit_priors(self._priors(), "categorical", self.method_, None),
                identity=self._identity("categorical"), constants=self._model_constants())
        if getattr(self, "_idata", None) is None:
            seed = _seed(self.random_state)
            parts = [
                to_idata(r, y=(self.y_codes_ == (k if len(self.results_) > 1 else 1)).astype(int),
                         Phi=self._design(self.X_fit_, r.support),
                         X=self.X_fit_ if self.kernel_ is not None else None,
                         chains=self.chains, draws=self.draws,
                         random_state=None if seed is None else seed + k,
                         attrs={**self._idata_attrs(), "classes": json.dumps(
                             [str(c) for c in self.classes_])},
                         priors=fit_priors(self._priors(), "bernoulli", self.method_, None),
                         identity=self._identity("bernoulli"),
                         constants=self._model_constants() if len(self.results_) == 1 else None)
                for k, r in enumerate(self.results_)
            ]
            self._idata = parts[0] if len(parts) == 1 else ovr_idata(
                parts, self.classes_, self.y_codes_, seed)
        return self._idata
