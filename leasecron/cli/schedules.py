"""Schedules as data on the command line: ``reschedule`` a code job, ``put`` and ``delete`` a stored job.

As in :mod:`~leasecron.cli.controls`, one implementation serves both command lines:
``reschedule_output``, ``put_output`` and ``delete_output`` write one
:meth:`~leasecron.Store.set_schedule` (rule 24) and return the lines to print. They act on the
store, not on an instance, so they check what the store can tell: ``reschedule`` refuses a name
that holds a stored job (``put`` changes those) and ``put`` a name that holds an override (a job
in code); ``delete`` refuses a name without a stored job. A bad schedule, zone, ``--kwargs`` or
``--option`` is a :class:`~leasecron.ConfigError` naming it (exit 2), and nothing is stored.
``jobs`` shows what they stored (:func:`~leasecron.cli.tables.stored_lines`).
"""

from __future__ import annotations

import argparse
import json
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from ..errors import ConfigError
from ..formatting import utc_time
from ..options import resolve_options
from ..schedules import ScheduleSpec
from ..states import ScheduleSource
from ..stored import StoredSchedule, check_schedule_fields, parse_json_object, schedule_spec
from ..stores import Store
from .controls import actor, existing_store, print_lines, unknown_job_warning, warn

__all__ = [
    "cmd_delete",
    "cmd_put",
    "cmd_reschedule",
    "delete_output",
    "parse_kwargs",
    "parse_options",
    "put_output",
    "reschedule_output",
    "schedule_arg",
]


def schedule_arg(expr: str) -> ScheduleSpec:
    """EXPR as given on the command line: a plain number is an interval in seconds (``30``,
    ``0.5``), anything else a cron string."""
    return schedule_spec(expr.strip())


def parse_kwargs(text: Optional[str]) -> Optional[Dict[str, Any]]:
    """``--kwargs JSON``: a JSON object (None when not given); :class:`~leasecron.ConfigError` otherwise."""
    return None if text is None else parse_json_object("--kwargs", text, "'{\"team\": 3}'")


def parse_options(items: Sequence[str]) -> Dict[str, Any]:
    """``--option NAME=VALUE`` (repeated): each VALUE as JSON when it parses (``60000``, ``null``),
    else as text (``allow``). The names and values are checked when the job is stored."""
    options: Dict[str, Any] = {}
    for item in items:
        name, equals, text = item.partition("=")
        name = name.strip()
        if not equals or not name:
            raise ConfigError(f"--option must be NAME=VALUE (such as lease_ms=60000), not {item!r}")
        if name in options:
            raise ConfigError(f"--option {name} is given twice")
        try:
            options[name] = json.loads(text)
        except ValueError:
            options[name] = text
    return options


def _fields(
    job: str,
    schedule: Optional[ScheduleSpec],
    tz: Optional[str],
    task: Optional[str] = None,
    kwargs: Optional[Mapping[str, Any]] = None,
    options: Optional[Mapping[str, Any]] = None,
) -> Tuple[Optional[str], Optional[str], Dict[str, Any], Dict[str, Any]]:
    """:func:`~leasecron.stored.check_schedule_fields`, its error naming the job (a bad cron string's or
    zone's does not)."""
    try:
        return check_schedule_fields(job, schedule, tz, task, kwargs, options)
    except ConfigError as exc:
        text = str(exc)
        raise ConfigError(text if repr(job) in text else f"{job!r}: {text}") from None


def _json_or(record: StoredSchedule, as_json: bool, lines: List[str]) -> List[str]:
    return [json.dumps(record.to_dict(), indent=2)] if as_json else lines


def _changed(record: StoredSchedule) -> str:
    return f"version {record.version}, by {record.updated_by}, {utc_time(record.updated_ms, True)} UTC"


# -- reschedule -----------------------------------------------------------------------------


def reschedule_output(
    store: Store, job: str, by: str, schedule: Optional[ScheduleSpec], tz: Optional[str], as_json: bool
) -> List[str]:
    """Override the schedule of the code's job ``job`` on every instance (``schedule`` None: reset
    it to the code's); the lines ``reschedule`` prints (``as_json``: the stored record). A name
    that holds a stored job is refused; a reset of a job without an override changes nothing."""
    if schedule is None and tz is not None:
        raise ConfigError("--tz goes with a new schedule: a reset (--reset) takes no --tz")
    _fields(job, schedule, tz)  # before the store is read
    before = store.stored_schedule(job)
    if before is not None and before.source == ScheduleSource.STORED:
        raise ConfigError(
            f"{job!r} is a stored job (task {before.task!r}): change it with `leasecron put`, delete it with"
            " `leasecron delete`"
        )
    if schedule is None and (before is None or not before.active):
        if as_json:
            return [json.dumps(before.to_dict() if before is not None else None, indent=2)]
        return [f"Job {job!r} has no stored schedule: it runs on its code's schedule; nothing changed."]
    record = store.set_schedule(job, by=by, schedule=schedule, tz=tz)
    if schedule is None:
        assert before is not None
        was = before.tz or "the job's own"
        return _json_or(record, as_json, [
            f"Reset job {job!r} to its code's schedule (it was {before.schedule}, tz {was}); {_changed(record)}.",
            "Every instance goes back to the code's schedule within its poll_ms; from now on none starts a slot of"
            " the override.",
        ])  # fmt: skip
    zone = record.tz or "the job's own (from the code)"
    return _json_or(record, as_json, [
        f"Rescheduled job {job!r}: {record.schedule}, tz {zone}; {_changed(record)}.",
        "Every instance applies it within its poll_ms; from now on none starts a slot of the schedule it replaced."
        " `leasecron reschedule URL JOB --reset` goes back to the code's.",
    ])  # fmt: skip


