"""Relevance vector classification: the papers' benchmarks, the samplers, and scaling.

    python benchmarks/bench_classification.py                  # parts ripley, pima, nuts, advi
    python benchmarks/bench_classification.py --part ripley --subsets 100
    python benchmarks/bench_classification.py --part nuts --subsets 10
    python benchmarks/bench_classification.py --part scale --sizes 1000 5000 20000

ripley
    Tipping (2001), §4.2: 100 random points of Ripley's 250 training points,
    Gaussian kernel ``exp(-||x - x'||^2 / r^2)`` with r = 0.5 (gamma = 4)
    plus a bias, tested on the 1000 test points. The subsets are those of
    ``tests/test_rvc.py``: ``default_rng(0).choice(250, 100)`` repeatedly.
    Paper: 9.3% test error with 4 relevance vectors (one subset). The
    installed peers (``fastrvm``, a C++ port of SparseBayes, and
    ``sklearn-rvm``'s EM classifier) run on the same subsets. With many
    subsets (``--subsets 1000``) the column "10-subset means" counts the
    disjoint groups of 10 consecutive subsets whose mean error is at most
    9.5%: how often a 10-subset experiment would report that figure.
pima
    Ripley's Pima split (200 training, 332 test cases), inputs standardised
    with the training statistics, over a grid of kernel widths. Paper: 65
    errors with 4 relevance vectors.
nuts
    NUTS with the package defaults (``RVC(method="nuts")``: the marginal
    classifier, hyperprior ``a = 3, b = 2``, 4 chains x (1000 tune + 1000
    draws)) on the first ``--subsets`` Ripley subsets; then, on the first
    subset, the alternatives it was chosen over.
advi
    Mean-field ADVI on the same subsets in each parameterisation.
scale
    Fit time, peak memory and test error of the evidence method against the
    peers on draws from Ripley's distribution (``make_ripley``), tested on
    5000 further draws; every configuration in its own process, one BLAS
    thread.

"log loss" is the mean negative log predictive probability of the true
class on the test points.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import time
import warnings

import numpy as np
from _common import (add_results_argument, heading, print_table, record_note, results_name, results_recorder,
                     run_worker, write_results)
from scipy.special import expit

PEERS = {"fastrvm": "fastrvm", "sklearn-rvm": "sklearn_rvm"}
RIPLEY_TARGET = 0.095  # the mean test error asked of 10 subsets


def _ripley_subsets(k):
    """The training subsets of tests/test_rvc.py, and the test set."""
    from rvm_ppl.datasets.loaders import load_ripley

    X, y, Xt, yt = load_ripley()
    rng = np.random.default_rng(0)
    subsets = [rng.choice(len(y), 100, replace=False) for _ in range(k)]
    return [(X[i], y[i]) for i in subsets], Xt, yt


def _scores(p1, yt):
    """Test error and log loss from P(y = 1) on the test points."""
    p_true = np.clip(np.where(yt == 1, p1, 1 - p1), 1e-12, 1.0)
    return float(np.mean((p1 > 0.5) != yt)), float(-np.mean(np.log(p_true)))


def _fit(name, X, y, gamma, **kw):
    """Fit one classifier; return (P(y=1) function, relevance vectors excluding the bias, seconds).

    The seconds exclude importing the library, for every library alike.
    """
    if name.startswith("fastrvm"):
        from fastrvm import RVC as FastRVC
    elif name == "sklearn-rvm":
        from sklearn_rvm import EMRVC
    else:
        import rvm_ppl.estimators.base
        from rvm_ppl import RVC

    start = time.perf_counter()
    if name == "evidence-lowrank":
        # The low-rank kernel basis at every N (not the dense kernel matrix
        # below DENSE_LIMIT entries).
        rvm_ppl.estimators.base.DENSE_LIMIT = 0
        m = RVC(gamma=gamma, **kw).fit(X, y, method="evidence")
        nrv = len(m.relevance_)
    elif name in ("evidence", "vb", "advi", "nuts"):
        m = RVC(gamma=gamma, **kw).fit(X, y, method=name)
        nrv = len(m.relevance_)
    elif name.startswith("fastrvm"):
        m = FastRVC(gamma=gamma, fit_intercept=name.endswith("bias")).fit(X, y)
        nrv = int(np.ravel(m.n_relevance_)[0])  # as fastrvm counts them
    elif name == "sklearn-rvm":
        m = EMRVC(gamma=gamma)
        m.fit(X, y)
        nrv = len(m.relevance_)
    else:
        raise ValueError(name)
    seconds = time.perf_counter() - start
    return (lambda Z: m.predict_proba(Z)[:, 1]), nrv, seconds, m


def _peers():
    names = []
    if importlib.util.find_spec(PEERS["fastrvm"]):
        names += ["fastrvm", "fastrvm+bias"]
    if importlib.util.find_spec(PEERS["sklearn-rvm"]):
        names.append("sklearn-rvm")
    return names


def _selected_peers(args):
    """The installed peers that ``--peers`` names (all installed ones without it)."""
    return [p for p in _peers() if args.peers is None or p in args.peers]


def _groups_meeting(err, size=10):
    """How many disjoint runs of ``size`` consecutive subsets have a mean error meeting the target.

    With ``size`` subsets the mean error is itself a random variable; over many
    subsets this estimates how often a ``size``-subset experiment would report
    a mean at or below ``RIPLEY_TARGET``.
    """
    groups = err[: len(err) // size * size].reshape(-1, size).mean(axis=1)
    if len(groups) < 2:
        return "-"
    return f"{np.sum(groups <= RIPLEY_TARGET + 1e-12)} of {len(groups)}"


def part_ripley(args):
    subsets, Xt, yt = _ripley_subsets(args.subsets)
    rows = []
    for name in ["evidence", "vb", *_selected_peers(args)]:
        err, ll, nrv, sec = [], [], [], []
        for X, y in subsets:
            proba, k, s, _ = _fit(name, X, y, 4.0)
            e, l = _scores(proba(Xt), yt)
            err.append(e), ll.append(l), nrv.append(k), sec.append(s)
        err = np.array(err)
        rows.append((name, f"{100 * err.mean():.2f} ± {100 * err.std(ddof=1) / np.sqrt(len(err)):.2f}",
                     f"{100 * err.min():.1f}-{100 * err.max():.1f}", _groups_meeting(err),
                     f"{np.mean(ll):.3f}", f"{np.mean(nrv):.1f}", f"{max(nrv)}", f"{np.mean(sec):.3f}"))
    heading(f"Ripley: {args.subsets} random subsets of 100 training points, RBF r = 0.5, "
            "1000 test points (paper: 9.3% with 4 relevance vectors)")
    print_table(["classifier", "mean test error % (± s.e.)", "range %",
                 f"10-subset means ≤ {100 * RIPLEY_TARGET}%", "log loss",
                 "relevance vectors", "max", "fit s"], rows)


def part_pima(args):
    from rvm_ppl.datasets.loaders import load_pima

    X, y, Xt, yt = load_pima()
    m, s = X.mean(axis=0), X.std(axis=0)
    X, Xt = (X - m) / s, (Xt - m) / s
    rows = []
    for gamma in args.gammas:
        cells = [gamma]
        for name in ["evidence", "vb", *_selected_peers(args)]:
            proba, k, _, _ = _fit(name, X, y, gamma)
            e, l = _scores(proba(Xt), yt)
            cells.append(f"{round(e * len(yt))} / {k} / {l:.3f}")
        rows.append(cells)
    heading("Pima: 200 training, 332 test cases, standardised inputs "
            "(paper: 65 errors with 4 relevance vectors)")
    print_table(["gamma", *[f"{n}: errors / RVs / log loss" for n in ["evidence", "vb", *_selected_peers(args)]]],
           rows)


def _nuts_row(label, X, y, Xt, yt, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        proba, _, seconds, m = _fit("nuts", X, y, 4.0, random_state=0, **kw)
    a = m.idata_.attrs
    e, l = _scores(proba(Xt), yt)
    steps = float(m.idata_.sample_stats["n_steps"].mean())
    return (label, a["n_divergences"], f"{a['max_rhat_log_alpha']:.4f}", f"{a['max_rhat']:.3f}",
            a["max_rhat_at"],
            f"{a['min_ess_bulk_log_alpha']:.0f}", f"{a['min_ess_bulk']:.0f}",
            f"{a['sampling_time_s']:.1f}", f"{seconds:.1f}", f"{steps:.0f}",
            f"{100 * e:.1f}", f"{l:.3f}")


def _nuts_model_row(label, X, y, Xt, yt, parameterization, priors=None):
    """NUTS on build_model's classifier in another parameterisation (the PyMC-model route)."""
    from rvm_ppl import build_model, fit_nuts
    from rvm_ppl.kernels.kernel import RBF, design_matrix

    Phi = design_matrix(X, X, RBF(4.0))
    model = build_model(Phi, y.astype(float), likelihood="bernoulli", priors=priors,
                        parameterization=parameterization)
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        idata = fit_nuts(model, random_seed=0)
    seconds = time.perf_counter() - start
    W = idata.posterior["w"].values.reshape(-1, Phi.shape[1])
    e, l = _scores(np.mean(expit(design_matrix(Xt, X, RBF(4.0)) @ W.T), axis=1), yt)
    a = idata.attrs
    steps = float(idata.sample_stats["n_steps"].mean())
    return (label, a["n_divergences"], f"{a['max_rhat_log_alpha']:.4f}", f"{a['max_rhat']:.3f}",
            a["max_rhat_at"], f"{a['min_ess_bulk_log_alpha']:.0f}", f"{a['min_ess_bulk']:.0f}",
            f"{a['sampling_time_s']:.1f}", f"{seconds:.1f}", f"{steps:.0f}",
            f"{100 * e:.1f}", f"{l:.3f}")


