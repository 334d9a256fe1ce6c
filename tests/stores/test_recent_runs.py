"""``Store.recent_runs``: the newest runs of many jobs in one call, on every store.

The conformance part runs on every backend (the ``store`` fixture: memory, SQLite, Redis, Valkey,
Redis Cluster, PostgreSQL): the answer for each job is what ``runs(job, limit)`` answers (finished,
failed and running runs, runs of several attempts, jobs without runs, duplicated and hostile names),
and bad arguments are refused with a ConfigError before the store is asked. The round-trip part
counts what each backend sends for one call of 50 jobs: Redis and Valkey one round trip (one per
node of a cluster) of one EVALSHA per job, also after the server lost its scripts; PostgreSQL and
SQLite one statement. Round trips are counted by a redis-py connection that counts its sends, and
statements by psycopg2 cursors that count what they execute and by SQLite's trace callback, on
real servers and files.
"""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path
from typing import Any, Dict, Iterator, List, Sequence, Tuple

import pytest

from leasecron import ConfigError, Run, Store
from leasecron.stores import ClaimRequest, DelegatingStore, SQLiteStore
from leasecron.stores.checks import MAX_RECENT_JOBS
from leasecron.stores.postgres import PostgresStore
from leasecron.stores.redis import RedisStore, job_keys
from tests import servers
from tests.conftest import SERVERS, ClusterBackend, PostgresBackend, SQLiteBackend
from tests.helpers import wait_for
from tests.stores.test_postgres import _counting_pool
from tests.stores.test_redis import keys_under
from tests.stores.test_redis_batch import CountingConnection, commands

LONG = 30_000  # a lease that stays alive for the whole test
SHORT = 150  # a lease the test lets run out

#: Names that must neither collide nor reach into each other's keys: a hash tag's braces, a colon,
#: a percent escape of "A" next to "A" itself, text beyond ASCII, and a name of 1,000 characters.
HOSTILE = ["{a}", "a:b", "%41", "A", "Zürich ☃ 日本", "n" * 1_000]


class Counting(DelegatingStore):
    """A wrapper that records which protected reads reach the inner store (and so proves
    DelegatingStore forwards ``_recent_runs`` as one call)."""

    def __init__(self, inner: Store) -> None:
        super().__init__(inner)
        self.calls: List[Tuple[str, Any]] = []

    def _recent_runs(self, jobs: List[str], limit: int) -> Dict[str, List[Run]]:
        self.calls.append(("recent_runs", (list(jobs), limit)))
        return super()._recent_runs(jobs, limit)

    def _runs(self, job: str, limit: int) -> List[Run]:
        self.calls.append(("runs", (job, limit)))
        return super()._runs(job, limit)


class PerJob(Counting):
    """A store of the user's kind that does not override ``_recent_runs``: it gets the default of
    the contract (one ``_runs`` per job), here on top of a real store."""

    _recent_runs = Store._recent_runs


def make_history(store: Store, names: Sequence[str]) -> int:
    """Three runs of each of ``names``: a success; a failure on attempt 2 (attempt 1's runner
    died, a backup took over); one running with a live lease. Returns the first slot."""
    first = store.now_ms() - 5_000
    dying = []
    for job in names:
        won = store.claim(job, first, runner="r1", lease_ms=LONG)
        assert won.run is not None and store.finish(job, first, won.run.token, "success")
        dead = store.claim(job, first + 1_000, runner="r1", lease_ms=SHORT)
        assert dead.run is not None
        dying.append(dead.run)
    wait_for(lambda: store.now_ms() > max(run.lease_end_ms for run in dying), timeout=10)
    for job in names:
        backup = store.claim(job, first + 1_000, runner="r2", reason="takeover", lease_ms=LONG)
        assert backup.won and backup.run is not None and backup.run.attempt == 2
        assert store.finish(job, first + 1_000, backup.run.token, "failed", "boom")
        assert store.claim(job, first + 2_000, runner="r3", lease_ms=LONG).won
    return first


# -- on every store ------------------------------------------------------------------------------


def test_each_answer_is_what_runs_answers_for_its_job(store: Store) -> None:
    """Jobs with finished, failed (two attempts) and running runs, hostile names, a job without
    runs and duplicated names: every name once, in the order given, each answered as
    ``runs(job, limit)`` answers, attempts included."""
    names = ["plain", *HOSTILE]
    first = make_history(store, names)
    asked = ["never-ran", *names, "plain", "A", "never-ran"]
    answer = store.recent_runs(asked)
    assert list(answer) == ["never-ran", *names]
    assert answer["never-ran"] == []
    for job in names:
        assert answer[job] == store.runs(job, 30)
        assert [(run.slot_ms, run.status, run.attempt) for run in answer[job]] == [
            (first + 2_000, "running", 1), (first + 1_000, "failed", 2), (first, "success", 1),
        ]  # fmt: skip
        assert [(a.number, a.runner, a.outcome) for a in answer[job][1].attempts] == [
            (1, "r1", "expired"), (2, "r2", "failed"),
        ]  # fmt: skip
        assert all(run.job == job for run in answer[job])


