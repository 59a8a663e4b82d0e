"""What a fit produces and how fits are compared: InferenceData, diagnostics, tables.

:mod:`~rvm_ppl.output.idata` is the one place an InferenceData is built;
:mod:`~rvm_ppl.output.diagnostics` judges approximations against the NUTS reference;
:mod:`~rvm_ppl.output.tables` tabulates what several fits say about alpha. This
sub-package reads results; it runs no fitter.
"""
