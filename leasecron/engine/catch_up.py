"""Catch-up: what a starting instance does about the runs and the slot of a job that it missed.

On start, and for a job registered while running, each job is *recovered*
(docs/protocol.rst, "Start-up: catch-up"): its unfinished runs are backed up
when their lease is alive, or claimed as their next attempt at once when it
ended and they are still the job's latest slot (an ended run with a newer
slot due is left alone: the next run replaces it); and the latest slot, if
it was due less than ``catch_up_ms`` ago and is not among those runs, is
claimed with reason ``catch-up``. The engine tries the recovery again, with
a backoff, while the store does not answer.
"""

from __future__ import annotations

from typing import Callable, Optional

from .clock import StoreClock
from ..jobs import Job
from .store_calls import call_until
from ..stores.base import Store

__all__ = ["recover"]


def recover(
    job: Job,
    store: Store,
    clock: StoreClock,
    *,
    watch: Callable[[Job, int, Optional[float]], None],
    catch_up: Callable[[Job, int], None],
) -> None:
    """Recover ``job``: ``watch(job, slot_ms, delay_ms)`` backs up a run (``delay_ms`` 0: check
    it now; None: after the usual 1-2 heartbeats); ``catch_up(job, slot_ms)`` claims the missed
    latest slot. Reading the unfinished runs is retried for two heartbeats; a store error is raised."""
    now = clock.now_ms()
    latest = job.schedule.at_or_before(now)
    claimed_latest = False
    unfinished = call_until(lambda: store.unfinished(job.name), clock.monotonic() + 2 * job.options.heartbeat_ms / 1000)
    for run in unfinished:
        claimed_latest = claimed_latest or run.slot_ms == latest
        if run.lease_alive(now):
            watch(job, run.slot_ms, None)  # lease alive: a backup of it
        elif latest is None or run.slot_ms >= latest:
            watch(job, run.slot_ms, 0)  # expired, still the latest: claim the next attempt now
        # else expired with a newer slot due: leave it; the next run replaces it
    catch_up_ms = job.options.catch_up_ms
    if latest is not None and not claimed_latest and catch_up_ms > 0 and now - latest < catch_up_ms:
        catch_up(job, latest)
