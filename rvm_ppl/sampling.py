"""NUTS and ADVI on the PyMC model of :func:`rvm_ppl.model.build_model`.

Both public functions take a PyMC model of :func:`rvm_ppl.model.build_model`
(or one a user changed, as long as it names its variables the same way:
see :func:`rvm_ppl.model.model_spec`) and return the package's one
InferenceData layout (:func:`rvm_ppl._idata.to_idata`). The estimators call
:func:`nuts_result` and :func:`advi_result`, which return the
:class:`~rvm_ppl.inference.FitResult` instead.

Parameterisation
----------------
Regression defaults to the ``"marginal"`` form: ``w`` integrated out
(Tipping 2001, eq. 15), ``(alpha, beta)`` sampled or fitted together with a
standard normal ``w_std``, and ``w = mu + L^{-T} w_std`` an exact draw from
its Gaussian conditional ``N(mu, Sigma)`` (eqs. 12-13) at every draw. Classification defaults to its
own ``"marginal"`` form: ``alpha`` integrated out (Student-t weights,
Tipping 2001, eq. 32, sampled on an asinh scale), and ``alpha`` drawn
afterwards from ``Gamma(a + 1/2, b + w^2 / 2)`` for every draw of ``w``;
with the classifier's hyperprior :data:`rvm_ppl.model.BERNOULLI_PRIORS`
(see :mod:`rvm_ppl.model` for why the classifier needs a proper one). On
Ripley's data (100 points, RBF gamma = 4; ``benchmarks/bench_classification.py
--part nuts``) NUTS gave 0 divergences on 10 of 10 subsets, r-hat <= 1.003
for every ``log alpha`` and <= 1.005 for every weight (4 chains; PyMC's
sampler: 1.004 and 1.008, and with 2 chains one weight's r-hat of 202
exceeded 1.01 in 2 of the 10 runs, at bulk ESS above 1100). Mean-field ADVI reached a higher ELBO in the marginal form
than with centred or non-centred weights on each of 3 subsets (-72.9
against -78.3 and -76.1 on the first).

The categorical (softmax) likelihood of ``build_model(likelihood="categorical")``
has the same marginal form (:mod:`rvm_ppl._model_multinomial`); ``alpha``
is drawn afterwards per class (or per basis, when shared) and the fitters
return one result per class. On a 3-class mixture of 60 points (61 bases
x 3 classes, ``benchmarks/bench_multiclass.py --part nuts``) NUTS with these
defaults gave 0 divergences and max r-hat 1.007 (per-class and shared
``alpha``).

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
* **nutpie** (``nuts_sampler="nutpie"``; PyMC's own NUTS is
  ``nuts_sampler="pymc"``). Both run the same model and gradient; nutpie's
  adaptation needs fewer leapfrog steps while it tunes. On Boston (481
  points, M = 482, RBF gamma = 0.01, 4 chains x (1000 + 1000), one BLAS
  thread) PyMC's fit took 1075 s, about 70 steps per tuning iteration
  against 31 per draw, and nutpie's 826 s, 31 steps in both phases, 0
  divergences each. On noisy sinc, seeds 0-9, 4 chains, softplus scale:
  0 divergences in 20 of 20 runs (N = 50 and 100), max r-hat <= 1.005,
  min bulk ESS of ``log alpha`` per second of sampling 450-579 at
  N = 100 against PyMC's 189-284. Its price is compilation: it builds a
  Numba callback for every model, 5-8 s even when PyTensor's cache is
  warm (15 s for the first model in a process while ``w`` was in its
  trace, 7.8 s without: :func:`_trace_var_names`), so at N <= 100 its
  wall time is about PyMC's. Many small fits in one process (the
  simulation-based calibration of :func:`rvm_ppl.calibration.sbc`) are
  faster with ``"pymc"``.
* **nutpie's mass matrix from the draws alone**
  (:data:`NUTPIE_KWARGS`: ``use_grad_based_mass_matrix=False``). Its
  default also uses the gradients' variances, and the ``alpha_m`` on the
  prior's plateau have almost none: on noisy sinc at N = 1000 it took
  415 leapfrog steps per draw against PyMC's 63 (300 + 300 draws; 1000 +
  1000 sampled in 407 s against PyMC's 240 s). From the draws' variances
  alone: 66 steps, 53 s of sampling against PyMC's 59 s; on Boston 826 s
  against 887 s, min bulk ESS of ``log alpha`` 383 against 245.
* **target_accept = 0.8**, PyMC's and nutpie's default: max r-hat <= 1.009
  in every run. PyMC's NUTS takes 31-34 leapfrog steps per draw whatever
  target_accept (0.7-0.9) or hyperprior (1e-6 to 1e-2). On PyMC's log
  scale of the precisions nutpie had 1-3 divergences in 2 of 10 runs at
  0.8 and 1 of 10 at 0.9: ``log alpha`` stepping past ``log(1/b)`` ~ 14,
  where the Gamma(1e-6, 1e-6) density falls as ``exp(-b alpha)``; the
  softplus scale (:func:`softplus_precisions`) removed them.
* **PyTensor's NUMBA backend** (``compile_mode="NUMBA"``). PyTensor from pip
  links no BLAS, and the OpenBLAS builds that numpy and scipy ship export only
  ``scipy_``-prefixed symbols, so pointing ``blas__ldflags`` at them fails
  ("undefined symbol: dgemm_"). NUMBA calls LAPACK through scipy and needs no
  C compiler: 0.14 ms per logp + gradient against 0.18 ms for the C backend
  (N = 100; 0.04 ms at N = 50), NUTS sampling 14 s against 18.5 s.
* **First fits.** PyTensor caches compiled functions on disk
  (``pytensor.config.base_compiledir``, ``~/.pytensor`` unless
  ``PYTENSOR_FLAGS=base_compiledir=...`` says otherwise), and a data set of
  another size reuses them (ADVI at N = 300 after N = 100: no recompilation),
  so only the first fit on a machine compiles. Measured with an empty
  cache and then a warm one, each in a fresh process, noisy sinc N = 100,
  package defaults: the Numba compilation happens at the first call of the
  logp and gradient (about 30 s for NUTS), not when PyMC builds the
  function. NUTS: 72.5 s cold against 43.2-45.4 s warm while PyMC also
  compiled the marginal model's ``w`` to store it with every draw; it is
  now left out of the trace and drawn from the factor :func:`_result`
  computes anyway (:func:`_trace_var_names`): 64.1 s against 41.7-42.1 s
  (later, on the same machine: 82.0-87.7 s against 53.5 s; the demo from a
  fresh environment: 68.6 s against 48.6 s), 1.4-1.6 times a warm fit.
  ADVI compiles a larger graph (the ELBO's gradient and Adam's updates):
  56.5 s cold against 6.7-7.5 s warm with NUMBA (C backend: 38.5 s / 5.6 s),
  16.3 s against 12.9-13.3 s with PyTensor's Python VM
  (``"FAST_COMPILE"``), whose per-iteration overhead no longer matters at
  N = 300 (34.7 s against NUMBA's 35.4 s).
  The classifiers' graphs run slower there (100 of Ripley's points: 21 s
  against 6 s warm; the softmax model on 60 points: 50 s against 6 s), so
  ADVI runs on the Python VM for the Gaussian likelihood only
  (:data:`ADVI_COMPILE_MODE`; the classifier with NUMBA: 36.5 s cold).
* **One BLAS thread** (``blas_threads=1``) around sampling and the draws of
  ``w`` that follow: with default threads the same run took 180-260 s
  instead of 15 s (nutpie: 34 s instead of 11 s). PyMC's chain processes are
  forked and inherit the limit (PyMC applies ``blas_cores`` only to spawned
  workers); nutpie's chains are threads of this process. Without the limit
  on the draws of ``w``, idle OpenBLAS threads spinning after them doubled
  the CPU time of a run.
* **cores = min(chains, CPUs)**: PyMC's own default assumes half the CPUs are
  hyper-threads and ran the two chains in sequence here (27 s instead of 14 s).
  :func:`pymc.sample` does not pass ``cores`` on to nutpie, so it goes in
  nutpie's own keyword arguments.

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
import functools
import importlib.util
import json
import logging
import os
import time
import warnings

import numpy as np
from scipy import special
from sklearn.exceptions import ConvergenceWarning

from ._idata import multinomial_idata, to_idata
from ._linalg import blas_limit, cho_covariance, cho_solve, cholesky_jittered, solve_lower_t
from ._marginal import lowrank_conditional_moments, lowrank_latent
from .inference import FitResult, gamma_relevance
from .model import alpha_given_weights, model_spec

NUTS_SAMPLERS = ("nutpie", "pymc", "numpyro", "blackjax")
NUTS_SAMPLER = "nutpie"
# Mass matrix from the draws' variances only (see "Defaults and why").
NUTPIE_KWARGS = {"use_grad_based_mass_matrix": False}
ADVI_METHODS = ("advi", "fullrank_advi")
COMPILE_MODE = "NUMBA"
ADVI_COMPILE_MODE = {"gaussian": "FAST_COMPILE"}  # by likelihood; COMPILE_MODE otherwise
TARGET_ACCEPT = 0.8
RHAT_MAX = 1.01
ESS_MIN_PER_CHAIN = 100
ADVI_WINDOW = 1000
ADVI_TOL = 1e-2
ADVI_LEARNING_RATE = 1e-2
ADVI_MAX_ITER = 50_000
DRAWS, TUNE, CHAINS = 1000, 1000, 4
# Draws (evenly thinned) at which E[gamma] of the categorical likelihood is
# averaged: each costs a K M x K M factorisation.
GAMMA_DRAWS = 200

# What a missing sampler needs (pm.sample's nuts_sampler -> modules).
_SAMPLER_MODULES = {
    "pymc": (),
    "nutpie": ("nutpie",),
    "numpyro": ("numpyro", "jax"),
    "blackjax": ("blackjax", "jax"),
}


_log = logging.getLogger("rvm_ppl")


class _QuietStop(logging.Filter):
    """Drop PyMC's messages about an ADVI run that this module's callback stopped.

    PyMC reports a ``StopIteration`` from a callback as "Interrupted at 3,999
    [7%]", which reads like a failure; :func:`advi_result` logs its own
    "ADVI converged" line instead.
    """

    def filter(self, record):
        message = record.getMessage()
        return not (message.startswith("Interrupted at") or message.startswith("ADVI converged"))


class SamplingWarning(UserWarning):
    """NUTS diagnostics (divergences, r-hat, ESS) suggest an unreliable posterior."""


def _check_model(model):
    """The model's spec, after checking that there is something to fit."""
    spec = model_spec(model)
    if not model.free_RVs:
        raise ValueError("Nothing to fit: the model has no free variables.")
    if spec.parameterization == "marginal" and spec.likelihood == "gaussian" and \
            spec.alpha is not None and spec.beta is not None:
        raise ValueError(
            "Nothing to fit: alpha and beta are both fixed in the marginal form; "
            "use rvm_ppl.evidence.posterior_given for the exact posterior of w."
        )
    return spec


