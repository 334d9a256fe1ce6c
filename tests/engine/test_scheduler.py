"""The scheduler thread's two kinds of time (leasecron/scheduler.py): an entry on the store's clock
follows a correction of the estimate of that clock; an entry on the host's monotonic clock (a
lease's local deadline, a delay) fires when it was meant to, whatever the correction."""

from __future__ import annotations

import threading
import time
from typing import Dict, Iterator, List

import pytest

from leasecron import MemoryStore
from leasecron.clock import StoreClock
from leasecron.scheduler import Scheduler

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def stepped() -> Iterator[tuple]:
    """(step, clock, scheduler, fired): a memory store whose clock runs ``step[0]`` ms off the host's,
    its synced clock estimate, a started scheduler, and when each named entry fired (monotonic s)."""
    step: List[int] = [0]
    store = MemoryStore(clock=lambda: time.time_ns() // 1_000_000 + step[0])
    clock = StoreClock(store)
    clock.sync()
    errors: List[BaseException] = []
    scheduler = Scheduler(clock, errors.append)
    scheduler.start()
    fired: Dict[str, float] = {}
    try:
        yield step, clock, scheduler, fired
    finally:
        scheduler.stop(timeout=5)
    assert errors == []


def _note(fired: Dict[str, float], done: threading.Event, name: str) -> None:
    fired[name] = time.monotonic()
    if len(fired) == 2:
        done.set()


@pytest.mark.parametrize("offset_ms", [2_000, -2_000], ids=["forward", "back"])
def test_a_monotonic_entry_ignores_a_correction_a_store_entry_follows_it(stepped: tuple, offset_ms: int) -> None:
    """Both entries are due in 1 s; then the store's clock steps 2 s and the estimate is corrected:
    the monotonic entry still fires after 1 s, the store-clock entry 2 s earlier or later."""
    step, clock, scheduler, fired = stepped
    done = threading.Event()
    start = time.monotonic()
    scheduler.call_at_monotonic(start + 1.0, _note, fired, done, "monotonic")
    scheduler.call_at(clock.now_ms() + 1_000 + max(0, offset_ms), _note, fired, done, "store")
    step[0] = offset_ms
    clock.sync()
    scheduler.call_later(0, lambda: None)  # wake the thread: it sees the corrected estimate
    assert done.wait(10), fired
    assert 0.95 <= fired["monotonic"] - start <= 1.3, fired["monotonic"] - start
    # the store entry was due 1 s (+2 s when stepping forward) after start on the old estimate:
    # after the correction that is 1 s - offset + max(0, offset) on the host's clock
    expected = 1.0 - offset_ms / 1000 + max(0, offset_ms) / 1000
    assert expected - 0.05 <= fired["store"] - start <= expected + 0.3, (fired["store"] - start, expected)
