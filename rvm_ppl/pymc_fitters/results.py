"""From a PyMC fit to the package's result: exact draws of what the model integrates out.

:func:`rvm_ppl.pymc_fitters.nuts.fit_nuts` and :func:`rvm_ppl.pymc_fitters.advi.fit_advi`
take a PyMC model of :func:`rvm_ppl.model.build_model` (or one a user changed, as long as
it names its variables the same way: see :func:`rvm_ppl.model.model_spec`); this module
turns their draws into the package's :class:`~rvm_ppl.core.result.FitResult` and its one
InferenceData layout (:func:`rvm_ppl.output.idata.to_idata`).

Parameterisation
----------------
Regression defaults to the ``"marginal"`` form: ``t`` observed through its
marginal likelihood (Tipping 2001, eq. 15), ``(alpha, beta)`` sampled or
fitted together with the weights on their whitened scale ``z``, standard
normal in the posterior, and ``w = mu + L^{-T} z`` an exact draw from its
Gaussian conditional ``N(mu, Sigma)`` (eqs. 12-13) at every draw
(:mod:`rvm_ppl.model.conditional`). Classification defaults to its
own ``"marginal"`` form: ``alpha`` integrated out (Student-t weights,
Tipping 2001, eq. 32, sampled on an asinh scale), and ``alpha`` drawn
afterwards from ``Gamma(a + 1/2, b + w^2 / 2)`` for every draw of ``w``;
with the classifier's hyperprior :data:`rvm_ppl.model.build.BERNOULLI_PRIORS`
(see :mod:`rvm_ppl.model.build` for why the classifier needs a proper one).

The categorical (softmax) likelihood of ``build_model(likelihood="categorical")``
has the same marginal form (:mod:`rvm_ppl.model.categorical`); ``alpha``
is drawn afterwards per class (or per basis, when shared) and the fitters
return one result per class.

The reasons for the fitters' defaults, with the runs behind them, are in the
documentation's Defaults and why page (``docs/defaults.md``); how NUTS and ADVI fare
in these forms on Ripley's data, in its Benchmarks page, section "Classification", and
on a three-class mixture, in the User guide, section "Multi-class: one-vs-rest or one
softmax model".
"""
from __future__ import annotations

import contextlib
import functools
import json
import threading
import warnings

import numpy as np
from scipy import special

from rvm_ppl.core.linalg import (
    cho_covariance,
    cho_solve,
    cholesky_jittered,
    solve_lower_t,
)
from rvm_ppl.core.result import FitResult, gamma_relevance
from rvm_ppl.model.build import alpha_given_weights, model_spec
from rvm_ppl.model.marginal import lowrank_conditional_moments, lowrank_latent
from rvm_ppl.output.idata import multinomial_idata, to_idata

COMPILE_MODE = "NUMBA"


DRAWS, TUNE, CHAINS = 1000, 1000, 4


# Draws (evenly thinned) at which E[gamma] of the categorical likelihood is
# averaged: each costs a K M x K M factorisation.
GAMMA_DRAWS = 200


def _check_model(model):
    """The model's spec, after checking that there is something to fit."""
    spec = model_spec(model)
    if not model.free_RVs:
        raise ValueError("Nothing to fit: the model has no free variables.")
    if spec.parameterization == "marginal" and spec.likelihood == "gaussian" and \
            spec.alpha is not None and spec.beta is not None:
        raise ValueError(
            "Nothing to fit: alpha and beta are both fixed in the marginal form; "
            "use rvm_ppl.closed_form.evidence.posterior_given for the exact posterior of w."
        )
    return spec


