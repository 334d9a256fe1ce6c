"""SQLiteStore: the embedded default, for the processes of one host.

Many processes on one host share one database file safely:

* WAL journal, so readers never block the writer;
* every operation that writes runs in ``BEGIN IMMEDIATE``, which takes the
  file's write lock up front, so two claims never decide on the same state;
  the store's ``now`` is read once the lock is held, so the order of the
  transactions and of their clocks agree;
* a busy timeout, so a writer waits for the lock instead of failing; one that
  still finds it busy raises :class:`~leasecron.StoreUnavailable`;
* ``synchronous=NORMAL``: a commit survives a crash of any process; only a
  power loss of the host can lose the last commits (and then every instance
  of the host is gone with it).

The clock is the host's wall clock, shared by all its processes. Each thread
has its own connection; a forked child opens its own. The schema is created on
first use and stamped with a version in ``<table>_meta`` for later
migrations. The rules themselves are :mod:`leasecron.stores.rules`.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from contextlib import contextmanager
from typing import Any, Dict, Iterator, List, Optional, Tuple
from urllib.parse import parse_qs, unquote, urlsplit

from ..errors import ConfigError, StoreError, StoreUnavailable
from .queries import check_identifier, load_queries
from .rules import Record, Table, TableStore, read_record

__all__ = ["SQLiteStore", "SCHEMA_VERSION"]

#: The schema version this release writes and reads.
SCHEMA_VERSION = 1


def _record(row: sqlite3.Row) -> Record:
    data = dict(row)
    return read_record(data["job"], data["slot_ms"], data)  # StoreError if it was tampered with


class _SQLiteTable(Table):
    def __init__(self, conn: sqlite3.Connection, queries: Dict[str, str]) -> None:
        self._conn = conn
        self._q = queries

    def _all(self, name: str, **params: Any) -> List[Record]:
        return [_record(row) for row in self._conn.execute(self._q[name], params)]

    def _one(self, name: str, **params: Any) -> Optional[Record]:
        row = self._conn.execute(self._q[name], params).fetchone()
        return None if row is None else _record(row)

    def get(self, job: str, slot_ms: int) -> Optional[Record]:
        return self._one("get", job=job, slot_ms=slot_ms)

    def newest(self, job: str) -> Optional[Record]:
        return self._one("newest", job=job)

    def running(self, job: str) -> List[Record]:
        return self._all("running", job=job)

    def live_before(self, job: str, before_ms: int, now_ms: int) -> Optional[Record]:
        return self._one("live_before", job=job, before_ms=before_ms, now_ms=now_ms)

    def interrupt_expired(self, job: str, before_ms: int, now_ms: int, why: str) -> None:
        params = {"job": job, "before_ms": before_ms, "now_ms": now_ms, "why": why}
        self._conn.execute(self._q["interrupt_expired"], params)

    def latest(self, job: str, limit: int) -> List[Record]:
        return self._all("latest", job=job, limit=limit)

    def jobs(self) -> List[str]:
        return [row[0] for row in self._conn.execute(self._q["jobs"])]

    def insert(self, record: Record) -> None:
        self._conn.execute(self._q["insert"], vars(record))

    def update(self, record: Record) -> None:
        self._conn.execute(self._q["update"], vars(record))

    def prune(self, job: str, keep: int, horizon_ms: int) -> None:
        self._conn.execute(self._q["prune"], {"job": job, "keep": keep, "horizon_ms": horizon_ms})


class _Handle:
    """One thread's connection, and the lock each of its operations holds."""

    __slots__ = ("conn", "lock", "closed")

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.lock = threading.Lock()
        self.closed = False

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.conn.close()


