"""The named values of the protocol, each set a ``str`` Enum: a run's :class:`Status`, a claim's
:class:`Outcome` and :class:`Reason`, an attempt's :class:`AttemptOutcome`, a request's
:class:`RequestState`, a signal's :class:`AbortReason`, a lost run's :class:`LostCause` and a
live run's :class:`LiveState`.

The one idea: each member *is* its string (``Outcome.WON == "won"``), prints as it and is stored
as it, so the stores, the events and the JSON output carry the plain strings they always did,
and a value read back from a store compares equal to its member.
"""

from __future__ import annotations

import enum
from typing import Tuple

__all__ = [
    "StrEnum",
    "Status",
    "Outcome",
    "Reason",
    "AttemptOutcome",
    "RequestState",
    "AbortReason",
    "LostCause",
    "LiveState",
    "ScheduleSource",
]


class StrEnum(str, enum.Enum):
    """A ``str`` Enum that prints as its value on every Python version.

    ``str(Outcome.WON) == f"{Outcome.WON}" == "won"``, and ``repr`` is the string's, so a
    :class:`~leasecron.Run` holding one reads as before.
    """

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return str(self.value).__format__(spec)

    def __repr__(self) -> str:
        return repr(self.value)

    @classmethod
    def values(cls) -> Tuple[str, ...]:
        """The plain string values, in definition order."""
        return tuple(str(member.value) for member in cls)


class Status(StrEnum):
    """A run's status. "Expired" is not one: it is a running run whose lease end has passed."""

    RUNNING = "running"
    SUCCESS = "success"
    FAILED = "failed"
    INTERRUPTED = "interrupted"


class Outcome(StrEnum):
    """A store's answer to a claim (see :class:`~leasecron.Claim`)."""

    WON = "won"
    RUNNING = "running"
    OVERLAP = "overlap"
    LATE = "late"
    EARLY = "early"
    DONE = "done"
    NONE = "none"
    PAUSED = "paused"
    STALE = "stale"


class Reason(StrEnum):
    """Why a claim was made: a scheduled slot, a catch-up on start, a backup's check, or a
    request for a manual run."""

    SCHEDULE = "schedule"
    CATCH_UP = "catch-up"
    TAKEOVER = "takeover"
    MANUAL = "manual"


class AttemptOutcome(StrEnum):
    """How one attempt of a run ended (``running`` while it has not).

    ``expired``: its lease ran out and another attempt took over, or the run
    was interrupted with it; ``handed_over``: released by a stopping
    instance; ``interrupted``: only in a run stored before attempts were
    recorded, whose one attempt ended with the run as ``interrupted``.
    """

    RUNNING = "running"
    SUCCESS = "success"
    FAILED = "failed"
    HANDED_OVER = "handed_over"
    EXPIRED = "expired"
    INTERRUPTED = "interrupted"


class RequestState(StrEnum):
    """A request for a manual run: ``pending`` until a claim acts on it (``claimed``: it
    started the run; ``skipped``: an overlap) or its time runs out (``expired``)."""

    PENDING = "pending"
    CLAIMED = "claimed"
    SKIPPED = "skipped"
    EXPIRED = "expired"


class AbortReason(StrEnum):
    """``Signal.reason``: the lease was lost, the instance is stopping, or the attempt ran for
    the job's ``timeout_ms``."""

    LOST = "lost"
    STOP = "stop"
    TIMEOUT = "timeout"


class LostCause(StrEnum):
    """The ``reason`` of a ``lost`` event: the store holds another attempt (or refused the
    token), or the lease could not be renewed for ``lease_ms``."""

    FENCED = "fenced"
    UNRENEWED = "unrenewed"


class LiveState(StrEnum):
    """A live run: ``running`` -> ``finishing`` -> ``ended``; ``running`` or ``finishing``
    -> ``lost``; ``running`` -> ``abandoned`` (the stop timeout passed)."""

    RUNNING = "running"
    FINISHING = "finishing"
    ENDED = "ended"
    LOST = "lost"
    ABANDONED = "abandoned"


class ScheduleSource(StrEnum):
    """Where a job's schedule comes from: the ``code`` (``add_job``; also a job whose stored
    schedule was reset or deleted), an ``override`` stored by ``reschedule``, or a job ``stored``
    whole by ``put_job``."""

    CODE = "code"
    OVERRIDE = "override"
    STORED = "stored"
