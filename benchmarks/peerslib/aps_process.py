"""The APScheduler process of ``peers.py``: what every process of a service using APScheduler 3 runs.

A ``BackgroundScheduler`` whose only job store is a ``SQLAlchemyJobStore`` on
the table the parent made, and the job every process adds on start,
``add_job(tick, "cron", second="*", id="tick", replace_existing=True)``. The
job notes ``time.time_ns()`` and returns it; APScheduler does not hand a job
its scheduled time, but the ``EVENT_JOB_EXECUTED`` event that follows a run
carries both (``retval`` and ``scheduled_run_time``), so a listener pairs each
run with its slot exactly. It speaks ``fire_lag.py``'s protocol with the
parent (``ready``, the window's first slot, ``booted``; end of stdin: stop)
and writes its runs in the format ``fire_lag.read_report`` reads.
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
from collections import Counter
from datetime import timezone
from typing import Any, Dict, List, Tuple

from fire_lag import WINDOW_LEAD_MS, cpu_seconds, tell_parent, wait_until_store_ms
from .child import ControlPipe, stop_on_signals

from leasecron import MemoryStore
from leasecron.engine.clock import StoreClock

from . import APS_JOB


def tick() -> int:
    """The APScheduler job: note when it started and return that (the EVENT_JOB_EXECUTED listener gets it)."""
    return time.time_ns()


def _ms(moment: Any) -> int:
    """Epoch ms of an aware datetime (APScheduler's scheduled run time: a whole second here)."""
    return int(round(moment.timestamp() * 1000))


class ApsRecorder:
    """What an APScheduler process notes, from its scheduler's events: each run's slot and start,
    and the window's slots it skipped (missed, max instances) or whose run raised."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: (slot_ms, time.time_ns() as the job started) of each run
        self.starts: List[Tuple[int, int]] = []
        #: (event, slot_ms) of each run not made
        self.skipped: List[Tuple[str, int]] = []
        self.errors: List[str] = []

    def on_event(self, event: Any) -> None:
        """An ``EVENT_JOB_*`` event of the scheduler (called in its threads)."""
        from apscheduler.events import EVENT_JOB_ERROR, EVENT_JOB_EXECUTED, EVENT_JOB_MAX_INSTANCES, EVENT_JOB_MISSED

        with self._lock:
            if event.code == EVENT_JOB_EXECUTED:
                self.starts.append((_ms(event.scheduled_run_time), int(event.retval)))
            elif event.code == EVENT_JOB_MISSED:
                self.skipped.append(("missed", _ms(event.scheduled_run_time)))
            elif event.code == EVENT_JOB_MAX_INSTANCES:
                self.skipped.extend(("max_instances", _ms(t)) for t in event.scheduled_run_times)
            elif event.code == EVENT_JOB_ERROR:
                self.skipped.append(("error", _ms(event.scheduled_run_time)))
                if len(self.errors) < 5:
                    self.errors.append(repr(event.exception))

    def write(self, path: str, index: int, window: List[int], measured: Dict[str, Any]) -> None:
        """The output ``fire_lag.read_report`` reads: a summary line, then one line per run."""
        with self._lock:
            starts, skipped = list(self.starts), list(self.skipped)
        events = Counter(kind for kind, slot in skipped if window[0] <= slot < window[1])
        with open(path, "w", encoding="utf-8") as out:
            summary = {"ev": "instance", "runner": f"a{index}", "pid": os.getpid(), **measured, "calls": []}
            summary.update(events=dict(events), errors=self.errors)
            out.write(json.dumps(summary) + "\n")
            for slot_ms, wall_ns in starts:
                line = {"ev": "start", "job": APS_JOB, "slot_ms": slot_ms, "attempt": 1, "reason": "schedule"}
                out.write(json.dumps({**line, "wall_ns": wall_ns}) + "\n")


def cpu_over(window: List[int], stop: threading.Event) -> Dict[str, Any]:
    """CPU seconds of this process between the window's ends (host clock, epoch ms); empty if stopped first."""
    host = StoreClock(MemoryStore())  # never synced: it counts on this host's wall clock, as APScheduler does
    if not wait_until_store_ms(host, window[0], stop):
        return {}
    cpu0, mono0 = cpu_seconds(), time.monotonic()
    if not wait_until_store_ms(host, window[1], stop):
        return {}
    return {"cpu_s": cpu_seconds() - cpu0, "window_s": time.monotonic() - mono0}


def aps_instance_main(args: argparse.Namespace) -> int:
    """One APScheduler process: connect, say it is up; when told the window add the job and start;
    on end of stdin (or SIGTERM/SIGINT) shut the scheduler down and write ``--out``."""
    stop = stop_on_signals()
    pipe = ControlPipe(stop)
    from apscheduler.events import EVENT_JOB_ERROR, EVENT_JOB_EXECUTED, EVENT_JOB_MAX_INSTANCES, EVENT_JOB_MISSED
    from apscheduler.jobstores.sqlalchemy import SQLAlchemyJobStore
    from apscheduler.schedulers.background import BackgroundScheduler

    jobstore = SQLAlchemyJobStore(url=args.aps_url, tablename=args.table, tableschema=args.schema or None)
    with jobstore.engine.connect():  # connect now, not at the first slot
        pass
    scheduler = BackgroundScheduler(jobstores={"default": jobstore}, timezone=timezone.utc)
    recorder = ApsRecorder()
    scheduler.add_listener(
        recorder.on_event, EVENT_JOB_EXECUTED | EVENT_JOB_MISSED | EVENT_JOB_MAX_INSTANCES | EVENT_JOB_ERROR
    )
    tell_parent("ready", pid=os.getpid())
    control = pipe.first()
    if control is None:
        return 0
    first_ms = int(control["first_slot_ms"])
    scheduler.add_job(tick, "cron", second="*", id=APS_JOB, replace_existing=True)
    scheduler.start()
    try:
        tell_parent("booted", store_ms=time.time_ns() // 1_000_000)
        # the CPU window of fire_lag.py's instances, on the same clock
        measured = cpu_over([first_ms - WINDOW_LEAD_MS, first_ms + args.slots * 1000 - WINDOW_LEAD_MS], stop)
        stop.wait()
    finally:
        scheduler.shutdown(wait=True)
    recorder.write(args.out, args.index, [first_ms, first_ms + args.slots * 1000], measured)
    return 0
