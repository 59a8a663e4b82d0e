"""Type-II maximum likelihood: the sinc experiments of the papers, and scaling.

    python benchmarks/bench_evidence.py                 # both parts
    python benchmarks/bench_evidence.py --part sinc --reps 100
    python benchmarks/bench_evidence.py --part solvers --reps 6    # 6 of the 48 random problems
    python benchmarks/bench_evidence.py --part scale --sizes 1000 5000 20000
    python benchmarks/bench_evidence.py --part million --sizes 1000000
    python benchmarks/bench_evidence.py --part maxima --reps 21
    python benchmarks/bench_evidence.py --part first --sizes 100 300 1000 --reps 10
    python benchmarks/bench_evidence.py --part warm --sizes 100 300 1000 --reps 20
    python benchmarks/bench_evidence.py --part hyperprior --sizes 1000 20000 --reps 3 --seeds 5

Part A reproduces the sinc experiments of Tipping (2001, §4.1 and App. E)
and Bishop & Tipping (2000, Table 1). Part C compares the log evidence that
the fast sequential solver (with and without its second ascent,
``multistart``) and Tipping's full re-estimation reach (all are local
maxima). Part B times the evidence method
against the peers that are installed (``pip install -e ".[bench]"``):
``fastrvm`` (a C++ port of SparseBayes) and ``sklearn-rvm``. Every
configuration runs in its own process so that its peak memory (max RSS,
imports included) is its own; "1 thread" sets OPENBLAS_NUM_THREADS=1 before
numpy is imported, "default" leaves BLAS threading alone.

``--part first`` (not part of "all") repeats part B's first fits at small N
over seeds, each in a fresh process, as they come and with the process's
one-time costs (scikit-learn's first input check, threadpoolctl's library
scan) paid before the clock.

Part D fits the evidence method at very large N (default one million) on
two problems, through :func:`rvm_ppl.kernels.basis.kernel_basis` and
:func:`rvm_ppl.closed_form.evidence.fit_evidence_regression` directly (with progress
messages through ``logging``): 1-D noisy sinc as in part B, and a 2-D sinc
``sin(|x|) / |x|`` with x uniform on [-5, 5]^2, noise sd 0.1, RBF r = 3.
Both kernels have a small numerical rank on these inputs, so the basis is
the pivoted Cholesky factor ``K ~ L L^T`` (rank r, ``N r`` numbers); the
fit time includes the factorisation.

``--part hyperprior`` (not part of "all") times the regression evidence fit with and
without Gamma hyperpriors (type-II MAP, Tipping 2001, eq. 36) on part B's noisy sinc:
``RVR``'s default path and ``RVR(compiled=True)`` (the compiled engine wherever it
applies), the median of ``--reps`` fresh processes per cell (one BLAS thread, the engine
loaded and the process's one-time costs paid before the clock). ``--baseline DIR`` adds
the default path of another checkout of the package (e.g. the commit before the engine
took hyperpriors), run by the same workers with ``PYTHONPATH=DIR``. ``--seeds K`` adds a
table over the data sets of seeds 0 to K-1: each hyperprior's time and iterations against
none on the same data set, the cost of an iteration, and the part of it the Python loop
spends deciding (every candidate's gain: ``_Model.gains`` in
:mod:`rvm_ppl.closed_form.evidence`; the engine decides inside its compiled loop).

Part E lists the local maxima of the evidence that single ascents of the fast
solver reach on Tipping's noise-free linear-spline sinc (every start, with and
without its heuristics), with the max error of each, on the paper's grid of 100
points and on grids of 90, 91, ... points: the paper's 0.0070 with 9 vectors is
one of several maxima within 0.1 nat of each other, not the highest.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np
from _common import (add_results_argument, heading, record_data, record_note, record_table, results_name,
                     results_recorder, run_worker, write_results)


def _sinc_rows(reps):
    from rvm_ppl import RVR
    from rvm_ppl.datasets.loaders import make_sinc, sinc

    Xt = np.linspace(-10, 10, 1000)[:, None]
    truth = sinc(Xt[:, 0])
    rows = []

    X, y = make_sinc(100, noise=None)
    for solver, label in (("full", "full solver"), ("fast", "fast solver"),
                          ("one", "fast solver, one ascent")):
        m = _spline_rvr(solver).fit(X, y)
        err = np.abs(m.predict(Xt) - truth).max()
        rows.append(
            (f"noise-free, linear spline, sigma = 0.01 fixed ({label})", "max error / log evidence",
             f"{err:.4f} / {m.log_evidence_:.2f}", f"{len(m.relevance_)}", "-",
             "0.0070 / 9 (Tipping 2001 §4.1)")
        )

    settings = [
        ("Gaussian noise sd 0.1, RBF r = 3", "rbf", dict(noise="gaussian", noise_level=0.1),
         "0.0494 / 6.9 / 0.0943 (Bishop & Tipping 2000, Table 1, RVM); 6.7 RVs (Tipping 2001, Table)"),
        ("uniform noise [-0.1, 0.1], RBF r = 3", "rbf", dict(noise="uniform", noise_level=0.1),
         "7.0 RVs (Tipping 2001, Table)"),
        ("uniform noise [-0.2, 0.2], linear spline", "linear_spline",
         dict(noise="uniform", noise_level=0.2), "0.0245 / 6 (Tipping 2001, Fig. 2, one data set)"),
    ]
    for name, kernel, noise, paper in settings:
        rms, nrv, sd = [], [], []
        for seed in range(reps):
            X, y = make_sinc(100, random_state=seed, **noise)
            m = RVR(kernel, gamma=1 / 9).fit(X, y)
            rms.append(np.sqrt(np.mean((m.predict(Xt) - truth) ** 2)))
            nrv.append(len(m.relevance_))
            sd.append(1 / np.sqrt(m.beta_))
        rows.append((f"{name}, N = 100, {reps} noise draws", "mean RMS",
                     f"{np.mean(rms):.4f} (sd {np.std(rms):.4f})", f"{np.mean(nrv):.2f}",
                     f"{np.mean(sd):.4f}", paper))
    heading("A. Sinc experiments (evidence method)", before="\n")
    print("| experiment | error measure | rvm_ppl | relevance vectors | noise sd | paper (error / RVs / noise) |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print("| " + " | ".join(r) + " |")
    record_table(None, ["experiment", "error measure", "rvm_ppl", "relevance vectors", "noise sd",
                        "paper (error / RVs / noise)"], rows)


def _spline_rvr(solver):
    """The noise-free linear-spline RVR of Tipping (2001) §4.1; ``"one"``: the fast
    solver without its second ascent (``multistart=False``)."""
    from rvm_ppl import RVR

    if solver != "one":
        return RVR("linear_spline", noise_std=0.01, fit_noise=False, solver=solver)
    return _OneAscentRVR("linear_spline", noise_std=0.01, fit_noise=False)


def _one_ascent(fit):
    """Run ``fit()`` with the fast solver's ``multistart`` switched off."""
    import rvm_ppl.inference.methods as inference
    from rvm_ppl.closed_form.evidence import fit_evidence_regression

    def once(*args, **kw):
        return fit_evidence_regression(*args, multistart=False, **kw)

    inference.fit_evidence_regression = once
    try:
        return fit()
    finally:
        inference.fit_evidence_regression = fit_evidence_regression


