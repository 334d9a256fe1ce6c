"""The stores' SQL and Lua files, read from package data and rendered with named values.

A file names a value as ``{name}``: a table or schema name that cannot be a
bound parameter, or a number of the protocol. :func:`render` fills in the
names it is given and the numbers of :data:`PROTOCOL_NUMBERS`, so that each
number has one source, the Python constant, and every script the store loads
states it alike. Braces around anything else (Lua's tables) are left as
they are.
"""

from __future__ import annotations

import re
from importlib import resources
from typing import Dict

from ..runs import EARLY_TOLERANCE_MS, LATE_TOLERANCE_MS

__all__ = ["PROTOCOL_NUMBERS", "read_text", "render", "without_comments"]

#: The numbers of the protocol that the scripts state, by their names in :mod:`leasecron.runs`.
PROTOCOL_NUMBERS: Dict[str, int] = {
    "LATE_TOLERANCE_MS": LATE_TOLERANCE_MS,
    "EARLY_TOLERANCE_MS": EARLY_TOLERANCE_MS,
}

_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


def read_text(*parts: str) -> str:
    """The text of the package data file ``leasecron/stores/<parts...>``."""
    path = resources.files(__package__)
    for part in parts:
        path = path.joinpath(part)
    return path.read_text("utf-8")


def without_comments(sql: str) -> str:
    """``sql`` without its comment lines (those that start with ``--``) and its outer blank space.

    The statements are sent to the server as they stand in the file, but for
    the comments, which say what the file holds (a comment at the end of a
    line stays).
    """
    return "\n".join(line for line in sql.strip().splitlines() if not line.lstrip().startswith("--")).strip()


def render(text: str, **names: str) -> str:
    """``text`` with each ``{name}`` of ``names`` or of :data:`PROTOCOL_NUMBERS` replaced by its value.

    Any other ``{...}`` is left as it is. The values of ``names`` are put in
    as they are: check an identifier before it is given here.
    """
    values = {**{name: str(number) for name, number in PROTOCOL_NUMBERS.items()}, **names}
    return _PLACEHOLDER.sub(lambda match: values.get(match.group(1), match.group(0)), text)
