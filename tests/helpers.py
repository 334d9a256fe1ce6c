"""Small helpers the test modules share."""

from __future__ import annotations

import time
from typing import Callable, Optional, TypeVar

import pytest

T = TypeVar("T")


def wait_for(
    condition: Callable[[], T], timeout: float = 10.0, interval: float = 0.01, message: Optional[str] = None
) -> T:
    """Poll ``condition`` until it returns a true value (returned), or fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(message or f"condition not met within {timeout} s: {condition}")
        time.sleep(interval)
