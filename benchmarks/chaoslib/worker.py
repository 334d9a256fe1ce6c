"""One instance process of the chaos harness: three jobs, every step logged as a JSON line.

    cd benchmarks && PYTHONPATH=<repo>:<repo>/benchmarks python -m chaoslib.worker \\
        --store URL --runner NAME --log PATH --sink PATH \\
        --lease-ms 2000 --heartbeat-ms 500 --max-late-ms 30000 --poll-ms 300 --seed INT

It runs a :class:`~leasecron.LeaseCron` (``jitter_ms=0``,
``history_size=100000``, ``poll_ms`` to find requests for manual runs) over a
:class:`RecordingStore` (the real store, every claim, heartbeat, finish and release logged; a
claim's ``reason`` is ``manual`` for a triggered run) with the jobs of
:data:`JOB_PLANS`, until SIGTERM (a warm stop that hands live runs over; exit
code 0). A SIGTERM that comes while it is still starting stops it the same way
once it started. Each handler logs ``start``, a ``tick`` every 10 ms from a ticker
thread while it runs (stopping as soon as its signal aborts), then writes its
result to a :class:`Sink` that keeps only the newest attempt of a slot.

Every line is one JSON object appended to ``--log`` with ``ev``, ``runner``,
``pid``, ``wall_ns`` (``time.time_ns()``) and ``mono_ns``
(``time.monotonic_ns()``: CLOCK_MONOTONIC is system-wide on Linux, so it
orders the lines of all processes of one host). The ``ev`` values and their
fields (``ids`` = ``job``, ``slot_ms``, ``attempt``, ``token``):

=========  ================================================================
ready      first line of an incarnation: ``store`` (URL scheme), ``lease_ms``,
           ``heartbeat_ms``, ``max_late_ms``, ``poll_ms``, ``seed``, ``jobs``, ``skew_ms`` (how far
           the process's wall clock is skewed; every ``wall_ns`` is corrected by it)
running    after ``cron.start()`` returned
claim      ``job``, ``slot_ms``, ``reason``, ``outcome`` (``None`` and
           ``error`` if the call raised), the run the outcome is about:
           ``attempt``, ``token``, ``lease_end_ms``, ``run_slot_ms``,
           ``run_status``, ``run_runner``; ``t0_mono_ns``/``t1_mono_ns``
           around the call
heartbeat  ``job``, ``slot_ms``, ``token``, ``attempt``, ``ok`` (``None``
           and ``error`` if it raised), ``sent_mono_ns``, ``recv_mono_ns``
finish     same as heartbeat plus ``status`` and ``failure`` (the error text sent)
release    same as heartbeat
start      ids, ``reason``, ``duration_ms``, ``fails`` (the handler began)
tick       ids (every 10 ms while the handler runs)
abort      ids, ``reason`` (the signal's: ``lost`` or ``stop``)
sink       ids, ``accepted`` (``None`` and ``error`` if the write failed)
end        ids, ``outcome``: ``returned``, ``raised`` or ``aborted``
event      ``type`` (start, success, failed, skip, lost, handover, error),
           ``job``, ``slot_ms``, ``attempt``, ``reason``, ``error``, ``token``
           (of ``event.run``)
stopped    last line: ``code`` (0, or 1 with ``error``)
=========  ================================================================

The handler's duration and whether it raises are drawn from
``random.Random(f"{seed}:{job}:{slot_ms}:{attempt}")`` (:func:`plan_run`).
"""

from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import Optional

#: Set by a SIGTERM or SIGINT that came before ``run_forever`` took the signals over.
EARLY_STOP = threading.Event()


def _stop_early(signum: int, frame: Optional[FrameType]) -> None:
    EARLY_STOP.set()


if __name__ == "__main__":  # before the slow imports: a SIGTERM during start-up is a clean stop too
    signal.signal(signal.SIGTERM, _stop_early)
    signal.signal(signal.SIGINT, _stop_early)

import argparse  # noqa: E402
import dataclasses  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
import sqlite3  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any, Dict, List, Tuple  # noqa: E402
from urllib.parse import urlsplit  # noqa: E402

from leasecron import Aborted, Claim, Context, Event, LeaseCron, Run, Store, open_store  # noqa: E402
from leasecron.stores import ClaimRequest, DelegatingStore  # noqa: E402

from .checker import DEFAULT_JOBS  # noqa: E402
from .sink import Sink  # noqa: E402

