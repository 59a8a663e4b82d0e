"""The synthetic data generators against the shipped data and their own definitions."""

import numpy as np

from rvm_ppl.datasets.loaders import load_ripley, make_ripley, ripley_proba


def test_make_ripley_matches_the_shipped_data():
    X, y, Xt, yt = load_ripley()
    shipped_X, shipped_y = np.vstack([X, Xt]), np.concatenate([y, yt])
    G, g = make_ripley(200_000, random_state=0)
    for c in (0, 1):
        ours, theirs = G[g == c], shipped_X[shipped_y == c]
        # class means and variances within 4 standard errors of the 625 shipped points
        se_mean = theirs.std(axis=0) / np.sqrt(len(theirs))
        np.testing.assert_array_less(np.abs(ours.mean(axis=0) - theirs.mean(axis=0)), 4 * se_mean)
        se_var = theirs.var(axis=0) * np.sqrt(2 / len(theirs))
        np.testing.assert_array_less(np.abs(ours.var(axis=0) - theirs.var(axis=0)), 4 * se_var)


def test_ripley_proba_is_the_sampling_probability():
    X, y = make_ripley(200_000, random_state=1)
    p = ripley_proba(X)
    bins = np.digitize(p, np.linspace(0.1, 0.9, 9))
    for b in np.unique(bins):
        sel = bins == b
        se = np.sqrt(p[sel].mean() * (1 - p[sel].mean()) / sel.sum())
        assert abs(y[sel].mean() - p[sel].mean()) < 4 * se + 1e-3
