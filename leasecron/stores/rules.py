"""The lease rules written once, for the stores that run them in Python (memory, SQLite).

:class:`TableStore` carries out every operation of the store contract on a
:class:`~leasecron.stores.table.Table`, the reads and writes a backend performs inside one
atomic section (the memory store under a lock, SQLite inside ``BEGIN IMMEDIATE``). The decisions
live here, once, each tagged with the number of the rule it carries out (``docs/protocol.rst``);
Redis (``claim.lua``) and PostgreSQL (its migrations) state the same rules in their own language,
with the same tags, and the conformance suite proves all of them alike. :class:`Record`,
:func:`new_token` (:mod:`leasecron.stores.records`) and :class:`Table` are importable from here.
"""

from __future__ import annotations

import abc
import dataclasses
from contextlib import AbstractContextManager
from typing import Any, Dict, List, Optional, Tuple

from ..announcements import Announcement, LiveInstance, read_announcement
from ..controls import JobState, ManualRequest
from ..runs import EARLY_TOLERANCE_MS, LATE_TOLERANCE_MS, Claim, Run, slot_datetime
from ..states import AttemptOutcome, Outcome, Reason, RequestState, Status
from ..stored import Poll, ScheduleChanges, StoredSchedule
from .base import REQUESTS_KEPT, ClaimRequest, Store
from .records import Record, new_token, read_record
from .table import NewSlot, Table

__all__ = ["NewSlot", "Record", "Table", "TableStore", "new_token", "read_record", "WRITES_MAX"]

#: The most claims of a batch decided in one write section: on SQLite a section holds the file's
#: write lock, which other instances queue for, so a batch of thousands takes it several times.
WRITES_MAX = 256


