"""Fixtures of the engine tests: instances that are always stopped, and gates always opened."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Callable, Iterator, List, Optional

import pytest

from leasecron import LeaseCron, Store
from tests.conftest import ENGINE_BACKENDS, Backend, open_backend
from tests.engine_backends import process_backend  # noqa: F401 - every shared backend but Valkey
from tests.engine.support import FAST

MakeCron = Callable[..., LeaseCron]


class Gates:
    """``gates()`` is a new threading.Event that is set at teardown (before the instances
    stop), so no handler outlives its test."""

    def __init__(self) -> None:
        self.made: List[threading.Event] = []

    def __call__(self) -> threading.Event:
        event = threading.Event()
        self.made.append(event)
        return event

    def open_all(self) -> None:
        for event in self.made:
            event.set()


@pytest.fixture(params=ENGINE_BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """Each backend of the engine suite in turn (every one but Valkey: tests/conftest.py says why)."""
    yield from open_backend(request.param, tmp_path)


@pytest.fixture
def gates() -> Gates:
    g = Gates()
    yield g
    g.open_all()


@pytest.fixture
def make_cron(backend: Backend, gates: Gates) -> MakeCron:
    """``make_cron(runner, store=None, **options)``: a LeaseCron on its own store handle of
    ``backend`` (FAST options unless overridden), stopped at teardown."""
    made: List[LeaseCron] = []

    def make(runner: Optional[str] = "a", store: Optional[Store] = None, **options: Any) -> LeaseCron:
        opts = {**FAST, **options}
        cron = LeaseCron(store if store is not None else backend.open(), runner=runner, **opts)
        made.append(cron)
        return cron

    yield make
    gates.open_all()
    for cron in made:
        cron.stop(timeout=2)
