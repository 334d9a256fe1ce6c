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
from typing import Any, Callable, Mapping, Optional

from .errors import ConfigError
from .options import JobOptions, resolve_options
from .schedules import Schedule, ScheduleSpec, make_schedule
from .limits import check_job_name
from .states import ScheduleSource
from .stored import StoredSchedule, schedule_spec

__all__ = [
    "Job", "Task", "make_job", "make_task", "job_name", "job_schedule", "job_decorator", "effective_job",
    "check_kwargs",
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
        version = record.version if record is not None else 0
        return code if code.version == version else dataclasses.replace(code, version=version)
    assert record.schedule is not None
    spec = schedule_spec(record.schedule)
    if record.source == ScheduleSource.OVERRIDE:
        if code is None:
            return None
        sched = job_schedule(name, spec, record.tz or code.options.tz)
        return dataclasses.replace(code, schedule=sched, version=record.version, source=record.source)
    task = tasks.get(record.task or "")
    if code is not None:  # a stored job never takes a code job's name: the code's job runs, fenced by the version
        return dataclasses.replace(code, version=record.version, source=ScheduleSource.CODE)
    if task is None:
        return None
    options = resolve_options(defaults, {**record.options, "tz": record.tz or defaults.get("tz", "UTC")}, name)
    func: Handler = functools.partial(task.func, **record.kwargs) if record.kwargs else task.func
    return Job(name, func, job_schedule(name, spec, options.tz), options, task.takes_context, record.version,
               record.source)  # fmt: skip


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
