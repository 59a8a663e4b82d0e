"""``fit(method=...)``: one table maps method names to fitters, one result type.

Every fitter takes the candidate basis (a design matrix or a lazy kernel
basis), the targets in their own units and explicit keyword arguments, and
returns a :class:`FitResult` in the units of the targets. Regression
hyperpriors are given for targets of unit standard deviation. The sampling
methods apply them to ``y`` by scaling their rates
(:func:`rvm_ppl.model.build.scale_priors`), which is the same model, so nothing
needs converting. The closed-form methods run on ``y / std(y)``, where their
numerical tolerances were set, and their result builders
(:func:`_evidence_result`, :func:`_vb_result`) express what they return in
the units of ``y``: the only place where units are converted. :func:`rvm_ppl.output.idata.to_idata` turns a result into
the InferenceData.

Predictions need only the moments: for any posterior, the predictive mean
and variance at ``phi(x)`` are ``phi^T E[w]`` and
``phi^T Cov[w] phi + E[1/beta]`` (Tipping 2001, eqs. 21-22 for the evidence
method; exact moments of the posterior predictive for the others).

Relevance rules
---------------
``evidence`` without a hyperprior on ``alpha`` (type-II maximum likelihood)
    ``alpha_m`` finite (the basis is in the final model).
``evidence`` with one (type-II MAP), ``vb``, ``advi``, ``nuts``
    ``E[gamma_m] > 1/2`` with ``gamma_m = 1 - alpha_m Sigma_mm`` (Tipping 2001,
    eq. 17), the posterior expectation of how well the data determine weight
    ``m`` on a scale from 0 (by the prior alone) to 1 (by the data alone).
    The rule is free of units and needs no threshold on ``alpha``. For the
    MAP point ``gamma_m`` is that of its ``alpha_m`` (0 outside the model).
"""

from __future__ import annotations

import logging
import time
import warnings
from dataclasses import replace
from types import MappingProxyType

import numpy as np

from rvm_ppl.core.linalg import blas_limit
from rvm_ppl.core.result import FitResult, gamma_relevance
from rvm_ppl.kernels.basis import DenseBasis

_log = logging.getLogger("rvm_ppl")
from rvm_ppl.closed_form.bernoulli import fit_evidence_bernoulli
from rvm_ppl.closed_form.evidence import MIN_NOISE_VAR_RATIO, fit_evidence_full, fit_evidence_regression
from rvm_ppl.closed_form.poisson import fit_evidence_poisson
from rvm_ppl.closed_form.scales import fit_eta_rvm
from rvm_ppl.closed_form.vb import fit_vb_classification, fit_vb_regression
from rvm_ppl.core.priors import resolve_priors, scale_priors, target_scale

# Each method's iteration cap and tolerance when the estimator leaves them at
# None: evidence, change in log alpha (Tipping & Faul 2003); vb, relative
# change of the bound; advi, change of the windowed median loss in nats per
# observation (rvm_ppl.pymc_fitters).
# Read-only, as every module-level table of the package.
DEFAULT_MAX_ITER = MappingProxyType({"evidence": 10_000, "vb": 5_000, "advi": 50_000})
DEFAULT_TOL = MappingProxyType({"evidence": 1e-3, "vb": 1e-7, "advi": 1e-2})


def dense_phi(basis, method):
    """The explicit design matrix, which every method but the fast evidence solver needs."""
    if isinstance(basis, np.ndarray):
        return basis
    if not isinstance(basis, DenseBasis):
        raise ValueError(
            f"{method} needs the dense design matrix; for large N use method='evidence' "
            "with solver='fast'."
        )
    return basis.Phi


def _map_fit(priors):
    """Whether an evidence fit with these hyperpriors is type-II MAP in ``alpha`` (a or b set)."""
    return priors is not None and bool(priors["a"] or priors["b"])


def evidence_relevance(alpha, gamma, priors):
    """Decide relevance by the evidence method's rule (module docstring).

    ``alpha_m`` finite for plain type-II maximum likelihood; ``E[gamma_m] >
    1/2`` (:func:`rvm_ppl.core.result.gamma_relevance`), as for the posterior
    methods, when a Gamma hyperprior on ``alpha`` makes the fit type-II MAP.
    """
    return gamma_relevance(gamma) if _map_fit(priors) else np.isfinite(alpha)


