"""PostgresStore: the store contract on PostgreSQL, through psycopg2.

Each operation that writes is one statement calling a PL/pgSQL function
(``stores/sql/postgres.sql``, installed by the schema's migrations), on a
connection in autocommit mode: one round trip, one transaction. The function
first locks the job's row in ``<table>_jobs`` (so operations on one job are
serialised across every instance, and the overlap and newer-slot checks see a
settled state), then reads ``clock_timestamp()``, so every lease comparison
uses the server's clock and the order of the operations and of their clocks
agree.

The schema (``schema`` option, default ``public``) holds ``<table>``,
``<table>_jobs``, ``<table>_meta`` (the schema version) and the functions
``<table>_claim`` and so on. It is created on first use and migrated by
version under a transaction-level advisory lock, by any role that may create
tables in the schema: no superuser, no extension. A store opened with
``create=False`` never creates or migrates anything: it fails, naming what is
missing, on a database without the schema or the tables, and reads an older
schema as it is.

Connections come from a small thread-safe pool (at most ``max_connections``;
a caller waits for a free one) or from a psycopg2 pool the caller passes. A
connection that failed (the server restarted, the backend was terminated) is
discarded, and the error raised as :class:`~leasecron.StoreUnavailable`,
which the engine retries, with tenacity, only while the answer matters; the
next call opens a new connection. Connections made from a DSN get a connect
timeout, TCP keepalives and ``tcp_user_timeout`` unless the DSN sets its own.

No call can hang: the store's own connections are psycopg2 *asynchronous*
connections (always autocommit, which is all the store needs), and every
statement waits for its answer with ``select()`` on the socket, for at most
``timeout`` seconds (default 5). A statement with no answer by then (a
stalled network, a server that accepts bytes and never answers, a lock held
elsewhere) closes its connection and raises ``StoreUnavailable``. TCP
keepalives and ``tcp_user_timeout`` cannot catch a peer whose kernel still
acknowledges every byte (a hung server, a stuck proxy); the deadline does.
Connections from a pool passed in are the caller's: they are used as they
are, blocking, without that deadline.
"""

from __future__ import annotations

import os
import select
import threading
import time
import weakref
from contextlib import contextmanager
from typing import Any, Dict, Iterator, List, Optional, Tuple
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

from ..errors import ConfigError, StoreError, StoreUnavailable
from ..runs import Claim, Run
from . import require
from .base import ClaimRequest, Store
from .queries import check_identifier, load_queries
from .records import new_token, read_record
from .urls import masked_url, without_secrets

__all__ = ["PostgresStore", "SCHEMA_VERSION"]

#: The schema version this release writes and reads. 2: the claim function takes the retry of a
#: claim that won (same token and runner) as that attempt again.
SCHEMA_VERSION = 2

#: libpq options the store sets on connections it makes, unless the DSN does.
CONNECT_DEFAULTS = {
    "connect_timeout": "5",
    "keepalives": "1",
    "keepalives_idle": "10",
    "keepalives_interval": "5",
    "keepalives_count": "3",
}
#: Added to :data:`CONNECT_DEFAULTS` where libpq knows it (libpq 12 and newer), in ms: a
#: connection whose sent bytes stay unacknowledged this long is closed by the kernel.
TCP_USER_TIMEOUT_MS = "10000"

#: How long a statement on the store's own connections waits for its answer, in seconds.
DEFAULT_TIMEOUT_S = 5.0

#: How long a caller waits for a free pooled connection.
POOL_WAIT_S = 10.0

#: Which of ``names`` are tables of ``schema`` (a store opened with ``create=False`` checks them).
_TABLES_FOUND = """
    SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = %(schema)s AND c.relname = ANY(%(names)s) AND c.relkind IN ('r', 'p')
"""

_RUN_COLUMNS = (
    "job", "slot_ms", "attempt", "token", "runner", "status", "lease_end_ms",
    "released", "handovers", "reason", "error", "started_ms", "finished_ms",
)  # fmt: skip


