"""nutpie's C callbacks without the error paths that Numba compiles in every process.

nutpie samples a PyMC model through two Numba C callbacks, one for the log
density and gradient and one for the variables the trace keeps. Each calls
PyTensor's compiled function, which PyTensor caches on disk, but the
callbacks themselves are compiled in every process. Two lines of nutpie's
callbacks make that compilation slow: the gradient is copied with
``out[...] = grad`` and every data array is rebuilt with ``reshape``, and
both have an error path that formats a message with the arrays' shapes,
for which Numba compiles its string formatting (``str`` of integers and
tuples, concatenation) in every new process. On the sinc model that is
more than half of the callbacks' compile time.

The callbacks here compute the same values without those paths: each data
array is viewed at its shape directly (``numba.carray``) and the results
are copied element by element. They call PyTensor's function with the same
arguments, so a model samples the same draws, bit for bit, with these
callbacks as with nutpie's (``tests/test_callbacks.py``).

They replace nutpie's (``nutpie.compile_pymc``'s ``make_extraction_fn``,
``_make_c_logp_func`` and ``_make_c_expand_func``) only while
:func:`compile_pymc_model` compiles. nutpie versions whose compile module
has other names are compiled with nutpie's own callbacks.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager

import numpy as np

_REPLACED = ("make_extraction_fn", "_make_c_logp_func", "_make_c_expand_func")
_LOCK = threading.Lock()


def compile_pymc_model(model, **kwargs):
    """``nutpie.compile_pymc_model(model, **kwargs)`` with the callbacks of this module.

    Parameters
    ----------
    model : pymc.Model
    **kwargs
        Passed to ``nutpie.compile_pymc_model``.

    Returns
    -------
    nutpie.compile_pymc.CompiledPyMCModel
    """
    import nutpie

    with _callbacks():
        return nutpie.compile_pymc_model(model, **kwargs)


@contextmanager
def _callbacks():
    import nutpie.compile_pymc as cp

    if not all(callable(getattr(cp, name, None)) for name in _REPLACED):
        yield
        return
    with _LOCK:
        saved = {name: getattr(cp, name) for name in _REPLACED}
        cp.make_extraction_fn = _extraction(cp.address_as_void_pointer)
        cp._make_c_logp_func = _logp_callback
        cp._make_c_expand_func = _expand_callback
        try:
            yield
        finally:
            for name, fn in saved.items():
                setattr(cp, name, fn)


def _extraction(address_as_pointer):
    """nutpie's ``make_extraction_fn``: ``extract(x, user_data) = inner(x, *data arrays)``.

    ``user_data`` is nutpie's record of each data array's address and shape
    (``nutpie.compile_pymc.make_user_data``, updated by ``with_data``); each
    array is viewed at its shape with ``numba.carray``, without ``reshape``.
    """
    import numba

    def make_extraction_fn(inner, shared_data, shared_vars, record_dtype):
        names = list(shared_vars)
        namespace = {"numba": numba, "inner": inner, "record": record_dtype,
                     "pointer": address_as_pointer}
        lines = ["def extract(x, user_data):"]
        if names:
            lines.append("    s = numba.carray(user_data, (), record)['shared']")
        for i, name in enumerate(names):
            namespace[f"dtype{i}"] = shared_data[name].dtype
            shape = "".join(f"int(s['shape'][{name!r}][{k}]), "
                            for k in range(shared_data[name].ndim))
            lines.append(f"    a{i} = numba.carray(pointer(s['data'][{name!r}][()]), "
                         f"({shape}), dtype{i})")
        lines.append("    return inner(x" + "".join(f", a{i}" for i in range(len(names))) + ")")
        exec("\n".join(lines), namespace)  # noqa: S102 - generated from the names above only
        return numba.njit(inline="always")(namespace["extract"])

    return make_extraction_fn


def _logp_callback(n_dim, logp_fn, user_data, shared_logp, shared_data):
    """nutpie's ``_make_c_logp_func``: the log density and gradient, as a C callback.

    Returns 0, or nutpie's codes: -1 for a wrong dimension, 1 when the
    function raised, 3 for a non-finite gradient, 4 for a non-finite log density.
    """
    import numba
    import nutpie.compile_pymc as cp

    extract = cp.make_extraction_fn(logp_fn, shared_data, shared_logp, user_data.dtype)
    c_sig = numba.types.int64(numba.types.uint64, numba.types.CPointer(numba.types.double),
                              numba.types.CPointer(numba.types.double),
                              numba.types.CPointer(numba.types.double), numba.types.voidptr)

    def logp_callback(dim, x_, out_, logp_, user_data_):
        if dim != n_dim:
            return -1
        try:
            x = numba.carray(x_, (n_dim,))
            out = numba.carray(out_, (n_dim,))
            logp = numba.carray(logp_, (1,))
            logp_val, grad = extract(x, user_data_)
            logp[0] = logp_val
            finite = True
            for i in range(n_dim):
                out[i] = grad[i]
                finite = finite and np.isfinite(grad[i])
            if not finite:
                return 3
            if not np.isfinite(logp_val):
                return 4
        except Exception:  # noqa: BLE001 - a C callback returns a code, as nutpie's does
            return 1
        return 0

    return logp_callback, c_sig


def _expand_callback(n_dim, n_expanded, expand_fn, user_data, shared_vars, shared_data):
    """nutpie's ``_make_c_expand_func``: the trace's variables at a point, as a C callback."""
    import numba
    import nutpie.compile_pymc as cp

    extract = cp.make_extraction_fn(expand_fn, shared_data, shared_vars, user_data.dtype)
    c_sig = numba.types.int64(numba.types.uint64, numba.types.uint64,
                              numba.types.CPointer(numba.types.double),
                              numba.types.CPointer(numba.types.double), numba.types.voidptr)

    def expand_callback(dim, expanded, x_, out_, user_data_):
        if dim != n_dim or expanded != n_expanded:
            return -1
        try:
            x = numba.carray(x_, (n_dim,))
            out = numba.carray(out_, (n_expanded,))
            (values,) = extract(x, user_data_)
            for i in range(n_expanded):
                out[i] = values[i]
        except Exception:  # noqa: BLE001
            return -2
        return 0

    return expand_callback, c_sig
