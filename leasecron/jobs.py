"""A registered job: its name, handler, schedule and resolved options; a task; and the job a
stored schedule makes of them.

A *task* (``cron.task``) is a handler that schedules nothing by itself: a stored job
(:mod:`leasecron.stored`) names it and gives it keyword arguments. :func:`effective_job` is the
one place that decides which :class:`Job` an instance schedules under a name, from the job
registered in code there (if any), the tasks, and what the store holds of the name.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from typing import Any, Callable, Mapping, Optional, Tuple

from .announcements import InUse
from .controls import JobState, ManualRequest
from .errors import ConfigError
from .options import JobOptions, resolve_options
from .schedules import Schedule, ScheduleSpec, make_schedule
from .limits import check_job_name
from .runs import Run
from .states import RequestState, ScheduleSource
from .stored import StoredSchedule, schedule_spec

__all__ = [
    "Job", "Task", "make_job", "make_task", "job_name", "job_schedule", "job_decorator", "effective_job",
    "check_kwargs", "shown_schedule", "expired_request",
]  # fmt: skip

Handler = Callable[..., Any]


@dataclasses.dataclass(frozen=True)
class Job:
    """A job as an instance runs it. ``takes_context``: the handler is called with a Context."""

    name: str
    func: Handler
    schedule: Schedule
    options: JobOptions
    takes_context: bool
    #: The version of the stored schedule it was made from (0: the code's, never changed; rule 23).
    version: int = 0
    #: Where its schedule comes from: ``code``, an ``override`` or a ``stored`` job.
    source: str = ScheduleSource.CODE
    #: When its schedule took effect, on the store's clock: the last change of its stored record
    #: (0: the code's, never changed). Start-up catches up no slot before it.
    since_ms: int = 0


@dataclasses.dataclass(frozen=True)
class Task:
    """A handler registered with ``cron.task(name)``, run by the stored jobs that name it."""

    name: str
    func: Handler
    takes_context: bool


def make_task(func: Handler, name: object) -> Task:
    """Validate a task's registration (a name as a job's, a callable that is no generator function)."""
    name = job_name(func, name)
    if inspect.isgeneratorfunction(func) or inspect.isasyncgenfunction(func):
        raise ConfigError(f"task {name!r}: the handler is a generator function: calling it would run none of its body")
    return Task(name, func, _takes_context(func))


def check_kwargs(task: Task, kwargs: Mapping[str, Any], job: str) -> None:
    """Raise :class:`~leasecron.ConfigError` unless ``task``'s handler accepts ``kwargs`` (and
    the context, if it takes one) as keyword arguments."""
    try:
        signature = inspect.signature(task.func)
    except (TypeError, ValueError):  # a builtin without a signature: nothing to check
        return
    args = (None,) if task.takes_context else ()
    try:
        signature.bind(*args, **kwargs)
    except TypeError as exc:
        raise ConfigError(f"stored job {job!r}: kwargs do not fit task {task.name!r}{signature}: {exc}") from None


def effective_job(
    name: str,
    code: Optional[Job],
    record: Optional[StoredSchedule],
    tasks: Mapping[str, Task],
    defaults: Mapping[str, Any],
) -> Optional[Job]:
    """The job an instance schedules under ``name``: the job registered in ``code`` there, with
    the schedule of an ``override`` if the store holds one; or a ``stored`` job made of its task
    (None when this instance lacks the task, or registered ``name`` in code: a stored job never
    takes a code job's name); or None. A record that cannot be made into a job here (its options
    do not go with this instance's defaults) raises :class:`~leasecron.ConfigError`. A code job
    always carries the version of the name's record, so that its claims are not answered ``stale``."""
    if record is None or record.source == ScheduleSource.CODE:
        if code is None:
            return None
        version, since = (record.version, record.updated_ms) if record is not None else (0, 0)
        if (code.version, code.since_ms) == (version, since):
            return code
        return dataclasses.replace(code, version=version, since_ms=since)
    assert record.schedule is not None
    spec = schedule_spec(record.schedule)
    if record.source == ScheduleSource.OVERRIDE:
        if code is None:
            return None
        sched = job_schedule(name, spec, record.tz or code.options.tz)
        return dataclasses.replace(
            code, schedule=sched, version=record.version, source=record.source, since_ms=record.updated_ms
        )
    task = tasks.get(record.task or "")
    if code is not None:  # a stored job never takes a code job's name: the code's job runs, fenced by the version
        return dataclasses.replace(code, version=record.version, source=ScheduleSource.CODE, since_ms=record.updated_ms)
    if task is None:
        return None
    options = resolve_options(defaults, {**record.options, "tz": record.tz or defaults.get("tz", "UTC")}, name)
    func: Handler = functools.partial(task.func, **record.kwargs) if record.kwargs else task.func
    return Job(name, func, job_schedule(name, spec, options.tz), options, task.takes_context, record.version,
               record.source, record.updated_ms)  # fmt: skip


def shown_schedule(
    code: Optional[Job],
    record: Optional[StoredSchedule],
    defaults: Optional[Mapping[str, Any]],
    announced: Optional[InUse] = None,
) -> Tuple[Optional[Schedule], Optional[JobOptions]]:
    """The schedule and options of what runs under a name, as an operator's tool can tell from
    outside an instance (``leasecron jobs``, the dashboard), decided as an instance decides it
    (:func:`effective_job`): ``code`` is the app's job of that name (``--app``), ``record`` the
    store's record, ``defaults`` the app's job defaults (None: no app given); without the app's
    job, ``announced`` is the schedule the live instances give the name in their code (their
    announcements, the most used). A stored job never takes a code job's name; an override or a
    stored job is read in its stored ``tz``, else in the job's zone (an override) or the app's
    default zone (a stored job). The schedule is None when it cannot be told: a cron string
    stored without a zone and no job or app to take one from, or a zone this host does not know."""
    in_code = code.schedule if code is not None else None
    code_tz = code.options.tz if code is not None else None
    if code is None and announced is not None:
        try:
            in_code, code_tz = make_schedule(schedule_spec(announced.schedule), announced.tz), announced.tz
        except ConfigError:  # announced by an instance whose host knows more zones, or a newer release
            code_tz = announced.tz
    if record is None or not record.active or (code_tz is not None and record.source == ScheduleSource.STORED):
        return in_code, code.options if code is not None else None
    assert record.schedule is not None
    spec = schedule_spec(record.schedule)
    options = code.options if code is not None else None
    zone = record.tz or code_tz
    if record.source == ScheduleSource.STORED and defaults is not None:
        zone = record.tz or defaults.get("tz", "UTC")
        try:
            options = resolve_options(defaults, {**record.options, "tz": zone}, record.job)
        except ConfigError:  # the instances skip it with a WARNING line: no options to show
            options = None
    if zone is None and isinstance(spec, str):
        return None, options
    try:
        return make_schedule(spec, zone or "UTC"), options
    except ConfigError:  # a zone this host does not know: the instances may
        return None, options


def expired_request(state: Optional[JobState], last: Optional[Run]) -> Optional[ManualRequest]:
    """The request for a manual run of a job that an operator's tool shows as expired unclaimed
    (``leasecron jobs``, the dashboard): the newest of ``state``'s requests that expired with no
    instance claiming it, if it was made at or after the start of the job's newest run ``last``
    (its first attempt's start; None: the job has no run); else None. So it shows until the
    job's next run, of any reason, starts. Both times are on the store's
    clock (a store keeps a job's newest 20 requests that ended)."""
    requests = state.requests if state is not None else ()
    expired = [request for request in requests if request.state == RequestState.EXPIRED]
    if not expired:
        return None
    newest = max(expired, key=lambda request: request.slot_ms)
    if last is not None and newest.slot_ms < min((a.started_ms for a in last.attempts), default=last.started_ms):
        return None
    return newest


def make_job(
    func: Handler,
    schedule: ScheduleSpec,
    name: object,
    defaults: Mapping[str, Any],
    overrides: Mapping[str, Any],
) -> Job:
    """Validate a registration; raise :class:`~leasecron.ConfigError` naming the job and option."""
    name = job_name(func, name)
    if inspect.isgeneratorfunction(func) or inspect.isasyncgenfunction(func):
        raise ConfigError(
            f"job {name!r}: the handler is a generator function: calling it would run none of its body;"
            " use a plain function or an async def without yield"
        )
    options = resolve_options(defaults, overrides, name)
    sched = job_schedule(name, schedule, options.tz)
    return Job(name=name, func=func, schedule=sched, options=options, takes_context=_takes_context(func))


def job_decorator(
    add_job: Callable[..., object], schedule: ScheduleSpec, name: Optional[str], options: Mapping[str, Any]
) -> Callable[[Handler], Handler]:
    """The decorator behind ``@cron.job(schedule, name=..., **options)``: it registers the
    function with ``add_job(func, schedule, name=name, **options)`` and returns it unchanged."""

    def register(func: Handler) -> Handler:
        add_job(func, schedule, name=name, **options)
        return func

    return register


def job_name(func: Handler, name: object) -> str:
    """The name a job registers under: ``name``, or ``"module.qualname"`` of ``func`` when None.

    Raises :class:`~leasecron.ConfigError` for a handler that is not callable
    and for a name that is empty or no store can keep.
    """
    if not callable(func):
        raise ConfigError(f"job handler must be callable, not {func!r}")
    if name is None:
        name = f"{getattr(func, '__module__', None) or '?'}.{getattr(func, '__qualname__', repr(func))}"
    if not isinstance(name, str) or not name.strip():
        raise ConfigError(f"job name must be a non-empty string, not {name!r}")
    check_job_name(name)  # what every store can keep: no NUL, no lone surrogate, at most 1 KiB
    return name


def job_schedule(name: str, schedule: ScheduleSpec, tz: str) -> Schedule:
    """The job's schedule; :class:`~leasecron.ConfigError` naming the job for a bad one."""
    try:
        return make_schedule(schedule, tz)
    except ConfigError as exc:
        raise ConfigError(f"job {name!r}: schedule: {exc}") from None


def _takes_context(func: Handler) -> bool:
    """Whether ``func`` accepts a positional argument (the Context)."""
    try:
        parameters = inspect.signature(func).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: give it the context
        return True
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return any(p.kind in positional or p.kind == inspect.Parameter.VAR_POSITIONAL for p in parameters)
