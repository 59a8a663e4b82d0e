"""Saving and loading estimators: what scikit-learn checks survives, files are data only.

The round trips themselves (identical predictions, format versions) are tested in
test_sklearn.py, test_joints.py and test_contract.py; here: the fitted attributes
scikit-learn checks, the file being closed after loading, the refusal of files that are
not the package's, and of files that name code.
"""

import json
import re
import shutil
import warnings

import h5netcdf
import h5py
import numpy as np
import pandas as pd
import pytest
import xarray as xr

from rvm_ppl import RVC, RVR
from rvm_ppl.estimators import persistence
from rvm_ppl.kernels.kernel import RBF, Kernel


@pytest.fixture(scope="module")
def frame():
    rng = np.random.default_rng(sum(map(ord, "test_persistence")))
    X = rng.normal(size=(30, 2))
    y = X[:, 0] - 2 * X[:, 1] + 0.1 * rng.normal(size=30)
    codes = (X[:, 0] > 0).astype(int) + (X[:, 1] > 0.5)
    labels = np.array(["low", "mid", "high"], dtype=object)[codes]
    return pd.DataFrame(X, columns=["a", "b"]), y, labels


def _fit(kind, frame):
    df, y, labels = frame
    if kind == "RVR":
        return RVR(gamma=0.5).fit(df, y)
    if kind == "RVC binary":
        return RVC(gamma=0.5).fit(df, pd.Series(labels == "low"))
    if kind == "RVC one-vs-rest":
        return RVC(gamma=0.5).fit(df, pd.Series(labels))
    return RVC(gamma=0.5, multi_class="multinomial").fit(df, labels)


def _predictions(est, X):
    if isinstance(est, RVC):
        return est.predict(X), est.predict_proba(X)
    return est.predict(X, return_std=True)


@pytest.mark.parametrize("kind", ["RVR", "RVC binary", "RVC one-vs-rest", "RVC multinomial"])
def test_a_dataframe_fit_keeps_its_feature_names_through_netcdf(tmp_path, frame, kind):
    df = frame[0]
    m = _fit(kind, frame)
    m.to_netcdf(tmp_path / "m.nc")
    back = type(m).from_netcdf(tmp_path / "m.nc")
    np.testing.assert_array_equal(back.feature_names_in_, ["a", "b"])
    assert back.feature_names_in_.dtype == m.feature_names_in_.dtype
    assert back.n_features_in_ == 2
    if isinstance(m, RVC):
        np.testing.assert_array_equal(back.classes_, m.classes_)
        assert back.classes_.dtype == m.classes_.dtype
    with pytest.raises(ValueError, match="Feature names must be in the same order") as original:
        m.predict(df[["b", "a"]])
    with pytest.raises(ValueError, match="Feature names must be in the same order") as loaded:
        back.predict(df[["b", "a"]])
    assert str(loaded.value) == str(original.value)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # e.g. "X has feature names, but ... fitted without"
        for got, want in zip(_predictions(back, df), _predictions(m, df), strict=True):
            np.testing.assert_array_equal(got, want)


def test_a_loaded_model_can_be_saved_over_its_own_file(tmp_path, frame):
    X, y = frame[0].to_numpy(), frame[1]
    m = RVR(gamma=0.5).fit(X, y, method="vb")
    path = tmp_path / "m.nc"
    m.to_netcdf(path)
    back = RVR.from_netcdf(path)
    back.to_netcdf(path)  # the file was read into memory and closed
    again = RVR.from_netcdf(path)
    np.testing.assert_array_equal(again.predict(X, return_std=True),
                                  m.predict(X, return_std=True))
    np.testing.assert_array_equal(again.idata_.posterior.w.values, m.idata_.posterior.w.values)


# -- files that are not the package's ----------------------------------------
@pytest.fixture(scope="module")
def saved_file(tmp_path_factory, frame):
    """One fitted model's file; each test damages its own copy."""
    path = tmp_path_factory.mktemp("saved") / "m.nc"
    RVR(gamma=0.5).fit(frame[0].to_numpy(), frame[1]).to_netcdf(path)
    return path


def _saved(tmp_path, saved_file):
    path = tmp_path / "m.nc"
    shutil.copyfile(saved_file, path)
    return path


def _truncated(path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _random_bytes(path):
    path.write_bytes(np.random.default_rng(0).bytes(4096))


def _plain_xarray(path):
    xr.Dataset({"y": ("obs", [1.0, 2.0])}).to_netcdf(path, engine="h5netcdf")


def _a_group_removed(path):
    with h5py.File(path, "r+") as f:
        del f["relevance"]


def _a_state_variable_removed(path):
    with h5py.File(path, "r+") as f:
        del f["estimator_state/y_fit"]


@pytest.mark.parametrize("damage", [_truncated, _random_bytes, _plain_xarray, _a_group_removed,
                                    _a_state_variable_removed])
def test_a_file_that_is_not_the_packages_is_a_value_error_naming_it(tmp_path, saved_file, damage):
    path = _saved(tmp_path, saved_file)
    damage(path)
    expected = (rf"{re.escape(str(path))} is not (an|a complete) rvm_ppl estimator file "
                rf"written by to_netcdf \(file format 3 or {persistence.FORMAT_VERSION}\)")
    with pytest.raises(ValueError, match=expected):
        RVR.from_netcdf(path)


def test_a_missing_file_stays_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError):
        RVR.from_netcdf(tmp_path / "nothing.nc")


