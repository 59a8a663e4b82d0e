"""Multi-class relevance vector classification: the multinomial RVM against one-vs-rest.

    python benchmarks/bench_multiclass.py                       # parts digits, synthetic
    python benchmarks/bench_multiclass.py --part digits --repeat 2
    python benchmarks/bench_multiclass.py --part synthetic --seeds 5
    python benchmarks/bench_multiclass.py --part digits --gamma-factor 2 --methods per-class
    python benchmarks/bench_multiclass.py --part nuts

digits
    scikit-learn's digits (1797 x 64, 10 classes), ``train_test_split(X, y,
    test_size=0.5, random_state=0)``: 898 training and 899 test images.
    Pixel values (0-16) divided by 16. One Gaussian kernel
    ``exp(-gamma ||x - x'||^2)`` for every method, with the median
    heuristic on the training set only: ``gamma = 1 / median ||x_i - x_j||^2``
    over training pairs. The RVMs use the kernels centred on the training
    points plus a bias. Methods:

    - multinomial, shared alpha / per-class alpha:
      ``RVC(multi_class="multinomial", shared_alpha=...)`` (evidence),
      probabilities integrated over the Laplace posterior (Monte Carlo, 2000
      draws, seed 0);
    - one-vs-rest evidence: ``RVC(multi_class="ovr")``, one binary evidence
      fit per class, MacKay-moderated probabilities, normalised to sum to 1;
    - SVC: ``sklearn.svm.SVC(probability=True)`` (one-vs-one, Platt
      scaling), ``C`` chosen by 5-fold cross-validation on the training set
      over {0.1, 1, 10, 100};
    - fastrvm: its ``RVC`` (SparseBayes in C++, one-vs-rest) with the same
      gamma and a bias.

    "RVs" counts distinct training points used by at least one class (the
    bias excluded); "weights" counts the non-zero weights over all classes
    (SVC: support vectors, each used by up to 9 one-vs-one machines).
    Tipping (2001), Table 3, U.S.P.S. (7291 training images, 256 pixels,
    ten one-vs-rest classifiers): RVM 5.1 % error with 316 vectors, SVM
    4.4 % with 2540; quoted for context only (a different, larger data set).
synthetic
    :func:`rvm_ppl.datasets.make_three_class` (three classes, each a mixture
    of two Gaussians, true class probabilities known), ``--n`` training
    points, 3000 test points, gamma = 0.5, seeds 0..``--seeds``-1. Reports
    the log loss in excess of the true probabilities' log loss on the same
    test points (0 is perfect calibration and sharpness), and the test error
    in excess of the Bayes rule's.

nuts
    ``RVC(multi_class="multinomial", method="nuts")`` with the package's
    defaults (4 chains x (1000 tune + 1000 draws), target_accept 0.8, numba
    backend, hyperprior a = 3, b = 2, ``alpha`` integrated out and drawn
    exactly afterwards) for a 3-class mixture of ``--nuts-n`` points with the
    full kernel basis, per-class and shared ``alpha``: divergences, max r-hat
    and min bulk ESS over ``w`` and ``log alpha`` of every class and basis
    (the estimator's diagnostics), and the test log loss of the averaged
    probabilities against the evidence fit's. Writes the alpha comparison
    figure (class 0, per-class ``alpha``: evidence, advi, nuts) to
    ``--figures``/alpha_multinomial.png.

Timings were taken with one BLAS thread on a machine shared with other jobs;
``--repeat`` fits repeat each fit and report the fastest.
"""

from __future__ import annotations

import argparse
import importlib.util
import time
import warnings
from pathlib import Path

import numpy as np
from _common import (add_results_argument, heading, print_table, record_note, results_name, results_recorder,
                     write_results)
from scipy.spatial.distance import pdist
from threadpoolctl import threadpool_limits

from rvm_ppl import RVC
from rvm_ppl.datasets.loaders import make_three_class, three_class_proba

HAVE_FASTRVM = importlib.util.find_spec("fastrvm") is not None


def _timed(fn, repeat):
    """Run ``fn`` ``repeat`` times; return its last result and the fastest time."""
    best = np.inf
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return out, best


def _scores(P, yt):
    idx = np.arange(len(yt))
    p = np.clip(P[idx, yt], 1e-300, 1.0)
    return float(np.mean(P.argmax(axis=1) != yt)), float(-np.mean(np.log(p)))


