"""The package's nutpie callbacks (rvm_ppl.pymc_fitters.callbacks) against the function they wrap.

nutpie's own callbacks return, for a point ``x``, what PyTensor's compiled
function returns for ``x`` and the data arrays (``logp_fn(x, *data)``, copied
element for element), and a return code; nutpie's sampler is a function of
those outputs and the seed alone. So the package's callbacks sample nutpie's
draws bit for bit exactly when they return, at every point, the compiled
function's outputs bit for bit and nutpie's codes. That is checked here at
every point of a run of the sampler (warm-up included) and at points far out
in the tails, on a small model whose data take every path through the
callbacks, and without compiling nutpie's own callbacks: their error paths make
Numba compile its string formatting, which would add half as much again to this
module's time.
"""

import ctypes

import numpy as np
import pytest

# Numba notes a matrix product of a transposed array on a fresh compile, as in every fit.
pytestmark = [pytest.mark.slow,
              pytest.mark.filterwarnings(r"ignore:np\.dot\(\) is faster on contiguous")]

_DOUBLE_P = ctypes.POINTER(ctypes.c_double)


@pytest.fixture(scope="module")
def model():
    """A small model whose data take every path through the callbacks.

    Data arrays of 0, 1 and 2 dimensions, read by the log density only (``y_obs``,
    ``beta_rate``), by both callbacks (``Phi``) and by the expansion only (``Phi_new``),
    and a trace longer than the point (``alpha``, ``beta``, ``gram_w``, ``predicted``
    besides the free variables), as the package's marginal regression has. Its graph
    is small: the callbacks are generated from the data's names and dimensions alone.
    """
    import pymc as pm

    rng = np.random.default_rng(0)
    with pm.Model(coords={"basis": ["a", "b", "c"]}) as model:
        phi = pm.Data("Phi", rng.normal(size=(10, 3)))
        phi_new = pm.Data("Phi_new", rng.normal(size=(4, 3)))
        y = pm.Data("y_obs", rng.normal(size=10))
        rate = pm.Data("beta_rate", 1.0)
        alpha = pm.Gamma("alpha", 1.0, 1.0, dims="basis")
        beta = pm.Gamma("beta", 1.0, rate)
        w = pm.Normal("w", 0.0, alpha**-0.5, dims="basis")
        pm.Deterministic("gram_w", (phi.T @ phi) @ w)  # of every number of rows of Phi
        pm.Deterministic("predicted", phi_new @ w)
        pm.Normal("y", phi @ w, beta**-0.5, observed=y)
    return model


def _compile(model, **kwargs):
    import pytensor

    from rvm_ppl.pymc_fitters.callbacks import compile_pymc_model

    with pytensor.config.change_flags(numba__fastmath=False):  # as every fit compiles
        return compile_pymc_model(model, backend="numba", **kwargs)


@pytest.fixture(scope="module")
def compiled(model):
    """The model compiled with the package's callbacks."""
    return _compile(model)


def _inputs(function, compiled):
    # The data arrays the callbacks pass to PyTensor's function, in its order; writable
    # copies, as the callbacks' views are, so Numba runs the code it compiled for them.
    return [np.array(compiled.shared_data[v.name]) for v in function.get_shared()]


def _logp(compiled, x, dim=None):
    """The log density callback at ``x``: (return code, log density, gradient)."""
    n = compiled.n_dim
    x, grad, logp = np.ascontiguousarray(x, dtype=float), np.full(n, 7.0), np.full(1, 7.0)
    code = compiled.compiled_logp_func.ctypes(
        n if dim is None else dim, x.ctypes.data_as(_DOUBLE_P), grad.ctypes.data_as(_DOUBLE_P),
        logp.ctypes.data_as(_DOUBLE_P), compiled.user_data.ctypes.data)
    return code, logp[0], grad


def _expand(compiled, x, dim=None, expanded=None):
    """The expansion callback at ``x``: (return code, the trace's values)."""
    out = np.full(compiled.n_expanded, 7.0)
    x = np.ascontiguousarray(x, dtype=float)
    code = compiled.compiled_expand_func.ctypes(
        compiled.n_dim if dim is None else dim,
        compiled.n_expanded if expanded is None else expanded,
        x.ctypes.data_as(_DOUBLE_P), out.ctypes.data_as(_DOUBLE_P), compiled.user_data.ctypes.data)
    return code, out


def _reference(compiled, x):
    """What nutpie's callbacks return at ``x``: PyTensor's compiled functions on the data."""
    logp, grad = compiled.logp_func.vm.jit_fn(x, *_inputs(compiled.logp_func, compiled))
    (values,) = compiled.expand_func.vm.jit_fn(x, *_inputs(compiled.expand_func, compiled))
    code = 3 if not np.isfinite(grad).all() else (4 if not np.isfinite(logp) else 0)
    return code, float(logp), np.asarray(grad), np.asarray(values)


