"""Claims: sending them to the store, together where several are due at once, and acting on
what the store answered.

An instance claims a slot in the claim pool (:mod:`leasecron.engine.claim_pool`), never in the scheduler
thread. A claim is **sent** with one token for every try (:meth:`Claims.claim`): a try whose
answer was lost may have won, and the next try, with the same token and runner, then wins
that same attempt again instead of finding it running. It is retried while the store is
unavailable and its answer still matters (until the slot is late, or a heartbeat for a
takeover check). Its outcome is **acted on** (:meth:`Claims.act`): ``won`` starts a live run;
``running`` makes the instance a backup of the run; ``overlap`` emits ``skip`` and backs up
both the other run and the new slot (not a manual one: its request was consumed); ``late``,
``early`` and ``paused`` emit ``skip`` (after ``early`` the clock is re-read and the slot
claimed again once it is due on the store's clock), except that a manual claim's ``late``
means its request expired, which is logged; ``none`` and ``done`` do nothing.

**Batches** (rule 21 of the store contract, :meth:`~leasecron.Store.claim_many`). When the
slots of many jobs fall due at one instant, the scheduler thread hands each to
:meth:`Claims.gather` instead of the pool; after the entries due in that same pass (the first
gathered claim plans a flush at delay 0, which the scheduler runs after its entries that are
due already), the gathered claims go to the pool, whose threads send them as batches: one
round trip per batch instead of one per claim. The claims are cut into about
twice as many batches as the pool has threads, of :data:`BATCH_MIN` to
:data:`BATCH_MAX` claims (1,000 claims on 4 threads: 8 batches of 125), so the
first runs start while later batches are on their way, and a thread that is
done with its batch takes the next: an instance busy starting its runs claims
fewer of the rest. Each instance shuffles the claims of a
slot before it cuts them into batches: the instances' batches then overlap in
part at the store, and each instance wins a share of the runs, instead of the
first to send winning every run of its batch while the others find them all
running (a job's later slot, after a stall, goes in a later batch, as it would
come later alone). A claim gathered
alone is sent as a single claim. A batch is tried once: if it raises (the store is down, or
one of its runs is unreadable), each of its claims is sent again on its own, with its token,
and retried as a single claim is; a claim the failed batch had decided answers the same
(rule 2). Scheduled and catch-up claims are gathered; takeover checks and manual claims,
which come one by one, are sent alone.
"""

from __future__ import annotations

import dataclasses
import random
import threading
from typing import Callable, List, Optional, Set, Tuple

from .clock import ClockSync, StoreClock
from ..events import ClaimText, Emitter, SlotText, error_text, log
from ..jobs import Job
from .claim_pool import ClaimPool
from .store_calls import call_until
from ..runs import LATE_TOLERANCE_MS, Claim, Run
from .scheduler import Scheduler
from ..states import Outcome, Reason
from ..stores import ClaimRequest, Store
from ..stores.records import new_token

__all__ = ["Claims", "BATCH_MAX", "BATCH_MIN"]

#: The most claims one batch sends (more go in further batches, to the pool's other threads).
BATCH_MAX = 256
#: Claims due at once are spread over the pool's threads in batches of at least this many.
BATCH_MIN = 16
#: The outcomes of a new claim that emit ``skip`` (the ``reason`` of the event).
_SKIPS = (Outcome.OVERLAP, Outcome.LATE, Outcome.EARLY, Outcome.PAUSED)
#: The outcomes that show the run of the slot claimed started.
_RUN_FOUND = (Outcome.WON, Outcome.RUNNING, Outcome.DONE)


class _Stopping(Exception):
    """A claim's retry found the engine stopping: it is dropped."""


class _NotDue(Exception):
    """A claim chosen by the host's clock is not due yet on the store's, read at last."""


@dataclasses.dataclass(frozen=True)
class _Asked:
    """One claim to send: the job, what it asks, and until when (monotonic s) its answer matters."""

    job: Job
    request: ClaimRequest
    matters_until: float

    @property
    def ids(self) -> Tuple[str, SlotText, str]:
        """How the log names this claim: job, slot, runner."""
        return self.job.name, SlotText(self.request.slot_ms), self.request.runner


