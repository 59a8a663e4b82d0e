"""nutpie's C callbacks without the error paths that Numba compiles in every process, kept on disk.

nutpie samples a PyMC model through two Numba C callbacks, one for the log
density and gradient and one for the variables the trace keeps. Each calls
PyTensor's compiled function, which PyTensor caches on disk; nutpie compiles
the callbacks themselves in every process, and with them, again, the machine
code of PyTensor's function that they call (Numba links the callee into the
callback and optimises the two together): most of the compile time of a new
process's first NUTS fit (docs/benchmarks.md, "ADVI and NUTS as a user meets
them").

The callbacks here differ from nutpie's in two ways:

- **No error paths with messages.** nutpie copies the gradient with
  ``out[...] = grad`` and rebuilds every data array with ``reshape``; both
  have an error path that formats a message with the arrays' shapes, for
  which Numba compiles its string formatting. Here each data array is viewed
  at its shape directly (``numba.carray``) and the results are copied element
  by element.
- **Kept on disk.** Each callback is made from a module-level template with
  its constants as globals (no closure), and Numba's cache keeps its machine
  code under a key of everything that code depends on (:func:`_cache_key`):
  the template's source, the number of free and expanded variables, the
  data's names, types and dimensions as the extraction reads them, PyTensor's
  own cache key of the function it calls, and the versions of nutpie, Numba
  and the package. A later process with the same key loads the machine code
  instead of compiling it. Where PyTensor does not cache the function called
  (its key is None), the callbacks are compiled as before and not kept.

They call PyTensor's function with the same arguments, so a model samples the
same draws, bit for bit, with these callbacks as with nutpie's, compiled now
or loaded (``tests/test_callbacks.py``). They replace nutpie's
(``nutpie.compile_pymc``'s ``_make_c_logp_func`` and ``_make_c_expand_func``,
with their own version of its ``make_extraction_fn``) only while
:func:`compile_pymc_model` compiles.
nutpie versions whose compile module has other names, or whose
``_make_c_*`` take other arguments, are compiled with nutpie's own
callbacks, and not kept. Keeping them needs a locator in Numba's private
cache classes (``numba.core.caching._CacheLocator``,
``CacheImpl._locator_classes``) and PyTensor's key of its function
(``pytensor.link.numba.cache``); where either is missing, the callbacks are
this module's, compiled in each process and not kept.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import inspect
import os
import threading
import types
import weakref
from contextlib import contextmanager

import numpy as np

# nutpie's functions replaced, with the arguments the replacements take.
_REPLACED = {
    "_make_c_logp_func": ("n_dim", "logp_fn", "user_data", "shared_logp", "shared_data"),
    "_make_c_expand_func": ("n_dim", "n_expanded", "expand_fn", "user_data", "shared_vars",
                            "shared_data"),
}
_LOCK = threading.Lock()
_CACHED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # callback -> (folder, key)


class _NotCacheable(Exception):
    """A callback calls a function PyTensor does not cache: compile without keeping."""


def compile_pymc_model(model, cache_dir=None, **kwargs):
    """``nutpie.compile_pymc_model(model, **kwargs)`` with the callbacks of this module.

    Parameters
    ----------
    model : pymc.Model
    cache_dir : str, optional
        The folder where the callbacks' machine code is kept across processes
        (None: compiled, not kept). Used with nutpie's Numba backend only.
    **kwargs
        Passed to ``nutpie.compile_pymc_model``.

    Returns
    -------
    nutpie.compile_pymc.CompiledPyMCModel
    """
    import nutpie

    if (kwargs.get("backend", "numba") != "numba" or not _writable(cache_dir)
            or _locator_class() is None):
        cache_dir = None
    if cache_dir is not None:
        made = []
        try:
            with _callbacks(cache_dir, made) as replaced:
                if replaced:
                    return nutpie.compile_pymc_model(model, cache=True, **kwargs)
        except _NotCacheable:
            pass
        except Exception:  # noqa: BLE001 - a damaged entry, say: drop it, compile afresh
            _forget(cache_dir, made)
    with _callbacks(None, []):
        return nutpie.compile_pymc_model(model, **kwargs)


def _forget(folder, keys):
    """Remove Numba's cache files of the callbacks kept under ``keys``."""
    for name in os.listdir(folder):
        if any(key in name for key in keys):
            with contextlib.suppress(OSError):
                os.remove(os.path.join(folder, name))


def _writable(folder):
    if folder is None:
        return False
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError:
        return False
    return os.access(folder, os.W_OK)


