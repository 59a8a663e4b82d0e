"""Benchmark tables rendered from the result files in ``benchmarks/results/``.

A page names a table of a result file instead of retyping its numbers::

    ```{bench-table} evidence-sinc
    :title: A. Sinc experiments (evidence method)
    :columns: experiment; rvm_ppl; paper (error / RVs / noise)
    ```

The argument is the file's name without ``.json``; ``:title:`` is the title of
one of its ``tables`` (exactly, as the script printed it above the table; quote
it when it contains `` #``, which MyST's option parser reads as a comment), and
``:columns:`` an optional subset of its header, separated by ``;``. The table
is rendered with the cells the script printed, and a line under it says where
they come from: the file, the command, the date, the machine (CPU model,
cores, load average), the rvm_ppl version and commit, and the file's notes.
A script may record numbers unformatted (``summary_table``'s k-hat and
distances, to full precision); ``:digits:`` (optional) writes such
floating-point cells with that many significant digits, as the script
printed them. Text cells and integers are shown as recorded.

A missing file, title or column stops the build with an error naming what the
file has: a page never shows an empty or stale table in place of a result.
The file format is described in ``benchmarks/results/README.md``.
"""

import json
from pathlib import Path

from docutils import nodes
from docutils.parsers.rst import directives
from sphinx.errors import ExtensionError
from sphinx.util.docutils import SphinxDirective

COLUMN_SEPARATOR = ";"


class BenchTableError(ExtensionError):
    """A bench-table names a result file, table or column that does not exist."""

    category = "bench-table error"


def load_results(directory, name):
    """Read the result file ``<directory>/<name>.json`` into a dict."""
    path = Path(directory) / f"{name}.json"
    if not path.is_file():
        have = sorted(p.stem for p in Path(directory).glob("*.json"))
        raise BenchTableError(f"no result file {path}; the folder has: {', '.join(have) or 'none'}")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise BenchTableError(f"{path} is not valid JSON: {err}") from err


def cell_text(value, digits=None):
    """Write a cell as the benchmark script printed it (a recorded NaN is ``None``).

    ``digits``: significant digits of a floating-point cell (None: as recorded).
    """
    if value is None:
        return "nan"
    if digits is not None and isinstance(value, float):
        return f"{value:.{digits}g}"
    return str(value)


def select_table(results, title, columns=None, digits=None):
    """Return header and rows, as strings, of the table titled ``title`` in ``results``.

    ``columns`` (a list of header names) keeps those columns in that order;
    ``digits`` writes floating-point cells with that many significant digits.
    """
    name = results.get("name", "the result file")
    tables = results.get("tables")
    if not isinstance(tables, list):
        raise BenchTableError(f"{name} has no 'tables' list (see benchmarks/results/README.md)")
    found = [t for t in tables if t.get("title") == title]
    if not found:
        titles = [t.get("title") for t in tables]
        hint = ""
        if any(isinstance(t, str) and t.startswith(title) and t != title for t in titles):
            hint = " (a title containing ' #' must be quoted: MyST reads ' #...' as a comment)"
        listed = "\n  ".join(repr(t) for t in titles) or "none"
        raise BenchTableError(
            f"{name} has no table titled {title!r}{hint}; its tables:\n  {listed}"
        )
    if len(found) > 1:
        raise BenchTableError(f"{name} has {len(found)} tables titled {title!r}")
    table = found[0]
    header = [cell_text(h) for h in table["header"]]
    rows = [[cell_text(c, digits) for c in row] for row in table["rows"]]
    for row in rows:
        if len(row) != len(header):
            raise BenchTableError(
                f"{name}, table {title!r}: a row has {len(row)} cells "
                f"for {len(header)} columns: {row}"
            )
    if columns:
        missing = [c for c in columns if c not in header]
        if missing:
            raise BenchTableError(
                f"{name}, table {title!r} has no column {missing}; its columns: {header}"
            )
        keep = [header.index(c) for c in columns]
        header = [header[i] for i in keep]
        rows = [[row[i] for i in keep] for row in rows]
    return header, rows