class TableStore(Store):
    """A store whose operations are the shared rules run on a :class:`Table`.

    A backend implements :meth:`_write`, :meth:`_read`, ``now_ms`` and ``close``.
    """

    @abc.abstractmethod
    def _write(self) -> AbstractContextManager[Tuple[Table, int]]:
        """An atomic read-write section: yields the table and the store's ``now``.

        ``now`` is read once the section holds its lock, so that the order of
        the sections and of their clocks agree.
        """

    @abc.abstractmethod
    def _read(self) -> AbstractContextManager[Table]:
        """A consistent read-only section."""

    # -- the contract --------------------------------------------------------

    def _claim(self, request: ClaimRequest) -> Claim:
        settled = self._settled_claim(request)
        if settled is not None:
            return settled
        with self._write() as (table, now):
            record = table.get(request.job, request.slot_ms)
            if record is not None:
                return _claim_existing(table, now, record, request)
            return _claim_new(table, now, request)

    def _claim_many(self, requests: List[ClaimRequest]) -> List[Claim]:
        """Rule 21: one read section settles what a read alone decides (as :meth:`_claim` does,
        for each claim whose job no earlier claim of the batch names), then write sections of at
        most :data:`WRITES_MAX` claims decide the others, in their order."""
        if len(requests) == 1:
            return [self._claim(requests[0])]
        with self._read() as table:
            records = [table.get(request.job, request.slot_ms) for request in requests]
        now = self.now_ms()  # read after the records: a lease alive now was alive at the read
        answers: List[Optional[Claim]] = []
        seen = set()
        for request, record in zip(requests, records):
            alone = request.job not in seen  # an earlier claim of its job may change what it finds
            seen.add(request.job)
            answers.append(_settled(request, record, now) if alone else None)
        undecided = [i for i, answer in enumerate(answers) if answer is None]
        for start in range(0, len(undecided), WRITES_MAX):
            with self._write() as (table, now):
                for i in undecided[start : start + WRITES_MAX]:
                    request = requests[i]
                    found = table.get(request.job, request.slot_ms)
                    if found is None:
                        answers[i] = _claim_new(table, now, request)
                    else:
                        answers[i] = _claim_existing(table, now, found, request)
        return [answer for answer in answers if answer is not None]

    def _settled_claim(self, request: ClaimRequest) -> Optional[Claim]:
        """The answer to a claim that a read alone decides, without the write lock (:func:`_settled`).

        Most claims are of this kind (every instance but one claims each slot; a backup's
        check of a run that ended), and on SQLite the write lock is what instances queue for.
        The answer holds as of the read: a lease still alive at ``now``, read after the record,
        was alive when the record was read, and an ended run stays ended.
        """
        with self._read() as table:
            record = table.get(request.job, request.slot_ms)
        return None if record is None else _settled(request, record, self.now_ms())

    def _heartbeat(self, job: str, slot_ms: int, token: str, lease_ms: int) -> bool:
        with self._write() as (table, now):
            record = _current(table, job, slot_ms, token)
            if record is None or record.released:  # rule 13 (and rule 20: no attempt changes)
                return False
            table.renew(job, slot_ms, now + lease_ms)
            return True

    def _finish(self, job: str, slot_ms: int, token: str, status: str, error: Optional[str]) -> bool:
        with self._write() as (table, now):
            record = _current(table, job, slot_ms, token)
            if record is None:  # rule 14
                return False
            record.status = status
            record.error = error
            record.finished_ms = now
            record.end_attempt(status, now, error)  # rule 20
            table.update(record)
            return True

    def _release(self, job: str, slot_ms: int, token: str) -> bool:
        with self._write() as (table, now):
            record = _current(table, job, slot_ms, token)
            if record is None or record.released:  # rule 15
                return False
            record.lease_end_ms = now
            record.released = True
            record.handovers += 1
            record.end_attempt(AttemptOutcome.HANDED_OVER, now)  # rule 20
            table.update(record)
            return True

    def _pause(self, job: str, by: str, note: Optional[str]) -> JobState:
        with self._write() as (table, now):
            table.set_pause(JobState(job, True, by, now, note))  # rule 18
            return _job_state(table, job, now)

    def _resume(self, job: str, by: str) -> JobState:
        with self._write() as (table, now):
            table.clear_pause(job)  # rule 18
            return _job_state(table, job, now)

    def _set_schedule(
        self,
        job: str,
        by: str,
        source: str,
        schedule: Optional[str],
        tz: Optional[str],
        task: Optional[str],
        kwargs: Dict[str, Any],
        options: Dict[str, Any],
    ) -> StoredSchedule:
        with self._write() as (table, now):
            before = table.schedule(job)
            version = (before.version if before is not None else 0) + 1  # rule 24
            record = StoredSchedule(job, version, source, schedule, tz, task, kwargs, options, by, now)
            table.save_schedule(record)
            return record

    def _announce(self, announcement: Announcement) -> None:
        with self._write() as (table, now):
            table.drop_instances(now - self.instance_ttl_ms)
            table.save_instance(announcement.runner, announcement.to_json(), now)

    def _withdraw(self, runner: str) -> None:
        with self._write() as (table, _):
            table.drop_instance(runner)

    def _instances(self) -> List[LiveInstance]:
        with self._read() as table:
            rows = table.instances(self.now_ms() - self.instance_ttl_ms)
        return [read_announcement(*row) for row in rows]

    def _stored_schedule(self, job: str) -> Optional[StoredSchedule]:
        with self._read() as table:
            return table.schedule(job)

    def _schedule_changes(self, since: int) -> ScheduleChanges:
        with self._read() as table:
            return table.schedule_changes(since)

    def _poll(self, since: int) -> Poll:
        """One read section."""
        with self._read() as table:
            return Poll(table.pending(self.now_ms()), table.schedule_changes(since))

    def _job_state(self, job: str) -> JobState:
        with self._read() as table:
            return _job_state(table, job, self.now_ms())

    def _job_states(self) -> List[JobState]:
        with self._read() as table:
            pauses = {state.job: state for state in table.pauses()}
            requests = table.requests(None)
            now = self.now_ms()
        kept: Dict[str, List[ManualRequest]] = {}
        for made in requests:
            kept.setdefault(made.job, []).append(_as_read(made, now))
        return [
            dataclasses.replace(pauses.get(job) or JobState(job), requests=tuple(kept.get(job, ())))
            for job in sorted(set(pauses) | set(kept))
        ]

    def _request_run(self, job: str, by: str, max_late_ms: int) -> ManualRequest:
        with self._write() as (table, now):
            slot_ms = now
            while table.get(job, slot_ms) is not None or table.request(job, slot_ms) is not None:  # rule 19
                slot_ms += 1
            made = ManualRequest(job, slot_ms, by, now + max_late_ms + LATE_TOLERANCE_MS, RequestState.PENDING)
            table.add_request(made)
            table.prune_requests(job, REQUESTS_KEPT, now)  # rule 19
            return made

    def _pending_requests(self) -> List[ManualRequest]:
        with self._read() as table:
            return table.pending(self.now_ms())

    def _get_run(self, job: str, slot_ms: int) -> Optional[Run]:
        with self._read() as table:
            record = table.get(job, slot_ms)
        return None if record is None else record.to_run()

    def _unfinished(self, job: str) -> List[Run]:
        with self._read() as table:
            return [r.to_run() for r in table.running(job)]

    def _runs(self, job: str, limit: int) -> List[Run]:
        with self._read() as table:
            return [r.to_run() for r in table.latest(job, limit)]

    def _recent_runs(self, jobs: List[str], limit: int) -> Dict[str, List[Run]]:
        """One read section (the memory store's lock; one SQLite statement)."""
        with self._read() as table:
            found = table.recent(jobs, limit)
        return {job: [record.to_run() for record in found.get(job, ())] for job in jobs}

    def _jobs(self) -> List[str]:
        with self._read() as table:
            return table.jobs()


