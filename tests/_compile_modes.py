"""Compile modes for tests that evaluate small PyTensor graphs of the model.

PyTensor's default mode compiles every operation to C: seconds per graph when the
compile cache is empty, for graphs a test evaluates a few dozen times. The fits
compile nothing in C (they use PyTensor's NUMBA backend, ``COMPILE_MODE`` of
``rvm_ppl.pymc_fitters.results``); a test that checks a density or a gradient of a
small graph runs the operations' Python implementations instead, which compile in
no time and compute the same quantities in float64.
"""

SMALL = "FAST_COMPILE"  # Python implementations, the cheap rewrites: no C compilation