def softplus_precisions(model):
    """``model`` with its Gamma precisions sampled on the softplus scale.

    Every free ``alpha`` and ``beta`` with a ``Gamma(a, b)`` prior of
    constant rate and PyMC's default log transform is sampled as
    ``alpha = softplus(v) / b`` instead. The posterior is the same; only
    the sampler's coordinates change. On PyMC's scale ``u = log alpha`` the
    Gamma density ``exp(a u - b e^u)`` is flat below ``1/b`` and a wall
    above, whose curvature grows e-fold per unit of ``u``; the ``alpha`` of
    a pruned basis function follows that prior, and NUTS then takes the
    step size the wall allows. On ``v`` the flat part is the same
    (``v = log(b alpha)`` for ``alpha << 1/b``) and the wall becomes a tail
    ``e^(-v)`` of curvature below 1. On noisy sinc (N = 100, seeds 0-9,
    4 chains) this halved the leapfrog steps per draw (31 to 15) and raised
    the smallest bulk ESS of ``log alpha`` per second of sampling from 77-91
    to 113-160 (``benchmarks/bench_bayes.py --part nuts``).

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

    from .model import _softplus_rate_class

    transforms = {}
    for name in ("alpha", "beta"):
        rv = model.named_vars.get(name)
        if rv is None or rv not in model.free_RVs:
            continue
        rate = _constant_gamma_rate(rv)
        if rate is not None and type(model.rvs_to_transforms.get(rv)) is LogTransform:
            transforms[name] = _softplus_rate_class()(rate)
    return change_value_transforms(model, transforms) if transforms else model


def _constant_gamma_rate(rv):
    """The rate of a Gamma random variable, if it is a constant (else None)."""
    from pytensor.graph.basic import Constant

    try:
        from pytensor.graph.traversal import graph_inputs
    except ImportError:  # pytensor < 2.32
        from pytensor.graph.basic import graph_inputs
    from pytensor.tensor.random.basic import GammaRV

    if not isinstance(rv.owner.op, GammaRV):
        return None
    scale = rv.owner.inputs[-1]  # PyTensor's Gamma takes (shape, scale)
    if not all(isinstance(v, Constant) for v in graph_inputs([scale])):
        return None
    rate = 1.0 / np.asarray(scale.eval(), dtype=float)  # broadcasts against rv
    return float(rate.flat[0]) if np.all(rate == rate.flat[0]) else rate


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


@functools.cache
def _pytensor_blas():
    """Whether PyTensor's C backend links a BLAS, found once and without its warning.

    PyTensor from pip links none and warns that "operations that might benefit
    from BLAS will be severely degraded" the first time a graph rewrite asks.
    The package compiles its models for NUTS with the NUMBA backend
    (:data:`COMPILE_MODE`) and runs ADVI on the Python VM
    (:data:`ADVI_COMPILE_MODE`); both call BLAS through numpy and scipy, so the
    warning does not concern its fits; it
    is logged at INFO on the ``rvm_ppl`` logger instead. A C-mode function of
    the user's own is still slow without a BLAS.
    """
    import pytensor

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="PyTensor could not link to a BLAS")
        flags = pytensor.config.blas__ldflags
    if not flags:
        _log.info("PyTensor links no BLAS (a pip install); rvm_ppl compiles its models with the "
                  "NUMBA backend, which uses scipy's BLAS. C-mode functions of your own are slow "
                  "without one.")
    return bool(flags)


@contextlib.contextmanager
def _quiet_compilation():
    """Silence what the compilers say about performance, not about correctness.

    numba notes that a matrix-vector product meets a transposed, hence
    non-contiguous, M x M array: harmless at these sizes.
    """
    _pytensor_blas()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r".*np\.dot\(\) is faster on contiguous")
        yield


def _data(model, name):
    return np.asarray(model[name].get_value(), dtype=float)


def _conditional_moments(PtP, Pty, alpha, beta, z=None):
    """Rao-Blackwellised moments of ``w`` and ``E[gamma_m]`` over draws of ``(alpha, beta)``.

    For every draw: ``Sigma = (beta Phi^T Phi + A)^{-1}`` (Tipping 2001,
    eq. 12), ``mu = beta Sigma Phi^T t`` (eq. 13). Returns ``E[mu]``,
    ``E[Sigma] + Cov[mu]``, ``E[1 - alpha_m Sigma_mm]`` (eq. 17) and, given
    standard normal ``z`` of the draws' shape, the exact draws
    ``w = mu + L^{-T} z`` of ``w | alpha, beta, t`` (else None): the
    marginal model's ``w`` (:func:`rvm_ppl.model._conditional_weights`),
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


