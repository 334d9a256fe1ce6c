"""Store operation latency against the bare round trip of the same store.

    python benchmarks/store_ops.py [--store URL] [--ops N] [--rounds R] [--threads 1,8] [--baseline-ref REF]

For each operation (claim won, claim lost, heartbeat, finish, release) it
prints p50 and p99 latency and ops/s with 1 and with 8 threads (medians over
R rounds of N operations), the ratio of each p50 to the bare round trip
measured in the same run, and what each operation cost the store, counted:
round trips on Redis/Valkey (commands sent by the store's client), statements
on PostgreSQL (sent by the store's cursor), transactions on SQLite. Every
job has run one slot before (untimed): the claims measured are those of a
job's steady state. The baselines:

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

``--baseline-ref REF`` compares two versions instead, in one invocation: the
``leasecron`` of git commit REF (before) and the one next to this script
(after), each in a process of its own on a store of its own, measured the same
way in alternating rounds; it prints after/before per operation, and the
issue-14 target (a claim within 5 % of the baseline's). Its rounds are many
and short unless told (``--ops 50 --rounds 201``: see
``benchmarks/speedlib/baseline.py``). For example::

    python benchmarks/store_ops.py --baseline-ref a486df3 --store postgresql://root@127.0.0.1/test

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
import dataclasses
import os
import signal
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import leasecron
from leasecron.stores import MemoryStore, SQLiteStore, Store
from leasecron.stores.postgres import PostgresStore
from leasecron.stores.redis import RedisStore, job_keys


@dataclasses.dataclass
class Timing:
    """One batch of operations: latency percentiles (µs), throughput, and store calls per operation."""

    p50: float
    p99: float
    ops_s: float
    calls: Optional[float] = None


def timed(fn: Callable[[int], object], n: int, threads: int = 1) -> Timing:
    """Call ``fn(i)`` for i in range(n), spread over ``threads`` threads (i interleaved):
    each call's latency, and the calls per second of the whole batch."""
    chunks = [range(t, n, threads) for t in range(threads)]
    latencies: List[List[int]] = [[] for _ in chunks]
    errors: List[BaseException] = []
    barrier = threading.Barrier(threads + 1)

    def work(k: int) -> None:
        out = latencies[k]
        barrier.wait()
        try:
            for i in chunks[k]:
                t0 = time.perf_counter_ns()
                fn(i)
                out.append(time.perf_counter_ns() - t0)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            errors.append(exc)

    workers = [threading.Thread(target=work, args=(k,), daemon=True) for k in range(threads)]
    for w in workers:
        w.start()
    barrier.wait()
    start = time.perf_counter_ns()
    for w in workers:
        w.join()
    wall_ns = time.perf_counter_ns() - start
    if errors:
        raise errors[0]
    all_ns = sorted(x for out in latencies for x in out)
    return Timing(
        p50=all_ns[len(all_ns) // 2] / 1000,
        p99=all_ns[min(len(all_ns) - 1, int(len(all_ns) * 0.99))] / 1000,
        ops_s=n / (wall_ns / 1e9),
    )


class CallCounter:
    """Counts what each operation costs the store: round trips to Redis/Valkey (commands sent
    by the store's client, counted at its ``execute_command``), PostgreSQL statements sent
    (counted at the store's cursor), SQLite transactions begun (a trace callback on the
    store's connections). ``None`` for the memory store."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._count = 0
        self._lock = threading.Lock()
        self.unit = ""
        if isinstance(store, PostgresStore):
            original = store._cursor

            @contextmanager
            def counting(doing: str) -> Iterator[Any]:
                with original(doing) as cur:
                    yield _CountingCursor(cur, self._add)

            store._cursor = counting  # type: ignore[method-assign]
            self.unit = "statements"
        elif isinstance(store, SQLiteStore):
            original_connect = store._connect

            def connect() -> sqlite3.Connection:
                conn = original_connect()
                conn.set_trace_callback(lambda sql: self._add() if sql.startswith("BEGIN") else None)
                return conn

            store._connect = connect  # type: ignore[method-assign]
            self.unit = "transactions"
        elif isinstance(store, RedisStore):
            client = store.client
            send = client.execute_command

            def execute_command(*args: Any, **options: Any) -> Any:
                self._add()
                return send(*args, **options)

            client.execute_command = execute_command
            self.unit = "round trips"

    def _add(self) -> None:
        with self._lock:
            self._count += 1

    def total(self) -> Optional[int]:
        """Calls so far (None where nothing is counted)."""
        if not self.unit:
            return None
        with self._lock:
            return self._count

    def per_op(self, fn: Callable[[], Timing], n: int) -> Timing:
        """Run ``fn`` (a batch of ``n`` operations) and note its calls per operation."""
        before = self.total()
        timing = fn()
        after = self.total()
        if before is not None and after is not None:
            timing.calls = (after - before) / n
        return timing


class _CountingCursor:
    def __init__(self, cursor: Any, add: Callable[[], None]) -> None:
        self._cursor = cursor
        self._add = add

    def execute(self, sql: str, params: Any = None) -> None:
        self._add()
        self._cursor.execute(sql, params)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cursor, name)


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


OPERATIONS = ("claim (won)", "claim (running)", "heartbeat", "finish", "release")


def measure(store: Store, n: int, threads: int, counter: CallCounter) -> Dict[str, Timing]:
    """One round: the baselines and each operation, ``n`` times over ``threads`` threads."""
    prefix = f"bench-{time.time_ns()}-"
    jobs = [f"{prefix}{i}" for i in range(n)]  # n jobs, each with its current slot
    slot = store.now_ms() - 5_000
    won: List[Any] = [None] * n
    results: Dict[str, Timing] = {}

    def batch(name: str, fn: Callable[[int], object], count: int = n) -> None:
        results[name] = counter.per_op(lambda: timed(fn, count, threads), count)

    with bare_round_trip(store) as bare:
        results["bare round trip"] = timed(bare, n, threads)
    if isinstance(store, RedisStore):
        results["PING"] = timed(lambda i: store.client.ping(), n, threads)
    if isinstance(store, PostgresStore):
        with bare_write(store) as write:
            results["bare INSERT"] = timed(write, n, threads)

    def claim(i: int) -> None:
        won[i] = store.claim(jobs[i], slot, runner="bench")

    try:
        # the steady state: each job already ran a slot (untimed), as a job claimed every interval
        for job in jobs:
            first = store.claim(job, slot - 60_000, runner="bench", max_late_ms=3_600_000)
            assert first.run is not None
            store.finish(job, slot - 60_000, first.run.token, "success")
        batch("claim (won)", claim)
        assert all(c.won for c in won), "every claim of a new slot must win"
        batch("claim (running)", lambda i: store.claim(jobs[i], slot, runner="other"))
        batch("heartbeat", lambda i: store.heartbeat(jobs[i], slot, won[i].run.token, 30_000))
        half = n // 2
        batch("finish", lambda i: store.finish(jobs[i], slot, won[i].run.token, "success"), half)
        batch("release", lambda i: store.release(jobs[half + i], slot, won[half + i].run.token), n - half)
    finally:  # leave nothing behind on a shared server
        if isinstance(store, RedisStore):
            store.client.srem(f"{store.prefix}:jobs", *jobs)
            for job in jobs:
                store.client.delete(*job_keys(store.prefix, job))
        elif isinstance(store, PostgresStore):
            delete_jobs(store, jobs)
    return results


#: The rounds of ``--baseline-ref`` unless told: many short ones (speedlib/baseline.py says why).
BASELINE_OPS = 50
BASELINE_ROUNDS = 201

#: The targets of issue 6: (operation, baseline, at most this many times the baseline's p50).
TARGETS = {
    "redis": [("claim (won)", "bare round trip", 1.5), ("claim (running)", "bare round trip", 1.5)],
    "postgresql": [("claim (won)", "bare INSERT", 1.25), ("claim (running)", "bare round trip", 1.5)],
    "sqlite": [("claim (won)", "bare round trip", 1.5), ("claim (running)", "bare round trip", 1.5)],
}


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
def postgres_bench_store(
    url: str, name: str = "bench", jobs: Sequence[str] = ()
) -> Iterator[Tuple[PostgresStore, bool]]:
    """A PostgresStore for ``url`` and whether its schema is the benchmark's own.

    Without ``schema=`` in ``url``: a fresh schema ``leasecron_<name>_<pid>``,
    created here (an existing one of that name is an error, never reused).
    With ``schema=``: that schema, created here if it does not exist; if it
    exists and any of ``jobs`` has runs there, an error (never touched), and
    the rows of ``jobs`` are deleted on the way out. A schema created here is
    dropped on the way out, whatever happened.
    """
    options = url_options(url)
    given = options.get("schema")
    if given is None:
        url = with_option(url, "schema", f"leasecron_{name}_{os.getpid()}")
    if "application_name" not in options:  # so that pg_stat_activity says whose sessions these are
        url = with_option(url, "application_name", f"leasecron-{name}-{os.getpid()}")
    store = PostgresStore.from_url(url)
    owned = False
    try:
        exists = pg_execute(store, "SELECT to_regnamespace(%s) IS NOT NULL", (store.schema,))[0][0]
        if exists and given is None:
            raise SystemExit(
                f"schema {store.schema} exists (left by a killed run?); not touching it."
                f" Drop it (DROP SCHEMA {store.schema} CASCADE) or pass ?schema=..."
            )
        if exists and jobs and set(store.jobs()) & set(jobs):
            raise SystemExit(f"jobs of this benchmark already have runs in schema {store.schema}; not touching them")
        if not exists:
            pg_execute(store, f"CREATE SCHEMA {store.schema}")
            owned = True
        yield store, owned
    finally:
        try:
            if owned:
                drop_schema(store)
            elif jobs and store._schema_ready:
                delete_jobs(store, list(jobs))
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


def run_rounds(store: Store, ops: int, rounds: int, threads: int, counter: CallCounter) -> Dict[str, Timing]:
    """``rounds`` rounds; per figure the median over the rounds."""
    done = [measure(store, ops, threads, counter) for _ in range(rounds)]

    def median(name: str, field: str) -> Optional[float]:
        values = [getattr(r[name], field) for r in done if getattr(r[name], field) is not None]
        return statistics.median(values) if values else None

    return {
        name: Timing(
            p50=median(name, "p50") or 0.0,
            p99=median(name, "p99") or 0.0,
            ops_s=median(name, "ops_s") or 0.0,
            calls=median(name, "calls"),
        )
        for name in done[0]
    }


def report(kind: str, unit: str, threads: int, figures: Dict[str, Timing]) -> None:
    """The table of one thread count, and the targets."""
    base = figures["bare round trip"].p50
    print(f"\n{threads} thread{'s' if threads > 1 else ''}:")
    print(f"{'operation':<18} {'p50 us':>9} {'p99 us':>9} {'ops/s':>9} {'x bare':>7} {unit + '/op':>16}")
    for name, t in figures.items():
        calls = "" if t.calls is None else f"{t.calls:.2f}"
        print(f"{name:<18} {t.p50:9.1f} {t.p99:9.1f} {t.ops_s:9.0f} {t.p50 / base:7.2f} {calls:>16}")
    for op, baseline, limit in TARGETS.get(kind, []):
        ratio = figures[op].p50 / figures[baseline].p50
        verdict = "met" if ratio <= limit else "MISSED"
        print(f"target {op} <= {limit}x {baseline} (p50): {ratio:.2f}x, {verdict}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--store", help="store URL (default: a temporary SQLite file)")
    parser.add_argument("--ops", type=int, help="operations per round (default 400; with --baseline-ref 50)")
    parser.add_argument("--rounds", type=int, help="rounds; the median is shown (default 5; with --baseline-ref 201)")
    parser.add_argument("--threads", default="1,8", help="thread counts, comma-separated (default 1,8)")
    parser.add_argument("--baseline-ref", metavar="REF", help="measure the leasecron of git commit REF too, beside"
                        " this one, in one run (speedlib/baseline.py)")  # fmt: skip
    parser.add_argument("--serve", choices=["before", "after"], help=argparse.SUPPRESS)  # a --baseline-ref child
    parser.add_argument("--tmp", help=argparse.SUPPRESS)
    args = parser.parse_args()
    short = bool(args.baseline_ref or args.serve)  # many short rounds: see speedlib/baseline.py
    args.ops = args.ops if args.ops is not None else (BASELINE_OPS if short else 400)
    args.rounds = args.rounds if args.rounds is not None else (BASELINE_ROUNDS if short else 5)
    thread_counts = [int(t) for t in args.threads.split(",")]
    if args.serve or args.baseline_ref:
        from speedlib import baseline  # benchmarks/ is on sys.path: this file's directory

        args.script = os.path.abspath(__file__)
        return baseline.serve(args) if args.serve else baseline.compare(args)
    exit_on_sigterm()
    note = ""
    results: Dict[int, Dict[str, Timing]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        url = args.store or f"sqlite:///{os.path.join(tmp, 'bench.db')}"
        if urlsplit(url).scheme.lower() in ("postgresql", "postgres"):
            with postgres_bench_store(url) as (pg, owned):
                note = f", {pg.server_version()}, schema {pg.schema}"
                note += " (created and dropped by the benchmark)" if owned else ""
                counter = CallCounter(pg)
                for threads in thread_counts:
                    results[threads] = run_rounds(pg, args.ops, args.rounds, threads, counter)
            store: Store = pg
        else:
            store = leasecron.open_store(url)
            counter = CallCounter(store)
            try:
                note = f", {store.server_version()}" if not isinstance(store, MemoryStore) else ""
                for threads in thread_counts:
                    results[threads] = run_rounds(store, args.ops, args.rounds, threads, counter)
            finally:
                store.close()
    kind = "memory" if isinstance(store, MemoryStore) else store.kind
    where = f"{args.store}{note}" if args.store else f"temporary SQLite file{note}"
    print(f"leasecron {leasecron.__version__}, store {kind} ({where})")
    print(f"{args.rounds} rounds x {args.ops} operations; medians over the rounds; Python {sys.version.split()[0]}")
    print("bare round trip: " + BASELINES.get(kind, "taking and releasing a lock"))
    if counter.unit:
        print(f"{counter.unit}/op: {COUNTED[counter.unit]}")
    for threads, figures in results.items():
        report("redis" if kind == "valkey" else kind, counter.unit or "calls", threads, figures)
    return 0


#: What the baseline is, per store kind.
BASELINES = {
    "sqlite": "BEGIN IMMEDIATE + one INSERT + COMMIT on the same file (WAL, synchronous=NORMAL)",
    "redis": "EVALSHA of 'return 1' with a job's four keys, on the store's client (PING beside it)",
    "valkey": "EVALSHA of 'return 1' with a job's four keys, on the store's client (PING beside it)",
    "postgresql": "SELECT 1 on a connection of the store's pool (bare INSERT: one row, ON CONFLICT DO NOTHING)",
}
#: How the calls per operation are counted.
COUNTED = {
    "round trips": "commands the store's client sent (a script's own calls run on the server)",
    "statements": "statements the store sent, counted at its cursor",
    "transactions": "BEGINs on the store's connections (SQLite is in-process: no round trip)",
}


if __name__ == "__main__":
    sys.exit(main())
