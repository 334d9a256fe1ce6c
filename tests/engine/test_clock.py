"""The store's clock (SPEC.md: "Instances fire on the store's clock"; docs/leases.txt, "Late
claims"): late and early claims are skipped, and slots are claimed on the store's time."""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Iterator, List, Tuple

from leasecron import LeaseCron, MemoryStore
from tests.engine.conftest import MakeCron
from tests.engine.support import FAST, Recorder, every_second, stored
from tests.helpers import wait_for


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


def test_claim_refused_as_late_emits_skip_late(make_cron: MakeCron) -> None:
    """A claim refused as late (a newer slot has a run) emits skip "late", creates no run, and later slots run."""
    b = make_cron("b", catch_up_ms=0)
    rec, first = every_second(b)
    store = b.store
    # another instance already ran the slot after next (a clock ahead, or a late claim of ours)
    newer = store.claim("job", first + 2_000, runner="other", lease_ms=5_000)
    assert newer.outcome == "won" and newer.run is not None
    assert store.finish("job", first + 2_000, newer.run.token, "success")
    skip = rec.wait("skip", timeout=2, slot_ms=first + 1_000)
    assert (skip.reason, skip.job, skip.runner) == ("late", "job", "b")
    assert skip.run is not None and skip.run.slot_ms == first + 2_000
    assert store.get_run("job", first + 1_000) is None
    rec.wait("start", timeout=3, slot_ms=first + 3_000)
    assert rec.of("start", slot_ms=first + 2_000) == []
    assert stored(store, "job", first + 2_000).runner == "other"


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


def test_clock_of_the_store_stepping_back_gives_skip_early_and_the_slot_still_runs() -> None:
    """A claim refused as early emits skip "early"; the clock is re-read and the slot still runs when due on it."""
    with steppable_store_cron() as (step, store, cron, rec, first):
        step[0] = -10_400  # the store's clock steps back 10.4 s
        skip = rec.wait("skip", timeout=2, slot_ms=first + 1_000)
        assert skip.reason == "early" and skip.run is None
        wait_for(lambda: abs(cron.clock.offset_ms + 10_400) < 100, 2, message="clock not re-synced")
        assert store.get_run("job", first + 1_000) is None
        start = rec.wait("start", timeout=13, slot_ms=first + 1_000)
        assert start.run is not None and 0 <= start.run.started_ms - start.slot_ms < 150
        assert rec.of("skip", reason="late") == []


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
