"""Compile once, fit many: compiled models and functions, reused across fits of one structure.

``pm.sample(nuts_sampler="nutpie")`` compiles the model's log density and
gradient to machine code (PyTensor's NUMBA backend, then a Numba C
callback) in every call, even when the model has the structure and the
shapes of the last one, and so did ``pm.fit`` for ADVI: in a warm process
that compilation costs far more than fitting a small model. Here what was
compiled (nutpie's compiled model; ADVI's log density, gradient and
expansion functions, :func:`compiled_functions`) is kept, in this process,
under a fingerprint of what the machine code depends on:

- the graph of the log density and of the variables the sampler returns
  (every operation with its properties, how the operations are wired, the
  value of every constant, inner graphs included);
- the name, type and shape of every data variable (``pm.Data``), whose
  values the compiled code takes as input, and the value of every other
  shared variable;
- the model's coordinates and initial values, the variables kept in the
  trace, and the compile settings.

A model with the fingerprint of a kept one runs the kept machine code
with its own data (nutpie's ``with_data``; the data are inputs of the
functions): the same code, hence the same numbers, as compiling it afresh,
so results never depend on what the process fitted before. A model whose
graph holds an operation that cannot be compared (no declared properties and
attributes other than plain values) is compiled afresh every time. The store
keeps the :data:`MAX_KEPT` most recently used compiled models and functions.
Across processes PyTensor's own on-disk cache (``pytensor.config.compiledir``)
keeps the machine code of each operation and of each compiled function. The
function sets of :func:`compiled_functions` (ADVI's, and the log densities of
:mod:`rvm_ppl.pymc_fitters.truncation`) are also kept on disk, in
:func:`store_directory`, one file per fingerprint and library versions: a new
process unpickles PyTensor's function with its rewritten graph and links it
again, which skips the rewriting (about a second for ADVI on noisy sinc) and
computes what a fresh compilation computes. The files hold no data (they are
written before the first call); a file that cannot be read, or a set that
cannot be pickled, means compiling afresh. nutpie's C callbacks are the
package's (:mod:`rvm_ppl.pymc_fitters.callbacks`), whose machine code Numba
keeps in the same folder, under a key of everything it depends on: a new
process loads them instead of compiling them.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import tempfile
import types
from collections import OrderedDict

import numpy as np

from rvm_ppl.output.idata import package_version
from rvm_ppl.pymc_fitters.callbacks import compile_pymc_model

MAX_KEPT = 8  # compiled models (and function sets) kept per process, least recently used dropped

_KEPT: OrderedDict[str, object] = OrderedDict()
_COUNTS = {"compiled": 0, "reused": 0, "loaded": 0}
_PLAIN = (int, float, str, bool, bytes, type(None), np.dtype, np.generic)


class _NotComparable(Exception):
    """An operation whose identity the fingerprint cannot capture."""


def _plain(value, depth=0):
    """Return a stable text for an operation's property, or raise ``_NotComparable``."""
    if isinstance(value, np.ndarray):
        return f"array{value.dtype}{value.shape}:{hashlib.sha256(value.tobytes()).hexdigest()}"
    if isinstance(value, (tuple, list)):
        return "(" + ",".join(_plain(v, depth) for v in value) + ")"
    if isinstance(value, slice):  # a Subtensor's index list
        return "slice" + _plain((value.start, value.stop, value.step), depth)
    if isinstance(value, dict):
        return "{" + ",".join(f"{_plain(k, depth)}:{_plain(v, depth)}"
                              for k, v in sorted(value.items(), key=lambda kv: repr(kv[0]))) + "}"
    if isinstance(value, _PLAIN):
        return repr(value)
    if isinstance(value, (types.FunctionType, types.BuiltinFunctionType, type)):
        return f"{value.__module__}.{value.__qualname__}"
    name = type(value).__qualname__
    props = getattr(value, "__props__", None)  # a scalar op inside an Elemwise, a type, ...
    if props is not None:
        return name + _plain(tuple(getattr(value, p) for p in props), depth + 1)
    if depth < 2 and hasattr(value, "__dict__"):  # plain attributes only, e.g. a scalar op
        return name + _plain(dict(vars(value)), depth + 1)
    raise _NotComparable(name)


