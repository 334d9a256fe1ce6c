"""stop() and hand-over (docs/protocol.rst, "hand-over"; docs/usage.rst, "Stopping, signals and forks"):
the three outcomes of a live run, idempotence, no more backing up, and the context manager."""

from __future__ import annotations

import threading
import time

from leasecron import Context, LeaseCron
from tests.conftest import Backend
from tests.engine.conftest import Gates, MakeCron
from tests.engine.support import CATCH_UP_HOUR, FAST, HEARTBEAT, HOURLY, LEASE, MARGIN, Calls, Recorder, dead_claim
from tests.engine.support import every_second, handler, latest_hourly_slot, stored, wait_store_time
from tests.engine.support import waiting_on_its_signal
from tests.helpers import wait_for


def _throw_on_abort(ctx: Context) -> None:
    ctx.signal.wait(5)
    ctx.signal.raise_if_aborted()


def test_handler_that_throws_on_stop_is_released(make_cron: MakeCron) -> None:
    """stop(): a handler that throws once its signal aborts is released (handed over) and emits handover."""
    a = make_cron("a", catch_up_ms=CATCH_UP_HOUR)
    rec = Recorder(a)
    calls = Calls()
    reasons = []

    def body(ctx: Context) -> None:
        ctx.signal.wait(5)
        reasons.append(ctx.signal.reason)
        ctx.signal.raise_if_aborted()

    a.add_job(handler(a.store, calls, body), HOURLY, name="job")
    a.start()
    ctx = calls.wait(1, timeout=3)[0]
    stop_at = a.store.now_ms()
    t0 = time.monotonic()
    a.stop(timeout=2)
    assert time.monotonic() - t0 < 1
    assert reasons == ["stop"]
    run = stored(a.store, "job", ctx.slot_ms)
    assert (run.status, run.handed_over, run.attempt, run.token) == ("running", True, 1, ctx.token)
    assert stop_at <= run.lease_end_ms <= stop_at + 200
    handover = rec.wait("handover", timeout=1)
    assert (handover.job, handover.slot_ms, handover.attempt, handover.runner) == ("job", ctx.slot_ms, 1, "a")
    assert rec.of("success") == [] and rec.of("failed") == [] and rec.of("lost") == []
    assert not a.running and a.live_runs() == []


def test_released_run_is_taken_over_within_two_heartbeats_even_with_max_attempts_one(make_cron: MakeCron) -> None:
    """A released run is taken over within 2 heartbeats as attempt 2; hand-overs don't count (max_attempts=1)."""
    a = make_cron("a", catch_up_ms=CATCH_UP_HOUR, max_attempts=1)
    b = make_cron("b", catch_up_ms=CATCH_UP_HOUR, max_attempts=1)
    rec_a, rec_b = Recorder(a), Recorder(b)
    calls = Calls()

    def body(ctx: Context) -> None:
        if ctx.attempt == 1:
            _throw_on_abort(ctx)

    for cron in (a, b):
        cron.add_job(handler(cron.store, calls, body), HOURLY, name="job")
    a.start()
    ctx = calls.wait(1, timeout=3)[0]
    b.start()  # finds the run alive: a backup of it
    threading.Event().wait(2 * HEARTBEAT / 1000)
    a.stop(timeout=2)
    released_at = rec_a.time_of(rec_a.wait("handover", timeout=1))
    start = rec_b.wait("start", timeout=2)
    assert (start.slot_ms, start.attempt, start.reason) == (ctx.slot_ms, 2, "takeover")
    assert start.run is not None and start.run.started_ms <= released_at + 2 * HEARTBEAT + MARGIN
    rec_b.wait("success")
    run = stored(b.store, "job", ctx.slot_ms)
    assert (run.status, run.attempt, run.runner, run.handed_over) == ("success", 2, "b", True)


def test_handler_that_returns_on_stop_is_finished_as_success(make_cron: MakeCron) -> None:
    """A handler that returns normally once stop() aborts its signal is finished as success."""
    a = make_cron("a", catch_up_ms=CATCH_UP_HOUR)
    rec, calls = waiting_on_its_signal(a)
    a.start()
    ctx = calls.wait(1, timeout=3)[0]
    a.stop(timeout=2)
    run = stored(a.store, "job", ctx.slot_ms)
    assert (run.status, run.attempt, run.handed_over, run.token) == ("success", 1, False, ctx.token)
    assert [e.type for e in rec.of()] == ["start", "success"]


def test_stop_renews_the_lease_of_a_handler_that_outlives_it(make_cron: MakeCron) -> None:
    """stop() keeps renewing the leases of the handlers it waits for, also of a run stopped before
    its first heartbeat (whose heartbeat loop had not started): never lost, finished as success."""
    a = make_cron("a", catch_up_ms=CATCH_UP_HOUR, lease_ms=600, heartbeat_ms=200)
    rec = Recorder(a)
    calls = Calls()
    leases = []

    def body(ctx: Context) -> None:
        leases.append(stored(a.store, "job", ctx.slot_ms).lease_end_ms)
        if ctx.signal.wait(5):  # stopped: wind down for longer than the lease
            wait_store_time(a.store, leases[0] + 300)
            leases.append(stored(a.store, "job", ctx.slot_ms).lease_end_ms)

    a.add_job(handler(a.store, calls, body), HOURLY, name="job")
    a.start()
    ctx = calls.wait(1, timeout=3)[0]
    a.stop(timeout=5)
    assert len(leases) == 2 and leases[1] > leases[0] + 300, leases
    run = stored(a.store, "job", ctx.slot_ms)
    assert (run.status, run.attempt, run.token) == ("success", 1, ctx.token)
    assert [e.type for e in rec.of()] == ["start", "success"]