def _sample_moments(Phi, w, alpha, beta, likelihood):
    """Sample moments of ``w`` draws, and ``E[gamma_m]`` with ``Sigma`` at each draw.

    Regression: ``Sigma`` is the exact conditional covariance given
    ``(alpha, beta)`` (Tipping 2001, eq. 12). Classification: ``Sigma`` is
    ``(Phi^T B Phi + A)^{-1}`` with ``B`` the logistic curvature at the
    draw's ``w`` (eqs. 25-26 evaluated at the draw instead of the mode).
    Another likelihood has no such ``Sigma``: ``gamma`` is NaN.
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
    from .evidence_multinomial import _neg_hessian

    K, M = W.shape[-2:]
    flat_W, flat_a = W.reshape(-1, K, M), alpha.reshape(-1, K, M)
    cols = np.tile(Phi, (1, K))  # column k M + m: basis m in the latent value of class k
    cls = np.repeat(np.arange(K), M)
    picks = np.unique(np.linspace(0, len(flat_W) - 1, min(len(flat_W), GAMMA_DRAWS)).astype(int))
    gamma_sum = np.zeros(K * M)
    for i in picks:
        Y = special.softmax(Phi @ flat_W[i].T, axis=1)  # Tipping (2001) eq. (28)
        a = flat_a[i].ravel()
        L = cholesky_jittered(_neg_hessian(cols, cls, Y, a),
                              what="posterior precision of the weights")
        gamma_sum += 1.0 - a * np.diag(cho_covariance(L))
    return (gamma_sum / len(picks)).reshape(K, M)


def _categorical_results(method, model, spec, post, rng, *, stats, fit, sample_stats):
    """One :class:`FitResult` per class from draws of the softmax RVM's ``w`` (class, basis).

    ``alpha`` was integrated out and is drawn here, exactly, from its
    conditional given each draw of ``w``
    (:func:`rvm_ppl._model_multinomial.alpha_given_weights_multinomial`; shared
    ``alpha`` is repeated for every class). Draw ``i`` of every class is the
    same posterior draw, so stacking the classes' ``w`` gives the joint draws.
    """
    from ._model_multinomial import alpha_given_weights_multinomial

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

    In the marginal classifier ``alpha`` was integrated out and is drawn here,
    exactly, from ``Gamma(a + 1/2, b + w^2 / 2)`` for every draw of ``w``.
    The categorical likelihood gives a list of one result per class
    (:func:`_categorical_results`).
    """
    if spec.likelihood == "categorical":
        return _categorical_results(method, model, spec, post, rng, stats=stats, fit=fit,
                                    sample_stats=sample_stats)
    Phi = _data(model, "Phi")
    # The marginal regression's w may be left out of the trace (_trace_var_names)
    # and drawn here from w_std.
    w_var = post["w"] if "w" in post else post["w_std"]
    basis = [str(b) for b in w_var["basis"].values] if "basis" in w_var.coords else \
        [f"phi_{m}" for m in range(Phi.shape[1])]
    w = np.asarray(post["w"].values, dtype=float) if "w" in post else None
    n_chain, n_draw, M = w_var.shape
    if "alpha" in post:
        alpha_d = np.asarray(post["alpha"].values, dtype=float)
    elif spec.parameterization == "marginal" and spec.likelihood == "bernoulli":
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
            # From w_std also where w was traced (ADVI): the same w up to rounding, and the
            # draws of g = V w computed stably beside them.
            V = _data(model, "lowrank_V")
            mean, cov, gamma, w, (g_mean, g_cov, g) = lowrank_conditional_moments(
                V, _data(model, "lowrank_s"), alpha_d, beta_d,
                np.asarray(post["w_std"].values, dtype=float))
            latent = {"V_pinv": lowrank_latent(V), "mean": g_mean, "cov": g_cov, "draws": g}
        else:
            z = None if w is not None else np.asarray(post["w_std"].values, dtype=float)
            mean, cov, gamma, w_z = _conditional_moments(
                _data(model, "PhiT_Phi"), _data(model, "PhiT_y"), alpha_d, beta_d, z)
            w = w if w is not None else w_z
    else:
        mean, cov, gamma = _sample_moments(Phi, w, alpha_d, beta_d, spec.likelihood)
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
               "priors": json.dumps(spec.priors), **stats},
        fit=fit or {},
        draws=draws,
        sample_stats=sample_stats,
        latent=latent,
    )


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