def _rvc(name, gamma):
    """The RVC of a method name: multinomial (shared or per-class alpha) or one-vs-rest."""
    if name.startswith("multinomial"):
        return RVC(gamma=gamma, multi_class="multinomial", shared_alpha="shared" in name,
                   random_state=0)
    return RVC(gamma=gamma, multi_class="ovr", random_state=0)


def fit_predict(name, X, y, Xt, gamma, repeat=1):
    """Fit one method; return (test probabilities, RVs, weights, seconds)."""
    if name in METHODS:
        m, sec = _timed(lambda: _rvc(name, gamma).fit(X, y), repeat)
        return m.predict_proba(Xt), len(m.relevance_), int(sum(len(a) for a in m.active_)), sec
    if name == "SVC":
        from sklearn.model_selection import GridSearchCV
        from sklearn.svm import SVC

        def fit():
            search = GridSearchCV(SVC(gamma=gamma), {"C": [0.1, 1, 10, 100]}, cv=5)
            search.fit(X, y)
            C = search.best_params_["C"]
            return SVC(gamma=gamma, C=C, probability=True, random_state=0).fit(X, y), C

        (m, C), sec = _timed(fit, repeat)
        return m.predict_proba(Xt), int(m.n_support_.sum()), int(m.n_support_.sum()), sec
    if name == "fastrvm":
        from fastrvm import RVC as FastRVC

        m, sec = _timed(lambda: FastRVC(gamma=gamma, fit_intercept=True).fit(X, y), repeat)
        return (
            m.predict_proba(Xt),
            int(np.unique(m.relevance_).size),
            int(np.sum(m.n_relevance_)),
            sec,
        )
    raise ValueError(name)


METHODS = ["multinomial (shared alpha)", "multinomial (per-class alpha)", "one-vs-rest evidence"]


def part_digits(repeat, gamma_factor=1.0, methods=None):
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    X, y = load_digits(return_X_y=True)
    X = X / 16.0
    X, Xt, y, yt = train_test_split(X, y, test_size=0.5, random_state=0)
    gamma = gamma_factor / np.median(pdist(X, "sqeuclidean"))
    heading(
        f"digits: {len(y)} training / {len(yt)} test images, 10 classes, "
        f"gamma = {gamma:.4f} ({gamma_factor:g} x the median heuristic, training set)"
    )
    rows = []
    names = METHODS + ["SVC"] + (["fastrvm"] if HAVE_FASTRVM else [])
    for name in names:
        if methods and not any(m in name for m in methods):
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            P, nrv, nw, sec = fit_predict(name, X, y, Xt, gamma, repeat)
        err, ll = _scores(P, yt)
        rows.append([name, f"{100 * err:.2f}", f"{ll:.4f}", nrv, nw, f"{sec:.1f}"])
        print(f"  {name}: done in {sec:.1f} s", flush=True)
    rows.append(["Tipping (2001) U.S.P.S. RVM, 7291 training images", "5.1", "", 316, "", ""])
    rows.append(["Tipping (2001) U.S.P.S. SVM", "4.4", "", 2540, "", ""])
    print()
    print_table(
        ["method", "test error %", "log loss", "RVs", "weights", f"fit s (min of {repeat})"],
        rows,
    )


def part_synthetic(n, seeds, repeat):
    heading(
        f"three-class mixture, {n} training points, 3000 test points, gamma = 0.5, "
        f"seeds 0-{seeds - 1}"
    )
    names = METHODS + ["SVC"] + (["fastrvm"] if HAVE_FASTRVM else [])
    res = {m: [] for m in names}
    for seed in range(seeds):
        X, y = make_three_class(n, random_state=seed)
        Xt, yt = make_three_class(3000, random_state=100 + seed)
        Pt = three_class_proba(Xt)
        err0, ll0 = _scores(Pt, yt)
        for name in names:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                P, nrv, nw, sec = fit_predict(name, X, y, Xt, 0.5, repeat)
            err, ll = _scores(P, yt)
            res[name].append((ll - ll0, err - err0, nrv, nw, sec, ll0))
    rows = []
    for name in names:
        a = np.array(res[name])
        rows.append(
            [
                name,
                f"{a[:, 0].mean():.4f} ± {a[:, 0].std(ddof=1) / np.sqrt(len(a)):.4f}",
                " ".join(f"{v:.3f}" for v in a[:, 0]),
                f"{100 * a[:, 1].mean():+.2f}",
                f"{a[:, 2].mean():.1f}",
                f"{a[:, 4].mean():.2f}",
            ]
        )
    ll0 = np.mean([r[5] for r in res[names[0]]])
    print(f"true probabilities' log loss: {ll0:.4f} (mean)\n")
    record_note(f"three-class mixture: the true probabilities' test log loss is {ll0:.4f} (mean over seeds)")
    print_table(
        [
            "method",
            "excess log loss (mean ± se)",
            "per seed",
            "excess error (points of %)",
            "RVs",
            "fit s",
        ],
        rows,
    )


