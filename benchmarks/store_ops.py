"""Store operation latency against the bare round trip of the same store.

    python benchmarks/store_ops.py [--store URL] [--ops N] [--rounds R]

For each operation (claim won, claim lost, heartbeat, finish, release) it
prints the median latency over R rounds of N operations, and its ratio to
the bare round trip measured in the same run:

* SQLite: ``BEGIN IMMEDIATE`` + one ``INSERT`` + ``COMMIT`` on the same file,
  with the same pragmas (WAL, synchronous=NORMAL);
* Redis/Valkey: ``EVALSHA`` of a script that only returns 1, with the same
  four keys a leasecron script takes, on the store's own client (one round
  trip and a script call, nothing more); ``PING`` is shown beside it;
* PostgreSQL: ``SELECT 1`` on an autocommit connection taken from the
  store's own pool (the same kind of connection every operation uses; one
  round trip, no table, no function); a one-row ``INSERT … ON CONFLICT DO
  NOTHING`` committed on it is shown beside it (a write's commit flushes the WAL);
* memory: taking and releasing a ``threading.Lock`` (the floor of any
  operation under the store's lock).

The default store is a fresh SQLite file in a temporary directory.

On PostgreSQL the benchmark leaves nothing behind. Without ``schema=`` in the
URL it creates a fresh schema ``leasecron_bench_<pid>`` (and refuses to run if
one of that name exists, so it never drops what it did not make), runs in it,
and drops it at the end, also after an error, Ctrl-C or SIGTERM (a SIGKILL
leaves it: ``DROP SCHEMA leasecron_bench_<pid> CASCADE``). With ``schema=``
it deletes the rows of the jobs it claimed after each round; the store's
tables and functions stay in that schema (as leasecron itself would create
them on first use), and a schema the benchmark had to create is dropped.
"""

from __future__ import annotations

import argparse
import os
import signal
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator, List, Tuple
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import leasecron
from leasecron.stores import MemoryStore, SQLiteStore, Store
from leasecron.stores.postgres import PostgresStore
from leasecron.stores.redis import RedisStore, job_keys

#: The schema a PostgreSQL benchmark makes for itself when the URL names none.
BENCH_SCHEMA = "leasecron_bench_{pid}"


def timed(fn: Callable[[int], object], n: int) -> float:
    """Microseconds per call of fn(i) for i in range(n)."""
    start = time.perf_counter_ns()
    for i in range(n):
        fn(i)
    return (time.perf_counter_ns() - start) / n / 1000


@contextmanager
def bare_round_trip(store: Store) -> Iterator[Callable[[int], object]]:
    """The baseline: the cheapest operation the store's medium allows."""
    if isinstance(store, SQLiteStore):
        conn = sqlite3.connect(store.path, isolation_level=None)
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
            conn.execute("CREATE TABLE IF NOT EXISTS bench_bare (k INTEGER PRIMARY KEY, v TEXT)")
            conn.execute("DELETE FROM bench_bare")
            base = time.time_ns()

            def op(i: int) -> None:
                conn.execute("BEGIN IMMEDIATE")
                conn.execute("INSERT INTO bench_bare (k, v) VALUES (?, ?)", (base + i, "x"))
                conn.execute("COMMIT")

            yield op
        finally:
            conn.close()
        return
    if isinstance(store, RedisStore):
        client = store.client
        sha = client.script_load("return 1")
        keys = job_keys(store.prefix, "bench-bare")
        yield lambda i: client.evalsha(sha, len(keys), *keys, i)
        return
    if isinstance(store, PostgresStore):
        # A cursor on a connection of the store's own pool (asynchronous, autocommit, each
        # statement awaited with the store's deadline: the same as every operation uses).
        with store._cursor("the bare round trip") as cur:

            def select_1(i: int) -> object:
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
    """A second PostgreSQL baseline: one logged one-row INSERT, committed (a WAL flush)."""
    table = f"{store.schema}.bench_bare"
    with store._cursor("the bare write") as cur:
        cur.execute(f"CREATE TABLE IF NOT EXISTS {table} (k bigint PRIMARY KEY, v text)")
        cur.execute(f"TRUNCATE {table}")
        base = time.time_ns()
        yield lambda i: cur.execute(f"INSERT INTO {table} (k, v) VALUES (%s, 'x') ON CONFLICT DO NOTHING", (base + i,))
        cur.execute(f"DROP TABLE {table}")


def measure(store: Store, n: int) -> dict:
    """One round: each operation n times, microseconds per operation."""
    prefix = f"bench-{time.time_ns()}-"
    jobs = [f"{prefix}{i}" for i in range(n)]  # n jobs, each with its current slot
    slot = store.now_ms() - 5_000
    won: List[leasecron.Claim] = []
    with bare_round_trip(store) as bare:
        results = {"bare round trip": timed(bare, n)}
    if isinstance(store, RedisStore):
        results["PING"] = timed(lambda i: store.client.ping(), n)
    if isinstance(store, PostgresStore):
        with bare_write(store) as write:
            results["INSERT (commit)"] = timed(write, n)
    try:
        results["claim (won)"] = timed(lambda i: won.append(store.claim(jobs[i], slot, runner="bench")), n)
        assert all(c.won for c in won), "every claim of a new slot must win"
        results["claim (running)"] = timed(lambda i: store.claim(jobs[i], slot, runner="other"), n)
        results["heartbeat"] = timed(lambda i: store.heartbeat(jobs[i], slot, won[i].run.token, 30_000), n)
        half = n // 2
        results["finish"] = timed(lambda i: store.finish(jobs[i], slot, won[i].run.token, "success"), half)
        results["release"] = timed(lambda i: store.release(jobs[half + i], slot, won[half + i].run.token), n - half)
    finally:  # leave nothing behind on a shared server
        if isinstance(store, RedisStore):
            store.client.srem(f"{store.prefix}:jobs", *jobs)
            for job in jobs:
                store.client.delete(*job_keys(store.prefix, job))
        elif isinstance(store, PostgresStore):
            delete_jobs(store, jobs)
    return results


