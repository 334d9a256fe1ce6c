"""The lease rules written once, for the stores that run them in Python.

:class:`TableStore` carries out every operation of the store contract on a
:class:`Table`: a handful of reads and writes that a backend performs inside
one atomic section (the memory store under a lock, SQLite inside ``BEGIN
IMMEDIATE``). The decisions themselves live here, once.

Redis (Lua) and PostgreSQL (SQL) state the same rules in their own language;
the shared conformance suite proves all of them alike.

A claim may carry the token its attempt gets; a claim whose run's current,
unreleased attempt holds that token and runner is the retry of the claim that
won it (its answer was lost), and wins that attempt again with a renewed lease
(:meth:`Record.won_by`). A new attempt never gets the token of the attempt it
replaces.

What a store keeps beyond :class:`~leasecron.Run`: ``released`` (the current
attempt's lease was released and can no longer be renewed) and ``handovers``
(how many attempts ended by a release). An expired run has had ``attempt``
attempts end, of which ``attempt - handovers`` ended by a dead runner; only
those count against ``max_attempts``.
"""

from __future__ import annotations

import abc
import dataclasses
import secrets
from contextlib import AbstractContextManager
from typing import Any, List, Mapping, Optional, Tuple

from ..errors import StoreError, shown
from ..runs import (
    EARLY_TOLERANCE_MS,
    INTERRUPTED,
    LATE_TOLERANCE_MS,
    RUNNING,
    STATUSES,
    TAKEOVER,
    WON,
    Claim,
    Run,
    slot_datetime,
)
from .base import (
    Store,
    validate_claim_args,
    validate_finish_args,
    validate_heartbeat_args,
    validate_token_args,
)

__all__ = ["Record", "Table", "TableStore", "new_token", "read_record"]


def new_token() -> str:
    """A fresh random token for one attempt (128 bits, hex)."""
    return secrets.token_hex(16)


@dataclasses.dataclass
class Record:
    """A run as a store keeps it: a :class:`~leasecron.Run` plus the hand-over state."""

    job: str
    slot_ms: int
    attempt: int
    token: str
    runner: str
    status: str
    lease_end_ms: int
    released: bool
    handovers: int
    reason: str
    error: Optional[str]
    started_ms: int
    finished_ms: Optional[int]

    def to_run(self) -> Run:
        """The public, frozen view of this record."""
        return Run(
            job=self.job,
            slot_ms=self.slot_ms,
            attempt=self.attempt,
            token=self.token,
            runner=self.runner,
            status=self.status,
            lease_end_ms=self.lease_end_ms,
            handed_over=self.handovers > 0,
            reason=self.reason,
            error=self.error,
            started_ms=self.started_ms,
            finished_ms=self.finished_ms,
        )

    def won_by(self, token: Optional[str], runner: str) -> bool:
        """Whether a claim by ``runner`` with ``token`` is the retry of the claim that won the
        current attempt: it is running with that token and runner, and was not released."""
        return self.status == RUNNING and self.token == token and self.runner == runner and not self.released

    def interrupt(self, now_ms: int, why: str) -> None:
        """End the run as ``interrupted``; it is not retried."""
        self.status = INTERRUPTED
        self.error = why
        self.finished_ms = now_ms


