"""NUTS and ADVI on noisy sinc: convergence, speed and accuracy of the defaults.

    python benchmarks/bench_bayes.py                       # parts nuts and advi
    python benchmarks/bench_bayes.py --part setup          # threads, backends, cores
    python benchmarks/bench_bayes.py --part gradient       # cost of one logp + gradient
    python benchmarks/bench_bayes.py --part nuts --sizes 100 --seeds 0 1 2

Data: x ~ U[-10, 10] (``make_sinc(grid=False)``), t = sin(x)/x + N(0, 0.1^2),
Phi = [1, exp(-(x_i - x_j)^2 / 9)], targets divided by their standard
deviation before fitting (as the estimators do) and results scaled back.
RMS is against the true sinc on 1000 equally spaced points, with the
predictor ``Phi(x) E[w]`` (``idata.fit.mean``); the noise sd estimate is the
posterior mean of ``beta^{-1/2}``.

Every configuration runs in its own process (so that thread settings made
through the environment apply before numpy is imported). Other processes on
a 2-core machine can slow a run several times over: "busy" is the number of
CPUs other processes kept busy in the 2 s before a run (``--max-busy`` waits
for a quieter machine), and "CPU s" the CPU time of the run's whole process
tree (imports and compilation included). ESS/s divides the
smallest bulk ESS over ``log alpha`` by the sampling time (tuning included,
compilation excluded); "wall" includes model building and compilation.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import subprocess
import sys
import time

import numpy as np
from _common import (add_results_argument, print_table, record_note, results_name, results_recorder,
                     write_results)


def _data(n, seed):
    from rvm_ppl.datasets.loaders import make_sinc
    from rvm_ppl.kernels.kernel import RBF, design_matrix

    X, t = make_sinc(n, grid=False, random_state=seed)
    kernel = RBF(gamma=1 / 9)
    Phi = design_matrix(X, X, kernel)
    Xt = np.linspace(-10, 10, 1000)[:, None]
    return X, t, Phi, design_matrix(Xt, X, kernel), Xt[:, 0]


def _accuracy(idata, scale, Ptest, xt):
    from rvm_ppl.datasets.loaders import sinc

    pred = Ptest @ idata.fit["mean"].values * scale
    rms = float(np.sqrt(np.mean((pred - sinc(xt)) ** 2)))
    sigma = float(scale * (1.0 / np.sqrt(idata.posterior["beta"])).mean())
    return rms, sigma


def _busy_cpus(interval=2.0):
    """CPUs kept busy by all processes over ``interval`` seconds (from /proc/stat)."""
    def sample():
        with open("/proc/stat") as fh:
            vals = [int(v) for v in fh.readline().split()[1:]]
        idle = vals[3] + vals[4]  # idle + iowait
        return sum(vals) - idle, sum(vals)

    try:
        b0, t0 = sample()
        time.sleep(interval)
        b1, t1 = sample()
    except OSError:  # not Linux: fall back to the load average
        return os.getloadavg()[0]
    return (b1 - b0) / max(t1 - t0, 1) * (os.cpu_count() or 1)


def _load(max_busy=None, max_wait=0.0):
    """CPUs busy with other work just before a run; wait (up to max_wait s) for a quiet machine."""
    busy = _busy_cpus()
    waited = 0.0
    while max_busy is not None and busy > max_busy and waited < max_wait:
        waited += 10.0
        time.sleep(8.0)
        busy = _busy_cpus()
    return busy


def worker_nuts(cfg):
    import warnings

    from rvm_ppl import build_model, fit_nuts

    X, t, Phi, Ptest, xt = _data(cfg["n"], cfg["data_seed"])
    scale = float(np.std(t))
    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        idata = fit_nuts(
            build_model(Phi, t / scale, priors=cfg.get("priors")), nuts_sampler=cfg["sampler"],
            random_seed=cfg["seed"], compile_mode=cfg.get("compile_mode", "NUMBA"),
            blas_threads=cfg.get("blas_threads", 1), cores=cfg.get("cores"),
            chains=cfg.get("chains", 2),
            **{k: cfg[k] for k in ("target_accept", "tune", "draws") if k in cfg},
        )
    total = time.perf_counter() - t0
    rms, sigma = _accuracy(idata, scale, Ptest, xt)
    a = idata.attrs
    return dict(
        total_s=total, wall_s=a["wall_time_s"], sampling_s=a["sampling_time_s"],
        div=a["n_divergences"], rhat=a["max_rhat"], ess=a["min_ess_bulk_log_alpha"],
        ess_s=a["ess_per_s"], ess_wall=a["min_ess_bulk_log_alpha"] / a["wall_time_s"],
        rms=rms, sigma=sigma, steps=float(idata.sample_stats["n_steps"].mean()),
        warnings=[str(r.message)[:120] for r in rec if issubclass(r.category, UserWarning)
                  and "BLAS" not in str(r.message)],
    )


def worker_advi(cfg):
    import warnings

    from rvm_ppl import build_model, fit_advi

    X, t, Phi, Ptest, xt = _data(cfg["n"], cfg["data_seed"])
    scale = float(np.std(t))
    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        idata = fit_advi(build_model(Phi, t / scale, parameterization=cfg["par"]),
                         method=cfg["method"], random_seed=cfg["seed"])
    total = time.perf_counter() - t0
    rms, sigma = _accuracy(idata, scale, Ptest, xt)
    a = idata.attrs
    return dict(
        total_s=total, wall_s=a["wall_time_s"], n_iter=a["n_iter"], converged=a["converged"],
        # The ELBO of the targets in their own units: shift by -N log(scale).
        elbo=a["elbo"] - cfg["n"] * np.log(scale), rms=rms, sigma=sigma,
        warnings=[str(r.message)[:120] for r in rec if issubclass(r.category, UserWarning)
                  and "BLAS" not in str(r.message)],
    )


def worker_eval(cfg):
    """Time one logp + gradient evaluation of the marginal model."""
    import pymc as pm
    import pytensor.tensor as pt
    from pymc.blocking import DictToArrayBijection

    from rvm_ppl.model.build import build_model

    X, t, Phi, _, _ = _data(cfg["n"], cfg["data_seed"])
    y = t / np.std(t)
    if cfg["form"] == "MxM":
        model = build_model(Phi, y)
    else:  # the N x N MvNormal form, as build_model declared it before; reference only
        N = len(y)
        with pm.Model() as model:
            alpha = pm.Gamma("alpha", 1e-6, 1e-6, shape=Phi.shape[1])
            beta = pm.Gamma("beta", 1e-6, 1e-6)
            cov = (Phi / alpha) @ Phi.T + pt.eye(N) / beta
            pm.MvNormal("y", mu=pt.zeros(N), cov=cov, observed=y)
    t0 = time.perf_counter()
    f = model.logp_dlogp_function(ravel_inputs=True, mode=cfg["mode"])
    f.set_extra_values({})
    ip = model.initial_point()
    x = DictToArrayBijection.map({k: ip[k] for k in ip}).data
    x = x + np.random.default_rng(0).normal(0, 2, x.size)
    f(x)
    compile_s = time.perf_counter() - t0
    reps = 2000
    t0 = time.perf_counter()
    c0 = time.process_time()
    for _ in range(reps):
        f(x)
    return dict(eval_ms=(time.perf_counter() - t0) / reps * 1e3,
                eval_cpu_ms=(time.process_time() - c0) / reps * 1e3, compile_s=compile_s)


def _gradient_problem(name):
    """``(y, Phi)`` of a problem of ``--part gradient``: ``sinc<N>`` or ``boston``."""
    from rvm_ppl.kernels.kernel import RBF, design_matrix

    if name == "boston":
        from sklearn.preprocessing import StandardScaler

        from rvm_ppl.datasets.loaders import load_boston

        X, t = load_boston()
        X = StandardScaler().fit_transform(X[:GRADIENT_BOSTON_N])
        Phi = design_matrix(X, X, RBF(gamma=GRADIENT_BOSTON_GAMMA))
        t = t[:GRADIENT_BOSTON_N]
    else:
        _, t, Phi, _, _ = _data(int(name[4:]), 0)
    return t / np.std(t), Phi


def worker_gradient(cfg):
    """Time logp + gradient as PyMC's NUTS compiles and calls them: min over many calls."""
    from pymc.blocking import DictToArrayBijection

    from rvm_ppl.model.build import build_model

    y, Phi = _gradient_problem(cfg["problem"])
    if cfg.get("inverse", "trtri") != "trtri":  # the M x M op before LAPACK's dtrtri
        import functools

        from rvm_ppl.model import build as model_module

        model_module._marginal_loglike = functools.partial(model_module._marginal_loglike,
                                                           inverse=cfg["inverse"])
    t0 = time.perf_counter()
    model = build_model(Phi, y, low_rank=cfg["low_rank"])
    build_s = time.perf_counter() - t0
    rank = model["lowrank_Q"].get_value().shape[1] if "lowrank_Q" in model.named_vars else None
    t0 = time.perf_counter()
    f = model.logp_dlogp_function(ravel_inputs=True, mode=cfg["mode"])
    f.set_extra_values({})
    f.trust_input = True
    ip = model.initial_point()
    x = DictToArrayBijection.map({k: ip[k] for k in ip}).data
    x = x + np.random.default_rng(0).normal(0, 2, x.size)
    f(x)
    compile_s = time.perf_counter() - t0
    nodes = f._pytensor_function.maker.fgraph.apply_nodes
    n_chol = sum("Cholesky" in type(n.op).__name__ for n in nodes)
    times = []
    t_end = time.perf_counter() + cfg["seconds"]
    while len(times) < 20 or (time.perf_counter() < t_end and len(times) < 5000):
        t1 = time.perf_counter()
        f(x)
        times.append(time.perf_counter() - t1)
    return dict(ms=min(times) * 1e3, median_ms=float(np.median(times)) * 1e3, calls=len(times),
                compile_s=compile_s, build_s=build_s, rank=rank, n_cholesky=n_chol,
                M=Phi.shape[1])