def _trace_var_names(model, spec):
    """What PyMC's trace stores: without the marginal regression's ``w``, else None (all).

    ``w`` is a deterministic function of ``(alpha, beta, w_std)``; storing it
    makes PyMC compile one more function (a Cholesky factor and two
    triangular solves: 13 s of Numba compilation in a fresh install, on a
    busy machine). :func:`_result` draws it from the factor it computes anyway.
    """
    if spec.likelihood != "gaussian" or not {"w_std", "PhiT_Phi"} <= set(model.named_vars):
        return None
    return [rv.name for rv in model.free_RVs] + \
        [d.name for d in model.deterministics if d.name != "w"]


def nuts_result(
    model,
    *,
    draws,
    tune,
    chains,
    random_state,
    cores=None,
    target_accept=TARGET_ACCEPT,
    nuts_sampler=NUTS_SAMPLER,
    compile_mode=COMPILE_MODE,
    blas_threads=1,
    progressbar=False,
    **pm_kwargs,
):
    """NUTS on ``model``, as a :class:`~rvm_ppl.inference.FitResult`; see :func:`fit_nuts`.

    A categorical model gives a list of one result per class instead.
    """
    import pymc as pm

    spec = _check_model(model)
    _check_sampler(nuts_sampler)
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
    elif nuts_sampler == "nutpie":  # pm.sample does not pass cores on to nutpie
        kwargs["nuts_sampler_kwargs"] = {"cores": cores, **NUTPIE_KWARGS}
    var_names = _trace_var_names(model, spec)
    if var_names is not None and nuts_sampler in ("pymc", "nutpie"):
        kwargs["var_names"] = var_names
    if "nuts_sampler_kwargs" in pm_kwargs:
        pm_kwargs = {**pm_kwargs, "nuts_sampler_kwargs": {
            **kwargs.get("nuts_sampler_kwargs", {}), **(pm_kwargs["nuts_sampler_kwargs"] or {})}}
    kwargs.update(pm_kwargs)

    t0 = time.perf_counter()
    with blas_limit(blas_threads), softplus_precisions(model), _quiet_compilation():
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
        "wall_time_s": wall,
        "sampling_time_s": sampling_time,
        "ess_per_s": diag[ess_key] / sampling_time if sampling_time > 0 else np.nan,
        **diag,
    }
    _warn_diagnostics(diag, post.sizes["chain"])
    return _replace(result, stats=stats)


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
    if "w" in [v.name for v in model.free_RVs] or not checked:
        checked["w"] = result.draws["w"]
    return checked, result.basis


