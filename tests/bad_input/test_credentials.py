"""Wrong credentials (issue 5, item 6: "Bad input"), against real servers.

A Valkey server of the test's own that requires a password (``CONFIG SET requirepass``), and
the session's PostgreSQL with a role that does not exist. The promises
(docs/design.rst):

* the first store operation raises ``StoreError`` — not ``StoreUnavailable``: the same
  credentials are refused again, so leasecron does not retry them — at once (no hang), with a
  message that says "authentication failed" and never shows the password;
* ``leasecron check`` exits 1 with that message on one line, without a traceback;
* an instance started with wrong credentials does not raise: it reports the failure (log and
  ``error`` events) and keeps trying its start-up.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator, List

import pytest

from leasecron import Event, LeaseCron, StoreError, StoreUnavailable, open_store
from tests import servers
from tests.conftest import SERVERS, required_binary
from tests.engine.support import CATCH_UP_HOUR, HOURLY
from tests.helpers import wait_for

PASSWORD = "s3cret-Pa55"
WRONG = "hunter2-wrong"


@pytest.fixture
def password_server(tmp_path: Path) -> Iterator[servers.Server]:
    """A valkey-server on a free port that refuses every client without the password."""
    binary = required_binary("valkey")
    server = servers.Server(binary, tmp_path / "valkey")
    server.start()
    try:
        with server.client() as client:
            client.config_set("requirepass", PASSWORD)
        yield server
    finally:
        server.stop()


def _redis_urls(server: servers.Server) -> List[str]:
    base = f"127.0.0.1:{server.port}/0?prefix=creds"
    return [
        f"redis://:{WRONG}@{base}",  # a wrong password
        f"valkey://someone:{PASSWORD}@{base}",  # the password of a user that does not exist
        f"redis://{base}",  # no password at all
    ]


def _pg_url() -> str:
    host, port, dbname = SERVERS.postgres()
    return f"postgresql://nosuchuser:{WRONG}@{host}:{port}/{dbname}"


def _assert_refused(url: str) -> None:
    """Every first operation of a new store raises StoreError saying authentication failed, at once."""
    for operation in ("now_ms", "claim", "get_run", "jobs"):
        store = open_store(url)
        try:
            started = time.monotonic()
            with pytest.raises(StoreError) as info:
                if operation == "now_ms":
                    store.now_ms()
                elif operation == "claim":
                    store.claim("job", 1_000, runner="r")
                elif operation == "get_run":
                    store.get_run("job", 1_000)
                else:
                    store.jobs()
            assert time.monotonic() - started < 3.0, f"{operation} took too long to fail"
        finally:
            store.close()
        message = str(info.value)
        assert not isinstance(info.value, StoreUnavailable), f"{operation}: retried as if transient: {message}"
        assert "authentication failed" in message, message
        assert WRONG not in message and PASSWORD not in message, message


def test_wrong_redis_credentials_fail_at_once_with_a_clear_store_error(password_server: servers.Server) -> None:
    """A wrong password, an unknown user or no password: StoreError "authentication failed" from
    the first operation, never StoreUnavailable, never the password; the right password works."""
    for url in _redis_urls(password_server):
        _assert_refused(url)
    with open_store(f"redis://:{PASSWORD}@127.0.0.1:{password_server.port}/0?prefix=creds") as good:
        assert good.claim("job", good.now_ms(), runner="r").won


def test_a_postgres_role_that_does_not_exist_fails_at_once_with_a_clear_store_error() -> None:
    """postgresql://nosuchuser@…: StoreError "authentication failed" naming the role, at once."""
    _assert_refused(_pg_url())
    store = open_store(_pg_url())
    with pytest.raises(StoreError, match='role "nosuchuser"'):
        store.get_run("job", 0)
    store.close()


def _check(url: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "leasecron", "check", url], capture_output=True, text=True, timeout=60
    )


@pytest.mark.processes
def test_check_with_wrong_credentials_exits_1_without_a_traceback(password_server: servers.Server) -> None:
    """`leasecron check` with a wrong Redis password or an unknown PostgreSQL role exits 1 with one
    line saying authentication failed; no traceback, no password."""
    for url in (_redis_urls(password_server)[0], _pg_url()):
        result = _check(url)
        assert result.returncode == 1, (url, result.stdout, result.stderr)
        assert "authentication failed" in result.stderr, result.stderr
        assert "Traceback" not in result.stderr and result.stdout == ""
        assert WRONG not in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_an_instance_with_wrong_credentials_starts_reports_and_keeps_trying(
    password_server: servers.Server, caplog: pytest.LogCaptureFixture
) -> None:
    """LeaseCron.start() with a wrong password does not raise; the start-up is reported (a warning
    and an error event saying authentication failed) and tried again; stop() ends it cleanly."""
    caplog.set_level(logging.WARNING, logger="leasecron")
    cron = LeaseCron(_redis_urls(password_server)[0], runner="a", lease_ms=1_000, heartbeat_ms=100, jitter_ms=0,
                     catch_up_ms=CATCH_UP_HOUR)  # fmt: skip
    errors: List[Event] = []
    cron.on("error", errors.append)
    cron.add_job(lambda: None, HOURLY, name="job")
    try:
        cron.start()
        assert cron.running

        def recover_warnings() -> List[str]:
            return [r.getMessage() for r in caplog.records if "cannot recover job 'job'" in r.getMessage()]

        warnings = wait_for(lambda: len(recover_warnings()) >= 2 and recover_warnings(), timeout=5)
        assert all("authentication failed" in w and WRONG not in w for w in warnings), warnings
        assert any(e.job == "job" and e.error and "authentication failed" in e.error for e in errors), errors
        assert cron.running
    finally:
        started = time.monotonic()
        cron.stop(timeout=1)
        assert time.monotonic() - started < 2.5
        cron.store.close()
    assert not cron.running
