"""The SQLite file as the processes of one host share it: its schema and its write lock.

:class:`Schema` makes a store's schema ready on first use: created and migrated (the WAL journal,
the migrations of ``stores/sql/sqlite/``, the version stamped in ``<table>_meta``) by a store
that creates, or found and checked, with nothing changed, by one that does not.
:func:`begin_immediate` takes the file's write lock for a transaction; :func:`store_error` tells
the errors worth retrying (the file is busy) from the others. The one idea: every write holds
the file's one write lock from its first statement, so two claims never decide on one state.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from contextlib import contextmanager
from typing import Callable, Dict, Iterator, Optional, TypeVar

from ..errors import StoreError, StoreUnavailable
from .migrations import check_version, latest_version, migrate

__all__ = ["SCHEMA_VERSION", "NOT_CREATED", "Schema", "begin_immediate", "is_busy", "retry_while_busy", "store_error"]

#: The schema version this release writes and reads: the number of its last migration.
SCHEMA_VERSION = latest_version("sqlite")

#: A writer that finds another process holding the write lock retries after
#: this pause, doubled after each try up to ``BUSY_PAUSE_MAX_S``.
BUSY_PAUSE_MIN_S = 0.0001
BUSY_PAUSE_MAX_S = 0.001

#: Why a store did not create what is missing.
NOT_CREATED = "(a store with create=False creates nothing)"


class Schema:
    """The schema of one store's ``table`` in the file at ``path``, made ready once per store.

    ``queries`` are the store's named queries; ``busy_timeout_ms`` bounds the wait for another
    thread's (or process's) creation of the schema, as it bounds a writer's wait for the lock.
    """

    def __init__(self, path: str, table: str, queries: Dict[str, str], busy_timeout_ms: int) -> None:
        self._path = path
        self._table = table
        self._q = queries
        self._busy_timeout_ms = busy_timeout_ms
        self._lock = threading.Lock()  # one thread creates (or looks for) the schema
        self._ready = False  # created (or found) by a store that creates
        self._found = False  # found by a store that does not create
        #: The version found by a store that does not create (this release's until then).
        self.version = SCHEMA_VERSION

    def prepare(self, conn: sqlite3.Connection, create: bool) -> None:
        """Create the schema (``create``) or find it, through ``conn``, unless that was done."""
        if create and not self._ready:
            self._create(conn)
        elif not create and not (self._ready or self._found):
            self._find(conn)

    def after_fork(self) -> None:
        """In a forked child: a fresh lock (the parent's may have been held by another thread)."""
        self._lock = threading.Lock()

    @contextmanager
    def _section(self) -> Iterator[float]:
        """Held by the one thread that creates or looks for the schema; yields the deadline
        (monotonic) of that work. A thread that waits here longer than ``busy_timeout_ms``
        gives up with :class:`~leasecron.StoreUnavailable`, as a writer does: the work never
        holds the pool's lock, so the other threads' operations are not held up by it."""
        deadline = time.monotonic() + self._busy_timeout_ms / 1000
        if not self._lock.acquire(timeout=max(0.0, deadline - time.monotonic())):
            raise StoreUnavailable(
                f"SQLite: another thread's creation of the schema in {self._path!r} took over"
                f" {self._busy_timeout_ms} ms"
            )
        try:
            yield deadline
        finally:
            self._lock.release()

    def _create(self, conn: sqlite3.Connection) -> None:
        with self._section() as deadline:
            if self._ready:
                return
            try:
                mode = _enable_wal(conn, deadline)
                if str(mode).lower() != "wal":
                    raise StoreError(f"SQLite database {self._path!r} cannot use WAL mode (got {mode!r})")
                begin_immediate(conn, deadline, self._busy_timeout_ms)
                try:
                    conn.execute(self._q["create_meta"])
                    version = self._stamped(conn)
                    if migrate("sqlite", version, lambda sql: _execute_script(conn, sql), table=self._table) > version:
                        conn.execute(self._q["set_version"], {"version": str(SCHEMA_VERSION)})
                    conn.execute("COMMIT")
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
            except sqlite3.Error as exc:
                raise store_error(exc, f"cannot create the schema in {self._path!r}") from exc
            self._ready = True

    def _find(self, conn: sqlite3.Connection) -> None:
        """What ``create=False`` does instead of :meth:`_create`: check that the tables exist and
        are not newer than this release, and change nothing."""
        with self._section():
            if self._found:
                return
            try:
                names = {"runs": self._table, "meta": f"{self._table}_meta"}
                found = {row[0] for row in conn.execute(self._q["tables_found"], names)}
                for name in names.values():
                    if name.lower() not in found:
                        raise StoreError(f"SQLite table {name!r} does not exist in {self._path!r} {NOT_CREATED}")
                self.version = self._stamped(conn)
            except sqlite3.Error as exc:
                raise store_error(exc, f"cannot read the schema of {self._path!r}") from exc
            self._found = True

    def _stamped(self, conn: sqlite3.Connection) -> int:
        """The schema version stamped in the database (0: none yet); StoreError if it is newer
        than this release's."""
        row = conn.execute(self._q["get_version"]).fetchone()
        where = f"SQLite table {self._table!r} in {self._path!r}"
        return check_version("sqlite", int(row[0]) if row else 0, where)


def _enable_wal(conn: sqlite3.Connection, deadline: float) -> str:
    # SQLite answers a switch to WAL that races another connection's
    # (several processes opening a new file at once) with "database is
    # locked" at once, without waiting on the busy timeout: retry until the deadline.
    while True:
        try:
            return str(conn.execute("PRAGMA journal_mode = WAL").fetchone()[0])
        except sqlite3.OperationalError as exc:
            if not is_busy(exc) or time.monotonic() >= deadline:
                raise
            time.sleep(0.01)


def begin_immediate(conn: sqlite3.Connection, deadline: float, busy_timeout_ms: Optional[int] = None) -> None:
    """``BEGIN IMMEDIATE``, retried while another process holds the write lock, until ``deadline``.

    The retries sleep 0.1-1 ms, growing, instead of SQLite's 1, 2, 5, 10 ... 100 ms: the
    connection's busy timeout must be 0 for it. A store's write connections keep it 0; given
    ``busy_timeout_ms``, the connection's is switched off for the ``BEGIN`` and then set to it
    (two PRAGMAs that touch no file).
    """
    if busy_timeout_ms is not None:
        conn.execute("PRAGMA busy_timeout = 0")
    try:
        _begin_immediate(conn, deadline)
    finally:
        if busy_timeout_ms is not None:
            conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")


def _begin_immediate(conn: sqlite3.Connection, deadline: float) -> None:
    try:
        conn.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError as exc:
        if not is_busy(exc):
            raise store_error(exc, "cannot begin a write transaction") from exc
        try:
            retry_while_busy(lambda: conn.execute("BEGIN IMMEDIATE"), deadline)
        except sqlite3.Error as again:
            raise store_error(again, "cannot begin a write transaction") from again
    except sqlite3.Error as exc:
        raise store_error(exc, "cannot begin a write transaction") from exc


_Result = TypeVar("_Result")


def retry_while_busy(statement: Callable[[], _Result], deadline: float) -> _Result:
    """``statement()`` (a statement on a connection whose busy timeout is 0) tried again while it
    finds the file busy, after pauses of 0.1 ms growing to 1 ms, until ``deadline`` (monotonic);
    then the busy error, or any other, is raised."""
    pause = BUSY_PAUSE_MIN_S
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return statement()  # a last try: its error is the one raised
        time.sleep(min(pause, left))
        pause = min(pause * 2, BUSY_PAUSE_MAX_S)
        try:
            return statement()
        except sqlite3.OperationalError as exc:
            if not is_busy(exc):
                raise


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


def is_busy(exc: sqlite3.Error) -> bool:
    """Whether ``exc`` says that another connection holds the file's lock."""
    text = str(exc)
    return isinstance(exc, sqlite3.OperationalError) and ("locked" in text or "busy" in text)


def store_error(exc: sqlite3.Error, doing: str) -> StoreError:
    """The store's error for ``exc`` while ``doing``: :class:`~leasecron.StoreUnavailable` when
    the file was busy (worth retrying), else :class:`~leasecron.StoreError`."""
    if is_busy(exc):
        return StoreUnavailable(f"SQLite {doing}: {exc}")
    return StoreError(f"SQLite {doing}: {exc}")
