"""SQLiteStore specifics: the file, the schema, the URL and the write lock.

The lease rules themselves are proved for SQLite by the shared conformance
suite (``test_contract.py``, ``test_races.py``); this module checks what only
the embedded store has.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple
from urllib.parse import quote

import pytest

import leasecron
from leasecron import SQLiteStore
from leasecron.controls import JobState
from leasecron.runs import Attempt
from leasecron.stored import ScheduleChanges
from leasecron.stores.migrations import migrations
from leasecron.stores.templates import render, without_comments
from tests.helpers import race_in_processes

JOB = "job"


def _url(path: Path, **options: str) -> str:
    query = "&".join(f"{k}={quote(v)}" for k, v in options.items())
    return f"sqlite:///{path}" + (f"?{query}" if query else "")


def _win(store: leasecron.Store, job: str = JOB, ago_ms: int = 1_000) -> leasecron.Run:
    slot = store.now_ms() - ago_ms
    result = store.claim(job, slot, runner="r1")
    assert result.won and result.run is not None, result
    return result.run


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "leasecron.db"


def test_database_uses_wal_journal(db: Path) -> None:
    """The store puts its database file in WAL mode."""
    with leasecron.open_store(_url(db)) as store:
        _win(store)
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0].lower() == "wal"
    finally:
        conn.close()


def test_schema_is_stamped_with_version_4(db: Path) -> None:
    """The schema is stamped with version 4 in <table>_meta."""
    with leasecron.open_store(_url(db, table="myruns")) as store:
        _win(store)
    conn = sqlite3.connect(db)
    try:
        rows = conn.execute("SELECT key, value FROM myruns_meta").fetchall()
    finally:
        conn.close()
    assert rows == [("schema_version", "4")]


@pytest.mark.parametrize("query", ["running"])
def test_queries_of_running_runs_search_the_running_index(db: Path, query: str) -> None:
    """The queries a claim makes about running runs search the partial index of running rows,
    never the job's whole history (a claim's cost must not grow with history_size)."""
    with leasecron.open_store(_url(db, table="myruns")) as store:
        _win(store)
        assert isinstance(store, SQLiteStore)
        sql = store._q[query]
    params = {"job": JOB, "before_ms": 1, "now_ms": 1, "why": "x"}
    assert "USING INDEX myruns_running" in _plan(db, sql, params)


def _plan(db: Path, sql: str, params: Dict[str, Any]) -> str:
    conn = sqlite3.connect(db)
    try:
        return " ".join(str(row[-1]) for row in conn.execute("EXPLAIN QUERY PLAN " + sql, params))
    finally:
        conn.close()


def test_pending_requests_search_the_index_of_pending_requests(db: Path) -> None:
    """pending_requests() reads a range of the partial index of the pending requests that are not
    expired: its cost grows with them, never with the runs, the jobs or the ended requests."""
    with leasecron.open_store(_url(db, table="myruns")) as store:
        store.request_run(JOB, by="ops")
        assert isinstance(store, SQLiteStore)
        sql = store._q["pending"]
    plan = _plan(db, sql, {"now_ms": 1})
    assert "USING INDEX myruns_pending (expires_ms>?)" in plan, plan


def test_schedule_reads_search_an_index(db: Path) -> None:
    """A claim reads its job's schedule version by the primary key, in the statement it made
    before (rule 23); schedule_changes() reads a range of the index of cursors, and a save finds
    the newest cursor at that index's end: none of them reads every job's record."""
    with leasecron.open_store(_url(db, table="myruns")) as store:
        store.set_schedule(JOB, by="ops", schedule=30)
        assert isinstance(store, SQLiteStore)
        queries = store._q
    plan = _plan(db, queries["new_slot"], {"job": JOB, "slot_ms": 1})
    assert "SEARCH myruns_schedules USING PRIMARY KEY (job=?)" in plan, plan
    plan = _plan(db, queries["schedule_changes"], {"since": 0})
    assert "USING INDEX myruns_schedule_changes (cursor>?)" in plan and "TEMP B-TREE" not in plan, plan
    saved = dict.fromkeys(["job", "version", "source", "schedule", "tz", "task", "kwargs", "options", "updated_by"])
    plan = _plan(db, queries["save_schedule"], dict(saved, updated_ms=1))
    assert "myruns_schedules USING COVERING INDEX myruns_schedule_changes" in plan and "SCAN" not in plan, plan


@pytest.mark.parametrize("create", [True, False])
def test_newer_schema_version_raises_store_error(db: Path, create: bool) -> None:
    """A table stamped with a newer schema version makes the store raise StoreError saying to
    upgrade, whether it creates what is missing or not."""
    with leasecron.open_store(_url(db)) as store:
        run = _win(store)
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("UPDATE leasecron_runs_meta SET value = '5' WHERE key = 'schema_version'")
    conn.close()

    with SQLiteStore.from_url(_url(db), create=create) as store:
        with pytest.raises(leasecron.StoreError, match="upgrad") as info:
            store.claim(JOB, store.now_ms() - 1_000, runner="r2")
        assert "5" in str(info.value)
        with pytest.raises(leasecron.StoreError, match="upgrad"):
            store.get_run(JOB, run.slot_ms)
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("SELECT COUNT(*) FROM leasecron_runs").fetchone()[0] == 1
        assert conn.execute("SELECT value FROM leasecron_runs_meta").fetchone()[0] == "5"
    finally:
        conn.close()


def test_store_holds_plain_text_and_integers(db: Path) -> None:
    """Every stored value is plain text, an integer or NULL: nothing is pickled."""
    with leasecron.open_store(_url(db)) as store:
        run = _win(store)
        assert store.finish(JOB, run.slot_ms, run.token, "failed", error="boom")
    conn = sqlite3.connect(db)
    try:
        columns = [row[1] for row in conn.execute("PRAGMA table_info(leasecron_runs)")]
        types = conn.execute(
            "SELECT " + ", ".join(f"typeof({c})" for c in columns) + " FROM leasecron_runs"
        ).fetchone()
    finally:
        conn.close()
    assert set(types) <= {"text", "integer", "null"}, dict(zip(columns, types))


def test_two_tables_in_one_file_are_independent(db: Path) -> None:
    """Stores on two tables of one file keep separate runs."""
    a = leasecron.open_store(_url(db, table="app_a"))
    b = leasecron.open_store(_url(db, table="app_b"))
    try:
        slot = a.now_ms() - 1_000
        run_a = a.claim(JOB, slot, runner="a", lease_ms=30_000).run
        claim_b = b.claim(JOB, slot, runner="b", lease_ms=30_000)
        assert claim_b.won and claim_b.run is not None and run_a is not None
        assert claim_b.run.token != run_a.token
        assert a.finish(JOB, slot, run_a.token, "success")
        assert b.finish(JOB, slot, run_a.token, "success") is False
        assert b.get_run(JOB, slot) == claim_b.run
        b.claim("only-b", slot, runner="b")
        assert a.jobs() == [JOB]
        assert b.jobs() == [JOB, "only-b"]
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("table", ["x; drop", "1abc", "a-b", "", "x" * 49, "runs table", "ü"])
def test_bad_table_name_raises_config_error(db: Path, table: str) -> None:
    """A table name that is not a plain identifier raises ConfigError, in the URL or the constructor."""
    with pytest.raises(leasecron.ConfigError, match="table"):
        leasecron.open_store(_url(db, table=table))
    with pytest.raises(leasecron.ConfigError, match="table"):
        SQLiteStore(str(db), table=table)
    assert not db.exists()


def test_relative_url_opens_a_file_relative_to_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """sqlite:///relative.db opens relative.db in the current directory."""
    monkeypatch.chdir(tmp_path)
    with leasecron.open_store("sqlite:///relative.db") as store:
        assert isinstance(store, SQLiteStore)
        run = _win(store)
    assert (tmp_path / "relative.db").is_file()
    with leasecron.open_store(f"sqlite:///{tmp_path}/relative.db") as same:  # the same file, by absolute path
        assert same.get_run(JOB, run.slot_ms) == run