WORKERS = {"nuts": worker_nuts, "advi": worker_advi, "eval": worker_eval,
           "gradient": worker_gradient}


QUIET = {"max_busy": None, "max_wait": 0.0, "timeout": 600.0}


def run(kind, cfg, env=None):
    """Run one configuration in a fresh process; return its result dict."""
    load = _load(QUIET["max_busy"], QUIET["max_wait"])
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    full_env = dict(os.environ)
    full_env.update(env or {})
    # A session of its own, so that a timeout also ends PyMC's chain processes.
    proc = subprocess.Popen(
        [sys.executable, __file__, "--worker", kind, json.dumps(cfg)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=full_env,
        start_new_session=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=QUIET["timeout"])
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return {"error": f"> {QUIET['timeout']:.0f} s, stopped", "load": load}
    lines = [ln for ln in stdout.splitlines() if ln.startswith("{")]
    if proc.returncode or not lines:
        sys.stderr.write(stderr[-3000:])
        return {"error": f"exit {proc.returncode}", "load": load}
    res = json.loads(lines[-1])
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    res["load"] = load
    # CPU seconds of the whole process tree (imports, compilation, workers).
    res["cpu_s"] = (ru1.ru_utime + ru1.ru_stime) - (ru0.ru_utime + ru0.ru_stime)
    return res


ONE_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}


