"""The ``show`` command: one run, every field of it, then every attempt, errors in full.

:func:`show_output` reads the run (creating nothing) and serves both command
lines, as the functions of :mod:`~leasecron.cli.commands` do; ``cmd_show`` is
the ``leasecron`` command's glue; :func:`parse_slot` reads a SLOT as epoch
milliseconds or ISO 8601. Like the tables of :mod:`~leasecron.cli.tables`,
:func:`run_lines` turns a run already read into lines and reads nothing itself.
Times are the store's, in UTC to the millisecond (the slot in this host's
local time too); a moment near now also as a distance ("in 41.2 s").
"""

from __future__ import annotations

import argparse
import json
from datetime import datetime, timedelta, timezone
from typing import List, Optional, Sequence, Tuple

from ..errors import ConfigError
from ..runs import MAX_ATTEMPTS_KEPT, Attempt, Run
from ..states import AttemptOutcome
from ..stores import Store, open_store
from ..formatting import format_duration, lease_left, local_time, short_error, utc_time
from .commands import CommandError, reading
from .tables import format_table

__all__ = ["ATTEMPT_HEADERS", "RETURNED_HEADER", "cmd_show", "parse_slot", "return_lines", "run_lines", "show_output"]

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_YEAR_10000_MS = 253_402_300_800_000


# -- the command ----------------------------------------------------------------------------------


def cmd_show(args: argparse.Namespace) -> int:
    """``leasecron show URL JOB SLOT [--json]``: reads, creates nothing."""
    slot_ms = parse_slot(args.slot)
    store = open_store(args.url, create=False)
    try:
        for line in show_output(store, args.job, slot_ms, args.json):
            print(line)
    finally:
        store.close()
    return 0


def parse_slot(text: str) -> int:
    """A slot as epoch milliseconds (``1764625203123``) or ISO 8601 (``2026-12-01T21:40:03.123Z``,
    ``2026-12-01 22:40:03+01:00``; without an offset, UTC), before the year 10000. ConfigError
    for anything else."""
    text = text.strip()
    if text.isdigit():
        slot_ms = int(text)
    else:
        try:
            moment = datetime.fromisoformat(text[:-1] + "+00:00" if text[-1:] in ("Z", "z") else text)
        except ValueError:
            raise ConfigError(
                "SLOT must be epoch milliseconds (1764625203123) or ISO 8601 (2026-12-01T21:40:03.123Z;"
                f" without an offset, UTC), not {text!r}"
            ) from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=timezone.utc)
        slot_ms = (moment - _EPOCH) // timedelta(milliseconds=1)
    if not 0 <= slot_ms < _YEAR_10000_MS:
        raise ConfigError(f"SLOT must be a time from 1970 to the year 9999, not {text!r}")
    return slot_ms


def show_output(store: Store, job: str, slot_ms: int, as_json: bool) -> List[str]:
    """The lines ``show`` prints: the run of ``job`` at ``slot_ms`` with every field and attempt
    (``as_json``: its :meth:`~leasecron.Run.to_dict`). :class:`CommandError` if there is none.
    Creates nothing (:func:`~leasecron.cli.commands.reading`)."""
    with reading(store):
        run = store.get_run(job, slot_ms)
        if run is None:
            newest = [r.slot_ms for r in store.runs(job, limit=3)]
            hint = f"its newest: {', '.join(map(str, newest))}" if newest else "the job has no stored runs"
            raise CommandError(
                f"no run of job {job!r} at slot {slot_ms} ({utc_time(slot_ms, True)} UTC) in {store!r} ({hint})"
            )
        now_ms = store.now_ms()
    if as_json:
        return [json.dumps(run.to_dict(), indent=2)]
    return run_lines(run, now_ms)


# -- the view --------------------------------------------------------------------------------

ATTEMPT_HEADERS = ["attempt", "runner", "reason", "started (UTC)", "ended (UTC)", "took", "outcome", "error"]
#: The column of the attempts table shown when an attempt has a recorded return (rule 26).
RETURNED_HEADER = "handler returned"


