"""The store's clock, as seen from this instance: the one source of time of a started instance.

Instances fire on the store's clock, not their host's: :class:`StoreClock`
reads ``store.now_ms()``, halves the round trip, and from then on counts
with the host's monotonic clock, so a host whose wall clock is skewed or is
stepped still claims on time. Every local deadline, delay and wait of the
instance is on that monotonic clock too; a test may pass another one in,
and so drive an instance's time itself (:mod:`.clock_sync` decides when the
store's clock is read again).
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Optional

from ..stores import Store

__all__ = ["StoreClock"]


class StoreClock:
    """Estimates ``store.now_ms()`` without a round trip, and is the instance's one source of time.

    ``monotonic_ns`` is the host's monotonic clock the estimate counts with
    (default :func:`time.monotonic_ns`); ``sleep`` waits on it (default
    :func:`time.sleep`). Every wait of the engine goes through :meth:`sleep`
    or :meth:`wait`, so a test that passes both in drives an instance's time.
    """

    def __init__(
        self,
        store: Store,
        *,
        monotonic_ns: Callable[[], int] = time.monotonic_ns,
        sleep: Optional[Callable[[float], None]] = None,
    ) -> None:
        self._store = store
        self._monotonic_ns = monotonic_ns
        self._sleep = sleep
        self._lock = threading.Lock()
        # Until the first sync, the host's wall clock stands in for the store's.
        self._base_store_ms = time.time_ns() / 1e6
        self._base_mono_ns = monotonic_ns()
        #: The round trip of the last sync, in ms (``None`` before one).
        self.round_trip_ms: Optional[float] = None
        #: The store's clock minus the host's wall clock, in ms, at the last sync.
        self.offset_ms: float = 0.0

    def sync(self, samples: int = 3) -> None:
        """Measure the store's clock; the sample with the shortest round trip wins."""
        best = None
        for _ in range(samples):
            before = self._monotonic_ns()
            store_ms = self._store.now_ms()
            after = self._monotonic_ns()
            wall_ms = time.time_ns() / 1e6
            trip = after - before
            if best is None or trip < best[0]:
                best = (trip, store_ms, (before + after) // 2, wall_ms - (after - before) / 2e6)
        assert best is not None
        trip, store_ms, mono_ns, wall_ms = best
        with self._lock:
            self._base_store_ms = float(store_ms)
            self._base_mono_ns = mono_ns
            self.round_trip_ms = trip / 1e6
            self.offset_ms = store_ms - wall_ms

    @property
    def synced(self) -> bool:
        """Whether the store's clock was ever read (before, the host's clock stands in for it)."""
        return self.round_trip_ms is not None

    def drift_ms(self, store_ms: float, sent_mono_s: float, answered_mono_s: float) -> float:
        """How far a reading of the store's clock (``store_ms``, taken by a call sent at
        ``sent_mono_s`` and answered at ``answered_mono_s``) lies outside the estimate of that
        interval: 0 inside it, negative when the store's clock is behind the estimate."""
        low, high = self.at_monotonic(sent_mono_s), self.at_monotonic(answered_mono_s)
        if store_ms < low:
            return store_ms - low
        if store_ms > high:
            return store_ms - high
        return 0.0

    def now_ms(self) -> int:
        """The store's time now, estimated."""
        return int(self.at_monotonic(self.monotonic()))

    def monotonic(self) -> float:
        """The host's monotonic time, in seconds, on the clock this estimate counts with."""
        return self._monotonic_ns() / 1e9

    def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` on this clock."""
        if self._sleep is None:
            time.sleep(seconds)
        else:
            self._sleep(seconds)

    def wait(self, event: threading.Event, seconds: float) -> bool:
        """Wait until ``event`` is set or ``seconds`` passed on this clock; whether it is set. On
        a clock given its own ``sleep`` (a test's), the wait is a sleep, unless the event is set."""
        if self._sleep is None:
            return event.wait(seconds)
        if not event.is_set():
            self._sleep(seconds)
        return event.is_set()

    def at_monotonic(self, mono_s: float) -> float:
        """The store's time at the host's monotonic time ``mono_s`` (seconds)."""
        with self._lock:
            return self._base_store_ms + (mono_s * 1e9 - self._base_mono_ns) / 1e6
