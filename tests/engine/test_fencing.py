"""Fencing and lost leases (docs/protocol.rst, "token" and rule 13; docs/usage.rst, "Handlers"): a refused
heartbeat, or a lease that could not be renewed for lease_ms, makes the run lost."""

from __future__ import annotations

import dataclasses
import threading
from contextlib import contextmanager
from typing import Callable, Dict, Iterator, List

import pytest

from leasecron import Aborted, Context, LeaseCron, Run, Store, open_store
from tests.conftest import Backend, WriteBlocker
from tests.engine.conftest import Gates, MakeCron
from tests.engine.support import (
    CATCH_UP_HOUR,
    HEARTBEAT,
    HOURLY,
    MARGIN,
    Calls,
    Recorder,
    handler,
    stored,
)
from tests.helpers import wait_for


@dataclasses.dataclass
class Locked:
    """An instance whose run is live, and a handle that can hold back every write to its store."""

    cron: LeaseCron
    rec: Recorder
    ctx: Context
    observer: Store
    locker: WriteBlocker

    def stored(self) -> Run:
        return stored(self.observer, "job", self.ctx.slot_ms)


@contextmanager
def live_run_on_stallable(
    backend: Backend, give_up_ms: int, lease: int, body: Callable[[Context], object], **options: int
) -> Iterator[Locked]:
    """Start one instance whose hourly job runs ``body`` at once (catch-up); stop and unblock at exit.

    The instance's store operations give up after ``give_up_ms`` when held back.
    """
    locker = backend.write_blocker()
    store = open_store(backend.url_giving_up_after(give_up_ms))
    cron = LeaseCron(
        store, runner="a", lease_ms=lease, heartbeat_ms=HEARTBEAT, jitter_ms=0, catch_up_ms=CATCH_UP_HOUR, **options
    )
    rec = Recorder(cron)
    calls = Calls()
    cron.add_job(handler(store, calls, body), HOURLY, name="job")
    observer = backend.open()
    try:
        cron.start()
        ctx = calls.wait(1, timeout=3)[0]
        stored(observer, "job", ctx.slot_ms)  # the observer's connection is open (schema checked)
        yield Locked(cron, rec, ctx, observer, locker)
    finally:
        locker.close()
        cron.stop(timeout=1)
        store.close()


@pytest.mark.parametrize("then", ["returns", "raises"])
@pytest.mark.parametrize("how", ["released", "taken over"])
def test_refused_heartbeat_aborts_with_lost_and_the_run_is_never_touched_again(
    make_cron: MakeCron, backend: Backend, how: str, then: str
) -> None:
    """A refused heartbeat aborts the signal ("lost"), emits lost, and the instance never writes the run again."""
    a = make_cron("a", catch_up_ms=CATCH_UP_HOUR)
    rec = Recorder(a)
    calls = Calls()
    seen: Dict[str, object] = {}

    def body(ctx: Context) -> None:
        seen["aborted"] = ctx.signal.wait(5)
        seen["reason"] = ctx.signal.reason
        if then == "raises":
            ctx.signal.raise_if_aborted()

    a.add_job(handler(a.store, calls, body), HOURLY, name="job")
    a.start()
    ctx = calls.wait(1, timeout=3)[0]
    other = backend.open()  # another instance's view of the store
    assert other.release("job", ctx.slot_ms, ctx.token)
    released_at = other.now_ms()
    if how == "taken over":
        taker = other.claim("job", ctx.slot_ms, runner="taker", reason="takeover", lease_ms=30_000)
        assert taker.outcome == "won" and taker.run is not None and taker.run.attempt == 2
    lost = rec.wait("lost", timeout=2)
    assert rec.time_of(lost) <= released_at + HEARTBEAT + MARGIN
    assert (lost.job, lost.slot_ms, lost.attempt, lost.runner) == ("job", ctx.slot_ms, 1, "a")
    assert lost.run is not None and lost.run.token == ctx.token and lost.error
    assert lost.reason == "fenced"
    wait_for(lambda: a.live_runs() == [] and len(calls.returned) == 1, 3)
    assert seen == {"aborted": True, "reason": "lost"}
    with pytest.raises(Aborted):
        ctx.signal.raise_if_aborted()
    threading.Event().wait(2 * HEARTBEAT / 1000)
    run = stored(other, "job", ctx.slot_ms)
    if how == "released":  # the lost attempt still holds the record: it did not finish it
        assert (run.status, run.token, run.attempt, run.handed_over) == ("running", ctx.token, 1, True)
    else:
        assert taker.run is not None
        assert (run.status, run.token, run.runner, run.attempt) == ("running", taker.run.token, "taker", 2)
        assert run.lease_end_ms == taker.run.lease_end_ms
    assert [e.type for e in rec.of()] == ["start", "lost"]


