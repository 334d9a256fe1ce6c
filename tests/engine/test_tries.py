"""Timeouts and retries (leasecron.engine.tries): the tries of one attempt, under one lease.

A job with ``retries`` calls its handler again after a try that raised, on the
same instance, in the same attempt, with waits of ``retry_delay_ms`` doubled
after each try; ``timeout_ms`` aborts the signal with reason ``"timeout"``
and the run ends failed. Neither lets a second runner start while the first
still runs: the lease is renewed through every try and wait, and past the
timeout until the handler returns. Most tests run on the memory store (the
tries never touch the store); the lease renewal past a timeout and through
retry waits is checked on every backend.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Dict, List, Optional, Tuple

import pytest
import tenacity

from leasecron import Context, LeaseCron, MemoryStore, Signal
from leasecron.engine.clock import StoreClock
from leasecron.engine.tries import MAX_WAIT_S, Tries, retry_wait
from leasecron.errors import ConfigError
from leasecron.jobs import make_job
from tests.engine.conftest import Gates, MakeCron
from tests.engine.stepped import ManualTime
from tests.engine.support import CATCH_UP_HOUR, HEARTBEAT, HOURLY, LEASE, MARGIN, Recorder, stored, wait_store_time
from tests.helpers import wait_for

memory_only = pytest.mark.parametrize("backend", ["memory"], indirect=True)


def _failing(fails: int, tries: List[Context]) -> Any:
    """A handler whose first ``fails`` tries raise ``RuntimeError('try N')``."""

    def job(ctx: Context) -> None:
        tries.append(ctx)
        if ctx.try_number <= fails:
            raise RuntimeError(f"try {ctx.try_number}")

    return job


def _started(make_cron: MakeCron, fails: int, **options: Any) -> Tuple[LeaseCron, Recorder, List[Context]]:
    """A started instance whose hourly job "job" (caught up at once) raises in its first ``fails``
    tries; its recorder, and the contexts of the handler's tries."""
    cron = make_cron("a", catch_up_ms=CATCH_UP_HOUR)
    rec = Recorder(cron)
    tries: List[Context] = []
    cron.add_job(_failing(fails, tries), HOURLY, name="job", **options)
    cron.start()
    return cron, rec, tries


@memory_only
def test_a_handler_failing_twice_succeeds_at_try_three_with_retries_2(make_cron: MakeCron) -> None:
    """Same attempt, token and signal for every try; try_number 1, 2, 3; a ``retry`` event (with
    the try's error) for each failed try that another follows; the run succeeds at attempt 1."""
    cron, rec, tries = _started(make_cron, 2, retries=2, retry_delay_ms=20)
    success = rec.wait("success", timeout=5)
    assert [ctx.try_number for ctx in tries] == [1, 2, 3]
    assert {(ctx.attempt, ctx.token) for ctx in tries} == {(1, success.run.token if success.run else None)}
    assert len({id(ctx.signal) for ctx in tries}) == 1
    retries = rec.of("retry")
    assert [(e.try_number, e.error, e.attempt) for e in retries] == [
        (1, "RuntimeError: try 1", 1),
        (2, "RuntimeError: try 2", 1),
    ]
    assert success.try_number == 3
    run = stored(cron.store, "job", success.slot_ms)
    assert (run.status, run.attempt, run.error) == ("success", 1, None)
    assert [(a.number, a.outcome) for a in run.attempts] == [(1, "success")]


@memory_only
def test_used_up_retries_fail_the_run_with_the_last_error(make_cron: MakeCron) -> None:
    """retries=2 and every try raising: three tries, two ``retry`` events, then ``failed`` with
    the third try's error, as stored."""
    cron, rec, tries = _started(make_cron, 99, retries=2, retry_delay_ms=10)
    failed = rec.wait("failed", timeout=5)
    assert [ctx.try_number for ctx in tries] == [1, 2, 3]
    assert (failed.error, failed.try_number, failed.reason) == ("RuntimeError: try 3", 3, None)
    assert [e.try_number for e in rec.of("retry")] == [1, 2]
    assert stored(cron.store, "job", failed.slot_ms).error == "RuntimeError: try 3"


