"""The APScheduler 4 process of ``peers.py``: what every process of a service using APScheduler 4 runs.

Run by the APScheduler 4 virtual environment's Python (``peerslib.venvs``),
as a script: it imports APScheduler 4 and ``child`` (next to it), never
leasecron. Each process is a ``Scheduler(SQLAlchemyDataStore(url, schema),
event_broker)`` with the library's defaults otherwise (``lease_duration`` 30 s
unless ``--lease-s``; tasks: ``max_running_jobs=1``,
``misfire_grace_time=None``), the event broker shared by every process
(``PsycopgEventBroker`` on PostgreSQL, ``RedisEventBroker`` beside SQLite:
APScheduler 4 needs one as soon as several schedulers share a data store).
Every process adds the same schedule on start, with ``add_schedule``'s
default ``conflict_policy`` (do nothing if it exists).

``--mode``:

* ``init``: start the data store once (it creates its schema and tables), so
  that the processes do not race to, and say the driver versions;
* ``table``: the schedule ``CronTrigger(second="*")`` (every whole second, as
  APScheduler 3's row); the job notes ``time.time_ns()`` and the
  ``scheduled_fire_time`` of the job it runs (``apscheduler.current_job``):
  APScheduler 4 hands the job its slot. The window's runs go to ``--out``;
* ``recovery``: the schedule ``CronTrigger(second=<the slot's second>)`` (once
  a minute); the job tells the parent at once that it started (``start``,
  with its job id and slot) and runs ``--hold-s`` seconds, so that the parent
  can SIGKILL the process running it and see who runs it next.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from collections import Counter
from datetime import datetime, timedelta, timezone
from typing import Any, List, Optional, Tuple

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # child.py, when imported as peerslib.aps4_process

import child  # noqa: E402 - after the path above

#: The schedule's id (the job's name in the tables).
SCHEDULE = "tick"


class Recorder:
    """The runs this process made: (slot_ms, time.time_ns() as the job started), and the jobs released otherwise."""

    def __init__(self, live: bool, hold_s: float, stop: threading.Event) -> None:
        self.live, self.hold_s, self.stop = live, hold_s, stop
        self.lock = threading.Lock()
        self.starts: List[Tuple[int, int]] = []
        self.outcomes: Counter = Counter()  # (outcome, slot_ms) of each job released as anything but a success
        self.errors: List[str] = []
        self.identity = ""  # the scheduler's: JobReleased events of the other processes come through the broker too

    def job(self) -> None:
        """The task: note the start and the job's scheduled fire time; in recovery, tell the parent and hold."""
        wall_ns = time.time_ns()
        from apscheduler import current_job

        job = current_job.get()
        slot_ms = int(round(job.scheduled_fire_time.timestamp() * 1000))
        with self.lock:
            self.starts.append((slot_ms, wall_ns))
        if self.live:
            child.tell_parent("start", job_id=str(job.id), slot_ms=slot_ms, wall_ns=wall_ns, reason="schedule")
            self.stop.wait(self.hold_s)

    def on_released(self, event: Any) -> None:
        """A ``JobReleased`` event (of any process: the broker is shared; only this scheduler's count)."""
        outcome = getattr(event.outcome, "name", str(event.outcome))
        if outcome == "success" or event.scheduler_id != self.identity:
            return
        slot = event.scheduled_start
        with self.lock:
            self.outcomes[(outcome, int(round(slot.timestamp() * 1000)) if slot else 0)] += 1
            if event.exception_message and len(self.errors) < 5:
                self.errors.append(f"{event.exception_type}: {event.exception_message}")


#: This process's recorder (the task must be a module-level function: APScheduler 4 stores a reference to it).
RECORDER: Optional[Recorder] = None


def tick() -> None:
    """The task every process registers (``__main__:tick``): the recorder's job."""
    assert RECORDER is not None
    RECORDER.job()


def make_scheduler(args: argparse.Namespace) -> Any:
    """The process's Scheduler, its data store and event broker made from the command line."""
    from apscheduler import Scheduler
    from apscheduler.datastores.sqlalchemy import SQLAlchemyDataStore

    store = SQLAlchemyDataStore(args.url, schema=args.schema or None)
    if args.broker.startswith("redis"):
        from apscheduler.eventbrokers.redis import RedisEventBroker

        broker: Any = RedisEventBroker(args.broker, channel=args.channel)
    else:
        from apscheduler.eventbrokers.psycopg import PsycopgEventBroker

        broker = PsycopgEventBroker(args.broker, channel=args.channel)
    options = {"lease_duration": timedelta(seconds=args.lease_s)} if args.lease_s else {}  # else its default, 30 s
    return Scheduler(store, broker, **options)


def main(argv: Optional[List[str]] = None) -> int:
    """One APScheduler 4 process (see the module docstring)."""
    p = argparse.ArgumentParser(description="peers.py's APScheduler 4 process")
    p.add_argument("--mode", choices=("init", "table", "recovery"), required=True)
    p.add_argument("--url", required=True, help="the SQLAlchemy URL of the data store")
    p.add_argument("--schema", default="")
    p.add_argument("--broker", required=True, help="the event broker: postgresql://... or redis://...")
    p.add_argument("--channel", required=True)
    p.add_argument("--index", type=int, default=0)
    p.add_argument("--slots", type=int, default=1)
    p.add_argument("--out", default="")
    p.add_argument("--lease-s", type=float, default=0.0)
    p.add_argument("--hold-s", type=float, default=5.0)
    args = p.parse_args(argv)
    stop = child.stop_on_signals()
    scheduler = make_scheduler(args)
    if args.mode == "init":
        with scheduler:  # starts the data store: its schema and tables are made
            pass
        child.tell_parent("init")
        return 0
    from apscheduler import JobReleased
    from apscheduler.triggers.cron import CronTrigger

    pipe = child.ControlPipe(stop)
    global RECORDER
    recorder = RECORDER = Recorder(args.mode == "recovery", args.hold_s, stop)
    with scheduler:  # connects the data store and the event broker now, not at the first slot
        recorder.identity = scheduler.identity
        scheduler.subscribe(recorder.on_released, JobReleased)
        child.tell_parent("ready", pid=os.getpid(), identity=scheduler.identity)
        control = pipe.first()
        if control is None:
            return 0
        first_ms = int(control["first_slot_ms"])
        second = "*" if args.mode == "table" else str((first_ms // 1000) % 60)
        start = datetime.fromtimestamp(first_ms / 1000, timezone.utc)  # see the module docstring
        trigger = CronTrigger(second=second, start_time=start, timezone=timezone.utc)
        scheduler.add_schedule(tick, trigger, id=SCHEDULE)
        scheduler.start_in_background()
        try:
            lease_s = scheduler.lease_duration.total_seconds()
            child.tell_parent("booted", store_ms=time.time_ns() // 1_000_000, lease_s=lease_s)
            measured = child.cpu_over(first_ms, args.slots, stop) if args.mode == "table" else {}
            stop.wait()
        finally:
            scheduler.stop()
            scheduler.wait_until_stopped()
    if args.out:
        window = range(first_ms, first_ms + args.slots * 1000)
        with recorder.lock:
            events = Counter(kind for (kind, slot), n in recorder.outcomes.items() for _ in range(n) if slot in window)
            starts = list(recorder.starts)
        child.write_report(args.out, f"b{args.index}", SCHEDULE, measured, events, recorder.errors, starts)
    return 0


if __name__ == "__main__":
    sys.exit(main())
