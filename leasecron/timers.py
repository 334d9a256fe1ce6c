"""The scheduler thread: one thread that calls functions at times on the store's clock.

Everything an instance does at a time goes through here: a job's next slot,
the claim after its jitter, a backup's next check, a lease's local deadline.
The callbacks are quick (they hand store calls to a pool), so one thread
serves any number of jobs; it sleeps until the earliest entry is due.
"""

from __future__ import annotations

import heapq
import itertools
import threading
from typing import Any, Callable, List, Optional, Tuple

from .clock import StoreClock
from .events import log

__all__ = ["Timers"]


class Timers:
    """A heap of ``(due_ms, fn)`` served by one daemon thread."""

    def __init__(self, clock: StoreClock, on_error: Callable[[BaseException], None]) -> None:
        self._clock = clock
        self._on_error = on_error
        self._heap: List[Tuple[float, int, Callable[..., Any], Tuple[Any, ...]]] = []
        self._seq = itertools.count()
        self._cond = threading.Condition(threading.Lock())
        self._stopped = False
        self._thread: Optional[threading.Thread] = None

    def start(self, name: str = "leasecron-scheduler") -> None:
        """Start the scheduler thread."""
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def call_at(self, due_ms: float, fn: Callable[..., Any], *args: Any) -> None:
        """Call ``fn(*args)`` in the scheduler thread once the store's clock reaches ``due_ms``."""
        with self._cond:
            if self._stopped:
                return
            entry = (due_ms, next(self._seq), fn, args)
            heapq.heappush(self._heap, entry)
            if self._heap[0] is entry:  # a new earliest entry: wake the thread
                self._cond.notify()

    def call_later(self, delay_ms: float, fn: Callable[..., Any], *args: Any) -> None:
        """Call ``fn(*args)`` in the scheduler thread after ``delay_ms``."""
        self.call_at(self._clock.now_ms() + delay_ms, fn, *args)

    def stop(self, timeout: Optional[float] = None) -> None:
        """Stop the thread; entries not yet due are dropped."""
        with self._cond:
            self._stopped = True
            self._heap.clear()
            self._cond.notify_all()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def _loop(self) -> None:
        while True:
            with self._cond:
                while True:
                    if self._stopped:
                        return
                    if self._heap:
                        wait_ms = self._heap[0][0] - self._clock.now_ms()
                        if wait_ms <= 0:
                            _, _, fn, args = heapq.heappop(self._heap)
                            break
                        self._cond.wait(wait_ms / 1000)
                    else:
                        self._cond.wait()
            try:
                fn(*args)
            except BaseException as exc:  # noqa: BLE001 - reported, the thread lives on
                log.exception("leasecron: scheduler task %r failed", fn)
                self._on_error(exc)
