"""``fit(method=...)``: one table maps method names to fitters.

Every fitter takes the design matrix (or a lazy basis), the targets and the
basis labels and returns a :class:`Posterior`: the first two moments of the
weights on the basis functions it keeps, point summaries of ``alpha`` and
``beta``, the relevance decision, and the method's InferenceData (built on
first use for the evidence method, whose draws are cheap but can be large).

Predictions need only the moments: for any posterior, the predictive mean
and variance at ``phi(x)`` are ``phi^T E[w]`` and
``phi^T Cov[w] phi + E[1/beta]`` (Tipping 2001, eqs. 21-22 for the evidence
method; exact moments of the posterior predictive for the others).

Relevance rules
---------------
``evidence``
    ``alpha_m`` finite (the basis is in the final model).
``vb``, ``advi``, ``nuts``
    ``E[gamma_m] > 1/2`` with ``gamma_m = 1 - alpha_m Sigma_mm`` (Tipping 2001,
    eq. 17), the posterior expectation of how well the data determine weight
    ``m`` on a scale from 0 (by the prior alone) to 1 (by the data alone).
    The rule is free of units and needs no threshold on ``alpha``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Callable

import numpy as np
from threadpoolctl import threadpool_limits

from ._basis import DenseBasis
from ._idata import gaussian_draws, make_idata
from .evidence import fit_evidence_full, fit_evidence_regression
from .evidence_laplace import fit_evidence_bernoulli
from .model import resolve_priors
from .scales import fit_eta_rvm
from .variational import fit_vb_classification, fit_vb_regression

RELEVANCE_GAMMA = 0.5


@dataclass
class Posterior:
    """What a fitter returns, in the units of the targets it was given.

    Attributes
    ----------
    support : ndarray of int
        Basis indices that carry non-zero weight (all others are exactly 0).
    mean, cov : ndarray
        ``E[w]`` and ``Cov[w]`` on ``support``.
    noise_var : float or None
        ``E[1/beta]`` (regression).
    alpha : ndarray of shape (M,)
        Point summary of each ``alpha_m`` (``inf`` where pruned).
    beta : float or None
        Point summary of ``beta``.
    relevant : ndarray of bool, shape (M,)
        The method's relevance decision.
    idata_factory : callable
        Builds the InferenceData.
    info : dict
        Method-specific scalars (log evidence, iterations, ...).
    w_draws : ndarray of shape (S, len(support)), optional
        Posterior draws of the weights, for predictions that need more than
        two moments (class probabilities of the sampling methods).
    """

    support: np.ndarray
    mean: np.ndarray
    cov: np.ndarray
    noise_var: float | None
    alpha: np.ndarray
    beta: float | None
    relevant: np.ndarray
    idata_factory: Callable
    info: dict = field(default_factory=dict)
    w_draws: np.ndarray | None = None


def gamma_relevance(alpha, Sigma_diag):
    """The relevance rule of vb, advi and nuts: ``E[gamma_m] > 1/2``.

    ``gamma_m = 1 - alpha_m Sigma_mm`` (Tipping 2001, eq. 17) with the
    expectation over whatever the arguments hold (draws along axis 0, or a
    single point).
    """
    gamma = 1.0 - np.asarray(alpha) * np.asarray(Sigma_diag)
    if gamma.ndim > 1:
        gamma = gamma.mean(axis=0)
    return gamma > RELEVANCE_GAMMA, gamma


def fit_evidence(basis, y, *, labels, likelihood="gaussian", options, random_state=None, attrs=None):
    """Type-II maximum likelihood.

    ``options["solver"]`` chooses the fast sequential algorithm of Tipping &
    Faul (2003) (``"fast"``, the default) or Tipping's (2001) original
    re-estimation of all ``alpha`` at once (``"full"``). Without
    ``options["priors"]`` this is plain type-II maximum likelihood, the limit
    ``a = b = c = d -> 0`` of the model; with them, the posterior of
    ``(log alpha, log beta)`` is maximised (Tipping 2001, App. A).
    ``options["learn_scales"]`` also learns one Gaussian-kernel scale per
    input (App. C; :func:`rvm_ppl.scales.fit_eta_rvm`).
    """
    solver = options.get("solver", "fast")
    if solver not in ("fast", "full"):
        raise ValueError(f"Unknown solver {solver!r}; expected 'fast' or 'full'.")
    if likelihood == "bernoulli":
        if solver != "fast":
            raise ValueError("The classifier's evidence method has the fast sequential solver only; "
                             "use solver='fast'.")
        if options.get("priors") is not None:
            raise ValueError("method='evidence' with a Bernoulli likelihood supports no hyperpriors yet.")
        res = fit_evidence_bernoulli(
            basis, y, start=options.get("start"), max_iter=options.get("max_iter", 10_000),
            tol=options.get("tol", 1e-3), alignment_test=options.get("alignment_test", True),
        )
        return _evidence_posterior(res, y, labels, options, random_state, attrs)
    priors = options.get("priors")
    priors = None if priors is None else resolve_priors(priors)
    common = dict(
        beta=options.get("beta"),
        max_iter=options.get("max_iter", 10_000),
    )
    if options.get("learn_scales"):
        if options.get("fixed_beta"):
            raise ValueError("learn_scales=True re-estimates the noise; it cannot be combined with fit_noise=False.")
        res, eta, history = fit_eta_rvm(
            options["X"], y, eta0=options["eta0"], bias=options.get("bias", True), priors=priors,
            extra_basis=options.get("extra_basis"), schedule=options.get("scale_schedule", "refine"),
            alpha_tol=options.get("tol", 1e-3), alignment_test=options.get("alignment_test", True),
            **common,
        )
        post = _evidence_posterior(res, y, labels, options, random_state, attrs)
        post.info.update(eta=eta, scale_history=history)
        return post
    common.update(fixed_beta=options.get("fixed_beta", False), tol=options.get("tol", 1e-3))
    if solver == "fast":
        res = fit_evidence_regression(
            basis, y, start=options.get("start"), priors=priors,
            alignment_test=options.get("alignment_test", True), **common,
        )
    else:
        if priors is not None:
            raise ValueError("solver='full' maximises the plain evidence; use solver='fast' with priors.")
        res = fit_evidence_full(_dense_phi(basis, "solver='full'"), y, **common)
    return _evidence_posterior(res, y, labels, options, random_state, attrs)


def _evidence_posterior(res, y, labels, options, random_state, attrs):
    """Posterior and lazy InferenceData of an :class:`~rvm_ppl.evidence.EvidenceResult`."""
    relevant = np.isfinite(res.alpha)
    draws, chains = options.get("draws", 1000), options.get("chains", 4)
    build = partial(_evidence_idata, res, y, list(labels), chains, draws, random_state, attrs)
    return Posterior(
        support=res.active,
        mean=res.mu,
        cov=res.Sigma,
        noise_var=None if res.beta is None else 1.0 / res.beta,
        alpha=res.alpha,
        beta=res.beta,
        relevant=relevant,
        idata_factory=build,
        info={"result": res, "log_evidence": res.log_evidence, "n_iter": res.n_iter,
              "converged": res.converged},
    )


def _evidence_idata(res, y, labels, chains, draws, random_state, attrs):
    """InferenceData of an evidence fit: draws of w from N(mu, Sigma), alpha as a point."""
    M = len(res.alpha)
    rng = np.random.default_rng(random_state)
    w = gaussian_draws(res.mu, res.Sigma, res.active, M, chains=chains, draws=draws, rng=rng)
    mean = np.zeros(M)
    mean[res.active] = res.mu
    active_labels = [labels[j] for j in res.active]
    idata = make_idata(
        method="evidence",
        basis=labels,
        w=w,
        alpha=np.broadcast_to(res.alpha, (chains, draws, M)),
        beta=None if res.beta is None else np.full((chains, draws), res.beta),
        y=y,
        fit={
            "mean": (("basis",), mean),
            "alpha": (("basis",), res.alpha),
            **({} if res.beta is None else {"beta": ((), res.beta)}),
            "cov": (("active", "active_col"), res.Sigma),
            "s": (("basis",), res.s),
            "q": (("basis",), res.q),
            "log_evidence": (("iteration",), res.log_evidence_trace),
        },
        attrs={"log_evidence": res.log_evidence, "n_iter": res.n_iter, **(attrs or {})},
    )
    idata.fit.coords["active"] = active_labels
    idata.fit.coords["active_col"] = active_labels
    return idata


def fit_vb(basis, y, *, labels, likelihood="gaussian", options, random_state=None, attrs=None):
    """Bishop & Tipping's variational RVM: closed-form ``Q(w) Q(alpha) Q(beta)``."""
    Phi = _dense_phi(basis, "method='vb'")
    p = resolve_priors(options.get("priors"))
    kw = dict(max_iter=options.get("vb_max_iter", 5000), tol=options.get("vb_tol", 1e-7))
    if likelihood == "gaussian":
        res = fit_vb_regression(Phi, y, **p, **kw)
    else:
        res = fit_vb_classification(Phi, y, a=p["a"], b=p["b"], **kw)
    support = np.flatnonzero(~res.pruned)
    alpha_mean = res.alpha_mean
    relevant, gamma = gamma_relevance(alpha_mean, np.diag(res.cov))
    gaussian = likelihood == "gaussian"
    beta_mean = res.beta_shape / res.beta_rate if gaussian else None
    # E[1/beta] for Q(beta) = Gamma(c~, d~) is d~ / (c~ - 1).
    noise_var = res.beta_rate / (res.beta_shape - 1) if gaussian else None
    draws, chains = options.get("draws", 1000), options.get("chains", 4)
    build = partial(_vb_idata, res, y, list(labels), gamma, chains, draws, random_state, attrs)
    return Posterior(
        support=support,
        mean=res.mean[support],
        cov=res.cov[np.ix_(support, support)],
        noise_var=noise_var,
        alpha=alpha_mean,
        beta=beta_mean,
        relevant=relevant,
        idata_factory=build,
        info={"result": res, "elbo": float(res.bound), "n_iter": res.n_iter,
              "converged": res.converged, "gamma": gamma},
    )


