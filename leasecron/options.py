"""The options of an instance and its jobs, declared once: :data:`OPTIONS`.

Each :class:`Option` says its name, default, the values it takes and what it
does; the checks, the defaults, :class:`~leasecron.LeaseCron`'s signature (a
test holds them together), the Flask config keys (:attr:`Option.config_key`)
and the command-line flags (:attr:`Option.flag`) all come from it. A *job
option* is a default of every job on ``LeaseCron`` and an override on each
job; the others (``stop_timeout_ms``, ``claim_threads``, ``poll_ms``) are the
instance's own. :func:`resolve_options` combines a job's overrides with the
instance's defaults into a :class:`JobOptions`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, Mapping, Optional, Tuple

from .errors import ConfigError
from .limits import MAX_INT, OVERLAP_MODES
from .schedules import time_zone

__all__ = [
    "Option",
    "OPTIONS",
    "BY_NAME",
    "JOB_OPTIONS",
    "INSTANCE_OPTIONS",
    "default_margin_ms",
    "JobOptions",
    "DEFAULTS",
    "OPTION_NAMES",
    "resolve_options",
    "check_option",
]


@dataclasses.dataclass(frozen=True)
class Option:
    """One option: ``name``, ``default`` and what it does (``doc``).

    An integer option has a ``minimum`` (and at most 2**50); ``none`` says
    what ``None`` means where it is a value of its own; ``choices`` are the
    values of a text option that takes a few; ``job`` is false for an option
    of the instance alone.
    """

    name: str
    default: Any
    doc: str
    minimum: Optional[int] = None
    none: Optional[str] = None
    choices: Tuple[str, ...] = ()
    job: bool = True
    #: Why a value under the minimum is too small, where that is not obvious.
    too_small: str = "too small"

    @property
    def integer(self) -> bool:
        """Whether the option takes a whole number (ms, a count)."""
        return self.minimum is not None

    @property
    def config_key(self) -> str:
        """Its key in a Flask app's config: ``LEASECRON_LEASE_MS``."""
        return f"LEASECRON_{self.name.upper()}"

    @property
    def flag(self) -> str:
        """Its command-line flag: ``--lease-ms``."""
        return "--" + self.name.replace("_", "-")

    def check(self, value: Any, where: str = "LeaseCron") -> None:
        """Raise :class:`~leasecron.ConfigError`, naming ``where`` and the option, unless ``value`` fits."""
        if value is None and self.none is not None:
            return
        if self.integer:
            assert self.minimum is not None
            whole = isinstance(value, int) and not isinstance(value, bool)
            if not self.job and not (whole and self.minimum <= value <= MAX_INT):  # the instance's: one message
                wanted = f"an integer from {self.minimum} to 2**50"
                raise ConfigError(f"{where}: {self.name} must be {wanted}, not {value!r}")
            if not whole:
                raise ConfigError(f"{where}: {self.name} must be an integer, not {value!r}")
            if value < self.minimum:
                kind = "negative" if value < 0 else self.too_small
                raise ConfigError(f"{where}: {self.name} must be >= {self.minimum}, not {value!r} ({kind})")
            if value > MAX_INT:
                raise ConfigError(f"{where}: {self.name} must be at most 2**50, not {value!r}")
        elif self.choices:
            if value not in self.choices:
                allowed = " or ".join(repr(choice) for choice in self.choices)
                raise ConfigError(f"{where}: {self.name} must be {allowed}, not {value!r}")
        elif self.name == "tz":
            try:
                time_zone(value)
            except ConfigError as exc:
                raise ConfigError(f"{where}: tz: {exc}") from None


