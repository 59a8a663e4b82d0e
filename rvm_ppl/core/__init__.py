"""Helpers every other sub-package may use.

Linear algebra, priors and units, labels, progress, the result type, and what the
output side accepts as a fit (:mod:`~rvm_ppl.core.fits`). Nothing here imports another
sub-package of :mod:`rvm_ppl`.
"""
