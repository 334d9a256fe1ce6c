"""The read-only contract of a store: its clock, the reads of runs, jobs, pauses and requests, what
its server is (for ``leasecron check``), and close.

:class:`StoreReads` is what a reader of a store needs, complete on its own: ``leasecron runs``,
``jobs``, ``show`` and the dashboard use a store through it alone. :class:`~leasecron.Store`
extends it with the operations that decide, which carry the numbered rules of
``docs/protocol.rst``; a read decides nothing and changes nothing a rule looks at. As there,
each public method checks its arguments once and calls the protected method of the same name,
which a backend implements and which may trust them.
"""

from __future__ import annotations

import abc
from types import TracebackType
from typing import Dict, List, Optional, Sequence, Type, TypeVar

from ..announcements import INSTANCE_TTL_MS, LiveInstance
from ..controls import JobState, ManualRequest
from ..runs import Run
from ..limits import check_int, check_job_name
from ..stored import JobOverview, Overview, Poll, ScheduleChanges, StoredSchedule, overview_names
from .checks import MAX_RECENT_JOBS, check_job_names, check_recent_runs, check_run_key

__all__ = ["StoreReads", "ALL_RUNS"]

#: The ``limit`` of a read of every stored run of a job (the contract's bound on integers).
ALL_RUNS = 2**50

_Reads = TypeVar("_Reads", bound="StoreReads")


