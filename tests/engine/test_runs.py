"""Handlers and their outcome (docs/usage.rst, "Handlers" and "Events"): the Context, success, failure
(never retried), and the events with their fields."""

from __future__ import annotations

import logging
import threading
from datetime import datetime, timezone

import pytest

from leasecron import Context, Event, Signal, Store
from leasecron.stores import DelegatingStore
from tests.conftest import Backend
from tests.engine.conftest import Gates, MakeCron
from tests.engine.support import (
    CATCH_UP_HOUR,
    HEARTBEAT,
    HOURLY,
    LEASE,
    Calls,
    Recorder,
    handler,
    latest_hourly_slot,
    stored,
)
from tests.helpers import wait_for


def test_handler_gets_the_context_of_its_run(make_cron: MakeCron) -> None:
    """The handler gets its Context: job, slot == slot_ms (UTC), attempt, the stored token, runner, reason, signal."""
    cron = make_cron("ctx-runner", catch_up_ms=0)
    calls = Calls()
    seen = {}

    def body(ctx: Context) -> None:
        seen["stored"] = cron.store.get_run("ctxjob", ctx.slot_ms)

    cron.add_job(handler(cron.store, calls, body), 1, name="ctxjob")
    cron.start()
    ctx = calls.wait(1, timeout=3)[0]
    wait_for(lambda: calls.returned, 2)
    assert isinstance(ctx, Context)
    assert ctx.job == "ctxjob"
    assert ctx.slot.tzinfo is not None and ctx.slot.utcoffset().total_seconds() == 0
    assert ctx.slot == datetime.fromtimestamp(ctx.slot_ms / 1000, tz=timezone.utc)
    assert ctx.slot_ms % 1000 == 0
    assert ctx.attempt == 1
    assert ctx.runner == "ctx-runner"
    assert ctx.reason == "schedule"
    assert isinstance(ctx.signal, Signal) and isinstance(ctx.signal, threading.Event)
    assert not ctx.signal.aborted and ctx.signal.reason is None
    ctx.signal.raise_if_aborted()  # not aborted: does nothing
    in_store = seen["stored"]
    assert in_store is not None and in_store.token == ctx.token and len(ctx.token) >= 16
    assert in_store.runner == "ctx-runner" and in_store.status == "running"


def test_handler_without_parameters_is_called_bare_and_succeeds(make_cron: MakeCron) -> None:
    """A handler that takes no argument is called without one; its return records success."""
    cron = make_cron("a", catch_up_ms=CATCH_UP_HOUR)
    rec = Recorder(cron)
    called = threading.Event()

    def bare() -> str:
        called.set()
        return "ignored"

    cron.add_job(bare, HOURLY, name="bare")
    cron.start()
    assert called.wait(3)
    event = rec.wait("success", timeout=3)
    run = stored(cron.store, "bare", event.slot_ms)
    assert run.status == "success" and run.error is None and run.finished_ms is not None


def test_return_records_success_and_emits_start_and_success_with_fields(make_cron: MakeCron) -> None:
    """A handler that returns is finished as success; start/success events carry all their fields."""
    cron = make_cron("r1", catch_up_ms=CATCH_UP_HOUR)
    rec = Recorder(cron)
    calls = Calls()
    cron.add_job(handler(cron.store, calls), HOURLY, name="ok")
    slot = latest_hourly_slot(cron.store)
    cron.start()
    success = rec.wait("success", timeout=3)
    start = rec.of("start")[0]
    ctx = calls.contexts[0]
    assert isinstance(start, Event) and isinstance(success, Event)
    for event in (start, success):
        assert event.job == "ok"
        assert event.slot_ms == slot == ctx.slot_ms
        assert event.slot == ctx.slot
        assert event.attempt == 1
        assert event.runner == "r1"
        assert event.error is None
        assert event.run is not None and event.run.token == ctx.token and event.run.slot_ms == slot
    assert start.type == "start" and start.reason == "catch-up"
    assert success.type == "success"
    run = stored(cron.store, "ok", slot)
    assert (run.status, run.attempt, run.runner, run.token, run.error) == ("success", 1, "r1", ctx.token, None)
    assert rec.of("failed") == [] and rec.of("error") == []


