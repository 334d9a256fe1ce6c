"""Whether the tests run in CI, and the one rule that follows: what is missing skips here, fails there.

On a developer's machine a test that needs something absent (a server binary, a browser, a
quality tool) skips with the reason; in CI (``CI=true``) the same absence is a failure, so a
green CI run never hides a test that did not run.
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest

#: The tests run in CI (``CI`` is ``1``, ``true`` or ``yes``).
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def skip_or_fail(reason: str, in_ci: str = "") -> NoReturn:
    """Skip the test with ``reason``; in CI fail it with ``reason`` followed by ``in_ci`` (why it must not skip)."""
    if IN_CI:
        pytest.fail(reason + in_ci)
    pytest.skip(reason)
