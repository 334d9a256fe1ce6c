"""Sphinx configuration of the leasecron documentation site.

Build it with ``python -m sphinx -W --keep-going -b html docs docs/_build`` (the test
suite does, in tests/docs/test_sphinx.py). The API reference is autodoc over the
package imported from this checkout; code blocks are the tested files under
``examples/`` (``literalinclude``), never copies.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import leasecron  # noqa: E402

project = "leasecron"
author = "the leasecron authors"
copyright = "the leasecron authors"
release = leasecron.__version__
version = release

extensions = ["sphinx.ext.autodoc"]
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"show-inheritance": True}

master_doc = "index"
exclude_patterns = ["_build"]
html_theme = "alabaster"
html_static_path: list = []
html_title = f"leasecron {release}"
