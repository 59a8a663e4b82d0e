"""Sphinx configuration of the rvm_ppl documentation.

Build with ``sphinx-build -W --keep-going -b html docs docs/_build/html`` from
the repository root after ``pip install -e ".[docs]"``. The notebooks are
rendered with the outputs stored in them (``nb_execution_mode = "off"``), as
pymc-marketing and pymc-extras do; ``tests/test_notebooks.py`` executes them.
"""

import os
import sys

# Document the checkout being built, not another installed copy.
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, ROOT)
# Local extensions: bench_tables renders benchmarks/results/*.json as tables.
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "_ext"))

import rvm_ppl  # noqa: E402

# -- Project -----------------------------------------------------------------
project = "rvm_ppl"
author = "the rvm_ppl developers"
copyright = "2026, the rvm_ppl developers"
release = rvm_ppl.__version__
version = release.split("+")[0]

# -- General -----------------------------------------------------------------
extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "sphinx.ext.viewcode",
    "numpydoc",
    "myst_nb",
    "sphinx_copybutton",
    "bench_tables",
]
root_doc = "index"
templates_path = ["_templates"]
exclude_patterns = [
    "_build",
    "_templates",
    "jupyter_execute",
    "_ext",
    "**.ipynb_checkpoints",
]
# `text` is code, as in Markdown (pymc-marketing does the same).
default_role = "code"
pygments_style = "friendly"

# -- API reference -----------------------------------------------------------
autosummary_generate = True
autosummary_imported_members = False
autodoc_default_options = {"member-order": "bysource"}
autodoc_typehints = "none"
numpydoc_show_class_members = False  # the class template lists members itself
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False


def _foreign_member(app, what, name, obj, skip, options):
    """Skip members that rvm_ppl classes inherit from scikit-learn.

    ``get_params``, ``score``, ``set_*_request`` ... are scikit-learn's and
    documented there; their docstrings refer to labels of scikit-learn's own
    documentation.
    """
    if what != "class":
        return None
    target = getattr(obj, "fget", None) or getattr(obj, "__func__", None) or obj
    module = getattr(target, "__module__", None)
    if module is not None and not module.startswith("rvm_ppl"):
        return True
    return None


def setup(app):
    """Connect the member filter."""
    app.connect("autodoc-skip-member", _foreign_member)


# -- Notebooks (MyST-NB) -----------------------------------------------------
# Rendered with their stored outputs; tests/test_notebooks.py executes them.
nb_execution_mode = "off"
nb_kernel_rgx_aliases = {".*": "python3"}
myst_enable_extensions = ["colon_fence", "deflist", "dollarmath", "amsmath"]
myst_heading_anchors = 3

# -- HTML --------------------------------------------------------------------
html_theme = "pydata_sphinx_theme"
html_title = f"rvm_ppl {version}"
html_theme_options = {
    "navbar_align": "left",
    "show_toc_level": 2,
    "secondary_sidebar_items": ["page-toc"],
}
html_context = {"default_mode": "light"}
html_show_sourcelink = False