def _vb_idata(res, y, labels, gamma, chains, draws, random_state, attrs):
    """InferenceData of a vb fit: draws from Q(w) Q(alpha) Q(beta)."""
    M = len(res.mean)
    support = np.flatnonzero(~res.pruned)
    gaussian = res.beta_shape is not None
    rng = np.random.default_rng(random_state)
    w = gaussian_draws(res.mean[support], res.cov[np.ix_(support, support)], support, M,
                       chains=chains, draws=draws, rng=rng)
    alpha = rng.gamma(res.alpha_shape, 1.0 / res.alpha_rate, size=(chains, draws, M))
    beta = rng.gamma(res.beta_shape, 1.0 / res.beta_rate, size=(chains, draws)) if gaussian else None
    fit = {
        "mean": (("basis",), res.mean),
        "cov": (("basis", "basis_col"), res.cov),
        "alpha_shape": (("basis",), res.alpha_shape),
        "alpha_rate": (("basis",), res.alpha_rate),
        "gamma": (("basis",), gamma),
        "elbo": (("iteration",), res.bound_trace),
    }
    if gaussian:
        fit["beta_shape"] = ((), res.beta_shape)
        fit["beta_rate"] = ((), res.beta_rate)
    return make_idata(method="vb", basis=labels, w=w, alpha=alpha, beta=beta, y=y, fit=fit,
                      attrs={"elbo": float(res.bound), "n_iter": res.n_iter, **(attrs or {})})


