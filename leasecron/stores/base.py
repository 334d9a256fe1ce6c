"""The store contract: :class:`Store`, what every backend does, atomically, on its own clock.

Each public method checks its arguments once and calls the protected method a backend
implements, which may trust them (``claim`` and ``claim_one`` call ``_claim`` with a
:class:`ClaimRequest`, ``finish_many`` calls ``_finish_many`` with :class:`Finish` values, and
so on). The docstrings state the
rules of ``docs/protocol.rst`` with their numbers (1-26); each backend tags the branch that
carries out a rule with its number, and ``tests/stores/`` is the contract's executable form.
``Store`` extends :class:`~leasecron.stores.reads.StoreReads`, what a reader needs (the clock,
the reads, ``close``), with the operations that decide; the protected methods a backend implements
are declared in :mod:`~leasecron.stores.backend`.
"""

from __future__ import annotations

from typing import Any, List, Mapping, Optional, Sequence

from ..announcements import Announcement, check_announcement
from ..controls import JobState, ManualRequest
from ..errors import ConfigError, shown
from ..compat import old_names_of
from ..runs import Claim
from ..schedules import ScheduleSpec
from ..states import ScheduleSource
from ..stored import Poll, StoredSchedule, check_schedule_fields
from .claim_request import ClaimRequest
from ..limits import check_int, check_job_name
from ..limits import check_text as _check_text  # check_text itself is an old name here (compat)
from .checks import check_actor, check_batch, check_claim, check_finish, check_finish_of, check_heartbeat
from .checks import check_note, check_return, check_token
from .finish_request import Finish
from .backend import StoreBackend

__all__ = ["ClaimRequest", "Finish", "REQUESTS_KEPT", "Store"]


#: How many requests for manual runs that ended (claimed, skipped, expired) a store keeps per job.
REQUESTS_KEPT = 20