__all__ = ["JOB_PLANS", "JobPlan", "Plan", "RecordingStore", "Recorder", "Sink", "main", "plan_run"]

#: How often a running handler logs a ``tick``.
TICK_S = 0.010
#: How long a handler keeps trying to write its result to a locked sink.
SINK_PATIENCE_S = 60.0


@dataclasses.dataclass(frozen=True)
class JobPlan:
    """How a job's handler behaves: its duration range and share of planned failures."""

    min_ms: int
    max_ms: int
    fail_rate: float = 0.0


#: The handlers of the jobs (schedules and overlap modes are ``checker.DEFAULT_JOBS``).
JOB_PLANS: Dict[str, JobPlan] = {
    "every1": JobPlan(100, 400, fail_rate=0.03),
    "long2": JobPlan(500, 4_000),
    "skip3": JobPlan(1_000, 5_000),
}


@dataclasses.dataclass(frozen=True)
class Plan:
    """What one attempt's handler does: run ``duration_s``, then raise if ``fails``."""

    duration_s: float
    fails: bool


def plan_run(seed: int, job: str, slot_ms: int, attempt: int) -> Plan:
    """The deterministic plan of an attempt (the checker or a test can recompute it)."""
    rng = random.Random(f"{seed}:{job}:{slot_ms}:{attempt}")
    spec = JOB_PLANS[job]
    duration_ms = rng.uniform(spec.min_ms, spec.max_ms)
    fails = rng.random() < spec.fail_rate
    return Plan(duration_ms / 1000, fails)


def error_text(exc: BaseException) -> str:
    """``"Type: message"`` of an exception, for a log line."""
    return f"{type(exc).__name__}: {exc}"


class Recorder:
    """Appends JSON lines to the log: one ``write`` per line, under a lock."""

    def __init__(self, path: Path, runner: str, skew_ms: int = 0) -> None:
        self.runner = runner
        self._skew_ns = skew_ms * 1_000_000  # the host's wall clock as this process sees it, minus the truth
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._file = open(path, "ab", buffering=0)  # unbuffered: each write() is one append

    def log(self, ev: str, **fields: Any) -> None:
        """Append one line: ``ev``, ``runner``, ``pid``, ``wall_ns``, ``mono_ns`` and ``fields``."""
        with self._lock:
            line = {
                "ev": ev,
                "runner": self.runner,
                "pid": self._pid,
                "wall_ns": time.time_ns() - self._skew_ns,
                "mono_ns": time.monotonic_ns(),
                **fields,
            }
            self._file.write((json.dumps(line, separators=(",", ":")) + "\n").encode())
            self._file.flush()

    def close(self) -> None:
        """Close the log file."""
        with self._lock:
            self._file.close()


class RecordingStore(DelegatingStore):
    """A real store with every claim, heartbeat, finish and release logged.

    Each call is passed on unchanged; the line is written once the call
    returned (or raised), with the monotonic times around it. Other methods
    pass through (:class:`~leasecron.stores.DelegatingStore`). It remembers the attempt of each token it saw won, so
    heartbeat, finish and release lines carry the attempt too.
    """

    def __init__(self, store: Store, recorder: Recorder) -> None:
        super().__init__(store)
        self._rec = recorder
        self._attempts: Dict[str, int] = {}

    # -- logged ----------------------------------------------------------------------

    def _claim(self, request: ClaimRequest) -> Claim:
        job, slot_ms, reason = request.job, request.slot_ms, request.reason
        t0 = time.monotonic_ns()
        try:
            claim = self.inner._claim(request)
        except Exception as exc:
            t1 = time.monotonic_ns()
            self._rec.log(
                "claim", job=job, slot_ms=slot_ms, reason=reason, outcome=None,
                error=error_text(exc), t0_mono_ns=t0, t1_mono_ns=t1,
            )  # fmt: skip
            raise
        t1 = time.monotonic_ns()
        run = claim.run
        if claim.won and run is not None:
            self._attempts[run.token] = run.attempt
        self._rec.log(
            "claim", job=job, slot_ms=slot_ms, reason=reason, outcome=claim.outcome,
            t0_mono_ns=t0, t1_mono_ns=t1, **_run_fields(run),
        )  # fmt: skip
        return claim

    def _heartbeat(self, job: str, slot_ms: int, token: str, lease_ms: int) -> bool:
        return self._call(
            "heartbeat", job, slot_ms, token, {}, lambda: self.inner._heartbeat(job, slot_ms, token, lease_ms)
        )

    def _finish(self, job: str, slot_ms: int, token: str, status: str, error: Optional[str]) -> bool:
        extra = {"status": status, "failure": error}
        return self._call(
            "finish", job, slot_ms, token, extra, lambda: self.inner._finish(job, slot_ms, token, status, error)
        )

    def _release(self, job: str, slot_ms: int, token: str) -> bool:
        return self._call("release", job, slot_ms, token, {}, lambda: self.inner._release(job, slot_ms, token))

    def _call(self, ev: str, job: str, slot_ms: int, token: str, extra: Dict[str, Any], call: Any) -> bool:
        ids = {"job": job, "slot_ms": slot_ms, "token": token, "attempt": self._attempts.get(token)}
        sent = time.monotonic_ns()
        try:
            ok = bool(call())
        except Exception as exc:
            recv = time.monotonic_ns()
            self._rec.log(ev, ok=None, error=error_text(exc), sent_mono_ns=sent, recv_mono_ns=recv, **ids, **extra)
            raise
        recv = time.monotonic_ns()
        self._rec.log(ev, ok=ok, sent_mono_ns=sent, recv_mono_ns=recv, **ids, **extra)
        return ok