def test_absolute_url_opens_the_absolute_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """sqlite:////abs/path.db opens /abs/path.db whatever the current directory."""
    target = tmp_path / "abs" / "path.db"
    target.parent.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    url = "sqlite:////" + str(target).lstrip("/")
    assert url.startswith("sqlite:////")
    with leasecron.open_store(url) as store:
        run = _win(store)
    assert target.is_file()
    assert list(elsewhere.iterdir()) == []
    with SQLiteStore(str(target)) as same:
        assert same.get_run(JOB, run.slot_ms) == run


def test_url_options_are_applied(db: Path) -> None:
    """The URL's table and busy_timeout_ms options are used."""
    store = leasecron.open_store(_url(db, table="custom", busy_timeout_ms="250"))
    try:
        assert isinstance(store, SQLiteStore)
        assert store.table == "custom" and store.busy_timeout_ms == 250
        _win(store)
    finally:
        store.close()
    conn = sqlite3.connect(db)
    try:
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    finally:
        conn.close()
    assert {"custom", "custom_meta"} <= names


@pytest.mark.parametrize(
    "suffix",
    ["?tabel=x", "?busy_timeout=5", "?table=x&mode=ro", "?busy_timeout_ms=soon"],
)
def test_unknown_or_bad_url_option_raises_config_error(db: Path, suffix: str) -> None:
    """An unknown option (or a busy_timeout_ms that is not an integer) in a SQLite URL raises ConfigError."""
    with pytest.raises(leasecron.ConfigError):
        leasecron.open_store(f"sqlite:///{db}{suffix}")


@pytest.mark.parametrize("url", ["sqlite://", "sqlite:///", "sqlite://host/x.db"])
def test_url_without_a_file_raises_config_error(url: str) -> None:
    """A SQLite URL that names no file, or names a host, raises ConfigError."""
    with pytest.raises(leasecron.ConfigError):
        leasecron.open_store(url)


