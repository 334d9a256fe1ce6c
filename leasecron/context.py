"""What a handler is given: the :class:`Context` of its run and its abort :class:`Signal`."""

from __future__ import annotations

import dataclasses
import logging
import threading
from datetime import datetime
from typing import Callable, List, Optional

from .compat import old_names_of
from .errors import Aborted

__all__ = ["Context", "Signal"]

class Signal(threading.Event):
    """Set when the run must stop: ``reason`` says why (``"lost"``, ``"stop"`` or ``"timeout"``).

    A ``threading.Event``: a handler may ``wait(timeout)`` on it instead of
    sleeping, and wakes at once when the run is aborted.
    """

    def __init__(self) -> None:
        super().__init__()
        self._reason: Optional[str] = None
        self._reason_lock = threading.Lock()
        self._callbacks: List[Callable[[], None]] = []

    @property
    def aborted(self) -> bool:
        """True once the run was aborted."""
        return self.is_set()

    @property
    def reason(self) -> Optional[str]:
        """``"lost"``, ``"stop"`` or ``"timeout"`` once aborted, else ``None``."""
        return self._reason

    def abort(self, reason: str) -> bool:
        """Abort with ``reason``; the first reason stays. Returns whether this call aborted."""
        with self._reason_lock:
            if self._reason is not None:
                return False
            self._reason = reason
            callbacks, self._callbacks = self._callbacks, []
        self.set()
        for callback in callbacks:
            try:
                callback()
            except Exception:  # noqa: BLE001 - the abort stands; a failing callback is only reported
                logging.getLogger("leasecron").exception("leasecron: an abort callback failed")
        return True

    def on_abort(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback()`` once the run is aborted (at once if it already is), in the
        aborting thread. Returns a function that cancels the call if it has not happened."""
        with self._reason_lock:
            if self._reason is None:
                self._callbacks.append(callback)
                return lambda: self._forget(callback)
        callback()
        return lambda: None

    def _forget(self, callback: Callable[[], None]) -> None:
        with self._reason_lock:
            if callback in self._callbacks:
                self._callbacks.remove(callback)

    def raise_if_aborted(self) -> None:
        """Raise :class:`~leasecron.Aborted` if the run was aborted."""
        if self._reason is not None:
            raise Aborted(f"run aborted ({self._reason})")


@dataclasses.dataclass(frozen=True)
class Context:
    """The run a handler executes.

    ``slot`` is the slot as an aware UTC datetime, ``slot_ms`` the same in
    epoch milliseconds. ``reason`` is why this attempt started
    (``"schedule"``, ``"catch-up"``, ``"takeover"``, or ``"manual"``: a run
    asked for with :meth:`~leasecron.LeaseCron.trigger`, whose slot is the
    store's time of the request). ``token`` is the
    attempt's fencing token: pass it to a side effect that can check it.
    ``try_number`` counts the calls of the handler within this attempt, from
    1: a job with ``retries`` calls it again after it raised
    (:mod:`leasecron.engine.tries`); every try has the same attempt, token and signal.
    """

    job: str
    slot: datetime
    slot_ms: int
    attempt: int
    token: str
    runner: str
    reason: str
    signal: Signal
    try_number: int = 1


__getattr__ = old_names_of(__name__)