@memory_only
def test_retries_0_calls_a_raising_handler_once(make_cron: MakeCron) -> None:
    """The default: no retry, no ``retry`` event, try_number 1 (as before there were retries)."""
    cron, rec, tries = _started(make_cron, 1)
    failed = rec.wait("failed", timeout=5)
    assert [ctx.try_number for ctx in tries] == [1]
    assert (failed.error, failed.try_number) == ("RuntimeError: try 1", 1)
    assert rec.of("retry") == []
    assert cron.jobs["job"].options.retries == 0


def _job(**options: Any) -> Any:
    return make_job(lambda ctx: None, HOURLY, "j", {}, options)


class _Noted:
    """A live run's part in the tries: it notes each failed try that another follows, and the wait."""

    def __init__(self, waits: List[Tuple[int, float]]) -> None:
        self.waits = waits

    def retrying(self, number: int, error: BaseException, wait_s: float) -> None:
        self.waits.append((number, wait_s))


def _context(signal: Signal) -> Context:
    from datetime import datetime, timezone

    return Context("j", datetime.now(timezone.utc), 0, 1, "t", "r", "schedule", signal)


def test_the_waits_double_with_a_jitter_of_up_to_a_quarter_and_stop_at_60_s() -> None:
    """retry_delay_ms 100: waits in [100, 125), [200, 225), [400, 425) ms (``Tries.run`` directly,
    the handler always raising). A first wait of 40 s is followed by 60 s (80 s capped), never more."""
    waits: List[Tuple[int, float]] = []
    signal = Signal()
    job = make_job(_failing(99, []), HOURLY, "j", {}, {"retries": 3, "retry_delay_ms": 100})
    time_ = ManualTime(0)  # the waits pass on the clock the tries are given: none is waited for
    clock = StoreClock(MemoryStore(clock=time_.store_ms), monotonic_ns=time_.monotonic_ns, sleep=time_.sleep)
    tries = Tries(job, _context(signal), clock, _Noted(waits))
    with pytest.raises(RuntimeError, match="try 4"):
        tries.run()
    assert [n for n, _ in waits] == [1, 2, 3] and tries.number == 4
    for (_, wait), base in zip(waits, (0.1, 0.2, 0.4)):
        assert base <= wait < base + 0.025
    assert abs(time_.monotonic_ns() / 1e9 - sum(wait for _, wait in waits)) < 1e-6

    policy = retry_wait(40_000)  # 40 s, then 80 s: capped at 60 s
    state = tenacity.RetryCallState(tenacity.Retrying(), None, (), {})
    for number, low, high in [(1, 40, 50), (2, 60, 60), (3, 60, 60), (30, 60, 60)]:
        state.attempt_number = number
        assert low <= policy(state) <= high
    assert MAX_WAIT_S == 60.0


@pytest.mark.parametrize(
    "options, message",
    [
        ({"timeout_ms": 0}, "timeout_ms must be >= 1, not 0"),
        ({"timeout_ms": 1.5}, "timeout_ms must be an integer, not 1.5"),
        ({"timeout_ms": 50, "heartbeat_ms": 100}, "timeout_ms (50) must be at least heartbeat_ms (100)"),
        ({"retries": -1}, "retries must be >= 0, not -1 (negative)"),
        ({"retries": True}, "retries must be an integer, not True"),
        ({"retry_delay_ms": -5}, "retry_delay_ms must be >= 0, not -5 (negative)"),
        ({"retry_delay_ms": "1s"}, "retry_delay_ms must be an integer, not '1s'"),
    ],
)
def test_bad_timeout_or_retry_options_are_config_errors_naming_them(options: Dict[str, Any], message: str) -> None:
    """Validated like every option, at registration (naming the job) and on LeaseCron."""
    with pytest.raises(ConfigError) as caught:
        _job(**options)
    assert message in str(caught.value) and "job 'j'" in str(caught.value)
    with pytest.raises(ConfigError, match="LeaseCron"):
        LeaseCron(MemoryStore(), **options)


