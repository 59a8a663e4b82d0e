"""The inverse of a lower-triangular matrix as a PyTensor op (LAPACK ``dtrtri``).

``solve_triangular(L, I)`` treats the identity as a dense right-hand side:
``M^3`` flops. ``dtrtri`` skips the known zeros: ``M^3 / 3`` (timed in the
documentation's Defaults and why page, section "The PyMC model"). The op runs
``scipy.linalg.lapack.dtrtri`` in PyTensor's Python and C backends and calls
the same LAPACK routine from compiled code in its Numba backend, through
PyTensor's own (private) LAPACK helpers and cached function pointers. Where
PyTensor has no such helpers (other releases lay them out differently), the
Numba backend runs :func:`_substitution_inverse` instead: the same ``M^3 / 3``
flops by column-wise forward substitution in plain compiled loops, equal to
``dtrtri``'s result to rounding (``tests/test_model_lowrank.py``).

Importing this module imports PyTensor and Numba.
"""

from __future__ import annotations

import numpy as np
import pytensor.tensor as pt
from pytensor.graph.basic import Apply
from pytensor.graph.op import Op
from scipy.linalg import lapack


class LowerTriangularInverse(Op):
    """``L^{-1}`` of a lower-triangular float64 matrix ``L`` (upper triangle ignored, output's zero).

    A singular ``L`` gives a matrix of NaN, as PyTensor's ``SolveTriangular``
    does in its Numba backend. Not differentiable: it serves analytic
    gradients.
    """

    __props__ = ()

    def make_node(self, L):
        L = pt.as_tensor_variable(L)
        if L.ndim != 2 or L.dtype != "float64":
            raise TypeError(f"LowerTriangularInverse needs a float64 matrix; got {L.type}.")
        return Apply(self, [L], [L.type()])

    def perform(self, node, inputs, outputs):
        inv, info = lapack.dtrtri(inputs[0], lower=1)
        outputs[0][0] = np.tril(inv) if info == 0 else np.full_like(inv, np.nan)

    def infer_shape(self, fgraph, node, shapes):
        return [shapes[0]]


lower_triangular_inverse = LowerTriangularInverse()


def _lapack_funcify():
    """The Numba backend's ``dtrtri`` through PyTensor's private LAPACK helpers.

    Returns the function that makes the op's compiled code and the register
    that keeps it in PyTensor's cache; raises ImportError or AttributeError
    where PyTensor lays its Numba backend out otherwise.
    """
    import numba
    from numba.core import types
    from numba.core.extending import get_cython_function_address
    from pytensor.link.numba.cache import _call_cached_ptr
    from pytensor.link.numba.dispatch import basic as numba_basic
    from pytensor.link.numba.dispatch.linalg._LAPACK import (
        int_ptr_to_val,
        nb_f64p,
        nb_i32p,
        val_to_int_ptr,
    )

    register = numba_basic.register_funcify_default_op_cache_key
    trtri_type = types.FunctionType(types.void(nb_i32p, nb_i32p, nb_i32p, nb_f64p, nb_i32p, nb_i32p))

    @numba_basic.numba_njit
    def trtri_pointer():
        with numba.objmode(ptr=types.intp):
            ptr = get_cython_function_address("scipy.linalg.cython_lapack", "dtrtri")
        return ptr

    @numba_basic.numba_njit
    def trtri(UPLO, DIAG, N, A, LDA, INFO):
        fn = _call_cached_ptr(get_ptr_func=trtri_pointer, func_type_ref=trtri_type,
                              unique_func_name_lit="rvm_ppl.dtrtri")
        fn(UPLO, DIAG, N, A, LDA, INFO)

    def numba_funcify_lower_triangular_inverse(op, node, **kwargs):
        @numba_basic.numba_njit
        def lower_triangular_inverse(L):
            n = L.shape[0]
            out = np.empty((n, n)).T  # Fortran order, LAPACK's layout
            out[:, :] = L
            if n == 0:
                return out
            INFO = val_to_int_ptr(np.int32(0))
            trtri(val_to_int_ptr(np.int32(ord("L"))), val_to_int_ptr(np.int32(ord("N"))),
                  val_to_int_ptr(np.int32(n)), out.ctypes, val_to_int_ptr(np.int32(n)), INFO)
            if int_ptr_to_val(INFO) != 0:
                out[:] = np.nan
                return out
            for j in range(1, n):  # upper triangle: zero
                for i in range(j):
                    out[i, j] = 0.0
            return out

        return lower_triangular_inverse, 2  # cache version: bump on every change above

    return numba_funcify_lower_triangular_inverse, register


def _substitution_inverse(L):
    """``L^{-1}`` of the lower triangle of ``L`` by forward substitution; NaN where singular.

    ``X = L^{-1}`` column by column: ``X[j, j] = 1 / L[j, j]`` and, below it,
    ``X[i, j] = -(sum_{j <= k < i} L[i, k] X[k, j]) / L[i, i]`` (``L X = I``
    row ``i``), ``M^3 / 3`` multiply-adds as in ``dtrtri``. A zero on the
    diagonal (where ``dtrtri`` reports ``info > 0``) gives a matrix of NaN.
    """
    n = L.shape[0]
    out = np.zeros((n, n))
    for j in range(n):
        if L[j, j] == 0.0:
            out[:, :] = np.nan
            return out
    for j in range(n):
        out[j, j] = 1.0 / L[j, j]
        for i in range(j + 1, n):
            s = 0.0
            for k in range(j, i):
                s += L[i, k] * out[k, j]
            out[i, j] = -s / L[i, i]
    return out


def _substitution_funcify():
    """The Numba backend's op by :func:`_substitution_inverse`, through PyTensor's public dispatcher."""
    from pytensor.link.numba.dispatch import basic as numba_basic
    from pytensor.link.numba.dispatch import numba_funcify

    compiled = numba_basic.numba_njit(_substitution_inverse)

    def numba_funcify_lower_triangular_inverse(op, node, **kwargs):
        return compiled

    return numba_funcify_lower_triangular_inverse, numba_funcify.register


def _numba_funcify():
    """``(funcify, register)`` for the Numba backend: LAPACK's where PyTensor's helpers allow."""
    try:
        return _lapack_funcify()
    except (ImportError, AttributeError):  # another PyTensor layout
        return _substitution_funcify()


def _register_numba():
    funcify, register = _numba_funcify()
    register(LowerTriangularInverse)(funcify)


_register_numba()
