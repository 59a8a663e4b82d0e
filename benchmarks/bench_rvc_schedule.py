"""Frozen-curvature vs exact schedule of the classifier's evidence fit, against SparseBayes's C++ port.

    python bench_rvc_schedule.py                                  # subsets + scaling
    python bench_rvc_schedule.py --subsets 50 --sizes 250 1000 5000 --seeds 3 --out r.json

Part 1 (subsets): ``--subsets`` random 100-point subsets of Ripley's 250 training
points, subset ``s`` = ``default_rng(s).choice(250, 100, replace=False)``
(s = 0..subsets-1; no subset is chosen or dropped after the fact), RBF kernel
``exp(-gamma ||x - x'||^2)`` with gamma = 4 (r = 0.5) plus a bias
(``RVC(gamma=4)``), tested on Ripley's 1000 test points. Schedules of
``fit_evidence_bernoulli``:

    frozen   frozen_steps=True  (B frozen for up to FROZEN_MAX steps between modes)
    exact    frozen_steps=False (mode re-found after every action, SparseBayes's
             PosteriorModeFrequency = 1)
    default  what RVC does by default (frozen_steps=None if the installed
             rvm_ppl has the size rule, otherwise its default)

and fastrvm (``fastrvm.RVC(gamma=4)``, kernel ``exp(-gamma ||x - x'||^2)``
through sklearn's pairwise_kernels, as in benchmarks/bench_classification.py:
"fastrvm" without a bias, its default and the peer quoted in the bug report;
"fastrvm+bias" with ``fit_intercept=True``, the same basis as ours, whose
``scores_[-1]`` is then a Laplace log evidence over the same model space).
Rows "exact, no bias" / "frozen, no bias" fit ``RVC(gamma=4,
fit_intercept=False)``: the same model as fastrvm's default, whose evidence
(SparseBayes's logML, ``scores_[-1]``) is then compared with the no-bias exact
schedule's. fastrvm+bias's ``scores_[-1]`` is shown against our exact fit with a
bias but is ~14 nats lower on every subset, so fastrvm evidently handles the bias
column differently: read that column as not comparable. The row "best of
frozen/exact (post hoc)" is not a schedule of the package: per subset, the
higher-evidence of the two fits (selected by evidence only), timed as both.

The log evidence compared between our schedules is the Laplace log evidence
``log_evidence_`` of the fitted model (same basis, same data): the table gives
the difference to the exact schedule's, and the number of subsets on which it is
at least the exact schedule's minus 0.01 nats. Test errors are compared
subset by subset with fastrvm (mean difference, its standard error, and
wins / ties / losses).

Part 2 (scaling): fit time of the schedules on ``make_ripley(N, random_state=s)``
(s = 1..seeds) at each ``--sizes`` N, one BLAS thread, in this process.

Prints markdown tables and writes them, with everything per subset, the
machine, date, versions and git commit, to benchmarks/results/rvc_schedule.json
(or ``--out PATH``).
"""

from __future__ import annotations

import os

for _v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse
import functools
import inspect
import time
import warnings

import numpy as np
from _common import (add_results_argument, heading, print_table, record_data, results_name, results_recorder,
                     write_results)

GAMMA = 4.0
TOL = 0.01  # nats: "at least the exact schedule's (within 0.01 nats)"


class _Schedule:
    """Run RVC with fit_evidence_bernoulli forced to one schedule; keep the raw result."""

    def __init__(self, frozen_steps):
        import rvm_ppl.inference.methods as inf
        from rvm_ppl.closed_form.bernoulli import fit_evidence_bernoulli

        self.inf, self.orig, self.frozen_steps = inf, fit_evidence_bernoulli, frozen_steps
        self.last = None

    def __enter__(self):
        orig = self.orig
        kw = {} if self.frozen_steps == "default" else {"frozen_steps": self.frozen_steps}

        @functools.wraps(orig)
        def wrapped(*a, **k):
            self.last = orig(*a, **{**k, **kw})
            return self.last

        self.inf.fit_evidence_bernoulli = wrapped
        return self

    def __exit__(self, *exc):
        self.inf.fit_evidence_bernoulli = self.orig