#: Every option, in the order of :class:`~leasecron.LeaseCron`'s signature.
OPTIONS: Tuple[Option, ...] = (
    Option("lease_ms", 30_000, "how long a runner's lease lasts without a renewal", minimum=3,
           too_small="too short for a heartbeat: heartbeat_ms, at least 1, must stay under half of it"),
    Option("heartbeat_ms", None, "how often a runner renews its lease; under half of lease_ms", minimum=1,
           none="min(5 000, lease_ms // 6), at least 1"),
    Option("max_attempts", 3, "attempts of a run whose runners died before it is interrupted", minimum=1),
    Option("overlap", "skip", "whether a slot starts while an earlier one runs", choices=OVERLAP_MODES),
    Option("catch_up_ms", 300_000, "how old a missed slot may be to run on start (0: never)", minimum=0),
    Option("max_late_ms", 30_000, "how late a slot may still be claimed", minimum=0),
    Option("jitter_ms", 1_000, "the largest random delay of an instance's claims after a slot", minimum=0),
    Option("history_size", 100, "finished runs the store keeps per job", minimum=0),
    Option("tz", "UTC", "the time zone a cron schedule is read in (an IANA name)"),
    Option("timeout_ms", None, "how long an attempt may run before its signal aborts", minimum=1,
           none="no limit"),
    Option("retries", 0, "more tries of a handler that raised, under the same lease", minimum=0),
    Option("retry_delay_ms", 1_000, "the wait before the first retry, doubled after each", minimum=0),
    Option("lease_margin_ms", None, "how long before its lease can end in the store a runner gives its run up",
           minimum=0, none="min(heartbeat_ms, lease_ms // 10, lease_ms - 2 * heartbeat_ms)"),
    Option("stop_timeout_ms", 10_000, "how long stop() waits for running handlers", minimum=0, job=False),
    Option("claim_threads", 4, "the threads that send the instance's store calls", minimum=1, job=False),
    Option("poll_ms", 1_000, "how often a started instance asks for requests of manual runs", minimum=1,
           job=False),
)  # fmt: skip
#: The options by name.
BY_NAME: Dict[str, Option] = {option.name: option for option in OPTIONS}
#: The job options: defaults on LeaseCron, overrides on each job.
JOB_OPTIONS: Tuple[Option, ...] = tuple(option for option in OPTIONS if option.job)
#: The options of the instance alone.
INSTANCE_OPTIONS: Tuple[Option, ...] = tuple(option for option in OPTIONS if not option.job)
#: The job options' names.
OPTION_NAMES: Tuple[str, ...] = tuple(option.name for option in JOB_OPTIONS)
#: The job options' defaults (``heartbeat_ms``'s ``None``: derived from ``lease_ms``).
DEFAULTS: Dict[str, Any] = {option.name: option.default for option in JOB_OPTIONS}


@dataclasses.dataclass(frozen=True)
class JobOptions:
    """The options a job runs with, every one resolved to a value: a field for each job option of
    :data:`OPTIONS`, in its order (a test holds them together)."""

    lease_ms: int
    heartbeat_ms: int
    max_attempts: int
    overlap: str
    catch_up_ms: int
    max_late_ms: int
    jitter_ms: int
    history_size: int
    tz: str
    timeout_ms: Optional[int] = DEFAULTS["timeout_ms"]
    retries: int = DEFAULTS["retries"]
    retry_delay_ms: int = DEFAULTS["retry_delay_ms"]
    #: Resolved by :func:`resolve_options` (:func:`default_margin_ms` when not given).
    lease_margin_ms: int = 0


def _describe(job: Optional[str]) -> str:
    return "LeaseCron" if job is None else f"job {job!r}"


def check_option(name: str, value: Any, job: Optional[str] = None) -> None:
    """Raise :class:`~leasecron.ConfigError` if ``value`` is not valid for the job option ``name``."""
    where = _describe(job)
    option = BY_NAME.get(name)
    if option is None or not option.job:
        raise ConfigError(f"{where}: unknown option {name!r}; known: {', '.join(OPTION_NAMES)}")
    option.check(value, where)


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
    margin = values["lease_margin_ms"]
    if margin is None:
        values["lease_margin_ms"] = default_margin_ms(lease, heartbeat)
    elif margin > lease - 2 * heartbeat:
        raise ConfigError(
            f"{_describe(job)}: lease_margin_ms ({margin}{_origin('lease_margin_ms', defaults, overrides, job)})"
            f" must be at most lease_ms - 2 * heartbeat_ms ({lease - 2 * heartbeat}): the runner would give its"
            " run up before a renewal sent one heartbeat late could be confirmed"
        )
    timeout = values["timeout_ms"]
    if timeout is not None and timeout < heartbeat:
        raise ConfigError(
            f"{_describe(job)}: timeout_ms ({timeout}{_origin('timeout_ms', defaults, overrides, job)})"
            f" must be at least heartbeat_ms ({heartbeat}{_origin('heartbeat_ms', defaults, overrides, job)}):"
            " a shorter limit would end a run before its lease was ever renewed"
        )
    return JobOptions(**values)


def default_margin_ms(lease_ms: int, heartbeat_ms: int) -> int:
    """``lease_margin_ms`` when not given: one heartbeat, at most a tenth of the lease, and never so
    much that a renewal sent one heartbeat late could not be confirmed before the runner gives up
    (``heartbeat_ms`` under half of ``lease_ms`` keeps it at least 1)."""
    return min(heartbeat_ms, lease_ms // 10, lease_ms - 2 * heartbeat_ms)


def _origin(name: str, defaults: Mapping[str, Any], overrides: Mapping[str, Any], job: Optional[str]) -> str:
    """For an error message: where an option's value came from, if not from the one it blames."""
    if name in overrides or (job is None and name in defaults):
        return ""
    return ", from LeaseCron" if name in defaults else ", the default"
