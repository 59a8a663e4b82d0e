"""rvm_ppl.output.diagnostics: distances, coverage, Pareto k-hat, LOO comparison, summary.

Closed forms and independent computations: hand-computed W1 and coverage,
scipy's W1, the marginal likelihood with the N x N covariance and scipy's
Gamma densities, the PyMC model's own log density, a conjugate case where
vb's form of q is the exact posterior (k-hat 0, log ratios equal to the
closed-form log evidence), and a grid posterior.
"""

import warnings

import arviz as az
import numpy as np
import pytest
import xarray as xr
from _short_runs import short
from scipy import special, stats

from rvm_ppl import RVC, RVR, ModelMismatchWarning
from rvm_ppl.closed_form.evidence import log_evidence_dense
from rvm_ppl.datasets.loaders import make_ripley, make_sinc
from rvm_ppl.output.diagnostics import (
    ApproximationWarning,
    compare_predictive,
    compare_to_reference,
    hdi_coverage,
    khat_diagnosis,
    log_joint_hyper,
    log_joint_weights,
    loo_table,
    pareto_khat,
    plot_distance,
    psis_khat,
    summary_table,
    wasserstein_1,
)

pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")


# -- 1. W1 and coverage ----------------------------------------------------
def test_wasserstein_hand_values():
    assert wasserstein_1([0.0, 1.0], [0.5]) == pytest.approx(0.5)
    assert wasserstein_1([0.0, 1.0, 2.0], [1.0, 2.0, 3.0]) == pytest.approx(1.0)  # a shift
    # F - G = 1/2 on [0, 1) and -1/2 on [1, 2): integral 1.
    assert wasserstein_1([0.0, 2.0], [1.0]) == pytest.approx(1.0)
    assert wasserstein_1([3.0], [3.0]) == 0.0
    # a point mass: W1 = mean |x - v|
    x = np.array([0.0, 1.0, 4.0])
    assert wasserstein_1(x, [1.0]) == pytest.approx(np.mean(np.abs(x - 1.0)))


def test_wasserstein_matches_scipy_for_unequal_sizes(rng):
    for n, m in [(7, 13), (50, 3), (200, 200)]:
        x, y = rng.normal(size=n), rng.gamma(2.0, size=m)
        assert wasserstein_1(x, y) == pytest.approx(stats.wasserstein_distance(x, y), rel=1e-12)
        assert wasserstein_1(x, y) == pytest.approx(wasserstein_1(y, x), rel=1e-12)


def test_wasserstein_infinite_mass():
    assert wasserstein_1([np.inf], [np.inf]) == 0.0
    assert wasserstein_1([1.0, np.inf], [1.0]) == np.inf
    assert wasserstein_1([np.inf], [0.0, 1.0]) == np.inf
    # half the mass at infinity in both: W1 of the finite halves, weighted 1/2
    assert wasserstein_1([0.0, np.inf], [1.0, np.inf]) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="-inf"):
        wasserstein_1([-np.inf], [0.0])
    with pytest.raises(ValueError, match="empty"):
        wasserstein_1([], [0.0])
    with pytest.raises(ValueError, match="NaN"):
        wasserstein_1([np.nan], [0.0])


def test_hdi_coverage_hand_values():
    # The 94% HDI of three draws is the narrowest interval holding 2 of them: [1, 2].
    assert hdi_coverage([0.0, 1.0, 2.0, 3.0], [1.0, 1.5, 2.0]) == 0.5
    # [1, 1.5] is narrower than [1.5, 3] among 2-draw intervals of [1, 1.5, 3].
    assert hdi_coverage([0.0, 1.0, 1.2, 2.0], [1.0, 1.5, 3.0], hdi_prob=0.5) == 0.5
    # A point estimate covers only reference draws equal to it.
    assert hdi_coverage([0.0, 1.0, 2.0], [1.0]) == pytest.approx(1 / 3)
    assert hdi_coverage(np.linspace(0, 1, 11), [0.55, 0.55]) == 0.0
    # A pruned basis covers nothing finite.
    assert hdi_coverage([0.0, 1.0], [np.inf]) == 0.0
    with pytest.raises(ValueError, match="hdi_prob"):
        hdi_coverage([0.0], [0.0], hdi_prob=1.0)


