"""The live line of the closed-form fits: silent for short fits, one redrawn line for long ones."""
import io

import numpy as np
import pytest

from rvm_ppl import RVC, RVR
from rvm_ppl.core import progress as _progress
from rvm_ppl.core.progress import FitProgress
from rvm_ppl.datasets.loaders import make_ripley, make_sinc


def test_line_is_redrawn_in_place_and_ended_once():
    out = io.StringIO()
    line = FitProgress("evidence", "log evidence", delay=0.0, stream=out)
    for it in range(1, 4):
        line.update(it, it + 1, -10.0 * it)
    line.finish(3, 4, -30.0, converged=True)
    text = out.getvalue()
    assert text.startswith("\revidence: iteration 1, 2 basis functions, log evidence -10")
    assert text.endswith(": converged\n") and text.count("\n") == 1
    assert "iteration 3, 4 basis functions, log evidence -30" in text.splitlines()[-1]


def test_short_fits_and_switched_off_fits_write_nothing():
    out = io.StringIO()
    line = FitProgress("vb", "bound", stream=out)  # the default delay: 2 s
    line.update(1, 1, 0.0)
    line.finish(1, 1, 0.0)
    off = FitProgress("vb", "bound", show=False, delay=0.0, stream=out)
    off.update(1, 1, 0.0)
    off.finish(1, 1, 0.0)
    assert out.getvalue() == ""


@pytest.mark.parametrize("method", ["evidence", "vb"])
def test_estimators_show_the_line_with_progressbar_only(method, monkeypatch, capsys):
    monkeypatch.setattr(_progress, "DELAY", 0.0)
    X, y = make_sinc(60, random_state=0)
    RVR(gamma=1 / 9, progressbar=False).fit(X, y, method=method)
    assert capsys.readouterr().err == ""
    model = RVR(gamma=1 / 9).fit(X, y, method=method)
    err = capsys.readouterr().err
    assert err.endswith(": converged\n")
    n = len(model.result_.support)
    assert f"{n} basis functions" in err.splitlines()[-1]
    Xc, yc = make_ripley(60, random_state=0)
    RVC(gamma=4).fit(Xc, yc, method=method)
    assert capsys.readouterr().err.endswith(": converged\n")


def test_the_multinomial_evidence_fit_shows_the_line(monkeypatch, capsys):
    from rvm_ppl.datasets.loaders import make_three_class

    monkeypatch.setattr(_progress, "DELAY", 0.0)
    X, y = make_three_class(60, random_state=0)
    for shared, first in ((True, "1 basis functions"), (False, "3 class weights")):
        RVC(gamma=0.5, multi_class="multinomial", shared_alpha=shared).fit(X, y)
        err = capsys.readouterr().err
        assert err.startswith(f"\revidence (multinomial): iteration 1, {first}")
        assert err.endswith(": converged\n")


@pytest.mark.slow  # compiles the scale gradient
def test_learned_scales_show_their_rounds(monkeypatch, capsys):
    monkeypatch.setattr(_progress, "DELAY", 0.0)
    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, size=(40, 2))
    y = np.sin(3 * X[:, 0]) + 0.05 * rng.standard_normal(40)
    model = RVR(gamma=1.0, learn_scales=True).fit(X, y)
    err = capsys.readouterr().err
    last = err.split("\r")[-1]
    assert err.endswith(": converged\n")
    assert last.startswith(f"eta-RVM: iteration {len(model.scale_history_) - 1:,}, ")


@pytest.mark.parametrize("method", ["evidence", "vb"])
def test_convergence_is_logged_at_info(method, caplog):
    X, y = make_sinc(40, random_state=1)
    with caplog.at_level("INFO", logger="rvm_ppl"):
        model = RVR(gamma=1 / 9, progressbar=False).fit(X, y, method=method)
    n_iter = model.idata_.attrs["n_iter"]
    assert [r.getMessage().split(" (")[0] for r in caplog.records if r.name == "rvm_ppl"] == \
        [f"{method} converged in {n_iter} iterations"]
