"""The store's clock, as seen from this instance.

Instances fire on the store's clock, not their host's: :class:`StoreClock`
reads ``store.now_ms()``, halves the round trip, and from then on counts
with the host's monotonic clock, so a host whose wall clock is skewed or is
stepped still claims on time. It is synced at start, now and then,
whenever the store calls a claim early, and whenever a won claim shows the
store's clock elsewhere than the estimate said (the store's clock stepped):
a won claim's lease starts at the store's "now", so every win is a free
reading of the store's clock (:meth:`StoreClock.drift_ms`).
"""

from __future__ import annotations

import threading
import time
from typing import Optional

from .stores.base import Store

__all__ = ["StoreClock"]


class StoreClock:
    """Estimates ``store.now_ms()`` without a round trip."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._lock = threading.Lock()
        # Until the first sync, the host's wall clock stands in for the store's.
        self._base_store_ms = time.time_ns() / 1e6
        self._base_mono_ns = time.monotonic_ns()
        #: The round trip of the last sync, in ms (``None`` before one).
        self.round_trip_ms: Optional[float] = None
        #: The store's clock minus the host's wall clock, in ms, at the last sync.
        self.offset_ms: float = 0.0

    def sync(self, samples: int = 3) -> None:
        """Measure the store's clock; the sample with the shortest round trip wins."""
        best = None
        for _ in range(samples):
            before = time.monotonic_ns()
            store_ms = self._store.now_ms()
            after = time.monotonic_ns()
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
        return int(self.at_monotonic(time.monotonic()))

    def at_monotonic(self, mono_s: float) -> float:
        """The store's time at the host's monotonic time ``mono_s`` (seconds)."""
        with self._lock:
            return self._base_store_ms + (mono_s * 1e9 - self._base_mono_ns) / 1e6