def _run(row: Tuple[Any, ...]) -> Run:
    data = dict(zip(_RUN_COLUMNS, row))
    return read_record(data["job"], data["slot_ms"], data).to_run()  # StoreError if it was tampered with


def _no_nul(text: str) -> str:
    # PostgreSQL text cannot hold NUL; an error message may.
    return text.replace("\x00", "\ufffd")


class _Pool:
    """At most ``size`` connections to ``dsn``, handed out one caller at a time.

    A forked child's pools start empty, with fresh locks (``os.register_at_fork``).
    """

    def __init__(self, psycopg2: Any, dsn: str, size: int, timeout_s: float) -> None:
        # timeout_s: for a connect when the DSN's connect_timeout is 0 (libpq: wait for ever)
        self._psycopg2 = psycopg2
        self._dsn = dsn
        self._size = size
        # libpq does not time an asynchronous connect: the pool does, by the DSN's connect_timeout
        given = psycopg2.extensions.parse_dsn(dsn).get("connect_timeout")
        self._connect_timeout_s = float(given) if given and float(given) > 0 else timeout_s
        self._idle: List[Any] = []
        self._count = 0
        self._cond = threading.Condition()
        self._pid = os.getpid()
        self._closed = False
        _POOLS.add(self)

    def _after_fork_in_child(self) -> None:
        # Runs in the child before any of its threads: the parent's connections are not ours, and
        # a parent's thread may have held the lock at the fork (it would never be released here).
        self._cond = threading.Condition()
        self._pid, self._idle, self._count = os.getpid(), [], 0

    def getconn(self) -> Any:
        deadline = time.monotonic() + POOL_WAIT_S
        with self._cond:
            while not self._idle and self._count >= self._size:
                if self._closed:
                    raise StoreError("the PostgreSQL store is closed")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise StoreUnavailable(
                        f"no free PostgreSQL connection within {POOL_WAIT_S} s (pool of {self._size})"
                    )
                self._cond.wait(left)
            if self._closed:
                raise StoreError("the PostgreSQL store is closed")
            if self._idle:
                return self._idle.pop()
            self._count += 1
        try:
            conn = self._psycopg2.connect(self._dsn, async_=True)
            try:
                wait(self._psycopg2, conn, self._connect_timeout_s, "connecting", "connect_timeout")
            except BaseException:
                _close_quietly(conn)
                raise
            return conn
        except BaseException:
            with self._cond:
                self._count -= 1
                self._cond.notify()
            raise

    def putconn(self, conn: Any, close: bool = False) -> None:
        with self._cond:
            if self._pid != os.getpid():
                return
            if close or self._closed or conn.closed:
                self._count -= 1
                _close_quietly(conn)
            else:
                self._idle.append(conn)
            self._cond.notify()

    def closeall(self) -> None:
        with self._cond:
            self._closed = True
            idle, self._idle = self._idle, []
            self._count -= len(idle)
            self._cond.notify_all()
        if self._pid == os.getpid():
            for conn in idle:
                _close_quietly(conn)


_POOLS: "weakref.WeakSet[_Pool]" = weakref.WeakSet()


def _reset_pools_after_fork() -> None:
    for pool in list(_POOLS):
        pool._after_fork_in_child()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_pools_after_fork)


class _Cursor:
    """A psycopg2 cursor whose ``execute`` waits for the answer for at most ``timeout_s``
    on an asynchronous connection (and simply blocks on a caller's connection)."""

    def __init__(self, psycopg2: Any, cursor: Any, timeout_s: float, doing: str) -> None:
        self._psycopg2 = psycopg2
        self._cursor = cursor
        self._timeout_s = timeout_s
        self._doing = doing
        self.connection = cursor.connection

    def execute(self, sql: str, params: Any = None) -> None:
        self._cursor.execute(sql, params)
        if self.connection.async_:
            wait(self._psycopg2, self.connection, self._timeout_s, self._doing)

    @property
    def description(self) -> Any:
        """The columns of the last statement's result (``None`` if it returned no rows)."""
        return self._cursor.description

    def fetchone(self) -> Any:
        return self._cursor.fetchone()

    def fetchall(self) -> List[Any]:
        return list(self._cursor.fetchall())


