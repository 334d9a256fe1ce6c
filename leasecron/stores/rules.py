"""The lease rules written once, for the stores that run them in Python (memory, SQLite).

:class:`TableStore` carries out every operation of the store contract on a
:class:`~leasecron.stores.table.Table`, the reads and writes a backend performs inside one
atomic section (the memory store under a lock, SQLite inside ``BEGIN IMMEDIATE``). The decisions
live here and in :mod:`~leasecron.stores.claim_rules` (a claim's), once, each tagged with the
number of the rule it carries out (``docs/protocol.rst``);
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
from ..runs import LATE_TOLERANCE_MS, Claim, Run
from ..states import AttemptOutcome, RequestState, Status
from ..stored import JobOverview, Overview, Poll, ScheduleChanges, StoredSchedule, overview_names
from .base import REQUESTS_KEPT, ClaimRequest, Finish, Store
from .claim_rules import decide, settled
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
        answer = self._settled_claim(request)
        if answer is not None:
            return answer
        with self._write() as (table, now):
            return decide(table, now, request)

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
            answers.append(settled(request, record, now) if alone else None)
        undecided = [i for i, answer in enumerate(answers) if answer is None]
        for start in range(0, len(undecided), WRITES_MAX):
            with self._write() as (table, now):
                for i in undecided[start : start + WRITES_MAX]:
                    answers[i] = decide(table, now, requests[i])
        return [answer for answer in answers if answer is not None]

    def _settled_claim(self, request: ClaimRequest) -> Optional[Claim]:
        """The answer to a claim that a read alone decides, without the write lock
        (:func:`~leasecron.stores.claim_rules.settled`).

        Most claims are of this kind (every instance but one claims each slot; a backup's
        check of a run that ended), and on SQLite the write lock is what instances queue for.
        The answer holds as of the read: a lease still alive at ``now``, read after the record,
        was alive when the record was read, and an ended run stays ended.
        """
        record = self._read_record(request.job, request.slot_ms)
        return None if record is None else settled(request, record, self.now_ms())

    def _read_record(self, job: str, slot_ms: int) -> Optional[Record]:
        """The record of ``job`` at ``slot_ms``, read alone: a read section, unless the backend
        reads one record more cheaply (every claim begins with this read)."""
        with self._read() as table:
            return table.get(job, slot_ms)

    def _heartbeat(self, job: str, slot_ms: int, token: str, lease_ms: int) -> bool:
        with self._write() as (table, now):
            if table.plain_steps:  # rule 13 in one step
                return table.renew_current(job, slot_ms, token, now + lease_ms)
            record = _current(table, job, slot_ms, token)
            if record is None or record.released:  # rule 13 (and rule 20: no attempt changes)
                return False
            table.renew(job, slot_ms, now + lease_ms)
            return True

    def _finish(self, job: str, slot_ms: int, token: str, status: str, error: Optional[str]) -> bool:
        with self._write() as (table, now):
            return _finish(table, now, Finish(job, slot_ms, token, status, error))

    def _finish_many(self, finishes: List[Finish]) -> List[bool]:
        """Rule 25: write sections of at most :data:`WRITES_MAX` finishes (one SQLite
        transaction each), each finish decided in its turn as :meth:`_finish` decides it."""
        answers: List[bool] = []
        for start in range(0, len(finishes), WRITES_MAX):
            with self._write() as (table, now):
                answers += [_finish(table, now, finish) for finish in finishes[start : start + WRITES_MAX]]
        return answers

    def _record_return(
        self, job: str, slot_ms: int, attempt: int, runner: str, returned_ms: int, status: str, error: Optional[str]
    ) -> bool:
        with self._write() as (table, _):
            record = table.get(job, slot_ms)
            if record is None or not record.record_return(attempt, runner, returned_ms, status, error):  # rule 26
                return False
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

    def _overview(self, jobs: List[str]) -> Overview:
        """One read section, its reads in one snapshot (:meth:`Table.snapshot`: the memory store's
        lock; on SQLite one read transaction of three statements, the pauses, the schedules and the
        jobs' runs), the clock read inside it."""
        with self._read() as table, table.snapshot():
            now = self.now_ms()
            paused = frozenset(state.job for state in table.pauses())
            schedules = {record.job: record for record in table.schedule_changes(0).changes}
            names = overview_names(jobs, schedules.values())
            found = table.summaries(names)
        jobs_seen = {}
        for job in names:
            record, ends = found.get(job) or (None, {})
            jobs_seen[job] = JobOverview(job, None if record is None else record.to_run(), ends)
        return Overview(now, paused, schedules, jobs_seen)

    def _jobs(self) -> List[str]:
        with self._read() as table:
            return table.jobs()


def _current(table: Table, job: str, slot_ms: int, token: str) -> Optional[Record]:
    """The record if it is running with ``token`` as its current token."""
    record = table.get(job, slot_ms)
    if record is None or record.status != Status.RUNNING or record.token != token:
        return None
    return record


def _finish(table: Table, now: int, finish: Finish) -> bool:
    """Rules 14 and 20: ``finish`` decided at ``now`` (in one step of the table, when it can)."""
    if table.plain_steps and table.finish_plain(*finish, now):
        return True
    record = _current(table, finish.job, finish.slot_ms, finish.token)
    if record is None:  # rule 14
        return False
    record.status = finish.status
    record.error = finish.error
    record.finished_ms = now
    record.end_attempt(finish.status, now, finish.error)  # rule 20
    table.update(record)
    return True


def _as_read(made: ManualRequest, now: int) -> ManualRequest:
    """A request as the store reads it at ``now``: a pending one whose time ran out is expired."""
    if made.state == RequestState.PENDING and now > made.expires_ms:
        return dataclasses.replace(made, state=RequestState.EXPIRED)
    return made


def _job_state(table: Table, job: str, now: int) -> JobState:
    requests = tuple(_as_read(made, now) for made in table.requests(job))
    return dataclasses.replace(table.pause(job) or JobState(job), requests=requests)