def _evidence_result(res, labels, likelihood, scale=1.0, n_obs=0):
    """A :class:`FitResult` from an :class:`~rvm_ppl.closed_form.evidence.EvidenceResult` of ``y / scale``.

    With ``t = y / s``: ``w = s w'``, ``alpha = alpha' / s^2``,
    ``beta = beta' / s^2``, Faul & Tipping's ``s_m = s'_m / s^2`` and
    ``q_m = q'_m / s``, and a log density of ``y`` is that of ``t`` minus
    ``N log s``. A type-II MAP fit also records the penalised objective it
    maximised (``objective``, its trace in the ``fit`` group).
    """
    gamma = np.zeros(len(res.alpha))
    gamma[res.active] = 1.0 - res.alpha[res.active] * np.diag(res.Sigma)
    shift = n_obs * np.log(scale)
    stats = {"log_evidence": float(res.log_evidence) - shift, "n_iter": int(res.n_iter),
             "converged": int(res.converged)}
    fit = {"log_evidence": (("iteration",), res.log_evidence_trace - shift),
           "s": (("candidate",), res.s / scale**2), "q": (("candidate",), res.q / scale)}
    if _map_fit(res.priors):
        stats["objective"] = float(res.objective) - shift
        fit["objective"] = (("iteration",), np.asarray(res.objective_trace) - shift)
    beta = None if res.beta is None else res.beta / scale**2
    return FitResult(
        method="evidence",
        likelihood=likelihood,
        basis=tuple(labels),
        support=np.asarray(res.active, dtype=int),
        mean=res.mu * scale,
        cov=res.Sigma * scale**2,
        alpha=res.alpha / scale**2,
        beta=beta,
        noise_var=None if beta is None else 1.0 / beta,
        gamma=gamma,
        relevant=evidence_relevance(res.alpha, gamma, res.priors),
        stats=stats,
        fit=fit,
    )


def fit_evidence(basis, y, *, labels, likelihood, priors, max_iter, tol, solver,
                 alignment_test, start, beta, fit_beta, progressbar=False, compiled="auto",
                 offset=None, min_noise_var_ratio=MIN_NOISE_VAR_RATIO):
    """Type-II maximum likelihood, or type-II MAP under a Gamma hyperprior.

    ``solver`` chooses the fast sequential algorithm of Tipping & Faul (2003)
    (``"fast"``) or Tipping's (2001) re-estimation of all ``alpha`` at once
    (``"full"``). Without ``priors`` this is plain type-II maximum
    likelihood, the limit ``a = b = c = d -> 0`` of the model; with them, the
    posterior of ``(log alpha, log beta)`` is maximised (Tipping 2001, App. A),
    the missing ones taken from :data:`rvm_ppl.model.build.DEFAULT_PRIORS`.
    The Bernoulli and Poisson likelihoods (fast solver only) take ``a, b`` of
    ``priors`` on the Laplace evidence
    (:func:`rvm_ppl.closed_form.bernoulli.fit_evidence_bernoulli`).
    ``progressbar`` shows a live line for a fast fit that runs over two
    seconds. ``compiled``: where the regression's fast solver runs
    (:func:`rvm_ppl.closed_form.evidence.fit_evidence_regression`).
    ``offset``: the Poisson likelihood's log exposure
    (:func:`rvm_ppl.closed_form.poisson.fit_evidence_poisson`).
    ``min_noise_var_ratio``: the regression's cap on the noise precision,
    ``beta <= 1 / (min_noise_var_ratio var(y))`` (both solvers).
    """
    if solver not in ("fast", "full"):
        raise ValueError(f"Unknown solver {solver!r}; expected 'fast' or 'full'.")
    if offset is not None and likelihood != "poisson":
        raise ValueError(f"offset (a log exposure) belongs to the 'poisson' likelihood; got "
                         f"likelihood={likelihood!r}.")
    if likelihood in ("bernoulli", "poisson"):
        if solver != "fast":
            raise ValueError(f"The {likelihood} likelihood's evidence method has the fast "
                             "sequential solver only; use solver='fast'.")
        common = dict(start=start, max_iter=max_iter, tol=tol, alignment_test=alignment_test,
                      progressbar=progressbar, priors=alpha_hyperprior(priors))
        res = (fit_evidence_bernoulli(basis, y, **common) if likelihood == "bernoulli"
               else fit_evidence_poisson(basis, y, offset, **common))
        return _evidence_result(res, labels, likelihood)
    if priors is not None:
        priors = resolve_priors(priors)
    scale = target_scale(y)
    t = y / scale
    beta = None if beta is None else beta * scale**2
    if solver == "fast":
        res = fit_evidence_regression(
            basis, t, start=start, priors=priors, alignment_test=alignment_test, beta=beta,
            fixed_beta=not fit_beta, max_iter=max_iter, tol=tol, progressbar=progressbar,
            compiled=compiled, min_noise_var_ratio=min_noise_var_ratio,
        )
    else:
        if priors is not None:
            raise ValueError("solver='full' maximises the plain evidence; use solver='fast' "
                             "with hyperpriors.")
        res = fit_evidence_full(dense_phi(basis, "solver='full'"), t, beta=beta,
                                fixed_beta=not fit_beta, max_iter=max_iter, tol=tol,
                                min_noise_var_ratio=min_noise_var_ratio)
    return _evidence_result(res, labels, likelihood, scale, len(y))