def test_unreachable_store_makes_the_runner_fence_itself_before_the_lease_ends(process_backend: Backend) -> None:
    """A runner that cannot renew for lease_ms (store unreachable) is lost before its stored lease ends."""
    lease = 600
    seen: List[object] = []

    def body(ctx: Context) -> None:
        ctx.signal.wait(5)
        seen.append(ctx.signal.reason)

    with live_run_on_stallable(process_backend, 50, lease, body) as t:
        first = t.stored().lease_end_ms
        wait_for(lambda: t.stored().lease_end_ms > first, 2)  # renewals work
        t.locker.take()  # from now on no write reaches the store
        lease_end = t.stored().lease_end_ms  # reads still work
        lost = t.rec.wait("lost", timeout=(lease + 1_000) / 1000)
        lost_at = t.rec.time_of(lost)
        assert lost_at <= lease_end + 50, (lost_at - lease_end)
        assert lost_at >= lease_end - lease // 2, "gave up long before lease_ms without a renewal"
        assert "lease" in (lost.error or "") and lost.reason == "unrenewed"
        wait_for(lambda: seen == ["lost"], 2)
        # a heartbeat sent just before the deadline may still be waiting in the store (it gives
        # up after 50 ms, and a cluster's client tries it again on new connections, each waiting
        # in the paused server and given up in turn); let it fail, then make the store reachable
        # again: no new write follows
        threading.Event().wait(1.0)
        t.locker.give_back()
        given_back = t.observer.now_ms()
        wait_for(lambda: t.cron.live_runs() == [], 2)
        threading.Event().wait(2 * HEARTBEAT / 1000)
        run = t.stored()
        assert (run.status, run.token) == ("running", t.ctx.token)
        if run.lease_end_ms != lease_end:
            # a heartbeat still waiting in the paused server (a cluster client may keep a connection
            # that gave up) ran once the pause ended: the runner released that stray renewal, its
            # last write (the release ends the lease when it is applied), long before the renewed
            # lease could have ended (a loaded machine took 173 ms to answer and release it)
            attempt = run.attempts[0]
            assert (attempt.outcome, attempt.ended_ms) == ("handed_over", run.lease_end_ms), run
            assert run.lease_end_ms < given_back + lease, (run.lease_end_ms - given_back, run)
        assert t.rec.of("success") == [] and t.rec.of("failed") == []


