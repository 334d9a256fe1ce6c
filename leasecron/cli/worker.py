"""A worker process for the demo and the multi-process tests.

``python -m leasecron.cli.worker --store URL --runner NAME [options]`` runs one job in a
:class:`~leasecron.LeaseCron` until SIGTERM (``run_forever``: a graceful stop that hands live
runs over) and prints one JSON object a line on stdout for every event (see :func:`main`), so a
parent process can follow it. The URL may come from the environment's ``LEASECRON_STORE``
instead of ``--store``, which keeps a password out of the process list (the demo passes it so).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from typing import Any, List, Optional

from .. import Aborted, Context, Event, LeaseCron, open_store
from ..events import EVENT_TYPES
from ..options import OPTIONS
from ..states import Status

__all__ = ["main"]

_print_lock = threading.Lock()


def emit(runner: str, event: str, **fields: Any) -> None:
    """Print one JSON line (thread-safe, flushed)."""
    line = {"event": event, "runner": runner, "pid": os.getpid(), "t": time.time_ns() // 1_000_000, **fields}
    with _print_lock:
        sys.stdout.write(json.dumps(line) + "\n")
        sys.stdout.flush()


#: Where the demo's workers differ from a service's defaults: short leases, no jitter, no catch-up.
_WORKER_DEFAULTS = {"lease_ms": 1_000, "heartbeat_ms": 100, "jitter_ms": 0, "catch_up_ms": 0, "stop_timeout_ms": 5_000}


def parse_args(argv: Optional[List[str]]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m leasecron.cli.worker", description=__doc__.split("\n")[0])
    p.add_argument(
        "--store",
        default=os.environ.get("LEASECRON_STORE"),
        help="store URL (default: the environment's LEASECRON_STORE)",
    )
    p.add_argument("--runner", required=True, help="this instance's runner name")
    p.add_argument("--job", default="demo", help="job name (default: demo)")
    p.add_argument("--every", type=float, default=2.0, help="interval in seconds (default: 2)")
    p.add_argument("--work", type=float, default=0.5, help="seconds the handler works (default: 0.5)")
    for option in OPTIONS:  # every option of LeaseCron, as its flag
        default = _WORKER_DEFAULTS.get(option.name, option.default)
        shown = "none" if default is None else default
        if option.integer:
            p.add_argument(option.flag, type=int, default=default, help=f"{option.doc} (default: {shown})")
        else:
            choices = list(option.choices) or None
            p.add_argument(option.flag, default=default, choices=choices, help=f"{option.doc} (default: {shown})")
    p.add_argument("--fail-tries", type=int, default=0, help="the handler raises in its first N tries (default: 0)")
    p.add_argument("--ignore-abort", action="store_true", help="the handler ignores its signal")
    p.add_argument("--probe-finish", action="store_true", help="after lost, try a finish with the old token")
    args = p.parse_args(argv)
    if not args.store:
        p.error("give --store URL, or set LEASECRON_STORE")
    return args


def main(argv: Optional[List[str]] = None) -> int:
    """Run the worker until SIGTERM or SIGINT, printing one JSON line for every event:

    * ``{"event": "ready"}`` once started, and ``stopped`` at the end;
    * the instance's events (``start``, ``success``, ``failed``, ``skip``, ``lost``,
      ``handover``, ``error``, ``retry``) with job, slot_ms, attempt, reason, error, token,
      try_number;
    * ``handler-start`` / ``handler-end`` / ``aborted`` (with the signal's reason) from inside
      the handler, with its try_number; ``handler-raise`` when ``--fail-tries N`` makes a try
      (one of the first N) raise;
    * with ``--probe-finish``, after ``lost``: ``probe-finish`` with the store's answer to a
      finish sent with the lost attempt's token (fencing says no).

    Every line has ``runner``, ``pid`` and ``t`` (the wall clock, epoch ms).
    """
    args = parse_args(argv)
    store = open_store(args.store)
    cron = LeaseCron(store, runner=args.runner, **{option.name: getattr(args, option.name) for option in OPTIONS})
    runner = args.runner

    def handler(ctx: Context) -> None:
        ids = {"job": ctx.job, "slot_ms": ctx.slot_ms, "attempt": ctx.attempt, "try_number": ctx.try_number}
        emit(runner, "handler-start", token=ctx.token, **ids)
        if args.ignore_abort:
            time.sleep(args.work)
        elif ctx.signal.wait(args.work):
            emit(runner, "aborted", reason=ctx.signal.reason, **ids)
            raise Aborted(ctx.signal.reason or "aborted")
        if ctx.try_number <= args.fail_tries:
            emit(runner, "handler-raise", **ids)
            raise RuntimeError(f"try {ctx.try_number} fails (--fail-tries {args.fail_tries})")
        emit(runner, "handler-end", token=ctx.token, **ids)

    cron.add_job(handler, args.every, name=args.job)

    def on_event(event: Event) -> None:
        run = event.run
        emit(
            runner,
            event.type,
            job=event.job,
            slot_ms=event.slot_ms,
            attempt=event.attempt,
            reason=event.reason,
            error=event.error,
            token=None if run is None else run.token,
            try_number=event.try_number,
        )
        if event.type == "lost" and args.probe_finish and run is not None:
            accepted = store.finish(run.job, run.slot_ms, run.token, Status.SUCCESS)
            emit(runner, "probe-finish", job=run.job, slot_ms=run.slot_ms, attempt=run.attempt, accepted=accepted)

    for name in EVENT_TYPES:
        cron.on(name, on_event)
    cron.start()
    emit(runner, "ready")
    cron.run_forever()
    emit(runner, "stopped")
    store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