def alpha_hyperprior(priors):
    """Return the ``a, b`` of ``priors`` completed (:func:`~rvm_ppl.core.priors.resolve_priors`).

    None stays None.

    What the evidence fits of the likelihoods without a noise precision
    (Bernoulli, Poisson, categorical) take: ``c, d`` do not enter them.
    """
    if priors is None:
        return None
    p = resolve_priors(priors)
    return {"a": p["a"], "b": p["b"]}


def multinomial_evidence_results(res, labels):
    """One :class:`FitResult` per class from a :class:`MultinomialEvidenceResult`.

    Class ``k``'s support is the bases its weights use, ``mean`` and ``cov``
    its block of the Laplace posterior, ``alpha`` its row (``inf`` where
    pruned), ``gamma_km = 1 - alpha_km Sigma_km,km`` (Tipping 2001, eq. 17)
    with the joint ``Sigma``; every class carries the model's log evidence
    (and, type-II MAP, the penalised objective); relevance by
    :func:`evidence_relevance`.
    """
    K = res.n_classes
    cls, p = res.coef_index[:, 0], res.coef_index[:, 1]
    diag = np.diag(res.Sigma)
    stats = {"log_evidence": float(res.log_evidence), "n_iter": int(res.n_iter),
             "converged": int(res.converged), "shared_alpha": int(res.shared_alpha)}
    fit = {"log_evidence": (("iteration",), res.log_evidence_trace)}
    if _map_fit(res.priors):
        stats["objective"] = float(res.objective)
        fit["objective"] = (("iteration",), np.asarray(res.objective_trace))
    out = []
    for k in range(K):
        rows = np.flatnonzero(cls == k)
        support = res.active[p[rows]]
        alpha = res.alpha[k]
        gamma = np.zeros(len(alpha))
        gamma[support] = 1.0 - alpha[support] * diag[rows]
        out.append(FitResult(
            method="evidence", likelihood="categorical", basis=tuple(labels),
            support=np.asarray(support, dtype=int), mean=res.mu[k, p[rows]],
            cov=res.Sigma[np.ix_(rows, rows)], alpha=alpha, beta=None, noise_var=None,
            gamma=gamma, relevant=evidence_relevance(alpha, gamma, res.priors),
            stats={**stats, "class": str(k)}, fit=fit,
        ))
    return out


def fit_evidence_scales(X, y, *, labels, priors, max_iter, tol, alignment_test, beta, eta0,
                        bias, extra_basis, schedule, progressbar=False,
                        min_noise_var_ratio=MIN_NOISE_VAR_RATIO):
    """Type-II maximum likelihood with one learned Gaussian-kernel scale per input.

    Tipping (2001), App. C (:func:`rvm_ppl.closed_form.scales.fit_eta_rvm`). Returns the
    :class:`FitResult`, the learned scales and the history of the rounds.
    """
    if priors is not None:
        priors = resolve_priors(priors)
    scale = target_scale(y)
    res, eta, history = fit_eta_rvm(
        X, y / scale, eta0=eta0, bias=bias, priors=priors, extra_basis=extra_basis,
        schedule=schedule, alpha_tol=tol, alignment_test=alignment_test,
        beta=None if beta is None else beta * scale**2, max_iter=max_iter,
        progressbar=progressbar, min_noise_var_ratio=min_noise_var_ratio,
    )
    return _evidence_result(res, labels, "gaussian", scale, len(y)), np.asarray(eta), history


