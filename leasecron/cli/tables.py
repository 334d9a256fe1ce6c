"""The tables the operators' commands print: ``runs`` and ``jobs``, made to be read at a glance.

Each ``*_lines`` function turns data already read from a store into the lines
to print; it reads nothing itself, so the ``leasecron`` command and the
``flask leasecron`` group print the same tables. Times come in two forms: a
slot as a date and time (the ``runs`` table in this host's local zone *and* in
UTC, the ``jobs`` table in UTC), and a moment near now as a distance ("in 4m
12s", "3.2 s ago"), which is what a person looking at a live cluster wants.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime, timezone
from typing import Dict, List, Optional, Sequence

from ..runs import RUNNING, Run
from ..schedules import CronSchedule, IntervalSchedule, Schedule

__all__ = [
    "ERROR_WIDTH",
    "JobRow",
    "format_table",
    "format_duration",
    "format_schedule",
    "job_dict",
    "jobs_lines",
    "local_time",
    "runs_lines",
    "utc_time",
]

#: How many characters of a run's error the ``runs`` table shows (``--json`` has all of it).
ERROR_WIDTH = 40


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


# -- times ---------------------------------------------------------------------------------


def utc_time(ms: int, with_ms: bool = False) -> str:
    """``YYYY-MM-DD HH:MM:SS`` (and ``.mmm`` when asked) of an epoch-ms time, in UTC."""
    text = datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
    return f"{text}.{ms % 1000:03d}" if with_ms else text


def local_time(ms: int, with_ms: bool = False) -> str:
    """The same in this host's local time zone, followed by the zone's abbreviation (``CEST``)."""
    moment = datetime.fromtimestamp(ms / 1000, tz=timezone.utc).astimezone()
    text = moment.strftime("%Y-%m-%d %H:%M:%S")
    if with_ms:
        text += f".{ms % 1000:03d}"
    return f"{text} {moment.tzname() or moment.strftime('%z')}"


def format_duration(ms: int) -> str:
    """A length of time for a person: ``250 ms``, ``4.2 s``, ``5m 03s``, ``2h 05m``, ``3d 04h``."""
    ms = abs(ms)
    if ms < 1000:
        return f"{ms} ms"
    if ms < 60_000:
        return f"{ms / 1000:.1f} s"
    seconds = ms // 1000
    if seconds < 3600:
        return f"{seconds // 60}m {seconds % 60:02d}s"
    if seconds < 86_400:
        return f"{seconds // 3600}h {seconds % 3600 // 60:02d}m"
    return f"{seconds // 86_400}d {seconds % 86_400 // 3600:02d}h"


def format_schedule(schedule: Schedule) -> str:
    """A job's schedule as its user wrote it: the cron string (and zone), or ``every 5m 00s``."""
    if isinstance(schedule, CronSchedule):
        return schedule.expression if schedule.tz == "UTC" else f"{schedule.expression} ({schedule.tz})"
    if isinstance(schedule, IntervalSchedule):
        return f"every {format_duration(schedule.interval_ms)}"
    return repr(schedule)


# -- runs ------------------------------------------------------------------------------------

RUNS_HEADERS = [
    "job", "slot (local)", "slot (UTC)", "attempt", "runner", "status", "lease left", "handed over", "error",
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
            run.status,
            lease_left(run, now_ms),
            "yes" if run.handed_over else "no",
            short_error(run.error),
        ]
        for run in runs
    ]
    jobs = len(set(run.job for run in runs))
    lines = format_table(RUNS_HEADERS, rows, align="lllrlllll")
    lines.append("")
    lines.append(f"{len(runs)} run(s) of {jobs} job(s), newest slot first, in {where}; local time is {_zone()}")
    return lines


def lease_left(run: Run, now_ms: int) -> str:
    """How long the lease of a running run lasts on the store's clock; ``released``, ``expired`` or ``-``."""
    if run.status != RUNNING:
        return "-"
    left = run.lease_end_ms - now_ms
    if left > 0:
        return format_duration(left)
    return "released" if run.handed_over else "expired"


def short_error(error: Optional[str], width: int = ERROR_WIDTH) -> str:
    """An error on one line, cut to ``width`` characters (``...`` marks the cut); ``-`` for none."""
    if not error:
        return "-"
    text = " ".join(error.split())
    return text if len(text) <= width else text[: width - 3] + "..."


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
    """

    name: str
    stored: int
    capped: bool
    last: Optional[Run]
    schedule: Optional[Schedule] = None
    next_ms: Optional[int] = None
    registered: bool = False


JOBS_HEADERS = ["job", "schedule", "runs", "last slot (UTC)", "status", "runner", "finished", "next slot (UTC)", "next"]


def jobs_lines(rows: Sequence[JobRow], now_ms: int, where: str, with_app: bool) -> List[str]:
    """The ``jobs`` table, one line per job, and footnotes; ``now_ms`` is the store's clock."""
    cells = []
    for row in rows:
        last = row.last
        if row.schedule is not None:
            schedule = format_schedule(row.schedule)
        else:
            schedule = "(not in app)" if with_app else "-"
        cells.append(
            [
                row.name,
                schedule,
                f"{row.stored}+" if row.capped else str(row.stored),
                utc_time(last.slot_ms, bool(last.slot_ms % 1000)) if last else "never",
                last.status if last else "-",
                last.runner if last else "-",
                _finished(last, now_ms),
                utc_time(row.next_ms, bool(row.next_ms % 1000)) if row.next_ms is not None else "-",
                f"in {format_duration(row.next_ms - now_ms)}" if row.next_ms is not None else "-",
            ]
        )
    lines = format_table(JOBS_HEADERS, cells, align="llr")
    lines.append("")
    lines.append(f"{len(rows)} job(s) in {where}; 'runs' counts the runs the store keeps (history_size per job)")
    if not with_app:
        lines.append("schedule and next slot: '-' because the store holds no schedules; to show them, add")
        lines.append("  --app module:attr (your LeaseCron, or a Flask app with LeaseCronExtension)")
    return lines


def _finished(run: Optional[Run], now_ms: int) -> str:
    if run is None:
        return "-"
    if run.finished_ms is None:
        return "(running)" if run.status == RUNNING else "-"
    return f"{format_duration(now_ms - run.finished_ms)} ago"


def job_dict(row: JobRow) -> Dict[str, object]:
    """A row of the ``jobs`` table as plain JSON-ready values (``--json``)."""
    return {
        "job": row.name,
        "registered": row.registered,
        "schedule": format_schedule(row.schedule) if row.schedule is not None else None,
        "stored_runs": row.stored,
        "stored_runs_capped": row.capped,
        "last_run": row.last.to_dict() if row.last else None,
        "next_slot_ms": row.next_ms,
        "next_slot": (
            datetime.fromtimestamp(row.next_ms / 1000, tz=timezone.utc).isoformat() if row.next_ms is not None else None
        ),
    }
