"""One model per comparison: the check that fits compared side by side approximate one model.

Every InferenceData of the package carries the identity of the model its fit
approximates in its attributes (:func:`rvm_ppl.output.idata.model_identity`):
the likelihood, the hyperprior in the units the fit used, the basis (kernel
and a hash of the labels and training inputs, and any truncation of the
design, ``design_tol``) and the parameterisation. The
comparisons (:func:`~rvm_ppl.plotting.plot_alpha`,
:func:`~rvm_ppl.output.tables.alpha_table`,
:func:`~rvm_ppl.output.diagnostics.summary_table`,
:func:`~rvm_ppl.output.diagnostics.compare_to_reference`,
:func:`~rvm_ppl.output.diagnostics.loo_table`) check them with
:func:`check_one_model`:

* fits of other data (``observed_data`` differs) are refused with a
  ``ValueError``: nothing about two posteriors of different data is a
  comparison of methods;
* fits of another likelihood, basis or hyperprior raise a
  :class:`ModelMismatchWarning` that says what differs, and where the
  hyperprior differs the methods are labelled with theirs in the output.

The rule on hyperpriors: two fits are of one model when their ``a, b`` (and,
for regression, ``c, d`` and any fixed ``beta``) are equal in the units of
the fit. Plain type-II maximum likelihood (``method="evidence"`` without
hyperpriors) is the flat limit ``a = b = c = d = 0``, a different model from
any Gamma hyperprior, the package default ``Gamma(1e-6, 1e-6)`` included:
under ``b > 0`` no alpha is infinite (Tipping 2001, App. A), so only the flat
fit prunes. Its sparse point estimate belongs beside a comparison, not in it;
inside one, fit the evidence method under the comparison's hyperprior
(type-II MAP). The parameterisation (marginal, centred, ...) is recorded but
not compared: every form is the same joint distribution.

A fit without these attributes (an InferenceData made elsewhere, or saved by
an older version) is compared on what it has.
"""

from __future__ import annotations

import json
import warnings

import numpy as np

from rvm_ppl.core.fits import as_idata

__all__ = ["ModelMismatchWarning", "check_one_model", "hyperprior_label", "hyperpriors_differ"]


class ModelMismatchWarning(UserWarning):
    """Fits compared side by side approximate different models (likelihood, basis or hyperprior)."""


def _attrs(idata):
    """Return the attributes that carry a fit's identity (every group has them)."""
    return {**idata.attrs, **idata.posterior.attrs}


def _hyperprior(attrs):
    """Return the fit's hyperprior as a dict, or None when it is not recorded."""
    h = attrs.get("hyperprior")
    return None if h in (None, "unknown") else json.loads(h)


def hyperprior_label(idata):
    """Return a short label of a fit's hyperprior, with the rates for targets of unit sd.

    The rates ``b`` and ``d`` are divided by ``target_scale^2``: the values
    an estimator takes as ``alpha_rate`` and ``beta_rate``.

    Parameters
    ----------
    idata : arviz.InferenceData or fitted estimator

    Returns
    -------
    str
        E.g. ``"α ~ Gamma(3, 2)"``, ``"α ~ Gamma(1e-06, 1e-06), β ~ Gamma(1e-06, 1e-06)"``,
        ``"flat in log α, log β"``, ``"hyperprior not recorded"``.
    """
    attrs = _attrs(as_idata(idata))
    p = _hyperprior(attrs)
    if p is None:
        return "hyperprior not recorded"
    s2 = float(attrs.get("target_scale", 1.0)) ** 2
    parts = []
    for name, shape, rate in (("α", "a", "b"), ("β", "c", "d")):
        if shape not in p or (name == "β" and "beta_fixed" in p):
            continue
        if p[shape] == 0 and p[rate] == 0:
            parts.append(f"flat in log {name}")
        else:
            parts.append(f"{name} ~ Gamma({p[shape]:.3g}, {p[rate] / s2:.3g})")
    if "beta_fixed" in p:
        parts.append(f"β fixed at {p['beta_fixed']:.3g}")
    return ", ".join(parts)


