"""Candidate basis sets for the fast sequential algorithm.

The fast marginal-likelihood algorithm needs, for all ``M`` candidate basis
functions, their squared norms, their projections on the targets, and their
cross products with the few columns currently in the model. Three classes
expose those operations:

:class:`DenseBasis`
    holds the ``N x M`` design matrix.
:class:`KernelBasis`
    never stores it: it evaluates kernel columns on demand, block by block,
    so its memory grows like ``N * (block + cached columns)``; each cross
    product costs a pass over the whole kernel matrix.
:class:`LowRankKernelBasis`
    holds a pivoted Cholesky factor ``K = L L^T`` of the kernel matrix,
    stopped when no diagonal entry of the remainder exceeds ``tol`` times
    the largest diagonal entry of ``K``, so every entry of ``K`` is
    reproduced to within that tolerance (the remainder is positive
    semi-definite, hence ``|E_ij| <= sqrt(E_ii E_jj)``). Smooth kernels on
    low-dimensional inputs have a small numerical rank ``r``, and then every
    operation costs ``O(N r)`` per column.

:func:`kernel_basis` chooses between the last two and checks the factor
against exact kernel columns before trusting it.
"""

from __future__ import annotations

import numpy as np

# Number of kernel matrix entries evaluated at once by KernelBasis (64 MB).
_BLOCK_ENTRIES = 8_000_000
# Pivoted Cholesky: relative tolerance on the remainder's diagonal and rank cap.
LOW_RANK_TOL = 1e-13
LOW_RANK_MAX = 512


class DenseBasis:
    """An explicit design matrix ``Phi`` of shape (N, M)."""

    def __init__(self, Phi):
        self.Phi = np.asarray(Phi, dtype=float)
        self.n_samples, self.n_basis = self.Phi.shape

    def norms2_and_project(self, t):
        """Return ``(||phi_m||^2 for all m, Phi^T t)``."""
        return np.einsum("ij,ij->j", self.Phi, self.Phi), self.Phi.T @ t

    def weighted_norms2(self, b):
        """Return ``sum_n b_n phi_nm^2`` for every column ``m``."""
        return np.einsum("ij,i,ij->j", self.Phi, b, self.Phi)

    def columns(self, idx):
        """Return ``Phi[:, idx]``."""
        return self.Phi[:, idx]

    def cross(self, V):
        """Return ``Phi^T V`` for ``V`` of shape (N, k)."""
        return self.Phi.T @ V

    def gram(self, idx):
        """Return ``Phi^T Phi[:, idx]``, shape (M, len(idx))."""
        return self.Phi.T @ self.Phi[:, idx]


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

    def weighted_norms2(self, b):
        """Return ``sum_n b_n phi_nm^2`` for every column ``m``, in one pass."""
        out = np.empty(self.n_basis)
        for sl, B in self._kernel_blocks():
            out[sl] = np.einsum("ij,i,ij->j", B, b, B)
        return out

    def columns(self, idx):
        """Return ``Phi[:, idx]``."""
        idx = np.asarray(idx, dtype=int)
        if not np.any(idx < self.bias):
            return self._kernel_columns(idx - self.bias)
        out = np.empty((self.n_samples, idx.size))
        is_bias = idx < self.bias
        out[:, is_bias] = 1.0
        if np.any(~is_bias):
            out[:, ~is_bias] = self._kernel_columns(idx[~is_bias] - self.bias)
        return out

    def _kernel_columns(self, centres):
        """Columns ``k(X, X[centres])``."""
        return self.kernel(self.X, self.X[centres])

    def cross(self, V):
        """Return ``Phi^T V`` for ``V`` of shape (N, k), one kernel block at a time."""
        out = np.empty((self.n_basis, V.shape[1]))
        for sl, B in self._kernel_blocks():
            out[sl] = B.T @ V
        return out


