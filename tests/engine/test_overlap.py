"""Overlap (docs/protocol.rst, rule 10): skip refuses a new run while an earlier one has a live
lease and backs up both, taking the earlier one over once it dies; allow runs them side by side.
That a dead earlier run does not block the next slot is a decision, stepped in test_stepped.py."""

from __future__ import annotations

import threading
from typing import Dict, List

from leasecron import Context
from tests.engine.conftest import Gates, MakeCron
from tests.engine.support import MARGIN, Calls, Recorder, handler, stored
from tests.helpers import wait_for


def test_skip_refuses_the_next_slot_and_watches_both_runs(make_cron: MakeCron, gates: Gates) -> None:
    """Overlap "skip": the next slot is skipped while a run lives; the skipper takes that run over when it dies."""
    lease, heartbeat = 300, 50
    keep_running = gates()
    options = dict(lease_ms=lease, heartbeat_ms=heartbeat, catch_up_ms=0, stop_timeout_ms=0)
    a, b = make_cron("a", **options), make_cron("b", **options)
    rec_a, rec_b = Recorder(a), Recorder(b)
    calls = Calls()

    def body(ctx: Context) -> None:
        if ctx.attempt == 1 and ctx.runner == "a":
            keep_running.wait(10)  # a long run that ignores its signal

    for cron in (a, b):
        cron.add_job(handler(cron.store, calls, body), 1, name="job")
    a.start()
    first = calls.wait(1, timeout=3)[0]
    b.start()
    skip = rec_b.wait("skip", timeout=3)
    assert (skip.reason, skip.slot_ms, skip.job, skip.runner) == ("overlap", first.slot_ms + 1_000, "job", "b")
    assert skip.run is not None and skip.run.slot_ms == first.slot_ms and skip.run.token == first.token
    assert rec_a.wait("skip", slot_ms=first.slot_ms + 1_000).reason == "overlap"
    assert b.store.get_run("job", first.slot_ms + 1_000) is None  # the skipped slot has no run
    # A dies right after the skip: its run is abandoned, neither finished nor released
    a.stop(timeout=0)
    threading.Event().wait(heartbeat / 1000)
    lease_end = stored(b.store, "job", first.slot_ms).lease_end_ms
    start = rec_b.wait("start", timeout=2, slot_ms=first.slot_ms)
    assert (start.attempt, start.reason) == (2, "takeover")
    assert start.run is not None
    assert lease_end <= start.run.started_ms <= lease_end + 2 * heartbeat + MARGIN
    rec_b.wait("success", slot_ms=first.slot_ms)
    # and the job goes on with the next slot
    rec_b.wait("success", timeout=2, slot_ms=first.slot_ms + 2_000)
    assert rec_b.of("start", slot_ms=first.slot_ms + 1_000) == []


def test_allow_runs_slots_side_by_side(make_cron: MakeCron) -> None:
    """With overlap "allow", a new slot starts while the earlier run still holds its lease."""
    a, b = make_cron("a", overlap="allow", catch_up_ms=0), make_cron("b", overlap="allow", catch_up_ms=0)
    recs = [Recorder(a), Recorder(b)]
    calls = Calls()
    active: List[int] = []
    most: Dict[str, int] = {"n": 0}
    lock = threading.Lock()

    def body(ctx: Context) -> None:
        with lock:
            active.append(ctx.slot_ms)
            most["n"] = max(most["n"], len(active))
        try:
            ctx.signal.wait(1.5)
        finally:
            with lock:
                active.remove(ctx.slot_ms)

    for cron in (a, b):
        cron.add_job(handler(cron.store, calls, body), 1, name="job")
    a.start()
    b.start()
    contexts = calls.wait(2, timeout=4)
    assert contexts[1].slot_ms == contexts[0].slot_ms + 1_000
    wait_for(lambda: most["n"] >= 2, 1)
    assert [e for r in recs for e in r.of("skip")] == []
    store = a.store
    both = [stored(store, "job", c.slot_ms) for c in contexts[:2]]
    assert [r.status for r in both] == ["running", "running"]
    assert all(r.lease_end_ms > store.now_ms() for r in both)  # two live leases at once


def test_skipped_slot_claimed_later_by_another_instance_is_backed_up_by_the_skipper(
    make_cron: MakeCron, gates: Gates
) -> None:
    """Overlap: the skipper watches the skipped slot and takes it over when another instance claims it and dies."""
    heartbeat = 100
    long_run = gates()
    options = dict(lease_ms=500, heartbeat_ms=heartbeat, catch_up_ms=0)
    a, b = make_cron("a", **options), make_cron("b", **options)
    rec_a, rec_b = Recorder(a), Recorder(b)
    calls = Calls()

    def body(ctx: Context) -> None:
        if ctx.runner == "a":
            long_run.wait(5)

    for cron in (a, b):
        cron.add_job(handler(cron.store, calls, body), 1, name="job")
    a.start()
    first = calls.wait(1, timeout=3)[0].slot_ms
    b.start()
    new = first + 1_000
    skip = rec_b.wait("skip", timeout=3, slot_ms=new)
    assert skip.reason == "overlap"
    # a's own (jittered) claim of the new slot must be answered too, or a would win it once its run ends
    assert rec_a.wait("skip", timeout=3, slot_ms=new).reason == "overlap"
    long_run.set()  # the earlier run ends...
    wait_for(lambda: stored(b.store, "job", first).status == "success", 1)
    a.stop(timeout=1)
    store = b.store
    # ...and another instance, whose jitter was longer, claims the new slot and dies at once
    late_claim = store.claim("job", new, runner="dead", lease_ms=200)
    assert late_claim.outcome == "won" and late_claim.run is not None
    start = rec_b.wait("start", timeout=1, slot_ms=new)
    assert (start.attempt, start.reason) == (2, "takeover")
    assert start.run is not None
    assert late_claim.run.lease_end_ms <= start.run.started_ms <= late_claim.run.lease_end_ms + 2 * heartbeat + MARGIN
    rec_b.wait("success", slot_ms=new)
