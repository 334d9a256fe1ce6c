"""Manual runs: how a started instance finds the requests for them, and claims each one once.

:meth:`LeaseCron.trigger <leasecron.LeaseCron.trigger>` (or ``leasecron trigger``) writes a
request for one run of a job to the store (rule 19 of ``docs/protocol.rst``); its slot is the
store's "now". A started instance looks for requests with one store call,
``pending_requests()``, every ``poll_ms``, for all of its jobs whatever their number
(:class:`RequestPoller`); the call's cost grows with the pending requests only. Each pending
request of a job the instance has registered is handed to the engine's claim path, with reason
``manual`` at the request's slot (the retries with one token, the log lines, what each outcome
does), and only once: while a claim of it is in flight, or once one was answered, this instance
does not claim it again. Which instance runs it is the store's decision: the first manual claim
acts on the request (rule 17), and every other one is answered ``none``, or ``running`` once the
run exists. The store lists a claimed request too, until it expires: an instance that finds one it
did not win becomes a backup of its run (as every instance is of a scheduled slot), so a manual
run whose runner dies or stops is taken over or handed over like any other.

A poll that fails is logged (a WARNING for the first one of a streak, then DEBUG until a poll
works again, which is logged at INFO) and reported once per streak as an ``error`` event;
polling goes on every ``poll_ms``.
"""

from __future__ import annotations

import threading
from typing import Callable, List, Optional, Set, Tuple

from ..controls import ManualRequest
from ..events import log
from ..jobs import Job
from .live import Timers
from ..runs import LATE_TOLERANCE_MS, Claim
from ..states import Reason
from ..stores.base import Store

__all__ = ["RequestPoller", "SendClaim"]

#: The engine's claim path, ``claim(job, slot_ms, reason, max_late_ms)``: the answer, or None when
#: none came (the claim failed, or the instance stops), so that a later poll may claim it again.
SendClaim = Callable[[Job, int, Reason, Optional[int]], Optional[Claim]]
#: The engine's backups: ``watch(job, slot_ms)`` backs up the run at the slot.
Watch = Callable[[Job, int], None]


class RequestPoller:
    """Polls ``store`` for requests of manual runs every ``poll_ms`` and claims the new ones.

    ``timers`` plan each poll on the host's monotonic clock (``monotonic``,
    seconds); ``submit`` runs a task in the claim pool (the polls and the
    claims run there, never in the scheduler thread); ``jobs`` gives the
    job a name is registered as now (None: not registered, the request is
    left to the instances that have it); ``claim`` sends a claim, here with
    reason ``manual`` and the window the request was made with; ``watch``
    backs up the run of a request claimed elsewhere; ``on_error`` is told of
    the first failed poll of a streak.
    """

    def __init__(
        self,
        store: Store,
        runner: str,
        poll_ms: int,
        *,
        timers: Timers,
        monotonic: Callable[[], float],
        submit: Callable[..., None],
        jobs: Callable[[str], Optional[Job]],
        claim: SendClaim,
        watch: Watch,
        on_error: Callable[[BaseException], None],
    ) -> None:
        self._store = store
        self._runner = runner
        self._poll_s = poll_ms / 1000
        self._timers = timers
        self._monotonic = monotonic
        self._submit = submit
        self._jobs = jobs
        self._claim = claim
        self._watch = watch
        self._on_error = on_error
        self._lock = threading.Lock()
        #: Requests (job, slot_ms) whose claim is in flight: never claimed again meanwhile.
        self._in_flight: Set[Tuple[str, int]] = set()
        #: Requests whose claim was answered, until a poll no longer lists them (they never come back).
        self._answered: Set[Tuple[str, int]] = set()
        self._failing = False

    def start(self) -> None:
        """Poll now, and every ``poll_ms`` from then on."""
        self._submit(self._poll)

    def offer(self, job: Job, request: ManualRequest) -> None:
        """Claim ``request`` of ``job`` now, unless it was claimed here already: a request this
        instance made itself need not wait for the next poll."""
        if self._take(request):
            self._submit(self._claim_once, job, request)

    def _poll(self) -> None:
        """One call for every job's requests; the next poll is planned ``poll_ms`` after this one."""
        started = self._monotonic()
        try:
            requests = self._store.pending_requests()
        except Exception as exc:  # noqa: BLE001 - reported; the next poll tries again
            self._failed(exc)
            due = self._monotonic() + self._poll_s
        else:
            if self._failing:
                self._failing = False
                log.info("leasecron: polled requests for manual runs again, runner %r", self._runner)
            self._claim_new(requests)
            due = started + self._poll_s
        self._timers.call_at_monotonic(due, self._submit, self._poll)

    def _claim_new(self, requests: List[ManualRequest]) -> None:
        listed = {(request.job, request.slot_ms) for request in requests}
        with self._lock:
            self._answered &= listed  # an answered request the store no longer lists is gone for good
        for request in requests:
            job = self._jobs(request.job)
            if job is None:
                continue
            if request.pending:
                self.offer(job, request)
            elif self._take(request):  # claimed elsewhere: back its run up, as for any run
                self._watch(job, request.slot_ms)
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
            claim = self._claim(job, request.slot_ms, Reason.MANUAL, max_late_ms)
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
            log.debug("leasecron: cannot poll requests for manual runs, runner %r: %s", self._runner, exc)
            return
        self._failing = True
        log.warning(
            "leasecron: cannot poll requests for manual runs, runner %r: %s; polling again every %d ms",
            self._runner,
            exc,
            round(self._poll_s * 1000),
        )
        self._on_error(exc)
