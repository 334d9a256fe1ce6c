"""``Store.overview``: what a watcher of every job reads (issue 32), in one call, on every store.

The conformance part runs on every backend (the ``store`` fixture: memory, SQLite, Redis, Valkey,
Redis Cluster, PostgreSQL): the store's clock, the paused jobs, every stored schedule, and for
the jobs asked about and the stored jobs (each once) the newest run with its attempts and the
newest end of their runs by status, found among *all* the runs kept (a success older than the
newest 50 runs too); a job without runs has an empty summary; bad arguments are refused naming
them before the store is asked; a wrapper passes it on as one call, and a store of the user's
that does not implement it answers the same from the reads one by one. The round-trip part
counts what each backend sends: Redis and Valkey two round trips (also after the server lost its
scripts), a cluster at most two per node, PostgreSQL one statement, SQLite one read transaction;
a SQLite file of 0.1 or 0.2 opened with ``create=False`` is read as it is, from the reads one by one.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest

from leasecron import ConfigError, Run, Store
from leasecron.stored import JobOverview, Overview
from leasecron.stores import DelegatingStore, SQLiteStore, StoreReads
from leasecron.stores.redis import RedisStore
from tests import servers
from tests.conftest import SERVERS, ClusterBackend, SQLiteBackend
from tests.helpers import wait_for
from tests.stores.test_recent_runs import (
    HOSTILE, JOBS, LONG, SHORT, TracedSQLiteStore, counting_postgres, make_history, one_run_each,
)
from tests.stores.test_redis_batch import CountingConnection

#: More runs than the watchers read before (their newest 50): the success is older than all of them.
FAILURES = 55


class Counting(DelegatingStore):
    """A wrapper that records which protected reads reach the inner store."""

    def __init__(self, inner: Store) -> None:
        super().__init__(inner)
        self.calls: List[Tuple[str, Any]] = []

    def now_ms(self) -> int:
        self.calls.append(("now_ms", ()))
        return super().now_ms()

    def _overview(self, jobs: List[str]) -> Overview:
        self.calls.append(("overview", list(jobs)))
        return super()._overview(jobs)

    def _recent_runs(self, jobs: List[str], limit: int) -> Dict[str, List[Run]]:
        self.calls.append(("recent_runs", (list(jobs), limit)))
        return super()._recent_runs(jobs, limit)


class ReadsOneByOne(Counting):
    """A store of the user's kind that does not override ``_overview``: it gets the default of the
    contract (the clock, the pauses, the schedules and every job's runs, one read each)."""

    _overview = StoreReads._overview


def without_clock(seen: Overview) -> Tuple[Any, ...]:
    return seen.paused, dict(seen.schedules), dict(seen.jobs)


def test_the_clock_the_pauses_the_schedules_and_each_job_once(store: Store) -> None:
    """The jobs asked about (hostile names, duplicates, one without runs) then the stored jobs
    not among them, sorted, each once; each one's newest run is what ``runs(job, 1)`` answers,
    attempts included; every stored schedule record (an override and a reset one too, which are
    no stored jobs); every paused job (one without runs too); the clock read in the call."""
    names = ["plain", *HOSTILE]
    first = make_history(store, names)
    store.set_schedule("z-stored", by="ops", schedule=60, task="t")
    store.set_schedule("a-stored", by="ops", schedule=60, task="t")
    store.set_schedule("plain", by="ops", schedule=120)  # an override of a job asked about
    store.set_schedule("gone", by="ops", schedule=60, task="t")
    store.set_schedule("gone", by="ops", schedule=None)  # back to code: no stored job
    store.pause("plain", by="ops")
    store.pause("never-ran", by="ops", note="not yet")
    store.request_run("asked", by="ops")  # a request alone pauses nothing
    before = store.now_ms()
    seen = store.overview(["never-ran", *names, "plain", "A"])
    after = store.now_ms()
    assert before <= seen.now_ms <= after
    assert list(seen.jobs) == ["never-ran", *names, "a-stored", "z-stored"]
    assert seen.jobs["never-ran"] == JobOverview("never-ran") and seen.jobs["a-stored"] == JobOverview("a-stored")
    assert seen.jobs["never-ran"].newest_slot_ms is None and seen.jobs["never-ran"].last_success_ms is None
    for job in names:
        summary = seen.jobs[job]
        assert summary.last == store.runs(job, 1)[0] and summary.last.status == "running", job
        assert summary.newest_slot_ms == first + 2_000
        assert [(a.number, a.outcome) for a in store.runs(job, 2)[1].attempts] == [(1, "expired"), (2, "failed")]
        assert dict(summary.last_finish_ms) == {
            "success": store.get_run(job, first).finished_ms,  # type: ignore[union-attr]
            "failed": store.get_run(job, first + 1_000).finished_ms,  # type: ignore[union-attr]
        }, job
        assert summary.last_success_ms == summary.last_finish_ms["success"]
    assert dict(seen.schedules) == {record.job: record for record in store.schedule_changes(0).changes}
    assert sorted(seen.schedules) == ["a-stored", "gone", "plain", "z-stored"]
    assert seen.paused == frozenset({"plain", "never-ran"})
    assert list(store.overview().jobs) == ["a-stored", "z-stored"]  # no names: the stored jobs alone


def test_the_last_finish_of_each_status_is_found_among_all_the_runs_kept(store: Store) -> None:
    """An interrupted run, then a success, then 55 failures (all kept: history_size is 100): the
    success and the interruption are older than the newest 50 runs, and still each status's last
    finish; the newest run is the newest failure."""
    first = store.now_ms() - 10_000
    dying = store.claim("busy", first, runner="r1", lease_ms=SHORT)
    assert dying.run is not None
    wait_for(lambda: store.now_ms() > dying.run.lease_end_ms, timeout=10)  # type: ignore[union-attr]
    slots = [first + 1 + i for i in range(1 + FAILURES)]
    for i, slot in enumerate(slots):  # the new run's claim interrupts the expired one
        won = store.claim("busy", slot, runner="r2", lease_ms=LONG)
        assert won.run is not None, won
        assert store.finish("busy", slot, won.run.token, "success" if i == 0 else "failed", None if i == 0 else "x")
    interrupted = store.get_run("busy", first)
    assert interrupted is not None and interrupted.status == "interrupted"
    assert all(run.status == "failed" for run in store.recent_runs(["busy"], 50)["busy"])
    summary = store.overview(["busy"]).jobs["busy"]
    assert summary.last == store.runs("busy", 1)[0] and summary.newest_slot_ms == slots[-1]
    ends = {slot: store.get_run("busy", slot).finished_ms for slot in (first, slots[0], slots[-1])}  # type: ignore[union-attr]
    assert dict(summary.last_finish_ms) == {
        "success": ends[slots[0]], "failed": max(run.finished_ms or 0 for run in store.runs("busy", 100)),
        "interrupted": ends[first],
    }  # fmt: skip


@pytest.mark.parametrize(
    "jobs, named",
    [
        ("abc", "jobs must be a sequence"),
        (b"abc", "jobs must be a sequence"),
        ({"a", "b"}, "jobs must be a sequence"),
        (None, "jobs must be a sequence"),
        (["ok", ""], r"jobs\[1\]: job name must be a non-empty string"),
        (["ok", 5], r"jobs\[1\]: job name must be a non-empty string"),
        (["a\x00b"], r"jobs\[0\]: job name must not contain a NUL"),
        (["\ud800"], r"jobs\[0\]: job name must be valid Unicode"),
        (["é" * 600], r"jobs\[0\]: job name must be at most 1024 bytes"),
    ],
)
def test_bad_arguments_are_refused_before_the_store_is_asked(store: Store, jobs: Any, named: str) -> None:
    """A bad ``jobs`` is a ConfigError naming it (a bad name by its index); nothing reaches the store."""
    watched = Counting(store)
    with pytest.raises(ConfigError, match=named):
        watched.overview(jobs)
    assert watched.calls == []


def test_one_call_through_a_wrapper_and_the_reads_one_by_one_for_a_users_store(store: Store) -> None:
    """Through a DelegatingStore the overview reaches the inner store as one ``_overview`` (its
    names once each) and nothing else; a store that does not implement it answers the same from
    the clock and one ``_recent_runs`` of every stored run per 1,000 jobs (and the pauses and
    schedules, which this wrapper does not count)."""
    make_history(store, ["a", "b"])
    store.set_schedule("s", by="ops", schedule=60, task="t")
    store.pause("b", by="ops")
    wrapped = Counting(store)
    seen = wrapped.overview(["a", "b", "none", "a"])
    assert wrapped.calls == [("overview", ["a", "b", "none"])]
    plain = ReadsOneByOne(store)
    assert without_clock(plain.overview(["a", "b", "none", "a"])) == without_clock(seen)
    assert [name for name, _ in plain.calls] == ["now_ms", "recent_runs"]
    assert plain.calls[1][1][0] == ["a", "b", "none", "s"]


# -- what each backend sends -----------------------------------------------------------------------


def test_redis_answers_in_two_round_trips(own_server: servers.Server) -> None:
    """50 jobs with runs, a stored job and a paused one: two sends to the server (the clock, the
    schedules and the names of the controlled jobs; then one overview.lua per job), also after
    SCRIPT FLUSH (then each pipeline's NOSCRIPT answers cost a SCRIPT LOAD and a send more)."""
    store = RedisStore.from_url(own_server.url("valkey") + "?prefix=overview", connection_class=CountingConnection)
    try:
        one_run_each(store, JOBS)
        store.set_schedule("stored", by="ops", schedule=60, task="t")
        store.pause("job-3", by="ops")
        expected = store.overview(JOBS)  # loads the scripts
        CountingConnection.sends.clear()
        seen = store.overview(JOBS)
        assert sum(CountingConnection.sends.values()) == 2
        assert without_clock(seen) == without_clock(expected) and seen.paused == {"job-3"}
        assert list(seen.jobs) == [*JOBS, "stored"] and all(seen.jobs[job].last is not None for job in JOBS)
        store.client.script_flush()
        assert without_clock(store.overview(JOBS)) == without_clock(expected)
    finally:
        store.close()


def test_a_redis_cluster_answers_in_at_most_two_round_trips_per_node(tmp_path: Path) -> None:
    """On the 3-master cluster, 60 jobs (on every master): each master gets at most two sends,
    and the answer is each job's newest run."""
    backend = ClusterBackend(tmp_path)
    store = RedisStore.from_url(backend.url(), connection_class=CountingConnection)
    names = [f"job-{i}" for i in range(60)]
    try:
        one_run_each(store, names)
        store.pause("job-7", by="ops")
        store.overview(names)  # loads the scripts on every master
        CountingConnection.sends.clear()
        seen = store.overview(names)
        masters = {server.port for server in SERVERS.cluster().nodes}
        assert set(CountingConnection.sends) <= masters and max(CountingConnection.sends.values()) <= 2
        assert seen.paused == {"job-7"}
        assert {job: s.last for job, s in seen.jobs.items()} == {job: store.runs(job, 1)[0] for job in names}
    finally:
        store.close()
        backend.close()


def test_postgresql_answers_in_one_statement(tmp_path: Path) -> None:
    """50 jobs on a caller's pool whose cursors count what they execute: one statement."""
    with counting_postgres(tmp_path) as (store, statements):
        store.pause("job-3", by="ops")
        statements.clear()
        seen = store.overview(JOBS)
        assert len(statements) == 1, statements
        assert seen.paused == {"job-3"} and {job: s.last for job, s in seen.jobs.items()} == {
            job: store.runs(job, 1)[0] for job in JOBS
        }


def test_sqlite_answers_in_one_read_transaction(tmp_path: Path) -> None:
    """50 jobs: BEGIN, three SELECTs (the pauses, the schedules, the jobs' runs), ROLLBACK, on one
    connection, whatever the number of jobs."""
    backend = SQLiteBackend(tmp_path)
    store = TracedSQLiteStore(str(tmp_path / "leasecron.db"), table=backend.namespace)
    try:
        one_run_each(store, JOBS)
        store.statements.clear()
        seen = store.overview(JOBS)
        kinds = [statement.split()[0].upper() for statement in store.statements]
        assert kinds == ["BEGIN", "SELECT", "SELECT", "WITH", "ROLLBACK"], store.statements
        assert {job: s.last for job, s in seen.jobs.items()} == {job: store.runs(job, 1)[0] for job in JOBS}
        conn: sqlite3.Connection = store._take()
        assert not conn.in_transaction
        store._put_back(conn)
    finally:
        store.close()


@pytest.mark.parametrize("version", [1, 2])
def test_a_sqlite_file_of_0_1_or_0_2_is_read_as_it_is(tmp_path: Path, version: int) -> None:
    """A store opened with create=False on a file of an older schema (no stored schedules; 0.1's
    no pauses either) answers from the reads one by one, each reading it as it is: every job's
    newest run and last finishes, no schedule, no pause; the file is not migrated."""
    from tests.stores.test_sqlite import JOB, _store_of_0_1, _url

    db = tmp_path / "old.db"
    now = int(time.time() * 1000)  # a SQLite store's clock is the host's
    rows = _store_of_0_1(db, now, version)
    with SQLiteStore.from_url(_url(db, table="old_runs"), create=False) as reader:
        seen = reader.overview([JOB, "other", "none"])
        assert abs(seen.now_ms - now) < 60_000 and seen.paused == frozenset() and dict(seen.schedules) == {}
        assert seen.jobs[JOB].last == reader.get_run(JOB, rows["expired"]["slot_ms"])
        assert dict(seen.jobs[JOB].last_finish_ms) == {
            status: rows[status]["finished_ms"] for status in ("success", "failed", "interrupted")
        }
        assert seen.jobs["other"].last == reader.get_run("other", rows["live"]["slot_ms"])
        assert seen.jobs["none"] == JobOverview("none")
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("SELECT value FROM old_runs_meta").fetchone()[0] == str(version)
    finally:
        conn.close()
