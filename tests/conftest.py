"""Shared fixtures: the backends every store-level and engine-level test runs on.

A *backend* opens stores that share one namespace (a database file, a key
prefix, a schema), so a test can act as several instances. Adding a store to
the suites means adding a :class:`Backend` to ``BACKENDS``; in CI
(``CI=true``) a backend that cannot be reached fails its tests, never skips.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Callable, Dict, List

import pytest

import leasecron
from leasecron.stores import MemoryStore, Store

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


class Backend:
    """Opens stores of one kind that share the namespace of one test."""

    name = "?"
    #: Whether other OS processes can open the same store from ``url()``.
    shared_between_processes = True

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.namespace = "t" + uuid.uuid4().hex[:12]
        self._opened: List[Store] = []

    def url(self) -> str:
        """A URL that opens this test's namespace (in any process)."""
        raise NotImplementedError

    def open(self) -> Store:
        """A new store handle on this test's namespace."""
        store = leasecron.open_store(self.url())
        self._opened.append(store)
        return store

    def close(self) -> None:
        for store in self._opened:
            store.close()


class MemoryBackend(Backend):
    name = "memory"
    shared_between_processes = False

    def __init__(self, tmp_path: Path) -> None:
        super().__init__(tmp_path)
        self._store = MemoryStore()

    def url(self) -> str:
        return "memory://"

    def open(self) -> Store:
        return self._store  # one process: every "handle" is the same store


class SQLiteBackend(Backend):
    name = "sqlite"

    def url(self) -> str:
        return f"sqlite:///{self.tmp_path / 'leasecron.db'}?table={self.namespace}"


BACKENDS: Dict[str, Callable[[Path], Backend]] = {
    "memory": MemoryBackend,
    "sqlite": SQLiteBackend,
}
PROCESS_BACKENDS = [name for name, cls in BACKENDS.items() if cls.shared_between_processes]


@pytest.fixture(params=list(BACKENDS))
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    """Each backend in turn, with a namespace of this test's own."""
    b = BACKENDS[request.param](tmp_path)
    yield b
    b.close()


@pytest.fixture(params=PROCESS_BACKENDS)
def process_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    """Each backend that several OS processes can share."""
    b = BACKENDS[request.param](tmp_path)
    yield b
    b.close()


@pytest.fixture
def sqlite_backend(tmp_path: Path) -> Backend:
    """The SQLite backend alone, for tests of what only SQLite has (its file lock)."""
    b = SQLiteBackend(tmp_path)
    yield b
    b.close()


@pytest.fixture
def store(backend: Backend) -> Store:
    """A store on this test's namespace of the current backend."""
    return backend.open()

