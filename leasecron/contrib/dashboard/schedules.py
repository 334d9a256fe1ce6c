"""Schedules as data from the dashboard: override or reset a job's schedule, put or delete a stored job.

Like :mod:`.actions`, each operation serves the pages' forms and the API alike: it refuses on a
read-only dashboard (403), checks what it is given, writes one :meth:`~leasecron.Store.set_schedule`
(rule 24) as the person who acts, and returns the sentence the page flashes with the object the
API answers. They act on the store, as ``leasecron reschedule``, ``put`` and ``delete`` do, so
every instance applies the change within its ``poll_ms``, and from the moment it is stored no
instance starts a slot of the schedule it replaced (rule 23).

The checks are leasecron's own, before anything is stored: the cron string, zone, task, kwargs
and options (:func:`~leasecron.stored.check_schedule_fields`); with the application's cron, the
options together with its job defaults (as an instance resolves them) and the kwargs against
the task's handler when the app registers the task. What only the store can tell is checked
on its record: an override never goes to a stored job's name, a stored job never to a name that
holds an override or that the app registers in code (409), and a name without a stored job has
none to delete (404). A bad value is a :class:`~leasecron.ConfigError` naming it (400); nothing
is stored then.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Mapping, Optional, Tuple

from ...errors import ConfigError
from ...formatting import utc_time
from ...jobs import check_kwargs
from ...options import resolve_options
from ...schedules import ScheduleSpec
from ...states import ScheduleSource
from ...stored import StoredJob, StoredSchedule, check_schedule_fields, parse_json_object, schedule_spec
from .actions import check_writable
from .settings import DashboardError, Settings

__all__ = [
    "delete_stored",
    "form_object",
    "form_schedule",
    "put_stored",
    "read_stored_job",
    "read_stored_jobs",
    "reschedule",
    "reset",
]


#: What a form's JSON fields look like, for their errors.
EXAMPLES = {"kwargs": '{"team": 3}', "options": '{"timeout_ms": 60000, "overlap": "skip"}'}


def _changed(record: StoredSchedule) -> str:
    return f"version {record.version}, by {record.updated_by}, {utc_time(record.updated_ms, True)} UTC"


def _record_dict(job: str, record: Optional[StoredSchedule]) -> Dict[str, Any]:
    """The record as the API answers it; a name the store never held a schedule of reads as
    version 0, source ``code``, changed by nobody."""
    if record is not None:
        return record.to_dict()
    empty = StoredSchedule(job, 0, ScheduleSource.CODE, None, None, None, {}, {}, "", 0)
    return {**empty.to_dict(), "updated_by": None, "updated_ms": None}


def reschedule(
    settings: Settings, job: str, by: str, schedule: ScheduleSpec, tz: Optional[str]
) -> Tuple[str, Dict[str, Any]]:
    """Override the schedule of the code's job ``job`` on every instance (``tz`` None: the job's
    own zone); the flash message and the stored record. A name that holds a stored job is a 409."""
    check_writable(settings)
    if schedule is None:
        raise ConfigError(f"{job!r}: give a schedule (a cron string, or an interval in seconds); a reset takes none")
    check_schedule_fields(job, schedule, tz, None, None, None)
    before = settings.store.stored_schedule(job)
    if before is not None and before.source == ScheduleSource.STORED:
        raise DashboardError(409, f"{job!r} is a stored job (task {before.task!r}): change it as a stored job,"
                                  " not with a schedule override")  # fmt: skip
    record = settings.store.set_schedule(job, by=by, schedule=schedule, tz=tz)
    zone = record.tz or "the job's own"
    return (
        f"Rescheduled job {job!r}: {record.schedule}, tz {zone}; {_changed(record)}. Every instance applies it within"
        " its poll_ms; from now on none starts a slot of the schedule it replaced.",
        record.to_dict(),
    )


def reset(settings: Settings, job: str, by: str) -> Tuple[str, Dict[str, Any]]:
    """Reset ``job`` to the schedule in its code; the flash message and the record. A job without
    an override is left as it is (nothing is written); a stored job's name is a 409."""
    check_writable(settings)
    check_schedule_fields(job, None, None, None, None, None)
    before = settings.store.stored_schedule(job)
    if before is not None and before.source == ScheduleSource.STORED:
        raise DashboardError(409, f"{job!r} is a stored job (task {before.task!r}): delete it instead of a reset")
    if before is None or not before.active:
        return f"Job {job!r} has no stored schedule: it runs on its code's schedule; nothing changed.", (
            _record_dict(job, before)
        )
    record = settings.store.set_schedule(job, by=by)
    was = before.tz or "the job's own"
    return (
        f"Reset job {job!r} to its code's schedule (it was {before.schedule}, tz {was});"
        f" {_changed(record)}. From now on no instance starts a slot of the override.",
        record.to_dict(),
    )