def _sampled_posterior(idata, likelihood):
    """Posterior moments and relevance of a sampled (advi, nuts) InferenceData."""
    post = idata.posterior
    M = post.sizes["basis"]
    gaussian = likelihood == "gaussian"
    beta = post["beta"].values.ravel() if gaussian else None
    noise_var = float(np.mean(1.0 / beta)) if gaussian else None
    gamma = np.asarray(idata.fit["gamma"].values)
    return Posterior(
        support=np.arange(M),
        mean=np.asarray(idata.fit["mean"].values),
        cov=np.asarray(idata.fit["cov"].values),
        noise_var=noise_var,
        alpha=np.median(post["alpha"].values.reshape(-1, M), axis=0),
        beta=None if not gaussian else 1.0 / noise_var,
        relevant=gamma > RELEVANCE_GAMMA,
        idata_factory=partial(_same, idata),
        info={"gamma": gamma, **{k: idata.attrs[k] for k in ("final_elbo", "n_iter") if k in idata.attrs}},
        w_draws=None if gaussian else post["w"].values.reshape(-1, M),
    )


def _same(idata):
    return idata


def _sampler_kwargs(function, options):
    """Split the estimator's ``sample_kwargs`` into ``function``'s own keywords and the rest."""
    import inspect

    known = set(inspect.signature(function).parameters)
    extra = dict(options.get("sample_kwargs") or {})
    own = {k: v for k, v in extra.items() if k in known}
    return own, {k: v for k, v in extra.items() if k not in known}


