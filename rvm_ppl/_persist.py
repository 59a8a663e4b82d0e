"""Saving fitted estimators to netCDF and loading them back.

The file is the estimator's InferenceData with one more group,
``estimator_state``, holding what prediction needs (training inputs, each
posterior's support, moments, hyperparameters and, for the sampling
methods, the weight draws) and, in its attributes, the estimator class and
its constructor parameters as JSON. Loading rebuilds the estimator from
those parameters and restores the state, so predictions are identical.
"""

from __future__ import annotations

import json

import numpy as np

from . import kernels as _kernels
from .inference import Posterior

STATE_GROUP = "estimator_state"


def _encode_param(value):
    if isinstance(value, _kernels.Kernel):
        if isinstance(value, _kernels.FunctionKernel):
            raise TypeError("A Python function (kernel or extra_basis) cannot be written to netCDF; use pickle.")
        params = {k: _encode_param(v) for k, v in value.get_params(deep=False).items()}
        return {"__kernel__": type(value).__name__, "params": params}
    if callable(value):
        raise TypeError("A Python function (kernel or extra_basis) cannot be written to netCDF; use pickle.")
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, dict):
        return {k: _encode_param(v) for k, v in value.items()}
    return value


def _decode_param(value):
    if isinstance(value, dict) and "__kernel__" in value:
        cls = getattr(_kernels, value["__kernel__"])
        return cls(**{k: _decode_param(v) for k, v in value["params"].items()})
    if isinstance(value, dict):
        return {k: _decode_param(v) for k, v in value.items()}
    return value


def _with_state(est):
    """The estimator's InferenceData plus the ``estimator_state`` group."""
    import xarray as xr

    idata = est.idata_.copy()
    posts = est.posteriors_ if hasattr(est, "posteriors_") else [est.posterior_]
    data = {"X_fit": (("obs_fit", "feature"), est.X_fit_)}
    if hasattr(est, "y_fit_"):
        data["y_fit"] = (("obs_fit",), est.y_fit_)
    if hasattr(est, "eta_"):
        data["eta"] = (("feature",), est.eta_)
    attrs = {
        "estimator": type(est).__name__,
        "params": json.dumps({k: _encode_param(v) for k, v in est.get_params(deep=False).items()}),
        "method": est.method_,
        "n_posteriors": len(posts),
    }
    if hasattr(est, "classes_"):
        attrs["classes"] = json.dumps(np.asarray(est.classes_).tolist())
    for k, p in enumerate(posts):
        data[f"support_{k}"] = ((f"s{k}",), np.asarray(p.support, dtype=np.int64))
        data[f"mean_{k}"] = ((f"s{k}",), p.mean)
        data[f"cov_{k}"] = ((f"s{k}", f"s{k}_col"), p.cov)
        data[f"alpha_{k}"] = (("basis_all",), p.alpha)
        data[f"relevant_{k}"] = (("basis_all",), p.relevant.astype(np.int8))
        if p.w_draws is not None:
            data[f"w_draws_{k}"] = ((f"sample{k}", f"s{k}"), p.w_draws)
        attrs[f"noise_var_{k}"] = np.nan if p.noise_var is None else float(p.noise_var)
        attrs[f"beta_{k}"] = np.nan if p.beta is None else float(p.beta)
        for key in ("log_evidence", "elbo", "n_iter"):
            if p.info.get(key) is not None:
                attrs[f"{key}_{k}"] = float(p.info[key])
    idata.add_groups({STATE_GROUP: xr.Dataset(data, attrs=attrs)})
    return idata


def save(est, path):
    """Write a fitted estimator to ``path`` (netCDF)."""
    _with_state(est).to_netcdf(str(path))


def load(cls, path):
    """Rebuild an estimator of class ``cls`` saved by :func:`save`."""
    import arviz as az

    idata = az.from_netcdf(str(path))
    if STATE_GROUP not in idata.groups():
        raise ValueError(f"{path} holds no saved rvm_ppl estimator (no {STATE_GROUP!r} group).")
    state = idata[STATE_GROUP]
    if state.attrs["estimator"] != cls.__name__:
        raise ValueError(f"{path} holds a {state.attrs['estimator']}, not a {cls.__name__}.")
    params = {k: _decode_param(v) for k, v in json.loads(state.attrs["params"]).items()}
    est = cls(**params)
    X = np.asarray(state["X_fit"].values)
    est.n_features_in_ = X.shape[1]
    est.X_fit_ = X
    if "y_fit" in state:
        est.y_fit_ = np.asarray(state["y_fit"].values)
    est.kernel_ = est._make_kernel(X)
    if "eta" in state:
        est.eta_ = np.asarray(state["eta"].values)
        est.kernel_ = _kernels.RBF(gamma=est.eta_)
    est.n_extra_ = 0
    est.method_ = state.attrs["method"]
    posts = []
    for k in range(int(state.attrs["n_posteriors"])):
        nv, beta = state.attrs[f"noise_var_{k}"], state.attrs[f"beta_{k}"]
        info = {key: state.attrs[f"{key}_{k}"] for key in ("log_evidence", "elbo", "n_iter")
                if f"{key}_{k}" in state.attrs}
        if "n_iter" in info:
            info["n_iter"] = int(info["n_iter"])
        posts.append(Posterior(
            support=np.asarray(state[f"support_{k}"].values, dtype=int),
            mean=np.asarray(state[f"mean_{k}"].values),
            cov=np.asarray(state[f"cov_{k}"].values),
            noise_var=None if np.isnan(nv) else float(nv),
            alpha=np.asarray(state[f"alpha_{k}"].values),
            beta=None if np.isnan(beta) else float(beta),
            relevant=np.asarray(state[f"relevant_{k}"].values).astype(bool),
            idata_factory=None,
            info=info,
            w_draws=np.asarray(state[f"w_draws_{k}"].values) if f"w_draws_{k}" in state else None,
        ))
    del idata[STATE_GROUP]
    est._idata = idata
    if "classes" in state.attrs:
        est.classes_ = np.asarray(json.loads(state.attrs["classes"]))
    est._restore(posts)
    return est
