"""An engine driven step by step in the test's own thread, on a clock the test moves.

The engine's decisions (what to claim, when to back a run up, what to skip)
are tested here without waiting: time is passed in, not read (huey's
``loop(now=None)``). A :class:`ManualTime` is both the store's clock (a
:class:`~leasecron.MemoryStore` reads it) and the host's monotonic clock
(the instance's :class:`~leasecron.engine.clock.StoreClock` counts with it); the
engine's scheduler is never started, and :meth:`Stepped.advance` moves the
time forward millisecond by millisecond, running at each what the scheduler
thread would have run then (:meth:`~leasecron.engine.scheduler.Scheduler.run_due`).
The claim pool and the workers run each task at once, in the test's thread
(:class:`InlineExecutor`, :class:`InlineWorkers`), so a handler has returned,
and its end been recorded, before the step that claimed its run returns.

What this cannot show is timing itself (threads waking, store round trips,
heartbeat loops): handlers here return at once, so no heartbeat loop ever
starts. Those tests run real instances on real stores, on the real clock.

Store calls that fail are not retried here: a retry waits on the real clock
(:func:`leasecron.engine.store_calls.call_until`) while the deadlines are on this one,
which starts at 0 and so has always passed. The store is a memory store.
"""

from __future__ import annotations

import contextvars
from concurrent.futures import Executor, Future
from typing import Any, Callable, Dict, List, Optional

from leasecron import Event, MemoryStore, Store
from leasecron.engine.clock import StoreClock
from leasecron.engine import Engine
from leasecron.events import EVENT_TYPES, Emitter
from leasecron.jobs import Handler, Job, make_job
from leasecron.engine.scheduler import Scheduler
from leasecron.engine.workers import Workers
from tests.engine.support import FAST

__all__ = ["ManualTime", "Failures", "InlineExecutor", "InlineWorkers", "Stepped", "advance_together", "at"]

#: A Monday, 10:00:00.000 UTC (epoch ms): slots of every schedule of these tests fall at round values.
MONDAY_10H = 1_767_607_200_000


def at(seconds: float) -> int:
    """``MONDAY_10H`` plus ``seconds``, in epoch ms."""
    return MONDAY_10H + round(seconds * 1000)


class ManualTime:
    """The store's clock (epoch ms) and the host's monotonic clock (ns), moved only by the test.

    Both advance together (:meth:`advance`); the store's clock may also step
    on its own (:meth:`step_store`), as a store whose clock is set anew.
    """

    def __init__(self, store_ms: int) -> None:
        self._mono_ns = 0
        self._store_offset_ms = store_ms

    def store_ms(self) -> int:
        """The store's clock, epoch ms."""
        return self._mono_ns // 1_000_000 + self._store_offset_ms

    def monotonic_ns(self) -> int:
        """The host's monotonic clock, ns (from 0)."""
        return self._mono_ns

    def advance(self, ms: int) -> None:
        """Both clocks move ``ms`` forward."""
        self._mono_ns += ms * 1_000_000

    def sleep(self, seconds: float) -> None:
        """A wait of the instance: both clocks move ``seconds`` forward, at once."""
        self._mono_ns += round(seconds * 1e9)

    def step_store(self, ms: int) -> None:
        """The store's clock alone jumps by ``ms`` (negative: back)."""
        self._store_offset_ms += ms


