"""The one place that builds the package's InferenceData.

Every method's :class:`~rvm_ppl.inference.methods.FitResult` becomes the same
layout, following ArviZ's schema:

``posterior``
    ``w`` and ``alpha`` (chain, draw, basis) and, for regression, ``beta``
    (chain, draw), on the basis functions the method keeps in its model (all
    of them for advi and nuts; the active set for evidence and a pruned vb
    fit). A pruned basis has ``w = 0`` and ``alpha = inf`` exactly: a point
    mass, stored once in ``relevance`` instead of in every draw.
    Evidence: ``w`` drawn from its Gaussian posterior, ``alpha`` and ``beta``
    the point estimates repeated. vb: draws from ``Q(w) Q(alpha) Q(beta)``.
``log_likelihood``
    ``y`` (chain, draw, obs): ``log p(t_n | w, beta)`` at every draw, so that
    ``az.loo``, ``az.waic`` and ``az.compare`` work across the methods. For
    the Poisson likelihood ``t_n`` is the count and its log rate
    ``phi_n^T w + offset_n``.
``posterior_predictive``
    ``y`` (chain, draw, obs): one replicate of the targets per draw, for
    ``az.plot_ppc``.
``observed_data``
    ``y`` (obs): the targets as given (labels 0/1 for a binary classifier).
``constant_data``
    ``X`` (obs, feature) when the inputs are known; for a fit by advi or nuts
    (:func:`rvm_ppl.fit_nuts`, :func:`rvm_ppl.fit_advi`, an estimator's) also
    the data of the PyMC model that its free variables depend on
    (:func:`rvm_ppl.pymc_fitters.results.model_constants`): the hyperprior's
    rates ``alpha_rate`` and ``beta_rate`` and, in the marginal regression,
    the training statistics of ``w`` (``PhiT_Phi`` and ``PhiT_y``, or
    ``lowrank_V`` and ``lowrank_s``), as ``pm.sample`` stores them:
    :func:`pymc.sample_posterior_predictive` then knows they did not change
    and takes ``alpha``, ``beta`` and ``w`` from the posterior instead of
    drawing them from their priors. The Poisson likelihood's log exposure
    ``offset`` (obs) when there is one.
``fit``
    What the method computed in closed form, on the kept bases: ``mean``
    (basis) and ``cov`` (basis, basis_col) of the weights; its objective
    trace (``log_evidence`` or ``elbo`` on ``iteration``); per-candidate
    quantities on ``candidate`` (evidence: Faul & Tipping's ``s`` and ``q``;
    vb: ``alpha_shape`` and ``alpha_rate``).
``sample_stats``
    The sampler's statistics (nuts).
``relevance``
    Every candidate basis function on ``basis``: ``alpha`` (the method's
    point summary, ``inf`` where pruned), ``gamma`` (``E[gamma_m]``),
    ``relevant`` (the method's decision), ``in_model``, and which alpha the
    data decide (:mod:`rvm_ppl.output.sensitivity`): ``prior_sensitivity``
    and ``likelihood_sensitivity`` (power-scaling, Kallioinen et al. 2023,
    of the posterior of ``log alpha_m``) and ``verdict`` (``"data-driven"``,
    ``"prior-driven"``, ``"conflict"``, ``"undetermined"``). Computed once,
    when the InferenceData is built; ``"n/a"`` and NaN for the evidence
    method (a point estimate), for bases outside the model and for a fit
    without ``log_prior`` or ``log_likelihood``.
``prior``
    :data:`PRIOR_DRAWS` draws (one chain) from the hyperprior the fit used,
    in the units of ``y``: ``alpha`` and ``log_alpha`` (chain, draw, basis)
    from ``Gamma(a, b)`` (Tipping 2001, eq. 6), ``w`` from ``N(0, 1/alpha)``
    (eq. 5) and, for regression, ``beta`` and ``log_beta`` from
    ``Gamma(c, d)``. ``log_alpha`` is drawn directly (:func:`log_gamma_draws`):
    under a vague hyperprior (``a = 1e-6``) nearly every ``alpha`` underflows
    to 0 and ``w`` overflows to ``inf``, while ``log_alpha`` stays usable.
``log_prior``
    The log hyperprior density at every posterior draw, one variable per
    prior term: ``alpha`` (chain, draw, basis) and, for regression, ``beta``
    (chain, draw). The density is that of ``log alpha`` and ``log beta``
    (:func:`log_gamma_logpdf`: the Gamma density times its Jacobian
    ``alpha``), the scale on which the samplers move; with
    ``log_likelihood`` it lets ``az.psens`` power-scale the prior or the
    likelihood. For evidence, whose ``alpha`` and ``beta`` are point
    estimates repeated in every draw, it is the density at the point, and
    ``az.psens`` measures nothing about them.

The hyperprior of the two groups is the one the fit used: for advi and nuts
``attrs["priors"]``; for vb, and evidence with hyperpriors, the estimator's
(regression rates scaled by ``var(y)``, :func:`rvm_ppl.core.priors.fit_priors`).
Plain type-II maximum likelihood (evidence without hyperpriors) is the limit
``a = b = c = d -> 0``; its groups hold the package default
:data:`rvm_ppl.core.priors.DEFAULT_PRIORS`, the nearest proper hyperprior.

Everything is in the units of ``y``. ``attrs`` (of the InferenceData and of
every group) carry ``inference_method``, ``rvm_ppl_version``, the inference
library's version and the method's scalars (``log_evidence``, ``elbo``,
``n_iter``, NUTS diagnostics, ...), and the identity of the model the fit
approximates (:func:`model_identity`), which the comparisons of
:mod:`rvm_ppl.output.identity` check: ``likelihood``, ``hyperprior`` (JSON:
``a, b`` and, for regression, ``c, d`` in the units the fit used;
``a = b = c = d = 0`` for plain type-II maximum likelihood, flat in
``log alpha`` and ``log beta``; ``beta_fixed`` where the noise precision was
held fixed), ``target_scale`` (the ``std(y)`` by which the regression rates
were scaled: ``b = b' target_scale^2`` for the estimator's ``b'``; 1 for a
fit of a PyMC model, whose hyperprior applies to ``y`` as given),
``kernel`` (the estimator's kernel, as its repr), ``basis_hash`` (a hash of the
basis labels and of the training inputs, or of the design matrix where the
inputs are not known; ``basis_hash_of`` says which) and
``parameterization``.

Classifiers of ``K > 2`` classes (:func:`ovr_idata`, one-vs-rest) and the
multinomial RVM (:func:`multinomial_idata`, any ``K``) add a ``class``
dimension after ``(chain, draw)`` to ``w``, ``alpha``, ``fit`` and
``relevance``; their ``log_likelihood`` is that of the combined classifier,
``log P(y_n | x_n)`` at each draw, so LOO compares the two.

Large data: ``log_likelihood`` and ``posterior_predictive`` hold
``chains x draws x N`` numbers each. Above :data:`POINTWISE_MAX` (5
million, 40 MB per group in float64) they are left out, and
``attrs["pointwise"]`` says so; fit with fewer draws to have them. The
default 4 x 1000 draws keep them up to N = 1 250. What they cost at the limit
is in the documentation's Defaults and why page, section "InferenceData".
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from importlib.metadata import PackageNotFoundError, version

import numpy as np
from scipy.special import gammaln, log_expit, log_softmax

POINTWISE_MAX = 5_000_000

# A replicate count is drawn at most at this rate: numpy's Poisson sampler refuses rates
# above about 9.2e18, which a draw far in a weight's tail can reach.
POISSON_RATE_MAX = 1e18

# Draws in the prior group: enough for its central 94 % band and ArviZ's
# prior-posterior plots, few enough to add little to every InferenceData.
PRIOR_DRAWS = 500


def package_version(pkg="rvm_ppl"):
    """The installed version of ``pkg``, or ``"unknown"``."""
    try:
        return version(pkg)
    except PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "unknown"


def _draw_posterior(result, chains, draws, rng):
    """``w``, ``alpha``, ``beta`` draws on the support: sampled, or from the closed form."""
    if result.draws is not None:
        return result.draws
    n = len(result.support)
    w = np.zeros((chains, draws, n))
    if n:
        from rvm_ppl.core.linalg import cholesky_jittered

        L = cholesky_jittered(result.cov, what="posterior covariance of the weights")
        w = result.mean + rng.standard_normal((chains, draws, n)) @ L.T
    if result.alpha_gamma is None:  # a point estimate
        alpha = np.broadcast_to(result.alpha[result.support], (chains, draws, n))
    else:
        shape, rate = (np.asarray(v)[result.support] for v in result.alpha_gamma)
        alpha = rng.gamma(shape, 1.0 / rate, size=(chains, draws, n))
    out = {"w": w, "alpha": alpha}
    if result.beta is not None:
        if result.beta_gamma is None:
            out["beta"] = np.full((chains, draws), result.beta)
        else:
            shape, rate = result.beta_gamma
            out["beta"] = rng.gamma(shape, 1.0 / rate, size=(chains, draws))
    return out


def _pointwise(likelihood, f, y, beta, rng):
    """Pointwise log-likelihood and one replicate of ``y`` per draw of the latent ``f = Phi w``.

    Gaussian: ``log N(t_n | phi_n^T w, 1/beta)`` (Tipping 2001, eq. 4);
    Bernoulli: ``t_n log sigma(f_n) + (1 - t_n) log sigma(-f_n)`` (eq. 23);
    Poisson: ``t_n eta_n - exp(eta_n) - log Gamma(t_n + 1)`` with the log rate
    ``eta = f`` plus the offset (added by the caller), the Poisson log pmf at
    integer counts (and its continuation at real ones, which only the
    evidence method fits).
    """
    if likelihood == "gaussian":
        b = beta[..., None]
        loglik = 0.5 * (np.log(b) - np.log(2 * np.pi) - b * (y - f) ** 2)
        rep = f + rng.standard_normal(f.shape) / np.sqrt(b)
    elif likelihood == "poisson":
        with np.errstate(over="ignore"):  # a draw's rate may overflow: log likelihood -inf
            lam = np.exp(f)
        loglik = y * f - lam - gammaln(y + 1.0)
        rep = rng.poisson(np.minimum(lam, POISSON_RATE_MAX))
    else:
        loglik = np.where(y > 0, log_expit(f), log_expit(-f))
        rep = (rng.random(f.shape) < np.exp(log_expit(f))).astype(np.int64)
    return loglik, rep


def log_gamma_draws(shape, rate, size, rng):
    """Draws of ``log x`` for ``x ~ Gamma(shape, rate)``, finite however small ``shape`` is.

    ``Gamma(a) = Gamma(a + 1) U^{1/a}`` with ``U`` uniform on (0, 1]
    (Marsaglia & Tsang 2000, section 6), so
    ``log x = log Gamma(a + 1) + log(U) / a - log(rate)``: the draw of ``x``
    itself underflows to 0 for ``a = 1e-6``, its logarithm does not.

    Parameters
    ----------
    shape, rate : float
        Positive.
    size : int or tuple of int
    rng : numpy.random.Generator

    Returns
    -------
    ndarray of shape ``size``
    """
    if not (shape > 0 and rate > 0):
        raise ValueError(f"A Gamma hyperprior needs a positive shape and rate; got {shape!r}, "
                         f"{rate!r}.")
    u = 1.0 - rng.random(size)  # in (0, 1]
    return np.log(rng.gamma(shape + 1.0, 1.0, size=size)) + np.log(u) / shape - np.log(rate)


def log_gamma_logpdf(x, shape, rate):
    """Log density of ``log x`` when ``x ~ Gamma(shape, rate)``, evaluated at ``x``.

    ``a log x - b x - log Gamma(a) + a log b``: the Gamma density of
    Tipping (2001), eq. (6), times the Jacobian ``x`` of ``x = exp(log x)``;
    ``-inf`` at ``x = 0`` and at ``x = inf`` (a pruned basis).
    """
    x = np.asarray(x, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = shape * np.log(x) - rate * x - gammaln(shape) + shape * np.log(rate)
    return np.where(np.isposinf(x), -np.inf, out)


def _prior_groups(priors, likelihood, post_draws, coords, rng):
    """The ``prior`` and ``log_prior`` groups (a dict), or none without ``priors``.

    ``coords`` are the posterior's (``chain``, ``draw``, ``basis`` and, for
    the multinomial RVM, ``class``); the prior draws share its ``basis``
    (and ``class``) coordinate, on one chain of :data:`PRIOR_DRAWS` draws.
    """
    import xarray as xr

    if priors is None:
        return {}
    a, b = priors["a"], priors["b"]
    shape = post_draws["alpha"].shape[2:]
    wdims = ("chain", "draw", *(["class"] if "class" in coords else []), "basis")
    log_alpha = log_gamma_draws(a, b, (1, PRIOR_DRAWS, *shape), rng)
    with np.errstate(over="ignore", under="ignore"):
        prior = {"log_alpha": log_alpha, "alpha": np.exp(log_alpha),
                 "w": rng.standard_normal(log_alpha.shape) * np.exp(-0.5 * log_alpha)}  # eq. (5)
    data = {k: (wdims, v) for k, v in prior.items()}
    logp = {"alpha": (wdims, log_gamma_logpdf(post_draws["alpha"], a, b))}
    if likelihood == "gaussian":
        c, d = priors["c"], priors["d"]
        log_beta = log_gamma_draws(c, d, (1, PRIOR_DRAWS), rng)
        with np.errstate(over="ignore", under="ignore"):
            data.update(log_beta=(("chain", "draw"), log_beta),
                        beta=(("chain", "draw"), np.exp(log_beta)))
        logp["beta"] = (("chain", "draw"), log_gamma_logpdf(post_draws["beta"], c, d))
    prior_coords = {**coords, "chain": np.arange(1), "draw": np.arange(PRIOR_DRAWS)}
    return {"prior": xr.Dataset(data, coords=prior_coords),
            "log_prior": xr.Dataset(logp, coords=coords)}


def _result_priors(result, priors):
    """``priors``, or the ones a PyMC fit recorded in ``result.stats["priors"]``, or None."""
    if priors is False:
        return None
    if priors is None and "priors" in result.stats:
        return json.loads(result.stats["priors"])
    return None if priors is None else dict(priors)


def _attrs(result, attrs):
    """The attributes of every group: method, versions, the result's scalars, ``attrs``."""
    library = "pymc" if result.method in ("advi", "nuts") else "rvm_ppl"
    return {
        "inference_method": result.method,
        "likelihood": result.likelihood,
        "rvm_ppl_version": package_version(),
        "inference_library": library,
        "inference_library_version": package_version(library),
        "arviz_version": package_version("arviz"),
        **{k: v for k, v in result.stats.items() if v is not None},
        **(attrs or {}),
    }