def softplus_precisions(model):
    """``model`` with its Gamma precisions sampled on the softplus scale.

    Every free ``alpha`` and ``beta`` with a ``Gamma(a, b)`` prior (``b`` a
    constant or data) and PyMC's default log transform is sampled as
    ``alpha = softplus(v) / b`` instead. The posterior is the same; only
    the sampler's coordinates change. On PyMC's scale ``u = log alpha`` the
    Gamma density ``exp(a u - b e^u)`` is flat below ``1/b`` and a wall
    above, whose curvature grows e-fold per unit of ``u``; the ``alpha`` of
    a pruned basis function follows that prior, and NUTS then takes the
    step size the wall allows. On ``v`` the flat part is the same
    (``v = log(b alpha)`` for ``alpha << 1/b``) and the wall becomes a tail
    ``e^(-v)`` of curvature below 1, so NUTS takes about half the leapfrog
    steps per draw (the documentation's Benchmarks page, section "What the
    methods say about α", has the runs).

    :func:`fit_nuts` samples this model and returns results on the model it
    was given. With PyMC's own tools: ``with softplus_precisions(model):
    trace = pm.sample()``.

    Parameters
    ----------
    model : pymc.Model

    Returns
    -------
    pymc.Model
        A new model, or ``model`` itself when no precision qualifies.
    """
    from pymc.logprob.transforms import LogTransform
    from pymc.model.transform.conditioning import change_value_transforms
    from pytensor.tensor.random.basic import GammaRV

    from rvm_ppl.model.transforms import softplus_rate_class

    transforms = {}
    for name in ("alpha", "beta"):
        rv = model.named_vars.get(name)
        if rv is None or rv not in model.free_RVs or not isinstance(rv.owner.op, GammaRV):
            continue
        if type(model.rvs_to_transforms.get(rv)) is LogTransform:
            transforms[name] = softplus_rate_class()()
    return change_value_transforms(model, transforms) if transforms else model


def _seeds(random_state):
    """One numpy Generator, and PyMC's ``random_seed`` drawn from it."""
    rng = np.random.default_rng(random_state)
    return rng, int(rng.integers(2**31 - 1))


@functools.cache
def _numba_mode():
    """PyTensor's NUMBA mode without the sparse rewrite ``local_usmm``.

    That rewrite matches any ``z - alpha * y`` with a scalar ``alpha`` and then
    asks whether the C backend links a BLAS (``config.blas__ldflags``), which
    PyTensor answers by compiling and linking test programs, in every new
    process, and with a warning after a pip install. It only ever makes a C op
    of a sparse product, which neither the NUMBA backend nor these models use,
    so leaving it out changes no compiled graph.
    """
    from pytensor.compile.mode import get_mode

    return get_mode("NUMBA").excluding("local_usmm")


_MODE_LOCK = threading.Lock()
_mode_users, _saved_numba = 0, None  # fits inside _numba_without_usmm, and the mode it replaced


@contextlib.contextmanager
def _numba_without_usmm():
    """Resolve the mode name ``"NUMBA"`` to :func:`_numba_mode` (nutpie compiles by that name)."""
    global _mode_users, _saved_numba
    from pytensor.compile import mode as modes

    with _MODE_LOCK:
        if _mode_users == 0:
            _saved_numba = modes.predefined_modes["NUMBA"]
            modes.predefined_modes["NUMBA"] = _numba_mode()
        _mode_users += 1
    try:
        yield
    finally:
        with _MODE_LOCK:
            _mode_users -= 1
            if _mode_users == 0:
                modes.predefined_modes["NUMBA"] = _saved_numba


@contextlib.contextmanager
def _compilation():
    """The compile settings of every PyMC fit: reproducible arithmetic, quiet performance notes.

    PyTensor compiles its NUMBA functions with fast-math by default (``reassoc``,
    ``contract``, ...), which lets LLVM reorder and fuse floating-point operations
    differently when a graph is compiled fresh with its callees than when it is
    loaded from PyTensor's on-disk cache (``base_compiledir/numba``): the log density
    then differed in its last bit between a cold and a warm cache, and NUTS tuning
    grew that into different draws for the same seed. Without fast-math the numbers
    depend only on the inputs and the seed. The mode ``"NUMBA"`` is compiled without
    the rewrite that would probe for a C BLAS (:func:`_numba_mode`).

    numba notes that a matrix-vector product meets a transposed, hence
    non-contiguous, M x M array: harmless at these sizes.
    """
    import pytensor

    with (warnings.catch_warnings(), _numba_without_usmm(),
          pytensor.config.change_flags(numba__fastmath=False)):
        warnings.filterwarnings("ignore", message=r".*np\.dot\(\) is faster on contiguous")
        yield


