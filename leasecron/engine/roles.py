"""The roles the engine's parts play for one another: each part is given the few it needs.

Every part is given the :class:`Instance` it belongs to (its store, runner
name, clock, timers, claim pool and events) and, by name, the other parts it
works with, as objects with a small interface, never as loose callables:
``self._live.start(...)`` says where the call goes. A test may give a part
any object that plays the role.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Iterable, Optional, Protocol, Tuple, Union

from ..events import Emitter
from ..jobs import Job
from ..runs import Claim, Run, RunBrief
from ..states import Reason
from ..stored import StoredSchedule
from ..stores import Store
from .clock import StoreClock

__all__ = [
    "Instance", "Timers", "Tasks", "Threads", "Claimable", "Starter", "Watcher", "Sender", "Rescheduler", "RunKey",
]  # fmt: skip

#: What the store knows a run by: (job, slot_ms).
RunKey = Tuple[str, int]


class Timers(Protocol):
    """Calls functions at times, on the store's clock or the host's monotonic clock (the scheduler thread)."""

    def call_at(self, due_ms: float, fn: Callable[..., Any], *args: Any) -> None:
        """Call ``fn(*args)`` once the store's clock reaches ``due_ms``."""

    def call_at_monotonic(self, due_s: float, fn: Callable[..., Any], *args: Any) -> None:
        """Call ``fn(*args)`` once the host's monotonic clock reaches ``due_s``."""

    def call_later(self, delay_ms: float, fn: Callable[..., Any], *args: Any) -> None:
        """Call ``fn(*args)`` after ``delay_ms``, on the host's monotonic clock."""


class Tasks(Protocol):
    """Runs store calls off the scheduler thread (the claim pool)."""

    def submit(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` soon, on another thread; a task that raises is reported."""


class Threads(Protocol):
    """Runs a long task (a handler, a heartbeat loop) on a thread of its own (the workers)."""

    def submit(self, name: str, fn: Callable[[], object]) -> None:
        """Run ``fn()`` in a thread named ``name``."""


@dataclasses.dataclass(frozen=True)
class Instance:
    """What the parts of one started instance share."""

    #: Where its claims, heartbeats and finishes go.
    store: Store
    #: Its name in the store and in the log.
    runner: str
    #: The store's time as it estimates it, its monotonic time, and its waits.
    clock: StoreClock
    #: The scheduler thread.
    timers: Timers
    #: The claim pool, where the instance's own store calls run.
    tasks: Tasks
    #: The user's callbacks (and the ``error`` events of its tasks).
    events: Emitter


class Claimable(Protocol):
    """Says whether a job may be claimed now: it is scheduled here and the instance is not stopping."""

    @property
    def stopping(self) -> bool:
        """Whether the instance stops (nothing new is claimed)."""

    def may_claim(self, job: Job) -> bool:
        """Whether a claim of ``job`` may be sent now."""

    def get(self, name: str) -> Optional[Job]:
        """The job scheduled here under ``name``, or None."""


class Starter(Protocol):
    """Starts the runs this instance won, and knows which it runs."""

    def start(self, job: Job, run: Run, claim_sent: float) -> None:
        """Run ``run`` (won by a claim sent at the monotonic time ``claim_sent``) here."""

    def is_live(self, key: RunKey) -> bool:
        """Whether the run ``key`` is live here."""

    def holds(self, run: Union[Run, RunBrief]) -> bool:
        """Whether ``run``'s current attempt is one this instance executes."""


class Watcher(Protocol):
    """Makes this instance a backup of a run, to take it over if its runner dies."""

    def watch(self, job: Job, slot_ms: int, delay_ms: Optional[float] = None) -> None:
        """Back up the run at ``slot_ms``: check it after ``delay_ms`` (default: 1-2 heartbeats)."""


class Sender(Watcher, Protocol):
    """Sends one claim, retried while its answer matters, and acts on the answer."""

    def claim(self, job: Job, slot_ms: int, reason: Reason, max_late: Optional[int] = None) -> Optional[Claim]:
        """The answer, or None when the claim was not sent or got no answer."""


class Rescheduler(Protocol):
    """Applies the store's stored schedules to the jobs scheduled here."""

    def apply_records(self, records: Iterable[StoredSchedule]) -> None:
        """Schedule each name as its newest record says (records older than one seen are ignored)."""

    def stale(self, name: str) -> None:
        """A claim of ``name`` was answered ``stale``: read its stored schedule again, and apply it."""
