"""What a store keeps of a run (:class:`Record`), how it is read back, and the token of an attempt.

A :class:`Record` is a :class:`~leasecron.Run` with its hand-over state; its methods are the
transitions of the attempts (rule 20 of ``docs/protocol.rst``) that the Python stores make, as
Redis and PostgreSQL make them in Lua and PL/pgSQL, and :func:`attempts_json` the JSON every
store keeps the attempts as. :func:`read_record` reads a record back field by field, whatever
the backend (SQLite rows, PostgreSQL rows, Redis JSON), so that a record that was tampered with
is a :class:`~leasecron.StoreError` naming its run.
"""

from __future__ import annotations

import dataclasses
import json
import secrets
from typing import Any, Dict, Mapping, Optional, Tuple

from ..errors import StoreError, shown
from ..runs import MAX_ATTEMPTS_KEPT, Attempt, Run, RunBrief, slot_datetime
from ..states import AttemptOutcome, Status

__all__ = [
    "Record",
    "attempts_json",
    "new_token",
    "read_brief",
    "read_record",
    "stored_attempts_json",
    "stored_int",
    "stored_text",
]

_STATUSES = Status.values()

_OUTCOMES = AttemptOutcome.values()
#: What a recorded return (rule 26) says the handler did.
_RETURNS = (Status.SUCCESS.value, Status.FAILED.value)
#: The last millisecond of the year 9999, the last a slot's datetime can hold.
MAX_SLOT_MS = 253_402_300_799_999
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
#: The fields every stored attempt has; ``ended_ms`` and ``error`` may be left out when they are null.
_ATTEMPT_FIELDS = ("number", "runner", "reason", "started_ms", "outcome")
#: A flag as the stores write it (SQL: a bool or 0/1; Redis: "0"/"1"), read.
_FLAGS = {False: False, True: True, "0": False, "1": True}
_FLAG_TYPES = (bool, int, str)
_RUNNING, _ATTEMPT_RUNNING = Status.RUNNING, AttemptOutcome.RUNNING  # looked up once, not at every read


def new_token() -> str:
    """A fresh random token for one attempt (128 bits, hex)."""
    return secrets.token_hex(16)


@dataclasses.dataclass
class Record:
    """A run as a store keeps it: the fields of a :class:`~leasecron.Run` and the hand-over state.

    ``released``: the current attempt's lease was released and can no longer be renewed;
    ``handovers``: how many attempts ended by a release. An expired run has had ``attempt``
    attempts end, of which ``attempt - handovers`` ended by a dead runner; only those count
    against ``max_attempts``.
    """

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
    #: The run's attempts, oldest first (at most ``MAX_ATTEMPTS_KEPT``); the last is the current one.
    attempts: Tuple[Attempt, ...] = ()
    #: Whether a manual claim started the run (rules 9-11 set manual runs apart).
    manual: bool = False

    def to_run(self) -> Run:
        """The public, frozen view of this record."""
        return Run(  # Run's fields in their order (by position: a fifth cheaper; every claim answer makes one)
            self.job, self.slot_ms, self.attempt, self.token, self.runner, self.status, self.lease_end_ms,
            self.handovers > 0, self.reason, self.error, self.started_ms, self.finished_ms, self.attempts,
        )  # fmt: skip

    def brief(self) -> RunBrief:
        """What a brief answer carries of this record (:class:`~leasecron.runs.RunBrief`)."""
        return RunBrief(
            self.job, self.slot_ms, self.attempt, self.token, self.runner, self.status, self.lease_end_ms,
            self.handovers > 0, self.manual,
        )  # fmt: skip

    def won_by(self, token: Optional[str], runner: str) -> bool:
        """Whether a claim by ``runner`` with ``token`` is the retry of the claim that won the
        current attempt: it is running with that token and runner, and was not released."""
        return self.status == Status.RUNNING and self.token == token and self.runner == runner and not self.released

    def begin_attempt(self) -> None:
        """Record the current attempt (``attempt``, ``runner``, ``reason``, ``started_ms``) as
        ``running``, after the others; only the newest ``MAX_ATTEMPTS_KEPT`` are kept."""
        started = Attempt(self.attempt, self.runner, self.reason, self.started_ms, None, AttemptOutcome.RUNNING)
        self.attempts = (self.attempts + (started,))[-MAX_ATTEMPTS_KEPT:]

    def end_attempt(self, outcome: str, ended_ms: int, error: Optional[str] = None) -> None:
        """Record how the current attempt ended (``finish``: ``success`` or ``failed``; ``release``:
        ``handed_over``)."""
        last = self.attempts[-1] if self.attempts else None
        if last is not None and last.number == self.attempt:
            ended = Attempt(
                last.number, last.runner, last.reason, last.started_ms, ended_ms, outcome, error,
                last.returned_ms, last.returned, last.returned_error,
            )  # fmt: skip
            self.attempts = self.attempts[:-1] + (ended,)

    def record_return(self, attempt: int, runner: str, returned_ms: int, status: str, error: Optional[str]) -> bool:
        """Rule 26: give attempt number ``attempt``, if it is kept, was made by ``runner`` and has
        no return recorded, its handler's return; whether it did. Nothing else changes."""
        for index, kept in enumerate(self.attempts):
            if kept.number == attempt:
                if kept.runner != runner or kept.returned is not None:
                    return False
                returned = dataclasses.replace(kept, returned_ms=returned_ms, returned=status, returned_error=error)
                self.attempts = self.attempts[:index] + (returned,) + self.attempts[index + 1 :]
                return True
        return False

    def close_attempt(self) -> None:
        """End the current attempt because its lease is over (a next attempt takes over, or the run
        is interrupted): ``handed_over`` if it was released (as ``release`` recorded it already),
        else ``expired``, at its lease end."""
        released = AttemptOutcome.HANDED_OVER if self.released else AttemptOutcome.EXPIRED
        self.end_attempt(released, self.lease_end_ms)

    def interrupt(self, now_ms: int, why: str) -> None:
        """End the run as ``interrupted``, and its current attempt with it; it is not retried."""
        self.close_attempt()
        self.status = Status.INTERRUPTED
        self.error = why
        self.finished_ms = now_ms


