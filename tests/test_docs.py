"""The documentation builds with warnings as errors and renders what it should."""

import os
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import nbformat
import pytest

import rvm_ppl

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
NOTEBOOK = "01_sinc_regression"


class _Text(HTMLParser):
    """The visible text of an HTML page (scripts and styles left out)."""

    def __init__(self):
        super().__init__()
        self.parts, self.images, self._skip = [], 0, 0

    def handle_starttag(self, tag, attrs):
        if tag in ("script", "style"):
            self._skip += 1
        if tag == "img":
            self.images += 1

    def handle_endtag(self, tag):
        if tag in ("script", "style"):
            self._skip -= 1

    def handle_data(self, data):
        if not self._skip:
            self.parts.append(data)


def _squash(text):
    return re.sub(r"\s+", " ", text).strip()


def _page(path):
    parser = _Text()
    parser.feed(path.read_text(encoding="utf-8"))
    return _squash(" ".join(parser.parts)), parser.images


def _stored_outputs(path):
    """Lines of the notebook's stored text outputs and its number of stored images."""
    nb = nbformat.read(path, as_version=4)
    lines, images = [], 0
    for cell in nb.cells:
        for out in cell.get("outputs", []) if cell.cell_type == "code" else []:
            if out.output_type == "stream" and out.name == "stdout":
                lines += [_squash(line) for line in out.text.splitlines() if line.strip()]
            images += "image/png" in out.get("data", {})
    return lines, images


@pytest.mark.slow
def test_docs_build_with_warnings_as_errors(tmp_path):
    out = tmp_path / "html"
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    proc = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
         "-d", str(tmp_path / "doctrees"), str(DOCS), str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, f"sphinx-build failed:\n{proc.stdout}\n{proc.stderr}"

    # The API page of RVR carries its docstring, from the checkout under test.
    text, _ = _page(out / "generated" / "rvm_ppl.RVR.html")
    first_line = _squash(rvm_ppl.RVR.__doc__.strip().splitlines()[0])
    assert first_line in text
    assert "rvm_ppl.RVR.fit" in (out / "generated" / "rvm_ppl.RVR.html").read_text(encoding="utf-8")

    # A notebook page shows the outputs stored in the notebook (it is not re-executed).
    lines, n_images = _stored_outputs(ROOT / "notebooks" / f"{NOTEBOOK}.ipynb")
    assert lines and n_images
    text, images = _page(out / "notebooks" / f"{NOTEBOOK}.html")
    missing = [line for line in lines if line not in text]
    assert not missing, f"stored outputs not rendered: {missing[:3]}"
    assert images >= n_images


# Modules whose docstrings still quote measurements (or a phrase this check takes for
# one), while they move to docs/defaults.md or docs/benchmarks.md: none left.
MEASUREMENTS_NOT_YET_MOVED = frozenset()
# A duration ("0.5 ms", "15-40 s", "3 seconds", "100-200 microseconds", "12 min") or the
# word "measured".
_MEASUREMENT = re.compile(
    r"\d(?:\.\d+)?(?:\s?[-–]\s?\d+(?:\.\d+)?)?\s?"
    r"(?:ms|s|seconds|µs|microseconds|min|minutes)\b(?!\()|\bmeasured\b",
    re.IGNORECASE,
)