def test_hdi_coverage_of_the_same_distribution(rng):
    ref, d = rng.normal(size=20_000), rng.normal(size=20_000)
    assert hdi_coverage(ref, d) == pytest.approx(0.94, abs=0.01)
    assert hdi_coverage(ref, 0.5 * d) < 0.7  # too narrow covers less


def _idata(method, alpha, beta, labels, *, fit=None, likelihood="gaussian"):
    """A minimal InferenceData of the package's layout: alpha (chain, draw, kept), beta."""
    alpha = np.asarray(alpha, dtype=float)
    kept = labels[: alpha.shape[-1]]
    post = xr.Dataset({"alpha": (("chain", "draw", "basis"), alpha),
                       "beta": (("chain", "draw"), np.asarray(beta, dtype=float))},
                      coords={"basis": kept})
    a_point = np.full(len(labels), np.inf)
    a_point[: len(kept)] = np.median(alpha.reshape(-1, len(kept)), axis=0)
    in_model = np.arange(len(labels)) < len(kept)
    rel = xr.Dataset({"alpha": (("basis",), a_point), "in_model": (("basis",), in_model),
                      "relevant": (("basis",), in_model)}, coords={"basis": labels})
    groups = {"posterior": post, "relevance": rel}
    if fit is not None:
        groups["fit"] = fit
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # non-standard group names
        idata = az.InferenceData(**groups)
    idata.attrs.update(inference_method=method, likelihood=likelihood)
    return idata


def test_compare_to_reference_shift_pruned_and_point(rng):
    labels = ["bias", "x_0", "x_1"]
    z = rng.normal(size=(2, 500, 3))
    ref_la = z + np.array([0.0, 1.0, 2.0])  # log10 alpha draws
    ref_lb = rng.normal(2.0, 0.1, size=(2, 500))
    ref = _idata("nuts", 10**ref_la, 10**ref_lb, labels)
    # Same draws, basis 0 shifted by +0.5; basis 2 pruned.
    shifted = ref_la[..., :2] + np.array([0.5, 0.0])
    vb = _idata("vb", 10**shifted, 10**ref_lb, labels)
    ev = _idata("evidence", np.full((1, 4, 1), 10**0.3), np.full((1, 4), 10**2.0), labels)
    table = compare_to_reference({"nuts": ref, "vb": vb, "evidence": ev})
    assert set(table["method"]) == {"vb", "evidence"}
    v = table[(table["method"] == "vb") & (table["parameter"] == "log10_alpha")].set_index("basis")
    assert v.loc["bias", "w1"] == pytest.approx(0.5)
    sd = np.std(ref_la[..., 0])
    assert v.loc["bias", "median_shift_sd"] == pytest.approx(0.5 / sd)
    assert v.loc["x_0", "w1"] == 0.0 and v.loc["x_0", "median_shift_sd"] == 0.0
    assert v.loc["x_0", "coverage"] == pytest.approx(
        hdi_coverage(ref_la[..., 1], ref_la[..., 1]))
    assert v.loc["x_1", "status"] == "pruned"
    assert v.loc["x_1", "w1"] == np.inf and v.loc["x_1", "coverage"] == 0.0
    e = table[table["method"] == "evidence"].set_index(["parameter", "basis"])
    row = e.loc[("log10_alpha", "bias")]
    assert row["status"] == "point estimate" and row["coverage"] == 0.0
    assert row["w1"] == pytest.approx(np.mean(np.abs(ref_la[..., 0] - 0.3)))
    assert row["ref_quantile"] == pytest.approx(np.mean(ref_la[..., 0] < 0.3))
    assert e.loc[("log10_beta", "-"), "w1"] == pytest.approx(np.mean(np.abs(ref_lb - 2.0)))
    ax = plot_distance(table)
    assert ax.get_ylabel().startswith("W1")
    assert len(ax.get_legend().get_texts()) == 2
    with pytest.raises(ValueError, match="No fit named"):
        compare_to_reference({"vb": vb})
    with pytest.raises(TypeError):
        compare_to_reference([ref, vb])