def put_stored(
    settings: Settings,
    name: str,
    by: str,
    *,
    task: str,
    schedule: ScheduleSpec,
    tz: Optional[str],
    kwargs: Optional[Mapping[str, Any]],
    options: Optional[Mapping[str, Any]],
) -> Tuple[str, Dict[str, Any]]:
    """Create or replace the stored job ``name``; the flash message and the stored job
    (:meth:`~leasecron.StoredJob.to_dict`). A name the app registers in code, or that holds an
    override, is a 409."""
    check_writable(settings)
    cron = settings.cron
    if cron is not None and name in cron.jobs:
        raise DashboardError(409, f"{name!r} is a job registered in code by the app: change its schedule instead")
    text, stored_tz, stored_kwargs, stored_options = check_schedule_fields(name, schedule, tz, task, kwargs, options)
    defaults: Dict[str, Any] = dict(cron._defaults) if cron is not None else {}
    resolve_options(defaults, {**stored_options, "tz": stored_tz or defaults.get("tz", "UTC")}, name)
    known = cron.tasks.get(task) if cron is not None else None
    if known is not None:
        check_kwargs(known, stored_kwargs, name)
    before = settings.store.stored_schedule(name)
    if before is not None and before.source == ScheduleSource.OVERRIDE:
        raise DashboardError(409, f"{name!r} holds an override of a code job's schedule: it is a job in code (a stored"
                                  " job never takes its name); choose another name")  # fmt: skip
    record = settings.store.set_schedule(name, by=by, schedule=text, tz=stored_tz, task=task, kwargs=stored_kwargs,
                                         options=stored_options)  # fmt: skip
    job = record.as_job()
    verb = "Replaced" if before is not None and before.active else "Stored"
    extra = f", options {json.dumps(job.options)}" if job.options else ""
    zone = job.tz or "the instances' own"
    return (
        f"{verb} job {name!r}: task {job.task}, kwargs {json.dumps(job.kwargs)}, schedule {job.schedule},"
        f" tz {zone}{extra}; {_changed(record)}. Every instance that registers task"
        f" {task!r} runs it within its poll_ms.",
        job.to_dict(),
    )


def delete_stored(settings: Settings, name: str, by: str) -> Tuple[str, Dict[str, Any]]:
    """Delete the stored job ``name``; the flash message and the store's record of it (its source
    now ``code``, its version raised). A name without a stored job is a 404."""
    check_writable(settings)
    before = settings.store.stored_schedule(name)
    if before is None or before.source != ScheduleSource.STORED:
        raise DashboardError(404, f"the store holds no stored job {name!r}")
    record = settings.store.set_schedule(name, by=by)
    return (
        f"Deleted stored job {name!r} (task {before.task}, schedule {before.schedule}); {_changed(record)}. No"
        " instance starts a new run of it from now on; a run that is running goes on.",
        record.to_dict(),
    )


def read_stored_jobs(settings: Settings) -> List[StoredJob]:
    """Every stored job, by name (one :meth:`~leasecron.Store.schedule_changes` call)."""
    records = settings.store.schedule_changes(0).changes
    return sorted((r.as_job() for r in records if r.source == ScheduleSource.STORED), key=lambda job: job.name)


def read_stored_job(settings: Settings, name: str) -> StoredJob:
    """The stored job ``name``; a :class:`DashboardError` (404) when the store holds none."""
    record = settings.store.stored_schedule(name)
    if record is None or record.source != ScheduleSource.STORED:
        raise DashboardError(404, f"the store holds no stored job {name!r}")
    return record.as_job()


# -- what a form sends ---------------------------------------------------------------------------


def form_schedule(text: str) -> ScheduleSpec:
    """A form's schedule field: a plain number is an interval in seconds (``30``), anything else
    a cron string; empty is a :class:`~leasecron.ConfigError`."""
    if not text.strip():
        raise ConfigError("give a schedule: a cron string such as '*/5 * * * *', or an interval in seconds")
    return schedule_spec(text.strip())


def form_object(field: str, text: str) -> Optional[Dict[str, Any]]:
    """A form's ``kwargs`` or ``options`` field: a JSON object (as the API takes them), or
    nothing (empty). What it holds is checked with the job."""
    return parse_json_object(field, text, EXAMPLES[field]) if text.strip() else None