# -- PostgreSQL: a schema of the benchmark's own ---------------------------------------


def pg_execute(store: PostgresStore, sql: str, params: Any = None) -> List[Tuple[Any, ...]]:
    """Run one statement on a connection of its own to the store's database (autocommit, blocking;
    not the store's pool, whose first use would create the store's schema); its rows, if any."""
    import psycopg2

    conn = psycopg2.connect(store._pool._dsn)
    try:
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute(sql, params)
            return list(cur.fetchall()) if cur.description is not None else []
    finally:
        conn.close()


def delete_jobs(store: PostgresStore, jobs: List[str]) -> None:
    """Delete the runs and the job rows of ``jobs``."""
    table = f"{store.schema}.{store.table}"
    pg_execute(store, f"DELETE FROM {table} WHERE job = ANY(%s)", (jobs,))
    pg_execute(store, f"DELETE FROM {table}_jobs WHERE job = ANY(%s)", (jobs,))


def url_options(url: str) -> dict:
    """The query options of a store URL."""
    return dict(parse_qsl(urlsplit(url).query, keep_blank_values=True))


def with_option(url: str, key: str, value: str) -> str:
    """``url`` with the query option ``key=value`` added."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True) + [(key, value)]
    return urlunsplit(parts._replace(query=urlencode(query)))


@contextmanager
def postgres_bench_store(url: str) -> Iterator[Tuple[PostgresStore, bool]]:
    """A PostgresStore for ``url`` and whether its schema is the benchmark's own.

    Without ``schema=`` in ``url``: a fresh schema ``leasecron_bench_<pid>``,
    created here (an existing one of that name is an error, never reused).
    With ``schema=``: that schema, created here if it does not exist. A
    schema created here is dropped on the way out, whatever happened.
    """
    options = url_options(url)
    given = options.get("schema")
    if given is None:
        url = with_option(url, "schema", BENCH_SCHEMA.format(pid=os.getpid()))
    if "application_name" not in options:  # so that pg_stat_activity says whose sessions these are
        url = with_option(url, "application_name", f"leasecron-bench-{os.getpid()}")
    store = PostgresStore.from_url(url)
    owned = False
    try:
        exists = pg_execute(store, "SELECT to_regnamespace(%s) IS NOT NULL", (store.schema,))[0][0]
        if exists and given is None:
            raise SystemExit(
                f"schema {store.schema} exists (left by a killed run?); not touching it."
                f" Drop it (DROP SCHEMA {store.schema} CASCADE) or pass ?schema=..."
            )
        if not exists:
            pg_execute(store, f"CREATE SCHEMA {store.schema}")
            owned = True
        yield store, owned
    finally:
        try:
            if owned:
                drop_schema(store)
        finally:
            store.close()


def drop_schema(store: PostgresStore) -> None:
    """DROP SCHEMA ... CASCADE, on a second connection if the first one fails."""
    for attempt in (1, 2):
        try:
            pg_execute(store, f"DROP SCHEMA IF EXISTS {store.schema} CASCADE")
            return
        except Exception as exc:  # noqa: BLE001 - say what is left behind, then give up
            if attempt == 2:
                print(
                    f"could not drop schema {store.schema} ({exc}); drop it by hand:"
                    f" DROP SCHEMA {store.schema} CASCADE",
                    file=sys.stderr,
                )


def exit_on_sigterm() -> None:
    """Turn SIGTERM into SystemExit, so cleanups in ``finally`` run."""
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--store", help="store URL (default: a temporary SQLite file)")
    parser.add_argument("--ops", type=int, default=400, help="operations per round (default 400)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds; the median is shown (default 5)")
    args = parser.parse_args()
    exit_on_sigterm()
    note = ""
    with tempfile.TemporaryDirectory() as tmp:
        url = args.store or f"sqlite:///{os.path.join(tmp, 'bench.db')}"
        if urlsplit(url).scheme.lower() in ("postgresql", "postgres"):
            with postgres_bench_store(url) as (pg, owned):
                note = f", {pg.server_version()}, schema {pg.schema}"
                note += " (created and dropped by the benchmark)" if owned else ""
                rounds = [measure(pg, args.ops) for _ in range(args.rounds)]
            store: Store = pg
        else:
            store = leasecron.open_store(url)
            try:
                rounds = [measure(store, args.ops) for _ in range(args.rounds)]
            finally:
                store.close()
    names = list(rounds[0])
    medians = {name: statistics.median(r[name] for r in rounds) for name in names}
    base = medians["bare round trip"]
    kind = "memory" if isinstance(store, MemoryStore) else store.kind
    where = f"{args.store}{note}" if args.store else "temporary SQLite file"
    print(f"leasecron {leasecron.__version__}, store {kind} ({where})")
    print(f"{args.rounds} rounds x {args.ops} operations, median per operation, Python {sys.version.split()[0]}")
    if isinstance(store, PostgresStore):
        print("bare round trip: SELECT 1 on an autocommit connection of the store's pool")
    print(f"{'operation':<18} {'us/op':>9} {'ops/s':>9} {'x bare':>7}")
    for name in names:
        us = medians[name]
        print(f"{name:<18} {us:9.1f} {1e6 / us:9.0f} {us / base:7.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
