"""ArviZ's Numba ufunc: compiled by a first process, loaded by the next (core.arviz_ufuncs)."""

import importlib.machinery
import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from rvm_ppl.core import arviz_ufuncs

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


def _ecdf_utils(hooked):
    """A fresh copy of ArviZ's module, run through the hook's loader or ArviZ's own."""
    import arviz.stats

    spec = importlib.machinery.PathFinder.find_spec(arviz_ufuncs.MODULE, arviz.stats.__path__)
    module = importlib.util.module_from_spec(spec)
    (arviz_ufuncs._Loader(spec.loader) if hooked else spec.loader).exec_module(module)
    return module


@pytest.mark.parametrize("refusal", [TypeError, RuntimeError])
def test_where_numba_keeps_no_ufunc_arviz_compiles_it_as_before(tmp_path, monkeypatch, refusal):
    # A Numba whose vectorize takes no ``cache`` (TypeError) or has nowhere to write it
    # (RuntimeError): the hook's loader compiles ArviZ's ufunc as ArviZ asks, keeps
    # nothing, and the ufunc returns the cached one's numbers to the last bit.
    import numba
    from numba.core import config

    k = np.arange(7)
    monkeypatch.setattr(config, "CACHE_DIR", str(tmp_path / "kept"))
    cached = _ecdf_utils(hooked=True)._binom_pmf(k, 6, 0.3, 0)
    assert any(p.name.endswith(".nbi") for p in (tmp_path / "kept").rglob("*"))
    plain, asked = numba.vectorize, []

    def refusing(*args, **kwargs):
        asked.append("cache" in kwargs)
        if "cache" in kwargs:
            raise refusal("vectorize() got an unexpected keyword argument 'cache'")
        return plain(*args, **kwargs)

    monkeypatch.setattr(numba, "vectorize", refusing)
    monkeypatch.setattr(config, "CACHE_DIR", str(tmp_path / "unkept"))
    fallback = _ecdf_utils(hooked=True)._binom_pmf(k, 6, 0.3, 0)
    assert asked == [True, False] and not (tmp_path / "unkept").exists()
    np.testing.assert_array_equal(fallback, cached)
    np.testing.assert_array_equal(_ecdf_utils(hooked=False)._binom_pmf(k, 6, 0.3, 0), cached)
