"""What the benchmark scripts share: a fresh process per configuration, and tables.

A process of its own gives each configuration its own peak memory (max RSS,
imports included) and lets thread settings made through the environment
apply before numpy is imported.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def run_worker(script, args, *, one_thread, timeout):
    """Run ``python script --worker *args``; return ``(result, error)``.

    The worker prints its result as a JSON line; ``result`` is that dict,
    or None with ``error`` a short reason (timeout, exit status, last line
    of stderr). ``one_thread`` sets the BLAS thread variables to 1;
    otherwise they are removed, so that BLAS uses its default.
    """
    env = dict(os.environ)
    for k in THREAD_VARIABLES:
        if one_thread:
            env[k] = "1"
        else:
            env.pop(k, None)
    cmd = [sys.executable, script, "--worker", *map(str, args)]
    try:
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, f"timed out after {timeout} s"
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if out.returncode or not lines:
        return None, (out.stderr.strip().splitlines() or ["failed"])[-1][:80]
    return json.loads(lines[-1]), None


def print_table(header, rows, title=None):
    """Print a markdown table, then a blank line; record it in the current result file.

    ``title`` None: the last :func:`heading`'s text (see :func:`record_table`).
    """
    record_table(title, header, rows)
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for r in rows:
        print("| " + " | ".join(str(c) for c in r) + " |", flush=True)
    print()


# -- Result files ---------------------------------------------------------------
#
# Every table a script prints through print_table (or records with record_table)
# goes, with the machine, the date, the package versions, the git commit and the
# command line, into one JSON file under benchmarks/results/ (or --out PATH), so
# that the published tables can be made from those files without a re-run.

# RVM_PPL_BENCH_RESULTS moves the default elsewhere: a run that is not a published
# measurement (the notebooks' quick runs in the test suite) must not overwrite one.
RESULTS_DIR = os.environ.get("RVM_PPL_BENCH_RESULTS") or os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "results")
VERSION_PACKAGES = (
    "numpy",
    "scipy",
    "scikit-learn",
    "pymc",
    "pytensor",
    "arviz",
    "nutpie",
    "numba",
    "rvm_ppl",
    "fastrvm",
    "sklearn-rvm",
)

_recorder = None


def results_name(script, part=None):
    """``<script stem without "bench_">[-<part>]``: the default name of a script's result file.

    ``part`` is a string or a list of strings (joined with "+"); None, "all" and
    "default" add nothing.
    """
    stem = os.path.splitext(os.path.basename(script))[0]
    stem = stem[len("bench_") :] if stem.startswith("bench_") else stem
    if isinstance(part, (list, tuple)):
        part = "+".join(map(str, part))
    return stem if part in (None, "", "all", "default") else f"{stem}-{part}"


def add_results_argument(parser):
    """Add ``--out PATH`` (where the result file goes; default benchmarks/results/<name>.json)
    and ``--note TEXT`` (repeatable: notes for the file)."""
    parser.add_argument(
        "--out",
        default=None,
        metavar="PATH",
        help="JSON result file (default: benchmarks/results/<script>[-<part>].json)",
    )
    parser.add_argument(
        "--note",
        action="append",
        default=[],
        metavar="TEXT",
        help="a note for the result file's notes (repeatable)",
    )
    return parser


def _plain(v):
    """``v`` as plain JSON values: numpy scalars and arrays as Python numbers and lists,
    non-finite floats as None ("nan") or the strings "inf" / "-inf"."""
    import math

    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if hasattr(v, "tolist") and not isinstance(v, (str, bytes)):  # numpy scalars and arrays
        return _plain(v.tolist())
    if isinstance(v, float):
        if math.isnan(v):
            return None
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return v
    if v is None or isinstance(v, (bool, int, str)):
        return v
    return str(v)


def _cpu_model():
    import platform

    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def machine_info():
    """Platform, CPU model (/proc/cpuinfo), CPU count, load average, BLAS thread variables."""
    import platform

    try:
        load = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        load = None
    return {
        "platform": platform.platform(),
        "cpu": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "load_average_1_5_15_min": load,
        "blas_threads": {k: os.environ.get(k) for k in THREAD_VARIABLES},
    }


def package_versions():
    """Python's version, those of the installed VERSION_PACKAGES, and rvm_ppl's folder."""
    import importlib.metadata
    import importlib.util

    out = {"python": sys.version.split()[0]}
    for pkg in VERSION_PACKAGES:
        try:
            out[pkg] = importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            pass
    spec = importlib.util.find_spec("rvm_ppl")
    if spec is not None and spec.origin:
        out["rvm_ppl_path"] = os.path.dirname(os.path.abspath(spec.origin))
    return out


def git_info(path=None):
    """The commit of the repository holding ``path`` (default: the rvm_ppl imported), whether
    its tracked files differ from it (``dirty``, with up to 20 such paths), and whether any
    of them is the package's (``package_dirty``: files under rvm_ppl/)."""
    import importlib.util

    if path is None:
        spec = importlib.util.find_spec("rvm_ppl")
        path = (
            os.path.dirname(os.path.dirname(os.path.abspath(spec.origin)))
            if spec and spec.origin
            else os.path.dirname(os.path.abspath(__file__))
        )

    def git(*args):
        out = subprocess.run(["git", "-C", path, *args], capture_output=True, text=True, timeout=30)
        if out.returncode:
            raise OSError(out.stderr.strip())
        return out.stdout

    try:
        changed = [
            ln[3:] for ln in git("status", "--porcelain", "--untracked-files=no").splitlines()
        ]
        return {
            "commit": git("rev-parse", "HEAD").strip(),
            "dirty": bool(changed),
            "package_dirty": any(c.startswith("rvm_ppl/") for c in changed),
            "changed": changed[:20],
        }
    except (OSError, subprocess.SubprocessError) as exc:
        return {"commit": None, "error": str(exc)[:200]}


