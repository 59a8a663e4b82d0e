"""PyMC's conventions for fit_nuts and fit_advi, and read-only module tables.

``fit_nuts``/``fit_advi`` spoke scikit-learn's ``random_state`` and their own
``n_iter`` instead of PyMC's ``random_seed`` and ``n``, and took no model from
the ``with model:`` context; ``rvm_ppl.DEFAULT_PRIORS["a"] = 5.0`` changed every
later fit in the process.
"""

import inspect

import numpy as np
import pymc as pm
import pytest

import rvm_ppl
import rvm_ppl.core.priors as priors_mod
import rvm_ppl.inference.methods as methods
import rvm_ppl.pymc_fitters.advi as advi_mod
import rvm_ppl.pymc_fitters.nuts as nuts_mod
from rvm_ppl import RVR, build_model, fit_advi, fit_nuts
from rvm_ppl.datasets.loaders import make_sinc
from rvm_ppl.kernels.kernel import RBF, design_matrix


@pytest.fixture(scope="module")
def sinc():
    return make_sinc(20, random_state=3)


# DEFAULT_PRIORS was a mutable module dict: rvm_ppl.DEFAULT_PRIORS["a"] = 5.0
# changed every later fit in the process.
@pytest.mark.parametrize("table", [
    rvm_ppl.DEFAULT_PRIORS, rvm_ppl.BERNOULLI_PRIORS, priors_mod.PRIOR_PARAMS,
    methods.DEFAULT_MAX_ITER, methods.DEFAULT_TOL, methods.FIT_METHODS,
    nuts_mod.NUTPIE_KWARGS,
], ids=["DEFAULT_PRIORS", "BERNOULLI_PRIORS", "PRIOR_PARAMS", "DEFAULT_MAX_ITER",
        "DEFAULT_TOL", "FIT_METHODS", "NUTPIE_KWARGS"])
def test_module_tables_are_read_only(table):
    key = next(iter(table))
    value = table[key]
    with pytest.raises(TypeError):
        table[key] = 5.0
    with pytest.raises((TypeError, AttributeError)):
        table.update({key: 5.0})
    assert table[key] is value


def test_build_model_neither_changes_nor_shares_the_priors(sinc):
    X, y = sinc
    Phi = design_matrix(X, X, RBF(1 / 9))
    given = {"a": 2.0}
    model = build_model(Phi, y, priors=given)
    assert given == {"a": 2.0}
    used = model.rvm_spec.priors
    assert used == {"a": 2.0, "b": 1e-6, "c": 1e-6, "d": 1e-6}
    used["b"] = 99.0
    assert rvm_ppl.DEFAULT_PRIORS["b"] == 1e-6
    assert build_model(Phi, y).rvm_spec.priors["b"] == 1e-6
    clf = build_model(Phi, (y > 0).astype(float), likelihood="bernoulli")
    clf.rvm_spec.priors["a"] = 99.0
    assert rvm_ppl.BERNOULLI_PRIORS["a"] == 3.0


# fit_nuts / fit_advi took random_state and n_iter, and no model from the context.
class _Called(Exception):
    """Raised by a stand-in for pm.sample / ADVI's loop, carrying the keyword arguments it got."""


def _raise_called(**kwargs):
    raise _Called(kwargs)


def test_fit_nuts_and_fit_advi_have_pymcs_signatures():
    nuts = inspect.signature(fit_nuts).parameters
    advi = inspect.signature(fit_advi).parameters
    for params in (nuts, advi):
        assert list(params)[0] == "model" and params["model"].default is None
        assert params["random_seed"].kind is inspect.Parameter.KEYWORD_ONLY
        assert params["random_seed"].default is None
        assert "random_state" not in params
    assert "n" in advi and "n_iter" not in advi
    assert advi["n"].default == advi_mod.ADVI_MAX_ITER


def test_fit_nuts_takes_the_model_from_the_context_and_passes_random_seed(sinc, monkeypatch):
    X, y = sinc
    model = build_model(design_matrix(X, X, RBF(1 / 9)), y)
    monkeypatch.setattr(pm, "sample", _raise_called)
    # nutpie's fits go through the compiled-model store with what pm.sample would get.
    monkeypatch.setattr(nuts_mod, "_sample_nutpie", lambda model, kwargs: _raise_called(**kwargs))
    got = {}
    for key, seed in (("explicit", 3), ("other", 4)):
        with pytest.raises(_Called) as call:
            fit_nuts(model, chains=1, random_seed=seed)
        got[key] = call.value.args[0]
    with model, pytest.raises(_Called) as call:
        fit_nuts(chains=1, random_seed=3)
    assert call.value.args[0]["random_seed"] == got["explicit"]["random_seed"]
    assert got["other"]["random_seed"] != got["explicit"]["random_seed"]
    with pytest.raises(TypeError, match="No model on context stack"):
        fit_nuts(chains=1)
    with pytest.raises(TypeError, match="random_seed, not random_state"):
        fit_nuts(model, random_state=0)


def test_fit_advi_takes_n_and_the_model_from_the_context(sinc, monkeypatch):
    X, y = sinc
    model = build_model(design_matrix(X, X, RBF(1 / 9)), y)
    # ADVI's loop gets the iteration cap and a generator seeded by random_seed.
    monkeypatch.setattr(advi_mod, "_optimise", lambda fns, data, q, *, n, rng, **kw:
                        _raise_called(n=n, first_draw=rng.random()))
    with model, pytest.raises(_Called) as call:
        fit_advi(n=123, random_seed=3)
    assert call.value.args[0]["n"] == 123
    with pytest.raises(_Called) as again:
        fit_advi(model, n=123, random_seed=3)
    assert again.value.args[0]["first_draw"] == call.value.args[0]["first_draw"]
    with pytest.raises(_Called) as other:
        fit_advi(model, n=123, random_seed=4)
    assert other.value.args[0]["first_draw"] != call.value.args[0]["first_draw"]
    with pytest.raises(TypeError, match="n, random_seed, not n_iter, random_state"):
        fit_advi(model, n_iter=5, random_state=0)


def test_the_estimators_random_state_is_pymcs_random_seed(sinc, monkeypatch):
    X, y = sinc
    Phi = design_matrix(X, X, RBF(1 / 9))
    monkeypatch.setattr(pm, "sample", _raise_called)
    # nutpie's fits go through the compiled-model store with what pm.sample would get.
    monkeypatch.setattr(nuts_mod, "_sample_nutpie", lambda model, kwargs: _raise_called(**kwargs))
    with pytest.raises(_Called) as est:
        RVR(kernel="precomputed", method="nuts", chains=1, random_state=5).fit(Phi[:, 1:], y)
    std = float(np.std(y))
    model = build_model(Phi, y, priors=priors_mod.scale_priors(None, std))
    with pytest.raises(_Called) as direct:
        fit_nuts(model, chains=1, random_seed=5)
    assert est.value.args[0]["random_seed"] == direct.value.args[0]["random_seed"]
