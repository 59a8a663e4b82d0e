"""The relevance vector machine as one PyMC model.

:func:`build_model` is the only place in the package that declares a PyMC
model. It performs no inference: the fitting methods take the model it
returns (or, for the closed-form methods, the same hyperprior parameters).

The hierarchical model of Tipping (2001), §2.1::

    alpha_m ~ Gamma(a, b)                    weight precisions, m = 0..M-1
    beta    ~ Gamma(c, d)                    noise precision (regression)
    w_m | alpha_m ~ Normal(0, alpha_m^{-1})  eq. (5)
    t_n | w, beta ~ Normal(phi(x_n)^T w, beta^{-1})   eq. (4)
    t_n | w       ~ Bernoulli(sigma(phi(x_n)^T w))  eq. (23), classification
    t_n | w       ~ Poisson(exp(phi(x_n)^T w + o_n))  counts, log link, offset o_n

Three parameterisations describe the same joint distribution:

``"marginal"``
    One level of the hierarchy integrated out in closed form, the other
    drawn exactly afterwards: the geometry NUTS and ADVI handle best.

    *Regression*: ``t`` observed through its marginal likelihood, ``w``
    integrated out, ``t ~ N(0, beta^{-1} I + Phi A^{-1} Phi^T)`` (Tipping
    2001, eq. 15); ``w`` is a random variable whose density is its Gaussian
    conditional ``N(mu, Sigma)`` given ``(alpha, beta, t)`` (eqs. 12-13),
    sampled on its whitened scale, where that density is ``N(0, I)``
    (:mod:`rvm_ppl.model.conditional`). ``p(alpha) p(beta) p(t | alpha,
    beta) p(w | alpha, beta, t)`` is the centred model's joint density.
    The likelihood is evaluated in the M x M form with an analytic gradient
    (:func:`_marginal_loglike`), not as an N x N ``MvNormal``; when ``Phi``
    has a low numerical rank ``k`` (smooth kernels on few inputs), in an
    exact k x k form instead (:mod:`rvm_ppl.model.marginal`).

    *Classification and counts*: ``alpha`` integrated out, so that every weight has
    the Student-t prior of Tipping (2001), eq. (32),
    ``w_m ~ t_{2a}(0, sqrt(b / a))``, sampled on the scale
    ``v_m = asinh(w_m / sqrt(2 b))`` (the ``ScaledAsinh`` transform; for
    counts on the axes ``u = V^T w`` of ``Phi = U S V^T`` instead, the
    ``Rotation`` transform: see "Hyperpriors of the classifier and of
    counts" below); ``alpha`` is drawn afterwards from its conditional
    ``alpha_m | w_m ~ Gamma(a + 1/2, b + w_m^2 / 2)``
    (:func:`alpha_given_weights`).
``"centered"``
    ``w`` sampled directly.
``"noncentered"``
    ``w = w_raw / sqrt(alpha)`` with ``w_raw ~ N(0, 1)``.

Forward sampling
----------------
PyMC's forward sampling follows the graph, ``alpha, beta -> w -> y``, and
every form draws from the same joint distribution: in the marginal
regression the random draws of ``w`` are its prior ``N(0, 1/alpha)`` (eq. 5)
although its density is its conditional given the training targets, and
those of ``y`` are ``Phi w + noise`` (eq. 3), so ``pm.sample_prior_predictive``
draws the prior predictive, as the centred and non-centred forms do.
``pm.sample_posterior_predictive`` draws ``y`` given the posterior's ``w`` and
``beta`` in every form (the InferenceData of a fit by advi or nuts, an
estimator's included, keeps the data ``alpha``, ``beta`` and ``w`` depend on in
``constant_data``, so that PyMC takes them from the posterior, after
``pm.set_data`` too; an estimator's ``pymc_model()`` is the model it fitted).
With a vague hyperprior (``a = 1e-6``) the draws of ``alpha`` underflow to 0 and the marginal
regression's prior-predictive draws warn (:class:`PriorUnderflowWarning`).

Hyperpriors of the classifier and of counts
-------------------------------------------
With a Bernoulli likelihood and ``a -> 0`` the posterior is improper in
practice. A kernel basis centred on ``N`` distinct points can separate any
labelling, so as every ``alpha_m -> 0`` together the evidence
``P(t | alpha)`` tends to the positive probability that a very wide
Gaussian weight vector separates the data, instead of vanishing as it does
for the Gaussian likelihood; the Gamma prior's density ``alpha^{a-1}`` then
puts almost all the posterior mass at ``alpha -> 0`` and unbounded weights.
NUTS with Tipping's ``a = b = 1e-6`` drifts there and diverges. The PyMC
model of the classifier therefore defaults to the proper hyperprior
:data:`BERNOULLI_PRIORS`, ``a = 3, b = 2``: each weight has a Student-t
prior with 6 degrees of freedom and variance ``b / (a - 1) = 1`` (logit
units per unit of basis output). Tighter priors give over-cautious
probabilities (and ``a = 2, b = 0.1`` divergences); the runs behind the
choice are in the documentation's Defaults and why page, section "The PyMC model"
(``docs/defaults.md``). The closed-form methods keep Tipping's limit:
type-II maximum likelihood needs no hyperprior and the variational
classifier of Bishop & Tipping uses :data:`DEFAULT_PRIORS`.

The Poisson likelihood has the same defect wherever a count is 0: ``P(t_n
= 0 | w) = exp(-exp(eta_n))`` tends to 1 as ``eta_n -> -inf``, just as a
separated label's probability tends to 1, so with a basis that can drive
those rows' log rates down independently the evidence does not vanish as
``alpha -> 0``. Its default is therefore :data:`BERNOULLI_PRIORS` too, and
on the same scale: the weights are in log-rate units per unit of basis
output, as the classifier's are in logit units, so a prior variance of 1
allows factors of ``e`` in the rate per unit of basis output, and the
targets' scale (counts are not rescaled) does not enter.

Unlike the logistic curvature (at most 1/4), the Poisson curvature
``exp(eta)`` grows with the rate: with counts of tens on a kernel basis of
many nearly collinear columns the likelihood's curvature in ``w``,
``Phi^T diag(lambda) Phi``, has a few eigenvalues thousands of times larger
than the prior's, along sums of neighbouring columns, and small ones along
their differences. A diagonal mass matrix cannot match those oblique axes:
NUTS on the per-weight ``ScaledAsinh`` scale took small steps, hundreds per
draw, and at ``target_accept = 0.8`` divergent transitions (in each of the three forms, most in the non-centred
one). The marginal Poisson model therefore samples ``w`` on the axes of the
design matrix, ``u = V^T w`` with ``Phi = U S V^T`` (the ``Rotation``
transform of :mod:`rvm_ppl.model.transforms`): ``Phi w = U S u``, so each
coordinate's scale is set by one singular value and the diagonal mass
matrix learns it. The map is orthogonal (Jacobian 1) and fixed at the
training ``Phi``, so the model and its posterior are the same; only the
sampler's coordinates change. The runs are in the documentation's Defaults
and why page, section "NUTS and ADVI on the PyMC model".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from rvm_ppl.core.counts import check_counts, check_offset
from rvm_ppl.core.priors import (  # noqa: F401
    BERNOULLI_PRIORS,
    DEFAULT_PRIORS,
    model_priors,
    resolve_priors,
    scale_priors,
)
from rvm_ppl.model.conditional import (
    conditional_logp,
    conditional_mean,
    prior_random,
    whitened_class,
)
from rvm_ppl.model.marginal import dense_marginal_loglike as _marginal_loglike
from rvm_ppl.model.marginal import (
    automatic_factor,
    low_rank_factor,
    lowrank_marginal_loglike,
    truncated_factor,
)
from rvm_ppl.model.transforms import rotation_class, scaled_asinh_class

PARAMETERIZATIONS = ("marginal", "centered", "noncentered")
LIKELIHOODS = ("gaussian", "bernoulli", "categorical", "poisson")
# The likelihoods whose marginal form integrates alpha out (Student-t weights).
_STUDENT_T = ("bernoulli", "poisson")


@dataclass(frozen=True)
class ModelSpec:
    """What :func:`build_model` declared, for the fitters that take a model.

    Attached to the model as ``model.rvm_spec``. A model written by hand
    (without it) is read by its variable names: free ``alpha`` and ``w``
    (dims ``basis``), optional ``beta``, the observed ``y`` and the data
    ``Phi``; see :func:`model_spec`.
    """

    likelihood: str
    parameterization: str
    priors: dict
    alpha: np.ndarray | None = None  # the fixed alpha, or None when it is a variable
    beta: float | None = None  # the fixed beta, or None
    shared_alpha: bool = False  # categorical: one alpha per basis for all classes
    design_tol: float = 0.0  # low_rank=<float>: the design's truncation (0: the exact design)


def model_spec(model):
    """The :class:`ModelSpec` of ``model``: attached by :func:`build_model`, else read from it.

    A model without the attribute is taken to be in the centred form: ``w``
    must be in it, and the likelihood is ``"gaussian"`` when it has a
    ``beta``, ``"bernoulli"`` when ``y`` is Bernoulli, ``"categorical"``
    when it is Categorical (``w`` then has dims ``("class", "basis")``),
    ``"poisson"`` when it is Poisson (its log rate ``Phi w``, plus the data
    ``offset`` if the model has one),
    ``"other"`` otherwise (its pointwise log-likelihood then comes from PyMC).
    """
    spec = getattr(model, "rvm_spec", None)
    if spec is not None:
        return spec
    names = set(model.named_vars)
    missing = {"w", "y", "Phi"} - names
    if missing:
        raise ValueError(
            f"The model has no {sorted(missing)}: rvm_ppl's fitters need the weights 'w' (dims "
            "'basis'), the observed 'y' and the design matrix 'Phi' as data, as build_model names them."
        )
    import pymc as pm

    if "beta" in names:
        likelihood = "gaussian"
    elif isinstance(model["y"].owner.op, type(pm.Bernoulli.dist(p=0.5).owner.op)):
        likelihood = "bernoulli"
    elif isinstance(model["y"].owner.op, type(pm.Categorical.dist(p=[0.5, 0.5]).owner.op)):
        likelihood = "categorical"
    elif isinstance(model["y"].owner.op, type(pm.Poisson.dist(mu=1.0).owner.op)):
        likelihood = "poisson"
    else:
        likelihood = "other"
    if "alpha" not in names or (likelihood == "gaussian" and "beta" not in names):
        raise ValueError("A model without rvm_spec needs free 'alpha' (and 'beta' for a Gaussian "
                         "likelihood); fix them through build_model(alpha=..., beta=...).")
    return ModelSpec(likelihood, "centered", {})


def _fixed_precision(value, name, shape):
    """A fixed ``alpha`` (broadcast to ``shape``) or ``beta``, checked; None stays None."""
    if value is None:
        return None
    v = np.asarray(value, dtype=float)
    if v.ndim and v.shape != shape:
        raise ValueError(f"{name} has shape {v.shape}; expected a scalar or {shape}.")
    if not (np.isfinite(v).all() and (v > 0).all()):
        raise ValueError(f"A fixed {name} must be positive and finite; got {value!r}.")
    return np.broadcast_to(v, shape)


def build_model(
    Phi,
    y,
    *,
    likelihood: Literal["gaussian", "bernoulli", "categorical", "poisson"] = "gaussian",
    basis=None,
    priors=None,
    parameterization: Literal["marginal", "centered", "noncentered"] = "marginal",
    alpha=None,
    beta=None,
    shared_alpha=False,
    classes=None,
    low_rank=None,
    offset=None,
):
    """Declare the RVM as a PyMC model.

    The model is an ordinary :class:`pymc.Model`: ``pm.sample``,
    ``pm.fit``, ``pm.model_to_graphviz`` and ``pm.set_data`` work on it, and
    :func:`rvm_ppl.fit_nuts` / :func:`rvm_ppl.fit_advi` turn it into the
    package's InferenceData. To predict, set new design rows and sample the
    posterior predictive::

        with model:
            pm.set_data({"Phi": Phi_new})
            pred = pm.sample_posterior_predictive(idata, predictions=True)

    In every form ``w`` is in the posterior (in the marginal regression it
    is drawn exactly from ``w | alpha, beta, t``), so the predictions come
    from the posterior of the weights. The training data's
    sufficient statistics ``Phi^T Phi`` and ``Phi^T t`` are data of their
    own (``"PhiT_Phi"``, ``"PhiT_y"``) in the marginal regression: new rows
    of ``Phi`` leave the fit alone; to fit new training data, build a new
    model. PyMC takes ``w`` from the posterior only if the InferenceData's
    ``constant_data`` holds the statistics ``w`` depends on (``pm.sample``'s
    and those of the package's advi and nuts fits do); otherwise it draws ``w``
    again, from its prior. An estimator fitted by advi or nuts gives its model
    with ``pymc_model()``.

    Parameters
    ----------
    Phi : ndarray of shape (N, M)
        Design matrix; column ``m`` is basis function ``m`` at the inputs.
    y : ndarray of shape (N,)
        Targets (regression), 0/1 labels (``"bernoulli"``), class codes
        ``0, ..., K - 1`` (``"categorical"``) or non-negative integer counts
        (``"poisson"``).
    likelihood : {"gaussian", "bernoulli", "categorical", "poisson"}
        ``"categorical"`` is Tipping's multinomial RVM (2001, eq. 28): a
        softmax over ``K`` weight vectors, all kept (no reference class, so
        that the model is symmetric in the classes; the prior makes the
        posterior proper), ``alpha`` integrated out as for ``"bernoulli"``
        (:mod:`rvm_ppl.model.categorical`). Marginal form only.
        ``"poisson"``: ``y_n ~ Poisson(exp(phi_n^T w + offset_n))``, with
        the Bernoulli likelihood's three forms and hyperprior (the marginal
        form sampled on the right singular vectors of ``Phi``).
    basis : list of str, optional
        Labels of the basis functions (coordinate ``basis``); default
        ``"phi_0", "phi_1", ...``.
    priors : dict, optional
        Gamma hyperprior parameters ``a, b`` (on ``alpha``) and ``c, d`` (on
        ``beta``), shape and rate, in the units of ``y``. Missing ones take
        :data:`DEFAULT_PRIORS`, or for ``a, b`` with the Bernoulli,
        categorical and Poisson likelihoods :data:`BERNOULLI_PRIORS`. The defaults are vague for
        targets of unit scale; the estimators pass the rates ``b`` and ``d``
        multiplied by ``var(y)`` (:func:`~rvm_ppl.model.build.scale_priors`), which is the same
        model as the defaults on ``y / std(y)``.
    parameterization : {"marginal", "centered", "noncentered"}
        How the weights enter; see the module docstring.
    alpha, beta : array-like or float, optional
        Fix ``alpha`` (shape (M,)) or ``beta`` instead of giving them
        hyperpriors, e.g. to check a sampler against the exact conditional
        posterior of the weights. The marginal classifiers have no
        ``alpha`` to fix.
    shared_alpha : bool
        ``"categorical"`` only: one ``alpha`` per basis function shared by
        the ``K`` classes (each basis's ``K`` weights then have a
        multivariate Student-t prior), instead of one per class and basis.
    classes : list, optional
        ``"categorical"`` only: labels of the classes (coordinate
        ``class``); default ``0, ..., K - 1``.
    low_rank : bool, float or None, optional
        Marginal regression only: evaluate the likelihood through an exact
        factor ``Phi = Q V``, ``Q`` (N x k) orthonormal
        (:func:`rvm_ppl.model.marginal.lowrank_marginal_loglike`; data
        ``"lowrank_Q"``, ``"lowrank_V"`` and ``"lowrank_s" = Q^T y``), at
        ``O(k^2 M)`` per gradient instead of ``O(M^3)``; ``w`` is then drawn
        through the singular values of the same factor
        (:func:`rvm_ppl.model.marginal.lowrank_conditional_weights`).
        ``None`` (default): whenever ``Phi`` has such a factor, to a residual
        of ``1e-12`` of its largest column norm, and its rank passes the flop
        rule of :func:`rvm_ppl.model.marginal.use_low_rank`; ``True``: whenever
        the factor exists (ValueError otherwise); ``False``: never. The
        model's density is the same either way; the weights at the same
        whitened coordinates differ (the two forms whiten with different
        square roots of ``Sigma``). Beyond speed, the low-rank form stays exact where the posterior
        puts many ``alpha_m`` of near-collinear columns near zero at once
        (a smooth kernel on many points), where ``beta Phi^T Phi + A`` of
        the M x M form is too ill-conditioned for its gradient and NUTS
        diverges (the documentation's Benchmarks page, section "The four
        methods on the benchmark data sets").
        A float ``tol`` in (0, 1) approximates: the likelihood is that of the
        truncated SVD of ``Phi`` (:func:`rvm_ppl.model.marginal.truncated_factor`),
        the singular values above ``tol`` times the largest, a design whose
        columns each differ from ``Phi``'s by at most ``tol`` times its
        spectral norm. It makes a full-rank kernel of fast-falling spectrum
        cheap to sample (Boston's 482 RBF columns: rank 145 at ``1e-6``); the
        fits record ``tol`` (attribute ``design_tol``), and a comparison with
        fits of the exact design warns. The Benchmarks page, section "On a
        nearby design", gives its cost and its accuracy against the exact design.
    offset : array-like of shape (N,), optional
        ``"poisson"`` only: the known log exposure added to every log rate,
        as data ``"offset"``; to predict at new inputs set it with ``Phi``
        (``pm.set_data({"Phi": Phi_new, "offset": offset_new})``). Default:
        none (no ``"offset"`` data).

    Returns
    -------
    pymc.Model
        With coords ``basis``, data ``Phi`` and ``y_obs``, free
        variables ``alpha`` (dims ``basis``; except in the marginal
        classifier) and ``beta`` (regression) unless fixed, ``w`` (dims
        ``basis``; free, or deterministic in the non-centred form; in the
        marginal regression free, on the whitened scale ``w_whitened__``),
        the observed ``y`` (as many rows as ``Phi``), and the
        attribute ``rvm_spec`` (:class:`ModelSpec`). ``"categorical"``: coords
        ``obs``, ``basis`` and ``class``, ``w`` with dims ``("class", "basis")``
        (free, or deterministic from ``w_basis`` with shared ``alpha``), no
        ``alpha`` (drawn afterwards from its conditional by the fitters).

    Examples
    --------
    >>> import numpy as np, pymc as pm
    >>> from rvm_ppl import build_model
    >>> Phi = np.column_stack([np.ones(5), np.arange(5.0)])
    >>> model = build_model(Phi, np.array([0.1, 1.2, 1.9, 3.1, 4.0]))
    >>> sorted(v.name for v in model.free_RVs)
    ['alpha', 'beta', 'w']
    >>> with model:
    ...     pm.set_data({"Phi": Phi[:2]})
    >>> model["y"].eval({model["alpha"]: np.ones(2), model["beta"]: 1.0,
    ...                  model["w"]: np.zeros(2)}).shape
    (2,)
    """
    import pymc as pm
    import pytensor.tensor as pt

    Phi = np.asarray(Phi, dtype=float)
    y = np.asarray(y, dtype=float)
    if Phi.ndim != 2:
        raise ValueError(f"Phi must be a 2-D design matrix; got shape {Phi.shape}.")
    N, M = Phi.shape
    if y.shape != (N,):
        raise ValueError(f"y has shape {y.shape}; expected ({N},) to match Phi.")
    if N == 0 or M == 0:
        raise ValueError(f"Phi has shape {Phi.shape}: the model needs at least one row and one "
                         "basis function (column).")
    if not (np.isfinite(Phi).all() and np.isfinite(y).all()):
        raise ValueError("Phi and y must be finite (no NaN or inf).")
    alpha = _fixed_precision(alpha, "alpha", (M,))
    beta = _fixed_precision(beta, "beta", ())
    if likelihood not in LIKELIHOODS:
        raise ValueError(f"Unknown likelihood {likelihood!r}; expected one of {list(LIKELIHOODS)}.")
    if likelihood == "poisson":
        check_counts(y)
        offset = None if offset is None else check_offset(offset, N)
    elif offset is not None:
        raise ValueError(f"offset (a log exposure) belongs to the 'poisson' likelihood; got "
                         f"likelihood={likelihood!r}.")
    design_tol = _design_tol(low_rank)
    if low_rank and (likelihood != "gaussian" or parameterization != "marginal"):
        raise ValueError("low_rank applies to the marginal regression only (likelihood='gaussian', "
                         f"parameterization='marginal'); got {likelihood!r}, {parameterization!r}.")
    if likelihood == "categorical":
        return _categorical_model(Phi, y, basis=basis, priors=priors, shared_alpha=shared_alpha,
                                  classes=classes, parameterization=parameterization,
                                  alpha=alpha, beta=beta)
    if shared_alpha or classes is not None:
        raise ValueError("shared_alpha and classes belong to the 'categorical' likelihood; "
                         f"got likelihood={likelihood!r}.")
    if parameterization not in PARAMETERIZATIONS:
        raise ValueError(f"Unknown parameterization {parameterization!r}; expected one of {list(PARAMETERIZATIONS)}.")
    if likelihood == "bernoulli" and not np.isin(y, (0.0, 1.0)).all():
        raise ValueError("The Bernoulli likelihood needs 0/1 labels in y.")
    student_t = likelihood in _STUDENT_T and parameterization == "marginal"
    if student_t and alpha is not None:
        raise ValueError(
            f"The marginal form of the {likelihood} likelihood integrates alpha out; fix alpha "
            "with the 'centered' or 'noncentered' parameterization."
        )
    p = model_priors(priors, likelihood)
    if min(p.values()) <= 0:
        raise ValueError("PyMC needs proper hyperpriors: a, b, c, d must be positive.")
    basis = list(basis) if basis is not None else [f"phi_{m}" for m in range(M)]
    if len(basis) != M:
        raise ValueError(f"basis has {len(basis)} labels for the {M} columns of Phi.")
    coords = {"basis": basis}
    spec = ModelSpec(
        likelihood, parameterization, p,
        alpha=alpha,
        beta=None if beta is None else float(beta),
        design_tol=design_tol,
    )

    # model=None: a model of its own, also when built inside another model's context
    # (as idata_ may build it inside "with m.pymc_model():").
    with pm.Model(coords=coords, model=None) as model:
        # No "obs" dimension on the rows: pm.set_data({"Phi": new_rows}) alone
        # then predicts at new inputs. The targets enter as data too, so that
        # compiled functions (and PyTensor's on-disk cache of them) depend on
        # shapes, not on values.
        Phi_d = pm.Data("Phi", Phi)
        y_d = pm.Data("y_obs", y if likelihood == "gaussian" else y.astype(np.int64))
        n_rows = Phi_d.shape[0]  # y follows the rows of Phi, so pm.set_data on Phi predicts
        offset_d = None if offset is None else pm.Data("offset", offset)
        if student_t:
            # Tipping (2001) eq. (32): alpha_m ~ Gamma(a, b) integrated out.
            if likelihood == "poisson":  # sampled on Phi's right singular vectors
                transform = rotation_class()(_right_singular_vectors(Phi))
            else:
                transform = scaled_asinh_class()(np.sqrt(2 * p["b"]))
            w = pm.StudentT("w", nu=2 * p["a"], mu=0.0, sigma=np.sqrt(p["b"] / p["a"]),
                            dims="basis", transform=transform)
            _observe_glm(likelihood, Phi_d @ w, y_d, n_rows, offset_d)
            model.rvm_spec = spec
            return model
        # The rates are data: in the units of y they carry std(y)^2, and as constants they
        # would make every data set a new graph to compile.
        if alpha is None:
            b_d = pm.Data("alpha_rate", float(p["b"]))
            alpha_v = pm.Gamma("alpha", alpha=p["a"], beta=b_d, dims="basis")  # eq. (6)
        else:
            alpha_v = pt.as_tensor_variable(alpha)
        if likelihood == "gaussian":
            if beta is None:
                d_d = pm.Data("beta_rate", float(p["d"]))
                beta_v = pm.Gamma("beta", alpha=p["c"], beta=d_d)  # §2.1, noise precision
            else:
                beta_v = pt.as_tensor_variable(np.float64(beta))  # float64, as its ops take

        if parameterization == "marginal":
            # Tipping (2001) eq. (15): t ~ N(0, beta^{-1} I + Phi A^{-1} Phi^T),
            # evaluated in the M x M form with its analytic gradient, from the
            # training data's sufficient statistics, or, when Phi = Q V has a
            # low rank k, in a k x k form (rvm_ppl.model.marginal).
            PtP = pm.Data("PhiT_Phi", Phi.T @ Phi)
            Pty = pm.Data("PhiT_y", Phi.T @ y)
            factor = _marginal_factor(Phi, low_rank, design_tol)
            if factor is None:
                form, extra, logp = "dense", (), _dense_logp(_marginal_loglike())
                w_data = (PtP, Pty)
            else:
                Q, V = factor
                form = "lowrank"
                extra = (pm.Data("lowrank_Q", Q), pm.Data("lowrank_V", V))
                logp = _lowrank_logp(lowrank_marginal_loglike())
                w_data = (extra[1], pm.Data("lowrank_s", Q.T @ y))
            # w: drawn from its prior N(0, A^{-1}) (eq. 5) when sampling forward, scored by
            # its conditional N(mu, Sigma) given alpha, beta and t (eqs. 12-13), and sampled
            # on the whitened scale z = R^{-1} (w - mu), whose density is N(0, I): see
            # rvm_ppl.model.conditional.
            w = pm.CustomDist(
                "w",
                alpha_v,
                beta_v,
                *w_data,
                logp=conditional_logp(form),
                random=prior_random,
                support_point=conditional_mean(form),
                signature="(m),(),(m,m),(m)->(m)" if form == "dense" else "(m),(),(k,m),(k)->(m)",
                transform=whitened_class()(form),
                dims="basis",
            )
            pm.CustomDist(
                "y",
                w,
                alpha_v,
                beta_v,
                Phi_d,
                PtP,
                *extra,
                logp=logp,
                random=_gaussian_random_for(p),
                signature="(m),(m),(),(n,m),(m,m)" + ",(p,k),(k,m)" * bool(extra) + "->(n)",
                observed=y_d,
            )
            model.rvm_spec = spec
            return model

        if parameterization == "centered":
            w = pm.Normal("w", mu=0.0, sigma=alpha_v**-0.5, dims="basis")  # eq. (5)
        else:
            w_raw = pm.Normal("w_raw", mu=0.0, sigma=1.0, dims="basis")
            w = pm.Deterministic("w", w_raw * alpha_v**-0.5, dims="basis")
        f = Phi_d @ w
        if likelihood == "gaussian":
            pm.Normal("y", mu=f, sigma=beta_v**-0.5, observed=y_d, shape=n_rows)  # eq. (4)
        else:
            _observe_glm(likelihood, f, y_d, n_rows, offset_d)
    model.rvm_spec = spec
    return model


def _observe_glm(likelihood, f, observed, n_rows, offset):
    """Declare the observed ``y`` of the Bernoulli (eq. 23) or Poisson likelihood, ``f = Phi w``.

    Poisson: ``y_n ~ Poisson(exp(f_n + offset_n))`` (log link; no offset when
    ``offset`` is None).
    """
    import pymc as pm
    import pytensor.tensor as pt

    if likelihood == "bernoulli":
        return _bernoulli_logit("y", f, observed, n_rows)  # Tipping (2001) eq. (23)
    eta = f if offset is None else f + offset
    return pm.Poisson("y", mu=pt.exp(eta), observed=observed, shape=n_rows)


def _right_singular_vectors(Phi):
    """``V`` (M x M, orthogonal) of ``Phi = U S V^T``, the sampling axes of the Poisson weights."""
    return np.linalg.svd(Phi, full_matrices=True)[2].T


def _categorical_model(Phi, y, *, basis, priors, shared_alpha, classes, parameterization,
                       alpha, beta):
    """The softmax RVM of :mod:`rvm_ppl.model.categorical`, with its :class:`ModelSpec`."""
    from rvm_ppl.model.categorical import build_multinomial_model

    if parameterization != "marginal" or alpha is not None or beta is not None:
        raise ValueError(
            "The categorical likelihood has the marginal form only (alpha integrated out, no "
            "beta); leave parameterization, alpha and beta at their defaults."
        )
    if not np.all(y == np.round(y)) or y.min() < 0:
        raise ValueError("The categorical likelihood needs class codes 0, ..., K - 1 in y; "
                         "encode labels first, e.g. with numpy.unique(..., return_inverse=True).")
    if basis is not None and len(basis) != Phi.shape[1]:
        raise ValueError(f"basis has {len(basis)} labels for the {Phi.shape[1]} columns of Phi.")
    model = build_multinomial_model(Phi, y.astype(np.int64), shared_alpha=bool(shared_alpha),
                                    basis=basis, classes=classes, priors=priors)
    model.rvm_spec = ModelSpec("categorical", "marginal", model_priors(priors, "categorical"),
                               shared_alpha=bool(shared_alpha))
    return model


def _bernoulli_logit(name, eta, observed, n_rows):
    """``y_n ~ Bernoulli(sigma(eta_n))`` with a log density whose gradient stays finite.

    ``log p(y | eta) = y eta - softplus(eta)`` (Tipping 2001, eq. 23), with
    ``softplus(eta) = max(eta, 0) + log1p(exp(-|eta|))``. PyMC's
    ``Bernoulli(logit_p=...)`` has the same density, but PyTensor 3.0 rewrites
    its gradient at ``y = 0`` into ``sigma (1 - sigma) / (1 - sigma)``, which is
    0/0 once ``eta`` exceeds about 37: ADVI then stops with a NaN loss on
    problems of a few hundred points (Ripley's 250, Pima's 200).
    """
    import pymc as pm
    import pytensor.tensor as pt

    def logp(value, eta):
        return value * eta - (pt.maximum(eta, 0.0) + pt.log1p(pt.exp(-pt.abs(eta))))

    def random(eta, rng=None, size=None):
        return rng.binomial(1, 0.5 * (1.0 + np.tanh(0.5 * np.asarray(eta))), size=size)

    return pm.CustomDist(name, eta, logp=logp, random=random, observed=observed, shape=n_rows,
                         dtype="int64")


def _design_tol(low_rank):
    """The relative truncation of the design that ``low_rank`` asks for: 0 unless a float."""
    if low_rank is None or isinstance(low_rank, bool | np.bool_):
        return 0.0
    if not isinstance(low_rank, int | float | np.integer | np.floating) or not 0 < low_rank < 1:
        raise TypeError(f"low_rank must be None, True, False or a float in (0, 1) (a relative "
                        f"singular-value tolerance); got {low_rank!r}.")
    return float(low_rank)


def _marginal_factor(Phi, low_rank, design_tol=0.0):
    """``(Q, V)`` of :func:`low_rank_factor` if the marginal likelihood should use it, else None.

    Automatic (``low_rank=None``): :func:`automatic_factor`. ``design_tol > 0``
    (:func:`_design_tol` of a float ``low_rank``): :func:`truncated_factor` at
    that tolerance.
    """
    if low_rank is False:
        return None
    if design_tol:
        return truncated_factor(Phi, design_tol)
    if low_rank is None:
        return automatic_factor(Phi)
    factor = low_rank_factor(Phi)
    if low_rank and factor is None:
        raise ValueError("low_rank=True, but Phi has no low-rank factor Q V reproducing it to "
                         "1e-12 of its largest column norm; use low_rank=None or False.")
    return factor


def _dense_logp(marginal):
    """The CustomDist logp of the M x M form: ``(value, w, alpha, beta, Phi, PtP) -> logp``."""
    def logp(value, w, alpha, beta, Phi, PtP):
        return marginal(value, alpha, beta, Phi, PtP)

    return logp


def _lowrank_logp(marginal):
    """The CustomDist logp of the low-rank form, with the factor ``Q, V`` as two more inputs."""
    def logp(value, w, alpha, beta, Phi, PtP, Q, V):
        return marginal(value, alpha, beta, Q, V)

    return logp


class PriorUnderflowWarning(UserWarning):
    """Draws from a vague Gamma hyperprior underflow to 0, so forward samples are NaN or inf."""


def warn_prior_underflow(alpha, beta, priors, draws, stacklevel=2):
    """Warn when ``draws`` are NaN or inf because a precision drawn from its hyperprior is 0.

    A ``Gamma(a, b)`` draw is ``Gamma(a + 1) U^{1/a}``: with Tipping's vague
    ``a = 1e-6`` it is below the smallest float64 (about ``1e-308``) unless
    ``U > exp(-708 a)``, that is nearly always. ``N(0, 1/alpha)`` weights and
    ``N(f, 1/beta)`` targets drawn from such precisions are infinite or NaN.

    Parameters
    ----------
    alpha, beta : array-like or None
        The precisions the draws were made from.
    priors : mapping
        The hyperprior ``a, b`` (and ``c, d``), named in the message.
    draws : array-like
        What was drawn from them; finite draws raise no warning.
    stacklevel : int
    """
    import warnings

    if np.isfinite(draws).all():
        return
    which = []
    if alpha is not None and np.any(np.asarray(alpha) == 0):
        which.append(f"Gamma({priors['a']:g}, {priors['b']:g}) draws of alpha")
    if beta is not None and np.any(np.asarray(beta) == 0):
        which.append(f"Gamma({priors['c']:g}, {priors['d']:g}) draws of beta")
    if which:
        warnings.warn(
            f"{' and '.join(which)} underflow to 0 in float64, so the weights or targets drawn "
            "from them are NaN or inf; pass proper priors (e.g. a = b = 2) to draw from the "
            "prior predictive.", PriorUnderflowWarning, stacklevel=stacklevel + 1)


def _gaussian_random_for(priors):
    """The marginal regression's ``random``, warning when its draws are not finite.

    Precisions of exactly 0 reach it only from a vague hyperprior
    (:func:`warn_prior_underflow`): posterior draws are positive.
    """
    def random(w, alpha, beta, Phi, PtP, *factor, rng=None, size=None):
        t = _gaussian_random(w, alpha, beta, Phi, PtP, *factor, rng=rng, size=size)
        warn_prior_underflow(alpha, beta, priors, t, stacklevel=2)
        return t

    return random


def _gaussian_random(w, alpha, beta, Phi, PtP, *factor, rng=None, size=None):
    """Draws of ``t`` given ``w`` and ``beta``: ``Phi w + noise`` (Tipping 2001, eq. 3)."""
    f = np.einsum("...nm,...m->...n", Phi, w)
    noise = rng.standard_normal(size if size is not None else f.shape)
    with np.errstate(divide="ignore", invalid="ignore"):  # PyMC probes shapes with beta = 0
        return f + noise / np.sqrt(np.asarray(beta))[..., None]


def alpha_given_weights(w, priors, rng):
    """Exact draws of ``alpha`` given ``w``: ``Gamma(a + 1/2, b + w^2 / 2)``.

    The Gamma prior (Tipping 2001, eq. 6) is conjugate to the Gaussian
    ``w_m | alpha_m`` (eq. 5), and given ``w`` the data add nothing, so each
    ``alpha_m`` has this conditional (shape, rate).

    Parameters
    ----------
    w : ndarray of shape (..., M)
        Weight draws.
    priors : dict
        With ``a`` and ``b``.
    rng : numpy.random.Generator

    Returns
    -------
    ndarray of the shape of ``w``
    """
    w = np.asarray(w, dtype=float)
    return rng.gamma(priors["a"] + 0.5, 1.0 / (priors["b"] + 0.5 * w**2))

