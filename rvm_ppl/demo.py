"""The main job: fit Tipping's noisy sinc problem with every method and compare.

Run as ``python -m rvm_ppl.demo --out out``. Writes

* ``alpha_comparison.png``: the posteriors of log10 alpha of every method
  side by side (type-II ML as points, pruned bases at the right edge);
* ``predictive.png``: each method's predictive mean and ±2 sd band with its
  relevance vectors;
* ``methods.md``: fit time, RMS to the true function, relevance vectors,
  noise estimate, and each method's own diagnostics.
"""

from __future__ import annotations

import argparse
import logging
import os
import time
import warnings
from pathlib import Path


def _row(method, model, seconds, rms):
    import numpy as np

    attrs = model.idata_.attrs
    if method == "nuts":
        extra = (f"divergences {attrs['n_divergences']}, max r-hat {attrs['max_rhat']:.3f}, "
                 f"min bulk ESS (log alpha) {attrs['min_ess_bulk_log_alpha']:.0f}, "
                 f"{attrs['ess_per_s']:.0f} ESS/s")
    elif method in ("vb", "advi"):
        extra = f"final ELBO {float(model.idata_.fit['elbo'].values[-1]):.1f}"
    else:
        extra = f"log evidence {model.log_evidence_:.1f}"
    gamma = model.idata_.relevance["gamma"].values
    return (f"| {method} | {seconds:.2f} | {rms:.4f} | {len(model.relevance_)} | "
            f"{float(np.sum(gamma)):.1f} | {1 / np.sqrt(model.beta_):.4f} | {extra} |")


def main(argv=None):
    """Fit noisy sinc by evidence, vb, advi and nuts; write figures and a table."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="out", help="output folder")
    parser.add_argument("--n", type=int, default=100, help="training points")
    parser.add_argument("--draws", type=int, default=1000, help="posterior draws per chain")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    warnings.filterwarnings("ignore", category=FutureWarning)
    logging.getLogger("pymc").setLevel(logging.WARNING)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from rvm_ppl import RVR
    from rvm_ppl.compare import alpha_table
    from rvm_ppl.datasets import make_sinc, sinc
    from rvm_ppl.plotting import plot_alpha, plot_predictive

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    X, y = make_sinc(args.n, random_state=args.seed)
    Xt = np.linspace(-10, 10, 1000)[:, None]
    truth = sinc(Xt[:, 0])

    models, rows = {}, []
    for method in ("evidence", "vb", "advi", "nuts"):
        print(f"fitting {method} ...", flush=True)
        model = RVR(gamma=1 / 9, draws=args.draws, tune=args.draws, chains=2, random_state=args.seed,
                    sample_kwargs={"progressbar": True} if method in ("advi", "nuts") else None)
        start = time.perf_counter()
        model.fit(X, y, method=method)
        seconds = time.perf_counter() - start
        mean = model.predict(Xt)
        rms = float(np.sqrt(np.mean((mean - truth) ** 2)))
        models[method] = model
        rows.append(_row(method, model, seconds, rms))

    idatas = {m: model.idata_ for m, model in models.items()}
    shown = [f"x_{i}" for i in models["evidence"].relevance_]
    first_pruned = [b for b in idatas["evidence"].posterior.basis.values[1:]
                    if b not in shown][: max(3, len(shown) // 2)]
    basis = ["bias"] + sorted(shown + first_pruned, key=lambda b: int(b.split("_")[1]))
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(basis) + 1.5))
    plot_alpha(idatas, basis=basis, ax=ax)
    ax.set_title(f"What each method says about alpha (noisy sinc, N = {args.n})")
    fig.tight_layout()
    fig.savefig(out / "alpha_comparison.png", dpi=110)

    fig, axes = plt.subplots(2, 2, figsize=(11, 7), sharex=True, sharey=True)
    for ax, (method, model) in zip(axes.ravel(), models.items()):
        mean, std = model.predict(Xt, return_std=True)
        plot_predictive(Xt[:, 0], mean, std, X=X, y=y, relevance=model.relevance_, truth=truth,
                        ax=ax, label=method)
        ax.set_title(method)
    fig.tight_layout()
    fig.savefig(out / "predictive.png", dpi=110)

    table = "\n".join([
        "| method | fit time (s) | RMS to sin(x)/x | relevance vectors | effective parameters (sum E[gamma]) | noise sd | diagnostics |",
        "|---|---|---|---|---|---|---|",
        *rows,
    ]) + "\n"
    alpha = alpha_table(idatas).round(2).to_markdown() if _has_tabulate() else alpha_table(idatas).round(2).to_string()
    (out / "methods.md").write_text(
        f"# Noisy sinc, N = {args.n}, RBF r = 3\n\n{table}\n## log10 alpha of the bases relevant to any method\n\n{alpha}\n"
    )
    print(table)
    print(f"wrote {out / 'alpha_comparison.png'}, {out / 'predictive.png'} and {out / 'methods.md'}")


def _has_tabulate():
    import importlib.util

    return importlib.util.find_spec("tabulate") is not None


if __name__ == "__main__":
    main()
