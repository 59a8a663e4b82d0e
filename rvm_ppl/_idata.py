"""The one InferenceData layout every fitting method returns.

``posterior``
    ``w`` (chain, draw, basis), ``alpha`` (chain, draw, basis) and, for
    regression, ``beta`` (chain, draw). Pruned basis functions of the
    evidence method have ``alpha = inf`` and ``w = 0`` in every draw.
``fit`` (evidence, vb, advi)
    What the method computed in closed form (``mean`` and ``cov`` of the
    weights, the hyperparameters' point estimates or variational
    parameters) and its objective trace: ``log_evidence`` (evidence) or
    ``elbo`` (vb, advi), both on dimension ``iteration``.
``sample_stats`` (nuts)
    The sampler's statistics.
``observed_data``
    ``y`` on dimension ``obs``.
``relevance``
    ``relevant`` (basis): the method's relevance decision, and ``gamma``
    (basis): ``E[gamma_m]``, how well the data determine each weight.

``attrs`` of the InferenceData carry ``inference_method``,
``rvm_ppl_version``, ``inference_library`` and its version.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

import numpy as np


def _version(pkg):
    try:
        return version(pkg)
    except PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "unknown"


def make_idata(
    *,
    method,
    basis,
    w,
    alpha,
    beta=None,
    y=None,
    fit=None,
    sample_stats=None,
    attrs=None,
):
    """Assemble the package's InferenceData.

    Parameters
    ----------
    method : str
        The ``method`` that produced it.
    basis : sequence of str
        Basis labels, the ``basis`` coordinate.
    w, alpha : ndarray of shape (chain, draw, M)
    beta : ndarray of shape (chain, draw), optional
    y : ndarray of shape (N,), optional
        Observed targets, stored in ``observed_data``.
    fit : dict, optional
        ``name -> (dims, values)`` for the ``fit`` group.
    sample_stats : xarray.Dataset or dict, optional
    attrs : dict, optional
        Extra attributes (``kernel``, ``likelihood``, ...).

    Returns
    -------
    arviz.InferenceData
    """
    import arviz as az
    import xarray as xr

    basis = [str(b) for b in basis]
    n_chain, n_draw = np.shape(w)[:2]
    coords = {"chain": np.arange(n_chain), "draw": np.arange(n_draw), "basis": basis}
    data = {
        "w": (("chain", "draw", "basis"), np.asarray(w, dtype=float)),
        "alpha": (("chain", "draw", "basis"), np.asarray(alpha, dtype=float)),
    }
    if beta is not None:
        data["beta"] = (("chain", "draw"), np.asarray(beta, dtype=float))
    all_attrs = {
        "inference_method": method,
        "rvm_ppl_version": _version("rvm_ppl"),
        "inference_library": "pymc",
        "inference_library_version": _version("pymc"),
        "arviz_version": _version("arviz"),
    }
    all_attrs.update(attrs or {})
    groups = {"posterior": xr.Dataset(data, coords=coords, attrs=all_attrs)}
    if fit is not None:
        fcoords = {"basis": basis, "basis_col": basis}
        used = {d for dims, _ in fit.values() for d in dims}
        groups["fit"] = xr.Dataset(
            {k: (dims, np.asarray(v)) for k, (dims, v) in fit.items()},
            coords={k: v for k, v in fcoords.items() if k in used},
        )
    if sample_stats is not None:
        groups["sample_stats"] = (
            sample_stats if isinstance(sample_stats, xr.Dataset) else xr.Dataset(sample_stats)
        )
    if y is not None:
        y = np.asarray(y)
        groups["observed_data"] = xr.Dataset(
            {"y": (("obs",), y)}, coords={"obs": np.arange(y.shape[0])}
        )
    idata = az.InferenceData(**groups)
    idata.attrs.update(all_attrs)
    return idata


def gaussian_draws(mean, cov, active, n_basis, *, chains, draws, rng):
    """Draws of ``w`` on all ``n_basis`` bases from ``N(mean, cov)`` on ``active``.

    Inactive bases get exactly zero. Returns an array of shape
    (chains, draws, n_basis).
    """
    w = np.zeros((chains, draws, n_basis))
    if len(active):
        from ._linalg import cholesky_jittered

        L = cholesky_jittered(cov, what="posterior covariance of the weights")
        z = rng.standard_normal((chains, draws, len(active)))
        w[:, :, active] = mean + z @ L.T
    return w
