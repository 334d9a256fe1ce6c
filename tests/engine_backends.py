"""``process_backend`` of the engine and process suites: their conftests import it.

Each backend several OS processes can share, but Valkey (``tests/conftest.py``,
``ENGINE_BACKENDS``, says why). It lives outside every conftest so that it overrides the
root's ``process_backend`` only where it is imported.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from tests.conftest import ENGINE_PROCESS_BACKENDS, Backend, open_backend


@pytest.fixture(params=ENGINE_PROCESS_BACKENDS)
def process_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """Each shared backend but Valkey, with a namespace of this test's own."""
    yield from open_backend(request.param, tmp_path)