def test_a_password_in_the_url_is_masked_in_its_errors(tmp_path: Path) -> None:
    """A SQLite URL has no password, but a mistyped one may: sqlite://user:pw@host/x.db (a host
    part) and ?password=... (an unknown option) show the URL with the password masked."""
    path = tmp_path / "x.db"
    for url in (f"sqlite://user:s3cret-pw@localhost/{path}", f"sqlite:///{path}?password=s3cret-pw",
                f"sqlite:///{path}?busy_timeout_ms=soon&password=s3cret-pw"):  # fmt: skip
        with pytest.raises(leasecron.ConfigError) as info:
            leasecron.open_store(url)
        assert "s3cret" not in str(info.value) and "***" in str(info.value), info.value
    assert not list(tmp_path.iterdir())


# -- create=False: the store creates nothing ---------------------------------------------------


def test_without_create_a_missing_file_is_an_error_until_create_is_switched_on(tmp_path: Path) -> None:
    """SQLiteStore(create=False): every operation on a missing file raises StoreError naming it
    and leaves no file (no -wal, no -shm); `create` switched on, the next operation creates the store."""
    path = tmp_path / "late.db"
    store = SQLiteStore(str(path), create=False)
    try:
        for operation in (store.jobs, lambda: store.runs(JOB), lambda: store.claim(JOB, 0, runner="r")):
            with pytest.raises(leasecron.StoreError, match=f"{path}' does not exist"):
                operation()
            assert list(tmp_path.iterdir()) == []
        store.create = True
        _win(store)
        assert store.jobs() == [JOB]
    finally:
        store.close()


def test_without_create_a_file_without_the_table_is_left_as_it_was(tmp_path: Path) -> None:
    """create=False on a file that lacks the runs table (or its _meta): StoreError naming the
    table; the file keeps its bytes and mtime, and is not switched to WAL."""
    path = tmp_path / "other.db"
    conn = sqlite3.connect(str(path))
    conn.execute("CREATE TABLE runs_elsewhere (x)")
    conn.execute("CREATE TABLE app_runs (x)")  # a table of that name, but no app_runs_meta
    conn.commit()
    conn.close()
    before = (path.read_bytes(), path.stat().st_mtime_ns)
    for table, missing in (("leasecron_runs", "'leasecron_runs'"), ("app_runs", "'app_runs_meta'")):
        with SQLiteStore.from_url(_url(path, table=table), create=False) as store:
            with pytest.raises(leasecron.StoreError, match=f"{missing} does not exist in"):
                store.jobs()
    assert (path.read_bytes(), path.stat().st_mtime_ns) == before
    assert list(tmp_path.iterdir()) == [path]


def test_without_create_a_store_that_exists_is_read_and_written(db: Path) -> None:
    """create=False reads (and writes) a store another store created: a WAL file, closed by its
    writer; once the reader closes, the directory is as before (no -wal or -shm left)."""
    with leasecron.open_store(_url(db)) as writer:
        run = _win(writer)
    listed = sorted(db.parent.iterdir())
    with SQLiteStore.from_url(_url(db), create=False) as reader:
        assert reader.jobs() == [JOB]
        assert [r.slot_ms for r in reader.runs(JOB)] == [run.slot_ms]
        assert reader.finish(JOB, run.slot_ms, run.token, "success")
    assert sorted(db.parent.iterdir()) == listed


def test_closed_store_raises_store_error(db: Path) -> None:
    """A closed store refuses further operations with StoreError; the data stays in the file."""
    with leasecron.open_store(_url(db)) as store:
        run = _win(store)
    with pytest.raises(leasecron.StoreError):
        store.claim(JOB, run.slot_ms, runner="r2")
    with pytest.raises(leasecron.StoreError):
        store.get_run(JOB, run.slot_ms)
    with leasecron.open_store(_url(db)) as again:
        assert again.get_run(JOB, run.slot_ms) == run


def test_driver_errors_are_raised_as_store_error(db: Path) -> None:
    """A SQLite failure inside an operation is raised as StoreError, from the driver's own exception."""
    store = leasecron.open_store(_url(db))
    try:
        run = _win(store)
        conn = sqlite3.connect(db, isolation_level=None)
        conn.execute("DROP TABLE leasecron_runs")
        conn.close()
        calls = [
            lambda: store.claim(JOB, run.slot_ms, runner="r2"),
            lambda: store.heartbeat(JOB, run.slot_ms, run.token, 1_000),
            lambda: store.finish(JOB, run.slot_ms, run.token, "success"),
            lambda: store.release(JOB, run.slot_ms, run.token),
            lambda: store.get_run(JOB, run.slot_ms),
            lambda: store.unfinished(JOB),
            lambda: store.runs(JOB),
            lambda: store.jobs(),
        ]
        for call in calls:
            with pytest.raises(leasecron.StoreError) as info:
                call()
            assert not isinstance(info.value, leasecron.StoreUnavailable)
            assert isinstance(info.value.__cause__, sqlite3.Error)
    finally:
        store.close()


# -- the write lock ---------------------------------------------------------------------------------


class _Locker:
    """Another connection (as another process would) holding the file's write lock."""

    def __init__(self, path: Path) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.conn.execute("BEGIN IMMEDIATE")

    def release(self) -> None:
        self.conn.execute("ROLLBACK")
        self.conn.close()


