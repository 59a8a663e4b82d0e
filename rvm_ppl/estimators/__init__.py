"""The scikit-learn estimators: relevance vector regression, classification and counts.

:mod:`~rvm_ppl.estimators.regressor` holds :class:`RVR`,
:mod:`~rvm_ppl.estimators.classifier` :class:`RVC`,
:mod:`~rvm_ppl.estimators.poisson` :class:`PoissonRVR`, :mod:`~rvm_ppl.estimators.base`
what they share; :mod:`~rvm_ppl.estimators.persistence` saves and loads them and
:mod:`~rvm_ppl.estimators.rvm_star` is Rasmussen & Quiñonero-Candela's RVM*.
"""

from rvm_ppl.estimators.classifier import RVC
from rvm_ppl.estimators.poisson import PoissonRVR
from rvm_ppl.estimators.regressor import RVR

__all__ = ["RVR", "RVC", "PoissonRVR"]
