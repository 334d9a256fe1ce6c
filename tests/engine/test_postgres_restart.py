"""PostgreSQL faults while a run is live, made for real: the server ends the store's sessions
(``pg_terminate_backend``), crashes and restarts, or stays down for longer than the lease.

The rules checked (docs/usage.rst, "Handlers"; docs/guarantees.rst; docs/protocol.rst,
"token" and the runner's writes, rules 13-15):

* lost connections are not the run's end: no exception escapes the instance, the heartbeats
  go on on new connections, and the run is recorded by the runner that started it (attempt 1,
  no ``lost``);
* a runner that cannot renew its lease for ``lease_ms`` is ``lost`` (fenced on its local
  deadline), never finishes the run, and a backup's takeover claim wins attempt 2 once the
  server is back.

One :class:`~leasecron.LeaseCron` per test, whose hourly job runs at once (catch-up). Its
events are recorded without calling the store (a callback must not need a server that is down).
Termination uses the session's server; restarts use a PostgreSQL started by the test
(``tests/pg_servers.py``), on its own port and data directory.
"""

from __future__ import annotations

import dataclasses
import threading
import time
import uuid
from contextlib import contextmanager
from typing import Any, Callable, Iterator, List, Optional, Set, Tuple, TypeVar

import psycopg2
import pytest

from leasecron import (
    Context,
    LeaseCron,
    Run,
    Store,
    StoreUnavailable,
    open_store,
)
from tests import pg_servers
from tests.conftest import SERVERS
from tests.engine.support import Seen, running_hourly, stored
from tests.helpers import wait_for

T = TypeVar("T")
JOB = "job"
HEARTBEAT = 100  # ms




def _answer(call: Callable[[], T], timeout: float = 3.0) -> T:
    """``call()``, retried while it raises StoreUnavailable (a dead pooled connection is dropped
    by the failed call), for at most ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return call()
        except StoreUnavailable:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.01)


@dataclasses.dataclass
class Live:
    """An instance with one live run of ``job``, and another store's view of the run."""

    cron: LeaseCron
    seen: Seen
    ctx: Context
    observer: Store
    go: threading.Event
    handler_saw: List[Optional[str]]
    thread_errors: List[BaseException]

    def stored(self) -> Run:
        """The stored run, read by the observer (whose pooled connections may have died with the
        server: a StoreUnavailable is retried, on a new connection)."""
        return _answer(lambda: stored(self.observer, JOB, self.ctx.slot_ms))

    def now_ms(self) -> int:
        """The server's clock, read by the observer (retried as :meth:`stored`)."""
        return _answer(self.observer.now_ms)

    def renewals_work(self) -> int:
        """Wait until a heartbeat moved the stored lease; return its end."""
        first = self.stored().lease_end_ms
        return wait_for(lambda: (end := self.stored().lease_end_ms) > first and end, 3, message="no renewal")


@contextmanager
def live_run(url: str, observer_url: str, lease: int, monkeypatch: pytest.MonkeyPatch) -> Iterator[Live]:
    """Start one instance on ``url`` whose hourly job runs at once and waits for ``go`` (or for its
    signal to abort); stop it and close its stores at exit. Exceptions escaping any thread
    are collected in ``thread_errors``."""
    thread_errors: List[BaseException] = []
    default_hook = threading.excepthook

    def hook(args: Any) -> None:
        thread_errors.append(args.exc_value)
        default_hook(args)

    monkeypatch.setattr(threading, "excepthook", hook)
    go = threading.Event()
    handler_saw: List[Optional[str]] = []

    def body(ctx: Context) -> None:
        while not go.wait(0.01):
            if ctx.signal.aborted:
                break
        handler_saw.append(ctx.signal.reason)

    with open_store(observer_url) as observer:
        with running_hourly(open_store(url), body, lease, HEARTBEAT, go) as (cron, seen, calls):
            ctx = calls.wait(1, timeout=5)[0]
            yield Live(cron, seen, ctx, observer, go, handler_saw, thread_errors)


def _pids(conn: Any, application_name: str) -> Set[int]:
    with conn.cursor() as cur:
        cur.execute("SELECT pid FROM pg_stat_activity WHERE application_name = %s", (application_name,))
        return {int(row[0]) for row in cur.fetchall()}


def _finishes_as_attempt_1(live: Live) -> None:
    """The handler returns; the run is recorded success, attempt 1, by its token; nothing lost."""
    live.go.set()
    live.seen.wait("success", timeout=5)
    run = live.stored()
    assert (run.status, run.attempt, run.token, run.runner) == ("success", 1, live.ctx.token, "a")
    assert live.handler_saw == [None]  # the signal never aborted
    assert live.seen.types(but=("error",)) == ["start", "success"]
    assert live.thread_errors == []


# -- terminated sessions ----------------------------------------------------------------------------