def _command(argv):
    """Give the command line of a run without its ``--note`` texts and ``--out`` path."""
    args, skip = [], False
    for i, arg in enumerate(argv or []):
        if skip:
            skip = False
            continue
        if arg in ("--note", "--out"):
            skip = True
            continue
        if arg.startswith(("--note=", "--out=")):
            continue
        args.append(Path(arg).name if i == 0 else arg)
    if args and args[0].endswith(".py"):
        args[0] = f"benchmarks/{args[0]}"
    return " ".join(args)


def provenance(results, name):
    """Say in one sentence where a file's numbers come from; then the file's notes.

    Paths and the command are between backticks (rendered as code).
    """
    machine = results.get("machine") or {}
    versions = results.get("versions") or {}
    git = results.get("git") or {}
    date = str(results.get("date") or "an unrecorded date")
    if len(date) >= 16 and date[10] == "T":
        date = f"{date[:10]} {date[11:16]} UTC" if date.endswith("+00:00") else date
    cpu = machine.get("cpu") or "an unrecorded CPU"
    cores = machine.get("cpu_count")
    where = f"{cpu}, {cores} cores" if cores else cpu
    load = machine.get("load_average_1_5_15_min")
    if load:
        where += f", load average {load[0]} at the start"
    commit = git.get("commit")
    if commit:
        code = f"commit {commit[:10]}"
        if git.get("package_dirty"):
            code += " with uncommitted changes to rvm_ppl/"
        elif git.get("dirty"):
            code += " (rvm_ppl/ as committed; other files changed)"
    else:
        code = "an unrecorded commit"
    version = versions.get("rvm_ppl", "unrecorded")
    command = _command(results.get("argv"))
    text = f"From `benchmarks/results/{name}.json`"
    if command:
        text += f" (`{command}`)"
    text += f", run {date} on {where}; rvm_ppl {version}, {code}."
    notes = [str(n).strip() for n in results.get("notes") or [] if str(n).strip()]
    return " ".join([text, *notes])


def render(results, name, title, columns=None, digits=None):
    """Build the docutils nodes of one bench-table: the table, then its provenance line."""
    header, rows = select_table(results, title, columns, digits)
    table = nodes.table(classes=["bench-table"])
    table += nodes.title(text=title)
    group = nodes.tgroup(cols=len(header))
    table += group
    for _ in header:
        group += nodes.colspec(colwidth=1)

    def _row(cells):
        row = nodes.row()
        for cell in cells:
            entry = nodes.entry()
            entry += nodes.paragraph(text=cell)
            row += entry
        return row

    head = nodes.thead()
    head += _row(header)
    body = nodes.tbody()
    for cells in rows:
        body += _row(cells)
    group += head
    group += body
    source = nodes.paragraph(classes=["bench-table-source"])
    for i, part in enumerate(provenance(results, name).split("`")):
        if part:
            source += nodes.literal(text=part) if i % 2 else nodes.emphasis(text=part)
    return [table, source]


def parse_columns(text):
    """Split ``a; b; c`` into ``["a", "b", "c"]``; None for no subset."""
    if not text:
        return None
    return [c.strip() for c in text.split(COLUMN_SEPARATOR) if c.strip()]


class BenchTable(SphinxDirective):
    """``bench-table``: one table of a benchmark result file."""

    required_arguments = 1
    final_argument_whitespace = False
    has_content = False
    option_spec = {
        "title": directives.unchanged_required,
        "columns": directives.unchanged,
        "digits": directives.positive_int,
    }

    def run(self):
        """Render the named table, or stop the build with what the file has."""
        name = self.arguments[0]
        location = "{}:{}".format(*self.get_source_info())
        title = self.options.get("title")
        if not title:
            raise BenchTableError(f"{location}: bench-table {name} needs a :title: option")
        directory = Path(self.env.srcdir) / self.config.bench_results_dir
        self.env.note_dependency(str(directory / f"{name}.json"))
        try:
            results = load_results(directory, name)
            return render(results, name, title, parse_columns(self.options.get("columns")),
                          self.options.get("digits"))
        except BenchTableError as err:
            raise BenchTableError(f"{location}: {err}") from None


def setup(app):
    """Register the directive and the folder of result files (relative to docs/)."""
    app.add_config_value("bench_results_dir", "../benchmarks/results", "env")
    app.add_directive("bench-table", BenchTable)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