def wait(psycopg2: Any, conn: Any, timeout_s: float, doing: str, what: str = "the store's timeout") -> None:
    """Drive the asynchronous ``conn`` until its operation is done, for at most ``timeout_s``.

    Past that the connection is closed (its stream is in an unknown state)
    and :class:`~leasecron.StoreUnavailable` raised.
    """
    extensions = psycopg2.extensions
    deadline = time.monotonic() + timeout_s
    while True:
        state = conn.poll()  # raises psycopg2.Error when the operation failed
        if state == extensions.POLL_OK:
            return
        left = deadline - time.monotonic()
        if left > 0:
            fd = conn.fileno()
            if state == extensions.POLL_READ:
                ready = select.select([fd], [], [], left)[0]
            elif state == extensions.POLL_WRITE:
                ready = select.select([], [fd], [], left)[1]
            else:  # pragma: no cover - psycopg2 knows no other state
                raise StoreError(f"PostgreSQL {doing}: unexpected poll state {state!r}")
            if ready:
                continue
        _close_quietly(conn)
        raise StoreUnavailable(f"PostgreSQL {doing}: no answer within {timeout_s:g} s ({what}; connection closed)")


def _close_quietly(conn: Any) -> None:
    try:
        conn.close()
    except Exception:  # noqa: BLE001 - a broken connection may fail to close; it is gone either way
        pass


