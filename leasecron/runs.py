"""What a store records of a run, and what it answers to a claim.

A *run* is one slot of one job (``job``, ``slot_ms``). Its *attempts* are the
tries to execute it: attempt 1 is won by a new claim; attempt 2 and later by a
claim that finds the run still ``running`` with a lease that ran out (the
runner died) or was released (the runner handed it over on ``stop()``).

"Expired" is not stored as a status: it is what a ``running`` run is once the
store's clock has passed its ``lease_end_ms``.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime, timezone
from typing import NamedTuple, Optional, Tuple, Union

from .compat import old_names_of
from .states import Outcome, Status

__all__ = [
    "Run",
    "RunBrief",
    "Claim",
    "Attempt",
    "MAX_ATTEMPTS_KEPT",
    "LATE_TOLERANCE_MS",
    "EARLY_TOLERANCE_MS",
    "slot_datetime",
]

#: A new claim is late when ``now - slot_ms > max_late_ms + LATE_TOLERANCE_MS``.
LATE_TOLERANCE_MS = 10_000
#: A new claim is early when ``slot_ms > now + EARLY_TOLERANCE_MS``.
EARLY_TOLERANCE_MS = 10_000


def slot_datetime(slot_ms: int) -> datetime:
    """The aware UTC datetime of a slot given in epoch milliseconds."""
    return datetime.fromtimestamp(slot_ms / 1000, tz=timezone.utc)


#: How many attempts a store keeps of each run: the newest ones.
MAX_ATTEMPTS_KEPT = 20


@dataclasses.dataclass(frozen=True)
class Attempt:
    """One try at executing a run, as the store recorded it.

    ``number`` counts from 1; ``reason`` is why it started (``schedule``,
    ``catch-up``, ``takeover`` or ``manual``); ``started_ms`` and ``ended_ms``
    are on the store's clock (``ended_ms`` is ``None`` while it runs; for an
    ``expired`` attempt it is the end of its lease); ``outcome`` is an
    :class:`~leasecron.states.AttemptOutcome` value; ``error`` the failed
    attempt's error text.

    ``returned_ms``, ``returned`` and ``returned_error`` (rule 26,
    :meth:`~leasecron.Store.record_return`) say that the attempt's handler
    returned (or raised) although the store may not show it: when (on the
    store's clock, as its runner estimated it), with what result
    (``"success"`` or ``"failed"``) and the failed handler's error text. They
    are ``None`` unless a return was recorded; a recorded return changes
    neither the attempt's ``outcome`` nor the run's status.
    """

    number: int
    runner: str
    reason: str
    started_ms: int
    ended_ms: Optional[int]
    outcome: str
    error: Optional[str] = None
    returned_ms: Optional[int] = None
    returned: Optional[str] = None
    returned_error: Optional[str] = None

    def to_dict(self) -> dict[str, object]:
        """The attempt as plain JSON-ready values."""
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class Run:
    """One run of a job as the store records it.

    ``attempt``, ``token``, ``runner``, ``reason`` and ``started_ms`` describe
    the current (latest) attempt. ``handed_over`` is true once any attempt of
    the run was released by a stopping instance. ``lease_end_ms`` is a time on
    the store's clock. ``slot`` is derived from ``slot_ms``. ``attempts``
    holds the run's attempts, oldest first (the newest
    :data:`MAX_ATTEMPTS_KEPT`); a run stored before attempts were recorded
    reads as one attempt made of the run's own fields.
    """

    job: str
    slot_ms: int
    attempt: int
    token: str
    runner: str
    status: str
    lease_end_ms: int
    handed_over: bool
    reason: str
    error: Optional[str]
    started_ms: int
    finished_ms: Optional[int]
    attempts: Tuple[Attempt, ...] = ()
    slot: datetime = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "slot", slot_datetime(self.slot_ms))

    @property
    def finished(self) -> bool:
        """True once the run ended (success, failed or interrupted)."""
        return self.status != Status.RUNNING

    @property
    def unshown_returns(self) -> Tuple[Attempt, ...]:
        """The attempts with a recorded return (rule 26) whose result the run's ``status`` does
        not show, oldest first: say an ``interrupted`` run whose attempt 1's handler returned
        ``success``, or a ``running`` run whose expired attempt had returned."""
        return tuple(a for a in self.attempts if a.returned is not None and a.returned != self.status)

    @property
    def status_text(self) -> str:
        """The status as ``runs`` and the dashboard show it: with each of :attr:`unshown_returns`,
        ``interrupted (attempt 1 returned success)``."""
        unshown = self.unshown_returns
        if not unshown:
            return self.status
        return f"{self.status} ({', '.join(f'attempt {a.number} returned {a.returned}' for a in unshown)})"

    def lease_alive(self, now_ms: int) -> bool:
        """True while the run is running and its lease ends after ``now_ms``."""
        return self.status == Status.RUNNING and self.lease_end_ms > now_ms

    def to_dict(self) -> dict[str, object]:
        """The run as plain JSON-ready values (``slot`` as ISO 8601 text)."""
        data = dataclasses.asdict(self)
        data["slot"] = self.slot.isoformat()
        data["attempts"] = [attempt.to_dict() for attempt in self.attempts]
        return data


class RunBrief(NamedTuple):
    """What a brief answer to a claim carries of the run it found: what an instance acts on.

    A claim sent with ``brief=True`` (:class:`~leasecron.ClaimRequest`; the
    engine sends every claim so) that is answered ``running`` or ``done``
    carries this in :attr:`Claim.brief` in place of the whole :class:`Run`: the
    current attempt (``attempt``, ``token``, ``runner``), the run's ``status``,
    ``lease_end_ms`` and ``handed_over``, and ``manual``, whether a manual
    claim started the run. Its other fields mean what the :class:`Run`'s of
    the same name mean.
    """

    job: str
    slot_ms: int
    attempt: int
    token: str
    runner: str
    status: str
    lease_end_ms: int
    handed_over: bool
    manual: bool


@dataclasses.dataclass(frozen=True)
class Claim:
    """A store's answer to a claim.

    ``outcome`` is one of:

    =========== ==================================================
    ``won``      the caller runs the run (``run`` holds its new token);
    ``running``  the run's lease is alive: the caller becomes a backup;
    ``overlap``  another slot of the job is running (``run`` is that one);
    ``late``     the claim came too late for a new run;
    ``early``    the slot is more than 10 s ahead of the store's clock;
    ``done``     the run ended, or this claim just marked it interrupted;
    ``none``     a takeover claim found no run for the slot, or a manual
                 claim no pending request for it;
    ``paused``   the job is paused: a scheduled or catch-up claim starts no
                 new run.
    =========== ==================================================
    """

    outcome: str
    run: Optional[Run] = None
    #: What a brief answer (``running`` or ``done`` to a claim sent with ``brief=True``) carries in
    #: place of ``run``, which is then None; None in any other answer.
    brief: Optional[RunBrief] = None

    @property
    def won(self) -> bool:
        """True when the caller won the run and must execute it."""
        return self.outcome == Outcome.WON

    @property
    def found(self) -> Union[Run, RunBrief, None]:
        """The run the answer is about, whole (``run``) or brief (``brief``); None when none."""
        return self.run if self.brief is None else self.brief


__getattr__ = old_names_of(__name__)