def whitened_weights(model):
    """The trace name of the marginal regression's whitened weights ``z``, or None.

    In the marginal regression ``w`` is sampled on the scale ``z = R^{-1}
    (w - mu)`` of its conditional ``N(mu, Sigma)`` (the ``Whitened``
    transform of :mod:`rvm_ppl.model.conditional`); this is the name of its
    value variable (``"w_whitened__"``). None for any other model.
    """
    from rvm_ppl.model.conditional import whitened_class

    w = model.named_vars.get("w")
    if w is None or w not in model.free_RVs or \
            not isinstance(model.rvs_to_transforms.get(w), whitened_class()):
        return None
    return model.rvs_to_values[w].name


def _trace_var_names(model, spec):
    """What PyMC's trace stores: the marginal regression's ``z`` instead of ``w``, else None (all).

    ``w`` is a function of ``(alpha, beta, z)`` (``w = mu + R z``); storing
    it makes the compiled trace function factor ``Sigma^{-1}`` once more per
    draw (a Cholesky factor and two triangular solves; Defaults and why,
    "First fits"). :func:`_result` draws it from the factor it computes anyway.
    """
    z_name = whitened_weights(model)
    if spec.likelihood != "gaussian" or z_name is None or "PhiT_Phi" not in model.named_vars:
        return None
    return [rv.name for rv in model.free_RVs if rv.name != "w"] + [z_name] + \
        [d.name for d in model.deterministics]


def _data(model, name):
    return np.asarray(model[name].get_value(), dtype=float)


def _conditional_moments(PtP, Pty, alpha, beta, z=None):
    """Rao-Blackwellised moments of ``w`` and ``E[gamma_m]`` over draws of ``(alpha, beta)``.

    For every draw: ``Sigma = (beta Phi^T Phi + A)^{-1}`` (Tipping 2001,
    eq. 12), ``mu = beta Sigma Phi^T t`` (eq. 13). Returns ``E[mu]``,
    ``E[Sigma] + Cov[mu]``, ``E[1 - alpha_m Sigma_mm]`` (eq. 17) and, given
    standard normal ``z`` of the draws' shape, the exact draws
    ``w = mu + L^{-T} z`` of ``w | alpha, beta, t`` (else None): the
    marginal model's ``w`` (:func:`rvm_ppl.model.build._conditional_weights`),
    from the same factor.
    """
    M = alpha.shape[-1]
    flat_a, flat_b = alpha.reshape(-1, M), beta.reshape(-1)
    flat_z = None if z is None else z.reshape(-1, M)
    w = None if z is None else np.empty_like(flat_z)
    mu_sum, second, gamma_sum = np.zeros(M), np.zeros((M, M)), np.zeros(M)
    for i, (a, b) in enumerate(zip(flat_a, flat_b, strict=True)):
        mu, Sigma, w_i = _conditional_draw(PtP, Pty, a, b, None if w is None else flat_z[i])
        mu_sum += mu
        second += Sigma + np.outer(mu, mu)
        gamma_sum += 1.0 - a * np.diag(Sigma)
        if w is not None:
            w[i] = w_i
    n = len(flat_a)
    mean = mu_sum / n
    return (mean, second / n - np.outer(mean, mean), gamma_sum / n,
            None if w is None else w.reshape(z.shape))


