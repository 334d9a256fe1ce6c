"""Fixtures the store tests share beyond the ``store`` of ``tests/conftest.py``."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from tests import servers
from tests.conftest import required_binary


@pytest.fixture
def own_server(tmp_path: Path) -> Iterator[servers.Server]:
    """A Valkey server of this test's own, in tmp_path: nobody else sends it a command."""
    binary = required_binary("valkey")
    server = servers.Server(binary, tmp_path / "valkey")
    try:
        server.start()
        yield server
    finally:
        server.stop()