class Claims:
    """The claims of one engine. ``may_claim(job)``: whether a claim of ``job`` may be sent now
    (the engine is not stopping, the job is scheduled); ``stopping()``: whether the engine
    stops; ``start_run(job, run, sent)``: start a won run; ``watch(job, slot_ms)``: back up a
    run; ``forget_before(name, slot_ms)``: stop backing up the job's earlier runs (see
    :meth:`~leasecron.engine.backups.Backups.forget_before`); ``jitter(job)``: a claim's delay after
    its slot, in ms; ``threads``: the pool's threads, over which claims due at once are spread."""

    def __init__(
        self,
        store: Store,
        runner: str,
        *,
        clock: StoreClock,
        clock_sync: ClockSync,
        emitter: Emitter,
        scheduler: Scheduler,
        pool: ClaimPool,
        may_claim: Callable[[Job], bool],
        stopping: Callable[[], bool],
        start_run: Callable[[Job, Run, float], None],
        watch: Callable[[Job, int], None],
        forget_before: Callable[[str, int], None],
        jitter: Callable[[Job], float],
        threads: int = 4,
    ) -> None:
        self._store = store
        self._runner = runner
        self._clock = clock
        self._clock_sync = clock_sync
        self._emitter = emitter
        self._scheduler = scheduler
        self._pool = pool
        self._may_claim = may_claim
        self._stopping = stopping
        self._start_run = start_run
        self._watch = watch
        self._forget_before = forget_before
        self._jitter = jitter
        self._threads = threads
        self._lock = threading.Lock()
        self._gathered: List[Tuple[Job, int, Reason]] = []

    # -- gathering -----------------------------------------------------------------------------

    def gather(self, job: Job, slot_ms: int, reason: Reason) -> None:
        """In the scheduler thread: claim ``slot_ms`` of ``job`` with the other claims due in
        this pass of the scheduler."""
        with self._lock:
            self._gathered.append((job, slot_ms, reason))
            first = len(self._gathered) == 1
        if first:
            self._scheduler.call_later(0, self._flush)

    def _flush(self) -> None:
        """In the scheduler thread, after the pass: the gathered claims to the pool, in batches."""
        with self._lock:
            gathered, self._gathered = self._gathered, []
        random.shuffle(gathered)  # each instance its own order: the instances' batches split the runs
        gathered.sort(key=lambda claim: claim[1])  # stable: a job's slots in order, the jobs of a slot shuffled
        size = min(BATCH_MAX, max(BATCH_MIN, -(-len(gathered) // (2 * self._threads))))
        batch: List[Tuple[Job, int, Reason]] = []
        names: Set[str] = set()
        for claim in gathered:
            if len(batch) == size or claim[0].name in names:  # a job's later slot: in a later batch
                self._pool.submit(self.claim_all, batch)
                batch, names = [], set()
            batch.append(claim)
            names.add(claim[0].name)
        self._pool.submit(self.claim_all, batch)

    def claim_all(self, claims: List[Tuple[Job, int, Reason]]) -> None:
        """Send ``claims`` (job, slot, reason) as one batch (one alone as a single claim), and act
        on each answer; each claim of a batch that failed is sent again on its own."""
        if len(claims) == 1:
            self.claim(*claims[0])
            return
        asked = []
        for job, slot_ms, reason in claims:
            one = self._ask(job, slot_ms, reason)
            if one is None:
                continue
            if not self._clock_sync.due(slot_ms):
                self._defer(one)
            else:
                asked.append(one)
        if not asked:
            return
        sent = self._clock.monotonic()
        try:
            answers = self._store.claim_many([one.request for one in asked])
        except Exception as exc:  # noqa: BLE001 - each claim is sent again alone, and retried so
            log.info("leasecron: a batch of %d claims failed (%s): sending each alone", len(asked), exc)
            for one in asked:
                self._pool.submit(self._send, one)
            return
        answered = self._clock.monotonic()
        for one, claim in zip(asked, answers):
            self.act(one, claim, sent, answered)

    # -- one claim -----------------------------------------------------------------------------

    def claim(self, job: Job, slot_ms: int, reason: Reason, max_late: Optional[int] = None) -> Optional[Claim]:
        """Send one claim (retried while its answer matters) and act on the outcome; the
        claim, or None when it was not sent or got no answer."""
        one = self._ask(job, slot_ms, reason, max_late)
        return None if one is None else self._send(one)

    def _ask(self, job: Job, slot_ms: int, reason: Reason, max_late: Optional[int] = None) -> Optional[_Asked]:
        """The claim of ``slot_ms`` to send, with a token of its own; None when none may be sent."""
        if not self._may_claim(job):
            return None
        opts = job.options
        if max_late is None:
            max_late = opts.catch_up_ms if reason == Reason.CATCH_UP else opts.max_late_ms
        if reason == Reason.TAKEOVER:
            matters_s = opts.heartbeat_ms / 1000
        else:
            matters_s = (slot_ms + max_late + LATE_TOLERANCE_MS - self._clock.now_ms()) / 1000
        request = ClaimRequest(
            job.name, slot_ms, self._runner, reason, opts.lease_ms, opts.max_attempts, max_late,
            opts.overlap, opts.history_size, new_token(),
        )  # fmt: skip
        return _Asked(job, request, self._clock.monotonic() + max(matters_s, 0.0))

    def _send(self, one: _Asked) -> Optional[Claim]:
        request = one.request
        sent = self._clock.monotonic()

        def once() -> Claim:
            nonlocal sent
            if self._stopping():  # a retry after stop(): give up quietly, do not keep calling the store
                raise _Stopping()
            # a slot chosen before a (re)sync moved the clock; a manual slot is the store's own "now"
            if request.reason != Reason.MANUAL and not self._clock_sync.due(request.slot_ms):
                raise _NotDue()
            sent = self._clock.monotonic()  # the try that wins starts the lease: the local deadline counts from it
            return self._store.claim(
                request.job, request.slot_ms, runner=request.runner, reason=request.reason,
                lease_ms=request.lease_ms, max_attempts=request.max_attempts, max_late_ms=request.max_late_ms,
                overlap=request.overlap, history_size=request.history_size, token=request.token,
            )  # fmt: skip

        try:
            claim = call_until(once, one.matters_until)
        except _Stopping:
            return None
        except _NotDue:
            self._defer(one)
            return None
        except Exception as exc:  # noqa: BLE001 - reported; the next slot or check tries again
            log.error("leasecron: claim failed job %r slot %s runner %r (%s): %s", *one.ids, request.reason, exc)
            self._emitter.emit("error", one.job.name, request.slot_ms, reason=request.reason, error=error_text(exc))
            return None
        self.act(one, claim, sent, self._clock.monotonic())
        return claim

    def _defer(self, one: _Asked) -> None:
        """Claim again once the slot is due on the store's clock (a new claim, a new token)."""
        job, slot_ms, reason = one.job, one.request.slot_ms, Reason(one.request.reason)
        log.info("leasecron: deferred job %r slot %s runner %r (%s): not due on the store's clock", *one.ids, reason)
        self._scheduler.call_at(slot_ms + self._jitter(job), self._pool.submit, self.claim, job, slot_ms, reason)

    # -- acting on the answer --------------------------------------------------------------------

    def act(self, one: _Asked, claim: Claim, sent: float, answered: float) -> None:
        """Do what ``claim``'s outcome asks of this instance (see the module's docstring)."""
        job, request, ids = one.job, one.request, one.ids
        slot_ms, reason, outcome = request.slot_ms, request.reason, claim.outcome
        answer = ClaimText(claim, self._clock.now_ms, request.max_late_ms, reason)
        if reason == Reason.TAKEOVER:
            log.debug("leasecron: backup check job %r slot %s runner %r: %s", *ids, answer)
        elif outcome not in _SKIPS and outcome != Outcome.WON:  # these have lines of their own
            log.debug("leasecron: claimed job %r slot %s runner %r (%s): %s", *ids, reason, answer)
        run = claim.run
        if run is not None and run.slot_ms == slot_ms and outcome in _RUN_FOUND and job.options.overlap == "skip":
            started_by = run.attempts[0].reason if run.attempts else run.reason
            if started_by != Reason.MANUAL:  # the earlier runs ended: their backups need no check
                self._forget_before(job.name, slot_ms)
        if outcome == Outcome.WON:
            assert claim.run is not None
            self._start_run(job, claim.run, sent)
            self._clock_sync.check_drift(claim.run.lease_end_ms - request.lease_ms, sent, answered)
        elif outcome == Outcome.RUNNING:
            self._watch(job, slot_ms)
        elif outcome == Outcome.LATE and reason == Reason.MANUAL:
            log.warning("leasecron: expired job %r slot %s runner %r (%s): %s", *ids, reason, answer)
        elif outcome in _SKIPS:
            log.info("leasecron: skipped job %r slot %s runner %r (%s): %s", *ids, outcome, answer)
            self._emitter.emit("skip", job.name, slot_ms, reason=outcome, run=claim.run)
            if outcome == Outcome.OVERLAP and claim.run is not None:
                self._watch(job, claim.run.slot_ms)
                if reason != Reason.MANUAL:  # a skipped request was consumed: its slot gets no run
                    self._watch(job, slot_ms)
            elif outcome == Outcome.EARLY:
                # our estimate of the store's clock runs ahead (its clock stepped back): re-read
                # it, and claim the slot again when it is due on the store's clock
                self._clock_sync.sync()
                due = max(slot_ms + self._jitter(job), self._clock.now_ms() + job.options.heartbeat_ms)
                self._scheduler.call_at(due, self._pool.submit, self.claim, job, slot_ms, Reason(reason))

