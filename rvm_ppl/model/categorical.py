"""The multinomial (softmax) RVM as a PyMC model, in the marginal form.

The declaration behind :func:`rvm_ppl.model.build.build_model` with
``likelihood="categorical"``. Tipping (2001), eq. (28): ``K`` weight vectors
(all kept, see :mod:`rvm_ppl.closed_form.categorical` for why no reference
class), ``P(t_n = k | W) = softmax(Phi W^T)_nk``, with ``alpha`` integrated
out as the binary classifier of :mod:`rvm_ppl.model.build` does:

per-class ``alpha`` (``shared_alpha=False``)
    ``alpha_km ~ Gamma(a, b)`` independently, so every weight has the
    Student-t prior of eq. (32), ``w_km ~ t_{2a}(0, sqrt(b / a))``, sampled
    on the scale ``asinh(w / sqrt(2 b))`` (``ScaledAsinh``).
shared ``alpha`` (``shared_alpha=True``)
    ``alpha_m ~ Gamma(a, b)`` shared by the ``K`` weights of basis ``m``:
    integrating it out gives
    ``p(w_m) ∝ (1 + ||w_m||^2 / (2 b))^{-(a + K/2)}``, a multivariate
    Student-t with ``2a`` degrees of freedom and scale matrix ``(b / a) I``,
    sampled on the radial scale ``v = w asinh(||w|| / c) / ||w||`` with
    ``c = sqrt(2 b)`` (:func:`radial_asinh_class`), on which the density
    has exponential tails.

``alpha`` is drawn afterwards from its conditional:
``Gamma(a + 1/2, b + w_km^2 / 2)`` per class, ``Gamma(a + K/2, b + ||w_m||^2 / 2)``
shared (:func:`alpha_given_weights_multinomial`).

The hyperprior defaults to the binary classifier's
:data:`rvm_ppl.model.build.BERNOULLI_PRIORS` (``a = 3, b = 2``) for the same
reason (a kernel basis separates any labelling, so ``a -> 0`` leaves the
posterior improper in practice).
"""

from __future__ import annotations

import numpy as np

from rvm_ppl.core.priors import model_priors
from rvm_ppl.model.transforms import radial_asinh_class, scaled_asinh_class


def build_multinomial_model(
    Phi, y, *, n_classes=None, shared_alpha=False, basis=None, classes=None, priors=None
):
    """Declare the softmax RVM (Tipping 2001, eq. 28) as a PyMC model, ``alpha`` integrated out.

    Parameters
    ----------
    Phi : ndarray of shape (N, M)
    y : ndarray of shape (N,)
        Integer labels in ``0, ..., K - 1``.
    n_classes : int, optional
        ``K``; default ``max(y) + 1``.
    shared_alpha : bool
        One ``alpha`` per basis shared by the classes (multivariate Student-t
        prior on each basis's ``K`` weights) or one per class and basis.
    basis : list of str, optional
        Labels of the basis functions (coordinate ``basis``).
    classes : list, optional
        Labels of the classes (coordinate ``class``); default ``0 .. K-1``.
    priors : dict, optional
        Gamma hyperprior ``a, b`` on ``alpha`` (shape, rate); default
        :data:`rvm_ppl.model.build.BERNOULLI_PRIORS`.

    Returns
    -------
    pymc.Model
        Coords ``obs``, ``basis``, ``class``; data ``Phi`` and ``y_obs``;
        free variable ``w`` (dims ``("class", "basis")``); observed ``y``.
    """
    import pymc as pm
    import pytensor.tensor as pt

    from rvm_ppl.core.labels import one_hot

    Phi = np.asarray(Phi, dtype=float)
    N, M = Phi.shape
    y = np.asarray(y)
    if y.shape != (N,):
        raise ValueError(f"y has shape {y.shape}; expected ({N},) to match Phi.")
    _, K = one_hot(y, n_classes)  # validates the labels
    p = model_priors(priors, "bernoulli")
    if p["a"] <= 0 or p["b"] <= 0:
        raise ValueError("PyMC needs proper hyperpriors: a and b must be positive.")
    coords = {
        "obs": np.arange(N),
        "basis": list(basis) if basis is not None else [f"phi_{m}" for m in range(M)],
        "class": list(classes) if classes is not None else list(range(K)),
    }
    if len(coords["class"]) != K:
        raise ValueError(f"classes has {len(coords['class'])} labels but there are {K} classes.")
    c = np.sqrt(2 * p["b"])
    # model=None: a model of its own, also when built inside another model's context
    # (as idata_ may build it inside "with m.pymc_model():").
    with pm.Model(coords=coords, model=None) as model:
        Phi_d = pm.Data("Phi", Phi, dims=("obs", "basis"))
        y_d = pm.Data("y_obs", y.astype(np.int64), dims="obs")
        if shared_alpha:
            # alpha_m ~ Gamma(a, b) shared by the K weights of basis m, integrated out.
            Wt = pm.MvStudentT(
                "w_basis",
                nu=2 * p["a"],
                mu=np.zeros(K),
                scale=(p["b"] / p["a"]) * np.eye(K),
                dims=("basis", "class"),
                transform=radial_asinh_class()(c),
            )
            W = pm.Deterministic("w", Wt.T, dims=("class", "basis"))
        else:
            # Tipping (2001) eq. (32) for every weight.
            W = pm.StudentT(
                "w",
                nu=2 * p["a"],
                mu=0.0,
                sigma=np.sqrt(p["b"] / p["a"]),
                dims=("class", "basis"),
                transform=scaled_asinh_class()(c),
            )
        logits = pt.dot(Phi_d, W.T)  # a_nk = phi_n^T w_k
        pm.Categorical("y", logit_p=logits, observed=y_d, dims="obs")  # eq. (28)
    return model


def alpha_given_weights_multinomial(W, priors, rng, *, shared_alpha):
    """Exact draws of ``alpha`` given the weights ``W`` (..., K, M).

    Per class: ``Gamma(a + 1/2, b + w_km^2 / 2)``, shape (..., K, M).
    Shared: ``Gamma(a + K/2, b + ||w_m||^2 / 2)``, shape (..., M).
    """
    W = np.asarray(W, dtype=float)
    if shared_alpha:
        K = W.shape[-2]
        return rng.gamma(priors["a"] + K / 2, 1.0 / (priors["b"] + 0.5 * np.sum(W**2, axis=-2)))
    return rng.gamma(priors["a"] + 0.5, 1.0 / (priors["b"] + 0.5 * W**2))

