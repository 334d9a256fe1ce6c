"""The claim pool: where an instance's store calls run, off the scheduler thread.

Every store call the engine makes on its own behalf (claims: scheduled,
catch-up, takeover and manual, so the pool's threads are also the backup
pollers; the polls for requests of manual runs; the start-up's recovery;
readings of the store's clock) runs here, so the
scheduler thread never waits on the store. :class:`ClaimPool` wraps an
:class:`~concurrent.futures.Executor` (the engine's default: a few threads
named ``leasecron-claims``; a test may give one that runs each task at once,
in the caller's thread). A task that raises is logged and reported, never
lost. After :meth:`ClaimPool.close` nothing new is taken, and the tasks still
queued or running are handed back, for a stop to cancel or wait for.
"""

from __future__ import annotations

import threading
from concurrent.futures import Executor, Future
from typing import Any, Callable, List, Set

from ..events import Emitter, log

__all__ = ["ClaimPool"]


class ClaimPool:
    """Runs the tasks given to :meth:`submit` on ``executor``; ``events`` is told of a task that raised."""

    def __init__(self, executor: Executor, events: Emitter) -> None:
        self._executor = executor
        self._events = events
        self._lock = threading.RLock()  # reentrant: an executor may run a task, which submits more, at once
        self._closed = False
        self._pending: Set["Future[Any]"] = set()

    def submit(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` in the pool; nothing once the pool is closed (or the interpreter exits)."""
        with self._lock:
            if self._closed:
                return
            try:
                future = self._executor.submit(self._guarded, fn, *args)
            except RuntimeError:  # the interpreter is shutting down
                return
            self._pending.add(future)
        future.add_done_callback(self._forget)

    def close(self) -> List["Future[Any]"]:
        """Take no more tasks; return the tasks queued or running now."""
        with self._lock:
            self._closed = True
            return list(self._pending)

    def shutdown(self) -> None:
        """Let the executor's threads exit once their tasks end (without waiting for them)."""
        self._executor.shutdown(wait=False)

    def _forget(self, future: "Future[Any]") -> None:
        with self._lock:
            self._pending.discard(future)

    def _guarded(self, fn: Callable[..., Any], *args: Any) -> None:
        try:
            fn(*args)
        except Exception as exc:  # noqa: BLE001 - reported, the pool lives on
            log.exception("leasecron: task %s failed", getattr(fn, "__name__", fn))
            self._events.task_failed(exc)