def test_limit_keeps_the_newest_runs_of_each_job(store: Store) -> None:
    """With 5 runs stored, ``limit`` 1, 2, 5 and 7 answer the newest 1, 2, 5 and 5 runs, newest
    first, as ``runs(job, limit)`` does; jobs with fewer runs than the limit answer all of theirs."""
    slots = [store.now_ms() - 6_000 + 1_000 * i for i in range(5)]
    for slot in slots:
        won = store.claim("five", slot, runner="r", lease_ms=LONG)
        assert won.run is not None and store.finish("five", slot, won.run.token, "success")
    assert store.claim("one", slots[0], runner="r", lease_ms=LONG).won
    for limit in (1, 2, 5, 7):
        answer = store.recent_runs(["five", "one"], limit)
        assert [run.slot_ms for run in answer["five"]] == sorted(slots, reverse=True)[:limit]
        assert answer["five"] == store.runs("five", limit)
        assert [run.slot_ms for run in answer["one"]] == [slots[0]]
    assert store.recent_runs(("five",)) == {"five": store.runs("five", 30)}  # the default limit, a tuple


def test_a_thousand_names_are_one_call(store: Store) -> None:
    """MAX_RECENT_JOBS names are taken (the runs of those that have some, [] for the others);
    one more is refused."""
    store.claim("job-7", store.now_ms() - 1_000, runner="r", lease_ms=LONG)
    names = [f"job-{i}" for i in range(MAX_RECENT_JOBS)]
    answer = store.recent_runs(names, 3)
    assert list(answer) == names
    assert answer["job-7"] == store.runs("job-7", 3) and len(answer["job-7"]) == 1
    assert sum(len(runs) for runs in answer.values()) == 1
    with pytest.raises(ConfigError, match=f"at most {MAX_RECENT_JOBS}"):
        store.recent_runs(names + ["one-more"])


@pytest.mark.parametrize(
    "jobs, limit, named",
    [
        ("abc", 30, "jobs must be a sequence"),
        (b"abc", 30, "jobs must be a sequence"),
        ({"a", "b"}, 30, "jobs must be a sequence"),
        (None, 30, "jobs must be a sequence"),
        (["ok", ""], 30, r"jobs\[1\]: job name must be a non-empty string"),
        (["ok", 5], 30, r"jobs\[1\]: job name must be a non-empty string"),
        (["a\x00b"], 30, r"jobs\[0\]: job name must not contain a NUL"),
        (["\ud800"], 30, r"jobs\[0\]: job name must be valid Unicode"),
        (["é" * 600], 30, r"jobs\[0\]: job name must be at most 1024 bytes"),
        (["ok"], 0, "limit must be an integer from 1"),
        (["ok"], -1, "limit must be an integer from 1"),
        (["ok"], "5", "limit must be an integer from 1"),
        (["ok"], True, "limit must be an integer from 1"),
        (["ok"], 2.0, "limit must be an integer from 1"),
        (["ok"], 2**50 + 1, "limit must be an integer from 1"),
    ],
)
def test_bad_arguments_are_refused_before_the_store_is_asked(store: Store, jobs: Any, limit: Any, named: str) -> None:
    """A bad ``jobs`` or ``limit`` is a ConfigError naming it (a bad name by its index), and no
    read reaches the store."""
    watched = Counting(store)
    with pytest.raises(ConfigError, match=named):
        watched.recent_runs(jobs, limit)
    assert watched.calls == []


def test_no_names_answer_nothing_without_asking_the_store(store: Store) -> None:
    """An empty list (or tuple) answers {} and sends nothing to the store."""
    watched = Counting(store)
    assert watched.recent_runs([]) == {} and watched.recent_runs((), 5) == {}
    assert watched.calls == []


def test_a_wrapper_passes_one_call_on_and_a_users_store_gets_the_default(store: Store) -> None:
    """Through a DelegatingStore the call reaches the inner store as one ``_recent_runs`` (its
    names once each); a store that does not override ``_recent_runs`` answers the same through
    one ``_runs`` per job."""
    make_history(store, ["a", "b"])
    names = ["a", "b", "none", "a"]
    wrapped = Counting(store)
    answer = wrapped.recent_runs(names, 2)
    assert wrapped.calls == [("recent_runs", (["a", "b", "none"], 2))]
    plain = PerJob(store)
    assert plain.recent_runs(names, 2) == answer
    assert plain.calls == [("runs", ("a", 2)), ("runs", ("b", 2)), ("runs", ("none", 2))]
    assert answer == {"a": store.runs("a", 2), "b": store.runs("b", 2), "none": []}


# -- what each backend sends -----------------------------------------------------------------------

JOBS = [f"job-{i}" for i in range(50)]


def one_run_each(store: Store, names: Sequence[str]) -> None:
    slot = store.now_ms() - 1_000
    answers = store.claim_many([ClaimRequest(name, slot, "r", lease_ms=LONG) for name in names])
    assert [answer.outcome for answer in answers] == ["won"] * len(names)


