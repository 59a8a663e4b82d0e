"""The economic QR factorisation as a PyTensor op (LAPACK ``dgeqrf`` and ``dorgqr``).

PyTensor's own ``QR`` runs, in its Numba backend, a routine that Numba takes
long to compile, in every first fit on a machine (or with an empty cache) of a
model that uses it: the low-rank marginal regression
(:func:`rvm_ppl.model.marginal.lowrank_marginal_loglike`). This op has one
case, ``Q, R`` of a float64 matrix with ``min(m, n)`` columns and rows, and its
Numba backend is Numba's own ``np.linalg.qr``, which compiles in a sixth of the
time and costs as much per call (the changelog has the figures). Both run
LAPACK's Householder QR (``dgeqrf``, then ``dorgqr`` for ``Q``), as does the
Python backend (``scipy.linalg.qr(..., mode="economic")``, PyTensor's
``QR``'s): the factors are PyTensor's economic QR's, bit for bit
(``tests/test_model_lowrank.py``). The compiled graph around the op is not
the one around PyTensor's ``QR``, so a model's log density agrees with the
one on PyTensor's ``QR`` to rounding, not bit for bit, and NUTS's draws on a
low-rank design differ from those on PyTensor's ``QR``.

Importing this module imports PyTensor and Numba.
"""

from __future__ import annotations

import numpy as np
import pytensor.tensor as pt
import scipy.linalg
from pytensor.graph.basic import Apply
from pytensor.graph.op import Op


class EconomicQR(Op):
    """``Q, R`` with ``A = Q R`` for a float64 matrix ``A`` (m x n), ``k = min(m, n)``.

    ``Q`` is m x k with orthonormal columns, ``R`` k x n upper triangular:
    PyTensor's ``pt.linalg.qr(A, mode="economic")``. A NaN or an infinite
    entry gives factors of NaN in the Numba backend, where Numba's QR would
    raise (LAPACK's own result holds NaN too). Not differentiable: it serves
    analytic gradients.
    """

    __props__ = ()

    def make_node(self, A):
        A = pt.as_tensor_variable(A)
        if A.ndim != 2 or A.dtype != "float64":
            raise TypeError(f"EconomicQR needs a float64 matrix; got {A.type}.")
        return Apply(self, [A], [pt.matrix(dtype="float64"), pt.matrix(dtype="float64")])

    def perform(self, node, inputs, outputs):
        Q, R = scipy.linalg.qr(inputs[0], mode="economic", check_finite=False)
        outputs[0][0], outputs[1][0] = Q, R

    def infer_shape(self, fgraph, node, shapes):
        m, n = shapes[0]
        k = pt.minimum(m, n)
        return [(m, k), (k, n)]


economic_qr = EconomicQR()


def _register_numba():
    """Numba's ``np.linalg.qr`` for the Numba backend (the generic fallback would call Python)."""
    from pytensor.link.numba.dispatch import basic as numba_basic

    @numba_basic.register_funcify_default_op_cache_key(EconomicQR)
    def numba_funcify_economic_qr(op, node, **kwargs):
        @numba_basic.numba_njit
        def economic_qr(A):
            try:
                return np.linalg.qr(A)
            except Exception:  # noqa: BLE001 - a NaN or an infinite entry: LAPACK gives NaN
                k = min(A.shape[0], A.shape[1])
                return np.full((A.shape[0], k), np.nan), np.full((k, A.shape[1]), np.nan)

        return economic_qr, 3  # cache version: bump on every change above


try:
    _register_numba()
except ImportError:  # another PyTensor layout: the generic (Python) fallback serves NUMBA
    pass
