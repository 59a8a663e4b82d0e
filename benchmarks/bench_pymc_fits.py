"""ADVI and NUTS as a user meets them: first fit ever, a new process, a warm process.

    python benchmarks/bench_pymc_fits.py                 # the table, 3 runs per cell
    python benchmarks/bench_pymc_fits.py --part step     # ADVI's iteration against its gradient

Part ``first`` (default): ``RVR(gamma=1/9, random_state=0)`` on
``make_sinc(100, random_state=0)`` and ``RVC(gamma=4, random_state=0)`` on the
demo's 100 points of Ripley's data, every other parameter at its default
(draws = tune = 1000, 4 chains; ADVI's stopping rule). Each run is a fresh
process that fits twice:

- "first fit ever": the first fit, with PyTensor's compile directory and
  Numba's cache empty (both moved to a new temporary folder for the run);
- "new process, caches filled": a process started after such a run, timed
  from its start (interpreter, imports, data) to the end of its first fit;
- "process k": the same for the ``--later``-th process after the cold one
  (default the 4th process), in case PyTensor's and Numba's caches fill over
  several processes;
- "warm process": the second fit of the same process.

Python reads and writes its bytecode cache (``__pycache__``) as it does by
default, whatever ``PYTHONDONTWRITEBYTECODE`` says in the calling shell: pip
compiles an installed package's bytecode when it installs it, so a user's new
process does not compile the package's source (about 0.25 s).

Each cell is the median of ``--runs`` runs (with the range). Part ``step``:
one process per problem; the log density and gradient as ADVI compiles them,
ADVI's iteration (:func:`rvm_ppl.pymc_fitters.advi._optimise`), and PyMC's own
ADVI step function (``pm.ADVI().objective.step_function``) compiled once, each
the median over calls, one BLAS thread.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
from _common import add_results_argument, print_table, record_note, results_name, results_recorder, write_results

ONE_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
CASES = (("RVR", "sinc"), ("RVC", "ripley"))


def _problem(which):
    """``(estimator factory, X, y)`` of the table's two problems."""
    from rvm_ppl import RVC, RVR
    from rvm_ppl.datasets.loaders import load_ripley, make_sinc

    if which == "sinc":
        X, y = make_sinc(100, random_state=0)
        return (lambda: RVR(gamma=1 / 9, random_state=0, progressbar=False)), X, y
    Xr, yr, _, _ = load_ripley()
    idx = np.random.default_rng(0).choice(250, 100, replace=False)  # the demo's points
    return (lambda: RVC(gamma=4.0, random_state=0, progressbar=False)), Xr[idx], yr[idx]


def worker_first(cfg, t_process):
    """Two fits in this process; seconds from the process's start to the end of each."""
    make, X, y = _problem(cfg["problem"])
    out = {}
    for name in ("first", "second"):
        t0 = time.perf_counter()
        est = make().fit(X, y, method=cfg["method"])
        out[f"{name}_fit_s"] = time.perf_counter() - t0
        out[f"{name}_end_s"] = time.perf_counter() - t_process
    out["n_iter"] = int(est.idata_.attrs.get("n_iter", 0))
    out["divergences"] = int(est.idata_.attrs.get("n_divergences", -1))
    return out


def worker_step(cfg, _):
    """ADVI's iteration, its gradient and PyMC's step, per call (ms), on one problem."""
    import pymc as pm
    import pytensor

    from rvm_ppl.inference.methods import _sampling_model
    from rvm_ppl.kernels.kernel import RBF, basis_labels, design_matrix
    from rvm_ppl.pymc_fitters import advi
    from rvm_ppl.pymc_fitters.compiled import data_values
    from rvm_ppl.pymc_fitters.results import COMPILE_MODE, _compilation, _trace_var_names

    make, X, y = _problem(cfg["problem"])
    est = make()
    Phi = design_matrix(X, X, RBF(est.gamma))  # the bias and one column per centre
    likelihood = "gaussian" if cfg["problem"] == "sinc" else "bernoulli"
    model = _sampling_model(Phi, y, basis_labels(len(X), bias=True), likelihood, None)
    spec = model.rvm_spec
    with _compilation():
        point = model.initial_point()
        fns = advi._functions(model, point, _trace_var_names(model, spec), COMPILE_MODE)
        data = data_values(model, fns.data_names)
        q = advi._Gaussian(advi._start(point, fns), fullrank=False)
        x = q.draw(np.zeros(q.d))

        def per_call(f, n):
            f()
            times = []
            for _ in range(n):
                t = time.perf_counter()
                f()
                times.append(time.perf_counter() - t)
            return 1e3 * float(np.median(times))

        grad_ms = per_call(lambda: fns.logp_grad(x, *data), 3000)
        rng = np.random.default_rng(0)
        t = time.perf_counter()
        advi._optimise(fns, data, q, n=3000, learning_rate=advi.ADVI_LEARNING_RATE, rng=rng,
                       callbacks=[])
        iter_ms = 1e3 * (time.perf_counter() - t) / 3000
        with model, pytensor.config.change_flags(mode=COMPILE_MODE):
            t = time.perf_counter()
            step = pm.ADVI(random_seed=0).objective.step_function(
                obj_optimizer=pm.adam(learning_rate=advi.ADVI_LEARNING_RATE), score=True)
            step_compile_s = time.perf_counter() - t
            pymc_ms = per_call(step, 3000)
    return dict(M=Phi.shape[1], grad_ms=grad_ms, iter_ms=iter_ms, pymc_step_ms=pymc_ms,
                pymc_step_compile_s=step_compile_s)


