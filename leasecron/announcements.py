"""Instances in the store: what a started instance announces of itself, and how long it lives.

Each started instance keeps an :class:`Announcement` in the store: its runner name, host, pid,
leasecron version, and the jobs (with their schedules from the code) and tasks it registers. The
store stamps it with its own clock: ``started_ms`` when a runner first announces itself,
``seen_ms`` at every refresh. An instance refreshes it at most every :data:`ANNOUNCE_EVERY_MS`,
with the poll it already makes; a stopping one withdraws it; a killed one ages out
:data:`INSTANCE_TTL_MS` after its last refresh, on the store's clock. :meth:`~leasecron.Store.instances`
reads the live ones as :class:`LiveInstance`.

Nothing here decides a run: no rule of the store contract reads an announcement. Operators read
them (``leasecron instances``, ``leasecron jobs``, the dashboard) to see which instances are alive
and which schedules the code of each one holds, a rolling deploy in progress among them.

An announcement is kept as compact JSON (:meth:`Announcement.to_json`), at most
:data:`MAX_ANNOUNCEMENT_BYTES`; :func:`check_announcement` checks it before a store sees it.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from .errors import ConfigError, StoreError, shown
from .limits import check_int, check_job_name, check_text

__all__ = [
    "ANNOUNCE_EVERY_MS",
    "INSTANCE_TTL_MS",
    "MAX_ANNOUNCEMENT_BYTES",
    "AnnouncedJob",
    "Announcement",
    "InUse",
    "LiveInstance",
    "announcement_of",
    "check_announcement",
    "read_announcement",
    "registering",
    "schedules_in_use",
]

#: How often a started instance refreshes its announcement, at most (with its poll).
ANNOUNCE_EVERY_MS = 10_000
#: How long after its last refresh an instance's announcement is kept, on the store's clock.
INSTANCE_TTL_MS = 30_000
#: The largest announcement a store keeps, in bytes of its JSON (some 10,000 jobs).
MAX_ANNOUNCEMENT_BYTES = 1_048_576


@dataclasses.dataclass(frozen=True)
class AnnouncedJob:
    """A job an instance registers in its code, with the schedule the code gives it."""

    #: The job's name.
    name: str
    #: Its schedule as a store keeps it: a cron string, or an interval as its seconds ("30").
    schedule: str
    #: The zone its cron string is read in.
    tz: str


@dataclasses.dataclass(frozen=True)
class Announcement:
    """What a started instance says of itself (:meth:`~leasecron.Store.announce`)."""

    #: The instance's runner name (``LeaseCron.runner``): the key of its announcement.
    runner: str
    #: The host it runs on (``socket.gethostname()``).
    host: str
    #: Its process id.
    pid: int
    #: The leasecron version it runs.
    version: str
    #: The jobs its code registers, sorted by name.
    jobs: Tuple[AnnouncedJob, ...] = ()
    #: The tasks (handlers of stored jobs) it registers, sorted.
    tasks: Tuple[str, ...] = ()

    def to_json(self) -> str:
        """What a store keeps beside the runner name: compact JSON of every other field."""
        body = {
            "host": self.host,
            "pid": self.pid,
            "version": self.version,
            "jobs": [[job.name, job.schedule, job.tz] for job in self.jobs],
            "tasks": list(self.tasks),
        }
        return json.dumps(body, separators=(",", ":"), ensure_ascii=False)

    def to_dict(self) -> Dict[str, Any]:
        """The announcement as plain JSON-ready values."""
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class LiveInstance:
    """An instance whose announcement a store keeps (:meth:`~leasecron.Store.instances`)."""

    #: What it announced, at its last refresh.
    announcement: Announcement
    #: When it first announced itself, on the store's clock.
    started_ms: int
    #: When it last refreshed its announcement, on the store's clock.
    seen_ms: int

    @property
    def runner(self) -> str:
        """The instance's runner name."""
        return self.announcement.runner

    def schedules(self) -> Dict[str, AnnouncedJob]:
        """The jobs it registers in code, by name."""
        return {job.name: job for job in self.announcement.jobs}

    def to_dict(self) -> Dict[str, Any]:
        """The instance as plain JSON-ready values: the announcement's fields, ``started_ms`` and ``seen_ms``."""
        return {**self.announcement.to_dict(), "started_ms": self.started_ms, "seen_ms": self.seen_ms}


