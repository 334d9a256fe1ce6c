"""The rules of a claim (1-12, 16, 17, 20 and 23 of ``docs/protocol.rst``) as the stores that run
them in Python decide them: :func:`settled`, what a read alone decides, and :func:`decide`, a
claim decided in a write section on a :class:`~leasecron.stores.table.Table`.
:class:`~leasecron.stores.rules.TableStore` calls them; each branch is tagged with its rule.
"""

from __future__ import annotations

from typing import List, Optional

from ..runs import EARLY_TOLERANCE_MS, LATE_TOLERANCE_MS, Attempt, Claim, slot_datetime
from ..runs import Run
from ..states import AttemptOutcome, Outcome, Reason, RequestState, Status
from .claim_request import ClaimRequest
from .records import Record, new_token
from .table import Table

__all__ = ["decide", "settled"]


def _attempt_token(token: Optional[str], replaced: Optional[str] = None) -> str:
    """The token of a new attempt: the claim's ``token``, unless it is None or the token of the
    attempt it replaces (never given twice): then a new random one."""
    return token if token is not None and token != replaced else new_token()


def _superseded(slot_ms: int) -> str:
    return f"superseded: slot {slot_datetime(slot_ms).isoformat()} started first"


def _live(running: List[Record], now: int) -> Optional[Record]:
    """The newest of ``running`` whose lease is alive."""
    alive = [record for record in running if record.lease_end_ms > now]
    return alive[-1] if alive else None


def _claim_new(table: Table, now: int, request: ClaimRequest) -> Claim:
    """Rules 7-12, 16, 17 and 23: the claim of a slot that has no run."""
    job, slot_ms = request.job, request.slot_ms
    if request.reason == Reason.TAKEOVER:  # rule 7
        return Claim(Outcome.NONE)
    if request.reason == Reason.MANUAL:
        asked = table.request(job, slot_ms)
        if asked is None or asked.state != RequestState.PENDING:  # rule 17
            return Claim(Outcome.NONE)
        if now > asked.expires_ms:  # rule 17
            table.end_request(job, slot_ms, RequestState.EXPIRED)
            return Claim(Outcome.LATE)
        running = table.running(job)
        alive = _live(running, now) if request.overlap == "skip" else None
        if alive is not None:  # rule 17
            table.end_request(job, slot_ms, RequestState.SKIPPED)
            return Claim(Outcome.OVERLAP, alive.to_run())
        requested = True
    else:
        seen = table.new_slot(job, slot_ms)
        if seen.schedule_version > request.version:  # rule 23
            return Claim(Outcome.STALE)
        if seen.paused:  # rule 16
            return Claim(Outcome.PAUSED)
        if slot_ms > now + EARLY_TOLERANCE_MS:  # rule 8
            return Claim(Outcome.EARLY)
        if now - slot_ms > request.max_late_ms + LATE_TOLERANCE_MS:  # rule 9
            return Claim(Outcome.LATE)
        if seen.newest_scheduled_ms is not None and seen.newest_scheduled_ms > slot_ms:  # rule 9
            newest = table.get(job, seen.newest_scheduled_ms)
            return Claim(Outcome.LATE, None if newest is None else newest.to_run())
        running = table.running(job)
        alive = _live(running, now) if request.overlap == "skip" else None
        if alive is not None:  # rule 10
            return Claim(Outcome.OVERLAP, alive.to_run())
        requested = seen.requested
    for other in running:
        if other.lease_end_ms <= now:  # rule 11
            other.interrupt(now, _superseded(slot_ms))
            table.update(other)
    record = Record(  # rule 12
        job=job,
        slot_ms=slot_ms,
        attempt=1,
        token=_attempt_token(request.token),
        runner=request.runner,
        status=Status.RUNNING,
        lease_end_ms=now + request.lease_ms,
        released=False,
        handovers=0,
        reason=request.reason,
        error=None,
        started_ms=now,
        finished_ms=None,
        manual=request.reason == Reason.MANUAL,
    )
    record.begin_attempt()  # rule 20
    table.insert(record)
    if requested:  # rules 12 and 17: the request at this slot is claimed
        table.end_request(job, slot_ms, RequestState.CLAIMED)
    table.prune(job, request.history_size, now - request.max_late_ms - LATE_TOLERANCE_MS)
    return Claim(Outcome.WON, record.to_run())


