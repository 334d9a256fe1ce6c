"""The schema migrations of the SQL stores, one file each, and the one runner that applies them.

``sql/<dialect>/NNNN_<what>.sql`` (package data) is migration ``NNNN`` of a dialect: it brings a
schema of version ``NNNN - 1`` to ``NNNN``, and the last number is the version a release writes.
A store applies, in order, those above the version stamped in its ``<table>_meta``, inside the
lock and transaction in which it creates its schema (:func:`migrate`). The one idea: a released
migration is never edited, and a PL/pgSQL function never replaced in place (its name carries the
number of the migration that created it: ``{table}_claim_v2`` by migration 2, none for migration
1), so instances of an older release keep working beside a newer one.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from importlib import resources
from typing import Callable, Tuple

from ..errors import StoreError
from .templates import render, without_comments

__all__ = ["Migration", "check_version", "latest_version", "migrate", "migrations"]

_FILE = re.compile(r"^(\d{4})_\w+\.sql$")


@dataclasses.dataclass(frozen=True)
class Migration:
    """One migration file: the version it brings a schema to, its file name and its text."""

    version: int
    name: str
    text: str


@functools.lru_cache(maxsize=None)
def migrations(dialect: str) -> Tuple[Migration, ...]:
    """The migrations of ``sql/<dialect>/``, in order: numbered 1, 2, ... without a gap."""
    folder = resources.files(__package__).joinpath("sql").joinpath(dialect)
    found = []
    for entry in folder.iterdir():
        match = _FILE.match(entry.name)
        if match:
            found.append(Migration(int(match.group(1)), entry.name, entry.read_text("utf-8")))
    found.sort(key=lambda migration: migration.version)
    numbers = [migration.version for migration in found]
    if numbers != list(range(1, len(found) + 1)):  # a packaging mistake, not a user's
        raise RuntimeError(f"the {dialect} migrations are numbered {numbers}, not 1 to {len(found)}")
    return tuple(found)


def latest_version(dialect: str) -> int:
    """The schema version this release writes: the number of the dialect's last migration."""
    return migrations(dialect)[-1].version


def check_version(dialect: str, version: int, where: str) -> int:
    """``version``, the schema version stamped in ``where``, if this release knows it; else
    :class:`~leasecron.StoreError` saying to upgrade (it is never retried)."""
    latest = latest_version(dialect)
    if version > latest:
        raise StoreError(
            f"{where} has schema version {version}, newer than this leasecron knows ({latest}): upgrade leasecron"
        )
    return version


def migrate(dialect: str, version: int, execute: Callable[[str], None], **names: str) -> int:
    """Run ``execute`` on each migration above ``version``, in order, without its comment lines
    and rendered with ``names`` (say ``table``); the version the schema has now. The caller holds the lock and the
    transaction the migrations run in, and stamps the version."""
    for migration in migrations(dialect):
        if migration.version > version:
            execute(render(without_comments(migration.text), **names))
    return max(version, latest_version(dialect))