def _replace(result, **changes):
    """``dataclasses.replace`` on a result, or on each of a list of per-class results."""
    from dataclasses import replace

    if isinstance(result, list):  # each class keeps its own label among the stats
        return [replace(r, **{k: {**v, "class": r.stats["class"]} if k == "stats" else v
                              for k, v in changes.items()}) for r in result]
    return replace(result, **changes)


def _model_idata(model, result, random_state):
    """The package's InferenceData of a fit of ``model``."""
    y = model["y_obs"].get_value()
    Phi = _data(model, "Phi")
    if Phi.shape[0] != y.shape[0]:
        raise ValueError(
            f"The model's Phi has {Phi.shape[0]} rows and its y_obs {y.shape[0]}: restore the "
            "training data (pm.set_data) before fitting."
        )
    if isinstance(result, list):  # categorical: one result per class, all on every basis
        classes = json.loads(result[0].stats["classes"])
        return multinomial_idata(result, y=y, Phi=Phi, classes=classes,
                                 random_state=random_state)
    return to_idata(result, y=y, Phi=Phi[:, result.support], random_state=random_state)


def fit_nuts(model, *, draws=DRAWS, tune=TUNE, chains=CHAINS, random_state=None, **kwargs):
    """Sample the RVM posterior with NUTS.

    Parameters
    ----------
    model : pymc.Model
        A model of :func:`rvm_ppl.model.build_model`, possibly changed (another
        hyperprior, another likelihood in the centred form), that keeps the
        names ``w`` (dims ``basis``), ``alpha``, ``beta``, ``y``, ``Phi`` and
        ``y_obs``.
    draws, tune, chains : int
        Four chains by default, as r-hat <= 1.01 presumes (Vehtari et al.
        2021).
    random_state : int, Generator or None
        Seeds PyMC and every numpy draw.
    cores : int, optional
        Chains run in parallel (processes for PyMC, threads for nutpie);
        default ``min(chains, available CPUs)``.
    target_accept : float
    nuts_sampler : {"nutpie", "pymc", "numpyro", "blackjax"}
        Passed to :func:`pymc.sample`. nutpie by default (see the module's
        "Defaults and why"); the last two need their packages.
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
        The package's layout (:mod:`rvm_ppl._idata`), with ``sample_stats``.
        ``fit`` holds ``mean`` and ``cov`` of ``w`` (Rao-Blackwellised in the
        marginal regression) and ``relevance`` ``gamma``, the posterior mean
        of ``1 - alpha_m Sigma_mm``. ``attrs`` hold the diagnostics
        (``n_divergences``, ``max_rhat``, ``min_ess_bulk``,
        ``min_ess_bulk_log_alpha``, ``max_rhat_log_alpha``, ...),
        ``wall_time_s`` (compilation and sampling), ``sampling_time_s`` and
        ``ess_per_s`` (min bulk ESS of ``log alpha`` per second of sampling).
        A ``"categorical"`` model gives the multinomial layout
        (:func:`rvm_ppl._idata.multinomial_idata`: a ``class`` dimension
        before ``basis``), its diagnostics over ``log alpha`` and ``w`` of
        every class and basis.

    Warns
    -----
    SamplingWarning
        When the diagnostics fail the thresholds of this module.
    """
    result = nuts_result(model, draws=draws, tune=tune, chains=chains,
                         random_state=random_state, **kwargs)
    return _model_idata(model, result, random_state)


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


