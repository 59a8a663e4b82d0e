"""Plots draw what they claim: bands, points, HDI bars and pruned markers."""

import matplotlib

matplotlib.use("Agg")

import arviz as az  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402
from scipy import stats  # noqa: E402

from rvm_ppl import RVC, RVR, ModelMismatchWarning  # noqa: E402
from rvm_ppl.datasets.loaders import load_ripley, make_sinc  # noqa: E402
from rvm_ppl.output.tables import alpha_summary, alpha_table  # noqa: E402
from rvm_ppl.plotting import plot_alpha, plot_decision, plot_predictive  # noqa: E402


# One model for both methods (a comparison of two models warns): the evidence method under
# vb's default hyperprior, type-II MAP.
ONE_MODEL = {"alpha_shape": 1e-6, "alpha_rate": 1e-6, "beta_shape": 1e-6, "beta_rate": 1e-6}


@pytest.fixture(scope="module")
def fits():
    X, y = make_sinc(40, random_state=0)
    return X, y, {m: RVR(gamma=1 / 9, draws=200, random_state=0, **ONE_MODEL).fit(X, y, method=m)
                  for m in ("evidence", "vb")}


def test_plot_predictive_band_is_two_sd(fits):
    X, y, models = fits
    m = models["evidence"]
    xt = np.linspace(-10, 10, 50)
    mean, std = m.predict(xt[:, None], return_std=True)
    fig, ax = plt.subplots()
    out = plot_predictive(xt, mean, std, X=X, y=y, relevance=m.relevance_, ax=ax)
    assert out is ax
    band = ax.collections[0].get_paths()[0].vertices
    assert band[:, 1].max() == pytest.approx((mean + 2 * std).max())
    assert band[:, 1].min() == pytest.approx((mean - 2 * std).min())
    circled = ax.collections[-1].get_offsets()
    np.testing.assert_allclose(circled[:, 0], X[m.relevance_, 0])
    plt.close(fig)


def test_plot_alpha_points_bars_and_pruned(fits):
    _, _, models = fits
    ids = {k: v.idata_ for k, v in models.items()}
    labels = ["bias", "x_3"] + [f"x_{i}" for i in models["evidence"].relevance_[:2]]
    fig, ax = plt.subplots()
    out = plot_alpha(ids, basis=labels, ax=ax)
    assert out is ax
    assert [t.get_text() for t in ax.get_yticklabels()] == labels
    # vb draws an HDI bar per basis; the evidence fit draws none (a point estimate).
    bars = [c for c in ax.collections if isinstance(c, matplotlib.collections.LineCollection)]
    assert len(bars) == 1 and len(bars[0].get_segments()) == len(labels)
    # Pruned evidence bases are open triangles at the right edge.
    pruned = np.isinf(models["evidence"].alpha_[[0, 4]]).sum()
    right = max(c.get_offsets()[:, 0].max() for c in ax.collections if len(c.get_offsets()))
    at_edge = sum(int(np.sum(c.get_offsets()[:, 0] == right)) for c in ax.collections if len(c.get_offsets()))
    assert at_edge == pruned
    plt.close(fig)


def test_alpha_table_agreement(fits):
    _, _, models = fits
    table = alpha_table({k: v.idata_ for k, v in models.items()})
    ev = models["evidence"]
    assert set(table.index) >= {f"x_{i}" for i in ev.relevance_}
    row = table.loc[f"x_{ev.relevance_[0]}"]
    assert row[("evidence", "hdi low")] == row[("evidence", "hdi high")]
    assert row[("vb", "hdi low")] < row[("vb", "median log10 α")] < row[("vb", "hdi high")]
    both = table[("evidence", "relevant")] & table[("vb", "relevant")]
    assert (table.loc[both, ("all", "agree")]).all()


def _drawn(ax):
    """What an Axes shows: each collection's points, segments and colours, lines, labels, texts."""
    shown = [(type(c).__name__, np.asarray(c.get_offsets()).tolist(), c.get_facecolor().tolist(),
              c.get_edgecolor().tolist(),
              [seg.tolist() for seg in c.get_segments()]
              if isinstance(c, matplotlib.collections.LineCollection) else None)
             for c in ax.collections]
    return {
        "collections": shown,
        "lines": [line.get_xydata().tolist() for line in ax.lines],
        "yticks": [(t.get_position(), t.get_text()) for t in ax.get_yticklabels()],
        "legend": [t.get_text() for t in ax.get_legend().get_texts()],
        "texts": [(t.get_position(), t.get_text()) for t in ax.texts],
        "xlabel": ax.get_xlabel(),
    }