def _conditional_draw(PtP, Pty, a, b, z=None):
    """``(mu, Sigma, mu + L^{-T} z)`` of ``w | alpha, beta, t`` for one draw (eqs. 12-13).

    ``L L^T = Sigma^{-1}``, factored with jitter where it is numerically
    singular; the last item is None without ``z``.
    """
    L = cholesky_jittered(b * PtP + np.diag(a), what="posterior precision of the weights")
    mu = cho_solve(L, b * Pty)
    return mu, cho_covariance(L), None if z is None else mu + solve_lower_t(L, z)


def _sample_moments(Phi, w, alpha, beta, likelihood, offset=None):
    """Sample moments of ``w`` draws, and ``E[gamma_m]`` with ``Sigma`` at each draw.

    Regression: ``Sigma`` is the exact conditional covariance given
    ``(alpha, beta)`` (Tipping 2001, eq. 12). Classification: ``Sigma`` is
    ``(Phi^T B Phi + A)^{-1}`` with ``B`` the logistic curvature at the
    draw's ``w`` (eqs. 25-26 evaluated at the draw instead of the mode);
    counts: the same with the Poisson curvature ``B = diag(exp(Phi w +
    offset))``. Another likelihood has no such ``Sigma``: ``gamma`` is NaN.
    """
    M = w.shape[-1]
    flat_w, flat_a = w.reshape(-1, M), alpha.reshape(-1, M)
    mean = flat_w.mean(axis=0)
    cov = np.cov(flat_w, rowvar=False).reshape(M, M) if len(flat_w) > 1 else np.zeros((M, M))
    if likelihood == "other":
        return mean, cov, np.full(M, np.nan)
    gamma_sum = np.zeros(M)
    PtP = Phi.T @ Phi
    flat_b = None if beta is None else beta.reshape(-1)
    for i, a in enumerate(flat_a):
        if likelihood == "gaussian":
            H = flat_b[i] * PtP + np.diag(a)
        elif likelihood == "poisson":
            eta = Phi @ flat_w[i] + (0.0 if offset is None else offset)
            with np.errstate(over="ignore"):  # an overflowing rate fails the factorisation
                H = (Phi.T * np.exp(eta)) @ Phi + np.diag(a)
        else:
            s = special.expit(Phi @ flat_w[i])
            H = (Phi.T * (s * (1 - s))) @ Phi + np.diag(a)
        L = cholesky_jittered(H, what="posterior precision of the weights")
        gamma_sum += 1.0 - a * np.diag(cho_covariance(L))
    return mean, cov, gamma_sum / len(flat_a)


def _categorical_gamma(Phi, W, alpha):
    """``E[gamma_km]`` over at most :data:`GAMMA_DRAWS` draws, ``Sigma`` at each draw.

    ``Sigma`` is the inverse of ``Psi^T B Psi + A``, the negated Hessian of
    the softmax log posterior at the draw's weights (block Hessian of the
    ``K`` weight vectors, ``B_n = diag(y_n) - y_n y_n^T``; Nabney 1999), the
    multinomial counterpart of the binary classifier's
    ``(Phi^T B Phi + A)^{-1}`` in :func:`_sample_moments`. Draws are thinned
    evenly: each costs one ``K M x K M`` factorisation.
    """
    from rvm_ppl.closed_form.categorical import neg_hessian

    K, M = W.shape[-2:]
    flat_W, flat_a = W.reshape(-1, K, M), alpha.reshape(-1, K, M)
    cols = np.tile(Phi, (1, K))  # column k M + m: basis m in the latent value of class k
    cls = np.repeat(np.arange(K), M)
    picks = np.unique(np.linspace(0, len(flat_W) - 1, min(len(flat_W), GAMMA_DRAWS)).astype(int))
    gamma_sum = np.zeros(K * M)
    for i in picks:
        Y = special.softmax(Phi @ flat_W[i].T, axis=1)  # Tipping (2001) eq. (28)
        a = flat_a[i].ravel()
        L = cholesky_jittered(neg_hessian(cols, cls, Y, a),
                              what="posterior precision of the weights")
        gamma_sum += 1.0 - a * np.diag(cho_covariance(L))
    return (gamma_sum / len(picks)).reshape(K, M)


