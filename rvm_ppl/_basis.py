"""Candidate basis sets for the fast sequential algorithm.

The fast marginal-likelihood algorithm needs, for all ``M`` candidate basis
functions, their squared norms, their projections on the targets, and their
cross products with the few columns currently in the model. A
:class:`DenseBasis` holds the ``N x M`` design matrix. A :class:`KernelBasis`
never stores it: it evaluates kernel columns on demand, block by block, so
its memory grows like ``N * (block + cached columns)`` rather than ``N * M``.
Both expose the same five operations.
"""

from __future__ import annotations

import numpy as np

# Number of kernel matrix entries evaluated at once by KernelBasis (64 MB).
_BLOCK_ENTRIES = 8_000_000


class DenseBasis:
    """An explicit design matrix ``Phi`` of shape (N, M)."""

    def __init__(self, Phi):
        self.Phi = np.asarray(Phi, dtype=float)
        self.n_samples, self.n_basis = self.Phi.shape

    def norms2_and_project(self, t):
        """Return ``(||phi_m||^2 for all m, Phi^T t)``."""
        return np.einsum("ij,ij->j", self.Phi, self.Phi), self.Phi.T @ t

    def columns(self, idx):
        """Return ``Phi[:, idx]``."""
        return self.Phi[:, idx]

    def cross(self, V):
        """Return ``Phi^T V`` for ``V`` of shape (N, k)."""
        return self.Phi.T @ V


class KernelBasis:
    """``Phi = [1, k(X, X)]`` evaluated lazily, in blocks of centres.

    Parameters
    ----------
    kernel : Kernel
    X : ndarray of shape (N, d)
        Inputs, which are also the centres.
    bias : bool
        Whether column 0 is a constant column of ones.
    """

    def __init__(self, kernel, X, *, bias=True):
        self.kernel = kernel
        self.X = X
        self.bias = bool(bias)
        self.n_samples = X.shape[0]
        self.n_basis = X.shape[0] + self.bias
        self._block = max(1, _BLOCK_ENTRIES // max(self.n_samples, 1))

    def _kernel_blocks(self):
        """Yield ``(slice of basis indices, block of Phi columns)``."""
        if self.bias:
            yield slice(0, 1), np.ones((self.n_samples, 1))
        for start in range(0, self.X.shape[0], self._block):
            stop = min(start + self._block, self.X.shape[0])
            yield (
                slice(start + self.bias, stop + self.bias),
                self.kernel(self.X, self.X[start:stop]),
            )

    def norms2_and_project(self, t):
        """Return ``(||phi_m||^2 for all m, Phi^T t)`` in one pass."""
        norms2 = np.empty(self.n_basis)
        proj = np.empty(self.n_basis)
        for sl, B in self._kernel_blocks():
            norms2[sl] = np.einsum("ij,ij->j", B, B)
            proj[sl] = B.T @ t
        return norms2, proj

    def columns(self, idx):
        """Return ``Phi[:, idx]``."""
        idx = np.asarray(idx, dtype=int)
        out = np.empty((self.n_samples, idx.size))
        is_bias = idx < self.bias
        out[:, is_bias] = 1.0
        if np.any(~is_bias):
            out[:, ~is_bias] = self.kernel(self.X, self.X[idx[~is_bias] - self.bias])
        return out

    def cross(self, V):
        """Return ``Phi^T V`` for ``V`` of shape (N, k), one kernel block at a time."""
        out = np.empty((self.n_basis, V.shape[1]))
        for sl, B in self._kernel_blocks():
            out[sl] = B.T @ V
        return out
