"""The one place that builds the package's InferenceData.

Every method's :class:`~rvm_ppl.inference.FitResult` becomes the same
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
    ``az.loo``, ``az.waic`` and ``az.compare`` work across the methods.
``posterior_predictive``
    ``y`` (chain, draw, obs): one replicate of the targets per draw, for
    ``az.plot_ppc``.
``observed_data``
    ``y`` (obs): the targets as given (labels 0/1 for a binary classifier).
``constant_data``
    ``X`` (obs, feature) when the inputs are known.
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
    ``relevant`` (the method's decision) and ``in_model``.

Everything is in the units of ``y``. ``attrs`` (of the InferenceData and of
every group) carry ``inference_method``, ``rvm_ppl_version``, the inference
library's version and the method's scalars (``log_evidence``, ``elbo``,
``n_iter``, NUTS diagnostics, ...).

Large data: ``log_likelihood`` and ``posterior_predictive`` hold
``chains x draws x N`` numbers each. Above :data:`POINTWISE_MAX` (5
million, 40 MB per group in float64) they are left out, and
``attrs["pointwise"]`` says so; fit with fewer draws to have them. At the
limit, building them costs about 0.8 s and 150 MB of memory (at 20
million it took 3.6 s and 630 MB, and the netCDF file 310 MB). Below it,
the default 4 x 1000 draws keep them up to N = 1 250.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

import numpy as np
from scipy.special import log_expit

POINTWISE_MAX = 5_000_000


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
        from ._linalg import cholesky_jittered

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


def _pointwise(likelihood, Phi, y, w, beta, rng):
    """Pointwise log-likelihood and one replicate of ``y`` per draw.

    Gaussian: ``log N(t_n | phi_n^T w, 1/beta)`` (Tipping 2001, eq. 4);
    Bernoulli: ``t_n log sigma(f_n) + (1 - t_n) log sigma(-f_n)`` (eq. 23).
    """
    f = w @ Phi.T  # (chain, draw, obs)
    if likelihood == "gaussian":
        b = beta[..., None]
        loglik = 0.5 * (np.log(b) - np.log(2 * np.pi) - b * (y - f) ** 2)
        rep = f + rng.standard_normal(f.shape) / np.sqrt(b)
    else:
        loglik = np.where(y > 0, log_expit(f), log_expit(-f))
        rep = (rng.random(f.shape) < np.exp(log_expit(f))).astype(np.int64)
    return loglik, rep


def to_idata(result, *, y, Phi=None, X=None, chains=4, draws=1000, random_state=None,
             attrs=None, extra_groups=None):
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

    Returns
    -------
    arviz.InferenceData
    """
    import arviz as az
    import xarray as xr

    rng = np.random.default_rng(random_state)
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
    all_attrs = {
        "inference_method": result.method,
        "likelihood": result.likelihood,
        "rvm_ppl_version": package_version(),
        "inference_library": "pymc" if result.method in ("advi", "nuts") else "rvm_ppl",
        "inference_library_version": package_version(
            "pymc" if result.method in ("advi", "nuts") else "rvm_ppl"),
        "arviz_version": package_version("arviz"),
        **{k: v for k, v in result.stats.items() if v is not None},
        **(attrs or {}),
    }
    y = np.asarray(y)
    obs = np.arange(y.shape[0])
    groups = {
        "posterior": posterior,
        "observed_data": xr.Dataset({"y": (("obs",), y)}, coords={"obs": obs}),
    }
    n_points = n_chain * n_draw * y.shape[0]
    degenerate = result.beta is not None and not np.isfinite(result.beta)  # constant targets
    if Phi is not None and result.likelihood in ("gaussian", "bernoulli") and not degenerate:
        if n_points <= POINTWISE_MAX:
            loglik, rep = _pointwise(result.likelihood, np.asarray(Phi), y, post_draws["w"],
                                     post_draws.get("beta"), rng)
            pdims = ("chain", "draw", "obs")
            pcoords = {"chain": coords["chain"], "draw": coords["draw"], "obs": obs}
            groups["log_likelihood"] = xr.Dataset({"y": (pdims, loglik)}, coords=pcoords)
            groups["posterior_predictive"] = xr.Dataset({"y": (pdims, rep)}, coords=pcoords)
            all_attrs["pointwise"] = "log_likelihood and posterior_predictive"
        else:
            all_attrs["pointwise"] = (
                f"omitted: chains x draws x N = {n_points} > {POINTWISE_MAX}; fit with fewer draws"
            )
    if X is not None:
        X = np.asarray(X)
        groups["constant_data"] = xr.Dataset(
            {"X": (("obs", "feature"), X)}, coords={"obs": obs, "feature": np.arange(X.shape[1])}
        )
    fit_coords = {"basis": kept, "basis_col": kept, "candidate": labels}
    groups["fit"] = xr.Dataset(
        {
            "mean": (("basis",), result.mean),
            "cov": (("basis", "basis_col"), result.cov),
            **{k: (dims_, np.asarray(v)) for k, (dims_, v) in result.fit.items()},
        },
        coords={k: v for k, v in fit_coords.items()
                if k in ("basis", "basis_col") or any(k in d for d, _ in result.fit.values())},
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
    groups.update(extra_groups or {})
    for ds in groups.values():
        ds.attrs.update(all_attrs)
    idata = az.InferenceData(**groups)
    idata.attrs.update(all_attrs)
    return idata
