"""Catch-up on start (docs/leases.txt, "Catch-up on start"): step 1, unfinished runs; step 2,
the missed latest slot, claimed after a jitter with reason "catch-up"."""

from __future__ import annotations

import threading

import pytest

from tests.engine.conftest import MakeCron
from tests.engine.support import (
    CATCH_UP_HOUR,
    FAST,
    HOURLY,
    Recorder,
    align,
    dead_claim,
    every_second,
    latest_hourly_slot,
    stored,
    wait_store_time,
)
from tests.helpers import wait_for

LEASE, HEARTBEAT = FAST["lease_ms"], FAST["heartbeat_ms"]
MARGIN = 150
HOUR_MS = HOURLY * 1000


# -- step 1: unfinished runs ---------------------------------------------------------


def test_unfinished_run_with_a_live_lease_makes_the_starting_instance_its_backup(make_cron: MakeCron) -> None:
    """Catch-up step 1: an unfinished run with a live lease makes the starting instance its backup, not its runner."""
    b = make_cron("b", catch_up_ms=CATCH_UP_HOUR)
    rec = Recorder(b)
    b.add_job(lambda: None, HOURLY, name="job")
    dead = dead_claim(b.store, "job", latest_hourly_slot(b.store), 800)
    b.start()
    threading.Event().wait(0.3)
    assert rec.of("start") == []  # the lease is alive: no catch-up, no takeover
    assert stored(b.store, "job", dead.slot_ms).token == dead.token
    start = rec.wait("start", timeout=2)
    assert (start.slot_ms, start.attempt, start.reason) == (dead.slot_ms, 2, "takeover")
    assert start.run is not None
    assert dead.lease_end_ms <= start.run.started_ms <= dead.lease_end_ms + 2 * HEARTBEAT + MARGIN
    rec.wait("success")
    assert len(rec.of("start")) == 1


def test_expired_unfinished_run_that_is_still_the_latest_is_claimed_at_once(make_cron: MakeCron) -> None:
    """Catch-up step 1: an expired unfinished run, still the latest, is claimed at once as attempt 2 ("takeover")."""
    b = make_cron("b", lease_ms=3_000, heartbeat_ms=1_000, catch_up_ms=CATCH_UP_HOUR)
    rec = Recorder(b)
    b.add_job(lambda: None, HOURLY, name="job")
    dead = dead_claim(b.store, "job", latest_hourly_slot(b.store), 1)
    wait_for(lambda: b.store.now_ms() > dead.lease_end_ms, 1)
    started_at = b.store.now_ms()
    b.start()
    start = rec.wait("start", timeout=2)
    assert (start.slot_ms, start.attempt, start.reason) == (dead.slot_ms, 2, "takeover")
    assert start.run is not None and start.run.started_ms - started_at < 500  # a backup check: >= 1 000
    rec.wait("success")
    assert len(rec.of("start")) == 1


@pytest.mark.parametrize("catch_up_ms", [CATCH_UP_HOUR, 0])
def test_expired_unfinished_run_with_a_newer_slot_due_is_left_alone(make_cron: MakeCron, catch_up_ms: int) -> None:
    """Catch-up step 1: an expired run with a newer slot due is not retried; the newer run replaces (interrupts) it."""
    b = make_cron("b", catch_up_ms=catch_up_ms)
    rec = Recorder(b)
    b.add_job(lambda: None, HOURLY, name="job")
    latest = latest_hourly_slot(b.store)
    old = dead_claim(b.store, "job", latest - HOUR_MS, 1)
    wait_for(lambda: b.store.now_ms() > old.lease_end_ms, 1)
    b.start()
    if catch_up_ms:
        start = rec.wait("start", timeout=2)
        assert (start.slot_ms, start.attempt, start.reason) == (latest, 1, "catch-up")
        rec.wait("success")
        after = stored(b.store, "job", old.slot_ms)
        assert (after.status, after.attempt, after.runner) == ("interrupted", 1, "dead")
    else:
        threading.Event().wait(4 * HEARTBEAT / 1000)
        after = stored(b.store, "job", old.slot_ms)
        assert (after.status, after.attempt, after.token) == ("running", 1, old.token)
    assert rec.of("start", slot_ms=old.slot_ms) == []


# -- step 2: the missed run ---------------------------------------------------------------


