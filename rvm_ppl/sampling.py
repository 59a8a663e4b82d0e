"""NUTS and ADVI on the PyMC model of :func:`rvm_ppl.model.build_model`.

Both functions take the design matrix and the targets (regression targets
are expected divided by their standard deviation, as the estimators do) and
return the package's one InferenceData layout (:func:`rvm_ppl._idata.make_idata`).

Parameterisation
----------------
Regression defaults to the ``"marginal"`` form: ``w`` integrated out
(Tipping 2001, eq. 7), ``(alpha, beta)`` sampled or fitted, and ``w`` drawn
afterwards, for every draw of ``(alpha, beta)``, from its exact Gaussian
conditional ``N(mu, Sigma)`` (eqs. 12-13). Classification defaults to its
own ``"marginal"`` form: ``alpha`` integrated out (Student-t weights,
Tipping 2001, eq. 32, sampled on an asinh scale), and ``alpha`` drawn
afterwards from ``Gamma(a + 1/2, b + w^2 / 2)`` for every draw of ``w``;
with the classifier's hyperprior :data:`rvm_ppl.model.BERNOULLI_PRIORS`
(see :mod:`rvm_ppl.model` for why the classifier needs a proper one). On
Ripley's data (100 points, RBF gamma = 4; ``benchmarks/bench_classification.py
--part nuts``) NUTS gave 0 divergences on 10 of 10 subsets, r-hat <= 1.004
for every ``log alpha`` and <= 1.008 for every weight (4 chains; with 2,
one weight's r-hat of 202 exceeded 1.01 in 2 of the 10 runs, at bulk ESS
above 1100). Mean-field ADVI reached a higher ELBO in the marginal form
than with centred or non-centred weights on each of 3 subsets (-72.9
against -78.3 and -76.1 on the first).

Defaults and why
----------------
Measured on noisy sinc (N = 100, RBF r = 3, standardised targets, hyperpriors
a = b = c = d = 1e-6, 2 chains x (1000 tune + 1000 draws)) on an otherwise
idle 2-core machine; ``benchmarks/bench_bayes.py`` prints the tables.

* **The marginal likelihood in its M x M form** (``model._marginal_loglike``).
  With PyMC's ``MvNormal`` on the N x N covariance, NUTS reported 17-41
  divergent transitions in each of 4 runs: where some ``alpha_m`` is tiny that
  covariance is too ill-conditioned for its Cholesky factor. The M x M form
  (one Cholesky factor of ``Sigma^{-1}``, analytic gradient) gave 0
  divergences in 10 of 10 PyMC runs (N = 50 and 100, 5 seeds each), and a
  logp + gradient costs 0.14 ms instead of 0.45 ms (N = 100).
* **target_accept = 0.8**, PyMC's default: max r-hat <= 1.009 in every run.
  PyMC's NUTS takes 31-34 leapfrog steps per draw whatever target_accept
  (0.7-0.9) or hyperprior (1e-6 to 1e-2). nutpie had 1-3
  divergences in 2 of 10 runs at 0.8 and 1 of 10 at 0.9: ``log alpha``
  stepping past ``log(1/b)`` ~ 14, where the Gamma(1e-6, 1e-6) density falls
  as ``exp(-b alpha)``.
* **PyTensor's NUMBA backend** (``compile_mode="NUMBA"``). PyTensor from pip
  links no BLAS, and the OpenBLAS builds that numpy and scipy ship export only
  ``scipy_``-prefixed symbols, so pointing ``blas__ldflags`` at them fails
  ("undefined symbol: dgemm_"). NUMBA calls LAPACK through scipy and needs no
  C compiler: 0.14 ms per logp + gradient against 0.18 ms for the C backend
  (N = 100; 0.04 ms at N = 50), NUTS sampling 14 s against 18.5 s. A cold
  compile costs about 15 s with either backend; PyTensor caches compiled
  functions on disk (``pytensor.config.base_compiledir``), and as the data
  enter as shared variables a new data set of the same shape reuses them.
* **One BLAS thread** (``blas_threads=1``) around sampling and the draws of
  ``w`` that follow: with default threads the same run took 180-260 s
  instead of 15 s (nutpie: 34 s instead of 11 s). PyMC's chain processes are
  forked and inherit the limit (PyMC applies ``blas_cores`` only to spawned
  workers); nutpie's chains are threads of this process. Without the limit
  on the draws of ``w``, idle OpenBLAS threads spinning after them doubled
  the CPU time of a run.
* **cores = min(chains, CPUs)**: PyMC's own default assumes half the CPUs are
  hyper-threads and ran the two chains in sequence here (27 s instead of 14 s).

Diagnostics
-----------
After NUTS, the number of divergent transitions, the largest rank-normalised
split r-hat and the smallest bulk ESS (Vehtari et al. 2021) over
``log alpha`` and ``log beta`` (over ``w`` when both are fixed) are stored in
``idata.attrs`` and a :class:`SamplingWarning` names every problem:
any divergence, r-hat above :data:`RHAT_MAX` = 1.01, or a bulk ESS below
:data:`ESS_MIN_PER_CHAIN` = 100 per chain (Vehtari et al. recommend 400 for
four chains).

ADVI
----
Adam with step 0.01. PyMC's default, ``adagrad_window`` with step 1e-3,
reached its lowest loss after about 20,000 iterations and then blew up (mean
loss over 1000 iterations from 1,170 to as much as 46,000); with steps 3e-3
and 1e-2 it blew up after 8,000 and 2,000 iterations. Adam at 0.01 or 3e-3
stayed at its optimum for 30,000 iterations. :func:`fit_advi` stops when the
median loss (-ELBO) over the last ``window`` = 1000 iterations has moved by
less than ``tol`` = 0.01 nats per observation from the window before, twice
in a row (``patience`` = 2); otherwise it
stops after ``n_iter`` iterations with a ``ConvergenceWarning``. The median
ignores the rare huge losses of draws near the hyperprior's cut-off; the
loss of a single iteration has a standard deviation of about 5 nats here. On
noisy sinc (N = 100) the marginal mean-field fit stops after 4,000-6,000
iterations (3-7 s) with noise sd 0.097-0.104; the centred and non-centred
forms overestimate it by 20-45% and 65-85%.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import time
import warnings

import numpy as np
from scipy import linalg, special
from sklearn.exceptions import ConvergenceWarning

from ._idata import make_idata
from ._linalg import cho_covariance, cho_solve, cholesky_jittered
from .model import alpha_given_weights, build_model, model_priors

NUTS_SAMPLERS = ("pymc", "nutpie", "numpyro", "blackjax")
ADVI_METHODS = ("advi", "fullrank_advi")
COMPILE_MODE = "NUMBA"
TARGET_ACCEPT = 0.8
RHAT_MAX = 1.01
ESS_MIN_PER_CHAIN = 100
ADVI_WINDOW = 1000
ADVI_TOL = 1e-2
ADVI_LEARNING_RATE = 1e-2

# What a missing sampler needs (pm.sample's nuts_sampler -> modules).
_SAMPLER_MODULES = {
    "pymc": (),
    "nutpie": ("nutpie",),
    "numpyro": ("numpyro", "jax"),
    "blackjax": ("blackjax", "jax"),
}


class SamplingWarning(UserWarning):
    """NUTS diagnostics (divergences, r-hat, ESS) suggest an unreliable posterior."""


def _prepare(Phi, y, basis, likelihood, priors, parameterization, alpha, beta):
    """Arrays, basis labels, the parameterisation and the PyMC model of a fit.

    The default parameterisation is ``"marginal"``, except for a classifier
    with ``alpha`` fixed: ``"centered"``.
    """
    if parameterization is None:
        parameterization = "marginal" if likelihood == "gaussian" or alpha is None else "centered"
    Phi = np.asarray(Phi, dtype=float)
    y = np.asarray(y, dtype=float)
    basis = list(basis) if basis is not None else [f"phi_{m}" for m in range(Phi.shape[1])]
    model = build_model(
        Phi, y, likelihood=likelihood, basis=basis, priors=priors,
        parameterization=parameterization, alpha=alpha, beta=beta,
    )
    if not model.free_RVs:
        raise ValueError(
            "Nothing to fit: alpha and beta are both fixed in the marginal form; "
            "use rvm_ppl.evidence.posterior_given for the exact posterior of w."
        )
    return Phi, y, basis, parameterization, model


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


def _seeds(random_state):
    """One numpy Generator, and PyMC's ``random_seed`` drawn from it."""
    rng = np.random.default_rng(random_state)
    return rng, int(rng.integers(2**31 - 1))


