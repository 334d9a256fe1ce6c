"""The PostgreSQL store's connections: a fork-safe pool, and cursors whose statements cannot hang.

The store's own connections are psycopg2 *asynchronous* connections (always autocommit, which is
all the store needs): :class:`Cursor` waits for each statement's answer with ``select()`` on the
socket (:func:`wait`) for at most the store's ``timeout``, then closes the connection and raises
:class:`~leasecron.StoreUnavailable`. The one idea: keepalives and ``tcp_user_timeout``
(:func:`with_defaults`) cannot catch a peer whose kernel still acknowledges every byte (a hung
server, a stuck proxy); the deadline does. A pool the caller passes in is used as it is,
blocking, without that deadline.
"""

from __future__ import annotations

import os
import select
import threading
import time
from contextlib import contextmanager
from typing import Any, Iterator, List

from ..errors import ConfigError, StoreError, StoreUnavailable
from . import require
from .forks import forget_in_child
from .urls import masked_url, without_secrets

__all__ = [
    "CONNECT_DEFAULTS",
    "DEFAULT_TIMEOUT_S",
    "POOL_WAIT_S",
    "TCP_USER_TIMEOUT_MS",
    "Cursor",
    "Pool",
    "pooled_cursor",
    "store_error",
    "unconfirmed",
    "wait",
    "with_defaults",
]

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


