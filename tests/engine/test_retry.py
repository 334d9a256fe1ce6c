"""call_until: store calls retried with a growing backoff, never past the time their answer matters."""

from __future__ import annotations

import time
from typing import List

import pytest

from leasecron import MemoryStore
from leasecron.engine.clock import StoreClock
from leasecron.errors import StoreError, StoreUnavailable
from leasecron.engine.store_calls import BACKOFF_FIRST_S, BACKOFF_JITTER_S, BACKOFF_MAX_S, backoff, call_until


#: The host's clock, as an instance reads it and waits on it.
CLOCK = StoreClock(MemoryStore())


class Flaky:
    """Fails with ``error`` ``failures`` times, then returns ``"ok"``; notes when each attempt came."""

    def __init__(self, failures: int, error: BaseException) -> None:
        self.failures = failures
        self.error = error
        self.times: List[float] = []

    def __call__(self) -> str:
        self.times.append(time.monotonic())
        if len(self.times) <= self.failures:
            raise self.error
        return "ok"


def test_a_call_that_succeeds_is_made_once() -> None:
    """No retry machinery runs for a call that succeeds."""
    call = Flaky(0, StoreUnavailable("down"))
    assert call_until(call, time.monotonic() + 5, CLOCK) == "ok"
    assert len(call.times) == 1


def test_store_unavailable_is_retried_with_a_doubling_backoff() -> None:
    """Each wait is at least the doubled first wait (plus jitter, bounded)."""
    call = Flaky(4, StoreUnavailable("down"))
    assert call_until(call, time.monotonic() + 10, CLOCK) == "ok"
    waits = [b - a for a, b in zip(call.times, call.times[1:])]
    assert len(waits) == 4
    for n, wait in enumerate(waits, start=1):
        assert wait >= min(BACKOFF_FIRST_S * 2 ** (n - 1), BACKOFF_MAX_S) * 0.95, waits


@pytest.mark.parametrize("error", [StoreError("bad"), ValueError("bug")])
def test_other_errors_are_not_retried(error: BaseException) -> None:
    """Only StoreUnavailable is worth retrying: anything else is raised at once."""
    call = Flaky(1, error)
    with pytest.raises(type(error)):
        call_until(call, time.monotonic() + 5, CLOCK)
    assert len(call.times) == 1


def test_the_last_error_is_raised_and_no_attempt_starts_past_the_deadline() -> None:
    """When the next wait would end past the deadline, the last error is raised instead."""
    call = Flaky(1000, StoreUnavailable("still down"))
    deadline = time.monotonic() + 0.4
    with pytest.raises(StoreUnavailable, match="still down"):
        call_until(call, deadline, CLOCK)
    assert 2 <= len(call.times) < 10
    assert all(t < deadline for t in call.times)


def test_a_deadline_already_near_allows_only_the_first_attempt() -> None:
    """With no time left for a wait, the first failure is raised."""
    call = Flaky(1, StoreUnavailable("down"))
    with pytest.raises(StoreUnavailable):
        call_until(call, time.monotonic() + 0.001, CLOCK)
    assert len(call.times) == 1


def test_backoff_bounds() -> None:
    """backoff(n) is the doubled first wait, capped, plus a bounded random jitter."""
    for n in range(1, 12):
        base = min(BACKOFF_FIRST_S * 2 ** (n - 1), BACKOFF_MAX_S)
        for _ in range(20):
            assert base <= backoff(n) <= base + BACKOFF_JITTER_S
