"""rvm_ppl: the relevance vector machine as one PyMC model, fitted four ways.

``RVR(...).fit(X, y, method=...)`` (``RVC`` for classes, ``PoissonRVR`` for
counts) with ``method`` one of ``"evidence"``
(type-II maximum likelihood by the fast sequential algorithm), ``"vb"``
(Bishop & Tipping's variational RVM), ``"advi"`` and ``"nuts"`` (on the
PyMC model of :func:`build_model`). Every method returns the same
``arviz.InferenceData`` layout in ``idata_``; :func:`fit_nuts` and
:func:`fit_advi` give the same layout for a PyMC model built (and possibly
changed) by hand. The diagnostics that judge a fit against the NUTS
reference are in :mod:`rvm_ppl.output.diagnostics`.
"""

from importlib.metadata import PackageNotFoundError, version

from rvm_ppl.core import arviz_ufuncs
from rvm_ppl.estimators import RVC, RVR, PoissonRVR
from rvm_ppl.kernels.kernel import (
    RBF,
    FunctionKernel,
    Linear,
    LinearSpline,
    Polynomial,
    design_matrix,
)
from rvm_ppl.model.build import BERNOULLI_PRIORS, DEFAULT_PRIORS, build_model
from rvm_ppl.output.diagnostics import ApproximationWarning
from rvm_ppl.output.identity import ModelMismatchWarning
from rvm_ppl.pymc_fitters.advi import fit_advi
from rvm_ppl.pymc_fitters.nuts import SamplingWarning, fit_nuts
from rvm_ppl.pymc_fitters.results import softplus_precisions

# Importing the package imports neither PyMC nor ArviZ (they are imported when a fit
# needs them), so the hook is in place before either is (tests/test_arviz_ufuncs.py).
arviz_ufuncs.install()

try:
    __version__ = version("rvm_ppl")
except PackageNotFoundError:  # pragma: no cover
    __version__ = "unknown"

__all__ = [
    "RVR",
    "RVC",
    "PoissonRVR",
    "RBF",
    "LinearSpline",
    "Polynomial",
    "Linear",
    "FunctionKernel",
    "design_matrix",
    "build_model",
    "fit_nuts",
    "fit_advi",
    "softplus_precisions",
    "SamplingWarning",
    "ApproximationWarning",
    "ModelMismatchWarning",
    "BERNOULLI_PRIORS",
    "DEFAULT_PRIORS",
    "__version__",
]
