"""The operator's schedule changes: reschedule the code's jobs, put and delete stored jobs.

While the nemesis hurts the cluster, the :class:`~chaoslib.controls.Operator` also changes
schedules the way ``leasecron reschedule|put|delete URL`` does, through the store's public
:meth:`~leasecron.Store.set_schedule` (rule 24). :class:`ScheduleChanger` decides what, from
``random.Random(f"{seed}:schedules")`` (a stream of its own: the pauses and triggers draw what
they drew before). Every ``gap_s`` (2–5 s) it makes one change:

* ``reset``: an override older than its ``reset_s`` (4–10 s) goes back to the code's schedule;
* else ``reschedule`` (35 %): a code job not overridden gets a schedule whose slots are some
  of the code's (every 2 or 3 intervals, as an interval or a six-field cron string whose sixth
  field, croniter's seconds, says it, in a random zone), so a request's slot is still one the code's schedule may
  claim (``trigger_once``);
* ``put`` (45 %): one of :data:`STORED_NAMES` is created or replaced, a job of the task
  :data:`STORED_TASK` (every worker registers it) every 1, 2 or 3 s (an interval, or a cron
  string in a random zone), ``kwargs`` ``{"n": <put number>}``, ``overlap`` ``allow``;
* ``delete`` (20 %, when a stored job exists): one of them is deleted (a name that holds none
  is put instead).

Each change is timed to reach the store 50–250 ms before a whole second of the wall clock (the
store's, on this host): a slot of the schedule it replaces falls due while the instances have
not yet polled it (every ``poll_ms``), so they claim it from the older version and are answered
``stale``. By ``quiet_at`` every override is reset and nothing new is changed; the stored jobs
stay and run through the quiet end, and once the nemesis's faults have settled there
(``settled_at``) one stored job is put again, every second (:meth:`ScheduleChanger.last_put`): its
slots fall due with every instance up, so ``stored_once`` judges them, whatever the faults did before.

Each change is one ``operator.jsonl`` line (see :mod:`chaoslib.controls`) with ``schedule``,
``tz``, and, for a ``put``, ``task``, ``kwargs`` and ``options`` as sent, and the store's
answer: ``version``, ``updated_ms`` (the change's time on the store's clock) and ``source``;
``error`` when it raised (it may have been stored all the same). After the run a
``final-schedule`` line per name holds the store's record (``record``: ``StoredSchedule.to_dict()``,
or None).
"""

from __future__ import annotations

import random
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from leasecron import Store, StoredSchedule

__all__ = ["STORED_NAMES", "STORED_TASK", "ScheduleChanger", "override_choices"]

#: The task of the stored jobs (``@cron.task`` in every worker).
STORED_TASK = "chaos-stored"
#: The names the operator puts stored jobs under.
STORED_NAMES = ("stored1", "stored2", "stored3")
#: The schedules a stored job is put with: intervals (seconds) and six-field cron strings (croniter's
#: order: the seconds field is the sixth).
STORED_SCHEDULES = ("1", "2", "3", "* * * * * *", "* * * * * */2", "* * * * * */3")
#: The zones a cron schedule is stored in (None: the job's own, or the instances' default).
ZONES = (None, "UTC", "Europe/Berlin", "Asia/Kolkata")
#: The share of changes (but resets) that reschedule a code job, and that put a stored job.
RESCHEDULE_SHARE, PUT_SHARE = 0.35, 0.45
#: How long before a whole second of the store's clock a change is sent (s).
LEAD_S = (0.05, 0.25)

Call = Callable[[str, str, Callable[[Store], Dict[str, Any]]], None]


