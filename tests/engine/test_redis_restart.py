"""A Redis/Valkey restart while a run is live (the issue: "a Redis restart while a run is live
does not crash the instance, and afterwards the run continues, is taken over, or is reported
lost, by the rules").

Each test starts a real server of its own in ``tmp_path`` (valkey-server, and redis-server
where one is installed), runs one :class:`~leasecron.LeaseCron` whose hourly job runs at once
(catch-up), and kills the server with SIGKILL while the handler runs:

* persistent (``appendonly yes``, ``appendfsync always``) and back within the lease: the run
  continues (heartbeats resume, the handler's success is recorded);
* persistent and down for longer than the lease: the runner fences itself (``lost``) and a
  backup takes the run over as attempt 2 once the server is back;
* without persistence (the server comes back empty) within the lease: the heartbeat is
  refused, the run is ``lost``, and the instance goes on running jobs on the new server.

The instance's store gives up on a dead server after 0.2 s (``socket_timeout``). Events are
recorded without calling the store (a callback must not need the server that is down).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, List, Optional, Tuple

import pytest

from leasecron import Context, LeaseCron, Run, Store, open_store
from tests import servers
from tests.conftest import required_binary
from tests.engine.support import CATCH_UP_HOUR, HOURLY, Calls, Seen, align, running_hourly, stored
from tests.helpers import wait_for

LEASE = 1_000  # ms
HEARTBEAT = 100  # ms
HOUR_MS = HOURLY * 1000
PREFIX = "restart"

KINDS = ["valkey"] + (["redis"] if servers.server_binary("redis") else [])





def run_errors(seen: Any) -> List[Any]:
    """The ``error`` events but the instance's failed polls (for requests of manual runs and schedule
    changes), which a server that is down causes too: at most one per outage, without a job (checked here)."""
    errors = seen.of("error")
    polls = [e for e in errors if e.job is None and "schedule changes" in (e.error or "")]
    assert len(polls) <= 1, polls
    return [e for e in errors if e not in polls]

@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    """The server binary: valkey-server, and redis-server where one is installed."""
    required_binary(request.param)
    return str(request.param)


@pytest.fixture
def make_server(kind: str, tmp_path: Path) -> Iterator[Callable[[bool], servers.Server]]:
    """``make_server(appendonly)``: a started server of this test's own, stopped at teardown."""
    made: List[servers.Server] = []

    def make(appendonly: bool) -> servers.Server:
        binary = str(servers.server_binary(kind))
        server = servers.Server(binary, tmp_path / f"{kind}-{len(made)}", appendonly=appendonly)
        made.append(server)
        server.start()
        return server

    try:
        yield make
    finally:
        for server in made:
            server.stop()


class Logged:
    """The messages of the ``leasecron`` logger (from every thread) at a level or above."""

    def __init__(self, caplog: pytest.LogCaptureFixture) -> None:
        self._caplog = caplog

    def at(self, level: int) -> List[str]:
        return [r.getMessage() for r in self._caplog.records if r.name.startswith("leasecron") and r.levelno >= level]

    def errors(self) -> List[str]:
        return self.at(logging.ERROR)


@pytest.fixture
def logged(caplog: pytest.LogCaptureFixture) -> Logged:
    """What the ``leasecron`` logger says during the test, from WARNING up."""
    caplog.set_level(logging.WARNING, logger="leasecron")
    return Logged(caplog)


def store_url(server: servers.Server, kind: str, **options: Any) -> str:
    query = "&".join(f"{k}={v}" for k, v in {"prefix": PREFIX, **options}.items())
    return f"{server.url('valkey' if kind == 'valkey' else 'redis')}?{query}"


@dataclasses.dataclass
class Live:
    """An instance ("a") whose hourly job is running, an observer store, and the handler's gate."""

    server: servers.Server
    cron: LeaseCron
    seen: Seen
    ctx: Context
    calls: Calls
    observer: Store
    go: threading.Event

    def stored(self) -> Run:
        return stored(self.observer, "job", self.ctx.slot_ms)