def _assert_callbacks_return_the_reference(compiled, x):
    """Both callbacks at ``x`` against :func:`_reference`, bit for bit; return the reference."""
    want = _reference(compiled, x)
    code, logp, grad = _logp(compiled, x)
    assert code == want[0]
    np.testing.assert_array_equal(logp, want[1])
    np.testing.assert_array_equal(grad, want[2])
    code, values = _expand(compiled, x)
    assert code == 0
    np.testing.assert_array_equal(values, want[3])
    return want


def _run(compiled, seed):
    import nutpie

    return nutpie.sample(compiled, draws=60, tune=60, chains=2, seed=seed, progress_bar=False,
                         save_warmup=True, store_unconstrained=True, store_gradient=True)


def _visited(trace):
    """Each point of a run, warm-up included, with the gradient and log density stored there."""
    stats = (trace.warmup_sample_stats, trace.sample_stats)
    x, grad, logp = (np.concatenate([s[name].values for s in stats], axis=1)
                     for name in ("unconstrained_draw", "gradient", "logp"))
    return x.reshape(-1, x.shape[-1]), grad.reshape(-1, grad.shape[-1]), logp.ravel()


def test_the_data_reach_the_callbacks_by_every_path(compiled):
    def names(function):
        return {v.name for v in function.get_shared()}

    logp, expand = names(compiled.logp_func), names(compiled.expand_func)
    assert logp - expand and logp & expand and expand - logp
    assert {k: v.shape for k, v in compiled.shared_data.items()} == {
        v.name: v.get_value().shape for f in (compiled.logp_func, compiled.expand_func)
        for v in f.get_shared()}
    assert {v.ndim for v in compiled.shared_data.values()} == {0, 1, 2}
    assert compiled.n_expanded > compiled.n_dim


def test_every_point_of_a_run_gets_the_compiled_functions_values_bit_for_bit(compiled):
    trace = _run(compiled, 1)
    x, grad, logp = _visited(trace)
    assert len(x) == 2 * 120 and len(np.unique(x, axis=0)) > 100  # the run moved
    for k in range(len(x)):
        code, want_logp, want_grad, _ = _assert_callbacks_return_the_reference(compiled, x[k])
        assert code == 0
        np.testing.assert_array_equal(grad[k], want_grad)  # what the sampler stored there
        np.testing.assert_array_equal(logp[k], want_logp)
    # The same seed, the same draws.
    again = _run(compiled, 1)
    for name in ("alpha", "beta", "w"):
        np.testing.assert_array_equal(trace.posterior[name].values, again.posterior[name].values)


def test_far_points_get_the_compiled_functions_values_and_nutpies_codes(compiled):
    rng = np.random.default_rng(0)
    points = [rng.normal(0.0, scale, compiled.n_dim)
              for scale in (0.1, 1.0, 10.0, 100.0, 1000.0) for _ in range(20)]
    codes = [_assert_callbacks_return_the_reference(compiled, x)[0] for x in points]
    assert 0 in codes and 3 in codes  # finite, and exp(x) beyond the largest double
    x = np.zeros(compiled.n_dim)
    assert _logp(compiled, x, dim=compiled.n_dim + 1)[0] == -1  # nutpie's code for a wrong size
    assert _expand(compiled, x, dim=compiled.n_dim - 1)[0] == -1
    assert _expand(compiled, x, expanded=compiled.n_expanded + 1)[0] == -1


def test_with_data_the_callbacks_read_the_new_arrays_at_their_shapes(compiled):
    # Other data, of other sizes, through with_data: each array is read at its address and
    # shape (the trace's size stays: nutpie fixes it when it compiles).
    rng = np.random.default_rng(1)
    new = compiled.with_data(Phi=rng.normal(size=(15, 3)), y_obs=rng.normal(size=15),
                             Phi_new=rng.normal(size=(4, 3)), beta_rate=3.0)
    assert new.shared_data["Phi"].shape == (15, 3)
    x = rng.normal(0.0, 1.0, compiled.n_dim)
    assert _assert_callbacks_return_the_reference(new, x)[0] == 0
    assert _logp(new, x)[1] != _logp(compiled, x)[1]  # the new data were used
    assert not np.array_equal(_run(new, 2).posterior["beta"].values,
                              _run(compiled, 2).posterior["beta"].values)