def read_record(job: str, slot_ms: object, fields: Mapping[str, Any]) -> Record:
    """The record a store read for ``job`` at ``slot_ms``, checked field by field.

    ``fields`` holds the other fields of :class:`Record` (more are ignored);
    an integer may be given as its decimal text (Redis keeps them so).
    ``attempts`` is JSON text or the list it holds (see :func:`attempts_json`);
    missing or ``None`` (a run stored before attempts were recorded), the run
    reads as one attempt made of its own fields; ``manual`` missing is false. A
    record that was tampered with or is corrupt (a field missing, of the
    wrong type, a status that is none of the four, a slot no datetime can
    hold) raises :class:`~leasecron.StoreError` naming the job and the slot,
    never a ``KeyError`` or ``TypeError`` from deep inside.
    """
    try:
        record = _record_as_written(job, slot_ms, fields) or _field_by_field(job, slot_ms, fields)
        stored = fields.get("attempts")
        record.attempts = _first_attempt(record) if stored is None else _stored_attempts(stored)
    except KeyError as exc:
        raise StoreError(f"the stored run of job {job!r} at slot {slot_ms} is unreadable: {exc} is missing") from exc
    except (TypeError, ValueError, OverflowError, OSError) as exc:
        raise StoreError(f"the stored run of job {job!r} at slot {slot_ms} is unreadable: {exc}") from exc
    return record


def read_brief(job: str, slot_ms: object, fields: Mapping[str, Any]) -> RunBrief:
    """The brief of the record a store read for ``job`` at ``slot_ms`` (``fields`` as
    :func:`read_record` takes them): only its fields are read and checked, in one pass; a record
    whose fields are not as a store writes them is read whole, so that what was tampered with is
    a :class:`~leasecron.StoreError` naming the run and the field. A losing claim's answer is
    read so (every instance but one loses each slot)."""
    get = fields.get
    slot, attempt, lease_end = _written_int(slot_ms), _written_int(get("attempt")), _written_int(get("lease_end_ms"))
    handovers = _written_int(get("handovers"))
    token, runner, status, manual = get("token"), get("runner"), get("status"), get("manual", False)
    if (
        slot is None or attempt is None or lease_end is None or handovers is None or handovers < 0
        or type(token) is not str or type(runner) is not str or type(status) is not str or status not in _STATUSES
        or type(manual) not in _FLAG_TYPES or manual not in _FLAGS
        or slot > MAX_SLOT_MS or attempt < 1
    ):  # fmt: skip
        return read_record(job, slot_ms, fields).brief()
    return RunBrief(job, slot, attempt, token, runner, status, lease_end, handovers > 0, _FLAGS[manual])


