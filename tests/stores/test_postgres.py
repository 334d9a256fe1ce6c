"""PostgresStore specifics: URLs and DSNs, a caller's pool, round trips, privileges, migrations,
namespacing, the connection pool, and how pauses, requests and attempts are kept.

The lease rules themselves are proved for PostgreSQL by the shared conformance suite
(``test_contract.py``, ``test_races.py``, ``test_controls.py``, ``test_attempts.py``); this
module checks what only the PostgreSQL store has, against the session's real server
(``SERVERS.postgres()``: the system PostgreSQL on 127.0.0.1:5432, else one the suite starts) and,
for a server that stops answering, a PostgreSQL started here (``tests/pg_servers.py``) and frozen
with SIGSTOP.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import uuid
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import psycopg2
import psycopg2.extensions
import psycopg2.pool
import pytest

import leasecron
from leasecron.announcements import Announcement
from leasecron import ConfigError, StoreError, StoreUnavailable
from leasecron.controls import JobState
from leasecron.runs import Attempt
from leasecron.stored import Poll, ScheduleChanges
from leasecron.stores import Finish
from leasecron.stores.migrations import migrations
from leasecron.stores.pg_connections import CONNECT_DEFAULTS
from leasecron.stores.postgres import SCHEMA_VERSION, PostgresStore
from leasecron.stores.queries import load_queries
from leasecron.stores.templates import render, without_comments
from tests import pg_servers, servers
from tests.conftest import SERVERS
from tests.helpers import race_in_processes, wait_for

JOB = "job"
TABLE = "leasecron_runs"
#: Functions the schema must have (the SQL may add helpers of its own): this release's, and those of
#: versions 1 (0.1), 2 and 3 (0.2), 4 to 6, which instances of older releases call.
FUNCTIONS = {
    f"{TABLE}_{name}"
    for name in (
        "now", "claim", "claim_v2", "heartbeat", "finish", "release",
        "claim_v3", "finish_v3", "release_v3", "pause_v3", "request_run_v3", "state_v3",
        "claim_v4", "set_schedule_v4", "schedule_changes_v4", "announce_v5", "claim_v6",
        "record_return_v7",
    )
}  # fmt: skip
#: The tables of the schema: the runs, the jobs, the requests for manual runs, the stored schedules,
#: the schema version.
TABLES = (TABLE, f"{TABLE}_jobs", f"{TABLE}_requests", f"{TABLE}_schedules", f"{TABLE}_instances", f"{TABLE}_meta")
#: What <table>_meta holds once this release has created or migrated a schema.
STAMPED = [("schema_version", str(SCHEMA_VERSION))]


def _unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


def _server() -> Tuple[str, int, str]:
    return SERVERS.postgres()


def _base_url(scheme: str = "postgresql", dbname: Optional[str] = None, user: str = "") -> str:
    host, port, default_db = _server()
    return f"{scheme}://{user + '@' if user else ''}{host}:{port}/{dbname or default_db}"


def _admin(dbname: Optional[str] = None) -> Any:
    """A superuser connection to the session's server (autocommit); the caller closes it."""
    host, port, default_db = _server()
    conn = psycopg2.connect(host=host, port=port, dbname=dbname or default_db, connect_timeout=5)
    conn.autocommit = True
    return conn


def _query(sql: str, params: Any = None, dbname: Optional[str] = None) -> List[Tuple[Any, ...]]:
    conn = _admin(dbname)
    try:
        with conn.cursor() as cur:
            cur.execute(sql, params)
            return list(cur.fetchall()) if cur.description else []
    finally:
        conn.close()


def _win(store: leasecron.Store, job: str = JOB, ago_ms: int = 1_000, lease_ms: int = 30_000) -> leasecron.Run:
    claim = store.claim(job, store.now_ms() - ago_ms, runner="r1", lease_ms=lease_ms)
    assert claim.outcome == "won" and claim.run is not None, claim
    return claim.run


def _backends(application_name: str) -> List[Tuple[int, Optional[str], Optional[str]]]:
    """(pid, wait_event_type, state) of the server's backends with this application_name."""
    rows = _query(
        "SELECT pid, wait_event_type, state FROM pg_stat_activity WHERE application_name = %s",
        (application_name,),
    )
    return [(int(r[0]), r[1], r[2]) for r in rows]


@pytest.fixture
def schema() -> Iterator[str]:
    """A schema name of this test's own (not created yet); dropped at the end."""
    name = _unique("lc")
    yield name
    _query(f"DROP SCHEMA IF EXISTS {name} CASCADE")


@pytest.fixture
def opened() -> Iterator[Callable[..., PostgresStore]]:
    """``opened(url_or_store)``: a store (from a URL) closed at the end of the test."""
    stores: List[PostgresStore] = []

    def keep(what: Any) -> PostgresStore:
        store = leasecron.open_store(what) if isinstance(what, str) else what
        stores.append(store)
        return store

    yield keep
    for store in stores:
        store.close()


@pytest.fixture(scope="module")
def own_server() -> Iterator[pg_servers.PgServer]:
    """A PostgreSQL started for this module (it may be frozen; the session's server must not be)."""
    with pg_servers.own_server() as server:
        yield server


# -- 1. URLs and DSNs ----------------------------------------------------------------------


@pytest.mark.parametrize("scheme", ["postgresql", "postgres"])
def test_both_url_schemes_open_a_postgres_store(scheme: str, schema: str, opened: Callable[..., Any]) -> None:
    """postgresql:// and postgres:// both open a PostgresStore that works, in the schema the URL names."""
    store = opened(f"{_base_url(scheme)}?schema={schema}")
    assert isinstance(store, PostgresStore) and store.kind == "postgresql"
    run = _win(store)
    assert store.get_run(JOB, run.slot_ms) == run
    assert _query("SELECT 1 FROM pg_tables WHERE schemaname = %s AND tablename = %s", (schema, TABLE)) == [(1,)]


