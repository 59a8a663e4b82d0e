"""Short sampler and ADVI settings for tests of the plumbing, not of the approximations.

Chains this short cannot pass r-hat <= 1.01 / ESS >= 100 per chain, and ADVI
stops after its median loss settles over 250 iterations instead of 1000
(about 1000 iterations in all instead of 4000). The approximations themselves
are tested at package defaults in ``test_sampling.py`` and ``test_calibration.py``.
"""

FAST = {"draws": 150, "tune": 150, "chains": 2}
ADVI_WINDOW = 250


def short(method, **settings):
    """Estimator keyword arguments for a short fit by ``method`` (``settings`` override FAST)."""
    advi = {"window": ADVI_WINDOW} if method == "advi" else None
    return {**FAST, **settings, "sample_kwargs": advi}

# Methods whose fits compile and run a PyMC sampler: marked slow, out of the fast loop.
SAMPLED = ("advi", "nuts")
