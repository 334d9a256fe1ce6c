"""Catch-up: what a starting instance does about the runs and the slot of a job that it missed.

On start, and for a job registered while running, each job is *recovered*
(``docs/protocol.rst``, "Start-up: catch-up"): :func:`recovery` reads its
unfinished runs and says which to back up, how soon, and whether the latest
slot is caught up; the engine then does it, and tries again with a backoff
while the store does not answer.
"""

from __future__ import annotations

import dataclasses
from typing import List, Optional, Tuple

from ..jobs import Job
from ..runs import Run
from ..stores import Store
from .clock import StoreClock
from .store_calls import call_until

__all__ = ["Recovery", "plan_recovery", "recovery"]


@dataclasses.dataclass(frozen=True)
class Recovery:
    """What to do about a job on start: back up each run of ``watch`` (slot, delay before its
    first check: 0 for now, None for the usual 1-2 heartbeats), and claim ``catch_up`` (the
    latest slot, when it was missed and is not ``catch_up_ms`` old) with reason ``catch-up``."""

    watch: Tuple[Tuple[int, Optional[float]], ...] = ()
    catch_up: Optional[int] = None


def plan_recovery(job: Job, unfinished: List[Run], now_ms: int) -> Recovery:
    """The recovery of ``job`` whose unfinished runs are ``unfinished``, at the store's ``now_ms``.

    A run whose lease is alive is backed up; one whose lease ended is claimed
    as its next attempt at once while it is still the job's latest slot (an
    ended run with a newer slot due is left alone: the next run replaces it).
    The latest slot, if it was due less than ``catch_up_ms`` ago, not before the job's schedule
    took effect (``since_ms``: a stored schedule's slots before it was stored were never its), and
    is not among those runs, is caught up.
    """
    latest = job.schedule.at_or_before(now_ms)
    watch: List[Tuple[int, Optional[float]]] = []
    for run in unfinished:
        if run.lease_alive(now_ms):
            watch.append((run.slot_ms, None))  # lease alive: a backup of it
        elif latest is None or run.slot_ms >= latest:
            watch.append((run.slot_ms, 0))  # expired, still the latest: claim the next attempt now
    missed = latest is not None and all(run.slot_ms != latest for run in unfinished)
    catch_up_ms = job.options.catch_up_ms
    if missed and catch_up_ms > 0 and latest is not None and now_ms - latest < catch_up_ms and latest >= job.since_ms:
        return Recovery(tuple(watch), latest)
    return Recovery(tuple(watch))


def recovery(job: Job, store: Store, clock: StoreClock) -> Recovery:
    """Read ``job``'s unfinished runs (retried for two heartbeats; a store error is raised) and
    plan its recovery (:func:`plan_recovery`)."""
    now = clock.now_ms()
    deadline = clock.monotonic() + 2 * job.options.heartbeat_ms / 1000
    unfinished = call_until(lambda: store.unfinished(job.name), deadline, clock)
    return plan_recovery(job, unfinished, now)