def test_a_runner_cut_off_gives_its_run_up_lease_margin_ms_before_its_lease_can_end(
    process_backend: Backend,
) -> None:
    """lease_margin_ms: a runner that cannot renew gives its run up (lost, unrenewed) that long before
    the store's lease ends: never later, and at most a heartbeat and a tolerance earlier."""
    lease, margin = 600, 250

    with live_run_on_stallable(process_backend, 50, lease, lambda ctx: ctx.signal.wait(5), lease_margin_ms=margin) as t:
        first = t.stored().lease_end_ms
        wait_for(lambda: t.stored().lease_end_ms > first, 2)  # renewals work
        t.locker.take()
        lease_end = t.stored().lease_end_ms
        lost = t.rec.wait("lost", timeout=(lease + 1_000) / 1000)
        lost_at = t.rec.time_of(lost)
        assert lost_at <= lease_end - margin + 50, (lost_at - lease_end)
        assert lost_at >= lease_end - margin - HEARTBEAT - MARGIN, (lost_at - lease_end)
        assert lost.reason == "unrenewed" and "less lease_margin_ms (250 ms)" in (lost.error or "")
        threading.Event().wait(1.0)  # a heartbeat waiting in the paused store fails (see above)
        t.locker.give_back()


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_handler_that_returned_has_its_return_recorded_on_its_lost_attempt(
    process_backend: Backend, when: str
) -> None:
    """The handler returns while the store is unreachable, so its finish cannot land and the run is
    lost at its local deadline ("before"), or the handler ignores its abort and returns after the run
    was lost ("after"): once the store answers again, the attempt records when the handler returned
    and with what result (rule 26), and the run's status, token and attempt outcome stay as they were."""
    lease = 600
    go = threading.Event()

    def body(ctx: Context) -> None:
        go.wait(10)  # returns when the test says, whatever its signal says

    with live_run_on_stallable(process_backend, 50, lease, body) as t:
        first = t.stored().lease_end_ms
        wait_for(lambda: t.stored().lease_end_ms > first, 2)  # renewals work
        t.locker.take()
        if when == "before":
            returned_at = t.observer.now_ms()
            go.set()
        t.rec.wait("lost", timeout=(lease + 1_000) / 1000)
        threading.Event().wait(1.0)  # a heartbeat waiting in the paused store fails (see above)
        if when == "after":
            returned_at = t.observer.now_ms()
            go.set()
            wait_for(lambda: t.cron.live_runs() == [], 2)
        before = t.stored()
        t.locker.give_back()
        # a cluster client may keep a call that waited in a paused node: it runs once the pause ends
        # (a finish then lands and the run is recorded success; a stray renewal is released)
        late_calls = process_backend.name == "redis-cluster"
        recorded = wait_for(lambda: (lambda run: run.attempts[0].returned is not None or (
            late_calls and run.status == "success"))(t.stored()), 6)  # fmt: skip
        run = t.stored()
        attempt = run.attempts[0]
        assert recorded and run.token == before.token
        if attempt.returned is None:  # the late finish landed: the work is recorded as done
            assert (run.status, attempt.outcome) == ("success", "success")
        else:
            assert (attempt.returned, attempt.returned_error) == ("success", None)
            assert attempt.returned_ms is not None and abs(attempt.returned_ms - returned_at) <= MARGIN
            assert run.status == before.status
            assert attempt.outcome == before.attempts[0].outcome or (late_calls and attempt.outcome == "handed_over")
        assert t.rec.of("success") == [] and t.rec.of("failed") == []


def test_heartbeat_landing_after_self_fencing_is_released_at_once(process_backend: Backend) -> None:
    """A heartbeat stuck in the store past the local deadline that then renews the lost run is released."""
    lease = 600
    with live_run_on_stallable(process_backend, 3_000, lease, lambda ctx: ctx.signal.wait(5)) as t:
        t.locker.take()  # the next heartbeat blocks in the store (for up to 3 s)
        t.rec.wait("lost", timeout=(lease + 1_000) / 1000)  # fenced by the local deadline meanwhile
        assert not t.stored().handed_over
        t.locker.give_back()  # the blocked heartbeat lands and renews the lease
        run = wait_for(lambda: (r := t.stored()).handed_over and r, 2, message="the stray renewal was not released")
        assert (run.status, run.token, run.attempt) == ("running", t.ctx.token, 1)
        assert run.lease_end_ms <= t.observer.now_ms()
        assert t.rec.of("success") == [] and t.rec.of("failed") == [] and t.rec.of("handover") == []