@contextmanager
def live_run(server: servers.Server, kind: str, body: Callable[[Context, threading.Event], object]) -> Iterator[Live]:
    """Start instance "a" on ``server``; its hourly job runs ``body(ctx, go)`` at once (catch-up).

    The run's first renewal has been seen in the store when this yields. At exit the gate
    opens and everything this started stops.
    """
    go = threading.Event()
    with open_store(store_url(server, kind, socket_timeout=2)) as observer:
        # the hourly slot must not change while the test runs: no new slot fires meanwhile
        align(observer, HOUR_MS, 1_000, HOUR_MS - 30_000)
        store = open_store(store_url(server, kind, socket_timeout=0.2))
        with running_hourly(store, lambda ctx: body(ctx, go), LEASE, HEARTBEAT, go) as (cron, seen, calls):
            ctx = calls.wait(1, timeout=3)[0]
            assert ctx.attempt == 1 and ctx.reason == "catch-up"
            first = stored(observer, "job", ctx.slot_ms).lease_end_ms
            wait_for(lambda: stored(observer, "job", ctx.slot_ms).lease_end_ms > first, 2, message="no renewal seen")
            yield Live(server, cron, seen, ctx, calls, observer, go)


def noting_why_aborted() -> Tuple[List[Optional[str]], Callable[[Context, threading.Event], None]]:
    """A handler body (for :func:`live_run`) that waits up to 10 s for its signal and notes why it
    was aborted: the notes, and the body."""
    reasons: List[Optional[str]] = []

    def body(ctx: Context, go: threading.Event) -> None:
        ctx.signal.wait(10)
        reasons.append(ctx.signal.reason)

    return reasons, body


def instance_is_working(cron: LeaseCron, seen: Seen) -> Run:
    """The instance still schedules and runs jobs: a 1 s job added now runs and succeeds."""
    assert cron.running
    cron.add_job(lambda: None, 1, name="tick")
    _, event = seen.wait("success", timeout=4, job="tick")
    assert event.run is not None and event.attempt == 1
    return event.run


def test_persistent_server_restarted_within_the_lease_the_run_continues(
    make_server: Callable[[bool], servers.Server], kind: str, logged: Logged
) -> None:
    """A persistent server killed (SIGKILL) and restarted within the lease while the handler runs:
    nothing escapes the instance, heartbeats resume on the restarted server, and the handler's
    return is recorded as success of attempt 1 with the original token; no lost event."""
    server = make_server(True)
    with live_run(server, kind, lambda ctx, go: go.wait(10)) as t:
        before = t.stored()
        killed = time.monotonic()
        server.kill()
        threading.Event().wait(2 * HEARTBEAT / 1000)  # down for two heartbeats
        server.start()
        back = time.monotonic()
        assert back - killed < LEASE / 1000 / 2, f"the restart took {back - killed:.3f} s: not within the lease"

        kept = t.stored()  # the persisted run survived the crash
        assert (kept.status, kept.token, kept.attempt, kept.runner) == ("running", t.ctx.token, 1, "a")
        assert kept.lease_end_ms >= before.lease_end_ms
        wait_for(
            lambda: t.stored().lease_end_ms > kept.lease_end_ms,
            2,
            message="the heartbeats did not resume on the restarted server",
        )
        renewed = t.stored().lease_end_ms
        wait_for(lambda: t.stored().lease_end_ms > renewed, 2, message="the renewals stopped again")
        assert t.seen.of("lost") == [] and t.cron.live_runs() != []

        t.go.set()
        _, success = t.seen.wait("success", timeout=3, job="job")
        assert success.attempt == 1 and success.run is not None and success.run.token == t.ctx.token
        run = t.stored()
        assert (run.status, run.attempt, run.token, run.runner) == ("success", 1, t.ctx.token, "a")
        assert t.seen.types("job") == ["start", "success"]

        instance_is_working(t.cron, t.seen)
        assert t.seen.of("lost") == [] and run_errors(t.seen) == []
        assert logged.errors() == []