def model_identity(result, priors, identity=None, X=None, Phi=None):
    """Return the attributes that identify the model a fit approximates (module docstring).

    Parameters
    ----------
    result : FitResult
    priors : dict or None
        The hyperprior of the ``prior`` and ``log_prior`` groups.
    identity : dict, optional
        ``hyperprior`` (dict ``a, b[, c, d][, beta_fixed]`` in the units of
        the fit; default ``priors``), ``target_scale`` (default 1) and
        ``inputs`` (an array that, with the basis labels, fixes the design
        matrix: the estimator's training inputs; default ``X``, else ``Phi``).
    X, Phi : ndarray, optional

    Returns
    -------
    dict of str or float
        Together with ``likelihood`` (:func:`_attrs`), the model's identity.
    """
    identity = dict(identity or {})
    hyperprior = identity.get("hyperprior", priors)
    if hyperprior is not None and result.likelihood != "gaussian":  # no beta: c, d do not apply
        hyperprior = {k: v for k, v in hyperprior.items() if k not in ("c", "d")}
    inputs, of = identity.get("inputs"), "inputs"
    if inputs is None:
        inputs, of = (X, "inputs") if X is not None else (Phi, "design")
    h = hashlib.sha256(json.dumps(list(result.basis)).encode())
    if inputs is not None:
        inputs = np.ascontiguousarray(inputs, dtype=float)
        h.update(repr(inputs.shape).encode())
        h.update(inputs.tobytes())
    return {
        "hyperprior": "unknown" if hyperprior is None else json.dumps(
            {k: float(v) for k, v in hyperprior.items()}),
        "target_scale": float(identity.get("target_scale", 1.0)),
        "basis_hash": h.hexdigest()[:16],
        "basis_hash_of": of if inputs is not None else "labels",
        "parameterization": str(result.stats.get("parameterization", "closed form")),
        # build_model(low_rank=<float>): the truncation of the design (0: exact)
        "design_tol": float(result.stats.get("design_tol", 0.0)),
    }


