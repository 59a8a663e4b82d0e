"""How many NUTS draws the Boston posterior needs before r-hat reaches 1.01.

    python benchmarks/bench_mixing.py --seeds 0 1 --draws 3000      # nutpie, 4 chains
    python benchmarks/bench_mixing.py --sampler pymc --seeds 0
    python benchmarks/bench_mixing.py --from run0.nc run1.nc        # saved InferenceData
    python benchmarks/bench_mixing.py --gamma 0.01 --draws 1000 --low-rank 1e-6 --save DIR
    python benchmarks/bench_mixing.py --compare --from ref.nc other.nc ...  # W1 to ref.nc

Boston housing, a random 481 / 25 split per seed (``bench_datasets.problem``),
RBF ``gamma = 0.1`` by default (the width of ``bench_bayes.py --part
gradient``; ``--gamma 0.01`` is the 5-fold CV choice of ``bench_datasets.py``),
``RVR(method="nuts")`` with 4 chains x (1000 tune + ``--draws`` draws) and
otherwise the package defaults. For the first 1000, 2000, ... draws of each
chain the table gives the largest rank-normalised split r-hat and the
smallest bulk ESS over ``log alpha`` (Vehtari et al. 2021), with the basis
function where each occurs, and how the worst ``log alpha`` splits its mass
between the low-alpha peak (below the median of the draws of every chain) and
the rest. ``--save DIR`` keeps each run's InferenceData for ``--from``.
One BLAS thread.

``--low-rank TOL`` samples the RVM on the design's truncated SVD
(``RVR(low_rank=TOL)``, :func:`rvm_ppl.model.marginal.truncated_factor`), a
cheaper gradient on a nearby design. ``--compare`` reads saved runs (``--from``),
the first the reference, and gives for each run its time, diagnostics and the
1-Wasserstein distance of every basis's ``log10 alpha`` to the reference's
(:func:`rvm_ppl.output.diagnostics.compare_to_reference`); a second run of the
exact design with another seed shows what Monte Carlo error alone gives. For a
run on a truncated design it adds the Pareto k-hat of the exact design's
posterior against the one sampled, and the effective sample size of those
importance weights (:func:`rvm_ppl.pymc_fitters.truncation.check_truncation`,
at most ``CHECK_DRAWS`` draws), which ``RVR`` records in every NUTS fit on a
truncated design. ``--low-rank auto`` is the estimator's default rule.
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402

import numpy as np  # noqa: E402

GAMMA = 0.1


def _sample(seed, sampler, draws, save, gamma, low_rank=None, state=None):
    """One NUTS run on split ``seed`` (PyMC's seed ``state``, default ``seed``)."""
    from bench_datasets import problem

    from rvm_ppl import RVR

    _, X, y, _, _, _, gamma = problem("boston", seed, [gamma])
    state = seed if state is None else state
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the table reports what SamplingWarning would
        model = RVR(gamma=gamma, draws=draws, random_state=state, low_rank=low_rank,
                    sample_kwargs={"nuts_sampler": sampler}).fit(X, y, method="nuts")
    wall = time.perf_counter() - t0
    idata = model.idata_
    idata.attrs["wall_s"] = wall
    if save:
        tag = "" if low_rank is None else f"_lowrank{low_rank:g}" if low_rank != "auto" else "_auto"
        os.makedirs(save, exist_ok=True)
        idata.to_netcdf(os.path.join(save, f"boston_{sampler}_{seed}_{state}_{gamma:g}{tag}.nc"))
    return f"{seed} ({sampler})", idata, wall


def _rhat_ess(log_alpha):
    """Split r-hat and bulk ESS of every basis's ``log alpha`` (chain, draw, basis)."""
    import arviz as az

    M = log_alpha.shape[-1]
    rhat = np.array([az.rhat(log_alpha[..., m]) for m in range(M)], dtype=float)
    ess = np.array([az.ess(log_alpha[..., m], method="bulk") for m in range(M)], dtype=float)
    return rhat, ess


def _low_rank(value):
    """``--low-rank``: "auto" or a float."""
    return value if value == "auto" else float(value)


def _design_check(idata, tol, seed, gamma):
    """``(k-hat, IS ESS)`` of a truncated run against the exact design: the fit's, or computed.

    Runs saved before the fits recorded their check get it here, with the
    models rebuilt from split ``seed`` at ``gamma`` (the estimator's design:
    the bias, then the kernel columns; the hyperprior in the fit's units).
    """
    import json

    from bench_datasets import problem

    from rvm_ppl import build_model
    from rvm_ppl.kernels.kernel import RBF, design_matrix
    from rvm_ppl.pymc_fitters.truncation import check_truncation

    if "design_khat" in idata.attrs:
        return float(idata.attrs["design_khat"]), float(idata.attrs["design_ess"])
    _, X, y, _, _, _, gamma = problem("boston", seed, [gamma])
    if not np.array_equal(X, idata.constant_data["X"].values):
        raise ValueError("--compare: a run of another split or scaling; pass its --seeds.")
    Phi = design_matrix(X, X, RBF(gamma=gamma))  # the bias, then the kernel columns
    priors = json.loads(idata.attrs["hyperprior"])
    models = [build_model(Phi, y, priors=priors, low_rank=lr) for lr in (None, tol)]
    post = idata.posterior
    check = check_truncation(*models, post["alpha"].values, post["beta"].values)
    return check.khat, check.ess


def _compare(runs, seed, gamma):
    """Rows of ``--compare``: each run's cost, diagnostics, W1 of log10 alpha to the first,
    and for a truncated design the Pareto k-hat of the exact posterior against it."""
    from rvm_ppl.output.diagnostics import compare_to_reference

    (_, ref, _), rows = runs[0], []
    for label, idata, _ in runs:
        rhat, ess = _rhat_ess(np.log(idata.posterior["alpha"].values))
        attrs = idata.attrs
        tol = float(attrs.get("design_tol", 0.0))
        rank = attrs.get("design_rank", "full")
        if idata is ref:
            w1 = ("(reference)", "", "")
        else:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # a truncated design is another model: known here
                table = compare_to_reference({"run": idata, "ref": ref}, reference="ref")
            d = table[table["parameter"] == "log10_alpha"]["w1"].to_numpy(dtype=float)
            w1 = (f"{np.mean(d):.3f}", f"{np.percentile(d, 90):.3f}", f"{np.max(d):.3f}")
        check = ("", "")
        if tol:
            khat, ess_is = _design_check(idata, tol, seed, gamma)
            check = (f"{khat:.2f}", f"{ess_is:.0f}")
        rows.append((label, f"{tol:g}" if tol else "exact", rank,
                     f"{attrs.get('wall_s', np.nan):.0f}",
                     f"{attrs.get('sampling_time_s', np.nan):.0f}",
                     int(idata.sample_stats["diverging"].values.sum()), f"{np.nanmax(rhat):.3f}",
                     f"{np.nanmin(ess):.0f}",
                     *w1, *check))
    return rows


def _rows(label, idata, wall):
    log_alpha = np.log(idata.posterior["alpha"].values)  # (chain, draw, basis)
    names = idata.posterior["basis"].values
    n_draws = log_alpha.shape[1]
    attrs = idata.attrs
    sampling = attrs.get("sampling_time_s", np.nan)
    rows = []
    for d in range(1000, n_draws + 1, 1000):
        part = log_alpha[:, :d]
        rhat, ess = _rhat_ess(part)
        worst = int(np.nanargmax(rhat))
        low = part[..., worst] < np.median(part[..., worst])
        per_chain = ", ".join(f"{f:.2f}" for f in low.mean(axis=1))
        rows.append((
            label, f"{wall:.0f}" if np.isfinite(wall) else "",
            f"{sampling:.0f}" if d == n_draws else "",
            int(idata.sample_stats["diverging"].values[:, :d].sum()), d,
            f"{rhat[worst]:.3f} ({names[worst]})",
            f"{np.nanmin(ess):.0f} ({names[int(np.nanargmin(ess))]})",
            f"{1000 * np.nanmin(ess) / (d * part.shape[0]):.0f}", per_chain,
        ))
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--sampler", default="nutpie", choices=["nutpie", "pymc"])
    p.add_argument("--gamma", type=float, default=GAMMA, help="RBF width")
    p.add_argument("--draws", type=int, default=3000, help="draws per chain after tuning")
    p.add_argument("--save", default=None, help="directory for each run's InferenceData")
    p.add_argument("--from", dest="files", nargs="+", default=None,
                   help="analyse saved InferenceData instead of sampling")
    p.add_argument("--low-rank", type=_low_rank, default=None,
                   help="sample on the design's truncated SVD at this relative singular value, "
                        "or 'auto' (the estimator's default rule)")
    p.add_argument("--state", type=int, default=None, help="PyMC's seed (default: the split seed)")
    p.add_argument("--compare", action="store_true",
                   help="with --from: W1 of log10 alpha of each run to the first")
    from _common import add_results_argument, print_table, results_name, results_recorder, write_results

    add_results_argument(p)
    args = p.parse_args(argv)
    name = results_name(__file__, "truncation" if args.compare else None)
    results_recorder(name, argv=None if argv is None else [__file__, *argv], notes=args.note)

    if args.files:
        import arviz as az

        runs = [(os.path.splitext(os.path.basename(f))[0], az.from_netcdf(f), np.nan)
                for f in args.files]
    else:
        runs = (_sample(s, args.sampler, args.draws, args.save, args.gamma, args.low_rank,
                        args.state) for s in args.seeds)
    if args.compare:
        title = ("Boston (481 points, M = 482), NUTS with 4 chains: the exact design against its "
                 "truncated SVD; W1 of each basis's log10 alpha to the first run")
        print_table(["run", "design", "rank", "wall s", "sampling s", "div.", "max r-hat",
                     "min bulk ESS", "W1 mean", "W1 90 %", "W1 max", "k-hat", "IS ESS"],
                    _compare(list(runs), args.seeds[0], args.gamma), title=title)
        write_results(args.out)
        return
    rows = []
    for label, idata, wall in runs:
        rows.extend(_rows(label, idata, wall))
        print(f"# {rows[-1]}", flush=True)
    title = ("Boston (481 points, M = 482), NUTS with 4 chains; r-hat and ESS over log alpha "
             "for the first d draws of each chain")
    print(f"\n{title}:\n")
    print_table(["split seed", "wall s", "sampling s", "div.", "draws d", "max r-hat (at)",
                 "min bulk ESS (at)", "ESS per 1000 draws",
                 "worst: share below its median, per chain"], rows, title=title)
    write_results(args.out)


if __name__ == "__main__":
    main()