def test_busy_write_lock_raises_store_unavailable(db: Path) -> None:
    """A store whose busy timeout runs out while another connection holds the write lock raises StoreUnavailable."""
    store = leasecron.open_store(_url(db, busy_timeout_ms="100"))
    try:
        slot = store.now_ms() - 1_000
        assert store.get_run(JOB, slot) is None  # schema created before the lock is taken
        locker = _Locker(db)
        try:
            started = time.monotonic()
            with pytest.raises(leasecron.StoreUnavailable) as info:
                store.claim(JOB, slot, runner="r1")
            assert time.monotonic() - started < 5
            assert isinstance(info.value, leasecron.StoreError)
            assert isinstance(info.value.__cause__, sqlite3.OperationalError)
            # Readers are not blocked by the writer (WAL).
            assert store.get_run(JOB, slot) is None
        finally:
            locker.release()
        assert store.get_run(JOB, slot) is None  # the failed claim stored nothing
        assert store.claim(JOB, slot, runner="r1").won
    finally:
        store.close()


def test_claim_waits_for_the_write_lock_within_busy_timeout(db: Path) -> None:
    """With a longer busy timeout, a claim waits while another connection holds the write lock, then succeeds."""
    store = leasecron.open_store(_url(db, busy_timeout_ms="10000"))
    try:
        slot = store.now_ms() - 1_000
        assert store.get_run(JOB, slot) is None
        locker = _Locker(db)
        done = threading.Event()
        outcome: List[Any] = []

        def claim() -> None:
            try:
                outcome.append(store.claim(JOB, slot, runner="waiter"))
            except BaseException as exc:
                outcome.append(exc)
            outcome.append(time.monotonic())
            done.set()

        thread = threading.Thread(target=claim, daemon=True)
        thread.start()
        held = done.wait(0.3)  # the lock is held for 0.3 s: the claim must not finish meanwhile
        released_at = time.monotonic()
        locker.release()
        assert not held, outcome
        assert done.wait(10)
        thread.join(timeout=10)
        result, finished_at = outcome
        assert isinstance(result, leasecron.Claim), result
        assert result.won and result.run is not None and result.run.runner == "waiter"
        assert finished_at >= released_at
        assert store.get_run(JOB, slot) == result.run
    finally:
        store.close()


def _claims_behind_a_held_lock(db: Path, store: leasecron.Store, slot: Callable[[], int]) -> List[float]:
    """Four threads each claim ``slot()`` on ``store`` while another connection holds the write lock:
    how long each waited before it gave up (every one must give up)."""
    locker = _Locker(db)
    waits: List[Any] = []

    def claim() -> None:
        started = time.monotonic()
        try:
            store.claim(JOB, slot(), runner=threading.current_thread().name)
            waits.append("claimed while the lock was held")
        except leasecron.StoreUnavailable:
            waits.append(time.monotonic() - started)

    try:
        threads = [threading.Thread(target=claim, name=f"t{i}") for i in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=10)
    finally:
        locker.release()
    assert len(waits) == 4 and all(isinstance(w, float) for w in waits), waits
    return waits


def test_threads_waiting_for_the_write_lock_each_give_up_within_the_busy_timeout(db: Path) -> None:
    """The threads of one process queue for the write lock, but none waits past its own busy timeout."""
    store = leasecron.open_store(_url(db, busy_timeout_ms="500"))
    try:
        slot = store.now_ms() - 1_000
        assert store.get_run(JOB, slot) is None
        waits = _claims_behind_a_held_lock(db, store, lambda: slot)
        # Four waits of 0.5 s one after the other would end near 2 s.
        assert all(0.45 <= w < 1.5 for w in waits), waits
        assert store.claim(JOB, slot, runner="after").won
    finally:
        store.close()


def test_a_fresh_store_whose_schema_step_meets_a_held_lock_gives_up_within_the_busy_timeout(db: Path) -> None:
    """A store's first operations check the schema inside a write transaction. While another
    process holds the write lock, every thread's first call gives up within its own busy
    timeout: the thread doing the schema step holds no lock the others need (before, they
    queued behind it on the pool's lock, one busy timeout after the other)."""
    leasecron.open_store(_url(db)).close()  # the file and its schema exist
    store = leasecron.open_store(_url(db, busy_timeout_ms="400"))  # a new process's first use
    try:
        waits = _claims_behind_a_held_lock(db, store, lambda: store.now_ms() - 1_000)  # each thread's first call
        # Four waits of 0.4 s one after the other would end near 1.6 s.
        assert all(w < 1.0 for w in waits), waits
        assert store.claim(JOB, store.now_ms() - 1_000, runner="after").won
    finally:
        store.close()


def test_threads_that_come_and_go_leave_no_connection_open(db: Path) -> None:
    """Each run has threads of its own: a store must not keep a connection (and its files) per thread ever seen."""
    fd_dir = Path("/proc/self/fd")
    if not fd_dir.is_dir():
        pytest.skip("needs /proc/self/fd")
    store = leasecron.open_store(_url(db))
    try:
        slot = store.now_ms() - 1_000
        store.claim(JOB, slot, runner="r0")
        before = len(list(fd_dir.iterdir()))

        def work(i: int) -> None:
            store.runs(JOB)
            assert store.claim(f"{JOB}-{i}", slot, runner=f"r{i}").won

        for i in range(200):
            thread = threading.Thread(target=work, args=(i,))
            thread.start()
            thread.join()
        after = len(list(fd_dir.iterdir()))
        assert after - before < 20, (before, after)
        assert len(store.jobs()) == 201
    finally:
        store.close()