def _run_fields(run: Optional[Run]) -> Dict[str, Any]:
    if run is None:
        return {"attempt": None, "token": None, "lease_end_ms": None, "run_slot_ms": None,
                "run_status": None, "run_runner": None}  # fmt: skip
    return {
        "attempt": run.attempt,
        "token": run.token,
        "lease_end_ms": run.lease_end_ms,
        "run_slot_ms": run.slot_ms,
        "run_status": run.status,
        "run_runner": run.runner,
    }


class Ticker:
    """Logs a ``tick`` every 10 ms for one run, until stopped or the run's signal aborts."""

    def __init__(self, recorder: Recorder, ctx: Context) -> None:
        self._rec = recorder
        self._ctx = ctx
        self._stop = threading.Event()
        name = f"tick-{ctx.job}@{ctx.slot_ms}#{ctx.attempt}"
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)

    def start(self) -> None:
        """Start ticking."""
        self._thread.start()

    def stop(self) -> None:
        """Stop ticking; returns once the ticker thread logs no more."""
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        ctx = self._ctx
        ids = _ids(ctx)
        while not self._stop.is_set() and not ctx.signal.aborted:
            self._rec.log("tick", **ids)
            self._stop.wait(TICK_S)


def _ids(ctx: Context) -> Dict[str, Any]:
    return {"job": ctx.job, "slot_ms": ctx.slot_ms, "attempt": ctx.attempt, "token": ctx.token}


def make_handler(recorder: Recorder, sink: Sink, seed: int) -> Any:
    """The handler of every job: run its planned time (ticking), then write to the sink."""

    def handler(ctx: Context) -> None:
        plan = plan_run(seed, ctx.job, ctx.slot_ms, ctx.attempt)
        ids = _ids(ctx)
        recorder.log("start", reason=ctx.reason, duration_ms=round(plan.duration_s * 1000), fails=plan.fails, **ids)
        ticker = Ticker(recorder, ctx)
        ticker.start()
        try:
            ctx.signal.wait(plan.duration_s)
        finally:
            ticker.stop()
        if ctx.signal.aborted:
            _aborted(recorder, ctx, ids)
        if plan.fails:
            recorder.log("end", outcome="raised", **ids)
            raise RuntimeError("chaos: planned failure")
        accepted, error = _write_sink(sink, ctx)
        recorder.log("sink", accepted=accepted, error=error, **ids)
        recorder.log("end", outcome="returned", **ids)

    return handler


def _aborted(recorder: Recorder, ctx: Context, ids: Dict[str, Any]) -> None:
    recorder.log("abort", reason=ctx.signal.reason, **ids)
    recorder.log("end", outcome="aborted", **ids)
    raise Aborted(f"chaos: aborted ({ctx.signal.reason})")


