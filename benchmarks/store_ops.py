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
* memory: taking and releasing a ``threading.Lock`` (the floor of any
  operation under the store's lock).

The default store is a fresh SQLite file in a temporary directory.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from typing import Callable, List

import leasecron
from leasecron.stores import MemoryStore, SQLiteStore, Store
from leasecron.stores.redis import RedisStore, job_keys


def timed(fn: Callable[[int], object], n: int) -> float:
    """Microseconds per call of fn(i) for i in range(n)."""
    start = time.perf_counter_ns()
    for i in range(n):
        fn(i)
    return (time.perf_counter_ns() - start) / n / 1000


def bare_round_trip(store: Store) -> Callable[[int], object]:
    """The baseline: the cheapest write the store's medium allows."""
    if isinstance(store, SQLiteStore):
        conn = sqlite3.connect(store.path, isolation_level=None)
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("CREATE TABLE IF NOT EXISTS bench_bare (k INTEGER PRIMARY KEY, v TEXT)")
        conn.execute("DELETE FROM bench_bare")
        base = time.time_ns()

        def op(i: int) -> None:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("INSERT INTO bench_bare (k, v) VALUES (?, ?)", (base + i, "x"))
            conn.execute("COMMIT")

        return op
    if isinstance(store, RedisStore):
        client = store.client
        sha = client.script_load("return 1")
        keys = job_keys(store.prefix, "bench-bare")
        return lambda i: client.evalsha(sha, len(keys), *keys, i)
    lock = threading.Lock()

    def locked(i: int) -> None:
        with lock:
            pass

    return locked


def measure(store: Store, n: int) -> dict:
    """One round: each operation n times, microseconds per operation."""
    prefix = f"bench-{time.time_ns()}-"
    jobs = [f"{prefix}{i}" for i in range(n)]  # n jobs, each with its current slot
    slot = store.now_ms() - 5_000
    won: List[leasecron.Claim] = []
    results = {"bare round trip": timed(bare_round_trip(store), n)}
    if isinstance(store, RedisStore):
        results["PING"] = timed(lambda i: store.client.ping(), n)
    results["claim (won)"] = timed(lambda i: won.append(store.claim(jobs[i], slot, runner="bench")), n)
    assert all(c.won for c in won), "every claim of a new slot must win"
    results["claim (running)"] = timed(lambda i: store.claim(jobs[i], slot, runner="other"), n)
    results["heartbeat"] = timed(lambda i: store.heartbeat(jobs[i], slot, won[i].run.token, 30_000), n)
    half = n // 2
    results["finish"] = timed(lambda i: store.finish(jobs[i], slot, won[i].run.token, "success"), half)
    results["release"] = timed(lambda i: store.release(jobs[half + i], slot, won[half + i].run.token), n - half)
    if isinstance(store, RedisStore):  # leave nothing behind on a shared server
        store.client.srem(f"{store.prefix}:jobs", *jobs)
        for job in jobs:
            store.client.delete(*job_keys(store.prefix, job))
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--store", help="store URL (default: a temporary SQLite file)")
    parser.add_argument("--ops", type=int, default=400, help="operations per round (default 400)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds; the median is shown (default 5)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        url = args.store or f"sqlite:///{os.path.join(tmp, 'bench.db')}"
        store = leasecron.open_store(url)
        rounds = [measure(store, args.ops) for _ in range(args.rounds)]
        store.close()
    names = list(rounds[0])
    medians = {name: statistics.median(r[name] for r in rounds) for name in names}
    base = medians["bare round trip"]
    kind = "memory" if isinstance(store, MemoryStore) else store.kind
    print(f"leasecron {leasecron.__version__}, store {kind} ({url if args.store else 'temporary SQLite file'})")
    print(f"{args.rounds} rounds x {args.ops} operations, median per operation, Python {sys.version.split()[0]}")
    print(f"{'operation':<18} {'us/op':>9} {'ops/s':>9} {'x bare':>7}")
    for name in names:
        us = medians[name]
        print(f"{name:<18} {us:9.1f} {1e6 / us:9.0f} {us / base:7.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
