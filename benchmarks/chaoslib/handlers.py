"""The handler of a chaos instance's jobs: each try runs a seeded plan, every step logged.

A try logs ``start`` (with its plan), a ``tick`` every 10 ms from a ticker thread while it
works, then ``sink`` and ``end`` (``returned``), or ``end`` (``raised``) when its plan fails
it, or ``abort`` and ``end`` (``aborted``) when its signal aborted. Every line carries the
attempt's ids and ``try_number`` (``ctx.try_number``: a job with ``retries`` calls the
handler again, same attempt and token, after a try that raised).

What each job's tries do (:data:`JOB_PLANS`; schedules, overlap modes, ``timeout_ms`` and
``retries`` are ``checker.DEFAULT_JOBS``):

* ``every1``, ``long2``, ``skip3``: work the planned time, waiting on the signal;
* ``timeout2`` (``timeout_ms`` 1000): works 300–2000 ms, so the timeout cuts most runs short;
  half of those ignore the signal for a grace of 1.5–3.5 s after it (the lease must be
  renewed past the timeout meanwhile), log ``abort`` with ``ignored_ms``, then return. A run
  its instance reports ``lost`` meanwhile stops at once: the signal, aborted by the timeout
  first, keeps that reason, so the ``lost`` event (:class:`LostRuns`) is how it learns;
* ``retry2`` (``retries`` 2, ``retry_delay_ms`` 100): each try works 100–300 ms and fails
  half the time, so runs succeed at try 1, 2 or 3, or fail after the third;
* the operator's stored jobs (any other name; task ``chaos-stored``, see
  :mod:`chaoslib.schedules`): :data:`STORED_PLAN`, like ``every1``.

A plan is drawn from ``random.Random(f"{seed}:{job}:{slot_ms}:{attempt}")`` for try 1 and
``…:{attempt}:{try_number}`` for later tries (:func:`plan_run`): the checker or a test can
recompute it.
"""

from __future__ import annotations

import dataclasses
import random
import sqlite3
import threading
import time
from typing import Any, Dict, Optional, Tuple

from leasecron import Aborted, Context

from .recording import Recorder, error_text
from .sink import Sink

__all__ = ["JOB_PLANS", "STORED_PLAN", "JobPlan", "LostRuns", "Plan", "Ticker", "make_handler", "plan_run"]

#: How often a running handler logs a ``tick``.
TICK_S = 0.010
#: How long a handler keeps trying to write its result to a locked sink.
SINK_PATIENCE_S = 60.0
#: The same for a handler that works on past its timeout (its signal aborted already).
ABORTED_PATIENCE_S = 5.0
#: The pause between two tries of a write to a locked sink.
SINK_RETRY_S = 0.02


@dataclasses.dataclass(frozen=True)
class JobPlan:
    """How a job's tries behave: the duration range, the share of planned failures, and the
    share of timed-out runs that ignore their signal for ``grace_ms`` (a range) after it."""

    min_ms: int
    max_ms: int
    fail_rate: float = 0.0
    grace_rate: float = 0.0
    grace_ms: Tuple[int, int] = (0, 0)


#: The handlers of the jobs (schedules, overlap modes, timeouts and retries are ``checker.DEFAULT_JOBS``).
JOB_PLANS: Dict[str, JobPlan] = {
    "every1": JobPlan(100, 400, fail_rate=0.03),
    "long2": JobPlan(500, 4_000),
    "skip3": JobPlan(1_000, 5_000),
    "timeout2": JobPlan(300, 2_000, grace_rate=0.5, grace_ms=(1_500, 3_500)),
    "retry2": JobPlan(100, 300, fail_rate=0.5),
}
#: The plan of the stored jobs' tries (the operator's, every 1–3 s, ``overlap`` ``allow``).
STORED_PLAN = JobPlan(100, 400, fail_rate=0.03)


@dataclasses.dataclass(frozen=True)
class Plan:
    """What one try does: work ``duration_s``, then raise if ``fails``; cut short by a timeout,
    work on for ``grace_s`` more (0: stop at once)."""

    duration_s: float
    fails: bool
    grace_s: float = 0.0


def plan_run(seed: int, job: str, slot_ms: int, attempt: int, try_number: int = 1) -> Plan:
    """The deterministic plan of a try (the checker or a test can recompute it)."""
    key = f"{seed}:{job}:{slot_ms}:{attempt}" + (f":{try_number}" if try_number > 1 else "")
    rng = random.Random(key)
    spec = JOB_PLANS.get(job, STORED_PLAN)
    duration_ms = rng.uniform(spec.min_ms, spec.max_ms)
    fails = rng.random() < spec.fail_rate
    grace_ms = 0.0
    if spec.grace_rate and rng.random() < spec.grace_rate:
        grace_ms = rng.uniform(*spec.grace_ms)
    return Plan(duration_ms / 1000, fails, grace_ms / 1000)


