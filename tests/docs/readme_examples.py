"""The README's example blocks, and the files under ``examples/`` they show.

A block in README.rst that a test runs is marked with a comment naming its
file, followed by the block::

    .. example: examples/quickstart.py

    .. code-block:: python

        import leasecron
        ...

The block must equal the file, which the tests run as it is: what a reader
copies from the README is what the suite ran.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path
from typing import Dict, List

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.rst"

_MARKER = re.compile(r"^\.\. example: (\S+)\s*$")


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
