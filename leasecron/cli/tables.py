"""The tables the operators' commands print: ``runs``, ``jobs`` and ``show``, made to be read at
a glance.

Each ``*_lines`` function turns data already read from a store into the lines
to print; it reads nothing itself, so the ``leasecron`` command and the
``flask leasecron`` group print the same tables. A slot shows as a date and
time (the ``runs`` table in this host's local zone *and* in UTC, the ``jobs``
table in UTC), a moment near now as a distance ("in 4m 12s", "3.2 s ago"):
the forms of :mod:`leasecron.formatting`, which the dashboard shows too.
"""

from __future__ import annotations

import dataclasses
import json
from datetime import datetime, timezone
from typing import Dict, List, Optional, Sequence, Tuple

from ..announcements import InUse
from ..controls import JobState, ManualRequest
from ..formatting import (
    attempt_chain,
    format_duration,
    format_schedule,
    lease_left,
    local_time,
    short_error,
    utc_text,
    utc_time,
)
from ..options import JobOptions
from ..runs import Run
from ..schedules import Schedule
from ..states import ScheduleSource, Status
from ..stored import StoredSchedule

__all__ = [
    "JobRow",
    "expired_lines",
    "format_table",
    "job_dict",
    "jobs_lines",
    "limit_lines",
    "request_line",
    "runs_lines",
    "state_lines",
    "stored_lines",
]


def format_table(headers: Sequence[str], rows: Sequence[Sequence[str]], align: str = "") -> List[str]:
    """Lines of a plain-text table: a header, a rule, the rows; ``align`` holds ``l``/``r`` per column."""
    widths = [len(h) for h in headers]
    for row in rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))

    def line(cells: Sequence[str]) -> str:
        parts = []
        for i, cell in enumerate(cells):
            right = i < len(align) and align[i] == "r"
            parts.append(cell.rjust(widths[i]) if right else cell.ljust(widths[i]))
        return "  ".join(parts).rstrip()

    return [line(headers), line(["-" * w for w in widths])] + [line(row) for row in rows]


# -- runs ------------------------------------------------------------------------------------

RUNS_HEADERS = [
    "job", "slot (local)", "slot (UTC)", "attempt", "runner", "status", "lease left", "handed over", "attempts",
    "error",
]  # fmt: skip


def runs_lines(runs: Sequence[Run], now_ms: int, where: str) -> List[str]:
    """The ``runs`` table: grouped by job (in the order given), newest slot first within a job.

    ``now_ms`` is the store's clock (for the lease left); ``where`` names the store.
    """
    with_ms = any(run.slot_ms % 1000 for run in runs)
    rows = [
        [
            run.job,
            local_time(run.slot_ms, with_ms),
            utc_time(run.slot_ms, with_ms),
            str(run.attempt),
            run.runner,
            run.status_text,
            lease_left(run, now_ms),
            "yes" if run.handed_over else "no",
            attempt_chain(run),
            short_error(run.error),
        ]
        for run in runs
    ]
    jobs = len(set(run.job for run in runs))
    lines = format_table(RUNS_HEADERS, rows, align="lllrllllll")
    lines.append("")
    lines.append(f"{len(runs)} run(s) of {jobs} job(s), newest slot first, in {where}; local time is {_zone()}")
    if any(run.unshown_returns for run in runs):
        lines.append("status (attempt N returned ...): that attempt's handler returned, but the store could not record")
        lines.append("  it as the run's end (its runner lost the store first); `leasecron show JOB SLOT` says when")
    return lines


def _zone() -> str:
    moment = datetime.now(timezone.utc).astimezone()
    return f"{moment.tzname()} (UTC{moment.strftime('%z')[:3]}:{moment.strftime('%z')[3:]})"


