"""``fit(method=...)``: the one table of methods, and simulation-based calibration.

:mod:`~rvm_ppl.inference.methods` maps each method name to its fitter and returns the
one result type; :mod:`~rvm_ppl.inference.sbc` checks the methods by simulation-based
calibration (Talts et al. 2018).
"""