class ResultsRecorder:
    """Collects a run's tables, notes and data, and writes them as one JSON file.

    Parameters
    ----------
    name : str
        The result file's name without ``.json`` (see :func:`results_name`).
    argv : list of str, optional
        The command line (default ``sys.argv``).
    notes : list of str, optional
        Sentences a reader of the numbers needs (e.g. that timings are noise).
    """

    def __init__(self, name, argv=None, notes=()):
        import datetime
        import time

        self.name = name
        self.argv = list(sys.argv if argv is None else argv)
        self.notes = list(notes)
        self.tables = []
        self.data = {}
        self.title = None
        self._start = time.perf_counter()
        self._seconds = None  # a run's own wall time, when adopt() took its provenance
        self.date = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
        # The checkout and packages as the run starts: edits during a long run are not its.
        self.machine, self.versions, self.git = machine_info(), package_versions(), git_info()

    def adopt(self, result):
        """Take the provenance of the run that wrote ``result`` (a result file's dict).

        For tables remade from a run's recorded ``data`` without fitting again: the
        file then names the run's date, machine, versions, commit, command line and wall
        time, not those of the remaking.
        """
        for key in ("date", "machine", "versions", "git", "argv"):
            setattr(self, key, result[key])
        self._seconds = result["seconds"]

    def heading(self, title):
        """Set the title of the tables recorded from now on."""
        self.title = title

    def table(self, title, header, rows):
        """Record one table: its title, header and rows as plain JSON values."""
        header = [str(h) for h in header]
        rows = [_plain(list(r)) for r in rows]
        self.tables.append(
            {"title": self.title if title is None else title, "header": header, "rows": rows}
        )

    def note(self, text):
        """Add a note to the file."""
        self.notes.append(text)

    def result(self):
        """The file's content as a dict."""
        import time

        return _plain(
            {
                "name": self.name,
                "date": self.date,
                "machine": self.machine,
                "versions": self.versions,
                "git": self.git,
                "argv": self.argv,
                "seconds": (round(time.perf_counter() - self._start, 1)
                            if self._seconds is None else self._seconds),
                "notes": self.notes,
                "tables": self.tables,
                **({"data": self.data} if self.data else {}),
            }
        )

    def write(self, path=None):
        """Write the file to ``path`` (default ``RESULTS_DIR/<name>.json``); return its path."""
        path = path or os.path.join(RESULTS_DIR, f"{self.name}.json")
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        tmp = f"{path}.tmp{os.getpid()}"
        with open(tmp, "w") as f:
            json.dump(self.result(), f, indent=1, ensure_ascii=False)
            f.write("\n")
        os.replace(tmp, path)
        print(f"results: {path}", file=sys.stderr, flush=True)
        return path


def results_recorder(name, argv=None, notes=()):
    """Start recording this run's tables (see :class:`ResultsRecorder`); return the recorder."""
    global _recorder
    _recorder = ResultsRecorder(name, argv, notes)
    return _recorder


def current_recorder():
    """The recorder :func:`results_recorder` started, or None."""
    return _recorder


def heading(text, before="", after="\n"):
    """Print ``before + "## " + text + after`` and make ``text`` the next tables' title."""
    print(f"{before}## {text}{after}", flush=True)
    if _recorder is not None:
        _recorder.heading(text)


def record_table(title, header, rows):
    """Record a table in the current result file (nothing without :func:`results_recorder`).

    ``title`` None: the last :func:`heading`'s text.
    """
    if _recorder is not None:
        _recorder.table(title, header, rows)


def record_markdown(title, text):
    """Record the markdown table(s) in ``text`` (lines ``| a | b |``), e.g. as a
    library function returns them; the first line is the header."""
    rows = [
        [c.strip() for c in ln.strip()[1:-1].split("|")]
        for ln in text.splitlines()
        if ln.strip().startswith("|") and not set(ln.strip()) <= set("|-: ")
    ]
    if rows:
        record_table(title, rows[0], rows[1:])


def record_data(key, value):
    """Store ``value`` (as plain JSON) under ``data[key]`` of the current result file."""
    if _recorder is not None:
        _recorder.data[key] = value


def record_note(text):
    """Add a note to the current result file."""
    if _recorder is not None:
        _recorder.note(text)


def write_results(path=None):
    """Write the current result file (:meth:`ResultsRecorder.write`); None without a recorder."""
    return None if _recorder is None else _recorder.write(path)


class StreamedTable:
    """A markdown table printed row by row, as a long run produces them, and recorded whole.

    Prints the header and separator at once, each :meth:`row` (cells) or :meth:`line`
    (an already formatted ``| a | b |`` line) as it comes, and records the table when
    :meth:`close` is called or the ``with`` block ends.
    """

    def __init__(self, header, title=None):
        self.header, self.title, self.rows = [str(h) for h in header], title, []
        print("| " + " | ".join(self.header) + " |")
        print("|" + "---|" * len(self.header), flush=True)

    def row(self, *cells):
        """Print and keep one row of cells."""
        self.rows.append(list(cells))
        print("| " + " | ".join(str(c) for c in cells) + " |", flush=True)

    def line(self, text):
        """Print a formatted ``| a | b |`` line and keep its cells."""
        print(text, flush=True)
        self.rows.append([c.strip() for c in text.strip()[1:-1].split("|")])

    def close(self):
        """Record the table (see :func:`record_table`)."""
        record_table(self.title, self.header, self.rows)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