def cmd_reschedule(args: argparse.Namespace) -> int:
    """``leasecron reschedule URL JOB EXPR [--tz TZ]`` or ``leasecron reschedule URL JOB --reset``."""
    if (args.expr is None) == (not args.reset):
        raise ConfigError("give EXPR (a cron string, or an interval in seconds) or --reset, not both or neither")
    schedule = schedule_arg(args.expr) if args.expr is not None else None
    with existing_store(args.url, "reschedule") as store:
        print_lines(reschedule_output(store, args.job, actor(args.by), schedule, args.tz, args.json))
        warn("reschedule", unknown_job_warning(store, args.job))
    return 0


# -- put and delete ---------------------------------------------------------------------------


def put_output(
    store: Store,
    name: str,
    by: str,
    *,
    task: str,
    schedule: ScheduleSpec,
    tz: Optional[str],
    kwargs: Optional[Mapping[str, Any]],
    options: Mapping[str, Any],
    as_json: bool,
    defaults: Optional[Mapping[str, Any]] = None,
) -> List[str]:
    """Create or replace the stored job ``name`` (``cron.put_job`` on a store); the lines ``put``
    prints (``as_json``: the stored job). The options are checked together with ``defaults``
    (the app's job defaults; none given: leasecron's), as an instance will; a name that holds
    an override (a job in code) is refused."""
    fields = _fields(name, schedule, tz, task, kwargs, options)
    zone = tz or (defaults or {}).get("tz", "UTC")
    resolve_options(defaults or {}, {**fields[3], "tz": zone}, name)
    before = store.stored_schedule(name)
    if before is not None and before.source == ScheduleSource.OVERRIDE:
        raise ConfigError(
            f"{name!r} holds an override of a code job's schedule: it is a job in code (a stored job never takes"
            " its name); choose another name, or change its schedule with `leasecron reschedule`"
        )
    record = store.set_schedule(name, by=by, schedule=schedule, tz=tz, task=task, kwargs=kwargs, options=options)
    job = record.as_job()
    if as_json:
        return [json.dumps(job.to_dict(), indent=2)]
    verb = "Replaced" if before is not None and before.active else "Stored"
    extra = f", options {json.dumps(job.options)}" if job.options else ""
    zone = record.tz or "the instances' own"
    return [
        f"{verb} job {name!r}: task {job.task}, kwargs {json.dumps(job.kwargs)}, schedule {job.schedule},"
        f" tz {zone}{extra}; {_changed(record)}.",
        f"Every instance that registers task {task!r} (cron.task) runs it within its poll_ms; one without the task"
        " logs a WARNING once and leaves it to the others.",
    ]


def cmd_put(args: argparse.Namespace) -> int:
    """``leasecron put URL NAME --task TASK --schedule EXPR [--tz TZ] [--kwargs JSON] [--option NAME=VALUE ...]``."""
    kwargs, options = parse_kwargs(args.kwargs), parse_options(args.option or [])
    with existing_store(args.url, "put") as store:
        print_lines(put_output(store, args.job, actor(args.by), task=args.task, schedule=schedule_arg(args.schedule),
                          tz=args.tz, kwargs=kwargs, options=options, as_json=args.json))  # fmt: skip
    return 0


def delete_output(store: Store, name: str, by: str, as_json: bool) -> List[str]:
    """Delete the stored job ``name`` (its record goes back to ``code``, its version raised); the
    lines ``delete`` prints (``as_json``: the store's record). A name without a stored job is a
    :class:`~leasecron.ConfigError`."""
    before = store.stored_schedule(name)
    if before is None or before.source != ScheduleSource.STORED:
        hint = ""
        if before is not None and before.source == ScheduleSource.OVERRIDE:
            hint = " (it holds an override of a code job's schedule: `leasecron reschedule URL JOB --reset` resets it)"
        raise ConfigError(f"the store holds no stored job {name!r}{hint}")
    record = store.set_schedule(name, by=by)
    return _json_or(record, as_json, [
        f"Deleted stored job {name!r} (task {before.task}, schedule {before.schedule}); {_changed(record)}.",
        "No instance starts a new run of it from now on; a run that is running goes on.",
    ])  # fmt: skip


def cmd_delete(args: argparse.Namespace) -> int:
    """``leasecron delete URL NAME [--by WHO] [--json]``."""
    with existing_store(args.url, "delete") as store:
        print_lines(delete_output(store, args.job, actor(args.by), args.json))
    return 0