def part_nuts(args):
    rows = []
    for n in args.sizes:
        for sampler in args.samplers:
            for seed in args.seeds:
                cfg = dict(n=n, data_seed=seed, seed=seed, sampler=sampler, chains=args.chains)
                r = run("nuts", cfg, ONE_THREAD)
                if "error" in r:
                    rows.append((n, sampler, seed, r["error"], *[""] * 12))
                    continue
                rows.append((
                    n, sampler, seed, f"{r['load']:.1f}", f"{r['wall_s']:.1f}",
                    f"{r['sampling_s']:.1f}", f"{r['cpu_s']:.0f}", r["div"], f"{r['rhat']:.3f}",
                    f"{r['ess']:.0f}", f"{r['ess_s']:.0f}", f"{r['ess_wall']:.0f}",
                    f"{r['steps']:.0f}", f"{r['rms']:.4f}", f"{r['sigma']:.4f}",
                ))
                print(f"# {rows[-1]}", file=sys.stderr, flush=True)
    title = (f"NUTS, package defaults with {args.chains} chains (marginal form, {args.chains} x (1000 tune + 1000 "
             "draws), target_accept 0.8, NUMBA backend, 1 BLAS thread)")
    print(f"{title}:\n")
    print_table(["N", "sampler", "seed", "busy", "wall s", "sampling s", "CPU s", "div.",
            "max r-hat", "min ESS log a", "ESS/s", "ESS/s wall", "steps/draw", "RMS", "noise sd"],
           rows, title=title)