# -- 2. Pareto k-hat -------------------------------------------------------
def test_log_joint_hyper_matches_dense_evidence_and_scipy(rng):
    X, y = make_sinc(12, random_state=1)
    Phi = np.column_stack([np.ones(12), np.exp(-((X - X[::3].T) ** 2) / 9)])
    priors = {"a": 0.5, "b": 2.0, "c": 1.5, "d": 0.3}
    la = rng.normal(0.0, 2.0, size=(5, Phi.shape[1]))
    lb = rng.normal(3.0, 1.0, size=5)
    got = log_joint_hyper(Phi, y, la, lb, priors)
    for s in range(5):
        a, b = np.exp(la[s]), np.exp(lb[s])
        want = (log_evidence_dense(Phi, y, a, b)
                + stats.gamma.logpdf(a, priors["a"], scale=1 / priors["b"]).sum()
                + stats.gamma.logpdf(b, priors["c"], scale=1 / priors["d"]) + la[s].sum() + lb[s])
        assert got[s] == pytest.approx(want, rel=1e-9)


def test_log_joint_hyper_matches_the_pymc_model(rng):
    """The PyMC model's log density (with Jacobian) = ours + the whitened weights' normal terms."""
    from rvm_ppl.model.build import build_model

    X, y = make_sinc(10, random_state=2)
    Phi = np.column_stack([np.ones(10), np.exp(-((X - X[::4].T) ** 2) / 9)])
    priors = {"a": 1e-3, "b": 1e-2, "c": 1e-3, "d": 1e-2}
    model = build_model(Phi, y, priors=priors)
    logp = model.compile_logp(jacobian=True)
    for _ in range(3):
        la, lb, z = rng.normal(size=Phi.shape[1]), rng.normal(3.0), rng.normal(size=Phi.shape[1])
        pm_value = logp({"alpha_log__": la, "beta_log__": lb, "w_whitened__": z})
        ours = log_joint_hyper(Phi, y, la[None], [lb], priors)[0] + stats.norm.logpdf(z).sum()
        assert pm_value == pytest.approx(ours, rel=1e-9)


def _vb_fit_group(alpha_shape, alpha_rate, beta_shape, beta_rate, labels):
    return xr.Dataset({"alpha_shape": (("candidate",), np.asarray(alpha_shape, dtype=float)),
                       "alpha_rate": (("candidate",), np.asarray(alpha_rate, dtype=float)),
                       "beta_shape": ((), float(beta_shape)), "beta_rate": ((), float(beta_rate))},
                      coords={"candidate": labels})


def test_khat_zero_when_vb_form_is_the_exact_posterior(rng):
    """A basis of zeros: y ~ N(0, 1/beta) exactly, so the posterior is
    Gamma(a, b) x Gamma(c + N/2, d + y'y/2), vb's own form. The log ratios are
    the log evidence, a constant."""
    N = 25
    y = rng.normal(0.0, 0.4, size=N)
    Phi = np.zeros((N, 1))
    p = {"a": 2.0, "b": 3.0, "c": 1.5, "d": 0.5}
    c_post, d_post = p["c"] + N / 2, p["d"] + y @ y / 2
    fit = _vb_fit_group([p["a"]], [p["b"]], c_post, d_post, ["bias"])
    idata = _idata("vb", np.ones((1, 5, 1)), np.ones((1, 5)), ["bias"], fit=fit)
    res = pareto_khat(idata, Phi=Phi, y=y, priors=p, n_draws=1000, random_state=0)
    log_evidence = (p["c"] * np.log(p["d"]) - special.gammaln(p["c"]) + special.gammaln(c_post)
                    - c_post * np.log(d_post) - N / 2 * np.log(2 * np.pi))
    np.testing.assert_allclose(res.log_ratios, log_evidence, rtol=1e-10)
    assert res.khat < 0.1 and res.diagnosis == "good"
    assert res.psis_mean["log_beta"] == pytest.approx(res.q_mean["log_beta"], abs=1e-10)


