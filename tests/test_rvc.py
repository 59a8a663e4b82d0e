"""RVC: published accuracy, probabilities, several classes, bad labels."""

import numpy as np
import pytest
from scipy.special import expit

from rvm_ppl import RVC
from rvm_ppl.datasets.loaders import load_ripley


@pytest.mark.parametrize("method", ["evidence", "vb"])
def test_ripley_accuracy_and_sparsity(method):
    """Tipping (2001) §4.2 / Bishop & Tipping (2000): 100 of Ripley's points, r = 0.5."""
    X, y, Xt, yt = load_ripley()
    rng = np.random.default_rng(0)
    errors, nrv = [], []
    for _ in range(10):
        idx = rng.choice(len(y), 100, replace=False)
        clf = RVC(gamma=4.0).fit(X[idx], y[idx], method=method)
        errors.append(1 - clf.score(Xt, yt))
        nrv.append(len(clf.relevance_))
    # Paper: 9.3 % with 4 vectors on one subset. Measured here (and by
    # benchmarks/bench_classification.py): evidence 9.67 %, vb 10.16 %; over
    # 1000 subsets both average 9.71 % (s.e. 0.03 %), SparseBayes's C++ port 9.69 %,
    # and a 10-subset mean varies with sd 0.34 %, so it is bounded at 10.5 %.
    assert np.mean(errors) <= 0.105
    assert np.mean(nrv) <= 6


@pytest.mark.slow
def test_nuts_samples_a_ripley_subset_with_package_defaults():
    # The marginal classifier under the default hyperprior a = 3, b = 2
    # (benchmarks/bench_classification.py --part nuts runs 10 subsets of 100).
    X, y, Xt, yt = load_ripley()
    idx = np.random.default_rng(0).choice(len(y), 50, replace=False)
    clf = RVC(gamma=4.0, random_state=0).fit(X[idx], y[idx], method="nuts")
    attrs = clf.idata_.attrs
    assert attrs["parameterization"] == "marginal"
    assert attrs["n_divergences"] == 0
    assert attrs["max_rhat_log_alpha"] <= 1.01 and attrs["min_ess_bulk_log_alpha"] >= 400
    # the posterior-predictive classifier is as good as the type-II one
    evidence = RVC(gamma=4.0).fit(X[idx], y[idx])
    assert 1 - clf.score(Xt, yt) <= 1 - evidence.score(Xt, yt) + 0.01


def test_probabilities_are_calibrated_on_data_with_known_probabilities():
    rng = np.random.default_rng(1)

    def p_true(x):
        return expit(2.5 * np.sin(x[:, 0]))

    X = rng.uniform(-4, 4, (400, 1))
    y = rng.random(400) < p_true(X)
    clf = RVC(gamma=0.5).fit(X, y)
    Xt = rng.uniform(-4, 4, (4000, 1))
    P = clf.predict_proba(Xt)
    assert list(clf.classes_) == [False, True]
    assert np.all((P >= 0) & (P <= 1)) and np.allclose(P.sum(1), 1)
    assert np.mean(np.abs(P[:, 1] - p_true(Xt))) < 0.05
    # Reliability: within bins of predicted probability, the true probability agrees.
    bins = np.digitize(P[:, 1], [0.2, 0.4, 0.6, 0.8])
    for b in range(5):
        sel = bins == b
        if sel.sum() > 200:
            assert abs(p_true(Xt[sel]).mean() - P[sel, 1].mean()) < 0.08


def test_decision_function_ranks_like_predict_proba():
    X, y, Xt, _ = load_ripley()
    clf = RVC(gamma=4.0).fit(X[::3], y[::3])
    d = clf.decision_function(Xt[:200])
    p = clf.predict_proba(Xt[:200])[:, 1]
    np.testing.assert_array_equal(np.argsort(d), np.argsort(p))
    np.testing.assert_array_equal(clf.predict(Xt[:200]), clf.classes_[(d > 0).astype(int)])


# nuts makes a deliberately short run, whose r-hat and ESS warn.
SHORT_RUN = pytest.mark.filterwarnings("ignore::rvm_ppl.pymc_fitters.nuts.SamplingWarning")


@pytest.mark.parametrize("method", ["evidence", "vb",
                                    pytest.param("advi", marks=pytest.mark.slow),
                                    pytest.param("nuts", marks=[pytest.mark.slow, SHORT_RUN])])