def test_timeout_none_at_the_job_overrides_an_instance_default() -> None:
    """``timeout_ms=None`` on a job means no limit, even when the instance sets one."""
    cron = LeaseCron(MemoryStore(), timeout_ms=60_000, retries=1)
    limited = cron.add_job(lambda: None, HOURLY, name="limited")
    free = cron.add_job(lambda: None, HOURLY, name="free", timeout_ms=None, retries=0)
    assert (limited.options.timeout_ms, limited.options.retries) == (60_000, 1)
    assert (free.options.timeout_ms, free.options.retries) == (None, 0)


@memory_only
def test_a_timeout_aborts_the_signal_and_fails_the_run_without_retries(make_cron: MakeCron) -> None:
    """At timeout_ms the signal aborts with reason ``timeout``; the handler stops; the run is
    failed with ``timed out after N ms`` and ``failed`` has reason ``timeout``; retries left do
    not start another try."""
    cron = make_cron("a", catch_up_ms=CATCH_UP_HOUR)
    rec = Recorder(cron)
    seen: List[Tuple[int, Optional[str]]] = []

    def job(ctx: Context) -> None:
        seen.append((ctx.try_number, None))
        if ctx.signal.wait(10):
            seen[-1] = (ctx.try_number, ctx.signal.reason)
            ctx.signal.raise_if_aborted()

    cron.add_job(job, HOURLY, name="job", timeout_ms=300, retries=3, retry_delay_ms=10)
    cron.start()
    start = rec.wait("start", timeout=5)
    failed = rec.wait("failed", timeout=5)
    took = rec.time_of(failed) - rec.time_of(start)
    assert 300 <= took < 300 + MARGIN * 2, took
    assert seen == [(1, "timeout")]
    assert (failed.error, failed.reason, failed.try_number) == ("timed out after 300 ms", "timeout", 1)
    run = stored(cron.store, "job", failed.slot_ms)
    assert (run.status, run.error, run.attempt) == ("failed", "timed out after 300 ms", 1)
    assert rec.of("retry") == []


@memory_only
def test_a_timeout_during_a_retry_wait_fails_the_run_as_timed_out(make_cron: MakeCron) -> None:
    """The limit counts from the first try, waits included: a wait longer than what is left is cut
    short and the run ends timed out, not with the try's error."""
    cron, rec, tries = _started(make_cron, 99, timeout_ms=400, retries=5, retry_delay_ms=5_000)
    failed = rec.wait("failed", timeout=5)
    assert [ctx.try_number for ctx in tries] == [1]
    assert (failed.error, failed.reason) == ("timed out after 400 ms", "timeout")
    assert [e.try_number for e in rec.of("retry")] == [1]


@memory_only
def test_an_async_handler_is_cancelled_by_its_timeout(make_cron: MakeCron) -> None:
    """The cancellation of the coroutine counts as the handler stopping for the timeout."""
    cron = make_cron("a", catch_up_ms=CATCH_UP_HOUR)
    rec = Recorder(cron)
    cancelled = threading.Event()

    async def job(ctx: Context) -> None:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    cron.add_job(job, HOURLY, name="job", timeout_ms=200)
    cron.start()
    failed = rec.wait("failed", timeout=5)
    assert cancelled.is_set()
    assert (failed.error, failed.reason) == ("timed out after 200 ms", "timeout")