def _grid_posterior():
    """One basis, proper hyperpriors: the exact posterior of (log alpha, log beta) on a grid."""
    X, y = make_sinc(30, random_state=4)
    Phi = np.exp(-((X - X[[7]].T) ** 2) / 9)
    p = {"a": 1.0, "b": 1.0, "c": 1.0, "d": 0.1}
    ga, gb = np.linspace(-12.0, 4.0, 161), np.linspace(-1.0, 4.5, 111)
    A, B = np.meshgrid(ga, gb, indexing="ij")
    logp = log_joint_hyper(Phi, y, A.reshape(-1, 1), B.ravel(), p).reshape(A.shape)
    return Phi, y, p, ga, gb, logp


def test_khat_small_for_a_grid_copy_of_the_posterior_and_large_for_a_narrow_q(rng):
    Phi, y, p, ga, gb, logp = _grid_posterior()
    da, db = ga[1] - ga[0], gb[1] - gb[0]
    prob = np.exp(logp - special.logsumexp(logp)).ravel()
    assert prob.reshape(logp.shape)[[0, -1], :].sum() + prob.reshape(logp.shape)[:, [0, -1]].sum() \
        < 1e-6  # the grid holds the posterior
    # q: a cell drawn with its posterior probability, uniform inside it.
    S = 4000
    cell = rng.choice(prob.size, size=S, p=prob)
    i, j = np.unravel_index(cell, logp.shape)
    la = ga[i] + da * (rng.random(S) - 0.5)
    lb = gb[j] + db * (rng.random(S) - 0.5)
    log_q = np.log(prob[cell] / (da * db))
    good = psis_khat(log_joint_hyper(Phi, y, la[:, None], lb, p), log_q,
                     {"log_alpha": la, "log_beta": lb})
    assert good.khat < 0.5 and good.diagnosis == "good"
    A, B = np.meshgrid(ga, gb, indexing="ij")
    P = prob.reshape(A.shape)
    mean_a, mean_b = (P * A).sum(), (P * B).sum()
    sd_a, sd_b = np.sqrt((P * (A - mean_a) ** 2).sum()), np.sqrt((P * (B - mean_b) ** 2).sum())
    # The PSIS-corrected means are the posterior's, to Monte Carlo error.
    assert abs(good.psis_mean["log_alpha"] - mean_a) < 4 * sd_a / np.sqrt(good.ess)
    assert abs(good.psis_mean["log_beta"] - mean_b) < 4 * sd_b / np.sqrt(good.ess)
    # A Gaussian a fifth as wide as the posterior, through pareto_khat's advi path.
    fit = xr.Dataset({"q_mean_log_alpha": (("candidate",), [mean_a]),
                      "q_sd_log_alpha": (("candidate",), [sd_a / 5]),
                      "q_mean_log_beta": ((), mean_b), "q_sd_log_beta": ((), sd_b / 5)},
                     coords={"candidate": ["x_7"]})
    idata = _idata("advi", np.ones((1, 5, 1)), np.ones((1, 5)), ["x_7"], fit=fit)
    with pytest.warns(ApproximationWarning, match="unreliable"):
        bad = pareto_khat(idata, Phi=Phi, y=y, priors=p, n_draws=2000, random_state=1)
    assert bad.khat > 0.7 and bad.diagnosis == "unreliable"
    assert bad.ess < 0.2 * bad.n_draws