def fit_vb(basis, y, *, labels, likelihood, priors, max_iter, tol, progressbar=False):
    """Bishop & Tipping's variational RVM: closed-form ``Q(w) Q(alpha) Q(beta)``.

    Fitted one basis function at a time (:mod:`rvm_ppl.closed_form.vb`), so a
    lazy kernel basis serves as well as a design matrix.
    """
    if likelihood not in ("gaussian", "bernoulli"):
        raise ValueError(
            f"method='vb' has no bound for the {likelihood} likelihood (Bishop & Tipping's "
            "variational RVM is for the Gaussian and, with the Jaakkola-Jordan bound, the "
            "Bernoulli likelihood); use method 'evidence', 'advi' or 'nuts'.")
    p = resolve_priors(priors)
    if isinstance(basis, np.ndarray):
        basis = DenseBasis(basis)
    if likelihood == "gaussian":
        scale = target_scale(y)
        res = fit_vb_regression(basis, y / scale, **p, max_iter=max_iter, tol=tol,
                                progressbar=progressbar)
        return _vb_result(res, labels, likelihood, scale, len(y))
    res = fit_vb_classification(basis, y, a=p["a"], b=p["b"], max_iter=max_iter, tol=tol,
                                progressbar=progressbar)
    return _vb_result(res, labels, likelihood)


def _vb_result(res, labels, likelihood, scale=1.0, n_obs=0):
    """A :class:`FitResult` from a :class:`~rvm_ppl.closed_form.vb.VBResult` of ``y / scale``.

    With ``t = y / s``: ``w = s w'``, the rates of ``Q(alpha)`` and ``Q(beta)``
    are multiplied by ``s^2`` (their shapes stay), and the bound on
    ``log p(y)`` is the bound on ``log p(t)`` minus ``N log s``.
    """
    support = np.asarray(res.active, dtype=int)
    cov = res.cov  # on the active set
    outside_var = np.asarray(res.weight_var, dtype=float) * scale**2
    outside_var[support] = 0.0
    alpha_shape, alpha_rate = res.alpha_shape, res.alpha_rate * scale**2
    alpha_mean = alpha_shape / alpha_rate  # Bishop & Tipping (2000), eq. (30)
    cov = cov * scale**2
    gamma = np.zeros(len(res.mean))
    gamma[support] = 1.0 - alpha_mean[support] * np.diag(cov)
    gaussian = likelihood == "gaussian"
    shift = n_obs * np.log(scale)
    fit = {"elbo": (("iteration",), res.bound_trace - shift),
           "alpha_shape": (("candidate",), alpha_shape),
           "alpha_rate": (("candidate",), alpha_rate)}
    beta_gamma = noise_var = None
    if gaussian:
        beta_gamma = (res.beta_shape, res.beta_rate * scale**2)
        fit.update(beta_shape=((), beta_gamma[0]), beta_rate=((), beta_gamma[1]))
        # E[1/beta] for Q(beta) = Gamma(c~, d~) is d~ / (c~ - 1).
        noise_var = beta_gamma[1] / (beta_gamma[0] - 1)
    return FitResult(
        method="vb",
        likelihood=likelihood,
        basis=tuple(labels),
        support=support,
        mean=res.mean[support] * scale,
        cov=cov,
        alpha=alpha_mean,
        beta=1.0 / noise_var if gaussian else None,
        noise_var=noise_var,
        gamma=gamma,
        relevant=gamma_relevance(gamma),
        stats={"elbo": float(res.bound) - shift, "n_iter": int(res.n_iter),
               "converged": int(res.converged)},
        fit=fit,
        alpha_gamma=(alpha_shape, alpha_rate),
        beta_gamma=beta_gamma,
        outside_var=outside_var,
        outside_coupling=res.coupling,  # a ratio of weights: free of the scale
    )


