"""A registered job: its name, handler, schedule and resolved options."""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any, Callable, Mapping, Optional

from .errors import ConfigError
from .options import JobOptions, resolve_options
from .schedules import Schedule, ScheduleSpec, make_schedule
from .limits import check_job_name

__all__ = ["Job", "make_job", "job_name", "job_schedule", "job_decorator"]

Handler = Callable[..., Any]


@dataclasses.dataclass(frozen=True)
class Job:
    """A job as an instance runs it. ``takes_context``: the handler is called with a Context."""

    name: str
    func: Handler
    schedule: Schedule
    options: JobOptions
    takes_context: bool


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
