"""NUTS and ADVI on the PyMC model of :func:`rvm_ppl.model.build_model`."""

from rvm_ppl.pymc_fitters.advi import fit_advi
from rvm_ppl.pymc_fitters.nuts import fit_nuts
from rvm_ppl.pymc_fitters.results import softplus_precisions

__all__ = ["fit_nuts", "fit_advi", "softplus_precisions"]
