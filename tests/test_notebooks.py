"""Execute every notebook end to end with small settings and check its headline numbers.

Each notebook reads ``RVM_PPL_NOTEBOOK_SMALL`` in its parameters cell and, when it
is ``"1"``, shrinks its repetitions, draws and sizes. The test runs the notebook
in a fresh ``python3`` kernel (nbclient), then reads the ``RESULTS`` dict that the
notebook builds for its summary and checks each number against loose bounds:
wide enough for the small settings, narrow enough to catch a broken method.
"""

import json
import time
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
CELL_TIMEOUT = 600  # seconds per cell
MARKER = "RVM_PPL_RESULTS="

# Per notebook: bounds (low, high) on entries of its RESULTS dict.
EXPECTED = {
    "01_sinc_regression.ipynb": {
        "fig1_max_error_full": (0.0, 0.05),    # paper: 0.0070
        "fig1_rvs_full": (3, 20),              # paper: 9
        "fig1_max_error_fast": (0.0, 0.05),
        "fig2_rms": (0.0, 0.1),                # paper: 0.0245
        "fig2_rvs": (2, 20),                   # paper: 6
        "gauss_rms_evidence": (0.0, 0.08),     # Bishop & Tipping: 0.0494
        "gauss_rvs_evidence": (2, 15),         # Tipping: 6.7
        "gauss_noise_evidence": (0.06, 0.14),  # true 0.1; paper 0.0943
        "gauss_rms_vb": (0.0, 0.08),
        "gauss_noise_vb": (0.06, 0.14),
    },
    "02_classification.ipynb": {
        "ripley_error": (0.07, 0.16),          # paper: 9.3 %
        "ripley_rvs": (1, 15),                 # paper: 4
        "ripley_mean_error": (0.07, 0.14),
        "bayes_error": (0.075, 0.085),         # "around 8 %"
        "pima_errors": (50, 85),               # paper: 65 of 332
        "pima_rvs": (1, 30),                   # paper: 4
    },
    "03_four_methods_alpha.ipynb": {
        "n_relevant_evidence": (1, 15),
        "n_relevant_vb": (2, 20),
        "rms_evidence": (0.0, 0.15),
        "rms_vb": (0.0, 0.15),
        "rms_advi": (0.0, 0.15),
        "rms_nuts": (0.0, 0.15),
        "max_mean_diff_nuts_evidence": (0.0, 0.3),  # the four predictions agree
        "max_rhat": (0.99, 1.05),                   # 2 x 200 draws in the quick run
        "set_data_max_mean_diff": (0.0, 0.05),      # pm.set_data + posterior predictive = predict
    },
    "04_why_sparsity.ipynb": {
        "min_ratio_in_model": (1.0, float("inf")),   # q^2 > s for every kept basis
        "max_ratio_pruned": (0.0, 1.0 + 1e-6),       # q^2 <= s for every pruned one
        "decomposition_error": (0.0, 1e-5),
        "n_relevant": (2, 15),
    },
    "05_predictive_variance.ipynb": {
        "far_sd_rvm": (0.0, 0.3),
        "far_sd_rvm_star": (0.25, 2.0),
        "far_sd_gp": (0.25, 2.0),
        "rvm_star_check": (0.0, 1e-6),
    },
    "06_learning_scales.ipynb": {
        "sinc2d_rms_eta": (0.0, 0.12),         # paper: 0.0053
        "sinc2d_w_x2": (0.07, 0.13),           # true 0.1; paper 0.102
        "friedman_mse_rvm": (1.5, 6.0),        # paper: 2.80
        "friedman_mse_eta": (0.0, 2.0),        # paper: 0.27
        "friedman_eta_irrelevant_median": (0.0, 0.3),
    },
    "07_benchmarks.ipynb": {
        "sinc_max_error_full": (0.0, 0.05),
        "sinc_gauss_rms": (0.0, 0.08),
        "sinc_gauss_noise": (0.06, 0.14),
        "scale_largest_rms": (0.0, 0.05),
        # R&QC 2005: 0.408 and 0.219; the full run 0.537 and 0.328; the quick run
        # (2 folds, one width, no restarts) 1.6 for RVM*.
        "boston_nlpd_rvm_star": (0.1, 2.0),
        "boston_nlpd_gp": (0.05, 2.0),
    },
    "08_counts.ipynb": {
        "n_relevant_evidence": (1, 15),
        "rms_evidence": (0.0, 0.35),           # log rate 1 + 2 sinc(x), 100 counts
        "rms_nuts": (0.0, 0.35),
        "coverage_evidence": (0.85, 0.99),     # central 90 % intervals of counts (>= 0.9 by discreteness)
        "coverage_nuts": (0.85, 0.99),
        "median_mean_ratio_nuts_evidence": (0.0, 0.223),  # log of a factor 1.25
    },
    "09_hyperpriors.ipynb": {
        # noisy sinc, N = 100: the MAP fit is sparse (Tipping: about 6 relevance vectors) ...
        "n_relevant_evidence": (3, 12),
        "sum_gamma_evidence": (3.0, 10.0),
        # ... the full posterior is not: no basis above E[gamma] = 1/2, more effective parameters
        "n_relevant_nuts_vague": (0, 0),
        "n_relevant_nuts_proper": (0, 0),
        "max_gamma_nuts_vague": (0.0, 0.5),
        "sum_gamma_nuts_vague": (6.0, 20.0),   # the full run's study: 11.3 on average
        "sum_gamma_nuts_proper": (6.0, 20.0),
        "rms_nuts_vague": (0.0, 0.08),
        "rms_nuts_proper": (0.0, 0.08),
        "divergences_vague": (0, 5),           # 2 x 100 draws in the quick run
        "divergences_proper": (0, 5),
        # 97 % quantile of log10 alpha of the pruned bases: the hyperprior's cut-off, about
        # log10(1 / (b var(y))) = 6.8 under Gamma(1e-6, 1e-6); under Gamma(1, 1) its own
        # 97 % quantile, log10(3.5 / var(y)) = 1.4 (var(y) = 0.144)
        "pruned_upper_log10_alpha_vague": (5.0, 8.0),
        "pruned_upper_log10_alpha_proper": (0.5, 2.5),
        # the study's result file: the MAP fit is sparse, NUTS is not, under the vague prior
        "study_sinc_vague_evidence_relevant": (3.0, 12.0),
        "study_sinc_vague_nuts_relevant": (0.0, 1.0),
    },
}

