"""The benchmarks' result files (benchmarks/_common.py): what a script prints is what it records."""

import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def common(monkeypatch):
    """benchmarks/_common.py as a fresh module, with no recorder running."""
    spec = importlib.util.spec_from_file_location(
        "bench_common_under_test", ROOT / "benchmarks" / "_common.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "_recorder", None)
    return module


def _markdown_tables(text):
    """Every markdown table in ``text`` as (header, rows) of stripped cell strings."""
    tables, current = [], None
    for line in text.splitlines():
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip()[1:-1].split("|")]
            if current is None:
                current = [cells, []]
            elif not set(line) <= set("|-"):
                current[1].append(cells)
        elif current is not None:
            tables.append(tuple(current))
            current = None
    if current is not None:
        tables.append(tuple(current))
    return tables


def test_result_names(common):
    script = "benchmarks/bench_classification.py"
    assert common.results_name(script) == "classification"
    assert common.results_name(script, "ripley") == "classification-ripley"
    assert common.results_name(script, "all") == "classification"
    assert (
        common.results_name("x/bench_multiclass.py", ["synthetic", "digits"])
        == "multiclass-synthetic+digits"
    )
    assert common.results_name("other.py", "default") == "other"


def test_the_file_holds_every_printed_table_cell_for_cell(common, tmp_path, capsys):
    common.results_recorder(
        "demo", argv=["bench_demo.py", "--part", "x"], notes=["timings are noise"]
    )
    common.heading("First: a table through print_table", before="\n")
    common.print_table(
        ["name", "value", "count"], [("a", np.float64(0.25), np.int64(3)), ("b", "1.5 %", 7)]
    )
    common.heading("Second: a table printed row by row")
    with common.StreamedTable(["x", "y"]) as table:
        table.row(1, "two")
        table.line("| 3 | four |")
    common.record_markdown("Third: a library's markdown", "| p | q |\n|---|---|\n| 5 | six |\n")
    common.record_data("raw", {"values": np.array([1.0, np.nan, np.inf, -np.inf])})
    path = common.write_results(str(tmp_path / "out.json"))
    printed = capsys.readouterr().out
    result = json.loads(Path(path).read_text())

    assert result["name"] == "demo"
    assert result["argv"] == ["bench_demo.py", "--part", "x"]
    assert result["notes"] == ["timings are noise"]
    titles = [t["title"] for t in result["tables"]]
    assert titles == [
        "First: a table through print_table",
        "Second: a table printed row by row",
        "Third: a library's markdown",
    ]
    # The two printed tables, as printed, are the first two recorded (as strings).
    shown = _markdown_tables(printed)
    assert len(shown) == 2
    for (header, rows), rec in zip(shown, result["tables"][:2], strict=True):
        assert header == rec["header"]
        assert rows == [[str(c) for c in r] for r in rec["rows"]]
    # Numbers stay numbers (numpy scalars become Python's); non-finite floats are plain JSON.
    assert result["tables"][0]["rows"][0] == ["a", 0.25, 3]
    assert result["tables"][2]["rows"] == [["5", "six"]]
    assert result["data"]["raw"]["values"] == [1.0, None, "inf", "-inf"]
    # Headings print as before: a blank line, "## title", a blank line.
    assert "\n## First: a table through print_table\n\n| name | value | count |" in printed


def test_provenance_is_that_of_this_checkout(common, tmp_path):
    common.results_recorder("demo", argv=["x"])
    result = json.loads(Path(common.write_results(str(tmp_path / "r.json"))).read_text())
    head = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True
    )
    if head.returncode:
        pytest.skip("not a git checkout")
    import rvm_ppl

    assert result["git"]["commit"] == head.stdout.strip()
    assert result["versions"]["numpy"] == np.__version__
    assert result["versions"]["python"] == sys.version.split()[0]
    assert Path(result["versions"]["rvm_ppl_path"]) == Path(rvm_ppl.__file__).parent
    assert result["machine"]["cpu_count"] >= 1
    assert set(result["machine"]["blas_threads"]) == set(common.THREAD_VARIABLES)
    assert math.isfinite(result["seconds"])


def test_without_a_recorder_nothing_is_written(common, capsys):
    common.print_table(["a"], [[1]])
    assert common.write_results() is None
    assert capsys.readouterr().out == "| a |\n|---|\n| 1 |\n\n"


def test_provenance_is_taken_as_the_run_starts(common, tmp_path, monkeypatch):
    # A long run's checkout may be edited before it writes its file: the file
    # names the commit and versions it started from.
    rec = common.results_recorder("demo", argv=["x"])
    started = rec.git
    monkeypatch.setattr(common, "git_info", lambda path=None: {"commit": "edited later"})
    monkeypatch.setattr(common, "package_versions", lambda: {"numpy": "edited later"})
    result = json.loads(Path(common.write_results(str(tmp_path / "r.json"))).read_text())
    assert result["git"] == started and result["git"]["commit"] != "edited later"
    assert result["versions"]["numpy"] == np.__version__


def test_tables_remade_from_a_run_keep_its_provenance(common, tmp_path):
    run = common.results_recorder("study", argv=["bench_x.py", "--seeds", "0"])
    common.record_data("runs", [{"x": 1}])
    first = json.loads(Path(common.write_results(str(tmp_path / "run.json"))).read_text())
    first = {**first, "date": "2026-01-02T03:04:05+00:00", "seconds": 1234.5,
             "git": {"commit": "abc", "dirty": False}}
    remake = common.results_recorder("study", argv=["bench_x.py", "--from", "run.json"])
    assert remake is not run
    remake.adopt(first)
    common.print_table(["a"], [[1]], title="remade")
    second = json.loads(Path(common.write_results(str(tmp_path / "remade.json"))).read_text())
    for key in ("date", "machine", "versions", "git", "argv", "seconds"):
        assert second[key] == first[key], key
    assert second["tables"] == [{"title": "remade", "header": ["a"], "rows": [[1]]}]
