"""Did the approximations work? The diagnostics of rvm_ppl.output.diagnostics on sinc and Ripley.

    python benchmarks/bench_diagnostics.py                 # noisy sinc, N = 100, seed 0
    python benchmarks/bench_diagnostics.py --n 100 --seeds 0 1 2 --reps 2
    python benchmarks/bench_diagnostics.py --problem ripley --seeds 0 1

``sinc``: noisy sinc (``make_sinc(N, random_state=seed)``), ``RVR(gamma=1/9,
random_state=seed)``; test data ``make_sinc(1000, random_state=seed + 1)``.
``ripley``: ``N`` of the 250 training points of Ripley's synthetic data
(``load_ripley``; the subset drawn by ``default_rng(seed)``, as the demo
does), ``RVC(gamma=4, random_state=seed)``; test data its 1000 test points.
All four methods fit one model, the demo's comparison hyperprior
(``rvm_ppl.demo.COMPARED``: Gamma(1e-6, 1e-6) on alpha and beta for sinc,
Gamma(3, 2) on alpha for Ripley; the evidence fit is then type-II MAP), with
the estimator's other defaults (4 chains x 1000 draws for nuts, 1000 draws
from every closed-form posterior). A fit of another model would be an error
(``ModelMismatchWarning``).

Tables, per seed:

1. ``summary_table``: fit time (min over ``--reps`` fits of evidence and vb;
   advi and nuts once, their ``wall_time_s``), Pareto k-hat of vb and advi,
   W1 to NUTS of log10 alpha (median over the bases each method keeps) and
   log10 beta, HDI coverage, bases pruned, elpd_loo +- se, LOO's k > 0.7,
   held-out log predictive density, NUTS diagnostics.
2. k-hat of vb and advi for several numbers of draws from q and seeds of
   those draws, with the effective sample size of the smoothed weights; for
   vb also on the bases it kept only (``bases="kept"``).
3. What PSIS changes: q's mean of log beta (regression) and of log alpha on
   the bases the evidence fit keeps, the PSIS-corrected mean, and NUTS's
   mean. For the classifier both means of log alpha are the model's
   ``E[log alpha | w]`` averaged over q's draws of ``w``, unweighted and
   PSIS-weighted (:func:`rvm_ppl.output.diagnostics.pareto_khat`).
4. ``compare_predictive`` (regression): predictive mean and sd at the test
   inputs against NUTS's.

Times were taken on a shared 2-core machine with one BLAS thread.
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402

import numpy as np  # noqa: E402

METHODS = ("evidence", "vb", "advi", "nuts")


def _fmt(v, digits=4):
    if isinstance(v, str):
        return v
    if v is None or (isinstance(v, float) and np.isnan(v)):
        return "-"
    if isinstance(v, (int, np.integer)) or float(v).is_integer() and abs(v) < 1e6:
        return str(int(v)) if np.isfinite(v) else str(v)
    return f"{v:.{digits}g}"


def main():
    from _common import add_results_argument, heading, print_table, results_name, results_recorder, write_results

    from rvm_ppl import RVC, RVR
    from rvm_ppl.datasets.loaders import load_ripley, make_sinc
    from rvm_ppl.demo import COMPARED
    from rvm_ppl.output.diagnostics import (ModelMismatchWarning, compare_predictive, pareto_khat,
                                            summary_table)

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--problem", choices=("sinc", "ripley"), default="sinc")
    ap.add_argument("--n", type=int, default=100)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--reps", type=int, default=2)
    add_results_argument(ap)
    args = ap.parse_args()
    results_recorder(results_name(__file__, args.problem if args.problem != "sinc" else None), notes=args.note)
    warnings.simplefilter("ignore")
    warnings.simplefilter("error", ModelMismatchWarning)  # one model per comparison
    regression = args.problem == "sinc"
    for seed in args.seeds:
        if regression:
            X, y = make_sinc(args.n, random_state=seed)
            Xt, yt = make_sinc(1000, random_state=seed + 1)
            title = f"noisy sinc, N = {args.n}, seed {seed}"
        else:
            X, y, Xt, yt = load_ripley()
            idx = np.random.default_rng(seed).choice(len(y), args.n, replace=False)
            X, y = X[idx], y[idx]
            title = f"Ripley, {args.n} training points, seed {seed}"
        fits, times = {}, {}
        for m in METHODS:
            best = np.inf
            for _ in range(args.reps if m in ("evidence", "vb") else 1):
                t0 = time.perf_counter()
                est = (RVR(gamma=1 / 9, random_state=seed, **COMPARED["sinc"]) if regression
                       else RVC(gamma=4.0, random_state=seed, progressbar=False,
                                **COMPARED["ripley"]))
                est.fit(X, y, method=m)
                best = min(best, time.perf_counter() - t0)
            fits[m], times[m] = est, best
        heading(title)
        table = summary_table(fits, X_test=Xt, y_test=yt, fit_times=times)
        cols = list(table.columns)
        print_table(["method", *cols], [[m, *(_fmt(table.loc[m, c]) for c in cols)]
                                         for m in table.index])
        rows = []
        for m, bases in (("vb", "all"), ("vb", "kept"), ("advi", "all")):
            for S in (1000, 4000, 16000):
                for s in (0, 1):
                    r = pareto_khat(fits[m], bases=bases, n_draws=S, random_state=s, warn=False)
                    rows.append([m, bases, S, s, f"{r.khat:.2f}", r.diagnosis, f"{r.ess:.1f}"])
        print_table(["method", "bases", "draws from q", "seed", "k-hat", "diagnosis",
                     "ESS of weights"], rows, title=f"{title}: Pareto k-hat of the variational fits")
        nuts = fits["nuts"].idata_
        # The relevance vectors of the evidence fit (NUTS's own rule, E[gamma] > 1/2,
        # may select none: its weight posterior spreads over correlated bases).
        rel = np.asarray(fits["evidence"].idata_.relevance["in_model"].values)
        labels = [str(b) for b in nuts.relevance["basis"].values]
        la_nuts = np.log(nuts.posterior["alpha"].values).reshape(-1, len(labels)).mean(axis=0)
        rows = []
        for m in ("vb", "advi"):
            r = pareto_khat(fits[m], n_draws=4000, random_state=0, warn=False)
            if regression:
                lb_nuts = float(np.log(nuts.posterior["beta"].values).mean())
                rows.append([m, "log beta", _fmt(r.q_mean["log_beta"], 4),
                             _fmt(r.psis_mean["log_beta"], 4), _fmt(lb_nuts, 4)])
            for j in np.flatnonzero(rel):
                rows.append([m, f"log alpha [{labels[j]}]", _fmt(r.q_mean["log_alpha"][j]),
                             _fmt(r.psis_mean["log_alpha"][j]), _fmt(la_nuts[j])])
            d_q = np.abs(r.q_mean["log_alpha"] - la_nuts)
            d_p = np.abs(r.psis_mean["log_alpha"] - la_nuts)
            rows.append([m, "median over all bases of |mean - nuts|", _fmt(np.median(d_q)),
                         _fmt(np.median(d_p)), "0"])
        print_table(["method", "parameter (natural log)", "q mean", "PSIS mean", "NUTS mean"],
                    rows, title=f"{title}: q and PSIS-corrected means against NUTS")
        if not regression:
            continue
        pred = compare_predictive(fits, Xt)
        print_table(["method", *pred.columns],
                    [[m, *(_fmt(v) for v in pred.loc[m])] for m in pred.index],
                    title=f"{title}: compare_predictive")
    write_results(args.out)


if __name__ == "__main__":
    main()