def test_missed_latest_slot_is_claimed_with_reason_catch_up_after_the_jitter(make_cron: MakeCron) -> None:
    """Catch-up step 2: the unclaimed latest slot is claimed with reason "catch-up" after a jitter in [0, jitter_ms]."""
    jitter = 300
    b = make_cron("b", catch_up_ms=CATCH_UP_HOUR, jitter_ms=jitter)
    rec = Recorder(b)
    names = [f"job{i}" for i in range(6)]
    for name in names:
        b.add_job(lambda: None, HOURLY, name=name)
    latest = latest_hourly_slot(b.store)
    started_at = b.store.now_ms()
    b.start()
    wait_for(lambda: len(rec.of("success")) == len(names), 3)
    delays = []
    for name in names:
        (start,) = rec.of("start", job=name)
        assert (start.slot_ms, start.attempt, start.reason) == (latest, 1, "catch-up")
        assert start.run is not None
        delays.append(start.run.started_ms - started_at)
    assert all(0 <= d <= jitter + MARGIN for d in delays), delays
    assert max(delays) - min(delays) > 30, f"no jitter applied: {delays}"


def test_only_the_latest_missed_slot_is_caught_up(make_cron: MakeCron) -> None:
    """Catch-up step 2: after a gap of several slots only the latest slot is caught up, once."""
    a = make_cron("a", catch_up_ms=0)
    rec_a, last = every_second(a)
    a.stop(timeout=1)
    assert a.store.get_run("job", last + 1_000) is None
    wait_store_time(a.store, last + 3_000)  # slots last+1 s, +2 s, +3 s pass with nobody running
    align(a.store, 1_000, 100, 600)
    b = make_cron("b")  # catch_up_ms: the default, 300 s
    rec_b = Recorder(b)
    b.add_job(lambda: None, 1, name="job")
    latest = (b.store.now_ms() // 1_000) * 1_000
    b.start()
    start = rec_b.wait("start", timeout=2)
    assert (start.slot_ms, start.reason, start.attempt) == (latest, "catch-up", 1)
    rec_b.wait("start", timeout=2, slot_ms=latest + 1_000)
    catch_ups = [e.slot_ms for e in rec_b.of("start", reason="catch-up")]
    assert catch_ups == [latest]
    slots = sorted(r.slot_ms for r in b.store.runs("job", limit=50))
    assert [s for s in slots if last < s < latest] == []
    assert slots[:3] == [last, latest, latest + 1_000]


def test_catch_up_ms_zero_disables_catch_up(make_cron: MakeCron) -> None:
    """With catch_up_ms=0 a starting instance doesn't claim the missed latest slot."""
    b = make_cron("b", catch_up_ms=0)
    rec = Recorder(b)
    b.add_job(lambda: None, HOURLY, name="job")
    b.start()
    threading.Event().wait(0.4)
    assert rec.of("start") == [] and rec.of("skip") == []
    assert b.store.runs("job") == []


@pytest.mark.parametrize("catch_up_ms, caught_up", [(800, False), (1_800, True)])
def test_latest_slot_older_than_catch_up_ms_is_not_caught_up(
    make_cron: MakeCron, catch_up_ms: int, caught_up: bool
) -> None:
    """The latest slot is caught up only if it was due less than catch_up_ms ago (here 1.0-1.4 s)."""
    b = make_cron("b", catch_up_ms=catch_up_ms)
    rec = Recorder(b)
    b.add_job(lambda: None, 2, name="job")
    now = align(b.store, 2_000, 1_000, 1_400)
    latest = now - now % 2_000
    b.start()
    if caught_up:
        start = rec.wait("start", timeout=1)
        assert (start.slot_ms, start.reason) == (latest, "catch-up")
    else:
        threading.Event().wait(0.3)
        assert rec.of("start") == []
        assert b.store.get_run("job", latest) is None


def test_instances_starting_together_catch_up_once(make_cron: MakeCron) -> None:
    """Catch-up step 2: instances starting together catch the slot up once; the others are its backups, none skips."""
    crons = [make_cron(f"i{n}", catch_up_ms=CATCH_UP_HOUR, jitter_ms=200) for n in range(3)]
    recs = [Recorder(c) for c in crons]
    for cron in crons:
        cron.add_job(lambda: None, HOURLY, name="job")
    for cron in crons:
        cron.start()
    wait_for(lambda: any(r.of("success") for r in recs), 3)
    threading.Event().wait(0.4)  # every jitter has passed
    starts = [e for r in recs for e in r.of("start")]
    assert len(starts) == 1 and starts[0].reason == "catch-up"
    assert [e for r in recs for e in r.of("skip")] == []
    (run,) = crons[0].store.runs("job")
    assert (run.status, run.attempt) == ("success", 1)
