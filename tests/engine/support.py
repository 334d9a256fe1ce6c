"""Helpers of the engine tests: fast options, event recorders, handlers, store-level dead runs.

Engine tests run real :class:`~leasecron.LeaseCron` instances on real stores
(the ``backend`` fixture). Several instances are several ``LeaseCron``
objects, each with its own store handle (``backend.open()``) and runner name.
A crashed or frozen runner is simulated at store level: a claim won by a
runner called ``"dead"`` that never heartbeats.

Times: every comparison with a lease is made on the store's clock
(``store.now_ms()``); waits are bounded (``wait_for``, ``Event.wait``).
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import Any, Callable, Dict, Iterator, List, Optional, Protocol, Tuple

from leasecron import Context, Event, LeaseCron, Run, Store
from leasecron.stored import Poll
from leasecron.stores import DelegatingStore
from tests.helpers import wait_for

#: The options of a fast test job: a short lease, frequent heartbeats, no jitter.
FAST: Dict[str, Any] = dict(lease_ms=500, heartbeat_ms=100, jitter_ms=0)
#: FAST's lease and heartbeat, in ms.
LEASE, HEARTBEAT = FAST["lease_ms"], FAST["heartbeat_ms"]
#: The slack a timing assertion allows on top of the bound the protocol documents, in ms: thread
#: wake-ups and a store round trip on a loaded machine. The one margin of the engine tests (process
#: tests, which also start interpreters, have their own).
MARGIN = 150
#: A schedule whose next slot is far away: runs come from catch-up and takeovers only.
HOURLY = 3600
#: HOURLY's interval, in ms.
HOUR_MS = HOURLY * 1000
#: catch_up_ms that always catches up the latest hourly slot.
CATCH_UP_HOUR = 3_600_000 + 60_000
#: max_late_ms for a test's own store claims of old slots (never refused as late).
NEVER_LATE = 10**10
EVENT_TYPES = ("start", "success", "failed", "skip", "lost", "handover", "error", "retry")


class Recorder:
    """Records every event of one instance, stamped with the store's time when it arrived."""

    def __init__(self, cron: LeaseCron) -> None:
        self.cron = cron
        self.events: List[Event] = []
        self.times: List[int] = []
        self._lock = threading.Lock()
        for name in EVENT_TYPES:
            cron.on(name, self._record)

    def _record(self, event: Event) -> None:
        now = self.cron.store.now_ms()
        with self._lock:
            self.events.append(event)
            self.times.append(now)

    def of(self, type_: Optional[str] = None, **fields: Any) -> List[Event]:
        """The events of a type whose attributes equal ``fields``."""
        with self._lock:
            events = list(self.events)
        return [
            e
            for e in events
            if (type_ is None or e.type == type_) and all(getattr(e, k) == v for k, v in fields.items())
        ]

    def time_of(self, event: Event) -> int:
        """The store's time when ``event`` arrived."""
        with self._lock:
            for e, t in zip(self.events, self.times):
                if e is event:
                    return t
        raise KeyError(event)

    def wait(self, type_: str, timeout: float = 5.0, **fields: Any) -> Event:
        """The first event of a type matching ``fields``; fail if none arrives within ``timeout``."""
        return wait_for(
            lambda: next(iter(self.of(type_, **fields)), None),
            timeout,
            message=f"no {type_!r} event with {fields} on {self.cron.runner} within {timeout} s;"
            f" events: {[(e.type, e.slot_ms, e.attempt, e.reason, e.error) for e in self.of()]}",
        )


class Calls:
    """A handler's calls: each Context, the store time it arrived, and a gate the handler may wait on."""

    def __init__(self) -> None:
        self.contexts: List[Context] = []
        self.times: List[int] = []
        self.returned: List[Context] = []
        self._lock = threading.Lock()

    def record(self, ctx: Context, now_ms: int) -> None:
        with self._lock:
            self.contexts.append(ctx)
            self.times.append(now_ms)

    def done(self, ctx: Context) -> None:
        with self._lock:
            self.returned.append(ctx)

    def wait(self, count: int = 1, timeout: float = 5.0) -> List[Context]:
        wait_for(
            lambda: len(self.contexts) >= count, timeout, message=f"handler not called {count} time(s) in {timeout} s"
        )
        with self._lock:
            return list(self.contexts)

    def __len__(self) -> int:
        return len(self.contexts)


class Clock(Protocol):
    """What tells the store's time: a store (one round trip) or an instance's ``cron.clock`` (none)."""

    def now_ms(self) -> int: ...


def handler(
    clock: Clock,
    calls: Calls,
    body: Optional[Callable[[Context], Any]] = None,
) -> Callable[[Context], Any]:
    """A handler that records its Context (and the store's time, read from ``clock``: the store
    itself or ``cron.clock``) in ``calls`` and then runs ``body``."""

    def run(ctx: Context) -> Any:
        calls.record(ctx, clock.now_ms())
        try:
            return body(ctx) if body is not None else None
        finally:
            calls.done(ctx)

    return run


def waiting_on_its_signal(cron: LeaseCron, name: str = "job") -> Tuple[Recorder, Calls]:
    """Give ``cron`` (not started) an hourly job ``name``, caught up on start, whose handler waits up
    to 5 s on its signal; the instance's recorder and the handler's calls."""
    rec = Recorder(cron)
    calls = Calls()
    cron.add_job(handler(cron.store, calls, lambda ctx: ctx.signal.wait(5)), HOURLY, name=name)
    return rec, calls


