"""NUTS on the PyMC model: :func:`fit_nuts` (InferenceData) and :func:`nuts_result` (the estimators').

The default sampler is nutpie on PyTensor's NUMBA backend, one BLAS thread, and the
precisions on the softplus scale (:func:`rvm_ppl.pymc_fitters.results.softplus_precisions`);
the documentation's Defaults and why page, section "NUTS and ADVI on the PyMC model"
(``docs/defaults.md``), says why.

Diagnostics
-----------
After NUTS, the number of divergent transitions, the largest rank-normalised
split r-hat and the smallest bulk ESS (Vehtari et al. 2021) over
``log alpha`` and ``log beta`` (over ``w`` when both are fixed) are stored in
``idata.attrs`` and a :class:`SamplingWarning` names every problem:
any divergence, r-hat above :data:`RHAT_MAX` = 1.01, or a bulk ESS below
:data:`ESS_MIN_PER_CHAIN` = 100 per chain (Vehtari et al. recommend 400 for
four chains).
"""
from __future__ import annotations

import importlib.util
import os
import time
import warnings
from types import MappingProxyType

import numpy as np

from rvm_ppl.core.linalg import (
    blas_limit,
)
from rvm_ppl.pymc_fitters.compiled import compiled_nutpie
from rvm_ppl.pymc_fitters.results import (
    CHAINS,
    COMPILE_MODE,
    DRAWS,
    TUNE,
    _check_model,
    _checked_draws,
    _compilation,
    _labelled,
    _model_idata,
    _replace,
    _result,
    _seeds,
    _trace_var_names,
    softplus_precisions,
    whitened_weights,
)

NUTS_SAMPLERS = ("nutpie", "pymc", "numpyro", "blackjax")


NUTS_SAMPLER = "nutpie"


# Mass matrix from the draws' variances only (see "Defaults and why").
NUTPIE_KWARGS = MappingProxyType({"use_grad_based_mass_matrix": False})


TARGET_ACCEPT = 0.8


RHAT_MAX = 1.01


ESS_MIN_PER_CHAIN = 100


# What a missing sampler needs (pm.sample's nuts_sampler -> modules).
_SAMPLER_MODULES = MappingProxyType({
    "pymc": (),
    "nutpie": ("nutpie",),
    "numpyro": ("numpyro", "jax"),
    "blackjax": ("blackjax", "jax"),
})


class SamplingWarning(UserWarning):
    """NUTS diagnostics (divergences, r-hat, ESS) suggest an unreliable posterior."""


def _check_sampler(nuts_sampler):
    """Validate ``nuts_sampler`` and check that its package is installed."""
    if nuts_sampler not in _SAMPLER_MODULES:
        raise ValueError(
            f"Unknown nuts_sampler {nuts_sampler!r}; expected one of {list(NUTS_SAMPLERS)}."
        )
    missing = [m for m in _SAMPLER_MODULES[nuts_sampler] if importlib.util.find_spec(m) is None]
    if missing:
        raise ImportError(
            f"nuts_sampler={nuts_sampler!r} needs {', '.join(missing)}, which is not installed. "
            f"Install it with `pip install {' '.join(missing)}`, or use nuts_sampler='pymc'."
        )


def _available_cpus():
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not on Linux
        return os.cpu_count() or 1


def _diagnostics(checked, sample_stats, basis):
    """Divergences, max r-hat and min bulk ESS over the arrays in ``checked``.

    ``checked`` maps names to draws of shape (chain, draw) or
    (chain, draw, basis): ``log_alpha`` and ``log_beta`` where they are
    free, and ``w`` where it was sampled.
    """
    import arviz as az
    import xarray as xr

    ds = xr.Dataset({k: (("chain", "draw", "basis")[: np.ndim(v)], np.asarray(v, dtype=float))
                     for k, v in checked.items()}, coords={"basis": list(basis)})
    rhat = az.rhat(ds)
    ess = az.ess(ds, method="bulk")
    # A non-finite diagnostic (e.g. a constant chain) counts as the worst.
    max_rhat, rhat_at = max(_labelled(rhat), key=lambda p: p[0] if np.isfinite(p[0]) else np.inf)
    min_ess, ess_at = min(_labelled(ess), key=lambda p: p[0] if np.isfinite(p[0]) else -np.inf)
    out = {
        "n_divergences": int(np.asarray(sample_stats["diverging"]).sum()),
        "max_rhat": float(max_rhat),
        "max_rhat_at": rhat_at,
        "min_ess_bulk": float(min_ess),
        "min_ess_bulk_at": ess_at,
    }
    if "log_alpha" in checked:
        out["min_ess_bulk_log_alpha"] = float(ess["log_alpha"].min())
        out["max_rhat_log_alpha"] = float(rhat["log_alpha"].max())
    if "log_beta" in checked:
        out["ess_bulk_log_beta"] = float(ess["log_beta"])
    return out