def test_raise_records_failed_with_the_error_text_and_is_not_retried(
    make_cron: MakeCron, gates: Gates, caplog: pytest.LogCaptureFixture
) -> None:
    """A handler that raises is finished as failed with "Type: message", emits failed, and is never retried."""
    caplog.set_level(logging.DEBUG, logger="leasecron")
    may_fail = gates()
    a, b = make_cron("a", catch_up_ms=CATCH_UP_HOUR), make_cron("b", catch_up_ms=CATCH_UP_HOUR)
    recs = [Recorder(a), Recorder(b)]
    calls = Calls()

    def body(ctx: Context) -> None:
        may_fail.wait(5)
        raise ValueError("boom at the slot")

    for cron in (a, b):
        cron.add_job(handler(cron.store, calls, body), HOURLY, name="bad")
    slot = latest_hourly_slot(a.store)
    a.start()
    b.start()
    calls.wait(1, timeout=3)
    runner = calls.contexts[0].runner
    backup = recs[1] if runner == "a" else recs[0]
    # the other instance asked for the run and was told "running": it is a backup of it
    wait_for(lambda: any("running elsewhere: backup" in r.getMessage() for r in caplog.records), 3)
    may_fail.set()
    runner_rec = recs[0] if runner == "a" else recs[1]
    failed = runner_rec.wait("failed", timeout=3)
    assert failed.error == "ValueError: boom at the slot"
    assert failed.attempt == 1 and failed.slot_ms == slot and failed.job == "bad" and failed.runner == runner
    assert failed.run is not None and failed.run.token == calls.contexts[0].token
    run = stored(a.store, "bad", slot)
    assert (run.status, run.error, run.attempt) == ("failed", "ValueError: boom at the slot", 1)
    # a lease and several backup checks later: still one attempt, never started again
    threading.Event().wait((LEASE + 4 * HEARTBEAT) / 1000)
    run = stored(a.store, "bad", slot)
    assert (run.status, run.attempt) == ("failed", 1)
    assert len(calls) == 1
    assert backup.of("start") == [] and len(runner_rec.of("start")) == 1
    assert runner_rec.of("success") == []


def test_exception_without_message_records_its_type(make_cron: MakeCron) -> None:
    """An exception with an empty message is recorded as its type name."""
    cron = make_cron("a", catch_up_ms=CATCH_UP_HOUR)
    rec = Recorder(cron)

    class Oops(Exception):
        pass

    def bad() -> None:
        raise Oops()

    cron.add_job(bad, HOURLY, name="oops")
    cron.start()
    event = rec.wait("failed", timeout=3)
    assert event.error == "Oops"
    assert stored(cron.store, "oops", event.slot_ms).error == "Oops"


def test_raising_callbacks_are_logged_and_do_not_stop_the_scheduler(
    make_cron: MakeCron, caplog: pytest.LogCaptureFixture
) -> None:
    """A callback that raises is logged on the leasecron logger; later slots still run and report."""
    caplog.set_level(logging.ERROR, logger="leasecron")
    cron = make_cron("a", catch_up_ms=0)

    def explode(event: Event) -> None:
        raise RuntimeError(f"callback broke on {event.type}")

    for name in ("start", "success"):
        cron.on(name, explode)
    rec = Recorder(cron)  # registered after the raising callbacks: still called
    cron.add_job(lambda: None, 1, name="tick")
    cron.start()
    first = rec.wait("success", timeout=3).slot_ms
    rec.wait("success", timeout=3, slot_ms=first + 1_000)
    assert cron.running
    for slot in (first, first + 1_000):
        assert stored(cron.store, "tick", slot).status == "success"
    messages = [r.getMessage() for r in caplog.records if r.name == "leasecron"]
    assert any("callback" in m for m in messages), messages
    assert any(r.exc_info and "callback broke on start" in str(r.exc_info[1]) for r in caplog.records)


class HeartbeatCount(DelegatingStore):
    """A real store that counts the heartbeats sent through it."""

    def __init__(self, inner: Store) -> None:
        super().__init__(inner)
        self.heartbeats = 0

    def _heartbeat(self, job: str, slot_ms: int, token: str, lease_ms: int) -> bool:
        self.heartbeats += 1
        return super()._heartbeat(job, slot_ms, token, lease_ms)


def test_runs_reuse_a_worker_thread(make_cron: MakeCron) -> None:
    """Handlers run on worker threads reused from run to run: three runs of a 1 s job, one thread."""
    cron = make_cron("a", catch_up_ms=0)
    rec = Recorder(cron)
    idents = []
    cron.add_job(lambda: idents.append(threading.get_ident()), 1, name="job")
    cron.start()
    wait_for(lambda: len(rec.of("success")) >= 3, 5)
    assert len(idents) >= 3 and len(set(idents)) == 1, idents


def test_a_run_shorter_than_a_heartbeat_sends_none_and_a_longer_one_renews(
    make_cron: MakeCron, backend: Backend
) -> None:
    """The heartbeat loop starts once a run has lasted heartbeat_ms: a quick run sends no heartbeat;
    a run of 4 heartbeats renews its lease every heartbeat."""
    store = HeartbeatCount(backend.open())
    cron = make_cron("a", store=store, catch_up_ms=CATCH_UP_HOUR)
    rec = Recorder(cron)
    cron.add_job(lambda: None, HOURLY, name="quick")
    cron.start()
    rec.wait("success", job="quick")
    assert store.heartbeats == 0
    cron.add_job(lambda: threading.Event().wait(4 * HEARTBEAT / 1000), HOURLY, name="long")
    rec.wait("success", job="long")
    assert 2 <= store.heartbeats <= 4