# -- several processes on a fresh file ----------------------------------------------------------------


def open_and_claim(url: str, slot_ms: int, runner: str, barrier: Any, results: Any) -> None:
    """Child process: open a store on a file nobody has opened yet, at the same moment as others, and claim."""
    try:
        barrier.wait(timeout=20)
        with leasecron.open_store(url) as store:
            result = store.claim(JOB, slot_ms, runner=runner, lease_ms=30_000)
            results.put((runner, result.outcome, None))
    except BaseException as exc:
        results.put((runner, "error", repr(exc)))


@pytest.mark.processes
def test_processes_opening_a_fresh_file_at_once_agree(tmp_path: Path) -> None:
    """4 processes opening a new database file at the same moment all create the schema safely; one claim wins."""
    url = _url(tmp_path / "fresh.db")
    slot = int(time.time() * 1000) - 1_000
    collected = race_in_processes(open_and_claim, [(url, slot, f"p{i}") for i in range(4)])
    assert sorted(c[1] for c in collected) == ["running", "running", "running", "won"], collected
    with leasecron.open_store(url) as store:
        run: Optional[leasecron.Run] = store.get_run(JOB, slot)
        assert run is not None and run.runner == next(c[0] for c in collected if c[1] == "won")


# -- a store that leasecron 0.1 or 0.2 created ---------------------------------------------------


def _schema_of(version: int) -> str:
    """What leasecron 0.<version> created in a file: migrations 1 to ``version`` are exactly its
    schema (a released migration is never edited: test_scripts checks its sha256), stamped so."""
    created = "".join(render(without_comments(m.text), table="old_runs") for m in migrations("sqlite")[:version])
    stamped = f"""
CREATE TABLE IF NOT EXISTS old_runs_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
INSERT INTO old_runs_meta (key, value) VALUES ('schema_version', '{version}');
"""
    return created + stamped


def _insert(conn: sqlite3.Connection, table: str, row: Dict[str, Any]) -> None:
    names, marks = ", ".join(row), ", ".join("?" * len(row))
    conn.execute(f"INSERT INTO {table} ({names}) VALUES ({marks})", list(row.values()))


def _store_of_0_1(db: Path, now: int, version: int = 1) -> Dict[str, Dict[str, Any]]:
    """A file with 0.1's schema (or a later one's: ``version``) and runs written the 0.1 way (no
    attempts, as 0.2 writes a run of one attempt too); the rows by name."""
    base = {"released": 0, "handovers": 0, "error": None, "finished_ms": None, "reason": "schedule"}
    rows = {
        "success": dict(base, job=JOB, slot_ms=now - 40_000, attempt=2, token="t1", runner="r2", status="success",
                        lease_end_ms=now - 30_000, handovers=1, reason="takeover", started_ms=now - 39_000,
                        finished_ms=now - 38_000),
        "failed": dict(base, job=JOB, slot_ms=now - 30_000, attempt=1, token="t2", runner="r1", status="failed",
                       lease_end_ms=now - 20_000, error="boom", started_ms=now - 29_000, finished_ms=now - 28_000),
        "interrupted": dict(base, job=JOB, slot_ms=now - 20_000, attempt=1, token="t3", runner="r1",
                            status="interrupted", lease_end_ms=now - 19_000, error="superseded",
                            started_ms=now - 20_000, finished_ms=now - 10_000),
        "expired": dict(base, job=JOB, slot_ms=now - 10_000, attempt=1, token="t4", runner="r1", status="running",
                        lease_end_ms=now - 5_000, started_ms=now - 10_000),
        "live": dict(base, job="other", slot_ms=now - 10_000, attempt=3, token="t5", runner="r3", status="running",
                     lease_end_ms=now + 60_000, handovers=2, reason="takeover", started_ms=now - 9_000),
        "released": dict(base, job="handed", slot_ms=now - 10_000, attempt=1, token="t6", runner="r1",
                         status="running", lease_end_ms=now - 8_000, released=1, handovers=1,
                         started_ms=now - 10_000),
    }  # fmt: skip
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.executescript(_schema_of(version))
        for row in rows.values():
            _insert(conn, "old_runs", row)
    finally:
        conn.close()
    return rows


def _one_attempt(row: Dict[str, Any]) -> Tuple[Attempt, ...]:
    """The attempt a run stored without attempts reads as: made of the run's own fields."""
    outcome = row["status"]
    ended = row["finished_ms"]
    return (Attempt(row["attempt"], row["runner"], row["reason"], row["started_ms"], ended, outcome, row["error"]),)