def _blas_limit(blas_threads):
    """``threadpool_limits`` on BLAS, or nothing when ``blas_threads`` is None."""
    if blas_threads is None:
        return contextlib.nullcontext()
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=blas_threads, user_api="blas")


def _free_draws(posterior, name, fixed, shape):
    """Draws of ``alpha`` or ``beta`` from the posterior, or the fixed value broadcast."""
    if fixed is None:
        return np.asarray(posterior[name].values, dtype=float)
    return np.broadcast_to(np.asarray(fixed, dtype=float), shape).copy()


def _conditional_weights(Phi, y, alpha, beta, rng):
    """Exact draws of ``w | alpha, beta, y`` and the moments they imply.

    For every draw ``(alpha, beta)``: ``Sigma = (beta Phi^T Phi + A)^{-1}``
    (Tipping 2001, eq. 12), ``mu = beta Sigma Phi^T y`` (eq. 13) and one
    ``w ~ N(mu, Sigma)``.

    Returns
    -------
    w : ndarray of shape (chain, draw, M)
    mean : ndarray of shape (M,)
        ``E[w] = E[mu]``, the Rao-Blackwellised posterior mean.
    cov : ndarray of shape (M, M)
        ``Cov[w] = E[Sigma] + Cov[mu]``.
    gamma : ndarray of shape (M,)
        ``E[gamma_m] = E[1 - alpha_m Sigma_mm]`` (eq. 17).
    """
    C, D, M = alpha.shape
    PtP = Phi.T @ Phi
    Pty = Phi.T @ y
    w = np.empty((C, D, M))
    mu_sum = np.zeros(M)
    second = np.zeros((M, M))  # sum of Sigma + mu mu^T
    gamma_sum = np.zeros(M)
    for c in range(C):
        for d in range(D):
            a, b = alpha[c, d], beta[c, d]
            L = cholesky_jittered(b * PtP + np.diag(a), what="posterior precision of the weights")
            mu = cho_solve(L, b * Pty)  # eq. (13)
            z = rng.standard_normal(M)
            # L^{-T} z has covariance L^{-T} L^{-1} = Sigma.
            w[c, d] = mu + linalg.solve_triangular(L, z, lower=True, trans="T", check_finite=False)
            Sigma = cho_covariance(L)  # eq. (12)
            mu_sum += mu
            second += Sigma + np.outer(mu, mu)
            gamma_sum += 1.0 - a * np.diag(Sigma)
    n = C * D
    mean = mu_sum / n
    return w, mean, second / n - np.outer(mean, mean), gamma_sum / n


