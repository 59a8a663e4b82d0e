"""Mean-field ADVI on the PyMC model: :func:`fit_advi` (InferenceData) and :func:`advi_result`.

Automatic differentiation variational inference (Kucukelbir et al. 2017) on
the model's log density in PyMC's unconstrained space, in PyMC's
parameterisation (``pm.ADVI``: a Gaussian with ``sd = softplus(rho)``,
started at the model's initial point with ``rho = 0``; ``pm.FullRankADVI``
for ``method="fullrank_advi"``) and with PyMC's Adam. The log density and
its gradient are compiled once per model structure, the data as inputs
(:mod:`rvm_ppl.pymc_fitters.compiled`), and each iteration costs one
evaluation of them and a few vector operations: the Adam loop is this
module's own because ``pm.fit`` compiles its step function in every call
and its step costs several gradients' time (the documentation's Benchmarks
page, "ADVI and NUTS as a user meets them", has both).

Adam with step :data:`ADVI_LEARNING_RATE` = 0.01 (PyMC's default optimiser,
``adagrad_window``, leaves its optimum and blows up on this model).
:func:`fit_advi` stops when the median loss (-ELBO) over the last
``window`` = :data:`ADVI_WINDOW` iterations has moved by less than ``tol`` =
:data:`ADVI_TOL` nats per observation from the window before, ``patience`` = 2
windows in a row; otherwise it stops after ``n`` iterations with a
``ConvergenceWarning``. The median ignores the rare huge losses of draws near
the hyperprior's cut-off. The runs behind these defaults are in the
documentation's Defaults and why page, section "NUTS and ADVI on the PyMC
model" (``docs/defaults.md``).
"""
from __future__ import annotations

import contextlib
import logging
import time
import types
import warnings

import numpy as np
from scipy import special
from sklearn.exceptions import ConvergenceWarning

from rvm_ppl.core.linalg import blas_limit
from rvm_ppl.pymc_fitters.compiled import compiled_functions, data_values
from rvm_ppl.pymc_fitters.results import (
    COMPILE_MODE,
    DRAWS,
    _check_model,
    _compilation,
    _data,
    _model_idata,
    _result,
    _seeds,
    _trace_var_names,
)

_log = logging.getLogger("rvm_ppl")


ADVI_METHODS = ("advi", "fullrank_advi")


ADVI_WINDOW = 1000


ADVI_TOL = 1e-2


ADVI_LEARNING_RATE = 1e-2


ADVI_MAX_ITER = 50_000


class _MedianLossConvergence:
    """PyMC callback: stop when the windowed median loss has settled.

    Every ``window`` iterations the median of the loss (-ELBO, one Monte
    Carlo sample per iteration) over the last window is compared with the
    previous window's; after ``patience`` consecutive changes smaller than
    ``tol_abs`` it raises ``StopIteration``, which ends the run.
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

    A bar that counts towards the iteration cap stays where the
    convergence test stopped it ("14%"). This one shows the iterations
    run, the median loss of the last ``window`` and the time; when the fit
    ends, early or not, its total becomes the iterations run (100 %).
    """

    def __init__(self, enabled, n_iter, window):
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

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


def _flat_layout(model, point):
    """``(value variable, name, shape, slice)`` of each free variable in the flat vector.

    ``point``: the model's initial point, which gives each variable's shape.
    """
    layout, i = [], 0
    for v in model.value_vars:
        shape = np.shape(point[v.name])
        size = int(np.prod(shape))
        layout.append((v, v.name, shape, slice(i, i + size)))
        i += size
    return layout


