"""Which alpha the data decide (power-scaling verdicts), and one model per comparison."""

import json

import matplotlib

matplotlib.use("Agg")

import arviz as az  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from _short_runs import short  # noqa: E402
from scipy import integrate, stats  # noqa: E402

from rvm_ppl import RVC, RVR, ModelMismatchWarning  # noqa: E402
from rvm_ppl.datasets.loaders import make_ripley, make_sinc  # noqa: E402
from rvm_ppl.output.diagnostics import compare_to_reference, loo_table, summary_table  # noqa: E402
from rvm_ppl.output.identity import hyperprior_label  # noqa: E402
from rvm_ppl.output.sensitivity import PSENS_THRESHOLD, power_scaling, verdicts  # noqa: E402
from rvm_ppl.output.tables import alpha_table  # noqa: E402
from rvm_ppl.plotting import plot_alpha  # noqa: E402

PRIORS = {"alpha_shape": 2.0, "alpha_rate": 0.5, "beta_shape": 2.0, "beta_rate": 0.02}
DELTA = 0.01


# -- An independent reference: the sensitivity from exact CDFs ----------------
def _cjs(F, G, x):
    """Cumulative Jensen-Shannon distance of the CDFs ``F``, ``G`` on the grid ``x``.

    Nguyen & Vreeken (2015), normalised as Kallioinen et al. (2023), section 3.2:
    ``sqrt((CJS(F||G) + CJS(G||F)) / (int F + int G))``. The integrals run over
    ``x``; for a sample's distance that is the sample's range, so ``x`` should
    span the quantiles ``1/S`` to ``1 - 1/S`` of ``S`` draws.
    """
    with np.errstate(divide="ignore", invalid="ignore"):
        m = 0.5 * (F + G)
        pq = np.where(F > 0, F * np.log2(F / m), 0.0)
        qp = np.where(G > 0, G * np.log2(G / m), 0.0)
    int_f, int_g = integrate.trapezoid(F, x), integrate.trapezoid(G, x)
    cjs_pq = integrate.trapezoid(pq, x) + (int_g - int_f) / (2 * np.log(2))
    cjs_qp = integrate.trapezoid(qp, x) + (int_f - int_g) / (2 * np.log(2))
    return np.sqrt((max(cjs_pq, 0) + max(cjs_qp, 0)) / (int_f + int_g))


def _exact_sensitivity(cdf, x):
    """``d CJS / d log2 c`` at ``c = 1`` from ``cdf(c, x)``, the power-scaled posterior's CDF.

    The distance is taken on ``theta`` and on ``-theta`` (the larger), at ``c = 1/(1 + delta)``
    and ``1 + delta``, as Kallioinen et al. (2023) define it.
    """
    base = cdf(1.0, x)
    total = 0.0
    for c in (1 / (1 + DELTA), 1 + DELTA):
        scaled = cdf(c, x)
        total += max(_cjs(base, scaled, x), _cjs(1 - base[::-1], 1 - scaled[::-1], x))
    return total / (2 * np.log2(1 + DELTA))