_PLAIN_REASONS = (Reason.SCHEDULE, Reason.CATCH_UP)


def decide(table: Table, now: int, request: ClaimRequest) -> Claim:
    """Rules 1-12, 16, 17, 20 and 23: ``request`` decided at ``now`` in a write section."""
    plain = _claim_plain(table, now, request) if table.plain_steps else None
    if plain is not None:
        return plain
    record = table.get(request.job, request.slot_ms)
    return _claim_new(table, now, request) if record is None else _claim_existing(table, now, record, request)


def _claim_plain(table: Table, now: int, request: ClaimRequest) -> Optional[Claim]:
    """The commonest winning claim, in one step of the table (:meth:`Table.insert_plain`): a
    scheduled claim of a slot that has no run, neither early nor late (rules 8 and 9), whose job
    has no newer scheduled run (rule 9), no running run (rules 10 and 11), no pause (rule 16), no
    request at the slot (rule 12) and no newer stored schedule (rule 23): ``won``, attempt 1
    (rules 12 and 20). None when any of that does not hold: nothing was written."""
    slot_ms = request.slot_ms
    if (
        request.reason not in _PLAIN_REASONS
        or slot_ms > now + EARLY_TOLERANCE_MS  # rule 8
        or now - slot_ms > request.max_late_ms + LATE_TOLERANCE_MS  # rule 9
    ):
        return None
    runner, reason = request.runner, request.reason
    run = Run(  # rules 12 and 20, by position
        request.job, slot_ms, 1, _attempt_token(request.token), runner, Status.RUNNING, now + request.lease_ms,
        False, reason, None, now, None, (Attempt(1, runner, reason, now, None, AttemptOutcome.RUNNING),),
    )  # fmt: skip
    horizon_ms = now - request.max_late_ms - LATE_TOLERANCE_MS
    if not table.insert_plain(run, request.version, request.history_size, horizon_ms):
        return None
    return Claim(Outcome.WON, run)


def _answer(outcome: Outcome, record: Record, request: ClaimRequest) -> Claim:
    """A ``running`` or ``done`` answer about ``record``: brief when ``request`` asks so."""
    if request.answers_brief(outcome):
        return Claim(outcome, None, record.brief())
    return Claim(outcome, record.to_run())


def settled(request: ClaimRequest, record: Optional[Record], now: int) -> Optional[Claim]:
    """The answer a read of the slot's ``record`` alone decides at ``now``: the run has ended
    (``done``) or holds a live lease (``running``); None otherwise (no run, a lease that ended,
    or the retry of the claim that won the current attempt: it renews the lease, a write)."""
    if record is None:
        return None
    if record.status != Status.RUNNING:  # rule 1
        return _answer(Outcome.DONE, record, request)
    if not record.won_by(request.token, request.runner) and record.lease_end_ms > now:  # rule 3
        return _answer(Outcome.RUNNING, record, request)
    return None


def _claim_existing(table: Table, now: int, record: Record, request: ClaimRequest) -> Claim:
    """Rules 1-6: the claim of a slot that has a run."""
    if record.status != Status.RUNNING:  # rule 1
        return _answer(Outcome.DONE, record, request)
    if record.won_by(request.token, request.runner):  # rule 2: the retry of the claim that won this attempt
        record.lease_end_ms = now + request.lease_ms
        table.renew(record.job, record.slot_ms, record.lease_end_ms)
        return Claim(Outcome.WON, record.to_run())
    if record.lease_end_ms > now:  # rule 3
        return _answer(Outcome.RUNNING, record, request)
    newest = table.newest(record.job)
    if newest is not None and newest.slot_ms > record.slot_ms:  # rule 4
        record.interrupt(now, _superseded(newest.slot_ms))
    elif record.attempt - record.handovers >= request.max_attempts:  # rule 5
        record.interrupt(now, f"max_attempts ({request.max_attempts}) used up by runners that died")
    else:  # rule 6
        record.close_attempt()  # rule 20: handed_over if released, else expired
        record.attempt += 1
        record.token = _attempt_token(request.token, record.token)
        record.runner = request.runner
        record.lease_end_ms = now + request.lease_ms
        record.released = False
        record.reason = request.reason
        record.started_ms = now
        record.begin_attempt()
        table.update(record)
        return Claim(Outcome.WON, record.to_run())
    table.update(record)
    return _answer(Outcome.DONE, record, request)