class _OneAscentRVR:
    """An RVR whose fast solver makes a single ascent (the behaviour before ``multistart``)."""

    def __init__(self, *args, **kw):
        from rvm_ppl import RVR

        self.model = RVR(*args, **kw)

    def fit(self, X, y):
        """Fit the wrapped RVR with one ascent; return it."""
        _one_ascent(lambda: self.model.fit(X, y))
        return self.model


class _PythonLoopRVR(_OneAscentRVR):
    """An RVR whose climbs run in the Python loop, as every fit up to ENGINE_MIN_ENTRIES does."""

    def fit(self, X, y):
        """Fit the wrapped RVR without the compiled engine; return it."""
        import rvm_ppl.closed_form.evidence as evidence

        saved, evidence.ENGINE_MAX_ENTRIES = evidence.ENGINE_MAX_ENTRIES, 0
        try:
            return self.model.fit(X, y)
        finally:
            evidence.ENGINE_MAX_ENTRIES = saved


def _local_maxima(X, y, Xt, truth):
    """Every local maximum of the evidence one ascent of the fast solver reaches on the
    noise-free linear-spline problem (sigma = 0.01 fixed), from each basis function as
    start, with and without the alignment test and the noise warm-up: rows of (log
    evidence, max error, relevance vectors), distinct to 1e-6 nats, best first."""
    from rvm_ppl.closed_form.evidence import fit_evidence_regression
    from rvm_ppl.kernels.kernel import LinearSpline, design_matrix

    Phi, Pt = design_matrix(X, X, LinearSpline()), design_matrix(Xt, X, LinearSpline())
    seen = {}
    for start in range(Phi.shape[1]):
        for align in (True, False):
            for warmup in (True, False):
                r = fit_evidence_regression(Phi, y, beta=1e4, fixed_beta=True, start=start,
                                            multistart=False, alignment_test=align,
                                            noise_warmup=warmup, warn=False)
                err = np.abs(Pt[:, r.active] @ r.mu - truth).max()
                row = (r.log_evidence, err, r.active.size - (0 in r.active))
                seen.setdefault(round(r.log_evidence, 6), row)
    return sorted(seen.values(), reverse=True)


def _spline_fit(X, y, Xt, truth, solver="fast"):
    """The package's fit of the same problem: (log evidence, max error, relevance vectors)."""
    m = _spline_rvr(solver).fit(X, y)
    return m.log_evidence_, np.abs(m.predict(Xt) - truth).max(), len(m.relevance_)