def test_khat_diagnosis_thresholds():
    assert [khat_diagnosis(k) for k in (0.2, 0.6, 0.8, np.inf, np.nan)] == \
        ["good", "usable", "unreliable", "unreliable", "unreliable"]


def test_pareto_khat_on_a_vb_fit_and_refusals():
    X, y = make_sinc(30, random_state=0)
    vb = RVR(gamma=1 / 9, random_state=0, draws=50).fit(X, y, method="vb")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ApproximationWarning)
        res = pareto_khat(vb, n_draws=500, random_state=0)
    assert np.isfinite(res.khat) and res.n_draws == 500
    assert res.q_mean["log_alpha"].shape == (31,)  # every candidate, pruned ones included
    # Same seed, same answer; the estimator's inputs equal the explicit ones.
    from rvm_ppl.model.build import scale_priors

    Phi = vb._design(X, np.arange(31))
    again = pareto_khat(vb.idata_, Phi=Phi, y=y, priors=scale_priors(None, np.std(y)),
                        n_draws=500, random_state=0, warn=False)
    assert again.khat == pytest.approx(res.khat)
    ev = RVR(gamma=1 / 9, draws=50).fit(X, y, method="evidence")
    with pytest.raises(ValueError, match="variational"):
        pareto_khat(ev)
    with pytest.raises(ValueError, match="n_draws"):
        pareto_khat(vb, n_draws=10)
    with pytest.raises(ValueError, match="give Phi"):
        pareto_khat(vb.idata_)
    Xc, yc = make_ripley(40, random_state=0)
    rvc = RVC(gamma=4, draws=20).fit(Xc, yc, method="evidence")
    with pytest.raises(ValueError, match="variational"):
        pareto_khat(rvc)


# -- 2b. k-hat of the classifier --------------------------------------------
def test_log_joint_weights_matches_quadrature_over_alpha(rng):
    """The Student-t prior is the Gamma mixture of N(0, 1/alpha), integrated numerically."""
    from scipy import integrate

    Phi = rng.normal(size=(12, 2))
    y = (rng.random(12) < 0.5).astype(float)
    w = np.array([[0.3, -1.7], [2.5, 0.05]])
    p = {"a": 3.0, "b": 2.0}

    def log_prior(wm):
        def f(alpha):
            return stats.norm.pdf(wm, 0.0, alpha**-0.5) * stats.gamma.pdf(alpha, p["a"],
                                                                           scale=1 / p["b"])
        return np.log(integrate.quad(f, 0.0, np.inf, epsabs=0, epsrel=1e-11)[0])

    for ws, got in zip(w, log_joint_weights(Phi, y, w, p)):
        prob = special.expit(Phi @ ws)
        brute = np.sum(np.log(np.where(y == 1, prob, 1 - prob))) + sum(map(log_prior, ws))
        assert got == pytest.approx(brute, rel=1e-9)


def _one_weight_classifier(rng):
    """One basis, 60 labels: the exact posterior of u = asinh(w / sqrt(2 b)) on a grid."""
    x = rng.normal(size=60)
    Phi = x[:, None]
    y = (rng.random(60) < special.expit(1.5 * x)).astype(float)
    p = {"a": 3.0, "b": 2.0}
    c = np.sqrt(2 * p["b"])
    u = np.linspace(-4.0, 4.0, 4001)
    logp = log_joint_weights(Phi, y, c * np.sinh(u)[:, None], p) + np.log(c * np.cosh(u))
    prob = np.exp(logp - special.logsumexp(logp))
    m = (prob * u).sum()
    return Phi, y, p, m, np.sqrt((prob * (u - m) ** 2).sum())


def _advi_classifier(m, sd):
    fit = xr.Dataset({"q_mean_scaled_asinh_w": (("candidate",), [m]),
                      "q_sd_scaled_asinh_w": (("candidate",), [sd])},
                     coords={"candidate": ["x_0"]})
    return _idata("advi", np.ones((1, 5, 1)), np.ones((1, 5)), ["x_0"], fit=fit,
                  likelihood="bernoulli")