NUTS_HEADER = ["run", "divergences", "max r-hat log alpha", "max r-hat (all)", "at", "min ESS log alpha", "min ESS (all)",
               "sampling s", "fit s", "steps / draw", "test error %", "log loss"]


def part_nuts(args):
    subsets, Xt, yt = _ripley_subsets(args.subsets)
    rows = [_nuts_row(f"subset {k}", X, y, Xt, yt) for k, (X, y) in enumerate(subsets)]
    heading(f"NUTS, package defaults, on {args.subsets} Ripley subsets of 100 points "
            "(bias + 100 kernels)")
    print_table(NUTS_HEADER, rows)
    X, y = subsets[0]
    alternatives = [
        ("marginal, Tipping's a = b = 1e-6", dict(alpha_shape=1e-6, alpha_rate=1e-6)),
        ("marginal, a = 3, b = 0.2", dict(alpha_shape=3.0, alpha_rate=0.2)),
        ("marginal, a = 2, b = 0.1", dict(alpha_shape=2.0, alpha_rate=0.1)),
    ]
    rows = [_nuts_model_row("non-centred weights, a = 3, b = 2", X, y, Xt, yt, "noncentered"),
            _nuts_model_row("non-centred, a = b = 1e-6", X, y, Xt, yt, "noncentered",
                            priors={"a": 1e-6, "b": 1e-6})]
    rows += [_nuts_row(label, X, y, Xt, yt, **kw) for label, kw in alternatives]
    heading("NUTS on subset 0: the alternatives to the defaults")
    print_table(NUTS_HEADER, rows)