def part_advi(args):
    rows = []
    for n in args.sizes:
        for method, par in (("advi", "marginal"), ("advi", "centered"), ("advi", "noncentered"),
                            ("fullrank_advi", "marginal")):
            for seed in args.seeds:
                cfg = dict(n=n, data_seed=seed, seed=seed, par=par, method=method)
                r = run("advi", cfg, ONE_THREAD)
                if "error" in r:
                    rows.append((n, method, par, seed, r["error"], *[""] * 7))
                    continue
                rows.append((
                    n, method, par, seed, f"{r['load']:.1f}", f"{r['wall_s']:.1f}", r["n_iter"],
                    "yes" if r["converged"] else "no", f"{r['elbo']:.1f}", f"{r['sigma']:.4f}",
                    f"{r['rms']:.4f}",
                ))
                print(f"# {rows[-1]}", file=sys.stderr, flush=True)
    title = ("ADVI (Adam 0.01, stop when the median loss over 1000 iterations moves by less "
             "than 0.01 nats per observation twice in a row, at most 50000 iterations; "
             "1000 draws)")
    print(f"{title}:\n")
    print_table(["N", "method", "form", "seed", "busy", "wall s", "iterations", "converged",
            "final ELBO", "noise sd", "RMS"], rows, title=title)


def part_setup(args):
    n = args.sizes[0]
    rows = []
    for form in ("MxM", "NxN"):
        for mode in ("NUMBA", "FAST_RUN"):
            r = run("eval", dict(n=n, data_seed=0, form=form, mode=mode), ONE_THREAD)
            rows.append((n, form, mode, f"{r['load']:.1f}", f"{r['eval_ms']:.3f}",
                         f"{r['eval_cpu_ms']:.3f}", f"{r['compile_s']:.1f}"))
            print(f"# {rows[-1]}", file=sys.stderr, flush=True)
    title = "One logp + gradient evaluation of the marginal model (warm compile cache)"
    print(f"{title}:\n")
    print_table(["N", "form", "backend", "busy", "ms / eval", "CPU ms / eval", "compile s"], rows, title=title)

    rows = []
    settings = [
        ("NUMBA", 1, 2, ONE_THREAD, "OPENBLAS_NUM_THREADS=1, threadpool_limits(1)"),
        ("NUMBA", 1, 2, {}, "threadpool_limits(1) only"),
        ("NUMBA", None, 2, {}, "no limit (default threads)"),
        ("NUMBA", 1, 1, ONE_THREAD, "1 BLAS thread, chains in sequence (cores=1)"),
        ("FAST_RUN", 1, 2, ONE_THREAD, "C backend, 1 BLAS thread"),
    ]
    for mode, blas, cores, env, label in settings:
        cfg = dict(n=n, data_seed=0, seed=0, sampler="pymc", compile_mode=mode,
                   blas_threads=blas, cores=cores)
        r = run("nuts", cfg, env)
        if "error" in r:
            rows.append((label, mode, cores, r["error"], "", "", "", "", ""))
            continue
        rows.append((label, mode, cores, f"{r['load']:.1f}", f"{r['wall_s']:.1f}",
                     f"{r['sampling_s']:.1f}", f"{r['cpu_s']:.0f}", r["div"], f"{r['ess_s']:.0f}"))
        print(f"# {rows[-1]}", file=sys.stderr, flush=True)
    for blas, env, label in ((1, ONE_THREAD, "nutpie, 1 BLAS thread"),
                             (None, {}, "nutpie, no limit (default threads)")):
        r = run("nuts", dict(n=n, data_seed=0, seed=0, sampler="nutpie", blas_threads=blas), env)
        if "error" not in r:
            rows.append((label, "numba (nutpie)", 2, f"{r['load']:.1f}", f"{r['wall_s']:.1f}",
                         f"{r['sampling_s']:.1f}", f"{r['cpu_s']:.0f}", r["div"],
                         f"{r['ess_s']:.0f}"))
            print(f"# {rows[-1]}", file=sys.stderr, flush=True)
    title = f"NUTS on N = {n} by thread setting, backend and cores (seed 0)"
    print(f"{title}:\n")
    print_table(["setting", "backend", "cores", "busy", "wall s", "sampling s", "CPU s", "div.",
            "ESS/s"], rows, title=title)


