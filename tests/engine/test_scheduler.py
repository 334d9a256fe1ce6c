"""The scheduler (leasecron/engine/scheduler.py). Its thread's two kinds of time: an entry on the store's
clock follows a correction of the estimate of that clock; an entry on the host's monotonic clock
(a lease's local deadline, a delay) fires when it was meant to, whatever the correction. And its
step, run_due(), which runs what is due at a time in the caller's thread."""

from __future__ import annotations

import threading
import time
from typing import Dict, Iterator, List

import pytest

from leasecron import MemoryStore
from leasecron.engine.clock import StoreClock
from leasecron.engine.scheduler import Scheduler
from tests.engine.stepped import Failures, ManualTime, at

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
    scheduler = Scheduler(clock, Failures(errors))
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


# -- stepped: run_due, in the calling thread, at a time passed in ------------------------------


def _stepped_scheduler() -> "tuple[ManualTime, Scheduler, List[BaseException]]":
    time_ = ManualTime(at(0))
    clock = StoreClock(MemoryStore(clock=time_.store_ms), monotonic_ns=time_.monotonic_ns)
    clock.sync()
    errors: List[BaseException] = []
    return time_, Scheduler(clock, Failures(errors)), errors


def test_run_due_runs_what_is_due_at_the_clocks_time_in_the_calling_thread() -> None:
    """Without its thread, run_due() runs the entries due by the clock (both kinds of time), in
    the calling thread, store-clock entries first; it returns how many ran."""
    time_, scheduler, errors = _stepped_scheduler()
    ran: List[str] = []
    threads: List[threading.Thread] = []

    def note(name: str) -> None:
        ran.append(name)
        threads.append(threading.current_thread())

    scheduler.call_later(2_000, note, "later, 2 s")
    scheduler.call_at_monotonic(0.5, note, "monotonic, 0.5 s")
    scheduler.call_at(at(1), note, "store, 1 s")
    assert scheduler.run_due() == 0 and ran == []
    time_.advance(1_000)
    assert scheduler.run_due() == 2
    assert ran == ["store, 1 s", "monotonic, 0.5 s"] and set(threads) == {threading.current_thread()}
    time_.advance(1_000)
    assert scheduler.run_due() == 1 and ran[-1] == "later, 2 s"
    assert errors == []


def test_run_due_takes_the_times_given_and_runs_what_its_entries_plan_for_then() -> None:
    """Times passed in override the clock's; an entry planned by another for a time already due
    runs in the same step; a raising entry is reported and the step goes on; after stop(), nothing."""
    _, scheduler, errors = _stepped_scheduler()
    ran: List[str] = []

    def plan_more() -> None:
        ran.append("first")
        scheduler.call_at(at(3), ran.append, "planned by the first")
        scheduler.call_at(at(9), ran.append, "not due")

    def fail() -> None:
        raise RuntimeError("a task failed")

    scheduler.call_at(at(4), plan_more)
    scheduler.call_at_monotonic(4.0, fail)
    scheduler.call_at_monotonic(5.0, ran.append, "after the failure")
    assert scheduler.run_due(now_ms=at(5), mono_s=5.0) == 4
    assert ran == ["first", "planned by the first", "after the failure"]
    assert [str(e) for e in errors] == ["a task failed"]
    scheduler.stop()
    assert scheduler.run_due(now_ms=at(10), mono_s=10.0) == 0 and ran[-1] == "after the failure"