def _verdict_vars(method, post_alpha, support, n_candidates, log_prior, loglik, dims):
    """``prior_sensitivity``, ``likelihood_sensitivity`` and ``verdict`` of ``relevance``.

    ``post_alpha`` (chain, draw, ..., len(support)) are the posterior draws;
    ``log_prior`` the ``log_prior`` group's variables (or None), ``loglik``
    the pointwise log-likelihood (chain, draw, obs) or None. Power-scaled by
    :func:`rvm_ppl.output.sensitivity.power_scaling` on the bases whose
    draws are finite; ``"n/a"`` and NaN elsewhere and for the evidence method.
    """
    from rvm_ppl.output.sensitivity import power_scaling, verdicts

    shape = (*post_alpha.shape[2:-1], n_candidates)
    prior_s, lik_s = np.full(shape, np.nan), np.full(shape, np.nan)
    if method != "evidence" and log_prior is not None and loglik is not None:
        finite = np.isfinite(post_alpha).all(axis=(0, 1))  # outside a class's model: inf
        total_prior = sum(np.where(np.isfinite(v), v, 0.0).reshape(v.shape[:2] + (-1,)).sum(-1)
                          for v in log_prior.values())
        total_lik = np.asarray(loglik).reshape(post_alpha.shape[:2] + (-1,)).sum(-1)
        if finite.any() and np.isfinite(total_prior).all() and np.isfinite(total_lik).all():
            with np.errstate(divide="ignore"):
                p, lik = power_scaling(np.log(post_alpha[..., finite]), total_prior, total_lik)
            cols = np.asarray(support)
            sel = np.zeros(shape, dtype=bool)
            sel[..., cols] = finite
            prior_s[sel], lik_s[sel] = np.ravel(p), np.ravel(lik)
    return {"prior_sensitivity": (dims, prior_s), "likelihood_sensitivity": (dims, lik_s),
            "verdict": (dims, verdicts(prior_s, lik_s))}