GRADIENT_PROBLEMS = ("sinc100", "sinc200", "sinc481", "sinc1000", "boston")
GRADIENT_BOSTON_N, GRADIENT_BOSTON_GAMMA = 481, 0.1  # bench_evidence.py's Boston gammas: 0.003-0.1
# PyTensor's mode "C" (the whole graph as one C module) fails without a linked
# BLAS ("Gemv cannot produce C code"); FAST_RUN runs C code per op where it can.
GRADIENT_FORMS = (  # (label, build_model's low_rank, L^{-1} of the M x M op, PyTensor modes)
    ("M x M, solve", False, "solve", ("FAST_RUN", "NUMBA", "FAST_COMPILE")),
    ("M x M, trtri", False, "trtri", ("FAST_RUN", "NUMBA", "FAST_COMPILE")),
    ("low rank", None, "trtri", ("FAST_RUN", "NUMBA", "FAST_COMPILE")),
)


def part_gradient(args):
    from pytensor import config

    rows = []
    for problem in args.problems:
        for label, low_rank, inverse, modes in GRADIENT_FORMS:
            for mode in modes:
                cfg = dict(problem=problem, low_rank=low_rank, inverse=inverse, mode=mode,
                           seconds=args.seconds)
                r = run("gradient", cfg, ONE_THREAD)
                if "error" in r:
                    rows.append((problem, "", label, mode, "", r["error"], "", "", "", ""))
                    continue
                form = label if low_rank is False or r["rank"] else "M x M, trtri (automatic)"
                rows.append((problem, r["M"], form, mode, r["rank"] or "", f"{r['ms']:.3f}",
                             f"{r['median_ms']:.3f}", r["n_cholesky"], f"{r['compile_s']:.1f}",
                             f"{r['load']:.1f}"))
                print(f"# {rows[-1]}", file=sys.stderr, flush=True)
    title = ("logp + gradient of the marginal regression, compiled as PyMC's NUTS compiles it "
             "(model.logp_dlogp_function), one BLAS thread; min and median over calls for "
             f"{args.seconds:g} s. FAST_RUN is PyTensor's default mode (C code per op, "
             f"no linked BLAS: blas__ldflags = {config.blas__ldflags!r}); FAST_COMPILE is the Python "
             "VM that ADVI uses for regression. M x M, solve: the op forming L^{-1} by a triangular "
             "solve against I (before); trtri: by LAPACK dtrtri. sinc: RBF gamma = 1/9 and a bias; "
             f"boston: first {GRADIENT_BOSTON_N} cases, standardised inputs, RBF gamma = "
             f"{GRADIENT_BOSTON_GAMMA} and a bias.")
    print(f"{title}\n")
    print_table(["problem", "M", "form", "mode", "rank k", "ms (min)", "ms (median)", "Choleskys",
                 "compile s", "busy"], rows, title=title)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--part", choices=["nuts", "advi", "setup", "gradient", "default", "all"], default="default",
                   help="default: nuts and advi")
    p.add_argument("--sizes", type=int, nargs="+", default=[100, 50])
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--samplers", nargs="+", default=["nutpie", "pymc"], choices=["nutpie", "pymc"],
                   help="NUTS samplers of --part nuts (nutpie is the package default)")
    p.add_argument("--chains", type=int, default=4, help="NUTS chains (4, the package default)")
    p.add_argument("--problems", nargs="+", default=list(GRADIENT_PROBLEMS),
                   help="part gradient: sinc<N> or boston")
    p.add_argument("--seconds", type=float, default=3.0,
                   help="part gradient: time each configuration this long")
    p.add_argument("--max-busy", type=float, default=None,
                   help="before each run, wait until other processes use fewer CPUs than this")
    p.add_argument("--max-wait", type=float, default=300.0, help="longest wait (s) for that")
    p.add_argument("--timeout", type=float, default=600.0,
                   help="stop a configuration after this many seconds")
    p.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    add_results_argument(p)
    args = p.parse_args(argv)
    QUIET.update(max_busy=args.max_busy, max_wait=args.max_wait, timeout=args.timeout)
    if args.worker:
        kind, cfg = args.worker
        print(json.dumps(WORKERS[kind](json.loads(cfg))))
        return
    parts = {"default": ["nuts", "advi"], "all": ["nuts", "advi", "setup"]}.get(
        args.part, [args.part]
    )
    results_recorder(results_name(__file__, args.part), argv=None if argv is None else [__file__, *argv],
                     notes=args.note)
    record_note("Times are wall-clock (or CPU) seconds on the machine named here; the column 'busy' is the "
                "number of CPUs kept busy in the 2 s before each run.")
    for part in parts:
        {"nuts": part_nuts, "advi": part_advi, "setup": part_setup,
         "gradient": part_gradient}[part](args)
    write_results(args.out)


if __name__ == "__main__":
    main()
