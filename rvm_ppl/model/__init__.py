"""The relevance vector machine as one PyMC model (:func:`build_model`).

:mod:`~rvm_ppl.model.build` declares the model (Gaussian, Bernoulli; categorical in
:mod:`~rvm_ppl.model.categorical`); :mod:`~rvm_ppl.model.marginal` holds the marginal
likelihood ops (w integrated out), :mod:`~rvm_ppl.model.conditional` the marginal
regression's weights (prior draws, conditional density, whitened scale),
:mod:`~rvm_ppl.model.transforms` the sampling scales, :mod:`~rvm_ppl.model.trtri` a
LAPACK triangular inverse and :mod:`~rvm_ppl.model.qr` an economic QR factorisation as
PyTensor ops. No inference here.
"""

from rvm_ppl.model.build import (
    BERNOULLI_PRIORS,
    DEFAULT_PRIORS,
    LIKELIHOODS,
    PARAMETERIZATIONS,
    ModelSpec,
    alpha_given_weights,
    build_model,
    model_priors,
    model_spec,
)

__all__ = [
    "build_model",
    "model_spec",
    "ModelSpec",
    "model_priors",
    "alpha_given_weights",
    "DEFAULT_PRIORS",
    "BERNOULLI_PRIORS",
    "LIKELIHOODS",
    "PARAMETERIZATIONS",
]