def _gaussian_case(prior_sd, lik_mean, lik_prec, n=8000, seed=0):
    """theta ~ N(0, prior_sd^2) a priori, log-likelihood -lik_prec (theta - lik_mean)^2 / 2.

    Returns exact posterior draws, the log prior and log-likelihood at them, and the
    exact sensitivities: power-scaling either term by c keeps the posterior Gaussian.
    """
    def posterior(c_prior, c_lik):
        prec = c_prior / prior_sd**2 + c_lik * lik_prec
        return c_lik * lik_prec * lik_mean / prec, 1 / np.sqrt(prec)

    m, s = posterior(1, 1)
    theta = np.random.default_rng(seed).normal(m, s, size=(4, n // 4))
    log_prior = stats.norm.logpdf(theta, 0, prior_sd)
    log_lik = -0.5 * lik_prec * (theta - lik_mean) ** 2
    x = np.linspace(*stats.norm(m, s).ppf([1 / n, 1 - 1 / n]), 40001)  # the sample's range
    exact = [_exact_sensitivity(lambda c, x, k=k: stats.norm.cdf(x, *posterior(
        c if k == 0 else 1, c if k == 1 else 1)), x) for k in (0, 1)]
    return theta[..., None], log_prior, log_lik, exact


# -- Constructed posteriors whose verdict is known -------------------------------
def test_verdicts_threshold_both_sensitivities():
    t = PSENS_THRESHOLD
    prior = np.array([t, t - 1e-9, t, t - 1e-9, np.nan, 0.3])
    lik = np.array([t, t, t - 1e-9, t - 1e-9, 0.3, np.nan])
    assert verdicts(prior, lik).tolist() == ["conflict", "data-driven", "prior-driven",
                                             "undetermined", "n/a", "n/a"]
    with pytest.raises(ValueError, match="shape"):
        verdicts([0.1], [0.1, 0.2])


def test_a_posterior_that_is_its_prior_is_prior_driven():
    # alpha ~ Gamma(2, 3) and a constant likelihood: the posterior is the prior. On log
    # alpha the power-scaled prior p^c is the density of log alpha with alpha ~ Gamma(2c, 3c).
    a, b = 2.0, 3.0
    rng = np.random.default_rng(1)
    alpha = rng.gamma(a, 1 / b, size=(4, 2000))  # 8000 draws
    log_prior = a * np.log(alpha) - b * alpha  # + const: the density of log alpha
    prior_s, lik_s = power_scaling(np.log(alpha)[..., None], log_prior, np.zeros_like(alpha))
    x = np.linspace(*np.log(stats.gamma(a, scale=1 / b).ppf([1 / 8000, 1 - 1 / 8000])), 40001)
    exact = _exact_sensitivity(lambda c, x: stats.gamma.cdf(np.exp(x), c * a, scale=1 / (c * b)), x)
    assert exact > 3 * PSENS_THRESHOLD  # far above the threshold
    assert prior_s[0] == pytest.approx(exact, rel=0.2)
    assert lik_s[0] < 0.01  # the weights are uniform: only the ECDF's end points differ
    assert verdicts(prior_s, lik_s).tolist() == ["prior-driven"]


@pytest.mark.parametrize(("case", "prior_sd", "lik_mean", "lik_prec", "verdict"), [
    ("sharply identified", 10.0, 1.0, 400.0, "data-driven"),
    ("likelihood nearly flat", 1.0, 1.0, 1e-3, "prior-driven"),
    ("prior and data far apart", 0.3, 3.0, 10.0, "conflict"),
])
def test_gaussian_posteriors_get_the_known_verdict(case, prior_sd, lik_mean, lik_prec, verdict):
    theta, log_prior, log_lik, exact = _gaussian_case(prior_sd, lik_mean, lik_prec)
    # The exact sensitivities are well away from the threshold: the verdict is not a
    # matter of Monte Carlo error.
    assert verdicts(exact[:1], exact[1:]).tolist() == [verdict], exact
    assert all(abs(e - PSENS_THRESHOLD) > 0.02 for e in exact), exact
    prior_s, lik_s = power_scaling(theta, log_prior, log_lik)
    np.testing.assert_allclose([prior_s[0], lik_s[0]], exact, rtol=0.25, atol=0.01)
    assert verdicts(prior_s, lik_s).tolist() == [verdict]


def test_a_flat_prior_and_a_flat_likelihood_are_undetermined():
    # Neither power moves a posterior that is uniform under a flat prior and a flat
    # likelihood: the fourth verdict occurs.
    theta = np.random.default_rng(2).uniform(0, 10, size=(4, 1000, 1))
    zeros = np.zeros(theta.shape[:2])
    prior_s, lik_s = power_scaling(theta, zeros, zeros)
    assert prior_s[0] < 0.01 and lik_s[0] < 0.01
    assert verdicts(prior_s, lik_s).tolist() == ["undetermined"]


def test_power_scaling_refuses_draws_that_are_not_finite():
    theta = np.zeros((2, 50, 1))
    with pytest.raises(ValueError, match="not finite"):
        power_scaling(theta, np.full((2, 50), -np.inf), np.zeros((2, 50)))
    with pytest.raises(ValueError, match="shape"):
        power_scaling(theta, np.zeros((2, 49)), np.zeros((2, 50)))


# -- Real fits ------------------------------------------------------------------
@pytest.fixture(scope="module")
def sinc():
    return make_sinc(30, random_state=0)


@pytest.fixture(scope="module")
def vb(sinc):
    # 1 000 draws: the likelihood sensitivity of vb's alpha is Monte Carlo noise, about
    # 0.03 +- 0.01 per basis at 250 draws, which let a basis cross PSENS_THRESHOLD by chance
    X, y = sinc
    return RVR(gamma=1 / 9, method="vb", random_state=0, draws=1000, **PRIORS).fit(X, y)


def _az_psens(idata, component):
    """ArviZ's own psens on the package's log_prior and log_likelihood groups, on log alpha."""
    post = idata.posterior.assign(log_alpha=np.log(idata.posterior["alpha"]))
    data = az.InferenceData(posterior=post, log_prior=idata.log_prior,
                            log_likelihood=idata.log_likelihood)
    return az.psens(data, component=component, var_names=["log_alpha"])  # a DataArray


def _thresholded(prior, lik):
    """The verdict table, written out."""
    p, lik = prior >= 0.05, lik >= 0.05
    return np.where(p & lik, "conflict", np.where(p, "prior-driven",
                                                  np.where(lik, "data-driven", "undetermined")))


def _check_against_psens(idata):
    rel = idata.relevance
    kept = [str(b) for b in idata.posterior["basis"].values]
    for var, component in (("prior_sensitivity", "prior"),
                            ("likelihood_sensitivity", "likelihood")):
        np.testing.assert_allclose(rel[var].sel(basis=kept).values,
                                   _az_psens(idata, component).values, rtol=1e-8)
    expected = _thresholded(_az_psens(idata, "prior").values,
                            _az_psens(idata, "likelihood").values)
    assert rel["verdict"].sel(basis=kept).values.tolist() == expected.tolist()
    out = ~rel["in_model"].values
    assert (rel["verdict"].values[out] == "n/a").all()
    assert np.isnan(rel["prior_sensitivity"].values[out]).all()


def test_vb_verdicts_are_psens_thresholded(vb):
    idata = vb.idata_
    _check_against_psens(idata)
    rel = idata.relevance
    kept = rel["in_model"].values
    assert 0 < kept.sum() < kept.size  # vb pruned some bases: they are n/a
    # vb's Q(alpha) is independent of Q(w): reweighting by the likelihood leaves alpha as
    # it was, up to Monte Carlo noise, so no vb alpha is likelihood-sensitive.
    assert (rel["likelihood_sensitivity"].values[kept] < PSENS_THRESHOLD).all()
    assert set(rel["verdict"].values[kept]) <= {"prior-driven", "undetermined"}


def test_evidence_has_no_verdict(sinc):
    X, y = sinc
    rel = RVR(gamma=1 / 9, random_state=0, draws=50, **PRIORS).fit(X, y).idata_.relevance
    assert (rel["verdict"].values == "n/a").all()
    assert np.isnan(rel["prior_sensitivity"].values).all()
    assert np.isnan(rel["likelihood_sensitivity"].values).all()


def test_verdicts_survive_netcdf(vb, tmp_path):
    vb.to_netcdf(tmp_path / "vb.nc")
    loaded = RVR.from_netcdf(tmp_path / "vb.nc").idata_.relevance
    assert loaded["verdict"].values.tolist() == vb.idata_.relevance["verdict"].values.tolist()
    np.testing.assert_array_equal(loaded["prior_sensitivity"].values,
                                  vb.idata_.relevance["prior_sensitivity"].values)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::rvm_ppl.pymc_fitters.nuts.SamplingWarning")  # short runs
@pytest.mark.parametrize("method", ["advi", "nuts"])
def test_sampled_verdicts_are_psens_thresholded(sinc, method):
    X, y = sinc
    idata = RVR(gamma=1 / 9, random_state=0, **PRIORS, **short(method)).fit(
        X, y, method=method).idata_
    assert idata.relevance["in_model"].values.all()
    _check_against_psens(idata)


# -- The model's identity ---------------------------------------------------------
def test_every_group_carries_the_model_identity(vb, sinc):
    X, y = sinc
    idata = vb.idata_
    s2 = np.var(y)
    for group in idata.groups():
        attrs = idata[group].attrs
        assert attrs["likelihood"] == "gaussian"
        p = json.loads(attrs["hyperprior"])  # in the units the fit used: rates times var(y)
        np.testing.assert_allclose([p["a"], p["b"], p["c"], p["d"]],
                                   [2.0, 0.5 * s2, 2.0, 0.02 * s2], rtol=1e-12)
        assert attrs["target_scale"] == pytest.approx(np.std(y))
        assert attrs["kernel"] == repr(vb.kernel_)
        assert attrs["basis_hash_of"] == "inputs" and len(attrs["basis_hash"]) == 16
        assert attrs["parameterization"] == "closed form"
    assert hyperprior_label(idata) == "α ~ Gamma(2, 0.5), β ~ Gamma(2, 0.02)"
    flat = RVR(gamma=1 / 9, draws=20).fit(X, y).idata_
    assert json.loads(flat.attrs["hyperprior"]) == {"a": 0, "b": 0, "c": 0, "d": 0}
    assert hyperprior_label(flat) == "flat in log α, flat in log β"
    # The basis hash follows the inputs, not the method.
    assert flat.attrs["basis_hash"] == idata.attrs["basis_hash"]
    other = RVR(gamma=1 / 9, draws=20).fit(X + 1e-3, y).idata_
    assert other.attrs["basis_hash"] != idata.attrs["basis_hash"]


# -- Comparisons of one model ------------------------------------------------------
@pytest.fixture(scope="module")
def one_model(sinc, vb):
    X, y = sinc
    ev = RVR(gamma=1 / 9, random_state=0, draws=250, **PRIORS).fit(X, y)  # type-II MAP
    return {"evidence": ev, "vb": vb}


def test_fits_of_one_model_compare_silently(one_model):
    # filterwarnings = error: any ModelMismatchWarning would fail here.
    table = alpha_table(one_model)
    assert ("vb", "verdict") in table.columns and ("evidence", "verdict") in table.columns
    assert (table[("evidence", "verdict")] == "n/a").all()
    np.testing.assert_array_equal(
        table[("vb", "verdict")].values,
        one_model["vb"].idata_.relevance["verdict"].sel(basis=list(table.index)).values)
    fig, ax = plt.subplots()
    plot_alpha(one_model, ax=ax)
    assert [t.get_text() for t in ax.get_legend().get_texts()][:2] == [
        "evidence (point estimate)", "vb (median, 94% HDI)"]
    plt.close(fig)
    assert "hyperprior" not in compare_to_reference(one_model, reference="vb").columns


# vb's k-hat on 30 points is far above 0.7: the table says so.
KHAT = "ignore::rvm_ppl.output.diagnostics.ApproximationWarning"


@pytest.mark.filterwarnings(KHAT)
def test_summary_table_counts_the_verdicts(one_model):
    table = summary_table(one_model, reference="vb")
    rel = one_model["vb"].idata_.relevance["verdict"].values
    for v in ("data-driven", "prior-driven", "conflict", "undetermined"):
        assert table.loc["vb", f"n_{v.replace('-', '_')}"] == (rel == v).sum()
        assert np.isnan(table.loc["evidence", f"n_{v.replace('-', '_')}"])
    assert table.loc["vb", ["n_data_driven", "n_prior_driven", "n_conflict",
                            "n_undetermined"]].sum() == one_model["vb"].idata_.relevance[
        "in_model"].values.sum()
    assert "hyperprior" not in table.columns


@pytest.fixture(scope="module")
def two_models(sinc, vb):
    X, y = sinc
    flat = RVR(gamma=1 / 9, random_state=0, draws=250).fit(X, y)  # type-II ML
    return {"evidence": flat, "vb": vb}


@pytest.mark.filterwarnings(KHAT)
def test_a_flat_evidence_fit_is_another_model(two_models):
    with pytest.warns(ModelMismatchWarning, match=r"hyperprior \(evidence: flat in log α") as rec:
        table = alpha_table(two_models)
    assert rec[0].filename == __file__  # the warning points at the comparison's caller
    names = {c[0] for c in table.columns} - {"all"}
    assert names == {"evidence [flat in log α, flat in log β]",
                     "vb [α ~ Gamma(2, 0.5), β ~ Gamma(2, 0.02)]"}
    fig, ax = plt.subplots()
    with pytest.warns(ModelMismatchWarning, match="hyperprior"):
        plot_alpha(two_models, ax=ax)
    assert "evidence [flat in log α, flat in log β] (point estimate)" in [
        t.get_text() for t in ax.get_legend().get_texts()]
    plt.close(fig)
    with pytest.warns(ModelMismatchWarning, match="hyperprior"):
        dist = compare_to_reference(two_models, reference="vb")
    assert set(dist["hyperprior"]) == {"flat in log α, flat in log β"}
    with pytest.warns(ModelMismatchWarning, match="hyperprior") as record:
        table = summary_table(two_models, reference="vb")
    mismatch = [w for w in record if w.category is ModelMismatchWarning]
    assert len(mismatch) == 1 and mismatch[0].filename == __file__  # once, at the caller
    assert table.loc["vb", "hyperprior"] == "α ~ Gamma(2, 0.5), β ~ Gamma(2, 0.02)"
    with pytest.warns(ModelMismatchWarning, match="hyperprior"):
        loo = loo_table(two_models)
    assert loo.loc["evidence", "hyperprior"] == "flat in log α, flat in log β"


@pytest.mark.filterwarnings(KHAT)
def test_fits_of_other_data_are_refused(sinc, vb):
    X, y = sinc
    other = RVR(gamma=1 / 9, method="vb", random_state=0, draws=250, **PRIORS).fit(X, y + 0.01)
    fits = {"vb": vb, "other": other}
    fig, ax = plt.subplots()
    for compare in (alpha_table, lambda f: plot_alpha(f, ax=ax), loo_table,
                    lambda f: compare_to_reference(f, reference="vb"),
                    lambda f: summary_table(f, reference="vb")):
        with pytest.raises(ValueError, match="fitted to other data"):
            compare(fits)
    plt.close(fig)


def test_another_kernel_is_another_model(sinc, vb):
    X, y = sinc
    wide = RVR(gamma=1 / 4, method="vb", random_state=0, draws=250, **PRIORS).fit(X, y)
    with pytest.warns(ModelMismatchWarning, match="kernel") as record:
        table = alpha_table({"vb": vb, "wide": wide})
    assert "kernel (vb: RBF" in str(record[0].message)
    assert "hyperprior (vb:" not in str(record[0].message)
    assert {c[0] for c in table.columns} == {"vb", "wide", "all"}  # same hyperprior: no label


def test_a_fixed_noise_is_another_hyperprior(sinc):
    X, y = sinc
    fitted = RVR(gamma=1 / 9, draws=100, random_state=0).fit(X, y)
    fixed = RVR(gamma=1 / 9, draws=100, random_state=0, noise_std=1.0, fit_noise=False).fit(X, y)
    assert hyperprior_label(fixed) == "flat in log α, β fixed at 1"
    with pytest.warns(ModelMismatchWarning, match="β fixed at 1"):
        loo = loo_table({"fitted": fitted, "fixed": fixed})
    assert loo.loc["fixed", "hyperprior"] == "flat in log α, β fixed at 1"


def test_classifier_evidence_and_vb_are_two_models():
    # The classifier's evidence method takes no hyperprior (type-II ML), its vb
    # Gamma(1e-6, 1e-6): two models, whatever the data.
    X, y = make_ripley(60, random_state=0)
    fits = {m: RVC(gamma=4, draws=50, random_state=0).fit(X, y, method=m)
            for m in ("evidence", "vb")}
    with pytest.warns(ModelMismatchWarning, match="flat in log α"):
        table = alpha_table(fits)
    assert "vb [α ~ Gamma(1e-06, 1e-06)]" in {c[0] for c in table.columns}


@pytest.mark.slow
def test_a_fit_of_the_pymc_model_compares_with_the_estimators(sinc, vb):
    # build_model's hyperprior is given in the units of y; the estimator's for unit-sd
    # targets: the same model once scaled, so the comparison neither warns nor labels.
    import rvm_ppl
    from rvm_ppl.kernels.kernel import RBF, basis_labels, design_matrix
    from rvm_ppl.model.build import scale_priors

    X, y = sinc
    Phi, labels = design_matrix(X, X, RBF(gamma=1 / 9)), basis_labels(len(X))
    priors = scale_priors({"a": 2.0, "b": 0.5, "c": 2.0, "d": 0.02}, np.std(y))
    model = rvm_ppl.build_model(Phi, y, basis=labels, priors=priors)
    idata = rvm_ppl.fit_advi(model, random_seed=0, window=250)
    assert idata.attrs["basis_hash_of"] == "design" and idata.attrs["target_scale"] == 1.0
    table = alpha_table({"vb": vb, "pymc": idata})  # filterwarnings = error: no warning
    assert {c[0] for c in table.columns} == {"vb", "pymc", "all"}
    other = rvm_ppl.fit_advi(rvm_ppl.build_model(Phi, y, basis=labels), random_seed=0,
                             window=250)
    with pytest.warns(ModelMismatchWarning, match="hyperprior"):
        table = alpha_table({"vb": vb, "pymc": other})
    names = {c[0] for c in table.columns}
    assert "pymc [α ~ Gamma(1e-06, 1e-06), β ~ Gamma(1e-06, 1e-06)]" in names