def _maxima_rows(reps):
    """Part E: which local maximum of the evidence the paper's noise-free linear-spline
    figure (max error 0.0070 with 9 vectors) is, and the same question on other grids."""
    from rvm_ppl.datasets.loaders import sinc

    Xt = np.linspace(-10, 10, 1000)[:, None]
    truth = sinc(Xt[:, 0])
    X = np.linspace(-10, 10, 100)[:, None]
    y = sinc(X[:, 0])
    maxima = _local_maxima(X, y, Xt, truth)
    heading("E. Noise-free sinc, linear spline, sigma = 0.01 fixed: local maxima of the evidence", before="\n")
    print(f"100 uniformly spaced points on [-10, 10]; {len(maxima)} distinct maxima from "
          "404 ascents (101 starts x alignment test on/off x noise warm-up on/off). "
          "The ten highest:\n")
    print("| rank | log evidence | below the best (nats) | max error | relevance vectors |")
    print("|---|---|---|---|---|")
    for i, (le, err, k) in enumerate(maxima[:10]):
        print(f"| {i + 1} | {le:.3f} | {maxima[0][0] - le:.3f} | {err:.4f} | {k} |")
    record_table("E. 100-point grid: the ten highest local maxima",
                 ["rank", "log evidence", "below the best (nats)", "max error", "relevance vectors"],
                 [[i + 1, round(le, 3), round(maxima[0][0] - le, 3), round(err, 4), k]
                  for i, (le, err, k) in enumerate(maxima[:10])])
    record_data("maxima_grid100", {"n_maxima": len(maxima), "maxima": [list(m) for m in maxima]})
    errs = [m[1] for m in maxima]
    print(f"\nMax error over all maxima: {min(errs):.4f}-{max(errs):.4f}.")
    close = [m for m in maxima if m[1] <= 0.0075]
    if close:
        print(f"The highest maximum with max error <= 0.0075 is {maxima[0][0] - close[0][0]:.3f} "
              f"nats below the best ({close[0][1]:.4f}, {close[0][2]} vectors).")
        record_data("maxima_grid100_first_with_max_error_le_0.0075",
                    {"below_best_nats": maxima[0][0] - close[0][0], "max_error": close[0][1],
                     "relevance_vectors": close[0][2]})
    fits = []
    for solver in ("fast", "full"):
        le, err, k = _spline_fit(X, y, Xt, truth, solver)
        print(f"RVR(solver={solver!r}): log evidence {le:.3f}, max error {err:.4f}, {k} vectors.")
        fits.append([solver, round(le, 3), round(err, 4), k])
    record_table("E. 100-point grid: the package's fits", ["solver", "log evidence", "max error",
                                                           "relevance vectors"], fits)

    print(f"\nThe same on {reps} grids of N uniformly spaced points on [-10, 10], "
          "N = 90, 91, ... (max error / vectors / nats below the highest maximum):\n")
    print("| N | maxima | highest maximum | RVR (fast) | most accurate maximum (its rank) |")
    print("|---|---|---|---|---|")
    firsts, fits, lows, rows = [], [], [], []
    for n in range(90, 90 + reps):
        X = np.linspace(-10, 10, n)[:, None]
        y = sinc(X[:, 0])
        maxima = _local_maxima(X, y, Xt, truth)
        le, err, k = _spline_fit(X, y, Xt, truth)
        top = maxima[0]
        low = int(np.argmin([m[1] for m in maxima]))
        firsts.append(top[1])
        fits.append(err)
        lows.append(maxima[low][1])
        rows.append([str(n), str(len(maxima)), f"{top[1]:.4f} / {top[2]}", f"{err:.4f} / {k} / {top[0] - le:.3f}",
                     f"{maxima[low][1]:.4f} / {maxima[low][2]} / {top[0] - maxima[low][0]:.2f} ({low + 1})"])
        print("| " + " | ".join(rows[-1]) + " |")
    record_table(f"E. {reps} grids of N = 90, 91, ... points (max error / vectors / nats below the highest "
                 "maximum)", ["N", "maxima", "highest maximum", "RVR (fast)", "most accurate maximum (its rank)"],
                 rows)
    print(f"\nMedian max error: highest maximum {np.median(firsts):.4f}, RVR {np.median(fits):.4f} "
          f"(range {min(fits):.4f}-{max(fits):.4f}), most accurate maximum {np.median(lows):.4f}.")
    record_data("maxima_grids_median_max_error", {"highest_maximum": np.median(firsts), "rvr_fast": np.median(fits),
                                                  "rvr_fast_range": [min(fits), max(fits)],
                                                  "most_accurate_maximum": np.median(lows)})


