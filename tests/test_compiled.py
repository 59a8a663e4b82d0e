"""Compile once, sample many: a kept nutpie model gives the numbers a fresh compilation gives."""

import hashlib
import warnings

import numpy as np
import pymc as pm
import pytest
from _short_runs import FAST

from rvm_ppl import RVC, build_model
from rvm_ppl.datasets.loaders import make_ripley, make_sinc
from rvm_ppl.kernels.kernel import RBF, design_matrix
from rvm_ppl.pymc_fitters import compiled
from rvm_ppl.pymc_fitters.results import softplus_precisions


def _model(seed=0, n=20, priors=None, **kw):
    X, y = make_sinc(n, random_state=seed)
    Phi = np.column_stack([np.ones(n), design_matrix(X, X, RBF(gamma=1 / 9))])
    return softplus_precisions(build_model(Phi, y / y.std(), priors=priors, **kw))


def _key(model):
    return compiled.fingerprint(model, None, {})


def test_the_fingerprint_is_the_structure_not_the_data():
    key = _key(_model(0))
    assert key is not None and len(key) == 64
    assert _key(_model(0)) == key  # built again
    assert _key(_model(1)) == key  # other data of the same shapes
    assert _key(_model(0, n=21)) != key  # other shapes
    other_prior = {"a": 2.0, "b": 2.0, "c": 2.0, "d": 0.02}
    assert _key(_model(0, priors=other_prior)) != key  # other constants
    assert _key(_model(0, parameterization="centered")) != key  # another graph
    assert compiled.fingerprint(_model(0), ["alpha"], {}) != key  # another trace
    assert compiled.fingerprint(_model(0), None, {"backend": "jax"}) != key  # other settings
    changed = _model(0)
    with changed:
        pm.Normal("extra", 0.0, 1.0)
    assert _key(changed) != key


def test_an_operation_that_cannot_be_compared_means_no_fingerprint():
    from pytensor.graph.basic import Apply
    from pytensor.graph.op import Op

    class Opaque(Op):
        def __init__(self):
            self.table = object()  # neither a plain value nor declared properties

        def make_node(self, x):
            return Apply(self, [x], [x.type()])

        def perform(self, node, inputs, outputs):
            outputs[0][0] = inputs[0]

    with pm.Model() as model:
        x = pm.Normal("x")
        pm.Potential("p", Opaque()(x))
    assert compiled.fingerprint(model, None, {}) is None


def _digest(est):
    h = hashlib.sha256()
    post = est.idata_.posterior
    for name in sorted(post.data_vars):
        h.update(np.ascontiguousarray(post[name].values, dtype=float).tobytes())
    return h.hexdigest()


@pytest.mark.slow
def test_a_kept_compilation_samples_what_a_fresh_one_samples():
    (X0, y0), (X1, y1) = make_ripley(40, random_state=0), make_ripley(40, random_state=1)

    def fit(X, y):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return _digest(RVC(gamma=4.0, random_state=0, progressbar=False, **FAST)
                           .fit(X, y, method="nuts"))

    compiled.clear()
    fresh = fit(X0, y0)
    compiled.clear()
    before = compiled.compile_counts()
    other = fit(X1, y1)  # compiles the structure
    kept = fit(X0, y0)  # samples the kept machine code with X0's data
    after = compiled.compile_counts()
    assert after["compiled"] - before["compiled"] == 1
    assert after["reused"] - before["reused"] == 1
    assert kept == fresh != other


def test_the_fits_compile_without_asking_for_a_c_blas(monkeypatch):
    # PyTensor's sparse rewrite local_usmm reads config.blas__ldflags on any z - alpha * y
    # with a scalar alpha, and finding that value compiles test programs (0.5 s a process,
    # a warning after a pip install). The fits' mode "NUMBA" leaves the rewrite out; the
    # plain mode still consults the flag, so the check below can fail.
    import pytensor
    import pytensor.tensor as pt

    from rvm_ppl.pymc_fitters.results import _compilation

    def asked(self):
        raise AssertionError("config.blas__ldflags was read")

    monkeypatch.setattr(type(pytensor.config), "blas__ldflags", property(asked))
    z, y, a = pt.vector("z"), pt.vector("y"), pt.scalar("a")
    graph = z - a[None] * y
    with _compilation():
        f = pytensor.function([z, y, a], graph, mode="NUMBA")
    np.testing.assert_array_equal(f(np.ones(3), np.arange(3.0), np.array(2.0)), [1.0, -1.0, -3.0])
    with pytest.raises(AssertionError, match="blas__ldflags"):
        pytensor.function([z, y, a], graph, mode="NUMBA")


def test_a_damaged_or_unpicklable_store_entry_means_compiling_afresh(monkeypatch, tmp_path):
    monkeypatch.setattr(compiled, "store_directory", lambda: str(tmp_path))
    key = "f" * 64
    assert compiled._load(key) is None  # nothing stored
    kept = compiled._store(key, {"a": np.arange(3)})
    assert compiled._load(key)["a"].tolist() == [0, 1, 2] and kept["a"].tolist() == [0, 1, 2]
    (path,) = tmp_path.glob("functions-*.pkl")
    path.write_bytes(b"not a pickle")
    assert compiled._load(key) is None
    unpicklable = {"f": lambda x: x}  # like an operation defined inside a function
    assert compiled._store("e" * 64, unpicklable) is unpicklable
    assert len(list(tmp_path.glob("functions-*"))) == 1 and not list(tmp_path.glob("*.tmp"))
