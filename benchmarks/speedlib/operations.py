"""One round of ``store_ops.py``: the baselines and each store operation, timed and counted.

Every job has run one slot before (untimed), so the claims measured are those of a job's
steady state; the round leaves nothing behind on a shared server.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Dict, List

import leasecron.stores
from leasecron.stores import ClaimRequest, Store
from leasecron.stores.postgres import PostgresStore
from leasecron.stores.redis import RedisStore, job_keys

from .bare import bare_round_trip, bare_write
from .counting import CallCounter
from .pg_schema import delete_jobs
from .timing import Timing, timed


OPERATIONS = ("claim (won)", "claim (running)", "claim (brief)", "heartbeat", "finish", "release")
#: Whether the leasecron measured has brief answers (an older one, measured by ``--baseline-ref``, has
#: not: its "claim (brief)" is the whole claim, the one its engine sent).
BRIEF = "brief" in getattr(ClaimRequest, "__dataclass_fields__", {})
#: The finishes of one ``finish_many`` call, timed against as many single finishes.
FINISH_BATCH = 20


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
        if BRIEF:  # the losing claim as the engine sends it
            losing = [ClaimRequest(job, slot, "other", brief=True) for job in jobs]
            batch("claim (brief)", lambda i: store.claim_one(losing[i]))
        else:
            batch("claim (brief)", lambda i: store.claim(jobs[i], slot, runner="other"))
        batch("heartbeat", lambda i: store.heartbeat(jobs[i], slot, won[i].run.token, 30_000))
        half = n // 2
        batch("finish", lambda i: store.finish(jobs[i], slot, won[i].run.token, "success"), half)
        batch("release", lambda i: store.release(jobs[half + i], slot, won[half + i].run.token), n - half)
        finish_batches(store, jobs, slot + 1_000, batch)
    finally:  # leave nothing behind on a shared server
        if isinstance(store, RedisStore):
            store.client.srem(f"{store.prefix}:jobs", *jobs)
            for job in jobs:
                store.client.delete(*job_keys(store.prefix, job))
        elif isinstance(store, PostgresStore):
            delete_jobs(store, jobs)
    return results


def finish_batches(
    store: Store, jobs: List[str], slot: int, batch: Callable[[str, Callable[[int], object], int], None]
) -> None:
    """``finish x20`` (20 single finishes, one after the other) against ``finish_many (20)`` (one
    call), each timed per group of :data:`FINISH_BATCH` runs of ``slot`` (claimed untimed), on
    half of ``jobs`` each; nothing when the jobs are too few for a group, or the leasecron
    measured has no ``finish_many`` (an older one, under ``--baseline-ref``)."""
    groups = len(jobs) // (2 * FINISH_BATCH)
    finish = getattr(leasecron.stores, "Finish", None)
    if not groups or finish is None:
        return
    claimed = [store.claim(job, slot, runner="bench").run for job in jobs[: 2 * FINISH_BATCH * groups]]
    tokens = [run.token for run in claimed if run is not None]
    assert len(tokens) == len(claimed), "every claim of a new slot must win"

    def group(g: int) -> range:
        return range(g * FINISH_BATCH, (g + 1) * FINISH_BATCH)

    def singly(g: int) -> None:
        for i in group(g):
            store.finish(jobs[i], slot, tokens[i], "success")

    def together(g: int) -> None:
        store.finish_many([finish(jobs[i], slot, tokens[i], "success") for i in group(groups + g)])  # type: ignore[attr-defined]

    batch(f"finish x{FINISH_BATCH}", singly, groups)
    batch(f"finish_many ({FINISH_BATCH})", together, groups)