def _weight_moments(Phi, y, w, alpha, beta, likelihood):
    """Sample moments of ``w`` draws, and ``E[gamma_m]`` with ``Sigma`` at each draw.

    Regression: ``Sigma`` is the exact conditional covariance given
    ``(alpha, beta)`` (Tipping 2001, eq. 12). Classification: ``Sigma`` is
    ``(Phi^T B Phi + A)^{-1}`` with ``B`` the logistic curvature at the
    draw's ``w`` (eqs. 25-26 evaluated at the draw instead of the mode).
    """
    M = w.shape[-1]
    flat_w = w.reshape(-1, M)
    flat_a = alpha.reshape(-1, M)
    mean = flat_w.mean(axis=0)
    cov = np.cov(flat_w, rowvar=False).reshape(M, M) if len(flat_w) > 1 else np.zeros((M, M))
    gamma_sum = np.zeros(M)
    PtP = Phi.T @ Phi
    flat_b = None if beta is None else beta.reshape(-1)
    for i, a in enumerate(flat_a):
        if likelihood == "gaussian":
            H = flat_b[i] * PtP + np.diag(a)
        else:
            s = special.expit(Phi @ flat_w[i])
            H = (Phi.T * (s * (1 - s))) @ Phi + np.diag(a)
        L = cholesky_jittered(H, what="posterior precision of the weights")
        gamma_sum += 1.0 - a * np.diag(cho_covariance(L))
    return mean, cov, gamma_sum / len(flat_a)