@contextmanager
def _callbacks(cache_dir, made):
    """nutpie's callbacks replaced by this module's; yields whether they were.

    The keys under which callbacks are registered for Numba's cache are appended to ``made``.
    """
    import nutpie.compile_pymc as cp

    if not _replaceable(cp):
        yield False
        return
    with _LOCK:
        saved = {name: getattr(cp, name) for name in _REPLACED}
        cp._make_c_logp_func = functools.partial(_logp_callback, cache_dir, made)
        cp._make_c_expand_func = functools.partial(_expand_callback, cache_dir, made)
        try:
            yield True
        finally:
            for name, fn in saved.items():
                setattr(cp, name, fn)


def _replaceable(cp):
    """Whether nutpie's compile module ``cp`` has the functions replaced, as this module calls them."""
    if not callable(getattr(cp, "address_as_void_pointer", None)):  # used by _extraction
        return False
    for name, arguments in _REPLACED.items():
        try:
            parameters = inspect.signature(getattr(cp, name)).parameters
        except (AttributeError, TypeError, ValueError):
            return False
        if tuple(parameters) != arguments:
            return False
    return True


def _extraction(inner, names, shared_data, record_dtype):
    """nutpie's ``make_extraction_fn``: ``extract(x, user_data) = inner(x, *data arrays)``.

    ``user_data`` is nutpie's record of each data array's address and shape
    (``nutpie.compile_pymc.make_user_data``, updated by ``with_data``); each
    array is viewed at its shape with ``numba.carray``, without ``reshape``.
    Returns the jitted ``extract``, its source and the dtypes it refers to
    (what :func:`_cache_key` hashes).
    """
    import numba
    import nutpie.compile_pymc as cp

    lines = ["def extract(x, user_data):"]
    if names:
        lines.append("    s = numba.carray(user_data, (), record)['shared']")
    dtypes = {}
    for i, name in enumerate(names):
        dtypes[f"dtype{i}"] = shared_data[name].dtype
        shape = "".join(f"int(s['shape'][{name!r}][{k}]), " for k in range(shared_data[name].ndim))
        lines.append(f"    a{i} = numba.carray(pointer(s['data'][{name!r}][()]), "
                     f"({shape}), dtype{i})")
    lines.append("    return inner(x" + "".join(f", a{i}" for i in range(len(names))) + ")")
    source = "\n".join(lines)
    namespace = {"numba": numba, "inner": inner, "record": record_dtype,
                 "pointer": cp.address_as_void_pointer, **dtypes}
    exec(source, namespace)  # noqa: S102 - generated from the names above only
    return numba.njit(inline="always")(namespace["extract"]), source, dtypes


def _logp_template(dim, x_, out_, logp_, user_data_):
    # The log density callback; N_DIM and extract are the globals it is made with (_made).
    if dim != N_DIM:  # noqa: F821
        return -1
    try:
        x = numba.carray(x_, (N_DIM,))  # noqa: F821
        out = numba.carray(out_, (N_DIM,))  # noqa: F821
        logp = numba.carray(logp_, (1,))  # noqa: F821
        logp_val, grad = extract(x, user_data_)  # noqa: F821
        logp[0] = logp_val
        finite = True
        for i in range(N_DIM):  # noqa: F821
            out[i] = grad[i]
            finite = finite and np.isfinite(grad[i])
        if not finite:
            return 3
        if not np.isfinite(logp_val):
            return 4
    except Exception:  # noqa: BLE001 - a C callback returns a code, as nutpie's does
        return 1
    return 0


def _expand_template(dim, expanded, x_, out_, user_data_):
    # The expansion callback; N_DIM, N_EXPANDED and extract are its globals (_made).
    if dim != N_DIM or expanded != N_EXPANDED:  # noqa: F821
        return -1
    try:
        x = numba.carray(x_, (N_DIM,))  # noqa: F821
        out = numba.carray(out_, (N_EXPANDED,))  # noqa: F821
        (values,) = extract(x, user_data_)  # noqa: F821
        for i in range(N_EXPANDED):  # noqa: F821
            out[i] = values[i]
    except Exception:  # noqa: BLE001
        return -2
    return 0


