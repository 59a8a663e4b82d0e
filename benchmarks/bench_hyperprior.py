"""Is the full RVM posterior sparse, and under which hyperprior on alpha?

    python benchmarks/bench_hyperprior.py           # the study: 2 data sets x 6 priors x 5 seeds
    python benchmarks/bench_hyperprior.py --seeds 0 --priors 1e-06 3,2 --draws 100   # a quick look

Every hyperprior ``Gamma(a, b)`` on each ``alpha_m`` of :data:`PRIORS` is fitted by
all four methods (evidence is then type-II MAP; vb, advi and nuts with the package
defaults otherwise, nuts 4 chains x (1000 tune + 1000 draws)) to

sinc
    Tipping's noisy sinc, ``make_sinc(100, random_state=seed)``, RBF r = 3
    (``gamma = 1/9``), ``RVR``; ``a, b`` in the estimator's units (targets
    divided by their standard deviation) and the noise hyperprior at the RVR
    default (``Gamma(1e-6, 1e-6)`` in the same units). Scored by the RMS error
    of the predictive mean to the noiseless ``sin(x)/x`` on 1000 points of
    [-10, 10], as ``rvm_ppl.demo`` does.
ripley
    100 of Ripley's 250 training points, RBF r = 0.5 (``gamma = 4``), ``RVC``,
    the subsets of ``bench_classification.py`` (``default_rng(0).choice(250,
    100)`` repeatedly; subset ``seed`` is the seed-th). Scored by the test error
    and log loss on the 1000 test points.

Per (data set, hyperprior, method), means over the data sets of: the effective
number of parameters ``sum_m E[gamma_m]``; the number of bases with
``E[gamma_m] > 1/2`` (the relevance rule of every method under a hyperprior); the
power-scaling verdicts of ``idata_.relevance`` (``rvm_ppl.output.sensitivity``:
over all candidate bases, and the data-driven ones among those with
``E[gamma] > 1/2``); the test score; for nuts the divergences, the runs with any,
and the largest r-hat of ``log alpha``. A second table per data set keeps only the
nuts runs without a divergence: what a choice of hyperprior may rest on.

Each data set family is fitted in one process, so nutpie's compiled model and
ADVI's functions are reused across seeds (``rvm_ppl.pymc_fitters.compiled``); the
fit times include each hyperprior's first compilation. One BLAS thread.
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
from _common import (  # noqa: E402
    add_results_argument,
    current_recorder,
    heading,
    print_table,
    record_data,
    record_note,
    results_name,
    results_recorder,
    write_results,
)

METHODS = ("evidence", "vb", "advi", "nuts")
# The grid on alpha, (shape a, rate b) in the estimators' units, vaguest first:
# Tipping's near-flat limit, then more and more proper, and the classifier's
# present default Gamma(3, 2) (rvm_ppl.core.priors.BERNOULLI_PRIORS).
PRIORS = {
    "1e-06": (1e-6, 1e-6),
    "0.01": (1e-2, 1e-2),
    "0.1": (0.1, 0.1),
    "1": (1.0, 1.0),
    "2": (2.0, 2.0),
    "3,2": (3.0, 2.0),
}
DATA = ("sinc", "ripley")
VERDICT_NAMES = ("data-driven", "prior-driven", "conflict", "undetermined")


def prior_label(label):
    """``Gamma(a, b)`` of a :data:`PRIORS` key, as the tables show it."""
    a, b = PRIORS[label]
    return f"Gamma({a:g}, {b:g})"


def _data(name, seed):
    """``(X, y, score)`` of data set ``seed`` of family ``name``; ``score(model)`` -> dict."""
    if name == "sinc":
        from rvm_ppl.datasets.loaders import make_sinc, sinc

        X, y = make_sinc(100, random_state=seed)
        Xt = np.linspace(-10, 10, 1000)[:, None]
        truth = sinc(Xt[:, 0])

        def score(model):
            return {"rms": float(np.sqrt(np.mean((model.predict(Xt) - truth) ** 2)))}

        return X, y, score
    from bench_classification import _ripley_subsets, _scores

    subsets, Xt, yt = _ripley_subsets(seed + 1)
    X, y = subsets[seed]

    def score(model):
        error, loss = _scores(model.predict_proba(Xt)[:, 1], yt)
        return {"error": error, "log_loss": loss}

    return X, y, score


def _estimator(name, prior, method, seed, args):
    """The estimator of family ``name`` under hyperprior ``prior`` (a :data:`PRIORS` key)."""
    from rvm_ppl import RVC, RVR

    a, b = PRIORS[prior]
    common = dict(alpha_shape=a, alpha_rate=b, draws=args.draws, tune=args.draws,
                  chains=args.chains, random_state=seed, progressbar=False)
    if name == "sinc":
        return RVR(gamma=1 / 9, **common)
    return RVC(gamma=4.0, **common)


def fit_one(name, prior, method, seed, args):
    """Fit one (data set, hyperprior, method, seed); return its measurements as a dict."""
    X, y, score = _data(name, seed)
    model = _estimator(name, prior, method, seed, args)
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # SamplingWarning: the table reports what it would say
        model.fit(X, y, method=method)
    seconds = time.perf_counter() - start
    rel = model.idata_.relevance
    gamma = rel["gamma"].values
    verdict = rel["verdict"].values.astype(str)
    relevant = gamma > 0.5
    out = {
        "data": name, "prior": prior, "method": method, "seed": seed, "seconds": seconds,
        "sum_gamma": float(gamma.sum()), "n_relevant": int(relevant.sum()),
        **{v: int((verdict == v).sum()) for v in VERDICT_NAMES},
        "relevant_data_driven": int((relevant & (verdict == "data-driven")).sum()),
        "has_verdicts": bool(np.isin(verdict, VERDICT_NAMES).any()),
        **score(model),
    }
    if method == "nuts":
        attrs = model.idata_.attrs
        out.update(divergences=int(attrs["n_divergences"]),
                   max_rhat_log_alpha=float(attrs["max_rhat_log_alpha"]))
    return out


def _mean(runs, key, fmt):
    values = [r[key] for r in runs if r.get(key) is not None]
    return fmt.format(np.mean(values)) if values else "–"


def _scores(runs, name):
    """The mean test scores of ``runs``: RMS (sinc); error and log loss (Ripley)."""
    if name == "sinc":
        return [_mean(runs, "rms", "{:.4f}")]
    return [f"{100 * np.mean([r['error'] for r in runs]):.1f}%", _mean(runs, "log_loss", "{:.3f}")]


def _cells(runs, name):
    """The table cells of one (data set, hyperprior, method) from its runs."""
    verdicts = runs[0]["has_verdicts"]
    cells = [len(runs), _mean(runs, "sum_gamma", "{:.1f}"), _mean(runs, "n_relevant", "{:.1f}")]
    cells += [_mean(runs, v, "{:.1f}") if verdicts else "n/a" for v in VERDICT_NAMES]
    cells.append(_mean(runs, "relevant_data_driven", "{:.1f}") if verdicts else "n/a")
    cells += _scores(runs, name)
    if runs[0]["method"] == "nuts":
        div = [r["divergences"] for r in runs]
        cells += [sum(d > 0 for d in div), sum(div),
                  f"{max(r['max_rhat_log_alpha'] for r in runs):.3f}"]
    else:
        cells += ["–", "–", "–"]
    cells.append(_mean(runs, "seconds", "{:.1f}"))
    return cells


def _header(name):
    score = ["test RMS"] if name == "sinc" else ["test error", "test log loss"]
    return (["hyperprior on alpha", "method", "runs", "sum E[gamma]", "E[gamma] > 1/2",
             *VERDICT_NAMES, "data-driven of E[gamma] > 1/2", *score,
             "nuts runs with divergences", "divergences", "max r-hat log alpha", "fit s"])


TITLES = {
    "sinc": ("Noisy sinc, N = 100, RBF r = 3: the hyperprior on alpha against each method's "
             "sparsity"),
    "ripley": ("Ripley, 100 training points, RBF r = 0.5: the hyperprior on alpha against each "
               "method's sparsity"),
}
CHOICE_TITLES = {
    name: f"{title.split(':')[0]}: nuts runs without a divergence" for name, title in TITLES.items()
}


def tables(runs, name):
    """Print and record the two tables of family ``name`` from its runs."""
    mine = [r for r in runs if r["data"] == name]
    priors = [p for p in PRIORS if any(r["prior"] == p for r in mine)]
    rows = []
    for prior in priors:
        for method in METHODS:
            cell = [r for r in mine if r["prior"] == prior and r["method"] == method]
            if cell:
                rows.append([prior_label(prior), method, *_cells(cell, name)])
    heading(TITLES[name], before="\n")
    print_table(_header(name), rows)

    score = ["test RMS"] if name == "sinc" else ["test error", "test log loss"]
    rows = []
    for prior in priors:
        nuts = [r for r in mine if r["prior"] == prior and r["method"] == "nuts"]
        if not nuts:
            continue
        kept = [r for r in nuts if r["divergences"] == 0]
        if not kept:
            rows.append([prior_label(prior), f"0 of {len(nuts)}", *["–"] * (8 + len(score))])
            continue
        n_rel = sum(r["n_relevant"] for r in kept)
        share = sum(r["relevant_data_driven"] for r in kept) / n_rel if n_rel else float("nan")
        rows.append([prior_label(prior), f"{len(kept)} of {len(nuts)}",
                     _mean(kept, "sum_gamma", "{:.1f}"), _mean(kept, "n_relevant", "{:.1f}"),
                     *(_mean(kept, v, "{:.1f}") for v in VERDICT_NAMES),
                     "–" if np.isnan(share) else f"{100 * share:.0f}%",
                     f"{max(r['max_rhat_log_alpha'] for r in kept):.3f}", *_scores(kept, name)])
    heading(CHOICE_TITLES[name], before="\n")
    print_table(["hyperprior on alpha", "runs kept", "sum E[gamma]", "E[gamma] > 1/2",
                 *VERDICT_NAMES, "data-driven share of E[gamma] > 1/2", "max r-hat log alpha",
                 *score], rows)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", nargs="+", default=list(DATA), choices=DATA)
    p.add_argument("--priors", nargs="+", default=list(PRIORS), choices=list(PRIORS),
                   help="hyperpriors on alpha: keys of PRIORS ('a' for a = b, 'a,b' otherwise)")
    p.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4],
                   help="data sets: make_sinc's seed; the index of the Ripley subset")
    p.add_argument("--draws", type=int, default=1000, help="draws (and tuning steps) per chain")
    p.add_argument("--chains", type=int, default=4, help="NUTS chains")
    p.add_argument("--from", dest="source", default=None, metavar="PATH",
                   help="make the tables from the runs of a result file instead of fitting")
    add_results_argument(p)
    args = p.parse_args(argv)
    results_recorder(results_name(__file__), argv=None if argv is None else [__file__, *argv],
                     notes=args.note)
    warnings.filterwarnings("ignore", category=FutureWarning)
    logging.getLogger("pymc").setLevel(logging.ERROR)

    if args.source:
        import json

        with open(args.source) as f:
            source = json.load(f)
        runs = source["data"]["runs"]
        current_recorder().adopt(source)  # the run's date, machine, versions and command
        record_data("runs", runs)
        for note in source["notes"]:
            if note not in args.note:
                record_note(note)
        record_note("The tables were made from the runs in data by bench_hyperprior.py --from, "
                    "after the run; date, machine, versions and command are the run's.")
        args.data = [name for name in DATA if any(r["data"] == name for r in runs)]
    else:
        runs = _fit_all(args)
        _notes()
    for name in args.data:
        tables(runs, name)
    write_results(args.out)


def _fit_all(args):
    """Fit every (data set, hyperprior, seed, method) of ``args``; return the runs."""
    runs = []
    start = time.perf_counter()
    for name in args.data:
        for prior in args.priors:
            for seed in args.seeds:
                for method in args.methods:
                    run = fit_one(name, prior, method, seed, args)
                    runs.append(run)
                    print(f"# {time.perf_counter() - start:7.0f} s  {name} {prior_label(prior)} "
                          f"seed {seed} {method}: {run['seconds']:.1f} s, sum gamma "
                          f"{run['sum_gamma']:.1f}, {run['n_relevant']} relevant"
                          + (f", {run['divergences']} divergences" if method == "nuts" else ""),
                          flush=True)
            record_data("runs", runs)
            write_results(args.out)  # what has run so far, should the run stop
    return runs


def _notes():
    """The result file's notes."""
    record_note("Units: Gamma(a, b) on every alpha as the estimators' alpha_shape, alpha_rate; "
                "for sinc (RVR) applied to targets divided by their standard deviation, with the "
                "noise hyperprior at the RVR default Gamma(1e-6, 1e-6) in the same units.")
    record_note("Verdicts: power-scaling of each basis's log alpha (rvm_ppl.output.sensitivity), "
                "counted over all 101 candidate bases and averaged over the data sets; n/a for the "
                "evidence method's point estimate.")
    record_note("Fit times are wall seconds on a shared 2-core machine at low priority, including "
                "each hyperprior's first compilation in the process: compare them within this file "
                "only.")


if __name__ == "__main__":
    main()