def _solver_rows(n_random=48):
    """Log evidence reached by the fast and the full solver on the same problems.

    Then the same on ``n_random`` small random noisy-sinc problems.
    """
    from sklearn.preprocessing import StandardScaler

    import rvm_ppl.closed_form.engine  # noqa: F401  (times with the engine loaded, not a first fit's)
    from rvm_ppl import RVR
    from rvm_ppl.datasets.loaders import load_boston, make_sinc

    RVR().fit(*make_sinc(20, random_state=0))  # loads the compiled engine
    problems = []
    X, y = make_sinc(100, random_state=0)
    problems.append(("sinc, Gaussian noise, RBF r = 3", X, y, dict(gamma=1 / 9)))
    X, y = make_sinc(100, random_state=0, noise="uniform", noise_level=0.2)
    problems.append(("sinc, uniform noise 0.2, linear spline", X, y, dict(kernel="linear_spline")))
    Xb, yb = load_boston()
    Xb = StandardScaler().fit_transform(Xb[:455])
    for g in (0.003, 0.03, 0.1):
        problems.append((f"Boston (first 455 cases), RBF gamma = {g}", Xb, yb[:455], dict(gamma=g)))
    heading("C. Fast sequential vs full re-estimation: the log evidence each reaches", before="\n")
    print("| problem | fast: log evidence / RVs / time (s) | fast, one ascent | "
          "full: log evidence / RVs / time (s) | fast - full (nats) |")
    print("|---|---|---|---|---|")
    rows = []
    for name, X, y, kw in problems:
        cells, le = [], []
        for solver in ("fast", "one", "full"):
            start = time.perf_counter()
            if solver == "one":
                m = _OneAscentRVR(**kw).fit(X, y)
            else:
                m = RVR(solver=solver, **kw).fit(X, y)
            le.append(m.log_evidence_)
            cells.append(f"{m.log_evidence_:.2f} / {len(m.relevance_)} / {time.perf_counter() - start:.2f}")
        print(f"| {name} | {' | '.join(cells)} | {le[0] - le[2]:+.2f} |", flush=True)
        rows.append([name, *cells, f"{le[0] - le[2]:+.2f}"])
    record_table(None, ["problem", "fast: log evidence / RVs / time (s)", "fast, one ascent",
                        "full: log evidence / RVs / time (s)", "fast - full (nats)"], rows)
    # Many small random problems: how often does the fast solver end below the full one?
    gaps = []
    for seed in range(n_random):
        X, y = make_sinc(50, grid=False, random_state=seed)
        gaps.append(RVR(gamma=1 / 9).fit(X, y).log_evidence_
                    - RVR(gamma=1 / 9, solver="full").fit(X, y).log_evidence_)
    gaps = np.array(gaps)
    below = gaps[gaps < -1.0]
    print(f"\n{n_random} noisy-sinc problems of 50 points (RBF r = 3, seeds 0-{n_random - 1}): "
          f"fast - full ranges "
          f"{gaps.min():+.2f} to {gaps.max():+.2f} nats; more than 1 nat below on {below.size}"
          + (f" ({-below.max():.1f}-{-below.min():.1f} nats)" if below.size else ""))
    record_data("random_problems_fast_minus_full", {"n": n_random, "gaps_nats": gaps,
                                                    "n_more_than_1_nat_below": int(below.size)})


def _worker(lib, n, seed):
    """Fit one library on noisy sinc of size n; print a JSON line."""
    import resource

    from rvm_ppl.datasets.loaders import make_sinc, sinc

    lib, _, prepaid = lib.partition("+")
    X, y = make_sinc(n, grid=False, random_state=seed)
    Xt = np.linspace(-10, 10, 1000)[:, None]
    gamma = 1 / 9
    if prepaid:
        # A process's one-time costs paid before the clock: scikit-learn's
        # first input check (dataframe plugin discovery) and threadpoolctl's
        # scan of the loaded libraries, which rvm_ppl's one-thread limit needs.
        from sklearn.utils.validation import check_array

        from rvm_ppl.core.linalg import _thread_controller

        check_array(X)
        _thread_controller()
    # Every library is imported before the clock starts.
    if lib == "fastrvm":
        from fastrvm import RVR as FastRVR
    elif lib == "sklearn-rvm":
        from sklearn_rvm import EMRVR
    else:
        import rvm_ppl.estimators.base
        from rvm_ppl import RVR

    start = time.perf_counter()
    if lib in ("rvm_ppl", "rvm_ppl-lowrank"):
        if lib == "rvm_ppl-lowrank":
            # The low-rank (or blocked) kernel basis at every N, instead of
            # the dense kernel matrix below DENSE_LIMIT entries.
            rvm_ppl.estimators.base.DENSE_LIMIT = 0

        # "default" threads: let BLAS use its own default instead of the
        # estimator's one-thread limit.
        threads = 1 if os.environ.get("OPENBLAS_NUM_THREADS") == "1" else None
        m = RVR(gamma=gamma, blas_threads=threads).fit(X, y)
        seconds = time.perf_counter() - start
        pred, nrv = m.predict(Xt), len(m.relevance_)
    elif lib == "fastrvm":
        m = FastRVR(kernel="rbf", gamma=gamma, fit_intercept=True).fit(X, y)
        seconds = time.perf_counter() - start
        pred, nrv = m.predict(Xt), int(m.n_relevance_)
    elif lib == "sklearn-rvm":
        m = EMRVR(kernel="rbf", gamma=gamma)
        m.fit(X, y)
        seconds = time.perf_counter() - start
        pred, nrv = m.predict(Xt), len(m.relevance_)
    else:
        raise ValueError(lib)
    rms = float(np.sqrt(np.mean((np.ravel(pred) - sinc(Xt[:, 0])) ** 2)))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(dict(seconds=seconds, peak_mb=peak, rms=rms, nrv=nrv)))


HYPERPRIORS = {
    "none": {},
    "a = b = c = d = 1e-6": dict(alpha_shape=1e-6, alpha_rate=1e-6, beta_shape=1e-6,
                                 beta_rate=1e-6),
    "a = b = 2": dict(alpha_shape=2.0, alpha_rate=2.0),
}


