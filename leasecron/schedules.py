"""Schedules: which slots a job has. The same on every instance.

A slot is an instant in epoch milliseconds, a pure function of the schedule, its zone and the
time asked about. :class:`IntervalSchedule` is a fixed interval aligned to the Unix epoch (the
slots are its multiples); :class:`CronSchedule` is a cron string in croniter syntax, read in a
time zone. croniter gives the local times; this module decides at which instants they run when
the zone's UTC offset changes, as Vixie cron does: a *fixed-time* job (minute and hour fields
that do not start with ``*``) runs once for each local time, a skipped one at the end of the
gap; a *wildcard* job follows the wall clock, twice in a repeated hour and not in a skipped one.
``docs/usage.rst`` (Schedules) has the rule in full.
"""

from __future__ import annotations

import abc
from datetime import datetime, timedelta
from typing import Dict, List, Optional, Tuple, Union

from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadDateError, CroniterError, croniter

from .errors import ConfigError, shown

__all__ = ["Schedule", "CronSchedule", "IntervalSchedule", "ScheduleSpec", "make_schedule"]

#: What a job's schedule may be given as.
ScheduleSpec = Union[str, timedelta, int, float]

_SECOND = timedelta(seconds=1)
#: The next slots computed, by (expression, zone, second): a pure function of them, shared by
#: every job with that schedule (1,000 jobs due at one second compute their next slot once).
_NEXT: Dict[Tuple[str, str, int], int] = {}
#: The latest slots at or before a second, kept the same way (None: no slot that early).
_LATEST: Dict[Tuple[str, str, int], Optional[int]] = {}
#: Past this many, a cache starts again.
_NEXT_KEPT = 4096
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
    """The slots of a cron expression, read in the time zone ``tz``.

    The daylight saving time rule of the module docstring applies. Every
    method is a pure function of the expression, the zone and its argument.
    """

    def __init__(self, expression: str, tz: str = "UTC") -> None:
        self.expression = expression
        self.tz = tz
        self._zone = time_zone(tz)
        try:
            croniter.expand(expression)
        except CroniterError as exc:
            raise ConfigError(_invalid_cron(expression, exc)) from None
        #: A wildcard job follows the wall clock; a fixed-time one runs once a local time.
        self._wildcard = _is_wildcard(expression)
        try:
            self.next_after(0)
        except CroniterBadDateError:
            raise ConfigError(f"cron expression {shown(expression)} never fires") from None

    def next_after(self, ms: int) -> int:
        second = ms // 1000  # slots are whole seconds: after ms is after its second
        key = (self.expression, self.tz, second)
        found = _NEXT.get(key)  # jobs with the same schedule share it: croniter takes ~0.15 ms
        if found is None:
            if self._wildcard:
                found = self._wildcard_after(second) * 1000
            else:
                found = self._fixed(self._next(self._fixed_wall(second))) * 1000
            if len(_NEXT) >= _NEXT_KEPT:
                _NEXT.clear()
            _NEXT[key] = found
        return found

    def at_or_before(self, ms: int) -> Optional[int]:
        second = ms // 1000
        key = (self.expression, self.tz, second)
        if key in _LATEST:  # shared as _NEXT is: a start-up recovers every job with the same second
            return _LATEST[key]
        found: Optional[int]
        try:
            if self._wildcard:
                found = self._wildcard_at_or_before(second) * 1000
            else:
                found = self._fixed(self._at_or_before(self._fixed_wall(second))) * 1000
        except CroniterError:  # no slot that early
            found = None
        if len(_LATEST) >= _NEXT_KEPT:
            _LATEST.clear()
        _LATEST[key] = found
        return found

    # Times here are whole epoch seconds (instants) and naive datetimes (wall times).

    def _next(self, wall: datetime) -> datetime:
        """The first wall time of the expression after ``wall``."""
        found: datetime = croniter(self.expression, wall).get_next(datetime)
        return found

    def _at_or_before(self, wall: datetime) -> datetime:
        """The last wall time of the expression at or before ``wall``."""
        found: datetime = croniter(self.expression, wall + _SECOND).get_prev(datetime)
        return found

    def _local(self, second: int) -> datetime:
        """The aware local time of an instant; ``fold=1`` in the second pass of a repeated hour."""
        return datetime.fromtimestamp(second, self._zone)

    def _wall(self, second: int) -> datetime:
        """What the wall clock shows at an instant."""
        return self._local(second).replace(tzinfo=None, fold=0)

    def _folds(self, wall: datetime) -> Tuple[int, int]:
        """``wall`` read with ``fold=0`` and with ``fold=1``: the same instant unless the offset changes.

        In a repeated hour fold 0 is the first pass, fold 1 the second. In a gap
        fold 0 reads the wall time with the offset before the change and fold 1
        with the one after: two instants on either side of the change, fold 1 first.
        """
        return (
            round(wall.replace(tzinfo=self._zone).timestamp()),
            round(wall.replace(tzinfo=self._zone, fold=1).timestamp()),
        )

    def _instants(self, wall: datetime) -> List[int]:
        """The instants at which the wall clock shows ``wall``: one, two (repeated) or none (skipped)."""
        first, second = self._folds(wall)
        if first == second:
            return [first]
        return [first, second] if first < second else []

    def _gap_end(self, wall: datetime) -> int:
        """The first instant after the gap that skips ``wall``."""
        after_gap, before_gap = self._folds(wall)
        return self._change(before_gap, after_gap)

    def _change(self, before: int, after: int) -> int:
        """The instant of the one offset change in ``(before, after]``, by bisection."""
        offset = self._local(after).utcoffset()
        while after - before > 1:
            middle = (before + after) // 2
            if self._local(middle).utcoffset() == offset:
                after = middle
            else:
                before = middle
        return after

    def _fall_back(self, second: int) -> Optional[int]:
        """The instant the clocks go back, if ``second`` is in the repeated hour (either pass) around it."""
        local = self._local(second)
        now, other = local.utcoffset(), local.replace(fold=1 - local.fold).utcoffset()
        if now is None or other is None or now == other:
            return None
        shift = int(abs(other - now).total_seconds())
        return self._change(second - shift, second) if local.fold else self._change(second, second + shift)

    def _fixed(self, wall: datetime) -> int:
        """The slot of a fixed-time job at ``wall``: its first instant, or the end of its gap."""
        instants = self._instants(wall)
        return instants[0] if instants else self._gap_end(wall)

    def _fixed_wall(self, second: int) -> datetime:
        """The last wall time whose fixed-time slot is at or before ``second`` (the slots of a
        fixed-time job follow its wall times in order).

        The wall time at ``second``, except in the second pass of a repeated
        hour: every local time of that hour had its slot in the first pass, so
        the last wall time of the first pass.
        """
        change = self._fall_back(second)
        if change is not None and second >= change:
            return self._wall(change - 1)
        return self._wall(second)

    def _wildcard_after(self, second: int) -> int:
        """The first instant after ``second`` at which the wall clock shows a time of the expression."""
        wall = self._wall(second)
        change = self._fall_back(second)
        if change is not None and second < change:  # the first pass of a repeated hour
            found = self._next(wall)
            if found <= self._wall(change - 1):
                return self._instants(found)[0]
            wall = self._wall(change) - _SECOND  # none left in this pass: on to the second
        while True:
            found = self._next(wall)
            instants = self._instants(found)
            later = [t for t in instants if t > second]
            if later:
                return later[0]
            wall = found if instants else self._wall(self._gap_end(found)) - _SECOND  # skipped: past the gap

    def _wildcard_at_or_before(self, second: int) -> int:
        """The last instant at or before ``second`` at which the wall clock showed a time of the expression."""
        wall = self._wall(second)
        change = self._fall_back(second)
        if change is not None and second >= change:  # the second pass of a repeated hour
            found = self._at_or_before(wall)
            if found >= self._wall(change):
                return self._instants(found)[-1]
            wall = self._wall(change - 1)  # none yet in this pass: back to the first
        while True:
            found = self._at_or_before(wall)
            instants = self._instants(found)
            earlier = [t for t in instants if t <= second]
            if earlier:
                return earlier[-1]
            wall = found - _SECOND if instants else self._wall(self._gap_end(found) - 1)  # skipped: before the gap

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


def _is_wildcard(expression: str) -> bool:
    """Vixie cron's wildcard job: its minute or hour field starts with ``*``, or it is ``@hourly``."""
    if expression.startswith("@"):
        return expression.lower() == "@hourly"
    minute, hour = expression.split()[:2]
    return minute.startswith("*") or hour.startswith("*")


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