def to_idata(result, *, y, Phi=None, X=None, chains=4, draws=1000, random_state=None,
             attrs=None, extra_groups=None, constants=None, priors=None, offset=None,
             identity=None):
    """Assemble the package's InferenceData from a fit.

    Parameters
    ----------
    result : FitResult
    y : ndarray of shape (N,)
        The targets in their units (0/1 for a classifier).
    Phi : ndarray of shape (N, len(result.support)), optional
        The design matrix's columns of the support at the training inputs,
        for ``log_likelihood`` and ``posterior_predictive``; without it
        those groups are left out.
    X : ndarray of shape (N, D), optional
        Training inputs, stored in ``constant_data``.
    chains, draws : int
        How many draws to make from a closed-form posterior (evidence, vb).
    random_state : int, Generator or None
    attrs : dict, optional
        Further attributes (``kernel``, ``estimator``, ...).
    extra_groups : dict, optional
        Further groups, ``name -> xarray.Dataset``, added as they are.
    constants : dict, optional
        Values stored in ``constant_data`` (``name -> value``; an array's dims
        are ``name_dim_0``, ...).
    priors : dict or False, optional
        The hyperprior ``a, b`` (and ``c, d`` for regression) the fit used,
        in the units of ``y``, for the ``prior`` and ``log_prior`` groups;
        default: ``result.stats["priors"]`` (advi, nuts), else no such groups;
        False: no such groups (a model without Gamma hyperpriors on both).
    offset : ndarray of shape (N,), optional
        The Poisson likelihood's log exposure, added to ``Phi w`` in the
        pointwise groups and stored in ``constant_data`` as ``offset``.
    identity : dict, optional
        What identifies the model beyond ``result`` (:func:`model_identity`):
        ``hyperprior``, ``target_scale``, ``inputs``.

    Returns
    -------
    arviz.InferenceData
    """
    import arviz as az
    import xarray as xr

    rng = np.random.default_rng(random_state)
    priors = _result_priors(result, priors)
    labels = list(result.basis)
    kept = [labels[j] for j in result.support]
    post_draws = _draw_posterior(result, chains, draws, rng)
    n_chain, n_draw = post_draws["w"].shape[:2]
    coords = {"chain": np.arange(n_chain), "draw": np.arange(n_draw), "basis": kept}
    dims = {"w": ("chain", "draw", "basis"), "alpha": ("chain", "draw", "basis"),
            "beta": ("chain", "draw")}
    posterior = xr.Dataset(
        {k: (dims.get(k, ("chain", "draw", *[f"{k}_dim_{i}" for i in range(np.ndim(v) - 2)])),
             np.asarray(v))
         for k, v in post_draws.items()},
        coords=coords,
    )
    all_attrs = {**_attrs(result, attrs), **model_identity(result, priors, identity, X, Phi)}
    y = np.asarray(y)
    obs = np.arange(y.shape[0])
    groups = {
        "posterior": posterior,
        "observed_data": xr.Dataset({"y": (("obs",), y)}, coords={"obs": obs}),
    }
    n_points = n_chain * n_draw * y.shape[0]
    degenerate = result.beta is not None and not np.isfinite(result.beta)  # constant targets
    if Phi is not None and result.likelihood in ("gaussian", "bernoulli", "poisson") \
            and not degenerate:
        if n_points <= POINTWISE_MAX:
            f = result.latent_draws(Phi, post_draws["w"])  # (chain, draw, obs)
            if offset is not None:
                f = f + offset
            loglik, rep = _pointwise(result.likelihood, f, y, post_draws.get("beta"), rng)
            pdims = ("chain", "draw", "obs")
            pcoords = {"chain": coords["chain"], "draw": coords["draw"], "obs": obs}
            groups["log_likelihood"] = xr.Dataset({"y": (pdims, loglik)}, coords=pcoords)
            groups["posterior_predictive"] = xr.Dataset({"y": (pdims, rep)}, coords=pcoords)
            all_attrs["pointwise"] = "log_likelihood and posterior_predictive"
        else:
            all_attrs["pointwise"] = (
                f"omitted: chains x draws x N = {n_points} > {POINTWISE_MAX}; fit with fewer draws"
            )
    groups.update(_constant_data(X, obs, constants, offset))
    fit_coords = {"basis": kept, "basis_col": kept, "candidate": labels}
    groups["fit"] = xr.Dataset(
        {
            "mean": (("basis",), result.mean),
            "cov": (("basis", "basis_col"), result.cov),
            **({} if result.outside_coupling is None else
               {"coupling": (("basis", "candidate"), result.outside_coupling)}),
            **{k: (dims_, np.asarray(v)) for k, (dims_, v) in result.fit.items()},
        },
        coords={k: v for k, v in fit_coords.items()
                if k in ("basis", "basis_col") or any(k in d for d, _ in result.fit.values())
                or (k == "candidate" and result.outside_coupling is not None)},
    )
    if "iteration" in groups["fit"].dims:
        groups["fit"] = groups["fit"].assign_coords(
            iteration=np.arange(groups["fit"].sizes["iteration"]))
    in_model = np.zeros(len(labels), dtype=bool)
    in_model[result.support] = True
    groups["relevance"] = xr.Dataset(
        {"alpha": (("basis",), result.alpha), "gamma": (("basis",), result.gamma),
         "relevant": (("basis",), result.relevant), "in_model": (("basis",), in_model)},
        coords={"basis": labels},
    )
    if result.sample_stats is not None:
        groups["sample_stats"] = result.sample_stats
    # Drawn last, so that the posterior's draws do not depend on them.
    groups.update(_prior_groups(priors, result.likelihood, post_draws, coords, rng))
    groups["relevance"] = groups["relevance"].assign(_verdict_vars(
        result.method, np.asarray(post_draws["alpha"]), result.support, len(labels),
        groups["log_prior"] if "log_prior" in groups else None,
        groups["log_likelihood"]["y"].values if "log_likelihood" in groups else None,
        ("basis",)))
    groups.update(extra_groups or {})
    for ds in groups.values():
        ds.attrs.update(all_attrs)
    idata = az.InferenceData(**groups)
    idata.attrs.update(all_attrs)
    return idata


