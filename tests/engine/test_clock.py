"""The store's clock (docs/protocol.rst, "Late and early claims"): slots are claimed on the
store's time, and a step of the store's clock is noticed by the next won claim. The late and
early skips are decisions, stepped in test_stepped.py."""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Iterator, List, Tuple

from leasecron import LeaseCron, MemoryStore
from tests.engine.support import FAST, Recorder
from tests.helpers import wait_for


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


def test_slots_fire_on_the_store_clock_not_the_hosts() -> None:
    """Instances fire on the store's clock: with the store 1 h 400 ms ahead, slots are the store's, started on time."""
    store = MemoryStore(clock=lambda: wall_ms() + 3_600_000 + 400)
    cron = LeaseCron(store, runner="ahead", catch_up_ms=0, **FAST)
    rec = Recorder(cron)
    cron.add_job(lambda: None, 1, name="job")
    try:
        started_at = store.now_ms()
        cron.start()
        first = rec.wait("success", timeout=3)
        second = rec.wait("success", timeout=3, slot_ms=first.slot_ms + 1_000)
        assert started_at < first.slot_ms <= started_at + 1_500
        assert abs(first.slot_ms - wall_ms()) > 3_590_000  # not a slot of the host's time
        for event in (first, second):
            assert event.run is not None
            assert 0 <= event.run.started_ms - event.slot_ms < 150, event.run.started_ms - event.slot_ms
        assert rec.of("skip") == []
        assert abs(cron.clock.offset_ms - 3_600_400) < 100
    finally:
        cron.stop(timeout=1)


@contextmanager
def steppable_store_cron() -> Iterator[Tuple[List[int], MemoryStore, LeaseCron, Recorder, int]]:
    """A started instance running a 1 s job on a memory store whose clock runs ``step[0]`` ms
    off the host's: (step, store, cron, recorder, the first slot that succeeded)."""
    step: List[int] = [0]
    store = MemoryStore(clock=lambda: wall_ms() + step[0])
    cron = LeaseCron(store, runner="b", catch_up_ms=0, **FAST)
    rec = Recorder(cron)
    cron.add_job(lambda: None, 1, name="job")
    try:
        cron.start()
        first = rec.wait("success", timeout=3).slot_ms
        yield step, store, cron, rec, first
    finally:
        cron.stop(timeout=1)


def _store_clock_steps(offset_ms: int) -> None:
    """The store's clock steps by ``offset_ms`` (less than the 10 s that makes a claim early):
    the first won claim shows it, the clock is re-read at once (not a minute later), and the
    slots after it start on time by the store's new clock."""
    with steppable_store_cron() as (step, store, cron, rec, _):
        step[0] = offset_ms
        stepped_at = time.monotonic()
        wait_for(lambda: abs(cron.clock.offset_ms - offset_ms) < 100, 3, message="the clock was not read again")
        assert time.monotonic() - stepped_at < 3
        later = store.now_ms() + 1_000

        def on_time_run() -> object:
            done = [e for e in rec.of("success") if e.slot_ms >= later]
            return done[0] if done else None

        event = wait_for(on_time_run, 4)
        assert event.run is not None and 0 <= event.run.started_ms - event.slot_ms < 150
        assert rec.of("skip", reason="early") == []


def test_store_clock_stepping_forward_is_noticed_by_the_next_won_claim() -> None:
    """The store's clock steps 5 s forward: re-read after the next win, slots on its time again."""
    _store_clock_steps(5_000)


def test_store_clock_stepping_back_is_noticed_by_the_next_won_claim() -> None:
    """The store's clock steps 3 s back (claims are not early yet): re-read after the next win."""
    _store_clock_steps(-3_000)
