"""A registered job: its name, handler, schedule and resolved options."""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any, Callable, Mapping

from .errors import ConfigError
from .options import JobOptions, resolve_options
from .schedules import Schedule, ScheduleSpec, make_schedule
from .stores.base import check_job_name

__all__ = ["Job", "make_job"]

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
    if not callable(func):
        raise ConfigError(f"job handler must be callable, not {func!r}")
    if name is None:
        name = f"{getattr(func, '__module__', None) or '?'}.{getattr(func, '__qualname__', repr(func))}"
    if not isinstance(name, str) or not name.strip():
        raise ConfigError(f"job name must be a non-empty string, not {name!r}")
    check_job_name(name)  # what every store can keep: no NUL, no lone surrogate, at most 1 KiB
    options = resolve_options(defaults, overrides, name)
    try:
        sched = make_schedule(schedule, options.tz)
    except ConfigError as exc:
        raise ConfigError(f"job {name!r}: schedule: {exc}") from None
    return Job(name=name, func=func, schedule=sched, options=options, takes_context=_takes_context(func))


def _takes_context(func: Handler) -> bool:
    """Whether ``func`` accepts a positional argument (the Context)."""
    try:
        parameters = inspect.signature(func).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: give it the context
        return True
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return any(p.kind in positional or p.kind == inspect.Parameter.VAR_POSITIONAL for p in parameters)