def _record_as_written(job: str, slot_ms: object, fields: Mapping[str, Any]) -> Optional[Record]:
    """The record, if every field has the type and range a store writes: an integer as an int (as
    SQL drivers read it) or as its decimal text (as Redis keeps it), a flag as a bool, 0, 1, "0" or
    "1"; else None, and :func:`_field_by_field` reads it, naming what is wrong. Every claim answer
    reads a record: this reads it in one pass, without a call per field."""
    get = fields.get
    slot, attempt, handovers = _written_int(slot_ms), _written_int(get("attempt")), _written_int(get("handovers"))
    lease_end, started = _written_int(get("lease_end_ms")), _written_int(get("started_ms"))
    finished = get("finished_ms")
    finished_ms = None if finished is None else _written_int(finished)
    token, runner, status, reason, error = get("token"), get("runner"), get("status"), get("reason"), get("error")
    released, manual = get("released", False), get("manual", False)
    if (
        slot is None or attempt is None or handovers is None or lease_end is None or started is None
        or (finished is not None and finished_ms is None)
        or type(token) is not str or type(runner) is not str or type(reason) is not str
        or type(status) is not str or status not in _STATUSES or not (error is None or type(error) is str)
        or type(released) not in _FLAG_TYPES or released not in _FLAGS
        or type(manual) not in _FLAG_TYPES or manual not in _FLAGS
        or slot > MAX_SLOT_MS or attempt < 1 or handovers < 0
    ):
        return None
    return Record(  # in the order of Record's fields (by position: half the cost of by name)
        job, slot, attempt, token, runner, status, lease_end, _FLAGS[released], handovers, reason, error, started,
        finished_ms, (), _FLAGS[manual],
    )  # fmt: skip


def _written_int(value: object) -> Optional[int]:
    """``value`` as an int, if it is one (not a bool) or the decimal text of one (no sign); else None."""
    if type(value) is int:
        return value
    return int(value) if type(value) is str and value.isdecimal() else None


def _field_by_field(job: str, slot_ms: object, fields: Mapping[str, Any]) -> Record:
    """The record, read and checked field by field: TypeError, ValueError or KeyError naming
    the first field that is wrong."""
    record = Record(
        job=job,
        slot_ms=stored_int(slot_ms, "slot_ms", 0),
        attempt=stored_int(fields["attempt"], "attempt", 1),
        token=stored_text(fields["token"], "token"),
        runner=stored_text(fields["runner"], "runner"),
        status=stored_text(fields["status"], "status"),
        lease_end_ms=stored_int(fields["lease_end_ms"], "lease_end_ms"),
        released=_stored_flag(fields.get("released", False), "released"),
        handovers=stored_int(fields["handovers"], "handovers", 0),
        reason=stored_text(fields["reason"], "reason"),
        error=None if fields.get("error") is None else stored_text(fields["error"], "error"),
        started_ms=stored_int(fields["started_ms"], "started_ms"),
        finished_ms=(
            None if fields.get("finished_ms") is None else stored_int(fields["finished_ms"], "finished_ms")
        ),
        manual=_stored_flag(fields.get("manual", False), "manual"),
    )
    if record.status not in _STATUSES:
        raise ValueError(f"status is {shown(record.status)}, not one of {', '.join(_STATUSES)}")
    if record.slot_ms > MAX_SLOT_MS:
        slot_datetime(record.slot_ms)  # raises: a slot past the year 9999 cannot be a Run
    return record


def stored_int(value: object, field: str, minimum: Optional[int] = None) -> int:
    """A stored integer ``field`` (an int, or its decimal text), at least ``minimum``; else TypeError
    or ValueError naming the field."""
    if type(value) is int and (minimum is None or value >= minimum):  # as SQL drivers read it: at once
        return value
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


def stored_text(value: object, field: str) -> str:
    """A stored text ``field``; else TypeError naming the field."""
    if not isinstance(value, str):
        raise TypeError(f"{field} is {shown(value)}, not text")
    return value


def stored_attempts_json(record: Record) -> Optional[str]:
    """What a store keeps of ``record``'s attempts: ``None`` when they are the one attempt the
    run's own fields describe (the run reads back the same, with no JSON to parse: most runs have
    one attempt, and every claim answer reads its run), else :func:`attempts_json`."""
    return None if record.attempts == _first_attempt(record) else attempts_json(record.attempts)


def attempts_json(attempts: Tuple[Attempt, ...]) -> str:
    """The JSON text a store keeps ``attempts`` as: an array of objects ``{"number", "runner",
    "reason", "started_ms", "ended_ms", "outcome", "error"}``, oldest first, the newest
    ``MAX_ATTEMPTS_KEPT``; an attempt with a recorded return (rule 26) also has ``"returned_ms"``,
    ``"returned"`` and ``"returned_error"``."""
    return _ENCODER.encode([_attempt_object(a) for a in attempts])