def test_three_classes_one_vs_rest(method):
    """One-vs-rest with normalised probabilities; advi at package defaults, nuts with
    2 x (200 + 200) draws per class (its defaults are tested on Ripley's data)."""
    rng = np.random.default_rng(2)
    centres = np.array([[0.0, 0.0], [3.0, 0.0], [0.0, 3.0]])
    labels = np.array(["a", "b", "c"])
    k = rng.integers(0, 3, 300)
    X = centres[k] + rng.normal(scale=0.8, size=(300, 2))
    short = {"draws": 200, "tune": 200, "chains": 2} if method == "nuts" else {}
    clf = RVC(gamma=0.5, random_state=0, **short).fit(X[:150], labels[k[:150]], method=method)
    P = clf.predict_proba(X[150:])
    assert list(clf.classes_) == ["a", "b", "c"]
    np.testing.assert_array_equal(clf.predict(X[150:]), clf.classes_[P.argmax(axis=1)])
    assert clf.score(X[150:], labels[k[150:]]) > 0.85
    assert clf.decision_function(X[150:]).shape == (150, 3)
    idata = clf.idata_
    post = idata.posterior
    assert post["w"].dims == ("chain", "draw", "class", "basis")
    assert list(post["class"].values) == ["a", "b", "c"]
    # The true labels (codes into classes_), not the first model's indicator.
    np.testing.assert_array_equal(clf.classes_[idata.observed_data["y"].values], labels[k[:150]])
    assert idata.relevance["relevant"].dims == ("class", "basis")
    assert idata.fit["mean"].dims == ("class", "basis")
    # Pointwise log P(y_n | x_n) of the combined classifier, draw by draw: its
    # mean over draws is close to the log of the averaged probabilities.
    loglik = idata.log_likelihood["y"].values
    P_train = clf.predict_proba(X[:150])[np.arange(150), k[:150]]
    assert np.corrcoef(np.exp(loglik).mean(axis=(0, 1)), P_train)[0, 1] > 0.95
    # Fitted attributes have one type whatever the number of classes.
    binary = RVC(gamma=0.5).fit(X[:150], labels[k[:150]] == "a", method="evidence")
    for attr in ("coef_", "alpha_", "n_iter_"):
        assert getattr(clf, attr).ndim == getattr(binary, attr).ndim, attr
    assert type(clf.active_) is type(binary.active_) is list


def test_bad_labels_and_inputs():
    X, y, _, _ = load_ripley()
    with pytest.raises(ValueError, match="at least 2 classes"):
        RVC().fit(X[:20], np.zeros(20))
    with pytest.raises(ValueError, match="Unknown label type"):
        RVC().fit(X[:20], np.linspace(0, 1, 20))
    Xn = X[:20].copy()
    Xn[3, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        RVC().fit(Xn, y[:20])


def test_binary_only_path_rejects_other_labels():
    from rvm_ppl.closed_form.bernoulli import fit_evidence_bernoulli

    with pytest.raises(ValueError, match="must be 0 or 1"):
        fit_evidence_bernoulli(np.ones((4, 2)), np.array([0.0, 1.0, 2.0, 1.0]))


@pytest.mark.parametrize("y, logit", [(0, 50.0), (1, -50.0), (0, -50.0), (1, 50.0), (0, 800.0)])
def test_bernoulli_model_gradient_is_finite_at_large_logits(y, logit):
    """d/dw [log N(w | 0, 1/alpha) + log Bernoulli(y | sigma(phi w))] = -alpha w + phi (y - sigma(phi w))."""
    from rvm_ppl.model.build import build_model

    phi, alpha = 50.0, 2.0
    model = build_model(np.array([[phi]]), np.array([y]), likelihood="bernoulli",
                        parameterization="centered", alpha=alpha)
    w = logit / phi
    grad = model.compile_dlogp()({"w": np.array([w])})
    assert np.allclose(grad, -alpha * w + phi * (y - expit(logit)), rtol=1e-12, atol=1e-12)
    logp = model.compile_logp()({"w": np.array([w])})
    expected = (0.5 * np.log(alpha / (2 * np.pi)) - 0.5 * alpha * w**2
                + y * logit - np.logaddexp(0.0, logit))
    assert np.isclose(logp, expected, rtol=1e-12)