def _docstrings(path):
    import ast

    tree = ast.parse(path.read_text(encoding="utf-8"))
    nodes = [tree] + [n for n in ast.walk(tree)
                      if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
    for node in nodes:
        doc = ast.get_docstring(node, clean=False)
        if doc:
            yield getattr(node, "name", "<module>"), doc


def test_docstrings_quote_no_measurement():
    """Timings and benchmark outcomes live once, in docs/defaults.md or docs/benchmarks.md."""
    found = []
    for path in sorted((ROOT / "rvm_ppl").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel in MEASUREMENTS_NOT_YET_MOVED:
            continue
        for name, doc in _docstrings(path):
            found += [f"{rel}:{name}: {m.group(0)!r}" for m in _MEASUREMENT.finditer(doc)]
    assert found == []


def test_the_check_for_measurements_sees_one():
    # The pattern catches the passages it was written for, and not a formula or a rule.
    assert _MEASUREMENT.search("NUTS took 64.1 s against 41.7-42.1 s")
    assert _MEASUREMENT.search("0.055 against 0.121 ms at M = 101")
    assert _MEASUREMENT.search("Measured on noisy sinc")
    assert _MEASUREMENT.search("the Python loop spends 100-200 microseconds per iteration")
    assert _MEASUREMENT.search("12 min instead of 18")
    assert not _MEASUREMENT.search("k(x, y) = 1 + x y min(x, y)^3 / 3")
    assert not _MEASUREMENT.search("- (x + y)/2 min(x, y)^2")
    assert not _MEASUREMENT.search("r-hat above RHAT_MAX = 1.01 in 4 chains")


def _api_entries():
    """Full names the API page documents: autosummary entries and ``.. data::`` directives."""
    module, names, in_autosummary = None, [], False
    for line in (DOCS / "api.rst").read_text(encoding="utf-8").splitlines():
        stripped = line.strip()
        if m := re.match(r"\.\. currentmodule:: (\S+)$", stripped):
            module, in_autosummary = m.group(1), False
        elif stripped.startswith(".. autosummary::"):
            in_autosummary = True
        elif m := re.match(r"\.\. (?:py:)?(?:data|function|class|exception):: (\w+)$", stripped):
            names.append(f"{module}.{m.group(1)}")
            in_autosummary = False
        elif in_autosummary and line.startswith("   ") and stripped[:1].isalpha():
            names.append(f"{module}.{stripped}")
        elif stripped and not line.startswith(" "):
            in_autosummary = False
    return names


def _resolve(full_name):
    import importlib

    parts = full_name.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for part in parts[i:]:
            obj = getattr(obj, part)
        return obj
    raise ImportError(full_name)


def test_api_page_documents_exactly_the_top_level():
    entries = _api_entries()
    top = {name.removeprefix("rvm_ppl.") for name in entries if name.count(".") == 1}
    public = {name for name in rvm_ppl.__all__ if not name.startswith("__")}
    assert public - top == set(), "exported by rvm_ppl but not on docs/api.rst"
    assert top - public == set(), "documented as rvm_ppl.X but not in rvm_ppl.__all__"
    assert "rvm_ppl.__version__" in (DOCS / "api.rst").read_text(encoding="utf-8")
    # Each object is documented once: under its top-level name or under its module.
    objects = [id(_resolve(name)) for name in entries]
    assert len(objects) == len(set(objects))


def test_api_page_entries_resolve():
    unresolved = []
    for name in _api_entries():
        try:
            _resolve(name)
        except (ImportError, AttributeError):
            unresolved.append(name)
    assert unresolved == []


def test_the_api_page_parser_reads_every_section():
    # The parser is what the two tests above rely on: it must see one entry per
    # section of the page, the data directives included.
    entries = _api_entries()
    assert "rvm_ppl.RVR" in entries and "rvm_ppl.metrics.nlpd_score" in entries
    assert "rvm_ppl.DEFAULT_PRIORS" in entries
    assert "rvm_ppl.kernels.Kernel" in entries and "rvm_ppl.RBF" in entries
    assert not any(name.endswith((":toctree:", "generated/")) for name in entries)


README = ROOT / "README.md"


def _code_blocks(text, language):
    return re.findall(rf"^```{language}\n(.*?)^```$", text, flags=re.MULTILINE | re.DOTALL)


def test_readme_is_a_front_page():
    text = README.read_text(encoding="utf-8")
    assert len(text.encode("utf-8")) <= 8192, "README.md is over 8 KB: move details to docs/"
    # The two commands come first, as CI runs the second one (.ci/run), word for word.
    demo, tests = _code_blocks(text, "bash")[:2]
    assert demo == (
        "python3 -m venv .venv && . .venv/bin/activate && pip install -e . "
        "&& python -m rvm_ppl.demo --out out\n"
    )
    # .ci/run's first command (before the second environment at the lowest releases).
    run = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert tests == run[run.index('cd "$(dirname "$0")/.."') + 1] + "\n"
    assert text.index(demo) < text.index(tests) < text.index("## ")
    # Relative links and images point at files of the checkout.
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    local = [t for t in targets if "://" not in t]
    assert local and all((ROOT / t).exists() for t in local), local


def test_readme_quickstart_runs(tmp_path, monkeypatch):
    (code,) = _code_blocks(README.read_text(encoding="utf-8"), "python")
    assert len(code.strip().splitlines()) <= 15
    monkeypatch.chdir(tmp_path)
    namespace = {}
    exec(compile(code, "README.md", "exec"), namespace)
    assert namespace["m"].relevance_vectors_.shape[1] == 1
    assert namespace["clf"].predict_proba(namespace["X_test"]).shape == (1000, 2)
