"""The variational RVR at scale: sequential (pruning) fit against the full one.

    python benchmarks/bench_vb.py                       # N = 100, 1 000, 5 000
    python benchmarks/bench_vb.py --sizes 100 1000 --seeds 0 1 2 --full-max 1000
    python benchmarks/bench_vb.py --part rvc --sizes 200 1000 5000 --full-max 200

Noisy sinc as the estimators see it: x uniform on [-10, 10], t = sin(x)/x +
N(0, 0.1^2), targets divided by their standard deviation, RBF kernel of width
r = 3 (``exp(-(x - x')^2 / 9)``) plus a bias, so M = N + 1. For every N and
seed the table gives, per fitter:

* ``vb`` - :func:`rvm_ppl.closed_form.vb.fit_vb_regression` on the lazy basis of
  :func:`rvm_ppl.kernels.basis.kernel_basis` (the time includes building it);
* ``vb-full`` - :func:`fit_vb_regression_full`, Bishop & Tipping's sweeps on the
  dense N x M design (time includes building it), for N <= ``--full-max``;
* ``evidence`` - :func:`rvm_ppl.closed_form.evidence.fit_evidence_regression` on the same
  lazy basis, for the cost comparison.

Columns: fit time (min over ``--reps`` runs, one BLAS thread), iterations,
basis functions in the Gaussian block (``k``), relevance vectors by the rule
E[gamma_m] = 1 - E[alpha_m] Var[w_m] > 1/2 (the evidence method: alpha finite),
RMS of the prediction (units of y) to sin(x)/x on 1 000 test points, the noise
sd estimate 1/sqrt(E[beta]) in units of y, the final bound (units of the
standardised targets), and the smallest relative step of the bound trace
(negative only by rounding if the trace is monotone). The bound traces follow
the table, sampled at a few iterations.

``--part rvc`` times the classifiers the same way on two Gaussian blobs in 2-D
(means (-1, -1) and (1, 1), unit covariance, Bayes error 0.079), RBF kernel
``exp(-||x - x'||^2 / 2)`` plus a bias: ``vb`` is :func:`fit_vb_classification`
on the lazy basis, ``vb-full`` :func:`fit_vb_classification_full` on the dense
design; test error and log loss of ``sigma(phi(x)^T E[w])`` on 2 000 test points.
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402

import numpy as np  # noqa: E402
from _common import (add_results_argument, record_data, record_note, record_table, results_name,  # noqa: E402
                     results_recorder, write_results)
from threadpoolctl import threadpool_limits  # noqa: E402

from rvm_ppl.closed_form.evidence import fit_evidence_regression  # noqa: E402
from rvm_ppl.closed_form.vb import (  # noqa: E402
    fit_vb_classification,
    fit_vb_classification_full,
    fit_vb_regression,
    fit_vb_regression_full,
)
from rvm_ppl.kernels.basis import kernel_basis  # noqa: E402
from rvm_ppl.kernels.kernel import make_kernel  # noqa: E402

KERNEL = make_kernel("rbf", gamma=1 / 9)
X_TEST = np.linspace(-10, 10, 1000)[:, None]
TRUTH = np.sinc(X_TEST[:, 0] / np.pi)


def data(n, seed):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-10, 10, n)
    y = np.sinc(x / np.pi) + 0.1 * rng.standard_normal(n)
    return x[:, None], y


def predict(X, active, mean):
    """``sum_j mean_j phi_j(x)`` over the active basis functions (0 is the bias)."""
    out = np.full(len(X_TEST), mean[0] if 0 in active else 0.0)
    centres = active[active > 0]
    if centres.size:
        out += KERNEL(X_TEST, X[centres - 1]) @ mean[centres]
    return out


def timed(fn, reps):
    best, res = np.inf, None
    for _ in range(reps):
        start = time.perf_counter()
        res = fn()
        best = min(best, time.perf_counter() - start)
    return best, res


def run(n, seed, reps, full_max, fits):
    X, y = data(n, seed)
    sd = y.std()
    t = y / sd
    rows, traces = [], {}

    def vb():
        return fit_vb_regression(kernel_basis(KERNEL, X), t)

    if "vb" in fits:
        secs, res = timed(vb, reps)
        gamma = 1.0 - res.alpha_mean * res.weight_var
        rows.append(("vb", secs, res, int(np.sum(gamma[res.active] > 0.5)), res.bound_trace))

    if "vb-full" in fits and n <= full_max:
        def full():
            Phi = np.column_stack([np.ones(n), KERNEL(X, X)])
            return fit_vb_regression_full(Phi, t)

        secs, res = timed(full, 1)
        res.active_gamma = 1.0 - res.alpha_mean * res.weight_var
        rows.append(("vb-full", secs, res, int(np.sum(res.active_gamma > 0.5)), res.bound_trace))

    def ev():
        return fit_evidence_regression(kernel_basis(KERNEL, X), t, start=0)

    if "evidence" in fits:
        secs, res = timed(ev, reps)
        rows.append(("evidence", secs, res, len(res.active), None))

    out = []
    for name, secs, r, n_rv, trace in rows:
        if name == "evidence":
            active, mean = r.active, np.zeros(r.alpha.shape)
            mean[r.active] = r.mu
            noise = sd / np.sqrt(r.beta)
            bound, k, step = r.log_evidence, len(r.active), np.nan
        else:
            active, mean = r.active, r.mean
            noise = sd / np.sqrt(r.beta_shape / r.beta_rate)
            bound, k = r.bound, len(r.active)
            steps = np.diff(trace) / np.abs(trace[1:])
            step = float(steps.min()) if steps.size else np.nan
            traces[name] = trace
        rms = float(np.sqrt(np.mean((predict(X, active, mean) * sd - TRUTH) ** 2)))
        out.append((n, seed, name, secs, r.n_iter, k, n_rv, rms, noise, bound, step))
    return out, traces


BLOB_KERNEL = make_kernel("rbf", gamma=0.5)


def blobs(n, seed):
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 2
    X = rng.standard_normal((n, 2)) + np.where(y[:, None] == 1, 1.0, -1.0)
    return X, y.astype(float)


def run_rvc(n, seed, reps, full_max, fits):
    from scipy.special import expit

    X, y = blobs(n, seed)
    Xt, yt = blobs(2000, seed + 1000)
    out = []
    todo = []
    if "vb" in fits:
        todo.append(("vb", reps, lambda: fit_vb_classification(kernel_basis(BLOB_KERNEL, X), y)))
    if "vb-full" in fits and n <= full_max:
        todo.append(("vb-full", 1, lambda: fit_vb_classification_full(
            np.column_stack([np.ones(n), BLOB_KERNEL(X, X)]), y)))
    traces = {}
    for name, r, fn in todo:
        secs, res = timed(fn, r)
        c = res.active[res.active > 0]
        f = (res.mean[0] if 0 in res.active else 0.0) + BLOB_KERNEL(Xt, X[c - 1]) @ res.mean[c]
        p = np.clip(expit(f), 1e-12, 1 - 1e-12)
        err = float(np.mean((p > 0.5) != yt))
        loss = float(-np.mean(yt * np.log(p) + (1 - yt) * np.log(1 - p)))
        steps = np.diff(res.bound_trace) / np.abs(res.bound_trace[1:])
        step = float(steps.min()) if steps.size else np.nan
        out.append((n, seed, name, secs, res.n_iter, len(res.active), err, loss, res.bound, step))
        traces[name] = res.bound_trace
    return out, traces


def main_rvc(args):
    head = (f"{'N':>5} {'seed':>4} {'fit':<9} {'time s':>7} {'iter':>5} {'k':>4} "
            f"{'error':>6} {'logloss':>7} {'bound':>12} {'min step':>9}")
    print(head)
    print("-" * len(head))
    table = []
    with threadpool_limits(1):
        for n in args.sizes:
            for i, seed in enumerate(args.seeds):
                full_max = args.full_max if i < args.full_seeds else 0
                rows, traces = run_rvc(n, seed, args.reps, full_max, args.fits)
                for n_, s, name, secs, it, k, err, loss, bound, step in rows:
                    print(f"{n_:>5} {s:>4} {name:<9} {secs:>7.2f} {it:>5} {k:>4} {err:>6.3f} "
                          f"{loss:>7.4f} {bound:>12.3f} {step:>9.1e}", flush=True)
                    table.append([n_, s, name, round(secs, 3), it, k, err, loss, bound, step])
                record_data(f"bound_traces N={n} seed={seed}", traces)
    record_table("RVC on two Gaussian blobs: vb against the full-sweep vb",
                 ["N", "seed", "fit", "time s", "iter", "k", "error", "logloss", "bound", "min step"], table)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[100, 1000, 5000])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--reps", type=int, default=2, help="repeats of each timing (min is shown)")
    p.add_argument("--full-max", type=int, default=1000,
                   help="largest N for the full (O(M^3) per sweep) fit; it runs once per seed")
    p.add_argument("--full-seeds", type=int, default=1,
                   help="number of seeds (the first ones) for which the full fit runs")
    p.add_argument("--fits", nargs="+", default=["vb", "vb-full", "evidence"],
                   choices=["vb", "vb-full", "evidence"])
    p.add_argument("--part", choices=["rvr", "rvc"], default="rvr")
    add_results_argument(p)
    args = p.parse_args()
    warnings.simplefilter("ignore")  # convergence warnings show up as n_iter in the table
    results_recorder(results_name(__file__, args.part if args.part != "rvr" else None), notes=args.note)
    record_note("time s: the fastest of --reps fits, wall-clock on the machine named here, as loaded as its load "
                "average says.")
    if args.part == "rvc":
        main_rvc(args)
        write_results(args.out)
        return
    head = (f"{'N':>5} {'seed':>4} {'fit':<9} {'time s':>7} {'iter':>5} {'k':>4} {'RVs':>4} "
            f"{'RMS':>7} {'noise':>7} {'bound / log ev.':>16} {'min step':>9}")
    print(head)
    print("-" * len(head))
    all_traces, table = [], []
    with threadpool_limits(1):
        for n in args.sizes:
            for i, seed in enumerate(args.seeds):
                full_max = args.full_max if i < args.full_seeds else 0
                rows, traces = run(n, seed, args.reps, full_max, args.fits)
                for n_, s, name, secs, it, k, rv, rms, noise, bound, step in rows:
                    print(f"{n_:>5} {s:>4} {name:<9} {secs:>7.2f} {it:>5} {k:>4} {rv:>4} "
                          f"{rms:>7.4f} {noise:>7.4f} {bound:>16.3f} {step:>9.1e}", flush=True)
                    table.append([n_, s, name, round(secs, 3), it, k, rv, rms, noise, bound, step])
                all_traces.append((n, seed, traces))
                record_data(f"bound_traces N={n} seed={seed}", traces)
    record_table("RVR on noisy sinc: sequential vb, full-sweep vb and the evidence fit",
                 ["N", "seed", "fit", "time s", "iter", "k", "RVs", "RMS", "noise", "bound / log ev.", "min step"],
                 table)
    print("\nBound traces (iteration: bound), sampled:")
    for n, seed, traces in all_traces:
        for name, tr in traces.items():
            idx = np.unique(np.r_[0, np.geomspace(1, len(tr), 8).astype(int) - 1, len(tr) - 1])
            pts = ", ".join(f"{i + 1}: {tr[i]:.2f}" for i in idx)
            ok = np.all(np.diff(tr) >= -1e-9 * np.abs(tr[1:]))
            mono = "non-decreasing" if ok else "DECREASES"
            print(f"N = {n}, seed {seed}, {name} ({mono}): {pts}")
    write_results(args.out)


if __name__ == "__main__":
    main()
