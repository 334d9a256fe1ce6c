"""One round of ``store_ops.py``: the baselines and each store operation, timed and counted.

Every job has run one slot before (untimed), so the claims measured are those of a job's
steady state; the round leaves nothing behind on a shared server.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Dict, List

from leasecron.stores import Store
from leasecron.stores.postgres import PostgresStore
from leasecron.stores.redis import RedisStore, job_keys

from .bare import bare_round_trip, bare_write
from .counting import CallCounter
from .pg_schema import delete_jobs
from .timing import Timing, timed


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
