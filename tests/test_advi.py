"""ADVI's own loop: its gradient, its optimum on a known target, compile-once, PyMC's tools.

The first tests run the loop on hand-written log densities (no PyMC); the
last ones fit the package's model.
"""
import types

import numpy as np
import pytest

from rvm_ppl.pymc_fitters import advi, compiled


def _loss(q, eps, logp):
    return -(logp(q.draw(eps)) + q.entropy())


@pytest.mark.parametrize("fullrank", [False, True])
def test_loss_gradient_is_the_derivative_of_the_one_sample_loss(fullrank):
    """Central differences of -(log p(mu + S eps) + entropy) in every parameter."""
    rng = np.random.default_rng(0)
    d = 4
    A = rng.standard_normal((d, d))
    P = A @ A.T + d * np.eye(d)  # precision of a Gaussian log density, plus a quartic term

    def logp(z):
        return -0.5 * z @ P @ z - 0.1 * np.sum(z**4)

    def grad(z):
        return -P @ z - 0.4 * z**3

    q = advi._Gaussian(rng.standard_normal(d), fullrank=fullrank)
    q.params += 0.3 * rng.standard_normal(q.params.size)
    eps = rng.standard_normal(d)
    analytic = q.loss_gradient(eps, grad(q.draw(eps)))
    numeric = np.empty_like(q.params)
    h = 1e-6
    for i in range(q.params.size):
        q.params[i] += h
        up = _loss(q, eps, logp)
        q.params[i] -= 2 * h
        down = _loss(q, eps, logp)
        q.params[i] += h
        numeric[i] = (up - down) / (2 * h)
    np.testing.assert_allclose(analytic, numeric, rtol=1e-6, atol=1e-6)


def test_mean_field_advi_finds_a_gaussian_target_exactly():
    """On log p = N(m, diag(s^2)) the mean-field optimum is q = p: mu = m, sd = s."""
    m, s = np.array([1.0, -2.0, 0.5]), np.array([0.5, 2.0, 1.0])

    def logp_grad(z):
        return -0.5 * np.sum(((z - m) / s) ** 2), -(z - m) / s**2


    fns = types.SimpleNamespace(logp_grad=logp_grad)
    q = advi._Gaussian(np.zeros(3), fullrank=False)
    # Adam's iterates jitter around the optimum with the one-sample gradients: average them.
    kept = []
    losses = advi._optimise(fns, [], q, n=20_000, learning_rate=0.01,
                            rng=np.random.default_rng(1),
                            callbacks=[lambda _, losses, i: kept.append(q.mean_sd()) if i > 10_000
                                       else None])
    mean, sd = (np.mean([k[j] for k in kept], axis=0) for j in (0, 1))
    np.testing.assert_allclose(mean, m, atol=0.03)
    np.testing.assert_allclose(sd, s, rtol=0.03)
    # The loss is -(log p(z) + entropy of q): log p here lacks its normalising constant
    # -sum(log s) - d/2 log(2 pi), so at q = p the ELBO is that constant's negative.
    elbo = -np.mean(losses[-5000:])
    assert elbo == pytest.approx(np.sum(np.log(s)) + 1.5 * np.log(2 * np.pi), abs=0.05)


def test_full_rank_advi_finds_a_correlated_gaussian_target():
    m = np.array([0.5, -1.0])
    C = np.array([[1.0, 0.8], [0.8, 1.0]])
    P = np.linalg.inv(C)

    def logp_grad(z):
        r = z - m
        return -0.5 * r @ P @ r, -P @ r

    q = advi._Gaussian(np.zeros(2), fullrank=True)
    kept = []
    advi._optimise(types.SimpleNamespace(logp_grad=logp_grad), [], q, n=20_000,
                   learning_rate=0.01, rng=np.random.default_rng(2),
                   callbacks=[lambda _, losses, i: kept.append(q.factor()) if i > 10_000
                              else None])
    mu = np.mean([k[0] for k in kept], axis=0)
    cov = np.mean([k[1] @ k[1].T for k in kept], axis=0)
    np.testing.assert_allclose(mu, m, atol=0.03)
    np.testing.assert_allclose(cov, C, atol=0.05)


def test_a_non_finite_gradient_stops_the_run_with_a_floating_point_error():
    fns = types.SimpleNamespace(logp_grad=lambda z: (np.nan, np.zeros_like(z)))
    with pytest.raises(FloatingPointError, match="iteration 1"):
        advi._optimise(fns, [], advi._Gaussian(np.zeros(2), False), n=10, learning_rate=0.01,
                       rng=np.random.default_rng(0), callbacks=[])


def _sinc_model(n, scale, seed=0):
    from rvm_ppl.core.priors import scale_priors
    from rvm_ppl.datasets.loaders import make_sinc
    from rvm_ppl.kernels.kernel import RBF, design_matrix
    from rvm_ppl.model.build import DEFAULT_PRIORS, build_model

    X, y = make_sinc(n, random_state=seed)
    y = scale * y
    Phi = design_matrix(X, X, RBF(1 / 9))
    return build_model(Phi, y, priors=scale_priors(DEFAULT_PRIORS, np.std(y))), X, y


