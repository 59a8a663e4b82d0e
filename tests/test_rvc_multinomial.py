"""RVC(multi_class="multinomial"): Tipping's softmax RVM (2001, eq. 28) behind the estimator.

Oracles: the true class probabilities of make_three_class (calibration), the
one-vs-rest fit of the same data, the categorical log-likelihood written in
numpy (idata), and the fit itself before and after a netCDF round trip.
"""

import logging

import arviz as az
import numpy as np
import pytest
from scipy.special import log_softmax

from rvm_ppl import RVC, ModelMismatchWarning, build_model
from rvm_ppl.datasets.loaders import load_ripley, make_three_class, three_class_proba
from rvm_ppl.model.build import model_spec
from rvm_ppl.output.tables import alpha_table

logging.getLogger("pymc").setLevel(logging.ERROR)
pytestmark = [
    pytest.mark.filterwarnings("ignore::rvm_ppl.pymc_fitters.nuts.SamplingWarning"),
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
]
LABELS = np.array(["setosa", "versicolor", "virginica"])


@pytest.fixture(scope="module")
def three():
    X, y = make_three_class(200, random_state=0)
    Xt, yt = make_three_class(2000, random_state=99)
    return X, y, Xt, yt


@pytest.fixture(scope="module")
def fits(three):
    X, y, _, _ = three
    kw = dict(gamma=0.5, random_state=0, draws=100)
    return {
        "ovr": RVC(**kw).fit(X, LABELS[y]),
        "per-class": RVC(multi_class="multinomial", **kw).fit(X, LABELS[y]),
        "shared": RVC(multi_class="multinomial", shared_alpha=True, **kw).fit(X, LABELS[y]),
    }


def _log_loss(P, y):
    return float(-np.mean(np.log(P[np.arange(len(y)), y])))


def test_evidence_probabilities_are_calibrated_and_close_to_one_vs_rest(three, fits):
    _, _, Xt, yt = three
    ll_true = _log_loss(three_class_proba(Xt), yt)
    excess = {name: _log_loss(m.predict_proba(Xt), yt) - ll_true for name, m in fits.items()}
    # Measured (200 training points, seed 0): ovr 0.044, per-class 0.031, shared 0.047 nats.
    for name in ("per-class", "shared"):
        assert 0 < excess[name] < 0.06, excess
        assert abs(excess[name] - excess["ovr"]) < 0.03, excess


@pytest.mark.parametrize("name", ["per-class", "shared"])
def test_probabilities_predictions_and_string_labels(three, fits, name):
    _, _, Xt, yt = three
    m = fits[name]
    P = m.predict_proba(Xt)
    assert P.shape == (len(Xt), 3) and (P > 0).all()
    np.testing.assert_allclose(P.sum(axis=1), 1.0, atol=1e-12)
    assert list(m.classes_) == list(LABELS)
    np.testing.assert_array_equal(m.predict(Xt), LABELS[P.argmax(axis=1)])
    np.testing.assert_array_equal(m.decision_function(Xt).argmax(axis=1), P.argmax(axis=1))
    assert np.mean(m.predict(Xt) == LABELS[yt]) > 0.72  # Bayes rule: 0.79 on these points
    # A fixed seed: the same probabilities every call.
    np.testing.assert_array_equal(P, m.predict_proba(Xt))
    assert np.isscalar(m.log_evidence_) and np.isfinite(m.log_evidence_)


def test_shared_alpha_moves_a_basis_for_every_class_at_once(fits):
    shared, per_class = fits["shared"].alpha_, fits["per-class"].alpha_
    assert shared.shape == per_class.shape == (3, 201)
    np.testing.assert_array_equal(shared, shared[[0, 0, 0]])  # one alpha per basis
    # Per class, the classes use different bases.
    finite = np.isfinite(per_class)
    assert not (finite == finite[0]).all()
    m = fits["per-class"]
    n_weights = sum(len(a) for a in m.active_)
    assert m.joint_cov_.shape == (n_weights, n_weights)
    # sigma_ holds the joint covariance's diagonal blocks, class by class.
    np.testing.assert_array_equal(m.sigma_[0], m.joint_cov_[: len(m.active_[0]),
                                                            : len(m.active_[0])])
    assert fits["ovr"].joint_cov_ is None