def ovr_idata(parts, classes, codes, seed):
    """One InferenceData of ``K`` one-vs-rest models, with a ``class`` dimension.

    ``parts`` are the binary models' InferenceData (:func:`to_idata`). Every
    group gains a ``class`` dimension after ``(chain, draw)``; a basis that one
    model pruned has ``w = 0`` and ``alpha = inf`` there. ``observed_data.y``,
    ``log_likelihood.y`` and ``posterior_predictive.y`` are those of the
    combined classifier: class codes into ``classes`` and ``log P(y_n | x_n)``
    with ``P(k | x)`` proportional to ``sigma(f_k)``, draw by draw.
    """
    import arviz as az
    import xarray as xr

    labels = [str(c) for c in classes]
    fill = {"w": 0.0, "alpha": np.inf, "mean": 0.0, "cov": 0.0}
    # A basis one model pruned has alpha = inf there: log prior density -inf; its prior
    # draws are not in that model's group (NaN).
    fills = {"log_prior": {"alpha": -np.inf}, "prior": np.nan}
    groups = {}
    for group in ("posterior", "fit", "relevance", "sample_stats", "prior", "log_prior"):
        if group in parts[0].groups():
            ds = xr.concat([p[group] for p in parts], dim="class", join="outer",
                           fill_value=fills.get(group, fill), combine_attrs="override")
            ds = ds.assign_coords({"class": labels})
            first = [d for d in ("chain", "draw") if d in ds.dims]
            groups[group] = ds.transpose(*first, "class", ...)
    attrs = dict(parts[0].attrs)
    obs = np.arange(len(codes))
    groups["observed_data"] = xr.Dataset({"y": (("obs",), codes)}, coords={"obs": obs},
                                         attrs=attrs)
    if all("log_likelihood" in p.groups() for p in parts):  # else too large: see the module
        logit_draws = []
        for p in parts:
            f = p.log_likelihood["y"].values  # log sigma(+-f): recover log sigma(f) via the codes
            t = p.observed_data["y"].values
            logit_draws.append(np.where(t > 0, f, np.log(-np.expm1(f))))
        log_s = np.stack(logit_draws, axis=-1)  # (chain, draw, obs, class)
        log_p = log_s - np.logaddexp.reduce(log_s, axis=-1, keepdims=True)
        post = groups["posterior"]
        _add_pointwise(groups, log_p, codes, post["chain"].values, post["draw"].values,
                       np.random.default_rng(seed), attrs)
    if "constant_data" in parts[0].groups():
        groups["constant_data"] = parts[0].constant_data
    idata = az.InferenceData(**groups)
    idata.attrs.update(attrs)
    return idata


