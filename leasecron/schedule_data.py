"""Schedules as data: the :class:`~leasecron.LeaseCron` methods that keep schedules in the store.

``task`` registers a handler for stored jobs; ``reschedule`` overrides a code job's schedule,
``put_job`` stores a whole job, ``delete_job`` removes one, ``stored_jobs`` lists them. Each
write is one :meth:`~leasecron.Store.set_schedule` (rule 24), checked first, and works on an
instance that was never started; a started instance applies its own change at once, the others
with their next poll, and the version fence (rule 23) keeps any instance from starting a slot of
the schedule a change replaced. :class:`ScheduleData` is a base of ``LeaseCron``, which provides
the attributes it uses (the store, the runner, the registered jobs and tasks, the job defaults,
the engine while started).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Optional, Tuple

from .errors import ConfigError
from .events import log
from .jobs import Handler, Job, Task, check_kwargs, job_schedule, make_task
from .options import resolve_options
from .schedules import ScheduleSpec
from .states import ScheduleSource
from .stored import StoredJob, StoredSchedule, check_schedule_fields

if TYPE_CHECKING:
    from .engine import Engine

__all__ = ["ScheduleData"]


class ScheduleData:
    """The schedules-as-data methods of :class:`~leasecron.LeaseCron` (see the module docstring)."""

    #: The instance's :class:`~leasecron.Store` (typed there: the face imports no store here).
    store: Any
    runner: str
    _lock: threading.RLock
    _jobs: Dict[str, Job]
    _tasks: Dict[str, Task]
    _defaults: Dict[str, Any]
    _engine: Optional["Engine"]
    #: The registered job named ``job``, or ConfigError naming ``action`` (LeaseCron's).
    _registered: Callable[[str, str], Job]

    def task(self, name: Optional[str] = None) -> Callable[[Handler], Handler]:
        """Decorator: register the function as a *task*, the handler of the stored jobs that name
        it (:meth:`put_job`); it schedules nothing by itself. ``name`` defaults to
        ``"module.qualname"``. The handler takes the context (if it takes a positional argument)
        and each stored job's ``kwargs`` as keyword arguments. Returns the function unchanged."""

        def register(func: Handler) -> Handler:
            task = make_task(func, name)
            with self._lock:
                if task.name in self._tasks:
                    raise ConfigError(f"task {task.name!r} is already registered")
                self._tasks[task.name] = task
                engine = self._engine
            if engine is not None:
                engine.add_task(task)
            return func

        return register

    @property
    def tasks(self) -> Dict[str, Task]:
        """The registered tasks, by name (a copy)."""
        with self._lock:
            return dict(self._tasks)

    def reschedule(self, job: str, schedule: Optional[ScheduleSpec], *, tz: Optional[str] = None) -> StoredSchedule:
        """Replace the schedule of the code's job ``job`` on every instance, until reset; returns the
        stored record. ``schedule`` None resets it to the schedule in the code.

        It only writes to the store (rule 24), so it works on an instance that was never started;
        every started instance applies it within its ``poll_ms`` (this one at once). From the
        moment it returns no instance starts a slot of the schedule it replaced (rule 23: those
        claims are answered ``stale``, and emit ``skip`` with reason ``"rescheduled"``); a run
        already running goes on. ``tz`` defaults to the job's own zone. ``job`` must be registered
        here, and not as a stored job (change those with :meth:`put_job`); the cron string and
        zone are checked as :meth:`add_job` checks them, before anything is stored.
        """
        registered = self._registered(job, "reschedule")
        if schedule is None and tz is not None:
            raise ConfigError(f"reschedule: job {job!r}: a reset takes no tz")
        if schedule is not None:
            job_schedule(job, schedule, tz or registered.options.tz)
        record: StoredSchedule = self.store.set_schedule(job, by=self.runner, schedule=schedule, tz=tz)
        what = "reset to the code's schedule" if schedule is None else f"{record.schedule} ({record.tz or 'job tz'})"
        log.info("leasecron: rescheduled job %r runner %r: %s, version %d", job, self.runner, what, record.version)
        self._apply(record)
        return record

    def put_job(
        self,
        name: str,
        *,
        task: str,
        schedule: ScheduleSpec,
        tz: Optional[str] = None,
        kwargs: Optional[Mapping[str, Any]] = None,
        **options: Any,
    ) -> StoredJob:
        """Create or replace the stored job ``name`` on every instance; returns it.

        A stored job runs ``task`` (a handler registered with :meth:`task`) on ``schedule`` in
        ``tz`` (default: the instances' ``tz``), with ``kwargs`` (JSON) as keyword arguments and
        any job ``options`` (``lease_ms``, ``overlap``, ``timeout_ms``, ...). It only writes to the
        store (rule 24); every started instance that has the task runs it from its next poll (this
        one at once), and once it returns no slot of the schedule it replaced starts (rule 23).
        Checked first, with :class:`~leasecron.ConfigError`: the name (never one registered in code
        here), the cron string and zone, the options (with this instance's defaults), kwargs that
        are not JSON, and, when the task is registered here, kwargs its handler does not accept.
        """
        with self._lock:
            code, known = self._jobs.get(name) if isinstance(name, str) else None, self._tasks.get(task)
        if code is not None:
            raise ConfigError(f"put_job: {name!r} is a job registered in code on this instance: use reschedule")
        record_fields = check_schedule_fields(name, schedule, tz, task, kwargs, options)
        resolve_options(self._defaults, {**record_fields[3], "tz": tz or self._defaults.get("tz", "UTC")}, name)
        if known is not None:
            check_kwargs(known, record_fields[2], name)
        record: StoredSchedule = self.store.set_schedule(name, by=self.runner, schedule=schedule, tz=tz, task=task,
                                         kwargs=kwargs, options=options)  # fmt: skip
        log.info("leasecron: stored job %r runner %r: task %r, %s, version %d", name, self.runner, task,
                 record.schedule, record.version)  # fmt: skip
        self._apply(record)
        return record.as_job()

    def delete_job(self, name: str) -> StoredSchedule:
        """Delete the stored job ``name`` on every instance; returns the store's record of it (its
        source now ``code``, its version raised). Its runs running go on; no instance starts a new
        one from the moment this returns (rule 23); its backups and pending claims end. A name the
        store holds no stored job of raises :class:`~leasecron.ConfigError`."""
        found: Optional[StoredSchedule] = self.store.stored_schedule(name)
        if found is None or found.source != ScheduleSource.STORED:
            raise ConfigError(f"delete_job: the store holds no stored job {name!r}")
        record: StoredSchedule = self.store.set_schedule(name, by=self.runner)
        log.info("leasecron: deleted stored job %r runner %r, version %d", name, self.runner, record.version)
        self._apply(record)
        return record

    def stored_jobs(self) -> List[StoredJob]:
        """Every job stored in the store (:meth:`put_job`), by name."""
        records: Tuple[StoredSchedule, ...] = self.store.schedule_changes(0).changes
        return sorted((r.as_job() for r in records if r.source == ScheduleSource.STORED), key=lambda j: j.name)

    def _apply(self, record: StoredSchedule) -> None:
        engine = self._engine
        if engine is not None:
            engine.apply_records([record])