def test_handler_returning_after_a_takeover_is_refused_and_lost(
    make_cron: MakeCron, backend: Backend, gates: Gates
) -> None:
    """Fencing: a handler returning after a takeover is not recorded (finish refused), the run is lost."""
    go = gates()
    a = make_cron("a", catch_up_ms=CATCH_UP_HOUR)
    rec = Recorder(a)
    calls = Calls()
    a.add_job(handler(a.store, calls, lambda ctx: go.wait(5)), HOURLY, name="job")
    a.start()
    ctx = calls.wait(1, timeout=3)[0]
    other = backend.open()
    assert other.release("job", ctx.slot_ms, ctx.token)
    taker = other.claim("job", ctx.slot_ms, runner="taker", reason="takeover", lease_ms=30_000)
    assert taker.outcome == "won" and taker.run is not None
    go.set()  # returns at once, racing a's next heartbeat: either way the run is lost
    lost = rec.wait("lost", timeout=2)
    assert lost.attempt == 1 and lost.run is not None and lost.run.token == ctx.token
    assert lost.reason == "fenced"  # the heartbeat or the finish was refused
    wait_for(lambda: a.live_runs() == [], 2)
    assert rec.of("success") == [] and rec.of("failed") == []
    run = stored(other, "job", ctx.slot_ms)
    assert (run.status, run.token, run.runner, run.attempt) == ("running", taker.run.token, "taker", 2)


def test_store_briefly_unreachable_is_retried_and_the_run_recorded(process_backend: Backend) -> None:
    """Transient store failures are retried while they matter: the finish lands once the store is back."""
    go = threading.Event()
    # a lease long enough that the stall (0.3 s and the reads around it) and the retried finish
    # fit in it on a loaded machine: the run must not be lost by the local deadline meanwhile
    with live_run_on_stallable(process_backend, 20, 1_500, lambda ctx: go.wait(5)) as t:
        t.locker.take()
        lease_end = t.stored().lease_end_ms
        go.set()  # the handler returns while the store is unreachable: the finish is retried
        threading.Event().wait(0.3)
        assert t.stored().status == "running"
        t.locker.give_back()
        t.rec.wait("success", timeout=1)
        run = t.stored()
        assert run.status == "success" and run.token == t.ctx.token
        assert run.finished_ms is not None and run.finished_ms < lease_end
        assert t.rec.of("lost") == []

def test_runner_stopping_while_its_store_hangs_is_lost_by_its_local_deadline(process_backend: Backend) -> None:
    """While stop() waits for a handler, a store that hangs every call for longer than the lease
    still finds the runner fenced by its local deadline (the scheduler thread watches it until
    stop() returns), not when the hung heartbeat gives up."""
    lease = 600
    go = threading.Event()

    def body(ctx: Context) -> None:
        go.wait(5)  # deaf to stop(): winds down only when the test says so

    with live_run_on_stallable(process_backend, 3 * lease, lease, body) as t:  # a call hangs for 1.8 s
        first = t.stored().lease_end_ms
        wait_for(lambda: t.stored().lease_end_ms > first, 2)  # renewals work
        t.locker.take()
        lease_end = t.stored().lease_end_ms
        stopper = threading.Thread(target=t.cron.stop, kwargs={"timeout": 5}, daemon=True)
        stopper.start()
        try:
            lost = t.rec.wait("lost", timeout=(lease + 1_000) / 1000)
            lost_at = t.rec.time_of(lost)
            # by the deadline (a margin for a loaded machine); the hung heartbeat alone would
            # only give up 1.8 s after it was sent, over a second past the deadline
            assert lost_at <= lease_end + 250, (lost_at - lease_end)
            assert lost.reason == "unrenewed"
        finally:
            go.set()
            t.locker.give_back()
            stopper.join(5)
        assert not stopper.is_alive()

