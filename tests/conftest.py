"""Shared fixtures: small deterministic data sets."""

import os

# One BLAS thread: on small matrices several threads are slower on 2 cores.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from threadpoolctl import threadpool_limits  # noqa: E402

from rvm_ppl.datasets.loaders import make_sinc  # noqa: E402
from rvm_ppl.kernels.kernel import RBF, design_matrix  # noqa: E402


@pytest.fixture(autouse=True, scope="session")
def _one_blas_thread():
    """Also cover BLAS libraries loaded before the environment was read."""
    with threadpool_limits(limits=1, user_api="blas"):
        yield


@pytest.fixture
def rng():
    return np.random.default_rng(sum(map(ord, "rvm_ppl")))


@pytest.fixture
def sinc_data():
    """Noisy sinc, 60 points, and its RBF design matrix (bias + kernels)."""
    X, y = make_sinc(60, random_state=3)
    Phi = design_matrix(X, X, RBF(gamma=1 / 9))
    return X, y, Phi


# The longest modules first. With --dist loadfile each worker takes one module at a time,
# in collection order; a long module collected last runs alone on one worker while the
# other idles. Longest first (by a cold run's module totals), the two workers finish
# close together. The compiled evidence engine's first compile comes early, so that the
# later modules that use it load it from Numba's cache.
LONGEST_FIRST = (
    "test_notebooks.py", "test_joints.py", "test_sampling.py", "test_evidence_engine.py",
    "test_rvc_multinomial.py", "test_determinism.py", "test_calibration.py",
    "test_model_lowrank.py", "test_prior_groups.py", "test_prior_verdicts.py", "test_rvc.py",
    "test_methods.py", "test_diagnostics.py", "test_model_multinomial.py", "test_contract.py",
    "test_persistence.py", "test_demo.py", "test_estimators.py", "test_compiled.py",
    "test_callbacks.py",
)


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    # A stable sort: the other modules keep their order.
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))