class LowRankKernelBasis(KernelBasis):
    """``Phi = [1, L L^T]`` with ``L`` a pivoted Cholesky factor of ``k(X, X)``."""

    def __init__(self, kernel, X, L, *, bias=True):
        super().__init__(kernel, X, bias=bias)
        self.L = L
        self.rank = L.shape[1]
        self._W = L.T @ L
        self._u = None  # L^T 1, on first use
        self._L2 = False  # factor of the squared kernel, on first use (None: unavailable)

    def norms2_and_project(self, t):
        """Return ``(||phi_m||^2 for all m, Phi^T t)``; ``||K e_m||^2 = l_m^T (L^T L) l_m``."""
        norms2 = _row_quadratic_forms(self.L, self._W)
        proj = self.L @ (self.L.T @ t)
        if self.bias:
            norms2 = np.concatenate([[float(self.n_samples)], norms2])
            proj = np.concatenate([[t.sum()], proj])
        return norms2, proj

    def weighted_norms2(self, b):
        """Return ``sum_n b_n phi_nm^2`` for every column ``m``.

        For kernel columns this is ``(K o K) b``, the squared kernel
        ``k(x, x')^2`` (positive semi-definite by the Schur product theorem)
        applied to ``b``. When that kernel has a checked pivoted Cholesky
        factor ``L2`` (:meth:`squared_factor`) this costs ``O(N r2)``;
        otherwise ``l_m^T (L^T B L) l_m``, ``O(N r^2)``.
        """
        b = np.asarray(b, dtype=float)
        L2 = self.squared_factor()
        if L2 is not None:
            out = L2 @ (L2.T @ b)
        else:
            Wb = self.L.T @ (b[:, None] * self.L)
            out = _row_quadratic_forms(self.L, Wb)
        return np.concatenate([[float(np.sum(b))], out]) if self.bias else out

    def squared_factor(self):
        """Pivoted Cholesky factor of the squared kernel matrix ``K o K``, or ``None``.

        Computed on first use and accepted under the rule of
        :func:`kernel_basis` (eight exact columns reproduced).
        """
        if self._L2 is False:
            self._L2 = _checked_factor(_SquaredKernel(self.kernel), self.X)
        return self._L2

    def _kernel_columns(self, centres):
        """Columns ``L L[centres]^T`` of the factored kernel matrix."""
        return self.L @ self.L[centres].T

    def gram(self, idx):
        """Return ``Phi^T Phi[:, idx]`` in ``O(N r)`` per column.

        With ``K = L L^T``: ``K^T K e_c = L (L^T L) l_c`` and
        ``1^T K e_c = (L^T 1)^T l_c``; the bias column gives
        ``Phi^T 1 = [N; L (L^T 1)]``.
        """
        idx = np.asarray(idx, dtype=int)
        if self._u is None:
            self._u = self.L.sum(axis=0)
        is_bias = idx < self.bias
        lc = self.L[np.where(is_bias, 0, idx - self.bias)]  # (k, r)
        V = self._W @ lc.T  # (r, k)
        V[:, is_bias] = self._u[:, None]
        if not self.bias:
            return self.L @ V
        out = np.empty((self.n_basis, idx.size))
        np.matmul(self.L, V, out=out[1:])
        out[0] = lc @ self._u
        out[0, is_bias] = float(self.n_samples)
        return out

    def cross(self, V):
        """Return ``Phi^T V = [1^T V; L (L^T V)]``."""
        LV = self.L.T @ V
        if not self.bias:
            return self.L @ LV
        out = np.empty((self.n_basis, V.shape[1]))
        np.matmul(self.L, LV, out=out[1:])
        out[0] = V.sum(axis=0)
        return out