def _graph(outputs, data_names, h):
    """Feed the graph of ``outputs`` to the hash ``h``; raise ``_NotComparable`` if it cannot."""
    from pytensor.compile.builders import OpFromGraph
    from pytensor.compile.sharedvalue import SharedVariable
    from pytensor.graph.basic import Constant
    from pytensor.graph.traversal import graph_inputs, io_toposort

    ids = {}

    def ref(v):
        if v not in ids:
            if isinstance(v, Constant):
                token = ("constant", str(v.type), _plain(np.asarray(v.data)))
            elif isinstance(v, SharedVariable):
                value = np.asarray(v.get_value(borrow=True))
                if v.name in data_names:  # the compiled code takes its value as input
                    token = ("data", v.name, str(v.type), value.shape)
                else:
                    token = ("shared", v.name, str(v.type), _plain(value))
            else:
                token = ("input", v.name, str(v.type))
            ids[v] = len(ids)
            h.update(repr(token).encode())
        return ids[v]

    inputs = list(graph_inputs(outputs))
    for node in io_toposort(inputs, outputs):
        op = node.op
        if isinstance(op, OpFromGraph):
            h.update(f"inner graph {type(op).__qualname__} inline={op.is_inline}".encode())
            _graph(op.inner_outputs, data_names, h)
            props = ""
        elif getattr(op, "__props__", None) is not None:
            props = _plain(tuple(getattr(op, p) for p in op.__props__))
        else:
            props = _plain(dict(vars(op)), 1)
        h.update(repr((type(op).__module__, type(op).__qualname__, props,
                       [ref(i) for i in node.inputs])).encode())
        for out in node.outputs:
            ids[out] = len(ids)
            h.update(repr(("output", str(out.type))).encode())
    h.update(repr(("outputs", [ref(o) for o in outputs])).encode())


def fingerprint(model, var_names, settings, logp=None):
    """Hash what the compiled code of ``model`` depends on; None if it cannot be compared.

    Parameters
    ----------
    model : pymc.Model
        The model nutpie compiles (already on the sampler's scale).
    var_names : list of str or None
        The variables kept in the trace.
    settings : dict
        The compile settings (backend, PyTensor flags, ...), plain values.
    logp : TensorVariable, optional
        ``model.logp()``, where the caller has it already.
    """
    import pytensor

    data_names = {v.name for v in model.data_vars}
    h = hashlib.sha256()
    try:
        _graph([model.logp() if logp is None else logp, *model.unobserved_value_vars],
               data_names, h)
        h.update(_plain({
            "coords": {k: list(v) if v is not None else None for k, v in model.coords.items()},
            "dims": {k: tuple(v) for k, v in model.named_vars_to_dims.items()},
            "initvals": {rv.name: _plain(v) for rv, v in model.rvs_to_initial_values.items()},
            "var_names": None if var_names is None else list(var_names),
            "settings": settings,
            "numba_fastmath": bool(pytensor.config.numba__fastmath),
        }).encode())
    except _NotComparable:
        return None
    return h.hexdigest()


def compiled_nutpie(model, var_names=None, **compile_kwargs):
    """Return nutpie's compiled ``model``: a kept one with this model's data, or a new one.

    Parameters
    ----------
    model : pymc.Model
    var_names : list of str, optional
        The variables kept in the trace (``nutpie.compile_pymc_model``'s ``var_names``).
    **compile_kwargs
        ``backend``, ``gradient_backend``.

    Returns
    -------
    nutpie.compile_pymc.CompiledPyMCModel
    """
    import nutpie

    key = fingerprint(model, var_names, {"nutpie": nutpie.__version__, **compile_kwargs})
    kept = _kept(key)
    if kept is not None:
        data = {v.name: v.get_value() for v in model.data_vars if v.name in kept.shared_data}
        return kept.with_data(**data)
    return _keep(key, compile_pymc_model(model, cache_dir=store_directory(), var_names=var_names,
                                         **compile_kwargs))