# -- jobs --------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class JobRow:
    """What the ``jobs`` table shows of one job.

    ``schedule`` and ``next_ms`` are known only for a job of the application
    given with ``--app`` (the store holds no schedules); ``stored`` counts the
    stored runs, and ``capped`` says the count stopped there (there are more).
    ``state`` is the job's pause and requests, for a job that has either;
    ``options`` the job's options, for a job of the application. ``record``
    is what the store holds of the job's schedule (:func:`scheduled` makes
    ``schedule`` of it), for a job that has one. ``in_use`` are the schedules
    the live instances give the job in their code (their announcements), the
    most used first: several while they disagree. ``expired`` is the request for a manual run
    made since the job's last run started that expired unclaimed
    (:func:`~leasecron.jobs.expired_request`), if any.
    """

    name: str
    stored: int
    capped: bool
    last: Optional[Run]
    schedule: Optional[Schedule] = None
    next_ms: Optional[int] = None
    registered: bool = False
    state: Optional[JobState] = None
    options: Optional[JobOptions] = None
    record: Optional[StoredSchedule] = None
    in_use: Tuple[InUse, ...] = ()
    expired: Optional[ManualRequest] = None


JOBS_HEADERS = [
    "job", "paused", "schedule", "runs", "last slot (UTC)", "status", "runner", "finished", "next slot (UTC)",
    "next", "pending",
]  # fmt: skip


def jobs_lines(rows: Sequence[JobRow], now_ms: int, where: str, with_app: bool) -> List[str]:
    """The ``jobs`` table, one line per job, its paused jobs and pending manual runs, and
    footnotes; ``now_ms`` is the store's clock."""
    cells = []
    for row in rows:
        last, paused = row.last, row.state is not None and row.state.paused
        if row.schedule is not None:
            schedule = format_schedule(row.schedule)
        elif _stored_source(row) is not None:
            assert row.record is not None
            schedule = f"{row.record.schedule} ({_zone_text(row.record)})"
        else:
            schedule = "(not in app)" if with_app else "-"
        if len(row.in_use) > 1:
            schedule += " (!)"
        if row.next_ms is None:
            upcoming = "-"
        else:
            upcoming = "(paused)" if paused else f"in {format_duration(row.next_ms - now_ms)}"
        cells.append(
            [
                row.name,
                "yes" if paused else "no",
                schedule,
                f"{row.stored}+" if row.capped else str(row.stored),
                utc_text(last.slot_ms) if last else "never",
                last.status if last else "-",
                last.runner if last else "-",
                _finished(last, now_ms),
                utc_text(row.next_ms) if row.next_ms is not None else "-",
                upcoming,
                str(len(row.state.pending)) if row.state is not None else "0",
            ]
        )
    lines = format_table(JOBS_HEADERS, cells, align="lllr") + state_lines(
        [row.state for row in rows if row.state is not None], now_ms
    ) + expired_lines(rows, now_ms) + limit_lines(rows) + stored_lines(rows, now_ms) + disagreeing_lines(rows)
    lines.append("")
    lines.append(f"{len(rows)} job(s) in {where}; 'runs' counts the runs the store keeps (history_size per job)")
    if not with_app and any(row.schedule is None and _stored_source(row) is None for row in rows):
        lines.append("schedule and next slot: '-' for a job that no live instance registers in its code (the")
        lines.append("  schedules of the code come from the instances' announcements: `leasecron instances`); or")
        lines.append("  add --app module:attr (your LeaseCron, or a Flask app with LeaseCronExtension)")
    return lines


def disagreeing_lines(rows: Sequence[JobRow]) -> List[str]:
    """Under the ``jobs`` table: each job (marked ``(!)``) whose live instances give it different
    schedules in their code, with every schedule in use and the instances that use it."""
    lines: List[str] = []
    for row in rows:
        if len(row.in_use) < 2:
            continue
        if not lines:
            lines = ["", "(!) The live instances disagree on these jobs' schedules (a rolling deploy, or a bug):"]
        for use in row.in_use:
            zone = "" if use.tz == "UTC" else f" ({use.tz})"
            lines.append(f"  {row.name}: {use.schedule}{zone} on {', '.join(use.runners)}")
    return lines


