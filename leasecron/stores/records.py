"""What a store keeps of a run, and the token of an attempt.

A :class:`Record` is a run as a store keeps it: the fields of a
:class:`~leasecron.Run` and the hand-over state, ``released`` (the current
attempt's lease was released and can no longer be renewed) and ``handovers``
(how many attempts ended by a release). An expired run has had ``attempt``
attempts end, of which ``attempt - handovers`` ended by a dead runner; only
those count against ``max_attempts``.

:func:`read_record` reads one back field by field, whatever the backend
(SQLite rows, PostgreSQL rows, Redis JSON), so that a record that was
tampered with is a :class:`~leasecron.StoreError` naming its run.
"""

from __future__ import annotations

import dataclasses
import secrets
from typing import Any, Mapping, Optional

from ..errors import StoreError, shown
from ..runs import STATUSES, Run, Status, slot_datetime

__all__ = ["Record", "new_token", "read_record"]


def new_token() -> str:
    """A fresh random token for one attempt (128 bits, hex)."""
    return secrets.token_hex(16)


@dataclasses.dataclass
class Record:
    """A run as a store keeps it: a :class:`~leasecron.Run` plus the hand-over state (see above)."""

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
        return self.status == Status.RUNNING and self.token == token and self.runner == runner and not self.released

    def interrupt(self, now_ms: int, why: str) -> None:
        """End the run as ``interrupted``; it is not retried."""
        self.status = Status.INTERRUPTED
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