@pytest.mark.slow
def test_advi_compiles_once_for_data_sets_of_one_size_whatever_their_scale(monkeypatch, tmp_path):
    """A second data set (other values, targets 100 times larger) reuses the compiled
    functions and gives the numbers a fresh compilation gives; so does a later process,
    which loads them from the disk (here: the process's store emptied)."""
    from rvm_ppl import fit_advi

    store = {"dir": tmp_path / "a"}
    monkeypatch.setattr(compiled, "store_directory", lambda: str(store["dir"]))  # empty at first
    kw = dict(n=2000, window=250, draws=50, random_seed=3)
    first, _, _ = _sinc_model(30, 1.0, seed=0)
    fit_advi(first, **kw)
    before = compiled.compile_counts()
    other, _, _ = _sinc_model(30, 100.0, seed=1)
    reused = fit_advi(other, **kw)
    after = compiled.compile_counts()
    assert after["reused"] == before["reused"] + 1 and after["compiled"] == before["compiled"]
    compiled.clear()
    store["dir"] = tmp_path / "b"  # nothing stored: compiled afresh
    fresh = fit_advi(_sinc_model(30, 100.0, seed=1)[0], **kw)
    assert compiled.compile_counts()["compiled"] == after["compiled"] + 1
    np.testing.assert_array_equal(reused.posterior["alpha"].values, fresh.posterior["alpha"].values)
    np.testing.assert_array_equal(reused.fit["elbo"].values, fresh.fit["elbo"].values)
    # What a later process sees: nothing kept in memory, the stored functions on disk.
    assert len(list((tmp_path / "a").glob("functions-*.pkl"))) == 1
    compiled.clear()
    store["dir"] = tmp_path / "a"  # what the first fit stored
    counts = compiled.compile_counts()
    loaded = fit_advi(_sinc_model(30, 100.0, seed=1)[0], **kw)
    assert compiled.compile_counts()["loaded"] == counts["loaded"] + 1
    assert compiled.compile_counts()["compiled"] == counts["compiled"]
    np.testing.assert_array_equal(loaded.posterior["alpha"].values, fresh.posterior["alpha"].values)
    np.testing.assert_array_equal(loaded.fit["elbo"].values, fresh.fit["elbo"].values)


@pytest.mark.slow
def test_posterior_predictive_at_new_inputs_keeps_the_fitted_precisions(caplog):
    """The hyperprior's rates and the training statistics the marginal regression's w is
    conditioned on are data of the model; the fit's constant_data holds them, so
    pm.sample_posterior_predictive after pm.set_data keeps alpha, beta and w as fitted
    instead of drawing them again from their priors (without them: "Sampling: [alpha,
    beta, w, y]")."""
    import logging

    import pymc as pm

    from rvm_ppl import fit_advi
    from rvm_ppl.kernels.kernel import RBF, design_matrix

    model, X, _ = _sinc_model(30, 1.0)
    idata = fit_advi(model, n=2000, window=250, draws=40, random_seed=0)
    statistics = {"lowrank_V", "lowrank_s"} if "lowrank_V" in model.named_vars else \
        {"PhiT_Phi", "PhiT_y"}
    assert set(idata.constant_data) == {"alpha_rate", "beta_rate"} | statistics
    Xs = np.linspace(-10, 10, 7)[:, None]
    with model, caplog.at_level(logging.INFO, logger="pymc"):
        pm.set_data({"Phi": design_matrix(Xs, X, RBF(1 / 9))})
        pm.sample_posterior_predictive(idata, predictions=True, random_seed=0, progressbar=False)
    # Only the targets at the new inputs are drawn: alpha, beta and w come from the posterior.
    assert "Sampling: [y]" in caplog.text


@pytest.mark.slow
def test_the_estimators_low_rank_fits_the_truncated_design():
    """RVR(low_rank=tol) passes tol to build_model: the fit is on the design's truncated SVD,
    of the rank truncated_factor gives, and says so in its attributes."""
    from rvm_ppl import RVR
    from rvm_ppl.datasets.loaders import make_sinc
    from rvm_ppl.kernels.kernel import RBF, design_matrix
    from rvm_ppl.model.marginal import truncated_factor

    from sklearn.exceptions import ConvergenceWarning

    X, y = make_sinc(30, random_state=0)
    with pytest.warns(ConvergenceWarning, match="did not converge in 500"):  # a short run
        fit = RVR(gamma=1 / 9, low_rank=1e-3, max_iter=500, draws=20, random_state=0,
                  progressbar=False).fit(X, y, method="advi")
    Phi = design_matrix(X, X, RBF(gamma=1 / 9))
    Phi = np.hstack([np.ones((30, 1)), Phi])  # the bias first, as the estimator's basis
    rank = truncated_factor(Phi, 1e-3)[0].shape[1]
    assert rank < 29 and fit.idata_.attrs["design_tol"] == 1e-3
    assert fit.idata_.attrs["design_rank"] == rank
    assert RVR(gamma=1 / 9).get_params()["low_rank"] == "auto"