def _warn_diagnostics(diag, chains):
    problems = []
    if diag["n_divergences"] > 0:
        problems.append(f"{diag['n_divergences']} divergent transitions")
    if not diag["max_rhat"] <= RHAT_MAX:
        problems.append(f"max r_hat {diag['max_rhat']:.3f} > {RHAT_MAX} at {diag['max_rhat_at']}")
    if not diag["min_ess_bulk"] >= ESS_MIN_PER_CHAIN * chains:
        problems.append(
            f"min bulk ESS {diag['min_ess_bulk']:.0f} < {ESS_MIN_PER_CHAIN * chains} "
            f"({ESS_MIN_PER_CHAIN} per chain) at {diag['min_ess_bulk_at']}"
        )
    if problems:
        warnings.warn(
            "NUTS: " + "; ".join(problems) + ". Increase tune and draws, raise target_accept, "
            "or check the model before trusting this posterior.",
            SamplingWarning,
            stacklevel=3,
        )


def _sample_nutpie(model, kwargs):
    """``pm.sample(**kwargs)`` with nutpie, on a compiled model kept for its structure.

    The same call as PyMC's (nutpie's ``sample`` with the seed PyMC passes,
    ``sampling_time`` and ``tuning_steps`` in the posterior's attributes), except that the compiled
    model comes from :func:`rvm_ppl.pymc_fitters.compiled.compiled_nutpie`:
    a model of a structure this process has compiled before samples that
    machine code with its own data.
    """
    import nutpie

    sampler_kwargs = dict(kwargs.get("nuts_sampler_kwargs") or {})
    compile_kwargs = {k: sampler_kwargs.pop(k) for k in ("backend", "gradient_backend")
                      if k in sampler_kwargs}
    compiled = compiled_nutpie(model, kwargs.get("var_names"), **compile_kwargs)
    t0 = time.time()
    trace = nutpie.sample(
        compiled, draws=kwargs["draws"], tune=kwargs["tune"], chains=kwargs["chains"],
        # PyMC passes nutpie its integer seed as it is (one seed for all chains).
        target_accept=kwargs["target_accept"], seed=int(kwargs["random_seed"]),
        progress_bar=kwargs["progressbar"], **sampler_kwargs,
    )
    trace.posterior.attrs["sampling_time"] = time.time() - t0
    trace.posterior.attrs["tuning_steps"] = kwargs["tune"]
    return trace


def nuts_result(
    model,
    *,
    draws,
    tune,
    chains,
    random_seed,
    cores=None,
    target_accept=TARGET_ACCEPT,
    nuts_sampler=NUTS_SAMPLER,
    compile_mode=COMPILE_MODE,
    blas_threads=1,
    progressbar=False,
    **pm_kwargs,
):
    """NUTS on ``model``, as a :class:`~rvm_ppl.inference.methods.FitResult`; see :func:`fit_nuts`.

    A categorical model gives a list of one result per class instead.
    """
    import pymc as pm

    spec = _check_model(model)
    _check_sampler(nuts_sampler)
    rng, seed = _seeds(random_seed)
    if cores is None:
        # PyMC assumes half the CPUs are hyper-threads; count them all.
        cores = min(chains, _available_cpus())
    kwargs = dict(
        draws=draws, tune=tune, chains=chains, cores=cores, target_accept=target_accept,
        nuts_sampler=nuts_sampler, random_seed=seed, progressbar=progressbar,
        compute_convergence_checks=False, return_inferencedata=True,
    )
    if nuts_sampler == "pymc":
        kwargs["compile_kwargs"] = {"mode": compile_mode}
    elif nuts_sampler == "nutpie":  # pm.sample does not pass cores on to nutpie
        kwargs["nuts_sampler_kwargs"] = {"cores": cores, **NUTPIE_KWARGS}
    var_names = _trace_var_names(model, spec)
    if var_names is not None and nuts_sampler == "pymc":
        # PyMC's own sampler traces random variables, not value variables: w, not its z.
        var_names = ["w" if name == whitened_weights(model) else name for name in var_names]
    if var_names is not None and nuts_sampler in ("pymc", "nutpie"):
        kwargs["var_names"] = var_names
    if "nuts_sampler_kwargs" in pm_kwargs:
        pm_kwargs = {**pm_kwargs, "nuts_sampler_kwargs": {
            **kwargs.get("nuts_sampler_kwargs", {}), **(pm_kwargs["nuts_sampler_kwargs"] or {})}}
    kwargs.update(pm_kwargs)

    t0 = time.perf_counter()
    with blas_limit(blas_threads), softplus_precisions(model) as sampled, _compilation():
        if nuts_sampler == "nutpie" and set(pm_kwargs) <= {"nuts_sampler_kwargs"}:
            trace = _sample_nutpie(sampled, kwargs)
        else:
            trace = pm.sample(**kwargs)
    wall = time.perf_counter() - t0

    post = trace.posterior
    with blas_limit(blas_threads):  # thousands of small factorisations: one thread is fastest
        result = _result("nuts", model, spec, post, rng, stats={}, sample_stats=trace.sample_stats)
        checked, labels = _checked_draws(model, spec, post, result)
        diag = _diagnostics(checked, trace.sample_stats, labels)
    sampling_time = float(post.attrs.get("sampling_time", np.nan))
    ess_key = "min_ess_bulk_log_alpha" if "log_alpha" in checked else "min_ess_bulk"
    stats = {
        **(result[0] if isinstance(result, list) else result).stats,
        "nuts_sampler": nuts_sampler,
        "compile_mode": compile_mode if nuts_sampler == "pymc" else nuts_sampler,
        "target_accept": float(target_accept),
        "blas_threads": -1 if blas_threads is None else int(blas_threads),
        "tune": int(tune),
        # NUTS iterations of each chain, tuning included (the estimators' n_iter_).
        "n_iter": int(tune) + int(post.sizes["draw"]),
        "wall_time_s": wall,
        "sampling_time_s": sampling_time,
        "ess_per_s": diag[ess_key] / sampling_time if sampling_time > 0 else np.nan,
        **diag,
    }
    _warn_diagnostics(diag, post.sizes["chain"])
    return _replace(result, stats=stats)


