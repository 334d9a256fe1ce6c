"""Claims: one claim sent to the store (alone or in a batch), and its answer acted on.

A claim is built once, as a :class:`~leasecron.stores.ClaimRequest` with a
token of its own, and that same request goes to the store at every try
(``Store.claim_one``), so a try whose answer was lost and is sent again wins
the same attempt (rule 2). It is retried while the store is unavailable and
its answer still matters. What each outcome asks of this instance is in
:meth:`Claims.act`; a backup's checks are takeover claims, planned here too.
The runs that one batch of claims found running elsewhere are checked
together: one random delay of 1-2 heartbeats for them all, then one batch of
takeover claims, so a burst's losers pay one round trip per batch for their
checks, not one per run.
"""

from __future__ import annotations

import dataclasses
import random
from typing import Callable, Dict, List, Optional, Tuple, Union

from ..events import ClaimText, SlotText, error_text, log
from ..jobs import Job
from ..runs import LATE_TOLERANCE_MS, Claim, Run, RunBrief
from ..states import Outcome, Reason
from ..stores import ClaimRequest
from ..stores.records import new_token
from .backups import Backups
from .clock_sync import ClockSync
from .roles import Claimable, Instance, Rescheduler, Starter
from .store_calls import call_until

__all__ = ["Claims", "Batch", "SKIP_RESCHEDULED", "jitter_ms"]

#: A batch of claims to send together: (job, slot_ms, reason) each.
Batch = List[Tuple[Job, int, Reason]]
#: Runs this instance backs up, to check together: (job, slot_ms) each.
Watches = List[Tuple[Job, int]]
#: The most claims one batch sends (more go in further batches: to the pool's other threads, for
#: the claims of a slot).
BATCH_MAX = 256
#: The outcomes of a new claim that emit ``skip`` (the ``reason`` of the event).
_SKIPS = (Outcome.OVERLAP, Outcome.LATE, Outcome.EARLY, Outcome.PAUSED)
#: The ``reason`` of the ``skip`` event of a claim answered ``stale`` (rule 23).
SKIP_RESCHEDULED = "rescheduled"
#: The outcomes that show the run of the slot claimed started.
_RUN_FOUND = (Outcome.WON, Outcome.RUNNING, Outcome.DONE)


def jitter_ms(job: Job) -> float:
    """A claim's random delay after its slot: uniform in ``[0, jitter_ms]`` of the job."""
    return random.uniform(0, job.options.jitter_ms)


class _Stopping(Exception):
    """A claim's retry found the instance stopping: it is dropped."""


class _NotDue(Exception):
    """A claim chosen by the host's clock is not due yet on the store's, read at last."""


@dataclasses.dataclass(frozen=True)
class _Asked:
    """One claim to send: the job, the request, and until when (monotonic s) its answer matters."""

    job: Job
    request: ClaimRequest
    matters_until: float

    @property
    def ids(self) -> Tuple[str, SlotText, str]:
        """How the log names this claim: job, slot, runner."""
        return self.job.name, SlotText(self.request.slot_ms), self.request.runner