def read_record(job: str, slot_ms: object, fields: Mapping[str, Any]) -> Record:
    """The record a store read for ``job`` at ``slot_ms``, checked field by field.

    ``fields`` holds the other fields of :class:`Record` (more are ignored);
    an integer may be given as its decimal text (Redis keeps them so). A
    record that was tampered with or is corrupt (a field missing, of the
    wrong type, a status that is none of the four, a slot no datetime can
    hold) raises :class:`~leasecron.StoreError` naming the job and the slot,
    never a ``KeyError`` or ``TypeError`` from deep inside.
    """
    try:
        record = Record(
            job=job,
            slot_ms=_stored_int(slot_ms, "slot_ms", 0),
            attempt=_stored_int(fields["attempt"], "attempt", 1),
            token=_stored_text(fields["token"], "token"),
            runner=_stored_text(fields["runner"], "runner"),
            status=_stored_text(fields["status"], "status"),
            lease_end_ms=_stored_int(fields["lease_end_ms"], "lease_end_ms"),
            released=_stored_flag(fields.get("released", False), "released"),
            handovers=_stored_int(fields["handovers"], "handovers", 0),
            reason=_stored_text(fields["reason"], "reason"),
            error=None if fields.get("error") is None else _stored_text(fields["error"], "error"),
            started_ms=_stored_int(fields["started_ms"], "started_ms"),
            finished_ms=(
                None if fields.get("finished_ms") is None else _stored_int(fields["finished_ms"], "finished_ms")
            ),
        )
        if record.status not in STATUSES:
            raise ValueError(f"status is {shown(record.status)}, not one of {', '.join(STATUSES)}")
        slot_datetime(record.slot_ms)  # a slot past the year 9999 cannot be a Run
    except KeyError as exc:
        raise StoreError(f"the stored run of job {job!r} at slot {slot_ms} is unreadable: {exc} is missing") from exc
    except (TypeError, ValueError, OverflowError, OSError) as exc:
        raise StoreError(f"the stored run of job {job!r} at slot {slot_ms} is unreadable: {exc}") from exc
    return record


def _stored_int(value: object, field: str, minimum: Optional[int] = None) -> int:
    if isinstance(value, str) and value.lstrip("-").isdigit():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{field} is {shown(value)}, not an integer")
    if minimum is not None and value < minimum:
        raise ValueError(f"{field} is {value}, less than {minimum}")
    return value


def _stored_flag(value: object, field: str) -> bool:
    if isinstance(value, bool):
        return value
    if value in (0, 1, "0", "1"):
        return value in (1, "1")
    raise TypeError(f"{field} is {shown(value)}, not a flag (0 or 1)")