def part_advi(args):
    from rvm_ppl import build_model, fit_advi
    from rvm_ppl.kernels.kernel import RBF, design_matrix

    subsets, Xt, yt = _ripley_subsets(min(args.subsets, 3))
    rows = []
    for k, (X, y) in enumerate(subsets):
        Phi = design_matrix(X, X, RBF(4.0))
        Pt = design_matrix(Xt, X, RBF(4.0))
        for form in ("marginal", "centered", "noncentered"):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                model = build_model(Phi, y.astype(float), likelihood="bernoulli",
                                    parameterization=form)
                idata = fit_advi(model, random_seed=0)
            W = idata.posterior["w"].values.reshape(-1, Phi.shape[1])
            p1 = np.mean(expit(Pt @ W.T), axis=1)
            e, l = _scores(p1, yt)
            a = idata.attrs
            rows.append((k, form, f"{a['wall_time_s']:.1f}", a["n_iter"],
                         "yes" if a["converged"] else "no", f"{a['elbo']:.1f}",
                         f"{100 * e:.1f}", f"{l:.3f}"))
    heading("Mean-field ADVI on Ripley subsets (a = 3, b = 2; Adam 0.01)")
    print_table(["subset", "form", "wall s", "iterations", "converged", "final ELBO",
            "test error %", "log loss"], rows)


