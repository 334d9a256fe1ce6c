"""Catch-up on start (docs/protocol.rst, "Start-up: catch-up"), where timing is the subject: how
soon a backed-up run is taken over, the jitter of the catch-up claim, instances starting together.
Which runs and slots are claimed (the decisions) is stepped in test_stepped.py."""

from __future__ import annotations

import threading

from tests.engine.conftest import MakeCron
from tests.engine.support import (
    CATCH_UP_HOUR,
    HEARTBEAT,
    HOURLY,
    MARGIN,
    Recorder,
    dead_claim,
    latest_hourly_slot,
    stored,
)
from tests.helpers import wait_for


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