def _weights(Phi, y, post, *, parameterization, likelihood, priors, alpha, beta, rng):
    """Draws of ``w``, ``alpha``, ``beta`` (fixed values broadcast) and the weight moments.

    In the marginal forms the level that was integrated out is drawn here,
    exactly, for every draw of the other: ``w | alpha, beta, y`` for
    regression, ``alpha | w`` for classification.
    """
    n_chain, n_draw = post.sizes["chain"], post.sizes["draw"]
    gaussian = likelihood == "gaussian"
    if not gaussian and parameterization == "marginal":
        w = np.asarray(post["w"].values, dtype=float)
        alpha_d = alpha_given_weights(w, model_priors(priors, likelihood), rng)
    else:
        alpha_d = _free_draws(post, "alpha", alpha, (n_chain, n_draw, Phi.shape[1]))
    beta_d = _free_draws(post, "beta", beta, (n_chain, n_draw)) if gaussian else None
    if gaussian and parameterization == "marginal":
        w, mean, cov, gamma = _conditional_weights(Phi, y, alpha_d, beta_d, rng)
    else:
        w = np.asarray(post["w"].values, dtype=float)
        mean, cov, gamma = _weight_moments(Phi, y, w, alpha_d, beta_d, likelihood)
    return w, alpha_d, beta_d, {"mean": (("basis",), mean), "cov": (("basis", "basis_col"), cov),
                                "gamma": (("basis",), gamma)}


def _labelled(result):
    """``(value, label)`` for every entry of an ArviZ diagnostics Dataset."""
    for name, da in result.data_vars.items():
        vals = np.asarray(da.values, dtype=float).ravel()
        labels = [f"{name}[{b}]" for b in da["basis"].values] if "basis" in da.dims else [name]
        yield from zip(vals, labels, strict=True)


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