def _attempt_token(token: Optional[str], replaced: Optional[str] = None) -> str:
    """The token of a new attempt: the claim's ``token``, unless it is None or the token of the
    attempt it replaces (never given twice): then a new random one."""
    return token if token is not None and token != replaced else new_token()


def _superseded(slot_ms: int) -> str:
    return f"superseded: slot {slot_datetime(slot_ms).isoformat()} started first"


def _current(table: Table, job: str, slot_ms: int, token: str) -> Optional[Record]:
    """The record if it is running with ``token`` as its current token."""
    record = table.get(job, slot_ms)
    if record is None or record.status != Status.RUNNING or record.token != token:
        return None
    return record


def _as_read(made: ManualRequest, now: int) -> ManualRequest:
    """A request as the store reads it at ``now``: a pending one whose time ran out is expired."""
    if made.state == RequestState.PENDING and now > made.expires_ms:
        return dataclasses.replace(made, state=RequestState.EXPIRED)
    return made


def _job_state(table: Table, job: str, now: int) -> JobState:
    requests = tuple(_as_read(made, now) for made in table.requests(job))
    return dataclasses.replace(table.pause(job) or JobState(job), requests=requests)


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


def _settled(request: ClaimRequest, record: Optional[Record], now: int) -> Optional[Claim]:
    """The answer a read of the slot's ``record`` alone decides at ``now``: the run has ended
    (``done``) or holds a live lease (``running``); None otherwise (no run, a lease that ended,
    or the retry of the claim that won the current attempt: it renews the lease, a write)."""
    if record is None:
        return None
    if record.status != Status.RUNNING:  # rule 1
        return Claim(Outcome.DONE, record.to_run())
    if not record.won_by(request.token, request.runner) and record.lease_end_ms > now:  # rule 3
        return Claim(Outcome.RUNNING, record.to_run())
    return None


def _claim_existing(table: Table, now: int, record: Record, request: ClaimRequest) -> Claim:
    """Rules 1-6: the claim of a slot that has a run."""
    if record.status != Status.RUNNING:  # rule 1
        return Claim(Outcome.DONE, record.to_run())
    if record.won_by(request.token, request.runner):  # rule 2: the retry of the claim that won this attempt
        record.lease_end_ms = now + request.lease_ms
        table.renew(record.job, record.slot_ms, record.lease_end_ms)
        return Claim(Outcome.WON, record.to_run())
    if record.lease_end_ms > now:  # rule 3
        return Claim(Outcome.RUNNING, record.to_run())
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
    return Claim(Outcome.DONE, record.to_run())
