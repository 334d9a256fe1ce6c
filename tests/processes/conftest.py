"""The ``cluster`` fixture: worker processes on this test's ``process_backend``, killed in teardown."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest

from tests.engine_backends import process_backend  # noqa: F401 - every shared backend but Valkey

from .harness import Cluster


@pytest.fixture
def cluster(process_backend: Any, tmp_path: Path) -> Iterator[Cluster]:  # noqa: F811 - the fixture imported above
    """A :class:`Cluster` on the backend's URL; every process it started is killed afterwards."""
    c = Cluster(process_backend.url(), tmp_path)
    try:
        yield c
    finally:
        c.close()
