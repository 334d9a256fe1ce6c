"""What the PostgreSQL store's queries answer, as Python values.

A row of ``<table>`` is a :class:`~leasecron.Run` (checked by
:func:`~leasecron.stores.records.read_record`), the state functions' rows are
:class:`~leasecron.controls.JobState` values with their requests, and the stored schedules'
JSON objects are :class:`~leasecron.stored.StoredSchedule` records: each a
:class:`~leasecron.StoreError` naming its job when what was stored was tampered with.
"""

from __future__ import annotations

import dataclasses
from typing import Any, List, Tuple

from ..controls import JobState, ManualRequest
from ..errors import StoreError, shown
from ..runs import Run
from ..states import RequestState, ScheduleSource
from ..stored import ScheduleChanges, StoredSchedule
from .records import read_record

__all__ = ["changes_of", "job_state_of", "no_nul", "request_of", "run_of", "schedule_of"]


#: The columns of ``<table>``, in order; a schema of version 2 or older has the first 13 only (its
#: runs read as one attempt each).
_RUN_COLUMNS = (
    "job", "slot_ms", "attempt", "token", "runner", "status", "lease_end_ms",
    "released", "handovers", "reason", "error", "started_ms", "finished_ms",
    "attempts", "manual",
)  # fmt: skip


def run_of(row: Tuple[Any, ...]) -> Run:
    data = dict(zip(_RUN_COLUMNS, row))
    return read_record(data["job"], data["slot_ms"], data).to_run()  # StoreError if it was tampered with


_REQUEST_STATES = RequestState.values()


def request_of(job: str, item: Any) -> ManualRequest:
    """A request as ``<table>_state_v3`` lists it: ``[slot_ms, requested_by, expires_ms, state]``."""
    try:
        slot_ms, by, expires_ms, state = item
        if not (_is_int(slot_ms) and _is_int(expires_ms) and isinstance(by, str) and state in _REQUEST_STATES):
            raise ValueError
    except (TypeError, ValueError):
        raise StoreError(f"a stored request of job {job!r} is unreadable: {item!r}") from None
    return ManualRequest(job, slot_ms, by, expires_ms, state)


_SOURCES = ScheduleSource.values()
_SCHEDULE_FIELDS = tuple(field.name for field in dataclasses.fields(StoredSchedule))


def schedule_of(item: Any) -> StoredSchedule:
    """A record as ``<table>_schedules`` gives it, a JSON object of its columns (``cursor`` too)."""
    try:
        found = {name: item[name] for name in _SCHEDULE_FIELDS}
        texts = [found[name] for name in ("schedule", "tz", "task")]
        if not (
            isinstance(found["job"], str) and _is_int(found["version"]) and found["source"] in _SOURCES
            and all(text is None or isinstance(text, str) for text in texts)
            and isinstance(found["kwargs"], dict) and isinstance(found["options"], dict)
            and isinstance(found["updated_by"], str) and _is_int(found["updated_ms"])
        ):  # fmt: skip
            raise ValueError
    except (TypeError, KeyError, ValueError):
        job = item.get("job") if isinstance(item, dict) else None
        raise StoreError(f"the stored schedule of job {job!r} is unreadable: {shown(item)}") from None
    return StoredSchedule(**found)


def changes_of(cursor: int, changes: List[Any]) -> ScheduleChanges:
    """A row of ``<table>_schedule_changes_v4``: the cursor and the records, oldest change first."""
    return ScheduleChanges(int(cursor), tuple(schedule_of(item) for item in changes))


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def job_state_of(job: str, row: Tuple[Any, ...]) -> JobState:
    """A job's state from a row ``(paused_by, paused_ms, note, requests)`` (NULLs when not paused)."""
    paused_by, paused_ms, note, requests = row
    return JobState(job, paused_by is not None, paused_by, paused_ms, note, tuple(request_of(job, r) for r in requests))


def no_nul(text: str) -> str:
    # PostgreSQL text cannot hold NUL; an error message may.
    return text.replace("\x00", "\ufffd")