@dataclasses.dataclass(frozen=True)
class InUse:
    """A schedule that live instances give a job in their code, and which instances do."""

    #: The schedule's text (a cron string, or an interval's seconds).
    schedule: str
    #: The zone its cron string is read in.
    tz: str
    #: The runners of the instances that use it, sorted.
    runners: Tuple[str, ...]


def schedules_in_use(instances: Iterable[LiveInstance]) -> Dict[str, Tuple[InUse, ...]]:
    """Each job that live ``instances`` register in code, by name, with every schedule in use for
    it: one while they agree, several while they do not (a rolling deploy in progress, or a bug),
    the one used by the most instances first."""
    found: Dict[str, Dict[Tuple[str, str], List[str]]] = {}
    for instance in instances:
        for job in instance.announcement.jobs:
            found.setdefault(job.name, {}).setdefault((job.schedule, job.tz), []).append(instance.runner)
    return {
        name: tuple(
            sorted(
                (InUse(schedule, tz, tuple(sorted(runners))) for (schedule, tz), runners in uses.items()),
                key=lambda use: (-len(use.runners), use.schedule, use.tz),
            )
        )
        for name, uses in sorted(found.items())
    }


def registering(instances: Iterable[LiveInstance], job: str, task: Optional[str] = None) -> List[str]:
    """The runners of the live ``instances`` that run ``job``: they register it in code, or, for a
    stored job (``task`` given), they register its task."""
    return [
        instance.runner
        for instance in instances
        if job in instance.schedules() or (task is not None and task in instance.announcement.tasks)
    ]


def check_announcement(announcement: object) -> Announcement:
    """``announcement`` if a store can keep it, else :class:`~leasecron.ConfigError` naming what is wrong."""
    if not isinstance(announcement, Announcement):
        raise ConfigError(f"an announcement must be an Announcement, not {shown(announcement)}")
    for what in ("runner", "host", "version"):
        check_text(what, getattr(announcement, what))
    if not announcement.runner:
        raise ConfigError("an announcement's runner must be a non-empty string")
    check_int("pid", announcement.pid, 0)
    for job in announcement.jobs:
        if not isinstance(job, AnnouncedJob):
            raise ConfigError(f"an announcement's jobs must be AnnouncedJob, not {shown(job)}")
        check_job_name(job.name)
        check_text(f"the schedule of {job.name!r}", job.schedule)
        check_text(f"the tz of {job.name!r}", job.tz)
    for task in announcement.tasks:
        check_text("a task name", task)
    size = len(announcement.to_json().encode("utf-8"))
    if size > MAX_ANNOUNCEMENT_BYTES:
        raise ConfigError(f"an announcement must be at most {MAX_ANNOUNCEMENT_BYTES} bytes of JSON, not {size}")
    return announcement


def announcement_of(
    runner: str, host: str, pid: int, version: str, jobs: Sequence[Tuple[str, str, str]], tasks: Sequence[str]
) -> Announcement:
    """An announcement with its jobs and tasks sorted, as an instance makes it."""
    made = tuple(AnnouncedJob(name, schedule, tz) for name, schedule, tz in sorted(jobs))
    return Announcement(runner, host, pid, version, made, tuple(sorted(tasks)))


def read_announcement(runner: str, body: str, started_ms: int, seen_ms: int) -> LiveInstance:
    """The live instance a store keeps as ``body`` (:meth:`Announcement.to_json`) and its two
    times; :class:`~leasecron.StoreError` naming the runner if the body is unreadable."""
    try:
        fields: Mapping[str, Any] = json.loads(body)
        jobs = [(str(name), str(schedule), str(tz)) for name, schedule, tz in fields["jobs"]]
        tasks: List[str] = [str(task) for task in fields["tasks"]]
        made = announcement_of(runner, str(fields["host"]), int(fields["pid"]), str(fields["version"]), jobs, tasks)
    except (ValueError, TypeError, KeyError) as exc:
        raise StoreError(f"the announcement of instance {runner!r} is unreadable: {exc}") from exc
    return LiveInstance(made, int(started_ms), int(seen_ms))
