"""Forward sampling of the prior: the parameterisations of build_model against each other.

Each comparison is a two-sample Kolmogorov-Smirnov test (``scipy.stats.ks_2samp``) on
summaries of every prior-predictive draw (its mean, its sd, its correlation with the
observed targets, one fixed entry), 2000 draws per form, fixed seeds, at a family-wise
level of 1 % with a Bonferroni correction over the summaries. Summaries that compare
draws with the observed targets are the ones a prior predictive that has seen the data
fails.
"""

import warnings

import numpy as np
import pymc as pm
import pytest
from scipy import stats

from rvm_ppl.datasets.loaders import make_sinc
from rvm_ppl.kernels.kernel import RBF, design_matrix
from rvm_ppl.model.build import PriorUnderflowWarning, build_model

DRAWS = 2000
FAMILY_LEVEL = 0.01
PROPER = {"a": 2.0, "b": 2.0, "c": 2.0, "d": 0.02}


@pytest.fixture(scope="module")
def sinc():
    X, y = make_sinc(30, random_state=0)
    return design_matrix(X, X, RBF(gamma=1 / 9)), y


def _summaries(draws, y):
    """Mean, sd, correlation with ``y`` and the first entry of every draw (rows)."""
    d = np.asarray(draws, dtype=float).reshape(-1, draws.shape[-1])
    dc = d - d.mean(axis=1, keepdims=True)
    yc = y - y.mean()
    with np.errstate(invalid="ignore"):  # a constant draw (all labels equal) has no correlation
        corr = (dc @ yc) / np.sqrt((dc**2).sum(axis=1) * (yc**2).sum())
    return {"mean": d.mean(axis=1), "sd": d.std(axis=1), "corr": np.nan_to_num(corr),
            "entry": d[:, 0]}


def _prior_predictive(model, seed):
    with model:
        pp = pm.sample_prior_predictive(DRAWS, random_seed=seed, var_names=["y"])
    return pp.prior_predictive["y"].values


def _ks_pvalues(a, b, y):
    sa, sb = _summaries(a, y), _summaries(b, y)
    return {k: stats.ks_2samp(sa[k], sb[k]).pvalue for k in sa}


def test_marginal_regression_prior_predictive_is_the_centred_one(sinc):
    """The marginal and centred regressions' prior predictives, a = b = c = 2, d = 0.02.

    The marginal form observes ``t`` through its marginal likelihood, but its
    ``w`` is drawn forward from its prior ``N(0, 1/alpha)``, as the centred
    form's is; before it was, ``w`` was a function of the training targets and
    these p-values were 3e-188 (mean of a draw), 0 (its sd), 0 (its correlation
    with y) and 3e-173 (first entry).
    """
    Phi, y = sinc
    marginal = _prior_predictive(build_model(Phi, y, priors=PROPER), 1)
    centred = _prior_predictive(build_model(Phi, y, priors=PROPER, parameterization="centered"), 2)
    p = _ks_pvalues(marginal, centred, y)
    assert min(p.values()) > FAMILY_LEVEL / len(p), p


def test_noncentred_regression_prior_predictive_is_the_centred_one(sinc):
    Phi, y = sinc
    noncentred = _prior_predictive(
        build_model(Phi, y, priors=PROPER, parameterization="noncentered"), 3)
    centred = _prior_predictive(build_model(Phi, y, priors=PROPER, parameterization="centered"), 2)
    p = _ks_pvalues(noncentred, centred, y)
    assert min(p.values()) > FAMILY_LEVEL / len(p), p


def test_marginal_classifier_prior_predictive_is_the_centred_one(sinc):
    # alpha integrated out (Tipping 2001, eq. 32): w has its Student-t prior, drawn as such.
    Phi, y = sinc
    labels = (y > np.median(y)).astype(float)
    priors = {"a": 3.0, "b": 2.0}
    marginal = _prior_predictive(build_model(Phi, labels, likelihood="bernoulli", priors=priors), 4)
    centred = _prior_predictive(build_model(Phi, labels, likelihood="bernoulli", priors=priors,
                                            parameterization="centered"), 5)
    p = _ks_pvalues(marginal, centred, labels)
    assert min(p.values()) > FAMILY_LEVEL / len(p), p


def test_categorical_prior_predictive_is_the_hierarchical_one(sinc):
    # The softmax RVM has no centred form: draw the hierarchy (eqs. 5-6, 28) with numpy.
    Phi, y = sinc
    codes = np.digitize(y, np.quantile(y, [1 / 3, 2 / 3]))
    a, b = 3.0, 2.0
    marginal = _prior_predictive(build_model(Phi, codes, likelihood="categorical",
                                             priors={"a": a, "b": b}), 6)
    rng = np.random.default_rng(7)
    K, M = 3, Phi.shape[1]
    alpha = rng.gamma(a, 1 / b, size=(DRAWS, K, M))
    W = rng.standard_normal((DRAWS, K, M)) / np.sqrt(alpha)
    logits = np.einsum("nm,dkm->dnk", Phi, W)
    P = np.exp(logits - logits.max(axis=-1, keepdims=True))
    P /= P.sum(axis=-1, keepdims=True)
    direct = (rng.random(P.shape[:-1])[..., None] > np.cumsum(P, axis=-1)).sum(axis=-1)
    p = _ks_pvalues(marginal, direct, codes.astype(float))
    assert min(p.values()) > FAMILY_LEVEL / len(p), p


def test_vague_hyperprior_warns_that_its_draws_underflow(sinc):
    Phi, y = sinc
    with pytest.warns(PriorUnderflowWarning, match=r"Gamma\(1e-06, 1e-06\) draws of alpha"):
        draws = _prior_predictive(build_model(Phi, y), 8)
    assert not np.isfinite(draws).any()


def test_proper_hyperprior_does_not_warn(sinc):
    Phi, y = sinc
    with warnings.catch_warnings():
        warnings.simplefilter("error", PriorUnderflowWarning)
        draws = _prior_predictive(build_model(Phi, y, priors=PROPER), 9)
    assert np.isfinite(draws).all()