def test_handler_still_running_at_the_stop_timeout_is_abandoned(make_cron: MakeCron, gates: Gates) -> None:
    """stop(): a handler outliving the stop timeout is abandoned: no heartbeats, no write; a backup takes over later."""
    keep_running = gates()
    a, b = make_cron("a", catch_up_ms=CATCH_UP_HOUR), make_cron("b", catch_up_ms=CATCH_UP_HOUR)
    rec_a, rec_b = Recorder(a), Recorder(b)
    calls = Calls()

    def body(ctx: Context) -> None:
        if ctx.attempt == 1:
            keep_running.wait(10)  # ignores its signal

    for cron in (a, b):
        cron.add_job(handler(cron.store, calls, body), HOURLY, name="job")
    a.start()
    ctx = calls.wait(1, timeout=3)[0]
    b.start()
    t0 = time.monotonic()
    a.stop(timeout=0.2)
    assert 0.15 <= time.monotonic() - t0 < 1.0
    assert not a.running
    threading.Event().wait(HEARTBEAT / 1000)
    lease_end = stored(b.store, "job", ctx.slot_ms).lease_end_ms
    threading.Event().wait(2 * HEARTBEAT / 1000)
    run = stored(b.store, "job", ctx.slot_ms)
    assert (run.lease_end_ms, run.token) == (lease_end, ctx.token), "the abandoned run was renewed"
    keep_running.set()  # the old handler returns before the lease ends: it must not finish the run
    wait_for(lambda: len(calls.returned) == 1 and a.live_runs() == [], 1)
    assert b.store.now_ms() < lease_end, "too slow: the lease ran out before the check"
    run = stored(b.store, "job", ctx.slot_ms)
    assert (run.status, run.token, run.handed_over) == ("running", ctx.token, False)
    start = rec_b.wait("start", timeout=2)
    assert (start.attempt, start.reason) == (2, "takeover")
    assert start.run is not None and lease_end <= start.run.started_ms <= lease_end + 2 * HEARTBEAT + MARGIN
    rec_b.wait("success")
    run = stored(b.store, "job", ctx.slot_ms)
    assert (run.status, run.attempt, run.runner) == ("success", 2, "b")
    assert [e.type for e in rec_a.of()] == ["start"]


def test_stop_timeout_defaults_to_stop_timeout_ms(make_cron: MakeCron, gates: Gates) -> None:
    """stop() without a timeout waits stop_timeout_ms for running handlers, then returns."""
    keep_running = gates()
    a = make_cron("a", catch_up_ms=CATCH_UP_HOUR, stop_timeout_ms=300)
    calls = Calls()
    a.add_job(handler(a.store, calls, lambda ctx: keep_running.wait(10)), HOURLY, name="job")
    a.start()
    calls.wait(1, timeout=3)
    t0 = time.monotonic()
    a.stop()
    assert 0.25 <= time.monotonic() - t0 < 1.2


def test_stop_is_idempotent(make_cron: MakeCron) -> None:
    """stop() before start, twice, and from two threads at once is harmless; running is False after."""
    a = make_cron("a", catch_up_ms=CATCH_UP_HOUR)
    calls = Calls()
    a.add_job(handler(a.store, calls, _throw_on_abort), HOURLY, name="job")
    a.stop()
    assert not a.running
    a.start()
    a.start()  # a second start does nothing
    assert a.running
    calls.wait(1, timeout=3)
    threads = [threading.Thread(target=a.stop, kwargs={"timeout": 2}) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(3)
    assert not any(t.is_alive() for t in threads)
    a.stop()
    a.stop(timeout=0)
    assert not a.running and a.live_runs() == []
    run = stored(a.store, "job", calls.contexts[0].slot_ms)
    assert run.handed_over and run.attempt == 1  # released once, not twice


def test_stopped_instance_no_longer_watches_as_a_backup(make_cron: MakeCron) -> None:
    """stop() ends watching: a stopped backup never takes over a run whose runner died."""
    b = make_cron("b")
    rec = Recorder(b)
    b.add_job(lambda: None, HOURLY, name="job")
    dead = dead_claim(b.store, "job", latest_hourly_slot(b.store), LEASE)
    b.start()
    threading.Event().wait(2 * HEARTBEAT / 1000)  # b has checked the run: it is its backup
    b.stop(timeout=1)
    wait_for(lambda: b.store.now_ms() > dead.lease_end_ms + 3 * HEARTBEAT, 2)
    run = stored(b.store, "job", dead.slot_ms)
    assert (run.attempt, run.token, run.status) == (1, dead.token, "running")
    assert rec.of("start") == []


def test_context_manager_starts_and_stops(backend: Backend) -> None:
    """`with LeaseCron(...) as cron:` starts the instance and stops it (handing over) on exit."""
    store = backend.open()
    calls = Calls()
    with LeaseCron(store, runner="cm", catch_up_ms=CATCH_UP_HOUR, **FAST) as cron:
        assert cron.running
        cron.add_job(handler(store, calls, _throw_on_abort), HOURLY, name="job")  # added while running
        ctx = calls.wait(1, timeout=3)[0]
    assert not cron.running and cron.live_runs() == []
    run = stored(store, "job", ctx.slot_ms)
    assert (run.status, run.handed_over) == ("running", True)


def test_stopped_instance_can_be_started_again(make_cron: MakeCron) -> None:
    """After stop(), start() runs the jobs again."""
    a = make_cron("a", catch_up_ms=0)
    rec, first = every_second(a)
    a.stop(timeout=1)
    count = len(rec.of("start"))
    a.start()
    assert a.running
    again = wait_for(lambda: [e for e in rec.of("success") if e.slot_ms > first + (count - 1) * 1_000], 3)
    assert again[0].slot_ms % 1_000 == 0