class StoreReads(abc.ABC):
    """A store as its readers see it: its clock, the runs, the jobs and their states, and ``close``.

    The dashboard and the commands that only read (``leasecron runs``, ``jobs``, ``show``) need
    no more; every :class:`~leasecron.Store` is one. A bad argument raises
    :class:`~leasecron.ConfigError` naming it, before the store is asked; a failing store raises
    :class:`~leasecron.StoreError`.
    """

    #: How long after its last refresh an instance's announcement is kept (:meth:`instances`);
    #: tests of a store may shorten it on the store object.
    instance_ttl_ms: int = INSTANCE_TTL_MS

    @abc.abstractmethod
    def now_ms(self) -> int:
        """The store's clock, in milliseconds since the Unix epoch.

        Every lease comparison inside the store uses this clock.
        """

    def job_state(self, job: str) -> JobState:
        """What the store holds of ``job`` beyond its runs: its pause and its requests."""
        check_job_name(job)
        return self._job_state(job)

    def job_states(self) -> List[JobState]:
        """The state of every job that is paused or has requests kept, sorted by name, in one
        call (for ``leasecron jobs`` and the dashboard)."""
        return self._job_states()

    def pending_requests(self) -> List[ManualRequest]:
        """Every open request of every job, oldest slot first, in one call: those not expired on
        the store's clock that are pending (an instance may claim them) or claimed (the run one
        started may need a backup: an instance that finds one it did not win backs the run up).
        Its cost grows with the number of such requests only, never with the runs or jobs
        stored: an instance asks once per ``poll_ms`` for all of its jobs."""
        return self._pending_requests()

    def stored_schedule(self, job: str) -> Optional[StoredSchedule]:
        """What the store holds of ``job``'s schedule (rule 24), also a record gone back to
        ``code`` (its version is kept), or ``None`` if it never held one."""
        check_job_name(job)
        return self._stored_schedule(job)

    def schedule_changes(self, since: int = 0) -> ScheduleChanges:
        """Every job's schedule record changed after cursor ``since`` (0: all of them), each
        job's newest once, oldest change first, with the cursor to ask from next time, in one
        round trip whatever the number of jobs. The cursor is the store's count of changes: it
        only grows; a poll that passes the one it got reads only what changed since."""
        check_int("since", since, 0)
        return self._schedule_changes(since)

    def poll(self, since: int) -> Poll:
        """What an instance asks every ``poll_ms``, in one round trip where the store can (one per
        node on Redis Cluster): :meth:`pending_requests` and :meth:`schedule_changes` after ``since``."""
        check_int("since", since, 0)
        return self._poll(since)

    def instances(self) -> List[LiveInstance]:
        """The live instances (:mod:`leasecron.announcements`): those whose announcement was
        refreshed within the last :attr:`instance_ttl_ms` (30 s) on the store's
        clock, oldest start first (then by runner), in one round trip."""
        return self._instances()

    def get_run(self, job: str, slot_ms: int) -> Optional[Run]:
        """The stored run of ``job`` at ``slot_ms``, or ``None``."""
        check_run_key(job, slot_ms)
        return self._get_run(job, slot_ms)

    def unfinished(self, job: str) -> List[Run]:
        """The runs of ``job`` whose status is ``running``, oldest slot first."""
        check_job_name(job)
        return self._unfinished(job)

    def runs(self, job: str, limit: int = 20) -> List[Run]:
        """The stored runs of ``job``, newest slot first, at most ``limit``."""
        check_job_name(job)
        return self._runs(job, max(0, int(limit)))

    def recent_runs(self, jobs: Sequence[str], limit: int = 30) -> Dict[str, List[Run]]:
        """The newest ``limit`` runs of each of ``jobs`` (newest first, as :meth:`runs` answers),
        in one round trip (one per node on a Redis Cluster).

        Every name of ``jobs`` is a key of the answer, in the order the
        names first appear (an empty list for a job without runs);
        duplicates are answered once. Each run holds its attempts, as
        :meth:`runs` gives them. Each job's list is read at one moment;
        the lists of two jobs may be read moments apart (on Redis each job
        is one script call of the pipeline), as two calls of :meth:`runs`
        would be.

        ``jobs`` is a sequence (a list, a tuple) of at most
        :data:`~leasecron.stores.checks.MAX_RECENT_JOBS` job names, and
        ``limit`` an integer of at least 1; a bad one is a
        :class:`~leasecron.ConfigError` naming it (and a bad name its
        index), before the store is asked. No names: ``{}``, without
        asking the store.
        """
        names = check_recent_runs(jobs, limit)
        return self._recent_runs(names, limit) if names else {}

    def jobs(self) -> List[str]:
        """The names of the jobs that have stored runs, sorted."""
        return self._jobs()

    def overview(self, jobs: Sequence[str] = ()) -> Overview:
        """What a watcher of every job reads (the Prometheus gauges, ``leasecron check --app``):
        the store's clock, the paused jobs, every stored schedule, and for each of ``jobs`` and
        each stored job (``put_job``) its newest run and the newest end of its runs by status,
        over every run the store keeps (:class:`~leasecron.stored.Overview`).

        One call whatever the number of jobs, read at one moment where the store can:
        PostgreSQL one statement (one snapshot); SQLite one read transaction of three statements
        (one snapshot) and memory one section under its lock; Redis and Valkey two round trips
        (the clock, the stored schedules and the names of the jobs paused or asked to run, in one
        pipeline; then one script per job, each atomic on its own, in another), one per node of
        a cluster each. A store of an older schema opened with ``create=False`` (and a store
        that does not implement it) reads it with the reads one by one.

        ``jobs`` is a sequence (a list, a tuple) of job names, any number of them (the cost grows
        with the jobs and their stored runs); a bad one is a :class:`~leasecron.ConfigError`
        naming it by its index, before the store is asked.
        """
        return self._overview(check_job_names(jobs))

    # -- what the server is, for leasecron check (not the store's data) ----------------------

    def server_version(self) -> str:
        """The kind and version of the server behind the store, for ``leasecron check``.

        For example ``Redis 7.0.15``, ``Valkey 9.1.2`` or ``SQLite 3.40.1``. A
        store written by a user may keep this default.
        """
        return type(self).__name__

    def durability_warnings(self) -> List[str]:
        """What in the server's configuration can make it forget a lease, for ``leasecron check``.

        Empty when nothing is known to be wrong (the default).
        """
        return []

    def replication(self) -> List[str]:
        """How the server's writes are copied, for ``leasecron check``: one line per fact (the
        primary, each replica or standby with its state and lag, the settings that decide what a
        failover can lose). Empty for a store without replicas (the default); a risk to exactly
        once belongs in :meth:`durability_warnings`."""
        return []

    @abc.abstractmethod
    def close(self) -> None:
        """Release the store's connections. The store is not used afterwards."""

    def __enter__(self: _Reads) -> _Reads:
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self.close()

    # -- what a backend implements (the arguments checked) ------------------------------

    @abc.abstractmethod
    def _job_state(self, job: str) -> JobState:
        """:meth:`job_state`."""

    @abc.abstractmethod
    def _job_states(self) -> List[JobState]:
        """:meth:`job_states`."""

    @abc.abstractmethod
    def _pending_requests(self) -> List[ManualRequest]:
        """:meth:`pending_requests`."""

    @abc.abstractmethod
    def _stored_schedule(self, job: str) -> Optional[StoredSchedule]:
        """:meth:`stored_schedule`."""

    @abc.abstractmethod
    def _schedule_changes(self, since: int) -> ScheduleChanges:
        """:meth:`schedule_changes`."""

    def _poll(self, since: int) -> Poll:
        """:meth:`poll`: the two reads one after the other, unless the backend does better."""
        return Poll(self._pending_requests(), self._schedule_changes(since))

    @abc.abstractmethod
    def _instances(self) -> List[LiveInstance]:
        """:meth:`instances`."""

    @abc.abstractmethod
    def _get_run(self, job: str, slot_ms: int) -> Optional[Run]:
        """:meth:`get_run`."""

    @abc.abstractmethod
    def _unfinished(self, job: str) -> List[Run]:
        """:meth:`unfinished`."""

    @abc.abstractmethod
    def _runs(self, job: str, limit: int) -> List[Run]:
        """:meth:`runs`; ``limit`` is an integer of at least 0."""

    def _recent_runs(self, jobs: List[str], limit: int) -> Dict[str, List[Run]]:
        """:meth:`recent_runs` of at least one distinct, checked name and a ``limit`` of at least
        1, every name a key of the answer: one :meth:`_runs` per job unless the backend does
        better."""
        return {job: self._runs(job, limit) for job in jobs}

    @abc.abstractmethod
    def _jobs(self) -> List[str]:
        """:meth:`jobs`."""

    def _overview(self, jobs: List[str]) -> Overview:
        """:meth:`overview` of distinct, checked names: the reads one by one (the clock first,
        then the pauses, the schedules and every stored run of each job, in calls of
        :meth:`_recent_runs` of at most 1,000 jobs), unless the backend does better."""
        now = self.now_ms()
        paused = frozenset(state.job for state in self._job_states() if state.paused)
        schedules = {record.job: record for record in self._schedule_changes(0).changes}
        names = overview_names(jobs, schedules.values())
        found: Dict[str, JobOverview] = {}
        for start in range(0, len(names), MAX_RECENT_JOBS):
            chunk = names[start : start + MAX_RECENT_JOBS]
            runs = self._recent_runs(chunk, ALL_RUNS)
            found.update((job, JobOverview.of_runs(job, runs.get(job, []))) for job in chunk)
        return Overview(now, paused, schedules, found)
