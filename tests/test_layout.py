"""The package's layout: sub-packages import one way, no module cycle, no private name shared.

docs/architecture.md states the rules; these tests read every module's imports (at any
depth, function-level imports included) with :mod:`ast`, so a rule broken anywhere fails
here rather than at the next refactoring.
"""

import ast
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1] / "rvm_ppl"

# Which sub-packages (or top-level modules) each may import; docs/architecture.md.
ALLOWED = {
    "core": set(),
    "datasets": set(),
    "metrics": set(),
    "kernels": {"core"},
    "model": {"core"},
    "output": {"core", "model"},
    "plotting": {"core", "output"},
    "closed_form": {"core", "kernels"},
    "pymc_fitters": {"core", "model", "output", "closed_form"},
    "inference": {"core", "kernels", "model", "output", "closed_form", "pymc_fitters", "plotting"},
    "estimators": {"core", "kernels", "model", "output", "closed_form", "pymc_fitters", "inference"},
}
TOP = {"__init__", "demo"}  # the public face and the main job import what they show


def _modules():
    mods = {}
    for p in ROOT.rglob("*.py"):
        rel = p.relative_to(ROOT.parent).with_suffix("")
        mods[".".join(rel.parts)] = p
    return mods


def _imports(name, path):
    """``(target module, imported names)`` for every import in the module at ``path``."""
    pkg = name.split(".")[:-1]
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg[: len(pkg) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            out.append((mod, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            out.extend((a.name, []) for a in node.names)
    return out


def _unit(module):
    """The sub-package (or top-level module) a dotted module name belongs to."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def _graph():
    mods = _modules()
    edges = {m: set() for m in mods}
    for m, p in mods.items():
        for mod, names in _imports(m, p):
            for target in [mod] + [f"{mod}.{n}" for n in names]:
                if target in mods and target != m:
                    edges[m].add(target)
                elif f"{target}.__init__" in mods and not m.endswith("__init__"):
                    edges[m].add(f"{target}.__init__")
    return mods, edges


def test_no_module_imports_itself_through_others():
    _, edges = _graph()
    # Tarjan's strongly connected components: any component of two or more is a cycle.
    index, low, stack, on, cycles = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in edges:
        if v not in index:
            visit(v)
    assert cycles == []


def test_sub_packages_import_one_way():
    mods, edges = _graph()
    wrong = []
    for m, targets in edges.items():
        unit = _unit(m)
        if unit in TOP:
            continue
        for t in targets:
            tu = _unit(t)
            if tu != unit and tu not in ALLOWED[unit] and tu not in TOP:
                wrong.append(f"{m} -> {t}")
            if tu in TOP and tu != unit:
                wrong.append(f"{m} -> {t} (the top level is imported by no sub-package)")
    assert wrong == []
    assert set(ALLOWED) | TOP >= {_unit(m) for m in mods}, "a new sub-package needs its row in ALLOWED"


def test_no_private_name_crosses_a_sub_package():
    mods = _modules()
    crossing = []
    for m, p in mods.items():
        for mod, names in _imports(m, p):
            if not mod.startswith("rvm_ppl"):
                continue
            if _unit(mod) == _unit(m):
                continue
            private_module = any(part.startswith("_") and part != "__init__" for part in mod.split("."))
            private_names = [n for n in names if n.startswith("_") and n != "__version__"]
            if private_module or private_names:
                crossing.append(f"{m}: from {mod} import {', '.join(names)}")
    assert crossing == []


@pytest.mark.parametrize("unit", sorted(ALLOWED))
def test_every_unit_exists(unit):
    assert (ROOT / unit).is_dir() or (ROOT / f"{unit}.py").is_file()


ARCHITECTURE = ROOT.parent / "docs" / "architecture.md"


def _page_table():
    """The import table of docs/architecture.md: ``{unit: set of units it may import}``."""
    lines = ARCHITECTURE.read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if "layout-table" in line)
    table = {}
    for line in lines[start + 1:]:
        if table and not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 2 or cells[0] in ("unit", "---"):
            continue
        table[cells[0].strip("`")] = {c.strip(" `") for c in cells[1].split(",")} - {"—"}
    return table


def test_architecture_page_shows_the_allowed_table():
    assert _page_table() == ALLOWED


def test_architecture_page_snippet_prints_the_graph_within_the_table(capsys, monkeypatch):
    # The page's copy-pasteable snippet runs from the repository root and prints, per
    # unit, what it imports; each line must be allowed by the table.
    text = ARCHITECTURE.read_text(encoding="utf-8")
    snippet = text.split("```python\n", 1)[1].split("```", 1)[0]
    monkeypatch.chdir(ROOT.parent)
    monkeypatch.setattr(sys, "path", list(sys.path))  # undo the snippet's insertion
    exec(compile(snippet, str(ARCHITECTURE), "exec"), {})
    printed = {}
    for line in capsys.readouterr().out.splitlines():
        unit, _, targets = line.partition("->")
        printed[unit.strip()] = {t.strip() for t in targets.split(",")} - {"-"}
    assert set(printed) == set(ALLOWED) | TOP
    for unit, targets in printed.items():
        if unit not in TOP:
            assert targets <= ALLOWED[unit], unit
    assert printed["estimators"] >= {"inference", "core"}  # the graph is not empty
