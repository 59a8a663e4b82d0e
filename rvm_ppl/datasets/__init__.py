"""Data sets of the papers: Tipping's sinc, Friedman #1, Ripley's synthetic data, Pima, Boston.

The files in ``datasets/data/`` and their origin are described in
``datasets/data/README.md``.
"""

from rvm_ppl.datasets.loaders import (
    load_boston,
    load_pima,
    load_ripley,
    make_friedman1,
    make_ripley,
    make_sinc,
    make_three_class,
    ripley_proba,
    sinc,
    three_class_proba,
)

__all__ = [
    "sinc",
    "make_sinc",
    "make_friedman1",
    "make_ripley",
    "ripley_proba",
    "load_ripley",
    "load_pima",
    "load_boston",
    "make_three_class",
    "three_class_proba",
]
