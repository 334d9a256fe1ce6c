"""The baselines of the speed benchmarks: the cheapest operation each store's medium allows.

A store operation's latency is read as a ratio to the bare round trip of the same store,
measured in the same run (``docs/performance.rst``), so that the machine's speed cancels out.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from contextlib import contextmanager
from typing import Callable, Iterator, List

from leasecron.stores import SQLiteStore, Store
from leasecron.stores.postgres import PostgresStore
from leasecron.stores.redis import RedisStore, job_keys

from .pg_schema import pg_execute


@contextmanager
def bare_round_trip(store: Store) -> Iterator[Callable[[int], object]]:
    """The baseline: the cheapest operation the store's medium allows (thread-safe)."""
    if isinstance(store, SQLiteStore):
        local = threading.local()
        opened: List[sqlite3.Connection] = []
        setup = sqlite3.connect(store.path, isolation_level=None)
        setup.execute("PRAGMA journal_mode = WAL")
        setup.execute("CREATE TABLE IF NOT EXISTS bench_bare (k INTEGER PRIMARY KEY, v TEXT)")
        setup.execute("DELETE FROM bench_bare")
        setup.close()
        base = time.time_ns()

        def op(i: int) -> None:
            conn = getattr(local, "conn", None)
            if conn is None:
                conn = local.conn = sqlite3.connect(
                    store.path, isolation_level=None, timeout=30, check_same_thread=False
                )
                conn.execute("PRAGMA synchronous = NORMAL")
                opened.append(conn)
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("INSERT INTO bench_bare (k, v) VALUES (?, ?)", (base + i, "x"))
            conn.execute("COMMIT")

        try:
            yield op
        finally:
            for conn in opened:
                conn.close()
        return
    if isinstance(store, RedisStore):
        client = store.client
        sha = client.script_load("return 1")
        keys = job_keys(store.prefix, "bench-bare")
        yield lambda i: client.evalsha(sha, len(keys), *keys, i)
        return
    if isinstance(store, PostgresStore):
        # SELECT 1 on a connection taken from the store's own pool (asynchronous, autocommit,
        # awaited with the store's deadline) and given back: what every operation does around
        # its one statement.
        def select_1(i: int) -> object:
            with store._cursor("the bare round trip") as cur:
                cur.execute("SELECT 1")
                return cur.fetchone()

        yield select_1
        return
    lock = threading.Lock()

    def locked(i: int) -> None:
        with lock:
            pass

    yield locked


@contextmanager
def bare_write(store: PostgresStore) -> Iterator[Callable[[int], object]]:
    """A second PostgreSQL baseline: a one-row ``INSERT … ON CONFLICT DO NOTHING``, committed
    (a WAL flush), on a connection of the store's pool like every operation."""
    table = f"{store.schema}.bench_bare"
    pg_execute(store, f"CREATE TABLE IF NOT EXISTS {table} (k bigint PRIMARY KEY, v text)")
    pg_execute(store, f"TRUNCATE {table}")
    base = time.time_ns()

    def insert(i: int) -> None:
        with store._cursor("the bare write") as cur:
            cur.execute(f"INSERT INTO {table} (k, v) VALUES (%s, 'x') ON CONFLICT DO NOTHING", (base + i,))

    try:
        yield insert
    finally:
        pg_execute(store, f"DROP TABLE IF EXISTS {table}")