def compiled_functions(model, what, build, var_names=None, settings=None):
    """Return ``build(model, logp)``, or the one kept for a model of this fingerprint.

    ``build`` compiles functions that take the model's data (``pm.Data``) as
    inputs, so a kept set serves any model of the same fingerprint: the
    caller passes that model's data (:func:`data_values`).

    Parameters
    ----------
    model : pymc.Model
    what : str
        Which functions (part of the fingerprint, e.g. ``"advi"``).
    build : callable
        ``build(model, logp)``: the compiled functions; ``logp`` is
        ``model.logp()``, the graph the fingerprint hashed (built once).
    var_names : list of str, optional
        The variables the functions return, as for :func:`fingerprint`.
    settings : dict, optional
        Compile settings, plain values.
    """
    logp = model.logp()
    key = fingerprint(model, var_names, {"what": what, **(settings or {})}, logp=logp)
    kept = _kept(key)
    if kept is not None:
        return kept
    stored = _load(key)
    if stored is not None:
        _COUNTS["loaded"] += 1
        _KEPT[key] = stored
        return stored
    return _keep(key, _store(key, build(model, logp)))


def data_values(model, names):
    """The values of the model's data variables ``names``, in that order, as their types hold them."""
    return [np.asarray(model[name].get_value(borrow=True), dtype=model[name].dtype, order="C")
            for name in names]


def store_directory():
    """Where compiled function sets are kept across processes: ``rvm_ppl`` in PyTensor's compiledir.

    ``pytensor.config.compiledir`` is already specific to the platform, the
    Python version and PyTensor's settings; the file names add the versions
    of the libraries the functions depend on and the fingerprint.
    """
    import pytensor

    return os.path.join(pytensor.config.compiledir, "rvm_ppl")


def _path(key):
    versions = tuple(package_version(p) for p in ("rvm_ppl", "pytensor", "pymc", "numba", "numpy"))
    tag = hashlib.sha256(repr((key, versions)).encode()).hexdigest()[:32]
    return os.path.join(store_directory(), f"functions-{tag}.pkl")


def _load(key):
    """The function set stored under ``key`` by an earlier process, or None.

    What is stored is PyTensor's compiled function with its rewritten graph:
    unpickled, it is linked again (the machine code comes from the caches of
    PyTensor and Numba) without rewriting the graph, and computes what a
    fresh compilation computes. A file that cannot be read is ignored.
    """
    if key is None:
        return None
    path = _path(key)
    try:
        with open(path, "rb") as f:
            return pickle.load(f)  # noqa: S301 - written by _store, in PyTensor's compiledir
    except Exception:  # noqa: BLE001 - none, or a stale or damaged file: compile afresh
        return None


def _store(key, compiled):
    """Write ``compiled`` under ``key`` (atomically) for later processes; return it.

    Stored before its first call, so it holds no data. A set whose graph
    cannot be pickled (an operation defined inside a function) is not stored.
    """
    if key is None:
        return compiled
    path, tmp = _path(key), None
    try:
        blob = pickle.dumps(compiled, protocol=pickle.HIGHEST_PROTOCOL)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(blob)
        os.replace(tmp, path)  # readers see the whole file or none
    except Exception:  # noqa: BLE001 - not storable, or no writable directory: keep it in memory
        if tmp is not None and os.path.exists(tmp):
            os.remove(tmp)
    return compiled


def _kept(key):
    """What is kept under ``key`` (counted as reused), else None."""
    if key is None or key not in _KEPT:
        return None
    _KEPT.move_to_end(key)
    _COUNTS["reused"] += 1
    return _KEPT[key]


def _keep(key, compiled):
    """Count and keep ``compiled`` under ``key`` (None: comparable to nothing, not kept)."""
    _COUNTS["compiled"] += 1
    if key is not None:
        _KEPT[key] = compiled
        while len(_KEPT) > MAX_KEPT:
            _KEPT.popitem(last=False)
    return compiled


def compile_counts():
    """How many models (or function sets) this process compiled, and how many fits reused one."""
    return dict(_COUNTS)


def clear():
    """Forget every kept compiled model."""
    _KEPT.clear()