class InlineExecutor(Executor):
    """An executor that runs each task at once, in the thread that submits it."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> "Future[Any]":
        future: "Future[Any]" = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:  # noqa: BLE001 - kept in the future, as a pool thread would
            future.set_exception(exc)
        return future


class InlineWorkers(Workers):
    """Workers that run each task at once, in the submitting thread; a task that raises is kept
    in ``failures``. A heartbeat loop, which waits between beats, is refused: a stepped test's
    handlers return at once."""

    def __init__(self) -> None:
        super().__init__()
        self.failures: List[BaseException] = []

    def submit(self, name: str, fn: Callable[[], object]) -> None:
        assert not name.startswith("leasecron-heartbeat-"), f"a heartbeat loop in a stepped test: {name}"
        try:
            contextvars.Context().run(fn)
        except BaseException as exc:  # noqa: BLE001 - the test asserts there is none
            self.failures.append(exc)

    def close(self) -> None:
        """Nothing to close: there are no threads."""


class Failures(Emitter):
    """Events that keep the reports of a task that raised in ``failures`` (a test asserts on them)."""

    def __init__(self, failures: List[BaseException]) -> None:
        super().__init__("scheduler")
        self.failures = failures

    def task_failed(self, exc: BaseException) -> None:
        self.failures.append(exc)


class Stepped:
    """One instance (runner ``runner``) whose engine the test drives; ``store`` may be shared
    with another :class:`Stepped` (then give it the other's ``time``, or use :meth:`peer`).
    ``poll_ms``: how often it polls for requests of manual runs (from its boot on)."""

    def __init__(
        self,
        start_ms: int,
        runner: str = "a",
        *,
        time: Optional[ManualTime] = None,
        store: Optional[Store] = None,
        poll_ms: int = 1_000,
    ) -> None:
        self.time = time or ManualTime(start_ms)
        self.store: Store = store or MemoryStore(clock=self.time.store_ms)
        self.runner = runner
        self.clock = StoreClock(self.store, monotonic_ns=self.time.monotonic_ns, sleep=self.time.sleep)
        self.errors: List[BaseException] = []
        self.scheduler = Scheduler(self.clock, Failures(self.errors))
        self.workers = InlineWorkers()
        self.events: List[Event] = []
        self.emitter = Emitter(runner)
        for name in EVENT_TYPES:
            self.emitter.on(name, self.events.append)
        self.engine = Engine(
            self.store, runner, self.emitter, self.clock, poll_ms=poll_ms,
            scheduler=self.scheduler, workers=self.workers, executor=InlineExecutor(),
        )  # fmt: skip

    def peer(self, runner: str, store: Optional[Store] = None, **options: Any) -> "Stepped":
        """Another instance on the same time and store (or ``store``, a wrapper of it)."""
        return Stepped(self.time.store_ms(), runner, time=self.time, store=store or self.store, **options)

    def job(self, schedule: Any, func: Optional[Handler] = None, *, name: str = "job", **options: Any) -> Job:
        """A job (FAST options unless overridden) whose handler does nothing by default."""
        return make_job(func or (lambda: None), schedule, name, FAST, options)

    def boot(self, *jobs: Job) -> None:
        """Start the engine without its thread: read the clock, plan and recover the jobs, now."""
        self.engine.boot(list(jobs))
        self.scheduler.run_due()

    def advance(self, ms: int, step_ms: int = 1) -> None:
        """Let ``ms`` pass, ``step_ms`` at a time, running what falls due at each step."""
        for _ in range(ms // step_ms):
            self.time.advance(step_ms)
            self.scheduler.run_due()

    def advance_to(self, store_ms: int) -> None:
        """Let time pass until the store's clock reads ``store_ms``."""
        self.advance(store_ms - self.time.store_ms())

    def of(self, type_: Optional[str] = None, **fields: Any) -> List[Event]:
        """The events of a type whose attributes equal ``fields``."""
        return [
            e
            for e in self.events
            if (type_ is None or e.type == type_) and all(getattr(e, k) == v for k, v in fields.items())
        ]

    def started(self) -> List[Dict[str, Any]]:
        """The ``start`` events, as (slot_ms, attempt, reason) dicts, in order."""
        return [{"slot_ms": e.slot_ms, "attempt": e.attempt, "reason": e.reason} for e in self.of("start")]

    def skipped(self) -> List[Dict[str, Any]]:
        """The ``skip`` events, as (job, slot_ms, reason) dicts, in order."""
        return [{"job": e.job, "slot_ms": e.slot_ms, "reason": e.reason} for e in self.of("skip")]

    def stop(self, *, errors: bool = False) -> None:
        """Stop the engine. No scheduled callback or worker task raised; no ``error`` event came
        unless ``errors``."""
        self.engine.stop(0)
        assert self.errors == [] and self.workers.failures == [], (self.errors, self.workers.failures)
        assert errors or self.of("error") == [], [e.error for e in self.of("error")]


def advance_together(ms: int, *instances: Stepped) -> None:
    """Let ``ms`` pass on the time the ``instances`` share, 1 ms at a time, each of them running
    what falls due at each step, in the order given."""
    time = instances[0].time
    assert all(i.time is time for i in instances)
    for _ in range(ms):
        time.advance(1)
        for instance in instances:
            instance.scheduler.run_due()