def _categorical_results(method, model, spec, post, rng, *, stats, fit, sample_stats):
    """One :class:`FitResult` per class from draws of the softmax RVM's ``w`` (class, basis).

    ``alpha`` was integrated out and is drawn here, exactly, from its
    conditional given each draw of ``w``
    (:func:`rvm_ppl.model.categorical.alpha_given_weights_multinomial`; shared
    ``alpha`` is repeated for every class). Draw ``i`` of every class is the
    same posterior draw, so stacking the classes' ``w`` gives the joint draws.
    """
    from rvm_ppl.model.categorical import alpha_given_weights_multinomial

    Phi = _data(model, "Phi")
    w_da = post["w"]
    W = np.asarray(w_da.values, dtype=float)  # (chain, draw, K, M)
    n_chain, n_draw, K, M = W.shape
    basis = ([str(b) for b in w_da["basis"].values] if "basis" in w_da.coords
             else [f"phi_{m}" for m in range(M)])
    classes = [str(c) for c in w_da["class"].values] if "class" in w_da.coords else \
        [str(k) for k in range(K)]
    if "alpha" in post:
        alpha_d = np.broadcast_to(np.asarray(post["alpha"].values, dtype=float), W.shape).copy()
    else:
        alpha_d = alpha_given_weights_multinomial(W, spec.priors, rng,
                                                  shared_alpha=spec.shared_alpha)
        if spec.shared_alpha:
            alpha_d = np.repeat(alpha_d[:, :, None, :], K, axis=2)
    gamma = _categorical_gamma(Phi, W, alpha_d)
    common = {"parameterization": spec.parameterization, "priors": json.dumps(spec.priors),
              "shared_alpha": int(spec.shared_alpha), "classes": json.dumps(classes), **stats}
    results = []
    for k in range(K):
        mean, cov, _ = _sample_moments(Phi, W[:, :, k], alpha_d[:, :, k], None, "other")
        results.append(FitResult(
            method=method, likelihood="categorical", basis=tuple(basis), support=np.arange(M),
            mean=mean, cov=cov, alpha=np.median(alpha_d[:, :, k].reshape(-1, M), axis=0),
            beta=None, noise_var=None, gamma=gamma[k], relevant=gamma_relevance(gamma[k]),
            stats={**common, "class": classes[k]}, fit=fit or {},
            draws={"w": W[:, :, k], "alpha": alpha_d[:, :, k]}, sample_stats=sample_stats,
        ))
    return results


