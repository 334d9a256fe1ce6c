"""SQLiteStore: the embedded default, for the processes of one host.

Many processes on one host share one database file safely:

* WAL journal, so readers never block the writer;
* every operation that writes runs in ``BEGIN IMMEDIATE``, which takes the
  file's write lock up front, so two claims never decide on the same state;
  the store's ``now`` is read once the lock is held, so the order of the
  transactions and of their clocks agree;
* a writer waits for the lock instead of failing, for at most
  ``busy_timeout_ms``; one that still finds it busy raises
  :class:`~leasecron.StoreUnavailable`. The threads of one process queue for
  it on a lock of their own (in order, woken at once when it is free); only
  the thread at the head of that queue asks SQLite, and it retries
  ``BEGIN IMMEDIATE`` every few hundred microseconds rather than through
  SQLite's busy handler, whose sleeps grow to 100 ms (a claim would wait far
  longer than the transaction it waits for, which takes tens of microseconds);
* ``synchronous=NORMAL``: a commit survives a crash of any process; only a
  power loss of the host can lose the last commits (and then every instance
  of the host is gone with it).

The clock is the host's wall clock, shared by all its processes. Operations
take a connection from a small pool of idle ones; a forked child opens its
own. The schema is created on first use by the migrations
(``stores/sql/sqlite/NNNN_*.sql``, see :mod:`leasecron.stores.migrations`)
and stamped with its version in ``<table>_meta``; a store opened with
``create=False`` creates nothing (no file, no table, no switch to WAL) and
fails, naming what is missing, on a database that lacks them (on one of
version 1, which it does not migrate, it reads no pause and no request).
The rules themselves are :mod:`leasecron.stores.rules`.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Dict, Iterator, List, Tuple
from urllib.parse import parse_qs, unquote, urlsplit

from ..controls import JobState, ManualRequest
from ..errors import ConfigError, StoreError, StoreUnavailable
from .migrations import check_version, latest_version, migrate
from .queries import check_identifier, load_queries
from .rules import Table, TableStore
from .sqlite_table import SQLiteTable
from .urls import masked_url

__all__ = ["SQLiteStore", "SCHEMA_VERSION"]

#: The schema version this release writes and reads: the number of its last migration.
SCHEMA_VERSION = latest_version("sqlite")

#: A writer that finds another process holding the write lock retries after
#: this pause, doubled after each try up to ``BUSY_PAUSE_MAX_S``.
BUSY_PAUSE_MIN_S = 0.0001
BUSY_PAUSE_MAX_S = 0.001

#: Idle connections a store keeps open for its next operations.
MAX_IDLE_CONNECTIONS = 8

#: Why a store did not create what is missing.
_NOT_CREATED = "(a store with create=False creates nothing)"


class SQLiteStore(TableStore):
    """The store contract in a SQLite database file (``sqlite:///path.db``).

    ``table`` names the runs table (``<table>_meta`` holds the schema
    version), so several applications can share one file. ``busy_timeout_ms``
    is how long an operation waits for another process's write lock.

    ``create`` (default true): the first operation creates the file, the
    tables and the index, and switches the file to WAL. With
    ``create=False`` the store creates nothing: an operation on a file that
    does not exist, or that lacks the table, raises
    :class:`~leasecron.StoreError` naming it, and the file is left as it
    was. ``create`` may be changed before the first operation (the
    ``leasecron`` commands that only read switch it off for an app's store).
    """

    kind = "sqlite"

    def __init__(
        self, path: str, *, table: str = "leasecron_runs", busy_timeout_ms: int = 5_000, create: bool = True
    ) -> None:
        if not isinstance(path, str) or not path:
            raise ConfigError(f"SQLite database path must be a non-empty string, not {path!r}")
        if not isinstance(busy_timeout_ms, int) or busy_timeout_ms < 0:
            raise ConfigError(f"busy_timeout_ms must be an integer >= 0, not {busy_timeout_ms!r}")
        self.path = path
        self.table = check_identifier(table)
        self.busy_timeout_ms = busy_timeout_ms
        self.create = create
        self._q = load_queries("sqlite", table=self.table)
        self._lock = threading.Lock()  # the pool's: never held across a call to SQLite
        self._writer = threading.Lock()  # this process's queue for the file's write lock
        self._schema_lock = threading.Lock()  # one thread creates (or looks for) the schema
        self._idle: List[sqlite3.Connection] = []
        self._pid = os.getpid()
        self._schema_ready = False  # created (or found) by a store that creates
        self._schema_found = False  # found by a store that does not create
        self._found_version = SCHEMA_VERSION  # the version it found
        self._closed = False

    @classmethod
    def from_url(cls, url: str, *, create: bool = True) -> "SQLiteStore":
        """Open ``sqlite:///relative.db`` or ``sqlite:////abs/path.db``.

        Query options: ``table`` and ``busy_timeout_ms``. ``create``: as the
        constructor's.
        """
        parts = urlsplit(url)
        shown = masked_url(url)
        if parts.netloc:
            raise ConfigError(
                f"SQLite URL {shown!r} has a host part: use sqlite:///relative.db or sqlite:////abs/path.db"
            )
        path = unquote(parts.path[1:]) if parts.path.startswith("/") else ""
        if not path:
            raise ConfigError(
                f"SQLite URL {shown!r} names no file: use sqlite:///relative.db or sqlite:////abs/path.db"
            )
        options: Dict[str, Any] = {"create": create}
        for key, values in parse_qs(parts.query, keep_blank_values=True).items():
            if key == "table":
                options["table"] = values[-1]
            elif key == "busy_timeout_ms":
                try:
                    options["busy_timeout_ms"] = int(values[-1])
                except ValueError:
                    raise ConfigError(f"busy_timeout_ms in {shown!r} must be an integer") from None
            else:
                raise ConfigError(f"unknown option {key!r} in SQLite URL {shown!r}; known: table, busy_timeout_ms")
        return cls(path, **options)

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def server_version(self) -> str:
        """``SQLite <version>`` of the library this Python links."""
        return f"SQLite {sqlite3.sqlite_version}"

    # -- connections -----------------------------------------------------------

    @contextmanager
    def _using(self) -> Iterator[sqlite3.Connection]:
        """A connection of the store's pool, held for one operation.

        Operations take an idle connection or open one, and put it back after
        (at most ``MAX_IDLE_CONNECTIONS`` stay open), so the connections
        number the operations at once, not the threads that ever called
        (each run has threads of its own). ``close()`` closes the idle ones;
        one in use closes when its operation ends, never under it (CPython's
        sqlite3 would crash).
        """
        conn = self._take()
        try:
            yield conn
        finally:
            self._put_back(conn)

    def _take(self) -> sqlite3.Connection:
        """A connection for one operation (see :meth:`_using`), the schema created or found; the
        operation gives it back with :meth:`_put_back`."""
        if self._closed:
            raise StoreError(f"{self!r} is closed")
        if self._pid != os.getpid():
            self._after_fork()
        with self._lock:
            conn = self._idle.pop() if self._idle else None
        if conn is None:
            conn = self._connect()
        try:
            if self.create and not self._schema_ready:
                self._create_schema(conn)
            elif not self.create and not (self._schema_ready or self._schema_found):
                self._find_schema(conn)
        except BaseException:
            self._put_back(conn)
            raise
        return conn

    def _put_back(self, conn: sqlite3.Connection) -> None:
        with self._lock:
            if not self._closed and not conn.in_transaction and len(self._idle) < MAX_IDLE_CONNECTIONS:
                self._idle.append(conn)
                return
        conn.close()

    def _connect(self) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(
                # mode=rw: open the file for reading and writing, never create it
                self.path if self.create else f"{Path(self.path).absolute().as_uri()}?mode=rw",
                timeout=self.busy_timeout_ms / 1000,
                isolation_level=None,
                check_same_thread=False,
                uri=not self.create,
            )
            conn.row_factory = sqlite3.Row
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_ms)}")
            conn.execute("PRAGMA synchronous = NORMAL")
        except sqlite3.Error as exc:
            if not self.create and not os.path.exists(self.path):
                raise StoreError(f"SQLite database file {self.path!r} does not exist {_NOT_CREATED}") from exc
            raise _store_error(exc, f"cannot open SQLite database {self.path!r}") from exc
        return conn

    def _after_fork(self) -> None:
        # The parent's connections must not be used in a child: forget them
        # without closing (closing could disturb the parent's transactions).
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._writer = threading.Lock()
        self._schema_lock = threading.Lock()
        self._idle = []

    @contextmanager
    def _schema_section(self) -> Iterator[float]:
        """Held by the one thread that creates or looks for the schema; yields the deadline
        (monotonic) of that work. A thread that waits here longer than ``busy_timeout_ms``
        gives up with :class:`~leasecron.StoreUnavailable`, as a writer does: the work never
        holds the pool's lock, so the other threads' operations are not held up by it."""
        deadline = time.monotonic() + self.busy_timeout_ms / 1000
        if not self._schema_lock.acquire(timeout=max(0.0, deadline - time.monotonic())):
            raise StoreUnavailable(
                f"SQLite: another thread's creation of the schema in {self.path!r} took over"
                f" {self.busy_timeout_ms} ms"
            )
        try:
            yield deadline
        finally:
            self._schema_lock.release()

    def _create_schema(self, conn: sqlite3.Connection) -> None:
        with self._schema_section() as deadline:
            if self._schema_ready:
                return
            try:
                mode = self._enable_wal(conn, deadline)
                if str(mode).lower() != "wal":
                    raise StoreError(f"SQLite database {self.path!r} cannot use WAL mode (got {mode!r})")
                self._begin_immediate(conn, deadline)
                try:
                    conn.execute(self._q["create_meta"])
                    version = self._version(conn)
                    if migrate("sqlite", version, lambda sql: _execute_script(conn, sql), table=self.table) > version:
                        conn.execute(self._q["set_version"], {"version": str(SCHEMA_VERSION)})
                    conn.execute("COMMIT")
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
            except sqlite3.Error as exc:
                raise _store_error(exc, f"cannot create the schema in {self.path!r}") from exc
            self._schema_ready = True

    def _find_schema(self, conn: sqlite3.Connection) -> None:
        """What ``create=False`` does instead of :meth:`_create_schema`: check that the tables
        exist and are not newer than this release, and change nothing."""
        with self._schema_section():
            if self._schema_found:
                return
            try:
                names = {"runs": self.table, "meta": f"{self.table}_meta"}
                found = {row[0] for row in conn.execute(self._q["tables_found"], names)}
                for name in names.values():
                    if name.lower() not in found:
                        raise StoreError(f"SQLite table {name!r} does not exist in {self.path!r} {_NOT_CREATED}")
                self._found_version = self._version(conn)
            except sqlite3.Error as exc:
                raise _store_error(exc, f"cannot read the schema of {self.path!r}") from exc
            self._schema_found = True

    def _version(self, conn: sqlite3.Connection) -> int:
        """The schema version stamped in the database (0: none yet); StoreError if it is newer
        than this release's."""
        row = conn.execute(self._q["get_version"]).fetchone()
        where = f"SQLite table {self.table!r} in {self.path!r}"
        return check_version("sqlite", int(row[0]) if row else 0, where)

    def _enable_wal(self, conn: sqlite3.Connection, deadline: float) -> str:
        # SQLite answers a switch to WAL that races another connection's
        # (several processes opening a new file at once) with "database is
        # locked" at once, without waiting on the busy timeout: retry until the deadline.
        while True:
            try:
                return str(conn.execute("PRAGMA journal_mode = WAL").fetchone()[0])
            except sqlite3.OperationalError as exc:
                if not _is_busy(exc) or time.monotonic() >= deadline:
                    raise
                time.sleep(0.01)

    def _without_controls(self) -> bool:
        """Whether a store that does not create (nor migrate) found 0.1's schema (version 1): no
        pause and no request can be stored in it, and none is read."""
        if self.create:
            return False
        with self._using():  # finds the schema
            return self._found_version < 2

    def _job_state(self, job: str) -> JobState:
        return JobState(job) if self._without_controls() else super()._job_state(job)

    def _job_states(self) -> List[JobState]:
        return [] if self._without_controls() else super()._job_states()

    def _pending_requests(self) -> List[ManualRequest]:
        return [] if self._without_controls() else super()._pending_requests()

    # -- sections ----------------------------------------------------------------

    @contextmanager
    def _write(self) -> Iterator[Tuple[Table, int]]:
        deadline = time.monotonic() + self.busy_timeout_ms / 1000
        with self._using() as conn:
            if not self._writer.acquire(timeout=max(0.0, deadline - time.monotonic())):
                raise StoreUnavailable(
                    f"SQLite cannot begin a write transaction: the write lock stayed busy for"
                    f" {self.busy_timeout_ms} ms"
                )
            try:
                self._begin_immediate(conn, deadline)
                try:
                    yield SQLiteTable(conn, self._q), self.now_ms()
                    conn.execute("COMMIT")
                except BaseException as exc:
                    if conn.in_transaction:
                        try:
                            conn.execute("ROLLBACK")
                        except sqlite3.Error:
                            pass
                    if isinstance(exc, sqlite3.Error):
                        raise _store_error(exc, "write failed") from exc
                    raise
            finally:
                self._writer.release()

    def _begin_immediate(self, conn: sqlite3.Connection, deadline: float) -> None:
        """``BEGIN IMMEDIATE``, retried while another process holds the write lock, until ``deadline``.

        The connection's busy timeout is switched off for it (two PRAGMAs that
        touch no file): the retries sleep 0.1-1 ms, growing, instead of
        SQLite's 1, 2, 5, 10 ... 100 ms.
        """
        pause = BUSY_PAUSE_MIN_S
        conn.execute("PRAGMA busy_timeout = 0")
        try:
            while True:
                try:
                    conn.execute("BEGIN IMMEDIATE")
                    return
                except sqlite3.OperationalError as exc:
                    if not _is_busy(exc):
                        raise _store_error(exc, "cannot begin a write transaction") from exc
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise _store_error(exc, "cannot begin a write transaction") from exc
                    time.sleep(min(pause, left))
                    pause = min(pause * 2, BUSY_PAUSE_MAX_S)
                except sqlite3.Error as exc:
                    raise _store_error(exc, "cannot begin a write transaction") from exc
        finally:
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_ms)}")

    @contextmanager
    def _read(self) -> Iterator[Table]:
        conn = self._take()  # as _using does, without its generator: a claim begins with a read
        try:
            yield SQLiteTable(conn, self._q)
        except sqlite3.Error as exc:
            raise _store_error(exc, "read failed") from exc
        finally:
            self._put_back(conn)

    def close(self) -> None:
        """Close every idle connection; one in use closes when its operation ends."""
        with self._lock:
            idle, self._idle = self._idle, []
            self._closed = True
        if self._pid != os.getpid():
            return  # a forked child must not close its parent's connections
        for conn in idle:
            conn.close()

    def __repr__(self) -> str:
        return f"SQLiteStore({self.path!r}, table={self.table!r})"


def _execute_script(conn: sqlite3.Connection, script: str) -> None:
    """Execute the statements of ``script`` one by one, in the transaction ``conn`` is in
    (``executescript`` would commit it first)."""
    statement = ""
    for line in script.splitlines(keepends=True):
        statement += line
        if sqlite3.complete_statement(statement):
            conn.execute(statement)
            statement = ""
    if statement.strip():
        conn.execute(statement)


def _is_busy(exc: sqlite3.Error) -> bool:
    text = str(exc)
    return isinstance(exc, sqlite3.OperationalError) and ("locked" in text or "busy" in text)


def _store_error(exc: sqlite3.Error, doing: str) -> StoreError:
    if _is_busy(exc):
        return StoreUnavailable(f"SQLite {doing}: {exc}")
    return StoreError(f"SQLite {doing}: {exc}")
