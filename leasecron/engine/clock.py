"""The store's clock, as seen from this instance, and when it is read again.

Instances fire on the store's clock, not their host's: :class:`StoreClock`
reads ``store.now_ms()``, halves the round trip, and from then on counts
with the host's monotonic clock, so a host whose wall clock is skewed or is
stepped still claims on time. That monotonic clock is also the one every
local deadline and delay of the instance is on (:meth:`StoreClock.monotonic`);
a test may pass another one in, and so drive an instance's time itself.

:class:`ClockSync` decides when the store's clock is read again: at start,
every :data:`CLOCK_SYNC_MS`, sooner (with a backoff) while the store never
answered, and whenever a won claim shows the store's clock elsewhere than
the estimate said (the store's clock stepped): a won claim's lease starts at
the store's "now", so every win is a free reading of the store's clock
(:meth:`StoreClock.drift_ms`). The engine also reads it when the store
answers a claim ``early``.
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Optional, Tuple

from ..events import log
from ..stores.base import Store

__all__ = ["StoreClock", "ClockSync", "CLOCK_SYNC_MS", "CLOCK_DRIFT_MS", "DRIFT_RESYNC_GAP_S", "NOT_DUE_SLACK_MS"]

#: How often the store's clock is read again while running.
CLOCK_SYNC_MS = 60_000
#: How far a won claim may show the store's clock off the estimate before it is read again, in ms.
CLOCK_DRIFT_MS = 250
#: The least time between two such readings, in seconds.
DRIFT_RESYNC_GAP_S = 1.0
#: A claim for a slot further than this in the future (ms, on the estimate of the store's clock) is
#: not sent but planned for when the slot is due: it was chosen before the clock was read.
NOT_DUE_SLACK_MS = 100


class StoreClock:
    """Estimates ``store.now_ms()`` without a round trip.

    ``monotonic_ns`` is the host's monotonic clock the estimate counts with
    (default :func:`time.monotonic_ns`).
    """

    def __init__(self, store: Store, *, monotonic_ns: Callable[[], int] = time.monotonic_ns) -> None:
        self._store = store
        self._monotonic_ns = monotonic_ns
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

    def at_monotonic(self, mono_s: float) -> float:
        """The store's time at the host's monotonic time ``mono_s`` (seconds)."""
        with self._lock:
            return self._base_store_ms + (mono_s * 1e9 - self._base_mono_ns) / 1e6


class ClockSync:
    """When an instance reads the store's clock again (see the module's documentation).

    ``runner`` names the instance in the log; ``on_error`` is told of a
    reading that failed; ``backoff_ms`` is ``(first, last)``: while the store
    never answered, the wait before the next reading starts at ``first`` and
    doubles after each failure up to ``last``.
    """

    def __init__(
        self,
        clock: StoreClock,
        runner: str,
        on_error: Callable[[BaseException], None],
        backoff_ms: Tuple[int, int],
    ) -> None:
        self.clock = clock
        self._runner = runner
        self._on_error = on_error
        self._backoff_ms = backoff_ms
        #: While the store never answered: the wait before the reading after next, in ms.
        self._retry_ms: Optional[int] = None
        self._drift_synced = float("-inf")  # when a won claim last made the clock be read again
        self._lock = threading.Lock()

    def sync(self) -> bool:
        """Read the store's clock now; False (logged, and told ``on_error``) when the store did not answer."""
        try:
            self.clock.sync()
        except Exception as exc:  # noqa: BLE001 - keep the last estimate; tried again later
            log.warning("leasecron: cannot read the store's clock, runner %r: %s", self._runner, exc)
            self._on_error(exc)
            return False
        log.debug(
            "leasecron: store clock read runner %r: offset %.1f ms, round trip %.2f ms",
            self._runner,
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
        log.warning("leasecron: store clock moved, runner %r: %+.0f ms off the estimate; re-read", self._runner, drift)
        self.sync()
