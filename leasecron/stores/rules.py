"""The lease rules written once, for the stores that run them in Python.

:class:`TableStore` carries out every operation of the store contract on a
:class:`Table`: a handful of reads and writes that a backend performs inside
one atomic section (the memory store under a lock, SQLite inside ``BEGIN
IMMEDIATE``). The decisions themselves live here, once, each tagged with the
number of the rule it carries out (``docs/protocol.rst``, and the docstrings
of :class:`~leasecron.Store`).

Redis (``claim.lua``) and PostgreSQL (the claim function of its migrations)
state the same rules in their own language, with the same tags; the shared
conformance suite proves all of them alike.

What a store keeps of a run, :class:`~leasecron.stores.records.Record`, and
the token maker live in :mod:`leasecron.stores.records`; they are importable
from here too.
"""

from __future__ import annotations

import abc
from contextlib import AbstractContextManager
from typing import List, Optional, Tuple

from ..runs import EARLY_TOLERANCE_MS, LATE_TOLERANCE_MS, Claim, Outcome, Reason, Run, Status, slot_datetime
from .base import ClaimRequest, Store
from .records import Record, new_token, read_record

__all__ = ["Record", "Table", "TableStore", "new_token", "read_record"]


class Table(abc.ABC):
    """The reads and writes of one atomic section of a :class:`TableStore`."""

    @abc.abstractmethod
    def get(self, job: str, slot_ms: int) -> Optional[Record]:
        """The record of ``job`` at ``slot_ms`` (a copy the caller may change)."""

    @abc.abstractmethod
    def newest(self, job: str) -> Optional[Record]:
        """The record of ``job``'s newest slot."""

    @abc.abstractmethod
    def running(self, job: str) -> List[Record]:
        """The running records of ``job``, oldest first."""

    @abc.abstractmethod
    def live_before(self, job: str, before_ms: int, now_ms: int) -> Optional[Record]:
        """The newest running record of ``job`` with a slot before ``before_ms``
        whose lease is alive (``lease_end_ms > now_ms``)."""

    @abc.abstractmethod
    def interrupt_expired(self, job: str, before_ms: int, now_ms: int, why: str) -> None:
        """Mark ``interrupted`` every running record of ``job`` with a slot before
        ``before_ms`` whose lease ended (``lease_end_ms <= now_ms``)."""

    @abc.abstractmethod
    def latest(self, job: str, limit: int) -> List[Record]:
        """At most ``limit`` records of ``job``, newest slot first."""

    @abc.abstractmethod
    def jobs(self) -> List[str]:
        """The job names that have records, sorted."""

    @abc.abstractmethod
    def insert(self, record: Record) -> None:
        """Store a record for a slot that has none."""

    @abc.abstractmethod
    def update(self, record: Record) -> None:
        """Store the changed fields of an existing record."""

    @abc.abstractmethod
    def prune(self, job: str, keep: int, horizon_ms: int) -> None:
        """Delete ``job``'s finished records beyond the newest ``keep`` finished ones.

        Never the job's newest record, a running record, or one whose slot is
        at or after ``horizon_ms``.
        """


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
        job, slot_ms = request.job, request.slot_ms
        with self._write() as (table, now):
            record = table.get(job, slot_ms)
            if record is not None:
                return _claim_existing(table, now, record, request)
            if request.reason == Reason.TAKEOVER:  # rule 7
                return Claim(Outcome.NONE)
            if slot_ms > now + EARLY_TOLERANCE_MS:  # rule 8
                return Claim(Outcome.EARLY)
            if now - slot_ms > request.max_late_ms + LATE_TOLERANCE_MS:  # rule 9
                return Claim(Outcome.LATE)
            newest = table.newest(job)
            if newest is not None and newest.slot_ms > slot_ms:  # rule 9
                return Claim(Outcome.LATE, newest.to_run())
            if request.overlap == "skip":  # rule 10
                alive = table.live_before(job, slot_ms, now)
                if alive is not None:
                    return Claim(Outcome.OVERLAP, alive.to_run())
            table.interrupt_expired(job, slot_ms, now, _superseded(slot_ms))  # rule 11
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
            )
            table.insert(record)
            table.prune(job, request.history_size, now - request.max_late_ms - LATE_TOLERANCE_MS)
            return Claim(Outcome.WON, record.to_run())

    def _settled_claim(self, request: ClaimRequest) -> Optional[Claim]:
        """The answer to a claim that a read alone decides, without the write lock: the slot's
        run has ended (``done``) or holds a live lease (``running``); None otherwise, and for the
        retry of the claim that won the current attempt (it renews the lease: a write).

        Most claims are of this kind (every instance but one claims each slot; a backup's
        check of a run that ended), and on SQLite the write lock is what instances queue for.
        The answer holds as of the read: a lease still alive at ``now``, read after the record,
        was alive when the record was read, and an ended run stays ended.
        """
        with self._read() as table:
            record = table.get(request.job, request.slot_ms)
        if record is None:
            return None
        if record.status != Status.RUNNING:  # rule 1
            return Claim(Outcome.DONE, record.to_run())
        if not record.won_by(request.token, request.runner) and record.lease_end_ms > self.now_ms():  # rule 3
            return Claim(Outcome.RUNNING, record.to_run())
        return None

    def _heartbeat(self, job: str, slot_ms: int, token: str, lease_ms: int) -> bool:
        with self._write() as (table, now):
            record = _current(table, job, slot_ms, token)
            if record is None or record.released:  # rule 13
                return False
            record.lease_end_ms = now + lease_ms
            table.update(record)
            return True

    def _finish(self, job: str, slot_ms: int, token: str, status: str, error: Optional[str]) -> bool:
        with self._write() as (table, now):
            record = _current(table, job, slot_ms, token)
            if record is None:  # rule 14
                return False
            record.status = status
            record.error = error
            record.finished_ms = now
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
            table.update(record)
            return True

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

    def _jobs(self) -> List[str]:
        with self._read() as table:
            return table.jobs()