def _result(method, model, spec, post, rng, *, stats, fit=None, sample_stats=None):
    """The :class:`FitResult` of draws from a PyMC model's posterior (or approximation).

    In the marginal classifier (and the marginal Poisson model) ``alpha`` was
    integrated out and is drawn here, exactly, from ``Gamma(a + 1/2, b + w^2
    / 2)`` for every draw of ``w``.
    The categorical likelihood gives a list of one result per class
    (:func:`_categorical_results`).
    """
    if spec.likelihood == "categorical":
        return _categorical_results(method, model, spec, post, rng, stats=stats, fit=fit,
                                    sample_stats=sample_stats)
    Phi = _data(model, "Phi")
    # The marginal regression's w may be left out of the trace (_trace_var_names)
    # and drawn here from its whitened coordinates z.
    z_name = whitened_weights(model)
    z = np.asarray(post[z_name].values, dtype=float) if z_name in post else None
    w = np.asarray(post["w"].values, dtype=float) if "w" in post else None
    n_chain, n_draw, M = (w if w is not None else z).shape
    basis = _basis_labels(model, post, M)
    if "alpha" in post:
        alpha_d = np.asarray(post["alpha"].values, dtype=float)
    elif spec.parameterization == "marginal" and spec.likelihood in ("bernoulli", "poisson"):
        alpha_d = alpha_given_weights(w, spec.priors, rng)
    else:
        alpha_d = np.broadcast_to(spec.alpha, (n_chain, n_draw, M)).copy()
    gaussian = spec.likelihood == "gaussian"
    beta_d = None
    if gaussian:
        beta_d = (np.asarray(post["beta"].values, dtype=float) if "beta" in post
                  else np.full((n_chain, n_draw), spec.beta))
    latent = None
    if gaussian and "PhiT_Phi" in model.named_vars:
        if "lowrank_V" in model.named_vars:  # the low-rank form's own draws of w (same law)
            # From z, with the draws of g = V w computed stably beside them; a trace of w
            # without z (PyMC's own sampler) keeps its w, and f = Phi w.
            V = _data(model, "lowrank_V")
            mean, cov, gamma, w_z, (g_mean, g_cov, g) = lowrank_conditional_moments(
                V, _data(model, "lowrank_s"), alpha_d, beta_d, z)
            w = w_z if w_z is not None else w
            latent = {"V_pinv": lowrank_latent(V), "mean": g_mean, "cov": g_cov, "draws": g}
        else:
            mean, cov, gamma, w_z = _conditional_moments(
                _data(model, "PhiT_Phi"), _data(model, "PhiT_y"), alpha_d, beta_d,
                None if w is not None else z)
            w = w if w is not None else w_z
    else:
        offset = _data(model, "offset") if "offset" in model.named_vars else None
        mean, cov, gamma = _sample_moments(Phi, w, alpha_d, beta_d, spec.likelihood, offset)
    draws = {"w": w, "alpha": alpha_d}
    if beta_d is not None:
        draws["beta"] = beta_d
    noise_var = float(np.mean(1.0 / beta_d)) if gaussian else None
    return FitResult(
        method=method,
        likelihood=spec.likelihood,
        basis=tuple(basis),
        support=np.arange(M),
        mean=mean,
        cov=cov,
        alpha=np.median(alpha_d.reshape(-1, M), axis=0),
        beta=None if noise_var is None else 1.0 / noise_var,
        noise_var=noise_var,
        gamma=gamma,
        relevant=gamma_relevance(gamma),
        stats={"parameterization": spec.parameterization,
               "priors": json.dumps(spec.priors), "design_tol": spec.design_tol,
               "design_rank": (_data(model, "lowrank_Q").shape[1] if spec.design_tol else None),
               **stats},
        fit=fit or {},
        draws=draws,
        sample_stats=sample_stats,
        latent=latent,
    )


def _basis_labels(model, post, M):
    """Labels of the ``M`` basis functions: the posterior's or the model's coordinate ``basis``."""
    if "w" in post and "basis" in post["w"].coords:
        return [str(b) for b in post["w"]["basis"].values]
    if "basis" in model.named_vars_to_dims.get("w", ()) and model.coords.get("basis") is not None:
        return [str(b) for b in model.coords["basis"]]
    return [f"phi_{m}" for m in range(M)]


def _labelled(result):
    """``(value, label)`` for every entry of an ArviZ diagnostics Dataset."""
    for name, da in result.data_vars.items():
        vals = np.asarray(da.values, dtype=float).ravel()
        labels = [f"{name}[{b}]" for b in da["basis"].values] if "basis" in da.dims else [name]
        yield from zip(vals, labels, strict=True)


