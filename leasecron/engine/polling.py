"""The poll: one store call per ``poll_ms`` for all of an instance's jobs, for requests of manual
runs and for changes of the stored schedules.

Each pending request of a job registered here is claimed once, with reason
``manual`` (the store decides which instance runs it, rule 17); a request
claimed elsewhere makes this instance a backup of its run, as for any run.
The stored schedules changed since the last poll (after its cursor) go to
the rescheduler. When the instance's announcement is due (:mod:`~leasecron.engine.announcer`),
the poll carries it. ``docs/design.rst``, "Manual runs", says more.
"""

from __future__ import annotations

import threading
from typing import List, Optional, Set, Tuple

from ..controls import ManualRequest
from ..events import log
from ..jobs import Job
from ..runs import LATE_TOLERANCE_MS, Claim
from ..states import Reason
from .announcer import Announcer
from .roles import Claimable, Instance, Rescheduler, Sender

__all__ = ["RequestPoller"]


class RequestPoller:
    """Polls ``instance``'s store for requests of manual runs every ``poll_ms``, and claims the new ones.

    Each poll is planned on the instance's timers and made from its claim
    pool, as are the claims (never in the scheduler thread); ``roster`` gives
    the job a name is scheduled as here (a request of another job is left to
    the instances that have it); ``claims`` sends a manual claim, or backs up
    the run of a request claimed elsewhere; ``schedules`` applies the stored
    schedules that changed after :attr:`cursor`. The first failed poll of a
    streak is reported to the instance's events.
    """

    def __init__(
        self,
        instance: Instance,
        poll_ms: int,
        *,
        roster: Claimable,
        claims: Sender,
        schedules: Rescheduler,
        announcer: Announcer,
    ) -> None:
        self._instance = instance
        self._announcer = announcer
        self._poll_s = poll_ms / 1000
        self._roster = roster
        self._claims = claims
        self._schedules = schedules
        #: The store's count of schedule changes as of the last poll: the next asks for what came after.
        self.cursor = 0
        self._lock = threading.Lock()
        #: Requests (job, slot_ms) whose claim is in flight: never claimed again meanwhile.
        self._in_flight: Set[Tuple[str, int]] = set()
        #: Requests whose claim was answered, until a poll no longer lists them (they never come back).
        self._answered: Set[Tuple[str, int]] = set()
        self._failing = False

    def start(self) -> None:
        """Poll now, and every ``poll_ms`` from then on."""
        self._instance.tasks.submit(self._poll)

    def offer(self, job: Job, request: ManualRequest) -> None:
        """Claim ``request`` of ``job`` now, unless it was claimed here already: a request this
        instance made itself need not wait for the next poll."""
        if self._take(request):
            self._instance.tasks.submit(self._claim_once, job, request)

    def _poll(self) -> None:
        """One call for every job's requests; the next poll is planned ``poll_ms`` after this one."""
        started = self._instance.clock.monotonic()
        try:
            announcement = self._announcer.due(started)
            polled = self._instance.store.poll(self.cursor, announce=announcement)
            if announcement is not None:
                self._announcer.sent(announcement, started)
            if polled.schedules.changes:
                self._schedules.apply_records(polled.schedules.changes)
            self.cursor = max(self.cursor, polled.schedules.cursor)
        except Exception as exc:  # noqa: BLE001 - reported; the next poll tries again
            self._failed(exc)
            due = self._instance.clock.monotonic() + self._poll_s
        else:
            if self._failing:
                self._failing = False
                log.info("leasecron: polled the store again, runner %r", self._instance.runner)
            self._claim_new(polled.requests)
            due = started + self._poll_s
        self._instance.timers.call_at_monotonic(due, self._instance.tasks.submit, self._poll)

    def _claim_new(self, requests: List[ManualRequest]) -> None:
        listed = {(request.job, request.slot_ms) for request in requests}
        with self._lock:
            self._answered &= listed  # an answered request the store no longer lists is gone for good
        for request in requests:
            job = self._roster.get(request.job)
            if job is None:
                continue
            if request.pending:
                self.offer(job, request)
            elif self._take(request):  # claimed elsewhere: back its run up, as for any run
                self._claims.watch(job, request.slot_ms)
                self._settle(request, answered=True)

    def _take(self, request: ManualRequest) -> bool:
        """Mark ``request`` in flight; False when it is in flight or was answered already."""
        key = (request.job, request.slot_ms)
        with self._lock:
            if key in self._in_flight or key in self._answered:
                return False
            self._in_flight.add(key)
            return True

    def _claim_once(self, job: Job, request: ManualRequest) -> None:
        claim: Optional[Claim] = None
        try:
            max_late_ms = max(0, request.expires_ms - request.slot_ms - LATE_TOLERANCE_MS)
            claim = self._claims.claim(job, request.slot_ms, Reason.MANUAL, max_late_ms)
        finally:
            self._settle(request, answered=claim is not None)

    def _settle(self, request: ManualRequest, *, answered: bool) -> None:
        """``request`` is no longer in flight here; once ``answered``, it is never claimed here again."""
        key = (request.job, request.slot_ms)
        with self._lock:
            self._in_flight.discard(key)
            if answered:
                self._answered.add(key)

    def _failed(self, exc: BaseException) -> None:
        if self._failing:
            log.debug("leasecron: cannot poll the store, runner %r: %s", self._instance.runner, exc)
            return
        self._failing = True
        log.warning(
            "leasecron: cannot poll the store (manual runs, schedules), runner %r: %s; polling again every %d ms",
            self._instance.runner,
            exc,
            round(self._poll_s * 1000),
        )
        self._instance.events.task_failed(exc)
