"""A dead run and the next slot (docs/protocol.rst, "Why a newer run wins over a dead older one"):
the three orders of events, each driven by a store-level dead run of slot S and a 1 s interval
(next slot S + 1 s), on every store and the real clock."""

from __future__ import annotations

from typing import Dict

from leasecron import Context, LeaseCron, Store
from tests.engine.conftest import Gates, MakeCron
from tests.engine.support import MARGIN, Calls, Recorder, dead_claim, handler, stored


def _started(cron: LeaseCron, rec: Recorder) -> int:
    """Start ``cron`` and return the slot of its first (finished) run."""
    cron.start()
    return rec.wait("success", timeout=3).slot_ms


def _dead_until(store: Store, slot: int, lease_end: int) -> None:
    """A dead runner claims ``slot`` (ahead of its time) so that its lease ends at ``lease_end``."""
    now = store.now_ms()
    assert lease_end - now > 100, "too late to set the scene"
    run = dead_claim(store, "job", slot, lease_end - now)
    assert abs(run.lease_end_ms - lease_end) < 50


def test_next_slot_due_while_the_dead_lease_is_alive_is_skipped_then_a_backup_takes_over(
    make_cron: MakeCron,
) -> None:
    """Order (a): the next slot, due while the dead lease lives, is skipped (overlap); then a backup takes over."""
    heartbeat = 100
    b = make_cron("b", catch_up_ms=0, lease_ms=500, heartbeat_ms=heartbeat)
    rec = Recorder(b)
    b.add_job(lambda: None, 1, name="job")
    s = _started(b, rec) + 1_000
    _dead_until(b.store, s, s + 1_300)  # the runner of S dies; its lease outlives slot S + 1 s
    skip = rec.wait("skip", timeout=3)
    assert (skip.reason, skip.slot_ms) == ("overlap", s + 1_000)
    assert skip.run is not None and skip.run.slot_ms == s and skip.run.runner == "dead"
    start = rec.wait("start", timeout=2, slot_ms=s)
    assert (start.attempt, start.reason) == (2, "takeover")
    assert start.run is not None and s + 1_300 <= start.run.started_ms <= s + 1_300 + 2 * heartbeat + MARGIN
    rec.wait("success", slot_ms=s)
    assert b.store.get_run("job", s + 1_000) is None
    assert stored(b.store, "job", s).runner == "b"


def test_backup_check_first_takes_over_and_the_next_slot_is_skipped(make_cron: MakeCron, gates: Gates) -> None:
    """Order (b): the backup's check comes first and takes over; the next slot, due meanwhile, is skipped (overlap)."""
    heartbeat = 100
    hold = gates()
    target: Dict[str, int] = {}
    b = make_cron("b", catch_up_ms=0, lease_ms=500, heartbeat_ms=heartbeat)
    rec = Recorder(b)
    calls = Calls()

    def body(ctx: Context) -> None:
        if ctx.slot_ms == target.get("slot"):
            hold.wait(5)

    b.add_job(handler(b.store, calls, body), 1, name="job")
    s = _started(b, rec) + 1_000
    target["slot"] = s
    _dead_until(b.store, s, s + 300)
    start = rec.wait("start", timeout=2, slot_ms=s)
    assert (start.attempt, start.reason) == (2, "takeover")
    assert start.run is not None and s + 300 <= start.run.started_ms <= s + 300 + 2 * heartbeat + MARGIN
    skip = rec.wait("skip", timeout=2, slot_ms=s + 1_000)
    assert skip.reason == "overlap"
    assert skip.run is not None and (skip.run.slot_ms, skip.run.attempt, skip.run.runner) == (s, 2, "b")
    hold.set()
    rec.wait("success", slot_ms=s)
    assert b.store.get_run("job", s + 1_000) is None
    assert stored(b.store, "job", s).status == "success"


def test_next_slot_claim_first_starts_the_new_run_and_interrupts_the_dead_one(make_cron: MakeCron) -> None:
    """Order (c): the next slot's claim comes first: the new run starts, the dead run is interrupted, not retried."""
    # heartbeats of 2.5 s: B's check of S comes 2.5-5 s after its claim of S, after slot S + 1 s
    b = make_cron("b", catch_up_ms=0, lease_ms=6_000, heartbeat_ms=2_500)
    rec = Recorder(b)
    b.add_job(lambda: None, 1, name="job")
    s = _started(b, rec) + 1_000
    _dead_until(b.store, s, s + 200)
    start = rec.wait("start", timeout=3, slot_ms=s + 1_000)
    assert (start.attempt, start.reason) == (1, "schedule")
    old = stored(b.store, "job", s)
    assert (old.status, old.attempt, old.runner) == ("interrupted", 1, "dead")
    assert "superseded" in (old.error or "")
    assert start.run is not None and old.finished_ms == start.run.started_ms
    rec.wait("success", slot_ms=s + 1_000)
    assert rec.of("start", slot_ms=s) == [] and rec.of("skip") == []