class PostgresStore(Store):
    """The store contract in a PostgreSQL database (``postgresql://``, ``postgres://``).

    ``dsn`` is a libpq connection string or URL; or pass ``pool``, a psycopg2
    pool (``getconn``/``putconn``) whose connections the store uses in
    autocommit mode. ``schema`` and ``table`` name where the runs live, so
    several applications can share one database. ``max_connections`` bounds
    the store's own pool. ``timeout`` (seconds) bounds the wait for the
    answer to each statement on the store's own connections.

    ``create`` (default true): the first operation creates the schema and
    the tables, or migrates them to this release's version. With
    ``create=False`` the store creates and migrates nothing: an operation
    on a database without the schema or one of the tables raises
    :class:`~leasecron.StoreError` naming it (``schema.table``); a schema of
    an older version is read as it is (an operation that writes may need
    the current one); a newer one is refused, as always. ``create`` may be
    changed before the first operation (the ``leasecron`` commands that only
    read switch it off for an app's store).
    """

    kind = "postgresql"

    def __init__(
        self,
        dsn: Optional[str] = None,
        *,
        pool: Any = None,
        schema: str = "public",
        table: str = "leasecron_runs",
        max_connections: int = 8,
        timeout: float = DEFAULT_TIMEOUT_S,
        create: bool = True,
    ) -> None:
        self._psycopg2 = require("psycopg2", extra="postgres", store="PostgresStore")
        if (dsn is None) == (pool is None):
            raise ConfigError("PostgresStore needs either a DSN or a psycopg2 pool (not both)")
        if not isinstance(max_connections, int) or max_connections < 1:
            raise ConfigError(f"max_connections must be an integer >= 1, not {max_connections!r}")
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= 3600:
            raise ConfigError(f"timeout must be a number of seconds above 0 and at most 3600, not {timeout!r}")
        self._timeout_s = float(timeout)
        self.create = create
        # PostgreSQL folds unquoted names to lower case; so do we, to find them again.
        self.schema = check_identifier(schema, "schema").lower()
        self.table = check_identifier(table).lower()
        self._q = load_queries("postgres", schema=self.schema, table=self.table)
        if pool is not None:
            if not (hasattr(pool, "getconn") and hasattr(pool, "putconn")):
                raise ConfigError(f"pool must be a psycopg2 pool (getconn/putconn), not {pool!r}")
            self._pool: Any = pool
            self._owns_pool = False
            self._label = f"pool={type(pool).__name__}"
        else:
            if not isinstance(dsn, str) or not dsn:
                raise ConfigError(f"PostgreSQL DSN must be a non-empty string, not {dsn!r}")
            self._pool = _Pool(self._psycopg2, _with_defaults(dsn), max_connections, self._timeout_s)
            self._owns_pool = True
            self._label = masked_url(dsn)
        self._schema_lock = threading.Lock()
        self._schema_ready = False  # created or migrated (or found current) by a store that creates
        self._schema_found = False  # found by a store that does not create

    @classmethod
    def from_url(cls, url: str, *, create: bool = True) -> "PostgresStore":
        """Open ``postgresql://[user[:password]@]host[:port]/database``.

        Query options: ``schema``, ``table``, ``max_connections``, ``timeout``; every other
        option is passed to libpq (for example ``sslmode`` or
        ``connect_timeout``). ``create``: as the constructor's.
        """
        parts = urlsplit(url)
        options: Dict[str, Any] = {"create": create}
        libpq: List[Tuple[str, str]] = []
        for key, value in parse_qsl(parts.query, keep_blank_values=True):
            if key in ("schema", "table"):
                options[key] = value
            elif key == "max_connections":
                try:
                    options[key] = int(value)
                except ValueError:
                    raise ConfigError(f"max_connections in {masked_url(url)!r} must be an integer") from None
            elif key == "timeout":
                try:
                    options[key] = float(value)
                except ValueError:
                    raise ConfigError(f"timeout in {masked_url(url)!r} must be a number of seconds") from None
            else:
                libpq.append((key, value))
        dsn = urlunsplit(("postgresql", parts.netloc, parts.path, urlencode(libpq, quote_via=quote), ""))
        store = cls(dsn, **options)
        store._label = masked_url(url)
        return store

    # -- connections ----------------------------------------------------------------

    @contextmanager
    def _cursor(self, doing: str) -> Iterator["_Cursor"]:
        """A cursor on a pooled autocommit connection; a failed connection is discarded."""
        errors = self._psycopg2
        try:
            conn = self._pool.getconn()
        except errors.Error as exc:
            raise _store_error(errors, exc, doing) from exc
        broken = True  # until the block ends normally or with the server's answer to one statement
        try:
            if not conn.async_:
                conn.autocommit = True  # a connection of the caller's pool
            with conn.cursor() as raw:
                cur = _Cursor(errors, raw, self._timeout_s, doing)
                if not self._schema_ready:
                    self._create_schema(cur)
                yield cur
            broken = False
        except errors.Error as exc:
            broken = bool(conn.closed) or _connection_lost(exc)
            raise _store_error(errors, exc, doing) from exc
        finally:
            self._pool.putconn(conn, close=broken or bool(conn.closed))

    def _create_schema(self, cur: "_Cursor") -> None:
        with self._schema_lock:
            if self._schema_ready or (self._schema_found and not self.create):
                return
            q = self._q
            cur.execute(q["reserved_words"], {"names": [self.schema, self.table]})
            reserved = [row[0] for row in cur.fetchall()]
            if reserved:
                raise ConfigError(
                    f"{', '.join(map(repr, reserved))} is a reserved word in PostgreSQL:"
                    " choose another schema or table name"
                )
            if not self.create:
                self._find_schema(cur)
                self._schema_found = True
                return
            cur.execute("BEGIN")
            try:
                cur.execute(q["lock_schema"], {"name": f"leasecron:{self.schema}.{self.table}"})
                cur.execute(q["schema_exists"], {"schema": self.schema})
                if cur.fetchone() is None:
                    cur.execute(q["create_schema"])
                cur.execute(q["create_meta"])
                version = self._version(cur)
                for step in range(version + 1, SCHEMA_VERSION + 1):
                    cur.execute(q[f"migrate_{step}"])
                if version < SCHEMA_VERSION:
                    cur.execute(q["set_version"], {"version": str(SCHEMA_VERSION)})
                cur.execute("COMMIT")
            except BaseException:
                if not cur.connection.closed:
                    cur.execute("ROLLBACK")
                raise
            self._schema_ready = True

    def _find_schema(self, cur: "_Cursor") -> None:
        """What ``create=False`` does instead of creating: check that the schema and the tables
        exist and are not newer than this release, and change nothing."""
        missing = "does not exist (a store with create=False creates nothing)"
        cur.execute(self._q["schema_exists"], {"schema": self.schema})
        if cur.fetchone() is None:
            raise StoreError(f"PostgreSQL schema {self.schema!r} {missing}")
        names = [self.table, f"{self.table}_jobs", f"{self.table}_meta"]
        cur.execute(_TABLES_FOUND, {"schema": self.schema, "names": names})
        found = {row[0] for row in cur.fetchall()}
        for name in names:
            if name not in found:
                raise StoreError(f"PostgreSQL table {self.schema}.{name} {missing}")
        self._version(cur)

    def _version(self, cur: "_Cursor") -> int:
        """The schema version stamped in ``<table>_meta`` (0: none yet); StoreError if it is newer
        than this release's."""
        cur.execute(self._q["get_version"])
        row = cur.fetchone()
        version = int(row[0]) if row else 0
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"PostgreSQL table {self.schema}.{self.table} has schema version {version}, newer"
                f" than this leasecron knows ({SCHEMA_VERSION}): upgrade leasecron"
            )
        return version

    def _one(self, name: str, doing: str, **params: Any) -> Tuple[Any, ...]:
        with self._cursor(doing) as cur:
            cur.execute(self._q[name], params)
            row: Tuple[Any, ...] = cur.fetchone()
            return row

    def _all(self, name: str, doing: str, **params: Any) -> List[Tuple[Any, ...]]:
        with self._cursor(doing) as cur:
            cur.execute(self._q[name], params)
            return list(cur.fetchall())

    # -- the contract (arguments checked by Store) -------------------------------------

    def now_ms(self) -> int:
        return int(self._one("now", "reading the server's clock")[0])

    def _claim(self, request: ClaimRequest) -> Claim:
        params = vars(request)
        if request.token is None:
            params = {**params, "token": new_token()}
        row = self._one("claim", f"claim of {request.job!r}", **params)
        return Claim(row[0], None if row[1] is None else _run(row[1:]))

    def _heartbeat(self, job: str, slot_ms: int, token: str, lease_ms: int) -> bool:
        params = {"job": job, "slot_ms": slot_ms, "token": token, "lease_ms": lease_ms}
        return bool(self._one("heartbeat", f"heartbeat of {job!r}", **params)[0])

    def _finish(self, job: str, slot_ms: int, token: str, status: str, error: Optional[str]) -> bool:
        params = {"job": job, "slot_ms": slot_ms, "token": token, "status": status}
        params["error"] = None if error is None else _no_nul(error)
        return bool(self._one("finish", f"finish of {job!r}", **params)[0])

    def _release(self, job: str, slot_ms: int, token: str) -> bool:
        params = {"job": job, "slot_ms": slot_ms, "token": token}
        return bool(self._one("release", f"release of {job!r}", **params)[0])

    def _get_run(self, job: str, slot_ms: int) -> Optional[Run]:
        rows = self._all("get", f"reading {job!r}", job=job, slot_ms=slot_ms)
        return _run(rows[0]) if rows else None

    def _unfinished(self, job: str) -> List[Run]:
        return [_run(row) for row in self._all("unfinished", f"reading {job!r}", job=job)]

    def _runs(self, job: str, limit: int) -> List[Run]:
        return [_run(row) for row in self._all("runs", f"reading {job!r}", job=job, limit=limit)]

    def _jobs(self) -> List[str]:
        return [row[0] for row in self._all("jobs", "listing jobs")]

    def server_version(self) -> str:
        """``PostgreSQL <version>`` of the server."""
        with self._cursor("reading the server version") as cur:
            cur.execute("SHOW server_version")
            return f"PostgreSQL {cur.fetchone()[0]}"

    def durability_warnings(self) -> List[str]:
        """Warn when a commit can be acknowledged before it is safely on disk."""
        with self._cursor("reading the server's settings") as cur:
            cur.execute(self._q["durability"])
            settings = dict(cur.fetchall())
        warnings = []
        if settings.get("fsync") == "off":
            warnings.append("fsync is off: a crash of the server's host can lose or corrupt leases")
        if settings.get("synchronous_commit") == "off":
            warnings.append(
                "synchronous_commit is off: a crash of the server can lose the last claims and"
                " heartbeats it acknowledged"
            )
        return warnings

    def close(self) -> None:
        """Close the store's own pool; a pool passed in stays the caller's."""
        if self._owns_pool:
            self._pool.closeall()

    def __repr__(self) -> str:
        return f"PostgresStore({self._label!r}, schema={self.schema!r}, table={self.table!r})"