def _add_pointwise(groups, log_p, codes, chain, draw, rng, attrs):
    """``log_likelihood`` and ``posterior_predictive`` from ``log P(k | x_n)`` per draw.

    ``log_p`` has shape (chain, draw, obs, class); the categorical
    log-likelihood of observation ``n`` is ``log_p[..., n, codes[n]]``.
    """
    import xarray as xr

    n_chain, n_draw, n_obs, K = log_p.shape
    loglik = np.take_along_axis(log_p, np.asarray(codes)[None, None, :, None], axis=-1)[..., 0]
    cum = np.cumsum(np.exp(log_p), axis=-1)
    rep = (rng.random(cum.shape[:-1])[..., None] > cum).sum(axis=-1).clip(max=K - 1)
    pdims = ("chain", "draw", "obs")
    pcoords = {"chain": chain, "draw": draw, "obs": np.arange(n_obs)}
    groups["log_likelihood"] = xr.Dataset({"y": (pdims, loglik)}, coords=pcoords, attrs=attrs)
    groups["posterior_predictive"] = xr.Dataset({"y": (pdims, rep)}, coords=pcoords, attrs=attrs)


def _multinomial_draws(results, support, chains, draws, joint_cov, rng):
    """``w`` and ``alpha`` (chain, draw, class, len(support)) of the softmax RVM.

    Sampled fits: their draws, stacked over the classes (draw ``i`` of every
    class is the same joint draw). Evidence: ``w`` from the joint Laplace
    posterior ``N(mu, joint_cov)`` (weights in class-major order of the
    results' supports), ``alpha`` the point estimates. A weight outside a
    class's model is 0 with ``alpha = inf``.
    """
    K, n = len(results), support.size
    pos = [np.searchsorted(support, r.support) for r in results]
    if results[0].draws is not None:
        n_chain, n_draw = results[0].draws["w"].shape[:2]
    else:
        n_chain, n_draw = chains, draws
    W = np.zeros((n_chain, n_draw, K, n))
    alpha = np.full((n_chain, n_draw, K, n), np.inf)
    if results[0].draws is not None:
        for k, r in enumerate(results):
            W[:, :, k, pos[k]] = r.draws["w"]
            alpha[:, :, k, pos[k]] = r.draws["alpha"]
        return W, alpha
    sizes = [len(r.support) for r in results]
    flat = np.zeros((n_chain, n_draw, sum(sizes)))
    if flat.shape[-1]:
        from rvm_ppl.core.linalg import cholesky_jittered

        L = cholesky_jittered(joint_cov, what="posterior covariance of the weights")
        mean = np.concatenate([r.mean for r in results])
        flat = mean + rng.standard_normal(flat.shape) @ L.T
    blocks = np.split(flat, np.cumsum(sizes)[:-1], axis=-1)
    for k, (r, block) in enumerate(zip(results, blocks, strict=True)):
        W[:, :, k, pos[k]] = block
        alpha[:, :, k, pos[k]] = r.alpha[r.support]
    return W, alpha