def _logp_callback(cache_dir, made, n_dim, logp_fn, user_data, shared_logp, shared_data):
    """nutpie's ``_make_c_logp_func``: the log density and gradient, as a C callback.

    Returns 0, or nutpie's codes: -1 for a wrong dimension, 1 when the
    function raised, 3 for a non-finite gradient, 4 for a non-finite log density.
    """
    import numba

    sig = numba.types.int64(numba.types.uint64, numba.types.CPointer(numba.types.double),
                            numba.types.CPointer(numba.types.double),
                            numba.types.CPointer(numba.types.double), numba.types.voidptr)
    fn = _made(_logp_template, cache_dir, made, logp_fn, user_data, shared_logp, shared_data,
               N_DIM=n_dim)
    return fn, sig


def _expand_callback(cache_dir, made, n_dim, n_expanded, expand_fn, user_data, shared_vars,
                     shared_data):
    """nutpie's ``_make_c_expand_func``: the trace's variables at a point, as a C callback."""
    import numba

    sig = numba.types.int64(numba.types.uint64, numba.types.uint64,
                            numba.types.CPointer(numba.types.double),
                            numba.types.CPointer(numba.types.double), numba.types.voidptr)
    fn = _made(_expand_template, cache_dir, made, expand_fn, user_data, shared_vars, shared_data,
               N_DIM=n_dim, N_EXPANDED=n_expanded)
    return fn, sig


def _made(template, cache_dir, made, inner, user_data, shared_names, shared_data, **constants):
    """``template`` as a function of its own globals: ``extract`` of ``inner``, and ``constants``.

    With a ``cache_dir``, the function is registered for Numba's cache under
    :func:`_cache_key`, which is appended to ``made`` (raises
    :class:`_NotCacheable` when PyTensor keeps no key for ``inner``).
    """
    import numba

    extract, source, dtypes = _extraction(inner, list(shared_names), shared_data, user_data.dtype)
    # __name__: Numba rebuilds a loaded function's environment from the module of that name.
    env = {"__name__": __name__, "np": np, "numba": numba, "extract": extract, **constants}
    fn = types.FunctionType(template.__code__, env, template.__name__)
    if cache_dir is not None:
        key = _cache_key(template, inner, user_data.dtype, source, dtypes, constants)
        if key is None:
            raise _NotCacheable(template.__name__)
        _locator_class()
        _CACHED[fn] = (cache_dir, key)
        made.append(key)
    return fn


def _cache_key(template, inner, record_dtype, source, dtypes, constants):
    """A hash of everything a callback's machine code depends on; None if PyTensor keeps no key.

    The callback is ``template`` with ``constants`` and ``extract`` (its
    ``source`` and the ``dtypes`` it refers to, written for the data's names
    and dimensions, and the record layout of nutpie's user data) calling
    ``inner``, PyTensor's function, which PyTensor's Numba cache identifies
    by its own key.
    """
    inner_key = _pytensor_key(inner)
    if inner_key is None:
        return None
    from rvm_ppl.output.idata import package_version

    parts = (inspect.getsource(template), sorted(constants.items()), source,
             sorted((k, str(v)) for k, v in dtypes.items()), str(record_dtype.descr), inner_key,
             *(package_version(p) for p in ("rvm_ppl", "nutpie", "numba", "pytensor")))
    return hashlib.sha256(repr(parts).encode()).hexdigest()


def _pytensor_key(jitted):
    """PyTensor's Numba cache key of its compiled function ``jitted``, or None if it keeps none."""
    try:
        from pytensor.link.numba.cache import CACHED_SRC_FUNCTIONS
    except ImportError:  # a PyTensor that keeps no Numba cache of its own
        return None
    return CACHED_SRC_FUNCTIONS.get(getattr(jitted, "py_func", None))


@functools.cache
def _locator_class():
    """Numba's cache locator for this module's callbacks, registered before Numba's own.

    None where Numba has no private ``_CacheLocator`` and
    ``CacheImpl._locator_classes`` to register it in (callbacks are then not kept).
    """
    try:
        from numba.core.caching import CacheImpl, _CacheLocator

        locators = CacheImpl._locator_classes
    except (ImportError, AttributeError):
        return None

    class CallbackCacheLocator(_CacheLocator):
        """The folder and key :func:`_made` registered for a callback."""

        def __init__(self, folder, key):
            self._folder, self._key = folder, key

        def get_cache_path(self):
            return self._folder

        def get_source_stamp(self):
            return 0  # the key covers the source

        def get_disambiguator(self):
            return self._key

        @classmethod
        def from_function(cls, py_func, py_file):
            entry = _CACHED.get(py_func)
            return None if entry is None else cls(*entry)

    locators.insert(0, CallbackCacheLocator)
    return CallbackCacheLocator
