"""Workers: the threads that run handlers and heartbeat loops, reused from run to run.

Starting a thread is work a short run need not pay for, so :class:`Workers`
hands a task to an idle thread when there is one and starts a new one only
when there is none; there is no upper bound (a handler never waits for
another), and a thread idle for ``idle_s`` exits. Each task runs in a fresh
:class:`contextvars.Context`, under a thread name of its own
(``leasecron-run-<job>@<slot>#<attempt>``).
"""

from __future__ import annotations

import contextvars
import queue
import threading
from typing import Callable, Optional, Tuple

from ..events import log

__all__ = ["Workers", "IDLE_S", "IDLE_NAME"]

#: How long an idle worker thread waits for a task before it exits, in seconds.
IDLE_S = 10.0
#: The name of a worker thread between tasks.
IDLE_NAME = "leasecron-worker"

Task = Tuple[str, Callable[[], object]]


class Workers:
    """An unbounded pool of daemon threads that exit after ``idle_s`` without a task."""

    def __init__(self, idle_s: float = IDLE_S) -> None:
        self._idle_s = idle_s
        self._lock = threading.Lock()
        self._tasks: "queue.SimpleQueue[Optional[Task]]" = queue.SimpleQueue()
        #: Threads waiting for a task that no queued task is meant for yet.
        self._idle = 0
        self._closed = False

    def submit(self, name: str, fn: Callable[[], object]) -> None:
        """Run ``fn()`` in a worker thread named ``name``: an idle one, or a new one."""
        with self._lock:
            if self._idle > 0:
                self._idle -= 1
                self._tasks.put((name, fn))
                return
        threading.Thread(target=self._work, args=((name, fn),), name=name, daemon=True).start()

    def idle(self) -> int:
        """How many threads wait for a task."""
        with self._lock:
            return self._idle

    def close(self) -> None:
        """Let the idle threads exit now, and the busy ones once their task ends. A task
        submitted after this still runs, on a thread of its own."""
        with self._lock:
            self._closed = True
            for _ in range(self._idle):
                self._tasks.put(None)
            self._idle = 0

    def _work(self, task: Optional[Task]) -> None:
        thread = threading.current_thread()
        while task is not None:
            name, fn = task
            thread.name = name
            try:
                contextvars.Context().run(fn)
            except BaseException:  # noqa: BLE001 - the tasks handle their own errors; this one is a bug
                log.exception("leasecron: worker task %s failed", name)
            thread.name = IDLE_NAME
            task = self._next()

    def _next(self) -> Optional[Task]:
        """The next task for this thread, or None when it should exit."""
        with self._lock:
            if self._closed:
                return None
            self._idle += 1
        try:
            return self._tasks.get(timeout=self._idle_s)
        except queue.Empty:
            pass
        with self._lock:  # timed out; a task put meanwhile counted on some idle thread: take it
            try:
                return self._tasks.get_nowait()
            except queue.Empty:
                self._idle -= 1
                return None