def test_classifier_khat_good_for_a_wide_q_bad_for_a_narrow_one(rng):
    """A Gaussian on u a quarter wider than the posterior (the ratio p/q is
    then bounded) is good; one five times narrower is unreliable."""
    Phi, y, p, m, sd = _one_weight_classifier(rng)
    good = pareto_khat(_advi_classifier(m, 1.25 * sd), Phi=Phi, y=y, priors=p, n_draws=4000,
                       random_state=0)
    assert good.khat < 0.5 and good.diagnosis == "good" and good.ess > 0.7 * good.n_draws
    with pytest.warns(ApproximationWarning, match="unreliable"):
        bad = pareto_khat(_advi_classifier(m, sd / 5), Phi=Phi, y=y, priors=p, n_draws=4000,
                          random_state=0)
    assert bad.khat > 0.7 and bad.ess < 0.2 * bad.n_draws
    # The corrected mean of log alpha is E[log alpha | w] averaged over the posterior.
    c = np.sqrt(2 * p["b"])
    u = np.linspace(-4.0, 4.0, 4001)
    w = c * np.sinh(u)
    logp = log_joint_weights(Phi, y, w[:, None], p) + np.log(c * np.cosh(u))
    prob = np.exp(logp - special.logsumexp(logp))
    exact = (prob * (special.digamma(p["a"] + 0.5) - np.log(p["b"] + w**2 / 2))).sum()
    assert good.psis_mean["log_alpha"][0] == pytest.approx(exact, abs=0.02)
    assert bad.psis_mean["log_alpha"][0] != pytest.approx(bad.q_mean["log_alpha"][0], abs=1e-3)


def test_classifier_khat_of_vb_uses_its_gaussian_and_its_pruned_factors():
    X, y = make_ripley(60, random_state=1)
    vb = RVC(gamma=4, draws=20, progressbar=False).fit(X, y, method="vb")
    res = pareto_khat(vb, n_draws=500, random_state=0, warn=False)
    kept = pareto_khat(vb, bases="kept", n_draws=500, random_state=0, warn=False)
    assert res.q_mean["w"].shape == (61,) and kept.q_mean["w"].shape == (len(vb.active_[0]),)
    # q's mean of w is vb's: the Gaussian's mean in the model, 0 outside it.
    np.testing.assert_allclose(kept.q_mean["w"], vb.coef_[0, vb.active_[0]],
                               atol=5 * np.sqrt(np.diag(vb.sigma_[0]).max() / 500))
    outside = np.setdiff1d(np.arange(61), vb.active_[0])
    assert np.abs(res.q_mean["w"][outside]).max() < 0.1
    # The estimator's inputs equal the explicit ones (vb's hyperprior is the package default).
    from rvm_ppl.model.build import resolve_priors

    again = pareto_khat(vb.idata_, Phi=vb._design(X, np.arange(61)), y=(vb.y_codes_ == 1),
                        priors=resolve_priors(None), n_draws=500, random_state=0, warn=False)
    assert again.khat == pytest.approx(res.khat)
    X3 = np.vstack([X, X[:20] + 3.0])
    y3 = np.r_[y, np.full(20, 2)]
    ovr = RVC(gamma=4, draws=20).fit(X3, y3, method="vb")
    with pytest.raises(ValueError, match="one binary classifier"):
        pareto_khat(ovr)


# -- 3. LOO ----------------------------------------------------------------
@pytest.fixture(scope="module")
def sinc30():
    X, y = make_sinc(30, random_state=0)
    Xt, yt = make_sinc(200, random_state=1)
    return X, y, Xt, yt


