"""The documentation site builds, with every Sphinx warning an error.

``python -m sphinx -W --keep-going -b html docs <tmp>``: a broken cross-reference,
a ``literalinclude`` of a file that moved, a docstring that is not valid
reStructuredText or a page left out of every toctree fails the suite, with
all the warnings in the failure message.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs.readme_examples import DOCS, ROOT

pytest.importorskip("sphinx", minversion="7.2")


@pytest.mark.timeout(120)
def test_the_docs_site_builds_without_warnings(tmp_path: Path) -> None:
    """The HTML build of docs/ succeeds under ``-W`` and has a page for the index, the API and the changelog."""
    out = tmp_path / "html"
    result = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
         "-d", str(tmp_path / "doctrees"), str(DOCS), str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=110,
    )  # fmt: skip
    assert result.returncode == 0, f"sphinx-build failed:\n{result.stderr}\n{result.stdout}"
    for page in ("index", "api", "changelog", "protocol", "gunicorn"):
        assert (out / f"{page}.html").is_file(), page
    api = (out / "api.html").read_text(encoding="utf-8")
    assert "LeaseCron" in api and "GunicornHooks" in api, "autodoc documented nothing"
