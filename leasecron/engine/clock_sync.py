"""When an instance reads the store's clock again (:class:`ClockSync`).

At start, every :data:`CLOCK_SYNC_MS`, sooner (with a backoff) while the
store never answered, and whenever a won claim shows the store's clock
elsewhere than the estimate said: a won claim's lease starts at the store's
"now", so every win is a free reading of the store's clock. The engine also
reads it when the store answers a claim ``early``.
"""

from __future__ import annotations

import threading
from typing import Optional, Tuple

from ..events import log
from .roles import Instance

__all__ = ["ClockSync", "CLOCK_SYNC_MS", "CLOCK_DRIFT_MS", "DRIFT_RESYNC_GAP_S", "NOT_DUE_SLACK_MS"]

#: How often the store's clock is read again while running.
CLOCK_SYNC_MS = 60_000
#: How far a won claim may show the store's clock off the estimate before it is read again, in ms.
CLOCK_DRIFT_MS = 250
#: The least time between two such readings, in seconds.
DRIFT_RESYNC_GAP_S = 1.0
#: A claim for a slot further than this in the future (ms, on the estimate of the store's clock) is
#: not sent but planned for when the slot is due: it was chosen before the clock was read.
NOT_DUE_SLACK_MS = 100


class ClockSync:
    """When ``instance`` reads the store's clock again (see the module's documentation).

    ``backoff_ms`` is ``(first, last)``: while the store never answered, the
    wait before the next reading starts at ``first`` and doubles after each
    failure up to ``last``. A reading that fails is logged and reported to
    the instance's events.
    """

    def __init__(self, instance: Instance, backoff_ms: Tuple[int, int]) -> None:
        self._instance = instance
        self.clock = instance.clock
        self._backoff_ms = backoff_ms
        #: While the store never answered: the wait before the reading after next, in ms.
        self._retry_ms: Optional[int] = None
        self._drift_synced = float("-inf")  # when a won claim last made the clock be read again
        self._lock = threading.Lock()

    def keep_reading(self, wait_ms: float) -> None:
        """Read the store's clock again after ``wait_ms``, and so on (:meth:`again` says when)."""
        self._instance.timers.call_later(wait_ms, self._instance.tasks.submit, self._read_again)

    def _read_again(self) -> None:
        self.keep_reading(self.again())

    def sync(self) -> bool:
        """Read the store's clock now; False (logged, and an ``error`` event) when the store did not answer."""
        try:
            self.clock.sync()
        except Exception as exc:  # noqa: BLE001 - keep the last estimate; tried again later
            log.warning("leasecron: cannot read the store's clock, runner %r: %s", self._instance.runner, exc)
            self._instance.events.task_failed(exc)
            return False
        log.debug(
            "leasecron: store clock read runner %r: offset %.1f ms, round trip %.2f ms",
            self._instance.runner,
            self.clock.offset_ms,
            self.clock.round_trip_ms or 0.0,
        )
        return True

    def at_start(self) -> int:
        """Read the store's clock at start; the wait (ms) before :meth:`again` should read it."""
        if self.sync():
            return CLOCK_SYNC_MS
        self._retry_ms = self._backoff_ms[0]
        return self._retry_ms

    def again(self) -> int:
        """Read the store's clock again; the wait (ms) before the next reading: a minute, or,
        while the store never answered, the backoff."""
        if self.sync() or self._retry_ms is None:
            self._retry_ms = None
            return CLOCK_SYNC_MS
        wait_ms, self._retry_ms = self._retry_ms, min(2 * self._retry_ms, self._backoff_ms[1])
        return wait_ms

    def due(self, slot_ms: int) -> bool:
        """Whether a slot chosen earlier is due on the store's clock (within :data:`NOT_DUE_SLACK_MS`).

        While the store's clock was never read (the store was unreachable at
        start), the slot was chosen by the host's clock, which may be skewed:
        the store's is read first, and a failure to read it raised.
        """
        if not self.clock.synced:
            self.clock.sync()
        return slot_ms <= self.clock.now_ms() + NOT_DUE_SLACK_MS

    def check_drift(self, store_ms: int, sent: float, answered: float) -> None:
        """Read the store's clock again when a won claim (its lease started at ``store_ms``;
        sent and answered at those monotonic times) shows it more than :data:`CLOCK_DRIFT_MS`
        off the estimate: the store's clock stepped. At most once per :data:`DRIFT_RESYNC_GAP_S`."""
        drift = self.clock.drift_ms(store_ms, sent, answered)
        if abs(drift) <= CLOCK_DRIFT_MS:
            return
        now = self.clock.monotonic()
        with self._lock:
            if now - self._drift_synced < DRIFT_RESYNC_GAP_S:
                return
            self._drift_synced = now
        line = "leasecron: store clock moved, runner %r: %+.0f ms off the estimate; re-read"
        log.warning(line, self._instance.runner, drift)
        self.sync()