#: What the server answers a connection whose role it refuses. libpq reports these without a
#: SQLSTATE, so they are recognised by their text.
_AUTH_REFUSALS = ("authentication failed", "role \"", "no pg_hba.conf entry", "no password supplied")


def _store_error(psycopg2: Any, exc: Exception, doing: str) -> StoreError:
    text = f"PostgreSQL {doing}: {type(exc).__name__}: {str(exc).strip()}"
    if isinstance(exc, psycopg2.OperationalError) and getattr(exc, "pgcode", None) is None:
        message = str(exc)
        if any(refusal in message for refusal in _AUTH_REFUSALS):
            # not worth retrying: the same role is refused again
            return StoreError(f"PostgreSQL {doing}: authentication failed: {type(exc).__name__}: {message.strip()}")
    errors = psycopg2.errors
    retryable = (
        psycopg2.OperationalError,
        psycopg2.InterfaceError,
        errors.SerializationFailure,
        errors.DeadlockDetected,
    )
    if isinstance(exc, retryable):
        return StoreUnavailable(text)
    return StoreError(text)


def _connection_lost(exc: Exception) -> bool:
    """Whether ``exc`` leaves its connection unusable (not a server's answer to one statement).

    Errors libpq reports itself carry no SQLSTATE; classes 08 (connection
    exception) and 57P (operator intervention: shutdown, terminated backend)
    end the session too.
    """
    code = getattr(exc, "pgcode", None)
    return code is None or code.startswith(("08", "57P"))


def _with_defaults(dsn: str) -> str:
    """``dsn`` with :data:`CONNECT_DEFAULTS` for the options it does not set."""
    extensions = require("psycopg2.extensions", extra="postgres", store="PostgresStore")
    try:
        given = extensions.parse_dsn(dsn)
    except Exception as exc:  # psycopg2.ProgrammingError: a DSN libpq cannot read; it may quote the password
        raise ConfigError(f"bad PostgreSQL DSN {masked_url(dsn)!r}: {without_secrets(str(exc).strip(), dsn)}") from exc
    for port in str(given.get("port") or "").split(","):
        if port and not (port.isdigit() and 1 <= int(port) <= 65535):  # libpq only says so when it connects
            raise ConfigError(
                f"bad PostgreSQL DSN {masked_url(dsn)!r}: port must be a number from 1 to 65535,"
                f" not {without_secrets(port, dsn)!r}"
            )
    defaults = dict(CONNECT_DEFAULTS)
    if extensions.libpq_version() >= 120000:
        defaults["tcp_user_timeout"] = TCP_USER_TIMEOUT_MS
    extra = {k: v for k, v in defaults.items() if k not in given}
    return str(extensions.make_dsn(dsn, **extra)) if extra else dsn