def test_a_truncated_design_is_another_model(sinc30):
    # build_model(low_rank=<float>) fits the RVM on the design's truncated SVD: its fits
    # record the truncation, and a comparison with fits of the exact design says so.
    from rvm_ppl.output.identity import check_one_model

    X, y, _, _ = sinc30
    exact = RVR(gamma=1 / 9, alpha_shape=1e-6, alpha_rate=1e-6).fit(X, y).idata_
    assert exact.attrs["design_tol"] == 0.0 and exact.posterior.attrs["design_tol"] == 0.0
    truncated = exact.copy()
    for group in truncated.groups():
        truncated[group].attrs["design_tol"] = 1e-6
    truncated.attrs["design_tol"] = 1e-6
    with pytest.warns(ModelMismatchWarning, match=r"truncation .*exact: 0.0; truncated: 1e-06"):
        check_one_model(["exact", "truncated"], [exact, truncated])


def test_loo_table_ranks_a_clearly_worse_fit_last(sinc30):
    X, y, Xt, yt = sinc30
    good = RVR(gamma=1 / 9, draws=200, random_state=0).fit(X, y, method="evidence")
    # Noise fixed at 1.0, ten times the data's 0.1.
    bad = RVR(gamma=1 / 9, draws=200, random_state=0, noise_std=1.0,
              fit_noise=False).fit(X, y, method="evidence")
    with pytest.warns(ModelMismatchWarning, match="β fixed"):  # another model: labelled
        table = loo_table({"bad": bad, "good": good}, Xt, yt)
    assert list(table.index) == ["good", "bad"]
    assert table.loc["bad", "hyperprior"] == "flat in log α, β fixed at 1"
    assert table.loc["good", "elpd_loo"] > table.loc["bad", "elpd_loo"] + 10
    assert table.loc["good", "test_lpd"] > table.loc["bad", "test_lpd"]
    assert {"n_k_gt_0.7", "max_k"} <= set(table.columns)
    assert (table["n_k_gt_0.7"] >= 0).all()
    # the held-out density of a point-estimate fit: nearly the Gaussian predictive
    mean, sd = good.predict(Xt, return_std=True)
    gauss = stats.norm.logpdf(yt, mean, sd).sum()
    assert table.loc["good", "test_lpd"] == pytest.approx(gauss, abs=0.02 * abs(gauss) + 1.0)
    with pytest.raises(ValueError, match="both"):
        loo_table({"good": good}, Xt, None)
    with pytest.raises(TypeError, match="estimators"):
        loo_table({"good": good.idata_}, Xt, yt)


# -- 4. Summary on real fits -----------------------------------------------
@pytest.mark.slow
def test_summary_table_on_tiny_real_fits(sinc30):
    X, y, Xt, yt = sinc30
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # short runs: NUTS's r-hat and ADVI's convergence
        fits = {m: RVR(gamma=1 / 9, random_state=0, **short(m, draws=200, tune=200))
                .fit(X, y, method=m) for m in ("evidence", "vb", "advi", "nuts")}
        table = summary_table(fits, X_test=Xt, y_test=yt, n_draws=500,
                              fit_times={"evidence": 0.1, "vb": 0.1})
    promised = ["fit_time_s", "khat", "khat_diagnosis", "w1_log10_alpha", "coverage_log10_alpha",
                "n_pruned", "w1_log10_beta", "coverage_log10_beta", "elpd_loo", "elpd_loo_se",
                "n_loo_k_gt_0.7", "test_lpd", "n_divergences", "max_rhat",
                "min_ess_bulk_log_alpha", "n_data_driven", "n_prior_driven", "n_conflict",
                "n_undetermined", "hyperprior"]  # the evidence fit is flat: another model
    assert list(table.columns) == promised
    assert list(table.index) == ["evidence", "vb", "advi", "nuts"]
    assert np.isfinite(table["fit_time_s"]).all() and np.isfinite(table["elpd_loo"]).all()
    assert np.isfinite(table.loc[["vb", "advi"], "khat"].astype(float)).all()
    assert set(table.loc[["vb", "advi"], "khat_diagnosis"]) <= {"good", "usable", "unreliable"}
    for m in ("evidence", "vb", "advi"):
        assert np.isfinite(table.loc[m, ["w1_log10_alpha", "w1_log10_beta"]].astype(float)).all()
    assert table.loc["advi", "n_pruned"] == 0 and table.loc["evidence", "n_pruned"] > 0
    assert np.isfinite(table.loc["nuts", ["n_divergences", "max_rhat",
                                          "min_ess_bulk_log_alpha"]].astype(float)).all()
    assert table.loc["evidence", "coverage_log10_beta"] == 0.0  # a point estimate
    pred = compare_predictive(fits, Xt)
    assert list(pred.index) == ["evidence", "vb", "advi"]
    assert (pred["mean_shift_sd"] < 1.0).all()  # all four agree on noisy sinc


