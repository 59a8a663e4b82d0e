"""The docs' benchmark tables come from benchmarks/results/ (docs/_ext/bench_tables.py)."""

import importlib.util
import re
from pathlib import Path

import pytest
from docutils import nodes

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


@pytest.fixture(scope="module")
def bench_tables():
    spec = importlib.util.spec_from_file_location(
        "bench_tables_under_test", ROOT / "docs" / "_ext" / "bench_tables.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


FIXTURE = {
    "name": "demo-part",
    "date": "2026-01-02T03:04:05+00:00",
    "machine": {"cpu": "Some CPU 9000", "cpu_count": 2, "load_average_1_5_15_min": [0.5, 0.4, 0.3]},
    "versions": {"rvm_ppl": "0.1.0"},
    "git": {"commit": "0123456789abcdef", "dirty": True, "package_dirty": False},
    "argv": [
        "/somewhere/benchmarks/bench_demo.py", "--part", "x", "--note", "a note", "--out", "f.json"
    ],
    "notes": ["Timings are noise here."],
    "tables": [
        {"title": "Other table", "header": ["a"], "rows": [[1]]},
        {
            "title": "B. Friedman #1: the fits",
            "header": ["method", "error", "fit s"],
            "rows": [["evidence", 0.25, 3], ["vb", "1.5 %", None]],
        },
    ],
}
TITLE = "B. Friedman #1: the fits"


def _cells(table):
    """Header and body of a docutils table as lists of cell texts."""

    def rows(part):
        return [[e.astext() for e in row.findall(nodes.entry)] for row in part.findall(nodes.row)]

    (head,) = table.findall(nodes.thead)
    (body,) = table.findall(nodes.tbody)
    return rows(head), rows(body)


def test_a_table_renders_the_printed_cells_and_where_they_come_from(bench_tables):
    table, source = bench_tables.render(FIXTURE, "demo-part", TITLE)
    assert isinstance(table, nodes.table)
    assert table.next_node(nodes.title).astext() == TITLE
    head, body = _cells(table)
    assert head == [["method", "error", "fit s"]]
    assert body == [["evidence", "0.25", "3"], ["vb", "1.5 %", "nan"]]
    assert [type(n) for n in source.children][:4] == [
        nodes.emphasis, nodes.literal, nodes.emphasis, nodes.literal
    ]
    assert source.astext() == (
        "From benchmarks/results/demo-part.json (benchmarks/bench_demo.py --part x), "
        "run 2026-01-02 03:04 UTC on Some CPU 9000, 2 cores, load average 0.5 at the start; "
        "rvm_ppl 0.1.0, commit 0123456789 (rvm_ppl/ as committed; other files changed). "
        "Timings are noise here."
    )


def test_a_subset_of_columns_in_the_order_given(bench_tables):
    columns = bench_tables.parse_columns("fit s; method")
    assert columns == ["fit s", "method"]
    table, _ = bench_tables.render(FIXTURE, "demo-part", TITLE, columns)
    assert _cells(table) == ([["fit s", "method"]], [["3", "evidence"], ["nan", "vb"]])


def test_digits_round_the_unformatted_numbers_only(bench_tables):
    results = {
        "name": "raw",
        "tables": [{
            "title": "t",
            "header": ["method", "khat", "n_pruned", "rms", "fit s"],
            "rows": [["vb", 3.1985865122896313, 88.0, "0.03439", 3], ["nuts", None, 0.0, "0.0386", 12]],
        }],
    }
    table, _ = bench_tables.render(results, "raw", "t", digits=3)
    assert _cells(table)[1] == [["vb", "3.2", "88", "0.03439", "3"], ["nuts", "nan", "0", "0.0386", "12"]]
    # without :digits: the cells are as recorded
    _, rows = bench_tables.select_table(results, "t")
    assert rows[0][1] == "3.1985865122896313"


def test_a_missing_title_column_or_file_is_an_error(bench_tables, tmp_path):
    with pytest.raises(bench_tables.BenchTableError, match="no table titled 'No such table'"):
        bench_tables.render(FIXTURE, "demo-part", "No such table")
    # MyST cuts an unquoted option at " #": the error says so.
    with pytest.raises(bench_tables.BenchTableError, match="must be quoted"):
        bench_tables.render(FIXTURE, "demo-part", "B. Friedman")
    with pytest.raises(bench_tables.BenchTableError, match=r"no column \['seconds'\]"):
        bench_tables.render(FIXTURE, "demo-part", TITLE, ["method", "seconds"])
    with pytest.raises(bench_tables.BenchTableError, match="no result file"):
        bench_tables.load_results(tmp_path, "evidence-nowhere")
    ragged = {"name": "r", "tables": [{"title": "t", "header": ["a", "b"], "rows": [[1]]}]}
    with pytest.raises(bench_tables.BenchTableError, match="1 cells for 2 columns"):
        bench_tables.render(ragged, "r", "t")


_DIRECTIVE = re.compile(r"^```\{bench-table\}\s+(\S+)\n((?::[^\n]*\n)*)```", re.MULTILINE)


def _docs_directives():
    found = []
    for page in sorted((ROOT / "docs").glob("*.md")):
        for m in _DIRECTIVE.finditer(page.read_text(encoding="utf-8")):
            options = dict(
                re.match(r":(\w+):\s*(.*)$", line).groups() for line in m.group(2).splitlines()
            )
            found.append((page.name, m.group(1), options))
    return found


def test_every_docs_table_names_an_existing_result_table(bench_tables):
    # The build test (slow) would fail too; this finds a renamed title in the fast loop.
    found = _docs_directives()
    assert len(found) >= 10
    for page, name, options in found:
        title = options["title"]
        if title[:1] in "\"'":
            title = title[1:-1]
        results = bench_tables.load_results(RESULTS, name)
        digits = int(options["digits"]) if "digits" in options else None
        header, rows = bench_tables.select_table(
            results, title, bench_tables.parse_columns(options.get("columns")), digits
        )
        assert header and rows, (page, name, title)
