"""Events: what an instance tells its callbacks, and the ``leasecron`` log.

======== ======================================================= ===================
type     when                                                    ``reason``
======== ======================================================= ===================
start    this instance starts an attempt                         schedule, catch-up,
                                                                 takeover
success  the handler returned and the finish was recorded
failed   the handler raised; recorded as failed (``error``)
skip     a claim was refused                                     overlap, late, early
lost     the lease was lost: fenced by a newer attempt, or not
         renewable for ``lease_ms`` (``error`` says which)
handover the run was released on ``stop()`` for a backup
error    a store operation or a scheduler task failed (``error``)
======== ======================================================= ===================
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from datetime import datetime
from typing import Callable, Dict, List, Optional

from .errors import ConfigError
from .runs import Run, slot_datetime

__all__ = ["Event", "EVENT_TYPES", "Emitter", "log"]

log = logging.getLogger("leasecron")

EVENT_TYPES = ("start", "success", "failed", "skip", "lost", "handover", "error")


@dataclasses.dataclass(frozen=True)
class Event:
    """Something that happened to a run on this instance."""

    type: str
    job: Optional[str]
    slot: Optional[datetime]
    attempt: Optional[int]
    runner: str
    reason: Optional[str] = None
    error: Optional[str] = None
    run: Optional[Run] = None
    slot_ms: Optional[int] = None


Callback = Callable[[Event], object]


class Emitter:
    """Calls the callbacks registered for each event type; a failing callback is logged."""

    def __init__(self, runner: str) -> None:
        self.runner = runner
        self._callbacks: Dict[str, List[Callback]] = {name: [] for name in EVENT_TYPES}
        self._lock = threading.Lock()

    def on(self, name: str, callback: Callback) -> None:
        """Call ``callback(event)`` for every event of type ``name``."""
        if name not in self._callbacks:
            raise ConfigError(f"unknown event {name!r}; known: {', '.join(EVENT_TYPES)}")
        if not callable(callback):
            raise ConfigError(f"callback for event {name!r} must be callable, not {callback!r}")
        with self._lock:
            self._callbacks[name].append(callback)

    def after_fork(self, runner: str) -> None:
        """In a forked child: a fresh lock, and the child's runner name."""
        self._lock = threading.Lock()
        self.runner = runner

    def emit(
        self,
        name: str,
        job: Optional[str],
        slot_ms: Optional[int],
        *,
        attempt: Optional[int] = None,
        reason: Optional[str] = None,
        error: Optional[str] = None,
        run: Optional[Run] = None,
    ) -> Event:
        """Build the event and call its callbacks, in this thread."""
        event = Event(
            type=name,
            job=job,
            slot=None if slot_ms is None else slot_datetime(slot_ms),
            attempt=attempt,
            runner=self.runner,
            reason=reason,
            error=error,
            run=run,
            slot_ms=slot_ms,
        )
        with self._lock:
            callbacks = list(self._callbacks[name])
        for callback in callbacks:
            try:
                callback(event)
            except BaseException:  # noqa: BLE001 - SystemExit too: this is one of leasecron's threads
                log.exception("leasecron: %s callback %r failed (ignored)", name, callback)
        return event