def _dense_phi(basis, method):
    """The explicit design matrix, which every method but the fast evidence solver needs."""
    if not isinstance(basis, DenseBasis):
        raise ValueError(f"{method} needs the dense design matrix; for large N use method='evidence' with solver='fast'.")
    return basis.Phi


def _fit_sampled(function, passthrough, basis, y, labels, likelihood, options, random_state, attrs, **kw):
    """Run a PyMC fitter of :mod:`rvm_ppl.sampling` and summarise its draws.

    ``sample_kwargs`` entries that ``function`` accepts are passed to it; the
    rest go on to PyMC under the keyword ``passthrough``.
    """
    own, rest = _sampler_kwargs(function, options)
    idata = function(
        _dense_phi(basis, f"method={function.__name__[4:]!r}"), y, basis=list(labels),
        likelihood=likelihood, priors=options.get("priors"), draws=options.get("draws", 1000),
        blas_threads=options.get("blas_threads", 1), random_state=random_state,
        **kw, **{passthrough: rest or None, **own},
    )
    idata.attrs.update(attrs or {})
    return _sampled_posterior(idata, likelihood)


def fit_nuts(basis, y, *, labels, likelihood="gaussian", options, random_state=None, attrs=None):
    """NUTS on the PyMC model (:func:`rvm_ppl.sampling.fit_nuts`)."""
    from . import sampling

    return _fit_sampled(
        sampling.fit_nuts, "sample_kwargs", basis, y, labels, likelihood, options, random_state,
        attrs, tune=options.get("tune", 1000), chains=options.get("chains", 4),
    )


def fit_advi(basis, y, *, labels, likelihood="gaussian", options, random_state=None, attrs=None):
    """Mean-field ADVI on the PyMC model (:func:`rvm_ppl.sampling.fit_advi`)."""
    from . import sampling

    return _fit_sampled(
        sampling.fit_advi, "fit_kwargs", basis, y, labels, likelihood, options, random_state, attrs,
    )


_FIT_METHODS = {"evidence": fit_evidence, "vb": fit_vb, "advi": fit_advi, "nuts": fit_nuts}

# How each stored quantity scales when the targets are multiplied by s:
# value_original = value_standardised * s**power.
_SCALE_POWERS = {
    "w": 1, "mean": 1, "y": 1, "cov": 2,
    "alpha": -2, "beta": -2, "alpha_rate": 2, "beta_rate": 2,
    "s": -2, "q": -1,
    "q_mean_w": 1, "q_sd_w": 1,  # ADVI's variational parameters of centred weights
}
_LOG_DENSITIES = ("log_evidence", "elbo", "final_elbo")  # shift by -N log s
# ADVI's variational means of log alpha and log beta: shift by power * log s.
_LOG_SHIFTS = {"q_mean_log_alpha": -2, "q_mean_log_beta": -2}


def _rescale_posterior(post, scale, n_obs):
    """Express a posterior fitted to ``y / scale`` in the units of ``y``."""
    if scale == 1.0:
        return post
    info = dict(post.info)
    for key in _LOG_DENSITIES:
        if key in info:
            info[key] = info[key] - n_obs * np.log(scale)
    return Posterior(
        support=post.support,
        mean=post.mean * scale,
        cov=post.cov * scale**2,
        noise_var=None if post.noise_var is None else post.noise_var * scale**2,
        alpha=post.alpha / scale**2,
        beta=None if post.beta is None else post.beta / scale**2,
        relevant=post.relevant,
        idata_factory=partial(_rescaled_idata, post.idata_factory, scale, n_obs),
        info=info,
        w_draws=None if post.w_draws is None else post.w_draws * scale,
    )


