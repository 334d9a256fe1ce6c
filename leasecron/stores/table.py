"""The reads and writes of one atomic section of the stores that run the lease rules in Python.

:class:`~leasecron.stores.rules.TableStore` decides; a :class:`Table` reads and writes for it,
inside the section the backend holds (the memory store's lock, SQLite's ``BEGIN IMMEDIATE``):
the runs (:class:`~leasecron.stores.records.Record`), each job's pause (a
:class:`~leasecron.controls.JobState` without requests), its requests for manual runs (the
:class:`~leasecron.controls.ManualRequest` as made, with its stored state: a pending one whose time
ran out is only *read* as ``expired``, by the rules) and its stored schedule
(:class:`~leasecron.stored.StoredSchedule`, each saved with the store's count of changes then);
and the instances' announcements (:mod:`leasecron.announcements`), which no rule reads.
"""

from __future__ import annotations

import abc
import contextlib
from typing import ContextManager, Dict, List, NamedTuple, Optional, Tuple

from ..controls import JobState, ManualRequest
from ..stored import ScheduleChanges, StoredSchedule
from ..runs import Run
from .records import Record

__all__ = ["NewSlot", "Table"]


class NewSlot(NamedTuple):
    """What a scheduled (or catch-up) claim of a slot without a run reads of its job."""

    #: Whether the job is paused (rule 16).
    paused: bool
    #: The slot of the job's newest run that a manual claim did not start, if any (rule 9).
    newest_scheduled_ms: Optional[int]
    #: Whether a pending request of the job sits at the slot (rule 12 marks it claimed).
    requested: bool
    #: The version of the job's stored schedule, 0 if it never had one (rule 23).
    schedule_version: int = 0