def test_vb_is_one_vs_rest_only_and_a_failed_fit_changes_nothing(three, fits):
    X, y, Xt, _ = three
    m = RVC(gamma=0.5, multi_class="multinomial", random_state=0).fit(X, y)
    before = m.predict_proba(Xt)
    with pytest.raises(ValueError, match="vb' is one-vs-rest only.*multi_class='ovr'"):
        m.fit(X, y, method="vb")
    with pytest.raises(ValueError, match="a > 0 needs b > 0"):
        m.set_params(alpha_shape=1.0, alpha_rate=0.0).fit(X, y)
    np.testing.assert_array_equal(m.predict_proba(Xt), before)
    with pytest.raises(ValueError, match="multi_class"):
        RVC(multi_class="ovo").fit(X, y)


def test_two_classes_fit_the_softmax_model():
    X, y, Xt, yt = load_ripley()
    m = RVC(gamma=4.0, multi_class="multinomial").fit(X[::2], y[::2])
    assert m.coef_.shape[0] == 2 and m.idata_.posterior.sizes["class"] == 2
    assert m.decision_function(Xt).shape == (len(Xt),)
    assert m.score(Xt, yt) > 0.85


def test_idata_groups_loglik_and_loo(three, fits):
    X, y, _, _ = three
    m = fits["per-class"]
    idata = m.idata_
    for group in ("posterior", "log_likelihood", "posterior_predictive", "observed_data",
                  "constant_data", "fit", "relevance"):
        assert group in idata.groups(), group
    post = idata.posterior
    assert post["w"].dims == ("chain", "draw", "class", "basis")
    assert list(post["class"].values) == list(LABELS)
    assert idata.relevance["alpha"].dims == ("class", "basis")
    np.testing.assert_array_equal(idata.relevance["alpha"].values, m.alpha_)
    np.testing.assert_array_equal(idata.observed_data["y"].values, y)
    assert idata.attrs["likelihood"] == "categorical"
    assert idata.attrs["multi_class"] == "multinomial"
    # log_likelihood: the categorical log p of each observation at each draw.
    W = post["w"].values[0, :5]  # (draw, class, basis)
    Phi = m._design(X, [int(b.split("_")[1]) + 1 if b != "bias" else 0
                        for b in post["basis"].values])
    ref = log_softmax(np.einsum("nm,dkm->dnk", Phi, W), axis=-1)[:, np.arange(len(y)), y]
    np.testing.assert_allclose(idata.log_likelihood["y"].values[0, :5], ref, rtol=1e-10)
    # A class that does not use a basis has w = 0 and alpha = inf there.
    unused = ~np.isfinite(post["alpha"].values[0, 0])
    assert unused.any() and (post["w"].values[:, :, unused] == 0).all()


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.filterwarnings("ignore:The inplace keyword")
def test_loo_and_compare_with_one_vs_rest(fits):
    loo = az.loo(fits["per-class"].idata_)
    assert np.isfinite(loo.elpd_loo)
    table = az.compare({"ovr": fits["ovr"].idata_, "multinomial": fits["per-class"].idata_})
    assert set(table.index) == {"ovr", "multinomial"}
    assert np.isfinite(table["elpd_loo"]).all()


def test_netcdf_round_trip(tmp_path, three, fits):
    _, _, Xt, _ = three
    for name in ("per-class", "shared"):
        m = fits[name]
        m.to_netcdf(tmp_path / f"{name}.nc")
        m2 = RVC.from_netcdf(tmp_path / f"{name}.nc")
        np.testing.assert_array_equal(m.predict_proba(Xt), m2.predict_proba(Xt))
        assert list(m2.classes_) == list(LABELS) and m2.log_evidence_ == m.log_evidence_
        np.testing.assert_array_equal(m.idata_.posterior.w.values, m2.idata_.posterior.w.values)


def test_alpha_table_and_plot_alpha_take_one_class(fits):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from rvm_ppl.plotting import plot_alpha

    idatas = {"ovr": fits["ovr"].idata_, "multinomial": fits["per-class"].idata_}
    with pytest.warns(ModelMismatchWarning, match="likelihood"):  # Bernoulli and softmax
        table = alpha_table(idatas, class_="versicolor")
    rel = fits["per-class"].idata_.relevance["relevant"].sel({"class": "versicolor"}).values
    labels = fits["per-class"].idata_.relevance["basis"].values
    assert set(labels[rel]) <= set(table.index)
    med = table[("multinomial", "median log10 α")]
    alpha = fits["per-class"].alpha_[1]
    np.testing.assert_allclose(med.values, np.log10(alpha[[list(labels).index(b)
                                                            for b in table.index]]))
    fig, ax = plt.subplots()
    with pytest.warns(ModelMismatchWarning, match="likelihood"):
        plot_alpha(idatas, class_="versicolor", ax=ax)
    assert [t.get_text() for t in ax.get_yticklabels()] == list(table.index)
    plt.close(fig)
    with pytest.raises(ValueError, match="class_="):
        alpha_table(idatas)
    with pytest.raises(ValueError, match="not a class"):
        alpha_table(idatas, class_="rose")