def test_a_store_of_0_1_is_read_without_create_and_holds_no_controls(db: Path) -> None:
    """A store opened with create=False on a 0.1 file (not migrated) reads its runs, each as one
    attempt made of its fields, and no pause and no request; the file stays at version 1."""
    now = int(time.time() * 1000)
    rows = _store_of_0_1(db, now)
    with SQLiteStore.from_url(_url(db, table="old_runs"), create=False) as reader:
        for row in rows.values():
            run = reader.get_run(row["job"], row["slot_ms"])
            assert run is not None and run.attempts == _one_attempt(row)
        assert reader.jobs() == sorted({JOB, "other", "handed"})
        assert reader.job_state(JOB) == JobState(JOB)
        assert reader.job_states() == [] and reader.pending_requests() == []
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("SELECT value FROM old_runs_meta").fetchone()[0] == "1"
    finally:
        conn.close()


def test_a_store_of_0_1_is_migrated_and_its_runs_go_on(db: Path) -> None:
    """A 0.2 store migrates a 0.1 file to version 2 on first use: the 0.1 runs read as one attempt
    each; a takeover, a finish and a hand-over of them record their attempts; pause, resume and
    manual runs work."""
    now = int(time.time() * 1000)
    rows = _store_of_0_1(db, now)
    with SQLiteStore.from_url(_url(db, table="old_runs")) as store:
        for row in rows.values():
            assert stored_run(store, row).attempts == _one_attempt(row)
        conn = sqlite3.connect(db)
        try:
            assert conn.execute("SELECT value FROM old_runs_meta").fetchone()[0] == "4"
        finally:
            conn.close()

        expired, live, released = rows["expired"], rows["live"], rows["released"]
        taken = store.claim(JOB, expired["slot_ms"], runner="backup", reason="takeover").run
        assert taken is not None and taken.attempt == 2
        assert [(a.number, a.outcome, a.ended_ms) for a in taken.attempts] == [
            (1, "expired", expired["lease_end_ms"]),
            (2, "running", None),
        ]
        assert store.finish("other", live["slot_ms"], live["token"], "success")
        done = stored_run(store, live)
        assert [(a.number, a.outcome, a.ended_ms) for a in done.attempts] == [(3, "success", done.finished_ms)]
        handed = store.claim("handed", released["slot_ms"], runner="backup", reason="takeover").run
        assert handed is not None
        assert [(a.number, a.outcome, a.ended_ms) for a in handed.attempts] == [
            (1, "handed_over", released["lease_end_ms"]),
            (2, "running", None),
        ]

        assert store.finish(JOB, taken.slot_ms, taken.token, "success")
        store.pause(JOB, by="ops")
        assert store.claim(JOB, now - 1_000, runner="r1").outcome == "paused"
        made = store.request_run(JOB, by="ops")
        assert store.pending_requests() == [made]
        manual = store.claim(JOB, made.slot_ms, runner="r1", reason="manual")
        assert manual.won and manual.run is not None and manual.run.reason == "manual"
        store.resume(JOB, by="ops")
        assert store.finish(JOB, made.slot_ms, manual.run.token, "success")
        assert store.claim(JOB, store.now_ms() - 500, runner="r1").won


def _store_of_0_2(db: Path, now: int) -> Dict[str, Dict[str, Any]]:
    """A file with 0.2's schema holding what 0.2 writes: the runs of :func:`_store_of_0_1`, a
    manual run of two attempts (JSON), a pause and a pending request; the runs by name."""
    rows = _store_of_0_1(db, now, version=2)
    attempts = [
        {"number": 1, "runner": "r1", "reason": "manual", "started_ms": now - 9_000, "ended_ms": now - 8_000,
         "outcome": "expired", "error": None},
        {"number": 2, "runner": "r2", "reason": "takeover", "started_ms": now - 8_000, "ended_ms": now - 7_000,
         "outcome": "success", "error": None},
    ]  # fmt: skip
    rows["manual"] = dict(
        job="manual", slot_ms=now - 9_000, attempt=2, token="t7", runner="r2", status="success",
        lease_end_ms=now - 7_000, released=0, handovers=0, reason="takeover", error=None, started_ms=now - 8_000,
        finished_ms=now - 7_000, attempts=json.dumps(attempts), manual=1,
    )  # fmt: skip
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        _insert(conn, "old_runs", rows["manual"])
        _insert(conn, "old_runs_pauses", dict(job="paused", paused_by="ops", paused_ms=now - 5_000, note="why"))
        _insert(conn, "old_runs_requests", dict(job="asked", slot_ms=now - 1_000, requested_by="ops",
                                                expires_ms=now + 60_000, state="pending"))  # fmt: skip
    finally:
        conn.close()
    return rows


def _stamped(db: Path) -> str:
    conn = sqlite3.connect(db)
    try:
        return str(conn.execute("SELECT value FROM old_runs_meta").fetchone()[0])
    finally:
        conn.close()


def test_a_store_of_0_2_is_read_without_create_and_holds_no_stored_schedule(db: Path) -> None:
    """A store opened with create=False on a 0.2 file (not migrated) reads its runs, pause and
    request, and no stored schedule: schedule_changes and poll answer none at the cursor asked
    about; the file stays at version 2."""
    now = int(time.time() * 1000)
    rows = _store_of_0_2(db, now)
    with SQLiteStore.from_url(_url(db, table="old_runs"), create=False) as reader:
        for row in rows.values():
            assert stored_run(reader, row).slot_ms == row["slot_ms"]
        assert reader.job_state("paused").paused
        assert reader.stored_schedule(JOB) is None
        assert reader.schedule_changes(5) == ScheduleChanges(5, ())
        polled = reader.poll(0)
        assert [r.job for r in polled.requests] == ["asked"] and polled.schedules == ScheduleChanges(0, ())
    assert _stamped(db) == "2"


