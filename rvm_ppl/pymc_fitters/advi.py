"""Mean-field ADVI on the PyMC model: :func:`fit_advi` (InferenceData) and :func:`advi_result`.

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
import warnings
from types import MappingProxyType

import numpy as np
from sklearn.exceptions import ConvergenceWarning

from rvm_ppl.core.linalg import (
    blas_limit,
)
from rvm_ppl.pymc_fitters.results import (
    COMPILE_MODE,
    DRAWS,
    _check_model,
    _compilation,
    _data,
    _model_idata,
    _result,
    _seeds,
)

_log = logging.getLogger("rvm_ppl")


ADVI_METHODS = ("advi", "fullrank_advi")


# By likelihood; COMPILE_MODE otherwise.
ADVI_COMPILE_MODE = MappingProxyType({"gaussian": "FAST_COMPILE"})


ADVI_WINDOW = 1000


ADVI_TOL = 1e-2


ADVI_LEARNING_RATE = 1e-2


ADVI_MAX_ITER = 50_000


class _QuietStop(logging.Filter):
    """Drop PyMC's messages about an ADVI run that this module's callback stopped.

    PyMC reports a ``StopIteration`` from a callback as "Interrupted at 3,999
    [7%]", which reads like a failure; :func:`advi_result` logs its own
    "ADVI converged" line instead.
    """

    def filter(self, record):
        message = record.getMessage()
        return not (message.startswith("Interrupted at") or message.startswith("ADVI converged"))


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
    n,
    tol,
    draws,
    random_seed,
    method="advi",
    learning_rate=ADVI_LEARNING_RATE,
    window=ADVI_WINDOW,
    patience=2,
    compile_mode=None,
    blas_threads=1,
    progressbar=False,
    **fit_kwargs,
):
    """ADVI on ``model``, as a :class:`~rvm_ppl.inference.methods.FitResult`; see :func:`fit_advi`.

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
    rng, seed = _seeds(random_seed)
    stop = _MedianLossConvergence(window, tol * N, patience)
    bar = _AdviProgress(progressbar, n, window)
    kwargs = dict(
        n=n, method=method, random_seed=seed, progressbar=False,
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
        stack.enter_context(_compilation())
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
    compile_mode : str, optional
        PyTensor mode. Default: :data:`ADVI_COMPILE_MODE` for the model's
        likelihood, else :data:`COMPILE_MODE`: for regression
        ``"FAST_COMPILE"``, the Python VM, which compiles nothing;
        ``"NUMBA"`` for the classifiers, whose graphs run too slowly on the
        VM (Defaults and why, "First fits"). ``"FAST_RUN"`` is the C backend.
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
