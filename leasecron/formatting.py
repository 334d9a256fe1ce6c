"""How runs, attempts, times and durations are shown to people: the same in the CLI, the dashboard
and the log.

A time has three forms: a slot in the log as ISO 8601 in UTC (``2026-11-30T05:00:00Z``,
:func:`slot_text`); a time in a table or on a page as a date and time in UTC or this host's
zone (:func:`utc_time`, :func:`local_time`); and a moment near now as a distance ("in 4m 12s",
"3.2 s ago", :func:`format_duration`). A run's attempts read as a chain,
``1 web-1 expired → 2 web-2 success``. Each function formats data already read; none reads a
store or a clock.
"""

from __future__ import annotations

import sys
import time
from datetime import datetime, timezone
from typing import Optional

from .runs import Run
from .schedules import CronSchedule, IntervalSchedule, Schedule
from .states import Status

__all__ = [
    "CHAIN_SHOWN",
    "ERROR_WIDTH",
    "SlotText",
    "attempt_chain",
    "format_duration",
    "format_schedule",
    "lease_left",
    "local_time",
    "short_error",
    "slot_text",
    "utc_text",
    "utc_time",
]

#: How many characters of a run's error the ``runs`` table shows (``--json`` has all of it).
ERROR_WIDTH = 40
#: How many steps of a run's attempt chain the ``runs`` table shows (``show`` and ``--json`` have all).
CHAIN_SHOWN = 4


# -- times ---------------------------------------------------------------------------------


def slot_text(slot_ms: int) -> str:
    """A slot as the log shows it: ``2026-11-30T05:00:00Z`` (UTC; milliseconds only when it has some)."""
    seconds, millis = divmod(slot_ms, 1000)
    try:
        text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
    except (OverflowError, ValueError, OSError):  # beyond what the C library can show
        return f"{slot_ms} ms"
    return f"{text}.{millis:03d}Z" if millis else f"{text}Z"


class SlotText:
    """A lazy log argument: :func:`slot_text` of ``slot_ms``, formatted only if the line is emitted."""

    __slots__ = ("slot_ms",)

    def __init__(self, slot_ms: int) -> None:
        self.slot_ms = slot_ms

    def __str__(self) -> str:
        return slot_text(self.slot_ms)

    __repr__ = __str__


def utc_time(ms: int, with_ms: bool = False) -> str:
    """``YYYY-MM-DD HH:MM:SS`` (and ``.mmm`` when asked) of an epoch-ms time, in UTC."""
    text = datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
    return f"{text}.{ms % 1000:03d}" if with_ms else text


def utc_text(ms: int) -> str:
    """:func:`utc_time` with milliseconds only when ``ms`` has some: ``2026-12-02 10:00:00``,
    ``2026-12-02 10:00:00.123``."""
    return utc_time(ms, bool(ms % 1000))


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


def lease_left(run: Run, now_ms: int) -> str:
    """How long the lease of a running run lasts on the store's clock; ``released``, ``expired`` or ``-``."""
    if run.status != Status.RUNNING:
        return "-"
    left = run.lease_end_ms - now_ms
    if left > 0:
        return format_duration(left)
    return "released" if run.handed_over else "expired"


def attempt_chain(run: Run, shown: int = CHAIN_SHOWN) -> str:
    """The run's attempts, oldest first, as ``1 web-1 expired → 2 web-2 success``.

    Of a longer chain than ``shown`` steps, the first and the newest ones, with
    ``(N more)`` between. ``->`` stands for the arrow where stdout cannot encode it.
    """
    steps = [f"{a.number} {a.runner} {a.outcome}" for a in run.attempts]
    if not steps:  # a store of the user's own that records no attempts
        steps = [f"{run.attempt} {run.runner} {run.status}"]
    if len(steps) > shown:
        steps = steps[:1] + [f"({len(steps) - shown + 1} more)"] + steps[len(steps) - shown + 2 :]
    return f" {_arrow()} ".join(steps)


def _arrow() -> str:
    try:
        "→".encode(getattr(sys.stdout, "encoding", None) or "ascii")
    except (LookupError, UnicodeEncodeError):
        return "->"
    return "→"


def short_error(error: Optional[str], width: int = ERROR_WIDTH) -> str:
    """An error on one line, cut to ``width`` characters (``...`` marks the cut); ``-`` for none."""
    if not error:
        return "-"
    text = " ".join(error.split())
    return text if len(text) <= width else text[: width - 3] + "..."
