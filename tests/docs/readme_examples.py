"""The README's example blocks, and the files under ``examples/`` they show.

A block in README.rst that a test runs is marked with a comment naming its
file, followed by the block::

    .. example: examples/quickstart.py

    .. code-block:: python

        import leasecron
        ...

The block must equal the file, which the tests run as it is: what a reader
copies from the README is what the suite ran. The pages of the docs site show
the other example files whole, with ``.. literalinclude:: ../examples/...``:
:func:`shown_examples` gathers both, so that a test can ask that a file is
shown to readers wherever it is.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path
from typing import Dict, List

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.rst"
DOCS = ROOT / "docs"

_MARKER = re.compile(r"^\.\. example: (\S+)\s*$")
_INCLUDE = re.compile(r"^\.\. literalinclude:: (\S+)\s*$", re.M)


def readme_examples(text: str) -> Dict[str, str]:
    """``{path: block text}`` for every marked block of an rst text."""
    lines = text.splitlines()
    found: Dict[str, str] = {}
    for i, line in enumerate(lines):
        match = _MARKER.match(line)
        if match is None:
            continue
        path = match.group(1)
        if path in found:
            raise ValueError(f"README shows {path} twice")
        found[path] = _block_after(lines, i + 1, path)
    return found


def _block_after(lines: List[str], start: int, path: str) -> str:
    i = start
    while i < len(lines) and not lines[i].strip():
        i += 1
    if i == len(lines) or not (lines[i].startswith(".. code-block::") or lines[i].rstrip() == "::"):
        raise ValueError(f"the example marker of {path} is not followed by a code block")
    i += 1
    while i < len(lines) and lines[i].lstrip().startswith(":"):  # code-block options
        i += 1
    body: List[str] = []
    while i < len(lines) and (not lines[i].strip() or lines[i].startswith(" ")):
        body.append(lines[i])
        i += 1
    return textwrap.dedent("\n".join(body)).strip("\n") + "\n"


def docs_includes() -> Dict[str, str]:
    """Each file a page of docs/ includes whole (``.. literalinclude::``, relative to docs/), as a path
    from the project's root, mapped to the first page that includes it."""
    found: Dict[str, str] = {}
    for page in sorted(DOCS.glob("*.rst")):
        for name in _INCLUDE.findall(page.read_text(encoding="utf-8")):
            path = (DOCS / name).resolve().relative_to(ROOT).as_posix()
            found.setdefault(path, page.name)
    return found


def shown_examples() -> Dict[str, str]:
    """``{path: text a reader sees}`` for every example file shown by the README (its marked block)
    or by a page of the docs site (the file itself, which ``literalinclude`` shows whole)."""
    included = [path for path in docs_includes() if path.startswith("examples/")]
    shown = {path: (ROOT / path).read_text(encoding="utf-8") for path in included}
    shown.update(readme_examples(README.read_text(encoding="utf-8")))
    return shown


def docs_text() -> str:
    """The README and every page of docs/, joined: the prose a reader can find."""
    pages = [README] + sorted(DOCS.glob("*.rst"))
    return "\n".join(page.read_text(encoding="utf-8") for page in pages)
