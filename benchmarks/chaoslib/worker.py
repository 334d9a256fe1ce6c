"""One instance process of the chaos harness: five jobs, every step logged as a JSON line.

    cd benchmarks && PYTHONPATH=<repo>:<repo>/benchmarks python -m chaoslib.worker \\
        --store URL --runner NAME --log PATH --sink PATH \\
        --lease-ms 2000 --heartbeat-ms 500 --max-late-ms 30000 --poll-ms 300 --seed INT

It runs a :class:`~leasecron.LeaseCron` (``jitter_ms=0``,
``history_size=100000``, ``poll_ms`` to find requests for manual runs and schedule changes)
over a :class:`RecordingStore` (the real store, every claim, heartbeat, finish and release
logged; a claim's ``reason`` is ``manual`` for a triggered run) with the jobs of
:data:`JOB_PLANS`, and the task ``chaos-stored`` of the operator's stored jobs
(:mod:`chaoslib.schedules`; the same handler, with :data:`~chaoslib.handlers.STORED_PLAN`),
until SIGTERM (a warm stop that hands live runs over; exit code 0). A SIGTERM that comes
while it is still starting stops it the same way once it started. Each try of a handler
(:mod:`chaoslib.handlers`) logs ``start``, a ``tick`` every 10 ms from a ticker thread while
it works (stopping as soon as its signal aborts, but for a ``timeout2`` try that ignores its
timeout for a while), then writes its result to a :class:`Sink` that keeps only the newest
attempt of a slot.

Every line is one JSON object appended to ``--log`` with ``ev``, ``runner``,
``pid``, ``wall_ns`` (``time.time_ns()``) and ``mono_ns``
(``time.monotonic_ns()``: CLOCK_MONOTONIC is system-wide on Linux, so it
orders the lines of all processes of one host). The ``ev`` values and their
fields (``ids`` = ``job``, ``slot_ms``, ``attempt``, ``token``; a handler's lines add
``try_number``):

=========  ================================================================
ready      first line of an incarnation: ``store`` (URL scheme), ``lease_ms``,
           ``heartbeat_ms``, ``lease_margin_ms`` (as resolved), ``max_late_ms``,
           ``poll_ms``, ``seed``, ``jobs``, ``skew_ms`` (how far
           the process's wall clock is skewed; every ``wall_ns`` is corrected by it)
running    after ``cron.start()`` returned
claim      ``job``, ``slot_ms``, ``reason``, ``version`` (of the stored schedule the
           slot was computed from, rule 23; 0: the code's), ``outcome`` (``None`` and
           ``error`` if the call raised; ``stale``: a newer version is stored), the run
           the outcome is about: ``attempt``, ``token``, ``lease_end_ms``, ``run_slot_ms``,
           ``run_status``, ``run_runner``, ``run_started_ms`` (its attempt's start on the
           store's clock); ``t0_mono_ns``/``t1_mono_ns`` around the call
heartbeat  ``job``, ``slot_ms``, ``token``, ``attempt``, ``ok`` (``None``
           and ``error`` if it raised), ``sent_mono_ns``, ``recv_mono_ns``
finish     same as heartbeat plus ``status`` and ``failure`` (the error text sent)
release    same as heartbeat
start      ids, ``reason``, ``duration_ms``, ``fails``, ``grace_ms`` (a try began)
tick       ids (every 10 ms while the try works)
abort      ids, ``reason`` (the signal's: ``lost``, ``stop`` or ``timeout``; ``lost``
           also when a try working past its timeout was reported lost), and
           ``ignored_ms`` when the try works on that long past its timeout
sink       ids, ``accepted`` (``None`` and ``error`` if the write failed)
end        ids, ``outcome``: ``returned``, ``raised`` or ``aborted``
event      ``type`` (start, success, failed, skip, lost, handover, error, retry; a ``skip``
           with reason ``rescheduled`` follows a claim answered ``stale``),
           ``job``, ``slot_ms``, ``attempt``, ``reason``, ``error``, ``token``
           (of ``event.run``), ``try_number``
stopped    last line: ``code`` (0, or 1 with ``error``)
=========  ================================================================

What a try does is drawn from ``random.Random(f"{seed}:{job}:{slot_ms}:{attempt}")``
(``…:{try_number}`` after the first try; :func:`plan_run`).
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
import logging  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any, List  # noqa: E402
from urllib.parse import urlsplit  # noqa: E402

from leasecron import Context, Event, LeaseCron, Store, open_store  # noqa: E402
from leasecron.options import default_margin_ms  # noqa: E402

from .checker import DEFAULT_JOBS  # noqa: E402
from .handlers import JOB_PLANS, JobPlan, LostRuns, Plan, make_handler, plan_run  # noqa: E402
from .recording import Recorder, RecordingStore, error_text  # noqa: E402
from .schedules import STORED_TASK  # noqa: E402
from .sink import WRITER_BUSY_MS, Sink  # noqa: E402

__all__ = ["JOB_PLANS", "JobPlan", "Plan", "RecordingStore", "Recorder", "Sink", "main", "plan_run"]

#: The events every instance logs.
EVENT_TYPES = ("start", "success", "failed", "skip", "lost", "handover", "error", "retry")


def make_event_logger(recorder: Recorder, lost_runs: LostRuns) -> Any:
    """A ``cron.on`` callback that logs each event as an ``event`` line (a ``lost`` one also
    flags its run in ``lost_runs``, for a handler working past its timeout)."""

    def on_event(event: Event) -> None:
        run = event.run
        token = None if run is None else run.token
        if event.type == "lost":
            lost_runs.lost(token)
        recorder.log(
            "event", type=event.type, job=event.job, slot_ms=event.slot_ms, attempt=event.attempt,
            reason=event.reason, error=event.error, token=token, try_number=event.try_number,
        )  # fmt: skip

    return on_event


def build_cron(store: Store, recorder: Recorder, sink: Sink, args: argparse.Namespace) -> LeaseCron:
    """The instance: the jobs on a LeaseCron over a RecordingStore, every event logged."""
    cron = LeaseCron(
        RecordingStore(store, recorder),
        runner=args.runner,
        lease_ms=args.lease_ms,
        heartbeat_ms=args.heartbeat_ms,
        lease_margin_ms=args.lease_margin_ms,
        max_late_ms=args.max_late_ms,
        history_size=100_000,
        jitter_ms=0,
        poll_ms=args.poll_ms,
    )
    lost_runs = LostRuns()
    handler = make_handler(recorder, sink, args.seed, lost_runs)
    for name in JOB_PLANS:
        job = DEFAULT_JOBS[name]
        cron.add_job(
            handler, job.interval_ms / 1000, name=name, overlap=job.overlap, timeout_ms=job.timeout_ms,
            retries=job.retries, retry_delay_ms=job.retry_delay_ms,
        )  # fmt: skip

    @cron.task(STORED_TASK)
    def stored_task(ctx: Context, n: int) -> None:
        """A stored job's try: the same handler (its kwargs ``n``, the operator's put number, unused)."""
        handler(ctx)

    on_event = make_event_logger(recorder, lost_runs)
    for event_type in EVENT_TYPES:
        cron.on(event_type, on_event)
    return cron


def _margin(args: argparse.Namespace) -> int:
    """The ``lease_margin_ms`` the instance runs with: given, or LeaseCron's default."""
    given: Optional[int] = args.lease_margin_ms
    return given if given is not None else default_margin_ms(args.lease_ms, args.heartbeat_ms)


def parse_args(argv: Optional[List[str]]) -> argparse.Namespace:
    """The command line (every option required except the defaults shown)."""
    p = argparse.ArgumentParser(prog="python -m chaoslib.worker", description=__doc__.split("\n")[0])
    p.add_argument("--store", required=True, help="store URL")
    p.add_argument("--runner", required=True, help="this instance's runner name")
    p.add_argument("--log", required=True, type=Path, help="JSON-lines log to append to")
    p.add_argument("--sink", required=True, type=Path, help="the shared SQLite sink file")
    p.add_argument("--lease-ms", type=int, default=2_000)
    p.add_argument("--heartbeat-ms", type=int, default=500)
    p.add_argument(
        "--lease-margin-ms", type=int, default=None, help="default: LeaseCron's, for the lease and heartbeat"
    )
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
        lease_margin_ms=_margin(args),
        max_late_ms=args.max_late_ms, poll_ms=args.poll_ms, seed=args.seed, jobs=jobs, skew_ms=args.skew_ms,
    )  # fmt: skip
    store: Optional[Store] = None
    try:
        store = open_store(args.store)
        cron = build_cron(store, recorder, Sink(args.sink, busy_ms=WRITER_BUSY_MS, create=False), args)
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
