"""The chaos checker on a real failover of PostgreSQL (a primary and a streaming standby the test
starts, tests/pg_replicas.py): it catches the duplicate run that a synchronous standby prevents.

The forced case of tests/chaos/test_failover.py (the sequence of tests/chaos/forced.py), the
same both ways: once the standby has replayed all the primary wrote (the schema among it), it is
frozen (SIGSTOP of the postmaster and each of its processes) and the primary's walsenders are
terminated, so nothing the primary commits next reaches it (a frozen standby would read the WAL
already sent from its socket once woken); instance ``a`` claims a slot; the primary is killed
(``kill -9``), the standby woken and promoted, never having seen the claim; instance ``b``
claims the same slot, and ``a`` sends its claim again with its token (rule 2). The store's URL
names both servers (``target_session_attrs=read-write``) with a 2 s timeout. With an
asynchronous standby the primary acknowledged ``a``'s claim: ``a`` and ``b`` both won attempt 1,
and the checker reports the slot run twice. With a synchronous standby ``a``'s commit waited for
a standby that never confirmed it, the store's timeout gave up (StoreUnavailable), ``a`` never
believed it, and the checker finds nothing.

A fresh pair per test (it starts in one to three seconds): the failover leaves it without a standby.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Dict, Iterator, Tuple

import pytest

from chaoslib.checker import Report
from chaoslib.nemesis import NemesisLog
from tests import pg_replicas
from tests.conftest import unavailable
from tests.helpers import wait_for

from .forced import assert_no_violation, assert_run_twice, forced_failover

pytestmark = pytest.mark.timeout(120)

#: The store's timeout (s): a claim whose commit no synchronous standby confirms gives up after it.
TIMEOUT_S = 2


@pytest.fixture
def pair(request: pytest.FixtureRequest) -> Iterator[pg_replicas.PgPair]:
    """A new primary and standby, synchronous as the test's parameter says; the standby woken
    and every server stopped at the end, whatever happened."""
    if not pg_replicas.available():
        unavailable("no PostgreSQL binaries (initdb, postgres, pg_basebackup) to start a primary and a standby")
    started = pg_replicas.PgPair(synchronous=request.param)
    try:
        started.start()
        yield started
    finally:
        for server in (started.standby, started.primary, started.old_primary):
            if server is not None:
                server.thaw()
        started.stop()


def _replayed(pair: pg_replicas.PgPair) -> None:
    """Wait until the standby has replayed everything the primary wrote so far."""
    assert pair.standby is not None
    [(lsn,)] = pair.execute(pair.primary, "SELECT pg_current_wal_flush_lsn()")
    standby = pair.standby
    wait_for(lambda: pair.execute(standby, "SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", lsn)[0][0],
             timeout=10, message=f"{standby!r} replaying the primary's WAL up to {lsn}")  # fmt: skip


def _forced_failover(tmp_path: Path, pair: pg_replicas.PgPair) -> Tuple[Report, Dict[str, object]]:
    """The sequence of the module docstring on ``pair``: the checker's report and each claim's answer."""
    url = f"{pair.url()}&schema=chaos_{uuid.uuid4().hex[:8]}&timeout={TIMEOUT_S}&connect_timeout={TIMEOUT_S}"
    assert pair.standby is not None
    standby = pair.standby

    def cut_off() -> None:
        """The standby up to date (the schema a's first call created), then frozen, then its walsender gone."""
        _replayed(pair)
        standby.freeze()
        pair.execute(pair.primary, "SELECT pg_terminate_backend(pid) FROM pg_stat_replication")
        wait_for(lambda: pair.standbys() == [], timeout=10, message="the walsenders gone")

    def fail_over(nemesis: NemesisLog) -> None:
        """kill -9 of the primary, the standby woken and promoted; the ``failover`` line."""
        at = (time.time_ns(), time.monotonic_ns())
        old = pair.primary
        pair.kill_primary()
        standby.thaw()
        pair.promote()
        promoted_ms = (time.monotonic_ns() - at[1]) // 1_000_000
        nemesis.write("failover", at=at, how="kill", port=old.port, new_port=pair.primary.port,
                      promoted_ms=promoted_ms, duration_ms=(time.monotonic_ns() - at[1]) // 1_000_000)  # fmt: skip

    return forced_failover(tmp_path / "logs", url, "postgresql", cut_off, fail_over)


@pytest.mark.parametrize("pair", [False], ids=["async"], indirect=True)
def test_with_an_asynchronous_standby_the_checker_reports_the_slot_run_twice(
    tmp_path: Path, pair: pg_replicas.PgPair
) -> None:
    """An asynchronous standby: the primary acknowledged a's claim and died before the standby had
    it; b won the same slot's attempt 1 on the promoted standby: the checker reports attempt 1 won
    twice, and a's attempt missing from the store's record."""
    assert_run_twice(*_forced_failover(tmp_path, pair))


@pytest.mark.parametrize("pair", [True], ids=["sync"], indirect=True)
def test_with_a_synchronous_standby_the_same_failover_yields_no_violation(
    tmp_path: Path, pair: pg_replicas.PgPair
) -> None:
    """A synchronous standby: a's commit waited for it, never confirmed, until the store's timeout
    raised and a never acted on it; b won the slot once after the failover, a's retry was answered
    running: no invariant is violated."""
    report, answers = _forced_failover(tmp_path, pair)
    assert_no_violation(report, answers)
    assert f"no answer within {TIMEOUT_S} s" in str(answers["a"]), answers