def stored_lines(rows: Sequence[JobRow], now_ms: int) -> List[str]:
    """Under the ``jobs`` table: each schedule stored in the store, an ``override`` of a code job's
    or a ``stored`` job with its task, kwargs and options, its version and who changed it last,
    when (none stored: no line); ``now_ms`` is the store's clock."""
    records = [row.record for row in rows if row.record is not None and row.record.active]
    if not records:
        return []
    width = max(len(record.job) for record in records)
    lines = ["", "Stored schedules (in place of the code's, on every instance; `leasecron reschedule`, `put` and"
             " `delete` change them):"]  # fmt: skip
    for r in records:
        task = f", task {r.task}, kwargs {json.dumps(dict(r.kwargs))}" if r.source == ScheduleSource.STORED else ""
        options = f", options {json.dumps(dict(r.options))}" if r.options else ""
        ago = format_duration(max(0, now_ms - r.updated_ms))
        lines.append(
            f"  {r.job.ljust(width)}  source {r.source}{task}, schedule {r.schedule}, tz {r.tz or _zone_text(r)},"
            f" version {r.version}{options}; by {r.updated_by}, {utc_time(r.updated_ms)} UTC ({ago} ago)"
        )
    return lines


def _stored_source(row: JobRow) -> Optional[StoredSchedule]:
    """The row's record when its schedule comes from the store: an override, or a stored job whose
    name no job of the app or of a live instance registers in code (else the code's job runs)."""
    record = row.record
    in_code = row.registered or bool(row.in_use)
    if record is None or not record.active or (record.source == ScheduleSource.STORED and in_code):
        return None
    return record


def _zone_text(record: StoredSchedule) -> str:
    """The zone of a record stored without one: the code job's, or the instances' (a stored job's)."""
    if record.tz is not None:
        return record.tz
    return "the job's" if record.source == ScheduleSource.OVERRIDE else "the instances'"


def state_lines(states: Sequence[JobState], now_ms: int) -> List[str]:
    """Under the ``jobs`` table: who paused each paused job, when and why, and each pending
    request for a manual run (none of either: no line)."""
    paused = [state for state in states if state.paused]
    pending = [request for state in states for request in state.pending]
    width = max([len(state.job) for state in paused] + [len(request.job) for request in pending] + [0])
    lines = []
    if paused:
        lines += ["", "Paused (new slots are skipped on every instance until resumed):"]
        for state in paused:
            when = f"{utc_time(state.paused_ms)} UTC" if state.paused_ms is not None else "(unknown)"
            ago = f" ({format_duration(now_ms - state.paused_ms)} ago)" if state.paused_ms is not None else ""
            note = f": {' '.join(state.note.split())}" if state.note else ""
            lines.append(f"  {state.job.ljust(width)}  by {state.paused_by}, {when}{ago}{note}")
    if pending:
        lines += ["", "Pending manual runs (an instance with the job claims each within its poll_ms):"]
        lines += [f"  {request.job.ljust(width)}  {request_line(request, now_ms)}" for request in pending]
    return lines


def expired_lines(rows: Sequence[JobRow], now_ms: int) -> List[str]:
    """Under the ``jobs`` table: each job's request for a manual run made since its last run
    started that expired unclaimed (:func:`~leasecron.jobs.expired_request`): who made it, when it
    expired and when it was made (none: no line); ``now_ms`` is the
    store's clock."""
    expired = [(row.name, row.expired) for row in rows if row.expired is not None]
    if not expired:
        return []
    width = max(len(name) for name, _ in expired)
    lines = ["", "Expired manual runs (no instance claimed the request in time; shown until the job's next run):"]
    for name, request in expired:
        ago = format_duration(max(0, now_ms - request.expires_ms))
        made = utc_time(request.slot_ms, True)
        lines.append(f"  {name.ljust(width)}  request by {request.requested_by} expired unclaimed at"
                     f" {utc_time(request.expires_ms)} UTC ({ago} ago), made {made} UTC")  # fmt: skip
    return lines