class LostRuns:
    """The runs (by token) this instance reported ``lost``: set by the ``lost`` event.

    A handler that works on past its timeout learns here that its lease was lost meanwhile:
    its signal, already aborted with reason ``timeout``, cannot show a second reason. The
    flags of one process's runs (a few per second) are kept until it exits.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._flags: Dict[str, threading.Event] = {}

    def flag(self, token: str) -> threading.Event:
        """The flag of the run with ``token`` (set once it was reported lost)."""
        with self._lock:
            return self._flags.setdefault(token, threading.Event())

    def lost(self, token: Optional[str]) -> None:
        """The run with ``token`` was reported lost."""
        if token is not None:
            self.flag(token).set()


class Ticker:
    """Logs a ``tick`` every 10 ms for one try, until stopped, the run is reported lost, or (unless
    ``ignore_signal``) the run's signal aborts."""

    def __init__(self, recorder: Recorder, ctx: Context, lost: threading.Event, ignore_signal: bool = False) -> None:
        self._rec = recorder
        self._ctx = ctx
        self._lost = lost
        self._ignore_signal = ignore_signal
        self._stop = threading.Event()
        name = f"tick-{ctx.job}@{ctx.slot_ms}#{ctx.attempt}.{ctx.try_number}"
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)

    def start(self) -> "Ticker":
        """Start ticking."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop ticking; returns once the ticker thread logs no more."""
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        ctx, ids = self._ctx, ids_of(self._ctx)
        while not self._stop.is_set() and not self._lost.is_set() and (self._ignore_signal or not ctx.signal.aborted):
            self._rec.log("tick", **ids)
            self._stop.wait(TICK_S)


def ids_of(ctx: Context) -> Dict[str, Any]:
    """The ids every handler line carries: the attempt's, and the try's number."""
    return {"job": ctx.job, "slot_ms": ctx.slot_ms, "attempt": ctx.attempt, "token": ctx.token,
            "try_number": ctx.try_number}  # fmt: skip


def make_handler(recorder: Recorder, sink: Sink, seed: int, lost_runs: LostRuns) -> Any:
    """The handler of every job: one try of its plan (ticking), then its result to the sink."""

    def handler(ctx: Context) -> None:
        plan = plan_run(seed, ctx.job, ctx.slot_ms, ctx.attempt, ctx.try_number)
        ids, lost = ids_of(ctx), lost_runs.flag(ctx.token)
        recorder.log("start", reason=ctx.reason, duration_ms=round(plan.duration_s * 1000), fails=plan.fails,
                     grace_ms=round(plan.grace_s * 1000), **ids)  # fmt: skip
        ticker = Ticker(recorder, ctx, lost).start()
        try:
            ctx.signal.wait(plan.duration_s)
        finally:
            ticker.stop()
        if ctx.signal.reason == "timeout" and plan.grace_s > 0 and not lost.is_set():
            _work_past_timeout(recorder, ctx, plan, lost, ids)
        elif ctx.signal.aborted:
            _aborted(recorder, ctx.signal.reason, ids)
        if plan.fails:
            recorder.log("end", outcome="raised", **ids)
            raise RuntimeError(f"chaos: planned failure (try {ctx.try_number})")
        accepted, error, gave_up = _write_sink(sink, ctx)
        if gave_up:  # its signal aborted while it waited for the sink's lock
            recorder.log("abort", reason=ctx.signal.reason, **ids)
            recorder.log("sink", accepted=accepted, error=error, **ids)
            recorder.log("end", outcome="aborted", **ids)
            raise Aborted(f"chaos: aborted ({ctx.signal.reason}) while waiting for the sink")
        recorder.log("sink", accepted=accepted, error=error, **ids)
        recorder.log("end", outcome="returned", **ids)

    return handler


def _work_past_timeout(
    recorder: Recorder, ctx: Context, plan: Plan, lost: threading.Event, ids: Dict[str, Any]
) -> None:
    """Ignore the timeout for ``plan.grace_s``, ticking, unless the run is reported lost meanwhile
    (then abort). The caller then ends the try as planned."""
    recorder.log("abort", reason="timeout", ignored_ms=round(plan.grace_s * 1000), **ids)
    ticker = Ticker(recorder, ctx, lost, ignore_signal=True).start()
    try:
        lost.wait(plan.grace_s)
    finally:
        ticker.stop()
    if lost.is_set():
        _aborted(recorder, "lost", ids)


def _aborted(recorder: Recorder, reason: Optional[str], ids: Dict[str, Any]) -> None:
    recorder.log("abort", reason=reason, **ids)
    recorder.log("end", outcome="aborted", **ids)
    raise Aborted(f"chaos: aborted ({reason})")


def _write_sink(sink: Sink, ctx: Context) -> Tuple[Optional[bool], Optional[str], bool]:
    """Write the result, trying again while the sink is locked (a frozen instance may hold its
    write lock): ``(accepted, error, gave up for an abort)``.

    Each try waits for the lock only the sink's ``busy_ms`` (the worker's: 20 ms), so the handler
    sees its signal abort (a timeout, a lost lease, a stop) within about :data:`SINK_RETRY_S` and
    gives the write up. A handler that works on past its timeout (its signal aborted already)
    tries for :data:`ABORTED_PATIENCE_S`; any other for :data:`SINK_PATIENCE_S`.
    """
    aborted_before = ctx.signal.aborted
    deadline = time.monotonic() + (ABORTED_PATIENCE_S if aborted_before else SINK_PATIENCE_S)
    while True:
        try:
            return sink.write(ctx.job, ctx.slot_ms, ctx.attempt, ctx.token), None, False
        except sqlite3.OperationalError as exc:
            if ctx.signal.aborted and not aborted_before:
                return None, error_text(exc), True
            if time.monotonic() >= deadline:
                return None, error_text(exc), False
            time.sleep(SINK_RETRY_S)
        except Exception as exc:  # noqa: BLE001 - logged; the run itself goes on
            return None, error_text(exc), False