class _AdviProgress:
    """PyMC callback: a progress bar for ADVI that ends full when the run stops.

    ``pm.fit``'s own bar counts towards the iteration cap and stays where
    the convergence test stopped it ("14%"). This one shows the iterations
    run, the median loss of the last ``window`` and the time; when the fit
    ends, early or not, its total becomes the iterations run (100 %).
    """

    def __init__(self, enabled, n_iter, window):
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                                   TimeElapsedColumn)

        self.window = window
        self.progress = Progress(
            TextColumn("ADVI"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[loss]}"),
            TimeElapsedColumn(), disable=not enabled,
        )
        self.task = self.progress.add_task("ADVI", total=n_iter, loss="")

    def __enter__(self):
        self.progress.start()
        return self

    def __call__(self, approx, losses, i):
        if i % 100 == 0:
            last = np.asarray(losses[-self.window:], dtype=float)
            loss = (f"median loss {np.median(last[np.isfinite(last)]):,.5g}"
                    if np.isfinite(last).any() else "")
            self.progress.update(self.task, completed=i, loss=loss)

    def finish(self, n_done, converged):
        self.progress.update(self.task, total=n_done, completed=n_done,
                             loss="converged" if converged else "stopped at the iteration cap")

    def __exit__(self, *exc):
        self.progress.stop()


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
            vdims = tuple("candidate" if d == "basis" else d for d in dims.get(name, da.dims))
            out[f"q_{kind}_{label}"] = (vdims, np.asarray(da.values, dtype=float))
    return out


