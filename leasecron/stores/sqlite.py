"""SQLiteStore: the store contract in one SQLite file, shared by the processes of one host.

The lease rules run in Python (:mod:`leasecron.stores.rules`) on a
:class:`~leasecron.stores.sqlite_table.SQLiteTable`, the named queries of
``stores/sql/sqlite/queries.sql``, inside a transaction that holds the file's one write lock
from its first statement (:mod:`leasecron.stores.sqlite_file`); the store's clock is the host's,
read once the lock is held. The threads of one process queue for that lock on a lock of their
own, and operations share a small pool of connections. ``docs/design.rst`` (The
stores) says why it is built so.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any, Dict, Iterator, List, Optional, Tuple
from urllib.parse import parse_qs, unquote, urlsplit

from ..announcements import Announcement, LiveInstance
from ..controls import JobState, ManualRequest
from ..errors import ConfigError, StoreError, StoreUnavailable
from ..stored import Overview, Poll, ScheduleChanges, StoredSchedule
from .queries import check_identifier, load_queries
from .forks import forget_in_child
from .reads import StoreReads
from .records import Record
from .rules import TableStore
from .sqlite_table import SQLiteTable
from .table import Table
from .sqlite_file import NOT_CREATED, SCHEMA_VERSION, Schema, begin_immediate, store_error
from .urls import masked_url

__all__ = ["SQLiteStore", "SCHEMA_VERSION"]

#: Idle connections a store keeps open for its next operations.
MAX_IDLE_CONNECTIONS = 8
#: The schema version that first holds pauses and requests for manual runs (leasecron 0.2's).
_CONTROLS_VERSION = 2
#: The schema version that first holds stored schedules.
_SCHEDULES_VERSION = 3
#: The schema version that first holds the instances' announcements.
_INSTANCES_VERSION = 4


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
        self._idle: List[sqlite3.Connection] = []
        self._pid = os.getpid()
        self._schema = Schema(path, self.table, self._q, busy_timeout_ms)
        self._closed = False
        self._in_use = 0  # connections taken and not given back: none at a fork (_before_fork)
        self._fork_held = False  # whether _before_fork holds the pool's lock across a fork
        forget_in_child(self)  # a forked child's store forgets its parent's connections

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
        operation gives it back with :meth:`_put_back`.

        Once the schema is ready, a connection's busy timeout is 0: SQLite's own busy handler
        sleeps 1, 2, 5, 10 ... 100 ms, so the store waits for another process's lock itself, in
        0.1-1 ms steps (:func:`~leasecron.stores.sqlite_file.begin_immediate` for a write; a
        read statement is tried again, :class:`~leasecron.stores.sqlite_table.SQLiteTable`),
        and a write needs no PRAGMA around its ``BEGIN``."""
        if self._closed:
            raise StoreError(f"{self!r} is closed")
        with self._lock:  # a forked child's store has forgotten its parent's connections (forks.py)
            conn = self._idle.pop() if self._idle else None
            self._in_use += 1
        new = conn is None
        try:
            if conn is None:
                conn = self._connect()
            self._schema.prepare(conn, self.create)
            if new:  # after prepare, which waits on the store's busy timeout
                conn.execute("PRAGMA busy_timeout = 0")
        except BaseException as exc:
            with self._lock:
                self._in_use -= 1
            if conn is not None:
                conn.close()
            if isinstance(exc, sqlite3.Error):
                raise store_error(exc, "cannot open a connection") from exc
            raise
        return conn

    def _put_back(self, conn: sqlite3.Connection) -> None:
        with self._lock:
            self._in_use -= 1
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
                raise StoreError(f"SQLite database file {self.path!r} does not exist {NOT_CREATED}") from exc
            raise store_error(exc, f"cannot open SQLite database {self.path!r}") from exc
        return conn

    def _before_fork(self) -> None:
        # No connection of this store may be inside a statement or a transaction at the fork:
        # SQLite records the locks its connections hold in the process's memory, and a child
        # copied in the middle of a read or a write would find the file's locks held forever, by
        # connections that exist only in its copy. Wait (at most the busy timeout; an operation
        # takes ms) until every connection is back, then hold the pool's lock across the fork.
        deadline = time.monotonic() + self.busy_timeout_ms / 1000
        while True:
            self._lock.acquire()
            if self._in_use == 0 or time.monotonic() > deadline:
                self._fork_held = True
                return
            self._lock.release()
            time.sleep(0.0005)

    def _after_fork_in_parent(self) -> None:
        if self._fork_held:
            self._fork_held = False
            self._lock.release()

    def _after_fork_in_child(self) -> None:
        # The parent's connections must not be used in a child: forget them
        # without closing (closing could disturb the parent's transactions).
        self._fork_held = False
        self._in_use = 0
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._writer = threading.Lock()
        self._schema.after_fork()
        self._idle = []

    def _older_than(self, version: int) -> bool:
        """Whether a store that does not create (nor migrate) found a schema older than
        ``version``: what that version added cannot be stored in it, and none is read (0.1's
        schema holds no pause and no request, 0.2's no stored schedule)."""
        if self.create:
            return False
        with self._using():  # finds the schema
            return self._schema.version < version

    def _job_state(self, job: str) -> JobState:
        return JobState(job) if self._older_than(_CONTROLS_VERSION) else super()._job_state(job)

    def _job_states(self) -> List[JobState]:
        return [] if self._older_than(_CONTROLS_VERSION) else super()._job_states()

    def _pending_requests(self) -> List[ManualRequest]:
        return [] if self._older_than(_CONTROLS_VERSION) else super()._pending_requests()

    def _stored_schedule(self, job: str) -> Optional[StoredSchedule]:
        return None if self._older_than(_SCHEDULES_VERSION) else super()._stored_schedule(job)

    def _schedule_changes(self, since: int) -> ScheduleChanges:
        return ScheduleChanges(since) if self._older_than(_SCHEDULES_VERSION) else super()._schedule_changes(since)

    def _instances(self) -> List[LiveInstance]:
        return [] if self._older_than(_INSTANCES_VERSION) else super()._instances()

    def _announce(self, announcement: Announcement) -> None:
        """Nothing on a schema without announcements (``create=False``): it has no place for one."""
        if not self._older_than(_INSTANCES_VERSION):
            super()._announce(announcement)

    def _withdraw(self, runner: str) -> None:
        if not self._older_than(_INSTANCES_VERSION):
            super()._withdraw(runner)

    def _overview(self, jobs: List[str]) -> Overview:
        """One read transaction of three statements (:meth:`TableStore._overview
        <leasecron.stores.rules.TableStore._overview>`), or the reads one by one from a schema
        without stored schedules (``create=False``), each reading it as it is."""
        if self._older_than(_SCHEDULES_VERSION):
            return StoreReads._overview(self, jobs)
        return super()._overview(jobs)

    def _poll(self, since: int) -> Poll:
        """One read section (two statements), or only the requests from a schema without stored schedules."""
        if self._older_than(_SCHEDULES_VERSION):
            return Poll(self._pending_requests(), ScheduleChanges(since))
        return super()._poll(since)

    # -- sections ----------------------------------------------------------------

    def _write(self) -> AbstractContextManager[Tuple[Table, int]]:
        """One write transaction, ``BEGIN IMMEDIATE`` to ``COMMIT`` (:class:`_WriteSection`)."""
        return _WriteSection(self)

    def _read_record(self, job: str, slot_ms: int) -> Optional[Record]:
        """One statement on a connection of the pool, without a read section's generator."""
        conn = self._take()
        try:
            return SQLiteTable(conn, self._q, self.busy_timeout_ms / 1000).get(job, slot_ms)
        except sqlite3.Error as exc:
            raise store_error(exc, "read failed") from exc
        finally:
            self._put_back(conn)

    @contextmanager
    def _read(self) -> Iterator[Table]:
        conn = self._take()  # as _using does, without its generator: a claim begins with a read
        try:
            yield SQLiteTable(conn, self._q, self.busy_timeout_ms / 1000)
        except sqlite3.Error as exc:
            raise store_error(exc, "read failed") from exc
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


