"""The package's nutpie callbacks (rvm_ppl.pymc_fitters.callbacks) against nutpie's own."""

import numpy as np
import pytest

from rvm_ppl.datasets.loaders import make_sinc
from rvm_ppl.kernels.kernel import RBF, design_matrix
from rvm_ppl.model.build import build_model

pytestmark = pytest.mark.slow


def _draws(compiled, seed):
    import nutpie

    trace = nutpie.sample(compiled, draws=60, tune=60, chains=2, seed=seed, progress_bar=False)
    return {name: trace.posterior[name].values for name in ("alpha", "beta", "w")}


# Numba notes a matrix product of a transposed array on a fresh compile, as in every fit.
@pytest.mark.filterwarnings(r"ignore:np\.dot\(\) is faster on contiguous")
def test_the_callbacks_sample_nutpies_draws_bit_for_bit_and_follow_new_data():
    # The marginal regression's data are 0-d, 1-d and 2-d arrays (the low-rank factor).
    import nutpie
    import pytensor

    from rvm_ppl.pymc_fitters.callbacks import compile_pymc_model

    X, y = make_sinc(40, random_state=0)
    model = build_model(design_matrix(X, X, RBF(gamma=1 / 9)), (y - y.mean()) / y.std())
    with pytensor.config.change_flags(numba__fastmath=False):  # as every fit compiles
        theirs = nutpie.compile_pymc_model(model, backend="numba")
        ours = compile_pymc_model(model, backend="numba")
    assert {k: v.shape for k, v in ours.shared_data.items()} == {
        k: v.shape for k, v in theirs.shared_data.items()}
    assert {v.ndim for v in ours.shared_data.values()} == {0, 1, 2}
    a, b = _draws(theirs, 1), _draws(ours, 1)
    for name in a:
        np.testing.assert_array_equal(a[name], b[name])

    # Other data through with_data: the callbacks read each array at its address and shape.
    new = {"y_obs": 0.5 * ours.shared_data["y_obs"], "beta_rate": 3.0}
    a, b = _draws(theirs.with_data(**new), 2), _draws(ours.with_data(**new), 2)
    for name in a:
        np.testing.assert_array_equal(a[name], b[name])
    assert not np.array_equal(a["beta"], _draws(ours, 2)["beta"])  # the new data were used