def _build_functions(model, logp, point, var_names, compile_mode):
    """Compile ADVI's functions of ``model``, its data as inputs (see :func:`_functions`).

    ``logp`` is ``model.logp()`` and ``point`` :func:`initial_point`.
    """
    import pytensor
    import pytensor.tensor as pt
    from pymc.pytensorf import join_nonshared_inputs
    from pytensor.graph.replace import graph_replace

    layout = _flat_layout(model, point)
    value_vars = [v for v, *_ in layout]
    grad = pt.concatenate([g.ravel() for g in pt.grad(logp, value_vars)])
    expanded = [v for v in model.unobserved_value_vars
                if var_names is None or v.name in var_names]
    outputs, x = join_nonshared_inputs(point, [logp, grad, *expanded], value_vars)
    shared = list(model.data_vars)
    data = [pt.tensor(name=v.name, dtype=v.dtype, shape=v.type.shape) for v in shared]
    outputs = graph_replace(outputs, dict(zip(shared, data, strict=True)), strict=False)
    with pytensor.config.change_flags(mode=compile_mode):
        logp_grad = pytensor.function([x, *data], outputs[:2], on_unused_input="ignore")
        expand = pytensor.function([x, *data], outputs[2:], on_unused_input="ignore")
    # Inputs are passed as arrays of the declared types (data_values, float vectors): skip
    # PyTensor's per-call conversion, which costs more than the gradient at these sizes.
    logp_grad.trust_input = expand.trust_input = True
    return types.SimpleNamespace(
        logp_grad=logp_grad, expand=expand, names=[v.name for v in expanded],
        data_names=[v.name for v in shared],
        layout=[(name, shape, sl) for _, name, shape, sl in layout],
    )


def initial_point(model):
    """``model.initial_point()``: the free variables' support points, in PyMC's unconstrained space.

    PyMC's own graph (:func:`pymc.initial_point.make_initial_point_expression`,
    its random generators replaced as PyMC replaces them) with the rewrites of
    its ``FAST_COMPILE`` mode, so the same numbers, run by PyTensor's Python
    linker: ``model.initial_point()`` builds a virtual machine for this graph,
    and the first one a process builds imports PyTensor's C tooling and
    setuptools, a good part of a new process's first ADVI fit (the
    documentation's Benchmarks page, "ADVI and NUTS as a user meets them").
    """
    import pytensor
    from pymc.initial_point import make_initial_point_expression
    from pymc.pytensorf import replace_rng_nodes
    from pytensor.compile.mode import Mode

    values = replace_rng_nodes(make_initial_point_expression(
        free_rvs=model.free_RVs, rvs_to_transforms=model.rvs_to_transforms,
        initval_strategies=dict(model.rvs_to_initial_values), return_transformed=True))
    fn = pytensor.function([], values, mode=Mode(linker="py", optimizer="fast_compile"))
    # value_vars follows free_RVs, and their names are the transformed names PyMC gives.
    return {v.name: value for v, value in zip(model.value_vars, fn(), strict=True)}


def _start(point, fns):
    """The model's initial point as one flat vector (it depends on the data: the rates)."""
    return np.concatenate([np.ravel(point[name]) for name, *_ in fns.layout]).astype(float)


def _functions(model, point, var_names, compile_mode):
    """The log density with its gradient and the expansion of ``model``, compiled once.

    ``logp_grad(x, *data)``: the model's log density with the Jacobian of its
    transforms, and its gradient, at the flat vector ``x`` of the free
    variables in PyMC's unconstrained space; ``expand(x, *data)``: the
    variables ``names`` (constrained free variables and deterministics) at
    ``x``. A model of the same structure and shapes reuses the functions
    (:func:`rvm_ppl.pymc_fitters.compiled.compiled_functions`). ``point`` is
    :func:`initial_point`, which gives the layout of ``x``.
    """
    return compiled_functions(
        model, "advi", lambda m, logp: _build_functions(m, logp, point, var_names, compile_mode),
        var_names=var_names, settings={"mode": str(compile_mode)},
    )


def compiled_log_density(model, compile_mode=COMPILE_MODE):
    """``(logp, layout)``: the model's log density at flat vectors of its free variables.

    ``logp(X)`` is the log density with the Jacobians of the transforms at
    each row of ``X``, in PyMC's unconstrained space, from the compiled
    functions of :func:`_functions` (kept for models of one structure) with
    ``model``'s data, compiled and run under the settings of every PyMC fit
    (:func:`~rvm_ppl.pymc_fitters.results._compilation`); ``layout`` lists
    ``(name, shape, slice)`` of each value variable in a row.
    """
    with _compilation():
        fns = _functions(model, initial_point(model), [], compile_mode)
    data = data_values(model, fns.data_names)

    def logp(X):
        with _compilation():  # Numba compiles at the first call
            return np.array([float(fns.logp_grad(np.ascontiguousarray(x, dtype=float), *data)[0])
                             for x in X])

    return logp, fns.layout