def _with_relevance(factory, relevant, gamma):
    """Add the ``relevance`` group: each method's decision and ``E[gamma_m]``."""
    import xarray as xr

    idata = factory()
    basis = idata.posterior["basis"].values
    ds = xr.Dataset(
        {"relevant": (("basis",), np.asarray(relevant, dtype=bool)),
         "gamma": (("basis",), np.asarray(gamma, dtype=float))},
        coords={"basis": basis},
    )
    idata.add_groups({"relevance": ds})
    return idata


def _rescaled_idata(factory, scale, n_obs):
    """The InferenceData of ``factory`` with every quantity in the units of ``y``."""
    idata = factory()
    for group in ("posterior", "fit", "observed_data"):
        if group not in idata.groups():
            continue
        ds = idata[group]
        for name in list(ds.data_vars):
            if name in _SCALE_POWERS:
                ds[name] = ds[name] * scale ** _SCALE_POWERS[name]
            elif name in _LOG_SHIFTS:
                ds[name] = ds[name] + _LOG_SHIFTS[name] * np.log(scale)
            elif name in _LOG_DENSITIES:
                ds[name] = ds[name] - n_obs * np.log(scale)
    for key in _LOG_DENSITIES:
        if key in idata.attrs:
            idata.attrs[key] = idata.attrs[key] - n_obs * np.log(scale)
    idata.attrs["target_scale"] = scale
    return idata


def fit(basis, y, *, method="evidence", labels, likelihood="gaussian", options=None, random_state=None, attrs=None):
    """Fit the RVM to ``y`` on the given basis by one of the methods in ``_FIT_METHODS``.

    Parameters
    ----------
    basis : ndarray of shape (N, M), DenseBasis or KernelBasis
    y : ndarray of shape (N,)
    method : str
        A key of ``_FIT_METHODS``.
    labels : list of str
        Basis labels.
    likelihood : {"gaussian", "bernoulli"}
    options : dict, optional
        Method options (``max_iter``, ``draws``, ``priors``, ...). A given
        ``beta`` is in the units of ``y``. ``blas_threads`` (default 1)
        limits BLAS threads during the fit; ``None`` leaves them alone.
    random_state : int or None
    attrs : dict, optional
        Extra InferenceData attributes.

    Returns
    -------
    Posterior
    """
    try:
        fitter = _FIT_METHODS[method]
    except (KeyError, TypeError):
        raise ValueError(f"Unknown method {method!r}; expected one of {sorted(_FIT_METHODS)}.") from None
    if isinstance(basis, np.ndarray):
        basis = DenseBasis(basis)
    options = dict(options or {})
    scale = 1.0
    if likelihood == "gaussian":
        # The priors apply to targets divided by their standard deviation,
        # which makes every method invariant to the units of y.
        scale = float(np.std(y)) or 1.0
        y = y / scale
        if options.get("beta") is not None:
            options["beta"] = options["beta"] * scale**2
    # One BLAS thread by default: on small and mid-size matrices several
    # threads are far slower on 2-core machines (benchmarks/bench_evidence.py).
    with threadpool_limits(limits=options.get("blas_threads", 1), user_api="blas"):
        post = fitter(
            basis, y, labels=labels, likelihood=likelihood, options=options,
            random_state=random_state, attrs=attrs,
        )
    gamma = post.info.get("gamma")
    if gamma is None:  # evidence: gamma_m = 1 - alpha_m Sigma_mm in the model, 0 outside
        gamma = np.zeros(len(post.alpha))
        gamma[post.support] = 1.0 - post.alpha[post.support] * np.diag(post.cov)
    post.idata_factory = partial(_with_relevance, post.idata_factory, post.relevant, gamma)
    return _rescale_posterior(post, scale, len(y))
