"""Job options: their defaults, how a job's overrides combine with the
instance's defaults, and their validation.

Every option may be given to :class:`~leasecron.LeaseCron` (a default for all
its jobs) and to each job (an override). ``heartbeat_ms`` left unset at both
levels is derived from the job's own lease: ``min(5_000, lease_ms // 6)``, at
least 1. A heartbeat must come more often than every half lease, so
``lease_ms`` is at least 3 (a heartbeat of 1 ms under half of 3 ms): below
that no heartbeat would do, and the error blames the lease. A bad value raises
:class:`~leasecron.ConfigError` naming the job and the option, at registration;
the defaults given to ``LeaseCron`` are checked together, as one job would use
them, when it is built, and the error names ``LeaseCron``.

``timeout_ms`` (default ``None``: no limit) is a whole number of ms, no less
than the job's heartbeat: a limit shorter than one heartbeat could end a
run before its lease was ever renewed, which is no limit a cluster could
keep. ``retries`` (default 0) and ``retry_delay_ms`` (default 1 000) are
whole numbers from 0; see :mod:`leasecron.engine.tries` for what they do.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, Mapping, Optional

from .errors import ConfigError
from .schedules import time_zone
from .limits import MAX_INT, OVERLAP_MODES

__all__ = ["JobOptions", "DEFAULTS", "OPTION_NAMES", "resolve_options", "check_option"]

#: The option defaults (``heartbeat_ms`` is derived from ``lease_ms``).
DEFAULTS: Dict[str, Any] = {
    "lease_ms": 30_000,
    "heartbeat_ms": None,
    "max_attempts": 3,
    "overlap": "skip",
    "catch_up_ms": 300_000,
    "max_late_ms": 30_000,
    "jitter_ms": 1_000,
    "history_size": 100,
    "tz": "UTC",
    "timeout_ms": None,
    "retries": 0,
    "retry_delay_ms": 1_000,
}
OPTION_NAMES = tuple(DEFAULTS)

# name -> smallest value allowed, for the integer options.
_MINIMUM = {
    "lease_ms": 3,
    "heartbeat_ms": 1,
    "max_attempts": 1,
    "catch_up_ms": 0,
    "max_late_ms": 0,
    "jitter_ms": 0,
    "history_size": 0,
    "timeout_ms": 1,
    "retries": 0,
    "retry_delay_ms": 0,
}
#: The options whose ``None`` is a value of its own (heartbeat_ms: derived; timeout_ms: no limit).
_NONE_ALLOWED = ("heartbeat_ms", "timeout_ms")
# name -> why a value under its minimum is too small, where the minimum is not obvious.
_TOO_SMALL = {
    "lease_ms": "too short for a heartbeat: heartbeat_ms, at least 1, must stay under half of it",
}


@dataclasses.dataclass(frozen=True)
class JobOptions:
    """The options a job runs with, every one resolved to a value."""

    lease_ms: int
    heartbeat_ms: int
    max_attempts: int
    overlap: str
    catch_up_ms: int
    max_late_ms: int
    jitter_ms: int
    history_size: int
    tz: str
    timeout_ms: Optional[int] = None
    retries: int = 0
    retry_delay_ms: int = 1_000


def _describe(job: Optional[str]) -> str:
    return "LeaseCron" if job is None else f"job {job!r}"


def check_option(name: str, value: Any, job: Optional[str] = None) -> None:
    """Raise :class:`~leasecron.ConfigError` if ``value`` is not valid for option ``name``."""
    where = _describe(job)
    if name not in DEFAULTS:
        raise ConfigError(f"{where}: unknown option {name!r}; known: {', '.join(OPTION_NAMES)}")
    if value is None and name in _NONE_ALLOWED:
        return
    if name in _MINIMUM:
        minimum = _MINIMUM[name]
        if not isinstance(value, int) or isinstance(value, bool):
            raise ConfigError(f"{where}: {name} must be an integer, not {value!r}")
        if value < minimum:
            kind = "negative" if value < 0 else _TOO_SMALL.get(name, "too small")
            raise ConfigError(f"{where}: {name} must be >= {minimum}, not {value!r} ({kind})")
        if value > MAX_INT:
            raise ConfigError(f"{where}: {name} must be at most 2**50, not {value!r}")
    elif name == "overlap":
        if value not in OVERLAP_MODES:
            raise ConfigError(f"{where}: overlap must be 'skip' or 'allow', not {value!r}")
    elif name == "tz":
        try:
            time_zone(value)
        except ConfigError as exc:
            raise ConfigError(f"{where}: tz: {exc}") from None


def resolve_options(
    defaults: Mapping[str, Any], overrides: Mapping[str, Any], job: Optional[str] = None
) -> JobOptions:
    """The options of a job: its ``overrides`` over the instance's ``defaults``, validated.

    With ``job`` None (no overrides), the instance's own defaults are checked as
    one job would use them, and an error names ``LeaseCron``.
    """
    values = {**DEFAULTS, **defaults, **overrides}
    for name, value in values.items():
        check_option(name, value, job)
    if values["heartbeat_ms"] is None:
        values["heartbeat_ms"] = max(1, min(5_000, values["lease_ms"] // 6))
    lease, heartbeat = values["lease_ms"], values["heartbeat_ms"]
    if not heartbeat * 2 < lease:  # never for a derived heartbeat, as lease_ms >= 3
        raise ConfigError(
            f"{_describe(job)}: heartbeat_ms ({heartbeat}{_origin('heartbeat_ms', defaults, overrides, job)})"
            f" must be under half of lease_ms ({lease}{_origin('lease_ms', defaults, overrides, job)})"
        )
    timeout = values["timeout_ms"]
    if timeout is not None and timeout < heartbeat:
        raise ConfigError(
            f"{_describe(job)}: timeout_ms ({timeout}{_origin('timeout_ms', defaults, overrides, job)})"
            f" must be at least heartbeat_ms ({heartbeat}{_origin('heartbeat_ms', defaults, overrides, job)}):"
            " a shorter limit would end a run before its lease was ever renewed"
        )
    return JobOptions(**values)


def _origin(name: str, defaults: Mapping[str, Any], overrides: Mapping[str, Any], job: Optional[str]) -> str:
    """For an error message: where an option's value came from, if not from the one it blames."""
    if name in overrides or (job is None and name in defaults):
        return ""
    return ", from LeaseCron" if name in defaults else ", the default"
