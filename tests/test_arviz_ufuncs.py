"""ArviZ's Numba ufunc: compiled by a first process, loaded by the next (core.arviz_ufuncs)."""

import json
import os
import subprocess
import sys

_PROBE = """
import json
import numba.core.compiler as compiler

import rvm_ppl  # installs the import hook before ArviZ is imported

compiled = []
plain = compiler.compile_extra
compiler.compile_extra = lambda *a, **k: compiled.append(1) or plain(*a, **k)
from arviz.stats import ecdf_utils
import numpy as np
from scipy import stats

k = np.arange(7)
print(json.dumps({
    "compiled": len(compiled),
    "pmf": ecdf_utils._binom_pmf(k, 6, 0.3, 0).tolist(),
    "scipy": stats.binom.pmf(k, 6, 0.3).tolist(),
}))
"""


def _probe(cache_dir):
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache_dir)}
    out = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True,
                         text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_arviz_ufunc_is_compiled_once_then_loaded_and_computes_the_same(tmp_path):
    first, second = _probe(tmp_path), _probe(tmp_path)
    assert first["compiled"] >= 1  # an empty cache: Numba compiles the ufunc
    assert second["compiled"] == 0  # the next process loads it
    assert any(p.name.endswith(".nbi") and "_binom_pmf" in p.name for p in tmp_path.rglob("*"))
    assert first["pmf"] == second["pmf"]
    # ArviZ's binomial pmf, whichever way it was made, is the binomial pmf.
    assert max(abs(a - b) for a, b in zip(first["pmf"], first["scipy"], strict=True)) < 1e-14
