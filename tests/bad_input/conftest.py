"""Fixtures of the bad-input tests: the engine tests' instances (``make_cron``) and gates."""

from __future__ import annotations

from tests.engine.conftest import gates, make_cron  # noqa: F401 - shared with the engine tests
