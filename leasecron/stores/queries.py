"""Named queries kept as package data: ``leasecron/stores/sql/<dialect>/queries.sql``.

A file holds blocks that each open with a header line ``-- name: <name>``,
followed by comment lines that say what the query takes and returns, and the
statement. Table names cannot be bound as parameters, so a query may name
``{table}``; the name is checked to be a plain identifier before it is put
in (:func:`~leasecron.stores.templates.render`). Every value is bound as a
parameter.
"""

from __future__ import annotations

import re
from typing import Dict

from ..errors import ConfigError
from .templates import read_text, render, without_comments

__all__ = ["load_queries", "check_identifier"]

_HEADER = re.compile(r"^--\s*name:\s*(\w+)\s*$", re.MULTILINE)
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,47}$")


def check_identifier(name: str, what: str = "table") -> str:
    """Return ``name`` if it is a plain SQL identifier, else raise ConfigError."""
    if not isinstance(name, str) or not _IDENTIFIER.match(name):
        raise ConfigError(
            f"{what} name must be letters, digits and underscores (not starting with a digit,"
            f" at most 48 characters), not {name!r}"
        )
    return name


def load_queries(dialect: str, **names: str) -> Dict[str, str]:
    """The named queries of ``sql/<dialect>/queries.sql``, with ``{table}`` and the like filled in."""
    parts = _HEADER.split(read_text("sql", dialect, "queries.sql"))
    queries = {}
    for name, body in zip(parts[1::2], parts[2::2]):
        queries[name] = render(without_comments(body).rstrip(";"), **names)
    return queries
