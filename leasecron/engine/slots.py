"""Slots: each job's next slot, claimed when it falls due, and the job's recovery on start.

In the scheduler thread, a job's next slot is planned at the slot plus its
jitter; when it comes, its claim joins the pass's batch and the slot after
it is planned (after a stall past several slots, only the latest counts).
A job is recovered (:mod:`.catch_up`) when it starts being scheduled; a store
that does not answer then is asked again, with a backoff, until it does.
"""

from __future__ import annotations

from ..errors import StoreError, StoreUnavailable
from ..events import error_text, log
from ..jobs import Job
from ..states import Reason
from .batches import Batches
from .catch_up import recovery
from .claims import jitter_ms
from .roles import Claimable, Instance, Watcher

__all__ = ["Slots", "BOOT_RETRY_MS"]

#: When the store does not answer at start: the first wait before the start-up (the clock, the
#: recovery of each job) is tried again, doubled after each failure up to the last.
BOOT_RETRY_MS = (500, 30_000)


class Slots:
    """Plans the slots of the jobs scheduled here (``roster``) on ``instance``'s timers, gathers
    their claims into ``batches``, and recovers each job from its claim pool: its unfinished runs
    are backed up (``backups``), its missed slot caught up."""

    def __init__(self, instance: Instance, *, roster: Claimable, batches: Batches, backups: Watcher) -> None:
        self._instance = instance
        self._clock = instance.clock
        self._roster = roster
        self._batches = batches
        self._backups = backups

    def plan(self, job: Job, recover: bool = True) -> None:
        """Plan ``job``'s next slot, and recover it (from the claim pool) unless told not to: a job
        whose schedule changed while it was scheduled here has no slot of the new one to catch up."""
        if not self._roster.may_claim(job):
            return
        slot = job.schedule.next_after(self._clock.now_ms())
        self._instance.timers.call_at(slot + jitter_ms(job), self._fire, job, slot)
        if recover:
            self.recover(job)

    def recover(self, job: Job) -> None:
        """Recover ``job`` (catch-up, backups of its unfinished runs) from the claim pool."""
        self._instance.tasks.submit(self._recover, job)

    def _fire(self, job: Job, slot_ms: int) -> None:
        """In the scheduler thread, at ``slot_ms`` + jitter: claim it, and plan the next slot."""
        if not self._roster.may_claim(job):
            return
        self._batches.gather(job, slot_ms, Reason.SCHEDULE)
        following = job.schedule.next_after(slot_ms)
        now = self._clock.now_ms()
        if now >= following:  # the process stalled past the next slot: only the latest slot counts
            latest = job.schedule.at_or_before(now)
            if latest is not None and latest > following:
                following = latest
        self._instance.timers.call_at(following + jitter_ms(job), self._fire, job, following)

    def _recover(self, job: Job, retry_ms: int = BOOT_RETRY_MS[0]) -> None:
        """Catch-up on start; tried again, with backoff, until the store answers."""
        if not self._roster.may_claim(job):
            return
        try:
            plan = recovery(job, self._instance.store, self._clock)
        except StoreError as exc:  # the store is down (or refuses us) at start: never give up on the job
            why = "is unreachable" if isinstance(exc, StoreUnavailable) else "failed"
            line = "leasecron: cannot recover job %r on start, runner %r: the store %s (%s); trying again in %.1f s"
            log.warning(line, job.name, self._instance.runner, why, exc, retry_ms / 1000)
            self._instance.events.emit("error", job.name, None, error=error_text(exc))
            next_retry_ms = min(2 * retry_ms, BOOT_RETRY_MS[1])
            self._instance.timers.call_later(retry_ms, self._instance.tasks.submit, self._recover, job, next_retry_ms)
            return
        for slot_ms, delay_ms in plan.watch:
            self._backups.watch(job, slot_ms, delay_ms)
        if plan.catch_up is not None:
            self._instance.timers.call_later(jitter_ms(job), self._batches.gather, job, plan.catch_up, Reason.CATCH_UP)