@contextmanager
def running_hourly(
    store: Store, body: Callable[[Context], Any], lease_ms: int, heartbeat_ms: int, go: threading.Event
) -> Iterator[Tuple[LeaseCron, Seen, Calls]]:
    """Instance "a", started on ``store``, whose hourly job ``job`` runs ``body`` at once (catch-up):
    the instance, its events, the handler's calls. At exit ``go`` (the handler's gate) is set, the
    instance stopped and ``store`` closed."""
    cron = LeaseCron(
        store, runner="a", lease_ms=lease_ms, heartbeat_ms=heartbeat_ms, jitter_ms=0, catch_up_ms=CATCH_UP_HOUR
    )
    seen = Seen(cron)
    calls = Calls()
    cron.add_job(handler(store, calls, body), HOURLY, name="job")
    try:
        cron.start()
        yield cron, seen, calls
    finally:
        go.set()
        cron.stop(timeout=2)
        store.close()


def fence(other: Store, ctx: Context) -> None:
    """From ``other`` (another instance's store handle), release the run ``ctx`` is in and take it
    over: the run's token changes under its runner, whose next heartbeat is refused."""
    assert other.release(ctx.job, ctx.slot_ms, ctx.token)
    assert other.claim(ctx.job, ctx.slot_ms, runner="taker", reason="takeover", lease_ms=30_000).outcome == "won"


def wait_store_time(store: Store, ms: int, timeout: float = 10.0) -> None:
    """Wait until the store's clock reaches ``ms``."""
    left = (ms - store.now_ms()) / 1000
    if left > 0.02:
        time.sleep(left - 0.02)
    wait_for(lambda: store.now_ms() >= ms, timeout, interval=0.002)


def align(store: Store, period_ms: int, lo: int, hi: int) -> int:
    """Wait until the store's time modulo ``period_ms`` lies in ``[lo, hi)``; return that time."""
    assert 0 <= lo < hi <= period_ms
    now = store.now_ms()
    phase = now % period_ms
    if not lo <= phase < hi:
        target = now - phase + lo + (period_ms if phase >= lo else 0)
        wait_store_time(store, target)
    now = store.now_ms()
    assert lo <= now % period_ms < hi + 20, (now % period_ms, lo, hi)
    return now


def dead_claim(store: Store, job: str, slot_ms: int, lease_ms: int, runner: str = "dead", **kwargs: Any) -> Run:
    """Win ``slot_ms`` at store level for a runner that never heartbeats (it is dead)."""
    kwargs.setdefault("max_late_ms", NEVER_LATE)
    claim = store.claim(job, slot_ms, runner=runner, lease_ms=lease_ms, **kwargs)
    assert claim.outcome == "won", claim
    assert claim.run is not None
    return claim.run


def latest_hourly_slot(store: Store) -> int:
    """The latest slot, at or before the store's now, of an hourly interval job."""
    now = store.now_ms()
    return now - now % (HOURLY * 1000)


def stored(store: Store, job: str, slot_ms: int) -> Run:
    """The stored run (which must exist)."""
    run = store.get_run(job, slot_ms)
    assert run is not None, f"no run of {job!r} at {slot_ms}"
    return run


def every_second(cron: LeaseCron, name: str = "job") -> "tuple[Recorder, int]":
    """Start ``cron`` with a no-op job every second; its recorder and the first slot that succeeded."""
    rec = Recorder(cron)
    cron.add_job(lambda: None, 1, name=name)
    cron.start()
    return rec, rec.wait("success", timeout=3).slot_ms


class Seen:
    """Every event of one instance, with the host's monotonic time it arrived (no store call)."""

    def __init__(self, cron: LeaseCron) -> None:
        self.events: List[Tuple[float, Event]] = []
        self._lock = threading.Lock()
        for name in EVENT_TYPES:
            cron.on(name, self._record)

    def _record(self, event: Event) -> None:
        with self._lock:
            self.events.append((time.monotonic(), event))

    def of(self, type_: Optional[str] = None, **fields: Any) -> List[Event]:
        with self._lock:
            events = [e for _, e in self.events]
        return [
            e
            for e in events
            if (type_ is None or e.type == type_) and all(getattr(e, k) == v for k, v in fields.items())
        ]

    def wait(self, type_: str, timeout: float, **fields: Any) -> Tuple[float, Event]:
        """The first event of a type matching ``fields``, and when it arrived."""

        def found() -> Optional[Tuple[float, Event]]:
            with self._lock:
                for at, e in self.events:
                    if e.type == type_ and all(getattr(e, k) == v for k, v in fields.items()):
                        return at, e
            return None

        return wait_for(
            found,
            timeout,
            message=f"no {type_!r} event with {fields} within {timeout} s;"
            f" events: {[(e.type, e.job, e.attempt, e.reason, e.error) for e in self.of()]}",
        )

    def types(self, job: Optional[str] = None, *, but: Tuple[str, ...] = ()) -> List[str]:
        """The types of the events so far (of ``job``, if given), in order, leaving out those in ``but``."""
        fields = {} if job is None else {"job": job}
        return [e.type for e in self.of(**fields) if e.type not in but]


class CountingPolls(DelegatingStore):
    """A store that counts the calls of ``poll()`` (an instance's polls for requests and schedules)."""

    def __init__(self, inner: Store) -> None:
        super().__init__(inner)
        self.polls = 0
        self._lock = threading.Lock()

    def _poll(self, since: int) -> Poll:
        with self._lock:
            self.polls += 1
        return super()._poll(since)


def request_states(store: Store, job: str = "job") -> List[Tuple[int, str]]:
    """The (slot_ms, state) of the requests for manual runs the store keeps of ``job``, oldest first."""
    return [(r.slot_ms, r.state) for r in store.job_state(job).requests]
