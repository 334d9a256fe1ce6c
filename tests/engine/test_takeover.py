"""Backups and takeover of a dead runner (docs/protocol.rst, "backup", "The life of a run": how
long a takeover takes; rules 3-6). A dead runner is a store-level claim that never heartbeats.
How max_attempts counts dead runners is a decision, stepped in test_stepped.py."""

from __future__ import annotations

import threading

from leasecron import Context
from tests.engine.conftest import Gates, MakeCron
from tests.engine.support import HEARTBEAT, HOURLY, LEASE, MARGIN, Calls, Recorder, dead_claim, handler
from tests.engine.support import latest_hourly_slot, stored
from tests.helpers import wait_for


def test_backup_takes_over_a_dead_run_within_lease_plus_two_heartbeats(make_cron: MakeCron) -> None:
    """A backup takes a dead run over as attempt 2 ("takeover") within lease end + 2 heartbeats."""
    b = make_cron("b")
    rec = Recorder(b)
    calls = Calls()
    b.add_job(handler(b.store, calls), HOURLY, name="job")
    dead = dead_claim(b.store, "job", latest_hourly_slot(b.store), LEASE)
    b.start()
    start = rec.wait("start", timeout=3)
    run = start.run
    assert run is not None
    assert (start.reason, start.attempt, start.slot_ms, start.runner) == ("takeover", 2, dead.slot_ms, "b")
    assert dead.lease_end_ms <= run.started_ms <= dead.lease_end_ms + 2 * HEARTBEAT + MARGIN, (
        run.started_ms - dead.lease_end_ms
    )
    assert run.token != dead.token and run.reason == "takeover"
    ctx = calls.wait(1)[0]
    assert (ctx.attempt, ctx.reason, ctx.token) == (2, "takeover", run.token)
    rec.wait("success", slot_ms=dead.slot_ms)
    final = stored(b.store, "job", dead.slot_ms)
    assert (final.status, final.attempt, final.runner) == ("success", 2, "b")


def test_of_several_backups_exactly_one_wins_and_the_others_back_it_up(make_cron: MakeCron, gates: Gates) -> None:
    """Of several backups exactly one wins the takeover; the others back up attempt 2 in turn."""
    release_third, release_second = gates(), gates()
    crons = [make_cron(name, stop_timeout_ms=0) for name in ("b1", "b2", "b3")]
    recs = [Recorder(c) for c in crons]
    calls = Calls()

    def body(ctx: Context) -> None:
        if ctx.attempt == 2:
            release_second.wait(10)  # ignores its signal: its instance will abandon it
        else:
            release_third.wait(10)

    for cron in crons:
        cron.add_job(handler(cron.store, calls, body), HOURLY, name="job")
    store = crons[0].store
    dead = dead_claim(store, "job", latest_hourly_slot(store), LEASE)
    for cron in crons:
        cron.start()
    calls.wait(1, timeout=3)
    # a lease and several checks later, still exactly one attempt 2 started
    threading.Event().wait((LEASE + 3 * HEARTBEAT) / 1000)
    starts = [e for r in recs for e in r.of("start")]
    assert [(e.attempt, e.reason) for e in starts] == [(2, "takeover")]
    assert len(calls) == 1
    second = stored(store, "job", dead.slot_ms)
    assert second.attempt == 2 and second.status == "running" and second.lease_end_ms > store.now_ms()
    winner = next(c for c in crons if c.runner == second.runner)
    # the winner dies (abandons its run without releasing it): a remaining backup takes over
    winner.stop(timeout=0)
    ctx3 = calls.wait(2, timeout=3)[1]
    assert ctx3.attempt == 3 and ctx3.reason == "takeover" and ctx3.runner != winner.runner
    starts = [e for r in recs for e in r.of("start")]
    assert sorted(e.attempt for e in starts) == [2, 3]
    release_third.set()
    wait_for(lambda: stored(store, "job", dead.slot_ms).status == "success", 3)
    assert stored(store, "job", dead.slot_ms).attempt == 3


def test_a_released_run_is_taken_over_even_when_max_attempts_is_one(make_cron: MakeCron) -> None:
    """Hand-overs don't count: a run released by its runner is taken over although max_attempts=1."""
    b = make_cron("b", max_attempts=1)
    rec = Recorder(b)
    b.add_job(lambda: None, HOURLY, name="job")
    store = b.store
    dead = dead_claim(store, "job", latest_hourly_slot(store), 30_000, runner="leaving")
    b.start()
    threading.Event().wait(2 * HEARTBEAT / 1000)  # b watches the live run
    assert rec.of("start") == []
    assert store.release("job", dead.slot_ms, dead.token)
    released_at = stored(store, "job", dead.slot_ms).lease_end_ms
    start = rec.wait("start", timeout=2)
    assert (start.attempt, start.reason) == (2, "takeover")
    assert start.run is not None and start.run.started_ms <= released_at + 2 * HEARTBEAT + MARGIN
    rec.wait("success")
    final = stored(store, "job", dead.slot_ms)
    assert final.status == "success" and final.handed_over