def test_url_options_schema_table_and_max_connections_apply(schema: str, opened: Callable[..., Any]) -> None:
    """?schema=&table=&max_connections= apply: the tables are <schema>.<table>*, and while every
    write is held back exactly max_connections connections are open; the other callers wait and
    all complete once the writes go through."""
    app = _unique("lc_app")
    store = opened(f"{_base_url()}?schema={schema}&table=myruns&max_connections=3&application_name={app}")
    assert (store.schema, store.table) == (schema, "myruns")
    _win(store, job="setup")
    tables = {r[0] for r in _query("SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,))}
    assert tables == {"myruns", "myruns_jobs", "myruns_requests", "myruns_schedules", "myruns_instances", "myruns_meta"}

    results: List[object] = []
    lock = threading.Lock()

    def claim(i: int) -> None:
        try:
            outcome: object = store.claim(f"j{i}", store_now - 1_000, runner=f"r{i}").outcome
        except Exception as exc:  # noqa: BLE001 - reported below
            outcome = exc
        with lock:
            results.append(outcome)

    blocker = _admin()
    try:
        store_now = store.now_ms()
        with blocker.cursor() as cur:
            cur.execute("BEGIN")
            cur.execute(f"LOCK TABLE {schema}.myruns IN EXCLUSIVE MODE")  # reads go on, writes wait
        threads = [threading.Thread(target=claim, args=(i,), daemon=True) for i in range(8)]
        for t in threads:
            t.start()
        wait_for(
            lambda: len([b for b in _backends(app) if b[1] == "Lock"]) == 3,
            5,
            message="3 connections never waited for the lock",
        )
        threading.Event().wait(0.2)  # the other callers keep waiting for a connection
        assert len(_backends(app)) == 3, _backends(app)
        assert results == []
    finally:
        with blocker.cursor() as cur:
            cur.execute("ROLLBACK")
        blocker.close()
    for t in threads:
        t.join(10)
    assert results == ["won"] * 8
    assert len(_backends(app)) <= 3


def test_other_url_options_go_to_libpq(schema: str, opened: Callable[..., Any]) -> None:
    """Query options other than schema/table/max_connections reach libpq: application_name
    shows in pg_stat_activity for the store's connection, on the URL's database."""
    app = _unique("lc_app")
    store = opened(f"{_base_url()}?schema={schema}&application_name={app}&connect_timeout=3")
    _win(store)
    rows = _query("SELECT datname FROM pg_stat_activity WHERE application_name = %s", (app,))
    assert rows == [(_server()[2],)]


@pytest.mark.parametrize("where", ["schema", "table"])
@pytest.mark.parametrize("name", ["a-b", "1x", "x; drop"])
def test_bad_schema_or_table_name_is_a_config_error(where: str, name: str) -> None:
    """A schema or table name that is not a plain identifier is refused with ConfigError, from the
    constructor and from the URL."""
    with pytest.raises(ConfigError, match=where):
        PostgresStore(_base_url(), **{where: name})
    encoded = name.replace(";", "%3B").replace(" ", "%20")
    with pytest.raises(ConfigError, match=where):
        leasecron.open_store(f"{_base_url()}?{where}={encoded}")


def test_password_never_shows_in_repr_or_errors(schema: str, opened: Callable[..., Any]) -> None:
    """The password of a URL or key=value DSN is not in repr(store), nor in a connection error;
    the store works (trust auth ignores the password)."""
    host, port, dbname = _server()
    secret = "s3cret_pw_" + uuid.uuid4().hex[:6]
    user = _query("SELECT current_user")[0][0]
    url_store = opened(f"postgresql://{user}:{secret}@{host}:{port}/{dbname}?schema={schema}")
    dsn = f"host={host} port={port} dbname={dbname} user={user} password={secret}"
    dsn_store = opened(PostgresStore(dsn, schema=schema))
    for store in (url_store, dsn_store):
        assert secret not in repr(store) and secret not in str(store)
        assert "***" in repr(store)
        _win(store, job=f"j{id(store)}")
    dead = opened(f"postgresql://{user}:{secret}@{host}:{servers.free_port()}/{dbname}?schema={schema}")
    with pytest.raises(StoreUnavailable) as info:
        dead.now_ms()
    assert secret not in str(info.value)


@pytest.mark.parametrize(
    "form",
    [
        "host={host} port={port} dbname={db} password='x {secret}'",
        "host={host} port={port} dbname={db} password = {secret}",
        "postgresql://{host}:{port}/{db}?password={secret}",
    ],
    ids=["quoted-with-space", "spaces-around-equals", "url-query"],
)  # fmt: skip
def test_password_in_other_valid_dsn_forms_never_shows_in_repr(form: str, opened: Callable[..., Any]) -> None:
    """The password is kept out of repr(store) in every form libpq accepts: a quoted key=value
    value, spaces around '=', and a URL's ?password= option."""
    host, port, dbname = _server()
    secret = "s3cret_pw_" + uuid.uuid4().hex[:6]
    store = opened(PostgresStore(form.format(host=host, port=port, db=dbname, secret=secret), schema="unused"))
    assert secret not in repr(store), repr(store)


def test_key_value_dsn_works(schema: str, opened: Callable[..., Any]) -> None:
    """A libpq key=value DSN opens the store (PostgresStore(dsn, schema=...))."""
    host, port, dbname = _server()
    store = opened(PostgresStore(f"host={host} port={port} dbname={dbname}", schema=schema))
    run = _win(store)
    assert store.heartbeat(JOB, run.slot_ms, run.token, 30_000)
    assert store.finish(JOB, run.slot_ms, run.token, "success")
    assert _query(f"SELECT status FROM {schema}.{TABLE}") == [("success",)]


def test_unreachable_port_fails_fast_with_store_unavailable_and_leaks_no_pool_slot(opened: Callable[..., Any]) -> None:
    """A port nothing listens on gives StoreUnavailable at once (not at construction), every time:
    a failed connect gives its pool slot back (max_connections=1, ten calls, no wait)."""
    host, _, dbname = _server()
    store = opened(f"postgresql://{host}:{servers.free_port()}/{dbname}?max_connections=1")
    started = time.monotonic()
    for _ in range(10):
        with pytest.raises(StoreUnavailable) as info:
            store.claim(JOB, 0, runner="r1")
        assert "no free PostgreSQL connection" not in str(info.value)
    assert time.monotonic() - started < 3


@pytest.mark.parametrize("connect_timeout", [None, 2])
def test_a_server_that_does_not_answer_gives_store_unavailable_after_the_connect_timeout(
    own_server: pg_servers.PgServer, connect_timeout: Optional[int]
) -> None:
    """A server that accepts TCP but never answers (postmaster frozen with SIGSTOP): the store
    gives up with StoreUnavailable after the URL's connect_timeout, or after the store's default
    one when the URL sets none (libpq alone would wait for ever)."""
    query = "" if connect_timeout is None else f"?connect_timeout={connect_timeout}"
    expected = float(CONNECT_DEFAULTS["connect_timeout"] if connect_timeout is None else connect_timeout)
    store = leasecron.open_store(own_server.dsn() + query)
    pid = own_server.pid
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        with pytest.raises(StoreUnavailable, match="timeout"):
            store.now_ms()
        took = time.monotonic() - started
    finally:
        os.kill(pid, signal.SIGCONT)
        store.close()
    assert expected - 0.5 <= took <= expected + 2.5, took
    conn = own_server.connect()  # the server answers again
    conn.close()


# -- 2. A caller's pool ------------------------------------------------------------------------


def test_a_callers_threaded_connection_pool_works_and_stays_open_after_close(schema: str) -> None:
    """pool= takes a psycopg2 ThreadedConnectionPool: every operation works, each connection goes
    back to the pool (one connection is enough for all of them), and store.close() leaves the
    pool open."""
    host, port, dbname = _server()
    pool = psycopg2.pool.ThreadedConnectionPool(1, 1, host=host, port=port, dbname=dbname)
    try:
        store = PostgresStore(pool=pool, schema=schema)
        run = _win(store)
        assert store.heartbeat(JOB, run.slot_ms, run.token, 30_000)
        assert store.finish(JOB, run.slot_ms, run.token, "success")
        second = _win(store, ago_ms=500)
        assert store.release(JOB, second.slot_ms, second.token)
        assert [r.slot_ms for r in store.runs(JOB)] == [second.slot_ms, run.slot_ms]
        assert store.jobs() == [JOB]
        store.close()
        assert not pool.closed
        conn = pool.getconn()  # the one connection is back and open
        try:
            with conn.cursor() as cur:
                cur.execute(f"SELECT count(*) FROM {schema}.{TABLE}")
                assert cur.fetchone() == (2,)
        finally:
            pool.putconn(conn)
    finally:
        pool.closeall()


# -- 3. Round trips ------------------------------------------------------------------------------


def _counting_pool(statements: List[str], maxconn: int = 2) -> psycopg2.pool.ThreadedConnectionPool:
    """A pool whose connections append every statement their cursors execute to ``statements``."""

    class CountingCursor(psycopg2.extensions.cursor):
        def execute(self, query: Any, vars: Any = None) -> Any:
            statements.append(query if isinstance(query, str) else str(query))
            return super().execute(query, vars)

        def executemany(self, query: Any, vars_list: Any) -> Any:
            statements.append(query if isinstance(query, str) else str(query))
            return super().executemany(query, vars_list)

        def callproc(self, procname: Any, parameters: Any = None) -> Any:
            statements.append(f"callproc {procname}")
            return super().callproc(procname, parameters)

    class CountingConnection(psycopg2.extensions.connection):
        def cursor(self, *args: Any, **kwargs: Any) -> Any:
            kwargs.setdefault("cursor_factory", CountingCursor)
            return super().cursor(*args, **kwargs)

    host, port, dbname = _server()
    return psycopg2.pool.ThreadedConnectionPool(
        1, maxconn, host=host, port=port, dbname=dbname, connection_factory=CountingConnection
    )


def test_every_operation_is_one_statement(schema: str) -> None:
    """Once the schema exists, claim, heartbeat, finish and release, a batch of finishes, pause and
    resume, request_run and its manual claim, the reads of pauses and requests, set_schedule, a claim answered stale,
    and the reads of stored schedules (poll too) each execute exactly one statement on an
    autocommit connection (one round trip, no transaction left open)."""
    statements: List[str] = []
    pool = _counting_pool(statements, maxconn=1)
    try:
        store = PostgresStore(pool=pool, schema=schema)
        slot = store.now_ms() - 1_000  # creates the schema
        counts: Dict[str, int] = {}

        def count(name: str, call: Callable[[], Any]) -> Any:
            statements.clear()
            result = call()
            counts[name] = len(statements)
            return result

        claim = count("claim", lambda: store.claim(JOB, slot, runner="r1", lease_ms=30_000))
        assert claim.outcome == "won" and claim.run is not None
        assert count("heartbeat", lambda: store.heartbeat(JOB, slot, claim.run.token, 30_000)) is True
        assert count("finish", lambda: store.finish(JOB, slot, claim.run.token, "success")) is True
        again = count("claim again", lambda: store.claim(JOB, slot + 1, runner="r1", lease_ms=30_000))
        assert again.outcome == "won" and again.run is not None
        assert count("release", lambda: store.release(JOB, slot + 1, again.run.token)) is True
        ended = [Finish(JOB, slot, claim.run.token, "success"), Finish(JOB, slot + 1, again.run.token, "failed", "x")]
        assert count("finish_many", lambda: store.finish_many(ended)) == [False, True]  # rule 25: one statement
        assert count("refused heartbeat", lambda: store.heartbeat(JOB, slot, claim.run.token, 30_000)) is False
        assert count("pause", lambda: store.pause(JOB, by="ops", note="why")).paused
        assert count("paused claim", lambda: store.claim(JOB, slot + 2, runner="r1")).outcome == "paused"
        assert count("job_state", lambda: store.job_state(JOB)).note == "why"
        assert count("resume", lambda: store.resume(JOB, by="ops")) == JobState(JOB)
        made = count("request_run", lambda: store.request_run(JOB, by="ops"))
        assert count("pending_requests", lambda: store.pending_requests()) == [made]
        assert count("job_states", lambda: store.job_states())[0].requests == (made,)
        manual = count("manual claim", lambda: store.claim(JOB, made.slot_ms, runner="r1", reason="manual"))
        assert manual.won
        record = count("set_schedule", lambda: store.set_schedule(JOB, by="ops", schedule=30))
        assert count("stored_schedule", lambda: store.stored_schedule(JOB)) == record
        assert count("stale claim", lambda: store.claim(JOB, slot + 3, runner="r1")).outcome == "stale"
        assert count("schedule_changes", lambda: store.schedule_changes(0)).changes == (record,)
        assert count("poll", lambda: store.poll(0)).schedules.changes == (record,)
        said = Announcement("web-1", "host", 7, "0.3.0")
        assert count("announcing poll", lambda: store.poll(0, announce=said)).schedules.changes == (record,)
        assert [i.runner for i in count("instances", lambda: store.instances())] == ["web-1"]
        assert count("announce", lambda: store.announce(said)) is None
        assert count("withdraw", lambda: store.withdraw("web-1")) is None
        assert counts == dict.fromkeys(counts, 1), counts
        conn = pool.getconn()
        try:
            assert conn.autocommit
            assert conn.info.transaction_status == psycopg2.extensions.TRANSACTION_STATUS_IDLE
        finally:
            pool.putconn(conn)
    finally:
        pool.closeall()


# -- 4. Privileges ----------------------------------------------------------------------------------


def test_a_role_without_superuser_or_create_on_the_database_can_use_a_schema_it_owns() -> None:
    """A plain role (no superuser, no CREATE on the database, none on public) opens the store in a
    schema it owns: the tables and functions are created there, owned by it, and a claim works;
    a schema it would have to create, or public, is refused with StoreError."""
    host, port, _ = _server()
    dbname, role = _unique("lc_perm_db"), _unique("lc_owner")
    _query(f"CREATE DATABASE {dbname}")
    try:
        _query(f"CREATE ROLE {role} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE")
        _query(f"REVOKE CREATE ON DATABASE {dbname} FROM PUBLIC", dbname=dbname)
        _query("REVOKE CREATE ON SCHEMA public FROM PUBLIC", dbname=dbname)
        _query(f"CREATE SCHEMA lc_owned AUTHORIZATION {role}", dbname=dbname)
        privileges = _query(
            "SELECT r.rolsuper, has_database_privilege(r.rolname, %s, 'CREATE'),"
            " has_schema_privilege(r.rolname, 'public', 'CREATE') FROM pg_roles r WHERE r.rolname = %s",
            (dbname, role),
            dbname=dbname,
        )
        assert privileges == [(False, False, False)]

        base = f"postgresql://{role}@{host}:{port}/{dbname}"
        with leasecron.open_store(f"{base}?schema=lc_owned") as store:
            run = _win(store)
            assert store.finish(JOB, run.slot_ms, run.token, "success")
            assert [r.status for r in store.runs(JOB)] == ["success"]
        owners = _query("SELECT tablename, tableowner FROM pg_tables WHERE schemaname = 'lc_owned'", dbname=dbname)
        assert sorted(owners) == sorted((t, role) for t in TABLES)
        functions = _query(
            "SELECT p.proname, pg_get_userbyid(p.proowner) FROM pg_proc p"
            " JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'lc_owned'",
            dbname=dbname,
        )
        assert FUNCTIONS <= {name for name, _ in functions}
        assert {owner for _, owner in functions} == {role}

        for elsewhere in ("lc_not_there", "public"):
            with leasecron.open_store(f"{base}?schema={elsewhere}") as store:
                with pytest.raises(StoreError, match="permission denied") as info:
                    store.claim(JOB, 0, runner="r1")
                assert not isinstance(info.value, StoreUnavailable)
    finally:
        _query(f"DROP DATABASE IF EXISTS {dbname} WITH (FORCE)")
        _query(f"DROP ROLE IF EXISTS {role}")


# -- 5. Migrations --------------------------------------------------------------------------------


def _meta(schema: str, table: str = TABLE) -> List[Tuple[str, str]]:
    return sorted(_query(f"SELECT key, value FROM {schema}.{table}_meta"))


def test_first_open_stamps_the_schema_version_and_a_second_store_does_not_migrate_again(schema: str) -> None:
    """The first store stamps schema_version = 7 in <table>_meta; a second store on the same schema
    reads the version and runs no migration (no CREATE FUNCTION/TABLE, no new stamp), keeping
    the tables and their data."""
    first = PostgresStore(_base_url(), schema=schema)
    try:
        run = _win(first)
    finally:
        first.close()
    assert SCHEMA_VERSION == 7
    assert _meta(schema) == STAMPED
    oids = _query(f"SELECT '{schema}.{TABLE}'::regclass::oid, '{schema}.{TABLE}_jobs'::regclass::oid")

    statements: List[str] = []
    pool = _counting_pool(statements)
    try:
        second = PostgresStore(pool=pool, schema=schema)
        assert second.get_run(JOB, run.slot_ms) == run
    finally:
        pool.closeall()
    text = "\n".join(statements)
    assert "schema_version" in text  # it did read the version
    assert "CREATE FUNCTION" not in text and f"CREATE TABLE {schema}.{TABLE} " not in text
    assert "INSERT INTO" not in text
    assert _meta(schema) == STAMPED
    assert _query(f"SELECT '{schema}.{TABLE}'::regclass::oid, '{schema}.{TABLE}_jobs'::regclass::oid") == oids


def test_a_schema_stamped_by_a_newer_version_is_refused_with_upgrade_advice(schema: str) -> None:
    """A table stamped with a newer schema version (99) is refused with StoreError (not
    StoreUnavailable, which would be retried) saying to upgrade; the stamp is left alone."""
    with PostgresStore(_base_url(), schema=schema) as store:
        _win(store)
    _query(f"UPDATE {schema}.{TABLE}_meta SET value = '99' WHERE key = 'schema_version'")
    with PostgresStore(_base_url(), schema=schema) as store:
        for _ in range(2):  # refused every time, not only at the first call
            with pytest.raises(StoreError, match="upgrade") as info:
                store.claim(JOB, 0, runner="r1")
            assert not isinstance(info.value, StoreUnavailable)
            assert "99" in str(info.value)
    assert _meta(schema) == [("schema_version", "99")]


def _old_schema(schema: str, version: int) -> None:
    """The schema as the release of schema ``version`` left it: its migrations, its stamp."""
    _query(f"CREATE SCHEMA {schema}")
    for migration in migrations("postgres")[:version]:
        _query(render(without_comments(migration.text), schema=schema, table=TABLE))
    _query(f"CREATE TABLE {schema}.{TABLE}_meta (key text PRIMARY KEY, value text NOT NULL)")
    _query(f"INSERT INTO {schema}.{TABLE}_meta VALUES ('schema_version', %s)", (str(version),))


def _old_claim(schema: str, function: str, slot: int, token: str, runner: str) -> str:
    """A claim by an older release's claim function (0.1's ``claim`` or 0.2's ``claim_v2``): its outcome."""
    ((outcome,),) = _query(
        f"SELECT c.outcome FROM {schema}.{TABLE}_{function}(%s, %s, %s, %s, 'schedule',"
        " 30000, 3, 3600000, 'allow', 100) c",
        (JOB, slot, token, runner),
    )
    return str(outcome)


def _functions(schema: str, like: str) -> List[Tuple[Any, ...]]:
    return _query(
        "SELECT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
        " WHERE n.nspname = %s AND p.proname LIKE %s ORDER BY p.proname",
        (schema, like),
    )


def _older_runs(schema: str, function: str) -> Tuple[int, Dict[str, int]]:
    """Runs written by an older release's functions, one of each kind: (now, {kind: slot})."""
    ((now,),) = _query(f"SELECT {schema}.{TABLE}_now()")
    slots = {kind: now - 60_000 + i * 1_000 for i, kind in enumerate(["success", "failed", "running", "released"])}
    for kind, slot in slots.items():
        assert _old_claim(schema, function, slot, f"tok-{kind}", "old") == "won"
    _query(f"SELECT {schema}.{TABLE}_finish(%s, %s, 'tok-success', 'success', NULL)", (JOB, slots["success"]))
    _query(f"SELECT {schema}.{TABLE}_finish(%s, %s, 'tok-failed', 'failed', 'boom')", (JOB, slots["failed"]))
    _query(f"SELECT {schema}.{TABLE}_release(%s, %s, 'tok-released')", (JOB, slots["released"]))
    return now, slots


def _one_attempt_each(store: PostgresStore, slots: Dict[str, int]) -> None:
    """Each run an older release wrote reads as the one attempt its own fields describe."""
    for kind, slot in slots.items():
        run = store.get_run(JOB, slot)
        assert run is not None, kind
        assert run.attempts == (Attempt(1, "old", "schedule", run.started_ms, run.finished_ms, run.status, run.error),)
    assert store.runs(JOB) == [store.get_run(JOB, slot) for slot in sorted(slots.values(), reverse=True)]


def _carry_on(store: PostgresStore, slots: Dict[str, int]) -> None:
    """This release's operations on runs an older release wrote record their attempts from there on."""
    released = store.claim(JOB, slots["released"], runner="new", reason="takeover")
    assert released.outcome == "won" and released.run is not None
    first, second = released.run.attempts
    assert (first.number, first.runner, first.outcome, second.number, second.runner, second.outcome) == (
        1, "old", "handed_over", 2, "new", "running",
    )  # fmt: skip
    assert store.finish(JOB, slots["running"], "tok-running", "success")
    done = store.get_run(JOB, slots["running"])
    assert done is not None and [(a.number, a.runner, a.outcome) for a in done.attempts] == [(1, "old", "success")]
    assert done.attempts[0].ended_ms == done.finished_ms


def test_a_version_1_schema_of_0_1_migrates_and_claims_by_this_releases_rules(schema: str) -> None:
    """A schema as leasecron 0.1 left it (migration 1 exactly, stamped version 1, runs its functions
    won, finished and released) is migrated by the next store that opens it: migrations 2 to 4 add
    this release's functions beside 0.1's, which stay as they were (instances of 0.1 still call
    them); each run reads as one attempt made of its own fields; the retry of the claim that won a
    run is told won (rule 2, which 0.1's function lacks); and the stamp is 4."""
    first = migrations("postgres")[0]
    assert first.version == 1
    _old_schema(schema, 1)
    now, slots = _older_runs(schema, "claim")
    old_claim = _query(f"SELECT prosrc FROM pg_proc WHERE oid = '{schema}.{TABLE}_claim'::regproc")

    with PostgresStore(_base_url(), schema=schema) as store:
        _one_attempt_each(store, slots)
        slot = slots["running"]
        retry = store.claim(JOB, slot, runner="old", token="tok-running")
        assert retry.outcome == "won" and retry.run is not None
        assert (retry.run.attempt, retry.run.token, len(retry.run.attempts)) == (1, "tok-running", 1)
        assert store.claim(JOB, slot, runner="r2").outcome == "running"
        _carry_on(store, slots)
        assert store.claim(JOB, now, runner="new", overlap="allow").outcome == "won"
    assert _meta(schema) == STAMPED
    assert _functions(schema, f"{TABLE}_claim%") == [
        (f"{TABLE}_claim",),
        (f"{TABLE}_claim_v2",),
        (f"{TABLE}_claim_v3",),
        (f"{TABLE}_claim_v4",),
        (f"{TABLE}_claim_v6",),
    ]
    assert _query(f"SELECT prosrc FROM pg_proc WHERE oid = '{schema}.{TABLE}_claim'::regproc") == old_claim


def test_a_version_2_schema_migrates_and_its_release_keeps_working_beside_this_one(schema: str) -> None:
    """A schema of version 2 (the release before 0.2) with runs of every kind is migrated to 4
    without losing one: each reads as one attempt made of its own fields, and this release records
    attempts on them from there on. A connection of the older release, opened before the migration,
    goes on calling its functions after it (the runs table grew two columns)."""
    _old_schema(schema, 2)
    now, slots = _older_runs(schema, "claim_v2")
    old = _admin()
    try:
        with old.cursor() as cur:  # an instance of the older release, its plans cached before the migration
            cur.execute(f"SELECT c.outcome FROM {schema}.{TABLE}_claim_v2(%s, %s, 'tok-a', 'old', 'schedule',"
                        " 30000, 3, 3600000, 'allow', 100) c", ("older", now - 1_000))  # fmt: skip
            assert cur.fetchone() == ("won",)
        with PostgresStore(_base_url(), schema=schema) as store:
            _one_attempt_each(store, slots)
            assert _meta(schema) == STAMPED
            with old.cursor() as cur:
                cur.execute(f"SELECT {schema}.{TABLE}_finish('older', %s, 'tok-a', 'success', NULL)", (now - 1_000,))
                assert cur.fetchone() == (True,)
                cur.execute(f"SELECT c.outcome, (c.run).attempt FROM {schema}.{TABLE}_claim_v2('older', %s, 'tok-b',"
                            " 'old', 'schedule', 30000, 3, 3600000, 'allow', 100) c", (now,))  # fmt: skip
                assert cur.fetchone() == ("won", 1)
            older = store.get_run("older", now - 1_000)
            assert older is not None and [(a.runner, a.outcome) for a in older.attempts] == [("old", "success")]
            _carry_on(store, slots)
            state = store.pause(JOB, by="ops")
            assert state.paused and store.claim(JOB, now, runner="new").outcome == "paused"
    finally:
        old.close()
    assert FUNCTIONS <= {name for (name,) in _functions(schema, f"{TABLE}_%")}


def test_a_version_3_schema_of_0_2_upgrades_in_place_and_0_2_instances_keep_working(schema: str) -> None:
    """A schema as 0.2 left it (migrations 1-3, stamped 3), with runs, a pause and a request its
    functions wrote, is read as it is by a reader of this release (no stored schedule), then
    migrated in place to 4 by the next store that creates: the runs, the pause and the request are
    as they were, and set_schedule, stored_schedule, schedule_changes, poll and rule 23 work. A
    connection of 0.2 opened before the migration goes on with its own calls, which stay as they
    were: its claim wins, also a slot of a job whose schedule is overridden (it knows nothing of
    rule 23, as 0.1's claims know nothing of pauses), and its finish ends its run."""
    _old_schema(schema, 3)
    old = _admin()  # an instance of 0.2, its plans cached before the migration
    try:
        with old.cursor() as cur:

            def old_call(sql: str, *params: Any) -> Tuple[Any, ...]:
                cur.execute(sql.replace("lc.", f"{schema}.{TABLE}_"), params)
                row: Tuple[Any, ...] = cur.fetchone()
                return row

            def old_claim(job: str, slot: int, token: str) -> str:
                return str(old_call("SELECT c.outcome FROM lc.claim_v3(%s, %s, %s, 'old', 'schedule', 600000, 3,"
                                    " 3600000, 'allow', 100, 20) c", job, slot, token)[0])  # fmt: skip

            (now,) = old_call("SELECT lc.now()")
            slots = {kind: now - 60_000 + i * 1_000 for i, kind in enumerate(["success", "running", "released"])}
            for kind, slot in slots.items():
                assert old_claim(JOB, slot, f"tok-{kind}") == "won"
            assert old_call("SELECT lc.finish_v3(%s, %s, 'tok-success', 'success', NULL)", JOB, slots["success"])[0]
            assert old_call("SELECT lc.release_v3(%s, %s, 'tok-released')", JOB, slots["released"])[0]
            old_call("SELECT * FROM lc.pause_v3('paused', 'ops', 'why')")
            old_call("SELECT * FROM lc.request_run_v3('asked', 'ops', 3600000, 20)")

            with leasecron.open_store(f"{_base_url()}?schema={schema}", create=False) as reader:
                runs, states, requests = reader.runs(JOB), reader.job_states(), reader.pending_requests()
                assert [r.status for r in runs] == ["running", "running", "success"]
                assert [s.job for s in states] == ["asked", "paused"] and [r.job for r in requests] == ["asked"]
                assert reader.stored_schedule(JOB) is None
                assert reader.schedule_changes(0) == ScheduleChanges(0)
                assert reader.poll(0) == Poll(requests, ScheduleChanges(0))
            assert _meta(schema) == [("schema_version", "3")]

            with PostgresStore(_base_url(), schema=schema) as store:
                assert (store.runs(JOB), store.job_states(), store.pending_requests()) == (runs, states, requests)
                assert _meta(schema) == STAMPED
                record = store.set_schedule(JOB, by="ops", schedule="*/5 * * * *")
                assert record.version == 1 and store.stored_schedule(JOB) == record
                assert store.schedule_changes(0) == ScheduleChanges(1, (record,))
                assert store.poll(0) == Poll(requests, ScheduleChanges(1, (record,)))
                base = store.now_ms() - 9_000
                assert store.claim(JOB, base, runner="new", overlap="allow").outcome == "stale"
                assert store.claim(JOB, base, runner="new", overlap="allow", version=1).outcome == "won"

                assert old_claim("other", base, "tok-other") == "won"
                assert old_claim(JOB, base + 1_000, "tok-b") == "won"  # 0.2 claims the code's schedule
                assert old_call("SELECT lc.finish_v3(%s, %s, 'tok-b', 'success', NULL)", JOB, base + 1_000)[0]
                finished = store.get_run(JOB, base + 1_000)
                assert finished is not None and (finished.status, finished.runner) == ("success", "old")
                assert store.set_schedule(JOB, by="ops").version == 2  # reset: the code's schedule again
                assert store.claim(JOB, base + 2_000, runner="new", version=1).outcome == "stale"
                assert store.claim(JOB, base + 2_000, runner="new", version=2, overlap="allow").won
                assert store.get_run(JOB, slots["running"]) == runs[1]
    finally:
        old.close()
    assert FUNCTIONS <= {name for (name,) in _functions(schema, f"{TABLE}_%")}


def _open_and_claim(url: str, job: str, barrier: Any, results: Any) -> None:
    """In a child process: open the store, wait for the others, then make the first call."""
    try:
        store = leasecron.open_store(url)
        barrier.wait(30)
        try:
            now = store.now_ms()
            results.put((job, store.claim(job, now - 1_000, runner=job).outcome))
        finally:
            store.close()
    except Exception as exc:  # noqa: BLE001 - reported to the parent
        results.put((job, f"{type(exc).__name__}: {exc}"))


def test_processes_opening_a_fresh_schema_at_once_all_succeed_and_create_it_once(schema: str) -> None:
    """Four processes making their first call on a schema that does not exist yet, at the same
    moment: every one succeeds (the creation is serialised), and the schema is created and
    stamped once."""
    url = f"{_base_url()}?schema={schema}"
    results = race_in_processes(_open_and_claim, [(url, f"j{i}") for i in range(4)], timeout=60)
    assert sorted(results) == [(f"j{i}", "won") for i in range(4)]
    assert _meta(schema) == STAMPED
    assert _query("SELECT count(*) FROM pg_namespace WHERE nspname = %s", (schema,)) == [(1,)]
    functions = _query(
        "SELECT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = %s",
        (schema,),
    )
    names = [f for (f,) in functions]
    assert FUNCTIONS <= set(names) and len(names) == len(set(names)), names
    with PostgresStore(_base_url(), schema=schema) as store:
        assert store.jobs() == [f"j{i}" for i in range(4)]


def test_a_schema_name_with_capitals_can_be_opened_twice(opened: Callable[..., Any]) -> None:
    """A schema name with capital letters (a valid identifier) works for every store, not only
    the first that creates it."""
    name = "Lc" + uuid.uuid4().hex[:10]
    try:
        first = opened(f"{_base_url()}?schema={name}")
        _win(first)
        second = opened(f"{_base_url()}?schema={name}")
        assert second.get_run(JOB, first.runs(JOB)[0].slot_ms) is not None
        assert _query("SELECT count(*) FROM pg_namespace WHERE lower(nspname) = %s", (name.lower(),)) == [(1,)]
    finally:
        _query(f"DROP SCHEMA IF EXISTS {name.lower()} CASCADE")


def test_a_reader_of_a_version_2_schema_finds_no_pause_and_no_request_and_changes_nothing(schema: str) -> None:
    """A store opened with create=False on a schema of version 2 reads it as it is: its runs as one
    attempt each, no job paused, no request, no stored schedule; the schema stays at version 2,
    without the requests table."""
    _old_schema(schema, 2)
    _, slots = _older_runs(schema, "claim_v2")
    with leasecron.open_store(f"{_base_url()}?schema={schema}", create=False) as reader:
        assert isinstance(reader, PostgresStore)
        _one_attempt_each(reader, slots)
        assert reader.job_state(JOB) == JobState(JOB)
        assert reader.job_states() == [] and reader.pending_requests() == []
        assert reader.stored_schedule(JOB) is None and reader.poll(0) == Poll([], ScheduleChanges(0))
    assert _meta(schema) == [("schema_version", "2")]
    assert _query("SELECT to_regclass(%s)", (f"{schema}.{TABLE}_requests",)) == [(None,)]


# -- 6. Namespacing ---------------------------------------------------------------------------------


def test_two_tables_in_one_schema_do_not_see_each_others_runs(schema: str, opened: Callable[..., Any]) -> None:
    """Stores with different table= in one schema keep separate runs: the same slot is won in
    both, and neither store lists, reads or renews the other's run."""
    a = opened(f"{_base_url()}?schema={schema}&table=runs_a")
    b = opened(f"{_base_url()}?schema={schema}&table=runs_b")
    slot = a.now_ms() - 1_000
    won_a = a.claim(JOB, slot, runner="ra")
    won_b = b.claim(JOB, slot, runner="rb")
    assert won_a.outcome == won_b.outcome == "won"
    assert won_a.run is not None and won_b.run is not None and won_a.run.token != won_b.run.token
    assert a.finish(JOB, slot, won_a.run.token, "success")
    assert not b.heartbeat(JOB, slot, won_a.run.token, 30_000)
    assert [(r.runner, r.status) for r in a.runs(JOB)] == [("ra", "success")]
    assert [(r.runner, r.status) for r in b.runs(JOB)] == [("rb", "running")]
    assert a.unfinished(JOB) == [] and [r.runner for r in b.unfinished(JOB)] == ["rb"]
    assert a.jobs() == b.jobs() == [JOB]
    other = opened(f"{_base_url()}?schema={schema}&table=runs_c")
    assert other.jobs() == [] and other.get_run(JOB, slot) is None
    tables = {r[0] for r in _query("SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,))}
    assert {"runs_a", "runs_b", "runs_c"} <= tables


# -- 7. The store's own pool --------------------------------------------------------------------------


def test_more_threads_than_max_connections_all_complete_on_at_most_that_many_connections(
    schema: str, opened: Callable[..., Any]
) -> None:
    """16 threads sharing a store with max_connections=2 all complete their claims, heartbeats and
    finishes (they wait for a free connection), on never more than 2 server connections."""
    app = _unique("lc_app")
    store = opened(f"{_base_url()}?schema={schema}&max_connections=2&application_name={app}")
    slot = store.now_ms() - 1_000
    barrier = threading.Barrier(16)
    errors: List[BaseException] = []
    done: List[int] = []
    most = [0]
    sampling = threading.Event()
    lock = threading.Lock()

    def work(i: int) -> None:
        try:
            barrier.wait(10)
            for round_ in range(5):
                job = f"j{i}"
                claim = store.claim(job, slot + round_, runner=f"r{i}", lease_ms=30_000)
                assert claim.outcome == "won" and claim.run is not None, claim
                assert store.heartbeat(job, slot + round_, claim.run.token, 30_000)
                assert store.finish(job, slot + round_, claim.run.token, "success")
            with lock:
                done.append(i)
        except BaseException as exc:  # noqa: BLE001 - reported below
            with lock:
                errors.append(exc)

    def sample() -> None:
        while not sampling.is_set():
            most[0] = max(most[0], len(_backends(app)))
            sampling.wait(0.005)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    sampling.set()
    sampler.join(5)
    assert errors == []
    assert sorted(done) == list(range(16))
    assert 1 <= most[0] <= 2, most[0]
    assert len(_backends(app)) <= 2
    assert sorted(store.jobs()) == sorted(f"j{i}" for i in range(16))


@pytest.mark.parametrize("option", ["schema", "table"])
def test_a_reserved_word_as_schema_or_table_name_is_a_config_error(option: str) -> None:
    """A name PostgreSQL reserves ("order", "select") fails with ConfigError naming it, not a syntax error."""
    host, port, dbname = SERVERS.postgres()
    store = leasecron.open_store(f"postgresql://{host}:{port}/{dbname}?{option}=order")
    try:
        with pytest.raises(leasecron.ConfigError, match="'order' is a reserved word"):
            store.now_ms()
    finally:
        store.close()


def test_durability_warnings_name_fsync_off(own_server: pg_servers.PgServer) -> None:
    """check's durability warning: a server with fsync off (the test server) is named; the CI server is quiet."""
    store = PostgresStore(own_server.dsn(), schema=f"d{uuid.uuid4().hex[:8]}")
    try:
        assert any(w.startswith("fsync is off") for w in store.durability_warnings())
    finally:
        store.close()
    host, port, dbname = SERVERS.postgres()
    if (host, port) == ("127.0.0.1", 5432):  # the system server: fsync and synchronous_commit on
        schema = f"d{uuid.uuid4().hex[:8]}"
        system = PostgresStore(f"postgresql://{host}:{port}/{dbname}", schema=schema)
        try:
            assert system.durability_warnings() == []
        finally:
            system.close()
            pg_servers.drop_schema(f"postgresql://{host}:{port}/{dbname}", schema)


@pytest.mark.processes
def test_a_child_forked_while_a_thread_holds_the_pool_lock_can_use_the_store(
    schema: str, opened: Callable[..., Any]
) -> None:
    """A fork while another thread of the parent holds the pool's lock (say, mid-getconn) leaves the
    child a pool of its own, with a fresh lock and no connection of the parent's: its store calls work."""
    store = opened(f"{_base_url()}?schema={schema}")
    _win(store, job="parent")
    pool = store._pool
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with pool._cond:
            held.set()
            release.wait(30)

    holder = threading.Thread(target=hold)
    holder.start()
    assert held.wait(10)
    try:
        pid = os.fork()
        if pid == 0:  # the child: exit 0 only if a claim works within the alarm
            signal.alarm(20)
            code = 1
            try:
                code = 0 if store.claim("child", store.now_ms() - 1_000, runner="child").won else 3
            finally:
                os._exit(code)
    finally:
        release.set()
        holder.join(10)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
    assert store.get_run("child", store.runs("child")[0].slot_ms) is not None
    assert store.claim("parent2", store.now_ms() - 1_000, runner="r").won  # the parent's pool still works


# -- 8. Pauses, requests and attempts -----------------------------------------------------------------


def _claim_while_held(store: PostgresStore, app: str, slot: int, hold: Callable[[Any], None]) -> object:
    """The outcome of a claim of ``JOB`` at ``slot`` made while another session's transaction, which
    ``hold(cursor)`` began, holds the job's lock: the claim waits for it (``app``: the store's
    application_name, to see it wait), and is decided once that transaction commits."""
    answers: List[object] = []

    def claim() -> None:
        try:
            answers.append(store.claim(JOB, slot, runner="r1").outcome)
        except Exception as exc:  # noqa: BLE001 - reported below
            answers.append(exc)

    blocker = _admin()
    thread = threading.Thread(target=claim, daemon=True)
    try:
        with blocker.cursor() as cur:
            cur.execute("BEGIN")
            hold(cur)
        thread.start()
        wait_for(lambda: any(b[1] == "Lock" for b in _backends(app)), 5, message="the claim never waited for the lock")
        assert answers == []
    finally:
        with blocker.cursor() as cur:
            cur.execute("COMMIT")
        blocker.close()
    thread.join(10)
    (answer,) = answers
    return answer


def test_a_pause_is_decided_inside_the_claim_under_the_jobs_lock(schema: str, opened: Callable[..., Any]) -> None:
    """Rule 16 is checked by the claim itself, once it holds the job's advisory lock: a pause that
    another session commits while the claim waits for that lock (written straight into
    <table>_jobs, under the lock, as pause does) makes the claim paused; nothing is written."""
    app = _unique("lc_app")
    store = opened(f"{_base_url()}?schema={schema}&application_name={app}")
    assert store.job_states() == []  # the schema exists
    slot = store.now_ms() - 1_000

    def pause(cur: Any) -> None:
        cur.execute(f"SELECT {schema}.{TABLE}_lock(%s)", (JOB,))
        cur.execute(
            f"INSERT INTO {schema}.{TABLE}_jobs (job, finished, paused_by, paused_ms) VALUES (%s, 0, 'ops', 0)",
            (JOB,),
        )

    assert _claim_while_held(store, app, slot, pause) == "paused"
    assert store.get_run(JOB, slot) is None and store.jobs() == []
    assert store.job_state(JOB).paused_by == "ops"


def _plan_nodes(node: Dict[str, Any]) -> Iterator[Dict[str, Any]]:
    yield node
    for child in node.get("Plans", []):
        yield from _plan_nodes(child)


def test_pending_requests_reads_the_partial_index_of_the_pending_requests(
    schema: str, opened: Callable[..., Any]
) -> None:
    """Among 39,000 requests that ended and 520 pending ones whose time ran out, of 500 jobs, the
    planner answers pending_requests() from the partial index of pending requests, starting at the
    store's now (an index condition on expires_ms): no scan of the table, none of what expired."""
    store = opened(f"{_base_url()}?schema={schema}")
    assert store.pending_requests() == []  # the schema exists
    now = store.now_ms()
    requests = f"{schema}.{TABLE}_requests"
    _query(
        f"INSERT INTO {requests} SELECT 'job' || (i %% 500), i, 'ops', %s - i,"
        " (ARRAY['claimed', 'skipped', 'expired', 'pending'])[1 + i %% 4]"
        " FROM generate_series(1, 52000) i WHERE i %% 4 <> 3 OR i %% 100 = 3",
        (now,),
    )
    made = [store.request_run(f"fresh{i}", by="ops") for i in range(3)]
    _query(f"ANALYZE {requests}")
    assert _query(f"SELECT count(*) FROM {requests}") == [(39000 + 520 + 3,)]
    assert store.pending_requests() == made
    sql = load_queries("postgres", schema=schema, table=TABLE)["pending_requests"]
    ((plan,),) = _query(f"EXPLAIN (FORMAT JSON) {sql}")
    nodes = list(_plan_nodes(plan[0]["Plan"]))
    on_table = [n["Node Type"] for n in nodes if n.get("Relation Name") == f"{TABLE}_requests"]
    assert on_table and "Seq Scan" not in on_table, on_table
    (index,) = [n for n in nodes if n.get("Index Name") == f"{TABLE}_requests_pending"]
    assert "expires_ms >=" in index["Index Cond"], index


def test_a_tampered_attempts_or_request_is_a_store_error_naming_the_job(
    schema: str, opened: Callable[..., Any]
) -> None:
    """Attempts or a request state that were tampered with raise StoreError naming the job, never a
    TypeError or KeyError from deep inside."""
    store = opened(f"{_base_url()}?schema={schema}")
    run = _win(store)
    made = store.request_run(JOB, by="ops")
    _query(f'UPDATE {schema}.{TABLE} SET attempts = \'[{{"number": "x"}}]\' WHERE job = %s', (JOB,))
    with pytest.raises(StoreError, match=f"{JOB}.*{run.slot_ms}"):
        store.get_run(JOB, run.slot_ms)
    _query(f"UPDATE {schema}.{TABLE}_requests SET state = 'lost' WHERE job = %s", (JOB,))
    with pytest.raises(StoreError, match=f"request of job '{JOB}'"):
        store.job_state(JOB)
    assert made.pending


def test_attempts_are_written_out_only_when_the_runs_own_fields_cannot_say_them(
    schema: str, opened: Callable[..., Any]
) -> None:
    """A won run, and the same run finished, keep attempts NULL (their one attempt is the run's own
    fields, and reads so); a takeover writes them out, as JSON numbers and text, and finish then
    ends the last one in place."""
    store = opened(f"{_base_url()}?schema={schema}")

    def stored_attempts(slot: int) -> Any:
        ((attempts,),) = _query(f"SELECT attempts FROM {schema}.{TABLE} WHERE job = %s AND slot_ms = %s", (JOB, slot))
        return attempts

    done = _win(store, ago_ms=2_000)
    assert stored_attempts(done.slot_ms) is None
    assert store.finish(JOB, done.slot_ms, done.token, "failed", "boom")
    assert stored_attempts(done.slot_ms) is None
    finished = store.get_run(JOB, done.slot_ms)
    assert finished is not None and finished.attempts == (
        Attempt(1, "r1", "schedule", done.started_ms, finished.finished_ms, "failed", "boom"),
    )
    first = _win(store, lease_ms=1)
    wait_for(lambda: store.now_ms() > first.lease_end_ms, interval=0.001)
    second = store.claim(JOB, first.slot_ms, runner="r2", reason="takeover").run
    assert second is not None and second.attempt == 2
    assert store.finish(JOB, first.slot_ms, second.token, "success")
    attempts = stored_attempts(first.slot_ms)
    assert attempts == [
        {"number": 1, "runner": "r1", "reason": "schedule", "started_ms": first.started_ms,
         "ended_ms": first.lease_end_ms, "outcome": "expired", "error": None},
        {"number": 2, "runner": "r2", "reason": "takeover", "started_ms": second.started_ms,
         "ended_ms": attempts[1]["ended_ms"], "outcome": "success", "error": None},
    ]  # fmt: skip
    no_return = {"returned_ms": None, "returned": None, "returned_error": None}
    assert [a.to_dict() for a in store.runs(JOB)[0].attempts] == [{**a, **no_return} for a in attempts]
    # rule 26: a return recorded on the finished run's one attempt writes it out, with the return
    assert store.record_return(JOB, done.slot_ms, 1, "r1", done.started_ms + 7, "success")
    assert stored_attempts(done.slot_ms) == [
        {"number": 1, "runner": "r1", "reason": "schedule", "started_ms": done.started_ms,
         "ended_ms": finished.finished_ms, "outcome": "failed", "error": "boom",
         "returned_ms": done.started_ms + 7, "returned": "success", "returned_error": None},
    ]  # fmt: skip


# -- 9. Stored schedules --------------------------------------------------------------------------


def test_concurrent_changes_get_every_version_and_cursor_once_and_a_reader_following_the_cursor_misses_none(
    schema: str, opened: Callable[..., Any]
) -> None:
    """Eight threads each change one shared job 25 times and 25 jobs of their own once, at once,
    while a reader asks for the changes from the cursor it last got: the shared job's changes get
    versions 1-200, each once; the cursor ends at 400, the count of changes; and the reader saw
    every job changed once (a change whose cursor it had passed before the change was visible
    would never show again)."""
    store = opened(f"{_base_url()}?schema={schema}&max_connections=10")
    assert store.schedule_changes(0) == ScheduleChanges(0)  # the schema exists
    threads, changes = 8, 25
    versions: List[int] = []
    seen: set = set()
    done = threading.Event()
    errors: List[BaseException] = []
    barrier = threading.Barrier(threads + 1)

    def change(i: int) -> None:
        try:
            barrier.wait(30)
            for k in range(changes):
                versions.append(store.set_schedule("shared", by=f"t{i}", schedule=k + 1).version)
                assert store.set_schedule(f"own-{i}-{k}", by=f"t{i}", schedule=60).version == 1
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    def follow() -> None:
        cursor = 0
        barrier.wait(30)
        while True:
            last = done.is_set()  # one more read once every change returned
            answer = store.schedule_changes(cursor)
            assert answer.cursor >= cursor
            seen.update(record.job for record in answer.changes)
            cursor = answer.cursor
            if last:
                return

    workers = [threading.Thread(target=change, args=(i,), daemon=True) for i in range(threads)]
    reader = threading.Thread(target=follow, daemon=True)
    for thread in [*workers, reader]:
        thread.start()
    for thread in workers:
        thread.join(60)
    done.set()
    reader.join(30)
    assert not errors, errors
    assert sorted(versions) == list(range(1, threads * changes + 1))
    assert store.schedule_changes(0).cursor == 2 * threads * changes
    assert store.stored_schedule("shared").version == threads * changes
    assert {f"own-{i}-{k}" for i in range(threads) for k in range(changes)} <= seen


def test_a_schedule_change_is_decided_against_a_claim_under_the_jobs_lock(
    schema: str, opened: Callable[..., Any]
) -> None:
    """Rule 23 is checked by the claim once it holds the job's advisory lock, which set_schedule
    holds until it commits: a claim made while another session's change of the schedule is not
    yet committed waits for it, and is then answered stale; nothing is written."""
    app = _unique("lc_app")
    store = opened(f"{_base_url()}?schema={schema}&application_name={app}")
    assert store.stored_schedule(JOB) is None  # the schema exists
    slot = store.now_ms() - 1_000

    def change(cur: Any) -> None:
        cur.execute(f"SELECT * FROM {schema}.{TABLE}_set_schedule_v4(%s, 'ops', 'override', '30', NULL, NULL,"
                    " '{}', '{}')", (JOB,))  # fmt: skip
        assert cur.fetchone()[0] == 1

    assert _claim_while_held(store, app, slot, change) == "stale"
    assert store.get_run(JOB, slot) is None and store.jobs() == []
    assert store.stored_schedule(JOB).version == 1


def test_schedule_changes_and_poll_read_the_index_of_the_cursor(schema: str, opened: Callable[..., Any]) -> None:
    """Among 20,000 stored schedules, schedule_changes and poll read the three changed after the
    cursor asked about as a range of the cursor's index, and the newest cursor from its end: no
    scan of the table."""
    store = opened(f"{_base_url()}?schema={schema}")
    schedules = f"{schema}.{TABLE}_schedules"
    assert store.schedule_changes(0) == ScheduleChanges(0)  # the schema exists
    _query(f"INSERT INTO {schedules} SELECT 'j' || i, i, 1, 'override', '30', NULL, NULL, '{{}}', '{{}}', 'ops', 0"
           " FROM generate_series(1, 20000) i")  # fmt: skip
    _query(f"ANALYZE {schedules}")
    answer = store.schedule_changes(19_997)
    assert answer.cursor == 20_000 and [r.job for r in answer.changes] == ["j19998", "j19999", "j20000"]
    assert store.poll(19_997).schedules == answer
    queries = load_queries("postgres", schema=schema, table=TABLE)
    for name in ("schedule_changes", "poll"):
        ((plan,),) = _query(f"EXPLAIN (FORMAT JSON) {queries[name]}", {"since": 19_997})
        nodes = list(_plan_nodes(plan[0]["Plan"]))
        on_table = [n for n in nodes if n.get("Relation Name") == f"{TABLE}_schedules"]
        assert len(on_table) == 2 and all(n.get("Index Name") == f"{TABLE}_schedules_cursor" for n in on_table), name
        assert sorted(n["Index Cond"] for n in on_table) == ["(cursor > '19997'::bigint)", "(cursor IS NOT NULL)"]


def test_kwargs_and_options_read_back_as_the_json_they_were_written(schema: str, opened: Callable[..., Any]) -> None:
    """kwargs are kept as the JSON text written (json, not jsonb): a float that jsonb would turn
    into an integer (1e300, 1e16), -0.0, integers beyond 64 bits, escaped NUL and lone surrogates
    read back as the same values of the same types, from every read."""
    store = opened(f"{_base_url()}?schema={schema}")
    kwargs = {"big": 1e300, "f": 1e16, "neg": -0.0, "i": 2**70, "nul": "a\x00b", "s": "\ud800", "deep": [{"x": [0.1]}]}
    record = store.set_schedule("report", by="app", schedule=60, task="send", kwargs=kwargs)
    text = json.dumps(kwargs, sort_keys=True)
    for read in (record, store.stored_schedule("report"), store.schedule_changes(0).changes[0],
                 store.poll(0).schedules.changes[0]):  # fmt: skip
        assert read is not None and json.dumps(read.kwargs, sort_keys=True) == text


def test_a_tampered_stored_schedule_is_a_store_error_naming_the_job(schema: str, opened: Callable[..., Any]) -> None:
    """A stored schedule whose source or version was tampered with raises StoreError naming the
    job, from every read, never a TypeError or KeyError from deep inside."""
    store = opened(f"{_base_url()}?schema={schema}")
    store.set_schedule(JOB, by="ops", schedule=30)
    _query(f"UPDATE {schema}.{TABLE}_schedules SET source = 'lost' WHERE job = %s", (JOB,))
    for read in (lambda: store.stored_schedule(JOB), lambda: store.schedule_changes(0), lambda: store.poll(0)):
        with pytest.raises(StoreError, match=f"schedule of job '{JOB}'"):
            read()
