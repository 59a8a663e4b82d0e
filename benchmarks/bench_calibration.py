"""Simulation-based calibration of NUTS, and variational SBC of vb, advi and evidence.

    python benchmarks/bench_calibration.py                     # 200 replications
    python benchmarks/bench_calibration.py --n-sims 50 --figure sbc.png

A small RVM: N = 20 inputs on [-10, 10], a bias and 5 Gaussian kernels
(width 3, centres -8, -4, 0, 4, 8), so M = 6; proper hyperprior
a = b = 2 (alpha around 1), c = 3, d = 0.3 (noise sd around 0.3), from
which every replication draws (alpha, beta, w, y). NUTS: 2 chains x (500
tune + 500 draws), thinned to L = 99 draws; ranks of log beta and of
log alpha of the bias and of the first two kernels
(:func:`rvm_ppl.inference.sbc.sbc`). Prints the per-parameter tests of
:func:`rvm_ppl.inference.sbc.sbc_tests` and, with ``--figure``, writes the
ECDF-difference plots. Run on a shared 2-core machine with one BLAS thread.
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

PRIORS = {"a": 2.0, "b": 2.0, "c": 3.0, "d": 0.3}


def design():
    """The fixed design matrix: bias and 5 Gaussian kernels on 20 inputs."""
    x = np.linspace(-10, 10, 20)[:, None]
    centres = np.linspace(-8, 8, 5)[None, :]
    return np.column_stack([np.ones(20), np.exp(-((x - centres) ** 2) / 9)])


def main():
    from _common import (add_results_argument, print_table, record_data, record_note, results_name,
                         results_recorder, write_results)

    from rvm_ppl.inference.sbc import plot_sbc_ecdf, sbc, sbc_tests

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n-sims", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--figure", default=None)
    ap.add_argument("--csv", default=None, help="write the replications' table here")
    add_results_argument(ap)
    args = ap.parse_args()
    results_recorder(results_name(__file__), notes=args.note)
    t0 = time.perf_counter()
    table = sbc(design(), PRIORS, n_sims=args.n_sims, random_state=args.seed, progress=True)
    wall = time.perf_counter() - t0
    if args.csv:
        table.to_csv(args.csv, index=False)
    tests = sbc_tests(table)
    n_div = int(np.nansum(table[table["method"] == "nuts"].groupby("sim")["n_divergences"].first()))
    print(f"\n{args.n_sims} replications in {wall:.0f} s; NUTS divergences in total: {n_div}\n")
    record_note(f"{args.n_sims} replications in {wall:.0f} s; NUTS divergences in total: {n_div}")
    record_data("nuts_divergences", n_div)
    print_table(["method", "parameter", "n", "mean (rank/L or p)", "p-value"],
                [[r.method, r.parameter, r.n, f"{r.mean:.3f}", f"{r.p_value:.3g}"]
                 for r in tests.itertuples()], title="per-parameter tests (sbc_tests)")
    if args.figure:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(2, 2, figsize=(11, 7), sharey=True)
        for ax, m in zip(axes.ravel(), ("nuts", "vb", "advi", "evidence"), strict=True):
            plot_sbc_ecdf(table, m, ax=ax)
        fig.tight_layout()
        fig.savefig(args.figure, dpi=110)
    write_results(args.out)


if __name__ == "__main__":
    main()