def test_a_store_of_0_2_is_migrated_in_place_and_schedules_can_be_stored(db: Path) -> None:
    """This release migrates a 0.2 file to version 4 on first use (stored schedules, announcements):
    its runs (attempts and manual ones too), pause and request are as they were; set_schedule
    stores version 1, a scheduled claim from version 0 is stale (rule 23) and from version 1 wins,
    and a run of 0.2 goes on."""
    now = int(time.time() * 1000)
    rows = _store_of_0_2(db, now)
    with SQLiteStore.from_url(_url(db, table="old_runs")) as store:
        manual = stored_run(store, rows["manual"])
        assert _stamped(db) == "4"
        assert [(a.number, a.reason, a.outcome) for a in manual.attempts] == [
            (1, "manual", "expired"),
            (2, "takeover", "success"),
        ]
        for name, row in rows.items():
            if name != "manual":
                assert stored_run(store, row).attempts == _one_attempt(row)
        assert store.job_state("paused").paused_by == "ops"
        assert [r.job for r in store.pending_requests()] == ["asked"]
        assert store.stored_schedule(JOB) is None and store.schedule_changes(0) == ScheduleChanges(0, ())

        record = store.set_schedule(JOB, by="ops", schedule="*/5 * * * *", tz="Europe/Berlin")
        assert (record.version, record.source) == (1, "override")
        assert store.stored_schedule(JOB) == record and store.poll(0).schedules.changes == (record,)
        slot = store.now_ms() - 1_000
        assert store.claim(JOB, slot, runner="r1").outcome == "stale"
        assert store.get_run(JOB, slot) is None
        assert store.claim(JOB, slot, runner="r1", version=record.version).won
        live = rows["live"]
        assert store.finish("other", live["slot_ms"], live["token"], "success")


def stored_run(store: leasecron.Store, row: Dict[str, Any]) -> leasecron.Run:
    run = store.get_run(row["job"], row["slot_ms"])
    assert run is not None
    return run


ATTEMPTS_TAMPERED = [
    "not json",
    "[]",
    "{}",
    "[1]",
    '[{"runner": "r1"}]',
    '[{"number": 0, "runner": "r1", "reason": "schedule", "started_ms": 1, "outcome": "running"}]',
    '[{"number": 1, "runner": 5, "reason": "schedule", "started_ms": 1, "outcome": "running"}]',
    '[{"number": 1, "runner": "r1", "reason": "schedule", "started_ms": "x", "outcome": "running"}]',
    '[{"number": 1, "runner": "r1", "reason": "schedule", "started_ms": 1, "outcome": "bogus"}]',
    '[{"number": 1, "runner": "r1", "reason": "schedule", "started_ms": 1, "ended_ms": [], "outcome": "failed"}]',
]


@pytest.mark.parametrize("attempts", ATTEMPTS_TAMPERED)
def test_a_run_with_tampered_attempts_is_a_store_error_naming_it(db: Path, attempts: str) -> None:
    """A run whose attempts column was tampered with raises StoreError naming the job and the slot
    on every read and claim, never a JSON or type error from deep inside."""
    with leasecron.open_store(_url(db)) as store:
        run = _win(store)
        conn = sqlite3.connect(db, isolation_level=None)
        conn.execute("UPDATE leasecron_runs SET attempts = ?", (attempts,))
        conn.close()
        calls = [
            lambda: store.get_run(JOB, run.slot_ms),
            lambda: store.runs(JOB),
            lambda: store.unfinished(JOB),
            lambda: store.claim(JOB, run.slot_ms, runner="r2"),
        ]
        for call in calls:
            with pytest.raises(leasecron.StoreError, match="unreadable") as info:
                call()
            assert repr(JOB) in str(info.value) and str(run.slot_ms) in str(info.value)


@pytest.mark.parametrize("column, value", [("state", "bogus"), ("expires_ms", "soon"), ("requested_by", b"ops")])
def test_a_tampered_request_is_a_store_error_naming_it(db: Path, column: str, value: Any) -> None:
    """A request whose row was tampered with raises StoreError naming the job and the slot."""
    with leasecron.open_store(_url(db)) as store:
        made = store.request_run(JOB, by="ops")
        conn = sqlite3.connect(db, isolation_level=None)
        conn.execute(f"UPDATE leasecron_runs_requests SET {column} = ?", (value,))
        conn.close()
        calls = [
            lambda: store.job_state(JOB),
            store.job_states,
            lambda: store.claim(JOB, made.slot_ms, runner="r1", reason="manual"),
        ]
        for call in calls:
            with pytest.raises(leasecron.StoreError, match="unreadable") as info:
                call()
            assert repr(JOB) in str(info.value) and str(made.slot_ms) in str(info.value)


