"""The fast lane: which tests ``pytest -m fast`` runs (docs/development.rst, "The fast lane").

For the people who change the code, a check in minutes: the store contract suite (``tests/stores``)
on the in-process stores (memory and SQLite), the stepped engine tests (the modules built on
``tests/engine/stepped.py``) and the structure tests. Nothing that needs a server (Redis, Valkey,
PostgreSQL, a cluster) is in it. ``tests/conftest.py`` marks these tests ``fast`` as they are
collected; CI runs every test, marked or not.
"""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: The stores of the fast lane: in-process, nothing to start.
FAST_BACKENDS = ("memory", "sqlite")
#: The backends that need a server: never in the fast lane.
SERVER_BACKENDS = ("redis", "valkey", "redis-cluster", "postgresql")
#: The structure tests: the package's shape and its import paths.
STRUCTURE_TESTS = ("tests/test_structure.py", "tests/engine/test_import_paths.py")
#: The module the stepped engine tests are built on.
STEPPED = "tests.engine.stepped"


def _backend(item: pytest.Item) -> object:
    """The backend a test runs on (its ``backend`` or ``process_backend`` parameter), or None."""
    callspec = getattr(item, "callspec", None)
    params = callspec.params if callspec is not None else {}
    return params.get("backend", params.get("process_backend"))


def _on_a_server(item: pytest.Item) -> bool:
    """Whether any parameter of the test names a store that needs a server."""
    callspec = getattr(item, "callspec", None)
    return callspec is not None and any(value in SERVER_BACKENDS for value in callspec.params.values())


def _stepped(item: pytest.Item) -> bool:
    """Whether the test's module is built on ``tests/engine/stepped.py`` (uses something of it)."""
    module = getattr(item, "module", None)
    return module is not None and any(getattr(value, "__module__", None) == STEPPED for value in vars(module).values())


def in_the_fast_lane(item: pytest.Item) -> bool:
    """Whether ``item`` belongs to the fast lane."""
    if _on_a_server(item):
        return False
    path = Path(str(item.fspath)).resolve().relative_to(ROOT).as_posix()
    if path in STRUCTURE_TESTS:
        return True
    if path.startswith("tests/stores/"):
        return _backend(item) in FAST_BACKENDS
    return path.startswith("tests/engine/") and _stepped(item)