def advi_result(
    model,
    *,
    n_iter,
    tol,
    draws,
    random_state,
    method="advi",
    learning_rate=ADVI_LEARNING_RATE,
    window=ADVI_WINDOW,
    patience=2,
    compile_mode=None,
    blas_threads=1,
    progressbar=False,
    **fit_kwargs,
):
    """ADVI on ``model``, as a :class:`~rvm_ppl.inference.FitResult`; see :func:`fit_advi`.

    A categorical model gives a list of one result per class instead.
    """
    import pymc as pm
    import pytensor

    if method not in ADVI_METHODS:
        raise ValueError(f"Unknown method {method!r}; expected one of {list(ADVI_METHODS)}.")
    spec = _check_model(model)
    if compile_mode is None:
        compile_mode = ADVI_COMPILE_MODE.get(spec.likelihood, COMPILE_MODE)
    N = _data(model, "Phi").shape[0]
    rng, seed = _seeds(random_state)
    stop = _MedianLossConvergence(window, tol * N, patience)
    bar = _AdviProgress(progressbar, n_iter, window)
    kwargs = dict(
        n=n_iter, method=method, random_seed=seed, progressbar=False,
        obj_optimizer=pm.adam(learning_rate=learning_rate), callbacks=[bar, stop],
    )
    kwargs.update(fit_kwargs)

    t0 = time.perf_counter()
    pymc_log = logging.getLogger("pymc.variational.inference")
    quiet = _QuietStop()
    pymc_log.addFilter(quiet)
    with contextlib.ExitStack() as stack:
        stack.callback(pymc_log.removeFilter, quiet)
        stack.enter_context(blas_limit(blas_threads))
        stack.enter_context(pytensor.config.change_flags(mode=compile_mode))
        stack.enter_context(model)
        stack.enter_context(_quiet_compilation())
        stack.enter_context(bar)
        try:
            approx = pm.fit(**kwargs)
            bar.finish(len(approx.hist), stop.converged)
        except FloatingPointError as err:
            raise FloatingPointError(
                f"ADVI diverged (NaN loss) in the {spec.parameterization!r} form; try a smaller "
                "learning_rate or another parameterization."
            ) from err
        trace = approx.sample(draws, random_seed=int(rng.integers(2**31 - 1)))
    wall = time.perf_counter() - t0
    loss = np.asarray(approx.hist, dtype=float)
    if stop.converged:
        _log.info("ADVI converged at iteration %d (median loss over %d iterations settled) "
                  "in %.1f s.", len(loss), window, wall)
    if not stop.converged:
        warnings.warn(
            f"ADVI did not converge in {len(loss)} iterations (median loss over {window} "
            f"iterations still moving by more than {tol} per observation); increase max_iter.",
            ConvergenceWarning,
            stacklevel=2,
        )
    last = loss[-min(window, len(loss)):]
    stats = {
        "advi_method": method,
        "compile_mode": compile_mode,
        "n_iter": int(len(loss)),
        "converged": int(stop.converged),
        "elbo": -float(np.median(last[np.isfinite(last)])) if np.isfinite(last).any() else np.nan,
        "learning_rate": float(learning_rate),
        "tol": float(tol),
        "window": int(window),
        "wall_time_s": wall,
    }
    fit = {"elbo": (("iteration",), -loss), **_variational_parameters(approx, model)}
    with blas_limit(blas_threads):
        return _result("advi", model, spec, trace.posterior, rng, stats=stats, fit=fit)