def _sampling_model(basis, y, labels, likelihood, priors, model_kw=None):
    """The PyMC model of the sampling methods, hyperpriors in the units of ``y``.

    ``model_kw``: further keywords of :func:`rvm_ppl.model.build.build_model`
    (``shared_alpha``, ``classes`` of the categorical likelihood).
    """
    from rvm_ppl.core.priors import model_priors
    from rvm_ppl.model.build import build_model

    p = (scale_priors(priors, target_scale(y)) if likelihood == "gaussian"
         else model_priors(priors, likelihood))
    return build_model(dense_phi(basis, "method='advi'/'nuts'"), y, likelihood=likelihood,
                       basis=list(labels), priors=p, **(model_kw or {}))


def check_model_fit(result):
    """Raise a ValueError unless ``result`` holds posterior draws of a PyMC model (advi, nuts).

    See :func:`fitted_model`, which calls it.
    """
    first = result[0] if isinstance(result, list) else result
    if first.method not in ("advi", "nuts"):
        raise ValueError(
            f"A fit by method={first.method!r} is no trace of a PyMC model: its idata_ keeps "
            "only the basis functions in its model"
            + (" and point estimates of alpha and beta" if first.method == "evidence" else "")
            + ", and pm.sample_posterior_predictive in build_model's model would draw the rest "
            "from their priors. Predict with predict(X, return_std=True) (idata_.posterior_"
            "predictive holds replicates at the training inputs), or fit by 'advi' or 'nuts'.")
    if first.draws is None:
        raise ValueError("The targets are constant: the fit is the bias alone, in closed form, "
                         "with no PyMC model sampled.")


def fitted_model(result, basis, y, *, labels, likelihood, priors, model_kw=None):
    """The PyMC model whose posterior a fit by advi or nuts approximates.

    :func:`_sampling_model` on the same arguments as the fit, with the form
    of the marginal likelihood the fit used: the design truncated at the
    tolerance it records (``result.stats["design_tol"]``, also where
    ``low_rank="auto"`` chose it), else ``low_rank`` as given (``"auto"``:
    None, the exact design). Its variables, data and coordinates are those
    of the fitted model, so that its InferenceData serves PyMC's forward
    sampling as a trace of ``pm.sample`` does.

    Parameters
    ----------
    result : FitResult or list of FitResult
        The fit (a list for the categorical likelihood).
    basis, y, labels, likelihood, priors, model_kw
        As the fit was given them.

    Returns
    -------
    pymc.Model

    Raises
    ------
    ValueError
        For a fit by evidence or vb: their posterior is not a posterior of
        this model's variables on every basis (the evidence method's ``alpha``
        is a point estimate and both keep only the bases in their model).
    """
    check_model_fit(result)
    first = result[0] if isinstance(result, list) else result
    model_kw = dict(model_kw or {})
    tol = first.stats.get("design_tol") or 0.0
    if tol:
        model_kw["low_rank"] = tol
    elif model_kw.get("low_rank") == "auto":
        model_kw["low_rank"] = None
    return _sampling_model(basis, y, labels, likelihood, priors, model_kw)


def fit_advi(basis, y, *, labels, likelihood, priors, max_iter, tol, draws, random_seed,
             sample_kwargs, model_kw=None):
    """Mean-field ADVI on the PyMC model (:func:`rvm_ppl.pymc_fitters.advi.fit_advi`).

    ``max_iter`` is PyMC's ``n``. The categorical likelihood gives one result per class.
    """
    from rvm_ppl.pymc_fitters import advi

    if (model_kw or {}).get("low_rank") == "auto":  # the exact design: see fit_nuts
        model_kw = {**model_kw, "low_rank": None}
    model = _sampling_model(basis, y, labels, likelihood, priors, model_kw)
    return advi.advi_result(model, n=max_iter, tol=tol, draws=draws, random_seed=random_seed,
                            **(sample_kwargs or {}))