def override_choices(interval_ms: int) -> List[str]:
    """The schedules a code job of ``interval_ms`` may be rescheduled to: every 2 or 3 of its
    intervals, as an interval in seconds and, where the seconds of a minute divide evenly, as a
    cron string (its slots are then some of the code's, whatever the zone's whole-minute offset)."""
    out = []
    for k in (2, 3):
        ms = k * interval_ms
        if ms % 1000 == 0:
            out.append(str(ms // 1000))
            if 60_000 % ms == 0:
                out.append(f"* * * * * */{ms // 1000}")
    return out


def record_fields(record: StoredSchedule) -> Dict[str, Any]:
    """The store's answer to a change, for the log line."""
    return {"version": record.version, "updated_ms": record.updated_ms, "source": str(record.source),
            "updated_by": record.updated_by}  # fmt: skip


class ScheduleChanger:
    """Decides and makes the operator's schedule changes (see the module docstring); ``call``
    is the operator's :meth:`~chaoslib.controls.Operator._call` (one logged store call)."""

    def __init__(
        self,
        jobs: Mapping[str, Any],
        seed: int,
        by: str,
        gap_s: Tuple[float, float] = (2.0, 5.0),
        reset_s: Tuple[float, float] = (4.0, 10.0),
    ) -> None:
        self.intervals = {name: int(job.interval_ms) for name, job in sorted(jobs.items())}
        self.by = by
        self.gap_s = gap_s
        self.reset_s = reset_s
        self.rng = random.Random(f"{seed}:schedules")
        #: The code jobs overridden (or maybe: the call raised), with when to reset them (monotonic).
        self.overridden: Dict[str, float] = {}
        #: The stored jobs put (or maybe put), by name.
        self.stored: Dict[str, bool] = {}
        self.puts = 0
        self.next_at: Optional[float] = None

    @property
    def names(self) -> List[str]:
        """Every name whose schedule the operator may change: the code's jobs and the stored ones."""
        return sorted(self.intervals) + list(STORED_NAMES)

    def step(self, now: float, quiet_at: float, call: Call, wait: Callable[[float], bool]) -> None:
        """Make the change that is due at ``now`` (monotonic), if any; ``wait(seconds)`` sleeps
        until the change's moment (True: the operator is stopping, nothing is done)."""
        if self.next_at is None:
            self.next_at = now + self.rng.uniform(*self.gap_s)
        if now < self.next_at or now >= quiet_at:
            return
        due = sorted(job for job, at in self.overridden.items() if at <= now)
        choice = self.rng.random()
        lead = self.rng.uniform(*LEAD_S)
        wall = time.time()
        ahead = (1.0 - wall % 1.0) - lead
        if wait(ahead if ahead > 0.02 else ahead + 1.0):
            return
        if due:
            self.reset(due[0], call)
        elif choice < RESCHEDULE_SHARE and len(self.overridden) < len(self.intervals):
            self._reschedule(call, time.monotonic())
        elif choice < RESCHEDULE_SHARE + PUT_SHARE or not self.stored:
            self._put(call)
        else:
            self._delete(call)
        self.next_at = time.monotonic() + self.rng.uniform(*self.gap_s)

    def reset_all(self, call: Call) -> None:
        """Reset every override still in effect (at ``quiet_at``, and when the operator stops)."""
        for job in sorted(self.overridden):
            self.reset(job, call)

    def reset(self, job: str, call: Call) -> None:
        """Back to the code's schedule."""
        call("reset", job, lambda s: record_fields(s.set_schedule(job, by=self.by)))
        self.overridden.pop(job, None)

    def _reschedule(self, call: Call, now: float) -> None:
        job = self.rng.choice([j for j in sorted(self.intervals) if j not in self.overridden])
        schedule = self.rng.choice(override_choices(self.intervals[job]))
        tz = self.rng.choice(ZONES) if " " in schedule else None
        self.overridden[job] = now + self.rng.uniform(*self.reset_s)  # also when it raises: it may be stored

        def reschedule(store: Store) -> Dict[str, Any]:
            return {"schedule": schedule, "tz": tz,
                    **record_fields(store.set_schedule(job, by=self.by, schedule=schedule, tz=tz))}  # fmt: skip

        call("reschedule", job, reschedule)

    def last_put(self, call: Call) -> None:
        """Put one stored job every second, in the quiet end once its faults settled (see the module docstring)."""
        self._put(call, "1")

    def _put(self, call: Call, schedule: Optional[str] = None) -> None:
        name = self.rng.choice(STORED_NAMES)
        schedule = schedule or self.rng.choice(STORED_SCHEDULES)
        tz = self.rng.choice(ZONES) if " " in schedule else None
        self.puts += 1
        kwargs, options = {"n": self.puts}, {"overlap": "allow"}
        self.stored[name] = True

        def put(store: Store) -> Dict[str, Any]:
            record = store.set_schedule(name, by=self.by, schedule=schedule, tz=tz, task=STORED_TASK,
                                        kwargs=kwargs, options=options)  # fmt: skip
            return {"schedule": schedule, "tz": tz, "task": STORED_TASK, "kwargs": kwargs, "options": options,
                    **record_fields(record)}  # fmt: skip

        call("put", name, put)

    def _delete(self, call: Call) -> None:
        name = self.rng.choice(sorted(self.stored))
        call("delete", name, lambda s: record_fields(s.set_schedule(name, by=self.by)))
        self.stored.pop(name, None)

    def final_records(self, store: Store) -> List[Tuple[str, Optional[Dict[str, Any]]]]:
        """The store's record of every name, for the ``final-schedule`` lines."""
        out = []
        for name in self.names:
            record = store.stored_schedule(name)
            out.append((name, None if record is None else record.to_dict()))
        return out
