"""Saving fitted estimators to netCDF and loading them back.

The file is the estimator's InferenceData with one more group,
``estimator_state``, holding what prediction needs (training inputs, each
fit's support, moments, hyperparameters and, for the sampling methods, the
weight draws; for a multinomial evidence fit, the joint covariance of all
classes' weights). Its attributes record the file format
(:data:`FORMAT_VERSION`), the package version, the estimator class, its
constructor parameters as JSON and ``model_id``, a hash of all three and of
the method: a file of another format or estimator is refused with a clear
error instead of being half-read. Loading reads every group into memory and
closes the file, rebuilds the estimator from the parameters and restores the
state (scikit-learn's ``feature_names_in_`` included), so predictions are
identical and the file can be overwritten at once.

A file is data, never a way to call code: the only classes a file may name
are the kernels in :data:`KERNEL_CLASSES`, built from parameters that are
plain numbers, strings and lists. A file that is not one written by
:func:`save` (not netCDF, truncated, written by something else, a group or
variable missing, a kernel not in the list) is a ``ValueError`` that names
the path.
"""

from __future__ import annotations

import hashlib
import inspect
import json

import numpy as np

from rvm_ppl.core.priors import PRIOR_PARAMS
from rvm_ppl.core.result import FitResult
from rvm_ppl.kernels import kernel as _kernels
from rvm_ppl.output.idata import package_version

STATE_GROUP = "estimator_state"
# 3: RVC files carry multi_class and shared_alpha among the parameters and,
# for a multinomial evidence fit, the joint Laplace covariance (joint_cov);
# a reader of format 2 would fail on them, so it refuses them instead.
# 4: the hyperprior is four parameters (alpha_shape, alpha_rate, beta_shape,
# beta_rate) instead of the dict ``priors``; format 3 files are read, their
# ``priors`` mapped to the four names.
FORMAT_VERSION = 4
READABLE_FORMATS = (3, 4)
_RESULT_ARRAYS = ("support", "mean", "cov", "alpha", "gamma", "relevant")
_TARGETS = ("y_fit", "counts_fit", "exposure_fit")
# The classes a file may name, by the name it stores: the package's own
# kernels, which hold numbers only. FunctionKernel (it holds a function) and
# every function are left out, so loading a file never calls what it names.
KERNEL_CLASSES = {
    "Constant": _kernels.Constant,
    "RBF": _kernels.RBF,
    "LinearSpline": _kernels.LinearSpline,
    "Polynomial": _kernels.Polynomial,
    "Linear": _kernels.Linear,
    "Sum": _kernels.Sum,
    "Product": _kernels.Product,
}
_PLAIN = (str, int, float, bool, type(None))
# What a readable file is, for the error messages.
_EXPECTED = (f"rvm_ppl estimator file written by to_netcdf (file format "
             f"{' or '.join(map(str, READABLE_FORMATS))})")


def _encode_param(value):
    if isinstance(value, _kernels.Kernel):
        if isinstance(value, _kernels.FunctionKernel):
            raise TypeError("A Python function (kernel or extra_basis) cannot be written to netCDF; use pickle.")
        name = type(value).__name__
        if KERNEL_CLASSES.get(name) is not type(value):
            raise TypeError(f"A kernel of class {type(value).__qualname__} cannot be written to "
                            f"netCDF, only rvm_ppl's {sorted(KERNEL_CLASSES)}; use pickle.")
        params = {k: _encode_param(v) for k, v in value.get_params(deep=False).items()}
        return {"__kernel__": name, "params": params}
    if callable(value):
        raise TypeError("A Python function (kernel or extra_basis) cannot be written to netCDF; use pickle.")
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, dict):
        return {k: _encode_param(v) for k, v in value.items()}
    return value


def _decode_param(value, path):
    if isinstance(value, dict) and "__kernel__" in value:
        return _decode_kernel(value, path)
    if isinstance(value, dict):
        return {k: _decode_param(v, path) for k, v in value.items()}
    return value