def _stored_text(value: object, field: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{field} is {shown(value)}, not text")
    return value


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
    """A store whose operations are the shared rules run on a :class:`Table`."""

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

    def claim(
        self,
        job: str,
        slot_ms: int,
        *,
        runner: str,
        reason: str = "schedule",
        lease_ms: int = 30_000,
        max_attempts: int = 3,
        max_late_ms: int = 30_000,
        overlap: str = "skip",
        history_size: int = 100,
        token: Optional[str] = None,
    ) -> Claim:
        validate_claim_args(
            job, slot_ms, runner, reason, lease_ms, max_attempts, max_late_ms, overlap, history_size, token
        )
        settled = self._settled_claim(job, slot_ms, runner, token)
        if settled is not None:
            return settled
        with self._write() as (table, now):
            record = table.get(job, slot_ms)
            if record is not None:
                return _claim_existing(table, now, record, runner, reason, lease_ms, max_attempts, token)
            if reason == TAKEOVER:
                return Claim("none")
            if slot_ms > now + EARLY_TOLERANCE_MS:
                return Claim("early")
            if now - slot_ms > max_late_ms + LATE_TOLERANCE_MS:
                return Claim("late")
            newest = table.newest(job)
            if newest is not None and newest.slot_ms > slot_ms:
                return Claim("late", newest.to_run())
            if overlap == "skip":
                alive = table.live_before(job, slot_ms, now)
                if alive is not None:
                    return Claim("overlap", alive.to_run())
            table.interrupt_expired(job, slot_ms, now, _superseded(slot_ms))
            record = Record(
                job=job,
                slot_ms=slot_ms,
                attempt=1,
                token=_attempt_token(token),
                runner=runner,
                status=RUNNING,
                lease_end_ms=now + lease_ms,
                released=False,
                handovers=0,
                reason=reason,
                error=None,
                started_ms=now,
                finished_ms=None,
            )
            table.insert(record)
            table.prune(job, history_size, now - max_late_ms - LATE_TOLERANCE_MS)
            return Claim(WON, record.to_run())

    def _settled_claim(self, job: str, slot_ms: int, runner: str, token: Optional[str]) -> Optional[Claim]:
        """The answer to a claim that a read alone decides, without the write lock: the slot's
        run has ended (``done``) or holds a live lease (``running``); None otherwise, and for the
        retry of the claim that won the current attempt (it renews the lease: a write).

        Most claims are of this kind (every instance but one claims each slot; a backup's
        check of a run that ended), and on SQLite the write lock is what instances queue for.
        The answer holds as of the read: a lease still alive at ``now``, read after the record,
        was alive when the record was read, and an ended run stays ended.
        """
        with self._read() as table:
            record = table.get(job, slot_ms)
        if record is None:
            return None
        if record.status != RUNNING:
            return Claim("done", record.to_run())
        if not record.won_by(token, runner) and record.lease_end_ms > self.now_ms():
            return Claim("running", record.to_run())
        return None

    def heartbeat(self, job: str, slot_ms: int, token: str, lease_ms: int) -> bool:
        validate_heartbeat_args(job, slot_ms, token, lease_ms)
        with self._write() as (table, now):
            record = _current(table, job, slot_ms, token)
            if record is None or record.released:
                return False
            record.lease_end_ms = now + lease_ms
            table.update(record)
            return True

    def finish(
        self, job: str, slot_ms: int, token: str, status: str, error: Optional[str] = None
    ) -> bool:
        validate_finish_args(job, slot_ms, token, status, error)
        with self._write() as (table, now):
            record = _current(table, job, slot_ms, token)
            if record is None:
                return False
            record.status = status
            record.error = error
            record.finished_ms = now
            table.update(record)
            return True

    def release(self, job: str, slot_ms: int, token: str) -> bool:
        validate_token_args(job, slot_ms, token)
        with self._write() as (table, now):
            record = _current(table, job, slot_ms, token)
            if record is None or record.released:
                return False
            record.lease_end_ms = now
            record.released = True
            record.handovers += 1
            table.update(record)
            return True

    def get_run(self, job: str, slot_ms: int) -> Optional[Run]:
        validate_token_args(job, slot_ms, "")  # job and slot_ms
        with self._read() as table:
            record = table.get(job, slot_ms)
        return None if record is None else record.to_run()

    def unfinished(self, job: str) -> List[Run]:
        validate_token_args(job, 0, "")
        with self._read() as table:
            return [r.to_run() for r in table.running(job)]

    def runs(self, job: str, limit: int = 20) -> List[Run]:
        validate_token_args(job, 0, "")
        with self._read() as table:
            return [r.to_run() for r in table.latest(job, max(0, limit))]

    def jobs(self) -> List[str]:
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
    if record is None or record.status != RUNNING or record.token != token:
        return None
    return record


def _claim_existing(
    table: Table,
    now: int,
    record: Record,
    runner: str,
    reason: str,
    lease_ms: int,
    max_attempts: int,
    token: Optional[str],
) -> Claim:
    if record.status != RUNNING:
        return Claim("done", record.to_run())
    if record.won_by(token, runner):
        record.lease_end_ms = now + lease_ms  # the retry of a claim that won this attempt
        table.update(record)
        return Claim(WON, record.to_run())
    if record.lease_end_ms > now:
        return Claim("running", record.to_run())
    newest = table.newest(record.job)
    if newest is not None and newest.slot_ms > record.slot_ms:
        record.interrupt(now, _superseded(newest.slot_ms))
    elif record.attempt - record.handovers >= max_attempts:
        record.interrupt(now, f"max_attempts ({max_attempts}) used up by runners that died")
    else:
        record.attempt += 1
        record.token = _attempt_token(token, record.token)
        record.runner = runner
        record.lease_end_ms = now + lease_ms
        record.released = False
        record.reason = reason
        record.started_ms = now
        table.update(record)
        return Claim(WON, record.to_run())
    table.update(record)
    return Claim("done", record.to_run())
