"""Kernels, design matrices and the candidate bases the fitters run on.

:mod:`~rvm_ppl.kernels.kernel` holds the kernel classes (``RBF``, ``LinearSpline``, ...)
and :func:`design_matrix`; :mod:`~rvm_ppl.kernels.basis` the dense, lazy and low-rank
candidate bases of the closed-form fitters.
"""

from rvm_ppl.kernels.kernel import (
    KERNEL_NAMES,
    RBF,
    Constant,
    FunctionKernel,
    Kernel,
    Linear,
    LinearSpline,
    Polynomial,
    Product,
    Sum,
    basis_labels,
    design_matrix,
    make_kernel,
)

__all__ = [
    "KERNEL_NAMES",
    "Kernel",
    "Constant",
    "RBF",
    "LinearSpline",
    "Polynomial",
    "Linear",
    "FunctionKernel",
    "Sum",
    "Product",
    "make_kernel",
    "design_matrix",
    "basis_labels",
]