def _decode_kernel(value, path):
    """Build the kernel that ``{"__kernel__": name, "params": {...}}`` describes, if allowed.

    ``name`` must be a key of :data:`KERNEL_CLASSES` and ``params`` a dict of
    that class's parameters with plain values (numbers, strings, None, lists
    of them) or kernels described the same way.
    """
    name = value["__kernel__"]
    cls = KERNEL_CLASSES.get(name) if isinstance(name, str) else None
    if cls is None:
        raise ValueError(f"{path} names the kernel {name!r}, which is not one of the kernels a "
                         f"file may hold ({sorted(KERNEL_CLASSES)}); refusing to load it.")
    params = value.get("params")
    allowed = set(inspect.signature(cls).parameters)
    if set(value) != {"__kernel__", "params"} or not isinstance(params, dict) \
            or not set(params) <= allowed:
        raise ValueError(f"{path} gives the kernel {name!r} the parameters {params!r}; expected a "
                         f"dict with keys among {sorted(allowed)}.")
    return cls(**{k: _decode_kernel_param(v, f"{name}.{k}", path) for k, v in params.items()})


def _decode_kernel_param(value, where, path):
    if isinstance(value, dict) and "__kernel__" in value:
        return _decode_kernel(value, path)
    if isinstance(value, list):
        return [_decode_kernel_param(v, where, path) for v in value]
    if isinstance(value, _PLAIN):
        return value
    raise ValueError(f"{path} gives the kernel parameter {where} the value {value!r}; expected a "
                     "number, a string, None, a list of them or a kernel.")


def model_id(estimator_name, params_json, method, version=FORMAT_VERSION):
    """A short hash that identifies the model a file holds (format, estimator, parameters, method)."""
    text = json.dumps([version, estimator_name, params_json, method])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _results(est):
    return est.results_ if hasattr(est, "results_") else [est.result_]


def _with_state(est):
    """The estimator's InferenceData plus the ``estimator_state`` group."""
    import xarray as xr

    idata = est.idata_.copy()
    params = json.dumps({k: _encode_param(v) for k, v in est.get_params(deep=False).items()})
    data = {"X_fit": (("obs_fit", "feature"), est.X_fit_)}
    for name in _TARGETS:  # RVR's targets; PoissonRVR's counts and exposures
        if hasattr(est, f"{name}_"):
            data[name] = (("obs_fit",), getattr(est, f"{name}_"))
    if hasattr(est, "y_codes_"):
        data["y_codes"] = (("obs_fit",), est.y_codes_)
    if hasattr(est, "eta_"):
        data["eta"] = (("feature",), est.eta_)
    if getattr(est, "joint_cov_", None) is not None:
        data["joint_cov"] = (("weight", "weight_col"), est.joint_cov_)
    results = _results(est)
    attrs = {
        "format_version": FORMAT_VERSION,
        "rvm_ppl_version": package_version(),
        "estimator": type(est).__name__,
        "params": params,
        "method": est.method_,
        "model_id": model_id(type(est).__name__, params, est.method_),
        "n_extra": int(est.n_extra_),
        "n_results": len(results),
        "dtype": str(est.coef_.dtype),  # of the training inputs: coef_, sigma_, predictions
    }
    if hasattr(est, "classes_"):
        attrs["classes"] = json.dumps(np.asarray(est.classes_).tolist())
        attrs["classes_dtype"] = str(np.asarray(est.classes_).dtype)
    if hasattr(est, "feature_names_in_"):  # scikit-learn checks them in predict
        attrs["feature_names_in"] = json.dumps(list(est.feature_names_in_))
    attrs["groups"] = json.dumps(list(idata.groups()))
    for k, r in enumerate(results):
        s, m = f"s{k}", f"m{k}"
        dims = {"support": (s,), "mean": (s,), "cov": (s, f"{s}_col"), "alpha": (m,),
                "gamma": (m,), "relevant": (m,)}
        for name in _RESULT_ARRAYS:
            value = getattr(r, name)
            data[f"{name}_{k}"] = (dims[name], value.astype(np.int8) if name == "relevant" else value)
        if r.w_draws is not None:
            data[f"w_draws_{k}"] = ((f"sample{k}", s), r.w_draws)
        if r.outside_var is not None:
            data[f"outside_var_{k}"] = ((m,), r.outside_var)
        if r.outside_coupling is not None:
            data[f"outside_coupling_{k}"] = ((s, m), r.outside_coupling)
        for name, (dims_, values) in r.fit.items():  # objective traces: the scores_
            if dims_ == ("iteration",):
                data[f"trace_{name}_{k}"] = ((f"iteration{k}",), values)
        if r.latent is not None:  # the low-rank fit's g = V w (predictions go through it)
            g = f"g{k}"
            data[f"latent_V_pinv_{k}"] = ((s, g), r.latent["V_pinv"])
            data[f"latent_mean_{k}"] = ((g,), r.latent["mean"])
            data[f"latent_cov_{k}"] = ((g, f"{g}_col"), r.latent["cov"])
        attrs[f"result_{k}"] = json.dumps({
            "method": r.method, "likelihood": r.likelihood, "basis": list(r.basis),
            "beta": r.beta, "noise_var": r.noise_var,
            "stats": {key: (v.item() if isinstance(v, np.generic) else v)
                      for key, v in r.stats.items()},
        })
    idata.add_groups({STATE_GROUP: xr.Dataset(data, attrs=attrs)})
    return idata