SCHEDULES = {"frozen": True, "exact": False, "default": "default"}


def _fit_ours(schedule, X, y, Xt, yt, **kw):
    from rvm_ppl import RVC

    with _Schedule(SCHEDULES[schedule]) as s:
        t0 = time.perf_counter()
        m = RVC(gamma=GAMMA, **kw).fit(X, y)
        sec = time.perf_counter() - t0
    r = s.last
    return {"log_evidence": float(np.ravel(m.log_evidence_)[0]), "error": float(np.mean(m.predict(Xt) != yt)),
            "seconds": sec, "nrv": int(len(r.active)), "modes": int(r.counts["modes"]),
            "n_iter": int(r.n_iter), "cycling": int(r.counts["cycling"])}


def _fit_fastrvm(X, y, Xt, yt, bias):
    from fastrvm import RVC as FastRVC

    t0 = time.perf_counter()
    m = FastRVC(gamma=GAMMA, fit_intercept=bias).fit(X, y)
    sec = time.perf_counter() - t0
    return {"log_evidence": float(m.scores_[-1]), "error": float(np.mean(m.predict(Xt) != yt)),
            "seconds": sec, "nrv": int(np.ravel(m.n_relevance_)[0])}


def part_subsets(k):
    from rvm_ppl.datasets import load_ripley

    X, y, Xt, yt = load_ripley()
    subsets = [np.random.default_rng(s).choice(len(y), 100, replace=False) for s in range(k)]
    runs = {"frozen": {}, "exact": {}, "default": {}, "exact, no bias": {"fit_intercept": False},
            "frozen, no bias": {"fit_intercept": False}}
    res = {name: [] for name in [*runs, "fastrvm", "fastrvm+bias"]}
    for idx in subsets:
        Xs, ys = X[idx], y[idx]
        for name, kw in runs.items():
            res[name].append(_fit_ours(name.split(",")[0], Xs, ys, Xt, yt, **kw))
        res["fastrvm"].append(_fit_fastrvm(Xs, ys, Xt, yt, False))
        res["fastrvm+bias"].append(_fit_fastrvm(Xs, ys, Xt, yt, True))

    # Not a schedule of the package: per subset, the higher-evidence of the two
    # runs (chosen by evidence only), timed as both.
    best = [dict(f if f["log_evidence"] > e["log_evidence"] else e, seconds=f["seconds"] + e["seconds"])
            for f, e in zip(res["frozen"], res["exact"])]
    res = {**{k: v for k, v in res.items() if not k.startswith("fastrvm")},
           "best of frozen/exact (post hoc)": best, "fastrvm": res["fastrvm"], "fastrvm+bias": res["fastrvm+bias"]}

    def col(name, key):
        return np.array([r[key] for r in res[name]])

    err_fast = col("fastrvm", "error")
    rows, summary = [], {}
    for name in res:
        le, err, sec = col(name, "log_evidence"), col(name, "error"), col(name, "seconds")
        # Evidence vs the exact schedule: only for the same model (same basis).
        ref = "exact, no bias" if "no bias" in name or name == "fastrvm" else "exact"
        if ref is not None and name != ref:
            d = le - col(ref, "log_evidence")
            ev = (f"{d.mean():+.4f}", f"{np.median(d):+.4f}", f"{d.min():+.3f}", f"{np.sum(d >= -TOL)} / {len(d)}")
        else:
            d = None
            ev = ("0", "0", "0", f"{len(le)} / {len(le)}") if name == ref else ("-",) * 4
        dd = err - err_fast
        se = dd.std(ddof=1) / np.sqrt(len(dd)) if len(dd) > 1 else 0.0
        pair = (f"{100 * dd.mean():+.3f} ± {100 * se:.3f}", f"{np.sum(dd < 0)}/{np.sum(dd == 0)}/{np.sum(dd > 0)}")
        rows.append((name, *ev, f"{100 * err.mean():.2f}", f"{100 * err[:10].mean():.2f}", *pair,
                     f"{1000 * np.median(sec):.1f}", f"{np.mean(col(name, 'nrv')):.2f}"))
        summary[name] = {
            "mean_log_evidence": float(le.mean()),
            "log_evidence_minus_exact": None if d is None else {"mean": float(d.mean()), "median": float(np.median(d)),
                                                               "min": float(d.min()), "max": float(d.max()),
                                                               "n_at_least_exact_minus_tol": int(np.sum(d >= -TOL))},
            "mean_test_error": float(err.mean()), "mean_test_error_first10": float(err[:10].mean()),
            "paired_error_minus_fastrvm": {"mean": float(dd.mean()), "se": float(se), "wins": int(np.sum(dd < 0)),
                                           "ties": int(np.sum(dd == 0)), "losses": int(np.sum(dd > 0))},
            "median_fit_seconds": float(np.median(sec)),
        }
    heading(f"{k} random 100-point Ripley subsets (subset s = default_rng(s).choice(250, 100)), "
            f"RBF gamma = {GAMMA}, 1000 test points")
    print_table(["fit", "log ev − exact: mean", "median", "min", f"≥ exact − {TOL}", "test error %",
            "first 10 %", "error − fastrvm (paired, %, ± s.e.)", "W/T/L vs fastrvm", "median fit ms", "RVs"], rows)
    return {"subsets": [list(map(int, i)) for i in subsets], "per_subset": res, "summary": summary}