def _checked_draws(model, spec, post, result):
    """The draws whose r-hat and ESS NUTS reports, and the labels of their last axis.

    ``log alpha`` and ``log beta`` where they are free, and ``w`` where it was
    sampled. For the categorical likelihood (a list of per-class results)
    ``log alpha`` and ``w`` of every class and basis, labelled
    ``"class:basis"``.
    """
    if isinstance(result, list):
        labels = [f"{r.stats['class']}:{b}" for r in result for b in r.basis]
        return {"log_alpha": np.log(np.concatenate([r.draws["alpha"] for r in result], axis=-1)),
                "w": np.concatenate([r.draws["w"] for r in result], axis=-1)}, labels
    checked = {}
    if spec.alpha is None:
        checked["log_alpha"] = np.log(result.draws["alpha"])
    if "beta" in post:
        checked["log_beta"] = np.log(result.draws["beta"])
    sampled_w = "w" in [v.name for v in model.free_RVs] and whitened_weights(model) is None
    if sampled_w or not checked:
        checked["w"] = result.draws["w"]
    return checked, result.basis


def _replace(result, **changes):
    """``dataclasses.replace`` on a result, or on each of a list of per-class results."""
    from dataclasses import replace

    if isinstance(result, list):  # each class keeps its own label among the stats
        return [replace(r, **{k: {**v, "class": r.stats["class"]} if k == "stats" else v
                              for k, v in changes.items()}) for r in result]
    return replace(result, **changes)


def model_constants(model):
    """The data of ``model`` that its free variables depend on, for ``constant_data``.

    PyMC's forward sampling (:func:`pymc.sample_posterior_predictive`) draws a
    variable of the trace again, from its prior, when data it depends on are
    missing from the trace's ``constant_data`` or differ from it there
    (``pymc.sampling.forward.compile_forward_sampling_function``). These are
    the data ``pm.sample`` would store for them: the hyperprior's rates
    (``alpha_rate``, ``beta_rate``) and, in the marginal regression, the
    training statistics ``w`` is conditioned on (``PhiT_Phi`` and ``PhiT_y``,
    or ``lowrank_V`` and ``lowrank_s``). With them the forward sampling of
    ``y``, at the training rows or after ``pm.set_data({"Phi": new_rows})``,
    takes ``alpha``, ``beta`` and ``w`` from the posterior.

    Parameters
    ----------
    model : pymc.Model

    Returns
    -------
    dict
        ``name -> value`` of those data.
    """
    from pytensor.graph.traversal import ancestors

    upstream = set(ancestors(model.free_RVs))
    return {v.name: v.get_value() for v in model.data_vars if v in upstream}


def _model_idata(model, result, random_state):
    """The package's InferenceData of a fit of ``model``."""
    y = model["y_obs"].get_value()
    Phi = _data(model, "Phi")
    if Phi.shape[0] != y.shape[0]:
        raise ValueError(
            f"The model's Phi has {Phi.shape[0]} rows and its y_obs {y.shape[0]}: restore the "
            "training data (pm.set_data) before fitting."
        )
    constants = model_constants(model)
    priors = _model_priors(model, result, constants)
    if isinstance(result, list):  # categorical: one result per class, all on every basis
        classes = json.loads(result[0].stats["classes"])
        return multinomial_idata(result, y=y, Phi=Phi, classes=classes,
                                 random_state=random_state, constants=constants, priors=priors)
    offset = _data(model, "offset") if "offset" in model.named_vars else None
    return to_idata(result, y=y, Phi=Phi[:, result.support], random_state=random_state,
                    constants=constants, priors=priors, offset=offset)


def _model_priors(model, result, constants):
    """The hyperprior of the fitted model, for the prior groups; False where it has none.

    The spec's ``a, b, c, d`` with the rates the model's data hold now
    (``alpha_rate``, ``beta_rate``, which ``pm.set_data`` may have changed).
    A model that fixes ``alpha`` or ``beta``, or one written by hand, has no
    Gamma hyperprior on both: no ``prior`` or ``log_prior`` group.
    """
    spec = model_spec(model)
    if not spec.priors or spec.alpha is not None or spec.beta is not None:
        return False
    first = result[0] if isinstance(result, list) else result
    priors = json.loads(first.stats["priors"])
    for key, name in (("b", "alpha_rate"), ("d", "beta_rate")):
        if name in constants:
            priors[key] = float(constants[name])
    return priors