def save(est, path):
    """Write a fitted estimator to ``path`` (netCDF)."""
    _with_state(est).to_netcdf(str(path))


def _restore_result(state, k):
    meta = json.loads(state.attrs[f"result_{k}"])
    arrays = {name: np.asarray(state[f"{name}_{k}"].values) for name in _RESULT_ARRAYS}
    arrays["support"] = arrays["support"].astype(int)
    arrays["relevant"] = arrays["relevant"].astype(bool)
    draws = None
    if f"w_draws_{k}" in state:
        w = np.asarray(state[f"w_draws_{k}"].values)
        draws = {"w": w[None]}
    outside = state.get(f"outside_var_{k}")
    coupling = state.get(f"outside_coupling_{k}")
    latent = None
    if f"latent_V_pinv_{k}" in state:
        latent = {name: np.asarray(state[f"latent_{name}_{k}"].values)
                  for name in ("V_pinv", "mean", "cov")}
        latent["draws"] = None
    prefix, suffix = "trace_", f"_{k}"
    fit = {name[len(prefix):-len(suffix)]: (("iteration",), np.asarray(state[name].values))
           for name in state.data_vars if name.startswith(prefix) and name.endswith(suffix)}
    return FitResult(latent=latent, method=meta["method"], likelihood=meta["likelihood"],
                     basis=tuple(meta["basis"]), beta=meta["beta"], noise_var=meta["noise_var"],
                     stats=meta["stats"], draws=draws, fit=fit,
                     outside_var=None if outside is None else np.asarray(outside.values),
                     outside_coupling=None if coupling is None else np.asarray(coupling.values),
                     **arrays)


def _params_of_format_3(cls, params, path):
    """Format 3's parameters with ``priors`` replaced by ``alpha_shape``, ... (format 4).

    Keys of ``priors`` that ``cls`` has no parameter for (``c`` and ``d`` on
    an :class:`RVC`, where they had no effect) are dropped.
    """
    params = dict(params)
    priors = params.pop("priors", None)
    if priors is None:
        return params
    key_to_name = {key: name for name, key in PRIOR_PARAMS.items()}
    if not isinstance(priors, dict) or not set(priors) <= set(key_to_name):
        raise ValueError(
            f"{path} holds priors={priors!r}, which is not a dict with keys among "
            f"{sorted(key_to_name)}; it cannot be mapped to {list(PRIOR_PARAMS)}."
        )
    names = set(cls().get_params(deep=False))
    for key, value in priors.items():
        if key_to_name[key] in names:
            params[key_to_name[key]] = value
    return params


def _classes(values, dtype, path):
    """``classes_`` as fitted: the stored labels in the stored dtype (files before it: numpy's)."""
    if dtype is None:
        return np.asarray(values)
    try:
        return np.asarray(values, dtype=np.dtype(dtype))
    except (TypeError, ValueError) as err:
        raise ValueError(f"{path} holds the classes {values!r} of dtype {dtype!r}, which do "
                         "not make an array of that dtype.") from err