def fit_nuts(
    Phi,
    y,
    *,
    basis=None,
    likelihood="gaussian",
    priors=None,
    parameterization=None,
    alpha=None,
    beta=None,
    draws=1000,
    tune=1000,
    chains=4,
    cores=None,
    target_accept=TARGET_ACCEPT,
    nuts_sampler="pymc",
    compile_mode=COMPILE_MODE,
    blas_threads=1,
    random_state=None,
    progressbar=False,
    sample_kwargs=None,
):
    """Sample the RVM posterior with NUTS.

    Parameters
    ----------
    Phi : ndarray of shape (N, M)
        Design matrix.
    y : ndarray of shape (N,)
        Targets (standardised for regression) or 0/1 labels.
    basis : list of str, optional
        Basis labels (coordinate ``basis``).
    likelihood : {"gaussian", "bernoulli"}
    priors : dict, optional
        Gamma hyperpriors ``a, b, c, d``; default
        :data:`rvm_ppl.model.DEFAULT_PRIORS`, and for ``a, b`` of a
        classifier :data:`rvm_ppl.model.BERNOULLI_PRIORS`.
    parameterization : {"marginal", "centered", "noncentered"}, optional
        Default ``"marginal"``; ``"centered"`` for a classifier with
        ``alpha`` fixed.
    alpha, beta : array-like or float, optional
        Hold ``alpha`` or ``beta`` fixed (as in :func:`build_model`).
    draws, tune, chains : int
        Four chains by default, as r-hat <= 1.01 presumes (Vehtari et al.
        2021).
    cores : int, optional
        Chains run in parallel (processes for PyMC, threads for nutpie);
        default ``min(chains, available CPUs)``.
    target_accept : float
    nuts_sampler : {"pymc", "nutpie", "numpyro", "blackjax"}
        Passed to :func:`pymc.sample`; the last three need their packages.
    compile_mode : str
        PyTensor mode for the PyMC sampler (``"NUMBA"``, or ``"FAST_RUN"``
        for the C backend).
    blas_threads : int or None
        BLAS threads per process while sampling (``threadpoolctl``); None
        leaves them alone. PyMC's worker processes get one each anyway
        (``blas_cores="auto"``); nutpie's chains are threads of this process.
    random_state : int, Generator or None
        Seeds PyMC and the numpy draws of ``w``.
    progressbar : bool
    sample_kwargs : dict, optional
        Extra keyword arguments for :func:`pymc.sample`; they win.

    Returns
    -------
    arviz.InferenceData
        ``posterior`` (``w``, ``alpha``, ``beta``), ``sample_stats``,
        ``observed_data``, and ``fit`` with ``mean`` and ``cov`` of ``w``
        (Rao-Blackwellised in the marginal form) and ``gamma``, the
        posterior mean of ``1 - alpha_m Sigma_mm``. ``attrs`` hold the
        diagnostics (``n_divergences``, ``max_rhat``, ``min_ess_bulk``,
        ``min_ess_bulk_log_alpha``, ``max_rhat_log_alpha``, ...),
        ``wall_time_s`` (compilation and
        sampling), ``sampling_time_s`` and ``ess_per_s`` (min bulk ESS of
        ``log alpha`` per second of sampling).

    Warns
    -----
    SamplingWarning
        When the diagnostics fail the thresholds of this module.
    """
    import pymc as pm

    _check_sampler(nuts_sampler)
    Phi, y, basis, parameterization, model = _prepare(
        Phi, y, basis, likelihood, priors, parameterization, alpha, beta
    )
    rng, seed = _seeds(random_state)
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
    kwargs.update(sample_kwargs or {})

    t0 = time.perf_counter()
    with _blas_limit(blas_threads), model, warnings.catch_warnings():
        # numba (nutpie's backend) notes that a matrix-vector product meets a
        # transposed, hence non-contiguous, M x M array: harmless at these sizes.
        warnings.filterwarnings("ignore", message=r".*np\.dot\(\) is faster on contiguous")
        trace = pm.sample(**kwargs)
    wall = time.perf_counter() - t0

    post = trace.posterior
    gaussian = likelihood == "gaussian"
    with _blas_limit(blas_threads):  # 2000 small factorisations: one thread is fastest
        w, alpha_d, beta_d, moments = _weights(
            Phi, y, post, parameterization=parameterization, likelihood=likelihood,
            priors=priors, alpha=alpha, beta=beta, rng=rng,
        )
        checked = {"log_alpha": np.log(alpha_d)} if alpha is None else {}
        if gaussian and beta is None:
            checked["log_beta"] = np.log(beta_d)
        if "w" in post:  # sampled, not drawn afterwards
            checked["w"] = post["w"].values
        diag = _diagnostics(checked, trace.sample_stats, basis)
    sampling_time = float(post.attrs.get("sampling_time", np.nan))
    ess_key = "min_ess_bulk_log_alpha" if alpha is None else "min_ess_bulk"
    attrs = {
        "likelihood": likelihood,
        "parameterization": parameterization,
        "nuts_sampler": nuts_sampler,
        "compile_mode": compile_mode if nuts_sampler == "pymc" else nuts_sampler,
        "target_accept": float(target_accept),
        "blas_threads": -1 if blas_threads is None else int(blas_threads),
        "tune": int(tune),
        "priors": json.dumps(model_priors(priors, likelihood)),
        "wall_time_s": wall,
        "sampling_time_s": sampling_time,
        "ess_per_s": diag[ess_key] / sampling_time if sampling_time > 0 else np.nan,
        **diag,
    }
    idata = make_idata(
        method="nuts", basis=basis, w=w, alpha=alpha_d, beta=beta_d, y=y, fit=moments,
        sample_stats=trace.sample_stats, attrs=attrs,
    )
    _warn_diagnostics(diag, post.sizes["chain"])
    return idata


