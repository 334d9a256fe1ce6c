"""What the PostgreSQL store's queries answer, as Python values.

A row of ``<table>`` is a :class:`~leasecron.Run` (checked by
:func:`~leasecron.stores.records.read_record`), the state functions' rows are
:class:`~leasecron.controls.JobState` values with their requests, and the stored schedules'
JSON objects are :class:`~leasecron.stored.StoredSchedule` records: each a
:class:`~leasecron.StoreError` naming its job when what was stored was tampered with.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Tuple

from ..controls import JobState, ManualRequest
from ..errors import StoreError, shown
from ..runs import Claim, Run
from ..states import RequestState, ScheduleSource
from ..stored import FINISHED_STATUSES, JobOverview, Overview, Poll, ScheduleChanges, StoredSchedule, overview_names
from .claim_request import ClaimRequest
from .records import read_brief, read_record

__all__ = [
    "batch_claim_of", "changes_of", "claim_of", "job_state_of", "no_nul", "overview_of", "poll_of", "request_of",
    "run_of", "schedule_of",
]  # fmt: skip


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


#: The run's columns a prepared claim answers (``claim_prepare`` in ``queries.sql``), in order.
_CLAIMED_COLUMNS = (
    "slot_ms", "attempt", "token", "runner", "status", "lease_end_ms", "handovers", "reason", "error",
    "started_ms", "finished_ms", "attempts", "manual",
)  # fmt: skip


def claim_of(request: ClaimRequest, row: Tuple[Any, ...]) -> Claim:
    """The answer to ``request`` of a prepared claim's ``row``: its outcome, then
    :data:`_CLAIMED_COLUMNS` (no job, which the claim names, nor released, which no answer
    needs), NULL when no run."""
    return _answer(request, row[0], dict(zip(_CLAIMED_COLUMNS, row[1:])))


def batch_claim_of(request: ClaimRequest, row: Tuple[Any, ...]) -> Claim:
    """The answer to ``request`` of a row of ``claim_many``: its index, its outcome, then the
    table's columns, NULL when no run."""
    return _answer(request, row[1], dict(zip(_RUN_COLUMNS, row[2:])))


def _answer(request: ClaimRequest, outcome: str, run: Dict[str, Any]) -> Claim:
    """A claim's answer about the run of columns ``run``: brief when the claim asks so, whole
    otherwise; a StoreError if it was tampered with."""
    slot_ms = run["slot_ms"]
    if slot_ms is None:
        return Claim(outcome)
    if request.answers_brief(outcome):
        return Claim(outcome, None, read_brief(request.job, slot_ms, run))
    return Claim(outcome, read_record(request.job, slot_ms, run).to_run())


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


def poll_of(row: Tuple[Any, ...]) -> Poll:
    """A row of ``poll`` (or ``poll_announcing``): the cursor, the changes and the open requests."""
    cursor, changes, requests = row
    return Poll([request_of(item[0], item[1:]) for item in requests], changes_of(cursor, changes))


def overview_of(jobs: List[str], row: Tuple[Any, ...]) -> Overview:
    """The row of ``overview`` asked about ``jobs``: the clock, what ``schedule_changes(0)`` gives,
    the paused jobs' names, and ``[job, newest run or null, newest ends by status...]`` per job."""
    now, cursor, changes, paused, summaries = row
    schedules = {record.job: record for record in changes_of(cursor, changes).changes}
    found: Dict[str, JobOverview] = {}
    for job, run, *ends in summaries:
        last = None if run is None else read_record(job, run.get("slot_ms"), run).to_run()
        found[job] = JobOverview(job, last, {s: ms for s, ms in zip(FINISHED_STATUSES, ends) if ms is not None})
    names = overview_names(jobs, schedules.values())
    return Overview(int(now), frozenset(paused), schedules, {job: found.get(job) or JobOverview(job) for job in names})


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def job_state_of(job: str, row: Tuple[Any, ...]) -> JobState:
    """A job's state from a row ``(paused_by, paused_ms, note, requests)`` (NULLs when not paused)."""
    paused_by, paused_ms, note, requests = row
    return JobState(job, paused_by is not None, paused_by, paused_ms, note, tuple(request_of(job, r) for r in requests))


def no_nul(text: str) -> str:
    # PostgreSQL text cannot hold NUL; an error message may.
    return text.replace("\x00", "\ufffd")