def fit_advi(model, *, draws=DRAWS, n_iter=ADVI_MAX_ITER, tol=ADVI_TOL, random_state=None,
             **kwargs):
    """Fit the RVM by automatic differentiation variational inference.

    Parameters
    ----------
    model : pymc.Model
        As for :func:`fit_nuts`.
    draws : int
        Draws from the fitted approximation (one chain).
    n_iter : int
        Iteration cap.
    tol : float
        Stop when the median loss over ``window`` iterations has changed by
        less than ``tol * N`` nats (``tol`` per observation) ``patience``
        windows in a row.
    random_state : int, Generator or None
    method : {"advi", "fullrank_advi"}
        Mean-field or full-rank Gaussian in the unconstrained space. For
        regression the mean-field fits of the centred and non-centred forms
        overestimate the noise (by about 20% and 50-85% on noisy sinc,
        N = 100); the marginal form does not.
    learning_rate : float
        Adam step size.
    window, patience : int
    compile_mode : str, optional
        PyTensor mode. Default: :data:`ADVI_COMPILE_MODE` for the model's
        likelihood, else :data:`COMPILE_MODE`: for regression
        ``"FAST_COMPILE"``, the Python VM (no compilation: 15 s for a first
        fit at N = 100 against 59 s with ``"NUMBA"``, which once cached is
        faster only at small N: 5.9 s against 12.1 s); ``"NUMBA"`` for the
        classifiers. ``"FAST_RUN"`` is the C backend.
    blas_threads : int or None
        BLAS threads while fitting; None leaves them alone.
    progressbar : bool
    **kwargs
        Further keyword arguments of :func:`pymc.fit`.

    Returns
    -------
    arviz.InferenceData
        The package's layout, one chain of ``draws``; ``fit`` holds ``elbo``
        (dim ``iteration``; ``-loss`` of each iteration, a one-sample Monte
        Carlo estimate), ``mean`` and ``cov`` of the weights, and the
        variational means and sds in unconstrained space
        (``q_mean_log_alpha``, ``q_sd_log_alpha``, ...). ``attrs`` hold
        ``n_iter``, ``converged``, ``elbo`` (minus the median loss of the
        last window) and ``wall_time_s``.

    Warns
    -----
    sklearn.exceptions.ConvergenceWarning
        When ``n_iter`` iterations pass without convergence.
    """
    result = advi_result(model, n_iter=n_iter, tol=tol, draws=draws,
                         random_state=random_state, **kwargs)
    return _model_idata(model, result, random_state)