def part_nuts(n, out, seed=0):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from rvm_ppl.plotting import plot_alpha

    X, y = make_three_class(n, random_state=seed)
    Xt, yt = make_three_class(3000, random_state=100 + seed)
    _, ll0 = _scores(three_class_proba(Xt), yt)
    heading(
        f"NUTS, three-class mixture: {n} training points, {n + 1} basis functions x 3 "
        f"classes, seed {seed}; true probabilities' test log loss {ll0:.4f}"
    )
    rows, idatas = [], {}
    for shared in (False, True):
        kw = dict(gamma=0.5, multi_class="multinomial", shared_alpha=shared, random_state=seed,
                  progressbar=False)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t0 = time.perf_counter()
            nuts = RVC(method="nuts", **kw).fit(X, y)
            sec = time.perf_counter() - t0
            ev = RVC(method="evidence", **kw).fit(X, y)
        a = nuts.idata_.attrs
        _, ll = _scores(nuts.predict_proba(Xt), yt)
        _, ll_ev = _scores(ev.predict_proba(Xt), yt)
        rows.append([
            "shared" if shared else "per class", a["n_divergences"], f"{a['max_rhat']:.4f}",
            a["max_rhat_at"], f"{a['min_ess_bulk']:.0f}", f"{a['max_rhat_log_alpha']:.4f}",
            f"{a['min_ess_bulk_log_alpha']:.0f}", f"{ll - ll0:.4f}", f"{ll_ev - ll0:.4f}",
            f"{sec:.0f}",
        ])
        print(f"  {rows[-1][0]}: done in {sec:.0f} s", flush=True)
        if not shared:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                advi = RVC(method="advi", **kw).fit(X, y)
            idatas = {"evidence": ev.idata_, "advi": advi.idata_, "nuts": nuts.idata_}
    print()
    print_table(
        ["alpha", "divergences", "max r-hat", "at", "min bulk ESS", "max r-hat log alpha",
         "min ESS log alpha", "excess log loss NUTS", "excess log loss evidence",
         "wall s (compile + sample)"],
        rows,
    )
    out.mkdir(parents=True, exist_ok=True)
    path = out / "alpha_multinomial.png"
    fig, ax = plt.subplots(figsize=(7, 6))
    plot_alpha(idatas, class_=0, ax=ax)
    ax.set_title("log10 α of class 0, per-class α: evidence, advi, nuts")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print(f"\nalpha comparison (class 0): {path}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--part",
        choices=["digits", "synthetic", "nuts"],
        nargs="*",
        default=["synthetic", "digits"],
    )
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--nuts-n", type=int, default=60)
    ap.add_argument("--figures", type=Path, default=Path(__file__).parent / "out",
                    help="nuts: folder for the alpha comparison figure")
    ap.add_argument(
        "--gamma-factor", type=float, default=1.0, help="digits: multiply the median heuristic"
    )
    ap.add_argument(
        "--methods", nargs="*", help="digits: only methods whose name contains one of these"
    )
    add_results_argument(ap)
    args = ap.parse_args()
    parts = [p for p in ("synthetic", "digits", "nuts") if p in args.part]
    results_recorder(results_name(__file__, None if parts == ["synthetic", "digits"] else parts),
                     notes=args.note)
    record_note("Fit times: one BLAS thread, on the machine named here, as loaded as its load average says.")
    with threadpool_limits(limits=1, user_api="blas"):
        if "synthetic" in args.part:
            part_synthetic(args.n, args.seeds, args.repeat)
        if "digits" in args.part:
            part_digits(args.repeat, args.gamma_factor, args.methods)
        if "nuts" in args.part:
            part_nuts(args.nuts_n, args.figures)
    write_results(args.out)


if __name__ == "__main__":
    main()
