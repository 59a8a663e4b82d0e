"""ArviZ's Numba ufunc, compiled once per installation instead of once per process.

``arviz.stats.ecdf_utils`` declares ``_binom_pmf`` with ``numba.vectorize``
and an explicit signature, so Numba compiles it while the module is imported:
in every process that imports PyMC (which imports ArviZ), whether or not an
ECDF is ever drawn. :func:`install` asks Numba to keep that machine code on
disk instead: while that one module is imported, ``numba.vectorize`` with
signatures gets ``cache=True``, and Numba's own cache (beside ArviZ's source
or in Numba's user-wide cache directory, as ``NUMBA_CACHE_DIR`` says) keeps
the ufunc. Later processes load it. The ufunc is the one Numba compiles,
byte for byte; where Numba has nowhere to write it, or its ``vectorize``
takes no ``cache``, it is compiled as before. The module and its ufunc
(``_binom_pmf``) are ArviZ's private code: where ArviZ has no such module, the
hook finds nothing to wrap and ArviZ is imported as it is.
Nothing changes for a process that imported ArviZ before this package. The
documentation's Benchmarks page ("ADVI and NUTS as a user meets them") has
the time it saves.
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys

MODULE = "arviz.stats.ecdf_utils"


def install():
    """Have the first import of :data:`MODULE` keep its Numba ufuncs on disk (once per process)."""
    if MODULE not in sys.modules and not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())


class _Finder(importlib.abc.MetaPathFinder):
    """Finds :data:`MODULE` as the path finder does, and wraps its loader."""

    def find_spec(self, name, path, target=None):
        if name != MODULE:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path, target)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader)
        return spec


class _Loader(importlib.abc.Loader):
    """The module's own loader, run with :func:`_cached_vectorize` as ``numba.vectorize``."""

    def __init__(self, loader):
        self.loader = loader

    def __getattr__(self, name):  # get_source, get_filename, ...: the source loader's
        return getattr(self.loader, name)

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        try:
            import numba
        except ImportError:  # ArviZ then defines plain Python functions
            return self.loader.exec_module(module)
        plain = numba.vectorize
        numba.vectorize = _cached_vectorize(plain)
        try:
            self.loader.exec_module(module)
        finally:
            numba.vectorize = plain


def _cached_vectorize(plain):
    """``numba.vectorize`` that caches eager (signature-given) ufuncs where Numba can."""

    def vectorize(*args, **kwargs):
        if not args or callable(args[0]) or "cache" in kwargs:
            return plain(*args, **kwargs)

        def decorate(func):
            try:
                return plain(*args, cache=True, **kwargs)(func)
            except Exception:  # noqa: BLE001 - no writable cache location, no ``cache``, ...
                return plain(*args, **kwargs)(func)  # as ArviZ asks: its own errors, if any

        return decorate

    return vectorize