class Claims:
    """Sends the claims of ``instance`` and acts on their answers.

    ``clock`` reads the store's clock again when an answer shows it moved;
    ``roster`` says what may be claimed; ``live`` starts a won run;
    ``backups`` holds the runs this instance watches (their checks are
    takeover claims, planned here); ``schedules`` reads a job's stored
    schedule again when a claim of it is answered ``stale``.
    """

    def __init__(
        self,
        instance: Instance,
        *,
        clock: ClockSync,
        roster: Claimable,
        live: Starter,
        backups: Backups,
        schedules: Rescheduler,
    ) -> None:
        self._instance = instance
        self._clock_sync = clock
        self._clock = instance.clock
        self._roster = roster
        self._live = live
        self._backups = backups
        self._schedules = schedules

    # -- sending -----------------------------------------------------------------------------

    def claim(self, job: Job, slot_ms: int, reason: Reason, max_late: Optional[int] = None) -> Optional[Claim]:
        """Send one claim (retried while its answer matters) and act on the outcome; the
        claim, or None when it was not sent or got no answer."""
        asked = self._ask(job, slot_ms, reason, max_late)
        return None if asked is None else self._send(asked)

    def claim_all(self, batch: Batch) -> None:
        """Send ``batch`` in one round trip (one claim alone as a single claim) and act on each
        answer; each claim of a batch that failed is sent again on its own, with its token."""
        if len(batch) == 1:
            self.claim(*batch[0])
            return
        asked = []
        for job, slot_ms, reason in batch:
            one = self._ask(job, slot_ms, reason)
            if one is None:
                continue
            if not self._clock_sync.due(slot_ms):
                self._defer(one)
            else:
                asked.append(one)
        decided = self._many(asked, "claims", lambda one: self._instance.tasks.submit(self._send, one))
        if decided is not None:
            later: Watches = []
            for one, claim, sent, answered in decided:
                self.act(one, claim, sent, answered, later)
            self._plan_checks(later)

    def _many(
        self, asked: List[_Asked], what: str, alone: Callable[[_Asked], None]
    ) -> Optional[List[Tuple[_Asked, Claim, float, float]]]:
        """Send ``asked`` in one ``claim_many`` (``what``: how the log names them): each claim with its
        answer and when it was sent and answered; None when it failed (then ``alone`` takes each)."""
        if not asked:
            return None
        sent = self._clock.monotonic()
        try:
            answers = self._instance.store.claim_many([one.request for one in asked])
        except Exception as exc:  # noqa: BLE001 - each claim is sent again alone, and retried so
            log.info("leasecron: a batch of %d %s failed (%s): sending each alone", len(asked), what, exc)
            for one in asked:
                alone(one)
            return None
        answered = self._clock.monotonic()
        return [(one, claim, sent, answered) for one, claim in zip(asked, answers)]

    def _ask(self, job: Job, slot_ms: int, reason: Reason, max_late: Optional[int] = None) -> Optional[_Asked]:
        """The claim of ``slot_ms`` to send, with a token of its own; None when none may be sent."""
        if not self._roster.may_claim(job):
            return None
        opts = job.options
        if max_late is None:
            max_late = opts.catch_up_ms if reason == Reason.CATCH_UP else opts.max_late_ms
        if reason == Reason.TAKEOVER:  # a backup's check matters until its next check
            matters_s = opts.heartbeat_ms / 1000
        else:  # until the slot is late
            matters_s = (slot_ms + max_late + LATE_TOLERANCE_MS - self._clock.now_ms()) / 1000
        request = ClaimRequest(
            job.name, slot_ms, self._instance.runner, reason, opts.lease_ms, opts.max_attempts, max_late,
            opts.overlap, opts.history_size, new_token(), job.version, True,  # brief: a loser reads less
        )  # fmt: skip
        return _Asked(job, request, self._clock.monotonic() + max(matters_s, 0.0))

    def _send(self, one: _Asked) -> Optional[Claim]:
        request = one.request
        sent = self._clock.monotonic()

        def once() -> Claim:
            nonlocal sent
            if self._roster.stopping:  # a retry after stop(): give up quietly
                raise _Stopping()
            # a slot chosen before a (re)sync moved the clock; a manual slot is the store's own "now"
            if request.reason != Reason.MANUAL and not self._clock_sync.due(request.slot_ms):
                raise _NotDue()
            sent = self._clock.monotonic()  # the try that wins starts the lease: the local deadline counts from it
            return self._instance.store.claim_one(request)

        try:
            claim = call_until(once, one.matters_until, self._clock)
        except _Stopping:
            return None
        except _NotDue:
            self._defer(one)
            return None
        except Exception as exc:  # noqa: BLE001 - reported; the next slot or check tries again
            log.error("leasecron: claim failed job %r slot %s runner %r (%s): %s", *one.ids, request.reason, exc)
            error = error_text(exc)
            self._instance.events.emit("error", one.job.name, request.slot_ms, reason=request.reason, error=error)
            return None
        self.act(one, claim, sent, self._clock.monotonic())
        return claim

    def _defer(self, one: _Asked) -> None:
        """Claim again once the slot is due on the store's clock (a new claim, a new token)."""
        job, slot_ms, reason = one.job, one.request.slot_ms, Reason(one.request.reason)
        log.info("leasecron: deferred job %r slot %s runner %r (%s): not due on the store's clock", *one.ids, reason)
        self._claim_at(slot_ms + jitter_ms(job), job, slot_ms, reason)

    def _claim_at(self, due_ms: float, job: Job, slot_ms: int, reason: Reason) -> None:
        """Claim ``slot_ms`` again (a new claim, a new token) once the store's clock reaches ``due_ms``."""
        self._instance.timers.call_at(due_ms, self._instance.tasks.submit, self.claim, job, slot_ms, reason)

    # -- acting on the answer ------------------------------------------------------------------

    def act(self, one: _Asked, claim: Claim, sent: float, answered: float, later: Optional[Watches] = None) -> None:
        """Do what ``claim``'s outcome asks of this instance (the runs it backs up now go to
        ``later``, when given, to be checked together).

        ``won`` starts a live run; ``running`` makes the instance a backup of
        the run; ``overlap`` emits ``skip`` and backs up both the other run
        and the new slot (not a manual one: its request was consumed);
        ``late``, ``early`` and ``paused`` emit ``skip`` (after ``early`` the
        clock is read again and the slot claimed again once it is due), except
        that a manual claim's ``late`` means its request expired, which is
        logged; ``stale`` emits ``skip`` with reason ``rescheduled``, and the
        job's stored schedule is read again; ``none`` and ``done`` do nothing.
        """
        job, request, ids = one.job, one.request, one.ids
        slot_ms, reason, outcome = request.slot_ms, request.reason, claim.outcome
        answer = ClaimText(claim, self._clock.now_ms, request.max_late_ms, reason)
        if reason == Reason.TAKEOVER:
            log.debug("leasecron: backup check job %r slot %s runner %r: %s", *ids, answer)
        elif outcome not in _SKIPS and outcome != Outcome.WON:  # these have lines of their own
            log.debug("leasecron: claimed job %r slot %s runner %r (%s): %s", *ids, reason, answer)
        run, found = claim.run, claim.found
        if found is not None and found.slot_ms == slot_ms and outcome in _RUN_FOUND and job.options.overlap == "skip":
            if not _started_manually(found):  # the earlier runs ended: their backups need no check
                self._backups.forget_before(job.name, slot_ms)
        if outcome == Outcome.WON:
            assert run is not None
            self._live.start(job, run, sent)
            self._backups.forget((run.job, run.slot_ms))  # live here now
            self._clock_sync.check_drift(run.lease_end_ms - request.lease_ms, sent, answered)
        elif outcome == Outcome.RUNNING:
            self._watch(job, slot_ms, later)
        elif outcome == Outcome.STALE:
            log.info("leasecron: skipped job %r slot %s runner %r (%s): %s", *ids, SKIP_RESCHEDULED, answer)
            self._instance.events.emit("skip", job.name, slot_ms, reason=SKIP_RESCHEDULED, run=run)
            self._schedules.stale(job.name)
        elif outcome == Outcome.LATE and reason == Reason.MANUAL:
            log.warning("leasecron: expired job %r slot %s runner %r (%s): %s", *ids, reason, answer)
        elif outcome in _SKIPS:
            log.info("leasecron: skipped job %r slot %s runner %r (%s): %s", *ids, outcome, answer)
            self._instance.events.emit("skip", job.name, slot_ms, reason=outcome, run=run)
            if outcome == Outcome.OVERLAP and run is not None:
                self._watch(job, run.slot_ms, later)
                if reason != Reason.MANUAL:  # a skipped request was consumed: its slot gets no run
                    self._watch(job, slot_ms, later)
            elif outcome == Outcome.EARLY:
                # our estimate of the store's clock runs ahead (its clock stepped back): read it
                # again, and claim the slot again when it is due on the store's clock
                self._clock_sync.sync()
                due = max(slot_ms + jitter_ms(job), self._clock.now_ms() + job.options.heartbeat_ms)
                self._claim_at(due, job, slot_ms, Reason(reason))

    # -- backups ---------------------------------------------------------------------------------

    def watch(self, job: Job, slot_ms: int, delay_ms: Optional[float] = None) -> None:
        """Become a backup of the run at ``slot_ms`` (idempotent): check it with a takeover claim
        after ``delay_ms`` (default: a random 1-2 heartbeats), and again while it may need us."""
        if self._backups.add(job, slot_ms):
            self._plan_check(job, slot_ms, delay_ms)

    def _watch(self, job: Job, slot_ms: int, later: Optional[Watches]) -> None:
        """:meth:`watch`, its check planned with the others of ``later`` when given."""
        if later is None:
            self.watch(job, slot_ms)
        elif self._backups.add(job, slot_ms):
            later.append((job, slot_ms))

    def _plan_check(self, job: Job, slot_ms: int, delay_ms: Optional[float] = None) -> None:
        if delay_ms is None:
            delay_ms = random.uniform(1, 2) * job.options.heartbeat_ms
        self._instance.timers.call_later(delay_ms, self._instance.tasks.submit, self._check, job, slot_ms)

    def _plan_checks(self, watches: Watches) -> None:
        """Check the runs of ``watches`` together: one random delay of 1-2 heartbeats for those of a
        heartbeat, then one batch of takeover claims (the runs a batch of claims found running
        elsewhere are checked in one round trip, not one each)."""
        by_heartbeat: Dict[int, Watches] = {}
        for job, slot_ms in watches:
            by_heartbeat.setdefault(job.options.heartbeat_ms, []).append((job, slot_ms))
        for heartbeat_ms, group in by_heartbeat.items():
            if len(group) == 1:
                self._plan_check(*group[0])
                continue
            delay_ms = random.uniform(1, 2) * heartbeat_ms
            self._instance.timers.call_later(delay_ms, self._instance.tasks.submit, self._check_all, group)

    def _check(self, job: Job, slot_ms: int) -> None:
        """A backup's check: a takeover claim, as the job is scheduled here now (its schedule may
        have changed since); checked again while the run may need us."""
        current = self._roster.get(job.name)
        if current is None or not self._backups.watched(job.name, slot_ms):
            return
        job = current
        claim = self.claim(job, slot_ms, Reason.TAKEOVER)
        if self._backups.again(job, slot_ms, claim):
            self._plan_check(job, slot_ms)

    def _check_all(self, watches: Watches) -> None:
        """The checks of ``watches`` in batches of takeover claims (a batch that fails: each check
        alone); the runs that may still need us are checked again together."""
        asked = []
        for job, slot_ms in watches:
            current = self._roster.get(job.name)
            if current is None or not self._backups.watched(job.name, slot_ms):
                continue
            one = self._ask(current, slot_ms, Reason.TAKEOVER)
            if one is not None:
                asked.append(one)
        later: Watches = []
        for start in range(0, len(asked), BATCH_MAX):
            batch = asked[start : start + BATCH_MAX]
            alone = self._check_alone
            for one, claim, sent, answered in self._many(batch, "backup checks", alone) or []:
                self.act(one, claim, sent, answered, later)
                if self._backups.again(one.job, one.request.slot_ms, claim):
                    later.append((one.job, one.request.slot_ms))
        self._plan_checks(later)

    def _check_alone(self, one: _Asked) -> None:
        """A check of a batch that failed: sent again alone (a new claim, from the pool)."""
        self._instance.tasks.submit(self._check, one.job, one.request.slot_ms)


def _started_manually(run: Union[Run, RunBrief]) -> bool:
    """Whether a manual claim started ``run`` (a whole run: its first attempt kept says so)."""
    if isinstance(run, RunBrief):
        return run.manual
    return (run.attempts[0].reason if run.attempts else run.reason) == Reason.MANUAL