def test_build_model_categorical():
    rng = np.random.default_rng(0)
    Phi = np.column_stack([np.ones(20), rng.normal(size=(20, 3))])
    y = rng.integers(0, 3, 20)
    model = build_model(Phi, y, likelihood="categorical", shared_alpha=True,
                        classes=["a", "b", "c"], basis=["bias", "x0", "x1", "x2"])
    spec = model_spec(model)
    assert (spec.likelihood, spec.shared_alpha) == ("categorical", True)
    assert list(model.coords["class"]) == ["a", "b", "c"]
    assert list(model.coords["basis"]) == ["bias", "x0", "x1", "x2"]
    import pymc as pm

    with pm.Model(coords={"class": ["a", "b", "c"], "basis": list("pqrs")}) as hand:
        Phi_d = pm.Data("Phi", Phi)
        pm.Data("y_obs", y)
        alpha = pm.Gamma("alpha", 3.0, 2.0, dims=("class", "basis"))
        w = pm.Normal("w", 0.0, alpha**-0.5, dims=("class", "basis"))
        pm.Categorical("y", logit_p=Phi_d @ w.T, observed=y)
    assert model_spec(hand).likelihood == "categorical"  # read from the model itself
    for bad, match in [(y - 1, "class codes"), (y + 0.5, "class codes"),
                       (np.zeros(20), "at least 2 classes")]:
        with pytest.raises(ValueError, match=match):
            build_model(Phi, bad, likelihood="categorical")
    with pytest.raises(ValueError, match="marginal form only"):
        build_model(Phi, y, likelihood="categorical", parameterization="centered")
    with pytest.raises(ValueError, match="belong to the 'categorical'"):
        build_model(Phi, y.astype(float), shared_alpha=True)
    with pytest.raises(ValueError, match="Unknown likelihood"):
        build_model(Phi, y, likelihood="multinomial")


@pytest.fixture(scope="module")
def small():
    X, y = make_three_class(60, random_state=0)
    Xt, yt = make_three_class(1000, random_state=1)
    return X, LABELS[y], Xt, LABELS[yt]


@pytest.mark.slow
def test_advi(small):
    X, y, Xt, yt = small
    m = RVC(gamma=0.5, multi_class="multinomial", method="advi", draws=200, random_state=0,
            progressbar=False).fit(X, y)
    P = m.predict_proba(Xt)
    np.testing.assert_allclose(P.sum(axis=1), 1.0, atol=1e-12)
    assert np.mean(m.predict(Xt) == yt) > 0.7  # measured 0.775
    assert m.idata_.posterior["alpha"].dims == ("chain", "draw", "class", "basis")
    assert "elbo" in m.idata_.fit


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:Estimated shape parameter of Pareto:UserWarning")
def test_nuts_defaults_no_divergences(small):
    from rvm_ppl import fit_nuts

    X, y, Xt, yt = small
    # Package defaults for tuning and target_accept; fewer chains and draws.
    m = RVC(gamma=0.5, multi_class="multinomial", method="nuts", chains=2, draws=300,
            random_state=0, progressbar=False).fit(X, y)
    attrs = m.idata_.attrs
    assert attrs["n_divergences"] == 0
    P = m.predict_proba(Xt)
    np.testing.assert_allclose(P.sum(axis=1), 1.0, atol=1e-12)
    assert np.mean(m.predict(Xt) == yt) > 0.7  # measured 0.798
    assert np.isfinite(az.loo(m.idata_).elpd_loo)
    # The public door: fit_nuts on the declared model gives the same layout. Declared with the
    # estimator's labels (plain str, as the estimator passes them), it is the model the
    # estimator sampled, whose compiled form the fit reuses instead of compiling it again.
    codes = np.unique(y, return_inverse=True)[1]
    model = build_model(m._design(X, np.arange(61)), codes, likelihood="categorical",
                        classes=LABELS.tolist(), basis=m.idata_.posterior["basis"].values.tolist())
    idata = fit_nuts(model, draws=50, tune=100, chains=2, random_seed=0)
    assert idata.posterior["w"].dims == ("chain", "draw", "class", "basis")
    assert idata.relevance["relevant"].dims == ("class", "basis")