def test_callbacks_kept_on_disk_are_loaded_and_sample_the_same_draws(compiled, tmp_path,
                                                                      monkeypatch):
    # Kept in a folder of its own: compiled and saved once, then loaded by a new compilation
    # (as in a new process), and the loaded machine code returns the same values bit for bit.
    import pymc as pm
    import pytensor

    from rvm_ppl.pymc_fitters import callbacks

    def build(n_basis):
        rng = np.random.default_rng(0)
        with pm.Model() as model:
            phi = pm.Data("Phi", rng.normal(size=(10, n_basis)))
            alpha = pm.Gamma("alpha", 1.0, 1.0, shape=n_basis)
            w = pm.Normal("w", 0.0, alpha**-0.5, shape=n_basis)
            pm.Normal("y", phi @ w, 1.0, observed=rng.normal(size=10))
        with pytensor.config.change_flags(numba__fastmath=False):
            return callbacks.compile_pymc_model(model, cache_dir=str(tmp_path), backend="numba")

    def hits(c):
        return c.compiled_logp_func.cache_hits, c.compiled_expand_func.cache_hits

    saved = build(3)
    assert hits(saved) == (0, 0) and len(list(tmp_path.glob("*.nbi"))) == 2
    loaded = build(3)
    assert hits(loaded) == (1, 1)
    x = np.random.default_rng(2).normal(size=(30, saved.n_dim))
    for point in x:
        for c in (saved, loaded):
            _assert_callbacks_return_the_reference(c, point)
    np.testing.assert_array_equal(_logp(saved, x[0])[2], _logp(loaded, x[0])[2])
    np.testing.assert_array_equal(_run(saved, 3).posterior["alpha"].values,
                                  _run(loaded, 3).posterior["alpha"].values)
    # Another number of free variables is another key: compiled, not the kept code.
    other = build(4)
    assert hits(other) == (0, 0) and len(list(tmp_path.glob("*.nbi"))) == 4
    # A damaged entry: dropped, and the callbacks compiled afresh (kept again by the next).
    damaged = min(tmp_path.glob("callbacks._logp_template-*.nbc"), key=lambda p: p.stat().st_mtime)
    damaged.write_bytes(b"damaged")
    afresh = build(3)
    assert hits(afresh) == (0, 0) and not damaged.exists()
    np.testing.assert_array_equal(_logp(afresh, x[0])[2], _logp(saved, x[0])[2])
    assert hits(build(3)) == (0, 1) and hits(build(3)) == (1, 1)
    # Where PyTensor keeps no key for its function, the callbacks are compiled and not kept.
    monkeypatch.setattr(callbacks, "_pytensor_key", lambda jitted: None)
    n_files = len(list(tmp_path.iterdir()))
    unkept = build(5)
    assert hits(unkept) == (0, 0) and len(list(tmp_path.iterdir())) == n_files
    assert _assert_callbacks_return_the_reference(unkept, np.zeros(unkept.n_dim))[0] == 0


def test_callbacks_are_the_packages_compiled_and_not_kept_without_numbas_locator(
        model, compiled, tmp_path, monkeypatch):
    # A Numba without the private _CacheLocator: the package's callbacks, compiled in this
    # process and kept nowhere, returning the compiled function's values bit for bit.
    import functools

    import numba.core.caching as caching

    from rvm_ppl.pymc_fitters import callbacks

    monkeypatch.delattr(caching, "_CacheLocator")
    monkeypatch.setattr(callbacks, "_locator_class",
                        functools.cache(callbacks._locator_class.__wrapped__))
    unkept = _compile(model, cache_dir=str(tmp_path))
    assert callbacks._locator_class() is None
    assert "_logp_template" in unkept.compiled_logp_func.native_name
    assert unkept.compiled_logp_func.cache_hits == 0 and not list(tmp_path.iterdir())
    for x in np.random.default_rng(4).normal(0.0, 2.0, (30, unkept.n_dim)):
        _assert_callbacks_return_the_reference(unkept, x)
    np.testing.assert_array_equal(_run(unkept, 5).posterior["w"].values,
                                  _run(compiled, 5).posterior["w"].values)


def test_nutpies_own_callbacks_where_its_functions_are_not_as_replaced(model, compiled, tmp_path,
                                                                        monkeypatch):
    # nutpie's _make_c_* with other arguments (or missing): nutpie's own callbacks, not
    # kept, which sample the same draws as the package's, bit for bit (the module's claim).
    import types

    import nutpie.compile_pymc as cp

    from rvm_ppl.pymc_fitters import callbacks

    assert callbacks._replaceable(cp)
    names = {n: getattr(cp, n) for n in (*callbacks._REPLACED, "address_as_void_pointer")}
    for missing in names:
        assert not callbacks._replaceable(types.SimpleNamespace(
            **{n: f for n, f in names.items() if n != missing}))
    original, called = cp._make_c_logp_func, []

    def changed(n_dim, logp_fn, user_data, shared_logp, shared_data, extra=None):
        called.append(extra)
        return original(n_dim, logp_fn, user_data, shared_logp, shared_data)

    monkeypatch.setattr(cp, "_make_c_logp_func", changed)
    assert not callbacks._replaceable(cp)
    own = _compile(model, cache_dir=str(tmp_path))
    assert called == [None] and not list(tmp_path.glob("*.nbi"))
    assert "_logp_template" not in own.compiled_logp_func.native_name
    for x in np.random.default_rng(5).normal(0.0, 2.0, (30, own.n_dim)):
        _assert_callbacks_return_the_reference(own, x)
    for name in ("alpha", "beta", "w"):
        np.testing.assert_array_equal(_run(own, 6).posterior[name].values,
                                      _run(compiled, 6).posterior[name].values)