class _MedianLossConvergence:
    """PyMC callback: stop when the windowed median loss has settled.

    Every ``window`` iterations the median of the loss (-ELBO, one Monte
    Carlo sample per iteration) over the last window is compared with the
    previous window's; after ``patience`` consecutive changes smaller than
    ``tol_abs`` it raises ``StopIteration``, which ends ``pm.fit`` cleanly.
    The median ignores the rare huge losses drawn where ``log alpha``
    reaches the hyperprior's rate cut-off.
    """

    def __init__(self, window, tol_abs, patience):
        self.window, self.tol_abs, self.patience = window, tol_abs, patience
        self.medians = []
        self.calm = 0
        self.converged = False

    def __call__(self, approx, losses, i):
        if losses is None or i % self.window or len(losses) < self.window:
            return
        last = np.asarray(losses[-self.window:], dtype=float)
        med = float(np.median(last[np.isfinite(last)])) if np.isfinite(last).any() else np.inf
        if self.medians and abs(med - self.medians[-1]) < self.tol_abs:
            self.calm += 1
        else:
            self.calm = 0
        self.medians.append(med)
        if self.calm >= self.patience:
            self.converged = True
            raise StopIteration(f"ADVI converged at iteration {i}: median loss {med:.6g}.")


def _variational_parameters(approx, model):
    """Means and sds of the variational Gaussian, in unconstrained space, for the fit group."""
    dims = {model.rvs_to_values[rv].name: model.named_vars_to_dims.get(rv.name, ())
            for rv in model.free_RVs}
    out = {}
    for kind, ds in (("mean", approx.mean_data), ("sd", approx.std_data)):
        for name, da in ds.data_vars.items():
            # "alpha_log__" -> "log_alpha", "w_scaled_asinh__" -> "scaled_asinh_w"
            var, _, transform = name.removesuffix("__").partition("_")
            label = f"{transform}_{var}" if name.endswith("__") else name
            out[f"q_{kind}_{label}"] = (tuple(dims.get(name, da.dims)),
                                        np.asarray(da.values, dtype=float))
    return out


