"""The closed-form fitters: type-II maximum likelihood (evidence) and variational Bayes.

:mod:`~rvm_ppl.closed_form.evidence` is the sequential evidence ascent (Tipping & Faul
2003) for the Gaussian likelihood, with its compiled backend in
:mod:`~rvm_ppl.closed_form.engine`; :mod:`~rvm_ppl.closed_form.bernoulli` and
:mod:`~rvm_ppl.closed_form.categorical` fit the classifiers by Laplace's approximation;
:mod:`~rvm_ppl.closed_form.vb` is Bishop & Tipping's variational RVM;
:mod:`~rvm_ppl.closed_form.scales` learns kernel input scales by the evidence (η-RVM).
"""