@pytest.mark.parametrize("form", ["dict", "list", "one"])
def test_plot_alpha_of_estimators_is_the_plot_of_their_idata(fits, form):
    _, _, models = fits
    if form == "dict":
        estimators, idatas = models, {k: v.idata_ for k, v in models.items()}
    elif form == "list":
        estimators, idatas = list(models.values()), [v.idata_ for v in models.values()]
    else:
        estimators, idatas = models["vb"], models["vb"].idata_
    drawn = []
    for arg in (estimators, idatas):
        fig, ax = plt.subplots()
        assert plot_alpha(arg, basis="all", ax=ax) is ax
        drawn.append(_drawn(ax))
        plt.close(fig)
    np.testing.assert_equal(drawn[0], drawn[1])
    # The plot is not empty: one row per basis, points of every fit.
    assert len(drawn[0]["yticks"]) == len(models["vb"].alpha_)
    # The default hyperprior's bands lie thousands of decades below the plot: no band and
    # no legend entry for them (a legend entry for an invisible band misleads).
    assert drawn[0]["legend"] == (["vb (median, 94% HDI)"] if form == "one" else
                                  ["evidence (point estimate)", "vb (median, 94% HDI)"])


def test_alpha_tables_of_estimators_are_those_of_their_idata(fits, ripley_fit):
    _, _, models = fits
    idatas = {k: v.idata_ for k, v in models.items()}
    alpha = idatas["vb"].posterior.alpha
    b = str(alpha.basis.values[-1])  # a basis in vb's model
    table = alpha_table(models, basis=["bias", b])
    pd.testing.assert_frame_equal(table, alpha_table(idatas, basis=["bias", b]))
    pd.testing.assert_frame_equal(alpha_table(list(models.values())),
                                  alpha_table(list(idatas.values())))
    assert table.loc[b, ("vb", "median log10 α")] == pytest.approx(
        np.median(np.log10(alpha.sel(basis=b).values)))
    for got, want in zip(alpha_summary(models["vb"], 0.9), alpha_summary(idatas["vb"], 0.9),
                         strict=True):
        np.testing.assert_array_equal(got, want)
    # A fit of three classes, one class at a time.
    X, y, _ = ripley_fit
    three = RVC(gamma=4.0).fit(X, np.where(X[:, 0] > 0, 2, y))
    pd.testing.assert_frame_equal(alpha_table(three, class_=2),
                                  alpha_table(three.idata_, class_=2))


@pytest.mark.parametrize(("fit", "kind"), [
    (RVR(), r"is not fitted \(RVR\); expected a fitted rvm_ppl estimator"),
    (np.zeros(3), "is of type ndarray; expected a fitted rvm_ppl estimator"),
    ("vb", "is of type str; expected a fitted rvm_ppl estimator"),
    (az.from_dict(posterior={"a": np.zeros((1, 5))}),
     "is of type InferenceData; expected a fitted rvm_ppl estimator"),
])
def test_plots_and_tables_refuse_what_is_not_a_fit(fits, fit, kind):
    vb = fits[2]["vb"]
    with pytest.raises(TypeError, match=f"Fit 1 {kind}"):
        plot_alpha([vb, fit])
    with pytest.raises(TypeError, match=f"Fit 'other' {kind}"):
        alpha_table({"vb": vb, "other": fit})
    with pytest.raises(TypeError, match=f"The fit {kind}"):
        alpha_summary(fit, 0.94)


@pytest.fixture(scope="module")
def ripley_fit():
    X, y, _, _ = load_ripley()
    idx = np.random.default_rng(0).choice(len(y), 60, replace=False)
    X, y = X[idx], y[idx]
    return X, y, RVC(gamma=4.0).fit(X, y, method="evidence")


def test_plot_decision_boundary_is_where_p_is_half(ripley_fit):
    X, y, clf = ripley_fit
    fig, ax = plt.subplots()
    out = plot_decision(clf, X, y, relevance=clf.relevance_, ax=ax)
    assert out is ax
    cs = next(c for c in ax.collections if isinstance(c, matplotlib.contour.ContourSet))
    np.testing.assert_allclose(cs.levels, [0.25, 0.5, 0.75])
    for level, path, style in zip(cs.levels, cs.get_paths(), cs.get_linestyles()):
        vertices = path.vertices
        assert len(vertices) > 10
        p = clf.predict_proba(vertices)[:, 1]
        assert np.abs(p - level).max() < 0.02
        # Only the decision boundary is dashed.
        assert (style[1] is not None) == (level == 0.5)
    # Each class is drawn in its own colour, and the circled points are X[relevance].
    classes = [c for c in ax.collections if c.get_label().startswith("class ")]
    assert [c.get_label() for c in classes] == ["class 0", "class 1"]
    for c, k in zip(classes, clf.classes_):
        np.testing.assert_allclose(c.get_offsets(), X[y == k])
    assert not np.allclose(classes[0].get_facecolor(), classes[1].get_facecolor())
    np.testing.assert_allclose(ax.collections[-1].get_offsets(), X[clf.relevance_])
    plt.close(fig)


