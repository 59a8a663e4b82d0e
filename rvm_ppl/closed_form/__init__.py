"""The closed-form fitters: type-II maximum likelihood (evidence) and variational Bayes.

:mod:`~rvm_ppl.closed_form.driver` is the sequential driver of Tipping & Faul
(2003): one loop, and one set of decision functions, for every likelihood.
Each likelihood is a statistics class on it: the Gaussian one in
:mod:`~rvm_ppl.closed_form.evidence` (with its compiled backend in
:mod:`~rvm_ppl.closed_form.engine`, which compiles the driver's decision
functions), the Bernoulli, Poisson and categorical ones in
:mod:`~rvm_ppl.closed_form.bernoulli`, :mod:`~rvm_ppl.closed_form.poisson`
(which runs the Bernoulli code with its own likelihood object, and holds the
counts' predictive distribution) and :mod:`~rvm_ppl.closed_form.categorical`,
all by Laplace's approximation (:mod:`~rvm_ppl.closed_form.laplace`, written
once for ``K >= 1`` latent outputs). :mod:`~rvm_ppl.closed_form.vb` is Bishop & Tipping's variational
RVM; :mod:`~rvm_ppl.closed_form.scales` learns kernel input scales by the
evidence (eta-RVM).
"""