# -- a file is data, never a way to call code --------------------------------
def _with_kernel(path, kernel):
    """Store ``kernel`` (its JSON form) as the saved model's ``kernel`` parameter."""
    with h5netcdf.File(path, "r+") as f:
        attrs = f["estimator_state"].attrs
        params = json.loads(attrs["params"])
        params["kernel"] = kernel
        text = json.dumps(params)
        attrs["params"] = text
        attrs["model_id"] = persistence.model_id("RVR", text, attrs["method"])


@pytest.mark.parametrize(("name", "params"), [
    ("FunctionKernel", {"func": "os.system"}),
    ("make_kernel", {"kernel": "rbf"}),
    ("design_matrix", {"X": [[0.0]], "centres": [[0.0]], "kernel": "rbf"}),
    ("cdist", {"XA": [[0.0]], "XB": [[1.0]]}),
    ("__import__", {"name": "os"}),
    ("os", {}),
    ("Kernel", {}),
])
def test_a_file_naming_anything_but_an_allowed_kernel_is_refused(tmp_path, saved_file, name, params):
    path = _saved(tmp_path, saved_file)
    _with_kernel(path, {"__kernel__": name, "params": params})
    with pytest.raises(ValueError, match=rf"{re.escape(str(path))} names the kernel {name!r}"):
        RVR.from_netcdf(path)
    # Inside an allowed kernel too.
    _with_kernel(path, {"__kernel__": "Sum", "params": {
        "k1": {"__kernel__": "RBF", "params": {"gamma": 0.5}},
        "k2": {"__kernel__": name, "params": params}}})
    with pytest.raises(ValueError, match=rf"{re.escape(str(path))} names the kernel {name!r}"):
        RVR.from_netcdf(path)


@pytest.mark.parametrize(("kernel", "match"), [
    ({"__kernel__": "RBF", "params": {"gamma": 0.5, "func": "os.system"}}, "keys among"),
    ({"__kernel__": "RBF", "params": [0.5]}, "keys among"),
    ({"__kernel__": "RBF", "params": {"gamma": 0.5}, "call": "os.system"}, "keys among"),
    ({"__kernel__": "RBF", "params": {"gamma": {"module": "os"}}}, "RBF.gamma"),
    ({"__kernel__": "RBF", "params": {"gamma": [0.5, {"module": "os"}]}}, "RBF.gamma"),
])
def test_an_allowed_kernel_takes_only_its_parameters_with_plain_values(tmp_path, saved_file, kernel,
                                                                        match):
    path = _saved(tmp_path, saved_file)
    _with_kernel(path, kernel)
    with pytest.raises(ValueError, match=rf"{re.escape(str(path))} .*{re.escape(match)}"):
        RVR.from_netcdf(path)


def test_a_file_giving_the_estimator_a_parameter_it_lacks_is_refused(tmp_path, saved_file):
    path = _saved(tmp_path, saved_file)
    with h5netcdf.File(path, "r+") as f:
        attrs = f["estimator_state"].attrs
        text = json.dumps({**json.loads(attrs["params"]), "exec": "import os"})
        attrs["params"] = text
        attrs["model_id"] = persistence.model_id("RVR", text, attrs["method"])
    with pytest.raises(ValueError, match=r"gives RVR the parameters \['exec'\], which it does not"):
        RVR.from_netcdf(path)


def test_allowed_kernels_with_list_parameters_load(tmp_path, frame):
    X, y = frame[0].to_numpy(), frame[1]
    m = RVR(kernel=RBF(gamma=np.array([0.5, 0.25])) + 1.0).fit(X, y)
    m.to_netcdf(tmp_path / "m.nc")
    back = RVR.from_netcdf(tmp_path / "m.nc")
    assert back.kernel.get_params()["k1__gamma"] == [0.5, 0.25]
    assert back.kernel.get_params()["k2__value"] == 1.0
    np.testing.assert_array_equal(back.predict(X, return_std=True), m.predict(X, return_std=True))


def test_a_kernel_class_of_ones_own_needs_pickle(tmp_path, frame):
    class Cosine(Kernel):
        def _k(self, X, Y):
            return np.cos(X @ Y.T)

    m = RVR(kernel=Cosine()).fit(frame[0].to_numpy(), frame[1])
    with pytest.raises(TypeError, match="Cosine cannot be written to netCDF.*use pickle"):
        m.to_netcdf(tmp_path / "m.nc")