def test_a_handler_ignoring_its_timeout_keeps_its_lease_until_it_returns(make_cron: MakeCron, gates: Gates) -> None:
    """Every backend: past timeout_ms the lease is still renewed (a backup only ever sees the run
    running, and its takeover claim answers ``running``); once the handler returns the run is
    failed, timed out."""
    cron = make_cron("a", catch_up_ms=CATCH_UP_HOUR)
    rec = Recorder(cron)
    release = gates()
    cron.add_job(lambda ctx: release.wait(10), HOURLY, name="job", timeout_ms=200)
    cron.start()
    start = rec.wait("start", timeout=5)
    store = cron.store
    deadline = rec.time_of(start) + 200 + 3 * LEASE
    while store.now_ms() < deadline:  # three leases past the timeout
        claim = store.claim("job", start.slot_ms, runner="backup", reason="takeover", lease_ms=LEASE)
        assert claim.outcome == "running", claim
        assert claim.run is not None and claim.run.lease_end_ms > store.now_ms()
        renewed_by = min(deadline, claim.run.lease_end_ms - LEASE + HEARTBEAT)
        wait_store_time(store, renewed_by)
    release.set()
    failed = rec.wait("failed", timeout=5)
    assert (failed.error, failed.reason) == ("timed out after 200 ms", "timeout")
    run = stored(store, "job", start.slot_ms)
    assert (run.status, run.runner, run.attempt) == ("failed", "a", 1)


def test_the_lease_is_renewed_through_retry_waits(make_cron: MakeCron) -> None:
    """Every backend: a retry wait of three leases does not let the run's lease run out."""
    cron, rec, tries = _started(make_cron, 1, retries=1, retry_delay_ms=3 * LEASE)
    retry = rec.wait("retry", timeout=5)
    store = cron.store
    while not rec.of("success"):
        claim = store.claim("job", retry.slot_ms, runner="backup", reason="takeover", lease_ms=LEASE)
        assert claim.outcome in ("running", "done"), claim
        if claim.outcome == "done":
            break
        assert claim.run is not None
        renewed_by = claim.run.lease_end_ms - LEASE + HEARTBEAT
        wait_for(lambda by=renewed_by: store.now_ms() >= by or bool(rec.of("success")), 5)
    success = rec.wait("success", timeout=5)
    assert [ctx.try_number for ctx in tries] == [1, 2]
    assert rec.time_of(success) - rec.time_of(retry) >= 3 * LEASE
    assert stored(store, "job", success.slot_ms).attempt == 1


@memory_only
def test_stop_during_a_retry_wait_hands_the_run_over_and_the_backup_starts_at_try_1(
    make_cron: MakeCron,
) -> None:
    """stop() cuts the wait short: no further try, the run is released; the instance that takes
    it over runs attempt 2 from try 1."""
    a = make_cron("a", catch_up_ms=CATCH_UP_HOUR)
    rec_a = Recorder(a)
    tries_a: List[Context] = []
    a.add_job(_failing(99, tries_a), HOURLY, name="job", retries=3, retry_delay_ms=30_000)
    a.start()
    retry = rec_a.wait("retry", timeout=5)
    b = make_cron("b", store=a.store, catch_up_ms=CATCH_UP_HOUR)
    rec_b = Recorder(b)
    tries_b: List[Context] = []
    b.add_job(_failing(0, tries_b), HOURLY, name="job", retries=3, retry_delay_ms=30_000)
    b.start()
    a.stop(timeout=5)
    assert rec_a.wait("handover", timeout=1).try_number == 1
    assert [ctx.try_number for ctx in tries_a] == [1]
    success = rec_b.wait("success", timeout=LEASE / 1000 + 5)
    assert success.slot_ms == retry.slot_ms
    assert [(ctx.attempt, ctx.try_number, ctx.reason) for ctx in tries_b] == [(2, 1, "takeover")]
    run = stored(a.store, "job", retry.slot_ms)
    assert [(x.number, x.runner, x.outcome) for x in run.attempts] == [(1, "a", "handed_over"), (2, "b", "success")]