def _attempt_object(a: Attempt) -> Dict[str, object]:
    """One attempt as :func:`attempts_json` writes it."""
    kept: Dict[str, object] = {
        "number": a.number, "runner": a.runner, "reason": a.reason, "started_ms": a.started_ms,
        "ended_ms": a.ended_ms, "outcome": a.outcome, "error": a.error,
    }  # fmt: skip
    if a.returned is not None:
        kept.update(returned_ms=a.returned_ms, returned=a.returned, returned_error=a.returned_error)
    return kept


def _first_attempt(record: Record) -> Tuple[Attempt, ...]:
    """The one attempt of a run stored before attempts were recorded, made of the run's fields."""
    outcome = _ATTEMPT_RUNNING if record.status == _RUNNING else record.status
    return (
        Attempt(
            record.attempt, record.runner, record.reason, record.started_ms, record.finished_ms, outcome, record.error
        ),
    )


def _stored_attempts(value: object) -> Tuple[Attempt, ...]:
    """The attempts a store kept (JSON text, or the list a driver decoded), checked one by one.

    Every claim answer carries its run's attempts, so this is on the hot path: an attempt as a
    store wrote it is taken at once, and only one that is not is read field by field (integers as
    decimal text, as Redis keeps them) or refused.
    """
    if isinstance(value, (str, bytes)):
        value = json.loads(value)
    if not isinstance(value, list) or not value:
        raise TypeError(f"attempts is {shown(value)}, not a list of attempts")
    attempts = []
    for i, item in enumerate(value):
        try:
            attempt = Attempt(
                item["number"], item["runner"], item["reason"], item["started_ms"],
                item.get("ended_ms"), item["outcome"], item.get("error"),
                item.get("returned_ms"), item.get("returned"), item.get("returned_error"),
            )  # fmt: skip
        except (KeyError, TypeError, AttributeError):
            attempt = _stored_attempt(item, f"attempts[{i}]")  # raises what is wrong
        if not _as_written(attempt):
            attempt = _stored_attempt(item, f"attempts[{i}]")
        attempts.append(attempt)
    return tuple(attempts)


def _as_written(a: Attempt) -> bool:
    """Whether every field of ``a`` has the type and range a store writes."""
    return (
        type(a.number) is int and a.number >= 1 and type(a.started_ms) is int and type(a.runner) is str
        and type(a.reason) is str and (a.ended_ms is None or type(a.ended_ms) is int) and a.outcome in _OUTCOMES
        and (a.error is None or type(a.error) is str)
        and (a.returned is None if a.returned_ms is None else type(a.returned_ms) is int and a.returned in _RETURNS)
        and (a.returned_error is None or (type(a.returned_error) is str and a.returned is not None))
    )  # fmt: skip


def _stored_attempt(item: object, where: str) -> Attempt:
    if not isinstance(item, dict):
        raise TypeError(f"{where} is {shown(item)}, not an object")
    missing = [name for name in _ATTEMPT_FIELDS if name not in item]
    if missing:
        raise ValueError(f"{where}.{missing[0]} is missing")
    number, runner, reason, started = item["number"], item["runner"], item["reason"], item["started_ms"]
    ended, outcome, error = item.get("ended_ms"), item["outcome"], item.get("error")
    attempt = Attempt(
        number=stored_int(number, f"{where}.number", 1),
        runner=stored_text(runner, f"{where}.runner"),
        reason=stored_text(reason, f"{where}.reason"),
        started_ms=stored_int(started, f"{where}.started_ms"),
        ended_ms=None if ended is None else stored_int(ended, f"{where}.ended_ms"),
        outcome=stored_text(outcome, f"{where}.outcome"),
        error=None if error is None else stored_text(error, f"{where}.error"),
    )
    if attempt.outcome not in _OUTCOMES:
        raise ValueError(f"{where}.outcome is {shown(attempt.outcome)}, not one of {', '.join(_OUTCOMES)}")
    return _stored_return(attempt, item, where)


def _stored_return(attempt: Attempt, item: Dict[str, object], where: str) -> Attempt:
    """``attempt`` with the return (rule 26) that ``item`` keeps, checked: all three fields or none."""
    returned_ms, returned, returned_error = item.get("returned_ms"), item.get("returned"), item.get("returned_error")
    if returned_ms is None and returned is None and returned_error is None:
        return attempt
    if returned not in _RETURNS:
        raise ValueError(f"{where}.returned is {shown(returned)}, not one of {', '.join(_RETURNS)}")
    return dataclasses.replace(
        attempt,
        returned_ms=stored_int(returned_ms, f"{where}.returned_ms"),
        returned=returned,
        returned_error=None if returned_error is None else stored_text(returned_error, f"{where}.returned_error"),
    )
