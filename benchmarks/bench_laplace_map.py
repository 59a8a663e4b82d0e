"""The classifier's evidence fit under its hyperprior (type-II MAP) against NUTS on the same model.

    python benchmarks/bench_laplace_map.py                # 5 Ripley subsets
    python benchmarks/bench_laplace_map.py --subsets 2 --repeats 3

On the first ``--subsets`` 100-point Ripley subsets of ``tests/test_rvc.py``
(``default_rng(0).choice(250, 100)`` repeatedly), RBF gamma = 4 plus a bias,
tested on the 1000 test points, three fits of :class:`rvm_ppl.RVC`:

plain
    ``method="evidence"`` without hyperprior parameters: type-II maximum
    likelihood (the package default).
map
    ``method="evidence"`` with ``alpha_shape=3, alpha_rate=2``
    (:data:`rvm_ppl.BERNOULLI_PRIORS`): type-II MAP on the Laplace evidence.
nuts
    ``method="nuts"`` with the package defaults (the same Gamma(3, 2)
    hyperprior, 4 chains x (1000 tune + 1000 draws)).

Per basis function, the 1-Wasserstein distance between the MAP point and the
NUTS draws of ``log10 alpha`` is ``E|log10 alpha_nuts - log10 alpha_map|``
over the draws. A basis outside the MAP model has ``alpha = inf`` (infinite
distance); for those the table also gives the distance to the ``alpha`` that
basis would enter with, the maximiser of its share of the penalised objective
(:func:`rvm_ppl.closed_form.evidence.alpha_maximiser` at its final ``s, q``).
A second table, on three logistic problems with four candidates (a bias and
three inputs, N = 60, the problems of ``tests/test_laplace_hyperprior.py``),
gives how far the fixed point of the re-estimation with ``B`` frozen at the
mode (where the plain fit stops, and where the MAP fit stops before its
polish; ``MAP_STEPS = 0`` switches the polish off) lies from the stationary
point of the (penalised) Laplace evidence found by scipy's BFGS over
``log alpha`` of the same basis functions: the largest difference in
``log alpha`` and the objective below the optimum.

Fit times of the evidence fits are the median of ``--repeats`` runs, one BLAS
thread; NUTS's is one run. ``--cache PATH`` keeps the NUTS results (draws of
``log10 alpha``, test error, time, divergences) in an ``.npz`` file and
reuses them, so the evidence fits can be re-measured without re-sampling.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np
from _common import (
    add_results_argument,
    heading,
    print_table,
    record_data,
    results_name,
    results_recorder,
    write_results,
)

# The tests' oracle of the penalised Laplace evidence's maximum.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from reference import penalised_laplace_map  # noqa: E402

GAMMA = 4.0
PRIOR = {"alpha_shape": 3.0, "alpha_rate": 2.0}


def _subsets(k):
    from rvm_ppl.datasets.loaders import load_ripley

    X, y, Xt, yt = load_ripley()
    rng = np.random.default_rng(0)
    idx = [rng.choice(len(y), 100, replace=False) for _ in range(k)]
    return [(X[i], y[i]) for i in idx], Xt, yt


def _timed_fit(make, X, y, repeats):
    """The last fitted estimator and the median fit time over ``repeats`` fits."""
    sec = []
    for _ in range(repeats):
        m = make()
        t0 = time.perf_counter()
        m.fit(X, y)
        sec.append(time.perf_counter() - t0)
    return m, float(np.median(sec))


def _summary(m, Xt, yt):
    r = m.results_[0]
    return {"test_error": float(np.mean(m.predict(Xt) != yt)),
            "in_model": int(r.support.size), "relevant": int(np.sum(r.relevant)),
            "sum_gamma": float(np.sum(r.gamma))}


def _nuts(s, X, y, Xt, yt, cache):
    """NUTS on subset ``s``: draws of log10 alpha, summary, seconds, divergences (cached)."""
    import os

    from rvm_ppl import RVC

    path = None if cache is None else f"{cache}-{s}.npz"
    if path and os.path.exists(path):
        z = np.load(path)
        return z["draws"], {k: float(z[k]) for k in ("test_error", "in_model", "relevant",
                                                     "sum_gamma", "seconds", "divergences")}
    nuts = RVC(gamma=GAMMA, method="nuts", random_state=s, progressbar=False)
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        nuts.fit(X, y)
    seconds = time.perf_counter() - t0
    draws = np.log10(nuts.idata_.posterior["alpha"].values.reshape(-1, X.shape[0] + 1))
    summary = {**_summary(nuts, Xt, yt), "seconds": seconds,
               "divergences": int(nuts.idata_.sample_stats["diverging"].values.sum())}
    if path:
        np.savez(path, draws=draws, **summary)
    return draws, summary


def run(k, repeats, cache=None, nuts_only=False):
    from rvm_ppl import RVC
    from rvm_ppl.closed_form.evidence import alpha_maximiser

    subsets, Xt, yt = _subsets(k)
    per, rows = [], []
    for s, (X, y) in enumerate(subsets):
        draws, nuts_summary = _nuts(s, X, y, Xt, yt, cache)
        print(f"# subset {s}: NUTS {nuts_summary['seconds']:.0f} s", flush=True)
        if nuts_only:
            continue
        plain, t_plain = _timed_fit(lambda: RVC(gamma=GAMMA), X, y, repeats)
        mapf, t_map = _timed_fit(lambda: RVC(gamma=GAMMA, **PRIOR), X, y, repeats)
        t_nuts = nuts_summary["seconds"]
        r = mapf.results_[0]
        a_map = r.alpha
        inside = np.isfinite(a_map)
        s_, q_ = mapf.idata_.fit["s"].values, mapf.idata_.fit["q"].values
        a_star, _ = alpha_maximiser(s_, q_, PRIOR["alpha_shape"], PRIOR["alpha_rate"])
        point = np.where(inside, a_map, a_star)
        w1 = np.mean(np.abs(draws - np.log10(point)[None, :]), axis=0)
        med = np.median(draws, axis=0)
        rec = {"subset": s, "plain": {**_summary(plain, Xt, yt), "seconds": t_plain},
               "map": {**_summary(mapf, Xt, yt), "seconds": t_map},
               "nuts": nuts_summary,
               "w1_log10_alpha_in_model": w1[inside].tolist(),
               "w1_log10_alpha_outside_at_entry_alpha": w1[~inside].tolist(),
               "log10_alpha_map_minus_nuts_median_in_model": (np.log10(a_map[inside])
                                                              - med[inside]).tolist(),
               "nuts_median_log10_alpha": {"median": float(np.median(med)),
                                           "min": float(med.min()), "max": float(med.max())}}
        per.append(rec)
        w_in, w_out = w1[inside], w1[~inside]
        rows.append((s, f"{rec['plain']['test_error']:.1%}", f"{rec['map']['test_error']:.1%}",
                     f"{rec['nuts']['test_error']:.1%}",
                     f"{rec['plain']['in_model']} / {rec['map']['in_model']}",
                     f"{rec['map']['relevant']} / {int(rec['nuts']['relevant'])}",
                     f"{np.median(w_in):.2f} ({w_in.min():.2f}-{w_in.max():.2f})",
                     f"{np.median(w_out):.2f} ({w_out.min():.2f}-{w_out.max():.2f})",
                     f"{np.median(med):.2f}",
                     f"{1000 * t_plain:.0f}", f"{1000 * t_map:.0f}", f"{t_nuts:.0f}",
                     int(rec["nuts"]["divergences"])))
    if nuts_only:
        return per
    heading(f"{k} Ripley subsets of 100 points, RBF gamma = {GAMMA}, Gamma(3, 2) on alpha; "
            "W1 of log10 alpha between the MAP point and the NUTS draws, per basis "
            "(median, range over the basis functions)")
    print_table(["subset", "error plain", "error MAP", "error NUTS", "in model plain / MAP",
                 "E[γ]>½ MAP / NUTS", "W1 in MAP model", "W1 outside (entry α)",
                 "NUTS median log10 α (median over bases)", "plain ms", "MAP ms", "NUTS s",
                 "divergences"], rows)
    return per


def part_fixed_point():
    from scipy.special import expit

    from rvm_ppl.closed_form import bernoulli

    rows, out = [], []
    for seed in range(3):
        rng = np.random.default_rng(seed)
        Phi = np.column_stack([np.ones(60), rng.normal(size=(60, 3))])
        t = (rng.random(60) < expit(Phi @ np.array([0.5, 2.0, -1.5, 0.0]))).astype(float)
        for name, prior in (("plain", None), ("Gamma(3, 2)", {"a": 3.0, "b": 2.0})):
            steps = bernoulli.MAP_STEPS
            bernoulli.MAP_STEPS = 0  # the fixed point, without the polish
            try:
                res = bernoulli.fit_evidence_bernoulli(Phi, t, priors=prior, tol=1e-8)
            finally:
                bernoulli.MAP_STEPS = steps
            a, b = (0.0, 0.0) if prior is None else (prior["a"], prior["b"])
            act = res.active
            la0 = np.log(res.alpha[act])
            la, best = penalised_laplace_map(Phi[:, act], t, la0, a, b)
            d = float(np.max(np.abs(la0 - la)))
            gap = float(best - res.objective)
            out.append({"seed": seed, "prior": name, "bases": len(act), "max_dlog_alpha": d,
                        "objective_below_optimum": gap})
            rows.append((seed, name, len(act), f"{d:.3f}", f"{gap:.1e}"))
    heading("The re-estimation's fixed point against the stationary point of the Laplace "
            "evidence (logistic, N = 60, M = 4)", before="\n")
    print_table(["problem", "hyperprior", "bases", "largest Δ log α", "objective below optimum"],
                rows)
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--subsets", type=int, default=5)
    p.add_argument("--repeats", type=int, default=5, help="evidence fits timed per subset")
    p.add_argument("--cache", default=None, metavar="PREFIX",
                   help="keep and reuse the NUTS results in PREFIX-<subset>.npz")
    p.add_argument("--nuts-only", action="store_true", help="only sample (and cache) NUTS")
    add_results_argument(p)
    args = p.parse_args()
    if args.nuts_only:
        run(args.subsets, args.repeats, args.cache, nuts_only=True)
        return
    results_recorder(results_name(__file__), notes=args.note)
    record_data("settings", {"gamma": GAMMA, "prior": PRIOR, "repeats": args.repeats})
    record_data("ripley_subsets", run(args.subsets, args.repeats, args.cache))
    record_data("fixed_point", part_fixed_point())
    write_results(args.out)


if __name__ == "__main__":
    main()