def _hyperprior_worker(case, n, seed):
    """Time one RVR evidence fit (``case``: path, then the hyperprior's index); print JSON."""
    from sklearn.utils.validation import check_array

    import rvm_ppl.closed_form.engine as engine
    import rvm_ppl.closed_form.evidence as evidence
    from rvm_ppl import RVR
    from rvm_ppl.core.linalg import _thread_controller
    from rvm_ppl.datasets.loaders import make_sinc

    path, _, which = case.partition(":")
    prior = list(HYPERPRIORS.values())[int(which)]
    X, y = make_sinc(n, grid=False, random_state=seed)
    # One-time costs before the clock: the input check, the thread scan, the engine.
    check_array(X)
    _thread_controller()
    RVR(gamma=1 / 9, compiled=True).fit(*make_sinc(30, random_state=1))
    calls = []
    run = engine.run
    engine.run = lambda *a, **k: calls.append(1) or run(*a, **k)
    # The Python loop's decisions: every candidate's gain (the statistics' ``gains``).
    deciding = [0.0]
    stats_class = getattr(evidence, "_Model", None)
    gains = getattr(stats_class, "gains", None)
    if gains is not None:
        def timed(self, blocked):
            t = time.perf_counter()
            try:
                return gains(self, blocked)
            finally:
                deciding[0] += time.perf_counter() - t
        stats_class.gains = timed
    compiled = {"default": "auto", "compiled": True}[path]
    start = time.perf_counter()
    m = RVR(gamma=1 / 9, compiled=compiled, **prior).fit(X, y)
    seconds = time.perf_counter() - start
    stats = m.result_.stats
    print(json.dumps(dict(seconds=seconds, engine=bool(calls), n_iter=int(m.n_iter_),
                          nrv=len(m.relevance_), deciding=deciding[0],
                          objective=float(stats.get("objective", stats["log_evidence"])))))