def test_plot_decision_caller_kwargs_win_and_limits(ripley_fit):
    X, y, clf = ripley_fit
    fig, ax = plt.subplots()
    plot_decision(clf, levels=(0.5,), grid=30, xlim=(-1, 0), ylim=(0, 1), ax=ax,
                  contour_kwargs={"colors": "C4"})
    cs = ax.collections[0]
    np.testing.assert_allclose(cs.get_edgecolor()[0], matplotlib.colors.to_rgba("C4"))
    assert ax.get_xlim() == (-1, 0) and ax.get_ylim() == (0, 1)
    plt.close(fig)


def test_plot_decision_errors(ripley_fit):
    X, y, clf = ripley_fit
    with pytest.raises(ValueError, match="two columns"):
        plot_decision(clf, X[:, :1], y)
    with pytest.raises(ValueError, match="xlim and ylim"):
        plot_decision(clf, xlim=(0, 1))
    three = RVC(gamma=4.0).fit(X, np.where(X[:, 0] > 0, 2, y))
    with pytest.raises(ValueError, match="3 classes"):
        plot_decision(three, X, y)


def _sinc_priors():
    X, y = make_sinc(40, random_state=0)
    return X, 10.0 * y, {"alpha_shape": 2.0, "alpha_rate": 3.0, "beta_shape": 2.5, "beta_rate": 0.5}


def test_plot_alpha_shades_the_hyperprior_band():
    X, y, priors = _sinc_priors()
    idata = RVR(gamma=1 / 9, method="vb", random_state=0, draws=200, **priors).fit(X, y).idata_
    fig, ax = plt.subplots()
    plot_alpha(idata, ax=ax, hdi_prob=0.94)
    bands = [p for p in ax.patches if p.get_label() == "hyperprior"]
    assert len(bands) == 1
    x0, x1 = bands[0].get_x(), bands[0].get_x() + bands[0].get_width()
    log10 = idata.prior["log_alpha"].values.ravel() / np.log(10)
    np.testing.assert_allclose([x0, x1], np.quantile(log10, [0.03, 0.97]))
    # Independent check of the units: the Gamma(a, b var(y)) quantiles, within Monte Carlo error.
    exact = np.log10(stats.gamma(2.0, scale=1 / (3.0 * np.var(y))).ppf([0.03, 0.97]))
    np.testing.assert_allclose([x0, x1], exact, atol=0.1)
    assert "hyperprior" in [t.get_text() for t in ax.get_legend().get_texts()]
    plt.close(fig)


def test_plot_alpha_band_leaves_the_range_to_the_posteriors():
    X, y, _ = _sinc_priors()
    idata = RVR(gamma=1 / 9, method="vb", random_state=0, draws=200).fit(X, y).idata_
    fig, ax = plt.subplots()
    plot_alpha(idata, ax=ax)
    # The band lies thousands of decades below: it is left out, and the range stays the
    # posteriors'.
    assert not [p for p in ax.patches if p.get_label().startswith("hyperprior")]
    assert "hyperprior" not in [t.get_text() for t in ax.get_legend().get_texts()]
    assert ax.get_xlim()[0] > -20
    plt.close(fig)


def test_plot_alpha_draws_one_band_per_hyperprior():
    X, y, priors = _sinc_priors()
    one = {m: RVR(gamma=1 / 9, method=m, random_state=0, draws=200, **priors).fit(X, y).idata_
           for m in ("evidence", "vb")}
    fig, ax = plt.subplots()
    plot_alpha(one, ax=ax)
    assert [p.get_label() for p in ax.patches if p.get_label().startswith("hyperprior")] == ["hyperprior"]
    plt.close(fig)
    other = dict(priors, alpha_rate=0.3)
    two = {"vb": one["vb"],
           "vb, other": RVR(gamma=1 / 9, method="vb", random_state=0, draws=200, **other).fit(X, y).idata_}
    fig, ax = plt.subplots()
    with pytest.warns(ModelMismatchWarning, match="hyperprior"):
        plot_alpha(two, ax=ax)
    labels = sorted(p.get_label() for p in ax.patches if p.get_label().startswith("hyperprior"))
    assert len(labels) == 2  # one band each, labelled with the fit and its hyperprior
    assert labels[0].startswith("hyperprior (vb [") and labels[1].startswith("hyperprior (vb, other [")
    plt.close(fig)
