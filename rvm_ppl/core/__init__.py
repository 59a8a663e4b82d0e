"""Helpers every other sub-package may use: linear algebra, priors and units, labels, progress, the result type.

Nothing here imports another sub-package of :mod:`rvm_ppl`.
"""