def fit_advi(
    Phi,
    y,
    *,
    basis=None,
    likelihood="gaussian",
    priors=None,
    parameterization=None,
    alpha=None,
    beta=None,
    method="advi",
    n_iter=50_000,
    draws=1000,
    learning_rate=ADVI_LEARNING_RATE,
    window=ADVI_WINDOW,
    tol=ADVI_TOL,
    patience=2,
    compile_mode=COMPILE_MODE,
    blas_threads=1,
    random_state=None,
    progressbar=False,
    fit_kwargs=None,
):
    """Fit the RVM by automatic differentiation variational inference.

    Parameters
    ----------
    Phi : ndarray of shape (N, M)
        Design matrix.
    y : ndarray of shape (N,)
        Targets (standardised for regression) or 0/1 labels.
    basis : list of str, optional
        Basis labels.
    likelihood : {"gaussian", "bernoulli"}
    priors : dict, optional
        Gamma hyperpriors ``a, b, c, d``, defaults as for :func:`fit_nuts`.
    parameterization : {"marginal", "centered", "noncentered"}, optional
        Default ``"marginal"``; ``"centered"`` for a classifier with
        ``alpha`` fixed. For regression the centred and non-centred
        mean-field fits overestimate the noise (by about 20% and 50-85% on
        noisy sinc, N = 100).
    alpha, beta : array-like or float, optional
        Hold ``alpha`` or ``beta`` fixed.
    method : {"advi", "fullrank_advi"}
        Mean-field or full-rank Gaussian in the unconstrained space.
    n_iter : int
        Iteration cap.
    draws : int
        Draws from the fitted approximation (one chain).
    learning_rate : float
        Adam step size.
    window, tol, patience : int, float, int
        Stop when the median loss over ``window`` iterations has changed by
        less than ``tol * N`` nats (``tol`` per observation) ``patience``
        windows in a row.
    compile_mode : str
        PyTensor mode (``"NUMBA"``, or ``"FAST_RUN"`` for the C backend).
    blas_threads : int or None
        BLAS threads while fitting; None leaves them alone.
    random_state : int, Generator or None
    progressbar : bool
    fit_kwargs : dict, optional
        Extra keyword arguments for :func:`pymc.fit`; they win.

    Returns
    -------
    arviz.InferenceData
        ``posterior`` (one chain of ``draws``), ``observed_data`` and ``fit``
        with ``elbo`` (dim ``iteration``; ``-loss`` of each iteration, a
        one-sample Monte Carlo estimate), ``mean``, ``cov`` and ``gamma`` of
        the weights as in :func:`fit_nuts`, and the variational means and
        sds in unconstrained space (``q_mean_log_alpha``, ``q_sd_log_alpha``,
        ``q_mean_scaled_asinh_w`` for the marginal classifier,
        ...). ``attrs`` hold ``n_iter``, ``converged``, ``final_elbo`` (minus
        the median loss of the last window) and ``wall_time_s``.

    Warns
    -----
    sklearn.exceptions.ConvergenceWarning
        When ``n_iter`` iterations pass without convergence.
    """
    import pymc as pm
    import pytensor

    if method not in ADVI_METHODS:
        raise ValueError(f"Unknown method {method!r}; expected one of {list(ADVI_METHODS)}.")
    Phi, y, basis, parameterization, model = _prepare(
        Phi, y, basis, likelihood, priors, parameterization, alpha, beta
    )
    N = Phi.shape[0]
    rng, seed = _seeds(random_state)
    stop = _MedianLossConvergence(window, tol * N, patience)
    kwargs = dict(
        n=n_iter, method=method, random_seed=seed, progressbar=progressbar,
        obj_optimizer=pm.adam(learning_rate=learning_rate), callbacks=[stop],
    )
    kwargs.update(fit_kwargs or {})

    t0 = time.perf_counter()
    with _blas_limit(blas_threads), pytensor.config.change_flags(mode=compile_mode), model:
        try:
            approx = pm.fit(**kwargs)
        except FloatingPointError as err:
            raise FloatingPointError(
                f"ADVI diverged (NaN loss) in the {parameterization!r} form; try a smaller "
                "learning_rate or another parameterization."
            ) from err
        trace = approx.sample(draws, random_seed=int(rng.integers(2**31 - 1)))
    wall = time.perf_counter() - t0
    loss = np.asarray(approx.hist, dtype=float)
    if not stop.converged:
        warnings.warn(
            f"ADVI did not converge in {len(loss)} iterations (median loss over {window} "
            f"iterations still moving by more than {tol} per observation); increase n_iter.",
            ConvergenceWarning,
            stacklevel=2,
        )

    with _blas_limit(blas_threads):
        w, alpha_d, beta_d, moments = _weights(
            Phi, y, trace.posterior, parameterization=parameterization, likelihood=likelihood,
            priors=priors, alpha=alpha, beta=beta, rng=rng,
        )
    last = loss[-min(window, len(loss)):]
    fit = {"elbo": (("iteration",), -loss), **moments, **_variational_parameters(approx, model)}
    attrs = {
        "likelihood": likelihood,
        "parameterization": parameterization,
        "advi_method": method,
        "compile_mode": compile_mode,
        "priors": json.dumps(model_priors(priors, likelihood)),
        "n_iter": int(len(loss)),
        "converged": int(stop.converged),
        "final_elbo": -float(np.median(last[np.isfinite(last)])) if np.isfinite(last).any()
        else np.nan,
        "learning_rate": float(learning_rate),
        "tol": float(tol),
        "window": int(window),
        "wall_time_s": wall,
    }
    return make_idata(method="advi", basis=basis, w=w, alpha=alpha_d, beta=beta_d, y=y,
                      fit=fit, attrs=attrs)
