"""The sequential vb against the full-sweep vb and the evidence fit, design by design.

    python benchmarks/bench_vb_study.py
    python benchmarks/bench_vb_study.py --before benchmarks/results/vb-study-before.json

Each design is a basis (a bias column plus a kernel matrix on the training
inputs) and targets divided by their standard deviation, fitted three ways
with the default priors (``a = b = c = d = 1e-6``):

* ``seq`` - :func:`rvm_ppl.closed_form.vb.fit_vb_regression` (or
  :func:`fit_vb_classification`), the default of ``method="vb"``;
* ``full`` - :func:`fit_vb_regression_full` (:func:`fit_vb_classification_full`),
  Bishop & Tipping's sweeps over every basis function;
* ``ev`` - :func:`rvm_ppl.closed_form.evidence.fit_evidence_regression` (regression only).

Designs: a line ``y = x + 5 + 0.1 e`` on ``x = 1..100`` with linear and cubic
polynomial kernels at input scales 1e-3, 1 and 1e3; noisy sinc (N = 100,
uniform x, seed 0, ``make_sinc``) under an RBF kernel (gamma = 1/9) at input
scales 1e-3 (every column nearly the bias), 1 and 1e3 (nearly the identity),
and with every kernel column duplicated, exactly or up to a relative 1e-6;
Boston's linear kernel (N = 506, 13 standardised-free raw features, as the
outside report fitted it); and two Gaussian blobs (N = 100) for the
classifiers under linear kernels at scales 1e-3, 1, 1e3 and an RBF kernel.
Last, the lazy sequential fit on noisy sinc at ``--lazy-n`` (default N = 20 000;
fastest of ``--reps`` fits, one BLAS thread).

Columns (regression): the bound of each vb fit (units of the standardised
targets), the noise sd ``sqrt(E[1/beta])`` in units of y, and the mean over
the training inputs of the predictive sd (``sqrt(E[1/beta] + Var[phi^T w])``,
the pruned weights' variance and coupling to the Gaussian block included),
for seq, full and ev; the basis functions in seq's Gaussian block (``k``)
and its fit time. For the classifiers: the bounds and the largest difference
of the predicted probabilities ``sigma(phi^T E[w])`` on the training inputs.
``--before FILE`` adds the seq columns of an earlier run (the code before a
change).
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402

import numpy as np  # noqa: E402
from _common import add_results_argument, record_note, record_table, results_name, results_recorder, write_results  # noqa: E402,E501
from scipy.special import expit  # noqa: E402
from threadpoolctl import threadpool_limits  # noqa: E402

from rvm_ppl.closed_form.evidence import fit_evidence_regression  # noqa: E402
from rvm_ppl.closed_form.vb import (  # noqa: E402
    fit_vb_classification,
    fit_vb_classification_full,
    fit_vb_regression,
    fit_vb_regression_full,
)
from rvm_ppl.datasets.loaders import load_boston, make_sinc  # noqa: E402
from rvm_ppl.kernels.kernel import make_kernel  # noqa: E402

SCALES = (1e-3, 1.0, 1e3)
REG_TITLE = "Regression: sequential vb (seq) against the full-sweep vb (full) and the evidence fit (ev)"
CLS_TITLE = "Classification: sequential vb (seq) against the full-sweep vb (full)"
LAZY_TITLE = "Sequential vb on noisy sinc through the lazy kernel basis (bench_vb.py's data, seed 0)"


def _design(kernel, X):
    return np.column_stack([np.ones(len(X)), kernel(X, X)])


def regression_designs():
    """``(name, Phi, y)`` of every regression design."""
    rng = np.random.default_rng(0)
    x = np.arange(1.0, 101.0)
    y = x + 5.0 + 0.1 * rng.standard_normal(100)
    for kname, kernel in (("linear", make_kernel("linear")),
                          ("poly3", make_kernel("poly", degree=3, coef0=1.0))):
        for s in SCALES:
            yield f"line, {kname}, x*{s:g}", _design(kernel, s * x[:, None]), y
    X, ys = make_sinc(100, grid=False, random_state=0)
    rbf = make_kernel("rbf", gamma=1 / 9)
    for s in SCALES:
        yield f"sinc, rbf, x*{s:g}", _design(rbf, s * X), ys
    K = rbf(X, X)
    yield "sinc, rbf, duplicated", np.column_stack([np.ones(100), K, K]), ys
    noise = np.random.default_rng(1).standard_normal(K.shape)
    yield "sinc, rbf, near-duplicated", np.column_stack([np.ones(100), K, K * (1 + 1e-6 * noise)]), ys
    Xb, yb = load_boston()
    yield "boston, linear", _design(make_kernel("linear"), Xb), yb


def classification_designs():
    """``(name, Phi, t)`` of every classification design (two Gaussian blobs, N = 100)."""
    rng = np.random.default_rng(0)
    t = (np.arange(100) % 2).astype(float)
    X = rng.standard_normal((100, 2)) + np.where(t[:, None] == 1, 1.0, -1.0)
    for s in SCALES:
        yield f"blobs, linear, x*{s:g}", _design(make_kernel("linear"), s * X), t
    yield "blobs, rbf", _design(make_kernel("rbf", gamma=0.5), X), t


def noise_sd(res, sd):
    """``sqrt(E[1/beta])`` in units of y (``Q(beta) = Gamma(shape, rate)``)."""
    return sd * float(np.sqrt(res.beta_rate / (res.beta_shape - 1.0)))


def predictive_sd(Phi, res, sd):
    """Mean over the rows of ``Phi`` of the vb predictive sd, in units of y."""
    PA = Phi[:, res.active]
    var = res.beta_rate / (res.beta_shape - 1.0) + np.einsum("nj,nj->n", PA @ res.cov, PA)
    out = np.ones(Phi.shape[1], dtype=bool)
    out[res.active] = False
    G = Phi[:, out]  # phi^T w = phi_A^T (mu_A + eps) + sum_out (phi_m + phi_A^T K_m) w_m
    if res.coupling is not None:
        G = G + PA @ res.coupling[:, out]
    var = var + G**2 @ res.weight_var[out]
    return sd * float(np.mean(np.sqrt(var)))


def evidence_predictive_sd(Phi, res, sd):
    PA = Phi[:, res.active]
    var = 1.0 / res.beta + np.einsum("nj,nj->n", PA @ res.Sigma, PA)
    return sd * float(np.mean(np.sqrt(var)))


def run_regression(full_max):
    rows = []
    for name, Phi, y in regression_designs():
        sd = float(np.std(y))
        t = y / sd
        start = time.perf_counter()
        seq = fit_vb_regression(Phi, t)
        secs = time.perf_counter() - start
        full = fit_vb_regression_full(Phi, t) if Phi.shape[1] <= full_max else None
        ev = fit_evidence_regression(Phi, t)
        row = [name, Phi.shape[1], seq.bound, None if full is None else full.bound,
               noise_sd(seq, sd), None if full is None else noise_sd(full, sd),
               sd / float(np.sqrt(ev.beta)),
               predictive_sd(Phi, seq, sd), None if full is None else predictive_sd(Phi, full, sd),
               evidence_predictive_sd(Phi, ev, sd), len(seq.active), round(secs, 3)]
        print(" | ".join(f"{c:.5g}" if isinstance(c, float) else str(c) for c in row), flush=True)
        rows.append(row)
    return rows


def run_classification():
    rows = []
    for name, Phi, t in classification_designs():
        start = time.perf_counter()
        seq = fit_vb_classification(Phi, t)
        secs = time.perf_counter() - start
        full = fit_vb_classification_full(Phi, t)
        dp = float(np.max(np.abs(expit(Phi @ seq.mean) - expit(Phi @ full.mean))))
        row = [name, Phi.shape[1], seq.bound, full.bound, dp, len(seq.active), round(secs, 3)]
        print(" | ".join(f"{c:.5g}" if isinstance(c, float) else str(c) for c in row), flush=True)
        rows.append(row)
    return rows


def run_lazy(n, reps):
    """Time the sequential vb on noisy sinc through the lazy kernel basis (``bench_vb.py``'s data)."""
    from bench_vb import KERNEL, data

    from rvm_ppl.kernels.basis import kernel_basis

    X, y = data(n, 0)
    t = y / y.std()
    best, res = np.inf, None
    for _ in range(reps):
        start = time.perf_counter()
        res = fit_vb_regression(kernel_basis(KERNEL, X), t)
        best = min(best, time.perf_counter() - start)
    row = [n, round(best, 3), res.n_iter, len(res.active), res.bound]
    print(" | ".join(map(str, row)), flush=True)
    return [row]


def _before(path, title, keep):
    """The columns ``keep`` of table ``title`` in an earlier result file, by design name."""
    with open(path, encoding="utf-8") as fh:
        tables = json.load(fh)["tables"]
    table = next(t for t in tables if t["title"] == title)
    idx = [table["header"].index(k) for k in keep]
    return {r[0]: [r[i] for i in idx] for r in table["rows"]}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--full-max", type=int, default=2000, help="largest M for the full-sweep fits")
    p.add_argument("--before", help="an earlier result file of this script; its seq columns are added")
    p.add_argument("--lazy-n", type=int, nargs="*", default=[20000],
                   help="sizes of noisy sinc for the timing of the lazy sequential fit")
    p.add_argument("--reps", type=int, default=3, help="repeats of each lazy timing (min is shown)")
    add_results_argument(p)
    args = p.parse_args()
    warnings.simplefilter("ignore")
    results_recorder(results_name(__file__).replace("_", "-"), notes=args.note)
    record_note("bound: units of the standardised targets; noise and pred sd: units of y; "
                "pred sd: mean over the training inputs; time s: the seq fit, one BLAS thread.")
    reg_head = ["design", "M", "bound seq", "bound full", "noise seq", "noise full", "noise ev",
                "pred sd seq", "pred sd full", "pred sd ev", "k seq", "time s"]
    cls_head = ["design", "M", "bound seq", "bound full", "max |dp|", "k seq", "time s"]
    with threadpool_limits(1):
        reg = run_regression(args.full_max)
        cls = run_classification()
        lazy = [r for n in args.lazy_n for r in run_lazy(n, args.reps)]
    lazy_head = ["N", "time s", "iter", "k", "bound"]
    if args.before:
        keep = ["bound seq", "noise seq", "pred sd seq"]
        old = _before(args.before, REG_TITLE, keep)
        reg_head += [k.replace("seq", "before") for k in keep]
        reg = [r + old.get(r[0], [None] * len(keep)) for r in reg]
        keep = ["bound seq", "max |dp|"]
        old = _before(args.before, CLS_TITLE, keep)
        cls_head += ["bound before", "max |dp| before"]
        cls = [r + old.get(r[0], [None] * len(keep)) for r in cls]
        old = _before(args.before, LAZY_TITLE, ["time s", "iter", "k", "bound"]) if args.lazy_n else {}
        lazy_head += ["time s before", "iter before", "k before", "bound before"]
        lazy = [r + old.get(r[0], [None] * 4) for r in lazy]
    record_table(REG_TITLE, reg_head, reg)
    record_table(CLS_TITLE, cls_head, cls)
    if lazy:
        record_table(LAZY_TITLE, lazy_head, lazy)
    write_results(args.out)


if __name__ == "__main__":
    main()
