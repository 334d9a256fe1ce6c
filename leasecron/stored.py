"""Schedules as data: what a store holds of a job's schedule, and the checks before it is stored.

A job's schedule lives in the code (``cron.add_job``); a store can hold, per job name, a
:class:`StoredSchedule` that replaces it on every instance:

* an *override* (``source`` ``override``) of a code job's schedule and zone (``cron.reschedule``);
* a *stored job* (``source`` ``stored``): a whole job, bound by name to a *task* (a handler
  registered with ``cron.task``), with JSON ``kwargs`` for the handler and job ``options``
  (``cron.put_job``);
* nothing any more (``source`` ``code``): a reset override, or a deleted stored job. The record
  stays, so that its version keeps rising and every instance learns of the change.

Every change raises the job's ``version`` (1 for its first) inside one atomic step of the store,
stamped with who made it and when on the store's clock. A claim carries the version its slot was
computed from, and a store answers ``stale`` to a scheduled or catch-up claim of a new run from
an older version (protocol rule 23): once a change returned, no instance starts a slot of the
schedule it replaced, also one that has not yet read the change. Instances read the changes with
the poll they make for manual runs (:meth:`~leasecron.Store.schedule_changes`, one round trip
whatever the number of jobs): every record changed after a *cursor*, and the cursor to ask from
next time.

A schedule is stored as text: a cron expression as given, an interval as its seconds in decimal
(``"30"``, ``"0.5"``); :func:`schedule_spec` reads it back. Nothing is pickled: ``kwargs`` and
``options`` are JSON objects. :func:`check_schedule_fields` checks all of it before a store sees it.

What one read of a whole store gives the watchers (:meth:`~leasecron.Store.overview`) lives here too:
an :class:`Overview` (the store's clock, the paused jobs, the stored schedules) with a
:class:`JobOverview` per job (its newest run, and the newest end of its runs by status).
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from datetime import timedelta
from typing import Any, Dict, FrozenSet, Iterable, List, Mapping, Optional, Sequence, Tuple

from .controls import ManualRequest
from .errors import ConfigError, shown
from .limits import check_job_name, check_text
from .options import BY_NAME, check_option
from .runs import Run
from .schedules import ScheduleSpec, make_schedule
from .states import ScheduleSource, Status

__all__ = [
    "FINISHED_STATUSES",
    "JobOverview",
    "MAX_JSON_BYTES",
    "Overview",
    "Poll",
    "ScheduleChanges",
    "StoredJob",
    "StoredSchedule",
    "check_schedule_fields",
    "parse_json_object",
    "schedule_spec",
    "overview_names",
    "schedule_text",
]

#: The largest ``kwargs`` or ``options`` a store keeps, in bytes of their JSON text.
MAX_JSON_BYTES = 65_536
#: The longest schedule text (a cron expression), in characters.
MAX_SCHEDULE_CHARS = 256
_NUMBER = re.compile(r"[0-9]+(\.[0-9]+)?")


@dataclasses.dataclass(frozen=True)
class StoredSchedule:
    """What a store holds of ``job``'s schedule (see the module docstring).

    ``source``: a :class:`~leasecron.states.ScheduleSource` value, ``override``, ``stored`` or
    ``code`` (nothing stored any more: the code's schedule, if the job has one). ``schedule``
    and ``tz``: the schedule's text and zone (``None`` for ``code``); ``task``, ``kwargs`` and
    ``options``: a stored job's (``None``, ``{}`` and ``{}`` otherwise). ``version``: raised by
    every change, 1 for the first; ``updated_by`` and ``updated_ms``: who made the last change,
    and when on the store's clock.
    """

    job: str
    version: int
    source: str
    schedule: Optional[str]
    tz: Optional[str]
    task: Optional[str]
    kwargs: Mapping[str, Any]
    options: Mapping[str, Any]
    updated_by: str
    updated_ms: int

    @property
    def active(self) -> bool:
        """Whether a schedule is stored (an override or a stored job), not only its version."""
        return self.source != ScheduleSource.CODE

    def to_dict(self) -> Dict[str, Any]:
        """The record as plain JSON-ready values."""
        data = dataclasses.asdict(self)
        data["kwargs"], data["options"] = dict(self.kwargs), dict(self.options)
        return data

    def as_job(self) -> "StoredJob":
        """The stored job this record holds (``source`` must be ``stored``)."""
        if self.source != ScheduleSource.STORED or self.task is None or self.schedule is None:
            raise ValueError(f"{self.job!r} holds no stored job (its source is {self.source})")
        return StoredJob(self.job, self.task, self.schedule, self.tz, dict(self.kwargs), dict(self.options),
                         self.version, self.updated_by, self.updated_ms)  # fmt: skip


@dataclasses.dataclass(frozen=True)
class StoredJob:
    """A job stored as data (``cron.put_job``): ``name``, the ``task`` that runs it, its
    ``schedule`` (text, see :func:`schedule_spec`) and ``tz``, the handler's ``kwargs``, its job
    ``options``, and the ``version``, ``updated_by`` and ``updated_ms`` of its last change. ``tz``
    None: the zone each instance has as its default (``LeaseCron(tz=...)``, UTC unless set)."""

    name: str
    task: str
    schedule: str
    tz: Optional[str]
    kwargs: Dict[str, Any]
    options: Dict[str, Any]
    version: int
    updated_by: str
    updated_ms: int

    def to_dict(self) -> Dict[str, Any]:
        """The job as plain JSON-ready values."""
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class ScheduleChanges:
    """The answer to :meth:`~leasecron.Store.schedule_changes`: every record changed after the
    cursor asked about, oldest change first (one per job: its newest), and the ``cursor`` to ask
    from next time (the same when nothing changed)."""

    cursor: int
    changes: Tuple[StoredSchedule, ...] = ()


@dataclasses.dataclass(frozen=True)
class Poll:
    """The answer to :meth:`~leasecron.Store.poll`: the open requests for manual runs
    (:meth:`~leasecron.Store.pending_requests`) and the schedule changes after the cursor asked
    about (:meth:`~leasecron.Store.schedule_changes`)."""

    requests: List[ManualRequest]
    schedules: ScheduleChanges


#: The statuses of a run that ended: a :class:`JobOverview` holds the newest end of each.
FINISHED_STATUSES: Tuple[str, ...] = (Status.SUCCESS.value, Status.FAILED.value, Status.INTERRUPTED.value)


@dataclasses.dataclass(frozen=True)
class JobOverview:
    """What :meth:`~leasecron.Store.overview` reads of one job's stored runs.

    ``last``: its newest stored run (by slot), with its attempts as :meth:`~leasecron.Store.runs`
    gives them; None when it has none. ``last_finish_ms``: for each status of
    :data:`FINISHED_STATUSES` that one of its stored runs ended with, the newest ``finished_ms``
    among those runs: over *every* run the store keeps of it (``history_size`` finished ones),
    so a success older than many failures is still found.
    """

    job: str
    last: Optional[Run] = None
    last_finish_ms: Mapping[str, int] = dataclasses.field(default_factory=dict)

    @property
    def newest_slot_ms(self) -> Optional[int]:
        """The slot of its newest stored run (None: no stored run)."""
        return None if self.last is None else self.last.slot_ms

    @property
    def last_success_ms(self) -> Optional[int]:
        """When its newest successful run ended (None: no stored run succeeded)."""
        return self.last_finish_ms.get(Status.SUCCESS.value)

    @classmethod
    def of_runs(cls, job: str, runs: Sequence[Run]) -> "JobOverview":
        """The overview of ``job`` from its stored ``runs``, newest slot first (all of them, for
        the last finishes to be those of every stored run)."""
        finished: Dict[str, int] = {}
        for run in runs:
            if run.status in FINISHED_STATUSES and run.finished_ms is not None:
                status = str(run.status)
                finished[status] = max(finished.get(status, run.finished_ms), run.finished_ms)
        ordered = {status: finished[status] for status in FINISHED_STATUSES if status in finished}
        return cls(job, runs[0] if runs else None, ordered)


@dataclasses.dataclass(frozen=True)
class Overview:
    """The answer to :meth:`~leasecron.Store.overview`: what a watcher of every job reads, at one
    moment where the store can (see the method for each store).

    ``now_ms``: the store's clock. ``paused``: the names of the paused jobs, every one the store
    holds (only the names: a watcher shows whether a job is paused and judges no paused job
    overdue; who paused it, why, and the requests for manual runs are
    :meth:`~leasecron.Store.job_states`'s, which reads every kept request). ``schedules``: every
    stored schedule record by job, as ``schedule_changes(0)`` lists them (those gone back to
    ``code`` too). ``jobs``: a :class:`JobOverview` of each job asked about and of each stored
    job (an active record whose source is ``stored``), by name (:func:`overview_names`); a job
    without stored runs has an empty one.
    """

    now_ms: int
    paused: FrozenSet[str]
    schedules: Mapping[str, StoredSchedule]
    jobs: Mapping[str, JobOverview]


def overview_names(jobs: Sequence[str], schedules: Iterable[StoredSchedule]) -> List[str]:
    """The jobs an :class:`Overview` summarises: the names of ``jobs`` (each once, in their order),
    then the stored jobs among ``schedules`` not among them, sorted."""
    stored = sorted(record.job for record in schedules if record.source == ScheduleSource.STORED)
    return list(dict.fromkeys([*jobs, *stored]))


def schedule_text(spec: ScheduleSpec) -> str:
    """The stored text of a schedule: a cron string as it is, an interval as its seconds."""
    if isinstance(spec, timedelta):
        spec = spec.total_seconds()
    if isinstance(spec, bool):
        raise ConfigError(f"schedule must be a cron string or an interval in seconds, not {shown(spec)}")
    if isinstance(spec, (int, float)):
        if not math.isfinite(spec) or spec <= 0:
            raise ConfigError(f"schedule interval must be a positive number of seconds, not {shown(spec)}")
        return str(int(spec)) if float(spec).is_integer() else repr(float(spec))
    if isinstance(spec, str):
        return spec.strip()
    raise ConfigError(f"schedule must be a cron string or an interval in seconds, not {shown(spec)}")


def schedule_spec(text: str) -> ScheduleSpec:
    """The schedule a stored text stands for: seconds (a float) for a plain number, else the cron string."""
    return float(text) if _NUMBER.fullmatch(text) else text


def parse_json_object(what: str, text: str, example: str) -> Dict[str, Any]:
    """``text`` (a command's ``--kwargs``, a form's field) read as a JSON object; else
    :class:`~leasecron.ConfigError` naming ``what`` and showing ``example``. What it holds is
    checked with the job (:func:`check_schedule_fields`)."""
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"{what} must be a JSON object, such as {example}: {exc}") from None
    if not isinstance(value, dict):
        raise ConfigError(f"{what} must be a JSON object, such as {example}, not {text.strip()[:80]!r}")
    return value


def _json_object(what: str, value: object) -> Dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(f"{what} must be a JSON object (a dict), not {shown(value)}")
    bad = [k for k in value if not isinstance(k, str)]
    if bad:
        raise ConfigError(f"{what} keys must be strings, not {shown(bad[0])}")
    try:
        text = json.dumps(value, allow_nan=False, sort_keys=True)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{what} must be JSON (numbers, text, true/false/null, lists, objects): {exc}") from None
    if len(text.encode("utf-8")) > MAX_JSON_BYTES:
        raise ConfigError(f"{what} must be at most {MAX_JSON_BYTES} bytes of JSON, not {len(text.encode())}")
    return dict(json.loads(text))


def _stored_options(job: str, options: Dict[str, Any]) -> Dict[str, Any]:
    for name, value in options.items():
        if name == "tz":
            raise ConfigError(f"stored job {job!r}: give tz as its own field, not among the options")
        option = BY_NAME.get(name)
        if option is None or not option.job:
            known = ", ".join(sorted(n for n, o in BY_NAME.items() if o.job and n != "tz"))
            raise ConfigError(f"stored job {job!r}: unknown job option {name!r} (one of: {known})")
        check_option(name, value, job)
    return options


def check_schedule_fields(
    job: object,
    schedule: Optional[ScheduleSpec],
    tz: Optional[str],
    task: Optional[str],
    kwargs: Optional[Mapping[str, Any]],
    options: Optional[Mapping[str, Any]],
) -> Tuple[Optional[str], Optional[str], Dict[str, Any], Dict[str, Any]]:
    """Check what :meth:`~leasecron.Store.set_schedule` is given, before anything is stored:
    ``(schedule text, tz, kwargs, options)`` as the store keeps them, or
    :class:`~leasecron.ConfigError` naming what is wrong.

    No ``schedule``: nothing may come with it (a reset or a delete). An override (no ``task``)
    takes a schedule and a zone only; a stored job, a task name and JSON ``kwargs`` and
    ``options`` too. The cron string and the zone are parsed as an instance would.
    """
    check_job_name(job)
    assert isinstance(job, str)
    if schedule is None:
        if tz is not None or task is not None or kwargs or options:
            raise ConfigError(f"{job!r}: a schedule removed takes no tz, task, kwargs or options")
        return None, None, {}, {}
    text = schedule_text(schedule)
    if not text or len(text) > MAX_SCHEDULE_CHARS:
        raise ConfigError(f"{job!r}: schedule must be 1 to {MAX_SCHEDULE_CHARS} characters, not {shown(text)}")
    if tz is not None:
        check_text("tz", tz)
    try:
        make_schedule(schedule_spec(text), tz or "UTC")
    except ConfigError as exc:
        raise ConfigError(f"{job!r}: schedule: {exc}") from None
    if task is None:
        if kwargs or options:
            raise ConfigError(f"{job!r}: kwargs and options belong to a stored job (give a task)")
        return text, tz, {}, {}
    if not isinstance(task, str) or not task:
        raise ConfigError(f"{job!r}: task must be a non-empty string, not {shown(task)}")
    check_text("task", task)
    stored_kwargs = _json_object(f"{job!r}: kwargs", kwargs)
    stored_options = _stored_options(job, _json_object(f"{job!r}: options", options))
    return text, tz, stored_kwargs, stored_options
