"""What a started instance announces of itself in the store, and when.

The :class:`Announcer` makes the instance's :class:`~leasecron.announcements.Announcement` (its
runner, host, pid, leasecron version, the jobs registered in its code with their schedules, and
its tasks) and says when one is due: at the first poll, then every
:data:`~leasecron.announcements.ANNOUNCE_EVERY_MS`, and at the next poll after a job or task was
registered or removed while running. The poll carries it (:meth:`~leasecron.Store.poll` with
``announce=``: the same round trip where the store allows), so announcing costs no call of its
own; when ``poll_ms`` is longer than 10 s, each poll refreshes it. A stopping instance withdraws
it (:meth:`~leasecron.engine.core.Engine.stop`); a killed one ages out 30 s after its last
refresh, on the store's clock. No rule reads an announcement: it is for operators
(``leasecron instances``, ``leasecron jobs``, the dashboard).
"""

from __future__ import annotations

import os
import socket
import threading
from typing import Iterable, Optional, Tuple

from ..announcements import ANNOUNCE_EVERY_MS, Announcement, announcement_of
from ..jobs import Job, Task
from ..schedules import CronSchedule, IntervalSchedule, Schedule
from ..stored import schedule_text

__all__ = ["Announcer", "announced_schedule"]


def announced_schedule(schedule: Schedule) -> Tuple[str, str]:
    """A code job's schedule as an announcement holds it: ``(text, zone)``, the text as a store
    keeps a stored schedule's (a cron string, or an interval's seconds)."""
    if isinstance(schedule, CronSchedule):
        return schedule.expression, schedule.tz
    if isinstance(schedule, IntervalSchedule):
        return schedule_text(schedule.interval_ms / 1000), "UTC"
    return repr(schedule), "UTC"


class Announcer:
    """Makes ``runner``'s announcement and decides when the poll carries it."""

    def __init__(self, runner: str, version: str) -> None:
        self._runner = runner
        self._version = version
        self._lock = threading.Lock()
        self._jobs: Tuple[Tuple[str, str, str], ...] = ()
        self._tasks: Tuple[str, ...] = ()
        #: The monotonic second the next announcement is due (None: at the next poll).
        self._due: Optional[float] = None
        #: Whether a poll stored an announcement: only then is there one to withdraw.
        self.announced = False

    def registers(self, jobs: Iterable[Job], tasks: Iterable[Task]) -> None:
        """The jobs registered in code and the tasks, as they are now: announced at the next poll
        if they changed."""
        made = tuple(sorted((job.name, *announced_schedule(job.schedule)) for job in jobs))
        names = tuple(sorted(task.name for task in tasks))
        with self._lock:
            if (made, names) != (self._jobs, self._tasks):
                self._jobs, self._tasks, self._due = made, names, None

    def due(self, now: float) -> Optional[Announcement]:
        """The announcement the poll at monotonic second ``now`` carries, or None when none is due."""
        with self._lock:
            if self._due is not None and now < self._due:
                return None
            jobs, tasks = self._jobs, self._tasks
        return announcement_of(self._runner, socket.gethostname(), os.getpid(), self._version, jobs, tasks)

    def sent(self, announcement: Announcement, now: float) -> None:
        """A poll made at monotonic second ``now`` stored ``announcement``: the next is due 10 s on
        (at the next poll if the jobs or tasks changed meanwhile)."""
        jobs = tuple((job.name, job.schedule, job.tz) for job in announcement.jobs)
        with self._lock:
            self.announced = True
            if (jobs, announcement.tasks) == (self._jobs, self._tasks):
                self._due = now + ANNOUNCE_EVERY_MS / 1000