def fit_nuts(model=None, *, draws=DRAWS, tune=TUNE, chains=CHAINS, random_seed=None, **kwargs):
    """Sample the RVM posterior with NUTS.

    Called as :func:`pymc.sample` is: ``fit_nuts(model)``, or ``fit_nuts()``
    inside ``with model:``.

    Parameters
    ----------
    model : pymc.Model, optional
        A model of :func:`rvm_ppl.build_model`, possibly changed (another
        hyperprior, another likelihood in the centred form), that keeps the
        names ``w`` (dims ``basis``), ``alpha``, ``beta``, ``y``, ``Phi`` and
        ``y_obs``. Default: the model of the ``with`` context
        (:func:`pymc.modelcontext`).
    draws, tune, chains : int
        Four chains by default, as r-hat <= 1.01 presumes (Vehtari et al.
        2021).
    random_seed : int, sequence of int, numpy Generator or None
        Seeds PyMC and every numpy draw (PyMC's name; the estimators'
        ``random_state`` becomes it).
    cores : int, optional
        Chains run in parallel (processes for PyMC, threads for nutpie);
        default ``min(chains, available CPUs)``.
    target_accept : float
    nuts_sampler : {"nutpie", "pymc", "numpyro", "blackjax"}
        Passed to :func:`pymc.sample`. nutpie by default (see the
        documentation's Defaults and why page); the last two need their packages.
    compile_mode : str
        PyTensor mode for the PyMC sampler (``"NUMBA"``, or ``"FAST_RUN"``
        for the C backend).
    blas_threads : int or None
        BLAS threads per process while sampling (``threadpoolctl``); None
        leaves them alone. PyMC's worker processes get one each anyway
        (``blas_cores="auto"``); nutpie's chains are threads of this process.
    progressbar : bool
    **kwargs
        Further keyword arguments of :func:`pymc.sample`.

    Returns
    -------
    arviz.InferenceData
        The package's layout (:mod:`rvm_ppl.output.idata`), with ``sample_stats``.
        ``fit`` holds ``mean`` and ``cov`` of ``w`` (Rao-Blackwellised in the
        marginal regression) and ``relevance`` ``gamma``, the posterior mean
        of ``1 - alpha_m Sigma_mm``. ``attrs`` hold the diagnostics
        (``n_divergences``, ``max_rhat``, ``min_ess_bulk``,
        ``min_ess_bulk_log_alpha``, ``max_rhat_log_alpha``, ...),
        ``wall_time_s`` (compilation and sampling), ``sampling_time_s`` and
        ``ess_per_s`` (min bulk ESS of ``log alpha`` per second of sampling).
        A ``"categorical"`` model gives the multinomial layout
        (:func:`rvm_ppl.output.idata.multinomial_idata`: a ``class`` dimension
        before ``basis``), its diagnostics over ``log alpha`` and ``w`` of
        every class and basis.

    Warns
    -----
    SamplingWarning
        When the diagnostics fail the thresholds of this module.
    """
    import pymc as pm

    if "random_state" in kwargs:
        raise TypeError("fit_nuts takes PyMC's random_seed, not random_state (renamed before "
                        "1.0; see docs/changelog.md).")
    model = pm.modelcontext(model)
    result = nuts_result(model, draws=draws, tune=tune, chains=chains,
                         random_seed=random_seed, **kwargs)
    return _model_idata(model, result, random_seed)
