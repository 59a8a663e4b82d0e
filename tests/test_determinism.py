"""Same inputs and random_state: the same numbers in any process, after any fits, with any cache.

Each case runs the four methods on one tiny problem and compares a digest of every
posterior array, bit for bit: a process's first fits with empty compile caches
(PyTensor's compile directory and Numba's cache), a fresh process with those caches
filled after a hundred other fits, and a worker process of a process pool. A code path
chosen by history (time spent, modules loaded, the state of a cache) shows up here as a
different digest.
"""

import json
import os
import subprocess
import sys
import textwrap
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context

import pytest

pytestmark = pytest.mark.slow

FITS = textwrap.dedent(
    """
    import hashlib, json, warnings
    import numpy as np
    from rvm_ppl import RVC, RVR
    from rvm_ppl.datasets import make_ripley, make_sinc

    def digest(m):
        h = hashlib.sha256()
        post = m.idata_.posterior
        for name in sorted(post.data_vars):
            h.update(name.encode())
            h.update(np.ascontiguousarray(post[name].values, dtype=float).tobytes())
        h.update(np.ascontiguousarray(m.alpha_, dtype=float).tobytes())
        return h.hexdigest()

    def target_fits():
        X, y = make_sinc(20, random_state=0)
        out = {}
        for method, kw in [("evidence", {}), ("vb", {}), ("advi", {"max_iter": 3000}),
                           ("nuts", {"draws": 30, "tune": 30, "chains": 1})]:
            m = RVR(gamma=1 / 9, random_state=0, progressbar=False, **kw)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                out[method] = digest(m.fit(X, y, method=method))
        Xc, yc = make_ripley(40, random_state=0)
        out["rvc evidence"] = digest(RVC(gamma=4.0, random_state=0, progressbar=False).fit(Xc, yc))
        return out

    def other_fits(n=100):
        # Fits of other data, sizes and methods, as a session makes before the one compared.
        # The vb, advi and nuts fits have the compared fits' size, so those reuse the
        # compiled models these leave behind, with other data: the history that could leak.
        rng = np.random.default_rng(1)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for k in range(n - 4):
                X, y = make_sinc(int(rng.integers(30, 400)), random_state=k)
                RVR(gamma=1 / 9, progressbar=False).fit(X, y)
            X, y = make_sinc(20, random_state=5)
            RVR(gamma=1 / 9, random_state=3, progressbar=False).fit(X, y, method="vb")
            RVR(gamma=1 / 9, random_state=3, max_iter=2000, progressbar=False).fit(X, y, method="advi")
            RVR(gamma=1 / 9, random_state=3, draws=20, tune=20, chains=1,
                progressbar=False).fit(X, y, method="nuts")
            X, y = make_ripley(60, random_state=2)
            RVC(gamma=4.0, progressbar=False).fit(X, y)
    """
)


def _run(code, env):
    proc = subprocess.run([sys.executable, "-c", FITS + textwrap.dedent(code)], env=env,
                          capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _pool_fits():
    namespace = {}
    exec(FITS, namespace)  # noqa: S102 - the same code the subprocesses run
    return namespace["target_fits"]()


@pytest.fixture(scope="module")
def caches(tmp_path_factory):
    root = tmp_path_factory.mktemp("caches")
    env = dict(os.environ)
    env["PYTENSOR_FLAGS"] = f"base_compiledir={root / 'pytensor'}"
    env["NUMBA_CACHE_DIR"] = str(root / "numba")
    return env


@pytest.fixture(scope="module")
def cold(caches):
    """The first fits of a process with empty compile caches."""
    return _run("print(json.dumps(target_fits()))", caches)


def test_a_fresh_process_after_a_hundred_fits_with_filled_caches_gives_the_same_numbers(caches, cold):
    warm = _run("other_fits(); print(json.dumps(target_fits()))", caches)
    assert warm == cold


def test_a_worker_process_gives_the_same_numbers(caches, cold, monkeypatch):
    for key in ("PYTENSOR_FLAGS", "NUMBA_CACHE_DIR"):
        monkeypatch.setenv(key, caches[key])
    with ProcessPoolExecutor(1, mp_context=get_context("spawn")) as pool:
        worker = pool.submit(_pool_fits).result(timeout=1500)
    assert worker == cold
