"""Which job an instance schedules under each name: the code's jobs, the tasks, and the store's schedules.

:class:`StoredJobs` holds what decides it: the jobs registered in code here, the tasks
(``cron.task``), the instance's job defaults, and the newest record of the store's stored
schedules it has seen for each name (read at start, then brought by each poll, or re-read after a
claim was answered ``stale``). For each name it keeps the :class:`~leasecron.jobs.Job` that
:func:`~leasecron.jobs.effective_job` makes of them, rebuilt only when one of them changes, so
the engine can tell a change by identity: a job whose schedule changed is a new ``Job`` (with the
record's version, which its claims carry: rule 23), the old one's slots are no longer claimed
(:meth:`~leasecron.engine.roster.Roster.may_claim`), and a name that no longer resolves to a job
here (a stored job deleted, or whose task this instance lacks) is dropped. A stored job this
instance cannot run is reported once per version with a WARNING line.

Stored jobs that repeat an earlier one's schedule, zone, task and options (thousands of jobs
of one task, a schedule per customer) share its parsed schedule and resolved options: parsing
a cron string took most of an instance's start with 100,000 stored jobs.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import threading
from typing import Any, Dict, Iterable, List, Mapping, Optional, Set, Tuple

from ..errors import ConfigError
from ..events import log
from ..jobs import Job, Task, effective_job
from ..states import ScheduleSource
from ..stored import StoredSchedule

__all__ = ["StoredJobs", "SHARED_KEPT"]

#: How many (schedule, zone, task, options) of stored jobs are kept for the later ones to share.
SHARED_KEPT = 10_000


class StoredJobs:
    """The job of each name here, from the ``code`` jobs, the tasks, the ``defaults`` and the
    store's records (see the module docstring); ``runner`` names the instance in its warnings."""

    def __init__(self, runner: str, defaults: Mapping[str, Any]) -> None:
        self._runner = runner
        self._defaults = dict(defaults)
        self._lock = threading.Lock()
        self._code: Dict[str, Job] = {}
        self._tasks: Dict[str, Task] = {}
        self._records: Dict[str, StoredSchedule] = {}
        self._built: Dict[str, Optional[Job]] = {}
        self._warned: Set[Tuple[str, int]] = set()
        #: A stored job built of each (schedule, zone, task, options): the ones that repeat it share it.
        self._shared: Dict[Tuple[Any, ...], Job] = {}

    def set_code(self, jobs: Iterable[Job]) -> List[str]:
        """Jobs registered in code here (a job of the same name replaced); the names they touch."""
        with self._lock:
            names = []
            for job in jobs:
                self._code[job.name] = job
                names.append(job.name)
            self._rebuild(names)
            return names

    def registered(self) -> Tuple[List[Job], List[Task]]:
        """The jobs registered in code here and the tasks, as they are now (for the announcement)."""
        with self._lock:
            return list(self._code.values()), list(self._tasks.values())

    def drop_code(self, name: str) -> None:
        """Forget the job registered in code under ``name`` (``remove_job``)."""
        with self._lock:
            self._code.pop(name, None)
            self._rebuild([name])

    def add_tasks(self, tasks: Iterable[Task]) -> List[str]:
        """Tasks registered here; the names of the stored jobs that run them."""
        with self._lock:
            for task in tasks:
                self._tasks[task.name] = task
            names = [n for n, r in self._records.items() if r.source == ScheduleSource.STORED and r.task in self._tasks]
            self._rebuild(names)
            return names

    def apply(self, records: Iterable[StoredSchedule]) -> List[str]:
        """Records read from the store; the names whose record is newer than the one seen."""
        with self._lock:
            names = []
            for record in records:
                seen = self._records.get(record.job)
                if seen is not None and seen.version >= record.version:
                    continue
                self._records[record.job] = record
                names.append(record.job)
            self._rebuild(names)
            return names

    def job(self, name: str) -> Optional[Job]:
        """The job scheduled here under ``name``, or None."""
        with self._lock:
            return self._built.get(name)

    def jobs(self) -> List[Job]:
        """Every job scheduled here, by name."""
        with self._lock:
            return [job for _, job in sorted(self._built.items()) if job is not None]

    def _rebuild(self, names: Iterable[str]) -> None:
        for name in names:
            record = self._records.get(name)
            try:
                job = self._build(name, record)
            except ConfigError as exc:
                self._warn(record, f"its options do not go with this instance's: {exc}")
                job = None
            if record is not None and record.source == ScheduleSource.STORED:
                if name in self._code:
                    self._warn(record, "a job registered in code here has its name; the code's job runs here")
                elif job is None and record.task not in self._tasks:
                    self._warn(record, f"this instance has no task {record.task!r} (cron.task)")
            before = self._built.get(name)
            if job is not None and before is not None and _same(before, job):
                continue
            self._built[name] = job

    def _build(self, name: str, record: Optional[StoredSchedule]) -> Optional[Job]:
        """:func:`~leasecron.jobs.effective_job` of ``name``; a stored job like one built before (the
        same schedule, zone, task and options) is that one with its own name, version, kwargs and
        ``since_ms`` (every field of a stored job that is the record's own, not its schedule's)."""
        code = self._code.get(name)
        task = self._tasks.get(record.task or "") if record is not None else None
        if code is not None or task is None or record is None or record.source != ScheduleSource.STORED:
            return effective_job(name, code, record, self._tasks, self._defaults)
        key = (record.schedule, record.tz, task, json.dumps(record.options, sort_keys=True))
        like = self._shared.get(key)
        if like is None:
            job = effective_job(name, None, record, self._tasks, self._defaults)
            if job is not None:
                if len(self._shared) >= SHARED_KEPT:
                    self._shared.clear()
                self._shared[key] = job
            return job
        func = functools.partial(task.func, **record.kwargs) if record.kwargs else task.func
        return dataclasses.replace(like, name=name, func=func, version=record.version, since_ms=record.updated_ms)

    def _warn(self, record: Optional[StoredSchedule], why: str) -> None:
        if record is None or (record.job, record.version) in self._warned:
            return
        self._warned.add((record.job, record.version))
        line = "leasecron: skipping stored job %r version %d runner %r: %s"
        log.warning(line, record.job, record.version, self._runner, why)


def _same(before: Job, after: Job) -> bool:
    """Whether two builds of a name's job are the same job (so the one scheduled stays): the same
    version and source, options and handler (a stored job's: the same task with the same kwargs)."""
    return (before.version, before.source, before.options, _handler(before)) == (
        after.version, after.source, after.options, _handler(after))  # fmt: skip


def _handler(job: Job) -> Tuple[Any, Any]:
    func = job.func
    if isinstance(func, functools.partial):
        return func.func, func.keywords
    return func, None
