"""Handlers that return awaitables: ``async def`` handlers run to their end in an event loop of
their own on the worker thread; an abort of ``ctx.signal`` cancels the coroutine, and the
cancellation counts as the handler stopping for that reason (stop: hand-over; lost: the run is
never touched again)."""

from __future__ import annotations

import asyncio
import functools
import threading
from typing import Any, Dict, List

import pytest

from leasecron import ConfigError, Context, LeaseCron, MemoryStore
from tests.conftest import Backend
from tests.engine.conftest import MakeCron
from tests.engine.support import CATCH_UP_HOUR, FAST, HOURLY, Recorder, stored
from tests.helpers import wait_for


def test_async_handler_is_awaited_before_the_run_succeeds(make_cron: MakeCron) -> None:
    """An ``async def`` handler's coroutine runs to its end (its awaits included) before the run
    is finished as success; the Context it gets is the run's."""
    cron = make_cron("a", catch_up_ms=CATCH_UP_HOUR)
    rec = Recorder(cron)
    done: List[Context] = []

    async def job(ctx: Context) -> None:
        await asyncio.sleep(0.05)
        done.append(ctx)

    cron.add_job(job, HOURLY, name="job")
    cron.start()
    success = rec.wait("success", timeout=5)
    assert [ctx.slot_ms for ctx in done] == [success.slot_ms]
    run = stored(cron.store, "job", success.slot_ms)
    assert (run.status, run.attempt, run.runner, run.token) == ("success", 1, "a", done[0].token)


def test_async_handler_that_raises_fails_the_run_with_its_error(make_cron: MakeCron) -> None:
    """An exception raised after an await fails the run, with its text recorded."""
    cron = make_cron("a", catch_up_ms=CATCH_UP_HOUR)
    rec = Recorder(cron)

    async def job() -> None:
        await asyncio.sleep(0)
        raise RuntimeError("vendor API down")

    cron.add_job(job, HOURLY, name="job")
    cron.start()
    failed = rec.wait("failed", timeout=5)
    assert failed.error == "RuntimeError: vendor API down"
    assert stored(cron.store, "job", failed.slot_ms).error == "RuntimeError: vendor API down"


def test_stop_cancels_the_coroutine_and_hands_the_run_over(make_cron: MakeCron) -> None:
    """stop() aborts the signal, which cancels the awaiting coroutine: the run is released
    (handed over) as for a plain handler that raises on stop, and stop() does not wait out the await."""
    cron = make_cron("a", catch_up_ms=CATCH_UP_HOUR)
    rec = Recorder(cron)
    started = threading.Event()
    seen: Dict[str, Any] = {}

    async def job(ctx: Context) -> None:
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            seen["cancelled"], seen["reason"] = True, ctx.signal.reason
            raise

    cron.add_job(job, HOURLY, name="job")
    cron.start()
    assert started.wait(5)
    start = rec.wait("start", timeout=1)
    cron.stop(timeout=5)
    assert seen == {"cancelled": True, "reason": "stop"}
    handover = rec.wait("handover", timeout=1)
    assert handover.slot_ms == start.slot_ms
    run = stored(cron.store, "job", start.slot_ms)
    assert (run.status, run.handed_over, run.attempt) == ("running", True, 1)
    assert [e.type for e in rec.of()] == ["start", "handover"]


def test_lost_lease_cancels_the_coroutine_and_the_run_is_not_touched_again(
    make_cron: MakeCron, backend: Backend
) -> None:
    """A refused heartbeat (another instance took the run over) cancels the coroutine; the
    instance emits lost and never writes the run again."""
    cron = make_cron("a", catch_up_ms=CATCH_UP_HOUR)
    rec = Recorder(cron)
    cancelled = threading.Event()

    async def job(ctx: Context) -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    cron.add_job(job, HOURLY, name="job")
    cron.start()
    start = rec.wait("start", timeout=5)
    other = backend.open()
    assert start.run is not None and other.release("job", start.slot_ms, start.run.token)
    taker = other.claim("job", start.slot_ms, runner="taker", reason="takeover", lease_ms=30_000)
    assert taker.outcome == "won" and taker.run is not None
    assert rec.wait("lost", timeout=2).reason == "fenced"
    assert cancelled.wait(2)
    wait_for(lambda: cron.live_runs() == [], 3)
    run = stored(other, "job", start.slot_ms)
    assert (run.status, run.runner, run.token) == ("running", "taker", taker.run.token)
    assert [e.type for e in rec.of()] == ["start", "lost"]


@pytest.mark.parametrize("shape", ["partial of an async def", "lambda returning a coroutine", "no argument"])
def test_any_handler_returning_an_awaitable_is_awaited(shape: str) -> None:
    """Not only ``async def`` functions: whatever the handler returns that is awaitable is awaited."""
    ran: List[str] = []

    async def body(tag: str, ctx: Any = None) -> None:
        await asyncio.sleep(0)
        ran.append(tag)

    handlers = {
        "partial of an async def": functools.partial(body, "partial"),
        "lambda returning a coroutine": lambda ctx: body("lambda", ctx),
        "no argument": lambda: body("bare"),
    }
    store = MemoryStore()
    cron = LeaseCron(store, runner="a", catch_up_ms=CATCH_UP_HOUR, **FAST)
    rec = Recorder(cron)
    cron.add_job(handlers[shape], HOURLY, name="job")
    cron.start()
    try:
        rec.wait("success", timeout=5)
    finally:
        cron.stop(timeout=2)
    assert len(ran) == 1


def test_each_run_gets_an_event_loop_of_its_own_that_is_closed_after() -> None:
    """Two runs of an async handler get two loops, each closed once its run ended; tasks the
    handler left behind are cancelled, not leaked into the next run."""
    loops: List[asyncio.AbstractEventLoop] = []
    leftovers: List["asyncio.Task[None]"] = []

    async def job() -> None:
        loops.append(asyncio.get_running_loop())
        leftovers.append(asyncio.ensure_future(asyncio.sleep(30)))

    store = MemoryStore()
    cron = LeaseCron(store, runner="a", **FAST)
    rec = Recorder(cron)
    cron.add_job(job, 1, name="job")
    cron.start()
    try:
        wait_for(lambda: len(rec.of("success")) >= 2, 5)
    finally:
        cron.stop(timeout=2)
    assert loops[0] is not loops[1]
    assert all(loop.is_closed() for loop in loops[:2])
    assert all(task.cancelled() for task in leftovers[:2])


def test_generator_handlers_are_refused_at_registration() -> None:
    """A generator function (sync or async) would run none of its body when called: registering
    one fails at once, naming the job, rather than recording runs that did nothing."""

    def gen() -> Any:
        yield 1

    async def agen() -> Any:
        yield 1

    cron = LeaseCron(MemoryStore(), runner="a")
    for name, func in (("gen", gen), ("agen", agen)):
        with pytest.raises(ConfigError, match=f"job '{name}': the handler is a generator function"):
            cron.add_job(func, HOURLY, name=name)
    assert cron.jobs == {}