def _softplus(r):
    return np.logaddexp(0.0, r)


class _Gaussian:
    """The variational family: mean field (``sd = softplus(rho)``) or full rank (``L``).

    PyMC's parameterisation and starting point: ``mu`` at the model's
    initial point, ``rho = 0`` (mean field), and for full rank a lower
    triangular ``L`` with ones on its diagonal before the softplus of the
    diagonal is taken (PyMC's ``FullRank``). ``params`` is the one vector Adam
    moves: ``mu`` then ``rho`` (or the packed lower triangle of ``L``).
    """

    def __init__(self, mu, fullrank):
        d = mu.size
        self.d, self.fullrank = d, fullrank
        self.tril = np.tril_indices(d) if fullrank else None
        self.diag = (np.arange(d + 1) * (np.arange(d + 1) + 1) // 2 - 1)[1:] if fullrank else None
        second = np.eye(d)[self.tril] if fullrank else np.zeros(d)
        self.params = np.concatenate([mu, second])

    def factor(self):
        """``(mu, sd)`` (mean field) or ``(mu, L)`` (full rank), copies of the parameters."""
        mu, second = self.params[:self.d].copy(), self.params[self.d:]
        if not self.fullrank:
            return mu, _softplus(second)
        L = np.zeros((self.d, self.d))
        L[self.tril] = second
        L[np.diag_indices(self.d)] = _softplus(second[self.diag])
        return mu, L

    def draw(self, eps, factor=None):
        """``z = mu + sd * eps`` or ``mu + L eps`` for rows ``eps`` (``factor``: :meth:`factor`)."""
        mu, s = self.factor() if factor is None else factor
        return mu + (eps * s if not self.fullrank else eps @ s.T)

    def entropy(self, factor=None):
        """Entropy of q: ``d/2 log(2 pi e)`` plus ``sum log sd`` or ``sum log diag L``."""
        _, s = self.factor() if factor is None else factor
        log_det = np.sum(np.log(s if not self.fullrank else np.diag(s)))
        return float(log_det + 0.5 * self.d * (1.0 + np.log(2.0 * np.pi)))

    def loss_gradient(self, eps, grad_logp, factor=None):
        """Gradient of ``-(log p(z) + entropy)`` in ``params`` at ``z = draw(eps)``.

        The reparameterisation gradient (Kucukelbir et al. 2017, eqs. 8-9):
        ``d/dmu = -grad``; mean field ``d/drho = -(grad * eps + 1 / sd) sd'``;
        full rank ``d/dL = -(grad eps^T + diag(1 / L_ii))`` on the lower
        triangle, the diagonal through its softplus.
        """
        mu_part = -grad_logp
        second = self.params[self.d:]
        if not self.fullrank:
            sd = _softplus(second) if factor is None else factor[1]
            return np.concatenate([mu_part, -(grad_logp * eps + 1.0 / sd) * special.expit(second)])
        g = -np.outer(grad_logp, eps)[self.tril]
        diag = second[self.diag]
        g[self.diag] = (g[self.diag] - 1.0 / _softplus(diag)) * special.expit(diag)
        return np.concatenate([mu_part, g])

    def mean_sd(self):
        mu, s = self.factor()
        return mu, (s if not self.fullrank else np.sqrt(np.sum(s * s, axis=1)))


class _Adam:
    """Adam (Kingma & Ba 2015) as PyMC's ``pm.adam``: ``beta1 = 0.9``, ``beta2 = 0.999``."""

    def __init__(self, size, learning_rate, beta1=0.9, beta2=0.999, epsilon=1e-8):
        self.lr, self.b1, self.b2, self.eps = learning_rate, beta1, beta2, epsilon
        self.m, self.v, self.t = np.zeros(size), np.zeros(size), 0

    def step(self, g):
        """The change of the parameters for the gradient ``g`` of the loss."""
        self.t += 1
        a_t = self.lr * np.sqrt(1.0 - self.b2 ** self.t) / (1.0 - self.b1 ** self.t)
        self.m *= self.b1
        self.m += (1.0 - self.b1) * g
        self.v *= self.b2
        self.v += (1.0 - self.b2) * g * g
        return -a_t * self.m / (np.sqrt(self.v) + self.eps)


def _optimise(fns, data, q, *, n, learning_rate, rng, callbacks):
    """Run Adam on the one-sample estimate of -ELBO; return the losses of the iterations run.

    Each iteration draws ``eps ~ N(0, I)``, evaluates the log density and its
    gradient once at ``z = mu + sd * eps`` and moves ``params``; the loss
    recorded is ``-(log p(z) + entropy of q)``, a one-sample estimate of
    -ELBO. A callback that raises ``StopIteration`` ends the run.
    """
    adam = _Adam(q.params.size, learning_rate)
    losses = np.empty(n)
    logp_grad = fns.logp_grad
    for i in range(n):
        eps = rng.standard_normal(q.d)
        factor = q.factor()  # the draw, the entropy and the gradient share it
        logp, grad = logp_grad(q.draw(eps, factor), *data)
        if not (np.isfinite(logp) and np.isfinite(grad).all()):
            raise FloatingPointError(f"NaN or infinite log density or gradient at iteration {i + 1}")
        losses[i] = -(float(logp) + q.entropy(factor))
        q.params += adam.step(q.loss_gradient(eps, grad, factor))
        try:
            for callback in callbacks:
                callback(None, losses[:i + 1], i + 1)
        except StopIteration:
            return losses[:i + 1]
    return losses


def _posterior(fns, data, model, z):
    """The draws ``z`` (rows, flat unconstrained) as a posterior Dataset of one chain."""
    import xarray as xr

    values = [fns.expand(row, *data) for row in z]
    dims = model.named_vars_to_dims
    out = {}
    for j, name in enumerate(fns.names):
        arr = np.stack([np.asarray(v[j], dtype=float) for v in values])[None]
        out[name] = (("chain", "draw", *dims.get(name, ())) if name in dims or arr.ndim == 2
                     else ("chain", "draw", *[f"{name}_dim_{k}" for k in range(arr.ndim - 2)]), arr)
    coords = {k: list(v) for k, v in model.coords.items() if v is not None}
    used = {d for dims_, _ in out.values() for d in dims_}
    return xr.Dataset(out, coords={k: v for k, v in coords.items() if k in used})


def _variational_parameters(fns, q, model):
    """Means and sds of the variational Gaussian, in unconstrained space, for the fit group."""
    dims = {}
    for rv in model.free_RVs:
        rv_dims = model.named_vars_to_dims.get(rv.name, ())
        if getattr(model.rvs_to_transforms.get(rv), "name", None) == "rotation":
            # u = V^T w (the Poisson weights): its coordinates are axes, not basis functions
            rv_dims = tuple("axis" if d == "basis" else d for d in rv_dims)
        dims[model.rvs_to_values[rv].name] = rv_dims
    mean, sd = q.mean_sd()
    out = {}
    for name, shape, sl in fns.layout:
        # "alpha_log__" -> "log_alpha", "w_scaled_asinh__" -> "scaled_asinh_w"
        var, _, transform = name.removesuffix("__").partition("_")
        label = f"{transform}_{var}" if name.endswith("__") else name
        vdims = tuple("candidate" if d == "basis" else d for d in dims.get(name, ()))
        for kind, values in (("mean", mean), ("sd", sd)):
            out[f"q_{kind}_{label}"] = (vdims, values[sl].reshape(shape))
    return out


def advi_result(
    model,
    *,
    n,
    tol,
    draws,
    random_seed,
    method="advi",
    learning_rate=ADVI_LEARNING_RATE,
    window=ADVI_WINDOW,
    patience=2,
    compile_mode=COMPILE_MODE,
    blas_threads=1,
    progressbar=False,
):
    """ADVI on ``model``, as a :class:`~rvm_ppl.inference.methods.FitResult`; see :func:`fit_advi`.

    A categorical model gives a list of one result per class instead.
    """
    if method not in ADVI_METHODS:
        raise ValueError(f"Unknown method {method!r}; expected one of {list(ADVI_METHODS)}.")
    spec = _check_model(model)
    N = _data(model, "Phi").shape[0]
    rng, _ = _seeds(random_seed)
    stop = _MedianLossConvergence(window, tol * N, patience)
    bar = _AdviProgress(progressbar, n, window)

    t0 = time.perf_counter()
    with contextlib.ExitStack() as stack:
        stack.enter_context(blas_limit(blas_threads))
        stack.enter_context(_compilation())
        point = initial_point(model)
        fns = _functions(model, point, _trace_var_names(model, spec), compile_mode)
        data = data_values(model, fns.data_names)
        q = _Gaussian(_start(point, fns), fullrank=method == "fullrank_advi")
        with bar:
            try:
                loss = _optimise(fns, data, q, n=n, learning_rate=learning_rate, rng=rng,
                                 callbacks=[bar, stop])
            except FloatingPointError as err:
                raise FloatingPointError(
                    f"ADVI diverged ({err}) in the {spec.parameterization!r} form; try a smaller "
                    "learning_rate or another parameterization."
                ) from err
            bar.finish(len(loss), stop.converged)
        posterior = _posterior(fns, data, model, q.draw(rng.standard_normal((draws, q.d))))
    wall = time.perf_counter() - t0
    if stop.converged:
        _log.info("ADVI converged at iteration %d (median loss over %d iterations settled) "
                  "in %.1f s.", len(loss), window, wall)
    else:
        warnings.warn(
            f"ADVI did not converge in {len(loss)} iterations (median loss over {window} "
            f"iterations still moving by more than {tol} per observation); increase max_iter.",
            ConvergenceWarning,
            stacklevel=2,
        )
    last = loss[-min(window, len(loss)):]
    stats = {
        "advi_method": method,
        "compile_mode": str(compile_mode),
        "n_iter": int(len(loss)),
        "converged": int(stop.converged),
        "elbo": -float(np.median(last[np.isfinite(last)])) if np.isfinite(last).any() else np.nan,
        "learning_rate": float(learning_rate),
        "tol": float(tol),
        "window": int(window),
        "wall_time_s": wall,
    }
    fit = {"elbo": (("iteration",), -loss), **_variational_parameters(fns, q, model)}
    with blas_limit(blas_threads):
        return _result("advi", model, spec, posterior, rng, stats=stats, fit=fit)


def fit_advi(model=None, *, n=ADVI_MAX_ITER, draws=DRAWS, tol=ADVI_TOL, random_seed=None,
             **kwargs):
    """Fit the RVM by automatic differentiation variational inference.

    Called as :func:`pymc.fit` is: ``fit_advi(model, n=...)``, or
    ``fit_advi(n=...)`` inside ``with model:``.

    Parameters
    ----------
    model : pymc.Model, optional
        As for :func:`rvm_ppl.pymc_fitters.nuts.fit_nuts`; default the model
        of the ``with`` context (:func:`pymc.modelcontext`).
    n : int
        Iteration cap (PyMC's name).
    draws : int
        Draws from the fitted approximation (one chain).
    tol : float
        Stop when the median loss over ``window`` iterations has changed by
        less than ``tol * N`` nats (``tol`` per observation) ``patience``
        windows in a row.
    random_seed : int, sequence of int, numpy Generator or None
        Seeds PyMC and every numpy draw (PyMC's name; the estimators'
        ``random_state`` becomes it).
    method : {"advi", "fullrank_advi"}
        Mean-field or full-rank Gaussian in the unconstrained space. For
        regression the mean-field fits of the centred and non-centred forms
        overestimate the noise; the marginal form does not.
    learning_rate : float
        Adam step size.
    window, patience : int
    compile_mode : str
        PyTensor mode of the log density and its gradient: :data:`COMPILE_MODE`
        (``"NUMBA"``) by default; ``"FAST_RUN"`` is the C backend.
    blas_threads : int or None
        BLAS threads while fitting; None leaves them alone.
    progressbar : bool

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
        When ``n`` iterations pass without convergence.
    """
    import pymc as pm

    renamed = {"n_iter": "n", "random_state": "random_seed"}
    old = sorted(set(kwargs) & set(renamed))
    if old:
        raise TypeError(f"fit_advi takes PyMC's names: {', '.join(renamed[k] for k in old)}, "
                        f"not {', '.join(old)} (renamed before 1.0; see docs/changelog.md).")
    model = pm.modelcontext(model)
    result = advi_result(model, n=n, tol=tol, draws=draws, random_seed=random_seed, **kwargs)
    return _model_idata(model, result, random_seed)
