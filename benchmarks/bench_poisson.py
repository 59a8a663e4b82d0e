"""Counts: the Poisson RVM on counts with a known rate, its predictive intervals, and real counts.

    python benchmarks/bench_poisson.py --part synthetic
    python benchmarks/bench_poisson.py --part calibration
    python benchmarks/bench_poisson.py --part real
    python benchmarks/bench_poisson.py --part synthetic --sizes 100 300 --seeds 0 --methods evidence

The problem (parts synthetic and calibration): counts ``y ~ Poisson(lambda(x))`` with
``log lambda(x) = 1 + 2 sinc(x)``, Tipping's ``sinc(x) = sin(x) / x`` (rates from 1.8 to
e^3 = 20.1), ``x`` uniform on [-10, 10]; the basis is a bias and the RBF kernel
``exp(-gamma (x - x')^2)`` with ``gamma = 1/9`` (r = 3) centred on every training point.
Seed ``s`` draws the training set from ``default_rng(s)`` and the 2 000 held-out points of
the calibration part from ``default_rng(HELD_OUT_SEED + s)``.

The methods, through the functional API:

evidence
    :func:`rvm_ppl.closed_form.poisson.fit_evidence_poisson` on
    :func:`rvm_ppl.kernels.basis.kernel_basis` (the kernel's low-rank factor where it is
    exact, as ``RVR`` uses it, at every N); the Laplace posterior ``w ~ N(mu, Sigma)`` of
    the kept bases. The fit time includes building the basis.
advi, nuts
    :func:`rvm_ppl.fit_advi` and :func:`rvm_ppl.fit_nuts` with their defaults on
    ``build_model(Phi, y, likelihood="poisson")`` (the marginal form: Student-t weights with
    alpha integrated out, hyperprior a = 3, b = 2; NUTS is nutpie, 4 chains x (1000 tune +
    1000 draws)). The fit time covers the design matrix, the model and the fit, compiling
    included.

synthetic
    RMS, on 1001 grid points of [-10, 10], of the posterior mean of the log rate (evidence:
    ``phi^T mu``; advi, nuts: the mean over draws of ``phi^T w``) to the true log rate;
    relevance vectors (kernel bases kept, the bias not counted: evidence alpha finite;
    advi, nuts ``E[gamma_m] > 1/2``, the package's rule); fit time; median and range over
    the seeds. NUTS's divergences, max r-hat and min bulk ESS of log alpha (its draws from
    ``alpha | w``) and over all of log alpha and w, per seed.
calibration
    Coverage of the central 90 % predictive intervals ``[q05, q95]`` of the count on the
    2 000 held-out counts. The p-quantile of a count distribution is the smallest count k
    with ``F(k) >= p``. evidence: the Poisson-lognormal predictive of
    :func:`rvm_ppl.closed_form.poisson.predict_count_quantiles` (Gauss-Hermite quadrature
    over the log rate); advi and nuts: the mixture of Poissons over the posterior draws,
    ``F(k) = mean_s PoissonCDF(k | exp(phi^T w_s))``, its quantiles exactly from that cdf
    (:func:`rvm_ppl.closed_form.poisson.poisson_mixture_quantiles`). Counts are discrete, so
    ``P(q05 <= Y <= q95) >= 0.9`` under the predictive itself:
    the column "nominal" is that probability averaged over the held-out inputs,
    ``F(q95) - F(q05 - 1)`` under each method's own predictive, and the row "truth" is the
    same interval of the true Poisson rate. Coverage above 0.9 by as much as the nominal is
    discreteness, not miscalibration.
real
    RAND Health Insurance Experiment, ``statsmodels.datasets.randhie`` (shipped in the
    statsmodels wheel; ``pip install -e ".[bench]"``): 20 190 persons, target ``mdvis``
    (outpatient doctor visits in a year), its 9 covariates standardised with the training
    set's mean and sd. Split: ``default_rng(0).permutation``; the first 5 000 rows are the
    test set, the next 2 000 the training set (a subsample of the other 15 190). RBF width
    chosen by 5-fold CV (``KFold(5, shuffle=True, random_state=0)``) of the evidence fit's
    held-out mean Poisson deviance (predictive mean ``exp(m + s^2 / 2)``) over ``--gammas``.
    Against scikit-learn's ``PoissonRegressor`` on the same kernel features
    ``k(x, x_train)`` (its intercept in place of the bias; ``alpha`` by the same 5-fold CV
    over ``--ridge-alphas``, ``max_iter=1000``), ``HistGradientBoostingRegressor
    (loss="poisson", random_state=0)`` with its defaults on the covariates, and the
    training mean as a constant rate. Test mean Poisson deviance and mean log predictive
    density of the 5 000 test counts (evidence: the Poisson-lognormal pmf by
    quadrature; the others: the Poisson pmf at their predicted mean).

Every fit runs in a process of its own with one BLAS thread (nutpie's chains run
as two threads on two cores, the package default).
"""

