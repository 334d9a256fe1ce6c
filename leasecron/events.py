"""Events: what an instance tells its callbacks, and the ``leasecron`` log.

An :class:`Event` has one of the :data:`EVENT_TYPES`: ``start`` (reason ``schedule``,
``catch-up``, ``takeover`` or ``manual``), ``success``, ``failed`` (the handler raised, or
reason ``timeout``), ``retry`` (a try raised and another follows), ``skip`` (a claim refused:
``overlap``, ``late``, ``early``, ``paused``, ``rescheduled``), ``lost`` (``fenced`` or ``unrenewed``),
``handover`` (released on ``stop()``) and ``error`` (a store call or a task failed). Everything
is also logged on :data:`log`, with lazy ``%``-style arguments, in one shape:
``leasecron: <what> job 'x' slot <UTC, Z> [attempt N] runner 'r' [(<reason>)][: <detail>]``.
``docs/usage.rst`` (Events) says when each event fires; ``docs/operating.rst`` (Logging), which
line is logged at which level.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from datetime import datetime
from typing import Callable, Dict, Optional, Tuple

from .errors import ConfigError
from .formatting import SlotText, slot_text
from .runs import EARLY_TOLERANCE_MS, LATE_TOLERANCE_MS, Claim, Run, slot_datetime
from .states import Outcome, Reason

__all__ = ["Event", "EVENT_TYPES", "Emitter", "log", "error_text", "slot_text", "SlotText", "ClaimText"]

log = logging.getLogger("leasecron")

EVENT_TYPES = ("start", "success", "failed", "skip", "lost", "handover", "error", "retry")
_MAX_ERROR_CHARS = 4_000


@dataclasses.dataclass(frozen=True)
class Event:
    """Something that happened to a run on this instance. ``try_number``: for ``retry``, the try
    that failed; for ``success``, ``failed`` and ``handover``, the last try that began (None for
    the other events)."""

    type: str
    job: Optional[str]
    slot: Optional[datetime]
    attempt: Optional[int]
    runner: str
    reason: Optional[str] = None
    error: Optional[str] = None
    run: Optional[Run] = None
    slot_ms: Optional[int] = None
    try_number: Optional[int] = None


Callback = Callable[[Event], object]


class Emitter:
    """Calls the callbacks registered for each event type; a failing callback is logged."""

    def __init__(self, runner: str) -> None:
        self.runner = runner
        #: The callbacks of each event type, replaced (never changed in place) under the lock,
        #: so :meth:`emit` reads them without it.
        self._callbacks: Dict[str, Tuple[Callback, ...]] = {name: () for name in EVENT_TYPES}
        self._lock = threading.Lock()

    def on(self, name: str, callback: Callback) -> None:
        """Call ``callback(event)`` for every event of type ``name``."""
        if name not in self._callbacks:
            raise ConfigError(f"unknown event {name!r}; known: {', '.join(EVENT_TYPES)}")
        if not callable(callback):
            raise ConfigError(f"callback for event {name!r} must be callable, not {callback!r}")
        with self._lock:
            self._callbacks[name] += (callback,)

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
        try_number: Optional[int] = None,
    ) -> Optional[Event]:
        """Build the event and call its callbacks, in this thread; the event, or None when no
        callback wants it (then none is built: a run's start and end cost nothing more)."""
        callbacks = self._callbacks[name]
        if not callbacks:
            return None
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
            try_number=try_number,
        )
        for callback in callbacks:
            try:
                callback(event)
            except BaseException:  # noqa: BLE001 - SystemExit too: this is one of leasecron's threads
                log.exception("leasecron: %s callback %r failed (ignored)", name, callback)
        return event

    def emit_run(
        self,
        name: str,
        run: Run,
        *,
        reason: Optional[str] = None,
        error: Optional[str] = None,
        try_number: Optional[int] = None,
    ) -> Optional[Event]:
        """Emit an event about ``run``: its job, slot and attempt."""
        return self.emit(
            name, run.job, run.slot_ms, attempt=run.attempt, reason=reason, error=error, run=run, try_number=try_number
        )

    def task_failed(self, exc: BaseException) -> None:
        """Emit ``error`` for a task of the instance that raised ``exc`` (a scheduled call, a
        store call of its own): the error event of no job."""
        self.emit("error", None, None, error=error_text(exc))


def error_text(exc: BaseException) -> str:
    """The text of an error, as a failed run records it and an ``error`` event carries it:
    the exception's type and message.

    Text no store can keep is escaped (a lone surrogate, say from a file name
    decoded with ``surrogateescape``, becomes ``\\udcff``), and a message that
    cannot be built (``__str__`` raises) is shown as ``<unprintable>``, so the
    run is still recorded as failed.
    """
    try:
        message = str(exc)
    except Exception:  # noqa: BLE001 - the type alone still says what failed
        message = "<unprintable>"
    text = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    return text.encode("utf-8", "backslashreplace").decode("utf-8")[:_MAX_ERROR_CHARS]


# -- how the log shows a claim's answer ----------------------------------------------------


class ClaimText:
    """A lazy log argument: what a claim's answer means, for the ``skipped`` and ``backup check`` lines.

    ``now_ms`` (the instance's estimate of the store's clock) is read only
    when the line is emitted, to show how long a live lease still lasts;
    ``max_late_ms`` and ``reason`` are the ones the claim was sent with (a
    ``manual`` claim's ``late`` and ``none`` are about its request).
    """

    __slots__ = ("claim", "now_ms", "max_late_ms", "reason")

    def __init__(
        self, claim: Claim, now_ms: Callable[[], int], max_late_ms: Optional[int] = None, reason: Optional[str] = None
    ) -> None:
        self.claim = claim
        self.now_ms = now_ms
        self.max_late_ms = max_late_ms
        self.reason = reason

    def __str__(self) -> str:
        outcome, run = self.claim.outcome, self.claim.found
        if self.reason == Reason.MANUAL and outcome == Outcome.LATE:
            late_s = LATE_TOLERANCE_MS // 1000
            return f"the request expired: nobody claimed it within max_late_ms ({self.max_late_ms} ms) + {late_s} s"
        if self.reason == Reason.MANUAL and outcome == Outcome.NONE:
            return "none: the request is no longer pending (another instance acted on it)"
        if outcome == Outcome.PAUSED:
            return "the job is paused: no new run starts until it is resumed"
        if outcome == Outcome.STALE:
            return "the job was rescheduled: the slot is of a schedule the store no longer holds"
        if run is None:
            if outcome == Outcome.LATE:
                late_s = LATE_TOLERANCE_MS // 1000
                return f"the store's clock is past the slot + max_late_ms ({self.max_late_ms} ms) + {late_s} s"
            if outcome == Outcome.EARLY:
                early_s = EARLY_TOLERANCE_MS // 1000
                return f"the slot is more than {early_s} s ahead of the store's clock: claimed again when it is due"
            if outcome == Outcome.NONE:
                return "none: the slot has no run"
            return str(outcome)
        if outcome == Outcome.RUNNING:
            left = run.lease_end_ms - self.now_ms()
            return f"running elsewhere: backup of attempt {run.attempt} by {run.runner!r}, lease ends in {left} ms"
        if outcome == Outcome.OVERLAP:
            return f"slot {slot_text(run.slot_ms)} attempt {run.attempt} by {run.runner!r} still holds its lease"
        if outcome == Outcome.LATE:
            return f"a newer slot, {slot_text(run.slot_ms)}, already has a run"
        if outcome == Outcome.DONE:
            return f"done: attempt {run.attempt} ended {run.status}"
        return f"{outcome}: attempt {run.attempt}"

    __repr__ = __str__