def _row_quadratic_forms(L, W):
    """``l_i^T W l_i`` for every row ``l_i`` of ``L``.

    One matrix product and a row-wise dot product: a three-operand
    ``einsum`` does the same sums without BLAS, about eight times more
    slowly (N = 5000, rank 300).
    """
    out = np.empty(L.shape[0])
    step = max(1, _BLOCK_ENTRIES // max(L.shape[1], 1))  # no N x r temporary
    for start in range(0, L.shape[0], step):
        B = L[start : start + step]
        out[start : start + step] = np.einsum("ij,ij->i", B @ W, B)
    return out


def pivoted_cholesky(kernel, X, *, tol=LOW_RANK_TOL, max_rank=LOW_RANK_MAX):
    """Pivoted Cholesky factor ``L`` with ``k(X, X) ~= L L^T``, or ``None``.

    Stops when the largest diagonal entry of the remainder is at most
    ``tol`` times the largest diagonal of the kernel matrix. Returns
    ``None`` if that needs more than ``max_rank`` columns or the kernel is
    not positive semi-definite on ``X``.
    """
    N = X.shape[0]
    d = np.asarray(kernel.diag(X), dtype=float).copy()
    dmax = d.max() if N else 0.0
    if not np.isfinite(dmax) or dmax <= 0:
        return None
    cap = min(max_rank, N)
    # Column-major and grown on demand: a column of L is one contiguous
    # stretch of memory, and N x max_rank is never allocated up front.
    L = np.empty((N, min(cap, 64)), order="F")
    for j in range(cap + 1):
        p = int(np.argmax(d))
        if d[p] <= tol * dmax:
            return L[:, :j]  # column-major; the unused tail of the buffer is at most half of it
        if j == cap:
            return None
        if j == L.shape[1]:
            grown = np.empty((N, min(cap, j + j // 2)), order="F")
            grown[:, :j] = L[:, :j]
            L = grown
        col = kernel(X, X[p : p + 1])[:, 0]
        if j:
            col -= L[:, :j] @ L[p, :j]
        if not np.isfinite(col).all() or col[p] <= 0:
            return None
        col /= np.sqrt(col[p])
        L[:, j] = col
        d -= col * col
        d[p] = 0.0
        if d.min() < -1e-8 * dmax:  # not positive semi-definite
            return None
    return None  # pragma: no cover


class _SquaredKernel:
    """``k(x, x')^2``: the kernel of ``K o K`` (positive semi-definite when ``k`` is)."""

    def __init__(self, kernel):
        self.kernel = kernel

    def __call__(self, A, B):
        K = self.kernel(A, B)
        return K * K

    def diag(self, X):
        d = np.asarray(self.kernel.diag(X), dtype=float)
        return d * d


def _checked_factor(kernel, X, rng=None):
    """:func:`pivoted_cholesky`, accepted only if it reproduces eight exact kernel columns.

    The columns are chosen at random with a fixed seed; the tolerance is
    ``100 * LOW_RANK_TOL`` of the largest diagonal entry among them.
    """
    L = pivoted_cholesky(kernel, X)
    if L is None:
        return None
    rng = np.random.default_rng(0) if rng is None else rng
    idx = rng.choice(X.shape[0], size=min(8, X.shape[0]), replace=False)
    exact = kernel(X, X[idx])
    scale = max(float(np.max(kernel.diag(X[idx]))), np.finfo(float).tiny)
    if np.max(np.abs(exact - L @ L[idx].T)) <= 100 * LOW_RANK_TOL * scale:
        return L
    return None


def kernel_basis(kernel, X, *, bias=True, rng=None):
    """A lazy basis for ``[1, k(X, X)]``: low-rank when that is exact, else blocks.

    The low-rank factor is accepted only if it reproduces eight exact kernel
    columns (chosen at random with a fixed seed) to ``100 * LOW_RANK_TOL``
    of the largest diagonal entry.
    """
    L = _checked_factor(kernel, X, rng)
    if L is not None:
        return LowRankKernelBasis(kernel, X, L, bias=bias)
    return KernelBasis(kernel, X, bias=bias)