def test_terminated_sessions_do_not_end_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """pg_terminate_backend of every connection of the instance's store, three times while the run
    is live: no exception escapes, heartbeats resume on new connections (the stored lease moves
    forward), and the handler's success is recorded as attempt 1 with no lost event."""
    host, port, dbname = SERVERS.postgres()
    schema = "t" + uuid.uuid4().hex[:12]
    app = f"lc_{uuid.uuid4().hex[:12]}"
    base = f"postgresql://{host}:{port}/{dbname}?schema={schema}"
    lease = 1_000
    admin = psycopg2.connect(host=host, port=port, dbname=dbname)
    admin.autocommit = True
    try:
        with live_run(f"{base}&application_name={app}", base, lease, monkeypatch) as live:
            live.renewals_work()
            for _ in range(3):
                wait_for(lambda: _pids(admin, app), 2, message="the store has no connection")
                with admin.cursor() as cur:
                    # pg_terminate_backend in the select list: called only for the rows the WHERE keeps
                    cur.execute(
                        "SELECT pid, pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
                        (app,),
                    )
                    rows = cur.fetchall()
                killed = {int(pid) for pid, _ in rows}
                assert killed and all(ok for _, ok in rows), rows
                terminated_at = live.now_ms()
                # a renewal sent after the termination: lease_end = (its server time) + lease
                wait_for(
                    lambda terminated_at=terminated_at: live.stored().lease_end_ms >= terminated_at + lease,
                    lease / 1000,
                    message="no renewal after the sessions were terminated",
                )
                wait_for(lambda killed=killed: _pids(admin, app) - killed, 2, message="no new connection")
                assert live.seen.of("lost") == []
            _finishes_as_attempt_1(live)
    finally:
        admin.close()
        pg_servers.drop_schema(f"postgresql://{host}:{port}/{dbname}", schema)


# -- a server of the test's own ------------------------------------------------------------------------


@pytest.fixture
def pg_server() -> Iterator[pg_servers.PgServer]:
    """A PostgreSQL of this test's own (started; stopped and removed at the end)."""
    with pg_servers.own_server() as server:
        yield server


def _urls(server: pg_servers.PgServer) -> Tuple[str, str, str]:
    """The instance's URL, an observer's URL, and the instance's application_name."""
    app = f"lc_{uuid.uuid4().hex[:12]}"
    base = f"{server.dsn()}?schema=lc&connect_timeout=1"
    return f"{base}&application_name={app}", base, app


def _start_time(server: pg_servers.PgServer) -> Any:
    conn = server.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT pg_postmaster_start_time()")
            return cur.fetchone()[0]
    finally:
        conn.close()


def test_crash_restart_within_the_lease_the_run_continues(
    pg_server: pg_servers.PgServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An immediate (crash-like) restart of the server while the run is live, shorter than the
    lease: no exception escapes, heartbeats resume on new connections, and the handler's
    success is recorded as attempt 1 with no lost event."""
    lease = 3_000
    url, observer_url, app = _urls(pg_server)
    with live_run(url, observer_url, lease, monkeypatch) as live:
        live.renewals_work()
        started_before, pid_before = _start_time(pg_server), pg_server.pid
        began = time.monotonic()
        pg_server.restart(immediate=True)
        took = time.monotonic() - began
        assert took < lease / 2000, f"the restart took {took:.2f} s: the lease does not cover it comfortably"
        assert pg_server.pid != pid_before and _start_time(pg_server) > started_before
        back_at = live.now_ms()
        wait_for(
            lambda: live.stored().lease_end_ms >= back_at + lease,
            lease / 1000,
            message="no renewal after the restart",
        )
        conn = pg_server.connect()
        try:
            assert _pids(conn, app), "the instance has no connection to the restarted server"
        finally:
            conn.close()
        assert live.seen.of("lost") == []
        _finishes_as_attempt_1(live)


def test_server_down_for_longer_than_the_lease_the_run_is_lost_and_taken_over(
    pg_server: pg_servers.PgServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server stops for longer than the lease while the run is live: the instance reports
    lost within lease_ms of its last renewal (fenced on its local deadline), its handler's
    signal aborts with "lost", it never finishes the run, and once the server is back a
    backup's takeover claim wins attempt 2."""
    lease = 1_000
    url, observer_url, _ = _urls(pg_server)
    with live_run(url, observer_url, lease, monkeypatch) as live:
        live.renewals_work()
        stopped_at = time.monotonic()
        pg_server.stop()
        lost_at, lost = live.seen.wait("lost", timeout=lease / 1000 + 2)
        assert lost_at - stopped_at <= lease / 1000 + 0.3, lost_at - stopped_at
        assert (lost.job, lost.slot_ms, lost.attempt, lost.runner) == (JOB, live.ctx.slot_ms, 1, "a")
        assert lost.run is not None and lost.run.token == live.ctx.token
        assert "lease" in (lost.error or "")
        wait_for(lambda: live.handler_saw == ["lost"] and live.cron.live_runs() == [], 2)

        pg_server.start()  # same port, same data
        run = live.stored()
        assert (run.status, run.attempt, run.token) == ("running", 1, live.ctx.token)
        threading.Event().wait(3 * HEARTBEAT / 1000)  # the instance, lost, writes nothing more
        assert live.stored() == run

        def takeover() -> Any:
            claim = _answer(
                lambda: live.observer.claim(JOB, live.ctx.slot_ms, runner="taker", reason="takeover", lease_ms=30_000)
            )
            return claim if claim.outcome != "running" else None

        claim = wait_for(takeover, lease / 1000 + 2, interval=0.05, message="the lease never ran out")
        assert claim.outcome == "won" and claim.run is not None
        assert (claim.run.attempt, claim.run.runner) == (2, "taker")
        threading.Event().wait(3 * HEARTBEAT / 1000)
        after = live.stored()
        assert (after.status, after.attempt, after.token) == ("running", 2, claim.run.token)
        assert live.seen.types(but=("error",)) == ["start", "lost"]
        assert live.thread_errors == []