def _same_hyperprior(p, q):
    return p.keys() == q.keys() and all(np.isclose(p[k], q[k], rtol=1e-9, atol=0) for k in p)


def hyperpriors_differ(idatas):
    """Whether the recorded hyperpriors of ``idatas`` differ (in the units of each fit).

    Parameters
    ----------
    idatas : list of arviz.InferenceData

    Returns
    -------
    bool
        False when at most one fit records its hyperprior.
    """
    known = [p for p in (_hyperprior(_attrs(i)) for i in idatas) if p is not None]
    return any(not _same_hyperprior(known[0], p) for p in known[1:])


def _observed(idata):
    return (np.asarray(idata.observed_data["y"].values)
            if "observed_data" in idata.groups() and "y" in idata.observed_data else None)


def check_one_model(names, idatas):
    """Check that ``idatas`` are fits of one model; return the names to show them by.

    Parameters
    ----------
    names : list of str
    idatas : list of arviz.InferenceData

    Returns
    -------
    list of str
        ``names``, each followed by its hyperprior (:func:`hyperprior_label`)
        in brackets where the fits' hyperpriors differ.

    Raises
    ------
    ValueError
        If two fits were fitted to other data (their ``observed_data``
        differs).

    Warns
    -----
    ModelMismatchWarning
        If the fits differ in likelihood, basis (kernel, candidate labels,
        training inputs, design matrix or its truncation) or hyperprior; the message names
        what differs and each fit's value.
    """
    names = list(names)
    observed = [_observed(i) for i in idatas]
    for k in range(1, len(idatas)):
        y0, y = observed[0], observed[k]
        if y0 is not None and y is not None and (y.shape != y0.shape or not np.array_equal(y, y0)):
            raise ValueError(
                f"Fit {names[k]!r} was fitted to other data than {names[0]!r} (their "
                "observed_data differ); a comparison of methods needs fits of the same data.")
    attrs = [_attrs(i) for i in idatas]
    differ = []

    def record(what, values):
        shown = {n: v for n, v in zip(names, values, strict=True) if v is not None}
        if len(set(shown.values())) > 1:
            differ.append(f"{what} ({'; '.join(f'{n}: {v}' for n, v in shown.items())})")

    record("likelihood", [a.get("likelihood") for a in attrs])
    record("kernel", [a.get("kernel") for a in attrs])
    labels = [tuple(str(b) for b in i.relevance["basis"].values) for i in idatas]
    if len(set(labels)) > 1:
        differ.append("candidate basis functions (their labels)")
    else:
        for of in ("inputs", "design"):
            record(f"basis ({'training inputs' if of == 'inputs' else 'design matrix'})",
                   [a.get("basis_hash") if a.get("basis_hash_of") == of else None
                    for a in attrs])
    record("design matrix truncation (build_model's low_rank)", [a.get("design_tol") for a in attrs])
    priors = [_hyperprior(a) for a in attrs]
    hyper_differs = hyperpriors_differ(idatas)
    if hyper_differs:
        differ.append("hyperprior (" + "; ".join(
            f"{n}: {hyperprior_label(i)}" for n, i, p in zip(names, idatas, priors, strict=True)
            if p is not None) + ")")
    if differ:
        warnings.warn(
            "The fits compared approximate different models: " + "; ".join(differ) + ". "
            "Their alpha are not posteriors of one model; fit every method with the same "
            "kernel and hyperprior (alpha_shape, alpha_rate, beta_shape, beta_rate) to compare "
            "them.", ModelMismatchWarning, stacklevel=4)  # the caller of the comparison
    if hyper_differs:
        return [f"{n} [{hyperprior_label(i)}]" for n, i in zip(names, idatas, strict=True)]
    return names
