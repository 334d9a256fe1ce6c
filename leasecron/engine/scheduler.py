"""The scheduler thread: one thread that calls functions at times on the store's clock
or on the host's monotonic clock (:class:`Scheduler`).

Everything an instance does at a time goes through here: a job's next slot,
the claim after its jitter, a backup's next check, a lease's local deadline.
The callbacks are quick (they hand store calls to a pool), so one thread
serves any number of jobs; it sleeps until the earliest entry is due.

Two heaps, because the two kinds of time part ways when the estimate of the
store's clock is corrected (the store's clock stepped, and was read again):

* :meth:`Scheduler.call_at` takes a time on the store's clock (a slot, a lease's
  end): such an entry follows the correction;
* :meth:`Scheduler.call_at_monotonic` and :meth:`Scheduler.call_later` take the
  host's monotonic clock (a lease's local deadline, a jitter, a backoff):
  such an entry fires when it was meant to, whatever the estimate does. A
  local deadline kept on the store's clock would move with a correction, and
  a runner cut off from its store would run on past its lease.

Both kinds of time are read through the instance's
:class:`~leasecron.engine.clock.StoreClock`. :meth:`Scheduler.run_due` runs what is
due at a given time in the caller's thread, as the thread does when it wakes:
a test steps an instance with it instead of waiting on the wall clock.
"""

from __future__ import annotations

import heapq
import itertools
import threading
from typing import Any, Callable, List, Optional, Tuple

from ..events import Emitter, log
from .clock import StoreClock

__all__ = ["Scheduler"]


Entry = Tuple[float, int, Callable[..., Any], Tuple[Any, ...]]
Call = Tuple[Callable[..., Any], Tuple[Any, ...]]


class Scheduler:
    """Two heaps of ``(due, fn)`` (store ms, monotonic s), served by one daemon thread
    (:meth:`start`) or, without it, step by step by the owner's calls to :meth:`run_due`.

    ``clock`` gives both kinds of time (:meth:`StoreClock.now_ms`,
    :meth:`StoreClock.monotonic`); ``events`` is told of a callback that raised.
    """

    def __init__(self, clock: StoreClock, events: Emitter) -> None:
        self._clock = clock
        self._events = events
        self._store_heap: List[Entry] = []  # due on the store's clock, ms
        self._mono_heap: List[Entry] = []  # due on the host's monotonic clock, s
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
        self._push(self._store_heap, due_ms, fn, args)

    def call_at_monotonic(self, due_s: float, fn: Callable[..., Any], *args: Any) -> None:
        """Call ``fn(*args)`` in the scheduler thread once the host's monotonic clock reaches ``due_s``."""
        self._push(self._mono_heap, due_s, fn, args)

    def call_later(self, delay_ms: float, fn: Callable[..., Any], *args: Any) -> None:
        """Call ``fn(*args)`` in the scheduler thread after ``delay_ms`` (on the monotonic clock)."""
        self.call_at_monotonic(self._clock.monotonic() + delay_ms / 1000, fn, *args)

    def run_due(self, now_ms: Optional[float] = None, mono_s: Optional[float] = None) -> int:
        """Run, in the calling thread, every entry due at the store's time ``now_ms`` or at the
        host's monotonic time ``mono_s``, the entries they plan for that time included; return
        how many ran.

        It is what the scheduler thread does each time it wakes, as one step: a test that
        never starts the thread passes the time in (huey's ``loop(now=None)``) and sees what
        is due then happen, without waiting. A time not given is read from the clock before
        each entry, as the thread does (a callback may correct the estimate of the store's
        clock: an entry it plans is then due by the corrected one). A callback that raises
        is logged and reported to ``events``, as in the thread.
        """
        ran = 0
        while True:
            with self._cond:
                if self._stopped:
                    return ran
                store_ms = self._clock.now_ms() if now_ms is None else now_ms
                due = self._pop_due(store_ms, self._clock.monotonic() if mono_s is None else mono_s)
            if due is None:
                return ran
            self._call(*due)
            ran += 1

    def _push(self, heap: List[Entry], due: float, fn: Callable[..., Any], args: Tuple[Any, ...]) -> None:
        with self._cond:
            if self._stopped:
                return
            entry = (due, next(self._seq), fn, args)
            heapq.heappush(heap, entry)
            if heap[0] is entry:  # a new earliest entry: wake the thread
                self._cond.notify()

    def stop(self, timeout: Optional[float] = None) -> None:
        """Stop the thread; entries not yet due are dropped."""
        with self._cond:
            self._stopped = True
            self._store_heap.clear()
            self._mono_heap.clear()
            self._cond.notify_all()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def _pop_due(self, now_ms: float, mono_s: float) -> Optional[Call]:
        """Pop the earliest entry due on the store's clock at ``now_ms`` or, when there is none,
        on the monotonic clock at ``mono_s``; None when neither is due. The caller holds the lock."""
        if self._store_heap and self._store_heap[0][0] <= now_ms:
            _, _, fn, args = heapq.heappop(self._store_heap)
            return fn, args
        if self._mono_heap and self._mono_heap[0][0] <= mono_s:
            _, _, fn, args = heapq.heappop(self._mono_heap)
            return fn, args
        return None

    def _next(self) -> Optional[Call]:
        """Pop a due entry, or wait (the lock held by the caller) until one may be due; None when stopped."""
        while not self._stopped:
            now_ms, mono_s = self._clock.now_ms(), self._clock.monotonic()
            due = self._pop_due(now_ms, mono_s)
            if due is not None:
                return due
            waits = []
            if self._store_heap:
                waits.append((self._store_heap[0][0] - now_ms) / 1000)
            if self._mono_heap:
                waits.append(self._mono_heap[0][0] - mono_s)
            self._cond.wait(min(waits) if waits else None)
        return None

    def _loop(self) -> None:
        while True:
            with self._cond:
                due = self._next()
            if due is None:
                return
            self._call(*due)

    def _call(self, fn: Callable[..., Any], args: Tuple[Any, ...]) -> None:
        try:
            fn(*args)
        except BaseException as exc:  # noqa: BLE001 - reported, the thread lives on
            log.exception("leasecron: scheduler task %r failed", fn)
            self._events.task_failed(exc)