class SQLiteStore(TableStore):
    """The store contract in a SQLite database file (``sqlite:///path.db``).

    ``table`` names the runs table (``<table>_meta`` holds the schema
    version), so several applications can share one file. ``busy_timeout_ms``
    is how long an operation waits for another process's write lock.
    """

    kind = "sqlite"

    def __init__(
        self, path: str, *, table: str = "leasecron_runs", busy_timeout_ms: int = 5_000
    ) -> None:
        if not isinstance(path, str) or not path:
            raise ConfigError(f"SQLite database path must be a non-empty string, not {path!r}")
        if not isinstance(busy_timeout_ms, int) or busy_timeout_ms < 0:
            raise ConfigError(f"busy_timeout_ms must be an integer >= 0, not {busy_timeout_ms!r}")
        self.path = path
        self.table = check_identifier(table)
        self.busy_timeout_ms = busy_timeout_ms
        self._q = load_queries("sqlite", table=self.table)
        self._local = threading.local()
        self._lock = threading.Lock()
        self._handles: List[_Handle] = []
        self._pid = os.getpid()
        self._schema_ready = False
        self._closed = False

    @classmethod
    def from_url(cls, url: str) -> "SQLiteStore":
        """Open ``sqlite:///relative.db`` or ``sqlite:////abs/path.db``.

        Query options: ``table`` and ``busy_timeout_ms``.
        """
        parts = urlsplit(url)
        if parts.netloc:
            raise ConfigError(
                f"SQLite URL {url!r} has a host part: use sqlite:///relative.db or sqlite:////abs/path.db"
            )
        path = unquote(parts.path[1:]) if parts.path.startswith("/") else ""
        if not path:
            raise ConfigError(f"SQLite URL {url!r} names no file: use sqlite:///relative.db or sqlite:////abs/path.db")
        options: Dict[str, Any] = {}
        for key, values in parse_qs(parts.query, keep_blank_values=True).items():
            if key == "table":
                options["table"] = values[-1]
            elif key == "busy_timeout_ms":
                try:
                    options["busy_timeout_ms"] = int(values[-1])
                except ValueError:
                    raise ConfigError(f"busy_timeout_ms in {url!r} must be an integer") from None
            else:
                raise ConfigError(f"unknown option {key!r} in SQLite URL {url!r}; known: table, busy_timeout_ms")
        return cls(path, **options)

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def server_version(self) -> str:
        """``SQLite <version>`` of the library this Python links."""
        return f"SQLite {sqlite3.sqlite_version}"

    # -- connections -----------------------------------------------------------

    @contextmanager
    def _using(self) -> Iterator[sqlite3.Connection]:
        """This thread's connection, held for one operation.

        ``close()`` from another thread never pulls a connection away in the
        middle of an operation (CPython's sqlite3 would crash): it closes the
        idle ones, and an operation in progress closes its own when it ends.
        """
        if self._closed:
            raise StoreError(f"{self!r} is closed")
        if self._pid != os.getpid():
            self._after_fork()
        handle: Optional[_Handle] = getattr(self._local, "handle", None)
        if handle is None:
            handle = self._local.handle = _Handle(self._connect())
            with self._lock:
                self._handles.append(handle)
        with handle.lock:
            if handle.closed:
                raise StoreError(f"{self!r} is closed")
            try:
                if not self._schema_ready:
                    self._create_schema(handle.conn)
                yield handle.conn
            finally:
                if self._closed:
                    handle.close()

    def _connect(self) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(
                self.path,
                timeout=self.busy_timeout_ms / 1000,
                isolation_level=None,
                check_same_thread=False,
            )
            conn.row_factory = sqlite3.Row
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_ms)}")
            conn.execute("PRAGMA synchronous = NORMAL")
        except sqlite3.Error as exc:
            raise _store_error(exc, f"cannot open SQLite database {self.path!r}") from exc
        return conn

    def _after_fork(self) -> None:
        # The parent's connections must not be used in a child: forget them
        # without closing (closing could disturb the parent's transactions).
        self._pid = os.getpid()
        self._local = threading.local()
        self._lock = threading.Lock()
        self._handles = []

    def _create_schema(self, conn: sqlite3.Connection) -> None:
        with self._lock:
            if self._schema_ready:
                return
            try:
                mode = self._enable_wal(conn)
                if str(mode).lower() != "wal":
                    raise StoreError(f"SQLite database {self.path!r} cannot use WAL mode (got {mode!r})")
                conn.execute("BEGIN IMMEDIATE")
                try:
                    for name in ("create_runs", "create_running_index", "create_meta"):
                        conn.execute(self._q[name])
                    row = conn.execute(self._q["get_version"]).fetchone()
                    version = int(row[0]) if row else None
                    if version is not None and version > SCHEMA_VERSION:
                        raise StoreError(
                            f"SQLite table {self.table!r} in {self.path!r} has schema version {version},"
                            f" newer than this leasecron knows ({SCHEMA_VERSION}): upgrade leasecron"
                        )
                    if version is None:
                        conn.execute(self._q["set_version"], {"version": str(SCHEMA_VERSION)})
                    conn.execute("COMMIT")
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
            except sqlite3.Error as exc:
                raise _store_error(exc, f"cannot create the schema in {self.path!r}") from exc
            self._schema_ready = True

    def _enable_wal(self, conn: sqlite3.Connection) -> str:
        # SQLite answers a switch to WAL that races another connection's
        # (several processes opening a new file at once) with "database is
        # locked" at once, without waiting on the busy timeout: retry within it.
        deadline = time.monotonic() + self.busy_timeout_ms / 1000
        while True:
            try:
                return str(conn.execute("PRAGMA journal_mode = WAL").fetchone()[0])
            except sqlite3.OperationalError as exc:
                if ("locked" not in str(exc) and "busy" not in str(exc)) or time.monotonic() >= deadline:
                    raise
                time.sleep(0.01)

    # -- sections ----------------------------------------------------------------

    @contextmanager
    def _write(self) -> Iterator[Tuple[Table, int]]:
        with self._using() as conn:
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise _store_error(exc, "cannot begin a write transaction") from exc
            try:
                yield _SQLiteTable(conn, self._q), self.now_ms()
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

    @contextmanager
    def _read(self) -> Iterator[Table]:
        with self._using() as conn:
            try:
                yield _SQLiteTable(conn, self._q)
            except sqlite3.Error as exc:
                raise _store_error(exc, "read failed") from exc

    def close(self) -> None:
        """Close every connection; one in use by another thread closes when its operation ends."""
        with self._lock:
            handles, self._handles = self._handles, []
            self._closed = True
        if self._pid != os.getpid():
            return  # a forked child must not close its parent's connections
        for handle in handles:
            if handle.lock.acquire(blocking=False):
                try:
                    handle.close()
                finally:
                    handle.lock.release()

    def __repr__(self) -> str:
        return f"SQLiteStore({self.path!r}, table={self.table!r})"


def _store_error(exc: sqlite3.Error, doing: str) -> StoreError:
    text = str(exc)
    if isinstance(exc, sqlite3.OperationalError) and ("locked" in text or "busy" in text):
        return StoreUnavailable(f"SQLite {doing}: {text}")
    return StoreError(f"SQLite {doing}: {text}")
