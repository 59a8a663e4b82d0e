"""The four methods on every benchmark data set the package ships or names.

    python benchmarks/bench_datasets.py                          # every problem, package defaults
    python benchmarks/bench_datasets.py --problems sinc100 ripley pima
    python benchmarks/bench_datasets.py --methods evidence vb advi   # no NUTS

Problems (training / test points):

* ``sinc100``, ``sinc1000``: noisy sinc, x uniform on [-10, 10]
  (``make_sinc(N, grid=False)``), noise sd 0.1, RBF r = 3 (``gamma = 1/9``);
  1000 test inputs on [-10, 10]. RMS is to sin(x)/x; NLPD is of test targets
  with fresh noise.
* ``friedman2``, ``friedman3``: scikit-learn's ``make_friedman2/3``, 240 / 1000,
  noise sd 125 and 0.1 (Friedman's 3:1 signal-to-noise ratio, as in Tipping
  2001, §4.2); inputs standardised on the training set; test RMS is to the
  noise-free function.
* ``boston``: 481 / 25 (a random split, Tipping 2001, §4.2), inputs
  standardised on the training set; RMS and NLPD of the held-out targets.
* ``ripley``: all 250 training points / 1000 test points, RBF r = 0.5
  (``gamma = 4``).
* ``pima``: Ripley's 200 / 332 split, inputs standardised on the training set.

The RBF width of friedman2/3, boston and pima is chosen once per problem by
5-fold cross-validation of the evidence fit on the training set (squared
error, or log loss for pima) over ``--gammas``, and then used by every method.

All four methods fit one model, the demo's comparison hyperprior
(``rvm_ppl.demo.COMPARED``: Gamma(1e-6, 1e-6) on alpha and beta for
regression, Gamma(3, 2) on alpha for the classifiers; the evidence fit is then
type-II MAP), and the classic evidence fit (type-II maximum likelihood, flat in
log alpha) is a row beside them, as in the demo; a fit of another model in the
summary table would be an error. Otherwise every method runs with the
estimator's defaults unless ``--chains``/``--draws`` are given (4 chains x
(1000 + 1000) for nuts; 1000 draws from every other posterior). Columns: fit
time, test RMS or error rate, NLPD or log loss,
relevance vectors, sum of E[gamma], noise sd (regression), each method's own
diagnostics, and from :func:`rvm_ppl.output.diagnostics.summary_table` the Pareto
k-hat of vb and advi and the 1-Wasserstein distance of log10 alpha to NUTS
(median over the bases each method keeps). One BLAS thread.
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import logging  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402

import numpy as np  # noqa: E402
from _common import (add_results_argument, heading, record_markdown, record_table,  # noqa: E402
                     results_name, results_recorder, write_results)

METHODS = ("evidence", "vb", "advi", "nuts")
PROBLEMS = ("sinc100", "sinc1000", "friedman2", "friedman3", "boston", "ripley", "pima")
GAMMAS = (0.01, 0.03, 0.1, 0.3, 1.0)


def _standardise(X, Xt):
    from sklearn.preprocessing import StandardScaler

    scaler = StandardScaler().fit(X)
    return scaler.transform(X), scaler.transform(Xt)


def _cv_gamma(X, y, gammas, classifier, seed):
    """The RBF ``gamma`` of the best 5-fold CV score of the evidence fit."""
    from sklearn.model_selection import KFold, StratifiedKFold, cross_val_score

    from rvm_ppl import RVC, RVR

    est, cv, scoring = (
        (RVC, StratifiedKFold(5, shuffle=True, random_state=seed), "neg_log_loss") if classifier
        else (RVR, KFold(5, shuffle=True, random_state=seed), "neg_mean_squared_error")
    )
    scores = [cross_val_score(est(gamma=g), X, y, cv=cv, scoring=scoring).mean() for g in gammas]
    return float(gammas[int(np.argmax(scores))])


def problem(name, seed, gammas):
    """``(kind, X, y, X_test, y_test, truth_test, gamma)``; ``truth_test`` is None for real data."""
    from sklearn.datasets import make_friedman2, make_friedman3

    from rvm_ppl.datasets.loaders import load_boston, load_pima, load_ripley, make_sinc, sinc

    rng = np.random.default_rng(seed)
    if name.startswith("sinc"):
        X, y = make_sinc(int(name[4:]), grid=False, random_state=seed)
        Xt = np.linspace(-10, 10, 1000)[:, None]
        truth = sinc(Xt[:, 0])
        return "regression", X, y, Xt, truth + 0.1 * rng.standard_normal(truth.size), truth, 1 / 9
    if name in ("friedman2", "friedman3"):
        make, noise = (make_friedman2, 125.0) if name == "friedman2" else (make_friedman3, 0.1)
        X, y = make(240, noise=noise, random_state=seed)
        Xt, truth = make(1000, noise=0.0, random_state=seed + 1)
        yt = truth + noise * rng.standard_normal(truth.size)
        X, Xt = _standardise(X, Xt)
        return "regression", X, y, Xt, yt, truth, _cv_gamma(X, y, gammas, False, seed)
    if name == "boston":
        X, y = load_boston()
        idx = rng.permutation(len(y))
        tr, te = idx[:481], idx[481:]
        X, Xt = _standardise(X[tr], X[te])
        y, yt = y[tr], y[te]
        return "regression", X, y, Xt, yt, None, _cv_gamma(X, y, gammas, False, seed)
    if name == "ripley":
        X, y, Xt, yt = load_ripley()
        return "classification", X, y, Xt, yt, None, 4.0
    if name == "pima":
        X, y, Xt, yt = load_pima()
        X, Xt = _standardise(X, Xt)
        return "classification", X, y, Xt, yt, None, _cv_gamma(X, y, gammas, True, seed)
    raise ValueError(f"Unknown problem {name!r}; expected one of {PROBLEMS}.")


def _scores(kind, model, Xt, yt, truth):
    """Test RMS (to the truth where known) and NLPD, or error rate and log loss."""
    from sklearn.metrics import log_loss

    from rvm_ppl.metrics import negative_log_predictive_density

    if kind == "classification":
        p = model.predict_proba(Xt)[:, 1]
        err = float(np.mean((p > 0.5) != yt))
        return f"{100 * err:.1f} %", f"{log_loss(yt, p):.3f}"
    mean, std = model.predict(Xt, return_std=True)
    target = yt if truth is None else truth
    rms = float(np.sqrt(np.mean((mean - target) ** 2)))
    return f"{rms:.4g}", f"{negative_log_predictive_density(yt, mean, std):.3f}"


def run(name, args):
    from rvm_ppl import RVC, RVR
    from rvm_ppl.demo import CLASSIC, COMPARED, _fit_all, _row, _table

    kind, X, y, Xt, yt, truth, gamma = problem(name, args.seed, args.gammas)
    options = {"random_state": args.seed}
    if args.chains:
        options["chains"] = args.chains
    if args.draws:
        options.update(draws=args.draws, tune=args.draws)
    est = RVR if kind == "regression" else RVC
    prior = COMPARED["sinc" if kind == "regression" else "ripley"]  # by likelihood
    fits, seconds = _fit_all(lambda _m: est(gamma=gamma, **prior, **options), X, y,
                             methods=args.methods)
    fitted = list(fits.items())
    if "evidence" in args.methods:
        classic, classic_s = _fit_all(lambda _m: est(gamma=gamma, **options), X, y,
                                      methods=("evidence",))
        fitted.append((CLASSIC, classic["evidence"]))
        seconds[CLASSIC] = classic_s["evidence"]
    rows = []
    for label, model in fitted:
        extra = [f"{1 / np.sqrt(model.beta_) :.4g}"] if kind == "regression" else []
        method = "evidence" if label == CLASSIC else label
        rows.append(_row(method, model, seconds[label], list(_scores(kind, model, Xt, yt, truth)),
                         extra, label=label))
    head = ["method", "fit time (s)", "test RMS" if kind == "regression" else "test error",
            "NLPD" if kind == "regression" else "log loss", "relevance vectors", "sum E[gamma]",
            *(["noise sd"] if kind == "regression" else []), "diagnostics"]
    heading(f"{name}: N = {len(y)}, {len(yt)} test points, RBF gamma = {gamma:.3g}", before="\n")
    print(_table(head, rows))
    record_markdown(None, _table(head, rows))
    if "nuts" in fits and len(fits) > 1:
        from rvm_ppl.output.diagnostics import ModelMismatchWarning, summary_table

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            warnings.simplefilter("error", ModelMismatchWarning)  # one model per comparison
            table = summary_table(fits, reference="nuts",
                                  fit_times={m: seconds[m] for m in fits})
        cols = [c for c in ("khat", "w1_log10_alpha", "w1_log10_beta", "n_pruned") if c in table]
        print(table[cols].to_string(float_format=lambda v: f"{v:.3g}"), flush=True)
        record_table(f"{name}: summary_table against nuts", ["method", *cols],
                     [[m, *table.loc[m, cols]] for m in table.index])


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--problems", nargs="+", default=list(PROBLEMS), choices=PROBLEMS)
    p.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    p.add_argument("--chains", type=int, default=None, help="NUTS chains (default: the estimator's)")
    p.add_argument("--draws", type=int, default=None, help="draws and tuning steps (default: the estimator's)")
    p.add_argument("--gammas", type=float, nargs="+", default=list(GAMMAS))
    p.add_argument("--seed", type=int, default=0)
    add_results_argument(p)
    args = p.parse_args()
    results_recorder(results_name(__file__, None if set(args.methods) == set(METHODS) else args.methods),
                     notes=args.note)
    warnings.filterwarnings("ignore", category=FutureWarning)
    logging.getLogger("pymc").setLevel(logging.WARNING)
    for name in args.problems:
        start = time.perf_counter()
        run(name, args)
        print(f"({name}: {time.perf_counter() - start:.0f} s in all)", flush=True)
    write_results(args.out)


if __name__ == "__main__":
    main()
