"""The main job of README's first command, with small settings."""

import pytest

from rvm_ppl import demo


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::rvm_ppl.pymc_fitters.nuts.SamplingWarning")  # 2 x 60 draws
@pytest.mark.filterwarnings("ignore::ResourceWarning")
# Each comparison is of one model: a ModelMismatchWarning is an error.
@pytest.mark.filterwarnings("error::rvm_ppl.output.identity.ModelMismatchWarning")
def test_demo_writes_its_figures_and_tables(tmp_path):
    demo.main(["--out", str(tmp_path), "--n", "30", "--draws", "60", "--chains", "2"])
    for name in ("alpha_comparison.png", "predictive.png", "classification.png",
                 "alpha_comparison_ripley.png"):
        assert (tmp_path / name).stat().st_size > 10_000, name
    text = (tmp_path / "methods.md").read_text()
    for method in ("evidence", "vb", "advi", "nuts"):
        assert text.count(f"| {method} |") == 4, method  # two fit tables, two LOO tables
    assert text.count("Did the approximations work?") == 2
    assert text.count("| evidence, flat (classic) |") == 2  # beside each comparison
    assert text.count("All four methods fit one model") == 2