def test_persistent_server_down_longer_than_the_lease_the_run_is_lost_then_taken_over(
    make_server: Callable[[bool], servers.Server], kind: str, logged: Logged
) -> None:
    """A persistent server down for longer than the lease: the runner fences itself on its local
    deadline (lost, the handler's signal aborts), never finishes the run, and once the server is
    back a second instance takes the expired run over as attempt 2 and records its success."""
    server = make_server(True)
    reasons, body = noting_why_aborted()
    with live_run(server, kind, body) as t:
        killed = time.monotonic()
        server.kill()
        lost_at, lost = t.seen.wait("lost", timeout=LEASE / 1000 + 2, job="job")
        assert (lost.slot_ms, lost.attempt, lost.runner) == (t.ctx.slot_ms, 1, "a")
        assert lost.run is not None and lost.run.token == t.ctx.token
        assert "lease" in (lost.error or ""), lost.error
        # fenced by the local deadline: not before the lease could have run out, nor long after
        assert LEASE - HEARTBEAT - 100 <= (lost_at - killed) * 1000 <= LEASE + 300, lost_at - killed
        wait_for(lambda: reasons == ["lost"] and t.cron.live_runs() == [], 2)

        server.start()
        left = t.stored()  # the run as the runner left it: still running, never finished
        assert (left.status, left.token, left.attempt, left.runner) == ("running", t.ctx.token, 1, "a")
        wait_for(lambda: t.observer.now_ms() > left.lease_end_ms, 3)  # its lease ran out (store's clock)
        threading.Event().wait(3 * HEARTBEAT / 1000)
        assert t.stored() == left, "the lost runner wrote to the run after the restart"

        b_store = open_store(store_url(server, kind, socket_timeout=0.2))
        b = LeaseCron(
            b_store, runner="b", lease_ms=LEASE, heartbeat_ms=HEARTBEAT, jitter_ms=0, catch_up_ms=CATCH_UP_HOUR
        )
        b_seen = Seen(b)
        b.add_job(lambda: None, HOURLY, name="job")
        try:
            b.start()
            _, start = b_seen.wait("start", timeout=3, job="job")
            assert (start.slot_ms, start.attempt, start.reason) == (t.ctx.slot_ms, 2, "takeover")
            b_seen.wait("success", timeout=3, job="job")
            run = t.stored()
            assert (run.status, run.attempt, run.runner) == ("success", 2, "b")
            assert run.token != t.ctx.token
        finally:
            b.stop(timeout=2)
            b_store.close()

        assert t.seen.types("job") == ["start", "lost"]
        assert run_errors(t.seen) == []
        instance_is_working(t.cron, t.seen)
        assert any("lost" in m for m in logged.at(logging.WARNING)), "the log is not captured"
        assert logged.errors() == []


def test_server_without_persistence_restarted_within_the_lease_the_run_is_lost(
    make_server: Callable[[bool], servers.Server], kind: str, logged: Logged
) -> None:
    """A server without persistence restarted within the lease comes back empty: the next
    heartbeat is refused (the store forgot the run), the instance reports the run lost and does
    not crash, and new runs are claimed and recorded on the restarted server."""
    server = make_server(False)
    reasons, body = noting_why_aborted()
    with live_run(server, kind, body) as t:
        killed = time.monotonic()
        server.kill()
        threading.Event().wait(2 * HEARTBEAT / 1000)  # down for two heartbeats
        server.start()
        assert time.monotonic() - killed < LEASE / 1000 / 2, "the restart took too long to be within the lease"
        assert t.observer.get_run("job", t.ctx.slot_ms) is None  # it came back empty

        lost_at, lost = t.seen.wait("lost", timeout=LEASE / 1000 + 1, job="job")
        assert (lost.slot_ms, lost.attempt, lost.runner) == (t.ctx.slot_ms, 1, "a")
        assert lost.run is not None and lost.run.token == t.ctx.token
        assert "refused" in (lost.error or ""), lost.error  # refused by the store, not a local deadline
        assert lost_at - killed < LEASE / 1000
        wait_for(lambda: reasons == ["lost"] and t.cron.live_runs() == [], 2)
        assert t.seen.types("job") == ["start", "lost"]

        tick = instance_is_working(t.cron, t.seen)  # a new slot is claimed and run on the new server
        recorded = stored(t.observer, "tick", tick.slot_ms)
        assert (recorded.status, recorded.runner, recorded.token) == ("success", "a", tick.token)
        assert t.observer.get_run("job", t.ctx.slot_ms) is None  # the lost run was never written again
        assert run_errors(t.seen) == []
        assert logged.errors() == []