class Store(StoreBackend):
    """A shared record of runs: the contract every backend fulfils.

    A store is a :class:`~leasecron.stores.reads.StoreReads`: its clock (``now_ms``), its reads
    (``get_run``, ``unfinished``, ``runs``, ``recent_runs``, ``jobs``, ``job_state``,
    ``job_states``, ``pending_requests``) and ``close`` are documented there. The methods below
    decide: claims, heartbeats, finishes, releases and the controls.

    Every method may raise :class:`~leasecron.StoreError` (or its subclass
    :class:`~leasecron.StoreUnavailable` for failures worth retrying), raised
    ``from`` the driver's own exception. A bad argument raises
    :class:`~leasecron.ConfigError` naming it, before the store is asked.

    22. A store that copies its writes to replicas and is asked to wait for
        them answers a *write* (a claim that won, or marked a run interrupted,
        or ended a request; a heartbeat, finish or release that succeeded;
        ``pause``, ``resume``, ``request_run``) only once they hold it, and
        raises :class:`~leasecron.StoreUnavailable` when they do not confirm
        in time: the caller acts as if no answer came. Any other answer is
        never refused for want of replicas.
    """

    #: The URL scheme(s) this store is opened with, for messages and ``check``.
    kind: str = "store"

    def claim(
        self,
        job: str,
        slot_ms: int,
        *,
        runner: str,
        reason: str = ClaimRequest.reason,
        lease_ms: int = ClaimRequest.lease_ms,
        max_attempts: int = ClaimRequest.max_attempts,
        max_late_ms: int = ClaimRequest.max_late_ms,
        overlap: str = ClaimRequest.overlap,
        history_size: int = ClaimRequest.history_size,
        token: Optional[str] = None,
        version: int = ClaimRequest.version,
    ) -> Claim:
        """Ask to run ``job``'s slot ``slot_ms``; decided atomically at ``now``.

        ``token`` (optional) is the token an attempt this claim wins gets,
        instead of a new random one. It makes a claim safe to send again
        when its answer was lost (a timeout after the store ran it): the
        caller makes one token per claim (:func:`~leasecron.stores.records.new_token`)
        and sends it with every try of that claim, and never with another.
        ``10 s`` below is ``LATE_TOLERANCE_MS`` and ``EARLY_TOLERANCE_MS``
        of :mod:`leasecron.runs`.

        A claim for a slot that already has a run:

        1. The run has ended: ``done`` (also when it ended with ``token``).
        2. The run is running, its current attempt holds ``token`` and was
           claimed by ``runner``, and its lease was not released: ``won``
           with that same attempt (same number, token, runner, reason and
           start), its lease renewed to ``now + lease_ms``: the retry of a
           claim that won. This holds whatever the lease end, the claim's
           ``reason`` and the other runs of the job; nothing else changes.
        3. The run is running with a live lease: ``running`` (also when its
           attempt holds ``token`` but another runner claimed it).
        4. The lease has ended or was released, and a newer slot of the job
           has a run: the run is marked ``interrupted``; ``done``.
        5. The lease has ended or was released, and ``max_attempts``
           attempts already ended by a dead runner (released attempts do not
           count): ``interrupted``; ``done``.
        6. Otherwise ``won``: the next attempt, with ``token`` (a new random
           one if not given, or if it is the token of the attempt it
           replaces), ``runner`` and ``lease_end = now + lease_ms``.

        A claim for a slot that has no run:

        7. A takeover claim never creates a run: ``none``.
        8. ``slot_ms > now + 10 s``: ``early``.
        9. ``now - slot_ms > max_late_ms + 10 s``, or a newer slot of the
           job has a run that a manual claim did not start: ``late``.
        10. ``overlap="skip"`` and another slot of the job (an earlier one,
            or a later manual run) is running with a live lease: ``overlap``
            (``run`` is the newest such run).
        11. Other runs of the job found running with ended leases are marked
            ``interrupted``.
        12. ``won``: attempt 1 with ``token`` (a new random one if not given)
            and ``lease_end = now + lease_ms``. Finished runs beyond the
            newest ``history_size`` are pruned, except the newest run,
            running runs and runs whose slot lies within ``max_late_ms + 10 s``
            of now. A pending request of the job at ``slot_ms`` (rule 19) is
            marked ``claimed``: this run is the one it asked for.

        23. (After rule 7.) ``version`` is the version of the job's stored
            schedule the claim's slot was computed from (0: the code's, never
            changed; see :meth:`set_schedule`). A ``schedule`` or
            ``catch-up`` claim whose ``version`` is older than the job's
            stored version: ``stale``; nothing is written. A manual claim is
            not fenced, and a claim of a slot that has a run is decided by
            rules 1-6 whatever its version (a run that started goes on).

        16. (After rule 23.) A ``schedule`` or ``catch-up`` claim of a paused
            job: ``paused``; nothing is written.
        17. A ``manual`` claim takes the place of rules 8-10: the job must
            have a request at ``slot_ms`` that is still pending (else
            ``none``); a request whose ``expires_ms`` has passed is marked
            ``expired`` and the answer is ``late``; with ``overlap="skip"``
            and another slot of the job running with a live lease, the
            request is marked ``skipped`` and the answer is ``overlap``;
            otherwise rules 11 and 12 apply, the request is marked
            ``claimed``, and the run is a manual run. A paused job's request
            is run all the same.

        20. ``Run.attempts`` records every attempt, written by the operation
            that changes it: a won new run records attempt 1 (``running``); a
            won next attempt ends the current one as ``handed_over`` if it
            was released, else as ``expired`` (``ended_ms``: its lease end),
            and records the new one; a claim that marks the run
            ``interrupted`` ends a current attempt that was not released as
            ``expired`` at its lease end. A retry (rule 2) and a heartbeat
            change no attempt; ``finish`` ends the current attempt as
            ``success`` or ``failed`` (with its error) at ``now``, and
            ``release`` as ``handed_over`` at ``now``. The newest
            :data:`~leasecron.runs.MAX_ATTEMPTS_KEPT` attempts are kept.

        No attempt is ever given the token of the current attempt of the run
        (tokens fence a runner that was only frozen). The store keeps no
        older attempt's token: an older token comes back only through a retry
        of the very claim whose lost answer won that attempt, so no runner
        ever held it before.
        """
        request = ClaimRequest(
            job, slot_ms, runner, reason, lease_ms, max_attempts, max_late_ms, overlap, history_size, token, version
        )
        check_claim(request)  # as claim_one does, without its check of the request's type
        return self._claim(request)

    def claim_one(self, request: ClaimRequest) -> Claim:
        """:meth:`claim`, its arguments given as one :class:`ClaimRequest` (the shape
        :meth:`claim_many` takes them in): the engine builds a claim once and sends it so."""
        if not isinstance(request, ClaimRequest):
            raise ConfigError(f"request must be a ClaimRequest, not {shown(request)}")
        check_claim(request)
        return self._claim(request)

    def claim_many(self, requests: Sequence[ClaimRequest]) -> List[Claim]:
        """Decide many claims in one call: their answers, in the order of ``requests``.

        21. Each claim is decided exactly as :meth:`claim` decides it alone
            (rules 1-12, 16, 17, 20, 23), atomically on the store's clock, one
            after the other in the order given: a claim sees what an earlier
            claim of the batch wrote. The batch is not one transaction:
            another caller's operation may be decided between two of its
            claims. When the call raises, each of its claims may have been
            decided or not, as when a single claim's answer is lost: send
            them again with their tokens (rule 2).

        A backend decides a batch in one round trip (one per cluster node on
        Redis Cluster); the default :meth:`_claim_many` sends one claim after
        the other. Every request is checked before any is decided: a bad one
        is a :class:`~leasecron.ConfigError` naming its index.
        """
        checked = check_batch(requests, "requests", ClaimRequest, check_claim)
        return self._claim_many(checked) if checked else []

    def heartbeat(self, job: str, slot_ms: int, token: str, lease_ms: int) -> bool:
        """Move the lease end to ``now + lease_ms``.

        13. Only with the current token, while the run is running and its
            lease was not released. Returns whether the lease was renewed.
        """
        check_heartbeat(job, slot_ms, token, lease_ms)
        return self._heartbeat(job, slot_ms, token, lease_ms)

    def finish(self, job: str, slot_ms: int, token: str, status: str, error: Optional[str] = None) -> bool:
        """Record the end of the current attempt: ``status`` is ``"success"`` or ``"failed"``.

        14. Only with the current token of a running run. Returns whether the
            run was finished.
        """
        check_finish(job, slot_ms, token, status, error)
        return self._finish(job, slot_ms, token, status, error)

    def finish_many(self, finishes: Sequence[Finish]) -> List[bool]:
        """Record many finishes in one call: their answers (as :meth:`finish`'s), in the order of ``finishes``.

        25. Each finish is decided exactly as :meth:`finish` decides it alone
            (rules 14 and 20), atomically on the store's clock, one after the
            other in the order given: a finish sees what an earlier one of the
            batch wrote. The batch is not one transaction, and when the call
            raises, each of its finishes may have been decided or not: send
            them again with the same tokens (a finish decided already answers
            false; the run is ended either way).

        A backend decides a batch in one round trip (one per cluster node on Redis Cluster;
        SQLite, one transaction; PostgreSQL, one statement per 256); the default
        :meth:`_finish_many` sends one finish after the other. Every finish is checked before
        any is decided: a bad one is a :class:`~leasecron.ConfigError` naming its index.
        """
        checked = check_batch(finishes, "finishes", Finish, check_finish_of)
        return self._finish_many(checked) if checked else []

    def record_return(
        self,
        job: str,
        slot_ms: int,
        attempt: int,
        runner: str,
        returned_ms: int,
        status: str,
        error: Optional[str] = None,
    ) -> bool:
        """Record that attempt ``attempt``'s handler returned, where the run may not show it.

        26. Atomic, on the store's clock: the attempt numbered ``attempt``
            of the run of ``job`` at ``slot_ms``, if the store keeps it and
            ``runner`` made it, gets ``returned_ms`` (when its handler
            returned, on the store's clock as the runner estimated it),
            ``returned`` (``status``: ``"success"`` or ``"failed"``) and
            ``returned_error`` (``error``, the failed handler's text). Once:
            an attempt that has a return answers false. Nothing else of the
            run changes (its status, error, ``finished_ms``, lease, token and
            the attempt's ``outcome`` and ``ended_ms`` stay: fencing is
            untouched); any attempt may carry it, the current one of a
            running run too. Returns whether it was recorded: false when the
            run or that attempt is unknown, or another runner made it.

        A runner calls it when its handler returned but the end could not be
        recorded (the finish did not reach the store before the run was lost,
        or the store refused it); ``show``, ``runs`` and the dashboard show it.
        """
        check_return(job, slot_ms, attempt, runner, returned_ms, status, error)
        return self._record_return(job, slot_ms, attempt, runner, returned_ms, status, error)

    def release(self, job: str, slot_ms: int, token: str) -> bool:
        """Hand the run over: set ``lease_end = now`` and record the hand-over.

        15. Only with the current token of a running run whose lease was not
            released already. A released attempt does not count against
            ``max_attempts``, and its lease can no longer be renewed.
            Returns whether the run was released.
        """
        check_token(job, slot_ms, token)
        return self._release(job, slot_ms, token)

    def pause(self, job: str, *, by: str, note: Optional[str] = None) -> JobState:
        """Pause ``job`` for every instance, until :meth:`resume`; returns its state.

        18. Atomic, on the store's clock: the job is marked paused ``by``
            (who), at ``now``, with ``note`` (why). Pausing a paused job
            replaces who, when and why. Its running runs go on (heartbeats,
            finishes, takeovers and hand-overs work as before); a new
            ``schedule`` or ``catch-up`` claim is answered ``paused`` (rule
            16). A job need not have runs to be paused.
        """
        check_job_name(job)
        check_actor(by)
        check_note(note)
        return self._pause(job, by, note)

    def resume(self, job: str, *, by: str) -> JobState:
        """Undo :meth:`pause` (rule 18: the pause's who, when and note are cleared); the next
        slot runs as usual, and no slot skipped while paused is caught up. Resuming a job
        that is not paused changes nothing. ``by`` says who resumed it (for the log).
        Returns the job's state."""
        check_job_name(job)
        check_actor(by)
        return self._resume(job, by)

    def request_run(self, job: str, *, by: str, max_late_ms: int = ClaimRequest.max_late_ms) -> ManualRequest:
        """Ask for one manual run of ``job`` now; returns the request (its ``slot_ms``).

        19. Atomic, on the store's clock: the request's slot is ``now``, or
            the first millisecond after it at which the job has neither a
            run nor a request; it expires at ``now + max_late_ms + 10 s``.
            It is ``pending`` until a ``manual`` claim for its slot acts on
            it (rule 17); :meth:`pending_requests` lists it while it is
            pending or claimed, until it expires. The store keeps a job's pending requests and the
            newest :data:`REQUESTS_KEPT` that ended (claimed, skipped,
            expired); older ones are deleted by this call.
        """
        check_job_name(job)
        check_actor(by)
        check_int("max_late_ms", max_late_ms, 0)
        return self._request_run(job, by, max_late_ms)

    def set_schedule(
        self,
        job: str,
        *,
        by: str,
        schedule: Optional[ScheduleSpec] = None,
        tz: Optional[str] = None,
        task: Optional[str] = None,
        kwargs: Optional[Mapping[str, Any]] = None,
        options: Optional[Mapping[str, Any]] = None,
    ) -> StoredSchedule:
        """Store ``job``'s schedule, replacing what the store held of it; returns the record.

        24. Atomic, on the store's clock: the job's record becomes an
            ``override`` (``schedule`` and ``tz``, no ``task``), a ``stored``
            job (``task``, with its ``kwargs`` and ``options``), or, with no
            ``schedule``, ``code`` (nothing stored: a reset override or a
            deleted stored job). Its ``version`` becomes one more than the
            job's last (1 for its first), ``updated_by`` is ``by`` and
            ``updated_ms`` is ``now``; the record is kept when it goes back
            to ``code``, so the version never goes back. From then on a
            claim from an older version is answered ``stale`` (rule 23), and
            :meth:`schedule_changes` lists the record.

        Everything is checked before the store is asked (:func:`~leasecron.stored.check_schedule_fields`):
        the cron string and zone as an instance parses them, the options,
        and ``kwargs`` that are not a JSON object raise :class:`~leasecron.ConfigError`.
        """
        check_actor(by)
        text, zone, stored_kwargs, stored_options = check_schedule_fields(job, schedule, tz, task, kwargs, options)
        if text is None:
            return self._set_schedule(job, by, ScheduleSource.CODE, None, None, None, {}, {})
        source = ScheduleSource.OVERRIDE if task is None else ScheduleSource.STORED
        return self._set_schedule(job, by, source, text, zone, task, stored_kwargs, stored_options)

    # -- instances in the store (no rule reads them) ---------------------------------------

    def announce(self, announcement: Announcement) -> None:
        """Keep ``announcement`` as its runner's, stamped ``seen_ms`` = now (``started_ms`` = now
        too if the runner has none kept), in one atomic step; announcements not refreshed within
        :data:`~leasecron.announcements.INSTANCE_TTL_MS` are dropped. Read them with :meth:`instances`."""
        self._announce(check_announcement(announcement))

    def withdraw(self, runner: str) -> None:
        """Forget the announcement of ``runner``, if any (a stopping instance)."""
        _check_text("runner", runner)
        self._withdraw(runner)

    def poll(self, since: int, announce: Optional[Announcement] = None) -> Poll:
        """:meth:`StoreReads.poll <leasecron.stores.reads.StoreReads.poll>`; with ``announce``, the
        same round trip also refreshes that announcement (:meth:`announce`) where the store can."""
        check_int("since", since, 0)
        return self._poll(since) if announce is None else self._poll_announcing(since, check_announcement(announce))


__getattr__ = old_names_of(__name__)