@pytest.mark.parametrize(
    "column, value",
    [("kwargs", "not json"), ("options", "[1]"), ("version", "two"), ("cursor", 1.5)],
)
def test_a_tampered_stored_schedule_is_a_store_error_naming_it(db: Path, column: str, value: Any) -> None:
    """A stored schedule whose row was tampered with raises StoreError naming the job on every
    read of it, never a JSON or type error from deep inside."""
    with leasecron.open_store(_url(db)) as store:
        store.set_schedule("report", by="app", schedule=30, task="send", kwargs={"to": "ops"})
        conn = sqlite3.connect(db, isolation_level=None)
        conn.execute(f"UPDATE leasecron_runs_schedules SET {column} = ?", (value,))
        conn.close()
        for call in (lambda: store.stored_schedule("report"), lambda: store.schedule_changes(0), lambda: store.poll(0)):
            with pytest.raises(leasecron.StoreError, match="unreadable") as info:
                call()
            assert repr("report") in str(info.value)


def _first_words(statements: List[str]) -> List[str]:
    return [" ".join(sql.split()[:2]) for sql in statements]


def test_the_commonest_winning_claim_is_a_read_and_one_insert_in_a_write_transaction(tmp_path: Path) -> None:
    """A scheduled claim of a new slot of a job whose last run ended: the read that settles most
    claims, then BEGIN IMMEDIATE, one INSERT deciding rules 8-12, 16 and 23 together, and COMMIT;
    no PRAGMA around the BEGIN. A heartbeat and a finish of the run are one UPDATE each inside
    their transaction. A claim the INSERT does not decide (here a paused job's) goes on step by
    step in the same transaction, and writes nothing."""
    from tests.stores.test_recent_runs import TracedSQLiteStore

    store = TracedSQLiteStore(str(tmp_path / "traced.db"))
    try:
        first = _win(store, ago_ms=5_000)
        assert store.finish(JOB, first.slot_ms, first.token, "success")
        store.statements.clear()
        won = store.claim(JOB, first.slot_ms + 2_000, runner="r")
        assert won.won and won.run is not None and won.run.attempts[0].outcome == "running"
        assert _first_words(store.statements) == ["SELECT *", "BEGIN IMMEDIATE", "INSERT INTO", "COMMIT"]
        assert won.run == store.get_run(JOB, won.run.slot_ms)
        for write in (
            lambda: store.heartbeat(JOB, won.run.slot_ms, won.run.token, 30_000),  # type: ignore[union-attr]
            lambda: store.finish(JOB, won.run.slot_ms, won.run.token, "success"),  # type: ignore[union-attr]
        ):
            store.statements.clear()
            assert write() is True
            assert _first_words(store.statements) == ["BEGIN IMMEDIATE", "UPDATE leasecron_runs", "COMMIT"]
        store.pause(JOB, by="ops")
        store.statements.clear()
        assert store.claim(JOB, first.slot_ms + 3_000, runner="r").outcome == "paused"
        assert _first_words(store.statements)[:3] == ["SELECT *", "BEGIN IMMEDIATE", "INSERT INTO"]
        assert store.get_run(JOB, first.slot_ms + 3_000) is None
    finally:
        store.close()


def test_finish_many_is_one_write_transaction(tmp_path: Path) -> None:
    """Rule 25 on SQLite: a batch of 20 finishes is one BEGIN IMMEDIATE and one COMMIT."""
    from leasecron.stores import Finish
    from tests.stores.test_recent_runs import TracedSQLiteStore

    store = TracedSQLiteStore(str(tmp_path / "traced.db"))
    try:
        runs = [_win(store, job=f"job-{i}") for i in range(20)]
        store.statements.clear()
        assert store.finish_many([Finish(run.job, run.slot_ms, run.token, "success") for run in runs]) == [True] * 20
        words = _first_words(store.statements)
        assert words.count("BEGIN IMMEDIATE") == 1 and words.count("COMMIT") == 1, words
    finally:
        store.close()



def test_a_statement_that_finds_the_file_busy_is_tried_again_until_its_deadline() -> None:
    """retry_while_busy, what a store's read (its connections' busy timeout is 0) and BEGIN IMMEDIATE
    do when the file is busy: tried again after short pauses until it succeeds; a busy file past the
    deadline raises the busy error of a last try; any other error at once."""
    from leasecron.stores.sqlite_file import retry_while_busy

    tries: List[float] = []

    def busy_three_times() -> int:
        tries.append(time.monotonic())
        if len(tries) <= 3:
            raise sqlite3.OperationalError("database is locked")
        return 42

    assert retry_while_busy(busy_three_times, time.monotonic() + 5) == 42
    assert len(tries) == 4 and tries[-1] - tries[0] < 1

    def always_busy() -> int:
        raise sqlite3.OperationalError("database is locked")

    started = time.monotonic()
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        retry_while_busy(always_busy, started + 0.05)
    assert 0.05 <= time.monotonic() - started < 1

    def broken() -> int:
        raise sqlite3.OperationalError("no such table: x")

    started = time.monotonic()
    with pytest.raises(sqlite3.OperationalError, match="no such table"):
        retry_while_busy(broken, started + 5)
    assert time.monotonic() - started < 0.1