from __future__ import annotations

import argparse
import json
import time
import warnings

import numpy as np
from _common import (
    add_results_argument,
    heading,
    print_table,
    record_data,
    record_note,
    results_name,
    results_recorder,
    run_worker,
    write_results,
)

GAMMA = 1 / 9  # RBF exp(-gamma (x - x')^2), r = 3
GRID = np.linspace(-10, 10, 1001)
N_HELD_OUT = 2000
HELD_OUT_SEED = 10_000
Q = (0.05, 0.95)  # the central 90 % interval
REAL_TEST, REAL_TRAIN = 5000, 2000


def log_rate(x):
    """The true log intensity ``1 + 2 sinc(x)``, Tipping's ``sinc(x) = sin(x) / x``."""
    from rvm_ppl.datasets.loaders import sinc

    return 1.0 + 2.0 * sinc(x)


def counts(n, seed):
    """``n`` inputs uniform on [-10, 10] and their Poisson counts."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(-10, 10, n)
    return x, rng.poisson(np.exp(log_rate(x)))


# -- fits ---------------------------------------------------------------------------------


class _Fit:
    """One method's fit: the log rate's predictive at new inputs, and what the tables report."""

    def __init__(self, method, x, y, seed):
        from rvm_ppl.kernels.kernel import RBF

        self.method, self.X, self.kernel = method, x[:, None], RBF(gamma=GAMMA)
        start = time.perf_counter()
        if method == "evidence":
            self._evidence(y)
        else:
            self._pymc(y, seed)
        self.info["seconds"] = time.perf_counter() - start

    def _evidence(self, y):
        from rvm_ppl.closed_form.poisson import fit_evidence_poisson
        from rvm_ppl.kernels.basis import kernel_basis

        basis = kernel_basis(self.kernel, self.X, bias=True)
        self.res = res = fit_evidence_poisson(basis, y)
        self.info = dict(nrv=int(np.sum(res.active > 0)), converged=bool(res.converged),
                         basis=type(basis).__name__, n_iter=int(res.n_iter),
                         log_evidence=float(res.log_evidence))

    def _pymc(self, y, seed):
        from rvm_ppl import build_model, fit_advi, fit_nuts
        from rvm_ppl.kernels.kernel import basis_labels, design_matrix

        labels = basis_labels(len(self.X))
        model = build_model(design_matrix(self.X, self.X, self.kernel), y, likelihood="poisson",
                            basis=labels)
        fitter = fit_nuts if self.method == "nuts" else fit_advi
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            self.idata = idata = fitter(model, random_seed=seed)
        kept = [str(b) for b in idata.posterior["w"].basis.values]
        self.support = np.array([labels.index(b) for b in kept])
        self.W = idata.posterior["w"].values.reshape(-1, len(kept))
        relevant = idata.relevance["relevant"].values
        rel_labels = [str(b) for b in idata.relevance.basis.values]
        a = idata.attrs
        self.info = dict(nrv=int(sum(r and b != "bias" for r, b in zip(relevant, rel_labels,
                                                                       strict=True))),
                         warnings=sorted({str(w.message)[:200] for w in caught
                                          if not issubclass(w.category, FutureWarning)}))
        if self.method == "nuts":
            stats = idata.sample_stats
            steps = stats["n_steps"].values if "n_steps" in stats else None
            self.info.update(
                divergences=int(a["n_divergences"]), max_rhat_log_alpha=a["max_rhat_log_alpha"],
                min_ess_log_alpha=a["min_ess_bulk_log_alpha"], max_rhat=a["max_rhat"],
                max_rhat_at=a["max_rhat_at"], min_ess=a["min_ess_bulk"],
                sampling_s=a["sampling_time_s"],
                steps=None if steps is None else float(np.mean(steps)))
        else:
            self.info.update(n_iter=int(a["n_iter"]), converged=bool(a["converged"]))

    def _columns(self, xt, idx):
        """Basis functions ``idx`` at ``xt``: 0 the bias, j the kernel on training point j - 1."""
        from rvm_ppl.kernels.kernel import design_matrix

        idx = np.asarray(idx, dtype=int)
        P = np.ones((len(xt), idx.size))
        kern = idx > 0
        P[:, kern] = design_matrix(xt[:, None], self.X[idx[kern] - 1], self.kernel, bias=False)
        return P

    def log_rate_mean(self, xt):
        """Posterior mean of the log rate at ``xt``."""
        from rvm_ppl.closed_form.poisson import log_rate_moments

        if self.method == "evidence":
            return log_rate_moments(self._columns(xt, self.res.active), self.res.mu,
                                    self.res.Sigma)[0]
        return self._columns(xt, self.support) @ self.W.mean(axis=0)

    def interval(self, xt):
        """``[q05, q95]`` of the predictive count at ``xt`` (shape (n, 2)) and the predictive's
        own probability of that interval (shape (n,))."""
        from rvm_ppl.closed_form.poisson import (
            poisson_mixture_pmf,
            poisson_mixture_quantiles,
            predict_count_pmf,
            predict_count_quantiles,
        )

        if self.method == "evidence":
            P = self._columns(xt, self.res.active)
            qs = predict_count_quantiles(P, self.res.mu, self.res.Sigma, Q)
            pmf = predict_count_pmf(P, self.res.mu, self.res.Sigma, np.arange(qs.max() + 1))
        else:  # one Poisson per posterior draw, equally weighted
            lam = np.exp(self._columns(xt, self.support) @ self.W.T)  # (n, draws)
            weights = np.full(lam.shape[1], 1.0 / lam.shape[1])
            qs = poisson_mixture_quantiles(lam, weights, Q)
            pmf = poisson_mixture_pmf(lam, weights, np.arange(qs.max() + 1))
        cdf = np.cumsum(pmf, axis=1)
        rows = np.arange(len(xt))
        below = np.where(qs[:, 0] > 0, cdf[rows, np.maximum(qs[:, 0] - 1, 0)], 0.0)
        return qs, cdf[rows, qs[:, 1]] - below


# -- workers --------------------------------------------------------------------------------


def _synthetic_worker(method, n, seeds):
    out = []
    for seed in seeds:
        x, y = counts(n, seed)
        fit = _Fit(method, x, y, seed)
        rms = float(np.sqrt(np.mean((fit.log_rate_mean(GRID) - log_rate(GRID)) ** 2)))
        out.append(dict(seed=seed, rms=rms, **fit.info))
    return out


def _calibration_worker(method, n, seeds):
    out = []
    for seed in seeds:
        x, y = counts(n, seed)
        xt, yt = counts(N_HELD_OUT, HELD_OUT_SEED + seed)
        if method == "truth":  # the true rate's own Poisson interval
            from scipy import stats

            lam = np.exp(log_rate(xt))
            qs = np.stack([stats.poisson.ppf(p, lam) for p in Q], axis=1).astype(int)
            nominal = stats.poisson.cdf(qs[:, 1], lam) - stats.poisson.cdf(qs[:, 0] - 1, lam)
            info = {}
        else:
            fit = _Fit(method, x, y, seed)
            start = time.perf_counter()
            qs, nominal = fit.interval(xt)
            info = dict(fit.info, interval_s=time.perf_counter() - start)
        inside = (qs[:, 0] <= yt) & (yt <= qs[:, 1])
        out.append(dict(seed=seed, coverage=float(inside.mean()),
                        nominal=float(np.mean(nominal)),
                        below=float(np.mean(yt < qs[:, 0])), above=float(np.mean(yt > qs[:, 1])),
                        width=float(np.mean(qs[:, 1] - qs[:, 0])), **info))
    return out


def _poisson_lpd(y, mu):
    from scipy import stats

    return float(np.mean(stats.poisson.logpmf(y, mu)))


def _real_worker(gammas, ridge_alphas):
    from sklearn.ensemble import HistGradientBoostingRegressor
    from sklearn.linear_model import PoissonRegressor
    from sklearn.metrics import mean_poisson_deviance
    from sklearn.model_selection import GridSearchCV, KFold
    from statsmodels.datasets import randhie

    from rvm_ppl.closed_form.poisson import (
        fit_evidence_poisson,
        log_rate_moments,
        predict_count_mean,
        predict_count_pmf,
    )
    from rvm_ppl.kernels.basis import kernel_basis
    from rvm_ppl.kernels.kernel import RBF, design_matrix

    data = randhie.load_pandas()
    X_all = data.exog.to_numpy(dtype=float)
    y_all = data.endog.to_numpy(dtype=float)
    perm = np.random.default_rng(0).permutation(len(y_all))
    test, train = perm[:REAL_TEST], perm[REAL_TEST:REAL_TEST + REAL_TRAIN]
    mean, sd = X_all[train].mean(axis=0), X_all[train].std(axis=0)
    X, Xt = (X_all[train] - mean) / sd, (X_all[test] - mean) / sd
    y, yt = y_all[train], y_all[test]
    folds = list(KFold(5, shuffle=True, random_state=0).split(X))

    def evidence(Xa, ya, gamma):
        kernel = RBF(gamma=gamma)
        start = time.perf_counter()
        basis = kernel_basis(kernel, Xa, bias=True)
        res = fit_evidence_poisson(basis, ya)
        seconds = time.perf_counter() - start
        act = res.active
        kern = act[act > 0] - 1

        def columns(Z):
            P = np.ones((len(Z), act.size))
            P[:, act > 0] = design_matrix(Z, Xa[kern], kernel, bias=False)
            return P

        return res, columns, seconds, type(basis).__name__

    cv = []
    start = time.perf_counter()
    for gamma in gammas:
        dev, nrv = [], []
        for tr, va in folds:
            res, columns, _, _ = evidence(X[tr], y[tr], gamma)
            mu_va = predict_count_mean(columns(X[va]), res.mu, res.Sigma)
            dev.append(mean_poisson_deviance(y[va], mu_va))
            nrv.append(int(np.sum(res.active > 0)))
        cv.append(dict(gamma=gamma, deviance=float(np.mean(dev)),
                       se=float(np.std(dev, ddof=1) / np.sqrt(len(dev))),
                       nrv=float(np.median(nrv))))
    cv_seconds = time.perf_counter() - start
    best = min(cv, key=lambda r: r["deviance"])["gamma"]

    rows = []
    res, columns, seconds, basis = evidence(X, y, best)
    P = columns(Xt)
    mu_t = predict_count_mean(P, res.mu, res.Sigma)
    pmf = predict_count_pmf(P, res.mu, res.Sigma, np.arange(int(yt.max()) + 1))
    lpd = float(np.mean(np.log(pmf[np.arange(len(yt)), yt.astype(int)])))
    m, s2 = log_rate_moments(P, res.mu, res.Sigma)
    rows.append(dict(model="evidence", deviance=mean_poisson_deviance(yt, mu_t), lpd=lpd,
                     seconds=seconds, size=int(np.sum(res.active > 0)), basis=basis,
                     converged=bool(res.converged), max_sd_log_rate=float(np.sqrt(s2.max()))))

    kernel = RBF(gamma=best)
    K, Kt = kernel(X, X), kernel(Xt, X)
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        search = GridSearchCV(PoissonRegressor(max_iter=1000), {"alpha": list(ridge_alphas)},
                              scoring="neg_mean_poisson_deviance", cv=folds).fit(K, y)
    search_s = time.perf_counter() - start
    start = time.perf_counter()
    ridge = PoissonRegressor(alpha=search.best_params_["alpha"], max_iter=1000).fit(K, y)
    seconds = time.perf_counter() - start
    mu_t = ridge.predict(Kt)
    rows.append(dict(model="PoissonRegressor", deviance=mean_poisson_deviance(yt, mu_t),
                     lpd=_poisson_lpd(yt, mu_t), seconds=seconds, size=K.shape[1],
                     alpha=search.best_params_["alpha"], search_s=search_s,
                     cv=[float(-s) for s in search.cv_results_["mean_test_score"]],
                     warnings=sorted({str(w.message)[:200] for w in caught})))

    start = time.perf_counter()
    hgb = HistGradientBoostingRegressor(loss="poisson", random_state=0).fit(X, y)
    seconds = time.perf_counter() - start
    mu_t = hgb.predict(Xt)
    rows.append(dict(model="HistGradientBoostingRegressor",
                     deviance=mean_poisson_deviance(yt, mu_t),
                     lpd=_poisson_lpd(yt, mu_t), seconds=seconds, size=int(hgb.n_iter_)))

    mu_t = np.full(len(yt), y.mean())
    rows.append(dict(model="constant (training mean)", deviance=mean_poisson_deviance(yt, mu_t),
                     lpd=_poisson_lpd(yt, mu_t), seconds=0.0, size=0))
    describe = dict(n_rows=len(y_all), covariates=list(data.exog.columns),
                    target=str(data.endog.name), train_mean=float(y.mean()),
                    train_var=float(y.var()), test_mean=float(yt.mean()),
                    zeros=float(np.mean(y == 0)), max_count=int(y_all.max()),
                    dispersion_test=float(np.var(yt, ddof=1) / yt.mean()))
    return dict(cv=cv, cv_seconds=cv_seconds, gamma=best, rows=rows, data=describe)


def _worker(args):
    part, *rest = args
    if part == "real":
        gammas, alphas = json.loads(rest[0]), json.loads(rest[1])
        print(json.dumps(_real_worker(gammas, alphas), default=float))
        return
    method, n, seeds = rest[0], int(rest[1]), [int(s) for s in rest[2:]]
    run = _synthetic_worker if part == "synthetic" else _calibration_worker
    print(json.dumps({"runs": run(method, n, seeds)}, default=float))


# -- parts ------------------------------------------------------------------------------


def _med(values, fmt):
    v = np.asarray(values, dtype=float)
    return fmt.format(np.median(v)), f"{fmt.format(v.min())}-{fmt.format(v.max())}"


def _runs(part, configs, seeds, timeout):
    """Fit each (method, N) of ``configs`` once per seed, every fit in a process of its own.

    Yields ``(method, N, runs, errors)``: the seeds' results (None if every seed
    failed) and ``"seed s: reason"`` for each seed that failed (also a note).
    """
    for method, n in configs:
        runs, errors = [], []
        for seed in seeds:
            res, err = run_worker(__file__, [part, method, n, seed], one_thread=True,
                                  timeout=timeout)
            print(f"# {part} {method} N={n} seed {seed}: {err or 'done'}", flush=True)
            if res is None:
                errors.append(f"seed {seed}: {err}")
            else:
                runs += res["runs"]
        if errors:
            record_note(f"{part}, {method}, N = {n}: " + "; ".join(errors))
        yield method, n, runs or None, "; ".join(errors)


def part_synthetic(args):
    configs = [("evidence", n) for n in args.sizes if "evidence" in args.methods]
    configs += [("advi", n) for n in args.advi_sizes if "advi" in args.methods]
    configs += [("nuts", n) for n in args.nuts_sizes if "nuts" in args.methods]
    rows, nuts_rows, advi_rows, raw = [], [], [], {}
    for method, n, runs, err in _runs("synthetic", configs, args.seeds, args.timeout):
        if runs is None:
            rows.append((method, n, len(args.seeds), err, "", "", "", "", ""))
            continue
        raw[f"{method}-{n}"] = runs
        rows.append((method, n, len(runs), *_med([r["rms"] for r in runs], "{:.3f}"),
                     *_med([r["nrv"] for r in runs], "{:.0f}"),
                     *_med([r["seconds"] for r in runs], "{:.2f}")))
        for r in runs:
            if method == "nuts":
                nuts_rows.append((n, r["seed"], r["divergences"], f"{r['max_rhat_log_alpha']:.3f}",
                                  f"{r['min_ess_log_alpha']:.0f}", f"{r['max_rhat']:.3f}",
                                  r["max_rhat_at"], f"{r['min_ess']:.0f}",
                                  f"{r['steps']:.0f}" if r["steps"] is not None else "",
                                  f"{r['sampling_s']:.1f}", f"{r['seconds']:.1f}"))
            elif method == "advi":
                advi_rows.append((n, r["seed"], r["n_iter"], "yes" if r["converged"] else "no",
                                  r["nrv"], f"{r['seconds']:.1f}"))
    record_data("runs", raw)
    heading("Synthetic counts: log rate 1 + 2 sinc(x), x uniform on [-10, 10], RBF gamma = 1/9; "
            f"median and range over seeds {', '.join(map(str, args.seeds))}")
    print_table(["method", "N", "seeds", "RMS of the log rate (median)", "RMS range",
                 "relevance vectors (median)", "relevance vectors range", "fit s (median)",
                 "fit s range"], rows)
    if nuts_rows:
        heading("Synthetic counts: NUTS with the package defaults (4 chains x (1000 + 1000)), "
                "per seed")
        print_table(["N", "seed", "divergences", "max r-hat log alpha", "min bulk ESS log alpha",
                     "max r-hat (all)", "at", "min bulk ESS (all)", "steps / draw", "sampling s",
                     "fit s"], nuts_rows)
    if advi_rows:
        heading("Synthetic counts: ADVI with the package defaults, per seed")
        print_table(["N", "seed", "iterations", "converged", "relevance vectors", "fit s"],
                    advi_rows)
    record_note("Relevance vectors are kernel bases (the bias not counted) with alpha finite "
                "(evidence) or E[gamma_m] > 1/2 (advi, nuts). Every fit ran in a process of its "
                "own, the imports before the clock, so advi's and nuts's fit times include "
                "compiling the model (nutpie compiles its Numba code in every process).")


def part_calibration(args):
    configs = [("truth", n) for n in args.calibration_sizes[:1]]
    configs += [("evidence", n) for n in args.calibration_sizes]
    configs += [(m, n) for m in ("advi", "nuts") if m in args.methods
                for n in args.calibration_pymc_sizes]
    rows, raw = [], {}
    for method, n, runs, err in _calibration_runs(configs, args):
        if runs is None:
            rows.append((method, n, "", err, "", "", "", "", ""))
            continue
        raw[f"{method}-{n}"] = runs
        cov = np.array([r["coverage"] for r in runs])
        label = "truth (Poisson at the true rate)" if method == "truth" else method
        rows.append((label, "-" if method == "truth" else n, len(runs),
                     " ".join(f"{c:.3f}" for c in cov), f"{cov.mean():.3f}",
                     f"{cov.min():.3f}-{cov.max():.3f}",
                     f"{np.mean([r['nominal'] for r in runs]):.3f}",
                     f"{np.mean([r['below'] for r in runs]):.3f} / "
                     f"{np.mean([r['above'] for r in runs]):.3f}",
                     f"{np.mean([r['width'] for r in runs]):.2f}"))
    record_data("runs", raw)
    heading(f"Calibration: coverage of central 90 % predictive intervals [q05, q95] of "
            f"{N_HELD_OUT} held-out counts (q_p = smallest k with F(k) >= p); "
            "nominal = P(q05 <= Y <= q95) under the method's own predictive")
    print_table(["method", "N", "seeds", "coverage per seed", "mean coverage", "range",
                 "nominal (mean)", "below / above (mean)", "mean width q95 - q05"], rows)
    record_note("The issue's target for the coverage is 0.87-0.95. Every seed is shown; none "
                "was left out.")


def _calibration_runs(configs, args):
    """The evidence fits and the truth over the calibration seeds; advi and nuts over --seeds."""
    for method, n in configs:
        seeds = args.calibration_seeds if method in ("truth", "evidence") else args.seeds
        yield from _runs("calibration", [(method, n)], seeds, args.timeout)


def part_real(args):
    worker_args = ["real", json.dumps(args.gammas), json.dumps(args.ridge_alphas)]
    res, err = run_worker(__file__, worker_args, one_thread=True, timeout=args.timeout)
    if res is None:
        raise SystemExit(f"real: {err}")
    record_data("real", res)
    d = res["data"]
    heading(f"randhie (mdvis, doctor visits): 5-fold CV of the evidence fit's held-out mean "
            f"Poisson deviance over the RBF gamma ({REAL_TRAIN} training rows, 9 standardised "
            "covariates)")
    print_table(["gamma", "CV mean Poisson deviance", "se", "relevance vectors (median over folds)",
                 "chosen"],
                [(r["gamma"], f"{r['deviance']:.4f}", f"{r['se']:.4f}", f"{r['nrv']:.0f}",
                  "yes" if r["gamma"] == res["gamma"] else "") for r in res["cv"]])
    rows = []
    for r in res["rows"]:
        size = {"evidence": f"{r['size']} relevance vectors",
                "PoissonRegressor": f"{r['size']} kernel features, alpha = {r.get('alpha')}",
                "HistGradientBoostingRegressor": f"{r['size']} trees"}.get(r["model"], "-")
        rows.append((r["model"], f"{r['deviance']:.4f}", f"{r['lpd']:.4f}", f"{r['seconds']:.2f}",
                     size))
    heading(f"randhie (mdvis): {REAL_TEST} test rows, {REAL_TRAIN} training rows, RBF gamma = "
            f"{res['gamma']} (5-fold CV of the evidence fit)")
    print_table(["model", "test mean Poisson deviance", "test mean log predictive density",
                 "fit s", "size"], rows)
    record_note(
        f"randhie: {d['n_rows']} rows, target {d['target']}, "
        f"covariates {', '.join(d['covariates'])}; "
        f"training mean {d['train_mean']:.2f}, variance {d['train_var']:.1f} "
        f"(over-dispersed: test variance / mean {d['dispersion_test']:.1f}), "
        f"{100 * d['zeros']:.0f} % zeros. The CV of the RBF width took {res['cv_seconds']:.0f} s; "
        f"PoissonRegressor's CV of alpha {res['rows'][1]['search_s']:.0f} s; fit s is the final "
        "fit on the training rows.")


PARTS = {"synthetic": part_synthetic, "calibration": part_calibration, "real": part_real}


def _loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--part", choices=[*PARTS, "all"], default="all")
    p.add_argument("--methods", nargs="+", default=["evidence", "advi", "nuts"])
    p.add_argument("--sizes", type=int, nargs="+", default=[100, 300, 1000, 3000, 10000],
                   help="N of the evidence fits (synthetic)")
    p.add_argument("--advi-sizes", type=int, nargs="+", default=[100, 500],
                   help="N of the advi fits (synthetic)")
    p.add_argument("--nuts-sizes", type=int, nargs="+", default=[100, 500],
                   help="N of the nuts fits (synthetic)")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2],
                   help="seeds of the synthetic part and of advi and nuts in the calibration part")
    p.add_argument("--calibration-sizes", type=int, nargs="+", default=[100, 300, 1000])
    p.add_argument("--calibration-pymc-sizes", type=int, nargs="+", default=[100])
    p.add_argument("--calibration-seeds", type=int, nargs="+", default=list(range(10)),
                   help="seeds of the evidence fits in the calibration part")
    p.add_argument("--gammas", type=float, nargs="+", default=[1e-4, 3e-4, 1e-3, 3e-3, 0.01, 0.03, 0.1, 0.3],
                   help="RBF gamma grid of the real part's CV")
    p.add_argument("--ridge-alphas", type=float, nargs="+",
                   default=[1e-4, 1e-3, 1e-2, 1e-1],
                   help="PoissonRegressor's alpha grid (real part)")
    p.add_argument("--timeout", type=int, default=7200, help="seconds per worker")
    p.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    add_results_argument(p)
    args = p.parse_args()
    if args.worker:
        _worker(args.worker)
        return
    parts = list(PARTS) if args.part == "all" else [args.part]
    for part in parts:
        results_recorder(results_name(__file__, part), notes=args.note)
        load = _loadavg()
        PARTS[part](args)
        record_note(f"Fit times are wall-clock seconds on a machine shared with other jobs; "
                    f"load average (1, 5, 15 min) {load} at the start and {_loadavg()} at the end.")
        write_results(args.out if len(parts) == 1 else None)


if __name__ == "__main__":
    warnings.simplefilter("ignore", FutureWarning)
    main()