def _hyperprior_rows(sizes, reps, seed, timeout, baseline):
    """Fit time with and without hyperpriors, on the default path and on the engine."""
    heading(f"Hyperpriors: evidence fit time on noisy sinc, median of {reps} fresh processes "
            "(one BLAS thread, engine loaded before the clock)", before="\n")
    paths = [("default", "default", None), ("compiled", "compiled=True", None)]
    if baseline:
        paths.insert(0, ("default", "before: default", baseline))
    header = ["N", "hyperprior"] + [f"{label} (s)" for _, label, _ in paths] + [
        "engine ran (default / compiled=True)", "iterations", "relevance vectors"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    rows = []
    saved = os.environ.get("PYTHONPATH")
    for n in sizes:
        for i, name in enumerate(HYPERPRIORS):
            cells, ran, info = [], [], None
            for path, label, where in paths:
                times = []
                for _ in range(reps):
                    if where:
                        os.environ["PYTHONPATH"] = where
                    try:
                        res, err = run_worker(__file__, ["hyperprior", f"{path}:{i}:{n}", seed],
                                              one_thread=True, timeout=timeout)
                    finally:
                        if saved is None:
                            os.environ.pop("PYTHONPATH", None)
                        else:
                            os.environ["PYTHONPATH"] = saved
                    if res is None:
                        raise RuntimeError(f"{label}, N = {n}, {name}: {err}")
                    times.append(res["seconds"])
                cells.append(f"{np.median(times):.3f}")
                if where is None:
                    ran.append("yes" if res["engine"] else "no")
                    info = res
            row = [n, name, *cells, " / ".join(ran), info["n_iter"], info["nrv"]]
            rows.append(row)
            print("| " + " | ".join(map(str, row)) + " |", flush=True)
    record_table(None, header, rows)


def _hyperprior_seed_rows(sizes, seeds, reps, timeout):
    """Over seeds: the fit's time with each hyperprior against none, its iterations and their cost."""
    heading(f"Hyperpriors over {seeds} data sets (noisy sinc, seeds 0-{seeds - 1}): each cell the "
            f"median over the data sets (min-max) of the median of {reps} fresh processes",
            before="\n")
    header = ["N", "path", "hyperprior", "loop", "fit (s)", "time / none", "iterations",
              "iterations / none", "ms per iteration", "deciding, ms per iteration"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    rows = []

    def spread(v, fmt):
        v = np.asarray(v, dtype=float)
        return f"{np.median(v):{fmt}} ({v.min():{fmt}}-{v.max():{fmt}})"

    for n in sizes:
        for path, label in (("default", "default"), ("compiled", "compiled=True")):
            runs = {}  # hyperprior -> one dict of medians per seed
            for i, name in enumerate(HYPERPRIORS):
                per_seed = []
                for seed in range(seeds):
                    got = []
                    for _ in range(reps):
                        res, err = run_worker(__file__, ["hyperprior", f"{path}:{i}:{n}", seed],
                                              one_thread=True, timeout=timeout)
                        if res is None:
                            raise RuntimeError(f"{label}, N = {n}, {name}, seed {seed}: {err}")
                        got.append(res)
                    per_seed.append({k: float(np.median([g[k] for g in got]))
                                     for k in ("seconds", "n_iter", "deciding", "engine")})
                runs[name] = per_seed
                base = runs["none"]
                t = [r["seconds"] for r in per_seed]
                it = [r["n_iter"] for r in per_seed]
                engine_ran = {bool(r["engine"]) for r in per_seed}
                row = [n, label, name, "engine" if engine_ran == {True} else
                       "Python" if engine_ran == {False} else "both",
                       spread(t, ".3f"),
                       spread([a / b["seconds"] for a, b in zip(t, base, strict=True)], ".2f"),
                       spread(it, ".0f"),
                       spread([a / b["n_iter"] for a, b in zip(it, base, strict=True)], ".2f"),
                       spread([1e3 * r["seconds"] / r["n_iter"] for r in per_seed], ".3f"),
                       "-" if engine_ran == {True} else
                       spread([1e3 * r["deciding"] / r["n_iter"] for r in per_seed], ".3f")]
                rows.append(row)
                print("| " + " | ".join(map(str, row)) + " |", flush=True)
    record_table(None, header, rows)


def _million_worker(problem, n, seed):
    """Fit the evidence method at large n through the low-rank basis; print a JSON line."""
    import logging
    import resource

    from rvm_ppl.closed_form.evidence import fit_evidence_regression
    from rvm_ppl.kernels.basis import LowRankKernelBasis, kernel_basis
    from rvm_ppl.kernels.kernel import RBF

    logging.basicConfig(level=logging.INFO, format="# %(message)s")
    rng = np.random.default_rng(seed)
    if problem == "sinc1d":
        X = rng.uniform(-10, 10, (n, 1))
        Xt = np.linspace(-10, 10, 1000)[:, None]
    else:
        X = rng.uniform(-5, 5, (n, 2))
        g = np.linspace(-5, 5, 40)
        Xt = np.stack(np.meshgrid(g, g), -1).reshape(-1, 2)

    def truth(Z):
        r = np.linalg.norm(Z, axis=1)
        return np.sinc(r / np.pi)  # sin(r) / r

    y = truth(X) + 0.1 * rng.standard_normal(n)
    k = RBF(1 / 9)
    start = time.perf_counter()
    basis = kernel_basis(k, X)
    t_basis = time.perf_counter() - start
    res = fit_evidence_regression(basis, y, start=0, progress=5.0)
    seconds = time.perf_counter() - start
    rank = basis.rank if isinstance(basis, LowRankKernelBasis) else None
    centres = res.active[res.active > 0] - 1
    pred = k(Xt, X[centres]) @ res.mu[res.active > 0] + (res.mu[0] if 0 in res.active else 0.0)
    rms = float(np.sqrt(np.mean((pred - truth(Xt)) ** 2)))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(dict(seconds=seconds, basis_seconds=t_basis, peak_mb=peak, rms=rms,
                          nrv=int(np.sum(res.active > 0)), rank=rank, n_iter=res.n_iter,
                          noise_sd=float(1 / np.sqrt(res.beta)))))


def _million_rows(sizes, seed, timeout):
    heading("D. Very large N: evidence method through the low-rank basis (one BLAS thread)", before="\n")
    print("| problem | N | kernel rank | factorisation (s) | fit time incl. factorisation (s) | peak RSS (MB) "
          "| RMS to truth | relevance vectors | noise sd |")
    print("|---|---|---|---|---|---|---|---|---|")
    rows = []
    for problem, label in (("sinc1d", "1-D sinc, x on [-10, 10]"), ("sinc2d", "2-D sinc, x on [-5, 5]^2")):
        for n in sizes:
            res, err = run_worker(__file__, ["million", f"{problem}:{n}", seed], one_thread=True, timeout=timeout)
            if res is None:
                print(f"| {label} | {n} | {err} | | | | | | |")
                rows.append([label, n, err, "", "", "", "", "", ""])
            else:
                print(f"| {label} | {n} | {res['rank']} | {res['basis_seconds']:.1f} | {res['seconds']:.1f} "
                      f"| {res['peak_mb']:.0f} | {res['rms']:.4f} | {res['nrv']} | {res['noise_sd']:.4f} |",
                      flush=True)
                rows.append([label, n, res["rank"], round(res["basis_seconds"], 1), round(res["seconds"], 1),
                             round(res["peak_mb"]), round(res["rms"], 4), res["nrv"], round(res["noise_sd"], 4)])
    record_table(None, ["problem", "N", "kernel rank", "factorisation (s)", "fit time incl. factorisation (s)",
                        "peak RSS (MB)", "RMS to truth", "relevance vectors", "noise sd"], rows)


def _run(lib, n, threads, seed, timeout):
    return run_worker(__file__, [lib, n, seed], one_thread=threads == "1 thread", timeout=timeout)


def _installed(lib):
    import importlib.util

    return importlib.util.find_spec({"fastrvm": "fastrvm", "sklearn-rvm": "sklearn_rvm"}.get(lib, lib)) is not None


def _scale_rows(sizes, libs, seed, timeout, fastrvm_max=10**9, threads=("1 thread", "default")):
    heading("B. Fit time and peak memory on noisy sinc (x uniform on [-10, 10], noise sd 0.1, RBF r = 3)",
            before="\n")
    print("| N | library | BLAS threads | fit time (s) | peak RSS (MB) | RMS to sin(x)/x | relevance vectors |")
    print("|---|---|---|---|---|---|---|")
    rows = []

    def row(*cells):
        rows.append(list(cells))
        print("| " + " | ".join(map(str, cells)) + " |", flush=True)

    for n in sizes:
        for lib in libs:
            if not lib.startswith("rvm_ppl") and not _installed(lib):
                row(n, lib, "-", "not installed", "", "", "")
                continue
            if lib == "sklearn-rvm" and n > 5000:
                row(n, lib, "-", "skipped (dense N x N EM)", "", "", "")
                continue
            if lib == "fastrvm" and n > fastrvm_max:
                row(n, lib, "-", "skipped (N x N kernel matrices: 12.4 GB at N = 20 000)", "", "", "")
                continue
            for thr in threads:
                res, err = _run(lib, n, thr, seed, timeout)
                if res is None:
                    row(n, lib, thr, err, "", "", "")
                else:
                    row(n, lib, thr, f"{res['seconds']:.2f}", f"{res['peak_mb']:.0f}", f"{res['rms']:.4f}",
                        res["nrv"])
    record_table(None, ["N", "library", "BLAS threads", "fit time (s)", "peak RSS (MB)", "RMS to sin(x)/x",
                        "relevance vectors"], rows)


def _first_rows(sizes, seeds, timeout):
    """First fits in fresh processes over seeds, as they come and with one-time costs prepaid.

    Each cell is a process of its own (one BLAS thread). "prepaid" runs
    scikit-learn's first input check and threadpoolctl's library scan before
    the clock, so what remains is the fit itself: for rvm_ppl at N <= 1 000
    the Python loop, which runs every fit of that size (the compiled
    engine costs more to load than such a fit takes).
    """
    heading(f"First fits in a fresh process, seeds 0-{seeds - 1} (one BLAS thread; median and range over seeds)",
            before="\n")
    print("| N | rvm_ppl (ms) | fastrvm (ms) | ratio "
          "| prepaid: rvm_ppl (ms) | prepaid: fastrvm (ms) | prepaid: ratio |")
    print("|---|---|---|---|---|---|---|")

    def cell(v):
        return f"{np.median(v):.0f} ({np.min(v):.0f}-{np.max(v):.0f})"

    rows = []
    for n in sizes:
        ms = {}
        for variant in ("", "+prepaid"):
            for lib in ("rvm_ppl", "fastrvm"):
                ms[lib + variant] = []
                for seed in range(seeds):
                    res, err = _run(lib + variant, n, "1 thread", seed, timeout)
                    if res is None:
                        raise RuntimeError(f"{lib}{variant}, N = {n}, seed {seed}: {err}")
                    ms[lib + variant].append(1e3 * res["seconds"])
        row = [str(n)]
        for variant in ("", "+prepaid"):
            ours, theirs = np.array(ms["rvm_ppl" + variant]), np.array(ms["fastrvm" + variant])
            r = ours / theirs
            row += [cell(ours), cell(theirs), f"{np.median(r):.1f} ({r.min():.1f}-{r.max():.1f})"]
        print("| " + " | ".join(row) + " |", flush=True)
        rows.append(row)
    record_table(None, ["N", "rvm_ppl (ms)", "fastrvm (ms)", "ratio", "prepaid: rvm_ppl (ms)",
                        "prepaid: fastrvm (ms)", "prepaid: ratio"], rows)


def _warm_rows(sizes, seeds=10, reps=3):
    """Repeated fits in one process: median over seeds of the fastest of ``reps`` warm fits.

    The compiled engine is loaded first; ``RVR``'s default path (the Python
    loop up to ``ENGINE_MIN_ENTRIES``, the engine beyond), ``RVR(compiled=True)``
    (the engine at every size), the Python loop and a single climb
    (``multistart=False``) are timed side by side, and the log evidence the
    extra climbs add to the single one is counted.
    """
    from threadpoolctl import threadpool_limits

    import rvm_ppl.closed_form.engine  # noqa: F401  (the steady state: the engine is loaded)
    from rvm_ppl import RVR
    from rvm_ppl.datasets.loaders import make_sinc

    if not _installed("fastrvm"):
        print("fastrvm is not installed: no warm-fit comparison")
        return
    from fastrvm import RVR as FastRVR

    def fastest(make, X, y):
        times = []
        for _ in range(reps):
            start = time.perf_counter()
            m = make().fit(X, y)
            times.append(time.perf_counter() - start)
        return min(times), m

    libs = {"rvm_ppl": lambda: RVR(gamma=1 / 9),
            "fastrvm": lambda: FastRVR(kernel="rbf", gamma=1 / 9, fit_intercept=True),
            "compiled=True": lambda: RVR(gamma=1 / 9, compiled=True),
            "one climb": lambda: _OneAscentRVR(gamma=1 / 9),
            "Python loop": lambda: _PythonLoopRVR(gamma=1 / 9)}
    X0, y0 = make_sinc(50, random_state=0)
    for make in libs.values():  # first calls and imports before timing
        make().fit(X0, y0)
    heading(f"Warm fits: median over seeds of the fastest of {reps} fits in one process (one BLAS thread)",
            before="\n")
    header = ["N", "rvm_ppl (ms)", "fastrvm (ms)", "ratio: median (range)",
              "iterations (rvm_ppl / fastrvm)", "compiled=True: ms, ratio", "one climb: ms, ratio",
              "Python loop: ms, ratio", "extra climbs: seeds gaining > 0.1 / > 1 nat, largest gain"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    rows = []
    for n in sizes:
        t = {k: [] for k in libs}
        it = {k: [] for k in libs}
        gain = []
        for seed in range(seeds):
            X, y = make_sinc(n, grid=False, random_state=seed)
            with threadpool_limits(1):
                fits = {}
                for name, make in libs.items():
                    sec, fits[name] = fastest(make, X, y)
                    t[name].append(sec)
                    it[name].append(int(np.max(fits[name].n_iter_)))
            gain.append(fits["rvm_ppl"].log_evidence_ - fits["one climb"].log_evidence_)
        ratio = {k: np.array(v) / np.array(t["fastrvm"]) for k, v in t.items()}
        ms = {k: 1e3 * np.median(v) for k, v in t.items()}
        gain = np.array(gain)
        r = ratio["rvm_ppl"]
        rows.append([str(n), f"{ms['rvm_ppl']:.1f}", f"{ms['fastrvm']:.1f}",
                     f"{np.median(r):.2f} ({r.min():.2f}-{r.max():.2f})",
                     f"{np.median(it['rvm_ppl']):.0f} / {np.median(it['fastrvm']):.0f}",
                     f"{ms['compiled=True']:.1f}, {np.median(ratio['compiled=True']):.2f}",
                     f"{ms['one climb']:.1f}, {np.median(ratio['one climb']):.2f}",
                     f"{ms['Python loop']:.1f}, {np.median(ratio['Python loop']):.2f}",
                     f"{np.sum(gain > 0.1)} / {np.sum(gain > 1)} of {seeds}, {gain.max():.2f}"])
        print("| " + " | ".join(rows[-1]) + " |", flush=True)
    record_table(None, header, rows)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--part", default="all",
                   choices=["sinc", "solvers", "scale", "first", "warm", "million", "maxima",
                            "hyperprior", "all"])
    p.add_argument("--reps", type=int, default=100,
                   help="noise draws per sinc experiment; random problems of part C (at most 48)")
    p.add_argument("--sizes", type=int, nargs="+", default=None,
                   help="default: 1000 5000 20000 (scale), 1000000 (million)")
    p.add_argument("--libs", nargs="+", default=["rvm_ppl", "fastrvm", "sklearn-rvm"],
                   help="rvm_ppl, rvm_ppl-lowrank (low-rank kernel basis at every N), fastrvm, sklearn-rvm")
    p.add_argument("--fastrvm-max", type=int, default=10**9, help="largest N given to fastrvm")
    p.add_argument("--threads", nargs="+", default=["1 thread", "default"], choices=["1 thread", "default"])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--seeds", type=int, default=1,
                   help="hyperprior: also time every cell on data sets of seeds 0..SEEDS-1")
    p.add_argument("--timeout", type=int, default=900, help="seconds per configuration")
    p.add_argument("--baseline", default=None, metavar="DIR",
                   help="hyperprior: also time the default path of the package checkout in DIR")
    p.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)
    add_results_argument(p)
    args = p.parse_args()
    if args.worker:
        lib, n, seed = args.worker
        if lib == "million":
            problem, n = n.split(":")
            _million_worker(problem, int(n), int(seed))
        elif lib == "hyperprior":
            case, _, n = n.rpartition(":")
            _hyperprior_worker(case, int(n), int(seed))
        else:
            _worker(lib, int(n), int(seed))
        return
    results_recorder(results_name(__file__, args.part), notes=args.note)
    if args.part in ("solvers", "scale", "first", "warm", "million", "hyperprior", "all"):
        record_note("Times are wall-clock seconds on the machine named here, as loaded as its load average "
                    "says; compare them only within one file.")
    if args.part in ("sinc", "all"):
        _sinc_rows(args.reps)
    if args.part in ("solvers", "all"):
        _solver_rows(min(args.reps, 48))
    if args.part in ("scale", "all"):
        _scale_rows(args.sizes or [1000, 5000, 20000], args.libs, args.seed, args.timeout,
                    fastrvm_max=args.fastrvm_max, threads=args.threads)
    if args.part == "first":
        _first_rows(args.sizes or [100, 300, 1000], min(args.reps, 20), args.timeout)
    if args.part == "warm":
        _warm_rows(args.sizes or [100, 300, 1000, 2000, 5000], seeds=min(args.reps, 20))
    if args.part in ("maxima", "all"):
        _maxima_rows(min(args.reps, 21))
    if args.part == "hyperprior":
        _hyperprior_rows(args.sizes or [1000, 20000], min(args.reps, 9), args.seed, args.timeout,
                         args.baseline)
        if args.seeds > 1:
            _hyperprior_seed_rows(args.sizes or [1000, 20000], args.seeds, min(args.reps, 9),
                                  args.timeout)
    if args.part == "million":  # not part of "all": minutes and gigabytes
        _million_rows(args.sizes or [1_000_000], args.seed, args.timeout)
    write_results(args.out)


if __name__ == "__main__":
    import warnings

    warnings.simplefilter("ignore", FutureWarning)
    main()