def _attempt_token(token: Optional[str], replaced: Optional[str] = None) -> str:
    """The token of a new attempt: the claim's ``token``, unless it is None or the token of the
    attempt the new one replaces (never given twice): then a new random one."""
    return token if token is not None and token != replaced else new_token()


def _superseded(slot_ms: int) -> str:
    return f"superseded: slot {slot_datetime(slot_ms).isoformat()} started first"


def _current(table: Table, job: str, slot_ms: int, token: str) -> Optional[Record]:
    """The record if it is running with ``token`` as its current token."""
    record = table.get(job, slot_ms)
    if record is None or record.status != Status.RUNNING or record.token != token:
        return None
    return record


def _claim_existing(table: Table, now: int, record: Record, request: ClaimRequest) -> Claim:
    """Rules 1-6: the claim of a slot that has a run."""
    if record.status != Status.RUNNING:  # rule 1
        return Claim(Outcome.DONE, record.to_run())
    if record.won_by(request.token, request.runner):  # rule 2: the retry of the claim that won this attempt
        record.lease_end_ms = now + request.lease_ms
        table.update(record)
        return Claim(Outcome.WON, record.to_run())
    if record.lease_end_ms > now:  # rule 3
        return Claim(Outcome.RUNNING, record.to_run())
    newest = table.newest(record.job)
    if newest is not None and newest.slot_ms > record.slot_ms:  # rule 4
        record.interrupt(now, _superseded(newest.slot_ms))
    elif record.attempt - record.handovers >= request.max_attempts:  # rule 5
        record.interrupt(now, f"max_attempts ({request.max_attempts}) used up by runners that died")
    else:  # rule 6
        record.attempt += 1
        record.token = _attempt_token(request.token, record.token)
        record.runner = request.runner
        record.lease_end_ms = now + request.lease_ms
        record.released = False
        record.reason = request.reason
        record.started_ms = now
        table.update(record)
        return Claim(Outcome.WON, record.to_run())
    table.update(record)
    return Claim(Outcome.DONE, record.to_run())
