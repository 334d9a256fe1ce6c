"""Schedules: which slots a job has. The same on every instance.

A slot is an instant, in epoch milliseconds. Two kinds:

* :class:`CronSchedule`, a cron string in croniter syntax (five fields, or six
  with seconds as the last field), read in a time zone (IANA name, default
  UTC). croniter decides what happens in DST gaps and repeats.
* :class:`IntervalSchedule`, a fixed interval aligned to the Unix epoch: the
  slots are the multiples of the interval, so every instance computes the
  same ones whenever it started.
"""

from __future__ import annotations

import abc
from datetime import datetime, timedelta, timezone
from typing import Optional, Union

from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadDateError, CroniterError, croniter

from .errors import ConfigError, shown

__all__ = ["Schedule", "CronSchedule", "IntervalSchedule", "ScheduleSpec", "make_schedule"]

#: What a job's schedule may be given as.
ScheduleSpec = Union[str, timedelta, int, float]

#: The fields of a cron string, in croniter's order (seconds sixth, year seventh).
_CRON_FIELDS = ("minute", "hour", "day-of-month", "month", "day-of-week", "second", "year")


class Schedule(abc.ABC):
    """The slots of a job."""

    @abc.abstractmethod
    def next_after(self, ms: int) -> int:
        """The first slot strictly after ``ms``."""

    @abc.abstractmethod
    def at_or_before(self, ms: int) -> Optional[int]:
        """The latest slot at or before ``ms``, or ``None`` if there is none."""


class CronSchedule(Schedule):
    """The slots of a cron expression, read in the time zone ``tz``."""

    def __init__(self, expression: str, tz: str = "UTC") -> None:
        self.expression = expression
        self.tz = tz
        self._zone = time_zone(tz)
        try:
            croniter.expand(expression)
        except CroniterError as exc:
            raise ConfigError(_invalid_cron(expression, exc)) from None
        try:
            self.next_after(0)
        except CroniterBadDateError:
            raise ConfigError(f"cron expression {shown(expression)} never fires") from None

    def _at(self, ms: int) -> datetime:
        return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).astimezone(self._zone)

    def next_after(self, ms: int) -> int:
        slot: datetime = croniter(self.expression, self._at(ms)).get_next(datetime)
        return round(slot.timestamp() * 1000)

    def at_or_before(self, ms: int) -> Optional[int]:
        try:
            slot: datetime = croniter(self.expression, self._at(ms + 1)).get_prev(datetime)
        except CroniterError:
            return None
        return round(slot.timestamp() * 1000)

    def __repr__(self) -> str:
        return f"CronSchedule({self.expression!r}, tz={self.tz!r})"


class IntervalSchedule(Schedule):
    """Every ``interval_ms`` milliseconds, aligned to the Unix epoch."""

    def __init__(self, interval_ms: int) -> None:
        if interval_ms <= 0:
            raise ConfigError(f"interval must be positive, not {interval_ms} ms")
        self.interval_ms = interval_ms

    def next_after(self, ms: int) -> int:
        return (ms // self.interval_ms + 1) * self.interval_ms

    def at_or_before(self, ms: int) -> Optional[int]:
        return ms - ms % self.interval_ms

    def __repr__(self) -> str:
        return f"IntervalSchedule({self.interval_ms} ms)"


def _invalid_cron(expression: str, exc: CroniterError) -> str:
    """The message for a cron string croniter refused: the first field at fault and croniter's reason."""
    reason = str(exc).strip()
    if reason.startswith("Traceback"):  # croniter wraps an unexpected error in its traceback
        reason = reason.splitlines()[-1]
    reason = " ".join(reason.split())
    if len(reason) > 120:
        reason = f"{reason[:120]}..."
    return f"not a valid cron expression {shown(expression)}: {_bad_field(expression)}{reason}"


def _bad_field(expression: str) -> str:
    """``"bad minute field '61': "``: the first field croniter refuses alone (the others ``*``), or ``""``."""
    fields = expression.split()
    if len(fields) not in (5, 6, 7):
        return ""
    for i, (name, value) in enumerate(zip(_CRON_FIELDS, fields)):
        alone = ["*"] * len(fields)
        alone[i] = value
        if not croniter.is_valid(" ".join(alone)):
            return f"bad {name} field {shown(value, 40)}: "
    return ""


def make_schedule(spec: ScheduleSpec, tz: str = "UTC") -> Schedule:
    """A :class:`Schedule` from a cron string, a ``timedelta`` or a number of seconds."""
    if isinstance(spec, str):
        return CronSchedule(spec.strip(), tz)
    if isinstance(spec, timedelta):
        return IntervalSchedule(_whole_ms(spec.total_seconds(), spec))
    if isinstance(spec, (int, float)) and not isinstance(spec, bool):
        return IntervalSchedule(_whole_ms(spec, spec))
    raise ConfigError(
        f"schedule must be a cron string, a timedelta or a number of seconds, not {spec!r}"
    )


#: The longest interval, in ms (2**50 ms is some 35 000 years), as for every other time.
MAX_INTERVAL_MS = 2**50


def _whole_ms(seconds: float, spec: object) -> int:
    ms = seconds * 1000
    if ms != ms or ms <= 0 or ms == float("inf") or ms != int(ms):  # NaN, not positive, infinite, a fraction of a ms
        raise ConfigError(f"interval must be a positive whole number of milliseconds, not {spec!r}")
    if ms > MAX_INTERVAL_MS:
        raise ConfigError(f"interval must be at most 2**50 ms (some 35 000 years), not {spec!r}")
    return int(ms)


def time_zone(tz: str) -> ZoneInfo:
    """The ZoneInfo of an IANA name, or ConfigError."""
    if not isinstance(tz, str) or not tz:
        raise ConfigError(f"tz must be an IANA time zone name, not {tz!r}")
    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError, OSError):  # OSError: a name too long for a file name
        raise ConfigError(f"unknown time zone {shown(tz)}") from None