def _worker(name, n):
    import resource

    from rvm_ppl.datasets.loaders import make_ripley

    X, y = make_ripley(n, random_state=1)
    Xt, yt = make_ripley(5000, random_state=2)
    proba, nrv, seconds, _ = _fit(name, X, y, 4.0)
    e, l = _scores(proba(Xt), yt)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(dict(seconds=seconds, peak_mb=peak, error=e, log_loss=l, nrv=nrv)))


def part_scale(args):
    heading("Evidence method vs peers on draws from Ripley's distribution "
            "(RBF r = 0.5, one BLAS thread; Bayes error 9.0%)")
    rows = []
    for n in args.sizes:
        peers = [p for p in _selected_peers(args) if p != "fastrvm+bias"]
        for name in ["evidence", "evidence-lowrank", *peers]:
            if name == "sklearn-rvm" and n > 2000:
                rows.append((n, name, "skipped (dense N x N EM)", "", "", "", ""))
                continue
            if name == "evidence" and n * (n + 1) > 25_000_000:
                continue  # the same basis as evidence-lowrank
            if name.startswith("fastrvm") and n > args.fastrvm_max:
                rows.append((n, name, "skipped (N x N kernel matrices)", "", "", "", ""))
                continue
            res, err = run_worker(__file__, [name, n], one_thread=True, timeout=args.timeout)
            if res is None:
                rows.append((n, name, err, "", "", "", ""))
            else:
                rows.append((n, name, f"{res['seconds']:.2f}", f"{res['peak_mb']:.0f}",
                             f"{100 * res['error']:.2f}", f"{res['log_loss']:.3f}", res["nrv"]))
            print(f"# {rows[-1]}", flush=True)
    print_table(["N", "classifier", "fit s", "peak RSS MB", "test error %", "log loss",
            "relevance vectors"], rows)


PARTS = {"ripley": part_ripley, "pima": part_pima, "nuts": part_nuts, "advi": part_advi,
         "scale": part_scale}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--part", choices=[*PARTS, "default", "all"], default="default",
                   help="default: ripley, pima, nuts, advi")
    p.add_argument("--subsets", type=int, default=10)
    p.add_argument("--gammas", type=float, nargs="+", default=[0.01, 0.02, 0.04, 0.08, 0.16])
    p.add_argument("--sizes", type=int, nargs="+", default=[1000, 2000, 5000, 10000, 20000])
    p.add_argument("--timeout", type=int, default=900, help="seconds per scale configuration")
    p.add_argument("--fastrvm-max", type=int, default=10**9, help="largest N given to fastrvm (scale part)")
    p.add_argument("--peers", nargs="*", default=None,
                   help="peers in the ripley, pima and scale parts: fastrvm, fastrvm+bias, sklearn-rvm "
                        "(default: all installed)")
    p.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    add_results_argument(p)
    args = p.parse_args()
    if args.worker:
        _worker(args.worker[0], int(args.worker[1]))
        return
    parts = {"default": ["ripley", "pima", "nuts", "advi"], "all": list(PARTS)}.get(args.part, [args.part])
    results_recorder(results_name(__file__, args.part), notes=args.note)
    if set(parts) & {"ripley", "nuts", "scale"}:
        record_note("Fit times are wall-clock seconds on the machine named here, as loaded as its "
                    "load average says; compare them only within one file.")
    for part in parts:
        PARTS[part](args)
    write_results(args.out)


if __name__ == "__main__":
    warnings.simplefilter("ignore", FutureWarning)
    main()