WORKERS = {"first": worker_first, "step": worker_step}


def _run(kind, cfg, env):
    env = {**os.environ, **ONE_THREAD, **env}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # Python's bytecode cache as by default
    proc = subprocess.run([sys.executable, __file__, "--worker", kind, json.dumps(cfg)],
                          capture_output=True, text=True, env=env, timeout=1800)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode or not lines:
        raise RuntimeError(f"{kind} {cfg}: {proc.stderr[-2000:]}")
    return json.loads(lines[-1])


def _cell(values):
    v = np.asarray(values)
    return f"{np.median(v):.1f} ({v.min():.1f}-{v.max():.1f})"


def part_first(args):
    rows = []
    for est_name, problem in CASES:
        for method in args.methods:
            cold, filled, later, warm, divs = [], [], [], [], []
            for _ in range(args.runs):
                cache = tempfile.mkdtemp(prefix="rvm-ppl-bench-cache-")
                env = {"PYTENSOR_FLAGS": f"base_compiledir={cache}/pytensor",
                       "NUMBA_CACHE_DIR": f"{cache}/numba"}
                try:
                    cfg = dict(problem=problem, method=method)
                    r = _run("first", cfg, env)
                    cold.append(r["first_fit_s"])
                    warm.append(r["second_fit_s"])
                    r = _run("first", cfg, env)
                    filled.append(r["first_end_s"])
                    warm.append(r["second_fit_s"])
                    divs.append(r["divergences"])
                    for _ in range(args.later - 1):  # more processes: what each leaves cached
                        r = _run("first", cfg, env)
                    later.append(r["first_end_s"])
                finally:
                    shutil.rmtree(cache, ignore_errors=True)
                print(f"# {est_name} {method}: cold {cold[-1]:.1f} s, new process {filled[-1]:.1f} s, "
                      f"process {args.later + 1}: {later[-1]:.1f} s, "
                      f"warm {warm[-2]:.2f}/{warm[-1]:.2f} s", file=sys.stderr, flush=True)
            rows.append([est_name, problem, method, _cell(cold), _cell(filled), _cell(later),
                         _cell(warm), "" if method != "nuts" else ", ".join(map(str, divs))])
    print_table(["estimator", "data", "method", "first fit ever (s)", "new process, caches filled (s)",
                 f"process {args.later + 1} (s)", "warm process (s)", "divergences"], rows,
                title=f"ADVI and NUTS fits: median (range) of {args.runs} runs; the new-process column "
                      "includes the interpreter's start and the imports")


def part_step(args):
    rows = []
    for est_name, problem in CASES:
        r = _run("step", dict(problem=problem), {})
        rows.append([est_name, problem, r["M"], f"{r['grad_ms']:.3f}", f"{r['iter_ms']:.3f}",
                     f"{r['iter_ms'] / r['grad_ms']:.1f}", f"{r['pymc_step_ms']:.3f}",
                     f"{r['pymc_step_compile_s']:.1f}"])
    print_table(["estimator", "data", "M", "logp + gradient (ms)", "ADVI iteration (ms)",
                 "iteration / gradient", "pm.ADVI step, compiled once (ms)",
                 "pm.ADVI step compile (s)"], rows,
                title="ADVI's cost per iteration (median over calls, one BLAS thread, NUMBA)")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--part", choices=["first", "step"], default="first")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--later", type=int, default=3,
                   help="also time the first fit of the process this many after the cold one")
    p.add_argument("--methods", nargs="+", default=["advi", "nuts"], choices=["advi", "nuts"])
    p.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    add_results_argument(p)
    args = p.parse_args(argv)
    if args.worker:
        t_process = time.perf_counter() - _process_age()
        kind, cfg = args.worker
        print(json.dumps(WORKERS[kind](json.loads(cfg), t_process)))
        return
    results_recorder(results_name(__file__, args.part), argv=None if argv is None else [__file__, *argv],
                     notes=args.note)
    record_note("Times are wall-clock seconds on the machine named here, one BLAS thread.")
    {"first": part_first, "step": part_step}[args.part](args)
    write_results(args.out)


def _process_age():
    """Seconds since this process started (its start time in /proc, else 0)."""
    try:
        with open(f"/proc/{os.getpid()}/stat") as f:
            start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return uptime - start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


if __name__ == "__main__":
    main()