def _write_sink(sink: Sink, ctx: Context) -> Tuple[Optional[bool], Optional[str]]:
    """Write the result, trying again while the sink is locked (a frozen instance may hold its
    write lock) until it is written, the run's signal aborts, or :data:`SINK_PATIENCE_S` passed."""
    deadline = time.monotonic() + SINK_PATIENCE_S
    while True:
        try:
            return sink.write(ctx.job, ctx.slot_ms, ctx.attempt, ctx.token), None
        except sqlite3.OperationalError as exc:
            if ctx.signal.aborted or time.monotonic() >= deadline:
                return None, error_text(exc)
            ctx.signal.wait(0.05)
        except Exception as exc:  # noqa: BLE001 - logged; the run itself goes on
            return None, error_text(exc)


def make_event_logger(recorder: Recorder) -> Any:
    """A ``cron.on`` callback that logs each event as an ``event`` line."""

    def on_event(event: Event) -> None:
        run = event.run
        recorder.log(
            "event", type=event.type, job=event.job, slot_ms=event.slot_ms, attempt=event.attempt,
            reason=event.reason, error=event.error, token=None if run is None else run.token,
        )  # fmt: skip

    return on_event


def build_cron(store: Store, recorder: Recorder, sink: Sink, args: argparse.Namespace) -> LeaseCron:
    """The instance: the three jobs on a LeaseCron over a RecordingStore, every event logged."""
    cron = LeaseCron(
        RecordingStore(store, recorder),
        runner=args.runner,
        lease_ms=args.lease_ms,
        heartbeat_ms=args.heartbeat_ms,
        max_late_ms=args.max_late_ms,
        history_size=100_000,
        jitter_ms=0,
        poll_ms=args.poll_ms,
    )
    handler = make_handler(recorder, sink, args.seed)
    for name in JOB_PLANS:
        job = DEFAULT_JOBS[name]
        cron.add_job(handler, job.interval_ms / 1000, name=name, overlap=job.overlap)
    on_event = make_event_logger(recorder)
    for event_type in ("start", "success", "failed", "skip", "lost", "handover", "error"):
        cron.on(event_type, on_event)
    return cron


def parse_args(argv: Optional[List[str]]) -> argparse.Namespace:
    """The command line (every option required except the defaults shown)."""
    p = argparse.ArgumentParser(prog="python -m chaoslib.worker", description=__doc__.split("\n")[0])
    p.add_argument("--store", required=True, help="store URL")
    p.add_argument("--runner", required=True, help="this instance's runner name")
    p.add_argument("--log", required=True, type=Path, help="JSON-lines log to append to")
    p.add_argument("--sink", required=True, type=Path, help="the shared SQLite sink file")
    p.add_argument("--lease-ms", type=int, default=2_000)
    p.add_argument("--heartbeat-ms", type=int, default=500)
    p.add_argument("--max-late-ms", type=int, default=30_000)
    p.add_argument("--poll-ms", type=int, default=1_000, help="how often to look for manual-run requests")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--skew-ms", type=int, default=0,
        help="how far this process's wall clock was skewed (libfaketime); logged wall_ns are corrected by it",
    )  # fmt: skip
    return p.parse_args(argv)


def main(argv: Optional[List[str]] = None) -> int:
    """Run the instance until SIGTERM (hand-over) or SIGINT; 0 on a clean stop."""
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(process)d %(name)s %(levelname)s %(message)s")
    recorder = Recorder(args.log, args.runner, args.skew_ms)
    jobs = {name: dataclasses.asdict(DEFAULT_JOBS[name]) for name in JOB_PLANS}
    recorder.log(
        "ready", store=urlsplit(args.store).scheme, lease_ms=args.lease_ms, heartbeat_ms=args.heartbeat_ms,
        max_late_ms=args.max_late_ms, poll_ms=args.poll_ms, seed=args.seed, jobs=jobs, skew_ms=args.skew_ms,
    )  # fmt: skip
    store: Optional[Store] = None
    try:
        store = open_store(args.store)
        cron = build_cron(store, recorder, Sink(args.sink), args)
        cron.start()
        recorder.log("running")
        if EARLY_STOP.is_set():  # asked to stop while starting: a warm stop all the same
            cron.stop()
        else:
            cron.run_forever()
    except Exception as exc:  # noqa: BLE001 - logged as the last line; exit code 1
        logging.getLogger("chaoslib").exception("worker %s failed", args.runner)
        recorder.log("stopped", code=1, error=error_text(exc))
        return 1
    finally:
        if store is not None:
            store.close()
    recorder.log("stopped", code=0)
    recorder.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