class Table(abc.ABC):
    """The reads and writes of one atomic section of a :class:`TableStore`."""

    #: Whether the table takes the commonest writes in one step each: :meth:`insert_plain`,
    #: :meth:`finish_plain` and :meth:`renew_current` (one statement each on SQLite).
    plain_steps = False

    def insert_plain(self, run: Run, version: int, keep: int, horizon_ms: int) -> bool:
        """Insert ``run``, a new run (attempt 1, not manual, its one attempt running) that a
        scheduled claim of ``version`` wins, if its slot has no run and its job has no newer run
        that a manual claim did not start, no running run, no pause, no pending request at the
        slot and no stored schedule newer than ``version``; then :meth:`prune` as
        ``prune(run.job, keep, horizon_ms)``. Returns whether it was inserted (else nothing was
        written). Only called when :attr:`plain_steps` is true (one statement on SQLite)."""
        raise NotImplementedError

    def finish_plain(self, job: str, slot_ms: int, token: str, status: str, error: Optional[str], now_ms: int) -> bool:
        """End the run of ``job`` at ``slot_ms`` with ``status`` and ``error`` at ``now_ms`` if it
        is running with ``token`` and has made one attempt, never released (its attempts are its
        own fields: that attempt ends with the run); returns whether it did (else nothing was
        written). Only called when :attr:`plain_steps` is true."""
        raise NotImplementedError

    def renew_current(self, job: str, slot_ms: int, token: str, lease_end_ms: int) -> bool:
        """:meth:`renew` if the run of ``job`` at ``slot_ms`` is running with ``token`` and its lease
        was not released (rule 13); returns whether it did. Only called when :attr:`plain_steps`
        is true."""
        raise NotImplementedError

    # -- runs

    @abc.abstractmethod
    def get(self, job: str, slot_ms: int) -> Optional[Record]:
        """The record of ``job`` at ``slot_ms`` (a copy the caller may change)."""

    @abc.abstractmethod
    def newest(self, job: str) -> Optional[Record]:
        """The record of ``job``'s newest slot."""

    @abc.abstractmethod
    def new_slot(self, job: str, slot_ms: int) -> NewSlot:
        """What a scheduled claim of ``job`` for ``slot_ms``, which has no run, reads of the job
        (one read on SQLite: the claims of every slot pass here)."""

    @abc.abstractmethod
    def running(self, job: str) -> List[Record]:
        """The running records of ``job``, oldest first."""

    @abc.abstractmethod
    def latest(self, job: str, limit: int) -> List[Record]:
        """At most ``limit`` records of ``job``, newest slot first."""

    @abc.abstractmethod
    def recent(self, jobs: List[str], limit: int) -> Dict[str, List[Record]]:
        """At most ``limit`` records of each of ``jobs`` (distinct names), newest slot first, in
        one read (one statement on SQLite); a job without records may be left out."""

    @abc.abstractmethod
    def summaries(self, jobs: List[str]) -> Dict[str, Tuple[Record, Dict[str, int]]]:
        """For each of ``jobs`` (distinct names) that has records: its newest record, and for each
        status of :data:`~leasecron.stored.FINISHED_STATUSES` one of its records ended with, the
        newest ``finished_ms`` among them (over all its records); in one read (one statement on
        SQLite). A job without records is left out."""

    def snapshot(self) -> ContextManager[None]:
        """A block whose reads see the table at one moment: nothing more on the memory store (its
        lock does it), a read transaction on SQLite."""
        return contextlib.nullcontext()

    @abc.abstractmethod
    def jobs(self) -> List[str]:
        """The job names that have records, sorted."""

    @abc.abstractmethod
    def insert(self, record: Record) -> None:
        """Store a record for a slot that has none."""

    @abc.abstractmethod
    def update(self, record: Record) -> None:
        """Store an existing record as it is now: its job, slot and ``manual`` never change, any
        other field may (a next attempt, an interruption, a finish, a release)."""

    @abc.abstractmethod
    def renew(self, job: str, slot_ms: int, lease_end_ms: int) -> None:
        """Store a new lease end for an existing record; nothing else changes (rules 2 and 13)."""

    @abc.abstractmethod
    def prune(self, job: str, keep: int, horizon_ms: int) -> None:
        """Delete ``job``'s finished records beyond the newest ``keep`` finished ones.

        Never the job's newest record, a running record, or one whose slot is
        at or after ``horizon_ms``.
        """

    # -- pauses

    @abc.abstractmethod
    def pause(self, job: str) -> Optional[JobState]:
        """The pause of ``job`` (a paused state without requests), or None."""

    @abc.abstractmethod
    def pauses(self) -> List[JobState]:
        """The pause of every paused job."""

    @abc.abstractmethod
    def set_pause(self, state: JobState) -> None:
        """Keep ``state`` as the pause of its job, in place of any before (rule 18: a pause of a
        paused job replaces who paused it, when and why)."""

    @abc.abstractmethod
    def clear_pause(self, job: str) -> None:
        """Forget the pause of ``job``, if any."""

    # -- requests for manual runs

    @abc.abstractmethod
    def request(self, job: str, slot_ms: int) -> Optional[ManualRequest]:
        """The request of ``job`` at ``slot_ms``, as stored: a pending one whose time ran out is
        stored as pending, and only read as ``expired``, by the rules."""

    @abc.abstractmethod
    def requests(self, job: Optional[str]) -> List[ManualRequest]:
        """The requests of ``job`` (of every job if None), as stored, by slot then job."""

    @abc.abstractmethod
    def pending(self, now_ms: int) -> List[ManualRequest]:
        """The requests of every job stored as pending that expire at or after ``now_ms``,
        oldest slot first; the cost grows with those requests only."""

    @abc.abstractmethod
    def add_request(self, request: ManualRequest) -> None:
        """Store a request for a slot of its job that has none."""

    @abc.abstractmethod
    def end_request(self, job: str, slot_ms: int, state: str) -> None:
        """Store ``state`` for the request of ``job`` at ``slot_ms``, if it is stored as pending."""

    @abc.abstractmethod
    def prune_requests(self, job: str, keep: int, now_ms: int) -> None:
        """Delete ``job``'s requests that ended (stored as ended, or pending with ``expires_ms``
        before ``now_ms``) beyond the newest ``keep`` of them."""

    # -- stored schedules

    @abc.abstractmethod
    def schedule(self, job: str) -> Optional[StoredSchedule]:
        """The stored schedule of ``job``, or None if it never had one."""

    @abc.abstractmethod
    def save_schedule(self, record: StoredSchedule) -> None:
        """Keep ``record`` as its job's stored schedule, in place of any before, as the store's
        newest change: its cursor is one more than the last change's (rule 24)."""

    @abc.abstractmethod
    def schedule_changes(self, since: int) -> ScheduleChanges:
        """The records saved after cursor ``since``, oldest first, and the newest cursor (``since``
        when there is none); the cost grows with those records only."""

    # -- instances' announcements

    @abc.abstractmethod
    def instances(self, since_ms: int) -> List[Tuple[str, str, int, int]]:
        """``(runner, body, started_ms, seen_ms)`` of each announcement seen at or after
        ``since_ms``, by ``started_ms`` then runner."""

    @abc.abstractmethod
    def save_instance(self, runner: str, body: str, now_ms: int) -> None:
        """Keep ``body`` as ``runner``'s announcement, seen at ``now_ms``; its ``started_ms`` stays
        if one is kept, else it is ``now_ms``."""

    @abc.abstractmethod
    def drop_instances(self, before_ms: int) -> None:
        """Forget every announcement last seen before ``before_ms``."""

    @abc.abstractmethod
    def drop_instance(self, runner: str) -> None:
        """Forget ``runner``'s announcement, if any."""