def test_redis_answers_50_jobs_in_one_round_trip_of_one_evalsha_each(own_server: servers.Server) -> None:
    """50 jobs: one send to the server, holding 50 EVALSHA of runs.lua (and nothing else); after
    SCRIPT FLUSH the pipeline's NOSCRIPT answers are followed by one SCRIPT LOAD and the 50 calls
    sent again, and the answers are still each job's runs."""
    store = RedisStore.from_url(own_server.url("valkey") + "?prefix=recent", connection_class=CountingConnection)
    control = own_server.client(socket_timeout=5)
    try:
        one_run_each(store, JOBS)
        expected = {job: store.runs(job, 30) for job in JOBS}  # also loads runs.lua
        control.config_resetstat()
        CountingConnection.sends.clear()
        assert store.recent_runs(JOBS) == expected
        assert sum(CountingConnection.sends.values()) == 1
        stats = commands(control)
        assert stats["evalsha"]["calls"] == len(JOBS) and "script|load" not in stats, stats

        control.script_flush()
        control.config_resetstat()
        assert store.recent_runs(JOBS) == expected
        stats = commands(control)
        assert stats["script|load"]["calls"] == 1, stats
        assert stats["evalsha"]["calls"] == 2 * len(JOBS) and stats["evalsha"]["failed_calls"] == len(JOBS), stats
    finally:
        store.close()
        control.close()


def test_a_redis_cluster_answers_in_one_round_trip_per_node(tmp_path: Path) -> None:
    """On the 3-master cluster, 60 jobs (on every master): each master gets one send holding one
    EVALSHA per job it holds, and the answers are each job's runs."""
    backend = ClusterBackend(tmp_path)
    masters = {server.port: server.client(socket_timeout=5) for server in SERVERS.cluster().nodes}
    store = RedisStore.from_url(backend.url(), connection_class=CountingConnection)
    names = [f"job-{i}" for i in range(60)]
    try:
        one_run_each(store, names)
        expected = {job: store.runs(job, 30) for job in names}  # loads runs.lua on every master
        for client in masters.values():
            client.config_resetstat()
        CountingConnection.sends.clear()
        assert store.recent_runs(names) == expected
        evalsha = {port: commands(client)["evalsha"]["calls"] for port, client in masters.items()}
        keys = {port: keys_under(client, backend.namespace) for port, client in masters.items()}
        jobs_held = {port: sum(job_keys(backend.namespace, name)[0] in keys[port] for name in names) for port in keys}
        assert all(jobs_held.values()), f"every master holds some of the 60 jobs: {jobs_held}"
        assert evalsha == jobs_held and dict(CountingConnection.sends) == dict.fromkeys(masters, 1)
    finally:
        store.close()
        for client in masters.values():
            client.close()
        backend.close()


@contextlib.contextmanager
def counting_postgres(tmp_path: Path) -> Iterator[Tuple[PostgresStore, List[str]]]:
    """A PostgreSQL store on a caller's pool of one connection whose cursors note each statement
    they execute (the list), holding one run of each of :data:`JOBS`; closed at the end."""
    backend = PostgresBackend(tmp_path)
    backend.dsn()  # the session's server, started if need be
    statements: List[str] = []
    pool = _counting_pool(statements, maxconn=1)
    store = PostgresStore(pool=pool, schema=backend.namespace)
    try:
        one_run_each(store, JOBS)
        yield store, statements
    finally:
        store.close()
        pool.closeall()
        backend.close()


def test_postgresql_answers_50_jobs_in_one_statement(tmp_path: Path) -> None:
    """50 jobs on a caller's pool whose cursors count what they execute: one statement."""
    with counting_postgres(tmp_path) as (store, statements):
        expected = {job: store.runs(job, 30) for job in JOBS}
        statements.clear()
        assert store.recent_runs(JOBS) == expected
        assert len(statements) == 1, statements


class TracedSQLiteStore(SQLiteStore):
    """A SQLite store whose connections report every statement they run (SQLite's trace callback)."""

    def __init__(self, path: str, **options: Any) -> None:
        super().__init__(path, **options)
        self.statements: List[str] = []

    def _connect(self) -> sqlite3.Connection:
        conn = super()._connect()
        conn.set_trace_callback(self.statements.append)
        return conn


def test_sqlite_answers_50_jobs_in_one_statement(tmp_path: Path) -> None:
    """50 jobs: one SELECT on the store's connection, whatever the number of jobs."""
    backend = SQLiteBackend(tmp_path)
    store = TracedSQLiteStore(str(tmp_path / "leasecron.db"), table=backend.namespace)
    try:
        one_run_each(store, JOBS)
        expected = {job: store.runs(job, 30) for job in JOBS}
        store.statements.clear()
        assert store.recent_runs(JOBS) == expected
        assert len(store.statements) == 1 and store.statements[0].lstrip().startswith("SELECT"), store.statements
    finally:
        store.close()
