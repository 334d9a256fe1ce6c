"""Is every job running as its schedule says? What the Prometheus gauges and ``leasecron check
--app`` tell of each job, computed from what the store holds.

:func:`watch` is the pure computation for one job: from what the store holds of its runs (a
:class:`~leasecron.stored.JobOverview`: its newest run, the newest end of its runs by status), its
schedule, its ``max_late_ms``, its pause and the store's time, its last success, its last finish
by status, its next slot and the slot it missed (``overdue``). :func:`read_watches` reads a store
once for every job an instance knows (one :meth:`~leasecron.Store.overview` call whatever the
number of jobs) and watches each; both :mod:`leasecron.contrib.prometheus` and
:mod:`leasecron.cli.commands` use it.

A job is *overdue* when it has a stored run, is not paused, and its latest slot that fell due
more than ``max_late_ms + 10 s`` ago, after its newest stored run, has no run: no instance
claimed it within the time any instance may still claim it. A slot before the job's schedule
took effect (its stored record's last change) is not counted: no instance runs it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Mapping, Optional, Protocol, Sequence

from .jobs import Job, shown_schedule
from .runs import Run
from .schedules import Schedule
from .states import ScheduleSource, Status
from .stored import FINISHED_STATUSES, JobOverview, Overview, StoredSchedule

__all__ = [
    "OVERDUE_GRACE_MS", "FINISHED_STATUSES", "JobWatch", "Watched", "WatchReads", "watch", "read_watches",
    "watched_jobs",
]  # fmt: skip

#: How long past ``max_late_ms`` a slot without a run may go before its job is overdue (as a
#: request for a manual run expires ``max_late_ms + 10 s`` after its slot).
OVERDUE_GRACE_MS = 10_000


@dataclasses.dataclass(frozen=True)
class JobWatch:
    """What is known of one job's health, on the store's clock (epoch ms; None: not known).

    ``last_success_ms``: when its newest successful run ended; ``last_finish_ms``: for each
    status of :data:`FINISHED_STATUSES` (each a series of ``job_last_finish_timestamp_seconds``)
    one of its stored runs ended with, the newest ``finished_ms`` among them (over every run the
    store keeps); ``last``: its newest stored run (by slot); ``next_slot_ms``: its next slot (also
    while paused; None when its schedule cannot be told here); ``overdue_slot_ms``: the slot it
    missed (see the module), None when it is not overdue; ``max_late_ms``: its option.
    """

    job: str
    paused: bool
    last: Optional[Run]
    last_success_ms: Optional[int]
    last_finish_ms: Mapping[str, int]
    next_slot_ms: Optional[int]
    overdue_slot_ms: Optional[int]
    max_late_ms: Optional[int]

    @property
    def overdue(self) -> bool:
        """Whether the job missed a slot (:attr:`overdue_slot_ms`)."""
        return self.overdue_slot_ms is not None

    @property
    def failed(self) -> bool:
        """Whether its newest stored run failed."""
        return self.last is not None and self.last.status == Status.FAILED

    def to_dict(self) -> Dict[str, Any]:
        """The watch as plain JSON-ready values (the last run as its slot, status and error)."""
        last = self.last
        return {
            "job": self.job, "paused": self.paused, "overdue": self.overdue, "overdue_slot_ms": self.overdue_slot_ms,
            "failed": self.failed, "max_late_ms": self.max_late_ms, "next_slot_ms": self.next_slot_ms,
            "last_success_ms": self.last_success_ms, "last_finish_ms": dict(self.last_finish_ms),
            "last_run": None if last is None else {"slot_ms": last.slot_ms, "status": last.status, "error": last.error},
        }  # fmt: skip


def watch(
    job: str,
    runs: JobOverview,
    schedule: Optional[Schedule],
    max_late_ms: Optional[int],
    paused: bool,
    now_ms: int,
    since_ms: int = 0,
) -> JobWatch:
    """The watch of ``job`` from what the store holds of its ``runs`` (its newest run and the newest
    end of its runs by status, as :meth:`~leasecron.Store.overview` reads them;
    :meth:`JobOverview.of_runs <leasecron.stored.JobOverview.of_runs>` makes one of a list of runs),
    its ``schedule`` and ``max_late_ms`` (None: not known here: never overdue), its pause, the
    store's time and when its schedule took effect (``since_ms``)."""
    overdue: Optional[int] = None
    newest = runs.newest_slot_ms
    if newest is not None and not paused and schedule is not None and max_late_ms is not None:
        slot = schedule.at_or_before(now_ms - max_late_ms - OVERDUE_GRACE_MS - 1)  # due *more* than that ago
        if slot is not None and slot > newest and slot >= since_ms:
            overdue = slot
    finished = runs.last_finish_ms
    return JobWatch(
        job=job,
        paused=paused,
        last=runs.last,
        last_success_ms=runs.last_success_ms,
        last_finish_ms={status: finished[status] for status in FINISHED_STATUSES if status in finished},
        next_slot_ms=schedule.next_after(now_ms) if schedule is not None else None,
        overdue_slot_ms=overdue,
        max_late_ms=max_late_ms,
    )


class WatchReads(Protocol):
    """The read of a store :func:`read_watches` makes (every :class:`~leasecron.Store` has it)."""

    def overview(self, jobs: Sequence[str] = ()) -> Overview:
        """The clock, the paused jobs, the stored schedules and each job's runs, in one call."""


@dataclasses.dataclass(frozen=True)
class Watched:
    """What :func:`read_watches` read: the store's time and each known job's watch, by name."""

    now_ms: int
    jobs: Dict[str, JobWatch]


def watched_jobs(registered: Mapping[str, Job], records: Mapping[str, StoredSchedule]) -> List[str]:
    """The jobs an instance knows, sorted: those it registers and the stored jobs (``put``)."""
    stored = {name for name, record in records.items() if record.active and record.source == ScheduleSource.STORED}
    return sorted(set(registered) | stored)


def read_watches(store: WatchReads, registered: Mapping[str, Job], defaults: Optional[Mapping[str, Any]]) -> Watched:
    """Watch every job an instance with these ``registered`` jobs and job ``defaults`` knows
    (:func:`watched_jobs`), each with the schedule and options it runs under (an override or a
    stored job read as :func:`~leasecron.jobs.shown_schedule` reads it). One store call,
    :meth:`~leasecron.Store.overview` of the registered jobs (the store adds the stored ones),
    whatever the number of jobs; a failing store raises as that call does."""
    seen = store.overview(sorted(registered))
    records = seen.schedules
    watches = {}
    for name in watched_jobs(registered, records):
        record = records.get(name)
        schedule, options = shown_schedule(registered.get(name), record, defaults)
        late = options.max_late_ms if options is not None else None
        since = record.updated_ms if record is not None else 0
        runs = seen.jobs.get(name) or JobOverview(name)
        watches[name] = watch(name, runs, schedule, late, name in seen.paused, seen.now_ms, since)
    return Watched(seen.now_ms, watches)