def test_every_notebook_is_checked():
    on_disk = {p.name for p in NOTEBOOKS.glob("*.ipynb")}
    unchecked = on_disk - set(EXPECTED)
    assert not unchecked, f"notebooks without expected results: {sorted(unchecked)}"


def _print_results_cell():
    source = f'import json\nprint("{MARKER}" + json.dumps(RESULTS, default=float))'
    return nbformat.v4.new_code_cell(source)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_notebook_runs(name, tmp_path, monkeypatch):
    path = NOTEBOOKS / name
    # The kernel inherits this process's environment.
    monkeypatch.setenv("RVM_PPL_NOTEBOOK_SMALL", "1")
    # Quick benchmark runs write their result files here, not over the published ones.
    monkeypatch.setenv("RVM_PPL_BENCH_RESULTS", str(tmp_path))
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "1")
    monkeypatch.setenv("MPLBACKEND", "Agg")

    nb = nbformat.read(path, as_version=4)
    nb.cells.append(_print_results_cell())
    client = nbclient.NotebookClient(
        nb, kernel_name="python3", timeout=CELL_TIMEOUT,
        resources={"metadata": {"path": str(tmp_path)}},
    )
    start = time.perf_counter()
    client.execute()  # raises CellExecutionError, naming the failing cell, on any error
    print(f"{name}: {time.perf_counter() - start:.1f} s")

    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    last = nb.cells[-1].outputs
    text = "".join(o.get("text", "") for o in last if o.get("output_type") == "stream")
    assert MARKER in text, f"{name} printed no RESULTS"
    results = json.loads(text.split(MARKER, 1)[1])
    for key, (low, high) in EXPECTED[name].items():
        assert key in results, f"{name}: RESULTS has no {key!r}"
        value = results[key]
        assert low <= value <= high, f"{name}: {key} = {value} is outside [{low}, {high}]"