def run_lines(run: Run, now_ms: int) -> List[str]:
    """``show``'s view of ``run``: a line per field, the table of its attempts (oldest first), and
    the error of each attempt that has one, in full; ``now_ms`` is the store's clock."""
    fields: List[Tuple[str, str]] = [
        ("job", run.job),
        ("slot", f"{utc_time(run.slot_ms, True)} UTC ({local_time(run.slot_ms, True)}), slot_ms {run.slot_ms}"),
        ("status", run.status_text),
        ("attempt", f"{run.attempt} (the current one)"),
        ("reason", f"{run.reason} (why the current attempt started)"),
        ("runner", run.runner),
        ("token", run.token),
        ("started", f"{_moment(run.started_ms, now_ms)}, attempt {run.attempt}"),
        ("lease end", _lease_end(run, now_ms)),
        ("handed over", "yes" if run.handed_over else "no"),
        ("finished", _moment(run.finished_ms, now_ms) if run.finished_ms is not None else "-"),
        ("error", run.error or "-"),
    ]
    width = max(len(name) for name, _ in fields)
    lines = []
    for name, value in fields:
        lines += _labelled(name.ljust(width) + "  ", value)
    lines.append("")
    lines += attempt_lines(run.attempts, now_ms)
    return lines + return_lines(run)


def attempt_lines(attempts: Sequence[Attempt], now_ms: int) -> List[str]:
    """The table of a run's attempts and, under it, each attempt's error in full."""
    if not attempts:
        return ["(the store recorded no attempts of this run)"]
    rows = [
        [
            str(a.number),
            a.runner,
            a.reason,
            utc_time(a.started_ms, True),
            utc_time(a.ended_ms, True) if a.ended_ms is not None else "-",
            _took(a, now_ms),
            a.outcome,
            short_error(a.error),
        ]
        for a in attempts
    ]
    headers = ATTEMPT_HEADERS
    if any(a.returned_ms is not None for a in attempts):
        headers = ATTEMPT_HEADERS + [RETURNED_HEADER]
        for row, a in zip(rows, attempts):
            row.append("-" if a.returned_ms is None else f"{a.returned} at {utc_time(a.returned_ms, True)[11:]}")
    lines = format_table(headers, rows, align="rlllllll")
    for a in attempts:
        if a.error:
            lines += ["", f"error of attempt {a.number}:"] + _labelled("  ", a.error)
    lines.append("")
    footnote = f"{len(attempts)} attempt(s), oldest first"
    if attempts[0].number > 1:
        footnote += f"; attempts before {attempts[0].number} are no longer kept (a run keeps {MAX_ATTEMPTS_KEPT})"
    lines.append(footnote)
    return lines


def return_lines(run: Run) -> List[str]:
    """Under the attempts: each attempt whose handler's return was recorded (rule 26) after its end
    could not be, what it did and what the store shows instead (none: no line)."""
    lines: List[str] = []
    for a in run.attempts:
        if a.returned_ms is None:
            continue
        did = f"attempt {a.number}: handler returned {a.returned} at {utc_time(a.returned_ms, True)} UTC"
        if a.outcome == AttemptOutcome.RUNNING:
            did += " (recorded while the attempt runs: its end is not recorded yet)"
        elif a.returned != a.outcome:
            did += f" (recorded after the run was lost: the attempt shows {a.outcome}, the run {run.status})"
        lines += ["", did]
        if a.returned_error:
            lines += _labelled("  its error: ", a.returned_error)
    if lines:
        lines += ["", "A handler that returned did its work; the store kept the run's status as it was decided"]
        lines.append("(fencing): see \"Work done, recorded as not done\" in the operating docs.")
    return lines


def _lease_end(run: Run, now_ms: int) -> str:
    """The lease end; while the run runs, how long the lease lasts or that it ended, and why."""
    if run.finished:
        return f"{utc_time(run.lease_end_ms, True)} UTC"
    left = lease_left(run, now_ms)
    if left in ("released", "expired"):
        return f"{_moment(run.lease_end_ms, now_ms)}: {left}"
    return _moment(run.lease_end_ms, now_ms)


def _took(attempt: Attempt, now_ms: int) -> str:
    if attempt.ended_ms is not None:
        return format_duration(attempt.ended_ms - attempt.started_ms)
    if attempt.outcome == AttemptOutcome.RUNNING:
        return f"{format_duration(now_ms - attempt.started_ms)} so far"
    return "-"


def _moment(ms: Optional[int], now_ms: int) -> str:
    """A time on the store's clock: ``2026-12-01 21:40:03.123 UTC (3.2 s ago)``."""
    if ms is None:
        return "-"
    distance = format_duration(ms - now_ms)
    return f"{utc_time(ms, True)} UTC ({'in ' + distance if ms > now_ms else distance + ' ago'})"


def _labelled(label: str, text: str) -> List[str]:
    """``text`` after ``label``, its further lines indented under the first."""
    head, *rest = text.splitlines() or [""]
    return [label + head] + [" " * len(label) + line for line in rest]