def fit_nuts(basis, y, *, labels, likelihood, priors, draws, tune, chains, random_seed,
             sample_kwargs, model_kw=None):
    """NUTS on the PyMC model (:func:`rvm_ppl.pymc_fitters.nuts.fit_nuts`).

    The categorical likelihood gives one result per class.

    A model on a truncated design (``model_kw["low_rank"]`` a float) is
    checked on its draws against the exact design
    (:func:`rvm_ppl.pymc_fitters.truncation.check_truncation`); the fit
    records the Pareto k-hat (``design_khat``), and a k-hat above
    ``KHAT_OK`` warns. ``low_rank="auto"`` truncates where
    :func:`~rvm_ppl.pymc_fitters.truncation.auto_tolerance` says it pays,
    and samples the exact design again, with a warning, when the check fails.
    """
    from rvm_ppl.model.build import model_spec
    from rvm_ppl.output.diagnostics import KHAT_OK, ApproximationWarning
    from rvm_ppl.pymc_fitters import nuts, truncation

    # The design once, for the rule, the model and the check's exact model.
    basis = dense_phi(basis, "method='nuts'")
    model_kw = dict(model_kw or {})
    auto = model_kw.get("low_rank") == "auto"
    if auto:
        model_kw["low_rank"] = (truncation.auto_tolerance(basis) if likelihood == "gaussian"
                                else None)

    def sample(model):
        return nuts.nuts_result(model, draws=draws, tune=tune, chains=chains,
                                random_seed=random_seed, **(sample_kwargs or {}))

    model = _sampling_model(basis, y, labels, likelihood, priors, model_kw)
    result = sample(model)
    tol = model_spec(model).design_tol
    if not tol:
        return result
    start = time.perf_counter()
    exact = _sampling_model(basis, y, labels, likelihood, priors, {**model_kw, "low_rank": None})
    check = truncation.check_truncation(exact, model, *(result.draws[k] for k in ("alpha", "beta")))
    stats = {**result.stats, **truncation.truncation_stats(check),
             "design_check_s": time.perf_counter() - start}
    if check.khat <= KHAT_OK:
        return replace(result, stats=stats)
    moved = (f"NUTS on the design truncated at low_rank={tol:g} "
             f"(rank {result.stats['design_rank']}) moved the posterior: the Pareto k-hat of "
             f"the exact design's posterior against it is {check.khat:.2f} > {KHAT_OK}")
    if not auto:
        warnings.warn(moved + "; these are draws of the truncated model. Use a smaller "
                      "low_rank, or low_rank=None for the exact design.", ApproximationWarning,
                      stacklevel=4)
        return replace(result, stats=stats)
    warnings.warn(moved + "; sampling the exact design instead (low_rank='auto').",
                  ApproximationWarning, stacklevel=4)
    result = sample(exact)
    return replace(result, stats={
        **result.stats, "design_check": f"rejected low_rank={tol:g} (k-hat {check.khat:.2f})"})


FIT_METHODS = MappingProxyType(
    {"evidence": fit_evidence, "vb": fit_vb, "advi": fit_advi, "nuts": fit_nuts}
)


def fit(method, basis, y, *, blas_threads=1, **kwargs):
    """Fit the RVM to ``y`` on ``basis`` by one of the methods in ``FIT_METHODS``.

    Parameters
    ----------
    method : str
        A key of ``FIT_METHODS``.
    basis : ndarray of shape (N, M), DenseBasis or KernelBasis
    y : ndarray of shape (N,)
    blas_threads : int or None
        BLAS threads during the fit (default 1, see
        :func:`rvm_ppl.core.linalg.blas_limit`; ``None`` leaves the
        library's default).
    **kwargs
        The fitter's keyword arguments.

    Returns
    -------
    FitResult
    """
    try:
        fitter = FIT_METHODS[method]
    except (KeyError, TypeError):
        raise ValueError(f"Unknown method {method!r}; expected one of {sorted(FIT_METHODS)}.") from None
    start = time.perf_counter()
    with blas_limit(blas_threads):
        result = fitter(basis, y, **kwargs)
    if isinstance(result, list) or "wall_time_s" in result.stats:
        return result  # the sampling methods time themselves (and log)
    wall = time.perf_counter() - start
    if result.stats.get("converged"):  # not converging is a ConvergenceWarning
        _log.info("%s converged in %d iterations (%.2f s): %d basis functions.", method,
                  result.stats["n_iter"], wall, len(result.support))
    return replace(result, stats={**result.stats, "wall_time_s": wall})