def test_pareto_khat_on_the_kept_bases_only():
    """bases='kept' judges q on the model without the pruned bases: the same
    computation as dropping those columns and Q factors by hand."""
    X, y = make_sinc(30, random_state=0)
    vb = RVR(gamma=1 / 9, random_state=0, draws=50).fit(X, y, method="vb")
    kept = np.asarray(vb.idata_.relevance["in_model"].values)
    assert 0 < kept.sum() < kept.size
    res = pareto_khat(vb, bases="kept", n_draws=300, random_state=0, warn=False)
    assert res.q_mean["log_alpha"].shape == (kept.sum(),)
    fit = vb.idata_.fit
    rng = np.random.default_rng(0)
    shape, rate = fit["alpha_shape"].values[kept], fit["alpha_rate"].values[kept]
    la = np.log(rng.gamma(shape, 1 / rate, size=(300, kept.sum())))
    lb = np.log(rng.gamma(float(fit["beta_shape"]), 1 / float(fit["beta_rate"]), size=300))
    log_q = (stats.loggamma.logpdf(la, shape, scale=1.0, loc=-np.log(rate)).sum(axis=1)
             + stats.loggamma.logpdf(lb, float(fit["beta_shape"]),
                                     loc=-np.log(float(fit["beta_rate"]))))
    from rvm_ppl.model.build import scale_priors

    Phi = vb._design(X, np.flatnonzero(kept))
    log_p = log_joint_hyper(Phi, y, la, lb, scale_priors(None, np.std(y)))
    np.testing.assert_allclose(res.log_ratios, log_p - log_q, rtol=1e-9)
    with pytest.raises(ValueError, match="bases"):
        pareto_khat(vb, bases="some")


def test_classifier_tables_and_heldout_density():
    """RVC fits: no beta rows, the held-out density is log predict_proba at the truth."""
    from rvm_ppl.output.diagnostics import heldout_lpd

    X, y = make_ripley(60, random_state=0)
    Xt, yt = make_ripley(100, random_state=1)
    fits = {m: RVC(gamma=4, draws=100, random_state=0).fit(X, y, method=m)
            for m in ("evidence", "vb")}
    P = fits["vb"].predict_proba(Xt)
    assert heldout_lpd(fits["vb"], Xt, yt) == pytest.approx(
        np.log(P[np.arange(len(yt)), yt.astype(int)]).sum())
    with pytest.raises(ValueError, match="labels"):
        heldout_lpd(fits["vb"], Xt, yt + 5)
    # The classifier's evidence fit is flat in log alpha, its vb under Gamma(1e-6, 1e-6).
    with pytest.warns(ApproximationWarning, match="vb fit"), \
            pytest.warns(ModelMismatchWarning, match="hyperprior"):
        table = summary_table(fits, reference="vb", X_test=Xt, y_test=yt)
    assert np.isnan(table["w1_log10_beta"]).all() and np.isnan(table.loc["evidence", "khat"])
    assert table.loc["vb", "khat"] > 0.7 and table.loc["vb", "khat_diagnosis"] == "unreliable"
    assert np.isfinite(table["test_lpd"]).all()
    assert table.loc["evidence", "w1_log10_alpha"] > 0