def _read(path):
    """Read the InferenceData in ``path`` into memory and close the file again.

    A missing path is a ``FileNotFoundError`` (and other errors of the
    operating system stay what they are); a file that HDF5 cannot read
    (not netCDF-4, truncated) is a ``ValueError`` that names it.
    """
    import arviz as az

    try:
        # "eager" makes ArviZ load() each group inside a with block, which closes it.
        with az.rc_context({"data.load": "eager"}):
            return az.from_netcdf(str(path))
    except OSError as err:
        if err.errno is not None:  # FileNotFoundError, PermissionError, ...
            raise
        raise ValueError(f"{path} is not an {_EXPECTED}: {err}") from err


def load(cls, path):
    """Rebuild an estimator of class ``cls`` saved by :func:`save`."""
    idata = _read(path)
    if STATE_GROUP not in idata.groups():
        raise ValueError(f"{path} is not an {_EXPECTED}: it has no {STATE_GROUP!r} group.")
    try:
        return _restore(cls, idata, path)
    except (KeyError, json.JSONDecodeError) as err:
        raise ValueError(f"{path} is not a complete {_EXPECTED}: "
                         f"{type(err).__name__}: {err}") from err


def _restore(cls, idata, path):
    state = idata[STATE_GROUP]
    version = state.attrs.get("format_version")
    if version not in READABLE_FORMATS:
        raise ValueError(
            f"{path} was written in rvm_ppl's file format {version} (rvm_ppl "
            f"{state.attrs.get('rvm_ppl_version', 'unknown')}); this rvm_ppl "
            f"({package_version()}) reads formats {list(READABLE_FORMATS)}. Refit and save again."
        )
    version = int(version)
    if state.attrs["estimator"] != cls.__name__:
        raise ValueError(f"{path} holds a {state.attrs['estimator']}, not a {cls.__name__}.")
    expected = model_id(state.attrs["estimator"], state.attrs["params"], state.attrs["method"],
                        version)
    if state.attrs["model_id"] != expected:
        raise ValueError(f"{path} is damaged: its model_id does not match its contents.")
    missing = sorted(set(json.loads(state.attrs.get("groups", "[]"))) - set(idata.groups()))
    if missing:
        raise ValueError(f"{path} is not a complete {_EXPECTED}: the groups {missing} are "
                         "missing.")
    params = json.loads(state.attrs["params"])
    if not isinstance(params, dict):
        raise ValueError(f"{path} holds the parameters {params!r}; expected a dict.")
    params = {k: _decode_param(v, path) for k, v in params.items()}
    if version == 3:
        params = _params_of_format_3(cls, params, path)
    unknown = sorted(set(params) - set(cls().get_params(deep=False)))
    if unknown:
        raise ValueError(f"{path} gives {cls.__name__} the parameters {unknown}, which it does "
                         "not have.")
    est = cls(**params)
    X = np.asarray(state["X_fit"].values)
    kernel = est._make_kernel(X)
    if "eta" in state:
        est.eta_ = np.asarray(state["eta"].values)
        kernel = _kernels.RBF(gamma=est.eta_)
    est.n_features_in_ = X.shape[1]
    if "feature_names_in" in state.attrs:
        est.feature_names_in_ = np.asarray(json.loads(state.attrs["feature_names_in"]),
                                           dtype=object)
    results = [_restore_result(state, k) for k in range(int(state.attrs["n_results"]))]
    method, n_extra = state.attrs["method"], int(state.attrs["n_extra"])
    dtype = state.attrs.get("dtype", "float64")  # files before it: float64
    if dtype not in ("float32", "float64"):
        raise ValueError(f"{path} holds the dtype {dtype!r}; expected 'float32' or 'float64'.")
    if "classes" in state.attrs:
        classes = _classes(json.loads(state.attrs["classes"]), state.attrs.get("classes_dtype"),
                           path)
        joint = state.get("joint_cov")
        est._store(X, classes, np.asarray(state["y_codes"].values), kernel, n_extra, method,
                   results, joint_cov=None if joint is None else np.asarray(joint.values),
                   dtype=dtype)
    elif "counts_fit" in state:
        est._store(X, np.asarray(state["counts_fit"].values), kernel, n_extra, method,
                   results[0], exposure=np.asarray(state["exposure_fit"].values), dtype=dtype)
    else:
        est._store(X, np.asarray(state["y_fit"].values), kernel, n_extra, method, results[0],
                   dtype=dtype)
    del idata[STATE_GROUP]
    est._idata = idata
    return est
