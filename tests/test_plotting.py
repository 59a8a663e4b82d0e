"""Plots draw what they claim: bands, points, HDI bars and pruned markers."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from rvm_ppl import RVR  # noqa: E402
from rvm_ppl.compare import alpha_table  # noqa: E402
from rvm_ppl.datasets import make_sinc  # noqa: E402
from rvm_ppl.plotting import plot_alpha, plot_predictive  # noqa: E402


@pytest.fixture(scope="module")
def fits():
    X, y = make_sinc(40, random_state=0)
    return X, y, {m: RVR(gamma=1 / 9, draws=200, random_state=0).fit(X, y, method=m) for m in ("evidence", "vb")}


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