def limit_lines(rows: Sequence[JobRow]) -> List[str]:
    """Under the ``jobs`` table (with ``--app``): each job's time limit and retries, for the jobs
    that have either (none has: no line)."""
    limited = [(row.name, row.options) for row in rows if row.options is not None]
    limited = [(name, o) for name, o in limited if o.timeout_ms is not None or o.retries > 0]
    if not limited:
        return []
    width = max(len(name) for name, _ in limited)
    lines = ["", "Time limits and retries (from the app):"]
    for name, options in limited:
        timeout = "none" if options.timeout_ms is None else format_duration(options.timeout_ms)
        retries = f"retries {options.retries}"
        if options.retries:
            retries += f", first wait {format_duration(options.retry_delay_ms)}, doubled after each try"
        lines.append(f"  {name.ljust(width)}  timeout {timeout}; {retries}")
    return lines


def request_line(request: ManualRequest, now_ms: int) -> str:
    """A request for a manual run: ``slot 2026-12-01 21:52:03.123 UTC, by bob@laptop, pending,
    expires in 35.9 s``; ``now_ms`` is the store's clock."""
    if request.pending:
        left = request.expires_ms - now_ms
        expiry = f"expires in {format_duration(left)}" if left > 0 else "expires now"
    else:
        expiry = request.state
    return f"slot {utc_time(request.slot_ms, True)} UTC ({request.slot_ms}), by {request.requested_by}, {expiry}"


def _finished(run: Optional[Run], now_ms: int) -> str:
    if run is None:
        return "-"
    if run.finished_ms is None:
        return "(running)" if run.status == Status.RUNNING else "-"
    return f"{format_duration(now_ms - run.finished_ms)} ago"


def job_dict(row: JobRow) -> Dict[str, object]:
    """A row of the ``jobs`` table as plain JSON-ready values (``--json``): the job's last run and
    next slot, and its pause (``paused``, ``paused_by``, ``paused_ms``, ``note``) and the
    requests for manual runs the store keeps (``requests``, each with its ``state``), and where
    its schedule comes from: ``source`` (``code``, ``override``, ``stored``; None when unknown),
    the stored ``tz`` (None: the job's own), the ``version`` its claims carry, and the store's
    record (``stored_schedule``: task, kwargs, options, who changed it, when); ``expired_request``:
    the request made since the job's last run started that expired unclaimed, or None."""
    state = row.state if row.state is not None else JobState(row.name)
    stored = _stored_source(row)
    schedule = stored.schedule if stored is not None else None
    if row.schedule is not None:
        schedule = format_schedule(row.schedule)
    if stored is not None:
        source: Optional[str] = stored.source
        tz = stored.tz
    else:
        source = ScheduleSource.CODE if row.registered or row.in_use else None
        tz = row.options.tz if row.registered and row.options is not None else None
        if not row.registered and row.in_use:
            tz = row.in_use[0].tz
    return {
        "job": row.name,
        "registered": row.registered,
        "schedule": schedule,
        "source": source,
        "tz": tz,
        "version": row.record.version if row.record is not None else 0,
        "stored_runs": row.stored,
        "stored_runs_capped": row.capped,
        "last_run": row.last.to_dict() if row.last else None,
        "next_slot_ms": row.next_ms,
        "next_slot": (
            datetime.fromtimestamp(row.next_ms / 1000, tz=timezone.utc).isoformat() if row.next_ms is not None else None
        ),
        "paused": state.paused,
        "paused_by": state.paused_by,
        "paused_ms": state.paused_ms,
        "note": state.note,
        "requests": [request.to_dict() for request in state.requests],
        "expired_request": row.expired.to_dict() if row.expired is not None else None,
        "options": dataclasses.asdict(row.options) if row.options is not None else None,
        "stored_schedule": row.record.to_dict() if row.record is not None else None,
        "in_use": [dataclasses.asdict(use) for use in row.in_use],
    }
