"""rvm_ppl.inference.sbc: prior draws, the rank and symmetry tests, SBC itself (slow)."""

import warnings

import numpy as np
import pandas as pd
import pytest

from rvm_ppl.inference.sbc import (
    _fit_closed_form,
    plot_sbc_ecdf,
    sbc,
    sbc_tests,
    simulate_rvm,
)

pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")

PRIORS = {"a": 2.0, "b": 2.0, "c": 3.0, "d": 0.3}


def _design(N=20):
    x = np.linspace(-10, 10, N)[:, None]
    return np.column_stack([np.ones(N), np.exp(-((x - np.linspace(-8, 8, 5)[None]) ** 2) / 9)])


def test_simulate_rvm_moments(rng):
    """E[y_n^2] = sum_m phi_nm^2 b / (a - 1) + d / (c - 1) (Gamma moments of 1/alpha, 1/beta)."""
    Phi = _design()
    p = {"a": 5.0, "b": 4.0, "c": 6.0, "d": 0.5}  # a, c > 2: finite variances of 1/alpha, 1/beta
    ys = np.array([simulate_rvm(Phi, p, rng)[3] for _ in range(20_000)])
    want = (Phi**2).sum(axis=1) * p["b"] / (p["a"] - 1) + p["d"] / (p["c"] - 1)
    np.testing.assert_allclose((ys**2).mean(axis=0), want, rtol=0.06)


def test_closed_form_fits_use_the_hyperprior_in_the_units_of_y(rng):
    """Scaling y by k and the prior rates by k^2 is the same model: alpha, beta scale by 1/k^2."""
    Phi = _design()
    _, _, _, y = simulate_rvm(Phi, PRIORS, rng)
    labels = [f"phi_{m}" for m in range(6)]
    k = 3.0
    p_k = {**PRIORS, "b": PRIORS["b"] * k**2, "d": PRIORS["d"] * k**2}
    for method in ("vb", "evidence"):
        r1 = _fit_closed_form(method, Phi, y, PRIORS, labels)
        rk = _fit_closed_form(method, Phi, k * y, p_k, labels)
        np.testing.assert_allclose(rk.beta * k**2, r1.beta, rtol=1e-6)
        np.testing.assert_allclose(rk.alpha * k**2, r1.alpha, rtol=1e-5)
    # and the prior really enters: a much stronger prior on alpha moves vb's Q(alpha)
    strong = _fit_closed_form("vb", Phi, y, {**PRIORS, "a": 200.0, "b": 20.0}, labels)
    r1 = _fit_closed_form("vb", Phi, y, PRIORS, labels)
    assert np.all(np.abs(np.log(strong.alpha) - np.log(10.0)) < np.abs(np.log(r1.alpha)
                                                                      - np.log(10.0)) + 1e-9)


def _table(values, method, L=99):
    n = len(values)
    t = pd.DataFrame(dict(sim=np.arange(n), method=method, parameter="log_beta",
                          truth=0.0, value=values, n_divergences=np.nan))
    t.attrs["n_ranks"] = L
    return t


def test_sbc_tests_accept_uniform_ranks_and_reject_biased_ones(rng):
    uniform = rng.integers(0, 100, size=400).astype(float)
    assert sbc_tests(_table(uniform, "nuts"))["p_value"].iloc[0] > 1e-3
    # a sampler whose draws are too low: the truth ranks high
    biased = np.minimum(99, uniform + 25)
    res = sbc_tests(_table(biased, "nuts")).iloc[0]
    assert res["p_value"] < 1e-6 and res["mean"] > 0.6
    # VSBC: p symmetric about 1/2 passes, p concentrated below 1/2 fails
    sym = rng.random(400)
    assert sbc_tests(_table(sym, "vb"))["p_value"].iloc[0] > 1e-3
    assert sbc_tests(_table(0.4 * sym, "advi"))["p_value"].iloc[0] < 1e-6
    # evidence: a point estimate below the truth 9 times in 10
    ind = (rng.random(200) < 0.9).astype(float)
    assert sbc_tests(_table(ind, "evidence"))["p_value"].iloc[0] < 1e-6
    with pytest.raises(ValueError, match="bins"):
        sbc_tests(_table(uniform, "nuts", L=98), n_bins=7)


def test_sbc_closed_form_methods_and_refusals():
    """vb and evidence over many replications: values in range; the ECDF plot draws."""
    Phi = _design()
    table = sbc(Phi, PRIORS, n_sims=60, methods=("vb", "evidence"), random_state=0)
    assert len(table) == 60 * 2 * 4
    vb = table[table["method"] == "vb"]["value"]
    assert ((vb >= 0) & (vb <= 1)).all() and vb.std() > 0.1
    assert set(table[table["method"] == "evidence"]["value"]) <= {0.0, 1.0}
    tests = sbc_tests(table)
    assert len(tests) == 8 and tests["p_value"].between(0, 1).all()
    ax = plot_sbc_ecdf(table, "vb")
    assert len(ax.get_lines()) == 5  # four parameters and the zero line
    with pytest.raises(ValueError, match="proper"):
        sbc(Phi, {**PRIORS, "a": 0.0}, n_sims=1)
    with pytest.raises(ValueError, match="Unknown method"):
        sbc(Phi, PRIORS, n_sims=1, methods=("gibbs",))
    with pytest.raises(ValueError, match="bases"):
        sbc(Phi, PRIORS, n_sims=1, bases=(7,))
    with pytest.raises(ValueError, match="No replications"):
        plot_sbc_ecdf(table, "nuts")


@pytest.mark.slow
def test_sbc_of_nuts_on_a_tiny_rvm(monkeypatch):
    """20 replications: NUTS's ranks pass the uniformity test for log beta and log alpha.

    The two chains of each replication run one after the other in this process: the
    same draws as two worker processes give (PyMC seeds each chain alike either way),
    without starting the workers and loading the compiled model in each, which took
    half the time of every replication. The 200-replication run is
    benchmarks/bench_calibration.py.
    """
    import rvm_ppl.pymc_fitters.nuts as nuts_mod

    monkeypatch.setattr(nuts_mod, "_available_cpus", lambda: 1)  # cores = 1
    Phi = _design(12)[:, :3]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table = sbc(Phi, PRIORS, n_sims=20, methods=("nuts",), bases=(0, 1), draws=100,
                    tune=150, chains=2, n_ranks=19, random_state=1)
    ranks = table["value"]
    assert ranks.between(0, 19).all()
    assert table.groupby("sim")["n_divergences"].first().sum() <= 3
    tests = sbc_tests(table, n_bins=5)
    assert (tests["p_value"] > 1e-3).all()