def _constant_data(X, obs, constants, offset=None):
    """The ``constant_data`` group (as a one-entry dict), or no group when there is nothing."""
    import xarray as xr

    data, coords = {}, {}
    if X is not None:
        X = np.asarray(X)
        data["X"] = (("obs", "feature"), X)
        coords = {"obs": obs, "feature": np.arange(X.shape[1])}
    if offset is not None:
        data["offset"] = (("obs",), np.asarray(offset, dtype=float))
        coords["obs"] = obs
    data.update({name: (tuple(f"{name}_dim_{i}" for i in range(np.ndim(value))), np.asarray(value))
                 for name, value in (constants or {}).items()})
    return {"constant_data": xr.Dataset(data, coords=coords)} if data else {}


def multinomial_idata(results, *, y, Phi, classes, X=None, chains=4, draws=1000,
                      random_state=None, joint_cov=None, attrs=None, constants=None,
                      priors=None, identity=None):
    """The InferenceData of a multinomial (softmax) RVM, with a ``class`` dimension.

    The layout of :func:`to_idata` with ``class`` before ``basis`` in every
    per-weight variable:

    ``posterior``
        ``w`` and ``alpha`` (chain, draw, class, basis) on the bases used by
        any class; ``w = 0``, ``alpha = inf`` where a class does not use one.
        A sampled fit of the model with one ``alpha`` per basis
        (``shared_alpha``) also holds that model's free variable ``w_basis``
        (chain, draw, basis, class), ``w`` transposed, so that PyMC's forward
        sampling takes it from the posterior.
    ``log_likelihood``, ``posterior_predictive``
        ``y`` (chain, draw, obs): ``log softmax(phi_n^T W^T)`` at the observed
        class (Tipping 2001, eq. 28), and a class drawn from it.
    ``observed_data``, ``constant_data``
        ``y``, the class codes into ``classes``; ``X``.
    ``fit``
        ``mean`` (class, basis) and ``cov`` (class, basis, basis_col), each
        class's block of the weights' covariance; the method's own
        quantities (``log_evidence`` or ``elbo`` on ``iteration``, ...).
    ``relevance``
        ``alpha``, ``gamma``, ``relevant``, ``in_model`` on (class, basis) for
        every candidate.

    Parameters
    ----------
    results : list of FitResult
        One per class, in the order of ``classes``, on the same candidates.
    y : ndarray of int, shape (N,)
        Class codes ``0, ..., K - 1``.
    Phi : ndarray of shape (N, n)
        Columns ``support`` (the sorted union of the results' supports) of
        the design matrix at the training inputs.
    classes : list
    X : ndarray of shape (N, D), optional
    chains, draws : int
        Draws to make from the Laplace posterior (evidence).
    random_state : int, Generator or None
    joint_cov : ndarray of shape (J, J), optional
        Evidence: the Laplace covariance of all ``J`` weights in the model,
        class-major in the order of the results' supports.
    attrs : dict, optional
    constants : dict, optional
    priors : dict, optional
        As for :func:`to_idata`; ``prior`` and ``log_prior`` gain the
        ``class`` dimension (a weight outside a class's model has
        ``alpha = inf``, log prior density ``-inf``).
    identity : dict, optional
        As for :func:`to_idata`.

    Returns
    -------
    arviz.InferenceData
    """
    import arviz as az
    import xarray as xr

    rng = np.random.default_rng(random_state)
    labels = [str(c) for c in classes]
    candidates = list(results[0].basis)
    support = np.unique(np.concatenate([r.support for r in results])).astype(int)
    kept = [candidates[j] for j in support]
    W, alpha = _multinomial_draws(results, support, chains, draws, joint_cov, rng)
    n_chain, n_draw = W.shape[:2]
    stats = {k: v for k, v in results[0].stats.items() if k != "class"}
    priors = _result_priors(results[0], priors)
    all_attrs = {**_attrs(replace(results[0], stats=stats), attrs),
                 **model_identity(results[0], priors, identity, X, Phi),
                 "multi_class": "multinomial", "classes": json.dumps(labels)}
    coords = {"chain": np.arange(n_chain), "draw": np.arange(n_draw), "class": labels,
              "basis": kept}
    wdims = ("chain", "draw", "class", "basis")
    y = np.asarray(y)
    obs = np.arange(y.shape[0])
    posterior = {"w": (wdims, W), "alpha": (wdims, alpha)}
    if results[0].draws is not None and results[0].stats.get("shared_alpha"):
        # The PyMC model's free variable (w is a Deterministic of it), as pm.sample stores
        # it: without it, pm.sample_posterior_predictive would draw it from its prior.
        posterior["w_basis"] = (("chain", "draw", "basis", "class"), W.transpose(0, 1, 3, 2))
    groups = {
        "posterior": xr.Dataset(posterior, coords=coords),
        "observed_data": xr.Dataset({"y": (("obs",), y)}, coords={"obs": obs}),
    }
    n_points = n_chain * n_draw * y.shape[0]
    if n_points <= POINTWISE_MAX:
        Phi = np.asarray(Phi, dtype=float)
        log_p = np.stack([log_softmax(np.einsum("nm,dkm->dnk", Phi, W[c]), axis=-1)
                          for c in range(n_chain)])  # Tipping (2001) eq. (28)
        _add_pointwise(groups, log_p, y, coords["chain"], coords["draw"], rng, None)
        all_attrs["pointwise"] = "log_likelihood and posterior_predictive"
    else:
        all_attrs["pointwise"] = (
            f"omitted: chains x draws x N = {n_points} > {POINTWISE_MAX}; fit with fewer draws")
    groups.update(_constant_data(X, obs, constants))
    groups["fit"] = _multinomial_fit_group(results, support, labels, kept, candidates)
    K, M = len(results), len(candidates)
    in_model = np.zeros((K, M), dtype=bool)
    for k, r in enumerate(results):
        in_model[k, r.support] = True
    rdims = ("class", "basis")
    groups["relevance"] = xr.Dataset(
        {"alpha": (rdims, np.array([r.alpha for r in results])),
         "gamma": (rdims, np.array([r.gamma for r in results])),
         "relevant": (rdims, np.array([r.relevant for r in results])),
         "in_model": (rdims, in_model)},
        coords={"class": labels, "basis": candidates},
    )
    if results[0].sample_stats is not None:
        groups["sample_stats"] = results[0].sample_stats
    groups.update(_prior_groups(priors, "categorical", {"alpha": alpha}, coords, rng))
    groups["relevance"] = groups["relevance"].assign(_verdict_vars(
        results[0].method, alpha, support, M, groups.get("log_prior"),
        groups["log_likelihood"]["y"].values if "log_likelihood" in groups else None, rdims))
    for ds in groups.values():
        ds.attrs.update(all_attrs)
    idata = az.InferenceData(**groups)
    idata.attrs.update(all_attrs)
    return idata


def _multinomial_fit_group(results, support, labels, kept, candidates):
    """``fit``: each class's mean and covariance block on ``support``, and the method's arrays."""
    import xarray as xr

    K, n = len(results), support.size
    mean = np.zeros((K, n))
    cov = np.zeros((K, n, n))
    for k, r in enumerate(results):
        p = np.searchsorted(support, r.support)
        mean[k, p] = r.mean
        cov[k, p[:, None], p[None, :]] = r.cov
    own = results[0].fit
    ds = xr.Dataset(
        {"mean": (("class", "basis"), mean), "cov": (("class", "basis", "basis_col"), cov),
         **{k: (dims, np.asarray(v)) for k, (dims, v) in own.items()}},
        coords={"class": labels, "basis": kept, "basis_col": kept},
    )
    if "candidate" in ds.dims:
        ds = ds.assign_coords(candidate=candidates)
    if "iteration" in ds.dims:
        ds = ds.assign_coords(iteration=np.arange(ds.sizes["iteration"]))
    return ds