class Pool:
    """At most ``size`` connections to ``dsn``, handed out one caller at a time (a caller waits
    for a free one for at most :data:`POOL_WAIT_S`).

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
        forget_in_child(self)

    def _after_fork_in_child(self) -> None:
        # Runs in the child before any of its threads: the parent's connections are not ours, and
        # a parent's thread may have held the lock at the fork (it would never be released here).
        self._cond = threading.Condition()
        self._pid, self._idle, self._count = os.getpid(), [], 0

    def getconn(self) -> Any:
        """An idle connection, or a new one while fewer than ``size`` are open; else wait for one
        (:class:`~leasecron.StoreUnavailable` after :data:`POOL_WAIT_S`)."""
        deadline = time.monotonic() + POOL_WAIT_S
        with self._cond:
            while True:
                if self._closed:
                    raise StoreError("the PostgreSQL store is closed")
                idle = self._take_idle()
                if idle is not None:
                    return idle
                if self._count < self._size:
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    raise StoreUnavailable(
                        f"no free PostgreSQL connection within {POOL_WAIT_S} s (pool of {self._size})"
                    )
                self._cond.wait(left)
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

    def _take_idle(self) -> Any:
        """An idle connection the server has sent nothing on since its last answer, or None.

        One it did write to is closed instead: an idle session gets only its end (a killed,
        stopped or failed-over server, a terminated backend), and handing it out would fail the
        caller's statement.
        """
        while self._idle:
            conn = self._idle.pop()
            if not select.select([conn.fileno()], [], [], 0)[0]:
                return conn
            self._count -= 1
            _close_quietly(conn)
        return None

    def discard_idle(self) -> None:
        """Close the idle connections: after one was lost or reached a server that refuses writes,
        the others went to the same server, and new ones find the primary (``target_session_attrs``)."""
        with self._cond:
            idle, self._idle = self._idle, []
            self._count -= len(idle)
            self._cond.notify_all()
        if self._pid == os.getpid():
            for conn in idle:
                _close_quietly(conn)

    def putconn(self, conn: Any, close: bool = False) -> None:
        """Give ``conn`` back: kept idle, or closed if ``close``, it is closed or the pool is."""
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
        """Close the idle connections; one in use is closed when it is given back."""
        with self._cond:
            self._closed = True
        self.discard_idle()


class Cursor:
    """A psycopg2 cursor whose ``execute`` waits for the answer for at most ``timeout_s``
    on an asynchronous connection (and simply blocks on a caller's connection)."""

    def __init__(self, psycopg2: Any, cursor: Any, timeout_s: float, doing: str) -> None:
        self._psycopg2 = psycopg2
        self._cursor = cursor
        self._timeout_s = timeout_s
        self._doing = doing
        self.connection = cursor.connection

    def execute(self, sql: str, params: Any = None) -> None:
        """Run ``sql`` with ``params`` and wait for the answer."""
        self._cursor.execute(sql, params)
        if self.connection.async_:
            wait(self._psycopg2, self.connection, self._timeout_s, self._doing)
            # psycopg2 moves the notices that came in with the answer (a cancelled wait for the
            # synchronous standbys: rule 22) into ``notices`` at the connection's next poll only
            self.connection.poll()
        if self.connection.notices:
            unconfirmed(self.connection.notices, self._doing)

    @property
    def description(self) -> Any:
        """The columns of the last statement's result (``None`` if it returned no rows)."""
        return self._cursor.description

    def fetchone(self) -> Any:
        """The next row of the last statement's result, or ``None``."""
        return self._cursor.fetchone()

    def fetchall(self) -> List[Any]:
        """The remaining rows of the last statement's result."""
        return list(self._cursor.fetchall())


#: What the server says when it stopped waiting for the synchronous standbys of a commit it
#: already made locally (a ``statement_timeout``, a cancel): the answer comes back as success.
_SYNC_WAIT_CANCELLED = "wait for synchronous replication"


def unconfirmed(notices: List[str], doing: str) -> None:
    """Raise :class:`~leasecron.StoreUnavailable` when one of the connection's ``notices`` says a
    commit was not confirmed by the synchronous standbys (protocol rule 22: such a write is never
    acted on; the engine sends it again, as after a Redis ``WAIT`` that fell short). The notices
    are consumed either way."""
    said, notices[:] = list(notices), []
    for notice in said:
        if _SYNC_WAIT_CANCELLED in notice:
            raise StoreUnavailable(
                f"PostgreSQL {doing}: the commit was not confirmed by the synchronous standbys, so a failover"
                f" could lose it ({notice.strip().splitlines()[0]})"
            )


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


@contextmanager
def pooled_cursor(psycopg2: Any, pool: Any, timeout_s: float, doing: str) -> Iterator[Cursor]:
    """A cursor on an autocommit connection of ``pool``, for one operation (``doing``, for
    messages); a connection that failed is discarded, and every psycopg2 error raised as
    :func:`store_error`."""
    try:
        conn = pool.getconn()
    except psycopg2.Error as exc:
        raise store_error(psycopg2, exc, doing) from exc
    broken = True  # until the block ends normally or with the server's answer to one statement
    lost = False  # the connection is gone, or its server refuses writes: so may the pool's others be
    try:
        if not conn.async_:
            conn.autocommit = True  # a connection of the caller's pool
        with conn.cursor() as raw:
            yield Cursor(psycopg2, raw, timeout_s, doing)
        broken = False
    except psycopg2.Error as exc:
        lost = _connection_lost(exc)
        broken = bool(conn.closed) or lost
        raise store_error(psycopg2, exc, doing) from exc
    finally:
        lost = lost or bool(conn.closed)  # closed: by libpq, or by wait() at the store's timeout
        pool.putconn(conn, close=broken or lost)
        if lost and isinstance(pool, Pool):
            pool.discard_idle()


#: What the server answers a connection whose role it refuses. libpq reports these without a
#: SQLSTATE, so they are recognised by their text.
_AUTH_REFUSALS = ("authentication failed", "role \"", "no pg_hba.conf entry", "no password supplied")


def store_error(psycopg2: Any, exc: Exception, doing: str) -> StoreError:
    """The store's error for psycopg2's ``exc`` while ``doing``: :class:`~leasecron.StoreUnavailable`
    for the failures worth retrying, else :class:`~leasecron.StoreError`."""
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
        errors.ReadOnlySqlTransaction,  # a standby, or a demoted primary: the primary is elsewhere
    )
    if isinstance(exc, retryable):
        return StoreUnavailable(text)
    return StoreError(text)


def _connection_lost(exc: Exception) -> bool:
    """Whether ``exc`` leaves its connection unusable (not a server's answer to one statement).

    Errors libpq reports itself carry no SQLSTATE; classes 08 (connection
    exception) and 57P (operator intervention: shutdown, terminated backend)
    end the session too. So does 25006 (``cannot execute ... in a read-only
    transaction``): the session is on a standby or a demoted primary, where
    no write will ever succeed; a new connection finds the primary.
    """
    code = getattr(exc, "pgcode", None)
    return code is None or code.startswith(("08", "57P")) or code == "25006"


def with_defaults(dsn: str) -> str:
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