class _WriteSection:
    """A write transaction of ``store``: ``with`` yields its table and the store's ``now``, read
    once the file's write lock is held, and commits when the block ends (rolls back when it
    raises). The threads of one process queue on the store's lock first, so a process holds
    at most one place in the file's queue. A class, not a generator: every winning claim,
    heartbeat and finish opens one."""

    __slots__ = ("_store", "_conn")

    def __init__(self, store: SQLiteStore) -> None:
        self._store = store

    def __enter__(self) -> Tuple[Table, int]:
        store = self._store
        deadline = time.monotonic() + store.busy_timeout_ms / 1000
        conn = self._conn = store._take()
        try:
            if not store._writer.acquire(timeout=store.busy_timeout_ms / 1000):
                raise StoreUnavailable(
                    "SQLite cannot begin a write transaction: the write lock stayed busy for"
                    f" {store.busy_timeout_ms} ms"
                )
            try:
                begin_immediate(conn, deadline)
            except BaseException:
                store._writer.release()
                raise
        except BaseException:
            store._put_back(conn)
            raise
        return SQLiteTable(conn, store._q), store.now_ms()

    def __exit__(self, kind: Optional[type], exc: Optional[BaseException], tb: Optional[TracebackType]) -> None:
        store, conn = self._store, self._conn
        try:
            if exc is None:
                try:
                    conn.execute("COMMIT")
                except sqlite3.Error as failed:
                    _roll_back(conn)
                    raise store_error(failed, "write failed") from failed
            else:
                _roll_back(conn)
                if isinstance(exc, sqlite3.Error):
                    raise store_error(exc, "write failed") from exc
        finally:
            store._writer.release()
            store._put_back(conn)


def _roll_back(conn: sqlite3.Connection) -> None:
    if conn.in_transaction:
        try:
            conn.execute("ROLLBACK")
        except sqlite3.Error:
            pass