def part_scale(sizes, seeds):
    from rvm_ppl.datasets import make_ripley

    Xt, yt = make_ripley(5000, random_state=0)
    out, rows = [], []
    for n in sizes:
        for name in ("frozen", "exact", "default"):
            recs = []
            for s in range(1, seeds + 1):
                X, y = make_ripley(n, random_state=s)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    r = _fit_ours(name, X, y, Xt, yt)
                recs.append({"seed": s, **r})
                print(f"# N={n} seed={s} {name}: {r['seconds']:.3f} s, log ev {r['log_evidence']:.3f}, "
                      f"modes {r['modes']}", flush=True)
            sec = np.array([r["seconds"] for r in recs])
            out.append({"N": n, "schedule": name, "runs": recs, "median_seconds": float(np.median(sec))})
            rows.append((n, name, f"{np.median(sec):.3f}", f"{sec.min():.3f}-{sec.max():.3f}",
                         f"{np.median([r['modes'] for r in recs]):.0f}",
                         " ".join(f"{r['log_evidence']:.2f}" for r in recs)))
    heading(f"Fit time on make_ripley(N, random_state=1..{seeds}), one BLAS thread", before="\n")
    print_table(["N", "schedule", "median s", "range s", "median modes", "log evidence per seed"], rows)
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--subsets", type=int, default=50)
    p.add_argument("--sizes", type=int, nargs="*", default=[100, 250, 500, 1000, 2000, 5000])
    p.add_argument("--seeds", type=int, default=3, help="data sets per size in the scaling part")
    add_results_argument(p)
    args = p.parse_args()
    warnings.simplefilter("ignore", FutureWarning)
    from rvm_ppl.closed_form import bernoulli as el

    results_recorder(results_name(__file__), notes=args.note)
    record_data("settings", {"gamma": GAMMA, "tol_nats": TOL, "FROZEN_MAX": el.FROZEN_MAX,
                             "EXACT_SCHEDULE_MAX": getattr(el, "EXACT_SCHEDULE_MAX", None),
                             "frozen_steps_default": repr(inspect.signature(el.fit_evidence_bernoulli)
                                                          .parameters["frozen_steps"].default)})
    if args.subsets:
        record_data("ripley_subsets", part_subsets(args.subsets))
    if args.sizes:
        record_data("scaling", part_scale(args.sizes, args.seeds))
    write_results(args.out)


if __name__ == "__main__":
    main()
